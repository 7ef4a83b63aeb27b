//! Validation of klaraptor's launch choice against an exhaustive search over the block
//! shapes: what `klaraptor validate` (a user's program) and the accuracy study
//! (bench/accuracy, the PolyBench samples) both compute.
//!
//! For one kernel at one data size, the exhaustive sweep (the profiling variant under the
//! time-only collector: warm-up launches, then the median of the timed ones, per shape) gives
//! a measured time per shape. Each method's shape is looked up in that sweep, so every method
//! is timed by the same harness:
//! - **optimum**: the fastest measured shape;
//! - **klaraptor**: the shape the instrumented build chose (its `KLARAPTOR_LOG` line), or the
//!   rational program's first-ranked shape where no run logged one;
//! - **settled**: the shape the runtime's refinement settled on (its `KLARAPTOR_LOG` line
//!   `… refine: settled on block=…`, [`parse_refine`]): on the first launches of a kernel at
//!   a data size the runtime times the model's top shapes and the program's own one on the
//!   GPU and keeps the fastest. A case whose log has no such line (too few launches) has no
//!   settled shape, said in its `how`; the summaries count those cases, and the cases where
//!   the settled shape is more than 3 % slower than the program's own
//!   ([`SLOWER_THAN_DEFAULT`]);
//! - **profiled_best**: the shape the kernel's own profile (the profile-database entry its
//!   rational program was built from) measured fastest at the profiled data size nearest to
//!   the case's, in the logarithm of the sizes ([`profiled_best`]): what picking from the
//!   profile alone, without a model, would give;
//! - **program_profiled** (only where the profile names the program's own block,
//!   [`klaraptor_profiler::record::Entry::program`], issue 38): the program's own block as
//!   that profile recorded it at the profiled data size nearest to the case's (the same rule
//!   as profiled_best, [`program_profiled`]): the shape whose profiled time the link's
//!   decision weighed when it asked whether the program should keep its launch
//!   ([`crate::decide::ChosenBy::Program`]). It differs from `default` where the program's
//!   block depends on its data: `default` is the block the program launches at the case's
//!   own size (what the runtime keeps when the decision chose the program), known from the
//!   run's log and timed by the sweep, so a second measurement of it would say nothing new;
//!   program_profiled says whether the profile's evidence about the program's shape carries
//!   over to the case's size. Entries captured before have no such block: no pick, and the
//!   tables, records and summaries are as before;
//! - **default**: the program's own shape;
//! - **occupancy**: the block `cudaOccupancyMaxPotentialBlockSize` suggests: in the study the
//!   API's own answer (the sample harness calls it on the GPU), in `klaraptor validate`
//!   computed by klaraptor's occupancy calculator ([`computed_occupancy_pick`]); for a 2-D or
//!   3-D kernel its best factorisation ([`occupancy_shape`]).
//!
//! The ratio of a method is optimum time / method time (1 = optimal); Spearman's rank
//! correlation of the rational program's predicted times with the measured ones, over the
//! shapes with both, says how well the model orders the shapes.
//!
//! Also here: the readers of what a sweep and a run leave (the profiling runtime's records,
//! the runtime's decision and refinement log lines) and the JSON records and summaries both
//! tools write. Every method's shape is looked up in the same sweep; a record names the
//! kernel instance by its run-time name ([`KernelName`]: `stencil1d<3>`, as its log lines
//! do) and its mangled name.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{bail, Context, Result};
use klaraptor_profiler::record::{Entry, ProgramBlock, Sample};
use serde::Serialize;

use crate::rational::RationalProgram;

/// The methods compared, in report order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Method {
    Optimum,
    Klaraptor,
    Settled,
    ProfiledBest,
    ProgramProfiled,
    Default,
    Occupancy,
}

impl Method {
    pub const ALL: [Method; 7] = [
        Method::Optimum,
        Method::Klaraptor,
        Method::Settled,
        Method::ProfiledBest,
        Method::ProgramProfiled,
        Method::Default,
        Method::Occupancy,
    ];
    /// The methods that are compared with the optimum.
    pub const COMPARED: [Method; 5] = [
        Method::Klaraptor,
        Method::Settled,
        Method::ProfiledBest,
        Method::Default,
        Method::Occupancy,
    ];
    /// The methods every study had from the start, compared on the cases where all three
    /// have a ratio.
    pub const COMMON: [Method; 3] = [Method::Klaraptor, Method::Default, Method::Occupancy];

    /// The methods compared over `cases`: [`Method::COMPARED`], and program_profiled beside
    /// profiled_best where a case has its pick (a profile that names the program's own block;
    /// without one the lists, and so the tables and summaries, are as before).
    pub fn compared(cases: &[Case]) -> Vec<Method> {
        let program = cases
            .iter()
            .any(|c| c.picks.contains_key(&Method::ProgramProfiled));
        let mut out = Vec::new();
        for m in Method::COMPARED {
            out.push(m);
            if m == Method::ProfiledBest && program {
                out.push(Method::ProgramProfiled);
            }
        }
        out
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Method::Optimum => "optimum",
            Method::Klaraptor => "klaraptor",
            Method::Settled => "settled",
            Method::ProfiledBest => "profiled_best",
            Method::ProgramProfiled => "program_profiled",
            Method::Default => "default",
            Method::Occupancy => "occupancy",
        }
    }
}

/// The settled shape is flagged when its time exceeds the program's own shape's by this
/// factor (more than 3 % slower), both timed by the sweep.
pub const SLOWER_THAN_DEFAULT: f64 = 1.03;

/// The shape a method picked at one kernel × size, and its time in the sweep.
#[derive(Debug, Clone, Default)]
pub struct Pick {
    pub block: Option<[u32; 3]>,
    /// The sweep's median time of that shape.
    pub time_ms: Option<f64>,
    /// optimum time / time.
    pub ratio: Option<f64>,
    /// The rational program's prediction for that shape, where there is one.
    pub predicted_ms: Option<f64>,
    /// Where the shape came from and how it was timed.
    pub how: String,
    /// A harness's own time of the run that used this shape, and its launch count (a site
    /// in a host loop sums its launches); the study's KL_TIME lines.
    pub harness_ms: Option<f64>,
    pub harness_launches: Option<u64>,
    /// Something a reader should know (a fallback, a disagreement).
    pub flag: Option<String>,
    /// settled: how many launches the runtime took to settle (`None` when it settled from
    /// its choices cache); which candidate won (`model#<i>`, `program`, `profiled`); whether
    /// it came from the choices cache.
    pub launches: Option<u64>,
    pub candidate: Option<String>,
    pub from_cache: Option<bool>,
    /// settled: the refinement's confidence (`paired`, `undecided`, `unmeasurable`; `None`
    /// from a runtime before paired comparisons, or without a settled line).
    pub confidence: Option<String>,
    /// The whole run's kernel time of the key with this method's shape forced (the sum over
    /// its launches, [`LaunchTimes`]): the median over the repeated whole runs that count
    /// ([`whole_run_pick`]); its launches, whole-run best / this (the best of the compared
    /// methods' whole-run times), and the key's drift (tail / head, [`LaunchTimes::drift`];
    /// the median over those runs).
    pub whole_run_ms: Option<f64>,
    pub whole_run_launches: Option<u64>,
    pub whole_run_ratio: Option<f64>,
    pub drift: Option<f64>,
    /// How many whole runs with this shape forced counted for `whole_run_ms`, and their
    /// spread: max / min - 1 of their times (`None` with fewer than two).
    pub whole_run_runs: Option<u32>,
    pub whole_run_spread: Option<f64>,
    /// The mean kernel time per timed launch over the whole run (the median over the counted
    /// runs): what the whole-run ratio compares, as a program whose timing loop repeats until
    /// a time is reached launches a faster shape more often in its run.
    pub whole_run_launch_ms: Option<f64>,
    /// The same from the isolated whole runs of the study (bench/accuracy device.sh's
    /// `WHOLE_RUN_ISOLATE`): only this key's kernel changes shape between the runs compared,
    /// every other kernel of the program at one reference shape (its settled one), so a
    /// neighbouring kernel's shape cannot change the caches this kernel starts from. `None`
    /// without such runs of the key's kernel.
    pub whole_run_iso_ms: Option<f64>,
    pub whole_run_iso_launch_ms: Option<f64>,
    pub whole_run_iso_runs: Option<u32>,
    pub whole_run_iso_spread: Option<f64>,
    /// settled: whether its time in the sweep exceeds the program's own shape's by more than
    /// 3 % ([`SLOWER_THAN_DEFAULT`]); `None` when either is not timed.
    pub slower_than_default: Option<bool>,
    /// profiled_best: the profiled data size the shape was taken at, and the profile's time
    /// of the shape there.
    pub profiled_at: Option<Vec<i64>>,
    pub profile_time_ms: Option<f64>,
}

/// One kernel at one data size.
#[derive(Debug, Clone, Default)]
pub struct Case {
    pub program: String,
    /// The kernel instance's run-time name ([`KernelName::instance`]: the source name of a
    /// plain kernel, `stencil1d<3>` for a template instance), and its mangled name.
    pub kernel: String,
    pub mangled: String,
    /// The run it came from: the study's job id (`<program>/x<k>`), validate's `run<i>`.
    pub job: String,
    pub dim: u8,
    pub labels: Vec<String>,
    pub sizes: Vec<i64>,
    /// Shape → median time (ms) of every shape the sweep measured.
    pub measured: BTreeMap<[u32; 3], f64>,
    /// Shapes that could not be measured, and why.
    pub failed: Vec<([u32; 3], String)>,
    /// How many candidate shapes the kernel has.
    pub candidates: usize,
    /// Shape → predicted time (ms), from the rational program (empty without one).
    pub predicted: BTreeMap<[u32; 3], f64>,
    pub picks: BTreeMap<Method, Pick>,
    /// Spearman's rank correlation of predicted and measured time over the shapes.
    pub spearman: Option<f64>,
    /// Whether the key's per-launch cost drifts over the run (a method's whole-run
    /// measurement whose [`LaunchTimes::drifts`]); `None` without whole-run measurements.
    pub drifts: Option<bool>,
    /// How the study's isolated whole runs treated this key's kernel (the status of its line
    /// in the job's `isolated/plan.tsv`: `isolated`, `alone`, `same`, `mixed`, `unsettled`;
    /// `absent` where the plan does not name it); `None` without an isolation plan (validate,
    /// or a choice phase run without it).
    pub isolation: Option<String>,
}

/// What the rational program made of a case's size ([`Case::predict`]).
#[derive(Debug, Clone, Default)]
pub struct Ranking {
    /// Its first-ranked shape: what the generated C selects.
    pub first: Option<[u32; 3]>,
    /// Why it could not rank, if it could not.
    pub error: Option<String>,
}

impl Case {
    pub fn complete(&self) -> bool {
        self.measured.len() + self.failed.len() >= self.candidates
    }
    pub fn sizes_text(&self) -> String {
        self.sizes
            .iter()
            .map(|v| v.to_string())
            .collect::<Vec<_>>()
            .join("×")
    }
    pub fn work(&self) -> f64 {
        self.sizes.iter().map(|&v| v as f64).product()
    }
    pub fn ratio(&self, m: Method) -> Option<f64> {
        self.picks.get(&m).and_then(|p| p.ratio)
    }

    /// Reads the sweep's samples of this kernel at this size into `measured` and `failed`,
    /// and sets the optimum pick (the fastest measured shape).
    pub fn measure<'a>(&mut self, samples: impl IntoIterator<Item = &'a Sample>) {
        for s in samples {
            match (&s.error, &s.counters) {
                (None, Some(c)) if c.time_ms.is_finite() && c.time_ms > 0.0 => {
                    self.measured.insert(s.block, c.time_ms);
                }
                (Some(e), _) => self.failed.push((s.block, e.clone())),
                _ => self.failed.push((s.block, "no time recorded".into())),
            }
        }
        if let Some((b, t)) = self.fastest() {
            self.picks.insert(
                Method::Optimum,
                Pick {
                    block: Some(b),
                    time_ms: Some(t),
                    ratio: Some(1.0),
                    how: format!(
                        "the fastest of {} measured shapes (exhaustive sweep)",
                        self.measured.len()
                    ),
                    ..Pick::default()
                },
            );
        }
    }

    /// The fastest measured shape and its time.
    pub fn fastest(&self) -> Option<([u32; 3], f64)> {
        self.measured
            .iter()
            .min_by(|a, b| a.1.total_cmp(b.1))
            .map(|(b, t)| (*b, *t))
    }

    /// Ranks every candidate of `manifest` at this size ([`RationalProgram::rank`], the
    /// function the generated C computes) into `predicted`.
    pub fn predict(&mut self, manifest: &RationalProgram) -> Ranking {
        match manifest.rank(&self.sizes) {
            Ok(r) => {
                let first = r.first().map(|x| x.block);
                for x in r {
                    self.predicted
                        .insert(x.block, x.prediction.time_us / 1000.0);
                }
                Ranking { first, error: None }
            }
            Err(e) => Ranking {
                first: None,
                error: Some(format!("{e:#}")),
            },
        }
    }

    /// After the picks are set: each compared method's time and ratio from the sweep, its
    /// prediction, and Spearman over the shapes with both a prediction and a time.
    pub fn time_picks(&mut self) {
        let best = self.fastest();
        if let Some(p) = self.picks.get_mut(&Method::Optimum) {
            if let Some(b) = p.block {
                p.predicted_ms = self.predicted.get(&b).copied();
            }
        }
        for (m, p) in self.picks.iter_mut() {
            if *m == Method::Optimum {
                continue;
            }
            let Some(b) = p.block else { continue };
            p.predicted_ms = self.predicted.get(&b).copied().or(p.predicted_ms);
            match self.measured.get(&b) {
                Some(&t) => {
                    p.time_ms = Some(t);
                    p.ratio = best.map(|(_, bt)| bt / t);
                    p.how.push_str("; timed by the exhaustive sweep");
                }
                None => {
                    p.how.push_str(&format!(
                        "; {} is not among the measured shapes: no time",
                        shape_text(b)
                    ));
                }
            }
        }
        let default_ms = self.picks.get(&Method::Default).and_then(|p| p.time_ms);
        if let Some(p) = self.picks.get_mut(&Method::Settled) {
            p.slower_than_default = match (p.time_ms, default_ms) {
                (Some(t), Some(d)) => Some(t > d * SLOWER_THAN_DEFAULT),
                _ => None,
            };
        }
        let (mut xs, mut ys) = (Vec::new(), Vec::new());
        for (b, t) in &self.measured {
            if let Some(p) = self.predicted.get(b) {
                xs.push(*p);
                ys.push(*t);
            }
        }
        self.spearman = spearman(&xs, &ys);
    }

    /// The rank (1 = first) of the measured optimum in the predicted order.
    pub fn optimum_rank(&self) -> Option<usize> {
        let best = self.picks.get(&Method::Optimum)?.block?;
        let pb = *self.predicted.get(&best)?;
        Some(self.predicted.values().filter(|&&v| v < pb).count() + 1)
    }
}

/// klaraptor's pick from the decision a run logged at a case's size (`run` says which run,
/// e.g. "the instrumented build"): the block it launched, flagged when the model did not
/// choose it, or when the rational program (`first`, [`Case::predict`]) ranks another shape
/// first.
pub fn decision_pick(d: &Decision, first: Option<[u32; 3]>, run: &str) -> Pick {
    let mut k = Pick {
        block: Some(d.block),
        ..Pick::default()
    };
    if d.from_model() {
        k.how = format!("klaraptor's choice in {run} (KLARAPTOR_LOG, source=model)");
        if let Some(f) = first.filter(|f| *f != d.block) {
            k.flag = Some(format!(
                "the manifest ranks {} first, the run chose {}",
                shape_text(f),
                shape_text(d.block)
            ));
        }
        k.predicted_ms = d.predicted_us.map(|u| u / 1000.0);
    } else {
        k.how = format!(
            "no model choice: the run launched its own shape ({})",
            d.source
        );
        k.flag = Some(format!("klaraptor did not choose: {}", d.source));
    }
    k
}

/// klaraptor's pick where the link's decision keeps the program's own launch
/// ([`RationalProgram::program_chooses`]: the generated C registers no model, so the runtime
/// launches the program's own dims): the block the run logged at the case's size (`d`; its
/// source `program`), else the program's own block at that size (`own`, what `default`
/// takes), never the model's first-ranked shape. A run that logged a model's choice there
/// (a binary linked before the decision) keeps that block, flagged.
pub fn program_chooses_pick(d: Option<&Decision>, own: Option<[u32; 3]>, run: &str) -> Pick {
    const WHY: &str = "the link's decision keeps the program's own launch (klaraptor inspect: \
                       chosen by: program's own)";
    match d {
        Some(d) if d.from_model() => Pick {
            block: Some(d.block),
            how: format!("klaraptor's choice in {run} (KLARAPTOR_LOG, source=model)"),
            predicted_ms: d.predicted_us.map(|u| u / 1000.0),
            flag: Some(format!(
                "{WHY}, but {run} chose by a model: a binary linked before that decision?"
            )),
            ..Pick::default()
        },
        Some(d) => Pick {
            block: Some(d.block),
            how: format!(
                "{WHY}: the block {run} launched (KLARAPTOR_LOG, source={})",
                d.source
            ),
            flag: (d.source != "program")
                .then(|| format!("the launch kept the program's dims by {}", d.source)),
            ..Pick::default()
        },
        None => match own {
            Some(b) => Pick {
                block: Some(b),
                how: format!(
                    "{WHY}: the program's own shape ({run} logged no decision at this size)"
                ),
                ..Pick::default()
            },
            None => Pick {
                how: format!(
                    "{WHY}, and the program's own shape at this size is not known (no log line \
                     of this kernel at this size)"
                ),
                ..Pick::default()
            },
        },
    }
}

