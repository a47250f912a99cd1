(* Tree verification (docs/theory.md §9): the expected number of accepted
   tokens of a draft tree decouples bottom-up.

   A draft tree is a node carrying a vector (the target p_v of the node) and
   a list of children, each with its token x_c. An assignment gives every
   node v a choice pi_v; it is a tree of the same shape carrying the pi_v
   (fits d t: same tokens, and every pi_v feasible for its node's p_v, e.g.
   a distribution with D_f(pi_v || p_v) <= eps: the budget per position).
   Its value is
       A(v) = sum over children c of pi_v(x_c) * (1 + A(c)),   A(leaf) = 0,
   the expected number of accepted tokens from v when the token drawn from
   pi_v moves to the child carrying it (siblings carry distinct tokens in a
   draft tree; the theorems below do not need it). The node problem with
   weights w is max { sum_c w_c pi(x_c) : pi feasible }, and best p ws is
   any maximiser of it for weights >= 1, the only ones that occur
   (Levels.v : node_level_optimal certifies one in level form). The
   recursion opt (children first, then the node with weights 1 + opt(c)) is
   the maximum of A over all assignments: it is attained by the assignment
   optd built from best, and bounds every assignment. A leaf has value 0
   whatever its choice (its token, the bonus, is drawn from its p). *)
Require Import Reals Lra Lia List.
Require Import Mentored.Sums Mentored.Serving.
Import ListNotations.
Open Scope R_scope.

Inductive tree : Type :=
  | Node : (nat -> R) -> forest -> tree
with forest : Type :=
  | Fnil : forest
  | Fcons : nat -> tree -> forest -> forest.

Scheme tree_mut := Induction for tree Sort Prop
  with forest_mut := Induction for forest Sort Prop.

(* the node objective: sum over (token, weight) pairs of pi(token) * weight *)
Fixpoint lobj (pi : nat -> R) (ws : list (nat * R)) : R :=
  match ws with
  | [] => 0
  | (x, w) :: ws' => pi x * w + lobj pi ws'
  end.

(* value of an assignment: A(v) = sum_c pi_v(x_c) (1 + A(c)) *)
Fixpoint val (d : tree) : R :=
  match d with Node pi ds => valf pi ds end
with valf (pi : nat -> R) (ds : forest) {struct ds} : R :=
  match ds with
  | Fnil => 0
  | Fcons x d ds' => pi x * (1 + val d) + valf pi ds'
  end.

Lemma val_leaf : forall pi, val (Node pi Fnil) = 0.
Proof. reflexivity. Qed.

Section Decoupling.
Variable n : nat.
(* feasible choices at a node with target p *)
Variable F : (nat -> R) -> (nat -> R) -> Prop.
Hypothesis Hnn : forall p pi x, F p pi -> (x < n)%nat -> 0 <= pi x.
(* a maximiser of the node problem, for every target and weights *)
Variable best : (nat -> R) -> list (nat * R) -> (nat -> R).
Hypothesis Hbest_feas : forall p ws, F p (best p ws).
(* (only weights >= 1 occur: opt >= 0, wts_ge1) *)
Hypothesis Hbest_opt : forall p ws pi, (forall x w, In (x, w) ws -> 1 <= w) ->
  F p pi -> lobj pi ws <= lobj (best p ws) ws.

(* the children's tokens are tokens of the vocabulary *)
Fixpoint wf (t : tree) : Prop :=
  match t with Node _ cs => wff cs end
with wff (cs : forest) : Prop :=
  match cs with
  | Fnil => True
  | Fcons x t cs' => (x < n)%nat /\ wf t /\ wff cs'
  end.

(* an assignment d for the tree t: same shape and tokens, pi_v feasible for p_v *)
Fixpoint fits (d t : tree) {struct d} : Prop :=
  match d, t with
  | Node pi ds, Node p cs => F p pi /\ fitsf ds cs
  end
with fitsf (ds cs : forest) {struct ds} : Prop :=
  match ds, cs with
  | Fnil, Fnil => True
  | Fcons x d ds', Fcons y t cs' => x = y /\ fits d t /\ fitsf ds' cs'
  | _, _ => False
  end.

(* the bottom-up recursion: weights 1 + opt(child), then the node problem *)
Fixpoint opt (t : tree) : R :=
  match t with Node p cs => lobj (best p (wts cs)) (wts cs) end
with wts (cs : forest) : list (nat * R) :=
  match cs with
  | Fnil => []
  | Fcons x t cs' => (x, 1 + opt t) :: wts cs'
  end.

(* the assignment it builds *)
Fixpoint optd (t : tree) : tree :=
  match t with Node p cs => Node (best p (wts cs)) (optdf cs) end
with optdf (cs : forest) : forest :=
  match cs with
  | Fnil => Fnil
  | Fcons x t cs' => Fcons x (optd t) (optdf cs')
  end.

Lemma opt_leaf : forall p, opt (Node p Fnil) = 0.
Proof. reflexivity. Qed.

