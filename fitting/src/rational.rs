//! The fitted object: `p(t)/q(t)` in scaled variables, with the scaling and the fit's
//! diagnostics attached.

use serde::{Deserialize, Serialize};

use crate::poly::{DegreeBounds, Poly};
use crate::vars::{Scaling, Variable};
use crate::FitError;

/// A rational function `p(t)/q(t)` of the variables `x`, with `t_i = (x_i − center_i)·scale_i`.
/// `num` and `den` hold monomial coefficients in `t`; for a polynomial `den` is the constant 1.
/// The denominator is positive on the fitting points and on the domain given to the fit.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "RationalFnRepr")]
pub struct RationalFn {
    pub vars: Vec<Variable>,
    pub scalings: Vec<Scaling>,
    pub num: Poly,
    pub den: Poly,
    pub diagnostics: Diagnostics,
}

/// The serialised form, checked for consistency on the way in.
#[derive(Deserialize)]
struct RationalFnRepr {
    vars: Vec<Variable>,
    scalings: Vec<Scaling>,
    num: Poly,
    den: Poly,
    diagnostics: Diagnostics,
}

impl TryFrom<RationalFnRepr> for RationalFn {
    type Error = FitError;
    fn try_from(r: RationalFnRepr) -> Result<Self, FitError> {
        let f = RationalFn {
            vars: r.vars,
            scalings: r.scalings,
            num: r.num,
            den: r.den,
            diagnostics: r.diagnostics,
        };
        f.check_consistent()?;
        Ok(f)
    }
}

/// How a model was chosen and how well it did.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Diagnostics {
    /// Degree bound of the numerator per variable (after trimming unused degrees).
    pub num_degrees: Vec<u32>,
    /// Degree bound of the denominator per variable.
    pub den_degrees: Vec<u32>,
    /// Points used (after dropping non-finite ones, when allowed).
    pub points: usize,
    pub distinct_points: usize,
    pub dropped_non_finite: usize,
    /// Unknown coefficients of the final least-squares system (`|num| + |den| − 1`).
    pub unknowns: usize,
    /// Numerical rank of the final (column-normalised) system.
    pub rank: usize,
    /// `σ_max/σ_min` of the final column-normalised system, over the singular values kept.
    pub condition_number: f64,
    /// Relative errors of the selected degrees, fitted without the held-out points. `None`
    /// when the degrees were given (no selection) or there were too few points to hold any back.
    pub heldout: Option<HeldOut>,
    /// Median relative error of the final function on all fitting points.
    pub fit_median_rel_error: f64,
    /// Maximum relative error of the final function on all fitting points.
    pub fit_max_rel_error: f64,
    /// Relative noise level used to decide which models are "within noise" of the best.
    pub noise_estimate: Option<f64>,
    /// What the degree search looked at.
    pub search: Option<SearchStats>,
    /// `false` when the refit on all points was rejected (its denominator failed the domain
    /// check) and the model fitted without the held-out points is returned instead.
    pub refit_on_all_points: bool,
}

/// Held-out relative errors `|f(x) − v| / max(|v|, floor)` of the selected degrees.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HeldOut {
    /// Held-out points in all.
    pub points: usize,
    /// Of which, points at the largest data sizes (extrapolation).
    pub extrapolation_points: usize,
    pub median_rel_error: f64,
    pub max_rel_error: f64,
    pub extrapolation_median_rel_error: Option<f64>,
    pub extrapolation_max_rel_error: Option<f64>,
    /// The selection score (weighted mean of capped relative errors).
    pub score: f64,
}

/// Counts of the degree search.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SearchStats {
    /// Candidate (numerator, denominator) degree tuples enumerated and screened.
    pub candidates: usize,
    /// Tuples within the bounds dropped before screening: degrees the training data cannot
    /// identify (a variable with `k` distinct training values supports `d_num + d_den ≤ k − 1`)
    /// or more unknowns than `distinct training points / min_points_per_unknown`.
    pub pruned: usize,
    /// Of which, solvable in the screening pass (the others were numerically rank-deficient).
    pub screened: usize,
    /// Candidates the normal equations refused, fitted by SVD instead (near-exact data only).
    pub svd_fallback: usize,
    /// Candidates refitted by SVD (with reweighting) and checked on the domain.
    pub refit: usize,
    /// Candidates rejected because the denominator vanished or changed sign.
    pub rejected_denominator: usize,
    /// How the screening pass solved its systems.
    pub screening: String,
}

impl RationalFn {
    /// The scaled coordinates `t` of a point.
    pub fn scaled(&self, x: &[f64]) -> Vec<f64> {
        x.iter()
            .zip(&self.scalings)
            .map(|(x, s)| s.apply(*x))
            .collect()
    }

    /// `f(x)`. Rounds exactly as the C emitted by [`RationalFn::to_c`] does on a target without
    /// fused multiply-add contraction.
    ///
    /// # Panics
    /// When `x` does not have one value per variable.
    pub fn eval(&self, x: &[f64]) -> f64 {
        assert_eq!(
            x.len(),
            self.vars.len(),
            "RationalFn::eval: one value per variable"
        );
        let t = self.scaled(x);
        self.eval_scaled(&t)
    }

    pub(crate) fn eval_scaled(&self, t: &[f64]) -> f64 {
        let p = self.num.eval_scaled(t);
        if self.is_polynomial() {
            p
        } else {
            p / self.den.eval_scaled(t)
        }
    }

    /// One variable at least, and as many scalings and polynomial variables as variables.
    pub fn check_consistent(&self) -> Result<(), FitError> {
        let n = self.vars.len();
        if n == 0 {
            return Err(FitError::Empty("a rational function without variables"));
        }
        for (what, found) in [
            ("scalings", self.scalings.len()),
            ("numerator variables", self.num.nvars()),
            ("denominator variables", self.den.nvars()),
        ] {
            if found != n {
                return Err(FitError::Dimension {
                    what: what.into(),
                    expected: n,
                    found,
                });
            }
        }
        Ok(())
    }

    /// `q = 1`.
    pub fn is_polynomial(&self) -> bool {
        self.den.is_constant() && self.den.constant_term() == 1.0
    }

    /// A constant function.
    pub fn is_constant(&self) -> bool {
        self.is_polynomial() && self.num.is_constant()
    }

    pub fn num_degrees(&self) -> &DegreeBounds {
        self.num.degrees()
    }

    pub fn den_degrees(&self) -> &DegreeBounds {
        self.den.degrees()
    }
}
