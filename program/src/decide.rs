//! Whether the model has earned its place: the link's decision, per kernel and from the
//! profile alone, between the rational program's choice (the model), the shape the
//! profile measured fastest at the profiled size nearest the launch (the profiled best) and,
//! where the profile names it, the program's own launch (the program's own shape).
//!
//! # The check
//!
//! The model is used at data sizes beyond the profiled ones, so the check makes it do that
//! inside the profile: for each profiled size `h` with at least [`MIN_FOLD_SIZES`] profiled
//! sizes of less work (the product of the data values) below it, the model is fitted again
//! on those smaller sizes only ([`rational::build_model`], the same fit the link makes) and
//! asked for its choice at `h`; so is the profiled best of those smaller sizes (the nearest
//! one to `h`). The profile measured every one of its shapes at `h`: the ratio of the
//! fastest measured time there to the measured time of each method's shape is that
//! method's score on the fold (1 = the fastest; a model's choice the profile did not time
//! at `h` is replaced by its best-ranked shape that was timed). The fold's sizes never
//! enter its fit: the check is what the model would have scored had `h` not been profiled.
//!
//! # The rule
//!
//! Over the folds, the geometric means of the two methods' scores are compared. The model
//! keeps the choice unless the profiled best's choices there were measured at least
//! [`DEMOTE_FACTOR`] (2) times faster than the model's: then the model mispredicts the
//! kernel at every size (docs/model.md, "Why the model can be wrong": work per thread that
//! depends on the launched grid, as in a grid-stride loop), and the profiled best chooses at
//! every size. A smaller gap is no evidence: at the small profiled sizes the GPU is barely
//! filled and the fastest shape is decided by the last wave and the launch overhead, and on
//! the PolyBench study the model's held-out choices scored down to 0.58–0.63 of the profiled
//! best's (the correlation and covariance matrices, gramschmidt's update) for kernels whose
//! model beats the profiled best by 0.06–0.27 at the study's sizes. Without a fold (too
//! few profiled sizes) the model chooses.
//!
//! # The program's own shape
//!
//! A profile captured with the program's block named ([`Entry::program`], issue 38) also
//! scores that block at each fold's held-out size (its measured time there: the program
//! picks it itself at run time, so it needs no fit). It keeps the program's launch (the
//! generated C registers no model: [`RationalProgram::program_chooses`]) when, over the folds
//! with both, it was measured at least the same factor times faster than the model's
//! choices, and, where the profiled best would choose, no slower than the profiled best over
//! the folds with both. A profile without the program's block decides as before.
//!
//! A kernel whose launched threads do not follow its data (the profile's own launches say
//! so: [`metrics::coverage_excess`] above [`LOOP_EXCESS`]; one block per row, a grid-stride
//! loop under a capped grid, a tile walked by fewer rows of threads) needs only
//! [`LOOP_FACTOR`] (1.1, above the profile's run-to-run spread): its threads loop over a
//! share of the data that the launch's shape decides, the mechanism the model is known to
//! get wrong (docs/model.md), so the profile's evidence counts as soon as it is more than
//! noise. So does a kernel whose blocks wait at barriers (the profile counted barrier
//! instructions: [`waits_at_barriers`]): the model's synchronisation term does not describe
//! a block's wait for its slowest warp, and it leans to large blocks there.
//!
//! # Stability
//!
//! The profile's times enter the model through the time calibration only
//! ([`rational::TimeFit`]: the launch overhead, which does not change the ranking, and the
//! requests a warp keeps in flight, which does); the counters are measured once. The times
//! are perturbed [`REPLICAS`] times by the measured run-to-run spread of each sample
//! (seeded by the kernel and the profile's capture time: builds are reproducible), the
//! calibration is fitted again, and the choices of each perturbed copy at the largest
//! profiled size and at 4 and 16 times it are compared with the model's: each must be
//! within [`STABLE_WITHIN`] of the other's predicted time, under both. Where one is not, the
//! instability is reported, and of the calibrations the copies chose, the one whose choices
//! the copies accept best (the least worst loss; within the tolerance, the choice they all
//! agree on) is used.

use std::collections::{BTreeMap, BTreeSet};

use klaraptor_profiler::record::{Counters, Entry, Sample};
use serde::{Deserialize, Serialize};

use crate::metrics;
use crate::rational::{self, RationalProgram};
use crate::validate::{self, ProfileSample};
use klaraptor_spec::link::LinkSpec;

/// Profiled sizes of less work a fold's fit needs below its held-out size.
pub const MIN_FOLD_SIZES: usize = 3;

/// Perturbed copies of the profile's times the stability check fits.
pub const REPLICAS: usize = 8;

