(* Serving (docs/theory.md §8): hard zeros, and the verifier of a one-hot
   (token-only) drafter q = delta_x. *)
Require Import Reals Lra Lia.
Require Import Mentored.Sums Mentored.Curve Mentored.Optimality Mentored.TargetZeros
  Mentored.Existence Mentored.Optimum.
Open Scope R_scope.

(* ---------- hard zeros: the problem on supp(p) ----------
   With pi = 0 imposed on Z = {p = 0}, D_f charges nothing on Z whatever f_inf
   is (Df_hard_zero), so the problem is mentored_optimal on supp(p): the last
   curve point within budget is optimal among the points vanishing on Z, for
   every value of f_inf; it vanishes on Z itself and accepts at most 1 - Q0. *)
Lemma Df_hard_zero : forall n f finf finf' p y,
  (forall i, (i < n)%nat -> 0 <= p i) ->
  (forall i, (i < n)%nat -> p i = 0 -> y i = 0) ->
  Df n f finf p y = Df n f finf' p y.
Proof.
  intros n f finf finf' p y Hp H. unfold Df, dterm. apply sum_ext. intros i Hi.
  destruct (Rlt_dec 0 (p i)); [reflexivity|].
  pose proof (Hp i Hi). rewrite (H i Hi) by lra. ring.
Qed.

