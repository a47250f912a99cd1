(* Theorem 8: weak duality, the soundness of `certify`. *)
Require Import Reals Lra Lia.
Require Import Mentored.Sums Mentored.Curve Mentored.Optimality.
Open Scope R_scope.

Section WeakDuality.
Variable n : nat.
Variables p q : nat -> R.
Variables (f : R -> R) (dom : R -> Prop) (finf lam mu eps : R).
(* per-coordinate upper bounds of the inner suprema of g *)
Variable c : nat -> R.
Hypothesis Hlam : 0 <= lam.
Hypothesis Hc : forall i x, (i < n)%nat -> 0 <= x -> (0 < p i -> dom (x / p i)) ->
  Rmin x (q i) - lam * dterm f finf (p i) x - mu * x <= c i.

(* g(lam, mu) = lam eps + mu + sum_i c_i *)
Definition dual_g : R := lam * eps + mu + sum n c.

Theorem weak_duality : forall x, simplex n x ->
  (forall i, (i < n)%nat -> 0 < p i -> dom (x i / p i)) ->
  Df n f finf p x <= eps -> acc n x q <= dual_g.
Proof.
  intros x [Hx Sx] Hd HD.
  assert (S : sum n (fun i => Rmin (x i) (q i) - lam * dterm f finf (p i) (x i) - mu * x i)
              <= sum n c) by (apply sum_le; intros; apply Hc; auto).
  rewrite sum_lin3 in S. unfold acc, Df, dual_g in *. rewrite Sx in S. nra.
Qed.

(* A certificate (x, lam, mu) with gap g - A(x) <= tau proves that x is
   tau-optimal: A(y) <= A(x) + tau for every feasible y. *)
Theorem certificate_sound : forall x tau, dual_g - acc n x q <= tau ->
  forall y, simplex n y -> (forall i, (i < n)%nat -> 0 < p i -> dom (y i / p i)) ->
  Df n f finf p y <= eps -> acc n y q <= acc n x q + tau.
Proof.
  intros x tau Hgap y Hy Hd HD. pose proof (weak_duality y Hy Hd HD). lra.
Qed.
End WeakDuality.

(* Valid per-coordinate bounds c_i, from the convex conjugate
   f*(y) >= y t - f(t) (t >= 0 in dom):
     p_i > 0 : c_i = p_i min( lam f*((1-mu)/lam), r_i + lam f*(-mu/lam) )
     p_i = 0 : c_i = q_i max(0, 1 - (lam finf + mu))   (needs lam finf + mu >= 0) *)
Lemma coord_bound_pos : forall (f fstar : R -> R) (dom : R -> Prop) finf lam mu pi qi x,
  0 < pi -> 0 < lam -> 0 <= x -> dom (x / pi) ->
  (forall t, 0 <= t -> dom t -> (1 - mu) / lam * t - f t <= fstar ((1 - mu) / lam)) ->
  (forall t, 0 <= t -> dom t -> (- mu) / lam * t - f t <= fstar ((- mu) / lam)) ->
  Rmin x qi - lam * dterm f finf pi x - mu * x <=
  pi * Rmin (lam * fstar ((1 - mu) / lam)) (qi / pi + lam * fstar ((- mu) / lam)).
Proof.
  intros f fstar dom finf lam mu pi qi x Hp Hl Hx Hd H1 H2.
  rewrite (coord_scale f finf lam mu pi) by auto.
  apply Rmult_le_compat_l; [lra|].
  set (u := x / pi) in *. set (r := qi / pi).
  assert (Hu : 0 <= u) by (unfold u; apply Rdiv_le_0_compat; lra).
  assert (A1 : lam * ((1 - mu) / lam * u - f u) <= lam * fstar ((1 - mu) / lam))
    by (apply Rmult_le_compat_l; [lra | apply H1; auto]).
  assert (A2 : lam * ((- mu) / lam * u - f u) <= lam * fstar ((- mu) / lam))
    by (apply Rmult_le_compat_l; [lra | apply H2; auto]).
  replace (lam * ((1 - mu) / lam * u - f u)) with ((1 - mu) * u - lam * f u) in A1
    by (field; lra).
  replace (lam * ((- mu) / lam * u - f u)) with ((- mu) * u - lam * f u) in A2
    by (field; lra).
  unfold Rmin. destruct (Rle_dec u r); destruct (Rle_dec (lam * fstar ((1 - mu) / lam))
    (r + lam * fstar (- mu / lam))); lra.
Qed.

Lemma coord_bound_zero : forall (f : R -> R) finf lam mu qi x,
  0 <= qi -> 0 <= x -> 0 <= lam * finf + mu ->
  Rmin x qi - lam * dterm f finf 0 x - mu * x <= qi * Rmax 0 (1 - (lam * finf + mu)).
Proof.
  intros f finf lam mu qi x Hq Hx Hc. unfold dterm.
  destruct (Rlt_dec 0 0); [lra|].
  set (c0 := lam * finf + mu) in *.
  replace (Rmin x qi - lam * (finf * x) - mu * x) with (Rmin x qi - c0 * x) by (unfold c0; ring).
  unfold Rmax, Rmin. destruct (Rle_dec 0 (1 - c0)); destruct (Rle_dec x qi); nra.
Qed.
