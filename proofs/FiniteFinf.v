(* The mentored optimum when f_inf < infinity, over the whole curve, finite
   part and continuation together, with no threshold hypothesis
   (docs/theory.md §3, "Where the target is zero").

   When every subgradient is <= f_inf (Hfinf; true for convex f with finite
   f_inf, checked per built-in in divergences_check.py), feasible points may put
   mass on {p = 0}. The continuation point pi = contv(t_lo, z) (t_lo > 0)
   minimises D_f at its acceptance, with multiplier nu = f_inf - f'(t_lo) >= 0
   (cont_D_minimal), as the finite curve points do (Optimum.v :
   curve_D_minimal). Every s in [0, TV] has a curve point (thresholds_exist,
   cont_thresholds_exist), so the last curve point within budget is optimal
   among all feasible points (mentored_optimal_finite_finf).

   Convexity through supporting lines at the positive points of dom ⊇ (0, ∞). *)
Require Import Reals Lra Lia.
Require Import Mentored.Sums Mentored.Curve Mentored.Optimality Mentored.TargetZeros
  Mentored.Existence Mentored.Optimum.
Open Scope R_scope.

(* x is the curve point at s: a clip point with thresholds (s <= TV - Q0), or a
   normalised point of the continuation (s >= TV - Q0) *)
Definition on_curve (n : nat) (p q : nat -> R) (s : R) (x : nat -> R) : Prop :=
  (exists tl th, thresholds n p q s tl th /\
     forall i, (i < n)%nat -> x i = clipv p q tl th i) \/
  (exists tl z, 0 <= tl <= 1 /\ (forall i, (i < n)%nat -> p i = 0 -> 0 <= z i <= q i) /\
     Down n p q tl = s /\ Zmass n p z = s - (TV n p q - Q0 n p q) /\
     forall i, (i < n)%nat -> x i = contv p q z tl i).

