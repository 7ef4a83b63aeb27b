//! Model selection: enumerate candidate degree tuples, screen them all on held-out points,
//! refit the promising ones by SVD, keep the simplest within noise of the best whose
//! denominator is positive on the domain, and refit it on every point.

use std::collections::HashMap;

use crate::domain::check_denominator;
use crate::linalg::{LstsqSolver, NalgebraSvd};
use crate::poly::{DegreeBounds, Monomial};
use crate::problem::{FitOptions, FitProblem, Prepared, Screening, Split};
use crate::rational::{Diagnostics, HeldOut, RationalFn, SearchStats};
use crate::screen::{score, screen_normal_equations, CandidateGrid};
use crate::solve::{fit_on_rows, Candidate, RawFit};
use crate::FitError;

/// Most numerator monomials (of the largest numerator tuple) the search will enumerate.
pub const MAX_MONOMIALS: usize = 4096;
/// Most non-constant denominator monomials.
const MAX_DEN_MONOMIALS: usize = 255;
/// Best screening score under which the data count as near-exact (see `select`).
const NEAR_EXACT: f64 = 1e-3;
/// Candidates the normal equations refuse that are refitted by SVD instead (simplest first).
const FALLBACK_LIMIT: usize = 32;
/// Score differences below this are round-off (relative errors of exact fits).
const SCORE_FLOOR: f64 = 1e-10;

/// Fit `problem` with degrees chosen for extrapolation; see the crate documentation for the
/// search and the selection rule.
pub fn fit(problem: &FitProblem, options: &FitOptions) -> Result<RationalFn, FitError> {
    fit_with_solver(problem, options, &NalgebraSvd)
}

/// [`fit`] with another least-squares solver for the SVD fits (the screening pass does not use
/// it). Used to compare solvers on identical systems.
pub fn fit_with_solver(
    problem: &FitProblem,
    options: &FitOptions,
    solver: &dyn LstsqSolver,
) -> Result<RationalFn, FitError> {
    let prep = Prepared::new(problem, options)?;
    let split = prep.split(options);
    let grid = candidate_grid(&prep, &split, options)?;
    let mut search = Search {
        prep: &prep,
        split: &split,
        options,
        solver,
        evaluated: HashMap::new(),
        rejected_denominator: 0,
        fallback: 0,
        near_exact: false,
    };
    let (winner, noise, screened) = search.select(&grid)?;
    let chosen = search.evaluated[&winner].clone();
    let Evaluation::Admissible {
        fit: split_fit,
        errors,
        score: winner_score,
    } = chosen
    else {
        // `select` only returns candidates whose evaluation was admissible.
        return Err(FitError::NoAdmissibleModel(
            "internal: the selected candidate was not admissible".into(),
        ));
    };
    let rows = prep.all_rows();
    let refit = fit_on_rows(
        &prep,
        &rows,
        &winner,
        options.sk_iterations,
        options.rcond,
        solver,
    )
    .ok()
    .filter(|f| f.full_rank() && admissible(&prep, f).is_ok());
    let refit_on_all_points = refit.is_some();
    let final_fit = refit.unwrap_or(split_fit);
    let heldout = split
        .has_heldout()
        .then(|| held_out_summary(&errors, winner_score));
    let stats = SearchStats {
        candidates: grid.len(),
        pruned: grid.pruned,
        screened,
        svd_fallback: search.fallback,
        refit: search.evaluated.len(),
        rejected_denominator: search.rejected_denominator,
        screening: match options.screening {
            Screening::NormalEquations => {
                if search.near_exact {
                    "normal equations with iterative refinement, SVD for the refused".into()
                } else {
                    "normal equations, rows reweighted by a pilot denominator".into()
                }
            }
            Screening::Svd => format!("SVD of every candidate ({})", solver.name()),
        },
    };
    Ok(finish(
        &prep,
        final_fit,
        heldout,
        noise,
        Some(stats),
        refit_on_all_points,
    ))
}

