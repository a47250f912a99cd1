(* Theorem 7: tokens the target excludes (p_i = 0), Q0 = sum_{p_i = 0} q_i.
   Optimality of the continuation is `continuation_optimal` (Optimality.v);
   here: where the finite-threshold curve ends, what it accepts there, the
   bound 1 - Q0 when f_inf = infinity, and the continuation as a curve. *)
Require Import Reals Lra Lia.
Require Import Mentored.Sums Mentored.Curve Mentored.Optimality.
Open Scope R_scope.

Definition Q0 (n : nat) (p q : nat -> R) : R :=
  sum n (fun i => if Rlt_dec 0 (p i) then 0 else q i).

Section TargetZeros.
Variable n : nat.
Variables p q : nat -> R.
Hypothesis Hp : forall i, (i < n)%nat -> 0 <= p i.
Hypothesis Hq : forall i, (i < n)%nat -> 0 <= q i.
Hypothesis Sp : sum n p = 1.
Hypothesis Sq : sum n q = 1.

(* TV(p, q) = sum_{p_i > 0} (q_i - p_i)_+ + Q0 *)
Lemma TV_zero_split :
  TV n p q = sum n (fun i => if Rlt_dec 0 (p i) then Rpos (q i - p i) else 0) + Q0 n p q.
Proof.
  rewrite TV_pos' by congruence. unfold Q0. rewrite <- sum_plus. apply sum_ext.
  intros i Hi. pose proof (Hp i Hi). pose proof (Hq i Hi).
  destruct (Rlt_dec 0 (p i)). - lra. - assert (p i = 0) by lra. rewrite H1. mm.
Qed.

(* with finite t_hi, s = Up(t_hi) never exceeds TV(p, q) - Q0 ... *)
Theorem Up_le_end : forall th, 0 <= th -> Up n p q th <= TV n p q - Q0 n p q.
Proof.
  intros th Hth. rewrite TV_zero_split. unfold Up, UpG.
  replace (sum n (fun i => if Rlt_dec 0 (p i) then Rpos (q i - p i) else 0) + Q0 n p q - Q0 n p q)
    with (sum n (fun i => if Rlt_dec 0 (p i) then Rpos (q i - p i) else 0)) by ring.
  apply sum_le. intros i Hi. pose proof (Hp i Hi). pose proof (Hq i Hi).
  destruct (Rlt_dec 0 (p i)).
  - mm.
  - assert (p i = 0) by lra. rewrite H1, Rmult_0_r. mm.
Qed.

(* ... and reaches it once every token with p_i > 0 is capped at q_i. *)
Theorem Up_end : forall th, 0 <= th ->
  (forall i, (i < n)%nat -> 0 < p i -> q i <= th * p i) ->
  Up n p q th = TV n p q - Q0 n p q.
Proof.
  intros th Hth Hcap. rewrite TV_zero_split. unfold Up, UpG.
  replace (sum n (fun i => if Rlt_dec 0 (p i) then Rpos (q i - p i) else 0) + Q0 n p q - Q0 n p q)
    with (sum n (fun i => if Rlt_dec 0 (p i) then Rpos (q i - p i) else 0)) by ring.
  apply sum_ext. intros i Hi. pose proof (Hp i Hi). pose proof (Hq i Hi).
  destruct (Rlt_dec 0 (p i)).
  - pose proof (Hcap i Hi r). mm.
  - assert (p i = 0) by lra. rewrite H1, Rmult_0_r. mm.
Qed.

(* f_inf = infinity: a feasible pi has pi_i = 0 where p_i = 0, and then it
   accepts at most 1 - Q0. *)
Theorem infinite_finf_bound : forall y, simplex n y ->
  (forall i, (i < n)%nat -> p i = 0 -> y i = 0) ->
  acc n y q <= 1 - Q0 n p q.
Proof.
  intros y [Hy Sy] H0. rewrite <- Sq. unfold Q0, acc. rewrite <- sum_minus.
  apply sum_le. intros i Hi. pose proof (Hp i Hi). pose proof (Hq i Hi). pose proof (Hy i Hi).
  destruct (Rlt_dec 0 (p i)).
  - mm.
  - rewrite (H0 i Hi) by lra. mm.
Qed.

(* The end of the finite-threshold curve: s = TV - Q0, acceptance 1 - Q0. *)
Theorem curve_end_acceptance : forall tl th, 0 <= tl <= 1 -> 1 <= th ->
  Down n p q tl = TV n p q - Q0 n p q -> Up n p q th = TV n p q - Q0 n p q ->
  acc n (clipv p q tl th) q = 1 - Q0 n p q /\
  (forall i, (i < n)%nat -> p i = 0 -> clipv p q tl th i = 0).
Proof.
  intros tl th Htl Hth D U. split.
  - destruct (acceptance_on_curve n p q tl th Htl Hth Hp Hq Sp Sq _ D U) as [_ A].
    rewrite A. ring.
  - intros i Hi H0. unfold clipv, cpt. rewrite H0, !Rmult_0_r.
    pose proof (Hq i Hi). mm.
