(* Block verification (Sun, Mendlovic, Leviathan, Aharoni, Beirami, Ro,
   Suresh, "Block Verification Accelerates Speculative Decoding", ICLR 2025,
   arXiv 2403.10444) for any chain of conditionals: its law, its dominance
   over token-by-token verification, and its composition with mentored
   verifiers.

   Setting. Vocabulary {0,...,V-1}. A history is a list of tokens written
   MOST RECENT FIRST: the history x^i = (x_1, ..., x_i) is the list
   [x_i; ...; x_1], so extending it by a token a is a :: x^i. A chain of
   conditionals is a function pi : list nat -> nat -> R, pi h a = pi(a | h),
   each pi h a probability vector on the vocabulary; the drafter q likewise.
   No positivity of q is assumed: a / 0 = 0 in Coq's reals, and every draft
   sequence is weighted by its q-probability, so drafts of q-probability 0
   contribute nothing.

   The algorithm, on drafts X^k drawn from the q-chain:
     w_0 = 1,  w_i = min(w_{i-1} pi(X_i|X^{i-1}) / q(X_i|X^{i-1}), 1)        (w)
     r_i(y) = (w_i pi(y|X^i) - q(y|X^i))_+,  R_i = sum_y r_i(y)      (resid, Rm)
     h_i = R_i / (R_i + 1 - w_i) (1 if the denominator is 0), i < k;
     h_k = w_k                                                   (hres, hz)
     eta_i ~ Bernoulli(h_i) independent, tau = max({0} u {i >= 1 : eta_i = 1}):
       P(tau = i | X) = h_i prod_{l>i} (1 - h_l) (i >= 1),
       P(tau = 0 | X) = prod_{l>=1} (1 - h_l)                          (ptau)
     output X^tau, then one token Y ~ r_tau / R_tau if tau < k (any law if
     R_tau = 0, an event of probability 0; here 0), Y ~ pi(.|X^k) if
     tau = k                                                            (PY).

   Results.
   * block_law: the emitted block, continued by the chain pi, has the law of
     the chain: for every y of length k+1,
       sum_{x^k} q(x^k) sum_tau P(tau|x) [x^tau = y^tau] P(Y = y_{tau+1}|x,tau)
         pi(y_{tau+2..k+1} | y^{tau+1})  =  pi(y^{k+1}).
     block_prefix_law: the same at every length m <= k+1, P(the stream
     begins with y^m) = pi(y^m).
   * block_joint: P(tau = i, X^i = u, Y = b) = q(u) r_i(u)(b) for i < k and
     q(u) w_k(u) pi(b|u) for i = k (no division).
   * block_survival: the invariant behind both. P(tau >= i | X^i = u) = w_i(u)
     holds only AFTER averaging over the future drafts X_{i+1..k} ~ q:
     given the whole draft, P(tau >= k-1 | X^k) = h_{k-1} + (1-h_{k-1}) w_k
     depends on X_k. block_survival_joint: P(tau >= i, X^i = u) = q(u) w_i(u).
   * block_expected_tau, block_expected_closed: E[tau] = sum_{i=1}^k
     sum_{x^i} q(x^i) w_i(x^i) = sum_{i=1}^k sum_{x^i} A_i(x^i) with A_0 = 1,
     A_i(x^i) = min(q(x^i), A_{i-1}(x^{i-1}) pi(x_i|x^{i-1})).
   * block_dominates: E[tau_token] <= E[tau_block], where token-by-token
     verification has E[tau_token] = sum_{i=1}^k sum_{x^i} q(x^i)
     prod_{l<=i} min(1, pi(x_l|x^{l-1}) / q(x_l|x^{l-1})) (token_closed:
     = sum_{i=1}^k sum_{x^i} prod_{l<=i} min(pi, q)).
   * block_mentored, block_lossless: with pi(.|h) feasible for MD(f, eps) at
     the target's p(.|h) (Optimum.v : feasibleZ), the emitted stream has the
     law of the chain pi, each of whose conditionals is within budget; at
     pi = p the stream has the target's law.
   * binary_example: p = (1/3, 2/3), q = (2/3, 1/3) i.i.d., k = 2:
     E[tau_token] = 10/9, E[tau_block] = 11/9. *)
Require Import Reals Lra Lia List.
Require Import Mentored.Sums Mentored.Spec Mentored.Optimality Mentored.Optimum.
Import ListNotations.
Open Scope R_scope.

(* ---------- sums over draft continuations ----------
   exw V qq n v F = sum over the n tokens a_1..a_n drawn after the history v
   of qq(a_1|v) qq(a_2|a_1 v) ... F(a_n ... a_1 v): the expectation of F over
   n further drafts from the chain qq (qq = 1: the plain sum over sequences). *)
Fixpoint exw (V : nat) (qq : list nat -> nat -> R) (n : nat) (v : list nat)
    (F : list nat -> R) : R :=
  match n with
  | O => F v
  | S m => sum V (fun a => qq v a * exw V qq m (a :: v) F)
  end.

(* path probability of a history *)
Fixpoint qpath (qq : list nat -> nat -> R) (h : list nat) : R :=
  match h with
  | [] => 1
  | a :: t => qpath qq t * qq t a
  end.

(* the histories on the vocabulary *)
Definition voc (V : nat) (h : list nat) : Prop := Forall (fun a => (a < V)%nat) h.

Lemma sum_S : forall n a, sum (S n) a = sum n a + a n.
Proof. reflexivity. Qed.

Lemma sum_swap : forall n m (G : nat -> nat -> R),
  sum n (fun a => sum m (fun i => G a i)) = sum m (fun i => sum n (fun a => G a i)).
Proof.
  induction n; intros m G; simpl.
  - rewrite sum_zero. reflexivity.
  - rewrite IHn, <- sum_plus. reflexivity.
Qed.

Lemma sum_point : forall m c x, (c < m)%nat ->
  sum m (fun a => if Nat.eq_dec a c then x else 0) = x.
Proof.
  induction m; intros c x Hc; [lia|]. simpl.
  destruct (Nat.eq_dec m c) as [->|Ne].
  - rewrite (sum_ext c _ (fun _ => 0)) by (intros i Hi; destruct (Nat.eq_dec i c); [lia|auto]).
    rewrite sum_zero. ring.
  - rewrite IHm by lia. ring.