/// Fit the given numerator and denominator degree bounds on every point, with no selection.
/// Fails when the system has more unknowns than distinct points, or when the denominator
/// vanishes or changes sign on the domain.
pub fn fit_degrees(
    problem: &FitProblem,
    num: &DegreeBounds,
    den: &DegreeBounds,
    options: &FitOptions,
) -> Result<RationalFn, FitError> {
    fit_degrees_with_solver(problem, num, den, options, &NalgebraSvd)
}

/// [`fit_degrees`] with another least-squares solver.
pub fn fit_degrees_with_solver(
    problem: &FitProblem,
    num: &DegreeBounds,
    den: &DegreeBounds,
    options: &FitOptions,
    solver: &dyn LstsqSolver,
) -> Result<RationalFn, FitError> {
    let nvars = problem.vars.len();
    for (what, b) in [("numerator degrees", num), ("denominator degrees", den)] {
        if b.nvars() != nvars {
            return Err(FitError::Dimension {
                what: what.into(),
                expected: nvars,
                found: b.nvars(),
            });
        }
        match b.monomial_count() {
            Some(c) if c <= MAX_MONOMIALS => {}
            c => {
                return Err(FitError::TooManyMonomials {
                    bounds: b.0.clone(),
                    monomials: c.unwrap_or(usize::MAX),
                    limit: MAX_MONOMIALS,
                })
            }
        }
    }
    let prep = Prepared::new(problem, options)?;
    let cand = Candidate {
        num: num.clone(),
        den: den.clone(),
    };
    if cand.unknowns() > prep.groups.len() {
        return Err(FitError::Underdetermined {
            num: num.0.clone(),
            den: den.0.clone(),
            unknowns: cand.unknowns(),
            distinct_points: prep.groups.len(),
        });
    }
    let rows = prep.all_rows();
    let fit = fit_on_rows(
        &prep,
        &rows,
        &cand,
        options.sk_iterations,
        options.rcond,
        solver,
    )?;
    admissible(&prep, &fit).map_err(FitError::NoAdmissibleModel)?;
    Ok(finish(&prep, fit, None, None, None, true))
}

/// The candidate grid of the crate documentation.
fn candidate_grid(
    prep: &Prepared,
    split: &Split,
    options: &FitOptions,
) -> Result<CandidateGrid, FitError> {
    let nvars = prep.vars.len();
    let distinct = prep.distinct_values(&split.train);
    let cap = |b: &DegreeBounds| -> DegreeBounds {
        DegreeBounds(
            b.0.iter()
                .zip(&distinct)
                .map(|(&d, &n)| d.min(n.saturating_sub(1) as u32))
                .collect(),
        )
    };
    let (mut num_max, mut den_max) = (cap(&options.num_bounds), cap(&options.den_bounds));
    if !split.has_heldout() {
        // Nothing to validate on: only the constant is justified.
        num_max = DegreeBounds::zeros(nvars);
        den_max = DegreeBounds::zeros(nvars);
    }
    let count = num_max.monomial_count().unwrap_or(usize::MAX);
    if count > MAX_MONOMIALS {
        return Err(FitError::TooManyMonomials {
            bounds: num_max.0,
            monomials: count,
            limit: MAX_MONOMIALS,
        });
    }
    let total_cap = options.den_max_total_degree;
    let den_tuples: Vec<DegreeBounds> =
        if den_max.monomial_count().unwrap_or(usize::MAX) > MAX_MONOMIALS {
            return Err(FitError::TooManyMonomials {
                bounds: den_max.0,
                monomials: usize::MAX,
                limit: MAX_MONOMIALS,
            });
        } else {
            den_max
                .sub_bounds()
                .into_iter()
                .filter(|d| d.total() <= total_cap)
                .collect()
        };
    let den_cols: Vec<Monomial> = den_max
        .monomials()
        .filter(|m| !m.is_constant() && m.degree() <= total_cap)
        .collect();
    if den_cols.len() > MAX_DEN_MONOMIALS {
        return Err(FitError::TooManyMonomials {
            bounds: den_max.0,
            monomials: den_cols.len(),
            limit: MAX_DEN_MONOMIALS,
        });
    }
    let num_tuples = num_max.sub_bounds();
    let max_unknowns =
        ((split.train_groups as f64 / options.min_points_per_unknown).floor() as usize).max(1);
    let pairs: Vec<Vec<usize>> = num_tuples
        .iter()
        .map(|n| {
            (0..den_tuples.len())
                .filter(|&di| {
                    let d = &den_tuples[di];
                    let identifiable =
                        n.0.iter()
                            .zip(&d.0)
                            .zip(&distinct)
                            .all(|((a, b), &k)| ((a + b) as usize) < k.max(1));
                    let c = Candidate {
                        num: n.clone(),
                        den: d.clone(),
                    };
                    identifiable && c.unknowns() <= max_unknowns
                })
                .collect()
        })
        .collect();
    let kept: usize = pairs.iter().map(Vec::len).sum();
    let within_bounds = options
        .num_bounds
        .monomial_count()
        .unwrap_or(usize::MAX)
        .saturating_mul(capped_tuple_count(&options.den_bounds, total_cap));
    Ok(CandidateGrid {
        num_tuples,
        den_tuples,
        pairs,
        num_max,
        den_cols,
        pruned: within_bounds.saturating_sub(kept),
    })
}