Section FiniteFinf.
Variable n : nat.
Variables p q : nat -> R.
Variables (f f' : R -> R) (dom : R -> Prop) (finf : R).
Hypothesis Sp : simplex n p.
Hypothesis Sq : simplex n q.
Hypothesis Hsub : forall x y, 0 < x -> dom x -> dom y -> f y >= f x + f' x * (y - x).
Hypothesis Hdom : forall t, 0 < t -> dom t.
Hypothesis Hfinf : forall t, 0 < t -> f' t <= finf.

Let Hp : forall i, (i < n)%nat -> 0 <= p i. Proof. apply Sp. Qed.
Let Hq : forall i, (i < n)%nat -> 0 <= q i. Proof. apply Sq. Qed.

(* per ratio: c = max(t_lo, r) minimises f(u) - nu min(u, r) - f'(t_lo) u *)
Lemma cont_ratio_gap : forall tl r u, 0 < tl -> 0 <= r -> 0 <= u -> dom u ->
  f (Rmax tl r) - (finf - f' tl) * Rmin (Rmax tl r) r - f' tl * Rmax tl r <=
  f u - (finf - f' tl) * Rmin u r - f' tl * u.
Proof.
  intros tl r u Htl Hr Hu Hdu.
  assert (Hnu : 0 <= finf - f' tl) by (pose proof (Hfinf tl Htl); lra).
  destruct (Rlt_dec r tl) as [Hlt|Hge].
  - replace (Rmax tl r) with tl by mm. replace (Rmin tl r) with r by mm.
    pose proof (Hsub tl u Htl (Hdom tl Htl) Hdu).
    assert ((finf - f' tl) * Rmin u r <= (finf - f' tl) * r)
      by (apply Rmult_le_compat_l; [lra|apply Rmin_r]).
    lra.
  - replace (Rmax tl r) with r by mm. replace (Rmin r r) with r by mm.
    assert (Hr0 : 0 < r) by lra.
    pose proof (Hsub r u Hr0 (Hdom r Hr0) Hdu).
    assert (G : f' tl <= f' r).
    { destruct (Req_dec r tl) as [->|Hne]; [lra|].
      apply (subgrad_between_lo f (f' r) (f' tl) tl r); try lra;
        apply Hsub; try apply Hdom; lra. }
    pose proof (Hfinf r Hr0).
    destruct (Rle_dec u r) as [Hle|Hgt].
    + replace (Rmin u r) with u by mm. nra.
    + replace (Rmin u r) with r by mm. nra.
Qed.

Definition kterm (tl : R) (i : nat) (y : R) : R :=
  dterm f finf (p i) y - (finf - f' tl) * Rmin y (q i) - f' tl * y.

Lemma cont_coord_gap : forall tl (z : nat -> R) i y, 0 < tl -> (i < n)%nat -> 0 <= y ->
  (p i = 0 -> 0 <= z i <= q i) -> (0 < p i -> dom (y / p i)) ->
  kterm tl i (contv p q z tl i) <= kterm tl i y.
Proof.
  intros tl z i y Htl Hi Hy Hz Hd. pose proof (Hp i Hi). pose proof (Hq i Hi).
  assert (Hnu : 0 <= finf - f' tl) by (pose proof (Hfinf tl Htl); lra).
  unfold kterm, contv, dterm. destruct (Rlt_dec 0 (p i)) as [Hpos|Hz0].
  - set (r := q i / p i). set (u := y / p i).
    assert (Eq : q i = p i * r) by (unfold r; field; lra).
    assert (Ey : y = p i * u) by (unfold u; field; lra).
    assert (Hr : 0 <= r) by (unfold r; apply Rdiv_le_0_compat; lra).
    assert (Hu : 0 <= u) by (unfold u; apply Rdiv_le_0_compat; lra).
    pose proof (cont_ratio_gap tl r u Htl Hr Hu (Hd Hpos)) as G.
    rewrite Eq. rewrite (Rmult_comm tl (p i)), Rmax_scale by auto.
    replace (p i * Rmax tl r / p i) with (Rmax tl r) by (field; lra).
    rewrite Rmin_scale by auto.
    replace (y / p i) with u by reflexivity.
    assert (My : Rmin y (p i * r) = p i * Rmin u r) by (rewrite Ey at 1; apply Rmin_scale; auto).
    rewrite My. rewrite Ey.
    replace (p i * f (Rmax tl r) - (finf - f' tl) * (p i * Rmin (Rmax tl r) r)
             - f' tl * (p i * Rmax tl r))
      with (p i * (f (Rmax tl r) - (finf - f' tl) * Rmin (Rmax tl r) r - f' tl * Rmax tl r))
      by ring.
    replace (p i * f u - (finf - f' tl) * (p i * Rmin u r) - f' tl * (p i * u))
      with (p i * (f u - (finf - f' tl) * Rmin u r - f' tl * u)) by ring.
    apply Rmult_le_compat_l; lra.
  - assert (E : p i = 0) by lra. destruct (Hz E) as [Z0 Z1].
    replace (Rmin (z i) (q i)) with (z i) by mm.
    assert (Rmin y (q i) <= y) by apply Rmin_l.
    assert ((finf - f' tl) * Rmin y (q i) <= (finf - f' tl) * y) by (apply Rmult_le_compat_l; lra).
    lra.
Qed.

(* the continuation point minimises D_f at its acceptance *)
Theorem cont_D_minimal : forall tl z, 0 < tl <= 1 ->
  (forall i, (i < n)%nat -> p i = 0 -> 0 <= z i <= q i) ->
  sum n (contv p q z tl) = 1 ->
  forall y, simplex n y -> (forall i, (i < n)%nat -> 0 < p i -> dom (y i / p i)) ->
  Df n f finf p (contv p q z tl) + (finf - f' tl) * (acc n y q - acc n (contv p q z tl) q)
    <= Df n f finf p y.
Proof.
  intros tl z Htl Hz N y [Hy Sy] Hd.
  assert (S : sum n (fun i => kterm tl i (contv p q z tl i)) <= sum n (fun i => kterm tl i (y i))).
  { apply sum_le. intros i Hi. apply cont_coord_gap; auto; lra. }
  unfold kterm, Df, acc in *. rewrite !sum_minus, !sum_scal in S. rewrite N, Sy in S. lra.
Qed.

(* every s in [0, TV] has a curve point; it is a distribution accepting 1 - TV + s *)
Lemma on_curve_exists : forall s, 0 <= s <= TV n p q -> exists x, on_curve n p q s x.
Proof.
  intros s Hs. destruct (Rle_dec s (TV n p q - Q0 n p q)) as [Hle|Hgt].
  - destruct (thresholds_exist n p q s Sp Sq ltac:(lra)) as [tl [th [T _]]].
    exists (clipv p q tl th). left. exists tl, th. split; auto.
  - destruct (cont_thresholds_exist n p q s Sp Sq ltac:(lra)) as [tl [z [Htl [Hz [D [Z _]]]]]].
    exists (contv p q z tl). right. exists tl, z. split; [lra|]. split; [exact Hz|]. repeat split; auto; lra.
Qed.

Lemma on_curve_props : forall s x, on_curve n p q s x ->
  simplex n x /\ acc n x q = 1 - TV n p q + s.
Proof.
  intros s x [[tl [th [T E]]]|[tl [z [Htl [Hz [D [Z E]]]]]]].
  - pose proof T as [Htl [Hth [D U]]].
    destruct (acceptance_on_curve n p q tl th Htl Hth Hp Hq (proj2 Sp) (proj2 Sq) s D U) as [N A].
    assert (Sx : sum n x = 1) by (rewrite <- N; apply sum_ext; auto).
    split; [split; auto; intros i Hi; rewrite E by auto; apply (clip_nonneg n); auto; lra|].
    rewrite <- A. unfold acc. apply sum_ext. intros i Hi. rewrite E; auto.
  - assert (N : sum n (contv p q z tl) = 1).
    { apply (cont_normalisation n p q Hp Hq (proj2 Sp) (proj2 Sq) z Hz tl Htl). lra. }
    destruct (cont_acceptance n p q Hp Hq (proj2 Sp) (proj2 Sq) z Hz tl Htl N) as [_ A].
    assert (Sx : sum n x = 1) by (rewrite <- N; apply sum_ext; auto).
    split; [split; auto|].
    + intros i Hi. rewrite E by auto. pose proof (Hp i Hi). pose proof (Hq i Hi).
      unfold contv. destruct (Rlt_dec 0 (p i)).
      * assert (0 <= tl * p i) by nra. mm.
      * apply Hz; auto; lra.
    + replace (1 - TV n p q + s) with (1 - TV n p q + (TV n p q - Q0 n p q + Zmass n p z)) by lra.
      rewrite <- A. unfold acc. apply sum_ext. intros i Hi. rewrite E; auto.
Qed.

(* a curve point has the least D_f among the distributions accepting as much *)
Lemma on_curve_D_min : forall s x, on_curve n p q s x ->
  forall y, simplex n y -> (forall i, (i < n)%nat -> 0 < p i -> dom (y i / p i)) ->
  acc n x q <= acc n y q -> Df n f finf p x <= Df n f finf p y.
Proof.
  intros s x Hc y Sy Hd A. destruct (on_curve_props s x Hc) as [Sx Ax].
  (* s = TV: x accepts 1, so does y, and both are q *)
  assert (Top : acc n x q = 1 -> Df n f finf p x <= Df n f finf p y).
  { intros A1. pose proof (acc_le_1 n y q Sy).
    right. unfold Df. apply sum_ext. intros i Hi.
    rewrite (acc_one n x q Sx Sq A1 i Hi), (acc_one n y q Sy Sq ltac:(lra) i Hi). reflexivity. }
  destruct Hc as [[tl [th [T E]]]|[tl [z [Htl [Hz [D [Z E]]]]]]].
  - pose proof T as [Htl [Hth [D U]]].
    destruct (Req_dec tl 0) as [E0|E0].
    + apply Top. rewrite Ax. rewrite <- D, E0, Down_at_0 by auto. ring.
    + destruct (acceptance_on_curve n p q tl th Htl Hth Hp Hq (proj2 Sp) (proj2 Sq) s D U) as [N _].
      assert (Ex : Df n f finf p x = Df n f finf p (clipv p q tl th))
        by (unfold Df; apply sum_ext; intros i Hi; rewrite E; auto).
      assert (Ax' : acc n x q = acc n (clipv p q tl th) q)
        by (unfold acc; apply sum_ext; intros i Hi; rewrite E; auto).
      rewrite Ex. apply (curve_D_minimal_acc n p q f f' dom finf tl th Hp Hq ltac:(lra) Hth
                           Hsub Hdom N y Sy Hd).
      * intros i Hi H0. right. apply Hfinf. lra.
      * lra.
  - destruct (Req_dec tl 0) as [E0|E0].
    + apply Top. rewrite Ax. rewrite <- D, E0, Down_at_0 by auto. ring.
    + assert (N : sum n (contv p q z tl) = 1).
      { apply (cont_normalisation n p q Hp Hq (proj2 Sp) (proj2 Sq) z Hz tl Htl). lra. }
      assert (Ex : Df n f finf p x = Df n f finf p (contv p q z tl))
        by (unfold Df; apply sum_ext; intros i Hi; rewrite E; auto).
      assert (Ax' : acc n x q = acc n (contv p q z tl) q)
        by (unfold acc; apply sum_ext; intros i Hi; rewrite E; auto).
      pose proof (cont_D_minimal tl z ltac:(lra) Hz N y Sy Hd) as G.
      assert (0 <= finf - f' tl) by (pose proof (Hfinf tl ltac:(lra)); lra).
      rewrite Ex. nra.
Qed.

(* The mentored optimum for f_inf < infinity, no threshold hypothesis: if the
   curve point at s in [0, TV] is within budget and every later curve point
   (finite part or continuation) exceeds it, then it accepts 1 - TV + s and no
   feasible point accepts more, whether or not it puts mass on {p = 0}. *)
Theorem mentored_optimal_finite_finf : forall eps s x, 0 <= s <= TV n p q ->
  on_curve n p q s x -> Df n f finf p x <= eps ->
  (forall s' x', s < s' <= TV n p q -> on_curve n p q s' x' -> eps < Df n f finf p x') ->
  simplex n x /\ acc n x q = 1 - TV n p q + s /\
  forall y, simplex n y -> (forall i, (i < n)%nat -> 0 < p i -> dom (y i / p i)) ->
    Df n f finf p y <= eps -> acc n y q <= acc n x q.
Proof.
  intros eps s x Hs Hc Hin Hlast. destruct (on_curve_props s x Hc) as [Sx Ax].
  split; [auto|]. split; [auto|].
  intros y Sy Hd Dy.
  destruct (Rle_dec (acc n y q) (acc n x q)) as [Hle|Hgt]; auto. exfalso.
  pose proof (acc_le_1 n y q Sy).
  set (s' := acc n y q - 1 + TV n p q).
  destruct (on_curve_exists s' ltac:(unfold s'; lra)) as [x' Hc'].
  destruct (on_curve_props s' x' Hc') as [_ Ax'].
  pose proof (on_curve_D_min s' x' Hc' y Sy Hd ltac:(unfold s' in Ax'; lra)).
  pose proof (Hlast s' x' ltac:(unfold s'; lra) Hc'). lra.
Qed.
End FiniteFinf.
