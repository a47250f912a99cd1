(* Theorem 10: on each gap between consecutive sorted ratios Down and Up are
   affine, and the inversion formulas of the data structure return the
   thresholds; plus the prefix/suffix-sum formula for D_f(pi(s) || p).
   Tokens are relabelled so that the relevant block comes first, sorted
   (sums over the vocabulary do not depend on the labelling). *)
Require Import Reals Lra Lia.
Require Import Mentored.Sums Mentored.Curve Mentored.Optimality.
Open Scope R_scope.

Lemma sum_split_at : forall n m a, (m <= n)%nat ->
  sum n a = sum m a + sum (n - m) (fun i => a (m + i)%nat).
Proof.
  intros n m a H. replace n with (m + (n - m))%nat at 1 by lia. apply sum_split.
Qed.

Lemma ratio_le : forall p q t, 0 < p -> q / p <= t -> q <= t * p.
Proof.
  intros p q t Hp H. replace q with (q / p * p) by (field; lra). nra.
Qed.

Lemma ratio_ge : forall p q t, 0 < p -> t <= q / p -> t * p <= q.
Proof.
  intros p q t Hp H. replace q with (q / p * p) by (field; lra). nra.
Qed.

(* ====================== Down, ratios below 1, ascending ====================== *)
Section DownGap.
Variable n a : nat.
Variables p q : nat -> R.
Hypothesis Ha : (a <= n)%nat.
(* the first a tokens are those with q_j < p_j *)
Hypothesis HL : forall j, (j < a)%nat -> 0 < p j /\ 0 <= q j /\ q j < p j.
Hypothesis Hrest : forall i, (a <= i < n)%nat -> 0 <= p i /\ p i <= q i.

Definition TVL : R := sum a (fun j => p j - q j).

Lemma TV_is_TVL : sum n p = sum n q -> TV n p q = TVL.
Proof.
  intros H. rewrite TV_pos by auto. rewrite (sum_split_at n a) by auto.
  rewrite (sum_ext (n - a) _ (fun _ => 0)).
  - rewrite sum_zero. unfold TVL. rewrite Rplus_0_r. apply sum_ext.
    intros j Hj. destruct (HL j Hj) as [? [? ?]]. mm.
  - intros i Hi. destruct (Hrest (a + i)%nat) as [? ?]; [lia|]. mm.
Qed.

Section Gap.
Variable k : nat.
Variable t : R.
Hypothesis Hk : (k <= a)%nat.
Hypothesis Ht : 0 <= t <= 1.
Hypothesis Hbelow : forall j, (j < k)%nat -> q j <= t * p j.
Hypothesis Habove : forall j, (k <= j < a)%nat -> t * p j <= q j.

(* Down(t) = TV - (t P_k - Q_k) *)
Theorem Down_affine : Down n p q t = TVL - (t * sum k p - sum k q).
Proof.
  unfold Down, DownG, TVL.
  rewrite (sum_split_at n a) by auto.
  rewrite (sum_ext (n - a) _ (fun _ => 0)).
  2:{ intros i Hi. destruct (Hrest (a + i)%nat) as [? ?]; [lia|].
      assert (t * p (a + i)%nat <= p (a + i)%nat) by nra. mm. }
  rewrite sum_zero, Rplus_0_r.
  rewrite (sum_split_at a k) by auto. rewrite (sum_split_at a k (fun j => p j - q j)) by auto.
  rewrite (sum_ext k _ (fun j => (p j - q j) - (t * p j - q j))).
  2:{ intros j Hj. destruct (HL j) as [? [? ?]]; [lia|]. pose proof (Hbelow j Hj).
      assert (t * p j <= p j) by nra. mm. }
  rewrite (sum_ext (a - k) (fun i => Rpos (p (k + i)%nat - Rmax (q (k + i)%nat) (t * p (k + i)%nat)))
                           (fun i => p (k + i)%nat - q (k + i)%nat)).
  2:{ intros i Hi. destruct (HL (k + i)%nat) as [? [? ?]]; [lia|].
      pose proof (Habove (k + i)%nat ltac:(lia)). mm. }
  rewrite sum_minus, sum_minus, sum_minus, sum_scal. ring.
Qed.

(* the inversion formula t_lo = (TV - s + Q_k) / P_k *)
Theorem Down_inversion : forall s, 0 < sum k p ->
  t = (TVL - s + sum k q) / sum k p -> Down n p q t = s.
Proof.
  intros s HP Et. rewrite Down_affine. rewrite Et. field. lra.
Qed.

Theorem Down_inversion_unique : forall s, 0 < sum k p ->
  Down n p q t = s -> t = (TVL - s + sum k q) / sum k p.