/// The settled pick of a case from a run's refinement lines (`run` says which run): the
/// block of its settled line at the case's kernel and data values, with the launches it took
/// and the candidate that won; without one, no block and a `how` that says why (`trying`:
/// the run's `refine: trying` line at those values, when it began refining).
pub fn settled_pick(settled: Option<&Refine>, trying: Option<&RefineTrying>, run: &str) -> Pick {
    let Some(r) = settled else {
        return Pick {
            how: match trying {
                Some(t) => format!(
                    "did not settle: {run} began refining (trying {} of {} shapes{}) but \
                     logged no settled line (too few launches)",
                    t.tried,
                    t.of.map_or_else(|| "?".to_string(), |m| m.to_string()),
                    t.program_block
                        .map(|b| format!(" and the program's {}", shape_text(b)))
                        .unwrap_or_default()
                ),
                None => format!(
                    "did not settle: no refine line of this kernel at these data values in {run} \
                     (too few launches, or a runtime without refinement)"
                ),
            },
            ..Pick::default()
        };
    };
    let conf = r
        .confidence
        .as_deref()
        .map(|c| format!(", confidence={c}"))
        .unwrap_or_default();
    let how = match (r.from_cache, r.launches, r.of_first) {
        _ if r.kept() => format!(
            "the runtime's refinement in {run}: kept {} ({}; candidate={}{}): its comparisons \
             did not decide, and the shape it kept is the one the user gets",
            shape_text(r.block),
            match r.launches {
                Some(n) if !r.from_cache => format!("after {n} launches"),
                _ => "from the choices cache".to_string(),
            },
            r.candidate,
            conf
        ),
        _ if !r.settled => format!(
            "the runtime's refinement in {run}: not settled after {} launches; the shape it \
             launched when the run ended, the next run's start (candidate={})",
            r.launches
                .map_or_else(|| "?".to_string(), |n| n.to_string()),
            r.candidate
        ),
        (true, _, _) => format!(
            "the runtime's refinement in {run}: settled from the choices cache \
             (candidate={}{conf})",
            r.candidate
        ),
        (false, n, q) => format!(
            "the runtime's refinement in {run}: settled after {} launches (candidate={}{conf}{})",
            n.map_or_else(|| "?".to_string(), |n| n.to_string()),
            r.candidate,
            q.map(|q| format!(
                ", {q} of the model's first choice's time as the runtime measured it"
            ))
            .unwrap_or_default()
        ),
    };
    Pick {
        block: Some(r.block),
        how,
        launches: r.launches,
        candidate: Some(r.candidate.clone()),
        from_cache: Some(r.from_cache),
        confidence: r.confidence.clone(),
        flag: r.from_cache.then(|| {
            "settled from the choices cache: a choice of an earlier run, not this one's".into()
        }),
        ..Pick::default()
    }
}

/// One timed sample of a profile: data sizes, block, time (ms).
pub type ProfileSample = (Vec<i64>, [u32; 3], f64);

/// The profile's fastest shape at the profiled size nearest to a case's ([`profiled_best`]).
#[derive(Debug, Clone, PartialEq)]
pub struct ProfiledBest {
    pub block: [u32; 3],
    /// The profiled data size it was measured at.
    pub sizes: Vec<i64>,
    /// The profile's time of that shape there.
    pub time_ms: f64,
}

/// The shape the profile measured fastest at the profiled data size nearest to `sizes`:
/// nearest in the logarithm of the data values (the Euclidean distance between the vectors
/// of `ln v`, values below 1 taken as 1), on a tie the larger size (the larger product of
/// the values, then the lexicographically larger). Samples of another number of data values
/// than `sizes`, and times that are not positive and finite, are left out; several samples of
/// one shape at one size are averaged; of equally fast shapes the first in (x, y, z) order is
/// taken. `None` when the profile has no usable sample.
pub fn profiled_best(samples: &[ProfileSample], sizes: &[i64]) -> Option<ProfiledBest> {
    // Per size, per shape: the sum of its times and their count.
    type Sums = BTreeMap<[u32; 3], (f64, u32)>;
    let mut by_size: BTreeMap<&[i64], Sums> = BTreeMap::new();
    for (sz, b, t) in samples {
        if sz.len() != sizes.len() || !(t.is_finite() && *t > 0.0) {
            continue;
        }
        let e = by_size.entry(sz).or_default().entry(*b).or_insert((0.0, 0));
        e.0 += t;
        e.1 += 1;
    }
    let at = nearest_size(by_size.keys().copied(), sizes)?;
    let (block, time_ms) = by_size[at]
        .iter()
        .map(|(b, (t, n))| (*b, t / f64::from(*n)))
        .fold(None, |best: Option<([u32; 3], f64)>, (b, t)| match best {
            Some((_, bt)) if bt <= t => best,
            _ => Some((b, t)),
        })?;
    Some(ProfiledBest {
        block,
        sizes: at.to_vec(),
        time_ms,
    })
}

/// Of `candidates` (each of as many values as `sizes`), the one nearest to `sizes` in the
/// logarithm of the data values (the Euclidean distance between the vectors of `ln v`,
/// values below 1 taken as 1), on a tie the larger (the larger product of the values, then
/// the lexicographically larger): [`profiled_best`]'s and [`program_profiled`]'s rule.
fn nearest_size<'a>(
    candidates: impl Iterator<Item = &'a [i64]>,
    sizes: &[i64],
) -> Option<&'a [i64]> {
    let ln = |v: i64| (v.max(1) as f64).ln();
    let dist = |sz: &[i64]| -> f64 {
        sz.iter()
            .zip(sizes)
            .map(|(&a, &b)| (ln(a) - ln(b)).powi(2))
            .sum::<f64>()
    };
    let work = |sz: &[i64]| sz.iter().map(|&v| v as f64).product::<f64>();
    let mut nearest: Option<(&[i64], f64)> = None;
    for sz in candidates {
        let d = dist(sz);
        let better = match nearest {
            None => true,
            Some((n, nd)) => {
                let tol = 1e-9 * nd.max(d).max(1e-12);
                if (d - nd).abs() <= tol {
                    work(sz).total_cmp(&work(n)).then_with(|| sz.cmp(n)).is_gt()
                } else {
                    d < nd
                }
            }
        };
        if better {
            nearest = Some((sz, d));
        }
    }
    nearest.map(|(n, _)| n)
}

/// The program's own block as the profile recorded it at the profiled size nearest to a
/// case's ([`program_profiled`]).
#[derive(Debug, Clone, PartialEq)]
pub struct ProgramProfiled {
    pub block: [u32; 3],
    /// The profiled data size the profile named it at.
    pub sizes: Vec<i64>,
    /// The profile's time of that block there (the mean of its timed samples; `None` where
    /// the profile did not time it).
    pub time_ms: Option<f64>,
}

/// The program's own block the profile names ([`ProgramBlock`]: the shape the program
/// launched the kernel with at a profiled size) at the profiled size nearest to `sizes`, by
/// [`profiled_best`]'s rule over the sizes the profile names a block of the program at
/// (those of another number of data values than `sizes` left out), with the profile's time
/// of that block there from `samples`. `None` where the profile names no such block (an
/// entry captured before issue 38).
pub fn program_profiled(
    program: &[ProgramBlock],
    samples: &[ProfileSample],
    sizes: &[i64],
) -> Option<ProgramProfiled> {
    let at = nearest_size(
        program
            .iter()
            .map(|p| p.sizes.as_slice())
            .filter(|sz| sz.len() == sizes.len()),
        sizes,
    )?;
    let block = program.iter().find(|p| p.sizes == at)?.block;
    let times: Vec<f64> = samples
        .iter()
        .filter(|(sz, b, t)| sz == at && *b == block && t.is_finite() && *t > 0.0)
        .map(|(_, _, t)| *t)
        .collect();
    Some(ProgramProfiled {
        block,
        sizes: at.to_vec(),
        time_ms: (!times.is_empty()).then(|| times.iter().sum::<f64>() / times.len() as f64),
    })
}

/// The program_profiled pick of a case at `sizes` ([`program_profiled`]) from the kernel's
/// profile `p` and the program's blocks it names; `labels` name the data values in the
/// `how` text. `None` (no pick: the method is absent) where the profile names no block of
/// the program at all; a pick without a block where it names none of as many data values.
pub fn program_profiled_pick(
    p: &ProfileTimes,
    program: &[ProgramBlock],
    labels: &[String],
    sizes: &[i64],
) -> Option<Pick> {
    if program.is_empty() {
        return None;
    }
    let Some(o) = program_profiled(program, &p.samples, sizes) else {
        return Some(Pick {
            how: format!(
                "{} names the program's own block at no size of {} data values",
                p.source,
                sizes.len()
            ),
            ..Pick::default()
        });
    };
    let at: Vec<String> = labels
        .iter()
        .zip(&o.sizes)
        .map(|(l, v)| format!("{l}={v}"))
        .collect();
    let at = if at.len() == o.sizes.len() {
        at.join(" ")
    } else {
        format!("{:?}", o.sizes)
    };
    Some(Pick {
        block: Some(o.block),
        how: format!(
            "the program's own block as {} recorded it at the nearest profiled size ({at}, {};              the grid from the annotation's formula): the shape whose profiled time the link's              decision weighed for keeping the program's launch",
            p.source,
            o.time_ms.map_or_else(
                || "not timed there".to_string(),
                |t| format!("{t:.4} ms there")
            )
        ),
        profiled_at: Some(o.sizes),
        profile_time_ms: o.time_ms,
        ..Pick::default()
    })
}

/// The profile of a kernel as profiled_best reads it: its timed samples, and where they
/// came from (for the `how` texts).
#[derive(Debug, Clone, Default)]
pub struct ProfileTimes {
    pub samples: Vec<ProfileSample>,
    pub source: String,
}

impl ProfileTimes {
    /// The timed samples among `samples` (those without an error, with a time).
    pub fn from_samples<'a>(
        samples: impl IntoIterator<Item = &'a Sample>,
        source: impl Into<String>,
    ) -> ProfileTimes {
        ProfileTimes {
            samples: samples
                .into_iter()
                .filter(|s| s.error.is_none())
                .filter_map(|s| Some((s.sizes.clone(), s.block, s.counters.as_ref()?.time_ms)))
                .collect(),
            source: source.into(),
        }
    }
}

/// The profile-database entry the rational program `m` was built from: the entry of its
/// kernel (mangled name), code hash and device, captured when `m`'s provenance says. `Err`
/// says why there is none.
pub fn manifest_profile(
    db: &klaraptor_profiler::db::ProfileDb,
    m: &RationalProgram,
) -> std::result::Result<ProfileTimes, String> {
    manifest_entry(db, m).map(|e| entry_profile(&e, db))
}

/// The timed samples of `entry`, the profile-database entry of `db` a rational program was
/// built from ([`manifest_entry`]), with the `how` texts' name of it.
pub fn entry_profile(entry: &Entry, db: &klaraptor_profiler::db::ProfileDb) -> ProfileTimes {
    ProfileTimes::from_samples(
        &entry.samples,
        format!(
            "the profile its rational program was built from ({}, captured {})",
            db.root().display(),
            entry.captured_at
        ),
    )
}

/// The profile-database entry the rational program `m` was built from ([`manifest_profile`]
/// reads its samples; its [`Entry::program`] names the program's own blocks). `Err` says why
/// there is none.
pub fn manifest_entry(
    db: &klaraptor_profiler::db::ProfileDb,
    m: &RationalProgram,
) -> std::result::Result<Entry, String> {
    let entry = match db.get(&m.mangled, &m.provenance.code_hash, &m.device.name) {
        Ok(Some(e)) => e,
        Ok(None) => {
            return Err(format!(
                "no profile of {} ({}, code hash {}) for {} in {}",
                m.kernel,
                m.mangled,
                m.provenance.code_hash,
                m.device.name,
                db.root().display()
            ))
        }
        Err(e) => return Err(format!("the profile database: {e:#}")),
    };
    if entry.captured_at != m.provenance.captured_at {
        return Err(format!(
            "the profile of {} in {} was captured {}, the rational program was built from one \
             captured {}: relink the program to compare with this profile",
            m.kernel,
            db.root().display(),
            entry.captured_at,
            m.provenance.captured_at
        ));
    }
    Ok(entry)
}

/// The profiled_best pick of a case at `sizes` from the kernel's profile (`Err`: why there
/// is none); `labels` name the data values in the `how` text.
pub fn profiled_best_pick(
    profile: std::result::Result<&ProfileTimes, &str>,
    labels: &[String],
    sizes: &[i64],
) -> Pick {
    let p = match profile {
        Ok(p) => p,
        Err(why) => {
            return Pick {
                how: format!("no profile: {why}"),
                ..Pick::default()
            }
        }
    };
    match profiled_best(&p.samples, sizes) {
        Some(b) => {
            let at: Vec<String> = labels
                .iter()
                .zip(&b.sizes)
                .map(|(l, v)| format!("{l}={v}"))
                .collect();
            let at = if at.len() == b.sizes.len() {
                at.join(" ")
            } else {
                format!("{:?}", b.sizes)
            };
            Pick {
                block: Some(b.block),
                how: format!(
                    "the fastest shape of {} at the nearest profiled size ({at}, {:.4} ms \
                     there; the grid from the annotation's formula)",
                    p.source, b.time_ms
                ),
                profiled_at: Some(b.sizes),
                profile_time_ms: Some(b.time_ms),
                ..Pick::default()
            }
        }
        None => Pick {
            how: format!(
                "no timed sample of {} data values in {}",
                sizes.len(),
                p.source
            ),
            ..Pick::default()
        },
    }
}

/// What the study calls the occupancy API in its `how` texts.
pub const OCCUPANCY_API: &str = "cudaOccupancyMaxPotentialBlockSize";

/// The shape the occupancy baseline stands for, from the 1-D block size `n` the occupancy
/// API returns (`source` names where `n` came from, the start of the returned text): `n`
/// itself for a 1-D kernel; otherwise the candidates are powers of two, so `n` is rounded
/// down to a power of two `p` and, of the power-of-two shapes with `p` threads in the
/// kernel's dimensions, the one the sweep measured fastest is taken (the "best
/// factorisation": the most favourable reading of the baseline). The accuracy study and
/// `klaraptor validate` both use this rule.
pub fn occupancy_shape(
    dim: u8,
    n: u32,
    measured: &BTreeMap<[u32; 3], f64>,
    source: &str,
) -> (Option<[u32; 3]>, String) {
    if n == 0 {
        return (None, "the occupancy API returned block 0".into());
    }
    if dim <= 1 {
        return (Some([n, 1, 1]), format!("{source}: block {n}"));
    }
    let p = 1u32 << (31 - n.leading_zeros());
    let mut best: Option<([u32; 3], f64)> = None;
    let mut count = 0;
    for (b, &t) in measured {
        let threads = u64::from(b[0]) * u64::from(b[1]) * u64::from(b[2]);
        let fits = threads == u64::from(p)
            && b.iter().all(|&v| v.is_power_of_two())
            && (dim >= 3 || b[2] == 1);
        if fits {
            count += 1;
            if best.is_none_or(|(_, bt)| t < bt) {
                best = Some((*b, t));
            }
        }
    }
    let rounded = if p == n {
        String::new()
    } else {
        format!(" → {p} (the largest power of two ≤ {n}: candidates are powers of two)")
    };
    match best {
        Some((b, _)) => (
            Some(b),
            format!(
                "{source}: block {n}{rounded}; the fastest of its {count} measured {dim}-D \
                 factorisations"
            ),
        ),
        None => (
            None,
            format!("{source}: block {n}{rounded}; none of its factorisations was measured"),
        ),
    }
}

/// The occupancy baseline where no harness called the API (`klaraptor validate`): the block
/// size `cudaOccupancyMaxPotentialBlockSize(…, 0, 0)` returns, computed by
/// [`klaraptor_model::max_potential_block_size`] (which rests on the occupancy calculator
/// that equals `cudaOccupancyMaxActiveBlocksPerMultiprocessor` on the H200) for the device
/// of `manifest`, then read as a shape by [`occupancy_shape`]. The kernel's registers per
/// thread and shared memory per block are those the sweep's records report for the swept
/// code (`samples`: the most over them; static plus the dynamic shared memory the launches
/// passed), else the rational program's.
pub fn computed_occupancy_pick<'a>(
    manifest: &RationalProgram,
    dim: u8,
    measured: &BTreeMap<[u32; 3], f64>,
    samples: impl IntoIterator<Item = &'a Sample>,
) -> Pick {
    let counted: Vec<(u32, u32)> = samples
        .into_iter()
        .filter_map(|s| s.counters.as_ref())
        .map(|c| {
            (
                c.regs_per_thread,
                c.smem_static.saturating_add(c.smem_dynamic),
            )
        })
        .collect();
    let (regs, smem, from) = match counted
        .iter()
        .copied()
        .reduce(|a, b| (a.0.max(b.0), a.1.max(b.1)))
    {
        Some((r, m)) => (r, m, "the sweep's records"),
        None => (
            manifest.regs_per_thread,
            manifest.smem_per_block,
            "the rational program",
        ),
    };
    let dev = &manifest.device;
    let inputs = format!(
        "{regs} registers/thread and {smem} B shared memory/block from {from}, {} limits",
        dev.name
    );
    let mut p = Pick::default();
    match klaraptor_model::max_potential_block_size(dev, regs, smem) {
        Some(x) => {
            let source = format!("{OCCUPANCY_API} computed by klaraptor ({inputs})");
            let (b, how) = occupancy_shape(dim, x.block_size, measured, &source);
            p.block = b;
            p.how = how;
        }
        None => {
            p.how = format!(
                "{OCCUPANCY_API} computed by klaraptor ({inputs}): no block size can launch \
                 (the API returns block 0)"
            )
        }
    }
    p
}

/// `AxBxC`.
pub fn shape_text(b: [u32; 3]) -> String {
    format!("{}x{}x{}", b[0], b[1], b[2])
}

/// Spearman's rank correlation of two equally long series (ties get their average rank);
/// `None` with fewer than three points or a constant series.
pub fn spearman(a: &[f64], b: &[f64]) -> Option<f64> {
    if a.len() != b.len() || a.len() < 3 {
        return None;
    }
    let ra = ranks(a);
    let rb = ranks(b);
    let n = a.len() as f64;
    let ma = ra.iter().sum::<f64>() / n;
    let mb = rb.iter().sum::<f64>() / n;
    let (mut sab, mut saa, mut sbb) = (0.0, 0.0, 0.0);
    for (x, y) in ra.iter().zip(&rb) {
        sab += (x - ma) * (y - mb);
        saa += (x - ma) * (x - ma);
        sbb += (y - mb) * (y - mb);
    }
    if saa == 0.0 || sbb == 0.0 {
        return None;
    }
    Some(sab / (saa * sbb).sqrt())
}

