(* The mentored optimum with no threshold hypothesis, its necessity and
   uniqueness (docs/theory.md §3).

   The key fact is a "dual" form of Theorem 2 that needs no strict gap of
   subgradients: every curve point pi minimises D_f among the distributions
   that accept at least as much (curve_D_minimal), with the multiplier
   nu = f'(t_hi) - f'(t_lo) >= 0 of the acceptance constraint.  Together with
   thresholds_exist (Existence.v) this gives optimality of the last curve
   point within budget (mentored_optimal), the soundness of the budget
   bisection (bisection_sound), uniqueness for strictly convex f
   (optimum_on_curve), and the optimal polytope of tv (tv_optimal_set).

   Convexity is used through supporting lines at the positive points of dom:
       f y >= f x + f' x (y - x)     for x > 0, x, y in dom,
   and dom contains (0, infinity) (it may contain 0, e.g. kl with f(0) = 0).
   Feasible points vanish where p does (f_inf = infinity, or hard zeros). *)
Require Import Reals Lra Lia.
Require Import Mentored.Sums Mentored.Curve Mentored.Optimality Mentored.TargetZeros
  Mentored.Existence.
Open Scope R_scope.

(* accepting everything means being q *)
Lemma acc_one : forall n y q, simplex n y -> simplex n q -> acc n y q = 1 ->
  forall i, (i < n)%nat -> y i = q i.
Proof.
  intros n y q [Hy Sy] [Hq Sq] A i Hi.
  assert (E1 : forall j, (j < n)%nat -> Rmin (y j) (q j) = y j).
  { apply (sum_eq_termwise n (fun j => Rmin (y j) (q j)) y).
    - intros j Hj. apply Rmin_l.
    - unfold acc in A. lra. }
  apply (sum_eq_termwise n y q); auto.
  - intros j Hj. rewrite <- (E1 j Hj). apply Rmin_r.
  - lra.
Qed.

Lemma acc_le_1 : forall n y q, simplex n y -> acc n y q <= 1.
Proof.
  intros n y q [Hy Sy]. rewrite <- Sy. apply sum_le. intros. apply Rmin_l.
Qed.

(* ======================================================================
   Every curve point minimises D_f at its acceptance.
   ====================================================================== *)