/// Number of tuples `d ≤ bounds` with `Σ d_i ≤ cap`.
fn capped_tuple_count(bounds: &DegreeBounds, cap: u32) -> usize {
    let cap = cap as usize;
    // ways[s] = tuples of the variables so far with total s.
    let mut ways = vec![0usize; cap + 1];
    ways[0] = 1;
    for &b in &bounds.0 {
        let mut next = vec![0usize; cap + 1];
        for (s, &w) in ways.iter().enumerate() {
            for d in 0..=(b as usize).min(cap - s) {
                next[s + d] = next[s + d].saturating_add(w);
            }
        }
        ways = next;
    }
    ways.iter().fold(0usize, |a, &w| a.saturating_add(w))
}

#[derive(Clone, Debug)]
enum Evaluation {
    Admissible {
        fit: RawFit,
        errors: Vec<(f64, bool)>,
        score: f64,
    },
    Rejected,
}

struct Search<'a> {
    prep: &'a Prepared<'a>,
    split: &'a Split,
    options: &'a FitOptions,
    solver: &'a dyn LstsqSolver,
    evaluated: HashMap<Candidate, Evaluation>,
    rejected_denominator: usize,
    /// SVD fits (without reweighting) done for candidates the screening could not solve.
    fallback: usize,
    /// Whether the data were found near-exact (see `select`).
    near_exact: bool,
}

