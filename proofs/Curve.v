(* Theorems 3, 4, 6: normalisation, divergence independence of the
   acceptance along the curve, and the total-variation geometry.

   Points of the curve are written without division:
       pi_i = max(a_i, min(q_i, b_i)),   0 <= a_i <= p_i <= b_i.
   The clip curve is a_i = t_lo p_i, b_i = t_hi p_i (so that for p_i > 0,
   pi_i = p_i clip(q_i/p_i, t_lo, t_hi), and pi_i = 0 when p_i = 0); the
   continuation of Theorem 7 uses b_i = z_i in [0, q_i] on {p_i = 0}. *)
Require Import Reals Lra Lia.
Require Import Mentored.Sums.
Open Scope R_scope.

Definition cpt (a q b : R) : R := Rmax a (Rmin q b).

(* Down / Up with general lower and upper caps *)
Definition DownG (n : nat) (p q a : nat -> R) : R :=
  sum n (fun i => Rpos (p i - Rmax (q i) (a i))).
Definition UpG (n : nat) (p q b : nat -> R) : R :=
  sum n (fun i => Rpos (Rmin (q i) (b i) - p i)).

(* Down(t) = sum (p_i - max(q_i, t p_i))_+,  Up(t) = sum (min(q_i, t p_i) - p_i)_+ *)
Definition Down (n : nat) (p q : nat -> R) (t : R) : R :=
  DownG n p q (fun i => t * p i).
Definition Up (n : nat) (p q : nat -> R) (t : R) : R :=
  UpG n p q (fun i => t * p i).

Definition clipv (p q : nat -> R) (tl th : R) (i : nat) : R :=
  cpt (tl * p i) (q i) (th * p i).

(* ---------- per-coordinate facts ---------- *)
Lemma cpt_nonneg : forall a p q b, 0 <= a -> a <= p -> p <= b -> 0 <= q -> 0 <= cpt a q b.
Proof. intros a p q b Ha Hap Hpb Hq. unfold cpt. mm. Qed.

Lemma cpt_between : forall a p q b, 0 <= a -> a <= p -> p <= b -> 0 <= q -> Rmin p q <= cpt a q b <= Rmax p q.
Proof. intros a p q b Ha Hap Hpb Hq. unfold cpt. mm. Qed.

Lemma cpt_shift : forall a p q b, 0 <= a -> a <= p -> p <= b -> 0 <= q ->
  cpt a q b - p = Rpos (Rmin q b - p) - Rpos (p - Rmax q a).
Proof. intros a p q b Ha Hap Hpb Hq. unfold cpt. mm. Qed.

Lemma cpt_abs_p : forall a p q b, 0 <= a -> a <= p -> p <= b -> 0 <= q ->
  Rabs (cpt a q b - p) = Rpos (Rmin q b - p) + Rpos (p - Rmax q a).
Proof. intros a p q b Ha Hap Hpb Hq. unfold cpt. mm. Qed.

Lemma cpt_min : forall a p q b, 0 <= a -> a <= p -> p <= b -> 0 <= q ->
  Rmin (cpt a q b) q = Rmin p q + Rpos (Rmin q b - p).
Proof. intros a p q b Ha Hap Hpb Hq. unfold cpt. mm. Qed.

Lemma cpt_abs_q : forall a p q b, 0 <= a -> a <= p -> p <= b -> 0 <= q ->
  Rabs (cpt a q b - q) = Rabs (p - q) - Rabs (cpt a q b - p).
Proof. intros a p q b Ha Hap Hpb Hq. unfold cpt. mm. Qed.


Lemma clip_caps : forall tl th p, 0 <= tl <= 1 -> 1 <= th -> 0 <= p ->
  0 <= tl * p /\ tl * p <= p /\ p <= th * p.
Proof. intros. repeat split; nra. Qed.

(* ---------- the generalised curve ---------- *)
Section GenCurve.
Variable n : nat.
Variables p q a b : nat -> R.
Hypothesis Hcaps : forall i, (i < n)%nat -> 0 <= a i /\ a i <= p i /\ p i <= b i.
Hypothesis Hq : forall i, (i < n)%nat -> 0 <= q i.
Hypothesis Sp : sum n p = 1.
Hypothesis Sq : sum n q = 1.

