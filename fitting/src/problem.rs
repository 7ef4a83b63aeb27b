//! What a caller hands in (measurements, variables, domain, options), its validation, and the
//! split of the points into a training set and held-out sets.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::domain::Domain;
use crate::poly::DegreeBounds;
use crate::vars::{Scaling, VarKind, Variable};
use crate::FitError;

/// Measurements to fit: `values[k]` measured at `points[k]` (one coordinate per variable).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FitProblem {
    pub vars: Vec<Variable>,
    pub points: Vec<Vec<f64>>,
    pub values: Vec<f64>,
    /// Where the result will be evaluated; denominators must stay positive there.
    pub domain: Domain,
}

/// How the screening pass solves the least-squares system of every candidate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Screening {
    /// Normal equations of the column-normalised Chebyshev system, one Cholesky factor of the
    /// numerator block shared by every denominator (fast; conditioning squared, which only
    /// affects the ranking of candidates, not the returned fit).
    NormalEquations,
    /// The truncated SVD of every candidate's own system (slow; for checking the fast pass).
    Svd,
}

/// Knobs of the fit. [`FitOptions::new`] gives the documented defaults.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FitOptions {
    /// Largest numerator degree per variable. Every tuple below it is a candidate.
    pub num_bounds: DegreeBounds,
    /// Largest denominator degree per variable.
    pub den_bounds: DegreeBounds,
    /// Largest total degree `Σ d_i` of a denominator candidate (default 3).
    pub den_max_total_degree: u32,
    /// A candidate needs at least this many distinct training points per unknown (default 1.5).
    pub min_points_per_unknown: f64,
    /// Singular values below `rcond·σ_max` of the column-normalised system are dropped
    /// (default 1e-12).
    pub rcond: f64,
    /// Sanathanan–Koerner reweighting steps after the first solve (default 2).
    pub sk_iterations: usize,
    /// Fraction of the points, at the largest data sizes, held back to score extrapolation
    /// (default 0.2; at most a third of the distinct data sizes).
    pub extrapolation_holdout: f64,
    /// Fraction of the remaining distinct points held back at random (default 0.15).
    pub interior_holdout: f64,
    /// Weight of the extrapolation errors in the score; the interior ones get the rest
    /// (default 0.75).
    pub extrapolation_weight: f64,
    /// Models whose score is within `max(rel_tolerance·best, noise_tolerance·noise)` of the
    /// best are "within noise"; the simplest of them wins (defaults 0.1 and 0.25).
    pub rel_tolerance: f64,
    pub noise_tolerance: f64,
    /// Relative noise level of the measurements; estimated from the held-out errors of the
    /// best model when `None`.
    pub noise: Option<f64>,
    /// Magnitude below which a value counts as zero in relative errors and weights
    /// (default `1e-9·max|v|`).
    pub value_floor: Option<f64>,
    pub screening: Screening,
    /// Candidates refitted by SVD in order of screening score before the simplicity pass
    /// (default 4).
    pub top_k: usize,
    /// Most SVD refits during selection (default 64).
    pub refit_limit: usize,
    /// Drop points with a NaN or infinite coordinate or value instead of failing (default false).
    pub drop_non_finite: bool,
    /// Seed of the interior hold-out draw.
    pub seed: u64,
}

impl FitOptions {
    pub fn new(num_bounds: DegreeBounds, den_bounds: DegreeBounds) -> Self {
        FitOptions {
            num_bounds,
            den_bounds,
            den_max_total_degree: 3,
            min_points_per_unknown: 1.5,
            rcond: 1e-12,
            sk_iterations: 2,
            extrapolation_holdout: 0.2,
            interior_holdout: 0.15,
            extrapolation_weight: 0.75,
            rel_tolerance: 0.1,
            noise_tolerance: 0.25,
            noise: None,
            value_floor: None,
            screening: Screening::NormalEquations,
            top_k: 4,
            refit_limit: 64,
            drop_non_finite: false,
            seed: 0x6b6c_6172_6170_746f,
        }
    }

    /// The same bounds for every variable.
    pub fn uniform(nvars: usize, num_degree: u32, den_degree: u32) -> Self {
        Self::new(
            DegreeBounds::uniform(nvars, num_degree),
            DegreeBounds::uniform(nvars, den_degree),
        )
    }

