(* Budgets by price (docs/theory.md §4, "Budgets by price").

   The price problem  P(f, lam):  maximise A(y) - lam * D_f(y || p)  over the
   distributions y (lam >= 0).  Its structure:

   - a price optimum x is a budget optimum at the divergence it spends,
     eps_x = D_f(x || p) (price_budget_optimal);
   - x is price-optimal iff it is a budget optimum at eps_x and lam is a
     supergradient of the frontier there: A(y) <= A(x) + lam (eps - eps_x) for
     every y within any budget eps (price_supergradient, supergradient_price);
   - the marginal condition: a curve point whose thresholds satisfy
     lam (f'(t_hi) - f'(t_lo)) = 1 solves P(f, lam) (curve_price_optimal) and
     lam is a supergradient of the frontier at its divergence
     (curve_price_supergradient);
   - for strictly convex f, a price optimum is the curve point at the
     divergence it spends (price_on_curve).

   The first three are stated for any acceptance A, divergence D and set of
   admissible points; then instantiated with acc and Df. *)
Require Import Reals Lra.
Require Import Mentored.Sums Mentored.Curve Mentored.Optimality Mentored.Existence Mentored.Optimum.
Open Scope R_scope.

(* ======================================================================
   The price problem over any admissible set.
   ====================================================================== *)
Section Abstract.
Variable X : Type.
Variables (A D : X -> R) (adm : X -> Prop).
Variable lam : R.
Hypothesis Hlam : 0 <= lam.

Definition price_optimal (x : X) : Prop :=
  adm x /\ forall y, adm y -> A y - lam * D y <= A x - lam * D x.

(* a price optimum is a budget optimum at the divergence it spends *)
Theorem price_budget_optimal : forall x, price_optimal x ->
  forall y, adm y -> D y <= D x -> A y <= A x.
Proof.
  intros x [_ Hx] y Hy Hd. specialize (Hx y Hy). nra.
Qed.

(* lam is a supergradient of the frontier at eps_x = D x:
   every y within any budget eps accepts at most A x + lam (eps - eps_x) *)
Theorem price_supergradient : forall x, price_optimal x ->
  forall eps y, adm y -> D y <= eps -> A y <= A x + lam * (eps - D x).
Proof.
  intros x [_ Hx] eps y Hy Hd. specialize (Hx y Hy). nra.
Qed.

(* conversely: a point within eps0 at which lam is a supergradient of the
   frontier (with eps0 its budget) is a price optimum *)
Theorem supergradient_price : forall x eps0, adm x -> D x <= eps0 ->
  (forall eps y, adm y -> D y <= eps -> A y <= A x + lam * (eps - eps0)) ->
  price_optimal x.
Proof.
  intros x eps0 Hx Hd Hs. split; [auto|].
  intros y Hy. specialize (Hs (D y) y Hy (Rle_refl _)). nra.
Qed.
End Abstract.

(* ======================================================================
   On the curve: the marginal condition lam (f'(t_hi) - f'(t_lo)) = 1.
   ====================================================================== *)