Definition gpi (i : nat) : R := cpt (a i) (q i) (b i).

Ltac caps i Hi := destruct (Hcaps i Hi) as [? [? ?]]; pose proof (Hq i Hi).

Lemma gpi_nonneg : forall i, (i < n)%nat -> 0 <= gpi i.
Proof. intros i Hi. caps i Hi. unfold gpi. apply (cpt_nonneg (a i) (p i)); lra. Qed.

Lemma gpi_mass : sum n gpi = 1 + UpG n p q b - DownG n p q a.
Proof.
  unfold UpG, DownG.
  rewrite (sum_ext n gpi (fun i => p i + (Rpos (Rmin (q i) (b i) - p i)
                                         - Rpos (p i - Rmax (q i) (a i))))).
  - rewrite sum_plus, sum_minus. lra.
  - intros i Hi. caps i Hi. unfold gpi.
    rewrite <- (cpt_shift (a i) (p i) (q i) (b i)); lra.
Qed.

(* Theorem 3 (normalisation), general caps *)
Theorem gen_normalisation :
  sum n gpi = 1 <-> DownG n p q a = UpG n p q b.
Proof. rewrite gpi_mass. lra. Qed.

Lemma gen_TV_p : TV n gpi p = (UpG n p q b + DownG n p q a) / 2.
Proof.
  unfold TV, UpG, DownG. rewrite <- sum_plus.
  rewrite (sum_ext n (fun i => Rabs (gpi i - p i))
                     (fun i => Rpos (Rmin (q i) (b i) - p i) + Rpos (p i - Rmax (q i) (a i)))).
  - lra.
  - intros i Hi. caps i Hi. unfold gpi. apply cpt_abs_p; lra.
Qed.

Theorem gen_TV_is_s : sum n gpi = 1 -> TV n gpi p = UpG n p q b.
Proof.
  intros H. rewrite gen_TV_p. apply gen_normalisation in H. rewrite H. lra.
Qed.

Lemma gen_acc : acc n gpi q = acc n p q + UpG n p q b.
Proof.
  unfold acc, UpG. rewrite <- sum_plus. apply sum_ext. intros i Hi.
  caps i Hi. unfold gpi. apply cpt_min; lra.
Qed.

(* Theorem 4 (divergence independence), general caps *)
Theorem gen_acceptance : sum n gpi = 1 ->
  acc n gpi q = 1 - TV n p q + TV n gpi p.
Proof.
  intros H. rewrite gen_acc, gen_TV_is_s by auto.
  rewrite acc_TV by auto. lra.
Qed.

(* Theorem 6 (geodesic), general caps *)
Theorem gen_geodesic : TV n p gpi + TV n gpi q = TV n p q.
Proof.
  rewrite TV_sym. unfold TV.
  rewrite (sum_ext n (fun i => Rabs (gpi i - q i))
                     (fun i => Rabs (p i - q i) - Rabs (gpi i - p i))).
  - rewrite sum_minus. lra.
  - intros i Hi. caps i Hi. unfold gpi. apply cpt_abs_q; lra.
Qed.

Lemma gen_between : forall i, (i < n)%nat ->
  Rmin (p i) (q i) <= gpi i <= Rmax (p i) (q i).
Proof. intros i Hi. caps i Hi. unfold gpi. apply cpt_between; lra. Qed.
End GenCurve.

(* ---------- the clip curve  pi = p clip(q/p, t_lo, t_hi) ---------- *)
Section ClipCurve.
Variable n : nat.
Variables p q : nat -> R.
Variables tl th : R.
Hypothesis Htl : 0 <= tl <= 1.
Hypothesis Hth : 1 <= th.
Hypothesis Hp : forall i, (i < n)%nat -> 0 <= p i.
Hypothesis Hq : forall i, (i < n)%nat -> 0 <= q i.
Hypothesis Sp : sum n p = 1.
Hypothesis Sq : sum n q = 1.

Let caps : forall i, (i < n)%nat ->
  0 <= tl * p i /\ tl * p i <= p i /\ p i <= th * p i.
Proof. intros. apply clip_caps; auto. Qed.

