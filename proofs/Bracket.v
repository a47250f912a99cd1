(* Phase 1 of the one-shot solver (cpp/mentored/oneshot.hpp, bound_buckets):
   bounds on a bucket's sum  sum_j p_j F(r_j)  from the bucket's sums
   P = sum p_j, Q = sum q_j = sum p_j r_j and F at the edges e0 < e1 and at the
   mean ratio Q/P, for the tilted generator F = f~ (docs/theory.md §1, §4):
     lower:  P max(F(clamp(Q/P)), min(F(e0), F(e1)))      (Jensen; monotonicity)
     upper:  P min(chord(Q/P), max(F(e0), F(e1)))          (chord; convexity)
   where clamp(m) = min(max(m, e0), e1) and chord is the line through
   (e0, F e0), (e1, F e1).  The monotonicity bound needs the bucket on one
   side of 1 (e1 <= 1 or 1 <= e0), as every bucket of the solver is.
   Also the interval the solver derives for a threshold inside its bucket
   (divergence_bounds). *)
Require Import Reals Lra Lia.
Require Import Mentored.Sums Mentored.Rounding.
Open Scope R_scope.

Section Bucket.
Variables (F F' : R -> R) (dom : R -> Prop).
Hypothesis Hsub : forall x y, 0 < x -> dom x -> dom y -> F y >= F x + F' x * (y - x).
Hypothesis Hdom : forall t, 0 < t -> dom t.
Variables e0 e1 : R.
Hypothesis He : 0 < e0 < e1.

Definition chord (m : R) : R := F e0 + (F e1 - F e0) * ((m - e0) / (e1 - e0)).
Definition clamp (m : R) : R := Rmin (Rmax m e0) e1.

(* convexity: F lies below its chord on the bucket *)
Lemma below_chord : forall r, e0 <= r <= e1 -> F r <= chord r.
Proof.
  intros r Hr. unfold chord.
  assert (Hr0 : 0 < r) by lra.
  pose proof (Hsub r e0 Hr0 (Hdom r Hr0) (Hdom e0 ltac:(lra))) as S0.
  pose proof (Hsub r e1 Hr0 (Hdom r Hr0) (Hdom e1 ltac:(lra))) as S1.
  set (th := (r - e0) / (e1 - e0)).
  assert (Eth : r = e0 + th * (e1 - e0)) by (unfold th; field; lra).
  assert (Hth : 0 <= th <= 1).
  { unfold th. split.
    - apply Rdiv_le_0_compat; lra.
    - apply (Rmult_le_reg_r (e1 - e0)); [lra|].
      replace ((r - e0) / (e1 - e0) * (e1 - e0)) with (r - e0) by (field; lra). lra. }
  assert (Z : F' r * ((1 - th) * (e0 - r) + th * (e1 - r)) = 0).
  { replace ((1 - th) * (e0 - r) + th * (e1 - r)) with 0 by (rewrite Eth at 1 2; ring). ring. }
  assert (A : 0 <= (1 - th) * (F e0 - F r - F' r * (e0 - r))) by (apply Rmult_le_pos; lra).
  assert (B : 0 <= th * (F e1 - F r - F' r * (e1 - r))) by (apply Rmult_le_pos; lra).
  lra.
Qed.

Lemma chord_le_edges : forall r, e0 <= r <= e1 -> chord r <= Rmax (F e0) (F e1).
Proof.
  intros r Hr. unfold chord.
  assert (Hth : 0 <= (r - e0) / (e1 - e0) <= 1).
  { split.
    - apply Rdiv_le_0_compat; lra.
    - apply (Rmult_le_reg_r (e1 - e0)); [lra|].
      replace ((r - e0) / (e1 - e0) * (e1 - e0)) with (r - e0) by (field; lra). lra. }
  unfold Rmax. destruct (Rle_dec (F e0) (F e1)); nra.
Qed.

Variable m : nat.
Variables w r : nat -> R.
Hypothesis Hw : forall j, (j < m)%nat -> 0 <= w j.
Hypothesis Hr : forall j, (j < m)%nat -> e0 <= r j <= e1.

Definition Pb : R := sum m w.
Definition Qb : R := sum m (fun j => w j * r j).
Definition Fb : R := sum m (fun j => w j * F (r j)).

Lemma mean_in_bucket : 0 < Pb -> e0 <= Qb / Pb <= e1.
Proof.
  intros HP. unfold Pb, Qb in *.
  assert (L : e0 * sum m w <= sum m (fun j => w j * r j)).
  { rewrite <- sum_scal. apply sum_le. intros j Hj. pose proof (Hw j Hj). pose proof (Hr j Hj). nra. }
  assert (U : sum m (fun j => w j * r j) <= e1 * sum m w).
  { rewrite <- sum_scal. apply sum_le. intros j Hj. pose proof (Hw j Hj). pose proof (Hr j Hj). nra. }
  split.
  - apply (Rmult_le_reg_r (sum m w)); auto. unfold Rdiv. rewrite Rmult_assoc, Rinv_l by lra. lra.
  - apply (Rmult_le_reg_r (sum m w)); auto. unfold Rdiv. rewrite Rmult_assoc, Rinv_l by lra. lra.
Qed.

Lemma clamp_mean : 0 < Pb -> clamp (Qb / Pb) = Qb / Pb.
Proof. intros HP. pose proof (mean_in_bucket HP). unfold clamp. mm. Qed.

(* Jensen at the mean ratio *)
Lemma jensen_bucket : 0 < Pb -> Pb * F (Qb / Pb) <= Fb.
Proof.
  intros HP. pose proof (mean_in_bucket HP) as Hm. set (c := Qb / Pb) in *.
  assert (Hc : 0 < c) by lra.
  assert (S : sum m (fun j => w j * (F c + F' c * (r j - c))) <= Fb).
  { apply sum_le. intros j Hj. pose proof (Hw j Hj). pose proof (Hr j Hj).
    pose proof (Hsub c (r j) Hc (Hdom c Hc) (Hdom (r j) ltac:(lra))). nra. }
  assert (E : sum m (fun j => w j * (F c + F' c * (r j - c))) = Pb * F c + F' c * (Qb - c * Pb)).
  { rewrite (sum_ext m _ (fun j => F c * w j + F' c * (w j * r j) - F' c * c * w j))
      by (intros; ring).
    rewrite sum_minus, sum_plus, !sum_scal. unfold Pb, Qb. ring. }
  assert (Qb - c * Pb = 0) by (unfold c; field; lra). nra.
Qed.

(* the chord is affine, so its p-weighted sum is P chord(Q/P) *)
Lemma chord_bucket : 0 < Pb -> Fb <= Pb * chord (Qb / Pb).
Proof.
  intros HP.
  assert (S : Fb <= sum m (fun j => w j * chord (r j))).
  { apply sum_le. intros j Hj. pose proof (Hw j Hj). pose proof (below_chord (r j) (Hr j Hj)).
    apply Rmult_le_compat_l; auto. }
  assert (E : sum m (fun j => w j * chord (r j)) = Pb * chord (Qb / Pb)).
  { unfold chord. set (k := (F e1 - F e0) / (e1 - e0)).
    rewrite (sum_ext m _ (fun j => (F e0 - k * e0) * w j + k * (w j * r j))).
    2:{ intros j Hj. unfold k. field. lra. }
    rewrite sum_plus, !sum_scal. fold Pb Qb. unfold k. field. split; lra. }
  lra.
Qed.

Lemma edges_bucket : Fb <= Pb * Rmax (F e0) (F e1).
Proof.
  unfold Fb, Pb. rewrite Rmult_comm, <- sum_scal. apply sum_le. intros j Hj.
  pose proof (Hw j Hj). pose proof (below_chord (r j) (Hr j Hj)).
  pose proof (chord_le_edges (r j) (Hr j Hj)). rewrite (Rmult_comm _ (w j)).
  apply Rmult_le_compat_l; lra.
Qed.

(* F with its minimum F(1) = 0 (the tilted generator), bucket on one side of 1 *)
Hypothesis HF1 : F 1 = 0.
Hypothesis Hmin : forall t, dom t -> 0 <= F t.
Hypothesis Hside : e1 <= 1 \/ 1 <= e0.

Lemma edges_bucket_low : Pb * Rmin (F e0) (F e1) <= Fb.
Proof.
  unfold Fb, Pb. rewrite Rmult_comm, <- sum_scal. apply sum_le. intros j Hj.
  pose proof (Hw j Hj). pose proof (Hr j Hj). rewrite (Rmult_comm _ (w j)).
  apply Rmult_le_compat_l; auto.
  assert (Hrj : 0 <= r j) by lra.
  destruct Hside as [H1|H1].
  - assert (F e1 <= F (r j)).
    { apply (toward_one F F' dom Hsub Hdom HF1 Hmin); auto; [apply Hdom; lra|].
      unfold between, Rmin, Rmax. destruct (Rle_dec (r j) 1); lra. }
    pose proof (Rmin_r (F e0) (F e1)). lra.
  - assert (F e0 <= F (r j)).
    { apply (toward_one F F' dom Hsub Hdom HF1 Hmin); auto; [apply Hdom; lra|].
      unfold between, Rmin, Rmax. destruct (Rle_dec (r j) 1); lra. }
    pose proof (Rmin_l (F e0) (F e1)). lra.
Qed.

(* The per-bucket bracket, in the form of bound_buckets in oneshot.hpp. *)
Theorem bracket_sound : 0 < Pb ->
  Pb * Rmax (F (clamp (Qb / Pb))) (Rmin (F e0) (F e1)) <= Fb /\
  Fb <= Pb * Rmin (chord (Qb / Pb)) (Rmax (F e0) (F e1)).
Proof.
  intros HP. rewrite clamp_mean by auto.
  pose proof (jensen_bucket HP). pose proof (chord_bucket HP). pose proof edges_bucket.
  pose proof edges_bucket_low. split.
  - unfold Rmax. destruct (Rle_dec (F (Qb / Pb)) (Rmin (F e0) (F e1))); lra.
  - unfold Rmin. destruct (Rle_dec (chord (Qb / Pb)) (Rmax (F e0) (F e1))); lra.
Qed.
End Bucket.

(* The interval of a threshold inside its bucket (divergence_bounds, lower
   side): tokens "below" have r_j < e0 (weights pe, drafter mass qe), the
   bucket's tokens have e0 <= r_j (weights pb, drafter mass pb r); if t in
   [e0, e1] solves  phi(t) = sum_below (t p - q) + sum_bucket (t p - q)_+ = g,
   then  t Pe <= g + Qe  and  g + Qe + e0 Pb <= t (Pe + Pb), i.e.
   t_min <= t <= t_max as the code computes them (dividing by Pe, Pe + Pb). *)
Theorem threshold_interval : forall k m pe qe pb rb t g e0,
  (forall j, (j < k)%nat -> 0 <= pe j) ->
  (forall j, (j < m)%nat -> 0 <= pb j /\ e0 <= rb j) ->
  e0 <= t ->
  sum k (fun j => t * pe j - qe j) + sum m (fun j => Rpos (t * pb j - pb j * rb j)) = g ->
  t * sum k pe <= g + sum k qe /\
  g + sum k qe + e0 * sum m pb <= t * (sum k pe + sum m pb).
Proof.
  intros k m pe qe pb rb t g e0 Hpe Hb Ht E.
  rewrite sum_minus, sum_scal in E.
  assert (L : 0 <= sum m (fun j => Rpos (t * pb j - pb j * rb j)))
    by (apply sum_nonneg; intros; unfold Rpos; apply Rmax_l).
  assert (U : sum m (fun j => Rpos (t * pb j - pb j * rb j)) <= (t - e0) * sum m pb).
  { rewrite <- sum_scal. apply sum_le. intros j Hj. destruct (Hb j Hj) as [H1 H2].
    assert (t * pb j - pb j * rb j <= (t - e0) * pb j) by nra.
    assert (0 <= (t - e0) * pb j) by nra. unfold Rpos, Rmax. destruct (Rle_dec 0 _); lra. }
  split; nra.
Qed.
