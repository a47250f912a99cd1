(* Small budgets with a bound (docs/theory.md §6).

   Let U = {q > p}, L = {q < p}, a = p(U), b = p(L) (tokens with p_i = 0 count
   0), K = (1/a + 1/b)/2, and F(t) = f(t) - f'(1)(t - 1) the tilted generator.
   If F has the quadratic sandwich
       m/2 (t - 1)^2 <= F(t) <= M/2 (t - 1)^2      on [t0, t1] (0 < t0 <= 1 <= t1)
   (which follows from m <= F'' <= M on [t0, t1]: quad_sandwich_of_F2), then
   below the first breakpoint (every ratio of L at most 1 - s1/b, every ratio of
   U at least 1 + s1/a) and inside the window (1 - s1/b >= t0, 1 + s1/a <= t1):

   * the curve point at s <= s1 has t_lo = 1 - s/b, t_hi = 1 + s/a exactly
     (sb_thresholds) and D_f(pi(s)||p) = b F(1 - s/b) + a F(1 + s/a)
     (sb_Df), so  m K s^2 <= D_f(pi(s)||p) <= M K s^2  (sb_D_bounds);
   * for every eps in [0, m K s1^2):
        1 - TV + c1 sqrt eps  <=  A*(eps)  <=  1 - TV + c2 sqrt eps,
     c1 = 1/sqrt(M K) = sqrt(2ab/(M(a+b))), c2 = 1/sqrt(m K) = sqrt(2ab/(m(a+b)))
     (small_budget_bound): a curve point within budget accepts the left side,
     and no feasible point accepts more than the right side, including points
     with mass on {p = 0} when every subgradient is <= f_inf.
   For chi2 (F'' = 2 everywhere) m = M and the bound is an equality.

   Convexity of f is used through supporting lines at the positive points of
   dom ⊇ (0, ∞), as in Optimum.v. *)
Require Import Reals Lra Lia.
Require Import Mentored.Sums Mentored.Curve Mentored.Optimality Mentored.TargetZeros
  Mentored.Existence Mentored.Optimum.
Open Scope R_scope.

Definition pU (n : nat) (p q : nat -> R) : R :=
  sum n (fun i => if Rlt_dec (p i) (q i) then p i else 0).
Definition pL (n : nat) (p q : nat -> R) : R :=
  sum n (fun i => if Rlt_dec (q i) (p i) then p i else 0).

(* ---------- the quadratic sandwich from bounds on the second derivative ---------- *)
Lemma nonneg_of_convex_at_1 : forall (G G1 G2 : R -> R) t0 t1,
  t0 <= 1 <= t1 ->
  (forall t, t0 <= t <= t1 -> derivable_pt_lim G t (G1 t)) ->
  (forall t, t0 <= t <= t1 -> derivable_pt_lim G1 t (G2 t)) ->
  (forall t, t0 <= t <= t1 -> 0 <= G2 t) ->
  G 1 = 0 -> G1 1 = 0 ->
  forall t, t0 <= t <= t1 -> 0 <= G t.
Proof.
  intros G G1 G2 t0 t1 Ht D1 D2 H2 G0 G10 t Hti.
  destruct (Rtotal_order t 1) as [Hlt|[Heq|Hgt]].
  - destruct (MVT_cor2 G G1 t 1 Hlt) as [c [Ec Hc]].
    { intros c Hc. apply D1. lra. }
    destruct (MVT_cor2 G1 G2 c 1 ltac:(lra)) as [d [Ed Hd]].
    { intros e He. apply D2. lra. }
    assert (0 <= G2 d) by (apply H2; lra).
    assert (G1 c <= 0) by nra. nra.
  - subst. lra.
  - destruct (MVT_cor2 G G1 1 t Hgt) as [c [Ec Hc]].
    { intros c Hc. apply D1. lra. }
    destruct (MVT_cor2 G1 G2 1 c ltac:(lra)) as [d [Ed Hd]].
    { intros e He. apply D2. lra. }
    assert (0 <= G2 d) by (apply H2; lra).
    assert (0 <= G1 c) by nra. nra.
Qed.