/// Choices within this relative predicted time of each other count as the same choice.
pub const STABLE_WITHIN: f64 = 0.03;

/// How many times faster than the model's choices the profiled best's must have been
/// measured at the held-out sizes for the profiled best to choose (docs/model.md).
pub const DEMOTE_FACTOR: f64 = 2.0;

/// The same factor for a kernel whose launched threads do not follow its data
/// ([`LOOP_EXCESS`]): above the run-to-run spread of the profile's times (2–7 % a sample).
pub const LOOP_FACTOR: f64 = 1.1;

/// Whether the profile counted barrier instructions in any launch (`__syncthreads`: the
/// collector counts them only where a warp stalled at a barrier, so a kernel without one
/// counts 0; docs/model.md).
pub fn waits_at_barriers(entry: &Entry) -> bool {
    entry
        .samples
        .iter()
        .any(|s| s.counters.as_ref().is_some_and(|c| c.inst_barrier > 0))
}

/// How far the profile's launches ran beyond covering the domain once
/// ([`metrics::coverage_excess`]) above which a kernel's launched threads do not follow its
/// data: its grid does not grow as its block shrinks, so each thread loops over a share of
/// the data that depends on the launch's shape. A grid that follows the block gives at most
/// 1; one that does not, about the block's size (here more than 2 threads a thread of the
/// domain on some axis).
pub const LOOP_EXCESS: f64 = 2.0;

/// Whether the profile's launches show that the kernel's launched threads do not follow its
/// data ([`metrics::coverage_excess`] above [`LOOP_EXCESS`]): a loop kernel.
pub fn threads_loop(spec: &LinkSpec, entry: &Entry) -> bool {
    metrics::coverage_excess(spec, entry).is_some_and(|x| x > LOOP_EXCESS)
}

/// Who chooses a kernel's launch shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChosenBy {
    /// The rational program's prediction.
    #[default]
    Model,
    /// The shape the profile measured fastest at the profiled size nearest the launch's.
    ProfiledBest,
    /// The program's own launch, kept as it is (the profile measured the program's block:
    /// [`Entry::program`]).
    Program,
}

impl ChosenBy {
    pub fn as_str(self) -> &'static str {
        match self {
            ChosenBy::Model => "model",
            ChosenBy::ProfiledBest => "profiled best",
            ChosenBy::Program => "program's own",
        }
    }
}

/// One fold of the check: the methods' shapes at a held-out profiled size, and the
/// profile's measured times of them there.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HeldOut {
    /// The held-out size.
    pub sizes: Vec<i64>,
    /// The profiled sizes the fold was fitted on (those of less work).
    pub fitted_on: Vec<Vec<i64>>,
    /// The fastest shape the profile measured at `sizes`, and its time (ms).
    pub best: [u32; 3],
    pub best_ms: f64,
    /// The refitted model's choice among the shapes timed there, and its time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<[u32; 3]>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_ms: Option<f64>,
    /// The profiled best of the other sizes, and its time at `sizes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profiled: Option<[u32; 3]>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profiled_ms: Option<f64>,
    /// The program's own block at `sizes` ([`Entry::program`]), and its time there; absent
    /// when the profile does not name it (entries captured before) or did not time it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub program: Option<[u32; 3]>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub program_ms: Option<f64>,
    /// The median relative run-to-run spread of the shapes timed at `sizes`.
    pub spread: f64,
    /// Why a method has no figure here (its fit failed, its shape was not timed).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub note: String,
}

impl HeldOut {
    /// The model's score here: fastest time / its shape's time.
    pub fn model_ratio(&self) -> Option<f64> {
        self.model_ms.map(|t| self.best_ms / t)
    }

    /// The profiled best's score here.
    pub fn profiled_ratio(&self) -> Option<f64> {
        self.profiled_ms.map(|t| self.best_ms / t)
    }

    /// The program's own shape's score here.
    pub fn program_ratio(&self) -> Option<f64> {
        self.program_ms.map(|t| self.best_ms / t)
    }
}

/// The stability of the model's choice under the profile's run-to-run spread.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stability {
    /// The seed of the perturbations, and how many perturbed copies were fitted.
    pub seed: u64,
    pub replicas: usize,
    /// The median relative run-to-run spread of the profile's samples (the size of the
    /// perturbation).
    pub spread: f64,
    /// The requests in flight ([`rational::TimeFit::mlp`]) each perturbed calibration chose.
    pub mlp: Vec<f64>,
    /// The largest relative loss in predicted time, under either model, of one model's
    /// choice against the other's, over the perturbed copies and the probe sizes.
    pub worst_loss: f64,
    /// `worst_loss` within [`STABLE_WITHIN`].
    pub stable: bool,
    /// Where the model was not stable: the requests in flight (of those the copies chose)
    /// whose choices the copies accept best, which the program then uses, and the worst
    /// loss of its choices under a copy (within [`STABLE_WITHIN`]: every copy agrees).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agreed_mlp: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agreed_loss: Option<f64>,
    /// The sizes the choices were compared at.
    pub probes: Vec<Vec<i64>>,
}

