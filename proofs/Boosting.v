(* Theorem 9: the boosting view.  On the curve pi = p e^h with
   h_i = log clip(r_i, t_lo, t_hi), sum p e^h = 1 (no normaliser),
   E_d[log pi] - E_d[log p] = E_d[h] for every d, and E_p[h] <= 0. *)
Require Import Reals Lra Lia.
Require Import Mentored.Sums Mentored.Curve Mentored.Optimality.
Open Scope R_scope.

Section Boosting.
Variable n : nat.
Variables p q : nat -> R.
Variables tl th : R.
Hypothesis Hp : forall i, (i < n)%nat -> 0 < p i.
(* log pi is finite: pi_i > 0 (e.g. t_lo > 0, or q_i > 0) *)
Hypothesis Hpi : forall i, (i < n)%nat -> 0 < clipv p q tl th i.
Hypothesis Sp : sum n p = 1.
Hypothesis N : sum n (clipv p q tl th) = 1.

Definition h (i : nat) : R := ln (Rmax tl (Rmin (q i / p i) th)).

Lemma clipv_scaled : forall i, (i < n)%nat ->
  clipv p q tl th i = p i * Rmax tl (Rmin (q i / p i) th).
Proof.
  intros i Hi. pose proof (Hp i Hi). unfold clipv.
  replace (q i) with (p i * (q i / p i)) at 1 by (field; lra).
  apply cpt_scale; auto.
Qed.

Lemma clip_ratio_pos : forall i, (i < n)%nat -> 0 < Rmax tl (Rmin (q i / p i) th).
Proof.
  intros i Hi. pose proof (Hp i Hi). pose proof (Hpi i Hi).
  rewrite clipv_scaled in H0 by auto.
  destruct (Rlt_dec 0 (Rmax tl (Rmin (q i / p i) th))); auto. nra.
Qed.

Theorem boost_form : forall i, (i < n)%nat -> clipv p q tl th i = p i * exp (h i).
Proof.
  intros i Hi. unfold h. rewrite exp_ln by (apply clip_ratio_pos; auto).
  apply clipv_scaled; auto.
Qed.

Theorem boost_no_normaliser : sum n (fun i => p i * exp (h i)) = 1.
Proof.
  rewrite <- N. apply sum_ext. intros. symmetry. apply boost_form; auto.
Qed.

Theorem boost_logloss : forall d : nat -> R,
  sum n (fun i => d i * ln (clipv p q tl th i)) - sum n (fun i => d i * ln (p i)) =
  sum n (fun i => d i * h i).
Proof.
  intros d. rewrite <- sum_minus. apply sum_ext. intros i Hi.
  rewrite boost_form by auto. rewrite ln_mult, ln_exp.
  - ring.
  - apply Hp; auto.
  - apply exp_pos.
Qed.

Theorem boost_Ep_nonpos : sum n (fun i => p i * h i) <= 0.
Proof.
  assert (sum n (fun i => p i * h i) <= sum n (fun i => clipv p q tl th i - p i)).
  { apply sum_le. intros i Hi. rewrite boost_form by auto.
    pose proof (exp_ineq1_le (h i)). pose proof (Hp i Hi). nra. }
  rewrite sum_minus, N, Sp in H. lra.
Qed.
End Boosting.
