(* Theorem 5: D_f(pi(s) || p) is nondecreasing along the curve.
   Correction (see README): the per-coordinate terms p_i f(pi_i/p_i) are
   NOT monotone in general (kl: t log t < 0 on (0,1)); the terms of the
   shifted generator  f~(t) = f(t) - f'(1)(t - 1)  are, and
   D_f = D_f~ on normalised pi. *)
Require Import Reals Lra Lia.
Require Import Mentored.Sums Mentored.Curve Mentored.Optimality.
Open Scope R_scope.

(* Down is nonincreasing on [0,1] ... *)
Lemma Down_antitone : forall n p q t1 t2,
  (forall i, (i < n)%nat -> 0 <= p i) -> t1 <= t2 ->
  Down n p q t2 <= Down n p q t1.
Proof.
  intros. unfold Down, DownG. apply sum_le. intros i Hi.
  assert (t1 * p i <= t2 * p i) by (apply Rmult_le_compat_r; auto). mm.
Qed.

(* ... and Up nondecreasing on [1, inf). *)
Lemma Up_monotone : forall n p q t1 t2,
  (forall i, (i < n)%nat -> 0 <= p i) -> t1 <= t2 ->
  Up n p q t1 <= Up n p q t2.
Proof.
  intros. unfold Up, UpG. apply sum_le. intros i Hi.
  assert (t1 * p i <= t2 * p i) by (apply Rmult_le_compat_r; auto). mm.
Qed.

(* larger s means smaller t_lo and larger t_hi *)
Lemma thresholds_order : forall n p q tl1 tl2 th1 th2 s1 s2,
  (forall i, (i < n)%nat -> 0 <= p i) ->
  Down n p q tl1 = s1 -> Up n p q th1 = s1 ->
  Down n p q tl2 = s2 -> Up n p q th2 = s2 -> s1 < s2 ->
  tl2 < tl1 /\ th1 < th2.
Proof.
  intros n p q tl1 tl2 th1 th2 s1 s2 Hp D1 U1 D2 U2 Hs. split.
  - destruct (Rlt_dec tl2 tl1); auto.
    pose proof (Down_antitone n p q tl1 tl2 Hp). lra.
  - destruct (Rlt_dec th1 th2); auto.
    pose proof (Up_monotone n p q th2 th1 Hp). lra.
Qed.