/// The link's decision and its evidence.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    pub chosen_by: ChosenBy,
    /// One line: why.
    pub why: String,
    /// The folds of the check.
    pub held_out: Vec<HeldOut>,
    /// The geometric means of the methods' scores over the folds with both (`None`
    /// without one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_score: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profiled_score: Option<f64>,
    /// The geometric means of the program's own shape's scores and of the model's over the
    /// folds with both (`None` where the profile names no block of the program).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub program_score: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_score_vs_program: Option<f64>,
    /// How many times faster the profiled best had to be ([`DEMOTE_FACTOR`], or
    /// [`LOOP_FACTOR`] for a kernel whose launched threads do not follow its data).
    #[serde(default)]
    pub factor: f64,
    /// How far the profile's launches ran beyond covering the domain once
    /// ([`metrics::coverage_excess`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coverage_excess: Option<f64>,
    /// Whether the profile counted barrier instructions ([`waits_at_barriers`]), which also
    /// lowers the factor to [`LOOP_FACTOR`].
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub barriers: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stability: Option<Stability>,
    /// The shipped model's own choices at the profiled sizes, timed by the profile
    /// ([`in_sample`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub in_sample: Vec<InSample>,
}

/// The shipped model's choice at a profiled size (and its choice at 16 times the size,
/// timed at that size), against the profile's fastest shape there.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InSample {
    pub sizes: Vec<i64>,
    pub best: [u32; 3],
    pub model: Option<[u32; 3]>,
    pub model_ratio: Option<f64>,
    pub far: Option<[u32; 3]>,
    pub far_ratio: Option<f64>,
    /// How the model's ranking of the shapes the profile timed at this size agrees with the
    /// profile's: Spearman's rank correlation of predicted and measured times (1: the same
    /// order; `None` with fewer than 3 shapes). Absent in manifests written before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spearman: Option<f64>,
    /// The shapes it was taken over.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shapes: Option<usize>,
}

/// The shipped model's choices at each profiled size, timed by the profile there.
pub fn in_sample(spec: &LinkSpec, entry: &Entry, prog: &RationalProgram) -> Vec<InSample> {
    let n = spec.data.len();
    let all = measured(entry, n);
    let sizes: BTreeSet<Vec<i64>> = all.iter().map(|(s, _)| s.sizes.clone()).collect();
    let mut out = Vec::new();
    for h in &sizes {
        let times: BTreeMap<[u32; 3], f64> = all
            .iter()
            .filter(|(s, _)| &s.sizes == h)
            .map(|(s, c)| (s.block, c.time_ms))
            .collect();
        let Some((&best, &best_ms)) = times.iter().min_by(|a, b| a.1.total_cmp(b.1)) else {
            continue;
        };
        let pick = |d: &[i64]| -> Option<[u32; 3]> {
            prog.model_rank(d)
                .ok()?
                .iter()
                .find(|x| times.contains_key(&x.block))
                .map(|x| x.block)
        };
        let model = pick(h);
        // The model's predicted times of the shapes the profile timed here.
        let (mut predicted, mut timed) = (Vec::new(), Vec::new());
        for r in prog.model_rank(h).unwrap_or_default() {
            if let Some(&t) = times.get(&r.block) {
                predicted.push(r.prediction.time_us);
                timed.push(t);
            }
        }
        let spearman = (predicted.len() >= 3)
            .then(|| validate::spearman(&predicted, &timed))
            .flatten();
        let far_size: Vec<i64> = h.iter().map(|v| v.saturating_mul(16)).collect();
        let far = pick(&far_size);
        out.push(InSample {
            sizes: h.clone(),
            best,
            model,
            model_ratio: model.map(|b| best_ms / times[&b]),
            far,
            far_ratio: far.map(|b| best_ms / times[&b]),
            spearman,
            shapes: (!predicted.is_empty()).then_some(predicted.len()),
        });
    }
    out
}

