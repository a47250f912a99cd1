(* Theorem 2 (clip form is optimal: KKT sufficiency), the optimality part of
   Theorem 7 (target zeros), and the Lagrangian argument they share.

   Convexity of f is assumed only through supporting lines:
       f y >= f x + f' x (y - x)     for x, y in dom,
   where f' is any subgradient selection (so non-differentiable f such as
   tv are covered; f' need not be the derivative). *)
Require Import Reals Lra Lia.
Require Import Mentored.Sums Mentored.Curve.
Open Scope R_scope.

(* D_f(x || p) = sum_{p_i > 0} p_i f(x_i / p_i) + finf * sum_{p_i = 0} x_i *)
Definition dterm (f : R -> R) (finf p x : R) : R :=
  if Rlt_dec 0 p then p * f (x / p) else finf * x.
Definition Df (n : nat) (f : R -> R) (finf : R) (p x : nat -> R) : R :=
  sum n (fun i => dterm f finf (p i) (x i)).

(* ---------- per-coordinate supergradient (KKT) lemma ----------
   phi(x) = min(x, r) - lam F(x) - mu x  is maximised over x >= 0 at t when
   F has a supporting line of slope g at t and c = lam g + mu is a
   supergradient of min(., r) at t. *)
Lemma kkt1 : forall (F : R -> R) g t r lam mu x,
  0 <= lam -> 0 <= x -> 0 <= t ->
  F x >= F t + g * (x - t) ->
  (t < r -> lam * g + mu = 1 \/ (t = 0 /\ 1 <= lam * g + mu)) ->
  (r < t -> lam * g + mu = 0) ->
  (t = r -> (0 <= lam * g + mu <= 1) \/ (t = 0 /\ 0 <= lam * g + mu)) ->
  Rmin x r - lam * F x - mu * x <= Rmin t r - lam * F t - mu * t.
Proof.
  intros F g t r lam mu x Hl Hx Ht Hs H1 H2 H3.
  assert (E : lam * F x - lam * F t >= lam * g * (x - t)) by nra.
  assert (K : Rmin x r - Rmin t r <= (lam * g + mu) * (x - t)).
  { destruct (Rtotal_order t r) as [Hlt|[Heq|Hgt]].
    - destruct (H1 Hlt) as [Hc|[Ht0 Hc]].
      + rewrite Hc. mm.
      + subst t. assert ((lam * g + mu) * x >= x) by nra.
        unfold Rmin in *. destruct (Rle_dec x r); destruct (Rle_dec 0 r); lra.
    - destruct (H3 Heq) as [[Hc0 Hc1]|[Ht0 Hc]].
      + subst r. unfold Rmin; destruct (Rle_dec x t); destruct (Rle_dec t t); nra.
      + subst t r. assert (0 <= (lam * g + mu) * x) by nra.
        unfold Rmin in *. destruct (Rle_dec x 0); destruct (Rle_dec 0 0); lra.
    - rewrite (H2 Hgt). mm. }
  nra.
Qed.

(* ---------- the Lagrangian argument ---------- *)
Lemma sum_lin3 : forall n a b c (l m : R),
  sum n (fun i => a i - l * b i - m * c i) = sum n a - l * sum n b - m * sum n c.
Proof. intros. rewrite sum_minus, sum_minus, sum_scal, sum_scal. reflexivity. Qed.

Lemma lagrange_sufficiency : forall n (p q x y : nat -> R) f finf lam mu eps,
  0 <= lam -> sum n x = 1 -> sum n y = 1 ->
  (Df n f finf p x = eps \/ lam = 0) -> Df n f finf p y <= eps ->
  (forall i, (i < n)%nat ->
     Rmin (y i) (q i) - lam * dterm f finf (p i) (y i) - mu * y i
     <= Rmin (x i) (q i) - lam * dterm f finf (p i) (x i) - mu * x i) ->
  acc n y q <= acc n x q.
Proof.
  intros n p q x y f finf lam mu eps Hl Sx Sy Hb Hy Hc.
  pose proof (sum_le n _ _ Hc) as S. rewrite !sum_lin3 in S.
  unfold acc, Df in *. rewrite Sx, Sy in S.
  destruct Hb as [Hb|Hb].
  - rewrite Hb in S. nra.
  - subst lam. lra.
Qed.

(* ---------- scaling helpers ---------- *)
Lemma Rmin_scale : forall p u r, 0 < p -> Rmin (p * u) (p * r) = p * Rmin u r.
Proof. intros. unfold Rmin. destruct (Rle_dec (p*u) (p*r)); destruct (Rle_dec u r); nra. Qed.

Lemma Rmax_scale : forall p u r, 0 < p -> Rmax (p * u) (p * r) = p * Rmax u r.
Proof. intros. unfold Rmax. destruct (Rle_dec (p*u) (p*r)); destruct (Rle_dec u r); nra. Qed.

Lemma cpt_scale : forall p r tl th, 0 < p ->
  cpt (tl * p) (p * r) (th * p) = p * Rmax tl (Rmin r th).
Proof.
  intros. unfold cpt. rewrite (Rmult_comm th p), Rmin_scale by auto.
  rewrite (Rmult_comm tl p), Rmax_scale by auto. reflexivity.
Qed.

(* a per-coordinate term of the Lagrangian, rescaled to the ratio *)
Lemma coord_scale : forall (f : R -> R) finf lam mu p y q,
  0 < p ->
  Rmin y q - lam * dterm f finf p y - mu * y =
  p * (Rmin (y / p) (q / p) - lam * f (y / p) - mu * (y / p)).
Proof.
  intros f finf lam mu p y q Hp. unfold dterm.
  destruct (Rlt_dec 0 p) as [Hp0|Hn0]; [|lra].
  assert (Ey : y = p * (y / p)) by (field; lra).
  assert (Eq : q = p * (q / p)) by (field; lra).
  set (u := y / p) in *. set (r := q / p) in *.
  rewrite Ey at 1 2. rewrite Eq at 1. rewrite Rmin_scale by auto.
  replace (p * u / p) with u by (field; lra). ring.
Qed.

(* monotonicity of a subgradient selection against supporting lines *)
Lemma subgrad_between_lo : forall (f : R -> R) fr glo tl r,
  tl < r -> f r >= f tl + glo * (r - tl) -> f tl >= f r + fr * (tl - r) -> glo <= fr.
Proof. intros. nra. Qed.

Lemma subgrad_between_hi : forall (f : R -> R) fr ghi th r,
  r < th -> f r >= f th + ghi * (r - th) -> f th >= f r + fr * (th - r) -> fr <= ghi.
Proof. intros. nra. Qed.

(* ======================================================================
   Theorem 2: the clip form with lam = 1/(f'(t_hi) - f'(t_lo)),
   mu = -lam f'(t_lo) and an active budget is optimal for MD(f, eps).
   ====================================================================== *)
Section ClipOptimal.
Variable n : nat.
Variables p q : nat -> R.
Variables (f f' : R -> R) (dom : R -> Prop) (finf : R).
Variables tl th glo ghi eps : R.
Hypothesis Hp : forall i, (i < n)%nat -> 0 <= p i.
Hypothesis Hq : forall i, (i < n)%nat -> 0 <= q i.
Hypothesis Htl : 0 <= tl <= 1.
Hypothesis Hth : 1 <= th.
(* convexity through supporting lines; glo, ghi subgradients at tl, th *)
Hypothesis Hsub : forall x y, dom x -> dom y -> f y >= f x + f' x * (y - x).
Hypothesis Hlo : forall y, dom y -> f y >= f tl + glo * (y - tl).
Hypothesis Hhi : forall y, dom y -> f y >= f th + ghi * (y - th).
Hypothesis Hdom_tl : dom tl.
Hypothesis Hdom_th : dom th.
Hypothesis Hdom_int : forall y, tl <= y <= th -> dom y.
Hypothesis Hgap : glo < ghi.

Definition lam_c : R := / (ghi - glo).
Definition mu_c : R := - lam_c * glo.

Lemma lam_c_pos : 0 < lam_c.
Proof. unfold lam_c. apply Rinv_0_lt_compat. lra. Qed.

Lemma lam_c_gap : lam_c * ghi + mu_c = 1.
Proof. unfold mu_c, lam_c. field. lra. Qed.

Lemma lam_c_lo : lam_c * glo + mu_c = 0.
Proof. unfold mu_c. ring. Qed.

(* per-ratio optimality *)
Lemma clip_ratio_kkt : forall r u, 0 <= r -> 0 <= u -> dom u ->
  Rmin u r - lam_c * f u - mu_c * u <=
  Rmin (Rmax tl (Rmin r th)) r - lam_c * f (Rmax tl (Rmin r th))
       - mu_c * Rmax tl (Rmin r th).
Proof.
  intros r u Hr Hu Hdu. pose proof lam_c_pos. pose proof lam_c_gap. pose proof lam_c_lo.
  destruct (Rlt_dec r tl) as [Hlt|Hge].
  - (* r < t_lo : t = t_lo, slope glo, c = 0 *)
    replace (Rmax tl (Rmin r th)) with tl by mm.
    apply (kkt1 f glo); try lra. apply Hlo; auto.
  - destruct (Rlt_dec th r) as [Hgt|Hle].
    + (* r > t_hi : t = t_hi, slope ghi, c = 1 *)
      replace (Rmax tl (Rmin r th)) with th by mm.
      apply (kkt1 f ghi); try lra. apply Hhi; auto.
    + replace (Rmax tl (Rmin r th)) with r by mm.
      destruct (Req_dec r tl) as [Heq|Hne].
      * subst r. apply (kkt1 f glo); try lra. apply Hlo; auto.
      * destruct (Req_dec r th) as [Heq'|Hne'].
        -- subst r. apply (kkt1 f ghi); try lra. apply Hhi; auto.
        -- assert (Hdr : dom r) by (apply Hdom_int; lra).
           assert (glo <= f' r)
             by (apply (subgrad_between_lo f (f' r) glo tl r); auto; lra).
           assert (f' r <= ghi)
             by (apply (subgrad_between_hi f (f' r) ghi th r); auto; lra).
           apply (kkt1 f (f' r)); try lra.
           ++ apply Hsub; auto.
           ++ intros _. left. split.
              ** replace (lam_c * f' r + mu_c) with (lam_c * (f' r - glo))
                   by (unfold mu_c; ring). nra.
              ** replace (lam_c * f' r + mu_c) with (lam_c * (f' r - glo))
                   by (unfold mu_c; ring).
                 replace 1 with (lam_c * (ghi - glo)) by (unfold lam_c; field; lra).
                 nra.
Qed.

(* per-coordinate optimality, including the coordinates with p_i = 0 *)
Lemma clip_coord_kkt : forall pi qi yi, 0 <= pi -> 0 <= qi -> 0 <= yi ->
  (0 < pi -> dom (yi / pi)) ->
  (pi = 0 -> ghi <= finf \/ yi = 0) ->
  Rmin yi qi - lam_c * dterm f finf pi yi - mu_c * yi <=
  Rmin (cpt (tl * pi) qi (th * pi)) qi
    - lam_c * dterm f finf pi (cpt (tl * pi) qi (th * pi))
    - mu_c * cpt (tl * pi) qi (th * pi).
Proof.
  intros pi qi yi Hpi Hqi Hyi Hdom H0.
  destruct (Rlt_dec 0 pi) as [Hpos|Hz].
  - rewrite !(coord_scale f finf lam_c mu_c pi) by auto.
    assert (Eq : qi = pi * (qi / pi)) by (field; lra).
    set (r := qi / pi) in *. rewrite Eq. rewrite cpt_scale by auto.
    replace (pi * Rmax tl (Rmin r th) / pi) with (Rmax tl (Rmin r th)) by (field; lra).
    replace (pi * r / pi) with r by (field; lra).
    apply Rmult_le_compat_l; [lra|].
    apply clip_ratio_kkt.
    + unfold r. apply Rdiv_le_0_compat; lra.
    + apply Rdiv_le_0_compat; lra.
    + auto.
  - assert (pi = 0) by lra. subst pi.
    unfold dterm. destruct (Rlt_dec 0 0); [lra|].
    replace (cpt (tl * 0) qi (th * 0)) with 0 by (unfold cpt; rewrite !Rmult_0_r; mm).
    pose proof lam_c_pos. pose proof lam_c_gap.
    destruct (H0 eq_refl) as [Hf|Hy0].
    + assert (lam_c * finf + mu_c >= 1).
      { replace (lam_c * finf + mu_c) with (lam_c * (finf - ghi) + (lam_c * ghi + mu_c)) by ring.
        nra. }
      assert ((lam_c * finf + mu_c) * yi >= yi) by nra.
      unfold Rmin in *. destruct (Rle_dec yi qi); destruct (Rle_dec 0 qi); nra.
    + subst yi. mm.
Qed.

Definition feasible (y : nat -> R) : Prop :=
  simplex n y /\ (forall i, (i < n)%nat -> 0 < p i -> dom (y i / p i)) /\
  Df n f finf p y <= eps.

(* Theorem 2, general form (p_i >= 0; finite f_infinity >= f'(t_hi)).
   Hbud: the budget is active at the clip point. *)
Theorem clip_optimal :
  ghi <= finf ->
  sum n (clipv p q tl th) = 1 ->
  Df n f finf p (clipv p q tl th) = eps ->
  forall y, feasible y -> acc n y q <= acc n (clipv p q tl th) q.
Proof.
  intros Hf N Hbud y [[Hy Sy] [Hdy Dy]].
  apply (lagrange_sufficiency n p q _ y f finf lam_c mu_c eps); auto.
  - left; pose proof lam_c_pos; lra.
  - intros i Hi. unfold clipv. apply clip_coord_kkt; auto.
Qed.

(* Theorem 2 when f_infinity = +infinity (kl, chi2): feasibility forces
   y_i = 0 where p_i = 0, and then the value finf plays no role. *)
Theorem clip_optimal_infinite_finf :
  sum n (clipv p q tl th) = 1 ->
  Df n f finf p (clipv p q tl th) = eps ->
  forall y, feasible y -> (forall i, (i < n)%nat -> p i = 0 -> y i = 0) ->
  acc n y q <= acc n (clipv p q tl th) q.
Proof.
  intros N Hbud y [[Hy Sy] [Hdy Dy]] H0.
  apply (lagrange_sufficiency n p q _ y f finf lam_c mu_c eps); auto.
  - left; pose proof lam_c_pos; lra.
  - intros i Hi. unfold clipv. apply clip_coord_kkt; auto.
Qed.

(* Theorem 2 exactly as in the issue: p_i > 0 everywhere. *)
Theorem clip_optimal_pos :
  (forall i, (i < n)%nat -> 0 < p i) ->
  sum n (clipv p q tl th) = 1 ->
  Df n f finf p (clipv p q tl th) = eps ->
  forall y, feasible y -> acc n y q <= acc n (clipv p q tl th) q.
Proof.
  intros Hpos N Hbud y Fy.
  apply clip_optimal_infinite_finf; auto.
  intros i Hi Hz. specialize (Hpos i Hi). lra.
Qed.
End ClipOptimal.

(* The degenerate case lam = 0 of the issue: pi = q is always optimal. *)
Theorem q_optimal : forall n q y, simplex n q -> acc n y q <= acc n q q.
Proof.
  intros n q y [Hq Sq]. unfold acc. apply sum_le. intros. mm.
Qed.

(* ======================================================================
   Theorem 7, optimality of the continuation when f_infinity < infinity:
   every p_i > 0 token with q_i > p_i has reached q_i (t_hi = infinity),
   tokens with p_i = 0 carry z_i in [0, q_i].
   Multipliers lam = 1/(finf - f'(t_lo)), mu = -lam f'(t_lo).
   ====================================================================== *)
Definition contv (p q z : nat -> R) (tl : R) (i : nat) : R :=
  if Rlt_dec 0 (p i) then Rmax (tl * p i) (q i) else z i.

Section Continuation.
Variable n : nat.
Variables p q z : nat -> R.
Variables (f f' : R -> R) (dom : R -> Prop) (finf : R).
Variables tl glo eps : R.
Hypothesis Hp : forall i, (i < n)%nat -> 0 <= p i.
Hypothesis Hq : forall i, (i < n)%nat -> 0 <= q i.
Hypothesis Hz : forall i, (i < n)%nat -> p i = 0 -> 0 <= z i <= q i.
Hypothesis Htl : 0 <= tl <= 1.
Hypothesis Hsub : forall x y, dom x -> dom y -> f y >= f x + f' x * (y - x).
Hypothesis Hlo : forall y, dom y -> f y >= f tl + glo * (y - tl).
Hypothesis Hdom_tl : dom tl.
Hypothesis Hdom_int : forall y, tl <= y -> dom y.
(* f_infinity bounds every subgradient (true for convex f) *)
Hypothesis Hfinf : forall y, dom y -> f' y <= finf.
Hypothesis Hgap : glo < finf.

Definition lam_k : R := / (finf - glo).
Definition mu_k : R := - lam_k * glo.

Lemma cont_ratio_kkt : forall r u, 0 <= r -> 0 <= u -> dom u ->
  Rmin u r - lam_k * f u - mu_k * u <=
  Rmin (Rmax tl r) r - lam_k * f (Rmax tl r) - mu_k * Rmax tl r.
Proof.
  intros r u Hr Hu Hdu.
  assert (L : 0 < lam_k) by (unfold lam_k; apply Rinv_0_lt_compat; lra).
  assert (L0 : lam_k * glo + mu_k = 0) by (unfold mu_k; ring).
  destruct (Rlt_dec r tl) as [Hlt|Hge].
  - replace (Rmax tl r) with tl by mm.
    apply (kkt1 f glo); try lra. apply Hlo; auto.
  - replace (Rmax tl r) with r by mm.
    destruct (Req_dec r tl) as [Heq|Hne].
    + subst r. apply (kkt1 f glo); try lra. apply Hlo; auto.
    + assert (Hdr : dom r) by (apply Hdom_int; lra).
      assert (glo <= f' r)
        by (apply (subgrad_between_lo f (f' r) glo tl r); auto; lra).
      assert (f' r <= finf) by auto.
      apply (kkt1 f (f' r)); try lra.
      * apply Hsub; auto.
      * intros _. left.
        replace (lam_k * f' r + mu_k) with (lam_k * (f' r - glo)) by (unfold mu_k; ring).
        split; [nra|].
        replace 1 with (lam_k * (finf - glo)) by (unfold lam_k; field; lra). nra.
Qed.

Lemma cont_coord_kkt : forall i yi, (i < n)%nat -> 0 <= yi ->
  (0 < p i -> dom (yi / p i)) ->
  Rmin yi (q i) - lam_k * dterm f finf (p i) yi - mu_k * yi <=
  Rmin (contv p q z tl i) (q i) - lam_k * dterm f finf (p i) (contv p q z tl i)
    - mu_k * contv p q z tl i.
Proof.
  intros i yi Hi Hyi Hdom. pose proof (Hp i Hi). pose proof (Hq i Hi).
  unfold contv. destruct (Rlt_dec 0 (p i)) as [Hpos|Hz0].
  - rewrite !(coord_scale f finf lam_k mu_k (p i)) by auto.
    assert (Eq : q i = p i * (q i / p i)) by (field; lra).
    set (r := q i / p i) in *. rewrite Eq.
    rewrite (Rmult_comm tl (p i)), Rmax_scale by auto.
    replace (p i * Rmax tl r / p i) with (Rmax tl r) by (field; lra).
    replace (p i * r / p i) with r by (field; lra).
    apply Rmult_le_compat_l; [lra|].
    apply cont_ratio_kkt.
    + unfold r. apply Rdiv_le_0_compat; lra.
    + apply Rdiv_le_0_compat; lra.
    + auto.
  - assert (p i = 0) by lra. destruct (Hz i Hi H1) as [Hz1 Hz2].
    unfold dterm. rewrite H1. destruct (Rlt_dec 0 0); [lra|].
    assert (C : lam_k * finf + mu_k = 1) by (unfold mu_k, lam_k; field; lra).
    assert (L : 0 < lam_k) by (unfold lam_k; apply Rinv_0_lt_compat; lra).
    apply (kkt1 (fun x => finf * x) finf); try lra.
Qed.

Theorem continuation_optimal :
  sum n (contv p q z tl) = 1 ->
  Df n f finf p (contv p q z tl) = eps ->
  forall y, simplex n y -> (forall i, (i < n)%nat -> 0 < p i -> dom (y i / p i)) ->
  Df n f finf p y <= eps ->
  acc n y q <= acc n (contv p q z tl) q.
Proof.
  intros N Hbud y [Hy Sy] Hdy Dy.
  apply (lagrange_sufficiency n p q _ y f finf lam_k mu_k eps); auto.
  - left. unfold lam_k. apply Rinv_0_lt_compat. lra.
  - intros i Hi. apply cont_coord_kkt; auto.
Qed.
End Continuation.
