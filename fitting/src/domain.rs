//! The domain a fitted function will be evaluated on, and the proof that a denominator keeps
//! one sign (and stays away from zero) on it.

use serde::{Deserialize, Serialize};

use crate::basis::map_fibers;
use crate::poly::{dense_index, Poly};
use crate::vars::{Scaling, VarKind, Variable};
use crate::FitError;

/// Where the fitted function will be evaluated. A candidate whose denominator vanishes or
/// changes sign anywhere on it (or at a fitting point) is rejected.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Domain {
    /// Exactly these points (raw values, one per variable, in the order of the problem's
    /// variables). An empty list constrains nothing beyond the fitting points.
    Points(Vec<Vec<f64>>),
    /// Every block shape of `shapes` (the values of the [`VarKind::Block`] variables, in their
    /// order) combined with every data size in the box `data` (one `[lo, hi]` per
    /// [`VarKind::Data`] variable, in their order). Data sizes are taken as continuous, which
    /// covers every integer size in the box. With no block variables, `shapes` may be empty.
    Grid {
        shapes: Vec<Vec<f64>>,
        data: Vec<[f64; 2]>,
    },
}

impl Domain {
    pub(crate) fn validate(&self, vars: &[Variable]) -> Result<(), FitError> {
        match self {
            Domain::Points(points) => {
                for (i, p) in points.iter().enumerate() {
                    if p.len() != vars.len() {
                        return Err(FitError::Domain(format!(
                            "point {i} has {} coordinates, the problem has {} variables",
                            p.len(),
                            vars.len()
                        )));
                    }
                    if p.iter().any(|x| !x.is_finite()) {
                        return Err(FitError::Domain(format!("point {i} is not finite: {p:?}")));
                    }
                }
                Ok(())
            }
            Domain::Grid { shapes, data } => {
                let nblock = vars.iter().filter(|v| v.kind == VarKind::Block).count();
                let ndata = vars.len() - nblock;
                if shapes.is_empty() && nblock > 0 {
                    return Err(FitError::Domain("no block shapes given".into()));
                }
                for (i, s) in shapes.iter().enumerate() {
                    if s.len() != nblock || s.iter().any(|x| !x.is_finite()) {
                        return Err(FitError::Domain(format!(
                            "shape {i} is {s:?}; expected {nblock} finite values (one per block variable)"
                        )));
                    }
                }
                if data.len() != ndata {
                    return Err(FitError::Domain(format!(
                        "{} data ranges given for {ndata} data variables",
                        data.len()
                    )));
                }
                for (i, [lo, hi]) in data.iter().enumerate() {
                    if !(lo.is_finite() && hi.is_finite() && lo <= hi) {
                        return Err(FitError::Domain(format!(
                            "data range {i} is [{lo}, {hi}]; expected finite lo <= hi"
                        )));
                    }
                }
                Ok(())
            }
        }
    }
}

/// Relative size, against the denominator's largest magnitude on the fitting points, under
/// which a denominator value counts as vanishing.
const VANISHING: f64 = 1e-12;

/// Subdivisions allowed per block shape when the Bernstein bound is inconclusive.
const SUBDIVISION_BUDGET: usize = 2048;
const MAX_DEPTH: u32 = 30;