impl Decision {
    /// One line for `klaraptor inspect` and `explain`.
    pub fn summary(&self) -> String {
        let f = |x: Option<f64>| x.map_or_else(|| "-".to_string(), |v| format!("{v:.3}"));
        let mut s = match self.program_score {
            None => format!(
                "chosen by: {} (held out: model {}, profiled best {} of the fastest, over {} \
                 size(s))",
                self.chosen_by.as_str(),
                f(self.model_score),
                f(self.profiled_score),
                self.held_out.len()
            ),
            Some(_) => format!(
                "chosen by: {} (held out: model {}, profiled best {}, program's own {} (model \
                 {} beside it) of the fastest, over {} size(s))",
                self.chosen_by.as_str(),
                f(self.model_score),
                f(self.profiled_score),
                f(self.program_score),
                f(self.model_score_vs_program),
                self.held_out.len()
            ),
        };
        if let Some(st) = &self.stability {
            if st.stable {
                let _ = std::fmt::Write::write_fmt(
                    &mut s,
                    format_args!(
                        "; stable under the runs' spread ({:.1} %, {} copies, worst {:.1} %)",
                        100.0 * st.spread,
                        st.replicas,
                        100.0 * st.worst_loss
                    ),
                );
            } else {
                let _ = std::fmt::Write::write_fmt(
                    &mut s,
                    format_args!(
                        "; UNSTABLE under the runs' spread ({:.1} %: a perturbed profile's choice \
                         {:.1} % slower), {}",
                        100.0 * st.spread,
                        100.0 * st.worst_loss,
                        match (st.agreed_mlp, st.agreed_loss) {
                            (Some(m), Some(l)) if l <= STABLE_WITHIN =>
                                format!("the calibration every copy agrees with (mlp {m}) is used"),
                            (Some(m), Some(l)) => format!(
                                "the calibration the copies agree with best (mlp {m}, worst {:.1} %) is used",
                                100.0 * l
                            ),
                            _ => "the model's calibration is kept".to_string(),
                        }
                    ),
                );
            }
        }
        s
    }
}

/// What `klaraptor inspect` shows of a decision (`explain` the first line): who chooses,
/// the held-out figures, why, and the stability.
pub fn lines(d: Option<&Decision>) -> Vec<String> {
    let Some(d) = d else {
        return vec!["chosen by: model (no decision recorded: a program linked before it)".into()];
    };
    let mut out = vec![d.summary(), format!("  why: {}", d.why)];
    let r = |x: Option<f64>| x.map_or_else(|| "-".to_string(), |v| format!("{v:.3}"));
    let b = |x: Option<[u32; 3]>| {
        x.map_or_else(
            || "-".to_string(),
            |v| format!("{}x{}x{}", v[0], v[1], v[2]),
        )
    };
    for f in &d.held_out {
        // The program's own shape where the profile named it (entries captured before: not).
        let own = if f.program.is_some() || f.note.contains("program's own") {
            format!(
                ", program's own {} at {}",
                b(f.program),
                r(f.program_ratio())
            )
        } else {
            String::new()
        };
        out.push(format!(
            "  held out {:?} (fitted on {} smaller sizes): fastest {}; model {} at {}, profiled best {} at {}{own}{}",
            f.sizes,
            f.fitted_on.len(),
            b(Some(f.best)),
            b(f.model),
            r(f.model_ratio()),
            b(f.profiled),
            r(f.profiled_ratio()),
            if f.note.is_empty() { String::new() } else { format!(" ({})", f.note) }
        ));
    }
    if d.in_sample.iter().any(|x| x.spearman.is_some()) {
        let parts: Vec<String> = d
            .in_sample
            .iter()
            .map(|x| {
                format!(
                    "{:?} {} over {} shapes (model's choice at {} of the fastest)",
                    x.sizes,
                    r(x.spearman),
                    x.shapes.unwrap_or(0),
                    r(x.model_ratio)
                )
            })
            .collect();
        out.push(format!(
            "  ranking agreement with the profile at the profiled sizes (Spearman, predicted \
             against measured time): {}",
            parts.join("; ")
        ));
    }
    out
}

/// The rule's parameters (the defaults are the link's).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DecisionRule {
    /// Fewest profiled sizes below a held-out one.
    pub min_fold_sizes: usize,
    /// How many times faster than the model's choices the profiled best's must have been
    /// measured at the held-out sizes ([`DEMOTE_FACTOR`]).
    pub factor: f64,
    /// The same for a kernel whose launched threads do not follow its data
    /// ([`LOOP_FACTOR`], [`LOOP_EXCESS`]).
    pub loop_factor: f64,
    /// Whether the programs spread a loop kernel's work over every launched warp
    /// ([`RationalProgram::threads_loop`]); false builds them as the link did before, with
    /// the work on the warps of the grid formula's domain (a model that mispredicts
    /// grid-stride and one-block-per-row kernels, which the check must catch).
    pub spread_loops: bool,
    /// Whether a kernel whose blocks wait at barriers keeps to the block sizes its profile
    /// measured fast ([`rational::barrier_cap`]); false lets the model choose any block, as
    /// the link did before (a model that leans to large blocks there).
    pub cap_at_barriers: bool,
    /// Whether a kernel whose threads follow its data holds its per-thread work at the
    /// largest profiled sizes where the profile shows it growing far slower than the data
    /// (a boundary share, not a loop: [`rational::HOLD_ELASTICITY`]); false extrapolates
    /// every fit, as the link did before.
    pub hold_boundary_work: bool,
}

