(* Rounding toward p (docs/reliability.md, "How float32 gets there"): the
   core rounds each float64 pi_i to a float32 neighbour on p_i's side that
   does not pass p_i.  For a generator F with its minimum F(1) = 0 (the
   tilted generator f~(t) = f(t) - f'(1)(t - 1) of docs/theory.md §1), such a
   move cannot raise any term p_i F(pi_i/p_i) (nor f~_inf pi_i where p_i = 0),
   so the divergence of the rounded vector is at most that of the float64
   one, and the mass moves by at most the sum of the rounding steps. *)
Require Import Reals Lra Lia.
Require Import Mentored.Sums Mentored.Curve Mentored.Optimality.
Open Scope R_scope.

Definition between (x v w : R) : Prop := Rmin v w <= x <= Rmax v w.

Section Rounding.
Variables (F F' : R -> R) (dom : R -> Prop) (Finf : R).
(* convexity through supporting lines at the positive points of dom *)
Hypothesis Hsub : forall x y, 0 < x -> dom x -> dom y -> F y >= F x + F' x * (y - x).
Hypothesis Hdom : forall t, 0 < t -> dom t.
(* the tilted generator: F(1) = 0 is its minimum, and F_inf >= 0 *)
Hypothesis HF1 : F 1 = 0.
Hypothesis Hmin : forall t, dom t -> 0 <= F t.
Hypothesis HFinf : 0 <= Finf.

(* ratios: F(c) <= F(a) for c between a and 1 *)
Lemma toward_one : forall a c, 0 <= a -> dom a -> between c a 1 -> F c <= F a.
Proof.
  intros a c Ha Hda [H1 H2].
  destruct (Req_dec c a) as [->|Hca]; [lra|].
  destruct (Req_dec c 1) as [->|Hc1]; [rewrite HF1; apply Hmin; auto|].
  assert (Hc : 0 < c) by (unfold Rmin, Rmax in *; destruct (Rle_dec a 1); lra).
  pose proof (Hsub c a Hc (Hdom c Hc) Hda) as S1.
  pose proof (Hsub c 1 Hc (Hdom c Hc) (Hdom 1 ltac:(lra))) as S2. rewrite HF1 in S2.
  pose proof (Hmin c (Hdom c Hc)).
  unfold Rmin, Rmax in *. destruct (Rle_dec a 1).
  - assert (F' c <= 0) by nra. nra.
  - assert (0 <= F' c) by nra. nra.
Qed.

Lemma between_scale : forall p v x, 0 < p -> between x v p -> between (x / p) (v / p) 1.
Proof.
  intros p v x Hp Hb. unfold between, Rdiv in *.
  assert (Hi : 0 < / p) by (apply Rinv_0_lt_compat; auto).
  assert (E : p * / p = 1) by (field; lra).
  unfold Rmin, Rmax in *. destruct (Rle_dec v p); destruct (Rle_dec (v * / p) 1); split; nra.
Qed.

(* one term: x between v and p (toward p) gives dterm(x) <= dterm(v) *)
Theorem round_toward_term : forall p v x, 0 <= p -> 0 <= v -> between x v p ->
  (0 < p -> dom (v / p)) ->
  dterm F Finf p x <= dterm F Finf p v.
Proof.
  intros p v x Hp Hv Hb Hd. unfold dterm. destruct (Rlt_dec 0 p) as [Hpos|Hz].
  - apply Rmult_le_compat_l; [lra|]. apply toward_one.
    + apply Rdiv_le_0_compat; lra.
    + auto.
    + apply between_scale; auto.
  - assert (p = 0) by lra. subst p. unfold between, Rmin, Rmax in Hb.
    destruct (Rle_dec v 0); apply Rmult_le_compat_l; lra.
Qed.

(* every coordinate rounded toward p: D does not grow, and the mass moves by
   at most the sum of the steps *)
Theorem round_toward_sound : forall n p x y,
  (forall i, (i < n)%nat -> 0 <= p i) ->
  (forall i, (i < n)%nat -> 0 <= x i) ->
  (forall i, (i < n)%nat -> 0 < p i -> dom (x i / p i)) ->
  (forall i, (i < n)%nat -> between (y i) (x i) (p i)) ->
  Df n F Finf p y <= Df n F Finf p x /\
  Rabs (sum n y - 1) <= Rabs (sum n x - 1) + sum n (fun i => Rabs (y i - x i)).
Proof.
  intros n p x y Hp Hx Hd Hb. split.
  - unfold Df. apply sum_le. intros i Hi. apply round_toward_term; auto.
  - assert (Rabs (sum n y - sum n x) <= sum n (fun i => Rabs (y i - x i)))
      by (rewrite <- sum_minus; apply sum_abs).
    replace (sum n y - 1) with ((sum n y - sum n x) + (sum n x - 1)) by ring.
    eapply Rle_trans; [apply Rabs_triang|]. lra.
Qed.

(* The float32 guarantee of docs/reliability.md, for any rounding that moves
   each coordinate toward p by at most u x_i (one float32 ulp: u = 2^-23 for
   normal numbers): if the float64 point meets D~ <= eps (1 + 1e-6) + 1e-12
   and |sum x - 1| <= eta, the rounded point meets the same divergence bound
   and |sum y - 1| <= eta + u (1 + eta). *)
Theorem float32_guarantee : forall n p x y eps eta u,
  0 <= u ->
  (forall i, (i < n)%nat -> 0 <= p i) ->
  (forall i, (i < n)%nat -> 0 <= x i) ->
  (forall i, (i < n)%nat -> 0 < p i -> dom (x i / p i)) ->
  (forall i, (i < n)%nat -> between (y i) (x i) (p i)) ->
  (forall i, (i < n)%nat -> Rabs (y i - x i) <= u * x i) ->
  Df n F Finf p x <= eps * (1 + / 1000000) + / 1000000000000 ->
  Rabs (sum n x - 1) <= eta ->
  Df n F Finf p y <= eps * (1 + / 1000000) + / 1000000000000 /\
  Rabs (sum n y - 1) <= eta + u * (1 + eta).
Proof.
  intros n p x y eps eta u Hu0 Hp Hx Hd Hb Hu HD HS.
  destruct (round_toward_sound n p x y Hp Hx Hd Hb) as [D S]. split; [lra|].
  assert (sum n (fun i => Rabs (y i - x i)) <= u * sum n x)
    by (rewrite <- sum_scal; apply sum_le; auto).
  assert (sum n x <= 1 + eta) by (unfold Rabs in HS; destruct (Rcase_abs (sum n x - 1)); lra).
  assert (u * sum n x <= u * (1 + eta)) by (apply Rmult_le_compat_l; auto).
  lra.
Qed.
End Rounding.
