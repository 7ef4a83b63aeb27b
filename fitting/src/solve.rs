//! The linearised least-squares fit of one candidate: `p(x_k) − v_k·q(x_k) ≈ 0` with the
//! denominator's Chebyshev constant fixed to 1, relative-error weights, column normalisation,
//! truncated SVD, and Sanathanan–Koerner reweighting.

use nalgebra::{DMatrix, DVector};

use crate::basis::{chebyshev_values, tensor_chebyshev_to_monomial};
use crate::linalg::LstsqSolver;
use crate::poly::{DegreeBounds, Monomial, Poly};
use crate::problem::Prepared;
use crate::FitError;

/// A candidate model: a numerator and a denominator degree bound per variable.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Candidate {
    pub num: DegreeBounds,
    pub den: DegreeBounds,
}

impl Candidate {
    pub fn constant(nvars: usize) -> Self {
        Candidate {
            num: DegreeBounds::zeros(nvars),
            den: DegreeBounds::zeros(nvars),
        }
    }

    /// Unknown coefficients: every numerator coefficient and every denominator coefficient
    /// but the normalised constant.
    pub fn unknowns(&self) -> usize {
        self.num
            .monomial_count()
            .unwrap_or(usize::MAX)
            .saturating_add(self.den.monomial_count().unwrap_or(usize::MAX))
            - 1
    }

    /// Simplicity order: fewer coefficients, then lower total degree, then a fixed tie-break.
    pub fn simplicity(&self) -> (usize, u32, &DegreeBounds, &DegreeBounds) {
        (
            self.unknowns(),
            self.num.total() + self.den.total(),
            &self.den,
            &self.num,
        )
    }

    /// Denominator monomials other than the constant, in dense order.
    pub fn den_free(&self) -> Vec<Monomial> {
        self.den.monomials().filter(|m| !m.is_constant()).collect()
    }
}

/// `T_0..T_{d_i}(t_i)` for every variable of one point.
pub(crate) fn chebyshev_table(t: &[f64], maxdeg: &[u32]) -> Vec<Vec<f64>> {
    t.iter()
        .zip(maxdeg)
        .map(|(&ti, &d)| {
            let mut v = vec![0.0; d as usize + 1];
            chebyshev_values(ti, &mut v);
            v
        })
        .collect()
}

/// `∏ T_{α_i}(t_i)` from a table of [`chebyshev_table`].
#[inline]
pub(crate) fn basis_value(table: &[Vec<f64>], alpha: &[u32]) -> f64 {
    table
        .iter()
        .zip(alpha)
        .map(|(v, &a)| v[a as usize])
        .product()
}

/// One candidate fitted on some rows.
#[derive(Clone, Debug)]
pub(crate) struct RawFit {
    pub num: Poly,
    pub den: Poly,
    pub unknowns: usize,
    pub rank: usize,
    pub condition_number: f64,
}

impl RawFit {
    pub fn eval_scaled(&self, t: &[f64]) -> f64 {
        let p = self.num.eval_scaled(t);
        if self.den.is_constant() && self.den.constant_term() == 1.0 {
            p
        } else {
            p / self.den.eval_scaled(t)
        }
    }

    pub fn full_rank(&self) -> bool {
        self.rank == self.unknowns
    }
}

