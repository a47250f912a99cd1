(* Finite sums over the vocabulary {0, ..., n-1} and the elementary
   per-coordinate vocabulary used by every other file.
   A distribution on n tokens is a function nat -> R; only the values at
   indices < n matter. *)
Require Import Reals Lra Lia.
Open Scope R_scope.

Fixpoint sum (n : nat) (a : nat -> R) : R :=
  match n with
  | O => 0
  | S k => sum k a + a k
  end.

Lemma sum_ext : forall n a b,
  (forall i, (i < n)%nat -> a i = b i) -> sum n a = sum n b.
Proof.
  induction n; intros a b H; simpl; [reflexivity|].
  rewrite (IHn a b) by (intros; apply H; lia). rewrite H by lia. reflexivity.
Qed.

Lemma sum_le : forall n a b,
  (forall i, (i < n)%nat -> a i <= b i) -> sum n a <= sum n b.
Proof.
  induction n; intros a b H; simpl; [lra|].
  assert (sum n a <= sum n b) by (apply IHn; intros; apply H; lia).
  assert (a n <= b n) by (apply H; lia). lra.
Qed.

Lemma sum_plus : forall n a b,
  sum n (fun i => a i + b i) = sum n a + sum n b.
Proof. induction n; intros; simpl; [lra|]. rewrite IHn. lra. Qed.

Lemma sum_minus : forall n a b,
  sum n (fun i => a i - b i) = sum n a - sum n b.
Proof. induction n; intros; simpl; [lra|]. rewrite IHn. lra. Qed.

Lemma sum_scal : forall n c a,
  sum n (fun i => c * a i) = c * sum n a.
Proof. induction n; intros; simpl; [lra|]. rewrite IHn. lra. Qed.

Lemma sum_zero : forall n, sum n (fun _ => 0) = 0.
Proof. induction n; simpl; [lra|]. rewrite IHn. lra. Qed.

Lemma sum_nonneg : forall n a,
  (forall i, (i < n)%nat -> 0 <= a i) -> 0 <= sum n a.
Proof.
  intros n a H. rewrite <- (sum_zero n). apply sum_le. exact H.
Qed.

Lemma sum_ge_term : forall n a j,
  (forall i, (i < n)%nat -> 0 <= a i) -> (j < n)%nat -> a j <= sum n a.
Proof.
  induction n; intros a j H Hj; [lia|]. simpl.
  assert (0 <= sum n a) by (apply sum_nonneg; intros; apply H; lia).
  destruct (Nat.eq_dec j n) as [->|Hne].
  - lra.
  - assert (a j <= sum n a) by (apply IHn; [intros; apply H; lia | lia]).
    assert (0 <= a n) by (apply H; lia). lra.
Qed.

Lemma sum_nonneg_zero : forall n a,
  (forall i, (i < n)%nat -> 0 <= a i) -> sum n a = 0 ->
  forall j, (j < n)%nat -> a j = 0.
Proof.
  intros n a H Hs j Hj.
  assert (a j <= sum n a) by (apply sum_ge_term; auto).
  assert (0 <= a j) by auto. lra.
Qed.

Lemma sum_split : forall k m a,
  sum (m + k) a = sum m a + sum k (fun i => a (m + i)%nat).
Proof.
  induction k; intros m a; simpl.
  - rewrite Nat.add_0_r. lra.
  - rewrite Nat.add_succ_r. simpl. rewrite IHk. lra.
Qed.

Lemma sum_abs : forall n a, Rabs (sum n a) <= sum n (fun i => Rabs (a i)).
Proof.
  induction n; intros a; simpl.
  - rewrite Rabs_R0. lra.
  - specialize (IHn a).
    pose proof (Rabs_triang (sum n a) (a n)). lra.
Qed.

(* ---------- elementary per-coordinate notions ---------- *)

Definition Rpos (x : R) : R := Rmax 0 x.

(* A tactic that unfolds min / max / positive part / absolute value into
   cases and closes the goal by linear (then nonlinear) arithmetic. *)
Ltac mm :=
  unfold Rpos, Rmin, Rmax in *;
  repeat match goal with
         | |- context [Rle_dec ?a ?b] => destruct (Rle_dec a b)
         | H : context [Rle_dec ?a ?b] |- _ => destruct (Rle_dec a b)
         end;
  try split_Rabs; try lra.

Definition simplex (n : nat) (x : nat -> R) : Prop :=
  (forall i, (i < n)%nat -> 0 <= x i) /\ sum n x = 1.

(* total variation  TV(x, y) = 1/2 sum |x_i - y_i| *)
Definition TV (n : nat) (x y : nat -> R) : R :=
  / 2 * sum n (fun i => Rabs (x i - y i)).

(* acceptance  A(x) = sum min(x_i, q_i) *)
Definition acc (n : nat) (x q : nat -> R) : R :=
  sum n (fun i => Rmin (x i) (q i)).

Lemma TV_sym : forall n x y, TV n x y = TV n y x.
Proof.
  intros. unfold TV. f_equal. apply sum_ext. intros. apply Rabs_minus_sym.
Qed.

Lemma TV_nonneg : forall n x y, 0 <= TV n x y.
Proof.
  intros. unfold TV. assert (0 <= sum n (fun i => Rabs (x i - y i))).
  { apply sum_nonneg. intros. apply Rabs_pos. } lra.
Qed.

Lemma TV_triangle : forall n x y z, TV n x z <= TV n x y + TV n y z.
Proof.
  intros. unfold TV.
  assert (sum n (fun i => Rabs (x i - z i)) <=
          sum n (fun i => Rabs (x i - y i) + Rabs (y i - z i))).
  { apply sum_le. intros. mm. }
  rewrite sum_plus in H. lra.
Qed.

Lemma min_abs : forall a b, Rmin a b = (a + b - Rabs (a - b)) / 2.
Proof. intros. mm. Qed.

(* For two vectors of equal mass, sum min = mass - TV. *)
Lemma acc_TV : forall n x y, sum n x = 1 -> sum n y = 1 ->
  acc n x y = 1 - TV n x y.
Proof.
  intros n x y Hx Hy. unfold acc, TV.
  rewrite (sum_ext n _ (fun i => /2 * (x i + y i) + (- /2) * Rabs (x i - y i)))
    by (intros; rewrite min_abs; lra).
  rewrite sum_plus, !sum_scal, sum_plus. lra.
Qed.

(* TV as the positive part sum, when the masses agree. *)
Lemma TV_pos : forall n x y, sum n x = sum n y ->
  TV n x y = sum n (fun i => Rpos (x i - y i)).
Proof.
  intros n x y H. unfold TV.
  assert (E1 : sum n (fun i => Rabs (x i - y i)) =
               sum n (fun i => 2 * Rpos (x i - y i) - (x i - y i))).
  { apply sum_ext. intros. mm. }
  rewrite E1, sum_minus, sum_scal, sum_minus. lra.
Qed.

Lemma TV_pos' : forall n x y, sum n x = sum n y ->
  TV n x y = sum n (fun i => Rpos (y i - x i)).
Proof.
  intros. rewrite TV_sym. apply TV_pos. auto.
Qed.

Lemma Rdiv_le_0_compat : forall a b, 0 <= a -> 0 < b -> 0 <= a / b.
Proof.
  intros a b Ha Hb. unfold Rdiv.
  apply Rmult_le_pos; [auto | left; apply Rinv_0_lt_compat; auto].
Qed.