Proof.
  intros s HP E. rewrite Down_affine in E. rewrite <- E. field. lra.
Qed.
End Gap.

(* sortedness puts t in the right position relative to every ratio *)
Theorem Down_sorted_gap : forall k t,
  (forall i j, (i <= j < a)%nat -> q i / p i <= q j / p j) ->
  (k <= a)%nat ->
  (k = 0%nat \/ q (k - 1)%nat / p (k - 1)%nat <= t) ->
  (k = a \/ t <= q k / p k) ->
  (forall j, (j < k)%nat -> q j <= t * p j) /\
  (forall j, (k <= j < a)%nat -> t * p j <= q j).
Proof.
  intros k t Hs Hk Hlo Hhi. split.
  - intros j Hj. destruct (HL j) as [? _]; [lia|]. apply ratio_le; auto.
    destruct Hlo as [->|Hlo]; [lia|].
    pose proof (Hs j (k - 1)%nat ltac:(lia)). lra.
  - intros j Hj. destruct (HL j) as [? _]; [lia|]. apply ratio_ge; auto.
    destruct Hhi as [->|Hhi]; [lia|].
    pose proof (Hs k j ltac:(lia)). lra.
Qed.
End DownGap.

(* ====================== Up, ratios above 1, descending ====================== *)
Section UpGap.
Variable n m : nat.
Variables p q : nat -> R.
Hypothesis Hm : (m <= n)%nat.
(* the first m tokens are those with q_j > p_j > 0 *)
Hypothesis HU : forall j, (j < m)%nat -> 0 < p j /\ p j < q j.
(* the others: q_i <= p_i, or p_i = 0 (excluded by the target) *)
Hypothesis Hrest : forall i, (m <= i < n)%nat ->
  0 <= p i /\ 0 <= q i /\ (q i <= p i \/ p i = 0).

Definition DU : R := sum m (fun j => q j - p j).

Section Gap.
Variable k : nat.
Variable t : R.
Hypothesis Hk : (k <= m)%nat.
Hypothesis Ht : 1 <= t.
Hypothesis Hcapped : forall j, (j < k)%nat -> t * p j <= q j.
Hypothesis Hreached : forall j, (k <= j < m)%nat -> q j <= t * p j.

(* Up(t) = D_U - (Q_k - t P_k) *)
Theorem Up_affine : Up n p q t = DU - (sum k q - t * sum k p).
Proof.
  unfold Up, UpG, DU.
  rewrite (sum_split_at n m) by auto.
  rewrite (sum_ext (n - m) _ (fun _ => 0)).
  2:{ intros i Hi. destruct (Hrest (m + i)%nat) as [? [? [Hle|H0]]]; [lia| |].
      - assert (p (m + i)%nat <= t * p (m + i)%nat) by nra. mm.
      - rewrite H0, Rmult_0_r. mm. }
  rewrite sum_zero, Rplus_0_r.
  rewrite (sum_split_at m k) by auto. rewrite (sum_split_at m k (fun j => q j - p j)) by auto.
  rewrite (sum_ext k _ (fun j => (q j - p j) - (q j - t * p j))).
  2:{ intros j Hj. destruct (HU j) as [? ?]; [lia|]. pose proof (Hcapped j Hj).
      assert (p j <= t * p j) by nra. mm. }
  rewrite (sum_ext (m - k) (fun i => Rpos (Rmin (q (k + i)%nat) (t * p (k + i)%nat) - p (k + i)%nat))
                           (fun i => q (k + i)%nat - p (k + i)%nat)).
  2:{ intros i Hi. destruct (HU (k + i)%nat) as [? ?]; [lia|].
      pose proof (Hreached (k + i)%nat ltac:(lia)). mm. }
  rewrite sum_minus, sum_minus, sum_minus, sum_scal. ring.
Qed.

(* the inversion formula t_hi = (Q_k - (D_U - s)) / P_k *)
Theorem Up_inversion : forall s, 0 < sum k p ->
  t = (sum k q - (DU - s)) / sum k p -> Up n p q t = s.
Proof.
  intros s HP Et. rewrite Up_affine. rewrite Et. field. lra.
Qed.

Theorem Up_inversion_unique : forall s, 0 < sum k p ->
  Up n p q t = s -> t = (sum k q - (DU - s)) / sum k p.
Proof.
  intros s HP E. rewrite Up_affine in E. rewrite <- E. field. lra.
Qed.
End Gap.