impl Search<'_> {
    /// Screening scores of every candidate (indexed like `grid.pairs`). With a `pilot`, rows
    /// are also divided by the pilot's denominator, as one Sanathanan–Koerner step would.
    fn screen(
        &self,
        grid: &CandidateGrid,
        pilot: Option<&RawFit>,
        refine_below: Option<f64>,
    ) -> Vec<Vec<Option<f64>>> {
        match self.options.screening {
            Screening::NormalEquations => {
                let row_scale: Option<Vec<f64>> = pilot.map(|f| {
                    self.prep
                        .scaled
                        .iter()
                        .map(|t| 1.0 / f.den.eval_scaled(t))
                        .collect()
                });
                screen_normal_equations(
                    self.prep,
                    self.split,
                    grid,
                    row_scale.as_deref(),
                    refine_below,
                    self.options.extrapolation_weight,
                )
            }
            Screening::Svd => grid
                .pairs
                .iter()
                .enumerate()
                .map(|(ni, ds)| {
                    ds.iter()
                        .map(|&di| {
                            let cand = grid.candidate(ni, di);
                            let o = self.options;
                            let fit = fit_on_rows(
                                self.prep,
                                &self.split.train,
                                &cand,
                                o.sk_iterations,
                                o.rcond,
                                self.solver,
                            )
                            .ok()?;
                            fit.full_rank().then(|| {
                                score(
                                    self.heldout_errors(&fit).into_iter(),
                                    o.extrapolation_weight,
                                )
                            })
                        })
                        .collect()
                })
                .collect(),
        }
    }

    fn heldout_errors(&self, fit: &RawFit) -> Vec<(f64, bool)> {
        self.split
            .heldout()
            .map(|(k, extrapolation)| {
                let t = &self.prep.scaled[k];
                let q = fit.den.eval_scaled(t);
                let e = if q > 0.0 {
                    self.prep.rel_error(fit.eval_scaled(t), k)
                } else {
                    f64::INFINITY
                };
                (e, extrapolation)
            })
            .collect()
    }

    /// SVD fit with reweighting on the training points, rank and denominator checks, score.
    fn evaluate(&mut self, cand: &Candidate) -> &Evaluation {
        if !self.evaluated.contains_key(cand) {
            let o = self.options;
            let result = fit_on_rows(
                self.prep,
                &self.split.train,
                cand,
                o.sk_iterations,
                o.rcond,
                self.solver,
            );
            let evaluation = match result {
                Ok(fit) if fit.full_rank() => match admissible(self.prep, &fit) {
                    Ok(()) => {
                        let errors = self.heldout_errors(&fit);
                        let score = score(errors.iter().copied(), o.extrapolation_weight);
                        Evaluation::Admissible { fit, errors, score }
                    }
                    Err(_) => {
                        self.rejected_denominator += 1;
                        Evaluation::Rejected
                    }
                },
                _ => Evaluation::Rejected,
            };
            self.evaluated.insert(cand.clone(), evaluation);
        }
        &self.evaluated[cand]
    }

    fn score_of(&mut self, cand: &Candidate) -> Option<f64> {
        match self.evaluate(cand) {
            Evaluation::Admissible { score, .. } => Some(*score),
            Evaluation::Rejected => None,
        }
    }

    fn budget_left(&self) -> bool {
        self.evaluated.len() < self.options.refit_limit.max(1)
    }

    /// The normal equations refuse candidates whose condition number exceeds about 3·10⁷.
    /// Such a candidate only matters when the data resolve its nearly dependent terms, i.e.
    /// when it is nearly exact, and then it is typically a simple model with a small rational
    /// correction (`bx/N + 2N·bx`). The simplest `FALLBACK_LIMIT` of them are fitted by SVD
    /// instead, and their held-out score takes the place of the screening score.
    fn fill_refused(&mut self, grid: &CandidateGrid, screened: &mut [Vec<Option<f64>>]) {
        let mut refused: Vec<(usize, usize)> = grid
            .pairs
            .iter()
            .enumerate()
            .flat_map(|(ni, ds)| (0..ds.len()).map(move |slot| (ni, slot)))
            .filter(|&(ni, slot)| screened[ni][slot].is_none())
            .collect();
        refused.sort_by_cached_key(|&(ni, slot)| {
            let c = grid.candidate(ni, grid.pairs[ni][slot]);
            (c.unknowns(), c.num.total() + c.den.total(), c.den, c.num)
        });
        for (ni, slot) in refused.into_iter().take(FALLBACK_LIMIT) {
            let cand = grid.candidate(ni, grid.pairs[ni][slot]);
            self.fallback += 1;
            let o = self.options;
            screened[ni][slot] =
                fit_on_rows(self.prep, &self.split.train, &cand, 0, o.rcond, self.solver)
                    .ok()
                    .filter(RawFit::full_rank)
                    .map(|fit| {
                        score(
                            self.heldout_errors(&fit).into_iter(),
                            o.extrapolation_weight,
                        )
                    });
        }
    }

    /// Screened candidates, best score first (ties: simplest first); the constant is always
    /// among them.
    fn rank(&self, grid: &CandidateGrid, screened: &[Vec<Option<f64>>]) -> Vec<(f64, Candidate)> {
        let mut ranked: Vec<(f64, Candidate)> = grid
            .iter()
            .zip(screened.iter().flatten())
            .filter_map(|((ni, di), s)| s.map(|s| (s, grid.candidate(ni, di))))
            .collect();
        let constant = Candidate::constant(self.prep.vars.len());
        if !ranked.iter().any(|(_, c)| *c == constant) {
            ranked.push((f64::INFINITY, constant));
        }
        ranked.sort_by(|(a, ca), (b, cb)| {
            a.total_cmp(b)
                .then_with(|| ca.simplicity().cmp(&cb.simplicity()))
        });
        ranked
    }

    /// Refit the best-ranked candidates until `top_k` are admissible; the best of them.
    fn refit_top(&mut self, ranked: &[(f64, Candidate)]) -> Option<(f64, Candidate)> {
        let mut best: Option<(f64, Candidate)> = None;
        let mut admissible = 0;
        for (_, cand) in ranked {
            if admissible >= self.options.top_k.max(1) || !self.budget_left() {
                break;
            }
            if let Some(s) = self.score_of(cand) {
                admissible += 1;
                if best.as_ref().is_none_or(|(b, _)| s < *b) {
                    best = Some((s, cand.clone()));
                }
            }
        }
        best
    }

    /// The selection rule. Returns the winner, the noise level used, and how many candidates
    /// the (last) screening pass could solve.
    fn select(
        &mut self,
        grid: &CandidateGrid,
    ) -> Result<(Candidate, Option<f64>, usize), FitError> {
        // 1. Screen everything, refit the best few by SVD with reweighting.
        let normal = self.options.screening == Screening::NormalEquations;
        let mut screened = self.screen(grid, None, None);
        // On near-exact data (deterministic counters) the normal equations' error, about κ²·ε
        // relative, can exceed the differences between candidates: screen again with iterative
        // refinement, and fit the simplest refused candidates by SVD. On noisy data neither
        // changes the ranking, and both are skipped.
        let best_screened = screened
            .iter()
            .flatten()
            .flatten()
            .cloned()
            .fold(f64::INFINITY, f64::min);
        let near_exact = normal && best_screened < NEAR_EXACT;
        self.near_exact = near_exact;
        if near_exact {
            // Every plausible contender is refined: scores within a factor 100 of the best.
            screened = self.screen(grid, None, Some((100.0 * best_screened).max(1e-4)));
            self.fill_refused(grid, &mut screened);
        }
        let mut ranked = self.rank(grid, &screened);
        let mut best = self.refit_top(&ranked);
        // On noisy data, screen again with the rows divided by the best refit's denominator: the
        // first pass weights row k by q(x_k) (p − v·q = q·(p/q − v)), which can vary by orders
        // of magnitude over the block shapes and blur the ranking of rational models. (On exact
        // data the right model fits exactly under any weights.)
        if normal && !near_exact {
            let pilot = best.as_ref().and_then(|(_, c)| match &self.evaluated[c] {
                Evaluation::Admissible { fit, .. } if !fit.den.is_constant() => Some(fit.clone()),
                _ => None,
            });
            if let Some(pilot) = pilot {
                screened = self.screen(grid, Some(&pilot), None);
                ranked = self.rank(grid, &screened);
                if let Some((s, c)) = self.refit_top(&ranked) {
                    if best.as_ref().is_none_or(|(b, _)| s < *b) {
                        best = Some((s, c));
                    }
                }
            }
        }
        let screened_count = screened.iter().flatten().filter(|s| s.is_some()).count();
        let constant = Candidate::constant(self.prep.vars.len());
        if best.is_none() {
            // Every refit so far was rejected; the constant always passes.
            best = self.score_of(&constant).map(|s| (s, constant.clone()));
        }
        let Some((best_score, best_cand)) = best else {
            return Err(FitError::NoAdmissibleModel(
                "even the constant model failed".into(),
            ));
        };

        // 2. The noise level and the band of models "within noise" of the best.
        let noise = self
            .options
            .noise
            .or_else(|| match &self.evaluated[&best_cand] {
                Evaluation::Admissible { errors, .. } if !errors.is_empty() => {
                    let mut e: Vec<f64> = errors.iter().map(|(e, _)| e.min(1.0)).collect();
                    Some(1.4826 * median(&mut e))
                }
                _ => None,
            });
        let band = |best: f64| {
            best + (self.options.rel_tolerance * best)
                .max(self.options.noise_tolerance * noise.unwrap_or(0.0))
                .max(SCORE_FLOOR)
        };

        // 3. Simplest first among the candidates whose screening score is near the band (and
        //    those already refitted); the first admissible one whose refitted score is inside
        //    the band wins.
        let loose = 1.5 * band(best_score) + SCORE_FLOOR;
        let mut pool: Vec<Candidate> = ranked
            .iter()
            .filter(|(s, _)| *s <= loose)
            .map(|(_, c)| c.clone())
            .chain(self.evaluated.keys().cloned())
            .collect();
        pool.sort_by(|a, b| a.simplicity().cmp(&b.simplicity()));
        pool.dedup();
        let mut current_best = best_score;
        for cand in pool {
            if !self.evaluated.contains_key(&cand) && !self.budget_left() {
                continue;
            }
            if let Some(s) = self.score_of(&cand) {
                current_best = current_best.min(s);
                if s <= band(current_best) {
                    return Ok((cand, noise, screened_count));
                }
            }
        }
        Ok((best_cand, noise, screened_count))
    }
}