fn ranks(v: &[f64]) -> Vec<f64> {
    let mut idx: Vec<usize> = (0..v.len()).collect();
    idx.sort_by(|&i, &j| v[i].total_cmp(&v[j]));
    let mut r = vec![0.0; v.len()];
    let mut i = 0;
    while i < idx.len() {
        let mut j = i;
        while j + 1 < idx.len() && v[idx[j + 1]] == v[idx[i]] {
            j += 1;
        }
        let avg = (i + j) as f64 / 2.0 + 1.0;
        for &k in &idx[i..=j] {
            r[k] = avg;
        }
        i = j + 1;
    }
    r
}

/// Summary statistics of a method's ratios.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stats {
    pub n: usize,
    pub geomean: f64,
    pub min: f64,
    pub share_ge_090: f64,
    pub below_080: usize,
}

pub fn stats(ratios: &[f64]) -> Option<Stats> {
    if ratios.is_empty() {
        return None;
    }
    let n = ratios.len();
    let geomean = (ratios.iter().map(|r| r.ln()).sum::<f64>() / n as f64).exp();
    Some(Stats {
        n,
        geomean,
        min: ratios.iter().cloned().fold(f64::INFINITY, f64::min),
        share_ge_090: ratios.iter().filter(|&&r| r >= 0.90).count() as f64 / n as f64,
        below_080: ratios.iter().filter(|&&r| r < 0.80).count(),
    })
}

/// One method's line of the JSON summaries both tools write ([`summaries`]).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct MethodSummary {
    pub method: &'static str,
    /// The cases with a ratio, and the statistics over them (null without any).
    pub cases: usize,
    pub geomean: Option<f64>,
    pub min: Option<f64>,
    pub share_ge_090: Option<f64>,
    pub below_090: usize,
    pub below_080: usize,
    /// The cases without a ratio (no shape, or a shape the sweep did not time).
    pub without_ratio: usize,
    /// settled only: the cases whose run logged no settled line, and the cases whose settled
    /// shape is more than 3 % slower than the program's own in the sweep.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_settled: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slower_than_default: Option<usize>,
    /// settled only: the cases whose refinement kept a shape undecided, or unmeasurable
    /// (`kept` lines: the shape the user gets, without a decided comparison).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub undecided: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unmeasurable: Option<usize>,
    /// The whole-run measurements: the cases with a whole-run ratio and their geometric
    /// mean and minimum (whole-run best / this), and the cases whose key drifts.
    pub whole_run_cases: usize,
    pub whole_run_geomean: Option<f64>,
    pub whole_run_min: Option<f64>,
    pub drifting: usize,
    /// settled only: issue 41's acceptance over whole runs ([`Case::whole_run_accept`]): the
    /// cases with a figure, those with settled ≤ 1.03 × min(own, model), and how many of the
    /// figures came from isolated whole runs and from all-at-once runs in which the key's
    /// kernel alone changed shape (the rest: all-at-once runs in which other kernels changed
    /// shape too).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub whole_run_accept_cases: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub whole_run_accept_within: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub whole_run_accept_isolated: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub whole_run_accept_alone: Option<usize>,
    /// profiled_best only: the cases without a profile to pick from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub no_profile: Option<usize>,
}

/// The summary of every compared method over `cases` (one line per method, also for a
/// method no case has a ratio of; program_profiled only where a case has its pick:
/// [`Method::compared`]).
pub fn summaries(cases: &[Case]) -> Vec<MethodSummary> {
    Method::compared(cases)
        .into_iter()
        .map(|m| {
            let r: Vec<f64> = cases.iter().filter_map(|c| c.ratio(m)).collect();
            let x = stats(&r);
            let no_block = cases
                .iter()
                .filter(|c| c.picks.get(&m).and_then(|p| p.block).is_none())
                .count();
            let confident = |want: &str| {
                cases
                    .iter()
                    .filter(|c| c.picks.get(&m).and_then(|p| p.confidence.as_deref()) == Some(want))
                    .count()
            };
            let wr: Vec<f64> = cases
                .iter()
                .filter_map(|c| c.picks.get(&m).and_then(|p| p.whole_run_ratio))
                .collect();
            let wx = stats(&wr);
            let accept: Vec<(f64, &str)> =
                cases.iter().filter_map(|c| c.whole_run_accept()).collect();
            let settled = m == Method::Settled;
            let accept_from =
                |from: &str| settled.then(|| accept.iter().filter(|(_, f)| *f == from).count());
            MethodSummary {
                method: m.as_str(),
                cases: r.len(),
                geomean: x.map(|x| x.geomean),
                min: x.map(|x| x.min),
                share_ge_090: x.map(|x| x.share_ge_090),
                below_090: r.iter().filter(|&&v| v < 0.90).count(),
                below_080: r.iter().filter(|&&v| v < 0.80).count(),
                without_ratio: cases.len() - r.len(),
                not_settled: (m == Method::Settled).then_some(no_block),
                slower_than_default: (m == Method::Settled).then(|| {
                    cases
                        .iter()
                        .filter(|c| {
                            c.picks
                                .get(&m)
                                .and_then(|p| p.slower_than_default)
                                .unwrap_or(false)
                        })
                        .count()
                }),
                undecided: (m == Method::Settled).then(|| confident("undecided")),
                unmeasurable: (m == Method::Settled).then(|| confident("unmeasurable")),
                whole_run_cases: wr.len(),
                whole_run_geomean: wx.map(|x| x.geomean),
                whole_run_min: wx.map(|x| x.min),
                drifting: cases
                    .iter()
                    .filter(|c| {
                        c.drifts == Some(true)
                            && c.picks.get(&m).and_then(|p| p.whole_run_ms).is_some()
                    })
                    .count(),
                whole_run_accept_cases: settled.then_some(accept.len()),
                whole_run_accept_within: settled.then(|| {
                    accept
                        .iter()
                        .filter(|(r, _)| *r <= WHOLE_RUN_ACCEPT)
                        .count()
                }),
                whole_run_accept_isolated: accept_from("isolated"),
                whole_run_accept_alone: accept_from("alone"),
                no_profile: (m == Method::ProfiledBest).then_some(no_block),
            }
        })
        .collect()
}

/// One record of the JSON both tools write: one per case × method.
#[derive(Debug, Clone, Serialize)]
pub struct Record {
    pub program: String,
    /// The kernel instance's run-time name (`stencil1d<3>` for a template instance, the
    /// source name of a plain kernel: what its log lines say) and its mangled name.
    pub kernel: String,
    pub mangled: String,
    /// Data parameter → value (the kernel's annotation labels).
    pub sizes: serde_json::Map<String, serde_json::Value>,
    pub method: &'static str,
    pub block: Option<[u32; 3]>,
    /// The exhaustive sweep's median time of `block` (null: not measured).
    pub time_ms: Option<f64>,
    /// The rational program's prediction for `block`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub predicted_ms: Option<f64>,
    /// optimum time / time.
    pub ratio: Option<f64>,
    /// Where the shape came from and how it was timed.
    pub how: String,
    /// A harness's own median of the run that used this shape, and its launch count.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub harness_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub harness_launches: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flag: Option<String>,
    /// settled: the launches the runtime took to settle (null: from the choices cache, or
    /// it did not settle), the candidate that won, whether it came from the choices cache,
    /// and whether it is more than 3 % slower than the program's own shape (null: either
    /// not timed). Present in every settled record, absent in the others.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub launches: Option<Option<u64>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub candidate: Option<Option<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from_cache: Option<Option<bool>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slower_than_default: Option<Option<bool>>,
    /// settled: the refinement's confidence (`paired`, `undecided`, `unmeasurable`; null
    /// when its log line has none). Present in every settled record.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub confidence: Option<Option<String>>,
    /// The whole run's kernel time of the key with this method's shape forced (the sum over
    /// the key's launches; with several whole runs per shape, `klaraptor validate
    /// --whole-runs`, the median over those that count; null: not measured), how many whole
    /// runs counted and their spread (max / min - 1 of their times; null: not measured, or
    /// one run only), whole-run best / this, the launches summed and the key's drift (tail /
    /// head; the median over the runs); `drifts`: whether the key's per-launch cost drifts
    /// over the run (null: no whole-run measurement of the case).
    pub whole_run_ms: Option<f64>,
    pub whole_run_runs: Option<u32>,
    pub whole_run_spread: Option<f64>,
    /// The mean kernel time per timed launch over the whole run (median over the runs; null:
    /// not measured); the whole-run ratio is of these, as the runs of a program whose timing
    /// loop repeats until a time is reached launch the key more often with a faster shape.
    pub whole_run_launch_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub whole_run_ratio: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub whole_run_launches: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub drift: Option<f64>,
    pub drifts: Option<bool>,
    /// The isolated whole runs' figures of this method's shape ([`Pick::whole_run_iso_ms`]:
    /// only this kernel's shape changed between the runs compared; absent without them).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub whole_run_iso_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub whole_run_iso_launch_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub whole_run_iso_runs: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub whole_run_iso_spread: Option<f64>,
    /// settled: settled / min(own, model) in whole-run time per launch, from the all-at-once
    /// whole runs (`whole_run_vs_min`) and from the isolated ones (`whole_run_isolated`), the
    /// figure issue 41's acceptance takes and where from (`isolated`, `alone`: all-at-once runs
    /// in which this kernel alone changed shape, `all_at_once`; [`Case::whole_run_accept`]),
    /// and how the isolated whole runs treated the kernel ([`Case::isolation`]). Present in
    /// every settled record (null: not measured).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub whole_run_vs_min: Option<Option<f64>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub whole_run_isolated: Option<Option<f64>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub whole_run_accept: Option<Option<f64>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub whole_run_accept_from: Option<Option<&'static str>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub isolation: Option<Option<String>>,
    /// profiled_best and program_profiled: the profiled data size (parameter → value) its
    /// shape was taken at, and the profile's time of the shape there (null: no profile, or
    /// not timed there). Present in every profiled_best and program_profiled record, absent in
    /// the others.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub profiled_at: Option<Option<serde_json::Map<String, serde_json::Value>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub profile_time_ms: Option<Option<f64>>,
    /// The run the case came from ([`Case::job`]).
    pub job: String,
}

/// The records of `cases`, one per case × method that has a pick.
pub fn records(cases: &[Case]) -> Vec<Record> {
    let mut out = Vec::new();
    for c in cases {
        let mut sizes = serde_json::Map::new();
        for (l, v) in c.labels.iter().zip(&c.sizes) {
            sizes.insert(l.clone(), serde_json::Value::from(*v));
        }
        for m in Method::ALL {
            let Some(p) = c.picks.get(&m) else { continue };
            let settled = m == Method::Settled;
            let profiled = matches!(m, Method::ProfiledBest | Method::ProgramProfiled);
            let at = p.profiled_at.as_ref().map(|at| {
                let mut map = serde_json::Map::new();
                for (l, v) in c.labels.iter().zip(at) {
                    map.insert(l.clone(), serde_json::Value::from(*v));
                }
                map
            });
            out.push(Record {
                program: c.program.clone(),
                kernel: c.kernel.clone(),
                mangled: c.mangled.clone(),
                sizes: sizes.clone(),
                method: m.as_str(),
                block: p.block,
                time_ms: p.time_ms,
                predicted_ms: p.predicted_ms,
                ratio: p.ratio,
                how: p.how.clone(),
                harness_ms: p.harness_ms,
                harness_launches: p.harness_launches,
                flag: p.flag.clone(),
                launches: settled.then_some(p.launches),
                candidate: settled.then(|| p.candidate.clone()),
                from_cache: settled.then_some(p.from_cache),
                slower_than_default: settled.then_some(p.slower_than_default),
                confidence: settled.then(|| p.confidence.clone()),
                whole_run_ms: p.whole_run_ms,
                whole_run_runs: p.whole_run_runs,
                whole_run_spread: p.whole_run_spread,
                whole_run_launch_ms: p.whole_run_launch_ms,
                whole_run_ratio: p.whole_run_ratio,
                whole_run_launches: p.whole_run_launches,
                drift: p.drift,
                drifts: c.drifts,
                whole_run_iso_ms: p.whole_run_iso_ms,
                whole_run_iso_launch_ms: p.whole_run_iso_launch_ms,
                whole_run_iso_runs: p.whole_run_iso_runs,
                whole_run_iso_spread: p.whole_run_iso_spread,
                whole_run_vs_min: settled.then(|| c.settled_vs_min(false)),
                whole_run_isolated: settled.then(|| c.settled_vs_min(true)),
                whole_run_accept: settled.then(|| c.whole_run_accept().map(|a| a.0)),
                whole_run_accept_from: settled.then(|| c.whole_run_accept().map(|a| a.1)),
                isolation: settled.then(|| c.isolation.clone()),
                profiled_at: profiled.then_some(at),
                profile_time_ms: profiled.then_some(p.profile_time_ms),
                job: c.job.clone(),
            });
        }
    }
    out
}

/// How the runtime's log lines (and the choices cache) name one annotated kernel instance:
/// its run-time name ([`klaraptor_spec::names`]: the source name of a plain kernel, `stencil1d<3>` for
/// an instance of a template), which its descriptor gives the runtime, or its mangled name.
/// Lines are attributed to an instance by these, never by the template's bare name where
/// the program has more than one instance of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelName {
    /// The run-time name: what tables and records show.
    pub instance: String,
    pub mangled: String,
    /// The source name too, where a line naming it can only mean this instance (the
    /// program has no other annotated instance of that name): logs written before instances
    /// had names of their own.
    pub source: Option<String>,
}

impl KernelName {
    /// The kernel `name` (source) / `mangled` of a program whose annotated kernels are `all`
    /// (source name, mangled name); as the generated descriptors name it
    /// ([`klaraptor_spec::names::instance_names`] over the instances of that name).
    pub fn new<'a>(
        name: &str,
        mangled: &str,
        all: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> KernelName {
        let mut siblings: Vec<String> = Vec::new();
        for (n, m) in all {
            if n == name && !siblings.iter().any(|s| s == m) {
                siblings.push(m.to_string());
            }
        }
        if !siblings.iter().any(|s| s == mangled) {
            siblings.push(mangled.to_string());
        }
        let names = klaraptor_spec::names::instance_names(name, &siblings);
        let at = siblings.iter().position(|s| s == mangled).unwrap_or(0);
        let instance = names[at].clone();
        let source = (siblings.len() == 1 && instance != name).then(|| name.to_string());
        KernelName {
            instance,
            mangled: mangled.to_string(),
            source,
        }
    }

    /// Whether a log line's kernel name `logged` is this instance.
    pub fn matches(&self, logged: &str) -> bool {
        logged == self.instance || logged == self.mangled || self.source.as_deref() == Some(logged)
    }

    /// Every name a log line may give this instance.
    pub fn names(&self) -> Vec<&str> {
        let mut v = vec![self.instance.as_str(), self.mangled.as_str()];
        v.extend(self.source.as_deref());
        v
    }
}

/// `AxBxC`, `AxB` or `A` as a block.
pub fn parse_block(s: &str) -> Option<[u32; 3]> {
    let v: Vec<u32> = s
        .split('x')
        .map(|x| x.parse().ok())
        .collect::<Option<_>>()?;
    match v[..] {
        [x] => Some([x, 1, 1]),
        [x, y] => Some([x, y, 1]),
        [x, y, z] => Some([x, y, z]),
        _ => None,
    }
}

/// One decision line of `KLARAPTOR_LOG` (runtime-shim/src/klaraptor_rt.c, log_decision):
/// `klaraptor: <kernel> L=v… block=AxBxC grid=AxBxC source=<text> device=<i>:<name>
/// [program_block=AxBxC]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub kernel: String,
    pub data: Vec<(String, i64)>,
    pub block: [u32; 3],
    pub grid: [u32; 3],
    /// "model predicted_us=…", "program", "forced", "fallback: …".
    pub source: String,
    pub predicted_us: Option<f64>,
    /// `<ordinal>:<name>`.
    pub device: String,
    /// The program's own block, when the launch was rewritten.
    pub program_block: Option<[u32; 3]>,
}

impl Decision {
    pub fn from_model(&self) -> bool {
        self.source == "model" || self.source.starts_with("model ")
    }
    pub fn sizes(&self) -> Vec<i64> {
        self.data.iter().map(|(_, v)| *v).collect()
    }
    /// The device's name, without its ordinal.
    pub fn device_name(&self) -> &str {
        self.device
            .split_once(':')
            .map_or(self.device.as_str(), |(_, n)| n)
    }
    /// The program's own block: `program_block` when the launch was rewritten, else the
    /// block the launch kept (no model, a fallback).
    pub fn own_block(&self) -> Option<[u32; 3]> {
        match self.program_block {
            Some(b) => Some(b),
            None if self.source == "program" || self.source.starts_with("fallback") => {
                Some(self.block)
            }
            None => None,
        }
    }
}

/// `None` for a line that is not a decision (other log lines: unknown kernels, memo full).
pub fn parse_decision(line: &str) -> Option<Result<Decision>> {
    let rest = line.strip_prefix("klaraptor: ")?;
    if !rest.contains(" block=") || !rest.contains(" source=") {
        return None;
    }
    Some(
        (|| -> Result<Decision> {
            let (head, tail) = rest.split_once(" source=").context("no source=")?;
            let (kernel, head) = split_kernel_name(head).context("no kernel")?;
            let kernel = kernel.to_string();
            let mut data = Vec::new();
            let (mut block, mut grid) = (None, None);
            for t in head.split_whitespace() {
                let (k, v) = t.split_once('=').with_context(|| format!("token {t:?}"))?;
                match k {
                    "block" => block = parse_block(v),
                    "grid" => grid = parse_block(v),
                    _ => data.push((
                        k.to_string(),
                        v.parse::<i64>()
                            .with_context(|| format!("data value {t:?}"))?,
                    )),
                }
            }
            let (tail, program_block) = match tail.rsplit_once(" program_block=") {
                Some((t, pb)) => (t, Some(parse_block(pb.trim()).context("program_block")?)),
                None => (tail, None),
            };
            let (source, device) = tail.rsplit_once(" device=").context("no device=")?;
            let predicted_us = source
                .strip_prefix("model predicted_us=")
                .and_then(|v| v.trim().parse::<f64>().ok());
            Ok(Decision {
                kernel,
                data,
                block: block.context("no block=")?,
                grid: grid.context("no grid=")?,
                source: source.to_string(),
                predicted_us,
                device: device.trim().to_string(),
                program_block,
            })
        })()
        .with_context(|| format!("in the log line {line:?}")),
    )
}

