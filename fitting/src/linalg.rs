//! Dense linear least squares: the truncated-SVD solver behind every fitted model, behind a
//! trait so that another implementation (LAPACK's `dgelsd`) can be measured on the very same
//! systems; and the small Cholesky kernels the screening pass uses.

use std::sync::atomic::{AtomicUsize, Ordering};

use nalgebra::{DMatrix, DVector, SVD};

use crate::FitError;

/// The minimum-norm solution of `min ‖A·x − b‖₂` with the singular values of `A` below
/// `rcond·σ_max` treated as zero.
#[derive(Clone, Debug)]
pub struct LstsqSolution {
    pub x: DVector<f64>,
    /// Number of singular values kept.
    pub rank: usize,
    /// All singular values of `A`, largest first.
    pub singular_values: Vec<f64>,
}

impl LstsqSolution {
    /// `σ_max / σ_min` over the singular values kept (1 for an empty system).
    pub fn condition_number(&self) -> f64 {
        match (
            self.singular_values.first(),
            self.rank.checked_sub(1).map(|i| self.singular_values[i]),
        ) {
            (Some(&max), Some(min)) if min > 0.0 => max / min,
            (Some(_), Some(_)) => f64::INFINITY,
            _ => 1.0,
        }
    }
}

/// A dense least-squares solver with rank truncation at a relative singular-value threshold
/// (the contract of LAPACK's `dgelsd` with `RCOND`).
pub trait LstsqSolver {
    fn name(&self) -> &str;
    fn solve(
        &self,
        a: &DMatrix<f64>,
        b: &DVector<f64>,
        rcond: f64,
    ) -> Result<LstsqSolution, FitError>;
}

/// nalgebra's SVD (Householder bidiagonalisation, implicit-shift QR on the bidiagonal), after a
/// Householder QR when the system is tall, so that the SVD works on the small `n×n` factor.
#[derive(Clone, Copy, Debug, Default)]
pub struct NalgebraSvd;

/// Convergence tolerances tried, in order, for nalgebra's implicit-shift QR on the
/// bidiagonal. Its default is `5ε`. With either value, nalgebra 0.33 sometimes stops early
/// and returns, with no error, a decomposition that reconstructs its matrix only to somewhere
/// between 1e-12 and 1e-4 (about 0.7 % of the solves of 1000 whole fits; two 88×5 cases are
/// kept as fixtures in `solver-compare/fixtures`, one failing with `5ε`, the other with `ε`).
/// Each decomposition is therefore checked, and the next tolerance, then the SVD of the whole
/// matrix instead of its QR factor, tried if it fails.
const SVD_TOLERANCES: [f64; 2] = [5.0 * f64::EPSILON, f64::EPSILON];
const SVD_MAX_ITERATIONS: usize = 10_000;
/// A decomposition is accepted when `‖U·Σ·Vᵀ − M‖_F ≤ RECONSTRUCTION·‖M‖_F`. A converged SVD
/// gives a few ε; the early stops range continuously from 1e-13 up, so the line is drawn
/// where the solution error (up to κ times this) still leaves exact recovery at 1e-9 for the
/// condition numbers seen here.
const RECONSTRUCTION: f64 = 1e-12;

static SVD_RETRIES: AtomicUsize = AtomicUsize::new(0);
static SVD_SOLVES: AtomicUsize = AtomicUsize::new(0);
static SVD_FAILURES: AtomicUsize = AtomicUsize::new(0);

/// `(solves, rejected decompositions, solves where every attempt was rejected)` of
/// [`NalgebraSvd`] in this process so far: how often the reconstruction check caught an
/// inaccurate nalgebra SVD (for the solver comparison).
pub fn nalgebra_svd_check_counts() -> (usize, usize, usize) {
    (
        SVD_SOLVES.load(Ordering::Relaxed),
        SVD_RETRIES.load(Ordering::Relaxed),
        SVD_FAILURES.load(Ordering::Relaxed),
    )
}

