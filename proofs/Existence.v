(* Existence of thresholds (docs/theory.md §3): Down and Up are continuous
   (Lipschitz with constant sum p) and monotone, so by the intermediate value
   theorem of the standard library (IVT_cor) every s in [0, TV - Q0] has
   thresholds 0 <= t_lo <= 1 <= t_hi with Down(t_lo) = Up(t_hi) = s, and every
   s in [TV - Q0, TV] a point of the continuation (f_inf < infinity).
   The clip point pi(s) does not depend on which thresholds are chosen
   (clip_unique). *)
Require Import Reals Lra Lia.
Require Import Mentored.Sums Mentored.Curve Mentored.Optimality Mentored.TargetZeros.
Open Scope R_scope.

(* A Lipschitz function R -> R is continuous (in the sense of Ranalysis). *)
Lemma lipschitz_continuity : forall (g : R -> R) L, 0 <= L ->
  (forall x y, Rabs (g x - g y) <= L * Rabs (x - y)) -> continuity g.
Proof.
  intros g L HL Hg x eps Heps.
  exists (eps / (L + 1)). split.
  - apply Rdiv_lt_0_compat; lra.
  - intros y [_ Hd]. simpl in *. unfold R_dist in *.
    pose proof (Hg y x). pose proof (Rabs_pos (y - x)).
    assert (Rabs (y - x) * (L + 1) < eps).
    { apply (Rmult_lt_compat_r (L + 1)) in Hd; [|lra].
      replace (eps / (L + 1) * (L + 1)) with eps in Hd by (field; lra). lra. }
    nra.
Qed.

(* |sum a - sum b| <= sum |a_i - b_i| *)
Lemma sum_abs_diff : forall n a b,
  Rabs (sum n a - sum n b) <= sum n (fun i => Rabs (a i - b i)).
Proof. intros. rewrite <- sum_minus. apply sum_abs. Qed.

Section Continuity.
Variable n : nat.
Variables p q : nat -> R.
Hypothesis Hp : forall i, (i < n)%nat -> 0 <= p i.

Lemma sum_p_abs : forall t1 t2,
  sum n (fun i => Rabs (t1 * p i - t2 * p i)) = sum n p * Rabs (t1 - t2).
Proof.
  intros. rewrite Rmult_comm, <- sum_scal. apply sum_ext. intros i Hi.
  replace (t1 * p i - t2 * p i) with ((t1 - t2) * p i) by ring.
  rewrite Rabs_mult, (Rabs_right (p i)) by (apply Rle_ge; auto). reflexivity.
Qed.

(* |Down(t1) - Down(t2)| <= (sum p) |t1 - t2| *)
Lemma Down_lipschitz : forall t1 t2,
  Rabs (Down n p q t1 - Down n p q t2) <= sum n p * Rabs (t1 - t2).
Proof.
  intros. rewrite <- sum_p_abs. unfold Down, DownG.
  eapply Rle_trans; [apply sum_abs_diff|]. apply sum_le. intros i Hi. mm.
Qed.

Lemma Up_lipschitz : forall t1 t2,
  Rabs (Up n p q t1 - Up n p q t2) <= sum n p * Rabs (t1 - t2).
Proof.
  intros. rewrite <- sum_p_abs. unfold Up, UpG.
  eapply Rle_trans; [apply sum_abs_diff|]. apply sum_le. intros i Hi. mm.
Qed.

Lemma Down_continuous : continuity (Down n p q).
Proof.
  apply (lipschitz_continuity _ (sum n p)); [apply sum_nonneg; auto|].
  apply Down_lipschitz.
Qed.

Lemma Up_continuous : continuity (Up n p q).
Proof.
  apply (lipschitz_continuity _ (sum n p)); [apply sum_nonneg; auto|].
  apply Up_lipschitz.
Qed.
End Continuity.

(* Down(0) = TV(p, q), Down(1) = 0, Up(1) = 0 *)
Lemma Down_at_0 : forall n p q, simplex n p -> simplex n q -> Down n p q 0 = TV n p q.
Proof.
  intros n p q [Hp Sp] [Hq Sq]. rewrite TV_pos by congruence. unfold Down, DownG.
  apply sum_ext. intros i Hi. pose proof (Hq i Hi). rewrite Rmult_0_l. mm.
Qed.

Lemma Down_at_1 : forall n p q, (forall i, (i < n)%nat -> 0 <= p i) -> Down n p q 1 = 0.
Proof.
  intros n p q Hp. unfold Down, DownG. rewrite <- (sum_zero n). apply sum_ext.
  intros i Hi. rewrite Rmult_1_l. mm.
Qed.

Lemma Up_at_1 : forall n p q, (forall i, (i < n)%nat -> 0 <= p i) -> Up n p q 1 = 0.
Proof.
  intros n p q Hp. unfold Up, UpG. rewrite <- (sum_zero n). apply sum_ext.
  intros i Hi. rewrite Rmult_1_l. mm.
