(* Classes of tokens (docs/theory.md §9): the data-processing inequality for
   a partition of the vocabulary, its equality case, level points (pi/p
   constant on each class), the candidate-set verifier, and the weighted
   problem of a tree node with its level-form optimality (KKT sufficiency).

   A partition is a class map c : nat -> nat with c i < K for every token
   i < n; csum k a = sum of a over the tokens of class k. The class vectors of
   p and y are cls p, cls y (vectors over {0, ..., K-1}), and
   Df K f finf (cls p) (cls y) is the divergence of the grouped laws. *)
Require Import Reals Lra Lia.
Require Import Mentored.Sums Mentored.Optimality Mentored.Serving.
Open Scope R_scope.

(* ---------- sums over classes ---------- *)
Lemma sum_indicator : forall m j v, (j < m)%nat ->
  sum m (fun k => if Nat.eq_dec j k then v else 0) = v.
Proof.
  induction m; intros j v Hj; [lia|]. simpl.
  destruct (Nat.eq_dec j m) as [->|Hne].
  - rewrite (sum_ext m _ (fun _ => 0)) by (intros i Hi; destruct (Nat.eq_dec m i); [lia|reflexivity]).
    rewrite sum_zero. ring.
  - rewrite IHm by lia. ring.
Qed.

Lemma regroup_gen : forall m K (c : nat -> nat) (a : nat -> R),
  (forall i, (i < m)%nat -> (c i < K)%nat) ->
  sum m a = sum K (fun k => sum m (fun i => if Nat.eq_dec (c i) k then a i else 0)).
Proof.
  induction m; intros K c a H.
  - simpl. rewrite sum_zero. reflexivity.
  - rewrite (sum_ext K _ (fun k => sum m (fun i => if Nat.eq_dec (c i) k then a i else 0)
                                   + (if Nat.eq_dec (c m) k then a m else 0)))
      by (intros; reflexivity).
    rewrite sum_plus, <- IHm by (intros; apply H; lia).
    rewrite sum_indicator by (apply H; lia). reflexivity.
Qed.

Lemma sum_exists_pos : forall m a, 0 < sum m a -> exists i, (i < m)%nat /\ 0 < a i.
Proof.
  induction m; intros a H; simpl in H; [lra|].
  destruct (Rlt_dec 0 (a m)) as [Hp|Hp].
  - exists m. split; [lia|auto].
  - destruct (IHm a ltac:(lra)) as [i [Hi Ha]]. exists i. split; [lia|auto].
Qed.

Section Classes.
Variables n K : nat.
Variable c : nat -> nat.
Hypothesis Hc : forall i, (i < n)%nat -> (c i < K)%nat.

Definition csum (k : nat) (a : nat -> R) : R :=
  sum n (fun i => if Nat.eq_dec (c i) k then a i else 0).
(* the class vector of a: its mass on each class *)
Definition cls (a : nat -> R) (k : nat) : R := csum k a.

Lemma regroup : forall a, sum n a = sum K (fun k => csum k a).
Proof. intros a. unfold csum. apply regroup_gen. exact Hc. Qed.

Lemma csum_ext : forall k a b, (forall i, (i < n)%nat -> c i = k -> a i = b i) ->
  csum k a = csum k b.
Proof.
  intros k a b H. unfold csum. apply sum_ext. intros i Hi.
  destruct (Nat.eq_dec (c i) k); [apply H; auto|reflexivity].
Qed.

Lemma csum_lin : forall k (u v : R) a b,
  csum k (fun i => u * a i + v * b i) = u * csum k a + v * csum k b.
Proof.
  intros. unfold csum. rewrite <- !sum_scal, <- sum_plus. apply sum_ext. intros i Hi.
  destruct (Nat.eq_dec (c i) k); ring.
Qed.

Lemma csum_scal : forall k (u : R) a, csum k (fun i => u * a i) = u * csum k a.
Proof.
  intros. rewrite (csum_ext k _ (fun i => u * a i + 0 * a i)) by (intros; ring).
  rewrite csum_lin. ring.
Qed.

Lemma csum_nonneg : forall k a, (forall i, (i < n)%nat -> 0 <= a i) -> 0 <= csum k a.
Proof.
  intros k a H. unfold csum. apply sum_nonneg. intros i Hi.
  destruct (Nat.eq_dec (c i) k); [apply H; auto|lra].
Qed.

Lemma csum_zero_on : forall k a, (forall i, (i < n)%nat -> 0 <= a i) -> csum k a = 0 ->
  forall i, (i < n)%nat -> c i = k -> a i = 0.
Proof.
  intros k a H Hs i Hi Hci.
  pose proof (sum_nonneg_zero n (fun i => if Nat.eq_dec (c i) k then a i else 0)) as Z.
  assert (E := Z ltac:(intros j Hj; cbv beta; destruct (Nat.eq_dec (c j) k); [apply H; auto|lra]) Hs i Hi).
  simpl in E. destruct (Nat.eq_dec (c i) k); [auto|congruence].
Qed.

Lemma csum_pos_exists : forall k a, 0 < csum k a ->
  exists i, (i < n)%nat /\ c i = k /\ 0 < a i.
Proof.
  intros k a H. destruct (sum_exists_pos n _ H) as [i [Hi Ha]].
  exists i. destruct (Nat.eq_dec (c i) k); [auto|lra].
Qed.

Lemma csum_le_total : forall k a, (forall i, (i < n)%nat -> 0 <= a i) -> csum k a <= sum n a.
Proof.
  intros k a H. unfold csum. apply sum_le. intros i Hi.
  destruct (Nat.eq_dec (c i) k); [lra|apply H; auto].
Qed.

(* a weight per class: the objective sum_i w_{c(i)} a_i is sum_k w_k a(class k) *)
Lemma wobj_classes : forall (w a : nat -> R),
  sum n (fun i => w (c i) * a i) = sum K (fun k => w k * csum k a).
Proof.
  intros w a. rewrite regroup. apply sum_ext. intros k Hk.
  rewrite <- csum_scal. apply csum_ext. intros i Hi Hci. rewrite Hci. reflexivity.