Ltac tocurve := unfold Down, Up in *;
  change (clipv p q tl th) with (gpi q (fun j => tl * p j) (fun j => th * p j)) in *.

Lemma clip_is_gpi : forall i,
  clipv p q tl th i = gpi q (fun j => tl * p j) (fun j => th * p j) i.
Proof. reflexivity. Qed.

Lemma clip_nonneg : forall i, (i < n)%nat -> 0 <= clipv p q tl th i.
Proof. intros. tocurve. apply (gpi_nonneg n p q); auto. Qed.

(* Theorem 3: normalisation iff Down(t_lo) = Up(t_hi) *)
Theorem normalisation :
  sum n (clipv p q tl th) = 1 <-> Down n p q tl = Up n p q th.
Proof. tocurve. apply (gen_normalisation n p q); auto. Qed.

(* Theorem 3 (cont.): the common value is s = TV(pi, p) *)
Theorem normalisation_TV : sum n (clipv p q tl th) = 1 ->
  TV n (clipv p q tl th) p = Up n p q th /\
  TV n (clipv p q tl th) p = Down n p q tl.
Proof.
  intros H. pose proof H as H'. apply normalisation in H'. tocurve.
  split.
  - apply (gen_TV_is_s n p q); auto.
  - rewrite H'. apply (gen_TV_is_s n p q); auto.
Qed.

(* Theorem 4: acceptance along the curve is 1 - TV(p, q) + s *)
Theorem acceptance_on_curve : forall s,
  Down n p q tl = s -> Up n p q th = s ->
  sum n (clipv p q tl th) = 1 /\ acc n (clipv p q tl th) q = 1 - TV n p q + s.
Proof.
  intros s Hd Hu.
  assert (N : sum n (clipv p q tl th) = 1) by (apply normalisation; congruence).
  split; auto. tocurve.
  rewrite (gen_acceptance n p q); auto.
  rewrite (gen_TV_is_s n p q); auto. congruence.
Qed.

(* Theorem 6, first part: TV(p, pi) + TV(pi, q) = TV(p, q) on the curve;
   TV(pi, q) = TV(p, q) - s. *)
Theorem curve_geodesic :
  TV n p (clipv p q tl th) + TV n (clipv p q tl th) q = TV n p q.
Proof. tocurve. apply (gen_geodesic n p q); auto. Qed.
End ClipCurve.

(* Theorem 6, second part: the TV upper bound for every feasible pi. *)
Theorem tv_upper_bound : forall n p q x eps,
  simplex n p -> simplex n q -> simplex n x ->
  TV n x p <= eps ->
  acc n x q <= Rmin 1 (1 - TV n p q + eps).
Proof.
  intros n p q x eps [Hp Sp] [Hq Sq] [Hx Sx] Hfeas.
  rewrite acc_TV by auto.
  pose proof (TV_triangle n p x q). rewrite (TV_sym n p x) in H.
  pose proof (TV_nonneg n x q).
  unfold Rmin. destruct (Rle_dec 1 (1 - TV n p q + eps)); lra.
Qed.

(* Theorem 6, third part: any point of the (generalised) curve with
   s = min(eps, TV(p,q)) attains the bound and is feasible. *)
Theorem tv_curve_attains : forall n p q a b eps,
  (forall i, (i < n)%nat -> 0 <= a i /\ a i <= p i /\ p i <= b i) ->
  simplex n p -> simplex n q -> 0 <= eps ->
  sum n (gpi q a b) = 1 ->
  TV n (gpi q a b) p = Rmin eps (TV n p q) ->
  simplex n (gpi q a b) /\ TV n (gpi q a b) p <= eps /\
  acc n (gpi q a b) q = Rmin 1 (1 - TV n p q + eps).
Proof.
  intros n p q a b eps Hc [Hp Sp] [Hq Sq] He N Hs.
  split; [split; auto; intros; apply (gpi_nonneg n p q a b); auto|].
  split; [rewrite Hs; apply Rmin_l|].
  rewrite (gen_acceptance n p q a b); auto. rewrite Hs.
  unfold Rmin. destruct (Rle_dec eps (TV n p q));
  destruct (Rle_dec 1 (1 - TV n p q + eps)); lra.
Qed.