/// Splits `<kernel name> <rest>`: the name ends at the first blank outside `<…>`, `(…)` and
/// `[…]`, so a template instance's name (`axpy<float, 4>`) stays whole. `None` for an empty
/// name.
fn split_kernel_name(s: &str) -> Option<(&str, &str)> {
    let s = s.trim_start();
    let mut depth = 0u32;
    let mut end = s.len();
    for (i, c) in s.char_indices() {
        match c {
            '<' | '(' | '[' => depth += 1,
            '>' | ')' | ']' => depth = depth.saturating_sub(1),
            c if c.is_whitespace() && depth == 0 => {
                end = i;
                break;
            }
            _ => {}
        }
    }
    (end > 0).then(|| (&s[..end], &s[end..]))
}

/// The `L=v` data values of a log line's head (after the kernel's name).
fn data_values(head: &str) -> Result<Vec<(String, i64)>> {
    head.split_whitespace()
        .map(|t| {
            let (k, v) = t.split_once('=').with_context(|| format!("token {t:?}"))?;
            Ok((
                k.to_string(),
                v.parse::<i64>()
                    .with_context(|| format!("data value {t:?}"))?,
            ))
        })
        .collect()
}

/// One `refine: settled on …` line of `KLARAPTOR_LOG`: the shape the runtime's refinement
/// kept for a kernel at some data values, after timing the model's top shapes and the
/// program's own one on the GPU (or taken from its choices cache):
///
/// ```text
/// klaraptor: <kernel> L=v… refine: settled on block=AxBxC grid=AxBxC after launches=<n>, <r> of the model's first choice's time (candidate=<c> extra_us=<x>) device=<i>:<name>
/// klaraptor: <kernel> L=v… refine: settled on block=AxBxC grid=AxBxC from the choices cache (candidate=<c>) device=<i>:<name>
/// ```
///
/// and the forms of the runtime with paired comparisons, whose `kept` lines are keys whose
/// comparisons stayed undecided (or could not be measured): the shape the user gets all the
/// same, read the same way with its confidence:
///
/// ```text
/// … refine: settled on block=AxBxC grid=AxBxC after launches=<n>, <r> of the model's first choice's time (candidate=<c> confidence=paired pairs=<p> extra_us=<x>) device=<d>
/// … refine: kept block=AxBxC grid=AxBxC after launches=<n>, <r> of the model's first choice's time (candidate=<c> confidence=undecided pairs=<p> extra_us=<x>) device=<d>
/// … refine: settled on block=AxBxC grid=AxBxC from the choices cache (candidate=<c> confidence=paired pairs=<p>) device=<d>
/// … refine: kept block=AxBxC grid=AxBxC from the choices cache (candidate=<c> confidence=unmeasurable pairs=<p>) device=<d>
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Refine {
    pub kernel: String,
    pub data: Vec<(String, i64)>,
    pub block: [u32; 3],
    pub grid: [u32; 3],
    /// The launches it took (`None` from the choices cache).
    pub launches: Option<u64>,
    /// The kept shape's measured time over the model's first choice's (`None` from the
    /// cache).
    pub of_first: Option<f64>,
    /// `model#<i>`, `program` or `profiled`.
    pub candidate: String,
    /// The time the refinement's own launches cost beyond the model's choice, µs.
    pub extra_us: Option<f64>,
    pub from_cache: bool,
    /// False for a `not settled at exit` line: the key was still being measured when the run
    /// ended, and `block` is the shape it was launching (the next run starts from it).
    pub settled: bool,
    /// `paired` (a `settled on` line whose paired comparisons decided), `undecided` or
    /// `unmeasurable` (a `kept` line: the comparisons stayed undecided, or could not be
    /// measured, and the runtime kept its incumbent); `None` in lines of runtimes before
    /// paired comparisons.
    pub confidence: Option<String>,
    /// The paired comparisons' launch quadruples (`pairs=`), where the line says.
    pub pairs: Option<u64>,
    /// `<ordinal>:<name>`.
    pub device: String,
}

impl Refine {
    /// A `kept` line: the runtime kept a shape without a decided comparison.
    pub fn kept(&self) -> bool {
        self.confidence
            .as_deref()
            .is_some_and(|c| c == "undecided" || c == "unmeasurable")
    }
    pub fn sizes(&self) -> Vec<i64> {
        self.data.iter().map(|(_, v)| *v).collect()
    }
}

/// One `refine: trying …` line: the runtime began refining a kernel at some data values.
///
/// ```text
/// klaraptor: <kernel> L=v… refine: trying <n> of <m> shapes and the program's AxBxC [(<list>)] device=<i>:<name>
/// ```
///
/// (`<m>` may be `?`; a line that says `(the program's is among them)` instead has no
/// separate program block.)
#[derive(Debug, Clone, PartialEq)]
pub struct RefineTrying {
    pub kernel: String,
    pub data: Vec<(String, i64)>,
    pub tried: u32,
    /// The candidates there were (`None`: `?`).
    pub of: Option<u32>,
    pub program_block: Option<[u32; 3]>,
    pub device: String,
}

impl RefineTrying {
    pub fn sizes(&self) -> Vec<i64> {
        self.data.iter().map(|(_, v)| *v).collect()
    }
}

/// A refine line's kernel, data values and what follows `refine: `; `None` for another line.
fn refine_parts(line: &str) -> Option<(&str, &str)> {
    let rest = line.strip_prefix("klaraptor: ")?;
    if rest.contains(" source=") {
        return None;
    }
    let (head, tail) = rest.split_once(" refine: ")?;
    Some((head, tail))
}

/// The text between `key` and the first of `ends` (or the end) in `s`.
fn after<'a>(s: &'a str, key: &str, ends: &[char]) -> Option<&'a str> {
    let i = s.find(key)? + key.len();
    let t = &s[i..];
    Some(&t[..t.find(|c| ends.contains(&c)).unwrap_or(t.len())])
}

/// Parses a `refine: settled on` line ([`Refine`]); `None` for any other line (decision
/// lines, `refine: trying` lines, …).
pub fn parse_refine(line: &str) -> Option<Result<Refine>> {
    let (head, tail) = refine_parts(line)?;
    if let Some(body) = tail.strip_prefix("not settled at exit after launches=") {
        return Some(
            parse_unsettled(head, body).with_context(|| format!("in the log line {line:?}")),
        );
    }
    let body = tail.strip_prefix("settled on ").or_else(|| {
        tail.strip_prefix("kept ")
            .filter(|b| b.starts_with("block="))
    })?;
    Some(
        (|| -> Result<Refine> {
            let (kernel, head) = split_kernel_name(head).context("no kernel")?;
            let data = data_values(head)?;
            let (body, device) = body.rsplit_once(" device=").context("no device=")?;
            let block = after(body, "block=", &[' '])
                .and_then(parse_block)
                .context("no block=")?;
            let grid = after(body, " grid=", &[' '])
                .and_then(parse_block)
                .context("no grid=")?;
            let candidate = after(body, "(candidate=", &[' ', ')'])
                .filter(|c| !c.is_empty())
                .context("no candidate=")?
                .to_string();
            let from_cache = body.contains(" from the choices cache");
            let confidence = after(body, " confidence=", &[' ', ')'])
                .filter(|c| !c.is_empty())
                .map(str::to_string);
            let pairs = match after(body, " pairs=", &[' ', ')', ',']) {
                Some(p) => Some(p.parse::<u64>().with_context(|| format!("pairs={p:?}"))?),
                None => None,
            };
            let (launches, of_first, extra_us) = if from_cache {
                (None, None, None)
            } else {
                let key = " after launches=";
                let at = body.find(key).context("no launches=")? + key.len();
                let (launches, rest) = body[at..]
                    .split_once(", ")
                    .context("no `, <r> of the model's first choice's time`")?;
                let launches = launches
                    .parse::<u64>()
                    .with_context(|| format!("launches={launches:?}"))?;
                // `?` when the runtime could not time the model's first choice.
                let r = match rest.split(' ').next().unwrap_or_default() {
                    "?" => None,
                    r => Some(
                        r.parse::<f64>()
                            .with_context(|| format!("time ratio {r:?}"))?,
                    ),
                };
                let x = match after(body, " extra_us=", &[' ', ')']) {
                    Some(x) => Some(
                        x.parse::<f64>()
                            .with_context(|| format!("extra_us={x:?}"))?,
                    ),
                    None => None,
                };
                (Some(launches), r, x)
            };
            Ok(Refine {
                kernel: kernel.to_string(),
                data,
                block,
                grid,
                launches,
                of_first,
                candidate,
                extra_us,
                from_cache,
                settled: true,
                confidence,
                pairs,
                device: device.trim().to_string(),
            })
        })()
        .with_context(|| format!("in the log line {line:?}")),
    )
}

/// The rest of a `refine: not settled at exit after launches=` line (`body` starts at the
/// count):
///
/// ```text
/// klaraptor: <kernel> L=v… refine: not settled at exit after launches=<n>: launching block=AxBxC grid=AxBxC (candidate=<c>, <i> of <j> candidates timed, extra_us=<x> of <y>) device=<i>:<name>
/// ```
fn parse_unsettled(head: &str, body: &str) -> Result<Refine> {
    let (kernel, head) = split_kernel_name(head).context("no kernel")?;
    let data = data_values(head)?;
    let (body, device) = body.rsplit_once(" device=").context("no device=")?;
    let (launches, rest) = body.split_once(": ").context("no `<n>: launching`")?;
    let launches = launches
        .parse::<u64>()
        .with_context(|| format!("launches={launches:?}"))?;
    let block = after(rest, "block=", &[' '])
        .and_then(parse_block)
        .context("no block=")?;
    let grid = after(rest, " grid=", &[' '])
        .and_then(parse_block)
        .context("no grid=")?;
    let candidate = after(rest, "(candidate=", &[',', ' ', ')'])
        .filter(|c| !c.is_empty())
        .context("no candidate=")?
        .to_string();
    let extra_us = match after(rest, " extra_us=", &[' ', ')']) {
        Some(x) => Some(
            x.parse::<f64>()
                .with_context(|| format!("extra_us={x:?}"))?,
        ),
        None => None,
    };
    let pairs = match after(rest, " pairs=", &[' ', ')', ',']) {
        Some(p) => Some(p.parse::<u64>().with_context(|| format!("pairs={p:?}"))?),
        None => None,
    };
    Ok(Refine {
        kernel: kernel.to_string(),
        data,
        block,
        grid,
        launches: Some(launches),
        of_first: None,
        candidate,
        extra_us,
        from_cache: false,
        settled: false,
        confidence: None,
        pairs,
        device: device.trim().to_string(),
    })
}

/// Parses a `refine: trying` line ([`RefineTrying`]); `None` for any other line.
pub fn parse_refine_trying(line: &str) -> Option<Result<RefineTrying>> {
    let (head, tail) = refine_parts(line)?;
    let body = tail.strip_prefix("trying ")?;
    Some(
        (|| -> Result<RefineTrying> {
            let (kernel, head) = split_kernel_name(head).context("no kernel")?;
            let data = data_values(head)?;
            let (body, device) = body.rsplit_once(" device=").context("no device=")?;
            let (n, rest) = body.split_once(" of ").context("no `<n> of <m>`")?;
            let (m, rest) = rest.split_once(' ').context("no `<m> shapes`")?;
            let of = match m {
                "?" => None,
                m => Some(m.parse().with_context(|| format!("{m:?}"))?),
            };
            let program_block = rest
                .strip_prefix("shapes and the program's ")
                .and_then(|b| parse_block(b.split(' ').next().unwrap_or_default()));
            Ok(RefineTrying {
                kernel: kernel.to_string(),
                data,
                tried: n.trim().parse().with_context(|| format!("{n:?}"))?,
                of,
                program_block,
                device: device.trim().to_string(),
            })
        })()
        .with_context(|| format!("in the log line {line:?}")),
    )
}

/// The refinement lines of a log.
#[derive(Debug, Clone, Default)]
pub struct Refines {
    pub settled: Vec<Refine>,
    pub trying: Vec<RefineTrying>,
}

impl Refines {
    /// The settled line and the trying line of a kernel (source or mangled name) at some
    /// data values.
    /// Of several runs' lines (one log after another), the line where it settled, else the
    /// choices cache's, else the last run's `not settled` line.
    pub fn of(&self, names: &[&str], sizes: &[i64]) -> (Option<&Refine>, Option<&RefineTrying>) {
        let mine = |r: &&Refine| names.contains(&r.kernel.as_str()) && r.sizes() == sizes;
        (
            self.settled
                .iter()
                .filter(mine)
                .find(|r| r.settled && !r.from_cache)
                .or_else(|| self.settled.iter().filter(mine).find(|r| r.settled))
                .or_else(|| self.settled.iter().rfind(|r| mine(r))),
            self.trying
                .iter()
                .find(|r| names.contains(&r.kernel.as_str()) && r.sizes() == sizes),
        )
    }
}

/// The refinement lines of a log file (other lines are skipped).
pub fn read_refines(path: &Path) -> Result<Refines> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut out = Refines::default();
    for (i, l) in text.lines().enumerate() {
        let at = || format!("{}:{}", path.display(), i + 1);
        if let Some(r) = parse_refine(l) {
            out.settled.push(r.with_context(at)?);
        } else if let Some(r) = parse_refine_trying(l) {
            out.trying.push(r.with_context(at)?);
        }
    }
    Ok(out)
}

/// The decision lines of a log file (other lines are skipped).
pub fn read_decisions(path: &Path) -> Result<Vec<Decision>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut out = Vec::new();
    for (i, l) in text.lines().enumerate() {
        if let Some(d) = parse_decision(l) {
            out.push(d.with_context(|| format!("{}:{}", path.display(), i + 1))?);
        }
    }
    Ok(out)
}

/// The samples one kernel got in one records directory.
#[derive(Debug, Clone)]
pub struct Sweep {
    /// The kernel's id (mangled name) and source name, from kernels.tsv.
    pub id: String,
    pub name: String,
    pub samples: Vec<Sample>,
}

impl Sweep {
    /// The samples grouped by data size, sizes in order.
    pub fn by_size(&self) -> BTreeMap<Vec<i64>, Vec<&Sample>> {
        let mut out: BTreeMap<Vec<i64>, Vec<&Sample>> = BTreeMap::new();
        for s in &self.samples {
            out.entry(s.sizes.clone()).or_default().push(s);
        }
        out
    }
}

/// Every kernel's samples in a records directory (the profiling runtime's layout:
/// `kernels.tsv` with `<stem> TAB <id> TAB <name>` lines, `<stem>.jsonl` per kernel). A
/// directory without `kernels.tsv` has none.
pub fn read_records(dir: &Path) -> Result<Vec<Sweep>> {
    let index = dir.join("kernels.tsv");
    let text = match std::fs::read_to_string(&index) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("reading {}", index.display())),
    };
    let mut by_stem: BTreeMap<String, (String, String)> = BTreeMap::new();
    for (i, l) in text.lines().enumerate() {
        if l.trim().is_empty() {
            continue;
        }
        let f: Vec<&str> = l.split('\t').collect();
        if f.len() < 3 {
            bail!(
                "{}:{}: expected <stem> TAB <id> TAB <name>",
                index.display(),
                i + 1
            );
        }
        by_stem.insert(f[0].into(), (f[1].into(), f[2].into()));
    }
    let mut out = Vec::new();
    for (stem, (id, name)) in by_stem {
        let path = dir.join(format!("{stem}.jsonl"));
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        };
        // The lines naming the program's own block (`{"program":true,…}`, written beside
        // the samples under KLARAPTOR_PROFILE_PROGRAM) are not samples: blank them (the
        // others keep their line numbers).
        let text: String = text
            .split_inclusive('\n')
            .map(|l| if program_marker(l) { "\n" } else { l })
            .collect();
        let samples = parse_json_lines::<Sample>(&text, |line| {
            format!("{}:{line}: not a sample", path.display())
        })?;
        out.push(Sweep { id, name, samples });
    }
    Ok(out)
}

/// Whether `line` is the profiling runtime's line naming the program's own block
/// (klaraptor_prof.c's `KLARAPTOR_PROFILE_PROGRAM`), not a sample.
fn program_marker(line: &str) -> bool {
    serde_json::from_str::<serde_json::Value>(line)
        .ok()
        .and_then(|v| v.get("program")?.as_bool())
        == Some(true)
}

/// The JSON lines of `text`, each a `T`: blank lines skipped, a half-written last line (a run
/// killed by its timeout can leave one) dropped; another line that is not a `T` is an error
/// that `what(its line number)` describes.
fn parse_json_lines<T: serde::de::DeserializeOwned>(
    text: &str,
    what: impl Fn(usize) -> String,
) -> Result<Vec<T>> {
    let n = text.lines().count();
    let mut out = Vec::new();
    for (i, l) in text.lines().enumerate() {
        if l.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<T>(l) {
            Ok(t) => out.push(t),
            Err(_) if i + 1 == n && !text.ends_with('\n') => {}
            Err(e) => return Err(e).with_context(|| what(i + 1)),
        }
    }
    Ok(out)
}

/// A key's per-launch cost drifts when the mean of the last third of its launches differs
/// from the first third's by more than this factor (either way).
pub const DRIFT: f64 = 1.25;

/// One line of a whole-run launch-times file (`KLARAPTOR_LAUNCH_TIMES`, written at exit by
/// the runtime's launch entry point, runtime-shim/src/klaraptor_prof.c): every launch of one
/// key (kernel, data values) in one run, each timed between CUDA events on its stream.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
pub struct LaunchTimes {
    /// The kernel's id (mangled name) and source name.
    pub kernel: String,
    pub name: String,
    pub sizes: Vec<i64>,
    /// Every launch of the key, and those with a time.
    pub launches: u64,
    pub timed: u64,
    /// The sum of the timed launches' times: the whole run's kernel time of the key.
    pub total_ms: f64,
    pub first_ms: Option<f64>,
    pub last_ms: Option<f64>,
    /// The mean time of the first and of the last third of the timed launches.
    pub head_ms: Option<f64>,
    pub tail_ms: Option<f64>,
    pub min_ms: Option<f64>,
    pub max_ms: Option<f64>,
    /// The least-squares slope of time over the launch index times (timed - 1), over the
    /// mean: the relative change across the run.
    pub trend: Option<f64>,
    /// The first launch's dims, and how many distinct blocks the key was launched with.
    pub block: [u32; 3],
    pub grid: [u32; 3],
    pub blocks_seen: u32,
}