Qed.

(* a finite t_hi large enough to cap every token with p_i > 0 at q_i *)
Lemma large_threshold : forall n p q, exists T, 1 <= T /\
  forall i, (i < n)%nat -> 0 < p i -> q i <= T * p i.
Proof.
  induction n; intros p q.
  - exists 1. split; [lra|]. intros; lia.
  - destruct (IHn p q) as [T [HT H]].
    destruct (Rlt_dec 0 (p n)) as [Hpn|Hpn].
    + exists (Rmax T (q n / p n)). split; [eapply Rle_trans; [exact HT|apply Rmax_l]|].
      intros i Hi Hpi. destruct (Nat.eq_dec i n) as [->|Hne].
      * replace (q n) with (q n / p n * p n) at 1 by (field; lra).
        apply Rmult_le_compat_r; [lra|apply Rmax_r].
      * eapply Rle_trans; [apply H; auto; lia|].
        apply Rmult_le_compat_r; [lra|apply Rmax_l].
    + exists T. split; auto. intros i Hi Hpi. destruct (Nat.eq_dec i n) as [->|Hne]; [lra|].
      apply H; auto; lia.
Qed.

Lemma Q0_nonneg : forall n p q, (forall i, (i < n)%nat -> 0 <= q i) -> 0 <= Q0 n p q.
Proof.
  intros. unfold Q0. apply sum_nonneg. intros i Hi. destruct (Rlt_dec 0 (p i)); auto; lra.
Qed.

Definition thresholds (n : nat) (p q : nat -> R) (s tl th : R) : Prop :=
  0 <= tl <= 1 /\ 1 <= th /\ Down n p q tl = s /\ Up n p q th = s.

(* Existence: every s in [0, TV - Q0] has thresholds, with t_lo > 0 when s < TV. *)
Theorem thresholds_exist : forall n p q s, simplex n p -> simplex n q ->
  0 <= s <= TV n p q - Q0 n p q ->
  exists tl th, thresholds n p q s tl th /\ (s < TV n p q -> 0 < tl).
Proof.
  intros n p q s Sp Sq Hs. pose proof Sp as [Hp _]. pose proof Sq as [Hq _].
  pose proof (Q0_nonneg n p q Hq) as HQ.
  destruct (IVT_cor (fun t => Down n p q t - s) 0 1) as [tl [Htl Dtl]].
  { apply continuity_minus; [apply Down_continuous; auto|apply continuity_const; intros ? ?; reflexivity]. }
  { lra. }
  { rewrite Down_at_0, Down_at_1 by auto. nra. }
  destruct (large_threshold n p q) as [T [HT Hcap]].
  destruct (IVT_cor (fun t => Up n p q t - s) 1 T) as [th [Hth Uth]].
  { apply continuity_minus; [apply Up_continuous; auto|apply continuity_const; intros ? ?; reflexivity]. }
  { lra. }
  { rewrite Up_at_1 by auto. rewrite (Up_end n p q) by (auto; try apply Sp; try apply Sq; lra). nra. }
  exists tl, th. split; [repeat split; lra|].
  intros Hlt. destruct (Req_dec tl 0) as [E|E]; [|lra].
  rewrite E, Down_at_0 in Dtl by auto. lra.
Qed.

(* The same for the continuation (f_inf < infinity): every s in [TV - Q0, TV]
   is reached with z proportional to q on {p = 0}. *)
Theorem cont_thresholds_exist : forall n p q s, simplex n p -> simplex n q ->
  TV n p q - Q0 n p q <= s <= TV n p q ->
  exists tl z, 0 <= tl <= 1 /\ (forall i, (i < n)%nat -> p i = 0 -> 0 <= z i <= q i) /\
    Down n p q tl = s /\ Zmass n p z = s - (TV n p q - Q0 n p q) /\
    sum n (contv p q z tl) = 1.
