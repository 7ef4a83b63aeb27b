//! Rational-function least squares for klaraptor (draft docs; completed below).

mod basis;
mod domain;
mod emit;
mod error;
pub mod linalg;
mod poly;
mod problem;
mod rational;
mod screen;
mod select;
mod solve;
mod vars;

pub use domain::Domain;
pub use error::FitError;
pub use linalg::{LstsqSolution, LstsqSolver, NalgebraSvd};
pub use poly::{DegreeBounds, Monomial, Poly};
pub use problem::{FitOptions, FitProblem, Screening};
pub use rational::{Diagnostics, HeldOut, RationalFn, SearchStats};
pub use select::{fit, fit_degrees, fit_degrees_with_solver, fit_with_solver, MAX_MONOMIALS};
pub use vars::{Scaling, VarKind, Variable};