/// Check that `den` (monomial coefficients in the scaled variables) is positive, and not
/// vanishing, at every fitting point and everywhere on `domain`. On the continuous part of a
/// [`Domain::Grid`] the check is a proof, not a sample: the polynomial is written in the
/// Bernstein basis of the data box, whose coefficients bound it from below, and the box is
/// subdivided (de Casteljau) until the bound is positive or a vertex value is not.
pub(crate) fn check_denominator(
    den: &Poly,
    scalings: &[Scaling],
    vars: &[Variable],
    fit_points_scaled: &[Vec<f64>],
    domain: &Domain,
) -> Result<(), String> {
    if den.is_constant() {
        return if den.constant_term() > 0.0 {
            Ok(())
        } else {
            Err("constant denominator is not positive".into())
        };
    }
    let mut scale = 0.0_f64;
    for t in fit_points_scaled {
        let q = den.eval_scaled(t);
        if q.is_nan() || q <= 0.0 {
            return Err(format!(
                "denominator {q:e} at a fitting point (scaled {t:?})"
            ));
        }
        scale = scale.max(q);
    }
    let margin = VANISHING * scale.max(f64::MIN_POSITIVE);
    for t in fit_points_scaled {
        if den.eval_scaled(t) <= margin {
            return Err(format!(
                "denominator vanishes at a fitting point (scaled {t:?})"
            ));
        }
    }
    let to_t =
        |x: &[f64]| -> Vec<f64> { x.iter().zip(scalings).map(|(x, s)| s.apply(*x)).collect() };
    match domain {
        Domain::Points(points) => {
            for p in points {
                let q = den.eval_scaled(&to_t(p));
                if q.is_nan() || q <= margin {
                    return Err(format!("denominator {q:e} at domain point {p:?}"));
                }
            }
            Ok(())
        }
        Domain::Grid { shapes, data } => {
            let block: Vec<usize> = (0..vars.len())
                .filter(|&i| vars[i].kind == VarKind::Block)
                .collect();
            let dvars: Vec<usize> = (0..vars.len())
                .filter(|&i| vars[i].kind == VarKind::Data)
                .collect();
            let empty = [Vec::new()];
            let shapes: &[Vec<f64>] = if shapes.is_empty() { &empty } else { shapes };
            let boxes: Vec<(f64, f64)> = dvars
                .iter()
                .zip(data)
                .map(|(&i, [lo, hi])| (scalings[i].apply(*lo), scalings[i].apply(*hi)))
                .collect();
            for shape in shapes {
                let mut t = vec![0.0; vars.len()];
                for (&i, &x) in block.iter().zip(shape) {
                    t[i] = scalings[i].apply(x);
                }
                let (coeffs, degs) = restrict_to_data(den, &t, &dvars);
                match positive_on_box(&coeffs, &degs, &boxes, margin) {
                    Verdict::Positive => {}
                    Verdict::NotPositive => {
                        return Err(format!(
                            "denominator vanishes or changes sign for shape {shape:?} with data in {data:?}"
                        ))
                    }
                    Verdict::Undecided => {
                        return Err(format!(
                            "cannot prove the denominator positive for shape {shape:?} with data in {data:?}"
                        ))
                    }
                }
            }
            Ok(())
        }
    }
}

/// Substitute the (scaled) block-variable values of `t` into `den`: the result is a dense
/// tensor in the data variables `dvars`, with their degrees.
fn restrict_to_data(den: &Poly, t: &[f64], dvars: &[usize]) -> (Vec<f64>, Vec<u32>) {
    let degs = &den.degrees().0;
    let rdegs: Vec<u32> = dvars.iter().map(|&i| degs[i]).collect();
    let size: usize = rdegs.iter().map(|&d| d as usize + 1).product();
    let mut out = vec![0.0; size];
    for (m, c) in den.terms() {
        if c == 0.0 {
            continue;
        }
        let mut factor = c;
        for (i, &a) in m.0.iter().enumerate() {
            if !dvars.contains(&i) {
                factor *= t[i].powi(a as i32);
            }
        }
        let alpha: Vec<u32> = dvars.iter().map(|&i| m.0[i]).collect();
        out[dense_index(&alpha, &rdegs)] += factor;
    }
    (out, rdegs)
}

#[derive(Debug, PartialEq, Eq, Clone, Copy)]
enum Verdict {
    Positive,
    NotPositive,
    Undecided,
}

fn binomial(n: usize, k: usize) -> f64 {
    (0..k).fold(1.0, |acc, i| acc * (n - i) as f64 / (i + 1) as f64)
}

/// Whether the polynomial (dense monomial tensor `coeffs` in the data variables, degrees
/// `degs`) is above `margin` on the box `∏ [a_j, b_j]`.
fn positive_on_box(coeffs: &[f64], degs: &[u32], boxes: &[(f64, f64)], margin: f64) -> Verdict {
    let dims: Vec<usize> = degs.iter().map(|&d| d as usize + 1).collect();
    let mut bern = coeffs.to_vec();
    for (axis, (&(a, b), &n)) in boxes.iter().zip(&dims).enumerate() {
        if n == 1 {
            continue;
        }
        let w = b - a;
        // p(a + w·u) in powers of u, then in the Bernstein basis of degree n−1 on [0, 1].
        bern = map_fibers(&bern, &dims, axis, n, |c| {
            let d = n - 1;
            let shifted: Vec<f64> = (0..=d)
                .map(|l| {
                    (l..=d)
                        .map(|k| c[k] * binomial(k, l) * a.powi((k - l) as i32) * w.powi(l as i32))
                        .sum()
                })
                .collect();
            (0..=d)
                .map(|i| {
                    (0..=i)
                        .map(|l| binomial(i, l) / binomial(d, l) * shifted[l])
                        .sum()
                })
                .collect()
        });
    }
    if bern.iter().any(|b| !b.is_finite()) {
        return Verdict::Undecided;
    }
    let mut budget = SUBDIVISION_BUDGET;
    bernstein_positive(&bern, &dims, MAX_DEPTH, &mut budget, margin)
}