Section CurveMinimal.
Variable n : nat.
Variables p q : nat -> R.
Variables (f f' : R -> R) (dom : R -> Prop) (finf : R).
Variables tl th : R.
Hypothesis Hp : forall i, (i < n)%nat -> 0 <= p i.
Hypothesis Hq : forall i, (i < n)%nat -> 0 <= q i.
Hypothesis Htl : 0 < tl <= 1.
Hypothesis Hth : 1 <= th.
Hypothesis Hsub : forall x y, 0 < x -> dom x -> dom y -> f y >= f x + f' x * (y - x).
Hypothesis Hdom : forall t, 0 < t -> dom t.

(* multiplier of the acceptance constraint *)
Definition nu : R := f' th - f' tl.

Lemma nu_nonneg : 0 <= nu.
Proof.
  unfold nu. destruct (Req_dec tl th) as [->|Hne]; [lra|].
  assert (f' tl <= f' th); [|lra].
  apply (subgrad_between_lo f (f' th) (f' tl) tl th); try lra;
    apply Hsub; try apply Hdom; lra.
Qed.

(* The per-ratio gap of  f(u) - nu min(u, r) - f'(t_lo) u  over its value at
   c = clip(r, t_lo, t_hi) is at least the gap of f over its supporting line
   at c (so >= 0, and > 0 for u <> c when f is strictly convex). *)
Lemma ratio_gap : forall r u, 0 <= r -> 0 <= u -> dom u ->
  let c := Rmax tl (Rmin r th) in
  f u - (f c + f' c * (u - c)) <=
  (f u - nu * Rmin u r - f' tl * u) - (f c - nu * Rmin c r - f' tl * c).
Proof.
  intros r u Hr Hu Hdu c. pose proof nu_nonneg as Hnu. unfold nu in *.
  destruct (Rlt_dec r tl) as [Hlt|Hge].
  - assert (Ec : c = tl) by (unfold c; mm). rewrite Ec.
    assert (Rmin tl r = r) by mm. rewrite H.
    assert (Rmin u r <= r) by apply Rmin_r. nra.
  - destruct (Rlt_dec th r) as [Hgt|Hle].
    + assert (Ec : c = th) by (unfold c; mm). rewrite Ec.
      assert (Rmin th r = th) by mm. rewrite H.
      assert (Rmin u r <= u) by apply Rmin_l. nra.
    + assert (Ec : c = r) by (unfold c; mm). rewrite Ec.
      assert (Rmin r r = r) by mm. rewrite H.
      assert (Hdr : dom r) by (apply Hdom; lra).
      assert (G1 : f' tl <= f' r).
      { destruct (Req_dec r tl) as [->|Hne]; [lra|].
        apply (subgrad_between_lo f (f' r) (f' tl) tl r); try lra;
          apply Hsub; try apply Hdom; lra. }
      assert (G2 : f' r <= f' th).
      { destruct (Req_dec r th) as [->|Hne]; [lra|].
        apply (subgrad_between_hi f (f' r) (f' th) th r); try lra;
          apply Hsub; try apply Hdom; lra. }
      unfold Rmin. destruct (Rle_dec u r); nra.
Qed.

(* the coordinate term of  D_f - nu A - f'(t_lo) sum  *)
Definition gterm (i : nat) (y : R) : R :=
  dterm f finf (p i) y - nu * Rmin y (q i) - f' tl * y.

Lemma gterm_scale : forall i y, 0 < p i ->
  gterm i y = p i * (f (y / p i) - nu * Rmin (y / p i) (q i / p i) - f' tl * (y / p i)).
Proof.
  intros i y Hp0. unfold gterm, dterm. destruct (Rlt_dec 0 (p i)); [|lra].
  assert (M : Rmin y (q i) = p i * Rmin (y / p i) (q i / p i)).
  { rewrite <- (Rmin_scale (p i)) by auto.
    replace (p i * (y / p i)) with y by (field; lra).
    replace (p i * (q i / p i)) with (q i) by (field; lra). reflexivity. }
  rewrite M. field. lra.
Qed.

Definition cr (i : nat) : R := Rmax tl (Rmin (q i / p i) th).

Lemma clip_as_ratio : forall i, 0 < p i -> clipv p q tl th i = p i * cr i.
Proof.
  intros i Hp0. unfold clipv, cr.
  replace (q i) with (p i * (q i / p i)) at 1 by (field; lra). apply cpt_scale; auto.
Qed.

Lemma coord_gap : forall i y, (i < n)%nat -> 0 <= y ->
  (0 < p i -> dom (y / p i)) -> (p i = 0 -> y = 0 \/ f' th <= finf) ->
  gterm i (clipv p q tl th i) <= gterm i y /\
  (0 < p i -> p i * (f (y / p i) - (f (cr i) + f' (cr i) * (y / p i - cr i)))
              <= gterm i y - gterm i (clipv p q tl th i)).
Proof.
  intros i y Hi Hy Hd H0. pose proof (Hp i Hi). pose proof (Hq i Hi). pose proof nu_nonneg.
  destruct (Rlt_dec 0 (p i)) as [Hpos|Hz].
  - assert (Hr : 0 <= q i / p i) by (apply Rdiv_le_0_compat; lra).
    assert (Hu : 0 <= y / p i) by (apply Rdiv_le_0_compat; lra).
    assert (Hc : 0 < cr i) by (unfold cr; pose proof (Rmax_l tl (Rmin (q i / p i) th)); lra).
    pose proof (ratio_gap (q i / p i) (y / p i) Hr Hu (Hd Hpos)) as G. fold (cr i) in G.
    assert (S : f (y / p i) - (f (cr i) + f' (cr i) * (y / p i - cr i)) >= 0).
    { pose proof (Hsub (cr i) (y / p i) Hc (Hdom _ Hc) (Hd Hpos)). lra. }
    rewrite clip_as_ratio by auto. rewrite !gterm_scale by auto.
    replace (p i * cr i / p i) with (cr i) by (field; lra).
    split; [|intros _]; nra.
  - assert (E : p i = 0) by lra.
    assert (Ec : clipv p q tl th i = 0) by (unfold clipv, cpt; rewrite E, !Rmult_0_r; mm).
    rewrite Ec. unfold gterm, dterm. rewrite E. destruct (Rlt_dec 0 0); [lra|].
    split; [|intros; lra].
    destruct (H0 E) as [->|Hf]; [mm|].
    assert (M1 : Rmin y (q i) <= y) by apply Rmin_l. unfold nu in *.
    assert (M0 : Rmin 0 (q i) = 0) by mm. rewrite M0. nra.
Qed.

Lemma sum_gterm : forall y, sum n (fun i => gterm i (y i)) =
  Df n f finf p y - nu * acc n y q - f' tl * sum n y.
Proof.
  intros y. unfold gterm, Df, acc. rewrite sum_minus, sum_minus, sum_scal, sum_scal. ring.
Qed.

Definition zero_ok (y : nat -> R) : Prop :=
  forall i, (i < n)%nat -> p i = 0 -> y i = 0 \/ f' th <= finf.

(* D_f(y) >= D_f(pi) + nu (A(y) - A(pi)) for every distribution y *)
Theorem curve_D_minimal : sum n (clipv p q tl th) = 1 ->
  forall y, simplex n y -> (forall i, (i < n)%nat -> 0 < p i -> dom (y i / p i)) -> zero_ok y ->
  Df n f finf p (clipv p q tl th) + nu * (acc n y q - acc n (clipv p q tl th) q)
    <= Df n f finf p y.
Proof.
  intros N y [Hy Sy] Hd Hz.
  assert (S : sum n (fun i => gterm i (clipv p q tl th i)) <= sum n (fun i => gterm i (y i))).
  { apply sum_le. intros i Hi. apply coord_gap; auto. }
  rewrite !sum_gterm, N, Sy in S. lra.
Qed.

Corollary curve_D_minimal_acc : sum n (clipv p q tl th) = 1 ->
  forall y, simplex n y -> (forall i, (i < n)%nat -> 0 < p i -> dom (y i / p i)) -> zero_ok y ->
  acc n (clipv p q tl th) q <= acc n y q ->
  Df n f finf p (clipv p q tl th) <= Df n f finf p y.
Proof.
  intros N y Sy Hd Hz A. pose proof (curve_D_minimal N y Sy Hd Hz). pose proof nu_nonneg. nra.
Qed.

(* strictly convex f: the curve point is the only minimiser *)
Hypothesis Hstrict : forall x y, 0 < x -> dom x -> dom y -> y <> x -> f y > f x + f' x * (y - x).

Theorem curve_D_unique : sum n (clipv p q tl th) = 1 ->
  forall y, simplex n y -> (forall i, (i < n)%nat -> 0 < p i -> dom (y i / p i)) ->
  (forall i, (i < n)%nat -> p i = 0 -> y i = 0) ->
  acc n (clipv p q tl th) q <= acc n y q ->
  Df n f finf p y <= Df n f finf p (clipv p q tl th) ->
  forall i, (i < n)%nat -> y i = clipv p q tl th i.
Proof.
  intros N y Sy Hd Hz A D.
  assert (Hz' : zero_ok y) by (intros i Hi H0; left; auto).
  pose proof Sy as [Hy SY].
  assert (Z : forall i, (i < n)%nat -> gterm i (y i) - gterm i (clipv p q tl th i) = 0).
  { apply sum_nonneg_zero.
    - intros i Hi. destruct (coord_gap i (y i)) as [G _]; auto. lra.
    - rewrite sum_minus, !sum_gterm, N, SY. pose proof nu_nonneg.
      pose proof (curve_D_minimal N y Sy Hd Hz'). nra. }
  intros i Hi. pose proof (Hp i Hi).
  destruct (Rlt_dec 0 (p i)) as [Hpos|Hz0].
  - destruct (coord_gap i (y i)) as [_ G]; auto.
    specialize (G Hpos). rewrite (Z i Hi) in G.
    assert (Hc : 0 < cr i) by (unfold cr; pose proof (Rmax_l tl (Rmin (q i / p i) th)); lra).
    destruct (Req_dec (y i / p i) (cr i)) as [E|E].
    + rewrite clip_as_ratio by auto. rewrite <- E. field. lra.
    + pose proof (Hstrict (cr i) (y i / p i) Hc (Hdom _ Hc) (Hd i Hi Hpos) E). nra.
  - assert (E : p i = 0) by lra. rewrite (Hz i Hi E).
    unfold clipv, cpt. rewrite E, !Rmult_0_r. pose proof (Hq i Hi). mm.
Qed.
End CurveMinimal.

(* ======================================================================
   The mentored optimum, with thresholds from Existence.v.
   ====================================================================== *)
Section Mentored.
Variable n : nat.
Variables p q : nat -> R.
Variables (f f' : R -> R) (dom : R -> Prop) (finf : R).
Hypothesis Sp : simplex n p.
Hypothesis Sq : simplex n q.
Hypothesis Hsub : forall x y, 0 < x -> dom x -> dom y -> f y >= f x + f' x * (y - x).
Hypothesis Hdom : forall t, 0 < t -> dom t.

(* feasible for MD(f, eps), vanishing where p does (f_inf = infinity, or hard zeros) *)
Definition feasibleZ (eps : R) (y : nat -> R) : Prop :=
  simplex n y /\ (forall i, (i < n)%nat -> 0 < p i -> dom (y i / p i)) /\
  (forall i, (i < n)%nat -> p i = 0 -> y i = 0) /\ Df n f finf p y <= eps.

Let Hp : forall i, (i < n)%nat -> 0 <= p i. Proof. apply Sp. Qed.
Let Hq : forall i, (i < n)%nat -> 0 <= q i. Proof. apply Sq. Qed.

(* a curve point over budget bounds every feasible acceptance strictly *)
Lemma beyond_budget : forall eps sb tl th, thresholds n p q sb tl th ->
  eps < Df n f finf p (clipv p q tl th) ->
  forall y, feasibleZ eps y -> acc n y q < 1 - TV n p q + sb.
Proof.
  intros eps sb tl th [Htl [Hth [D U]]] Hover y [Sy [Hd [Hz Dy]]].
  destruct (acceptance_on_curve n p q tl th Htl Hth Hp Hq (proj2 Sp) (proj2 Sq) sb D U) as [N A].
  destruct (Rlt_dec (acc n y q) (1 - TV n p q + sb)) as [Hlt|Hge]; auto. exfalso.
  destruct (Rlt_dec sb (TV n p q)) as [Hs|Hs].
  - assert (Htl0 : 0 < tl).
    { destruct (Req_dec tl 0) as [E|E]; [|lra]. rewrite E, Down_at_0 in D by auto. lra. }
    pose proof (curve_D_minimal_acc n p q f f' dom finf tl th Hp Hq ltac:(lra) Hth Hsub Hdom N
                  y Sy Hd ltac:(intros i Hi H0; left; auto) ltac:(lra)). lra.
  - assert (Sc : simplex n (clipv p q tl th)) by (split; auto; apply clip_nonneg; auto; lra).
    pose proof (acc_le_1 n y q Sy). pose proof (acc_le_1 n _ q Sc).
    assert (Ey := acc_one n y q Sy Sq ltac:(lra)).
    assert (Ec := acc_one n _ q Sc Sq ltac:(lra)).
    assert (Df n f finf p y = Df n f finf p (clipv p q tl th)).
    { unfold Df. apply sum_ext. intros i Hi. rewrite Ey, Ec; auto. }
    lra.
Qed.

(* The bisection of the solvers: if pi(s_b) is over budget, no feasible point
   accepts more than 1 - TV + s_b = A(pi(s_a)) + (s_b - s_a). *)
Theorem bisection_sound : forall eps sb tl th, thresholds n p q sb tl th ->
  eps < Df n f finf p (clipv p q tl th) ->
  forall y, feasibleZ eps y -> acc n y q <= 1 - TV n p q + sb.
Proof. intros. left. eapply beyond_budget; eauto. Qed.

(* The mentored optimum (no threshold hypothesis): let s in [0, TV - Q0] be the
   last point of the curve within budget: pi(s) meets the budget and every
   later curve point exceeds it (vacuous at the curve's end s = TV - Q0).
   Then thresholds exist, pi(s) is a distribution within budget, accepts
   1 - TV + s, and no feasible point accepts more. *)
Theorem mentored_optimal : forall eps s, 0 <= s <= TV n p q - Q0 n p q ->
  (forall tl th, thresholds n p q s tl th -> Df n f finf p (clipv p q tl th) <= eps) ->
  (forall s' tl th, s < s' <= TV n p q - Q0 n p q -> thresholds n p q s' tl th ->
     eps < Df n f finf p (clipv p q tl th)) ->
  exists tl th, thresholds n p q s tl th /\ simplex n (clipv p q tl th) /\
    Df n f finf p (clipv p q tl th) <= eps /\
    acc n (clipv p q tl th) q = 1 - TV n p q + s /\
    forall y, feasibleZ eps y -> acc n y q <= acc n (clipv p q tl th) q.
Proof.
  intros eps s Hs Hin Hlast.
  destruct (thresholds_exist n p q s Sp Sq Hs) as [tl [th [T _]]].
  pose proof T as [Htl [Hth [D U]]].
  destruct (acceptance_on_curve n p q tl th Htl Hth Hp Hq (proj2 Sp) (proj2 Sq) s D U) as [N A].
  exists tl, th. split; [auto|]. split; [split; auto; apply clip_nonneg; auto; lra|].
  split; [auto|]. split; [auto|].
  intros y Fy. rewrite A.
  destruct (Rle_dec (acc n y q) (1 - TV n p q + s)) as [Hle|Hgt]; auto. exfalso.
  set (s' := acc n y q - 1 + TV n p q).
  assert (Hs' : s < s' <= TV n p q - Q0 n p q).
  { destruct Fy as [Sy [_ [Hz _]]].
    pose proof (infinite_finf_bound n p q Hp Hq (proj2 Sq) y Sy Hz). unfold s'. lra. }
  destruct (thresholds_exist n p q s' Sp Sq ltac:(lra)) as [tl' [th' [T' _]]].
  pose proof (beyond_budget eps s' tl' th' T' (Hlast s' tl' th' Hs' T') y Fy). unfold s' in H. lra.
Qed.

(* Necessity and uniqueness for strictly convex f: with an active budget,
   every optimum is pi(s): it lies coordinatewise between p and q and accepts
   1 - TV + s. *)
Hypothesis Hstrict : forall x y, 0 < x -> dom x -> dom y -> y <> x -> f y > f x + f' x * (y - x).

Theorem optimum_on_curve : forall eps s tl th, thresholds n p q s tl th ->
  Df n f finf p (clipv p q tl th) = eps ->
  forall y, feasibleZ eps y -> acc n (clipv p q tl th) q <= acc n y q ->
  (forall i, (i < n)%nat -> y i = clipv p q tl th i) /\
  (forall i, (i < n)%nat -> Rmin (p i) (q i) <= y i <= Rmax (p i) (q i)) /\
  acc n y q = 1 - TV n p q + s /\ TV n y p = s.
Proof.
  intros eps s tl th T Hbud y Fy Hacc. pose proof T as [Htl [Hth [D U]]].
  destruct (acceptance_on_curve n p q tl th Htl Hth Hp Hq (proj2 Sp) (proj2 Sq) s D U) as [N A].
  pose proof Fy as [Sy [Hd [Hz Dy]]].
  assert (Sc : simplex n (clipv p q tl th)) by (split; auto; apply clip_nonneg; auto; lra).
  assert (E : forall i, (i < n)%nat -> y i = clipv p q tl th i).
  { destruct (Rlt_dec 0 tl) as [Htl0|Htl0].
    - apply (curve_D_unique n p q f f' dom finf tl th Hp Hq ltac:(lra) Hth Hsub Hdom Hstrict N y Sy Hd Hz Hacc).
      lra.
    - (* t_lo = 0: s = TV, pi = q accepts 1, and so does y *)
      assert (tl = 0) by lra. subst tl. rewrite Down_at_0 in D by auto.
      pose proof (acc_le_1 n y q Sy).
      intros i Hi. rewrite (acc_one n y q Sy Sq ltac:(lra) i Hi).
      rewrite (acc_one n _ q Sc Sq ltac:(lra) i Hi). reflexivity. }
  assert (Ty : TV n y p = TV n (clipv p q tl th) p) by (unfold TV; f_equal; apply sum_ext; intros; rewrite E; auto).
  assert (Ay : acc n y q = acc n (clipv p q tl th) q) by (unfold acc; apply sum_ext; intros; rewrite E; auto).
  split; [auto|]. split.
  - intros i Hi. rewrite E by auto. rewrite clip_is_gpi.
    apply (gen_between n p q); auto. intros j Hj. apply clip_caps; auto; lra.
  - split; [lra|]. rewrite Ty, <- U.
    apply (normalisation_TV n p q tl th); auto; try lra; apply Sp || apply Sq.
Qed.
End Mentored.

(* ======================================================================
   tv: the optimal set is the polytope of distributions coordinatewise
   between p and q at TV distance min(eps, TV(p, q)) from p.
   ====================================================================== *)
Theorem tv_optimal_set : forall n p q y eps, simplex n p -> simplex n q -> simplex n y ->
  0 <= eps -> TV n y p <= eps ->
  (acc n y q = Rmin 1 (1 - TV n p q + eps) <->
   (forall i, (i < n)%nat -> Rmin (p i) (q i) <= y i <= Rmax (p i) (q i)) /\
   TV n y p = Rmin eps (TV n p q)).
Proof.
  intros n p q y eps Sp Sq Sy He Hf. pose proof Sp as [Hp SP]. pose proof Sq as [Hq SQ].
  pose proof Sy as [Hy SY].
  rewrite (acc_TV n y q SY SQ).
  (* slack of the triangle inequality, coordinatewise *)
  assert (Tri : TV n p y + TV n y q - TV n p q =
                / 2 * sum n (fun i => Rabs (p i - y i) + Rabs (y i - q i) - Rabs (p i - q i))).
  { unfold TV. rewrite sum_minus, sum_plus. ring. }
  assert (Pos : forall i, (i < n)%nat -> 0 <= Rabs (p i - y i) + Rabs (y i - q i) - Rabs (p i - q i))
    by (intros; mm).
  rewrite (TV_sym n y p) in *. pose proof (TV_nonneg n y q). pose proof (TV_nonneg n p y).
  split.
  - intros A.
    assert (Eq : TV n p y + TV n y q = TV n p q /\ TV n p y = Rmin eps (TV n p q)).
    { pose proof (TV_triangle n p y q). pose proof (TV_triangle n p q y).
      rewrite (TV_sym n q y) in *.
      unfold Rmin in *. destruct (Rle_dec 1 (1 - TV n p q + eps)); destruct (Rle_dec eps (TV n p q)); lra. }
    destruct Eq as [E1 E2]. split; [|auto].
    assert (Z : forall i, (i < n)%nat -> Rabs (p i - y i) + Rabs (y i - q i) - Rabs (p i - q i) = 0).
    { apply sum_nonneg_zero; auto. lra. }
    intros i Hi. specialize (Z i Hi). mm.
  - intros [B E].
    assert (Z : sum n (fun i => Rabs (p i - y i) + Rabs (y i - q i) - Rabs (p i - q i)) = 0).
    { rewrite <- (sum_zero n). apply sum_ext. intros i Hi. specialize (B i Hi). mm. }
    rewrite Z in Tri. rewrite E in Tri.
    unfold Rmin in *. destruct (Rle_dec 1 (1 - TV n p q + eps)); destruct (Rle_dec eps (TV n p q)); lra.
Qed.