Proof.
  intros n p q s Sp Sq Hs. pose proof Sp as [Hp SP]. pose proof Sq as [Hq SQ].
  pose proof (Q0_nonneg n p q Hq) as HQ.
  assert (H0 : 0 <= TV n p q - Q0 n p q).
  { rewrite <- (Up_at_1 n p q Hp). apply (Up_le_end n p q Hp Hq SP SQ). lra. }
  destruct (IVT_cor (fun t => Down n p q t - s) 0 1) as [tl [Htl Dtl]].
  { apply continuity_minus; [apply Down_continuous; auto|apply continuity_const; intros ? ?; reflexivity]. }
  { lra. }
  { rewrite Down_at_0, Down_at_1 by auto. nra. }
  set (th := if Rlt_dec 0 (Q0 n p q) then (s - (TV n p q - Q0 n p q)) / Q0 n p q else 0).
  assert (Hth : 0 <= th <= 1).
  { unfold th. destruct (Rlt_dec 0 (Q0 n p q)); [|lra]. split.
    - apply Rdiv_le_0_compat; lra.
    - apply (Rmult_le_reg_r (Q0 n p q)); auto.
      replace ((s - (TV n p q - Q0 n p q)) / Q0 n p q * Q0 n p q) with (s - (TV n p q - Q0 n p q))
        by (field; lra). lra. }
  assert (HZ : Zmass n p (fun i => th * q i) = s - (TV n p q - Q0 n p q)).
  { unfold Zmass. rewrite (sum_ext n _ (fun i => th * (if Rlt_dec 0 (p i) then 0 else q i)))
      by (intros; destruct (Rlt_dec 0 (p i)); ring).
    rewrite sum_scal. fold (Q0 n p q). unfold th. destruct (Rlt_dec 0 (Q0 n p q)).
    - field. lra.
    - lra. }
  assert (Hz : forall i, (i < n)%nat -> p i = 0 -> 0 <= th * q i <= q i).
  { intros i Hi _. pose proof (Hq i Hi). split; nra. }
  exists tl, (fun i => th * q i). split; [lra|]. split; [exact Hz|].
  split; [lra|]. split; [exact HZ|].
  - apply (cont_normalisation n p q Hp Hq SP SQ); auto.
    + rewrite HZ. lra.
Qed.

(* pi(s) is determined by s: two pairs of thresholds of the same s give the
   same clip point. *)
Lemma sum_eq_termwise : forall n a b,
  (forall i, (i < n)%nat -> a i <= b i) -> sum n a = sum n b ->
  forall i, (i < n)%nat -> a i = b i.
Proof.
  intros n a b H E i Hi.
  assert (Z : sum n (fun j => b j - a j) = 0) by (rewrite sum_minus; lra).
  pose proof (sum_nonneg_zero n (fun j => b j - a j)) as S.
  assert (b i - a i = 0) by (apply S; auto; intros j Hj; specialize (H j Hj); lra). lra.
Qed.

Lemma clip_unique : forall n p q s tl th tl' th',
  (forall i, (i < n)%nat -> 0 <= p i) -> (forall i, (i < n)%nat -> 0 <= q i) ->
  thresholds n p q s tl th -> thresholds n p q s tl' th' ->
  forall i, (i < n)%nat -> clipv p q tl th i = clipv p q tl' th' i.
Proof.
  intros n p q s tl th tl' th' Hp Hq [Hl [Hh [D U]]] [Hl' [Hh' [D' U']]].
  (* the Down terms agree, and so do the Up terms *)
  assert (ED : forall i, (i < n)%nat ->
    Rpos (p i - Rmax (q i) (tl * p i)) = Rpos (p i - Rmax (q i) (tl' * p i))).
  { destruct (Rle_dec tl tl') as [Hle|Hgt].
    - intros i Hi. symmetry. apply (sum_eq_termwise n (fun j => Rpos (p j - Rmax (q j) (tl' * p j)))
        (fun j => Rpos (p j - Rmax (q j) (tl * p j)))); auto.
      + intros j Hj. assert (tl * p j <= tl' * p j) by (apply Rmult_le_compat_r; auto). mm.
      + unfold Down, DownG in *. congruence.
    - intros i Hi. apply (sum_eq_termwise n (fun j => Rpos (p j - Rmax (q j) (tl * p j)))
        (fun j => Rpos (p j - Rmax (q j) (tl' * p j)))); auto.
      + intros j Hj. assert (tl' * p j <= tl * p j) by (apply Rmult_le_compat_r; auto; lra). mm.
      + unfold Down, DownG in *. congruence. }
  assert (EU : forall i, (i < n)%nat ->
    Rpos (Rmin (q i) (th * p i) - p i) = Rpos (Rmin (q i) (th' * p i) - p i)).
  { destruct (Rle_dec th th') as [Hle|Hgt].
    - intros i Hi. apply (sum_eq_termwise n (fun j => Rpos (Rmin (q j) (th * p j) - p j))
        (fun j => Rpos (Rmin (q j) (th' * p j) - p j))); auto.
      + intros j Hj. assert (th * p j <= th' * p j) by (apply Rmult_le_compat_r; auto). mm.
      + unfold Up, UpG in *. congruence.
    - intros i Hi. symmetry. apply (sum_eq_termwise n (fun j => Rpos (Rmin (q j) (th' * p j) - p j))
        (fun j => Rpos (Rmin (q j) (th * p j) - p j))); auto.
      + intros j Hj. assert (th' * p j <= th * p j) by (apply Rmult_le_compat_r; auto; lra). mm.
      + unfold Up, UpG in *. congruence. }
  intros i Hi. specialize (ED i Hi). specialize (EU i Hi). pose proof (Hp i Hi). pose proof (Hq i Hi).
  destruct (clip_caps tl th (p i)) as [? [? ?]]; auto.
  destruct (clip_caps tl' th' (p i)) as [? [? ?]]; auto.
  unfold clipv, cpt. mm.
Qed.