Theorem Up_sorted_gap : forall k t,
  (forall i j, (i <= j < m)%nat -> q j / p j <= q i / p i) ->
  (k <= m)%nat ->
  (k = 0%nat \/ t <= q (k - 1)%nat / p (k - 1)%nat) ->
  (k = m \/ q k / p k <= t) ->
  (forall j, (j < k)%nat -> t * p j <= q j) /\
  (forall j, (k <= j < m)%nat -> q j <= t * p j).
Proof.
  intros k t Hs Hk Hlo Hhi. split.
  - intros j Hj. destruct (HU j) as [? _]; [lia|]. apply ratio_ge; auto.
    destruct Hlo as [->|Hlo]; [lia|].
    pose proof (Hs j (k - 1)%nat ltac:(lia)). lra.
  - intros j Hj. destruct (HU j) as [? _]; [lia|]. apply ratio_le; auto.
    destruct Hhi as [->|Hhi]; [lia|].
    pose proof (Hs k j ltac:(lia)). lra.
Qed.
End UpGap.

(* ============ D_f(pi(s) || p) from prefix / suffix sums ============
   All p_i > 0, tokens sorted by ratio: the first k1 have r <= t_lo, the
   next up to k2 have t_lo <= r <= t_hi, the rest r >= t_hi:
     D_f = f(t_lo) P_{k1} + sum_{k1 <= j < k2} p_j f(r_j) + f(t_hi) (P_n - P_{k2}). *)
Section DfSums.
Variable n k1 k2 : nat.
Variables p q : nat -> R.
Variables (f : R -> R) (finf tl th : R).
Hypothesis Hk : (k1 <= k2 <= n)%nat.
Hypothesis Hp : forall i, (i < n)%nat -> 0 < p i.
Hypothesis Hth : tl <= th.
Hypothesis Hlow : forall j, (j < k1)%nat -> q j / p j <= tl.
Hypothesis Hmid : forall j, (k1 <= j < k2)%nat -> tl <= q j / p j <= th.
Hypothesis Hhigh : forall j, (k2 <= j < n)%nat -> th <= q j / p j.

Lemma dterm_clip : forall i, (i < n)%nat ->
  dterm f finf (p i) (clipv p q tl th i) = p i * f (Rmax tl (Rmin (q i / p i) th)).
Proof.
  intros i Hi. pose proof (Hp i Hi). unfold clipv, dterm.
  destruct (Rlt_dec 0 (p i)); [|lra].
  replace (q i) with (p i * (q i / p i)) at 1 by (field; lra).
  rewrite cpt_scale by auto. f_equal. f_equal. field. lra.
Qed.

Theorem Df_prefix_sums :
  Df n f finf p (clipv p q tl th) =
  f tl * sum k1 p
  + sum (k2 - k1) (fun j => p (k1 + j)%nat * f (q (k1 + j)%nat / p (k1 + j)%nat))
  + f th * (sum n p - sum k2 p).
Proof.
  unfold Df.
  rewrite (sum_ext n _ (fun i => p i * f (Rmax tl (Rmin (q i / p i) th))))
    by (intros; apply dterm_clip; auto).
  rewrite (sum_split_at n k2 p) by lia.
  rewrite (sum_split_at n k2) by lia.
  rewrite (sum_split_at k2 k1) by lia.
  rewrite (sum_ext k1 _ (fun i => f tl * p i)).
  2:{ intros j Hj. pose proof (Hlow j Hj).
      replace (Rmax tl (Rmin (q j / p j) th)) with tl by mm. ring. }
  rewrite (sum_ext (k2 - k1) (fun i => p (k1 + i)%nat * f (Rmax tl (Rmin (q (k1 + i)%nat / p (k1 + i)%nat) th)))
            (fun j => p (k1 + j)%nat * f (q (k1 + j)%nat / p (k1 + j)%nat))).
  2:{ intros j Hj. pose proof (Hmid (k1 + j)%nat ltac:(lia)).
      replace (Rmax tl (Rmin (q (k1 + j)%nat / p (k1 + j)%nat) th))
        with (q (k1 + j)%nat / p (k1 + j)%nat) by mm. reflexivity. }
  rewrite (sum_ext (n - k2) (fun i => p (k2 + i)%nat * f (Rmax tl (Rmin (q (k2 + i)%nat / p (k2 + i)%nat) th)))
            (fun j => f th * p (k2 + j)%nat)).
  2:{ intros j Hj. pose proof (Hhigh (k2 + j)%nat ltac:(lia)).
      replace (Rmax tl (Rmin (q (k2 + j)%nat / p (k2 + j)%nat) th)) with th by mm. ring. }
  rewrite !sum_scal. ring.
Qed.
End DfSums.