Qed.

Lemma div_nonneg : forall x y, 0 <= x -> 0 <= y -> 0 <= x / y.
Proof.
  intros x y Hx Hy. destruct (Req_dec y 0) as [->|Ne].
  - unfold Rdiv. rewrite Rinv_0. lra.
  - apply Rdiv_le_0_compat; lra.
Qed.

Lemma Rmin_scal : forall c x y, 0 <= c -> c * Rmin x y = Rmin (c * x) (c * y).
Proof.
  intros c x y Hc. unfold Rmin.
  destruct (Rle_dec x y); destruct (Rle_dec (c * x) (c * y)); nra.
Qed.

Lemma voc_skipn : forall V n h, voc V h -> voc V (skipn n h).
Proof.
  unfold voc. induction n; intros h Hh; [auto|]. destruct h as [|a t]; simpl; [auto|].
  inversion Hh; subst. apply IHn; auto.
Qed.

Section Sums.
Variable V : nat.
Variable qq : list nat -> nat -> R.

Lemma exw_ext : forall n v F G,
  (forall s, length s = n -> voc V s -> F (s ++ v) = G (s ++ v)) ->
  exw V qq n v F = exw V qq n v G.
Proof.
  induction n; intros v F G H; simpl.
  - exact (H [] eq_refl (Forall_nil _)).
  - apply sum_ext. intros a Ha. f_equal. apply IHn. intros s Hs Hv.
    specialize (H (s ++ [a])). rewrite <- app_assoc in H. apply H.
    + rewrite app_length. simpl. lia.
    + apply Forall_app. split; auto.
Qed.

Lemma exw_ext_all : forall n v F G, (forall x, F x = G x) ->
  exw V qq n v F = exw V qq n v G.
Proof. intros. apply exw_ext. auto. Qed.

Lemma exw_le : (forall h a, (a < V)%nat -> 0 <= qq h a) -> forall n v F G,
  (forall s, length s = n -> voc V s -> F (s ++ v) <= G (s ++ v)) ->
  exw V qq n v F <= exw V qq n v G.
Proof.
  intros Hq. induction n; intros v F G H; simpl.
  - exact (H [] eq_refl (Forall_nil _)).
  - apply sum_le. intros a Ha. apply Rmult_le_compat_l; [auto|]. apply IHn.
    intros s Hs Hv. specialize (H (s ++ [a])). rewrite <- app_assoc in H. apply H.
    + rewrite app_length. simpl. lia.
    + apply Forall_app. split; auto.
Qed.

Lemma exw_scal : forall n v c F,
  exw V qq n v (fun x => c * F x) = c * exw V qq n v F.
Proof.
  induction n; intros v c F; simpl; [reflexivity|].
  rewrite <- sum_scal. apply sum_ext. intros a Ha. rewrite IHn. ring.
Qed.

Lemma exw_minus : forall n v F G,
  exw V qq n v (fun x => F x - G x) = exw V qq n v F - exw V qq n v G.
Proof.
  induction n; intros v F G; simpl; [reflexivity|].
  rewrite <- sum_minus. apply sum_ext. intros a Ha. rewrite IHn. ring.
Qed.

Lemma exw_sum : forall n v m (F : nat -> list nat -> R),
  exw V qq n v (fun x => sum m (fun i => F i x)) = sum m (fun i => exw V qq n v (F i)).
Proof.
  induction n; intros v m F; simpl; [reflexivity|].
  rewrite (sum_ext V _ (fun a => sum m (fun i => qq v a * exw V qq n (a :: v) (F i)))).
  - apply sum_swap.
  - intros a Ha. rewrite IHn, sum_scal. reflexivity.
Qed.

Lemma exw_split : forall a b n v F, n = (a + b)%nat ->
  exw V qq n v F = exw V qq a v (fun u => exw V qq b u F).
Proof.
  induction a; intros b n v F ->; simpl; [reflexivity|].
  apply sum_ext. intros c Hc. f_equal. apply IHa. reflexivity.
Qed.

Lemma exw_const : (forall h, sum V (qq h) = 1) -> forall n v c,
  exw V qq n v (fun _ => c) = c.
Proof.
  intros Hs. induction n; intros v c; simpl; [reflexivity|].
  rewrite (sum_ext V _ (fun a => c * qq v a)) by (intros; rewrite IHn; ring).
  rewrite sum_scal, Hs. ring.
Qed.

(* qq-probability of the last n tokens of z, given the rest *)
Fixpoint qrel (n : nat) (z : list nat) : R :=
  match n, z with
  | O, _ => 1
  | S m, a :: t => qq t a * qrel m t
  | S _, [] => 1
  end.

Lemma skipn_S_of : forall n (z : list nat) c v, skipn n z = c :: v -> skipn (S n) z = v.
Proof.
  induction n; intros z c v H; destruct z as [|a t]; simpl in *; try discriminate.
  - inversion H. reflexivity.
  - apply (IHn t c v H).
Qed.

Lemma qrel_S : forall n z c v, skipn n z = c :: v -> qrel (S n) z = qrel n z * qq v c.
Proof.
  induction n; intros z c v H; destruct z as [|a t]; simpl in *; try discriminate.
  - inversion H. subst. ring.
  - rewrite (IHn t c v H). simpl. ring.
Qed.

Lemma qrel_full : forall z, qrel (length z) z = qpath qq z.
Proof. induction z as [|a t IH]; simpl; [reflexivity|]. rewrite IH. ring. Qed.

(* a point mass: only the continuation reaching z counts *)
Lemma exw_point : forall n v z G, voc V z -> length z = (n + length v)%nat ->
  exw V qq n v (fun u => if list_eq_dec Nat.eq_dec u z then G u else 0) =
  if list_eq_dec Nat.eq_dec (skipn n z) v then qrel n z * G z else 0.
