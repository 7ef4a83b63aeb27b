//! The screening pass: every candidate of the search is fitted on the training points and
//! scored on the held-out ones, cheaply enough to enumerate thousands of them.
//!
//! All candidates' least-squares matrices are column subsets of one matrix `A` (the numerator
//! Chebyshev columns up to the numerator bounds, then the weighted denominator columns). Its
//! Gram matrix `G = AᵀA` is formed once and column-normalised. For a numerator tuple with
//! columns `P`, the Cholesky factor `L` of `G_PP` is computed once; every denominator tuple
//! `J` is then a Schur-complement solve of size `|J|` (at most a handful), because the
//! Cholesky factor of `G_{P∪J}` is `L` bordered by rows that do not depend on which other
//! denominator columns are present. The cost per numerator tuple is `|P|³/3` once, plus
//! `O(|P|²)` per denominator tuple.
//!
//! Normal equations square the condition number. The Chebyshev basis on `[−1, 1]` and the
//! column normalisation keep it modest for the degrees searched, the Cholesky factorisation
//! refuses a column whose pivot falls below `1e-12` of its norm (condition number beyond about
//! `10⁶`), and only the ranking of candidates depends on this pass: the returned model is always
//! refitted by the truncated SVD of its own system.

use crate::linalg::{backward_substitute_transposed, cholesky_in_place, forward_substitute};
use crate::poly::{dense_index, DegreeBounds, Monomial};
use crate::problem::{Prepared, Split};
use crate::solve::{basis_value, chebyshev_table, Candidate};

/// Relative pivot under which a column counts as dependent on the previous ones.
const PIVOT_TOLERANCE: f64 = 1e-12;
/// Candidates whose smallest squared pivot is below this (condition number above ~3·10⁴, so
/// `κ²·ε` above ~10⁻⁷) are refined whatever their score: their normal-equation solution may
/// be off by more than the differences the selection looks at.
const ILL_PIVOT: f64 = 1e-9;
const REFINE_STEPS: usize = 6;
/// Refinement has converged when a step changes the solution by less than this, relatively.
const REFINED: f64 = 1e-10;

/// The candidate grid: numerator tuples, denominator tuples, and for each numerator tuple the
/// denominator tuples it is paired with.
pub(crate) struct CandidateGrid {
    pub num_tuples: Vec<DegreeBounds>,
    pub den_tuples: Vec<DegreeBounds>,
    pub pairs: Vec<Vec<usize>>,
    /// The largest numerator tuple (every numerator tuple is below it).
    pub num_max: DegreeBounds,
    /// Denominator monomials other than the constant used by some denominator tuple.
    pub den_cols: Vec<Monomial>,
    /// Tuples within the option bounds (and the denominator total-degree cap) that were
    /// dropped before screening: degrees the training data cannot identify, or more unknowns
    /// than the training points allow.
    pub pruned: usize,
}

impl CandidateGrid {
    pub fn len(&self) -> usize {
        self.pairs.iter().map(Vec::len).sum()
    }