fn bernstein_positive(
    b: &[f64],
    dims: &[usize],
    depth: u32,
    budget: &mut usize,
    margin: f64,
) -> Verdict {
    if b.iter().all(|&x| x > margin) {
        return Verdict::Positive;
    }
    // Vertex coefficients are values of the polynomial.
    let naxes = dims.len();
    for corner in 0..(1usize << naxes) {
        let idx = dims.iter().enumerate().fold(0usize, |acc, (j, &n)| {
            let k = if corner >> j & 1 == 1 { n - 1 } else { 0 };
            acc * n + k
        });
        if b[idx] <= margin {
            return Verdict::NotPositive;
        }
    }
    if depth == 0 || *budget == 0 {
        return Verdict::Undecided;
    }
    *budget -= 1;
    let splittable: Vec<usize> = (0..naxes).filter(|&j| dims[j] > 1).collect();
    let Some(&axis) = splittable.get(depth as usize % splittable.len().max(1)) else {
        return Verdict::Undecided;
    };
    let (left, right) = de_casteljau_halves(b, dims, axis);
    match bernstein_positive(&left, dims, depth - 1, budget, margin) {
        Verdict::Positive => bernstein_positive(&right, dims, depth - 1, budget, margin),
        other => other,
    }
}

fn de_casteljau_halves(b: &[f64], dims: &[usize], axis: usize) -> (Vec<f64>, Vec<f64>) {
    let n = dims[axis];
    let split = |fiber: &[f64], left: bool| -> Vec<f64> {
        let mut work = fiber.to_vec();
        let mut out = vec![0.0; n];
        if left {
            out[0] = work[0];
        } else {
            out[n - 1] = work[n - 1];
        }
        for r in 1..n {
            for i in 0..n - r {
                work[i] = 0.5 * (work[i] + work[i + 1]);
            }
            if left {
                out[r] = work[0];
            } else {
                out[n - 1 - r] = work[n - 1 - r];
            }
        }
        out
    };
    (
        map_fibers(b, dims, axis, n, |f| split(f, true)),
        map_fibers(b, dims, axis, n, |f| split(f, false)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::poly::DegreeBounds;

    fn vars() -> Vec<Variable> {
        vec![Variable::data("N"), Variable::block("bx")]
    }

    fn identity() -> Vec<Scaling> {
        vec![
            Scaling {
                lo: -1.0,
                hi: 1.0,
                center: 0.0,
                scale: 1.0,
            },
            Scaling {
                lo: -1.0,
                hi: 1.0,
                center: 0.0,
                scale: 1.0,
            },
        ]
    }

    fn poly(degs: &[u32], terms: &[(&[u32], f64)]) -> Poly {
        let d = DegreeBounds(degs.to_vec());
        let mut c = vec![0.0; d.monomial_count().unwrap()];
        for (a, v) in terms {
            c[dense_index(a, degs)] = *v;
        }
        Poly::new(d, c).unwrap()
    }

    #[test]
    fn accepts_positive_and_rejects_sign_change() {
        let grid = |hi: f64| Domain::Grid {
            shapes: vec![vec![0.5], vec![-0.5]],
            data: vec![[-1.0, hi]],
        };
        let fit = vec![vec![0.0, 0.0]];
        // q = 1 + 0.4 N: positive up to N = 2, vanishes at N = −2.5.
        let q = poly(&[1, 0], &[(&[0, 0], 1.0), (&[1, 0], 0.4)]);
        assert!(check_denominator(&q, &identity(), &vars(), &fit, &grid(2.0)).is_ok());
        // q = 1 − 2.1 N + N^2: roots near 0.73 and 1.37, inside [−1, 2], positive at the ends.
        let q2 = poly(&[2, 0], &[(&[0, 0], 1.0), (&[1, 0], -2.1), (&[2, 0], 1.0)]);
        assert!(check_denominator(&q2, &identity(), &vars(), &fit, &grid(2.0)).is_err());
        // Positive but with an interior dip no vertex sees: q = (N − 0.5)^2 + 0.001.
        let q3 = poly(
            &[2, 0],
            &[(&[0, 0], 0.251), (&[1, 0], -1.0), (&[2, 0], 1.0)],
        );
        assert!(check_denominator(&q3, &identity(), &vars(), &fit, &grid(2.0)).is_ok());
        let q4 = poly(
            &[2, 0],
            &[(&[0, 0], 0.249), (&[1, 0], -1.0), (&[2, 0], 1.0)],
        );
        assert!(check_denominator(&q4, &identity(), &vars(), &fit, &grid(2.0)).is_err());
        // Sign change in the block variable, at a listed shape.
        let q5 = poly(&[0, 1], &[(&[0, 0], 1.0), (&[0, 1], 2.5)]);
        assert!(check_denominator(&q5, &identity(), &vars(), &fit, &grid(1.0)).is_err());
    }
}