Theorem keep_zeros_optimal : forall n p q (f f' : R -> R) (dom : R -> Prop) finf eps s,
  simplex n p -> simplex n q ->
  (forall x y, 0 < x -> dom x -> dom y -> f y >= f x + f' x * (y - x)) ->
  (forall t, 0 < t -> dom t) ->
  0 <= s <= TV n p q - Q0 n p q ->
  (forall tl th, thresholds n p q s tl th -> Df n f finf p (clipv p q tl th) <= eps) ->
  (forall s' tl th, s < s' <= TV n p q - Q0 n p q -> thresholds n p q s' tl th ->
     eps < Df n f finf p (clipv p q tl th)) ->
  exists tl th, thresholds n p q s tl th /\ simplex n (clipv p q tl th) /\
    (forall i, (i < n)%nat -> p i = 0 -> clipv p q tl th i = 0) /\
    acc n (clipv p q tl th) q = 1 - TV n p q + s /\
    acc n (clipv p q tl th) q <= 1 - Q0 n p q /\
    forall (finf' : R) y, feasibleZ n p f dom finf' eps y -> acc n y q <= acc n (clipv p q tl th) q.
Proof.
  intros n p q f f' dom finf eps s Sp Sq Hsub Hdom Hs Hin Hlast.
  destruct (mentored_optimal n p q f f' dom finf Sp Sq Hsub Hdom eps s Hs Hin Hlast)
    as [tl [th [T [Sc [Dc [A Opt]]]]]].
  exists tl, th. split; [auto|]. split; [auto|].
  assert (Z : forall i, (i < n)%nat -> p i = 0 -> clipv p q tl th i = 0).
  { intros i Hi E. unfold clipv, cpt. rewrite E, !Rmult_0_r. pose proof (proj1 Sq i Hi). mm. }
  split; [auto|]. split; [auto|]. split.
  - apply (infinite_finf_bound n p q (proj1 Sp) (proj1 Sq) (proj2 Sq)); auto.
  - intros finf' y [Sy [Hd [Hz Dy]]]. apply Opt. split; [auto|]. split; [auto|]. split; [auto|].
    rewrite (Df_hard_zero n f finf finf' p y (proj1 Sp) Hz). auto.
Qed.

(* ---------- the one-hot drafter q = delta_x ---------- *)
Definition onehot (x : nat) (i : nat) : R := if Nat.eq_dec i x then 1 else 0.

Lemma sum_update : forall n x c (d : nat -> R), (x < n)%nat ->
  sum n (fun i => if Nat.eq_dec i x then c else d i) = sum n d + (c - d x).
Proof.
  induction n; intros x c d Hx; [lia|]. simpl.
  destruct (Nat.eq_dec n x) as [->|Hne].
  - rewrite (sum_ext x _ d) by (intros i Hi; destruct (Nat.eq_dec i x); [lia|reflexivity]). ring.
  - rewrite IHn by lia. ring.
Qed.

Section OneHot.
Variable n x : nat.
Variable p : nat -> R.
Hypothesis Sp : simplex n p.
Hypothesis Hx : (x < n)%nat.
Hypothesis Hpx : 0 < p x < 1.
Variables (f : R -> R) (finf : R).

(* the point of the curve accepting a: pi_x = a, pi_i = t_lo p_i elsewhere *)
Definition oh_tl (a : R) : R := (1 - a) / (1 - p x).
Definition oh_th (a : R) : R := a / p x.
Definition oh_pi (a : R) (i : nat) : R := if Nat.eq_dec i x then a else oh_tl a * p i.
(* the one-dimensional budget function of docs/theory.md §8 *)
Definition oh_D (a : R) : R := p x * f (a / p x) + (1 - p x) * f ((1 - a) / (1 - p x)).

Let Hp : forall i, (i < n)%nat -> 0 <= p i. Proof. apply Sp. Qed.

Lemma oh_tl_range : forall a, p x <= a <= 1 -> 0 <= oh_tl a <= 1.
Proof.
  intros a Ha. unfold oh_tl. split.
  - apply Rdiv_le_0_compat; lra.
  - apply (Rmult_le_reg_r (1 - p x)); [lra|].
    replace ((1 - a) / (1 - p x) * (1 - p x)) with (1 - a) by (field; lra). lra.
Qed.

Lemma oh_th_range : forall a, p x <= a <= 1 -> 1 <= oh_th a.
Proof.
  intros a Ha. unfold oh_th. apply (Rmult_le_reg_r (p x)); [lra|].
  replace (a / p x * p x) with a by (field; lra). lra.
Qed.

(* it is the clip point with t_lo = (1 - a)/(1 - p_x), t_hi = a / p_x *)
Lemma oh_is_clip : forall a, p x <= a <= 1 ->
  forall i, (i < n)%nat -> clipv p (onehot x) (oh_tl a) (oh_th a) i = oh_pi a i.
Proof.
  intros a Ha i Hi. pose proof (oh_tl_range a Ha). pose proof (Hp i Hi).
  unfold clipv, cpt, onehot, oh_pi. destruct (Nat.eq_dec i x) as [->|Hne].
  - replace (oh_th a * p x) with a by (unfold oh_th; field; lra).
    assert (oh_tl a * p x <= a) by nra. mm.
  - assert (0 <= oh_tl a * p i) by nra.
    assert (0 <= oh_th a * p i) by (pose proof (oh_th_range a Ha); nra). mm.
Qed.

Lemma oh_sum : forall a, p x <= a <= 1 -> sum n (oh_pi a) = 1.
Proof.
  intros a Ha. unfold oh_pi. rewrite sum_update by auto. rewrite sum_scal, (proj2 Sp).
  unfold oh_tl. field. lra.
Qed.

Lemma oh_simplex : forall a, p x <= a <= 1 -> simplex n (oh_pi a).
Proof.
  intros a Ha. split; [|apply oh_sum; auto]. intros i Hi. pose proof (oh_tl_range a Ha).
  pose proof (Hp i Hi). unfold oh_pi. destruct (Nat.eq_dec i x); nra.
Qed.

(* against delta_x the acceptance of any distribution y is y_x *)
Lemma acc_onehot : forall y, simplex n y -> acc n y (onehot x) = y x.
Proof.
  intros y [Hy Sy]. unfold acc.
  assert (Hyx : y x <= 1).
  { rewrite <- Sy. apply (sum_ge_term n y x); auto. }
  rewrite (sum_ext n _ (fun i => if Nat.eq_dec i x then y x else 0)).
  - rewrite sum_update, sum_zero by auto. ring.
  - intros i Hi. pose proof (Hy i Hi). unfold onehot. destruct (Nat.eq_dec i x) as [->|]; mm.
Qed.

Lemma oh_acc : forall a, p x <= a <= 1 -> acc n (oh_pi a) (onehot x) = a.
Proof.
  intros a Ha. rewrite acc_onehot by (apply oh_simplex; auto). unfold oh_pi.
  destruct (Nat.eq_dec x x); [reflexivity|congruence].
Qed.

(* D_f(pi(a) || p) = p_x f(a/p_x) + (1 - p_x) f((1 - a)/(1 - p_x)) *)
Lemma oh_Df : forall a, p x <= a <= 1 -> Df n f finf p (oh_pi a) = oh_D a.
Proof.
  intros a Ha. unfold Df, oh_D.
  rewrite (sum_ext n _ (fun i => if Nat.eq_dec i x then p x * f (a / p x) else f (oh_tl a) * p i)).
  - rewrite sum_update, sum_scal by auto.
    rewrite (proj2 Sp). unfold oh_tl. ring.
  - intros i Hi. pose proof (Hp i Hi). unfold dterm, oh_pi.
    destruct (Nat.eq_dec i x) as [->|Hne].
    + destruct (Rlt_dec 0 (p x)); [reflexivity|lra].
    + destruct (Rlt_dec 0 (p i)).
      * replace (oh_tl a * p i / p i) with (oh_tl a) by (field; lra). ring.
      * assert (p i = 0) by lra. rewrite H0. ring.
Qed.

(* the curve point accepting a sits at s = a - p_x *)
Lemma oh_thresholds : forall a, p x <= a <= 1 ->
  thresholds n p (onehot x) (a - p x) (oh_tl a) (oh_th a).
Proof.
  intros a Ha. pose proof (oh_tl_range a Ha). pose proof (oh_th_range a Ha).
  assert (Sq : simplex n (onehot x)).
  { split; [intros i Hi; unfold onehot; destruct (Nat.eq_dec i x); lra|].
    unfold onehot. rewrite sum_update, sum_zero by auto. ring. }
  assert (N : sum n (clipv p (onehot x) (oh_tl a) (oh_th a)) = 1).
  { rewrite (sum_ext n _ (oh_pi a)) by (apply oh_is_clip; auto). apply oh_sum; auto. }
  pose proof N as N'. apply (normalisation n p (onehot x)) in N'; auto; try apply Sp; try apply Sq; try lra.
  pose proof (normalisation_TV n p (onehot x) (oh_tl a) (oh_th a)) as T.
  assert (Acc : acc n (clipv p (onehot x) (oh_tl a) (oh_th a)) (onehot x) = a).
  { unfold acc. rewrite (sum_ext n _ (fun i => Rmin (oh_pi a i) (onehot x i)))
      by (intros; rewrite oh_is_clip; auto). apply oh_acc; auto. }
  assert (Hacc := acceptance_on_curve n p (onehot x) (oh_tl a) (oh_th a) ltac:(lra) ltac:(lra)
                   Hp (proj1 Sq) (proj2 Sp) (proj2 Sq) _ eq_refl (eq_sym N')).
  destruct Hacc as [_ Hacc].
  assert (TVpq : TV n p (onehot x) = 1 - p x).
  { pose proof (acc_TV n p (onehot x) (proj2 Sp) (proj2 Sq)).
    pose proof (acc_onehot p Sp). lra. }
  rewrite Acc, TVpq in Hacc.
  unfold thresholds. repeat split; lra.
Qed.

(* The one-hot verifier is optimal: if pi(a) is within budget and every
   larger acceptance a' in (a, 1] exceeds it (the bisection's answer, or a = 1),
   no distribution y within budget (vanishing where p does) accepts more than
   a against delta_x. *)
Variables (f' : R -> R) (dom : R -> Prop).
Hypothesis Hsub : forall u v, 0 < u -> dom u -> dom v -> f v >= f u + f' u * (v - u).
Hypothesis Hdom : forall t, 0 < t -> dom t.

Theorem onehot_optimal : forall eps a, p x <= a <= 1 ->
  oh_D a <= eps ->
  (forall a', a < a' <= 1 -> eps < oh_D a') ->
  simplex n (oh_pi a) /\ Df n f finf p (oh_pi a) <= eps /\
  acc n (oh_pi a) (onehot x) = a /\
  forall y, feasibleZ n p f dom finf eps y -> acc n y (onehot x) <= a.
Proof.
  intros eps a Ha Hin Hlast. split; [apply oh_simplex; auto|].
  split; [rewrite oh_Df; auto|]. split; [apply oh_acc; auto|].
  intros y Fy. pose proof Fy as [Sy _].
  destruct (Rle_dec (acc n y (onehot x)) a) as [Hle|Hgt]; auto. exfalso.
  set (b := acc n y (onehot x)).
  assert (Hb : a < b <= 1) by (unfold b; rewrite acc_onehot by auto; split;
    [rewrite acc_onehot in Hgt by auto; lra| rewrite <- (proj2 Sy); apply sum_ge_term; auto; apply Sy]).
  assert (Sq : simplex n (onehot x)).
  { split; [intros i Hi; unfold onehot; destruct (Nat.eq_dec i x); lra|].
    unfold onehot. rewrite sum_update, sum_zero by auto. ring. }
  pose proof (oh_thresholds b ltac:(lra)) as T.
  assert (Over : eps < Df n f finf p (clipv p (onehot x) (oh_tl b) (oh_th b))).
  { unfold Df. rewrite (sum_ext n _ (fun i => dterm f finf (p i) (oh_pi b i)))
      by (intros; rewrite oh_is_clip; auto; lra).
    fold (Df n f finf p (oh_pi b)). rewrite oh_Df by lra. apply Hlast; lra. }
  pose proof (beyond_budget n p (onehot x) f f' dom finf Sp Sq Hsub Hdom eps _ _ _ T Over y Fy).
  assert (TVpq : TV n p (onehot x) = 1 - p x).
  { pose proof (acc_TV n p (onehot x) (proj2 Sp) (proj2 Sq)).
    pose proof (acc_onehot p Sp). lra. }
  fold b in H. lra.
Qed.

(* The rejection residual (pi - delta_x)_+ normalised is p without x,
   renormalised (when t_lo > 0, i.e. a < 1). *)
Lemma onehot_residual : forall a, p x <= a < 1 ->
  sum n (fun i => Rpos (oh_pi a i - onehot x i)) = oh_tl a * (1 - p x) /\
  forall i, (i < n)%nat -> i <> x ->
    Rpos (oh_pi a i - onehot x i) / (oh_tl a * (1 - p x)) = p i / (1 - p x).
Proof.
  intros a Ha. assert (Htl : 0 < oh_tl a) by (unfold oh_tl; apply Rdiv_lt_0_compat; lra).
  assert (E : forall i, (i < n)%nat -> Rpos (oh_pi a i - onehot x i) =
            if Nat.eq_dec i x then 0 else oh_tl a * p i).
  { intros i Hi. pose proof (Hp i Hi). unfold oh_pi, onehot.
    destruct (Nat.eq_dec i x); unfold Rpos, Rmax; destruct (Rle_dec 0 _); nra. }
  split.
  - rewrite (sum_ext n _ _ E), sum_update, sum_scal, (proj2 Sp) by auto. ring.
  - intros i Hi Hne. rewrite (E i Hi). destruct (Nat.eq_dec i x); [congruence|].
    field. split; lra.
Qed.
(* The one-hot budget function is nondecreasing on [p_x, 1] (docs/theory.md §8),
   which its bisection relies on: with the tilted F(t) = f(t) - f'(1)(t - 1),
   oh_D(a) = p_x F(a/p_x) + (1 - p_x) F((1 - a)/(1 - p_x)), the first ratio
   moving up from 1 and the second down from 1. At a = 1 the second ratio is 0,
   which must lie in dom (f(0) finite) for the statement to say anything. *)
Lemma tilt_up : forall c1 c2, 1 <= c1 <= c2 ->
  f c1 - f' 1 * (c1 - 1) <= f c2 - f' 1 * (c2 - 1).
Proof.
  intros c1 c2 H.
  pose proof (Hsub c1 c2 ltac:(lra) (Hdom c1 ltac:(lra)) (Hdom c2 ltac:(lra))).
  pose proof (Hsub 1 c1 ltac:(lra) (Hdom 1 ltac:(lra)) (Hdom c1 ltac:(lra))).
  pose proof (Hsub c1 1 ltac:(lra) (Hdom c1 ltac:(lra)) (Hdom 1 ltac:(lra))).
  assert (f' 1 <= f' c1) by (destruct (Req_dec c1 1) as [->|]; [lra|nra]). nra.
Qed.

Lemma tilt_down : forall c1 c2, 0 < c1 -> 0 <= c2 <= c1 -> c1 <= 1 -> dom c2 ->
  f c1 - f' 1 * (c1 - 1) <= f c2 - f' 1 * (c2 - 1).
Proof.
  intros c1 c2 H0 H H1 D2.
  pose proof (Hsub c1 c2 H0 (Hdom c1 H0) D2).
  pose proof (Hsub 1 c1 ltac:(lra) (Hdom 1 ltac:(lra)) (Hdom c1 H0)).
  pose proof (Hsub c1 1 H0 (Hdom c1 H0) (Hdom 1 ltac:(lra))).
  assert (f' c1 <= f' 1) by (destruct (Req_dec c1 1) as [->|]; [lra|nra]). nra.
Qed.

Theorem oh_D_monotone : forall a1 a2, p x <= a1 <= a2 -> a2 <= 1 -> (a2 < 1 \/ dom 0) ->
  oh_D a1 <= oh_D a2.
Proof.
  intros a1 a2 H12 H2 Hd.
  destruct (Req_dec a1 1) as [E|Ne]; [assert (a2 = 1) by lra; subst; lra|].
  assert (T : forall a, oh_D a = p x * (f (a / p x) - f' 1 * (a / p x - 1)) +
            (1 - p x) * (f ((1 - a) / (1 - p x)) - f' 1 * ((1 - a) / (1 - p x) - 1))).
  { intros a. unfold oh_D. field. lra. }
  rewrite !T.
  assert (U : 1 <= a1 / p x <= a2 / p x).
  { replace (a1 / p x) with (1 + (a1 - p x) / p x) by (field; lra).
    replace (a2 / p x) with (1 + (a1 - p x) / p x + (a2 - a1) / p x) by (field; lra).
    assert (0 <= (a1 - p x) / p x) by (apply Rdiv_le_0_compat; lra).
    assert (0 <= (a2 - a1) / p x) by (apply Rdiv_le_0_compat; lra). lra. }
  assert (V : 0 <= (1 - a2) / (1 - p x) <= (1 - a1) / (1 - p x) /\
              0 < (1 - a1) / (1 - p x) <= 1).
  { replace ((1 - a1) / (1 - p x)) with ((1 - a2) / (1 - p x) + (a2 - a1) / (1 - p x))
      by (field; lra).
    assert (0 <= (1 - a2) / (1 - p x)) by (apply Rdiv_le_0_compat; lra).
    assert (0 <= (a2 - a1) / (1 - p x)) by (apply Rdiv_le_0_compat; lra).
    assert (0 < (1 - a1) / (1 - p x)) by (apply Rdiv_lt_0_compat; lra).
    assert (1 - (1 - a1) / (1 - p x) = (a1 - p x) / (1 - p x)) by (field; lra).
    assert (0 <= (a1 - p x) / (1 - p x)) by (apply Rdiv_le_0_compat; lra).
    replace ((1 - a2) / (1 - p x) + (a2 - a1) / (1 - p x)) with ((1 - a1) / (1 - p x))
      by (field; lra). lra. }
  assert (D2 : dom ((1 - a2) / (1 - p x))).
  { destruct Hd as [Hlt|H0].
    - apply Hdom. apply Rdiv_lt_0_compat; lra.
    - destruct (Req_dec a2 1) as [->|Ne2].
      + replace ((1 - 1) / (1 - p x)) with 0 by (field; lra). auto.
      + apply Hdom. apply Rdiv_lt_0_compat; lra. }
  pose proof (tilt_up (a1 / p x) (a2 / p x) U).
  pose proof (tilt_down ((1 - a1) / (1 - p x)) ((1 - a2) / (1 - p x))
                (proj1 (proj2 V)) (proj1 V) (proj2 (proj2 V)) D2).
  apply Rplus_le_compat; apply Rmult_le_compat_l; lra.
Qed.
End OneHot.

(* closed forms (docs/theory.md §8): tv gives D = a - p_x, chi2 gives
   D = (a - p_x)^2 / (p_x (1 - p_x)). *)
Lemma onehot_tv : forall px a, 0 < px < 1 -> px <= a <= 1 ->
  px * (Rabs (a / px - 1) / 2) + (1 - px) * (Rabs ((1 - a) / (1 - px) - 1) / 2) = a - px.
Proof.
  intros px a Hp Ha.
  replace (a / px - 1) with ((a - px) / px) by (field; lra).
  replace ((1 - a) / (1 - px) - 1) with (- ((a - px) / (1 - px))) by (field; lra).
  rewrite Rabs_Ropp, !Rabs_right by (apply Rle_ge, Rdiv_le_0_compat; lra). field. lra.
Qed.

Lemma onehot_chi2 : forall px a, 0 < px < 1 ->
  px * (a / px - 1) ^ 2 + (1 - px) * ((1 - a) / (1 - px) - 1) ^ 2 =
  (a - px) ^ 2 / (px * (1 - px)).
Proof. intros px a Hp. field. lra. Qed.