impl Default for DecisionRule {
    fn default() -> Self {
        DecisionRule {
            min_fold_sizes: MIN_FOLD_SIZES,
            factor: DEMOTE_FACTOR,
            loop_factor: LOOP_FACTOR,
            spread_loops: true,
            cap_at_barriers: true,
            hold_boundary_work: true,
        }
    }
}

fn geomean(v: impl Iterator<Item = f64>) -> Option<f64> {
    let (mut s, mut n) = (0.0, 0usize);
    for x in v {
        s += x.ln();
        n += 1;
    }
    (n > 0).then(|| (s / n as f64).exp())
}

impl DecisionRule {
    /// The decision from the folds, for a kernel whose launched threads follow its data.
    pub fn apply(&self, held_out: Vec<HeldOut>) -> Decision {
        self.apply_with(held_out, None)
    }

    /// The decision from the folds and how far the profile's launches ran beyond covering
    /// the domain once ([`metrics::coverage_excess`]): above [`LOOP_EXCESS`], the kernel's
    /// launched threads do not follow its data and the smaller
    /// [`DecisionRule::loop_factor`] applies.
    pub fn apply_with(&self, held_out: Vec<HeldOut>, coverage_excess: Option<f64>) -> Decision {
        self.apply_for(held_out, coverage_excess, false)
    }

    /// [`DecisionRule::apply_with`] for a kernel whose blocks wait at barriers or not
    /// ([`waits_at_barriers`]): one that does takes [`DecisionRule::loop_factor`] too.
    pub fn apply_for(
        &self,
        held_out: Vec<HeldOut>,
        coverage_excess: Option<f64>,
        barriers: bool,
    ) -> Decision {
        let loops = coverage_excess.is_some_and(|x| x > LOOP_EXCESS);
        let factor = if loops || barriers {
            self.loop_factor
        } else {
            self.factor
        };
        let because = if loops {
            format!(
                " (its launched threads do not follow its data: the profile's launches ran \
                 {:.0} times more threads per thread of the domain at one shape than at \
                 another, so a thread's work depends on the shape)",
                coverage_excess.unwrap_or(f64::NAN)
            )
        } else if barriers {
            " (its blocks wait at barriers: the profile counted barrier instructions, and the \
             model does not describe a block's wait for its slowest warp)"
                .to_string()
        } else {
            String::new()
        };
        let both: Vec<(f64, f64)> = held_out
            .iter()
            .filter_map(|f| Some((f.model_ratio()?, f.profiled_ratio()?)))
            .collect();
        let model_score = geomean(both.iter().map(|p| p.0));
        let profiled_score = geomean(both.iter().map(|p| p.1));
        let n = both.len();
        let (chosen_by, why) = match (model_score, profiled_score) {
            (Some(m), Some(p)) if p >= m * factor => (
                ChosenBy::ProfiledBest,
                format!(
                    "fitted without the profiled size(s) it was asked about ({n}), the model's \
                     choice there was measured at {m:.3} of the fastest shape, the profiled best \
                     of the smaller sizes at {p:.3}: at least {factor:.1} times faster{because}, \
                     so the model mispredicts this kernel"
                ),
            ),
            (Some(m), Some(p)) => (
                ChosenBy::Model,
                format!(
                    "fitted without the profiled size(s) it was asked about ({n}), the model's \
                     choice there was measured at {m:.3} of the fastest shape, the profiled best \
                     of the smaller sizes at {p:.3}: not {factor:.1} times faster{because}"
                ),
            ),
            _ => (
                ChosenBy::Model,
                format!(
                    "no held-out evidence (fewer than {} profiled sizes below the largest, or \
                     no fit without it): the model chooses",
                    self.min_fold_sizes
                ),
            ),
        };
        // The program's own shape, where the profile timed it: it keeps the program's launch
        // when it was measured at least `factor` times faster than the model's choices over
        // the folds with both, and no slower than the profiled best where that chose.
        let with_program: Vec<(f64, f64)> = held_out
            .iter()
            .filter_map(|f| Some((f.model_ratio()?, f.program_ratio()?)))
            .collect();
        let model_score_vs_program = geomean(with_program.iter().map(|p| p.0));
        let program_score = geomean(with_program.iter().map(|p| p.1));
        let (mut chosen_by, mut why) = (chosen_by, why);
        if let (Some(m), Some(o)) = (model_score_vs_program, program_score) {
            let k = with_program.len();
            let against_profiled = || {
                let both: Vec<(f64, f64)> = held_out
                    .iter()
                    .filter_map(|f| Some((f.profiled_ratio()?, f.program_ratio()?)))
                    .collect();
                Some((
                    geomean(both.iter().map(|p| p.0))?,
                    geomean(both.iter().map(|p| p.1))?,
                ))
            };
            if o >= m * factor {
                let beats_profiled = match chosen_by {
                    ChosenBy::ProfiledBest => against_profiled().is_none_or(|(p, o)| o >= p),
                    _ => true,
                };
                if beats_profiled {
                    chosen_by = ChosenBy::Program;
                    why = format!(
                        "{why}; the program's own shape there ({k} size(s)) was measured at \
                         {o:.3} of the fastest against the model's {m:.3}: at least \
                         {factor:.1} times faster, and no slower than the profiled best, so the \
                         program keeps its launch"
                    );
                } else {
                    why = format!(
                        "{why}; the program's own shape there ({k} size(s)) was measured at \
                         {o:.3} of the fastest against the model's {m:.3}, but slower than the \
                         profiled best"
                    );
                }
            } else {
                why = format!(
                    "{why}; the program's own shape there ({k} size(s)) was measured at {o:.3} \
                     of the fastest against the model's {m:.3}: not {factor:.1} times faster"
                );
            }
        }
        Decision {
            chosen_by,
            why,
            held_out,
            model_score,
            profiled_score,
            program_score,
            model_score_vs_program,
            factor,
            coverage_excess,
            barriers,
            stability: None,
            in_sample: Vec::new(),
        }
    }
}