Lemma derivable_sq : forall k x,
  derivable_pt_lim (fun t => k * ((t - 1) * (t - 1))) x (2 * k * (x - 1)).
Proof.
  intros k x eps Heps.
  assert (Hd : 0 < eps / (Rabs k + 1)) by (apply Rdiv_lt_0_compat; [lra|pose proof (Rabs_pos k); lra]).
  exists (mkposreal _ Hd). intros h Hh Hsm. simpl in Hsm.
  replace ((k * ((x + h - 1) * (x + h - 1)) - k * ((x - 1) * (x - 1))) / h - 2 * k * (x - 1))
    with (k * h) by (field; auto).
  rewrite Rabs_mult. pose proof (Rabs_pos k). pose proof (Rabs_pos h).
  assert (Rabs h * (Rabs k + 1) < eps).
  { apply (Rmult_lt_compat_r (Rabs k + 1)) in Hsm; [|lra].
    replace (eps / (Rabs k + 1) * (Rabs k + 1)) with eps in Hsm by (field; lra). lra. }
  nra.
Qed.

Lemma derivable_lin : forall k x, derivable_pt_lim (fun t => k * (t - 1)) x k.
Proof.
  intros k x eps Heps. exists (mkposreal _ Heps). intros h Hh _.
  replace ((k * (x + h - 1) - k * (x - 1)) / h - k) with 0 by (field; auto).
  rewrite Rabs_R0. auto.
Qed.