/// Fit `cand` on the points `rows` of `prep`.
///
/// Row `k` of the system is `w_k·[Φ_P(x_k), −v_k·Φ_Q(x_k)]·[a; b] = w_k·v_k`, with `Φ` the
/// tensor Chebyshev basis in the scaled variables and `q = 1 + Φ_Q·b`. Since
/// `p − v·q = q·(p/q − v)`, the weight `w_k = 1/(|v_k|·q_prev(x_k))` turns the residual into
/// the relative error of `p/q`; the first solve takes `q_prev = 1`, each of the `sk_iterations`
/// further solves the previous `q` (Sanathanan–Koerner).
pub(crate) fn fit_on_rows(
    prep: &Prepared,
    rows: &[usize],
    cand: &Candidate,
    sk_iterations: usize,
    rcond: f64,
    solver: &dyn LstsqSolver,
) -> Result<RawFit, FitError> {
    let num_monos: Vec<Monomial> = cand.num.monomials().collect();
    let den_monos = cand.den_free();
    let (np, nq) = (num_monos.len(), den_monos.len());
    let n = np + nq;
    let m = rows.len();
    let maxdeg: Vec<u32> = cand
        .num
        .0
        .iter()
        .zip(&cand.den.0)
        .map(|(a, b)| *a.max(b))
        .collect();
    let mut phi_p = DMatrix::<f64>::zeros(m, np);
    let mut phi_q = DMatrix::<f64>::zeros(m, nq);
    for (r, &k) in rows.iter().enumerate() {
        let table = chebyshev_table(&prep.scaled[k], &maxdeg);
        for (c, mono) in num_monos.iter().enumerate() {
            phi_p[(r, c)] = basis_value(&table, &mono.0);
        }
        for (c, mono) in den_monos.iter().enumerate() {
            phi_q[(r, c)] = basis_value(&table, &mono.0);
        }
    }
    let values: Vec<f64> = rows.iter().map(|&k| prep.values[k]).collect();
    let base: Vec<f64> = values
        .iter()
        .map(|v| 1.0 / v.abs().max(prep.floor))
        .collect();
    let mut w = base.clone();
    let mut result = None;
    for iteration in 0..=sk_iterations {
        let mut a = DMatrix::<f64>::zeros(m, n);
        let mut rhs = DVector::<f64>::zeros(m);
        for r in 0..m {
            for c in 0..np {
                a[(r, c)] = w[r] * phi_p[(r, c)];
            }
            for c in 0..nq {
                a[(r, np + c)] = -w[r] * values[r] * phi_q[(r, c)];
            }
            rhs[r] = w[r] * values[r];
        }
        let mut colscale = vec![0.0; n];
        for (c, s) in colscale.iter_mut().enumerate() {
            let norm = a.column(c).norm();
            if norm > 0.0 && norm.is_finite() {
                *s = 1.0 / norm;
                a.column_mut(c).scale_mut(*s);
            } else {
                a.column_mut(c).fill(0.0);
            }
        }
        let sol = solver.solve(&a, &rhs, rcond)?;
        let x: Vec<f64> = (0..n).map(|c| sol.x[c] * colscale[c]).collect();
        if x.iter().any(|v| !v.is_finite()) {
            return Err(FitError::NotFinite(format!(
                "coefficients of numerator {:?} / denominator {:?}",
                cand.num.0, cand.den.0
            )));
        }
        let q: Vec<f64> = (0..m)
            .map(|r| 1.0 + (0..nq).map(|c| x[np + c] * phi_q[(r, c)]).sum::<f64>())
            .collect();
        result = Some((x, sol.rank, sol.condition_number()));
        if nq == 0 || iteration == sk_iterations || q.iter().any(|&q| q.is_nan() || q <= 0.0) {
            break;
        }
        for r in 0..m {
            w[r] = base[r] / q[r];
        }
    }
    let (x, rank, condition_number) = result.expect("at least one solve");
    let num_cheb = &x[..np];
    let mut den_cheb = vec![1.0];
    den_cheb.extend_from_slice(&x[np..]);
    let mut num_c = tensor_chebyshev_to_monomial(num_cheb, &cand.num.0);
    let mut den_c = tensor_chebyshev_to_monomial(&den_cheb, &cand.den.0);
    // Divide through by q(center) so that the denominator reads 1 + …; positive q on the
    // fitted box makes this positive.
    let q0 = den_c[0];
    if nq > 0 && q0 > 0.0 && q0.is_finite() {
        num_c.iter_mut().for_each(|c| *c /= q0);
        den_c.iter_mut().for_each(|c| *c /= q0);
        den_c[0] = 1.0;
    }
    let num = Poly::new(cand.num.clone(), num_c)?.trimmed();
    let den = Poly::new(cand.den.clone(), den_c)?.trimmed();
    Ok(RawFit {
        num,
        den,
        unknowns: n,
        rank,
        condition_number,
    })
}