/// The decision for `prog`, the model of `spec` fitted on `entry`: the held-out check, then
/// the stability check, which may change `prog`'s calibration (module documentation).
pub fn decide(spec: &LinkSpec, entry: &Entry, prog: &mut RationalProgram) -> Decision {
    decide_with(spec, entry, prog, &DecisionRule::default())
}

/// [`decide`] under `rule`.
pub fn decide_with(
    spec: &LinkSpec,
    entry: &Entry,
    prog: &mut RationalProgram,
    rule: &DecisionRule,
) -> Decision {
    let folds = held_out(spec, entry, rule);
    let mut d = rule.apply_for(
        folds,
        metrics::coverage_excess(spec, entry),
        waits_at_barriers(entry),
    );
    let st = stability(
        spec,
        entry,
        prog,
        seed_of(&spec.mangled, &entry.captured_at),
    );
    if let Some(st) = &st {
        if let (false, Some(m)) = (st.stable, st.agreed_mlp) {
            prog.time_fit = refit_with_mlp(prog, spec, entry, m);
        }
    }
    d.stability = st;
    d.in_sample = in_sample(spec, entry, prog);
    if prog.profiled.is_empty() && d.chosen_by == ChosenBy::ProfiledBest {
        d.chosen_by = ChosenBy::Model;
        d.why
            .push_str("; but the program has no profiled-best table: the model chooses");
    }
    d
}

/// The measured samples of `entry` (no error, counters with a positive finite time).
fn measured(entry: &Entry, n_data: usize) -> Vec<(&Sample, &Counters)> {
    entry
        .samples
        .iter()
        .filter(|s| s.error.is_none() && s.sizes.len() == n_data)
        .filter_map(|s| Some((s, s.counters.as_ref()?)))
        .filter(|(_, c)| c.time_ms.is_finite() && c.time_ms > 0.0)
        .collect()
}

fn work(sizes: &[i64]) -> f64 {
    sizes.iter().map(|&v| v.max(1) as f64).product()
}

/// The relative run-to-run spread of one sample: the median absolute deviation of its
/// timed runs from their median, over the median, scaled to a standard deviation (×1.4826);
/// 0 with fewer than 3 runs.
pub fn run_spread(c: &Counters) -> f64 {
    let mut r: Vec<f64> = c
        .time_runs_ms
        .iter()
        .copied()
        .filter(|x| x.is_finite() && *x > 0.0)
        .collect();
    if r.len() < 3 {
        return 0.0;
    }
    r.sort_by(|a, b| a.total_cmp(b));
    let med = median_sorted(&r);
    let mut dev: Vec<f64> = r.iter().map(|x| (x - med).abs()).collect();
    dev.sort_by(|a, b| a.total_cmp(b));
    1.4826 * median_sorted(&dev) / med
}