Section Shifted.
Variables (f f' : R -> R) (dom : R -> Prop).
Hypothesis Hsub : forall x y, dom x -> dom y -> f y >= f x + f' x * (y - x).
Hypothesis Hdom1 : dom 1.

Definition fshift (t : R) : R := f t - f' 1 * (t - 1).

Lemma fshift_up : forall c1 c2, dom c1 -> dom c2 -> 1 <= c1 <= c2 ->
  fshift c1 <= fshift c2.
Proof.
  intros c1 c2 D1 D2 H. unfold fshift.
  pose proof (Hsub c1 c2 D1 D2). pose proof (Hsub 1 c1 Hdom1 D1).
  pose proof (Hsub c1 1 D1 Hdom1).
  assert (f' 1 <= f' c1).
  { destruct (Req_dec c1 1) as [->|Hne]; [lra|]. nra. }
  nra.
Qed.

Lemma fshift_down : forall c1 c2, dom c1 -> dom c2 -> c2 <= c1 <= 1 ->
  fshift c1 <= fshift c2.
Proof.
  intros c1 c2 D1 D2 H. unfold fshift.
  pose proof (Hsub c1 c2 D1 D2). pose proof (Hsub 1 c1 Hdom1 D1).
  pose proof (Hsub c1 1 D1 Hdom1).
  assert (f' c1 <= f' 1).
  { destruct (Req_dec c1 1) as [->|Hne]; [lra|]. nra. }
  nra.
Qed.
End Shifted.

(* each clipped ratio moves monotonically from 1 towards r *)
Lemma clip_ratio_moves : forall r tl1 tl2 th1 th2,
  0 <= tl2 <= tl1 -> tl1 <= 1 -> 1 <= th1 <= th2 ->
  let c1 := Rmax tl1 (Rmin r th1) in let c2 := Rmax tl2 (Rmin r th2) in
  (1 <= c1 <= c2) \/ (c2 <= c1 <= 1).
Proof. intros. unfold c1, c2. mm. Qed.

Section Monotone.
Variable n : nat.
Variables p q : nat -> R.
Variables (f f' : R -> R) (dom : R -> Prop) (finf : R).
Hypothesis Hp : forall i, (i < n)%nat -> 0 < p i.
Hypothesis Hq : forall i, (i < n)%nat -> 0 <= q i.
Hypothesis Hsub : forall x y, dom x -> dom y -> f y >= f x + f' x * (y - x).
Hypothesis Hdom1 : dom 1.

Definition cratio (tl th : R) (i : nat) : R := Rmax tl (Rmin (q i / p i) th).

Lemma clipv_ratio : forall tl th i, (i < n)%nat ->
  clipv p q tl th i = p i * cratio tl th i.
Proof.
  intros tl th i Hi. pose proof (Hp i Hi). unfold clipv, cratio.
  replace (q i) with (p i * (q i / p i)) at 1 by (field; lra).
  apply cpt_scale; auto.
Qed.

(* D_f(pi || p) = sum p_i f~(c_i) + f'(1) (sum pi - sum p) *)
Lemma Df_shift : forall tl th,
  Df n f finf p (clipv p q tl th) =
  sum n (fun i => p i * fshift f f' (cratio tl th i)) +
  f' 1 * (sum n (clipv p q tl th) - sum n p).
Proof.
  intros tl th. unfold Df.
  rewrite (sum_ext n _ (fun i => p i * fshift f f' (cratio tl th i) +
                                 f' 1 * (clipv p q tl th i - p i))).
  - rewrite sum_plus, sum_scal, sum_minus. reflexivity.
  - intros i Hi. pose proof (Hp i Hi). rewrite clipv_ratio by auto.
    unfold dterm, fshift. destruct (Rlt_dec 0 (p i)); [|lra].
    replace (p i * cratio tl th i / p i) with (cratio tl th i) by (field; lra).
    ring.
Qed.

Theorem D_monotone_thresholds : forall tl1 th1 tl2 th2,
  0 <= tl2 <= tl1 -> tl1 <= 1 -> 1 <= th1 <= th2 ->
  (forall i, (i < n)%nat -> dom (cratio tl1 th1 i) /\ dom (cratio tl2 th2 i)) ->
  sum n (clipv p q tl1 th1) = 1 -> sum n (clipv p q tl2 th2) = 1 ->
  Df n f finf p (clipv p q tl1 th1) <= Df n f finf p (clipv p q tl2 th2).
Proof.
  intros tl1 th1 tl2 th2 H1 H2 H3 Hd N1 N2.
  rewrite !Df_shift, N1, N2.
  assert (sum n (fun i => p i * fshift f f' (cratio tl1 th1 i)) <=
          sum n (fun i => p i * fshift f f' (cratio tl2 th2 i))).
  { apply sum_le. intros i Hi. apply Rmult_le_compat_l; [left; auto|].
    destruct (Hd i Hi) as [D1 D2].
    destruct (clip_ratio_moves (q i / p i) tl1 tl2 th1 th2 H1 H2 H3) as [U|L].
    - apply (fshift_up f f' dom); auto.
    - apply (fshift_down f f' dom); auto. }
  lra.
Qed.

(* Theorem 5: for s1 < s2, D_f(pi(s1)) <= D_f(pi(s2)). *)
Theorem D_monotone : forall tl1 th1 tl2 th2 s1 s2,
  0 <= tl2 -> tl1 <= 1 -> 1 <= th1 ->
  (forall i, (i < n)%nat -> dom (cratio tl1 th1 i) /\ dom (cratio tl2 th2 i)) ->
  sum n p = 1 ->
  Down n p q tl1 = s1 -> Up n p q th1 = s1 ->
  Down n p q tl2 = s2 -> Up n p q th2 = s2 -> s1 < s2 ->
  Df n f finf p (clipv p q tl1 th1) <= Df n f finf p (clipv p q tl2 th2).
Proof.
  intros tl1 th1 tl2 th2 s1 s2 H0 H1 H2 Hd Sp D1 U1 D2 U2 Hs.
  assert (Hp0 : forall i, (i < n)%nat -> 0 <= p i) by (intros; left; auto).
  destruct (thresholds_order n p q tl1 tl2 th1 th2 s1 s2 Hp0 D1 U1 D2 U2 Hs).
  apply D_monotone_thresholds; try lra; auto.
  - apply (proj2 (normalisation n p q tl1 th1 ltac:(lra) ltac:(lra) Hp0 Hq Sp)).
    congruence.
  - apply (proj2 (normalisation n p q tl2 th2 ltac:(lra) ltac:(lra) Hp0 Hq Sp)).
    congruence.
Qed.
End Monotone.