Lemma opt_node : forall p cs, opt (Node p cs) = lobj (best p (wts cs)) (wts cs).
Proof. reflexivity. Qed.

(* With nonnegative choices the recursion is nonnegative, so every weight
   1 + opt(c) of the node problem is at least 1. *)
Lemma opt_nonneg_mut :
  (forall t, wf t -> 0 <= opt t) /\
  (forall cs, wff cs -> forall pi, (forall x, (x < n)%nat -> 0 <= pi x) -> 0 <= lobj pi (wts cs)).
Proof.
  pose (P := fun t => wf t -> 0 <= opt t).
  pose (Q := fun cs => wff cs -> forall pi, (forall x, (x < n)%nat -> 0 <= pi x) ->
               0 <= lobj pi (wts cs)).
  assert (H1 : forall p cs, Q cs -> P (Node p cs)).
  { unfold P, Q. intros p cs IH Hwf. simpl. apply IH; auto. intros x Hx. apply (Hnn p); auto. }
  assert (H2 : Q Fnil) by (unfold Q; intros _ pi _; simpl; lra).
  assert (H3 : forall x t, P t -> forall cs, Q cs -> Q (Fcons x t cs)).
  { unfold P, Q. intros x t IHt cs IHcs [Hx [Hwt Hwcs]] pi Hpi. simpl.
    pose proof (IHt Hwt). pose proof (IHcs Hwcs pi Hpi). pose proof (Hpi x Hx). nra. }
  exact (conj (tree_mut P Q H1 H2 H3) (forest_mut P Q H1 H2 H3)).
Qed.

Theorem opt_nonneg : forall t, wf t -> 0 <= opt t.
Proof. apply opt_nonneg_mut. Qed.
Lemma wts_ge1 : forall cs, wff cs -> forall x w, In (x, w) (wts cs) -> 1 <= w.
Proof.
  induction cs as [|x t cs IH]; intros Hw x' w' Hin; simpl in *; [contradiction|].
  destruct Hw as [_ [Hwt Hwcs]]. destruct Hin as [E|Hin].
  - inversion E. pose proof (opt_nonneg t Hwt). lra.
  - apply (IH Hwcs x' w'); auto.
Qed.

(* every assignment is bounded by the recursion *)
Lemma opt_upper_mut :
  (forall t, wf t -> forall d, fits d t -> val d <= opt t) /\
  (forall cs, wff cs -> forall pi ds, fitsf ds cs -> (forall x, (x < n)%nat -> 0 <= pi x) ->
     valf pi ds <= lobj pi (wts cs)).