fn median_sorted(v: &[f64]) -> f64 {
    let n = v.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        v[n / 2]
    } else {
        0.5 * (v[n / 2 - 1] + v[n / 2])
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    median_sorted(&v)
}

/// The folds of the check (module documentation).
pub fn held_out(spec: &LinkSpec, entry: &Entry, rule: &DecisionRule) -> Vec<HeldOut> {
    let n = spec.data.len();
    let all = measured(entry, n);
    let sizes: BTreeSet<Vec<i64>> = all.iter().map(|(s, _)| s.sizes.clone()).collect();
    let mut out = Vec::new();
    for h in &sizes {
        let below: Vec<Vec<i64>> = sizes
            .iter()
            .filter(|s| work(s) < work(h))
            .cloned()
            .collect();
        if below.len() < rule.min_fold_sizes {
            continue;
        }
        // The profile's times at h.
        let mut at_h: BTreeMap<[u32; 3], Vec<f64>> = BTreeMap::new();
        let mut spreads = Vec::new();
        for (s, c) in all.iter().filter(|(s, _)| &s.sizes == h) {
            at_h.entry(s.block).or_default().push(c.time_ms);
            spreads.push(run_spread(c));
        }
        let times: BTreeMap<[u32; 3], f64> = at_h
            .into_iter()
            .map(|(b, v)| (b, v.iter().sum::<f64>() / v.len() as f64))
            .collect();
        let Some((&best, &best_ms)) = times.iter().min_by(|a, b| a.1.total_cmp(b.1)) else {
            continue;
        };
        let mut fold = HeldOut {
            sizes: h.clone(),
            fitted_on: below.clone(),
            best,
            best_ms,
            model: None,
            model_ms: None,
            profiled: None,
            profiled_ms: None,
            program: None,
            program_ms: None,
            spread: median(spreads),
            note: String::new(),
        };
        // The program's own block at h: the program chooses it itself at run time, so its
        // time at h is evidence without a fit.
        if let Some(b) = entry.program_block(h) {
            match times.get(&b) {
                Some(&t) => {
                    fold.program = Some(b);
                    fold.program_ms = Some(t);
                }
                None => fold
                    .note
                    .push_str("the program's own block was not timed here; "),
            }
        }
        // The profile without h and the larger sizes.
        let mut sub = entry.clone();
        sub.samples.retain(|s| work(&s.sizes) < work(h));
        sub.plan.sizes.retain(|s| work(s) < work(h));
        match rational::build_model_with(spec, &sub, rule) {
            Ok(p) => match p.model_rank(h) {
                Ok(r) => match r.iter().find(|x| times.contains_key(&x.block)) {
                    Some(x) => {
                        fold.model = Some(x.block);
                        fold.model_ms = Some(times[&x.block]);
                    }
                    None => fold
                        .note
                        .push_str("no shape the model ranks was timed here; "),
                },
                Err(e) => fold.note.push_str(&format!("ranking failed: {e:#}; ")),
            },
            Err(e) => fold.note.push_str(&format!("no fit without it: {e:#}; ")),
        }
        let sub_times: Vec<ProfileSample> = measured(&sub, n)
            .iter()
            .map(|(s, c)| (s.sizes.clone(), s.block, c.time_ms))
            .collect();
        match validate::profiled_best(&sub_times, h) {
            Some(pb) => match times.get(&pb.block) {
                Some(&t) => {
                    fold.profiled = Some(pb.block);
                    fold.profiled_ms = Some(t);
                }
                None => fold.note.push_str("the profiled best was not timed here; "),
            },
            None => fold.note.push_str("no profiled best below it; "),
        }
        fold.note = fold.note.trim_end_matches("; ").to_string();
        out.push(fold);
    }
    out
}