    pub fn candidate(&self, ni: usize, di: usize) -> Candidate {
        Candidate {
            num: self.num_tuples[ni].clone(),
            den: self.den_tuples[di].clone(),
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        self.pairs
            .iter()
            .enumerate()
            .flat_map(|(ni, ds)| ds.iter().map(move |&di| (ni, di)))
    }
}

/// Weighted mean of capped relative errors: `w·mean(E) + (1 − w)·mean(I)` over the
/// extrapolation (`true`) and interior (`false`) held-out points; a single set counts alone.
pub(crate) fn score(errors: impl Iterator<Item = (f64, bool)>, extrapolation_weight: f64) -> f64 {
    let (mut se, mut ne, mut si, mut ni) = (0.0, 0usize, 0.0, 0usize);
    for (e, extrapolation) in errors {
        let e = if e.is_finite() { e.min(1.0) } else { 1.0 };
        if extrapolation {
            se += e;
            ne += 1;
        } else {
            si += e;
            ni += 1;
        }
    }
    match (ne, ni) {
        (0, 0) => 0.0,
        (_, 0) => se / ne as f64,
        (0, _) => si / ni as f64,
        _ => extrapolation_weight * se / ne as f64 + (1.0 - extrapolation_weight) * si / ni as f64,
    }
}

/// Scores of every candidate of `grid` (`None`: numerically rank-deficient), indexed like
/// `grid.pairs`. Row `k` is weighted by `row_scale[k] / max(|v_k|, floor)`. With
/// `refine_below`, ill-conditioned candidates and those scoring below it are iteratively
/// refined (and returned as `None` when the refinement does not converge); without it every
/// candidate the factorisation accepts is scored from the plain normal-equation solution,
/// which is accurate to about `κ²·ε` relative — ample when the data are noisy.
pub(crate) fn screen_normal_equations(
    prep: &Prepared,
    split: &Split,
    grid: &CandidateGrid,
    row_scale: Option<&[f64]>,
    refine_below: Option<f64>,
    extrapolation_weight: f64,
) -> Vec<Vec<Option<f64>>> {
    let num_cols: Vec<Monomial> = grid.num_max.monomials().collect();
    let (np_all, nq_all) = (num_cols.len(), grid.den_cols.len());
    let n_all = np_all + nq_all;
    let maxdeg: Vec<u32> = (0..prep.vars.len())
        .map(|i| {
            let d = grid.den_cols.iter().map(|m| m.0[i]).max().unwrap_or(0);
            grid.num_max.0[i].max(d)
        })
        .collect();

    // Weighted training matrix, column-major.
    let m = split.train.len();
    let mut a = vec![0.0; n_all * m];
    let mut y = vec![0.0; m];
    for (r, &k) in split.train.iter().enumerate() {
        let table = chebyshev_table(&prep.scaled[k], &maxdeg);
        let v = prep.values[k];
        let w = row_scale.map_or(1.0, |s| s[k]) / v.abs().max(prep.floor);
        for (c, mono) in num_cols.iter().enumerate() {
            a[c * m + r] = w * basis_value(&table, &mono.0);
        }
        for (c, mono) in grid.den_cols.iter().enumerate() {
            a[(np_all + c) * m + r] = -w * v * basis_value(&table, &mono.0);
        }
        y[r] = w * v;
    }
    let column = |c: usize| &a[c * m..(c + 1) * m];
    let dot = dot;
    let mut gram = vec![0.0; n_all * n_all];
    let mut g = vec![0.0; n_all];
    for i in 0..n_all {
        for j in 0..=i {
            let s = dot(column(i), column(j));
            gram[i * n_all + j] = s;
            gram[j * n_all + i] = s;
        }
        g[i] = dot(column(i), &y);
    }
    let dscale: Vec<f64> = (0..n_all)
        .map(|i| {
            let d = gram[i * n_all + i];
            if d > 0.0 && d.is_finite() {
                1.0 / d.sqrt()
            } else {
                0.0
            }
        })
        .collect();
    for i in 0..n_all {
        for j in 0..n_all {
            gram[i * n_all + j] *= dscale[i] * dscale[j];
        }
        g[i] *= dscale[i];
    }

    // Held-out basis values (unweighted, without v), column-major.
    let held: Vec<(usize, bool)> = split.heldout().collect();
    let nh = held.len();
    let mut h = vec![0.0; nh * n_all];
    for (r, &(k, _)) in held.iter().enumerate() {
        let table = chebyshev_table(&prep.scaled[k], &maxdeg);
        for (c, mono) in num_cols.iter().chain(&grid.den_cols).enumerate() {
            h[c * nh + r] = basis_value(&table, &mono.0);
        }
    }

    let den_sets: Vec<Vec<usize>> = grid
        .den_tuples
        .iter()
        .map(|d| {
            (0..nq_all)
                .filter(|&j| d.contains(&grid.den_cols[j]))
                .collect()
        })
        .collect();

    // Score of a solution `x` (normalised coefficients of the global columns `cols`).
    let score_of = |x: &[f64], cols: &[usize]| -> Option<f64> {
        let mut pv = vec![0.0; nh];
        let mut qv = vec![1.0; nh];
        for (&c, xi) in cols.iter().zip(x) {
            let v = xi * dscale[c];
            if !v.is_finite() {
                return None;
            }
            let target = if c < np_all { &mut pv } else { &mut qv };
            for (t, hc) in target.iter_mut().zip(&h[c * nh..(c + 1) * nh]) {
                *t += v * hc;
            }
        }
        let errors = held.iter().enumerate().map(|(row, &(k, extrapolation))| {
            let e = if qv[row] > 0.0 {
                prep.rel_error(pv[row] / qv[row], k)
            } else {
                f64::INFINITY
            };
            (e, extrapolation)
        });
        Some(score(errors, extrapolation_weight))
    };

    let mut scores: Vec<Vec<Option<f64>>> =
        grid.pairs.iter().map(|ds| vec![None; ds.len()]).collect();
    for (ni, dens) in grid.pairs.iter().enumerate() {
        if dens.is_empty() {
            continue;
        }
        let p: Vec<usize> = grid.num_tuples[ni]
            .monomials()
            .map(|mono| dense_index(&mono.0, &grid.num_max.0))
            .collect();
        if p.iter().any(|&c| dscale[c] == 0.0) {
            continue;
        }
        let np = p.len();
        let mut l = vec![0.0; np * np];
        for (i, &ci) in p.iter().enumerate() {
            for (j, &cj) in p.iter().enumerate().take(i + 1) {
                l[i * np + j] = gram[ci * n_all + cj];
            }
        }
        if !cholesky_in_place(&mut l, np, PIVOT_TOLERANCE) {
            continue;
        }

        // Denominator columns any paired tuple uses; their bordering rows W = L⁻¹ G_{P,j}.
        let mut needed: Vec<usize> = dens
            .iter()
            .flat_map(|&di| den_sets[di].iter().copied())
            .collect();
        needed.sort_unstable();
        needed.dedup();
        let wrows: Vec<Vec<f64>> = needed
            .iter()
            .map(|&j| {
                let cj = np_all + j;
                let mut w: Vec<f64> = p.iter().map(|&ci| gram[ci * n_all + cj]).collect();
                forward_substitute(&l, np, &mut w);
                w
            })
            .collect();
        let mut z: Vec<f64> = p.iter().map(|&c| g[c]).collect();
        forward_substitute(&l, np, &mut z);
        let nn = needed.len();
        let s: Vec<f64> = (0..nn)
            .map(|a_| g[np_all + needed[a_]] - dot(&wrows[a_], &z))
            .collect();
        let mut schur = vec![0.0; nn * nn];
        for a_ in 0..nn {
            let ca = np_all + needed[a_];
            for b_ in 0..=a_ {
                let cb = np_all + needed[b_];
                let v = gram[ca * n_all + cb] - dot(&wrows[a_], &wrows[b_]);
                schur[a_ * nn + b_] = v;
                schur[b_ * nn + a_] = v;
            }
        }

        for (slot, &di) in dens.iter().enumerate() {
            let jset: Vec<usize> = den_sets[di]
                .iter()
                .map(|j| needed.binary_search(j).unwrap_or(0))
                .collect();
            if jset.iter().any(|&ja| dscale[np_all + needed[ja]] == 0.0) {
                continue;
            }
            let nj = jset.len();
            let mut sj = vec![0.0; nj * nj];
            for (i, &ja) in jset.iter().enumerate() {
                for (k, &jb) in jset.iter().enumerate().take(i + 1) {
                    sj[i * nj + k] = schur[ja * nn + jb];
                }
            }
            // Pivots here are those of the full factor of G_{P∪J}: distances of unit columns
            // from the span of the others.
            if !cholesky_in_place(&mut sj, nj, PIVOT_TOLERANCE) {
                continue;
            }
            let factor = Bordered {
                l: &l,
                np,
                w: jset.iter().map(|&ja| wrows[ja].as_slice()).collect(),
                s: &sj,
            };
            let cols: Vec<usize> = p
                .iter()
                .copied()
                .chain(jset.iter().map(|&ja| np_all + needed[ja]))
                .collect();
            let mut x = factor.solve_reduced(&z, jset.iter().map(|&ja| s[ja]).collect());
            let mut sc = score_of(&x, &cols);
            // The normal equations lose about κ²·ε. That matters when the candidate is ill
            // conditioned, or when its fit is good enough for κ²·ε to show in the score.
            // Iterative refinement against A itself recovers the accuracy while κ²·ε < 1 (each
            // step gains that factor); when it does not converge within `REFINE_STEPS` the
            // normal equations cannot be trusted for this candidate, which is left to the SVD
            // fallback (`None`). Pivots alone do not reveal κ: a 7-column system with κ ≈ 3·10⁸
            // had no squared pivot below 1e-9.
            let ill = min_pivot(&l, np).min(min_pivot(&sj, nj)) < ILL_PIVOT;
            if refine_below.is_some_and(|b| ill || sc.is_some_and(|s| s < b)) {
                let mut converged = false;
                for _ in 0..REFINE_STEPS {
                    let mut res = y.clone();
                    for (&c, xi) in cols.iter().zip(&x) {
                        let f = xi * dscale[c];
                        for (r, a) in res.iter_mut().zip(column(c)) {
                            *r -= a * f;
                        }
                    }
                    let h: Vec<f64> = cols
                        .iter()
                        .map(|&c| dscale[c] * dot(column(c), &res))
                        .collect();
                    let delta = factor.solve(&h);
                    let step = delta.iter().map(|d| d * d).sum::<f64>().sqrt();
                    for (xi, d) in x.iter_mut().zip(&delta) {
                        *xi += d;
                    }
                    let size = x.iter().map(|v| v * v).sum::<f64>().sqrt();
                    if step.is_nan() || step > REFINED * size {
                        continue;
                    }
                    converged = true;
                    break;
                }
                sc = if converged { score_of(&x, &cols) } else { None };
            }
            scores[ni][slot] = sc;
        }
    }
    scores
}

/// The Cholesky factor of `[G_PP G_PJ; G_JP G_JJ]` in bordered form: `L` of `G_PP`, the rows
/// `W_j = L⁻¹·G_{P,j}`, and the factor of the Schur complement `G_JJ − WᵀW`.
struct Bordered<'a> {
    l: &'a [f64],
    np: usize,
    w: Vec<&'a [f64]>,
    s: &'a [f64],
}