    fn validate(&self, nvars: usize) -> Result<(), FitError> {
        for (what, b) in [
            ("num_bounds", &self.num_bounds),
            ("den_bounds", &self.den_bounds),
        ] {
            if b.nvars() != nvars {
                return Err(FitError::Dimension {
                    what: format!("{what} (one degree per variable)"),
                    expected: nvars,
                    found: b.nvars(),
                });
            }
        }
        let fractions = [
            ("extrapolation_holdout", self.extrapolation_holdout, 0.9),
            ("interior_holdout", self.interior_holdout, 0.9),
            ("extrapolation_weight", self.extrapolation_weight, 1.0),
        ];
        for (what, f, max) in fractions {
            if !(0.0..=max).contains(&f) {
                return Err(FitError::Options(format!(
                    "{what} = {f} is outside [0, {max}]"
                )));
            }
        }
        let positive = [
            ("min_points_per_unknown", self.min_points_per_unknown),
            ("rcond", self.rcond),
        ];
        for (what, x) in positive {
            if !(x > 0.0 && x.is_finite()) {
                return Err(FitError::Options(format!("{what} = {x} must be positive")));
            }
        }
        for (what, x) in [
            ("rel_tolerance", Some(self.rel_tolerance)),
            ("noise_tolerance", Some(self.noise_tolerance)),
            ("noise", self.noise),
            ("value_floor", self.value_floor),
        ] {
            if let Some(x) = x {
                if !(x >= 0.0 && x.is_finite()) {
                    return Err(FitError::Options(format!("{what} = {x} must be >= 0")));
                }
            }
        }
        Ok(())
    }
}

/// A validated problem: finite points, their scaled coordinates, and the relative-error floor.
pub(crate) struct Prepared<'a> {
    pub vars: &'a [Variable],
    pub domain: &'a Domain,
    pub values: Vec<f64>,
    /// Scaled coordinates `t` of every point.
    pub scaled: Vec<Vec<f64>>,
    pub scalings: Vec<Scaling>,
    pub floor: f64,
    pub dropped: usize,
    /// Indices of the points grouped by identical coordinates, in order of first appearance.
    pub groups: Vec<Vec<usize>>,
}

impl<'a> Prepared<'a> {
    pub fn new(problem: &'a FitProblem, options: &FitOptions) -> Result<Self, FitError> {
        let nvars = problem.vars.len();
        if nvars == 0 {
            return Err(FitError::Empty("the problem has no variables"));
        }
        if problem.points.len() != problem.values.len() {
            return Err(FitError::Dimension {
                what: "values (one per point)".into(),
                expected: problem.points.len(),
                found: problem.values.len(),
            });
        }
        options.validate(nvars)?;
        problem.domain.validate(&problem.vars)?;
        let mut points = Vec::with_capacity(problem.points.len());
        let mut values = Vec::with_capacity(problem.values.len());
        let mut dropped = 0;
        for (k, (p, &v)) in problem.points.iter().zip(&problem.values).enumerate() {
            if p.len() != nvars {
                return Err(FitError::Dimension {
                    what: format!("coordinates of point {k}"),
                    expected: nvars,
                    found: p.len(),
                });
            }
            if p.iter().all(|x| x.is_finite()) && v.is_finite() {
                points.push(p.as_slice());
                values.push(v);
            } else if options.drop_non_finite {
                dropped += 1;
            } else {
                return Err(FitError::NonFinite {
                    index: k,
                    point: p.clone(),
                    value: v,
                });
            }
        }
        if points.is_empty() {
            return Err(FitError::Empty("no (finite) points"));
        }
        let scalings: Vec<Scaling> = (0..nvars)
            .map(|i| {
                let lo = points.iter().map(|p| p[i]).fold(f64::INFINITY, f64::min);
                let hi = points
                    .iter()
                    .map(|p| p[i])
                    .fold(f64::NEG_INFINITY, f64::max);
                Scaling::from_range(lo, hi)
            })
            .collect();
        let scaled: Vec<Vec<f64>> = points
            .iter()
            .map(|p| p.iter().zip(&scalings).map(|(x, s)| s.apply(*x)).collect())
            .collect();
        let vmax = values.iter().fold(0.0_f64, |m, v| m.max(v.abs()));
        let floor = match options.value_floor {
            Some(f) if f > 0.0 => f,
            _ if vmax > 0.0 => 1e-9 * vmax,
            _ => 1.0,
        };
        let mut index: HashMap<Vec<u64>, usize> = HashMap::new();
        let mut groups: Vec<Vec<usize>> = Vec::new();
        for (k, p) in points.iter().enumerate() {
            let key: Vec<u64> = p.iter().map(|x| (x + 0.0).to_bits()).collect();
            let g = *index.entry(key).or_insert_with(|| {
                groups.push(Vec::new());
                groups.len() - 1
            });
            groups[g].push(k);
        }
        Ok(Prepared {
            vars: &problem.vars,
            domain: &problem.domain,
            values,
            scaled,
            scalings,
            floor,
            dropped,
            groups,
        })
    }