/// A seed from the kernel and its profile: the same inputs perturb the same way.
pub fn seed_of(mangled: &str, captured_at: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in mangled.bytes().chain([0u8]).chain(captured_at.bytes()) {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// splitmix64.
fn next(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A standard normal draw (Box–Muller).
fn normal(state: &mut u64) -> f64 {
    let u = |s: &mut u64| ((next(s) >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
    let (a, b) = (u(state), u(state));
    (-2.0 * a.ln()).sqrt() * (std::f64::consts::TAU * b).cos()
}

/// `entry` with every measured sample's time moved by its own run-to-run spread
/// ([`run_spread`]) times a standard normal draw (kept positive), drawn from `state`.
pub fn perturbed(entry: &Entry, state: &mut u64) -> Entry {
    let mut e = entry.clone();
    for s in e.samples.iter_mut() {
        if s.error.is_some() {
            continue;
        }
        if let Some(c) = s.counters.as_mut() {
            let z = normal(state);
            let f = (1.0 + run_spread(c) * z).max(0.5);
            c.time_ms *= f;
        }
    }
    e
}

/// The calibration of `prog` fitted on `entry`'s times with the requests in flight fixed.
fn refit_with_mlp(
    prog: &RationalProgram,
    spec: &LinkSpec,
    entry: &Entry,
    mlp: f64,
) -> rational::TimeFit {
    let usable = metrics::usable(spec, entry);
    rational::fit_time_with(prog, &usable, &[mlp])
}

/// The probe sizes of the stability check: the largest profiled size (by work) and 4 and
/// 16 times each of its values.
fn probes(entry: &Entry, n: usize) -> Vec<Vec<i64>> {
    let Some(top) = measured(entry, n)
        .iter()
        .map(|(s, _)| s.sizes.clone())
        .max_by(|a, b| work(a).total_cmp(&work(b)).then_with(|| a.cmp(b)))
    else {
        return Vec::new();
    };
    [1, 4, 16]
        .iter()
        .map(|k| top.iter().map(|v| v.saturating_mul(*k)).collect())
        .collect()
}

/// The model's choice at `data` and every candidate's predicted time there.
/// A choice and every candidate's predicted time (µs).
type Choice = ([u32; 3], BTreeMap<[u32; 3], f64>);

fn choice(prog: &RationalProgram, data: &[i64]) -> Option<Choice> {
    let r = prog.model_rank(data).ok()?;
    let first = r.first()?.block;
    Some((
        first,
        r.iter().map(|x| (x.block, x.prediction.time_us)).collect(),
    ))
}

/// The worst relative loss between the choices of two calibrations of one model at the
/// probe sizes: each one's choice timed by the other's predictions, and the other way.
fn loss(a: &RationalProgram, b: &RationalProgram, probes: &[Vec<i64>]) -> f64 {
    let mut worst: f64 = 0.0;
    for p in probes {
        let (Some((ca, ta)), Some((cb, tb))) = (choice(a, p), choice(b, p)) else {
            continue;
        };
        for (t, mine, other) in [(&ta, ca, cb), (&tb, cb, ca)] {
            if let (Some(x), Some(y)) = (t.get(&mine), t.get(&other)) {
                if *x > 0.0 {
                    worst = worst.max(y / x - 1.0);
                }
            }
        }
    }
    worst
}

/// The stability check (module documentation); `None` when the profile carries no
/// repeated runs.
pub fn stability(
    spec: &LinkSpec,
    entry: &Entry,
    prog: &RationalProgram,
    seed: u64,
) -> Option<Stability> {
    let n = spec.data.len();
    let spreads: Vec<f64> = measured(entry, n)
        .iter()
        .map(|(_, c)| run_spread(c))
        .collect();
    if spreads.is_empty() || spreads.iter().all(|&s| s == 0.0) {
        return None;
    }
    let spread = median(spreads);
    let probes = probes(entry, n);
    let mut state = seed;
    let mut copies: Vec<RationalProgram> = Vec::with_capacity(REPLICAS);
    for _ in 0..REPLICAS {
        let e = perturbed(entry, &mut state);
        let mut p = prog.clone();
        p.time_fit =
            rational::fit_time_with(prog, &metrics::usable(spec, &e), &rational::MLP_CANDIDATES);
        copies.push(p);
    }
    let worst_loss = copies
        .iter()
        .map(|c| loss(prog, c, &probes))
        .fold(0.0, f64::max);
    let stable = worst_loss <= STABLE_WITHIN;
    // Unstable: of the calibrations seen, the one whose choices the perturbed copies accept
    // best (the least worst loss against every copy); within STABLE_WITHIN it is the choice
    // they all agree on.
    let agreed = if stable {
        None
    } else {
        let mut seen: Vec<f64> = std::iter::once(prog.time_fit.mlp)
            .chain(copies.iter().map(|c| c.time_fit.mlp))
            .collect();
        seen.sort_by(|a, b| a.total_cmp(b));
        seen.dedup();
        seen.into_iter()
            .map(|m| {
                let mut p = prog.clone();
                p.time_fit = refit_with_mlp(prog, spec, entry, m);
                let w = copies
                    .iter()
                    .map(|c| loss(&p, c, &probes))
                    .fold(0.0, f64::max);
                (m, w)
            })
            .min_by(|a, b| a.1.total_cmp(&b.1).then(a.0.total_cmp(&b.0)))
    };
    Some(Stability {
        seed,
        replicas: REPLICAS,
        spread,
        mlp: copies.iter().map(|c| c.time_fit.mlp).collect(),
        worst_loss,
        stable,
        agreed_mlp: agreed.map(|a| a.0),
        agreed_loss: agreed.map(|a| a.1),
        probes,
    })
}