/// Truncated-SVD solve of `core·x = rhs`, or `None` when no tolerance gives an accurate
/// decomposition.
fn svd_solve(core: &DMatrix<f64>, rhs: &DVector<f64>, rcond: f64) -> Option<LstsqSolution> {
    let norm = core.norm();
    for eps in SVD_TOLERANCES {
        let Some(svd) = SVD::try_new(core.clone(), true, true, eps, SVD_MAX_ITERATIONS) else {
            continue;
        };
        let (Some(u), Some(v_t)) = (svd.u.as_ref(), svd.v_t.as_ref()) else {
            continue;
        };
        let s = &svd.singular_values;
        let mut us = u.clone();
        for (mut col, &sv) in us.column_iter_mut().zip(s.iter()) {
            col *= sv;
        }
        let error = (us * v_t - core).norm();
        if error.is_nan() || error > RECONSTRUCTION * norm {
            SVD_RETRIES.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        let smax = s.iter().cloned().fold(0.0_f64, f64::max);
        let threshold = rcond * smax;
        let utb = u.tr_mul(rhs);
        let mut y = DVector::zeros(s.len());
        let mut rank = 0;
        for i in 0..s.len() {
            if s[i] > threshold && s[i] > 0.0 {
                y[i] = utb[i] / s[i];
                rank += 1;
            }
        }
        let x = v_t.tr_mul(&y);
        let mut singular_values: Vec<f64> = s.iter().copied().collect();
        singular_values.sort_by(|a, b| b.total_cmp(a));
        return Some(LstsqSolution {
            x,
            rank,
            singular_values,
        });
    }
    None
}

impl LstsqSolver for NalgebraSvd {
    fn name(&self) -> &str {
        "nalgebra SVD (QR + Golub-Kahan, checked)"
    }

    fn solve(
        &self,
        a: &DMatrix<f64>,
        b: &DVector<f64>,
        rcond: f64,
    ) -> Result<LstsqSolution, FitError> {
        let (m, n) = a.shape();
        if n == 0 || m == 0 {
            return Ok(LstsqSolution {
                x: DVector::zeros(n),
                rank: 0,
                singular_values: Vec::new(),
            });
        }
        SVD_SOLVES.fetch_add(1, Ordering::Relaxed);
        if m > n {
            // A = Q·R: the SVD then works on the n×n factor.
            let qr = a.clone().qr();
            let mut qtb = b.clone();
            qr.q_tr_mul(&mut qtb);
            if let Some(sol) = svd_solve(&qr.r(), &qtb.rows(0, n).into_owned(), rcond) {
                return Ok(sol);
            }
        }
        svd_solve(a, b, rcond).ok_or_else(|| {
            SVD_FAILURES.fetch_add(1, Ordering::Relaxed);
            FitError::SvdDidNotConverge { rows: m, cols: n }
        })
    }
}

/// In-place lower Cholesky factor of the symmetric positive definite `n×n` row-major `a`
/// (only the lower triangle is read). Returns `false` when a pivot `l_jj²` is not above `tol`.
/// For a Gram matrix of unit-norm columns, `l_jj²` is the squared distance of column `j` from
/// the span of the previous ones, so `tol` is a relative dependence threshold.
pub(crate) fn cholesky_in_place(a: &mut [f64], n: usize, tol: f64) -> bool {
    for j in 0..n {
        let (upper, lower) = a.split_at_mut((j + 1) * n);
        let row_j = &mut upper[j * n..];
        let d = row_j[j] - row_j[..j].iter().map(|l| l * l).sum::<f64>();
        if !(d > tol && d.is_finite()) {
            return false;
        }
        let ljj = d.sqrt();
        row_j[j] = ljj;
        let lj = &row_j[..j];
        for row_i in lower.chunks_exact_mut(n) {
            let s = row_i[j] - row_i[..j].iter().zip(lj).map(|(x, y)| x * y).sum::<f64>();
            row_i[j] = s / ljj;
        }
    }
    true
}

/// Solve `L·y = b` in place (`l` lower triangular, row-major `n×n`).
pub(crate) fn forward_substitute(l: &[f64], n: usize, b: &mut [f64]) {
    for i in 0..n {
        let row = &l[i * n..i * n + i];
        let mut s = b[i];
        for (x, y) in row.iter().zip(&b[..i]) {
            s -= x * y;
        }
        b[i] = s / l[i * n + i];
    }
}

/// Solve `Lᵀ·x = y` in place.
pub(crate) fn backward_substitute_transposed(l: &[f64], n: usize, y: &mut [f64]) {
    // Row-oriented: once y_i is final, subtract its multiple of row i of L (contiguous) from
    // the entries above it.
    for i in (0..n).rev() {
        let row = &l[i * n..i * n + i + 1];
        let yi = y[i] / row[i];
        y[i] = yi;
        for (yk, lik) in y[..i].iter_mut().zip(&row[..i]) {
            *yk -= lik * yi;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn svd_solves_overdetermined_and_truncates() {
        // Columns 0 and 2 are equal: rank 2, minimum-norm splits the weight evenly.
        let a = DMatrix::from_row_slice(4, 3, &[1., 1., 1., 1., 2., 1., 1., 3., 1., 1., 4., 1.]);
        let b = DVector::from_row_slice(&[3., 4., 5., 6.]);
        let sol = NalgebraSvd.solve(&a, &b, 1e-12).unwrap();
        assert_eq!(sol.rank, 2);
        assert!((sol.x[0] - 1.0).abs() < 1e-12 && (sol.x[2] - 1.0).abs() < 1e-12);
        assert!((sol.x[1] - 1.0).abs() < 1e-12);
        assert!(sol.condition_number().is_finite());
    }

    #[test]
    fn cholesky_solves_spd() {
        let mut g = vec![4.0, 2.0, 0.6, 2.0, 5.0, 1.0, 0.6, 1.0, 3.0];
        let b = [1.0, 2.0, 3.0];
        let g0 = g.clone();
        assert!(cholesky_in_place(&mut g, 3, 1e-14));
        let mut x = b;
        forward_substitute(&g, 3, &mut x);
        backward_substitute_transposed(&g, 3, &mut x);
        for i in 0..3 {
            let r: f64 = (0..3).map(|j| g0[i * 3 + j] * x[j]).sum();
            assert!((r - b[i]).abs() < 1e-12);
        }
        let mut singular = vec![1.0, 1.0, 1.0, 1.0];
        assert!(!cholesky_in_place(&mut singular, 2, 1e-12));
    }
}