    pub fn npoints(&self) -> usize {
        self.values.len()
    }

    /// `|f − v| / max(|v|, floor)`; a non-finite prediction counts as infinitely wrong.
    pub fn rel_error(&self, predicted: f64, k: usize) -> f64 {
        let v = self.values[k];
        let e = (predicted - v).abs() / v.abs().max(self.floor);
        if e.is_finite() {
            e
        } else {
            f64::INFINITY
        }
    }

    /// Split the point groups into training, extrapolation hold-out and interior hold-out.
    pub fn split(&self, options: &FitOptions) -> Split {
        let n = self.npoints();
        let ngroups = self.groups.len();
        let mut role = vec![Role::Train; ngroups];
        let data: Vec<usize> = (0..self.vars.len())
            .filter(|&i| self.vars[i].kind == VarKind::Data)
            .collect();
        // Data size of a group: sum of its scaled data coordinates (unit-free, monotone in
        // every data variable).
        if !data.is_empty() && options.extrapolation_holdout > 0.0 {
            let size = |g: usize| -> f64 {
                data.iter()
                    .map(|&i| self.scaled[self.groups[g][0]][i])
                    .sum()
            };
            let mut sizes: Vec<f64> = (0..ngroups).map(size).collect();
            sizes.sort_by(|a, b| b.total_cmp(a));
            sizes.dedup();
            if sizes.len() >= 3 {
                let max_sizes = (sizes.len() / 3).max(1);
                let target = options.extrapolation_holdout * n as f64;
                let mut held = 0usize;
                for &s in sizes.iter().take(max_sizes) {
                    for (g, r) in role.iter_mut().enumerate() {
                        if size(g) == s {
                            *r = Role::Extrapolation;
                            held += self.groups[g].len();
                        }
                    }
                    if held as f64 >= target {
                        break;
                    }
                }
            }
        }
        let rest: Vec<usize> = (0..ngroups).filter(|&g| role[g] == Role::Train).collect();
        let n_interior = if rest.len() >= 8 {
            ((options.interior_holdout * rest.len() as f64).round() as usize).min(rest.len() / 3)
        } else if rest.len() >= 5 && options.interior_holdout > 0.0 {
            1
        } else {
            0
        };
        let mut draw: Vec<(u64, usize)> = rest
            .iter()
            .map(|&g| {
                (
                    splitmix64(options.seed ^ (g as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)),
                    g,
                )
            })
            .collect();
        draw.sort_unstable();
        for &(_, g) in draw.iter().take(n_interior) {
            role[g] = Role::Interior;
        }
        let mut split = Split::default();
        for (g, members) in self.groups.iter().enumerate() {
            match role[g] {
                Role::Train => {
                    split.train.extend(members);
                    split.train_groups += 1;
                }
                Role::Extrapolation => split.extrapolation.extend(members),
                Role::Interior => split.interior.extend(members),
            }
        }
        split
    }

    /// Number of distinct values of each variable among `rows`.
    pub fn distinct_values(&self, rows: &[usize]) -> Vec<usize> {
        (0..self.vars.len())
            .map(|i| {
                let mut v: Vec<u64> = rows
                    .iter()
                    .map(|&k| (self.scaled[k][i] + 0.0).to_bits())
                    .collect();
                v.sort_unstable();
                v.dedup();
                v.len()
            })
            .collect()
    }

    pub fn all_rows(&self) -> Vec<usize> {
        (0..self.npoints()).collect()
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Role {
    Train,
    Extrapolation,
    Interior,
}

/// Point indices by role.
#[derive(Clone, Debug, Default)]
pub(crate) struct Split {
    pub train: Vec<usize>,
    pub train_groups: usize,
    pub extrapolation: Vec<usize>,
    pub interior: Vec<usize>,
}

impl Split {
    pub fn heldout(&self) -> impl Iterator<Item = (usize, bool)> + '_ {
        self.extrapolation
            .iter()
            .map(|&k| (k, true))
            .chain(self.interior.iter().map(|&k| (k, false)))
    }

    pub fn has_heldout(&self) -> bool {
        !(self.extrapolation.is_empty() && self.interior.is_empty())
    }
}

pub(crate) fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}