Qed.

(* ---------- the continuation (f_inf < infinity) as a point of the
   generalised curve: upper caps b_i = max(p_i, q_i) on {p > 0}, z_i on {p = 0} *)
Variable z : nat -> R.
Hypothesis Hz : forall i, (i < n)%nat -> p i = 0 -> 0 <= z i <= q i.
Variable tl : R.
Hypothesis Htl : 0 <= tl <= 1.

Definition bcont (i : nat) : R := if Rlt_dec 0 (p i) then Rmax (p i) (q i) else z i.

Lemma cont_caps : forall i, (i < n)%nat ->
  0 <= tl * p i /\ tl * p i <= p i /\ p i <= bcont i.
Proof.
  intros i Hi. pose proof (Hp i Hi). unfold bcont. destruct (Rlt_dec 0 (p i)).
  - repeat split; try nra. apply Rmax_l.
  - assert (p i = 0) by lra. destruct (Hz i Hi H0). rewrite H0. repeat split; lra.
Qed.

Lemma contv_is_gpi : forall i, (i < n)%nat ->
  contv p q z tl i = gpi q (fun j => tl * p j) bcont i.
Proof.
  intros i Hi. pose proof (Hp i Hi). pose proof (Hq i Hi).
  unfold contv, gpi, cpt, bcont. destruct (Rlt_dec 0 (p i)).
  - f_equal. mm.
  - assert (p i = 0) by lra. destruct (Hz i Hi H1). rewrite H1, Rmult_0_r. mm.
Qed.

Definition Zmass : R := sum n (fun i => if Rlt_dec 0 (p i) then 0 else z i).

Lemma Up_cont : UpG n p q bcont = TV n p q - Q0 n p q + Zmass.
Proof.
  rewrite TV_zero_split. unfold UpG, Zmass.
  replace (sum n (fun i => if Rlt_dec 0 (p i) then Rpos (q i - p i) else 0) + Q0 n p q
           - Q0 n p q + sum n (fun i => if Rlt_dec 0 (p i) then 0 else z i))
    with (sum n (fun i => if Rlt_dec 0 (p i) then Rpos (q i - p i) else 0)
          + sum n (fun i => if Rlt_dec 0 (p i) then 0 else z i)) by ring.
  rewrite <- sum_plus. apply sum_ext. intros i Hi. pose proof (Hp i Hi). pose proof (Hq i Hi).
  unfold bcont. destruct (Rlt_dec 0 (p i)).
  - mm.
  - assert (p i = 0) by lra. destruct (Hz i Hi H1). rewrite H1. mm.
Qed.

(* Normalisation of the continuation: Down(t_lo) = TV - Q0 + sum z = s. *)
Theorem cont_normalisation :
  sum n (contv p q z tl) = 1 <-> Down n p q tl = TV n p q - Q0 n p q + Zmass.
Proof.
  rewrite (sum_ext n (contv p q z tl) (gpi q (fun j => tl * p j) bcont)) by
    (intros; apply contv_is_gpi; auto).
  rewrite <- Up_cont. unfold Down. apply (gen_normalisation n p q); auto.
  apply cont_caps.
Qed.

(* Along the continuation the acceptance is still 1 - TV(p,q) + s with
   s = TV(pi, p) = TV - Q0 + sum z, up to 1 when z = q (then pi = q). *)
Theorem cont_acceptance : sum n (contv p q z tl) = 1 ->
  TV n (contv p q z tl) p = TV n p q - Q0 n p q + Zmass /\
  acc n (contv p q z tl) q = 1 - TV n p q + (TV n p q - Q0 n p q + Zmass).
Proof.
  intros N.
  assert (E : forall i, (i < n)%nat -> contv p q z tl i = gpi q (fun j => tl * p j) bcont i)
    by (intros; apply contv_is_gpi; auto).
  assert (N' : sum n (gpi q (fun j => tl * p j) bcont) = 1)
    by (rewrite <- N; symmetry; apply sum_ext; auto).
  assert (T : TV n (contv p q z tl) p = TV n (gpi q (fun j => tl * p j) bcont) p)
    by (unfold TV; f_equal; apply sum_ext; intros; rewrite E; auto).
  assert (A : acc n (contv p q z tl) q = acc n (gpi q (fun j => tl * p j) bcont) q)
    by (unfold acc; apply sum_ext; intros; rewrite E; auto).
  rewrite T, A. rewrite (gen_TV_is_s n p q) by (auto; apply cont_caps).
  rewrite Up_cont. split; auto.
  rewrite (gen_acceptance n p q) by (auto; apply cont_caps).
  rewrite (gen_TV_is_s n p q) by (auto; apply cont_caps). rewrite Up_cont. ring.
Qed.
End TargetZeros.