impl LaunchTimes {
    /// tail / head: how the per-launch cost changed from the first third of the run to the
    /// last (`None` with fewer than three timed launches).
    pub fn drift(&self) -> Option<f64> {
        match (self.timed >= 3, self.head_ms, self.tail_ms) {
            (true, Some(h), Some(t)) if h > 0.0 && t > 0.0 => Some(t / h),
            _ => None,
        }
    }
    /// Whether the per-launch cost drifts: [`Self::drift`] beyond [`DRIFT`] either way.
    pub fn drifts(&self) -> bool {
        self.drift()
            .is_some_and(|d| !(1.0 / DRIFT..=DRIFT).contains(&d))
    }
}

/// The lines of a launch-times file's text (blank lines skipped; a half-written last line, of
/// a run that was killed, dropped).
pub fn parse_launch_times(text: &str) -> Result<Vec<LaunchTimes>> {
    parse_json_lines(text, |line| format!("line {line}: not a launch-times line"))
}

/// One forced run of the whole-run measurement: which shape each kernel (mangled name) was
/// forced to, and the launch times it wrote. The repeats of one forced configuration
/// (`klaraptor validate --whole-runs`) are as many forced runs with the same `forced`.
#[derive(Debug, Clone, Default)]
pub struct ForcedRun {
    pub forced: BTreeMap<String, [u32; 3]>,
    pub times: Vec<LaunchTimes>,
    /// Where it came from (for the `how` texts).
    pub source: String,
}

/// The median of `v` (the mean of the middle two of an even count); `None` when empty.
pub fn median(v: &[f64]) -> Option<f64> {
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(v[n / 2]),
        _ => Some((v[n / 2 - 1] + v[n / 2]) / 2.0),
    }
}

/// The spread of repeated times: max / min - 1 (`None` with fewer than two, or a time that
/// is not positive).
pub fn spread(v: &[f64]) -> Option<f64> {
    if v.len() < 2 {
        return None;
    }
    let min = v.iter().copied().fold(f64::INFINITY, f64::min);
    let max = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (min > 0.0 && max.is_finite()).then(|| max / min - 1.0)
}