Qed.

(* ======================================================================
   The data-processing inequality: D_f(y || p) >= D_f(cls y || cls p).
   Per class k with P_k = p(class k) > 0 and M_k = y(class k) > 0, the
   supporting line of f at tbar = M_k / P_k gives, token by token,
   dterm(p_i, y_i) >= p_i f(tbar) + f'(tbar)(y_i - tbar p_i) (for p_i = 0
   this needs y_i = 0 or f'(tbar) <= finf); summed over the class, the
   right side is P_k f(tbar). Classes with M_k = 0 or P_k = 0 are equalities.
   ====================================================================== *)
Section DPI.
Variables p y : nat -> R.
Variables (f f' : R -> R) (dom : R -> Prop) (finf : R).
Hypothesis Hp : forall i, (i < n)%nat -> 0 <= p i.
Hypothesis Hy : forall i, (i < n)%nat -> 0 <= y i.
Hypothesis Hsub : forall u v, 0 < u -> dom u -> dom v -> f v >= f u + f' u * (v - u).
Hypothesis Hdom : forall t, 0 < t -> dom t.
Hypothesis Hd : forall i, (i < n)%nat -> 0 < p i -> dom (y i / p i).
(* mass where p is zero: absent (hard zeros, f_inf = infinity), or f' <= f_inf *)
Hypothesis Hz : forall i, (i < n)%nat -> p i = 0 ->
  y i = 0 \/ (forall u, 0 < u -> dom u -> f' u <= finf).

Definition tbar (k : nat) : R := csum k y / csum k p.

Definition low (i : nat) : R :=
  if Rlt_dec 0 (csum (c i) p) then
    if Rlt_dec 0 (csum (c i) y) then
      p i * f (tbar (c i)) + f' (tbar (c i)) * (y i - tbar (c i) * p i)
    else dterm f finf (p i) (y i)
  else dterm f finf (p i) (y i).

Lemma low_le : forall i, (i < n)%nat -> low i <= dterm f finf (p i) (y i).
Proof.
  intros i Hi. unfold low.
  destruct (Rlt_dec 0 (csum (c i) p)) as [HP|HP]; [|lra].
  destruct (Rlt_dec 0 (csum (c i) y)) as [HM|HM]; [|lra].
  assert (Ht : 0 < tbar (c i)) by (unfold tbar; apply Rdiv_lt_0_compat; auto).
  pose proof (Hp i Hi). pose proof (Hy i Hi).
  unfold dterm. destruct (Rlt_dec 0 (p i)) as [Hpi|Hpi].
  - pose proof (Hsub (tbar (c i)) (y i / p i) Ht (Hdom _ Ht) (Hd i Hi Hpi)) as S.
    assert (E : p i * (f (tbar (c i)) + f' (tbar (c i)) * (y i / p i - tbar (c i))) =
                p i * f (tbar (c i)) + f' (tbar (c i)) * (y i - tbar (c i) * p i))
      by (field; lra).
    rewrite <- E. apply Rmult_le_compat_l; lra.
  - assert (E0 : p i = 0) by lra. rewrite E0.
    destruct (Hz i Hi E0) as [Hy0|Hf].
    + rewrite Hy0. lra.
    + pose proof (Hf _ Ht (Hdom _ Ht)). nra.
Qed.

Lemma dterm_zero_ratio : forall pi, 0 <= pi -> dterm f finf pi 0 = pi * f 0.
Proof.
  intros pi H. unfold dterm. destruct (Rlt_dec 0 pi).
  - unfold Rdiv. rewrite Rmult_0_l. reflexivity.
  - assert (pi = 0) by lra. subst. ring.
Qed.

Lemma low_class : forall k, csum k low = dterm f finf (csum k p) (csum k y).
Proof.
  intros k. destruct (Rlt_dec 0 (csum k p)) as [HP|HP].
  - destruct (Rlt_dec 0 (csum k y)) as [HM|HM].
    + rewrite (csum_ext k _ (fun i => f (tbar k) * p i + f' (tbar k) * y i
                                      + (- (f' (tbar k) * tbar k)) * p i)).
      * rewrite (csum_ext k _ (fun i => 1 * (f (tbar k) * p i + f' (tbar k) * y i)
                                        + (- (f' (tbar k) * tbar k)) * p i))
          by (intros; ring).
        rewrite csum_lin, csum_lin. unfold dterm. destruct (Rlt_dec 0 (csum k p)); [|lra].
        unfold tbar. field. lra.
      * intros i Hi Hci. unfold low. rewrite Hci.
        destruct (Rlt_dec 0 (csum k p)); [|lra]. destruct (Rlt_dec 0 (csum k y)); [|lra]. ring.
    + assert (E : csum k y = 0) by (pose proof (csum_nonneg k y Hy); lra).
      pose proof (csum_zero_on k y Hy E) as Z.
      rewrite (csum_ext k _ (fun i => f 0 * p i)).
      * rewrite csum_scal, E, dterm_zero_ratio by lra. ring.
      * intros i Hi Hci. unfold low. rewrite Hci.
        destruct (Rlt_dec 0 (csum k p)); [|lra]. destruct (Rlt_dec 0 (csum k y)); [lra|].
        rewrite (Z i Hi Hci), dterm_zero_ratio by auto. ring.
  - assert (E : csum k p = 0) by (pose proof (csum_nonneg k p Hp); lra).
    pose proof (csum_zero_on k p Hp E) as Z.
    rewrite (csum_ext k _ (fun i => finf * y i)).
    + rewrite csum_scal, E. unfold dterm. destruct (Rlt_dec 0 0); [lra|reflexivity].
    + intros i Hi Hci. unfold low. rewrite Hci.
      destruct (Rlt_dec 0 (csum k p)); [lra|]. unfold dterm. rewrite (Z i Hi Hci).
      destruct (Rlt_dec 0 0); [lra|reflexivity].
Qed.

Lemma sum_low : sum n low = Df K f finf (cls p) (cls y).
Proof.
  rewrite regroup. unfold Df. apply sum_ext. intros k Hk. apply low_class.
Qed.

(* The data-processing inequality for the partition c. *)
Theorem dpi : Df K f finf (cls p) (cls y) <= Df n f finf p y.
Proof.
  rewrite <- sum_low. unfold Df. apply sum_le. apply low_le.
Qed.

(* Its equality case: for strictly convex f, and y vanishing where p does,
   equality forces y_i = tbar_{c(i)} p_i on every class with p(class) > 0,
   i.e. y/p constant on each class. *)
Hypothesis Hstrict : forall u v, 0 < u -> dom u -> dom v -> v <> u -> f v > f u + f' u * (v - u).

Theorem dpi_equality : (forall i, (i < n)%nat -> p i = 0 -> y i = 0) ->
  Df n f finf p y <= Df K f finf (cls p) (cls y) ->
  forall i, (i < n)%nat -> 0 < csum (c i) p -> y i = p i * tbar (c i).
Proof.
  intros Hyz Heq i Hi HP.
  assert (G : sum n (fun j => dterm f finf (p j) (y j) - low j) = 0).
  { rewrite sum_minus. fold (Df n f finf p y). rewrite sum_low.
    pose proof dpi. lra. }
  assert (Gi := sum_nonneg_zero n (fun j => dterm f finf (p j) (y j) - low j) ltac:(intros j Hj; cbv beta; pose proof (low_le j Hj); lra) G i Hi).
  cbv beta in Gi. pose proof (Hp i Hi).
  destruct (Rlt_dec 0 (csum (c i) y)) as [HM|HM].
  - assert (Ht : 0 < tbar (c i)) by (unfold tbar; apply Rdiv_lt_0_compat; auto).
    unfold low in Gi. destruct (Rlt_dec 0 (csum (c i) p)); [|lra].
    destruct (Rlt_dec 0 (csum (c i) y)); [|lra].
    unfold dterm in Gi. destruct (Rlt_dec 0 (p i)) as [Hpi|Hpi].
    + destruct (Req_dec (y i / p i) (tbar (c i))) as [E|Ne].
      * rewrite <- E. field. lra.
      * exfalso. pose proof (Hstrict _ _ Ht (Hdom _ Ht) (Hd i Hi Hpi) Ne) as S.
        assert (E : p i * (f (tbar (c i)) + f' (tbar (c i)) * (y i / p i - tbar (c i))) =
                    p i * f (tbar (c i)) + f' (tbar (c i)) * (y i - tbar (c i) * p i))
          by (field; lra).
        assert (p i * f (y i / p i) > p i * (f (tbar (c i)) + f' (tbar (c i)) * (y i / p i - tbar (c i))))
          by (apply Rmult_gt_compat_l; lra).
        lra.
    + assert (E0 : p i = 0) by lra. rewrite E0, (Hyz i Hi E0). ring.
  - assert (E : csum (c i) y = 0) by (pose proof (csum_nonneg (c i) y Hy); lra).
    rewrite (csum_zero_on (c i) y Hy E i Hi eq_refl). unfold tbar. rewrite E. unfold Rdiv. ring.
Qed.
End DPI.

(* ======================================================================
   Level points: pi_i = p_i t_{c(i)} on the classes p charges, z_i on the
   classes where p vanishes (there D_f charges f_inf per unit whatever z is).
   ====================================================================== *)
Section Level.
Variable p : nat -> R.
Hypothesis Hp : forall i, (i < n)%nat -> 0 <= p i.
Variables (f : R -> R) (finf : R).

Definition lvl (t z : nat -> R) (i : nat) : R :=
  if Rlt_dec 0 (csum (c i) p) then p i * t (c i) else z i.

Lemma lvl_mass : forall t z k,
  csum k (lvl t z) = if Rlt_dec 0 (csum k p) then csum k p * t k else csum k z.
Proof.
  intros t z k. destruct (Rlt_dec 0 (csum k p)) as [HP|HP].
  - rewrite (csum_ext k _ (fun i => t k * p i)).
    + rewrite csum_scal. ring.
    + intros i Hi Hci. unfold lvl. rewrite Hci. destruct (Rlt_dec 0 (csum k p)); [ring|lra].
  - apply csum_ext. intros i Hi Hci. unfold lvl. rewrite Hci.
    destruct (Rlt_dec 0 (csum k p)); [lra|reflexivity].
Qed.

Lemma dterm_level : forall pi t, 0 <= pi -> dterm f finf pi (pi * t) = pi * f t.
Proof.
  intros pi t H. unfold dterm. destruct (Rlt_dec 0 pi).
  - replace (pi * t / pi) with t by (field; lra). reflexivity.
  - assert (pi = 0) by lra. subst. ring.
Qed.

(* D_f of a level point is the divergence of its class vector *)
Theorem lvl_Df : forall t z, Df n f finf p (lvl t z) = Df K f finf (cls p) (cls (lvl t z)).
Proof.
  intros t z. unfold Df at 1. rewrite regroup. unfold Df. apply sum_ext. intros k Hk.
  unfold cls. rewrite lvl_mass. destruct (Rlt_dec 0 (csum k p)) as [HP|HP].
  - rewrite (csum_ext k _ (fun i => f (t k) * p i)).
    + rewrite csum_scal, dterm_level by lra. ring.
    + intros i Hi Hci. unfold lvl. rewrite Hci. destruct (Rlt_dec 0 (csum k p)); [|lra].
      rewrite dterm_level by auto. ring.
  - assert (E : csum k p = 0) by (pose proof (csum_nonneg k p Hp); lra).
    pose proof (csum_zero_on k p Hp E) as Z.
    rewrite (csum_ext k _ (fun i => finf * z i)).
    + rewrite csum_scal, E. unfold dterm. destruct (Rlt_dec 0 0); [lra|reflexivity].
    + intros i Hi Hci. unfold lvl, dterm. rewrite Hci, (Z i Hi Hci).
      destruct (Rlt_dec 0 (csum k p)); [lra|]. destruct (Rlt_dec 0 0); [lra|reflexivity].
Qed.

(* On rejection the law inside a class is p restricted to it, renormalised *)
Theorem lvl_class_law : forall t z i, (i < n)%nat -> 0 < csum (c i) p ->
  0 < csum (c i) (lvl t z) ->
  lvl t z i / csum (c i) (lvl t z) = p i / csum (c i) p.
Proof.
  intros t z i Hi HP HM. rewrite lvl_mass in *. unfold lvl.
  destruct (Rlt_dec 0 (csum (c i) p)); [|lra].
  assert (t (c i) <> 0) by (intro E; rewrite E in HM; lra).
  field. split; lra.
Qed.

(* the level point of y: y averaged over each class p charges *)
Definition levy (y : nat -> R) : nat -> R := lvl (fun k => csum k y / csum k p) y.

Lemma levy_mass : forall y k, csum k (levy y) = csum k y.
Proof.
  intros y k. unfold levy. rewrite lvl_mass.
  destruct (Rlt_dec 0 (csum k p)); [field; lra|reflexivity].
Qed.
End Level.

(* Feasible for the problem at a node: a distribution within budget whose
   ratios lie in dom, and whose mass where p vanishes is absent or paid at
   f_inf >= every subgradient (zeros = "continue" with f_inf finite). *)
Definition feasibleL (p : nat -> R) (f f' : R -> R) (dom : R -> Prop) (finf eps : R)
    (y : nat -> R) : Prop :=
  simplex n y /\ (forall i, (i < n)%nat -> 0 < p i -> dom (y i / p i)) /\
  (forall i, (i < n)%nat -> p i = 0 -> y i = 0 \/ (forall u, 0 < u -> dom u -> f' u <= finf)) /\
  Df n f finf p y <= eps.

(* The optimum of any objective that sees only the class masses is attained
   at a level point: the class average of a feasible y is feasible, has the
   same class masses, and a divergence no larger. *)
Theorem level_reduction : forall p (f f' : R -> R) (dom : R -> Prop) finf eps y,
  (forall i, (i < n)%nat -> 0 <= p i) ->
  (forall u v, 0 < u -> dom u -> dom v -> f v >= f u + f' u * (v - u)) ->
  (forall t, 0 < t -> dom t) ->
  feasibleL p f f' dom finf eps y ->
  feasibleL p f f' dom finf eps (levy p y) /\
  Df n f finf p (levy p y) <= Df n f finf p y /\
  (forall k, csum k (levy p y) = csum k y) /\
  forall w, sum n (fun i => w (c i) * levy p y i) = sum n (fun i => w (c i) * y i).
Proof.
  intros p f f' dom finf eps y Hp Hsub Hdom [[Hy Sy] [Hd [Hz Dy]]].
  assert (Dl : Df n f finf p (levy p y) <= Df n f finf p y).
  { unfold levy. rewrite (lvl_Df p Hp f finf). fold (levy p y).
    replace (Df K f finf (cls p) (cls (levy p y))) with (Df K f finf (cls p) (cls y))
      by (unfold Df; apply sum_ext; intros k Hk; unfold cls; rewrite levy_mass; reflexivity).
    apply (dpi p y f f' dom finf Hp Hy Hsub Hdom Hd Hz). }
  assert (W : forall w, sum n (fun i => w (c i) * levy p y i) = sum n (fun i => w (c i) * y i)).
  { intros w. rewrite !wobj_classes. apply sum_ext. intros k Hk. rewrite levy_mass. reflexivity. }
  split; [|split; [auto|split; [apply levy_mass|auto]]].
  split; [split|split; [|split]].
  - intros i Hi. unfold levy, lvl. destruct (Rlt_dec 0 (csum (c i) p)) as [HP|HP]; [|auto].
    pose proof (csum_nonneg (c i) y Hy). pose proof (Hp i Hi).
    apply Rmult_le_pos; [auto|]. apply Rdiv_le_0_compat; lra.
  - rewrite regroup. rewrite <- Sy, regroup. apply sum_ext. intros. apply levy_mass.
  - intros i Hi Hpi. unfold levy, lvl.
    destruct (Rlt_dec 0 (csum (c i) p)) as [HP|HP].
    + replace (p i * (csum (c i) y / csum (c i) p) / p i) with (csum (c i) y / csum (c i) p)
        by (field; lra).
      destruct (Rlt_dec 0 (csum (c i) y)) as [HM|HM].
      * apply Hdom. apply Rdiv_lt_0_compat; auto.
      * assert (E : csum (c i) y = 0) by (pose proof (csum_nonneg (c i) y Hy); lra).
        pose proof (Hd i Hi Hpi) as D. rewrite (csum_zero_on (c i) y Hy E i Hi eq_refl) in D.
        rewrite E. unfold Rdiv in *. rewrite Rmult_0_l in *. auto.
    + exfalso. pose proof (csum_nonneg (c i) p Hp).
      assert (Hle : (if Nat.eq_dec (c i) (c i) then p i else 0) <= csum (c i) p).
      { unfold csum. apply (sum_ge_term n (fun j => if Nat.eq_dec (c j) (c i) then p j else 0) i).
        - intros j Hj. cbv beta. destruct (Nat.eq_dec (c j) (c i)); [apply Hp; auto|lra].
        - auto. }
      destruct (Nat.eq_dec (c i) (c i)); [lra|congruence].
  - intros i Hi Hpi. unfold levy, lvl. destruct (Rlt_dec 0 (csum (c i) p)).
    + left. rewrite Hpi. ring.
    + apply Hz; auto.
  - lra.
Qed.

End Classes.

(* ======================================================================
   The weighted problem of a node: maximise sum_i w_{c(i)} y_i under the
   budget. Class level first: KKT sufficiency (the Lagrangian argument of
   Optimality.v, with a linear objective). Classes with P_k > 0 have ratio
   t_k and a subgradient g_k at it; a class with P_k = 0 costs f_inf per
   unit of mass ('continue'), or carries none (hard zeros).
   ====================================================================== *)

Theorem class_kkt : forall K (PK w m yk t g : nat -> R) (f : R -> R) finf (dom : R -> Prop)
    lam mu eps,
  0 <= lam ->
  (forall k, (k < K)%nat -> 0 <= PK k) ->
  (forall k, (k < K)%nat -> 0 <= yk k) ->
  sum K m = 1 -> sum K yk = 1 ->
  (Df K f finf PK m = eps \/ lam = 0) -> Df K f finf PK yk <= eps ->
  (forall k, (k < K)%nat -> 0 < PK k ->
     m k = PK k * t k /\ dom (yk k / PK k) /\
     (lam = 0 \/ forall u, 0 <= u -> dom u -> f u >= f (t k) + g k * (u - t k)) /\
     (w k - mu - lam * g k = 0 \/ (t k = 0 /\ w k - mu - lam * g k <= 0))) ->
  (forall k, (k < K)%nat -> PK k = 0 ->
     w k - mu - lam * finf = 0 \/ (m k = 0 /\ (yk k = 0 \/ w k - mu - lam * finf <= 0))) ->
  sum K (fun k => w k * yk k) <= sum K (fun k => w k * m k).
Proof.
  intros K PK w m yk t g f finf dom lam mu eps Hl HP Hy Sm Sy Hb Dy Hpos Hzero.
  assert (C : forall k, (k < K)%nat ->
            w k * yk k - lam * dterm f finf (PK k) (yk k) - mu * yk k <=
            w k * m k - lam * dterm f finf (PK k) (m k) - mu * m k).
  { intros k Hk. destruct (Rlt_dec 0 (PK k)) as [Hp|Hp].
    - destruct (Hpos k Hk Hp) as [Em [Dd [Hs Hst]]].
      set (u := yk k / PK k).
      assert (Hu : 0 <= u) by (unfold u; apply Rdiv_le_0_compat; [apply Hy; auto|lra]).
      assert (Ey : yk k = PK k * u) by (unfold u; field; lra).
      unfold dterm. destruct (Rlt_dec 0 (PK k)); [|lra].
      rewrite Em, Ey. replace (PK k * u / PK k) with u by (field; lra).
      replace (PK k * t k / PK k) with (t k) by (field; lra).
      assert (L : lam * (f u - f (t k) - g k * (u - t k)) >= 0).
      { destruct Hs as [L0|Hs]; [rewrite L0; lra|].
        pose proof (Hs u Hu Dd) as S. apply Rle_ge, Rmult_le_pos; lra. }
      assert (Q : (w k - mu - lam * g k) * (u - t k) <= 0).
      { destruct Hst as [E|[E0 E]]; [rewrite E; lra|rewrite E0; nra]. }
      assert (w k * u - lam * f u - mu * u <= w k * t k - lam * f (t k) - mu * t k) by nra.
      nra.
    - assert (E : PK k = 0) by (pose proof (HP k Hk); lra).
      unfold dterm. rewrite E. destruct (Rlt_dec 0 0); [lra|].
      pose proof (Hy k Hk).
      destruct (Hzero k Hk E) as [Z|[Zm [Zy|Zc]]].
      + replace (w k * yk k - lam * (finf * yk k) - mu * yk k)
          with ((w k - mu - lam * finf) * yk k) by ring.
        replace (w k * m k - lam * (finf * m k) - mu * m k)
          with ((w k - mu - lam * finf) * m k) by ring.
        rewrite Z. lra.
      + rewrite Zm, Zy. lra.
      + rewrite Zm. replace (w k * yk k - lam * (finf * yk k) - mu * yk k)
          with ((w k - mu - lam * finf) * yk k) by ring. nra. }
  pose proof (sum_le K _ _ C) as S. rewrite !sum_lin3 in S. fold (Df K f finf PK yk) in S.
  fold (Df K f finf PK m) in S. rewrite Sm, Sy in S.
  destruct Hb as [Hb|Hb].
  - rewrite Hb in S. assert (lam * Df K f finf PK yk <= lam * eps) by (apply Rmult_le_compat_l; lra).
    lra.
  - subst lam. lra.
Qed.

(* The level point is optimal at the token level: if the class ratios t of
   pi = lvl t z satisfy the stationarity conditions w_k - mu = lam g_k
   (g_k a subgradient of f at t_k, needed only when lam > 0; '<=' where
   t_k = 0) on the classes p charges, pi is a distribution with an active
   budget (or lam = 0: then pi must be within budget to be feasible), and the
   classes p does not charge satisfy the conditions of class_kkt, then no
   feasible y has a larger weighted objective sum_i w_{c(i)} y_i. *)
Theorem node_level_optimal : forall n K (c : nat -> nat) (p : nat -> R)
    (f f' : R -> R) (dom : R -> Prop) finf (w t g z : nat -> R) lam mu eps y,
  (forall i, (i < n)%nat -> (c i < K)%nat) ->
  (forall i, (i < n)%nat -> 0 <= p i) ->
  (forall u v, 0 < u -> dom u -> dom v -> f v >= f u + f' u * (v - u)) ->
  (forall t, 0 < t -> dom t) ->
  0 <= lam -> sum n (lvl n c p t z) = 1 ->
  (Df n f finf p (lvl n c p t z) = eps \/ lam = 0) ->
  (forall k, (k < K)%nat -> 0 < csum n c k p ->
     (lam = 0 \/ forall u, 0 <= u -> dom u -> f u >= f (t k) + g k * (u - t k)) /\
     (w k - mu - lam * g k = 0 \/ (t k = 0 /\ w k - mu - lam * g k <= 0))) ->
  (forall k, (k < K)%nat -> csum n c k p = 0 ->
     w k - mu - lam * finf = 0 \/
     (csum n c k z = 0 /\ (csum n c k y = 0 \/ w k - mu - lam * finf <= 0))) ->
  feasibleL n p f f' dom finf eps y ->
  sum n (fun i => w (c i) * y i) <= sum n (fun i => w (c i) * lvl n c p t z i).
Proof.
  intros n K c p f f' dom finf w t g z lam mu eps y Hc Hp Hsub Hdom Hl Sl Hb Hpos Hzero Fy.
  pose proof Fy as [[Hy Sy] [Hd [Hz Dy]]].
  rewrite !(wobj_classes n K c Hc).
  apply (class_kkt K (cls n c p) w (cls n c (lvl n c p t z)) (cls n c y) t g f finf dom lam mu eps Hl).
  - intros k Hk. apply csum_nonneg. auto.
  - intros k Hk. apply csum_nonneg. auto.
  - rewrite <- Sl, (regroup n K c Hc). reflexivity.
  - rewrite <- Sy, (regroup n K c Hc). reflexivity.
  - rewrite <- (lvl_Df n K c Hc p Hp f finf). auto.
  - pose proof (dpi n K c Hc p y f f' dom finf Hp Hy Hsub Hdom Hd Hz). lra.
  - intros k Hk HP. unfold cls in HP. destruct (Hpos k Hk HP) as [Hs Hst].
    split; [|split; [|split; auto]].
    + unfold cls. rewrite (lvl_mass n c p). destruct (Rlt_dec 0 (csum n c k p)); [reflexivity|lra].
    + unfold cls. destruct (Rlt_dec 0 (csum n c k y)) as [HM|HM].
      * apply Hdom. apply Rdiv_lt_0_compat; auto.
      * assert (E : csum n c k y = 0) by (pose proof (csum_nonneg n c k y Hy); lra).
        destruct (csum_pos_exists n c k p HP) as [i [Hi [Hci Hpi]]].
        pose proof (Hd i Hi Hpi) as D.
        rewrite (csum_zero_on n c k y Hy E i Hi Hci) in D. rewrite E.
        unfold Rdiv in *. rewrite Rmult_0_l in *. auto.
  - intros k Hk HP. unfold cls in *. rewrite (lvl_mass n c p).
    destruct (Rlt_dec 0 (csum n c k p)); [lra|]. apply Hzero; auto.
Qed.

(* zeros = "keep": pi and y vanish where p does; only the classes p charges
   carry conditions. *)
Theorem node_level_optimal_keep : forall n K (c : nat -> nat) (p : nat -> R)
    (f f' : R -> R) (dom : R -> Prop) finf (w t g : nat -> R) lam mu eps y,
  (forall i, (i < n)%nat -> (c i < K)%nat) ->
  (forall i, (i < n)%nat -> 0 <= p i) ->
  (forall u v, 0 < u -> dom u -> dom v -> f v >= f u + f' u * (v - u)) ->
  (forall t, 0 < t -> dom t) ->
  0 <= lam -> sum n (lvl n c p t (fun _ => 0)) = 1 ->
  (Df n f finf p (lvl n c p t (fun _ => 0)) = eps \/ lam = 0) ->
  (forall k, (k < K)%nat -> 0 < csum n c k p ->
     (lam = 0 \/ forall u, 0 <= u -> dom u -> f u >= f (t k) + g k * (u - t k)) /\
     (w k - mu - lam * g k = 0 \/ (t k = 0 /\ w k - mu - lam * g k <= 0))) ->
  feasibleL n p f f' dom finf eps y -> (forall i, (i < n)%nat -> p i = 0 -> y i = 0) ->
  (forall i, (i < n)%nat -> p i = 0 -> lvl n c p t (fun _ => 0) i = 0) /\
  sum n (fun i => w (c i) * y i) <= sum n (fun i => w (c i) * lvl n c p t (fun _ => 0) i).
Proof.
  intros n K c p f f' dom finf w t g lam mu eps y Hc Hp Hsub Hdom Hl Sl Hb Hpos Fy Hyz.
  split.
  - intros i Hi E. unfold lvl. destruct (Rlt_dec 0 (csum n c (c i) p)); [rewrite E; ring|reflexivity].
  - apply (node_level_optimal n K c p f f' dom finf w t g (fun _ => 0) lam mu eps y
             Hc Hp Hsub Hdom Hl Sl Hb Hpos); auto.
    intros k Hk HP. right. split.
    + unfold csum. rewrite (sum_ext n _ (fun _ => 0)); [apply sum_zero|].
      intros i Hi. destruct (Nat.eq_dec (c i) k); reflexivity.
    + left. pose proof Fy as [[Hy _] _].
      assert (Zp := csum_zero_on n c k p Hp HP).
      rewrite (csum_ext n c k y (fun _ => 0)).
      * unfold csum. rewrite (sum_ext n _ (fun _ => 0)); [apply sum_zero|].
        intros i Hi. destruct (Nat.eq_dec (c i) k); reflexivity.
      * intros i Hi Hci. apply Hyz; auto.
Qed.

(* The search for lam: maximisers of the penalised objective W - lam D at
   lam1 < lam2 have D and W nonincreasing in lam. *)
Lemma penalised_monotone : forall W1 D1 W2 D2 l1 l2, 0 <= l1 < l2 ->
  W2 - l1 * D2 <= W1 - l1 * D1 -> W1 - l2 * D1 <= W2 - l2 * D2 ->
  D2 <= D1 /\ W2 <= W1.
Proof. intros. split; nra. Qed.

(* ======================================================================
   The candidate-set verifier. S : nat -> bool is the set of the children's
   tokens; class 0 is S, class 1 its complement. With P = p(S) in (0, 1), the
   point accepting m is p scaled by m/P on S and (1 - m)/(1 - P) off S, and
   the budget function is P f(m/P) + (1 - P) f((1 - m)/(1 - P)).
   ====================================================================== *)
Definition sc (S : nat -> bool) (i : nat) : nat := if S i then 0%nat else 1%nat.

Section CandidateSet.
Variable n : nat.
Variable S : nat -> bool.
Variable p : nat -> R.
Hypothesis Sp : simplex n p.
Variables (f f' : R -> R) (dom : R -> Prop) (finf : R).
Hypothesis Hsub : forall u v, 0 < u -> dom u -> dom v -> f v >= f u + f' u * (v - u).
Hypothesis Hdom : forall t, 0 < t -> dom t.

Let Hp : forall i, (i < n)%nat -> 0 <= p i. Proof. apply Sp. Qed.
Let Hsc : forall i, (i < n)%nat -> (sc S i < 2)%nat.
Proof. intros. unfold sc. destruct (S i); lia. Qed.

(* y(S), the acceptance of the target-only verifier *)
Definition massS (y : nat -> R) : R := csum n (sc S) 0 y.
Definition PS : R := massS p.
Hypothesis HP : 0 < PS < 1.

Definition set_t (m : R) (k : nat) : R := if Nat.eq_dec k 0 then m / PS else (1 - m) / (1 - PS).
Definition set_pi (m : R) (i : nat) : R :=
  if S i then p i * (m / PS) else p i * ((1 - m) / (1 - PS)).
Definition set_D (m : R) : R := PS * f (m / PS) + (1 - PS) * f ((1 - m) / (1 - PS)).

Lemma sum2 : forall a : nat -> R, sum 2 a = a 0%nat + a 1%nat.
Proof. intros. simpl. ring. Qed.

Lemma mass_split : forall y, sum n y = massS y + csum n (sc S) 1 y.
Proof. intros y. rewrite (regroup n 2 (sc S) Hsc), sum2. reflexivity. Qed.

Lemma PC : csum n (sc S) 1 p = 1 - PS.
Proof. pose proof (mass_split p). rewrite (proj2 Sp) in H. unfold PS. lra. Qed.

Lemma set_is_lvl : forall m i, (i < n)%nat -> set_pi m i = lvl n (sc S) p (set_t m) (fun _ => 0) i.
Proof.
  intros m i Hi. pose proof PC as C. pose proof HP as H.
  unfold set_pi, lvl, set_t. destruct (S i) eqn:ES.
  - replace (sc S i) with 0%nat by (unfold sc; rewrite ES; reflexivity). simpl.
    destruct (Rlt_dec 0 (csum n (sc S) 0 p)) as [|N]; [reflexivity|].
    unfold PS, massS in H. lra.
  - replace (sc S i) with 1%nat by (unfold sc; rewrite ES; reflexivity). simpl.
    destruct (Rlt_dec 0 (csum n (sc S) 1 p)) as [|N]; [reflexivity|]. lra.
Qed.

Lemma set_mass : forall m, massS (set_pi m) = m /\ csum n (sc S) 1 (set_pi m) = 1 - m.
Proof.
  intros m. pose proof PC. unfold massS.
  rewrite !(csum_ext n (sc S) _ (set_pi m) (lvl n (sc S) p (set_t m) (fun _ => 0)))
    by (intros; apply set_is_lvl; auto).
  rewrite !(lvl_mass n (sc S) p). unfold set_t. fold (massS p). fold PS.
  destruct (Rlt_dec 0 PS); [|lra]. destruct (Rlt_dec 0 (csum n (sc S) 1 p)); [|lra].
  split; [simpl; field; lra|]. rewrite H. simpl. field. lra.
Qed.

Lemma set_simplex : forall m, PS <= m <= 1 -> simplex n (set_pi m).
Proof.
  intros m Hm. split.
  - intros i Hi. pose proof (Hp i Hi). unfold set_pi. destruct (S i).
    + apply Rmult_le_pos; [auto|]. apply Rdiv_le_0_compat; lra.
    + apply Rmult_le_pos; [auto|]. apply Rdiv_le_0_compat; lra.
  - rewrite mass_split. destruct (set_mass m). lra.
Qed.

Lemma set_Df : forall m, Df n f finf p (set_pi m) = set_D m.
Proof.
  intros m. pose proof PC. pose proof HP.
  replace (Df n f finf p (set_pi m)) with (Df n f finf p (lvl n (sc S) p (set_t m) (fun _ => 0)))
    by (unfold Df; apply sum_ext; intros; rewrite set_is_lvl; auto).
  rewrite (lvl_Df n 2 (sc S) Hsc p Hp f finf). unfold Df. rewrite sum2. unfold cls.
  assert (E : forall k, csum n (sc S) k (lvl n (sc S) p (set_t m) (fun _ => 0)) =
                        csum n (sc S) k (set_pi m))
    by (intros k; apply csum_ext; intros; symmetry; apply set_is_lvl; auto).
  rewrite !E. destruct (set_mass m) as [M0 M1]. unfold massS in M0.
  rewrite M0, M1, H. fold (massS p). fold PS.
  unfold dterm, set_D. destruct (Rlt_dec 0 PS); [|lra]. destruct (Rlt_dec 0 (1 - PS)); [|lra].
  reflexivity.
Qed.

(* the data-processing bound in the two-class form of docs/theory.md §9 *)
Theorem set_dpi : forall y, simplex n y ->
  (forall i, (i < n)%nat -> 0 < p i -> dom (y i / p i)) ->
  (forall i, (i < n)%nat -> p i = 0 -> y i = 0 \/ (forall u, 0 < u -> dom u -> f' u <= finf)) ->
  set_D (massS y) <= Df n f finf p y.
Proof.
  intros y [Hy Sy] Hd Hz.
  pose proof (dpi n 2 (sc S) Hsc p y f f' dom finf Hp Hy Hsub Hdom Hd Hz) as D.
  unfold Df at 1 in D. rewrite sum2 in D. unfold cls in D.
  pose proof (mass_split y) as My. rewrite Sy in My.
  replace (csum n (sc S) 1 y) with (1 - massS y) in D by lra.
  rewrite PC in D. fold (massS y) in D. fold (massS p) PS in D.
  unfold dterm, set_D in *. destruct (Rlt_dec 0 PS); [|lra]. destruct (Rlt_dec 0 (1 - PS)); [|lra].
  lra.
Qed.

(* The set verifier is optimal: let m in [P, 1] be the largest acceptance
   within budget (set_D m <= eps, every larger m' exceeds it). Then set_pi m
   is a distribution with D_f = set_D m <= eps accepting m, and no feasible y
   (zeros "keep", f_inf = infinity, or "continue" with f' <= f_inf) puts more
   than m on S. *)
Theorem set_optimal : forall eps m, PS <= m <= 1 ->
  set_D m <= eps -> (forall m', m < m' <= 1 -> eps < set_D m') ->
  simplex n (set_pi m) /\ Df n f finf p (set_pi m) = set_D m /\ massS (set_pi m) = m /\
  forall y, feasibleL n p f f' dom finf eps y -> massS y <= m.
Proof.
  intros eps m Hm Hin Hlast. split; [apply set_simplex; auto|]. split; [apply set_Df|].
  split; [apply set_mass|]. intros y Fy. pose proof Fy as [Sy [Hd [Hz Dy]]].
  destruct (Rle_dec (massS y) m) as [Hle|Hgt]; auto. exfalso.
  assert (Hb : massS y <= 1).
  { rewrite <- (proj2 Sy). apply csum_le_total. apply Sy. }
  pose proof (set_dpi y Sy Hd Hz). pose proof (Hlast (massS y) ltac:(lra)). lra.
Qed.

(* Uniqueness for strictly convex f with an active budget and hard zeros:
   every feasible y accepting at least m is the level point set_pi m. *)
Hypothesis Hstrict : forall u v, 0 < u -> dom u -> dom v -> v <> u -> f v > f u + f' u * (v - u).

Theorem set_unique : forall eps m, PS <= m <= 1 ->
  set_D m = eps -> (forall m', m < m' <= 1 -> eps < set_D m') ->
  forall y, feasibleL n p f f' dom finf eps y -> (forall i, (i < n)%nat -> p i = 0 -> y i = 0) ->
  m <= massS y -> forall i, (i < n)%nat -> y i = set_pi m i.
Proof.
  intros eps m Hm Hin Hlast y Fy Hyz Hge i Hi.
  destruct (set_optimal eps m Hm ltac:(lra) Hlast) as [_ [_ [_ Opt]]].
  pose proof (Opt y Fy) as Hle. assert (E : massS y = m) by lra.
  pose proof Fy as [[Hy Sy] [Hd [Hz Dy]]].
  assert (Eq : Df n f finf p y <= Df 2 f finf (cls n (sc S) p) (cls n (sc S) y)).
  { unfold Df at 2. rewrite sum2. unfold cls.
    pose proof (mass_split y) as My. rewrite Sy in My.
    replace (csum n (sc S) 1 y) with (1 - massS y) by lra. rewrite PC. fold (massS y) (massS p) PS.
    rewrite E. unfold dterm. destruct (Rlt_dec 0 PS); [|lra]. destruct (Rlt_dec 0 (1 - PS)); [|lra].
    unfold set_D in Hin. lra. }
  pose proof (mass_split y) as My. rewrite Sy in My. pose proof PC as C. pose proof HP as H.
  assert (HPi : 0 < csum n (sc S) (sc S i) p).
  { unfold sc at 2. destruct (S i); [change (0 < massS p); fold PS; lra|lra]. }
  rewrite (dpi_equality n 2 (sc S) Hsc p y f f' dom finf Hp Hy Hsub Hdom Hd Hz Hstrict Hyz Eq i Hi HPi).
  unfold set_pi, tbar. destruct (S i) eqn:ES.
  - replace (sc S i) with 0%nat by (unfold sc; rewrite ES; reflexivity).
    change (p i * (massS y / massS p) = p i * (m / PS)). fold PS. rewrite E. reflexivity.
  - replace (sc S i) with 1%nat by (unfold sc; rewrite ES; reflexivity).
    rewrite C. replace (csum n (sc S) 1 y) with (1 - massS y) by lra. rewrite E. reflexivity.
Qed.

(* set_D is nondecreasing on [P, 1]: the one-token budget function of
   Serving.v with p_x replaced by P = p(S) (oh_D_monotone on the two-point
   law (P, 1 - P)); the bisection for m* relies on it. *)
Theorem set_D_monotone : forall a1 a2, PS <= a1 <= a2 -> a2 <= 1 -> (a2 < 1 \/ dom 0) ->
  set_D a1 <= set_D a2.
Proof.
  intros a1 a2 H12 H2 Hd.
  set (p2 := fun i : nat => if Nat.eq_dec i 0 then PS else 1 - PS).
  assert (E : forall a, set_D a = oh_D 0 p2 f a) by (intros; unfold set_D, oh_D, p2; simpl; reflexivity).
  rewrite !E. apply (oh_D_monotone 0 p2 ltac:(unfold p2; simpl; exact HP) f f' dom Hsub Hdom); auto.
Qed.

(* On rejection (the token drawn from set_pi m falls outside S, m < 1) its
   law is p restricted to the complement of S, renormalised. *)
Theorem set_reject : forall m, m < 1 ->
  csum n (sc S) 1 (set_pi m) = 1 - m /\
  forall i, (i < n)%nat -> S i = false -> set_pi m i / (1 - m) = p i / (1 - PS).
Proof.
  intros m Hm. split; [apply set_mass|]. intros i Hi ES. pose proof HP.
  unfold set_pi. rewrite ES. field. lra.
Qed.
End CandidateSet.

(* One candidate, S = {x}: the set verifier is the token-only verifier of
   Serving.v (P = p_x, set_pi = oh_pi). *)
Theorem set_singleton : forall n x p m, (x < n)%nat -> 0 < p x ->
  massS n (fun i => Nat.eqb i x) p = p x /\
  forall i, (i < n)%nat -> set_pi n (fun i => Nat.eqb i x) p m i = oh_pi x p m i.
Proof.
  intros n x p m Hx Hpx.
  assert (P : massS n (fun i => Nat.eqb i x) p = p x).
  { unfold massS, csum. rewrite (sum_ext n _ (fun i => if Nat.eq_dec i x then p x else 0)).
    - rewrite sum_update, sum_zero by auto. ring.
    - intros i Hi. unfold sc. destruct (Nat.eq_dec i x) as [->|Ne].
      + rewrite Nat.eqb_refl. reflexivity.
      + apply Nat.eqb_neq in Ne. rewrite Ne. reflexivity. }
  split; [auto|]. intros i Hi. unfold set_pi, oh_pi, oh_tl, PS. rewrite P.
  destruct (Nat.eq_dec i x) as [->|Ne].
  - rewrite Nat.eqb_refl. field. lra.
  - apply Nat.eqb_neq in Ne. rewrite Ne. ring.
Qed.
