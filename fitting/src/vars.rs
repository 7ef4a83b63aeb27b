//! The independent variables of a fit and their affine scaling to a unit range.

use serde::{Deserialize, Serialize};

/// What a variable stands for. It decides two things: which points are held back to score
/// extrapolation (the largest values of the [`VarKind::Data`] variables), and how the
/// evaluation [`crate::Domain`] is given (discrete values for [`VarKind::Block`] variables,
/// a continuous range for data variables).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum VarKind {
    /// A data size (N, M, …): measured small, predicted large.
    Data,
    /// A launch parameter (bx, by, bz, …): measured on the candidate values it will take.
    Block,
}

/// An independent variable: a name (also its C parameter name) and its kind.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Variable {
    pub name: String,
    pub kind: VarKind,
}

impl Variable {
    pub fn data(name: impl Into<String>) -> Self {
        Variable {
            name: name.into(),
            kind: VarKind::Data,
        }
    }

    pub fn block(name: impl Into<String>) -> Self {
        Variable {
            name: name.into(),
            kind: VarKind::Block,
        }
    }
}

/// The affine map `t = (x − center) · scale` that sends the fitted range `[lo, hi]` of a
/// variable onto `[−1, 1]`. Monomials and Chebyshev polynomials in `t` are well conditioned on
/// the fitted range; outside it (extrapolation) `|t| > 1` and the function is still exact
/// arithmetic on the same coefficients. A variable that takes one value only gets
/// `scale = 1`, so `t = 0` on the data (its degree is forced to 0 anyway).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Scaling {
    /// Smallest value of the variable among the fitted points.
    pub lo: f64,
    /// Largest value of the variable among the fitted points.
    pub hi: f64,
    pub center: f64,
    pub scale: f64,
}

impl Scaling {
    /// The map of `[lo, hi]` onto `[−1, 1]`; `lo == hi` gives the identity shift by `lo`.
    pub fn from_range(lo: f64, hi: f64) -> Self {
        if hi > lo {
            let half = 0.5 * (hi - lo);
            Scaling {
                lo,
                hi,
                center: lo + half,
                scale: 1.0 / half,
            }
        } else {
            Scaling {
                lo,
                hi,
                center: lo,
                scale: 1.0,
            }
        }
    }

    /// `t = (x − center) · scale`; the C emission writes exactly this expression, so Rust and
    /// C round identically.
    #[inline]
    pub fn apply(&self, x: f64) -> f64 {
        (x - self.center) * self.scale
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn range_maps_to_unit_interval() {
        let s = Scaling::from_range(32.0, 512.0);
        assert_eq!(s.apply(32.0), -1.0);
        assert_eq!(s.apply(512.0), 1.0);
        assert_eq!(s.apply(272.0), 0.0);
        let c = Scaling::from_range(4.0, 4.0);
        assert_eq!(c.apply(4.0), 0.0);
    }
}