/// Sets the whole-run time of a pick whose shape is `block`, from the forced runs that
/// forced kernel `mangled` to that shape and timed its key at `sizes`: the median of their
/// times of the key (one run: its time), with how many counted (`whole_run_runs`) and their
/// spread (`whole_run_spread`). A run that did not launch the key, launched it with another
/// shape (a forced shape that fell back) or with several, or timed none of its launches is
/// left out, and `how` says so; and why there is no time when none counts, or when no run
/// forced the shape.
pub fn whole_run_pick(p: &mut Pick, runs: &[ForcedRun], mangled: &str, sizes: &[i64]) {
    let Some(b) = p.block else { return };
    let mine: Vec<&ForcedRun> = runs
        .iter()
        .filter(|r| r.forced.get(mangled) == Some(&b))
        .collect();
    if mine.is_empty() {
        if !runs.is_empty() {
            p.how.push_str(&format!(
                "; no whole-run measurement with {} forced",
                shape_text(b)
            ));
        }
        return;
    }
    let mut counted: Vec<(&ForcedRun, &LaunchTimes)> = Vec::new();
    let mut left_out: Vec<String> = Vec::new();
    for run in &mine {
        let head = format!(
            "the whole run with {} forced ({})",
            shape_text(b),
            run.source
        );
        match run
            .times
            .iter()
            .find(|t| t.kernel == mangled && t.sizes == sizes)
        {
            None => left_out.push(format!("{head} did not launch this key")),
            Some(t) if t.block != b || t.blocks_seen > 1 => left_out.push(format!(
                "{head} launched {}{}",
                shape_text(t.block),
                if t.blocks_seen > 1 { " and others" } else { "" }
            )),
            Some(t) if t.timed == 0 => {
                left_out.push(format!("{head} timed none of its {} launches", t.launches))
            }
            Some(t) => counted.push((run, t)),
        }
    }
    if counted.is_empty() {
        for why in &left_out {
            p.how.push_str("; ");
            p.how.push_str(why);
        }
        p.how.push_str(": no whole-run time");
        return;
    }
    let totals: Vec<f64> = counted.iter().map(|(_, t)| t.total_ms).collect();
    let means: Vec<f64> = counted
        .iter()
        .map(|(_, t)| t.total_ms / t.timed as f64)
        .collect();
    let drifts: Vec<f64> = counted.iter().filter_map(|(_, t)| t.drift()).collect();
    let (ms, t0) = (median(&totals).unwrap_or(f64::NAN), counted[0].1);
    p.whole_run_ms = Some(ms);
    p.whole_run_launch_ms = median(&means);
    p.whole_run_runs = Some(counted.len() as u32);
    p.whole_run_spread = spread(&totals);
    p.whole_run_launches = Some(t0.launches);
    p.drift = median(&drifts);
    let launches = if counted.iter().all(|(_, t)| t.launches == t0.launches) {
        format!(
            "{} launches{}",
            t0.launches,
            if t0.timed < t0.launches {
                format!(" ({} timed)", t0.timed)
            } else {
                String::new()
            }
        )
    } else {
        format!(
            "{} launches (differing between the runs: {})",
            t0.launches,
            counted
                .iter()
                .map(|(_, t)| t.launches.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )
    };
    let sources = counted
        .iter()
        .map(|(r, _)| r.source.as_str())
        .collect::<Vec<_>>()
        .join("; ");
    if counted.len() == 1 {
        p.how.push_str(&format!(
            "; whole run with it forced: {ms:.4} ms over {launches} ({sources})"
        ));
    } else {
        p.how.push_str(&format!(
            "; median of {} whole runs with it forced: {ms:.4} ms, spread {} ({:.4} to {:.4} \
             ms), over {launches} ({sources})",
            counted.len(),
            p.whole_run_spread.map_or_else(
                || "unknown".to_string(),
                |sp| format!("{:.1} %", 100.0 * sp)
            ),
            totals.iter().copied().fold(f64::INFINITY, f64::min),
            totals.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        ));
    }
    for why in &left_out {
        p.how.push_str("; left out: ");
        p.how.push_str(why);
    }
}

impl Case {
    /// After [`whole_run_pick`] on the compared methods: each one's whole-run ratio (the best
    /// of their mean times per launch over the whole run over its own: the ratio of the
    /// whole-run times when the runs launch the key equally often), and whether the key drifts
    /// (any method's drift, the median over its forced runs, beyond [`DRIFT`]).
    pub fn time_whole_run(&mut self) {
        let best = Method::COMPARED
            .iter()
            .filter_map(|m| self.picks.get(m).and_then(|p| p.whole_run_launch_ms))
            .fold(None, |a: Option<f64>, t| Some(a.map_or(t, |a| a.min(t))));
        let mut any = false;
        let mut drifts = false;
        for m in Method::COMPARED {
            if let Some(p) = self.picks.get_mut(&m) {
                if let Some(t) = p.whole_run_launch_ms {
                    any = true;
                    p.whole_run_ratio = best.filter(|_| t > 0.0).map(|b| b / t);
                    drifts |= p.drift.is_some_and(|d| !(1.0 / DRIFT..=DRIFT).contains(&d));
                }
            }
        }
        self.drifts = any.then_some(drifts);
    }

    /// settled's whole-run time per launch over the smaller of the program's own shape's
    /// (default) and the model's first choice's (klaraptor): from the all-at-once whole runs
    /// (`isolated` false: every kernel of the program with the method's shape) or from the
    /// isolated ones ([`Pick::whole_run_iso_launch_ms`]). `None` unless all three are timed.
    pub fn settled_vs_min(&self, isolated: bool) -> Option<f64> {
        let t = |m: Method| {
            let p = self.picks.get(&m)?;
            if isolated {
                p.whole_run_iso_launch_ms
            } else {
                p.whole_run_launch_ms
            }
        };
        let (s, own, model) = (
            t(Method::Settled)?,
            t(Method::Default)?,
            t(Method::Klaraptor)?,
        );
        let min = own.min(model);
        (min > 0.0).then(|| s / min)
    }

    /// The figure issue 41's acceptance (settled ≤ [`WHOLE_RUN_ACCEPT`] × min(own, model))
    /// takes for this key, and where it came from: the isolated whole runs where they timed all
    /// three shapes (`isolated`); else the all-at-once ones, which are isolated already when
    /// the key's kernel is the only one of the job whose shape differs between the methods
    /// (`alone`), and are not otherwise (`all_at_once`: the other kernels changed shape with
    /// it). `None` without a figure.
    pub fn whole_run_accept(&self) -> Option<(f64, &'static str)> {
        if let Some(r) = self.settled_vs_min(true) {
            return Some((r, "isolated"));
        }
        let r = self.settled_vs_min(false)?;
        Some((
            r,
            if self.isolation.as_deref() == Some("alone") {
                "alone"
            } else {
                "all_at_once"
            },
        ))
    }
}

/// Issue 41's acceptance of the settled shape over a whole run: settled ≤ this × min(the
/// program's own, the model's first choice), in kernel time per launch of the key.
pub const WHOLE_RUN_ACCEPT: f64 = 1.03;

#[cfg(test)]
mod tests {
    use super::*;

    /// A launch-times line of a key of one data value: `launches` launches, all timed,
    /// `total` ms, one block; the rest unknown.
    fn launch_times_line(
        kernel: &str,
        size: i64,
        block: [u32; 3],
        launches: u64,
        total: f64,
    ) -> LaunchTimes {
        LaunchTimes {
            kernel: kernel.into(),
            name: "k".into(),
            sizes: vec![size],
            launches,
            timed: launches,
            total_ms: total,
            first_ms: None,
            last_ms: None,
            head_ms: None,
            tail_ms: None,
            min_ms: None,
            max_ms: None,
            trend: None,
            block,
            grid: [1, 1, 1],
            blocks_seen: 1,
        }
    }

    #[test]
    fn spearman_values() {
        let a = [1.0, 2.0, 3.0, 4.0, 5.0];
        assert_eq!(spearman(&a, &[10.0, 20.0, 30.0, 40.0, 50.0]), Some(1.0));
        assert_eq!(spearman(&a, &[5.0, 4.0, 3.0, 2.0, 1.0]), Some(-1.0));
        // A monotone transform does not change it.
        let r = spearman(&a, &[1.0, 8.0, 27.0, 64.0, 125.0]).unwrap();
        assert!((r - 1.0).abs() < 1e-12);
        // Ties share their average rank: y = 1 3 2 2 5 has ranks 1 4 2.5 2.5 5; against
        // x = 1..5 that gives, by hand, sum dx·dy = 6.5, sum dx² = 10, sum dy² = 9.5.
        let r = spearman(&a, &[1.0, 3.0, 2.0, 2.0, 5.0]).unwrap();
        assert!((r - 6.5 / 95f64.sqrt()).abs() < 1e-12, "{r}");
        assert_eq!(spearman(&[1.0, 2.0], &[1.0, 2.0]), None);
        assert_eq!(spearman(&a, &[1.0; 5]), None);
    }

    #[test]
    fn stats_values() {
        let s = stats(&[1.0, 0.5, 0.95, 0.85]).unwrap();
        assert_eq!(s.n, 4);
        assert!((s.geomean - (1.0f64 * 0.5 * 0.95 * 0.85).powf(0.25)).abs() < 1e-12);
        assert_eq!(s.min, 0.5);
        assert_eq!(s.share_ge_090, 0.5);
        assert_eq!(s.below_080, 1);
        assert!(stats(&[]).is_none());
    }

    #[test]
    fn blocks() {
        assert_eq!(parse_block("32x8x1"), Some([32, 8, 1]));
        assert_eq!(parse_block("32x8"), Some([32, 8, 1]));
        assert_eq!(parse_block("256"), Some([256, 1, 1]));
        assert_eq!(parse_block("1x2x3x4"), None);
        assert_eq!(parse_block("ax1"), None);
        assert_eq!(shape_text([16, 4, 2]), "16x4x2");
    }

    #[test]
    fn decisions() {
        let d = parse_decision(
            "klaraptor: gemm NI=1000 NJ=1000 NK=1000 block=64x4x1 grid=16x250x1 source=model \
             predicted_us=388 device=0:NVIDIA H200 program_block=32x8x1",
        )
        .unwrap()
        .unwrap();
        assert_eq!(d.kernel, "gemm");
        assert_eq!(d.sizes(), [1000, 1000, 1000]);
        assert_eq!(d.data[1].0, "NJ");
        assert_eq!(d.block, [64, 4, 1]);
        assert_eq!(d.grid, [16, 250, 1]);
        assert!(d.from_model());
        assert_eq!(d.predicted_us, Some(388.0));
        assert_eq!(d.device, "0:NVIDIA H200");
        assert_eq!(d.device_name(), "NVIDIA H200");
        assert_eq!(d.program_block, Some([32, 8, 1]));
        assert_eq!(d.own_block(), Some([32, 8, 1]));
        let f = parse_decision(
            "klaraptor: mvt_x1 N=5000 block=256x1x1 grid=20x1x1 source=fallback: no model for \
             this device (the model is for NVIDIA H100) device=0:NVIDIA H200",
        )
        .unwrap()
        .unwrap();
        assert!(!f.from_model());
        assert!(f.source.starts_with("fallback: no model"));
        assert_eq!(f.program_block, None);
        assert_eq!(f.own_block(), Some([256, 1, 1]));
        let p = parse_decision(
            "klaraptor: k N=7 block=128x1x1 grid=1x1x1 source=program device=1:Some GPU",
        )
        .unwrap()
        .unwrap();
        assert_eq!(p.own_block(), Some([128, 1, 1]));
        assert_eq!(p.device_name(), "Some GPU");
        // The runtime names the program's block on every rewritten launch; a rewritten
        // launch without it tells nothing of the program's own block.
        let same =
            parse_decision("klaraptor: k N=7 block=128x1x1 grid=1x1x1 source=forced device=0:G")
                .unwrap()
                .unwrap();
        assert_eq!(same.own_block(), None);
        assert!(parse_decision("klaraptor: the memo is full: later decisions are made").is_none());
        assert!(parse_decision(
            "klaraptor: k N=x block=1x1x1 grid=1x1x1 source=program device=0:G"
        )
        .unwrap()
        .is_err());
    }

    #[test]
    fn refine_lines() {
        let r = parse_refine(
            "klaraptor: gemm NI=1000 NJ=1000 NK=1000 refine: settled on block=64x4x1 \
             grid=16x250x1 after launches=9, 0.874 of the model's first choice's time \
             (candidate=model#2 extra_us=41.5) device=0:NVIDIA H200",
        )
        .unwrap()
        .unwrap();
        assert_eq!(r.kernel, "gemm");
        assert_eq!(r.sizes(), [1000, 1000, 1000]);
        assert_eq!(r.data[2].0, "NK");
        assert_eq!((r.block, r.grid), ([64, 4, 1], [16, 250, 1]));
        assert_eq!(r.launches, Some(9));
        assert_eq!(r.of_first, Some(0.874));
        assert_eq!(r.candidate, "model#2");
        assert_eq!(r.extra_us, Some(41.5));
        assert!(!r.from_cache);
        assert_eq!(r.device, "0:NVIDIA H200");
        // The program's own shape won: its dims, candidate=program.
        let p = parse_refine(
            "klaraptor: mvt_x1 N=5000 refine: settled on block=256x1x1 grid=20x1x1 after \
             launches=5, 1 of the model's first choice's time (candidate=program extra_us=0) \
             device=1:Some GPU, rev 2",
        )
        .unwrap()
        .unwrap();
        assert_eq!((p.block, p.candidate.as_str()), ([256, 1, 1], "program"));
        assert_eq!((p.launches, p.of_first), (Some(5), Some(1.0)));
        assert_eq!(p.device, "1:Some GPU, rev 2");
        // From the choices cache: no launches.
        let c = parse_refine(
            "klaraptor: k N=7 refine: settled on block=128x1x1 grid=1x1x1 from the choices \
             cache (candidate=profiled) device=0:G",
        )
        .unwrap()
        .unwrap();
        assert!(c.from_cache);
        assert_eq!((c.launches, c.of_first, c.extra_us), (None, None, None));
        assert_eq!(c.candidate, "profiled");
        // A template instance's name, with blanks and commas inside <…>.
        let t = parse_refine(
            "klaraptor: axpy<float, 4> N=1048576 refine: settled on block=512x1x1 \
             grid=2048x1x1 after launches=12, 0.95 of the model's first choice's time \
             (candidate=model#1 extra_us=3.25) device=0:NVIDIA H200",
        )
        .unwrap()
        .unwrap();
        assert_eq!(t.kernel, "axpy<float, 4>");
        assert_eq!(t.sizes(), [1048576]);
        // The trying line.
        let y = parse_refine_trying(
            "klaraptor: axpy<float, 4> N=1048576 refine: trying 3 of 37 shapes and the \
             program's 256x1x1 device=0:NVIDIA H200",
        )
        .unwrap()
        .unwrap();
        assert_eq!(y.kernel, "axpy<float, 4>");
        assert_eq!(
            (y.tried, y.of, y.program_block),
            (3, Some(37), Some([256, 1, 1]))
        );
        assert_eq!(y.sizes(), [1048576]);
        // With the list of the shapes tried; without a known count, and with the program's
        // shape among the model's.
        let y = parse_refine_trying(
            "klaraptor: k N=7 refine: trying 3 of ? shapes and the program's 32x8x1 \
             (model#1=64x4x1 model#2=32x4x1 model#3=16x16x1) device=0:G",
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            (y.tried, y.of, y.program_block),
            (3, None, Some([32, 8, 1]))
        );
        let y = parse_refine_trying(
            "klaraptor: k N=7 refine: trying 3 of 66 shapes (the program's is among them) \
             (model#1=32x8x1) device=0:G",
        )
        .unwrap()
        .unwrap();
        assert_eq!((y.of, y.program_block), (Some(66), None));
        // The runtime could not time the model's first choice: no ratio.
        let q = parse_refine(
            "klaraptor: k N=7 refine: settled on block=32x8x1 grid=1x1x1 after launches=9, ? \
             of the model's first choice's time (candidate=program extra_us=0.0) device=0:G",
        )
        .unwrap()
        .unwrap();
        assert_eq!((q.launches, q.of_first), (Some(9), None));
        // The lines the runtime's own test expects (runtime-shim/tests/test_refine.c).
        let log = "klaraptor: stencil n=4096 block=256x1x1 grid=16x1x1 source=model \
                   predicted_us=10 device=0:NVIDIA H200 program_block=64x1x1\n\
                   klaraptor: stencil n=4096 refine: trying 3 of 32 shapes and the program's \
                   64x1x1 (model#1=256x1x1 model#2=128x1x1 model#3=512x1x1) device=0:NVIDIA \
                   H200\n\
                   klaraptor: stencil n=4096 refine: settled on block=128x1x1 grid=32x1x1 after \
                   launches=12, 0.750 of the model's first choice's time (candidate=model#2 \
                   extra_us=220.0) device=0:NVIDIA H200\n";
        let l: Vec<&str> = log.lines().collect();
        assert_eq!(parse_decision(l[0]).unwrap().unwrap().block, [256, 1, 1]);
        let y = parse_refine_trying(l[1]).unwrap().unwrap();
        assert_eq!(
            (y.tried, y.of, y.program_block),
            (3, Some(32), Some([64, 1, 1]))
        );
        assert_eq!(y.device, "0:NVIDIA H200");
        let r = parse_refine(l[2]).unwrap().unwrap();
        assert_eq!((r.kernel.as_str(), r.sizes()), ("stencil", vec![4096]));
        assert_eq!(
            (r.block, r.grid, r.launches),
            ([128, 1, 1], [32, 1, 1], Some(12))
        );
        assert_eq!((r.of_first, r.extra_us), (Some(0.75), Some(220.0)));
        assert_eq!(r.candidate, "model#2");
        assert!(r.settled && !r.from_cache);
        // A run that ended before the key settled, then one that settled it, then one that
        // read it from the cache: the settled line counts; without it, the last run's.
        let u1 = "klaraptor: stencil n=4096 refine: not settled at exit after launches=150: \
                  launching block=256x1x1 grid=16x1x1 (candidate=model#1, 2 of 4 candidates \
                  timed, extra_us=70.0 of 6070.0) device=0:NVIDIA H200";
        let u2 = u1.replace("launches=150", "launches=300").replace(
            "block=256x1x1 grid=16x1x1 (candidate=model#1",
            "block=128x1x1 grid=32x1x1 (candidate=model#2",
        );
        let cached = "klaraptor: stencil n=4096 refine: settled on block=128x1x1 grid=32x1x1 \
                      from the choices cache (candidate=model#2) device=0:NVIDIA H200";
        let u = parse_refine(u1).unwrap().unwrap();
        assert!(!u.settled && !u.from_cache);
        assert_eq!(
            (
                u.block,
                u.grid,
                u.launches,
                u.candidate.as_str(),
                u.extra_us
            ),
            ([256, 1, 1], [16, 1, 1], Some(150), "model#1", Some(70.0))
        );
        let refines = |lines: &[&str]| Refines {
            settled: lines
                .iter()
                .map(|l| parse_refine(l).unwrap().unwrap())
                .collect(),
            trying: Vec::new(),
        };
        let all = refines(&[u1, &u2, l[2], cached]);
        let got = all.of(&["stencil"], &[4096]).0.unwrap();
        assert_eq!((got.launches, got.settled), (Some(12), true));
        let unsettled = refines(&[u1, &u2]);
        let got = unsettled.of(&["stencil"], &[4096]).0.unwrap();
        assert_eq!((got.launches, got.block), (Some(300), [128, 1, 1]));
        assert!(settled_pick(Some(got), None, "the run")
            .how
            .contains("not settled after 300 launches"));
        // Other refine lines are neither.
        let other = "klaraptor: k N=7 refine: no candidate could be timed: the program's own \
                     launch from now on device=0:G";
        assert!(parse_refine(other).is_none() && parse_refine_trying(other).is_none());
        // Neither parser takes the other's lines, nor decision lines; and the decision
        // parser takes no refine line.
        let trying = "klaraptor: k N=7 refine: trying 3 of 37 shapes and the program's \
                      256x1x1 device=0:G";
        let settled = "klaraptor: k N=7 refine: settled on block=128x1x1 grid=1x1x1 from \
                       the choices cache (candidate=program) device=0:G";
        let decision =
            "klaraptor: k N=7 block=128x1x1 grid=1x1x1 source=model predicted_us=3 device=0:G";
        assert!(parse_refine(trying).is_none());
        assert!(parse_refine_trying(settled).is_none());
        assert!(parse_refine(decision).is_none() && parse_refine_trying(decision).is_none());
        assert!(parse_decision(trying).is_none() && parse_decision(settled).is_none());
        // Damaged lines are errors.
        for bad in [
            "klaraptor: k N=x refine: settled on block=1x1x1 grid=1x1x1 from the choices \
             cache (candidate=program) device=0:G",
            "klaraptor: k N=7 refine: settled on block=1x1x1 grid=1x1x1 after launches=a, 1 \
             of the model's first choice's time (candidate=program extra_us=0) device=0:G",
            "klaraptor: k N=7 refine: settled on block=1x1x1 grid=1x1x1 from the choices \
             cache device=0:G",
        ] {
            assert!(parse_refine(bad).unwrap().is_err(), "{bad}");
        }
        // The decision parser copes with the same names.
        let d = parse_decision(
            "klaraptor: axpy<float, 4> N=64 block=32x1x1 grid=2x1x1 source=program device=0:G",
        )
        .unwrap()
        .unwrap();
        assert_eq!((d.kernel.as_str(), d.sizes()), ("axpy<float, 4>", vec![64]));
        // A log file: both kinds, found by kernel and data values.
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("log");
        std::fs::write(&log, format!("{decision}\n{trying}\n{settled}\nother\n")).unwrap();
        let rs = read_refines(&log).unwrap();
        assert_eq!((rs.settled.len(), rs.trying.len()), (1, 1));
        let (s, t) = rs.of(&["k", "_Z1kPfi"], &[7]);
        assert!(s.is_some() && t.is_some());
        assert_eq!(rs.of(&["k"], &[8]), (None, None));
    }

    /// The forms of the runtime with paired comparisons (issue 41): `settled on` and `kept`,
    /// after launches and from the choices cache, with their confidence and pairs.
    #[test]
    fn paired_refine_lines() {
        let s = parse_refine(
            "klaraptor: ge_eliminate N=2048 refine: settled on block=64x4x1 grid=32x512x1 \
             after launches=40, 0.812 of the model's first choice's time (candidate=model#2 \
             confidence=paired pairs=6 extra_us=310.5) device=0:NVIDIA H200",
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            (s.block, s.grid, s.launches),
            ([64, 4, 1], [32, 512, 1], Some(40))
        );
        assert_eq!((s.of_first, s.extra_us), (Some(0.812), Some(310.5)));
        assert_eq!(s.candidate, "model#2");
        assert_eq!(
            (s.confidence.as_deref(), s.pairs),
            (Some("paired"), Some(6))
        );
        assert!(s.settled && !s.kept() && !s.from_cache);
        let k = parse_refine(
            "klaraptor: smooth3 N=2097152 refine: kept block=256x1x1 grid=8192x1x1 after \
             launches=10, 1 of the model's first choice's time (candidate=model#1 \
             confidence=undecided pairs=2 extra_us=4.0) device=0:NVIDIA H200",
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            (k.block, k.launches, k.candidate.as_str()),
            ([256, 1, 1], Some(10), "model#1")
        );
        assert_eq!(
            (k.confidence.as_deref(), k.pairs),
            (Some("undecided"), Some(2))
        );
        assert!(k.settled && k.kept());
        let kc = parse_refine(
            "klaraptor: k N=7 refine: kept block=32x1x1 grid=1x1x1 from the choices cache \
             (candidate=program confidence=unmeasurable pairs=0) device=0:G",
        )
        .unwrap()
        .unwrap();
        assert!(kc.from_cache && kc.kept());
        assert_eq!(
            (kc.launches, kc.confidence.as_deref()),
            (None, Some("unmeasurable"))
        );
        let sc = parse_refine(
            "klaraptor: k N=7 refine: settled on block=64x1x1 grid=1x1x1 from the choices cache \
             (candidate=model#3 confidence=paired pairs=4) device=0:G",
        )
        .unwrap()
        .unwrap();
        assert!(sc.from_cache && !sc.kept());
        assert_eq!((sc.candidate.as_str(), sc.pairs), ("model#3", Some(4)));
        // The not-settled line keeps its form, with pairs now.
        let u = parse_refine(
            "klaraptor: k N=7 refine: not settled at exit after launches=12: launching \
             block=64x1x1 grid=1x1x1 (candidate=model#2, 1 comparisons decided, pairs=3, \
             extra_us=9.5) device=0:G",
        )
        .unwrap()
        .unwrap();
        assert!(!u.settled && !u.kept());
        assert_eq!(
            (u.candidate.as_str(), u.pairs, u.extra_us),
            ("model#2", Some(3), Some(9.5))
        );
        // Other `kept` text is not a refine line; a damaged pairs is an error.
        assert!(
            parse_refine("klaraptor: k N=7 refine: kept the program's shape device=0:G").is_none()
        );
        assert!(parse_refine(
            "klaraptor: k N=7 refine: kept block=32x1x1 grid=1x1x1 from the choices cache \
             (candidate=program confidence=undecided pairs=x) device=0:G"
        )
        .unwrap()
        .is_err());
        // A kept key: its pick says so and counts in the settled summary.
        let p = settled_pick(Some(&k), None, "the run");
        assert_eq!(p.block, Some([256, 1, 1]));
        assert_eq!(p.confidence.as_deref(), Some("undecided"));
        assert!(
            p.how.contains("kept 256x1x1 (after 10 launches"),
            "{}",
            p.how
        );
        let mut c = Case {
            candidates: 1,
            ..Case::default()
        };
        c.picks.insert(Method::Settled, p);
        let mut d = c.clone();
        d.picks
            .insert(Method::Settled, settled_pick(Some(&kc), None, "r"));
        let mut e = c.clone();
        e.picks
            .insert(Method::Settled, settled_pick(Some(&s), None, "r"));
        let sum = summaries(&[c.clone(), d, e]);
        let st = sum.iter().find(|x| x.method == "settled").unwrap();
        assert_eq!(
            (st.undecided, st.unmeasurable, st.not_settled),
            (Some(1), Some(1), Some(0))
        );
        let recs = records(std::slice::from_ref(&c));
        let j = serde_json::to_value(&recs).unwrap();
        assert_eq!(j[0]["confidence"], "undecided");
        assert!(j[0]["whole_run_ms"].is_null() && j[0]["drifts"].is_null());
    }

    /// Whole-run launch times: the file's lines, drift, and the picks' whole-run times and
    /// ratios from the forced runs.
    #[test]
    fn whole_run_times() {
        // A key whose work shrinks with the step (a Gaussian elimination's update: the last
        // third of its launches far cheaper than the first), and one that does not.
        let text = "{\"kernel\":\"_Z2gePfii\",\"name\":\"ge\",\"sizes\":[1000],\"launches\":999,\
                    \"timed\":999,\"total_ms\":120.5,\"first_ms\":0.41,\"last_ms\":0.003,\
                    \"head_ms\":0.3,\"tail_ms\":0.012,\"min_ms\":0.003,\"max_ms\":0.41,\
                    \"trend\":-0.98,\"block\":[32,8,1],\"grid\":[32,125,1],\"blocks_seen\":1}\n\
                    {\"kernel\":\"_Z2s3PKfPfi\",\"name\":\"smooth3\",\"sizes\":[2097152],\
                    \"launches\":10,\"timed\":10,\"total_ms\":0.5,\"first_ms\":0.05,\
                    \"last_ms\":0.05,\"head_ms\":0.05,\"tail_ms\":0.051,\"min_ms\":0.049,\
                    \"max_ms\":0.052,\"trend\":0.01,\"block\":[256,1,1],\"grid\":[8192,1,1],\
                    \"blocks_seen\":1}\n\
                    {\"kernel\":\"_Z1kv\",\"name\":\"k\",\"sizes\":[],\"launches\":2,\"timed\":0,\
                    \"total_ms\":0,\"first_ms\":null,\"last_ms\":null,\"head_ms\":null,\
                    \"tail_ms\":null,\"min_ms\":null,\"max_ms\":null,\"trend\":0,\
                    \"block\":[1,1,1],\"grid\":[1,1,1],\"blocks_seen\":1}\n{\"kernel\":";
        let t = parse_launch_times(text).unwrap();
        assert_eq!(t.len(), 3, "the half-written last line is dropped");
        assert!((t[0].drift().unwrap() - 0.04).abs() < 1e-12 && t[0].drifts());
        assert!(!t[1].drifts() && t[1].drift().is_some());
        assert_eq!((t[2].drift(), t[2].drifts()), (None, false));
        assert!(parse_launch_times("nonsense\n{}\n").is_err());

        let forced = |b: [u32; 3], times: Vec<LaunchTimes>| ForcedRun {
            forced: [("_Z2gePfii".to_string(), b)].into_iter().collect(),
            times,
            source: "a forced run".into(),
        };
        let mut slow = t[0].clone();
        slow.block = [256, 1, 1];
        slow.total_ms = 241.0;
        let mut fell_back = t[0].clone();
        fell_back.block = [32, 8, 1];
        let runs = vec![
            forced([32, 8, 1], vec![t[0].clone()]),
            forced([256, 1, 1], vec![slow]),
            forced([1024, 1, 1], vec![fell_back]),
        ];
        let mut c = Case {
            sizes: vec![1000],
            ..Case::default()
        };
        let pick = |b: [u32; 3]| Pick {
            block: Some(b),
            ..Pick::default()
        };
        c.picks.insert(Method::Default, pick([32, 8, 1]));
        c.picks.insert(Method::Klaraptor, pick([256, 1, 1]));
        c.picks.insert(Method::ProfiledBest, pick([1024, 1, 1]));
        c.picks.insert(Method::Settled, pick([64, 4, 1]));
        for m in Method::COMPARED {
            if let Some(p) = c.picks.get_mut(&m) {
                whole_run_pick(p, &runs, "_Z2gePfii", &[1000]);
            }
        }
        c.time_whole_run();
        let d = &c.picks[&Method::Default];
        assert_eq!(
            (d.whole_run_ms, d.whole_run_ratio),
            (Some(120.5), Some(1.0))
        );
        assert_eq!(d.whole_run_launches, Some(999));
        let k = &c.picks[&Method::Klaraptor];
        assert!((k.whole_run_ratio.unwrap() - 120.5 / 241.0).abs() < 1e-12);
        let pb = &c.picks[&Method::ProfiledBest];
        assert_eq!(pb.whole_run_ms, None);
        assert!(pb.how.contains("launched 32x8x1"), "{}", pb.how);
        let st = &c.picks[&Method::Settled];
        assert!(
            st.how.contains("no whole-run measurement with 64x4x1"),
            "{}",
            st.how
        );
        assert_eq!(c.drifts, Some(true));
        let sum = summaries(std::slice::from_ref(&c));
        let by = |m: &str| sum.iter().find(|x| x.method == m).unwrap().clone();
        assert_eq!(
            (by("default").whole_run_cases, by("default").drifting),
            (1, 1)
        );
        assert_eq!(by("settled").whole_run_cases, 0);
        let j = serde_json::to_value(records(std::slice::from_ref(&c))).unwrap();
        let rec = |m: &str| {
            j.as_array()
                .unwrap()
                .iter()
                .find(|r| r["method"] == m)
                .unwrap()
        };
        assert_eq!(rec("default")["whole_run_ms"], 120.5);
        assert_eq!(rec("default")["drifts"], true);
        assert!(rec("settled")["whole_run_ms"].is_null());
        // A key of the other run that does not drift.
        let mut q = Case {
            sizes: vec![2097152],
            ..Case::default()
        };
        q.picks.insert(Method::Default, pick([256, 1, 1]));
        let runs = vec![ForcedRun {
            forced: [("_Z2s3PKfPfi".to_string(), [256, 1, 1])]
                .into_iter()
                .collect(),
            times: t.clone(),
            source: "r".into(),
        }];
        whole_run_pick(
            q.picks.get_mut(&Method::Default).unwrap(),
            &runs,
            "_Z2s3PKfPfi",
            &[2097152],
        );
        q.time_whole_run();
        assert_eq!(q.drifts, Some(false));
        assert_eq!(q.picks[&Method::Default].whole_run_ms, Some(0.5));
    }

    /// A program whose timing loop repeats until a time is reached launches the key more often
    /// with a faster shape: its whole runs are compared per launch (an H200 reduction: the
    /// program's 256 over 17 launches, 0.716 ms, against the model's 160 over 12, 0.590 ms:
    /// the program's shape is the faster, 0.0421 ms a launch against 0.0492).
    #[test]
    fn whole_runs_of_different_lengths_compare_per_launch() {
        let line = |b: u32, n: u64, total: f64| {
            launch_times_line("_Z3sumPKfPfi", 16777216, [b, 1, 1], n, total)
        };
        let run = |b: u32, launches: u64, total: f64| ForcedRun {
            forced: [("_Z3sumPKfPfi".to_string(), [b, 1, 1])]
                .into_iter()
                .collect(),
            times: vec![line(b, launches, total)],
            source: "r".into(),
        };
        let runs = vec![run(256, 17, 0.716), run(160, 12, 0.590)];
        let mut c = Case {
            sizes: vec![16777216],
            ..Case::default()
        };
        for (m, b) in [(Method::Default, 256), (Method::Klaraptor, 160)] {
            let mut p = Pick {
                block: Some([b, 1, 1]),
                ..Pick::default()
            };
            whole_run_pick(&mut p, &runs, "_Z3sumPKfPfi", &[16777216]);
            c.picks.insert(m, p);
        }
        c.time_whole_run();
        let (d, k) = (&c.picks[&Method::Default], &c.picks[&Method::Klaraptor]);
        assert_eq!(
            (d.whole_run_ms, d.whole_run_ratio),
            (Some(0.716), Some(1.0))
        );
        assert!((d.whole_run_launch_ms.unwrap() - 0.716 / 17.0).abs() < 1e-12);
        let want = (0.716 / 17.0) / (0.590 / 12.0);
        assert!((k.whole_run_ratio.unwrap() - want).abs() < 1e-12, "{k:?}");
        let j = serde_json::to_value(records(std::slice::from_ref(&c))).unwrap();
        assert!(j[0]["whole_run_launch_ms"].is_f64(), "{j}");
    }

    /// Repeated whole runs of one forced shape (`klaraptor validate --whole-runs`): the
    /// median of the repeats that count, how many counted, and their spread; a repeat that
    /// launched another block, several blocks, or timed nothing is left out.
    #[test]
    fn whole_run_repeats() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(spread(&[5.0]), None);
        assert!((spread(&[4.0, 5.0, 4.5]).unwrap() - 0.25).abs() < 1e-12);
        assert_eq!(spread(&[0.0, 1.0]), None);

        let k = "_Z1kPfi";
        let lt = |b: [u32; 3], total: f64, tail: f64| LaunchTimes {
            first_ms: Some(total / 40.0),
            last_ms: Some(total / 40.0),
            head_ms: Some(1.0),
            tail_ms: Some(tail),
            trend: Some(0.0),
            grid: [16, 1, 1],
            ..launch_times_line(k, 4096, b, 40, total)
        };
        let b = [128, 1, 1];
        let run = |i: u32, t: LaunchTimes| ForcedRun {
            forced: [(k.to_string(), b)].into_iter().collect(),
            times: vec![t],
            source: format!("run1/wholerun/f1.r{i}"),
        };
        let pick_of = |runs: &[ForcedRun]| {
            let mut p = Pick {
                block: Some(b),
                ..Pick::default()
            };
            whole_run_pick(&mut p, runs, k, &[4096]);
            p
        };

        // Median of 3 (not the first, not the mean), spread max / min - 1.
        let p = pick_of(&[
            run(1, lt(b, 12.0, 1.3)),
            run(2, lt(b, 10.0, 1.0)),
            run(3, lt(b, 10.5, 1.1)),
        ]);
        assert_eq!(p.whole_run_ms, Some(10.5));
        assert_eq!(p.whole_run_runs, Some(3));
        assert!((p.whole_run_spread.unwrap() - 0.2).abs() < 1e-12, "{p:?}");
        assert_eq!(p.drift, Some(1.1), "the median drift");
        assert_eq!(p.whole_run_launches, Some(40));
        assert!(
            p.how
                .contains("median of 3 whole runs with it forced: 10.5000 ms, spread 20.0 %"),
            "{}",
            p.how
        );
        assert!(p.how.contains("run1/wholerun/f1.r3"), "{}", p.how);

        // Median of 2: the mean of the two.
        let p = pick_of(&[run(1, lt(b, 10.0, 1.0)), run(2, lt(b, 12.5, 1.0))]);
        assert_eq!(p.whole_run_ms, Some(11.25));
        assert_eq!(p.whole_run_runs, Some(2));
        assert!((p.whole_run_spread.unwrap() - 0.25).abs() < 1e-12);

        // A repeat that launched another block (a forced shape that fell back), one that
        // launched several and one that timed none are left out: the median of the other
        // two.
        let mut mixed = lt(b, 1.0, 1.0);
        mixed.blocks_seen = 2;
        let mut untimed = lt(b, 0.0, 1.0);
        untimed.timed = 0;
        let p = pick_of(&[
            run(1, lt(b, 10.0, 1.0)),
            run(2, lt([256, 1, 1], 100.0, 1.0)),
            run(3, lt(b, 11.0, 1.0)),
            run(4, mixed),
            run(5, untimed),
        ]);
        assert_eq!(p.whole_run_ms, Some(10.5));
        assert_eq!(p.whole_run_runs, Some(2));
        assert!((p.whole_run_spread.unwrap() - 0.1).abs() < 1e-12);
        assert!(
            p.how.contains(
                "left out: the whole run with 128x1x1 forced (run1/wholerun/f1.r2) \
                           launched 256x1x1"
            ),
            "{}",
            p.how
        );
        assert!(p
            .how
            .contains("(run1/wholerun/f1.r4) launched 128x1x1 and others"));
        assert!(p
            .how
            .contains("(run1/wholerun/f1.r5) timed none of its 40 launches"));

        // One repeat counted: its time, no spread, today's text; none counted: no time.
        let p = pick_of(&[run(1, lt([256, 1, 1], 9.0, 1.0)), run(2, lt(b, 10.0, 1.0))]);
        assert_eq!(
            (p.whole_run_ms, p.whole_run_runs, p.whole_run_spread),
            (Some(10.0), Some(1), None)
        );
        assert!(p
            .how
            .contains("; whole run with it forced: 10.0000 ms over 40 launches"));
        let p = pick_of(&[run(1, lt([256, 1, 1], 9.0, 1.0))]);
        assert_eq!((p.whole_run_ms, p.whole_run_runs), (None, None));
        assert!(
            p.how.ends_with("launched 256x1x1: no whole-run time"),
            "{}",
            p.how
        );

        // The records carry both, beside whole_run_ms; null where not measured.
        let mut c = Case {
            mangled: k.into(),
            sizes: vec![4096],
            ..Case::default()
        };
        c.picks.insert(
            Method::Default,
            pick_of(&[
                run(1, lt(b, 12.0, 1.0)),
                run(2, lt(b, 10.0, 1.0)),
                run(3, lt(b, 11.0, 1.0)),
            ]),
        );
        c.picks.insert(
            Method::Settled,
            Pick {
                block: Some([64, 1, 1]),
                ..Pick::default()
            },
        );
        c.time_whole_run();
        let j = serde_json::to_value(records(std::slice::from_ref(&c))).unwrap();
        let rec = |m: &str| {
            j.as_array()
                .unwrap()
                .iter()
                .find(|r| r["method"] == m)
                .unwrap()
                .clone()
        };
        let d = rec("default");
        assert_eq!(
            (d["whole_run_ms"].as_f64(), d["whole_run_runs"].as_u64()),
            (Some(11.0), Some(3))
        );
        assert!(
            (d["whole_run_spread"].as_f64().unwrap() - 0.2).abs() < 1e-12,
            "{d}"
        );
        assert_eq!(d["whole_run_ratio"], 1.0);
        let st = rec("settled");
        let o = st.as_object().unwrap();
        assert!(
            o["whole_run_runs"].is_null() && o["whole_run_spread"].is_null(),
            "{st}"
        );
    }

    #[test]
    fn profiled_best_rule() {
        let s = |sz: &[i64], b: u32, t: f64| (sz.to_vec(), [b, 1, 1], t);
        let prof = vec![
            s(&[256, 256], 32, 3.0),
            s(&[256, 256], 64, 2.0),
            s(&[512, 512], 64, 5.0),
            s(&[512, 512], 128, 4.0),
            s(&[1024, 1024], 128, 9.0),
            s(&[1024, 1024], 256, 8.0),
            s(&[1024, 1024], 512, 8.0),
        ];
        // Nearest in log space: 700 is nearer 512 (ln 700/512 = 0.31) than 1024 (0.38).
        let b = profiled_best(&prof, &[700, 700]).unwrap();
        assert_eq!(
            (b.block, b.sizes.clone(), b.time_ms),
            ([128, 1, 1], vec![512, 512], 4.0)
        );
        // Far beyond the profile: the largest size; equal times: the first shape.
        assert_eq!(
            profiled_best(&prof, &[100_000, 100_000]).unwrap().block,
            [256, 1, 1]
        );
        // Below it: the smallest; sizes below 1 count as 1.
        assert_eq!(profiled_best(&prof, &[0, -5]).unwrap().sizes, [256, 256]);
        // Ties in log distance: 512 sits halfway between 256 and 1024 in ln.
        let tie = vec![
            s(&[256, 1024], 32, 1.0),
            s(&[1024, 256], 64, 1.0),
            s(&[256, 256], 128, 1.0),
            s(&[1024, 1024], 256, 1.0),
        ];
        // From 512²: 256² and 1024² are both at distance sqrt(2)·ln 2, [256, 1024] and
        // [1024, 256] too: the largest product (1024²) wins.
        let b = profiled_best(&tie, &[512, 512]).unwrap();
        assert_eq!((b.block, b.sizes), ([256, 1, 1], vec![1024, 1024]));
        // Without [1024, 1024]: equal products, the lexicographically larger ([1024, 256]).
        let b = profiled_best(&tie[..3], &[512, 512]).unwrap();
        assert_eq!((b.block, b.sizes), ([64, 1, 1], vec![1024, 256]));
        // One dimension, a tie: 512 between 256 and 1024.
        let one = vec![s(&[256], 32, 1.0), s(&[1024], 64, 1.0)];
        assert_eq!(profiled_best(&one, &[512]).unwrap().block, [64, 1, 1]);
        // Repeated samples of a shape are averaged; bad times and other arities left out.
        let rep = vec![
            s(&[100], 32, 1.0),
            s(&[100], 32, 3.0),
            s(&[100], 64, 1.9),
            s(&[100], 128, 0.0),
            s(&[100], 256, f64::NAN),
            s(&[100, 5], 512, 0.1),
        ];
        let b = profiled_best(&rep, &[100]).unwrap();
        assert_eq!((b.block, b.time_ms), ([64, 1, 1], 1.9));
        assert!(profiled_best(&rep, &[100, 5, 1]).is_none());
        assert!(profiled_best(&[], &[100]).is_none());
        // The pick: its how names the profile and the size; no profile says why.
        let p = ProfileTimes {
            samples: prof,
            source: "the profile X".into(),
        };
        let labels = vec!["N".to_string(), "M".to_string()];
        let k = profiled_best_pick(Ok(&p), &labels, &[700, 700]);
        assert_eq!(k.block, Some([128, 1, 1]));
        assert_eq!(k.profiled_at, Some(vec![512, 512]));
        assert_eq!(k.profile_time_ms, Some(4.0));
        assert!(
            k.how
                .contains("the profile X at the nearest profiled size (N=512 M=512"),
            "{}",
            k.how
        );
        let n = profiled_best_pick(Err("none here"), &labels, &[700, 700]);
        assert_eq!((n.block, n.how.as_str()), (None, "no profile: none here"));
    }

    /// A sample as the time-only collector writes it (hardware counters 0).
    fn sample(block: [u32; 3], time_ms: Option<f64>, error: Option<&str>) -> Sample {
        let counters = time_ms.map(|t| {
            serde_json::from_str::<serde_json::Value>(&format!(
                r#"{{"inst_executed":0,"inst_global_ld":0,"inst_global_st":0,"inst_shared_ld":0,"inst_shared_st":0,"inst_barrier":0,"gld_requests":0,"gst_requests":0,"gld_sectors":0,"gst_sectors":0,"dram_bytes_read":0,"dram_bytes_write":0,"achieved_active_warps":0.0,"time_ms":{t},"time_runs_ms":[{t},{t},{t},{t},{t}],"regs_per_thread":16,"smem_static":0,"smem_dynamic":0}}"#
            ))
            .unwrap()
        });
        serde_json::from_value(serde_json::json!({
            "sizes": [100],
            "block": block,
            "grid": [1, 1, 1],
            "error": error,
            "counters": counters,
        }))
        .unwrap()
    }

    #[test]
    fn a_case_from_samples() {
        let samples = [
            sample([32, 1, 1], Some(4.0), None),
            sample([64, 1, 1], Some(2.0), None),
            sample([128, 1, 1], Some(1.0), None),
            sample([256, 1, 1], Some(1.25), None),
            sample(
                [2048, 1, 1],
                None,
                Some("more threads than the device allows"),
            ),
            sample([512, 1, 1], Some(0.0), None),
        ];
        let mut c = Case {
            kernel: "k".into(),
            dim: 1,
            labels: vec!["N".into()],
            sizes: vec![100],
            candidates: 6,
            ..Case::default()
        };
        c.measure(&samples);
        assert_eq!(c.measured.len(), 4);
        assert_eq!(c.failed.len(), 2);
        assert_eq!(c.failed[1].1, "no time recorded");
        assert!(c.complete());
        let opt = &c.picks[&Method::Optimum];
        assert_eq!((opt.block, opt.time_ms), (Some([128, 1, 1]), Some(1.0)));
        // Predictions that order the shapes exactly as measured, except 256 and 128.
        for (b, p) in [(32, 40.0), (64, 20.0), (128, 12.0), (256, 11.0)] {
            c.predicted.insert([b, 1, 1], p);
        }
        c.picks.insert(
            Method::Klaraptor,
            Pick {
                block: Some([256, 1, 1]),
                ..Pick::default()
            },
        );
        c.picks.insert(
            Method::Default,
            Pick {
                block: Some([512, 1, 1]),
                ..Pick::default()
            },
        );
        c.time_picks();
        let k = &c.picks[&Method::Klaraptor];
        assert_eq!(k.time_ms, Some(1.25));
        assert_eq!(k.ratio, Some(0.8));
        assert_eq!(k.predicted_ms, Some(11.0));
        let d = &c.picks[&Method::Default];
        assert_eq!((d.time_ms, d.ratio), (None, None));
        assert!(
            d.how.contains("512x1x1 is not among the measured"),
            "{}",
            d.how
        );
        assert_eq!(c.picks[&Method::Optimum].predicted_ms, Some(12.0));
        // Ranks: measured 4 3 1 2, predicted 4 3 2 1: sum d² = 2, rho = 1 - 6·2/(4·15).
        assert!((c.spearman.unwrap() - 0.8).abs() < 1e-12);
        assert_eq!(c.optimum_rank(), Some(2));
        let recs = records(std::slice::from_ref(&c));
        let methods: Vec<&str> = recs.iter().map(|r| r.method).collect();
        assert_eq!(methods, ["optimum", "klaraptor", "default"]);
        assert_eq!(recs[1].sizes["N"], 100);

        // settled and profiled_best: timed by the same sweep, in the records and summaries.
        c.picks.insert(
            Method::Default,
            Pick {
                block: Some([64, 1, 1]),
                ..Pick::default()
            },
        );
        let settled = parse_refine(
            "klaraptor: k N=100 refine: settled on block=256x1x1 grid=1x1x1 after \
             launches=6, 0.98 of the model's first choice's time (candidate=program \
             extra_us=1) device=0:G",
        )
        .unwrap()
        .unwrap();
        c.picks.insert(
            Method::Settled,
            settled_pick(Some(&settled), None, "the run"),
        );
        let prof = ProfileTimes {
            samples: vec![(vec![50], [128, 1, 1], 0.5), (vec![50], [32, 1, 1], 0.9)],
            source: "a profile".into(),
        };
        c.picks.insert(
            Method::ProfiledBest,
            profiled_best_pick(Ok(&prof), &c.labels, &c.sizes),
        );
        c.mangled = "_Z1kPfi".into();
        c.time_picks();
        let s = &c.picks[&Method::Settled];
        assert_eq!(
            (s.time_ms, s.ratio, s.launches),
            (Some(1.25), Some(0.8), Some(6))
        );
        // 1.25 ms against the default's 2 ms: not slower.
        assert_eq!(s.slower_than_default, Some(false));
        let p = &c.picks[&Method::ProfiledBest];
        assert_eq!((p.block, p.ratio), (Some([128, 1, 1]), Some(1.0)));
        let recs = records(std::slice::from_ref(&c));
        let methods: Vec<&str> = recs.iter().map(|r| r.method).collect();
        assert_eq!(
            methods,
            [
                "optimum",
                "klaraptor",
                "settled",
                "profiled_best",
                "default"
            ]
        );
        let j = serde_json::to_value(&recs).unwrap();
        assert_eq!(j[2]["launches"], 6);
        assert_eq!(j[2]["candidate"], "program");
        assert_eq!(j[2]["slower_than_default"], false);
        assert_eq!(j[2]["mangled"], "_Z1kPfi");
        assert_eq!(j[3]["profiled_at"]["N"], 50);
        assert_eq!(j[3]["profile_time_ms"], 0.5);
        assert!(j[1].get("launches").is_none() && j[1].get("profiled_at").is_none());
        // A case that did not settle, and one whose settled shape is slower than the default
        // by more than 3 %.
        let mut d = c.clone();
        d.picks
            .insert(Method::Settled, settled_pick(None, None, "the run"));
        d.time_picks();
        assert!(d.picks[&Method::Settled].how.starts_with("did not settle"));
        let recs = records(std::slice::from_ref(&d));
        let j = serde_json::to_value(&recs).unwrap();
        assert!(j[2]["block"].is_null() && j[2]["launches"].is_null());
        let mut e = c.clone();
        e.picks.get_mut(&Method::Settled).unwrap().block = Some([32, 1, 1]);
        e.time_picks();
        assert_eq!(e.picks[&Method::Settled].slower_than_default, Some(true));
        let sum = summaries(&[c.clone(), d, e]);
        let by = |m: &str| sum.iter().find(|s| s.method == m).unwrap().clone();
        let st = by("settled");
        assert_eq!(
            (st.cases, st.not_settled, st.slower_than_default),
            (2, Some(1), Some(1))
        );
        assert_eq!((st.without_ratio, st.below_090, st.below_080), (1, 2, 1));
        assert!((st.geomean.unwrap() - (0.8f64 * 0.25).sqrt()).abs() < 1e-12);
        let pb = by("profiled_best");
        assert_eq!(
            (pb.cases, pb.no_profile, pb.geomean),
            (3, Some(0), Some(1.0))
        );
        assert_eq!(by("klaraptor").not_settled, None);
        let occ = by("occupancy");
        assert_eq!((occ.cases, occ.geomean, occ.without_ratio), (0, None, 3));
        let json = serde_json::to_value(&sum).unwrap();
        assert!(json[0].get("not_settled").is_none());
        assert_eq!(json[1]["not_settled"], 1);
        assert_eq!(json[1]["slower_than_default"], 1);
        assert_eq!(json[2]["no_profile"], 0);
    }

    #[test]
    fn occupancy_rule() {
        let mut m = BTreeMap::new();
        m.insert([1024, 1, 1], 3.0);
        m.insert([512, 1, 1], 2.0);
        m.insert([256, 2, 1], 1.5);
        m.insert([32, 16, 1], 1.0);
        m.insert([16, 32, 1], 1.2);
        m.insert([32, 32, 1], 0.5);
        // Not a power of two: never a factorisation.
        m.insert([30, 1, 1], 0.1);
        // 1-D: the block itself, in the study's words.
        let (b, how) = occupancy_shape(1, 768, &m, OCCUPANCY_API);
        assert_eq!(b, Some([768, 1, 1]));
        assert_eq!(how, "cudaOccupancyMaxPotentialBlockSize: block 768");
        // 2-D, a power of two: the fastest of its factorisations.
        let (b, how) = occupancy_shape(2, 512, &m, OCCUPANCY_API);
        assert_eq!(b, Some([32, 16, 1]));
        assert_eq!(
            how,
            "cudaOccupancyMaxPotentialBlockSize: block 512; the fastest of its 4 measured 2-D \
             factorisations"
        );
        // Not a power of two: rounded down.
        let (b, how) = occupancy_shape(2, 768, &m, "computed");
        assert_eq!(b, Some([32, 16, 1]));
        assert!(how.starts_with("computed: block 768 → 512"), "{how}");
        let (b, how) = occupancy_shape(2, 64, &m, OCCUPANCY_API);
        assert_eq!(b, None);
        assert!(how.contains("none of its factorisations"));
        // 3-D kernels may use z; 2-D ones may not.
        m.insert([8, 8, 8], 0.2);
        assert_eq!(occupancy_shape(3, 512, &m, "x").0, Some([8, 8, 8]));
        assert_eq!(occupancy_shape(2, 512, &m, "x").0, Some([32, 16, 1]));
        assert_eq!(occupancy_shape(2, 0, &m, OCCUPANCY_API).0, None);
    }

    /// klaraptor's `cudaOccupancyMaxPotentialBlockSize` against the API's own answers: the
    /// accuracy study on the H200 recorded, per kernel, the block size the sample harness got
    /// from the API (bench/results/accuracy-h200-2026-11-22-d.json, records of method
    /// "occupancy"); the kernels' registers per thread and static shared memory are in their
    /// committed H200 profiles (samples/klaraptor-profiles), the device's limits in
    /// model/devices/nvidia-h200.toml.
    #[test]
    fn computed_block_size_equals_the_api_in_the_h200_study() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let study = root.join("bench/results/accuracy-h200-2026-11-22-d.json");
        let recs: Vec<serde_json::Value> =
            serde_json::from_str(&std::fs::read_to_string(&study).unwrap()).unwrap();
        let prefix = format!("{OCCUPANCY_API}: block ");
        let mut api: BTreeMap<String, u32> = BTreeMap::new();
        for r in recs.iter().filter(|r| r["method"] == "occupancy") {
            let how = r["how"].as_str().unwrap();
            let n: u32 = how
                .strip_prefix(&prefix)
                .and_then(|t| t.split(|c: char| !c.is_ascii_digit()).next())
                .and_then(|t| t.parse().ok())
                .unwrap_or_else(|| panic!("{}: no block size in {how:?}", study.display()));
            let k = r["kernel"].as_str().unwrap().to_string();
            let before = api.insert(k.clone(), n);
            assert!(before.is_none_or(|b| b == n), "{k}: two API answers");
        }
        let dev =
            klaraptor_model::Device::load(&root.join("model/devices/nvidia-h200.toml")).unwrap();
        let mut ours: BTreeMap<String, (u32, u32, u32)> = BTreeMap::new();
        let db = root.join("samples/klaraptor-profiles/v1");
        for d in std::fs::read_dir(&db).unwrap() {
            let d = d.unwrap().path();
            if !d
                .file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("nvidia-h200")
            {
                continue;
            }
            for f in std::fs::read_dir(&d).unwrap() {
                let f = f.unwrap().path();
                let e: klaraptor_profiler::record::Entry =
                    toml::from_str(&std::fs::read_to_string(&f).unwrap())
                        .unwrap_or_else(|e| panic!("{}: {e}", f.display()));
                let c = e.samples.iter().filter_map(|s| s.counters.as_ref());
                let regs = c.clone().map(|c| c.regs_per_thread).max().unwrap();
                let smem = c.map(|c| c.smem_static).max().unwrap();
                let b = klaraptor_model::max_potential_block_size(&dev, regs, smem)
                    .map_or(0, |p| p.block_size);
                ours.insert(e.kernel.name.clone(), (b, regs, smem));
            }
        }
        let mut agree = 0;
        let mut differ = Vec::new();
        for (k, n) in &api {
            let (b, regs, smem) = ours
                .get(k)
                .unwrap_or_else(|| panic!("{k}: no committed H200 profile"));
            if b == n {
                agree += 1;
            } else {
                differ.push(format!(
                    "{k} ({regs} regs, {smem} B): API {n}, klaraptor {b}"
                ));
            }
        }
        assert!(differ.is_empty(), "{differ:?}");
        assert!(agree >= 40, "only {agree} kernels compared");
        klaraptor_profiler::kl_eprintln!(
            "max_potential_block_size equals the API on {agree} of {} study kernels",
            api.len()
        );
    }

    #[test]
    fn records_directory() {
        let dir = tempfile::tempdir().unwrap();
        assert!(read_records(dir.path()).unwrap().is_empty());
        std::fs::write(dir.path().join("kernels.tsv"), "abc\t_Z1kPf\tk\n").unwrap();
        let line = serde_json::to_string(&sample([64, 1, 1], Some(2.0), None)).unwrap();
        // A half-written last line (a killed run) is dropped.
        std::fs::write(
            dir.path().join("abc.jsonl"),
            format!("{line}\n{{\"sizes\":[1"),
        )
        .unwrap();
        let r = read_records(dir.path()).unwrap();
        assert_eq!(r.len(), 1);
        assert_eq!((r[0].id.as_str(), r[0].name.as_str()), ("_Z1kPf", "k"));
        assert_eq!(r[0].samples.len(), 1);
        assert_eq!(r[0].by_size().len(), 1);
        // A damaged line elsewhere is an error that names the file and line.
        std::fs::write(dir.path().join("abc.jsonl"), format!("nonsense\n{line}\n")).unwrap();
        let e = format!("{:#}", read_records(dir.path()).unwrap_err());
        assert!(e.contains("abc.jsonl:1"), "{e}");
        std::fs::write(dir.path().join("kernels.tsv"), "abc\n").unwrap();
        assert!(read_records(dir.path()).is_err());
    }

    /// Two instances of one kernel template at the same data size (template_scale on the
    /// H200, 2026-11-26): each line goes to the instance it names, and the template's bare
    /// name (a log from before instances had names of their own) to neither.
    #[test]
    fn template_instances_are_told_apart_in_the_log() {
        let all = [
            ("stencil1d", "_Z9stencil1dILi3EEvPKfPfi"),
            ("stencil1d", "_Z9stencil1dILi16EEvPKfPfi"),
        ];
        let r3 = KernelName::new("stencil1d", all[0].1, all);
        let r16 = KernelName::new("stencil1d", all[1].1, all);
        assert_eq!(r3.instance, "stencil1d<3>");
        assert_eq!(r16.instance, "stencil1d<16>");
        let lines = [
            "klaraptor: stencil1d<3> N=1048576 block=224x1x1 grid=4682x1x1 source=model \
             predicted_us=5.18 device=0:NVIDIA H200 program_block=256x1x1",
            "klaraptor: stencil1d<16> N=1048576 block=64x1x1 grid=16384x1x1 source=model \
             predicted_us=13.5 device=0:NVIDIA H200 program_block=256x1x1",
        ];
        let d: Vec<Decision> = lines
            .iter()
            .map(|l| parse_decision(l).unwrap().unwrap())
            .collect();
        assert_eq!(d[0].kernel, "stencil1d<3>");
        assert_eq!(d[0].data, [("N".to_string(), 1048576)]);
        let of = |k: &KernelName| {
            d.iter()
                .filter(|x| k.matches(&x.kernel))
                .map(|x| x.block)
                .collect::<Vec<_>>()
        };
        assert_eq!(of(&r3), [[224, 1, 1]]);
        assert_eq!(of(&r16), [[64, 1, 1]]);
        // By the mangled name too.
        assert!(r16.matches("_Z9stencil1dILi16EEvPKfPfi"));
        // The bare name is ambiguous with two instances: neither takes it.
        assert!(!r3.matches("stencil1d") && !r16.matches("stencil1d"));
        // With one instance in the program, an old log's bare name is that instance's.
        let only = KernelName::new("stencil1d", all[1].1, [all[1]]);
        assert!(only.matches("stencil1d") && only.matches("stencil1d<16>"));
        // A plain kernel is its source name.
        let plain = KernelName::new("saxpy", "_Z5saxpyfPKfPfi", [("saxpy", "_Z5saxpyfPKfPfi")]);
        assert_eq!((plain.instance.as_str(), plain.source), ("saxpy", None));

        // Refinement lines, the same way.
        let refines = Refines {
            settled: [
                "klaraptor: stencil1d<3> N=1048576 refine: not settled at exit after \
                 launches=1: launching block=224x1x1 grid=4682x1x1 (candidate=model#1, 0 of 4 \
                 candidates timed, extra_us=0.0 of 0.0) device=0:NVIDIA H200",
                "klaraptor: stencil1d<16> N=1048576 refine: settled on block=64x1x1 \
                 grid=16384x1x1 after launches=6, 1.00 of the model's first choice's time \
                 (candidate=model#1 extra_us=3.1) device=0:NVIDIA H200",
            ]
            .iter()
            .map(|l| parse_refine(l).unwrap().unwrap())
            .collect(),
            trying: vec![parse_refine_trying(
                "klaraptor: stencil1d<16> N=1048576 refine: trying 3 of 37 shapes and the \
                 program's 256x1x1 (model#1=64x1x1 model#6=320x1x1 profiled=512x1x1) \
                 device=0:NVIDIA H200",
            )
            .unwrap()
            .unwrap()],
        };
        let (s3, t3) = refines.of(&r3.names(), &[1048576]);
        let (s16, t16) = refines.of(&r16.names(), &[1048576]);
        assert_eq!(s3.map(|r| (r.block, r.settled)), Some(([224, 1, 1], false)));
        assert!(t3.is_none());
        assert_eq!(s16.map(|r| (r.block, r.settled)), Some(([64, 1, 1], true)));
        assert_eq!(t16.map(|t| t.tried), Some(3));
    }
    /// program_profiled on a constructed case made of real H200 measurements: the case is
    /// atax_ax at NX=NY=10000, its times the exhaustive sweep of that size
    /// (tests/fixtures/validate-h200-2026-11-22/atax/run1/records, real), its profile the
    /// committed H200 entry of atax_ax the sample's rational program is built from (real
    /// samples, captured before issue 38: it names no block of the program). What the test
    /// adds: the program's own blocks in that entry, 256x1x1 (the block PolyBench's atax
    /// launches, `program_block=256x1x1` in the fixture's binary.log) at every profiled size
    /// but the largest, where it names 512x1x1, as a program whose block follows its data
    /// would; and the default pick (256x1x1, from that log line).
    #[test]
    fn program_profiled_on_the_h200_atax_sweep() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let sweeps =
            read_records(&root.join("tests/fixtures/validate-h200-2026-11-22/atax/run1/records"))
                .unwrap();
        let sw = sweeps.iter().find(|s| s.name == "atax_ax").unwrap();
        let entry = Entry::from_toml(
            &std::fs::read_to_string(root.join(
                "samples/klaraptor-profiles/v1/nvidia-h200-2803d38c/\
                 _Z7atax_axPKfS0_Pfii-8dd4993d5325af69.toml",
            ))
            .unwrap(),
        )
        .unwrap();
        assert!(
            entry.program.is_empty(),
            "the committed entry predates issue 38"
        );
        let prof = ProfileTimes::from_samples(&entry.samples, "the atax_ax profile");
        let mut program: Vec<ProgramBlock> = Vec::new();
        for sz in &entry.plan.sizes {
            let block = if *sz == [2048, 2048] {
                [512, 1, 1]
            } else {
                [256, 1, 1]
            };
            klaraptor_profiler::record::add_program_block(
                &mut program,
                ProgramBlock {
                    sizes: sz.clone(),
                    block,
                },
            );
        }
        let sizes = vec![10000, 10000];
        let mut c = Case {
            kernel: "atax_ax".into(),
            labels: vec!["NX".into(), "NY".into()],
            sizes: sizes.clone(),
            candidates: 37,
            dim: 1,
            ..Case::default()
        };
        c.measure(sw.by_size()[&sizes].iter().copied());
        assert_eq!(c.measured.len(), 37);
        c.picks.insert(
            Method::ProfiledBest,
            profiled_best_pick(Ok(&prof), &c.labels, &c.sizes),
        );
        c.picks.insert(
            Method::Default,
            Pick {
                block: Some([256, 1, 1]),
                ..Pick::default()
            },
        );
        // An entry without blocks of the program: no pick, the method is absent.
        assert!(program_profiled_pick(&prof, &[], &c.labels, &c.sizes).is_none());
        let old = c.clone();
        let pp = program_profiled_pick(&prof, &program, &c.labels, &c.sizes).unwrap();
        // The nearest profiled size in the logarithm of the data values is 2048x2048 (the
        // profiled_best rule: the same size profiled_best takes its shape at).
        assert_eq!(pp.profiled_at, Some(vec![2048, 2048]));
        assert_eq!(c.picks[&Method::ProfiledBest].profiled_at, pp.profiled_at);
        assert_eq!(pp.block, Some([512, 1, 1]));
        let t512 = entry
            .samples
            .iter()
            .find(|s| s.sizes == [2048, 2048] && s.block == [512, 1, 1])
            .and_then(|s| s.counters.as_ref())
            .unwrap()
            .time_ms;
        assert_eq!(pp.profile_time_ms, Some(t512));
        assert!(pp.how.contains("(NX=2048 NY=2048, "), "{}", pp.how);
        c.picks.insert(Method::ProgramProfiled, pp);
        c.time_picks();
        // Looked up in the case's sweep: its time there and optimum / that.
        let p = &c.picks[&Method::ProgramProfiled];
        let (_, best) = c.fastest().unwrap();
        assert_eq!(p.time_ms, Some(c.measured[&[512, 1, 1]]));
        assert_eq!(p.ratio, Some(best / c.measured[&[512, 1, 1]]));
        // default stays the program's block at the case's own size.
        assert_eq!(
            c.picks[&Method::Default].time_ms,
            Some(c.measured[&[256, 1, 1]])
        );
        // Nearer the small sizes the program's block there is taken.
        let small = program_profiled(&program, &prof.samples, &[300, 300]).unwrap();
        assert_eq!((small.block, small.sizes), ([256, 1, 1], vec![256, 256]));
        // A profile naming blocks of another number of data values only: a pick, no block.
        let n = program_profiled_pick(&prof, &program, &["N".into()], &[100]).unwrap();
        assert!(n.block.is_none() && n.how.contains("at no size of 1 data values"));

        // Summaries and records: program_profiled beside profiled_best; without it, as before.
        let names = |cases: &[Case]| -> Vec<&'static str> {
            summaries(cases).iter().map(|x| x.method).collect()
        };
        assert_eq!(
            names(std::slice::from_ref(&c)),
            [
                "klaraptor",
                "settled",
                "profiled_best",
                "program_profiled",
                "default",
                "occupancy"
            ]
        );
        let s = summaries(std::slice::from_ref(&c));
        assert_eq!(s[3].cases, 1);
        assert_eq!(s[3].geomean, p.ratio);
        let r = records(std::slice::from_ref(&c));
        let rp = r.iter().find(|r| r.method == "program_profiled").unwrap();
        assert_eq!(rp.profile_time_ms, Some(Some(t512)));
        assert_eq!(
            rp.profiled_at.as_ref().unwrap().as_ref().unwrap()["NX"],
            2048
        );
        let mut old = old;
        old.time_picks();
        assert_eq!(
            Method::compared(std::slice::from_ref(&old)),
            Method::COMPARED
        );
        assert_eq!(
            names(std::slice::from_ref(&old)),
            [
                "klaraptor",
                "settled",
                "profiled_best",
                "default",
                "occupancy"
            ]
        );
        assert!(records(std::slice::from_ref(&old))
            .iter()
            .all(|r| r.method != "program_profiled"));
        // One case with it among others without: the method is listed, over its one case.
        let both = [old, c];
        let s = summaries(&both);
        assert_eq!(
            (s[3].method, s[3].cases, s[3].without_ratio),
            ("program_profiled", 1, 1)
        );
    }

    /// When the link's decision keeps the program's launch, klaraptor's pick is the program's
    /// own shape: the block the run logged (source=program), else the program's own block,
    /// never the model's first-ranked shape.
    #[test]
    fn klaraptor_is_the_programs_own_shape_when_the_program_chooses() {
        let kept = parse_decision(
            "klaraptor: atax_ax NX=10000 NY=10000 block=256x1x1 grid=40x1x1 source=program \
             device=0:NVIDIA H200",
        )
        .unwrap()
        .unwrap();
        let p = program_chooses_pick(Some(&kept), Some([256, 1, 1]), "the run");
        assert_eq!(p.block, Some([256, 1, 1]));
        assert!(p.flag.is_none(), "{:?}", p.flag);
        assert!(
            p.how.contains("keeps the program's own launch"),
            "{}",
            p.how
        );
        // No decision logged: the program's own block (not the model's first).
        let p = program_chooses_pick(None, Some([128, 1, 1]), "the run");
        assert_eq!(p.block, Some([128, 1, 1]));
        let p = program_chooses_pick(None, None, "the run");
        assert!(p.block.is_none() && p.how.contains("not known"));
        // A run that chose by a model (a binary linked before the decision): flagged.
        let model = parse_decision(
            "klaraptor: atax_ax NX=10000 NY=10000 block=576x1x1 grid=18x1x1 source=model \
             predicted_us=58.3 device=0:NVIDIA H200 program_block=256x1x1",
        )
        .unwrap()
        .unwrap();
        let p = program_chooses_pick(Some(&model), Some([256, 1, 1]), "the run");
        assert_eq!(p.block, Some([576, 1, 1]));
        assert!(p.flag.unwrap().contains("linked before that decision"));
    }

    /// The profiling runtime's lines naming the program's own block are not samples.
    #[test]
    fn records_skip_the_programs_block_lines() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("kernels.tsv"), "abc\t_Z1kPf\tk\n").unwrap();
        let line = serde_json::to_string(&sample([64, 1, 1], Some(2.0), None)).unwrap();
        std::fs::write(
            dir.path().join("abc.jsonl"),
            format!("{{\"program\":true,\"sizes\":[100],\"block\":[96,1,1]}}\n{line}\nnonsense\n"),
        )
        .unwrap();
        // The damaged line keeps its line number.
        let e = format!("{:#}", read_records(dir.path()).unwrap_err());
        assert!(e.contains("abc.jsonl:3"), "{e}");
        std::fs::write(
            dir.path().join("abc.jsonl"),
            format!("{{\"program\":true,\"sizes\":[100],\"block\":[96,1,1]}}\n{line}\n"),
        )
        .unwrap();
        let r = read_records(dir.path()).unwrap();
        assert_eq!(r[0].samples.len(), 1);
    }
}