/// Rank is full and the denominator is positive on every fitting point and on the domain.
fn admissible(prep: &Prepared, fit: &RawFit) -> Result<(), String> {
    check_denominator(
        &fit.den,
        &prep.scalings,
        prep.vars,
        &prep.scaled,
        prep.domain,
    )
}

fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        0.5 * (v[n / 2 - 1] + v[n / 2])
    }
}

fn finite_or_max(x: f64) -> f64 {
    if x.is_finite() {
        x
    } else {
        f64::MAX
    }
}

fn held_out_summary(errors: &[(f64, bool)], score: f64) -> HeldOut {
    let mut all: Vec<f64> = errors.iter().map(|(e, _)| finite_or_max(*e)).collect();
    let mut extrapolation: Vec<f64> = errors
        .iter()
        .filter(|(_, x)| *x)
        .map(|(e, _)| finite_or_max(*e))
        .collect();
    let max = |v: &[f64]| v.iter().cloned().fold(0.0, f64::max);
    HeldOut {
        points: all.len(),
        extrapolation_points: extrapolation.len(),
        max_rel_error: max(&all),
        median_rel_error: median(&mut all),
        extrapolation_max_rel_error: (!extrapolation.is_empty()).then(|| max(&extrapolation)),
        extrapolation_median_rel_error: (!extrapolation.is_empty())
            .then(|| median(&mut extrapolation)),
        score,
    }
}