Proof.
  pose (P := fun t => wf t -> forall d, fits d t -> val d <= opt t).
  pose (Q := fun cs => wff cs -> forall pi ds, fitsf ds cs ->
               (forall x, (x < n)%nat -> 0 <= pi x) -> valf pi ds <= lobj pi (wts cs)).
  assert (H1 : forall p cs, Q cs -> P (Node p cs)).
  { unfold P, Q. intros p cs IH Hwf d Hfit. destruct d as [pi ds]. simpl in Hfit.
    destruct Hfit as [Fp Hds].
    simpl. apply Rle_trans with (lobj pi (wts cs)).
    - apply IH; auto. intros x Hx. apply (Hnn p); auto.
    - apply Hbest_opt; auto. apply wts_ge1. exact Hwf. }
  assert (H2 : Q Fnil).
  { unfold Q. intros _ pi ds Hfit _. destruct ds; simpl in *; [lra|contradiction]. }
  assert (H3 : forall x t, P t -> forall cs, Q cs -> Q (Fcons x t cs)).
  { unfold P, Q. intros x t IHt cs IHcs [Hx [Hwt Hwcs]] pi ds Hfit Hpi.
    destruct ds as [|y d ds']; simpl in Hfit; [contradiction|].
    destruct Hfit as [Exy [Hd Hds']]. subst y. simpl.
    pose proof (IHt Hwt d Hd). pose proof (IHcs Hwcs pi ds' Hds' Hpi).
    pose proof (Hpi x Hx). nra. }
  exact (conj (tree_mut P Q H1 H2 H3) (forest_mut P Q H1 H2 H3)).
Qed.

(* the assignment optd fits the tree and attains the recursion *)
Lemma optd_mut :
  (forall t, fits (optd t) t /\ val (optd t) = opt t) /\
  (forall cs, fitsf (optdf cs) cs /\ forall pi, valf pi (optdf cs) = lobj pi (wts cs)).
Proof.
  pose (P := fun t => fits (optd t) t /\ val (optd t) = opt t).
  pose (Q := fun cs => fitsf (optdf cs) cs /\ forall pi, valf pi (optdf cs) = lobj pi (wts cs)).
  assert (H1 : forall p cs, Q cs -> P (Node p cs)).
  { unfold P, Q. intros p cs [Hf Hv]. simpl. split; [split; auto|]. apply Hv. }
  assert (H2 : Q Fnil) by (unfold Q; simpl; split; auto).
  assert (H3 : forall x t, P t -> forall cs, Q cs -> Q (Fcons x t cs)).
  { unfold P, Q. intros x t [Hft Hvt] cs [Hfcs Hvcs]. simpl. split; [auto|].
    intros pi. rewrite Hvt, Hvcs. reflexivity. }
  exact (conj (tree_mut P Q H1 H2 H3) (forest_mut P Q H1 H2 H3)).
Qed.

(* Bottom-up decoupling: the recursion's value is the maximum of the
   expected number of accepted tokens over all assignments. *)
Theorem tree_decoupling : forall t, wf t ->
  fits (optd t) t /\ val (optd t) = opt t /\
  forall d, fits d t -> val d <= opt t.
Proof.
  intros t Hwf. destruct (proj1 optd_mut t) as [Hf Hv].
  split; [auto|]. split; [auto|]. intros d Hd. apply (proj1 opt_upper_mut); auto.
Qed.

End Decoupling.

(* ======================================================================
   The node objective as a weighted class objective (Levels.v): with the
   tokens of ws below n, sum_{(x, w) in ws} pi(x) w = sum_i wt(i) pi_i, where
   wt(i) sums the weights carried by token i; with the class map tc (each
   token of ws its own class, every other token the class n), wt is constant
   on classes, so Levels.v : node_level_optimal (K = n + 1) applies.
   ====================================================================== *)
Fixpoint wt (ws : list (nat * R)) (i : nat) : R :=
  match ws with
  | [] => 0
  | (x, w) :: ws' => (if Nat.eq_dec x i then w else 0) + wt ws' i
  end.

Fixpoint tokin (i : nat) (ws : list (nat * R)) : bool :=
  match ws with
  | [] => false
  | (x, _) :: ws' => if Nat.eq_dec x i then true else tokin i ws'
  end.

Definition tc (n : nat) (ws : list (nat * R)) (i : nat) : nat :=
  if tokin i ws then i else n.

Lemma wt_absent : forall ws i, tokin i ws = false -> wt ws i = 0.
Proof.
  induction ws as [|[x w] ws' IH]; intros i H; simpl in *; [reflexivity|].
  destruct (Nat.eq_dec x i); [discriminate|]. rewrite IH by auto. ring.
Qed.

Lemma tokin_lt : forall n ws i, (forall x w, In (x, w) ws -> (x < n)%nat) ->
  tokin i ws = true -> (i < n)%nat.
Proof.
  intros n. induction ws as [|[x w] ws' IH]; intros i Hws H; simpl in *; [discriminate|].
  destruct (Nat.eq_dec x i) as [<-|Ne].
  - apply (Hws x w). left. reflexivity.
  - apply IH; auto. intros x' w' Hin. apply (Hws x' w'). right. auto.
Qed.

Lemma tc_range : forall n ws i, (i < n)%nat -> (tc n ws i < S n)%nat.
Proof. intros. unfold tc. destruct (tokin i ws); lia. Qed.

Lemma wt_tc : forall n ws i, (forall x w, In (x, w) ws -> (x < n)%nat) ->
  wt ws (tc n ws i) = wt ws i.
Proof.
  intros n ws i Hws. unfold tc. destruct (tokin i ws) eqn:E; [reflexivity|].
  rewrite (wt_absent ws i E). apply wt_absent.
  destruct (tokin n ws) eqn:En; [|reflexivity].
  pose proof (tokin_lt n ws n Hws En). lia.
Qed.

Theorem node_objective_classes : forall n ws (pi : nat -> R),
  (forall x w, In (x, w) ws -> (x < n)%nat) ->
  lobj pi ws = sum n (fun i => wt ws (tc n ws i) * pi i).
Proof.
  intros n ws pi Hws. rewrite (sum_ext n _ (fun i => wt ws i * pi i))
    by (intros; rewrite wt_tc; auto).
  induction ws as [|a ws' IH].
  - simpl. rewrite (sum_ext n _ (fun _ => 0)) by (intros; ring). rewrite sum_zero. reflexivity.
  - destruct a as [x0 w0]. simpl. assert (Hx0 : (x0 < n)%nat) by (apply (Hws x0 w0); left; auto).
    rewrite (sum_ext n _ (fun i => (if Nat.eq_dec i x0 then w0 * pi x0 else 0) + wt ws' i * pi i)).
    + rewrite sum_plus, IH.
      * rewrite (sum_update n x0 (w0 * pi x0) (fun _ => 0) Hx0), sum_zero. ring.
      * intros x' w' Hin. apply (Hws x' w'). right. auto.
    + intros i Hi. destruct (Nat.eq_dec x0 i) as [E|Ne]; destruct (Nat.eq_dec i x0) as [E'|Ne'];
        try (exfalso; lia); [subst; ring|ring].
Qed.