Section Curve.
Variable n : nat.
Variables p q : nat -> R.
Variables (f f' : R -> R) (dom : R -> Prop) (finf : R).
Variables tl th lam : R.
Hypothesis Hp : forall i, (i < n)%nat -> 0 <= p i.
Hypothesis Hq : forall i, (i < n)%nat -> 0 <= q i.
Hypothesis Htl : 0 < tl <= 1.
Hypothesis Hth : 1 <= th.
Hypothesis Hsub : forall x y, 0 < x -> dom x -> dom y -> f y >= f x + f' x * (y - x).
Hypothesis Hdom : forall t, 0 < t -> dom t.
Hypothesis Hlam : 0 <= lam.
(* the marginal condition: one more unit of s costs 1/lam of divergence *)
Hypothesis Hmarg : lam * (f' th - f' tl) = 1.

(* the distributions the price problem ranges over (as in curve_D_minimal) *)
Definition admissible (y : nat -> R) : Prop :=
  simplex n y /\ (forall i, (i < n)%nat -> 0 < p i -> dom (y i / p i)) /\
  zero_ok n p f' finf th y.

Theorem curve_price_optimal : sum n (clipv p q tl th) = 1 ->
  forall y, admissible y ->
  acc n y q - lam * Df n f finf p y <=
  acc n (clipv p q tl th) q - lam * Df n f finf p (clipv p q tl th).
Proof.
  intros N y [Sy [Hd Hz]].
  pose proof (curve_D_minimal n p q f f' dom finf tl th Hp Hq Htl Hth Hsub Hdom N y Sy Hd Hz) as M.
  unfold nu in M.
  assert (L : lam * (Df n f finf p (clipv p q tl th) +
                     (f' th - f' tl) * (acc n y q - acc n (clipv p q tl th) q))
              <= lam * Df n f finf p y) by (apply Rmult_le_compat_l; auto).
  replace (lam * (Df n f finf p (clipv p q tl th) +
                  (f' th - f' tl) * (acc n y q - acc n (clipv p q tl th) q)))
    with (lam * Df n f finf p (clipv p q tl th) +
          (lam * (f' th - f' tl)) * (acc n y q - acc n (clipv p q tl th) q)) in L by ring.
  rewrite Hmarg in L. lra.
Qed.

(* lam is a supergradient of the frontier at the curve point's divergence *)
Corollary curve_price_supergradient : sum n (clipv p q tl th) = 1 ->
  forall eps y, admissible y -> Df n f finf p y <= eps ->
  acc n y q <= acc n (clipv p q tl th) q + lam * (eps - Df n f finf p (clipv p q tl th)).
Proof.
  intros N eps y Hy Hd. pose proof (curve_price_optimal N y Hy). nra.
Qed.
End Curve.

(* ======================================================================
   Strictly convex f: the price optimum is the curve point at the divergence
   it spends.
   ====================================================================== *)
Section OnCurve.
Variable n : nat.
Variables p q : nat -> R.
Variables (f f' : R -> R) (dom : R -> Prop) (finf : R).
Hypothesis Sp : simplex n p.
Hypothesis Sq : simplex n q.
Hypothesis Hsub : forall x y, 0 < x -> dom x -> dom y -> f y >= f x + f' x * (y - x).
Hypothesis Hdom : forall t, 0 < t -> dom t.
Hypothesis Hstrict : forall x y, 0 < x -> dom x -> dom y -> y <> x -> f y > f x + f' x * (y - x).

(* the distributions of MD(f, eps) with no budget: zero where p is *)
Definition admissibleZ (y : nat -> R) : Prop :=
  simplex n y /\ (forall i, (i < n)%nat -> 0 < p i -> dom (y i / p i)) /\
  (forall i, (i < n)%nat -> p i = 0 -> y i = 0).

(* x solves P(f, lam) among such points, and an admissible curve point pi(s)
   spends the same divergence: then x = pi(s), it lies between p and q and
   accepts 1 - TV + s. *)
Theorem price_on_curve : forall lam x s tl th, 0 <= lam ->
  price_optimal (nat -> R) (fun y => acc n y q) (Df n f finf p) admissibleZ lam x ->
  thresholds n p q s tl th -> admissibleZ (clipv p q tl th) ->
  Df n f finf p (clipv p q tl th) = Df n f finf p x ->
  (forall i, (i < n)%nat -> x i = clipv p q tl th i) /\
  (forall i, (i < n)%nat -> Rmin (p i) (q i) <= x i <= Rmax (p i) (q i)) /\
  acc n x q = 1 - TV n p q + s.
Proof.
  intros lam x s tl th Hlam Px T Ac Hd.
  pose proof Px as [[Sx [Hdx Hzx]] _].
  assert (Fx : feasibleZ n p f dom finf (Df n f finf p x) x)
    by exact (conj Sx (conj Hdx (conj Hzx (Rle_refl _)))).
  (* x, a budget optimum at its own divergence, accepts at least what pi(s) does *)
  assert (A : acc n (clipv p q tl th) q <= acc n x q).
  { apply (price_budget_optimal (nat -> R) (fun y => acc n y q) (Df n f finf p) admissibleZ lam Hlam x Px);
      auto; lra. }
  destruct (optimum_on_curve n p q f f' dom finf Sp Sq Hsub Hdom Hstrict (Df n f finf p x) s tl th T Hd x Fx A)
    as [E [B [Ax _]]].
  auto.
Qed.
End OnCurve.
