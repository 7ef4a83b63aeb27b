//! Errors a caller can hit, with enough context to fix the input.

use thiserror::Error;

/// Why a fit (or an emission) could not produce a rational function.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum FitError {
    /// The problem has no variables, or no points.
    #[error("nothing to fit: {0}")]
    Empty(&'static str),

    /// Two lengths that must agree do not.
    #[error("{what}: expected {expected}, found {found}")]
    Dimension {
        what: String,
        expected: usize,
        found: usize,
    },

    /// A coordinate or a value is NaN or infinite (and the options say not to drop it).
    #[error(
        "point {index} is not finite (coordinates {point:?}, value {value}); \
         fix the measurement or set FitOptions::drop_non_finite"
    )]
    NonFinite {
        index: usize,
        point: Vec<f64>,
        value: f64,
    },

    /// The evaluation domain is malformed (wrong arity, NaN, an empty range).
    #[error("invalid domain: {0}")]
    Domain(String),

    /// The options are inconsistent (degree bounds of the wrong length, a negative tolerance, …).
    #[error("invalid options: {0}")]
    Options(String),

    /// The degree bounds ask for more monomials than this crate will enumerate.
    #[error(
        "degree bounds {bounds:?} give {monomials} monomials, more than the limit of {limit}; \
         lower the bounds"
    )]
    TooManyMonomials {
        bounds: Vec<u32>,
        monomials: usize,
        limit: usize,
    },

    /// The requested degrees have more unknowns than the data can determine.
    #[error(
        "degrees (numerator {num:?}, denominator {den:?}) have {unknowns} unknowns but only \
         {distinct_points} distinct points; lower the degrees or add points"
    )]
    Underdetermined {
        num: Vec<u32>,
        den: Vec<u32>,
        unknowns: usize,
        distinct_points: usize,
    },

    /// The SVD did not converge (it needs pathological input to happen).
    #[error("the SVD of the {rows}x{cols} least-squares matrix did not converge")]
    SvdDidNotConverge { rows: usize, cols: usize },

    /// The least-squares solution is not finite.
    #[error("the least-squares solution is not finite ({0})")]
    NotFinite(String),

    /// Every candidate's denominator vanished or changed sign on the domain (or the fit with
    /// the requested degrees did).
    #[error("no admissible model: {0}")]
    NoAdmissibleModel(String),

    /// A name cannot be used as a C identifier.
    #[error("`{0}` is not usable as a C identifier (letters, digits, `_`; not a keyword)")]
    BadIdentifier(String),
}
