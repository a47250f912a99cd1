(* Audit: every main theorem depends only on the standard library's axioms
   of the real numbers (checked by check_assumptions.py). *)
Require Import Mentored.Sums Mentored.Spec Mentored.Curve Mentored.Optimality
  Mentored.Duality Mentored.Monotone Mentored.Boosting Mentored.TargetZeros
  Mentored.Inversion.
Print Assumptions spec_emits_pi.
Print Assumptions spec_accept_prob.
Print Assumptions spec_lossless.
Print Assumptions clip_optimal.
Print Assumptions clip_optimal_infinite_finf.
Print Assumptions clip_optimal_pos.
Print Assumptions q_optimal.
Print Assumptions normalisation.
Print Assumptions normalisation_TV.
Print Assumptions acceptance_on_curve.
Print Assumptions gen_acceptance.
Print Assumptions curve_geodesic.
Print Assumptions gen_geodesic.
Print Assumptions tv_upper_bound.
Print Assumptions tv_curve_attains.
Print Assumptions D_monotone.
Print Assumptions D_monotone_thresholds.
Print Assumptions Up_le_end.
Print Assumptions Up_end.
Print Assumptions infinite_finf_bound.
Print Assumptions curve_end_acceptance.
Print Assumptions cont_normalisation.
Print Assumptions cont_acceptance.
Print Assumptions continuation_optimal.
Print Assumptions weak_duality.
Print Assumptions certificate_sound.
Print Assumptions coord_bound_pos.
Print Assumptions coord_bound_zero.
Print Assumptions boost_form.
Print Assumptions boost_no_normaliser.
Print Assumptions boost_logloss.
Print Assumptions boost_Ep_nonpos.
Print Assumptions Down_affine.
Print Assumptions Down_inversion.
Print Assumptions Down_inversion_unique.
Print Assumptions Down_sorted_gap.
Print Assumptions Up_affine.
Print Assumptions Up_inversion.
Print Assumptions Up_inversion_unique.
Print Assumptions Up_sorted_gap.
Print Assumptions Df_prefix_sums.
