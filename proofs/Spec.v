(* Theorem 1: speculative sampling with a chosen verifier pi emits exactly pi
   and accepts with probability sum min(pi, q). *)
Require Import Reals Lra Lia.
Require Import Mentored.Sums.
Open Scope R_scope.

(* per-token acceptance mass  q_y * min(1, pi_y / q_y)  (= 0 when q_y = 0) *)
Lemma accept_mass : forall x y, 0 <= x -> 0 <= y ->
  y * Rmin 1 (x / y) = Rmin x y.
Proof.
  intros x y Hx Hy. destruct (Req_dec y 0) as [->|Hne].
  - rewrite Rmult_0_l. mm.
  - assert (E : x = (x / y) * y) by (field; auto).
    assert (Hy' : 0 < y) by lra.
    set (u := x / y) in *. rewrite E.
    unfold Rmin. destruct (Rle_dec 1 u); destruct (Rle_dec (u * y) y); nra.
Qed.

Section SpeculativeSampling.
Variable n : nat.
Variables pi q : nat -> R.
Hypothesis pi_nonneg : forall i, (i < n)%nat -> 0 <= pi i.
Hypothesis q_nonneg : forall i, (i < n)%nat -> 0 <= q i.
Hypothesis pi_mass : sum n pi = 1.

(* total residual mass  R = sum (pi - q)_+ *)
Definition resid_mass : R := sum n (fun x => Rpos (pi x - q x)).

(* residual law, with the degenerate case R = 0 handled explicitly *)
Definition resid (y : nat) : R :=
  if Req_EM_T resid_mass 0 then 0 else Rpos (pi y - q y) / resid_mass.

(* probability that the draft is accepted *)
Definition accept_prob : R := sum n (fun x => q x * Rmin 1 (pi x / q x)).

(* law of the emitted token: accepted draft, or rejection then residual *)
Definition emitted (y : nat) : R :=
  q y * Rmin 1 (pi y / q y) + (1 - accept_prob) * resid y.

Theorem spec_accept_prob : accept_prob = acc n pi q.
Proof.
  unfold accept_prob, acc. apply sum_ext. intros. apply accept_mass; auto.
Qed.

(* The rejection probability equals the residual mass. *)
Lemma reject_eq_resid : 1 - accept_prob = resid_mass.
Proof.
  rewrite spec_accept_prob. unfold acc, resid_mass.
  rewrite <- pi_mass, <- sum_minus. apply sum_ext. intros. mm.
Qed.

Theorem spec_emits_pi : forall y, (y < n)%nat -> emitted y = pi y.
Proof.
  intros y Hy. unfold emitted. rewrite accept_mass by auto.
  rewrite reject_eq_resid. unfold resid.
  destruct (Req_EM_T resid_mass 0) as [H0|H0].
  - (* R = 0: every (pi - q)_+ vanishes, so pi_y <= q_y *)
    assert (Z : Rpos (pi y - q y) = 0).
    { apply (sum_nonneg_zero n (fun x => Rpos (pi x - q x))); auto.
      intros. mm. }
    revert Z. mm.
  - field_simplify; auto. mm.
Qed.

Theorem spec_emitted_is_distribution :
  (forall y, (y < n)%nat -> 0 <= emitted y) /\ sum n emitted = 1.
Proof.
  split.
  - intros. rewrite spec_emits_pi; auto.
  - rewrite (sum_ext n emitted pi) by (intros; apply spec_emits_pi; auto).
    exact pi_mass.
Qed.

End SpeculativeSampling.

(* Ordinary lossless speculative sampling: verifier pi = p. *)
Theorem spec_lossless : forall n p q,
  (forall i, (i < n)%nat -> 0 <= p i) ->
  (forall i, (i < n)%nat -> 0 <= q i) ->
  sum n p = 1 -> sum n q = 1 ->
  (forall y, (y < n)%nat -> emitted n p q y = p y) /\
  accept_prob n p q = 1 - TV n p q.
Proof.
  intros n p q Hp Hq Sp Sq. split.
  - intros. apply spec_emits_pi; auto.
  - rewrite spec_accept_prob by auto. apply acc_TV; auto.
Qed.