Proof.
  induction n as [|n IH]; intros v z G Hz Hl.
  - simpl. destruct (list_eq_dec Nat.eq_dec v z) as [E|Ne];
      destruct (list_eq_dec Nat.eq_dec z v) as [E'|Ne']; subst; try congruence; ring.
  - simpl exw. rewrite (sum_ext V _ (fun a => qq v a *
      (if list_eq_dec Nat.eq_dec (skipn n z) (a :: v) then qrel n z * G z else 0)))
      by (intros a Ha; rewrite IH; [reflexivity|auto|simpl; lia]).
    assert (Hlen : length (skipn n z) = S (length v)) by (rewrite skipn_length; lia).
    assert (Hvs : voc V (skipn n z)) by (apply voc_skipn; auto).
    destruct (skipn n z) as [|c v'] eqn:E; [simpl in Hlen; lia|].
    rewrite (skipn_S_of n z c v' E).
    inversion Hvs as [|c' v'' Hc Hv']; subst.
    destruct (list_eq_dec Nat.eq_dec v' v) as [->|Ne].
    + rewrite (sum_ext V _ (fun a => if Nat.eq_dec a c then qq v c * (qrel n z * G z) else 0)).
      * rewrite sum_point by auto. rewrite (qrel_S n z c v E). ring.
      * intros a Ha. destruct (list_eq_dec Nat.eq_dec (c :: v) (a :: v)) as [E'|Ne'];
          destruct (Nat.eq_dec a c) as [->|Ne'']; try ring.
        -- inversion E'. lia.
        -- exfalso. apply Ne'. reflexivity.
    + rewrite (sum_ext V _ (fun _ => 0)).
      * rewrite sum_zero. reflexivity.
      * intros a Ha. destruct (list_eq_dec Nat.eq_dec (c :: v') (a :: v)) as [E'|Ne']; [|ring].
        inversion E'. contradiction.
Qed.

(* the weighted sum over drafts is the plain sum of path probability times F *)
Lemma exw_plain : forall n v F,
  exw V qq n v F * qpath qq v = exw V (fun _ _ => 1) n v (fun x => qpath qq x * F x).
Proof.
  induction n; intros v F; simpl; [ring|].
  rewrite Rmult_comm, <- sum_scal. apply sum_ext. intros a Ha.
  rewrite <- IHn. simpl. ring.
Qed.

End Sums.

(* ---------- prefixes of a history (most recent token first) ---------- *)
(* pre i y = y^i, the first i tokens; tok i y = y_{i+1} *)
Definition pre (i : nat) (y : list nat) : list nat := skipn (length y - i) y.
Definition tok (i : nat) (y : list nat) : nat := nth (length y - S i) y O.

Lemma skipn_len_app : forall (s u : list nat), skipn (length s) (s ++ u) = u.
Proof. induction s; simpl; auto. Qed.

Lemma pre_app : forall s u, pre (length u) (s ++ u) = u.
Proof.
  intros s u. unfold pre. rewrite app_length.
  replace (length s + length u - length u)%nat with (length s) by lia.
  apply skipn_len_app.
Qed.

Lemma pre_full : forall y, pre (length y) y = y.
Proof. intros. unfold pre. rewrite Nat.sub_diag. reflexivity. Qed.

Lemma pre_cons : forall i a t, (i <= length t)%nat -> pre i (a :: t) = pre i t.
Proof.
  intros i a t H. unfold pre. simpl length.
  replace (S (length t) - i)%nat with (S (length t - i)) by lia. reflexivity.
Qed.

Lemma pre_length : forall i y, (i <= length y)%nat -> length (pre i y) = i.
Proof. intros. unfold pre. rewrite skipn_length. lia. Qed.

Lemma tok_cons : forall i a t, (i < length t)%nat -> tok i (a :: t) = tok i t.
Proof.
  intros i a t H. unfold tok. simpl length.
  replace (S (length t) - S i)%nat with (S (length t - S i)) by lia. reflexivity.
Qed.

Lemma tok_last : forall a t, tok (length t) (a :: t) = a.
Proof. intros. unfold tok. simpl length. rewrite Nat.sub_diag. reflexivity. Qed.

Lemma tok_voc : forall V i y, voc V y -> (i < length y)%nat -> (tok i y < V)%nat.
Proof.
  intros V i y Hv Hi. unfold voc in Hv. rewrite Forall_forall in Hv. apply Hv.
  unfold tok. apply nth_In. lia.
Qed.

(* ======================================================================
   The algorithm on a chain pi and a drafter chain q, with k drafts.
   ====================================================================== *)
Section Block.
Variable V : nat.
Variables pi q : list nat -> nat -> R.
Hypothesis pi_nn : forall h a, (a < V)%nat -> 0 <= pi h a.
Hypothesis pi_sum : forall h, sum V (pi h) = 1.
Hypothesis q_nn : forall h a, (a < V)%nat -> 0 <= q h a.
Hypothesis q_sum : forall h, sum V (q h) = 1.
Variable k : nat.

Local Notation ex := (exw V q).

(* weight  w_i = min(w_{i-1} pi(x_i|x^{i-1}) / q(x_i|x^{i-1}), 1), w_0 = 1 *)
Fixpoint w (h : list nat) : R :=
  match h with
  | [] => 1
  | a :: t => Rmin (w t * pi t a / q t a) 1
  end.

(* residual  r(y) = (w pi(y|h) - q(y|h))_+  and its mass R *)
Definition resid (h : list nat) (y : nat) : R := Rpos (w h * pi h y - q h y).
Definition Rm (h : list nat) : R := sum V (resid h).

(* h_i = R_i / (R_i + 1 - w_i), 1 when the denominator is 0 *)
Definition hres (h : list nat) : R :=
  if Req_EM_T (Rm h + 1 - w h) 0 then 1 else Rm h / (Rm h + 1 - w h).
(* the stopping probability at a history: h_k = w_k at the last draft *)
Definition hz (h : list nat) : R := if Nat.eq_dec (length h) k then w h else hres h.
(* with eta_0 = 1 *)
Definition h0 (u : list nat) : R := match u with [] => 1 | _ :: _ => hz u end.

(* P(tau = i | X = x): h_i prod_{l > i} (1 - h_l), and prod_{l >= 1} (1 - h_l) at i = 0 *)
Fixpoint ptau (i : nat) (x : list nat) : R :=
  match x with
  | [] => if Nat.eq_dec i 0 then 1 else 0
  | a :: t => if Nat.eq_dec (S (length t)) i then hz (a :: t) else (1 - hz (a :: t)) * ptau i t
  end.

(* surv j x = prod_{j < l <= |x|} (1 - h_l(x^l)): no eta = 1 after position j *)
Fixpoint surv (j : nat) (x : list nat) : R :=
  match x with
  | [] => 1
  | a :: t => if le_lt_dec (S (length t)) j then 1 else (1 - hz (a :: t)) * surv j t
  end.

(* the law of Y given tau = i and X^i = u: residual law if i < k, pi(.|u) if i = k *)
Definition resl (u : list nat) (y : nat) : R :=
  if Req_EM_T (Rm u) 0 then 0 else resid u y / Rm u.
Definition PY (i : nat) (u : list nat) (y : nat) : R :=
  if Nat.eq_dec i k then pi u y else resl u y.

(* the chain: pi(y^m) and pi(y_{j+1..m} | y^j) *)
Fixpoint chainp (y : list nat) : R :=
  match y with [] => 1 | a :: t => chainp t * pi t a end.
Fixpoint cont (j : nat) (y : list nat) : R :=
  match y with
  | [] => 1
  | a :: t => if le_lt_dec j (length t) then pi t a * cont j t else 1
  end.

(* P(the block, continued by the chain pi, begins with y), |y| = k + 1:
   sum_{x^k} q(x^k) sum_{i<=k} P(tau = i | x) [x^i = y^i] P(Y = y_{i+1} | x, i)
     pi(y_{i+2..k+1} | y^{i+1}) *)
Definition block_out (y : list nat) : R :=
  ex k [] (fun x => sum (S k) (fun i =>
    ptau i x * (if list_eq_dec Nat.eq_dec (pre i x) (pre i y) then 1 else 0) *
    PY i (pre i x) (tok i y) * cont (S i) y)).

(* ---------- elementary facts ---------- *)
Lemma w_le1 : forall h, w h <= 1.
Proof. destruct h; simpl; [lra|apply Rmin_r]. Qed.

Lemma w_nn : forall h, voc V h -> 0 <= w h.
Proof.
  induction h as [|a t IH]; intros Hv; simpl; [lra|]. inversion Hv; subst.
  apply Rmin_glb; [|lra]. apply div_nonneg; [|auto].
  apply Rmult_le_pos; auto.
Qed.

Lemma Rm_nn : forall h, 0 <= Rm h.
Proof. intros. unfold Rm. apply sum_nonneg. intros. unfold resid, Rpos. apply Rmax_l. Qed.

Lemma qpath_nn : forall h, voc V h -> 0 <= qpath q h.
Proof.
  induction h as [|a t IH]; intros Hv; simpl; [lra|]. inversion Hv; subst.
  apply Rmult_le_pos; auto.
Qed.

(* q(a|u) w(a u) = min(w(u) pi(a|u), q(a|u)) *)
Lemma qw_step : forall u a, voc V u -> (a < V)%nat ->
  q u a * w (a :: u) = Rmin (w u * pi u a) (q u a).
Proof.
  intros u a Hu Ha. simpl. rewrite (Rmin_comm _ 1). apply accept_mass; [|auto].
  apply Rmult_le_pos; [apply w_nn|]; auto.
Qed.

Lemma min_sum : forall u, sum V (fun a => Rmin (w u * pi u a) (q u a)) = w u - Rm u.
Proof.
  intros u. rewrite (sum_ext V _ (fun a => w u * pi u a - resid u a))
    by (intros; unfold resid; mm).
  rewrite sum_minus, sum_scal, pi_sum. unfold Rm. ring.
Qed.

Lemma step_mass : forall u, voc V u ->
  sum V (fun a => q u a * (1 - w (a :: u))) = 1 - w u + Rm u.
Proof.
  intros u Hu. rewrite (sum_ext V _ (fun a => q u a - Rmin (w u * pi u a) (q u a)))
    by (intros; rewrite <- qw_step by auto; ring).
  rewrite sum_minus, q_sum, min_sum. ring.
Qed.

Lemma ex1_w : forall u, voc V u -> ex 1 u w = w u - Rm u.
Proof.
  intros u Hu. simpl. rewrite (sum_ext V _ (fun a => Rmin (w u * pi u a) (q u a)))
    by (intros; rewrite <- qw_step by auto; reflexivity).
  apply min_sum.
Qed.

Lemma hres_mul : forall h, hres h * (Rm h + 1 - w h) = Rm h.
Proof.
  intros h. unfold hres. pose proof (Rm_nn h). pose proof (w_le1 h).
  destruct (Req_EM_T (Rm h + 1 - w h) 0) as [E|Ne].
  - rewrite E. lra.
  - field. auto.
Qed.

Lemma hres_comp : forall h, (1 - hres h) * (1 - w h + Rm h) = 1 - w h.
Proof.
  intros h. pose proof (hres_mul h).
  replace ((1 - hres h) * (1 - w h + Rm h)) with
    ((Rm h + 1 - w h) - hres h * (Rm h + 1 - w h)) by ring. lra.
Qed.

Lemma resl_mul : forall u b, (b < V)%nat -> resl u b * Rm u = resid u b.
Proof.
  intros u b Hb. unfold resl. destruct (Req_EM_T (Rm u) 0) as [E|Ne].
  - symmetry. rewrite Rmult_0_l.
    apply (sum_nonneg_zero V (resid u)); auto.
    intros. unfold resid, Rpos. apply Rmax_l.
  - field. auto.
Qed.

Lemma surv_short : forall j x, (length x <= j)%nat -> surv j x = 1.
Proof.
  intros j x H. destruct x as [|a t]; cbn [surv]; [reflexivity|].
  simpl in H. destruct (le_lt_dec (S (length t)) j); [reflexivity|lia].
Qed.

Lemma surv_app : forall s v j, (j <= length v)%nat ->
  surv j (s ++ v) = surv (length v) (s ++ v) * surv j v.
Proof.
  induction s as [|a s IH]; intros v j H.
  - simpl. rewrite (surv_short (length v) v) by lia. ring.
  - cbn [surv app]. rewrite app_length.
    destruct (le_lt_dec (S (length s + length v)) j); [lia|].
    destruct (le_lt_dec (S (length s + length v)) (length v)); [lia|].
    rewrite IH by auto. ring.
Qed.

Lemma ptau_app : forall s v i, (i <= length v)%nat ->
  ptau i (s ++ v) = surv (length v) (s ++ v) * ptau i v.
Proof.
  induction s as [|a s IH]; intros v i H.
  - simpl. rewrite (surv_short (length v) v) by lia. ring.
  - cbn [ptau surv app]. rewrite app_length.
    destruct (Nat.eq_dec (S (length s + length v)) i); [lia|].
    destruct (le_lt_dec (S (length s + length v)) (length v)); [lia|].
    rewrite IH by auto. ring.
Qed.

Lemma ptau_here : forall u, ptau (length u) u = h0 u.
Proof.
  destruct u as [|a t]; cbn [ptau length].
  - reflexivity.
  - destruct (Nat.eq_dec (S (length t)) (S (length t))); [reflexivity|lia].
Qed.

(* P(no eta = 1 after position |u| | X^{|u|} = u), averaged over the
   n = k - |u| future drafts: 1 - w(u) + R(u) before the last position, 1 at it *)
Lemma surv_T : forall n u, voc V u -> (length u + n)%nat = k ->
  ex n u (surv (length u)) = if Nat.eq_dec n 0 then 1 else 1 - w u + Rm u.
Proof.
  induction n as [|n IH]; intros u Hu Hk.
  - simpl. apply surv_short. lia.
  - simpl exw. destruct (Nat.eq_dec (S n) 0) as [E|_]; [lia|].
    rewrite <- step_mass by auto. apply sum_ext. intros a Ha. f_equal.
    rewrite (exw_ext V q n (a :: u) _
               (fun x => surv (length u) (a :: u) * surv (length (a :: u)) x)).
    2: { intros s Hs Hvs. rewrite surv_app by (simpl; lia). ring. }
    rewrite exw_scal, IH; [| constructor; auto | simpl; lia].
    cbn [surv]. destruct (le_lt_dec (S (length u)) (length u)); [lia|].
    rewrite surv_short by lia. unfold hz. simpl length.
    destruct (Nat.eq_dec n 0) as [E0|N0]; destruct (Nat.eq_dec (S (length u)) k); try lia.
    + ring.
    + rewrite Rmult_1_r. apply hres_comp.
Qed.

(* ---------- the marginal law of tau ----------
   For i <= k and any G, E[ P(tau = i | X) G(X^i) ] = E[ G(X^i) m_i(X^i) ]
   with m_i = R_i for i < k and m_k = w_k: P(tau = i, X^i = u) = q(u) m_i(u). *)
Lemma tau_marg : forall i G, (i <= k)%nat ->
  ex k [] (fun x => ptau i x * G (pre i x)) =
  ex i [] (fun u => G u * (if Nat.eq_dec i k then w u else Rm u)).
Proof.
  intros i G Hi. rewrite (exw_split V q i (k - i) k) by lia.
  apply exw_ext. intros s Hs Hvs. rewrite app_nil_r.
  rewrite (exw_ext V q (k - i) s _ (fun x => (h0 s * G s) * surv (length s) x)).
  2: { intros s' Hs' Hv'. rewrite ptau_app by lia. subst i. rewrite pre_app, ptau_here. ring. }
  rewrite exw_scal, surv_T by (auto; lia).
  destruct s as [|a t].
  - simpl in Hs. subst i. simpl h0. simpl w.
    destruct (Nat.eq_dec (k - 0) 0); destruct (Nat.eq_dec 0 k); try lia; ring.
  - unfold h0, hz. simpl length. simpl in Hs.
    destruct (Nat.eq_dec (k - i) 0); destruct (Nat.eq_dec i k);
      destruct (Nat.eq_dec (S (length t)) k); try lia.
    + ring.
    + pose proof (hres_mul (a :: t)) as E.
      transitivity (G (a :: t) * (hres (a :: t) * (Rm (a :: t) + 1 - w (a :: t)))); [ring|].
      rewrite E. reflexivity.
Qed.

(* The joint law of (tau, X^tau, Y): P(tau = i, X^i = u, Y = b) = q(u) r_i(u)(b)
   for i < k, and q(u) w_k(u) pi(b|u) for i = k. *)
Theorem block_joint : forall i u b, (i <= k)%nat -> length u = i -> voc V u -> (b < V)%nat ->
  ex k [] (fun x => ptau i x * (if list_eq_dec Nat.eq_dec (pre i x) u then 1 else 0) *
                    PY i (pre i x) b) =
  qpath q u * (if Nat.eq_dec i k then w u * pi u b else resid u b).
Proof.
  intros i u b Hi Hl Hu Hb.
  pose (G := fun v => (if list_eq_dec Nat.eq_dec v u then 1 else 0) * PY i v b).
  rewrite (exw_ext_all V q k [] _ (fun x => ptau i x * G (pre i x)))
    by (intros; unfold G; ring).
  rewrite tau_marg by auto. unfold G.
  rewrite (exw_ext_all V q i [] _ (fun v => if list_eq_dec Nat.eq_dec v u then
       PY i v b * (if Nat.eq_dec i k then w v else Rm v) else 0))
    by (intros v; destruct (list_eq_dec Nat.eq_dec v u); ring).
  rewrite exw_point by (simpl; auto; lia).
  subst i. rewrite skipn_all. destruct (list_eq_dec Nat.eq_dec [] []) as [_|C]; [|congruence].
  rewrite qrel_full. unfold PY. destruct (Nat.eq_dec (length u) k).
  - ring.
  - rewrite resl_mul by auto. reflexivity.
Qed.

(* The invariant: P(tau >= |u| | X^{|u|} = u) = w(u), once the future drafts are
   averaged out. tau < |u| means eta_{|u|} = 0 (probability 1 - h0 u, with
   eta_0 = 1) and eta_l = 0 for every l > |u|. *)
Theorem block_survival : forall u, voc V u -> (length u <= k)%nat ->
  1 - (1 - h0 u) * ex (k - length u) u (surv (length u)) = w u.
Proof.
  intros u Hu Hk. rewrite surv_T by (auto; lia).
  destruct u as [|a t].
  - simpl. destruct (Nat.eq_dec (k - 0) 0); ring.
  - unfold h0, hz. simpl length. simpl length in Hk.
    destruct (Nat.eq_dec (k - S (length t)) 0); destruct (Nat.eq_dec (S (length t)) k); try lia.
    + ring.
    + rewrite hres_comp. ring.
Qed.

(* forward recursion: sum_{i<|t|} q(t^i) r(t^i)(t_{i+1}) pi(t_{i+2..}|t^{i+1}) + q(t) w(t) = pi(t) *)
Lemma forward : forall t, voc V t ->
  sum (length t) (fun i => qpath q (pre i t) * resid (pre i t) (tok i t) * cont (S i) t)
  + qpath q t * w t = chainp t.
Proof.
  induction t as [|a t IH]; intros Hv.
  - simpl. ring.
  - inversion Hv as [|a' t' Ha Ht]; subst. simpl length. rewrite sum_S.
    rewrite (sum_ext (length t) _ (fun i =>
       pi t a * (qpath q (pre i t) * resid (pre i t) (tok i t) * cont (S i) t))).
    2: { intros i Hi. rewrite pre_cons, tok_cons by lia. cbn [cont].
         destruct (le_lt_dec (S i) (length t)); [ring|lia]. }
    rewrite sum_scal. rewrite pre_cons, pre_full, tok_last by lia.
    cbn [cont]. destruct (le_lt_dec (S (length t)) (length t)); [lia|].
    set (X := sum (length t) _).
    change (qpath q (a :: t)) with (qpath q t * q t a).
    change (chainp (a :: t)) with (chainp t * pi t a).
    rewrite <- IH by auto. fold X.
    replace (qpath q t * q t a * w (a :: t)) with (qpath q t * (q t a * w (a :: t))) by ring.
    rewrite qw_step by auto. unfold resid.
    assert (E : Rpos (w t * pi t a - q t a) + Rmin (w t * pi t a) (q t a) = w t * pi t a) by mm.
    replace (Rmin (w t * pi t a) (q t a)) with (w t * pi t a - Rpos (w t * pi t a - q t a)) by lra.
    ring.
Qed.

(* (1) The law: the emitted block, continued by the chain, has the chain's law. *)
Theorem block_law : forall y, length y = S k -> voc V y -> block_out y = chainp y.
Proof.
  intros y Hl Hv. unfold block_out. rewrite exw_sum.
  rewrite (sum_ext (S k) _ (fun i => cont (S i) y * (qpath q (pre i y) *
     (if Nat.eq_dec i k then w (pre i y) * pi (pre i y) (tok i y) else resid (pre i y) (tok i y))))).
  2: { intros i Hi.
       rewrite (exw_ext_all V q k [] _ (fun x => cont (S i) y *
          (ptau i x * (if list_eq_dec Nat.eq_dec (pre i x) (pre i y) then 1 else 0) *
           PY i (pre i x) (tok i y)))) by (intros; ring).
       rewrite exw_scal, block_joint; [reflexivity| lia | apply pre_length; lia |
         apply voc_skipn; auto | apply tok_voc; auto; lia]. }
  destruct y as [|b t]; [simpl in Hl; lia|]. simpl in Hl. injection Hl as Hl.
  inversion Hv as [|b' t' Hb Ht]; subst b' t'.
  rewrite sum_S. destruct (Nat.eq_dec k k) as [_|C]; [|lia].
  rewrite <- Hl at 2 3 4 5 6.
  rewrite pre_cons, pre_full, tok_last by lia.
  cbn [cont]. destruct (le_lt_dec (S (length t)) (length t)); [lia|].
  rewrite (sum_ext k _ (fun i => pi t b *
     (qpath q (pre i t) * resid (pre i t) (tok i t) * cont (S i) t))).
  2: { intros i Hi. destruct (Nat.eq_dec i k); [lia|].
       rewrite pre_cons, tok_cons by lia. cbn [cont].
       destruct (le_lt_dec (S i) (length t)); [ring|lia]. }
  rewrite sum_scal. rewrite <- Hl. simpl chainp. rewrite <- (forward t) by auto. ring.
Qed.

(* ---------- the unconditional invariant and the prefix law ---------- *)
Lemma ptau_total : forall x, sum (S (length x)) (fun j => ptau j x) = 1.
Proof.
  induction x as [|a t IH].
  - rewrite sum_S. cbn [sum ptau length]. destruct (Nat.eq_dec 0 0); [ring|lia].
  - cbn [length]. rewrite sum_S.
    rewrite (sum_ext (S (length t)) _ (fun j => (1 - hz (a :: t)) * ptau j t)).
    2: { intros j Hj. cbn [ptau]. destruct (Nat.eq_dec (S (length t)) j); [lia|reflexivity]. }
    rewrite sum_scal, IH. cbn [ptau].
    destruct (Nat.eq_dec (S (length t)) (S (length t))); [ring|lia].
Qed.

Lemma ptau_below : forall v, sum (length v) (fun j => ptau j v) = 1 - h0 v.
Proof. intros v. pose proof (ptau_total v) as H. rewrite sum_S, ptau_here in H. lra. Qed.

Lemma sum_from : forall m i (a : nat -> R), (i <= m)%nat ->
  sum m (fun j => if le_lt_dec i j then a j else 0) = sum m a - sum i a.
Proof.
  induction m; intros i a Hi.
  - replace i with O by lia. simpl. ring.
  - rewrite !sum_S. destruct (le_lt_dec i m) as [Le|Lt].
    + rewrite IHm by auto. ring.
    + replace i with (S m) by lia. rewrite sum_S.
      rewrite (sum_ext m _ (fun _ => 0)) by (intros j Hj; destruct (le_lt_dec (S m) j); [lia|reflexivity]).
      rewrite sum_zero. destruct (le_lt_dec (S m) m); [lia|]. ring.
Qed.

(* P(tau >= i, X^i = u) = q(u) w_i(u) *)
Theorem block_survival_joint : forall i u, (i <= k)%nat -> length u = i -> voc V u ->
  ex k [] (fun x => sum (S k) (fun j => if le_lt_dec i j then ptau j x else 0) *
                    (if list_eq_dec Nat.eq_dec (pre i x) u then 1 else 0)) =
  qpath q u * w u.
Proof.
  intros i u Hi Hl Hu. rewrite (exw_split V q i (k - i) k) by lia.
  rewrite (exw_ext V q i [] _ (fun v => if list_eq_dec Nat.eq_dec v u then w v else 0)).
  - rewrite exw_point by (auto; simpl; lia). subst i. rewrite skipn_all.
    destruct (list_eq_dec Nat.eq_dec [] []) as [_|C]; [|congruence].
    rewrite qrel_full. reflexivity.
  - intros s Hs Hv. rewrite app_nil_r.
    rewrite (exw_ext V q (k - i) s _ (fun x => (if list_eq_dec Nat.eq_dec s u then 1 else 0) *
               (1 - (1 - h0 s) * surv (length s) x))).
    + rewrite exw_scal, exw_minus, exw_const, exw_scal by auto.
      rewrite <- Hs. rewrite (block_survival s Hv) by lia.
      destruct (list_eq_dec Nat.eq_dec s u); ring.
    + intros s' Hs' Hv'. rewrite <- Hs. rewrite pre_app. rewrite sum_from by lia.
      replace (S k) with (S (length (s' ++ s))) by (rewrite app_length; lia).
      rewrite ptau_total.
      rewrite (sum_ext (length s) _ (fun j => surv (length s) (s' ++ s) * ptau j s))
        by (intros j Hj; apply ptau_app; lia).
      rewrite sum_scal, ptau_below. ring.
Qed.

Lemma chain_mass : forall n v, exw V (fun _ _ => 1) n v chainp = chainp v.
Proof.
  induction n; intros v; simpl; [reflexivity|].
  rewrite (sum_ext V _ (fun a => chainp v * pi v a)) by (intros; rewrite IHn; simpl; ring).
  rewrite sum_scal, pi_sum. ring.
Qed.

(* The law at every length m <= k + 1: the probability that the stream begins
   with y (summed over the continuations of y to length k + 1) is pi(y). *)
Theorem block_prefix_law : forall y, (length y <= S k)%nat -> voc V y ->
  exw V (fun _ _ => 1) (S k - length y) y block_out = chainp y.
Proof.
  intros y Hl Hv. rewrite <- (chain_mass (S k - length y) y).
  apply exw_ext. intros s Hs Hs'. apply block_law.
  - rewrite app_length. lia.
  - apply Forall_app. split; auto.
Qed.

(* ---------- (2) expected length and dominance ---------- *)
(* E[tau] = sum_{x^k} q(x^k) sum_{i<=k} i P(tau = i | x) *)
Definition Etau_block : R := ex k [] (fun x => sum (S k) (fun i => INR i * ptau i x)).

(* token-by-token verification: X_i is accepted with probability
   min(1, pi(X_i|X^{i-1}) / q(X_i|X^{i-1})) while all before were accepted, so
   P(tau_token >= i, X^i = x^i) = q(x^i) tokw(x^i) *)
Fixpoint tokw (h : list nat) : R :=
  match h with [] => 1 | a :: t => tokw t * Rmin 1 (pi t a / q t a) end.
Definition Etau_token : R := sum k (fun i => ex (S i) [] tokw).

(* summation by parts *)
Lemma abel : forall m (W : nat -> R),
  sum m (fun i => INR i * (W i - W (S i))) + INR m * W m = sum m (fun i => W (S i)).
Proof.
  induction m; intros W; simpl sum; [simpl; ring|].
  rewrite S_INR. pose proof (IHm W). lra.
Qed.

Lemma ex_Rm : forall i, ex i [] Rm = ex i [] w - ex (S i) [] w.
Proof.
  intros i. rewrite (exw_split V q i 1 (S i) [] w) by lia.
  rewrite (exw_ext V q i [] (fun u => ex 1 u w) (fun u => w u - Rm u)).
  - rewrite exw_minus. ring.
  - intros s Hs Hv. rewrite app_nil_r. apply ex1_w. auto.
Qed.

(* E[tau_block] = sum_{i=1}^k P(tau >= i) = sum_{i=1}^k sum_{x^i} q(x^i) w_i(x^i) *)
Theorem block_expected_tau : Etau_block = sum k (fun i => ex (S i) [] w).
Proof.
  unfold Etau_block. rewrite exw_sum.
  rewrite (sum_ext (S k) _ (fun i => INR i * (if Nat.eq_dec i k then ex i [] w
                                           else ex i [] w - ex (S i) [] w))).
  2: { intros i Hi.
       pose (G := fun _ : list nat => INR i).
       rewrite (exw_ext_all V q k [] _ (fun x => ptau i x * G (pre i x)))
         by (intros; unfold G; ring).
       rewrite tau_marg by lia. unfold G. rewrite exw_scal.
       destruct (Nat.eq_dec i k); [reflexivity|]. rewrite ex_Rm. reflexivity. }
  rewrite sum_S. destruct (Nat.eq_dec k k) as [_|C]; [|lia].
  rewrite (sum_ext k _ (fun i => INR i * (ex i [] w - ex (S i) [] w))).
  - apply (abel k (fun i => ex i [] w)).
  - intros i Hi. destruct (Nat.eq_dec i k); [lia|reflexivity].
Qed.

(* the closed form A_0 = 1, A_i(x^i) = min(q(x^i), A_{i-1}(x^{i-1}) pi(x_i|x^{i-1})) *)
Fixpoint Acl (h : list nat) : R :=
  match h with [] => 1 | a :: t => Rmin (qpath q (a :: t)) (Acl t * pi t a) end.

Lemma Acl_qw : forall h, voc V h -> qpath q h * w h = Acl h.
Proof.
  induction h as [|a t IH]; intros Hv; [simpl; ring|].
  inversion Hv as [|a' t' Ha Ht]; subst.
  change (qpath q (a :: t)) with (qpath q t * q t a).
  replace (qpath q t * q t a * w (a :: t)) with (qpath q t * (q t a * w (a :: t))) by ring.
  rewrite qw_step, Rmin_scal by (auto; apply qpath_nn; auto).
  cbn [Acl]. rewrite <- IH by auto. rewrite Rmin_comm.
  change (qpath q (a :: t)) with (qpath q t * q t a). f_equal; ring.
Qed.

(* E[tau_block] = sum_{i=1}^k sum_{x^i} A_i(x^i) (a plain sum over sequences) *)
Theorem block_expected_closed :
  Etau_block = sum k (fun i => exw V (fun _ _ => 1) (S i) [] Acl).
Proof.
  rewrite block_expected_tau. apply sum_ext. intros i Hi.
  rewrite <- (Rmult_1_r (ex (S i) [] w)).
  change 1 with (qpath q []) at 2. rewrite exw_plain.
  apply exw_ext. intros s Hs Hv. rewrite app_nil_r. apply Acl_qw. auto.
Qed.

(* token-by-token in the same form: q(x^i) tokw(x^i) = prod_{l<=i} min(pi, q) *)
Fixpoint tokA (h : list nat) : R :=
  match h with [] => 1 | a :: t => tokA t * Rmin (pi t a) (q t a) end.

Theorem token_closed : Etau_token = sum k (fun i => exw V (fun _ _ => 1) (S i) [] tokA).
Proof.
  unfold Etau_token. apply sum_ext. intros i Hi.
  rewrite <- (Rmult_1_r (ex (S i) [] tokw)).
  change 1 with (qpath q []) at 2. rewrite exw_plain.
  apply exw_ext. intros s Hs Hv. rewrite app_nil_r. clear Hs.
  induction s as [|a t IH]; [simpl; ring|]. inversion Hv as [|a' t' Ha Ht]; subst.
  cbn [qpath tokw tokA]. rewrite <- IH by auto.
  rewrite <- (accept_mass (pi t a) (q t a)) by auto. ring.
Qed.

Lemma tokw_le_w : forall h, voc V h -> 0 <= tokw h <= w h.
Proof.
  induction h as [|a t IH]; intros Hv; [simpl; lra|].
  inversion Hv as [|a' t' Ha Ht]; subst. destruct (IH Ht) as [H0 H1].
  pose proof (w_le1 t) as Hw1.
  assert (Hr : 0 <= pi t a / q t a) by (apply div_nonneg; auto).
  cbn [tokw w]. replace (w t * pi t a / q t a) with (w t * (pi t a / q t a))
    by (unfold Rdiv; ring).
  set (r := pi t a / q t a) in *.
  unfold Rmin. destruct (Rle_dec 1 r); destruct (Rle_dec (w t * r) 1); split; nra.
Qed.

(* (2) Dominance: block verification accepts at least as many tokens in expectation. *)
Theorem block_dominates : Etau_token <= Etau_block.
Proof.
  rewrite block_expected_tau. unfold Etau_token. apply sum_le. intros i Hi.
  apply exw_le; [auto|]. intros s Hs Hv. rewrite app_nil_r. apply tokw_le_w. auto.
Qed.

End Block.

(* ======================================================================
   (3) Composition with mentored verifiers: every conditional pi(.|h) of the
   chain is feasible for MD(f, eps) at the target's conditional p(.|h)
   (Optimum.v : feasibleZ: a distribution, ratios in dom, zero where p is,
   D_f(pi(.|h) || p(.|h)) <= eps). Block verification run on the pi-chain
   emits the law of the pi-chain (block_law), whose conditionals are these
   feasible pi(.|h): the stream is within budget at every position. This is
   block_law with the hypotheses supplied by feasibility.
   ====================================================================== *)
Theorem block_mentored : forall V k (p pi q : list nat -> nat -> R) f dom finf eps,
  (forall h, feasibleZ V (p h) f dom finf eps (pi h)) ->
  (forall h a, (a < V)%nat -> 0 <= q h a) -> (forall h, sum V (q h) = 1) ->
  (forall y, length y = S k -> voc V y -> block_out V pi q k y = chainp pi y) /\
  (forall h, simplex V (pi h) /\ Df V f finf (p h) (pi h) <= eps /\
             forall a, (a < V)%nat -> p h a = 0 -> pi h a = 0).
Proof.
  intros V k p pi q f dom finf eps Hf Hq Sq. split.
  - intros y Hl Hv. apply block_law; auto.
    + intros h a Ha. apply (proj1 (proj1 (Hf h))). auto.
    + intros h. apply (proj2 (proj1 (Hf h))).
  - intros h. destruct (Hf h) as [S [_ [Z D]]]. auto.
Qed.

(* At eps = 0 of the lossless case, pi = p: block verification is lossless. *)
Theorem block_lossless : forall V k (p q : list nat -> nat -> R),
  (forall h a, (a < V)%nat -> 0 <= p h a) -> (forall h, sum V (p h) = 1) ->
  (forall h a, (a < V)%nat -> 0 <= q h a) -> (forall h, sum V (q h) = 1) ->
  forall y, length y = S k -> voc V y -> block_out V p q k y = chainp p y.
Proof. intros. apply block_law; auto. Qed.

(* ---------- the binary example ----------
   p = (1/3, 2/3), q = (2/3, 1/3) at every history, k = 2:
   E[tau_token] = 2/3 + 4/9 = 10/9, E[tau_block] = 2/3 + 5/9 = 11/9. *)
Definition pc (h : list nat) (a : nat) : R := match a with O => 1/3 | _ => 2/3 end.
Definition qc (h : list nat) (a : nat) : R := match a with O => 2/3 | _ => 1/3 end.

Theorem binary_example : Etau_token 2 pc qc 2 = 10/9 /\ Etau_block 2 pc qc 2 = 11/9.
Proof.
  assert (Pn : forall h a, (a < 2)%nat -> 0 <= pc h a) by (intros h [|a] _; simpl; lra).
  assert (Qn : forall h a, (a < 2)%nat -> 0 <= qc h a) by (intros h [|a] _; simpl; lra).
  assert (Ps : forall h, sum 2 (pc h) = 1) by (intros; simpl; lra).
  assert (Qs : forall h, sum 2 (qc h) = 1) by (intros; simpl; lra).
  split.
  - rewrite token_closed by auto. simpl.
    unfold Rmin; repeat destruct Rle_dec; lra.
  - rewrite block_expected_closed by auto. simpl.
    unfold Rmin; repeat destruct Rle_dec; lra.
Qed.