fn finish(
    prep: &Prepared,
    fit: RawFit,
    heldout: Option<HeldOut>,
    noise: Option<f64>,
    search: Option<SearchStats>,
    refit_on_all_points: bool,
) -> RationalFn {
    let mut errors: Vec<f64> = (0..prep.npoints())
        .map(|k| finite_or_max(prep.rel_error(fit.eval_scaled(&prep.scaled[k]), k)))
        .collect();
    let fit_max = errors.iter().cloned().fold(0.0, f64::max);
    let fit_median = median(&mut errors);
    let diagnostics = Diagnostics {
        num_degrees: fit.num.degrees().0.clone(),
        den_degrees: fit.den.degrees().0.clone(),
        points: prep.npoints(),
        distinct_points: prep.groups.len(),
        dropped_non_finite: prep.dropped,
        unknowns: fit.unknowns,
        rank: fit.rank,
        condition_number: finite_or_max(fit.condition_number),
        heldout,
        fit_median_rel_error: fit_median,
        fit_max_rel_error: fit_max,
        noise_estimate: noise,
        search,
        refit_on_all_points,
    };
    RationalFn {
        vars: prep.vars.to_vec(),
        scalings: prep.scalings.clone(),
        num: fit.num,
        den: fit.den,
        diagnostics,
    }
}