(* m <= F'' <= M on [t0, t1], F(1) = F'(1) = 0  ==>  the quadratic sandwich *)
Theorem quad_sandwich_of_F2 : forall (F F1 F2 : R -> R) t0 t1 m M,
  t0 <= 1 <= t1 ->
  (forall t, t0 <= t <= t1 -> derivable_pt_lim F t (F1 t)) ->
  (forall t, t0 <= t <= t1 -> derivable_pt_lim F1 t (F2 t)) ->
  (forall t, t0 <= t <= t1 -> m <= F2 t <= M) ->
  F 1 = 0 -> F1 1 = 0 ->
  forall t, t0 <= t <= t1 -> m / 2 * (t - 1) ^ 2 <= F t <= M / 2 * (t - 1) ^ 2.
Proof.
  intros F F1 F2 t0 t1 m M Ht D1 D2 H2 F0 F10 t Hti. split.
  - assert (0 <= F t - m / 2 * ((t - 1) * (t - 1))); [|nra].
    apply (nonneg_of_convex_at_1 (fun u => F u - m / 2 * ((u - 1) * (u - 1)))
             (fun u => F1 u - 2 * (m / 2) * (u - 1)) (fun u => F2 u - m) t0 t1); auto.
    + intros u Hu. apply (derivable_pt_lim_minus F (fun u => m / 2 * ((u - 1) * (u - 1)))).
      * auto.
      * apply derivable_sq.
    + intros u Hu. replace (F2 u - m) with (F2 u - 2 * (m / 2)) by field.
      apply (derivable_pt_lim_minus F1 (fun u => 2 * (m / 2) * (u - 1))); auto.
      apply derivable_lin.
    + intros u Hu. destruct (H2 u Hu). lra.
    + simpl. rewrite F0. ring.
    + simpl. rewrite F10. ring.
  - assert (0 <= M / 2 * ((t - 1) * (t - 1)) - F t); [|nra].
    apply (nonneg_of_convex_at_1 (fun u => M / 2 * ((u - 1) * (u - 1)) - F u)
             (fun u => 2 * (M / 2) * (u - 1) - F1 u) (fun u => M - F2 u) t0 t1); auto.
    + intros u Hu. apply (derivable_pt_lim_minus (fun u => M / 2 * ((u - 1) * (u - 1))) F).
      * apply derivable_sq.
      * auto.
    + intros u Hu. replace (M - F2 u) with (2 * (M / 2) - F2 u) by field.
      apply (derivable_pt_lim_minus (fun u => 2 * (M / 2) * (u - 1)) F1); auto.
      apply derivable_lin.
    + intros u Hu. destruct (H2 u Hu). lra.
    + simpl. rewrite F0. ring.
    + simpl. rewrite F10. ring.
Qed.

(* ---------- the curve below its first breakpoint ---------- *)
Section SmallBudget.
Variable n : nat.
Variables p q : nat -> R.
Variables (f f' : R -> R) (dom : R -> Prop) (finf : R).
Hypothesis Sp : simplex n p.
Hypothesis Sq : simplex n q.
Hypothesis Hsub : forall x y, 0 < x -> dom x -> dom y -> f y >= f x + f' x * (y - x).
Hypothesis Hdom : forall t, 0 < t -> dom t.
Variables m M t0 t1 s1 : R.
Hypothesis Hm : 0 < m.
Hypothesis HmM : m <= M.
Hypothesis Ht0 : 0 < t0 <= 1.
Hypothesis Ht1 : 1 <= t1.
(* the quadratic sandwich of the tilted generator on [t0, t1] *)
Hypothesis Hquad : forall t, t0 <= t <= t1 ->
  m / 2 * (t - 1) ^ 2 <= f t - f' 1 * (t - 1) <= M / 2 * (t - 1) ^ 2.
(* both sides of 1 carry target mass *)
Hypothesis Ha : 0 < pU n p q.
Hypothesis Hb : 0 < pL n p q.
(* the window [0, s1]: no threshold passes a ratio, and the thresholds stay in [t0, t1] *)
Hypothesis Hs1 : 0 < s1.
Hypothesis HwL : forall i, (i < n)%nat -> q i < p i -> q i <= (1 - s1 / pL n p q) * p i.
Hypothesis HwU : forall i, (i < n)%nat -> p i < q i -> (1 + s1 / pU n p q) * p i <= q i.
Hypothesis Hw0 : t0 <= 1 - s1 / pL n p q.
Hypothesis Hw1 : 1 + s1 / pU n p q <= t1.

Let a := pU n p q.
Let b := pL n p q.
Definition Kc : R := (/ pU n p q + / pL n p q) / 2.

Let Hp : forall i, (i < n)%nat -> 0 <= p i. Proof. apply Sp. Qed.
Let Hq : forall i, (i < n)%nat -> 0 <= q i. Proof. apply Sq. Qed.

Lemma Kc_pos : 0 < Kc.
Proof.
  unfold Kc. assert (0 < / pU n p q) by (apply Rinv_0_lt_compat; auto).
  assert (0 < / pL n p q) by (apply Rinv_0_lt_compat; auto). lra.
Qed.

Lemma f1_zero : f 1 = 0.
Proof. destruct (Hquad 1 ltac:(lra)). replace ((1 - 1) ^ 2) with 0 in * by ring. lra. Qed.

Let win : forall s, 0 <= s <= s1 ->
  0 <= s / b <= s1 / b /\ 0 <= s / a <= s1 / a.
Proof.
  intros s Hs. unfold a, b. split; split.
  - apply Rdiv_le_0_compat; lra.
  - unfold Rdiv. apply Rmult_le_compat_r; [left; apply Rinv_0_lt_compat|]; lra.
  - apply Rdiv_le_0_compat; lra.
  - unfold Rdiv. apply Rmult_le_compat_r; [left; apply Rinv_0_lt_compat|]; lra.
Qed.

(* Down(1 - s/b) = Up(1 + s/a) = s *)
Lemma sb_thresholds : forall s, 0 <= s <= s1 ->
  thresholds n p q s (1 - s / pL n p q) (1 + s / pU n p q).
Proof.
  intros s Hs. destruct (win s Hs) as [[Hb0 Hb1] [Ha0 Ha1]]. unfold a, b in *.
  set (u := s / pL n p q) in *. set (v := s / pU n p q) in *.
  repeat split; try lra.
  - unfold Down, DownG.
    rewrite (sum_ext n _ (fun i => u * (if Rlt_dec (q i) (p i) then p i else 0))).
    + rewrite sum_scal. fold (pL n p q). unfold u. field. lra.
    + intros i Hi. pose proof (Hp i Hi). pose proof (Hq i Hi).
      assert (u * p i <= s1 / pL n p q * p i) by (apply Rmult_le_compat_r; lra).
      assert (0 <= u * p i) by (apply Rmult_le_pos; lra).
      replace ((1 - u) * p i) with (p i - u * p i) by ring.
      destruct (Rlt_dec (q i) (p i)) as [Hl|Hl].
      * pose proof (HwL i Hi Hl).
        replace ((1 - s1 / pL n p q) * p i) with (p i - s1 / pL n p q * p i) in * by ring.
        mm.
      * mm.
  - unfold Up, UpG.
    rewrite (sum_ext n _ (fun i => v * (if Rlt_dec (p i) (q i) then p i else 0))).
    + rewrite sum_scal. fold (pU n p q). unfold v. field. lra.
    + intros i Hi. pose proof (Hp i Hi). pose proof (Hq i Hi).
      assert (v * p i <= s1 / pU n p q * p i) by (apply Rmult_le_compat_r; lra).
      assert (0 <= v * p i) by (apply Rmult_le_pos; lra).
      replace ((1 + v) * p i) with (p i + v * p i) by ring.
      destruct (Rlt_dec (p i) (q i)) as [Hl|Hl].
      * pose proof (HwU i Hi Hl).
        replace ((1 + s1 / pU n p q) * p i) with (p i + s1 / pU n p q * p i) in * by ring.
        mm.
      * mm.
Qed.

(* D_f(pi(s) || p) = b f(t_lo) + a f(t_hi) *)
Lemma sb_Df_raw : forall s, 0 <= s <= s1 ->
  Df n f finf p (clipv p q (1 - s / pL n p q) (1 + s / pU n p q)) =
  pL n p q * f (1 - s / pL n p q) + pU n p q * f (1 + s / pU n p q).
Proof.
  intros s Hs. destruct (win s Hs) as [[Hb0 Hb1] [Ha0 Ha1]]. unfold a, b in *.
  pose proof f1_zero as F1.
  set (u := s / pL n p q) in *. set (v := s / pU n p q) in *.
  unfold Df, pL, pU. rewrite !(Rmult_comm _ (f _)), <- !sum_scal, <- sum_plus.
  apply sum_ext. intros i Hi. pose proof (Hp i Hi). pose proof (Hq i Hi).
  assert (u * p i <= s1 / pL n p q * p i) by (apply Rmult_le_compat_r; lra).
  assert (0 <= u * p i) by (apply Rmult_le_pos; lra).
  assert (v * p i <= s1 / pU n p q * p i) by (apply Rmult_le_compat_r; lra).
  assert (0 <= v * p i) by (apply Rmult_le_pos; lra).
  unfold dterm, clipv, cpt.
  replace ((1 - u) * p i) with (p i - u * p i) by ring.
  replace ((1 + v) * p i) with (p i + v * p i) by ring.
  destruct (Rlt_dec 0 (p i)) as [Hpos|Hz].
  - destruct (Rlt_dec (q i) (p i)) as [Hl|Hl].
    + destruct (Rlt_dec (p i) (q i)) as [Hu|Hu]; [lra|].
      pose proof (HwL i Hi Hl).
      replace ((1 - s1 / pL n p q) * p i) with (p i - s1 / pL n p q * p i) in * by ring.
      replace (Rmax (p i - u * p i) (Rmin (q i) (p i + v * p i))) with ((1 - u) * p i) by mm.
      replace ((1 - u) * p i / p i) with (1 - u) by (field; lra). ring.
    + destruct (Rlt_dec (p i) (q i)) as [Hu|Hu].
      * pose proof (HwU i Hi Hu).
        replace ((1 + s1 / pU n p q) * p i) with (p i + s1 / pU n p q * p i) in * by ring.
        replace (Rmax (p i - u * p i) (Rmin (q i) (p i + v * p i))) with ((1 + v) * p i) by mm.
        replace ((1 + v) * p i / p i) with (1 + v) by (field; lra). ring.
      * assert (q i = p i) by lra.
        replace (Rmax (p i - u * p i) (Rmin (q i) (p i + v * p i))) with (p i) by mm.
        replace (p i / p i) with 1 by (field; lra). rewrite F1. ring.
  - assert (E : p i = 0) by lra. rewrite E in *.
    replace (Rmax (0 - u * 0) (Rmin (q i) (0 + v * 0))) with 0 by mm.
    destruct (Rlt_dec (q i) 0); destruct (Rlt_dec 0 (q i)); ring.
Qed.

(* ... = b F(1 - s/b) + a F(1 + s/a), F the tilted generator *)
Theorem sb_Df : forall s, 0 <= s <= s1 ->
  Df n f finf p (clipv p q (1 - s / pL n p q) (1 + s / pU n p q)) =
  pL n p q * (f (1 - s / pL n p q) - f' 1 * ((1 - s / pL n p q) - 1)) +
  pU n p q * (f (1 + s / pU n p q) - f' 1 * ((1 + s / pU n p q) - 1)).
Proof.
  intros s Hs. rewrite sb_Df_raw by auto. field. split; lra.
Qed.

(* m K s^2 <= D_f(pi(s) || p) <= M K s^2 *)
Theorem sb_D_bounds : forall s, 0 <= s <= s1 ->
  m * Kc * s ^ 2 <= Df n f finf p (clipv p q (1 - s / pL n p q) (1 + s / pU n p q)) <=
  M * Kc * s ^ 2.
Proof.
  intros s Hs. rewrite sb_Df by auto. destruct (win s Hs) as [[Hb0 Hb1] [Ha0 Ha1]].
  unfold a, b in *.
  destruct (Hquad (1 - s / pL n p q)) as [L1 L2]; [lra|].
  destruct (Hquad (1 + s / pU n p q)) as [U1 U2]; [lra|].
  assert (EL : pL n p q * (m / 2 * ((1 - s / pL n p q) - 1) ^ 2) = m / 2 * s ^ 2 / pL n p q)
    by (field; lra).
  assert (EL' : pL n p q * (M / 2 * ((1 - s / pL n p q) - 1) ^ 2) = M / 2 * s ^ 2 / pL n p q)
    by (field; lra).
  assert (EU : pU n p q * (m / 2 * ((1 + s / pU n p q) - 1) ^ 2) = m / 2 * s ^ 2 / pU n p q)
    by (field; lra).
  assert (EU' : pU n p q * (M / 2 * ((1 + s / pU n p q) - 1) ^ 2) = M / 2 * s ^ 2 / pU n p q)
    by (field; lra).
  assert (Km : m * Kc * s ^ 2 = m / 2 * s ^ 2 / pL n p q + m / 2 * s ^ 2 / pU n p q)
    by (unfold Kc; field; split; lra).
  assert (KM : M * Kc * s ^ 2 = M / 2 * s ^ 2 / pL n p q + M / 2 * s ^ 2 / pU n p q)
    by (unfold Kc; field; split; lra).
  rewrite Km, KM, <- EL, <- EL', <- EU, <- EU'.
  split; apply Rplus_le_compat; apply Rmult_le_compat_l; lra.
Qed.

Definition c_lo : R := / sqrt (M * Kc).
Definition c_hi : R := / sqrt (m * Kc).

Lemma sqrt_form : forall eps c, 0 < c -> sqrt (eps / c) = / sqrt c * sqrt eps.
Proof. intros eps c Hc. rewrite sqrt_div_alt by auto. unfold Rdiv. ring. Qed.

Lemma radius : forall eps c, 0 < c -> 0 <= eps ->
  0 <= / sqrt c * sqrt eps /\ (/ sqrt c * sqrt eps) ^ 2 * c = eps.
Proof.
  intros eps c Hc He. rewrite <- sqrt_form by auto. split; [apply sqrt_pos|].
  rewrite pow2_sqrt by (apply Rdiv_le_0_compat; lra). field. lra.
Qed.

(* The two-sided bound: for eps in [0, m K s1^2),
     1 - TV + c1 sqrt eps <= A*(eps) <= 1 - TV + c2 sqrt eps. *)
Theorem small_budget_bound : forall eps, 0 <= eps -> eps < m * Kc * s1 ^ 2 ->
  (exists tl th, thresholds n p q (c_lo * sqrt eps) tl th /\
     simplex n (clipv p q tl th) /\
     (forall i, (i < n)%nat -> p i = 0 -> clipv p q tl th i = 0) /\
     Df n f finf p (clipv p q tl th) <= eps /\
     acc n (clipv p q tl th) q = 1 - TV n p q + c_lo * sqrt eps) /\
  (forall y, simplex n y -> (forall i, (i < n)%nat -> 0 < p i -> dom (y i / p i)) ->
     ((forall i, (i < n)%nat -> p i = 0 -> y i = 0) \/ (forall t, 0 < t -> f' t <= finf)) ->
     Df n f finf p y <= eps ->
     acc n y q <= 1 - TV n p q + c_hi * sqrt eps).
Proof.
  intros eps He Hsmall. pose proof Kc_pos as HK.
  assert (HMK : 0 < M * Kc) by (apply Rmult_lt_0_compat; lra).
  assert (HmK : 0 < m * Kc) by (apply Rmult_lt_0_compat; lra).
  assert (HmM' : m * Kc <= M * Kc) by (apply Rmult_le_compat_r; lra).
  split.
  - destruct (radius eps (M * Kc) HMK He) as [S0 S2]. fold c_lo in S0, S2.
    set (sl := c_lo * sqrt eps) in *.
    assert (Sl : sl < s1).
    { assert (sl ^ 2 * (m * Kc) <= sl ^ 2 * (M * Kc))
        by (apply Rmult_le_compat_l; [nra|lra]).
      assert (sl ^ 2 < s1 ^ 2) by nra. nra. }
    pose proof (sb_thresholds sl ltac:(lra)) as T.
    exists (1 - sl / pL n p q), (1 + sl / pU n p q).
    pose proof T as [Htl [Hth [D U]]].
    destruct (acceptance_on_curve n p q _ _ Htl Hth Hp Hq (proj2 Sp) (proj2 Sq) sl D U) as [N A].
    split; [auto|]. split; [split; auto; apply clip_nonneg; auto; lra|].
    split.
    + intros i Hi E. unfold clipv, cpt. rewrite E, !Rmult_0_r. pose proof (Hq i Hi). mm.
    + split; [|auto]. destruct (sb_D_bounds sl ltac:(lra)). lra.
  - intros y Sy Hd Hz Dy.
    destruct (radius eps (m * Kc) HmK He) as [S0 S2]. fold c_hi in S0, S2.
    set (su := c_hi * sqrt eps) in *.
    assert (Su : su < s1) by (assert (su ^ 2 < s1 ^ 2) by nra; nra).
    destruct (Rle_dec (acc n y q) (1 - TV n p q + su)) as [Hle|Hgt]; auto. exfalso.
    set (s' := Rmin (acc n y q - 1 + TV n p q) s1).
    assert (Hs' : su < s' <= s1) by (unfold s'; unfold Rmin; destruct (Rle_dec _ _); lra).
    assert (Hacc' : s' <= acc n y q - 1 + TV n p q) by (unfold s'; apply Rmin_l).
    pose proof (sb_thresholds s' ltac:(lra)) as T.
    pose proof T as [Htl [Hth [D U]]].
    destruct (acceptance_on_curve n p q _ _ Htl Hth Hp Hq (proj2 Sp) (proj2 Sq) s' D U) as [N A].
    destruct (win s' ltac:(lra)) as [[Hb0 Hb1] _]. unfold b in *.
    assert (Htl0 : 0 < 1 - s' / pL n p q <= 1) by lra.
    assert (Zok : zero_ok n p f' finf (1 + s' / pU n p q) y).
    { intros i Hi H0. destruct Hz as [Hz|Hf]; [left; auto|right; apply Hf; lra]. }
    pose proof (curve_D_minimal_acc n p q f f' dom finf _ _ Hp Hq Htl0 Hth Hsub Hdom N
                  y Sy Hd Zok ltac:(lra)) as Dmin.
    destruct (sb_D_bounds s' ltac:(lra)) as [Dlo _].
    assert (su ^ 2 < s' ^ 2) by nra.
    assert (m * Kc * su ^ 2 < m * Kc * s' ^ 2) by (apply Rmult_lt_compat_l; auto).
    nra.
Qed.
End SmallBudget.