impl Bordered<'_> {
    /// Solve `G_{P∪J}·x = b` (`b` and `x` ordered as `P` then `J`).
    fn solve(&self, b: &[f64]) -> Vec<f64> {
        let (np, nj) = (self.np, self.w.len());
        let mut z = b[..np].to_vec();
        forward_substitute(self.l, np, &mut z);
        let y: Vec<f64> = (0..nj)
            .map(|i| b[np + i] - self.w[i].iter().zip(&z).map(|(a, b)| a * b).sum::<f64>())
            .collect();
        self.solve_reduced(&z, y)
    }

    /// [`Bordered::solve`] from `z = L⁻¹·b_P` and `y = b_J − W·z`, already computed.
    fn solve_reduced(&self, z: &[f64], mut y: Vec<f64>) -> Vec<f64> {
        let (np, nj) = (self.np, self.w.len());
        let mut z = z.to_vec();
        if nj > 0 {
            forward_substitute(self.s, nj, &mut y);
            backward_substitute_transposed(self.s, nj, &mut y);
        }
        for (wi, yi) in self.w.iter().zip(&y) {
            for (zv, wv) in z.iter_mut().zip(wi.iter()) {
                *zv -= wv * yi;
            }
        }
        backward_substitute_transposed(self.l, np, &mut z);
        z.extend(y);
        z
    }
}

/// Smallest squared pivot `l_jj²` of a Cholesky factor (1 for an empty one).
fn min_pivot(l: &[f64], n: usize) -> f64 {
    (0..n)
        .map(|j| l[j * n + j] * l[j * n + j])
        .fold(1.0, f64::min)
}

/// Dot product with four independent accumulators, so that it vectorises.
fn dot(x: &[f64], y: &[f64]) -> f64 {
    let n = x.len().min(y.len());
    let (xa, xr) = x[..n].split_at(n - n % 4);
    let (ya, yr) = y[..n].split_at(n - n % 4);
    let mut acc = [0.0; 4];
    for (a, b) in xa.chunks_exact(4).zip(ya.chunks_exact(4)) {
        for l in 0..4 {
            acc[l] += a[l] * b[l];
        }
    }
    let tail: f64 = xr.iter().zip(yr).map(|(a, b)| a * b).sum();
    (acc[0] + acc[1]) + (acc[2] + acc[3]) + tail
}
