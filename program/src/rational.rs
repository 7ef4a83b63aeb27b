//! The rational program of one kernel on one device: fitted per-warp metrics, the device,
//! the MWP-CWP model (klaraptor-model), the candidate block shapes, the grid formula and the
//! selection — as a manifest (JSON, what `klaraptor inspect/explain` read) and as one
//! readable C99 file (what is linked into the program).
//!
//! Selection: every candidate shape that the kernel's constraints and the device current at
//! the launch allow is evaluated; the smallest predicted time wins. Ties (predicted times
//! within a relative 1e-9) go to the shape with more threads per block, then the larger bx,
//! then the larger by: wide blocks keep rows of a warp on contiguous addresses. The same
//! order decides in Rust ([`RationalProgram::rank`]) and in C.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use klaraptor_fitting::RationalFn;
use klaraptor_model::c_text::{comment_text, string_literal};
use klaraptor_model::{device_to_c, predict, Device, Launch, Prediction, WarpMetrics, C_MODEL};
use klaraptor_profiler::record::{self, Counters, Entry, Sample};
use klaraptor_spec::expr::C_PRELUDE;
use klaraptor_spec::shapes::{allowed_at, allowed_for_some_data, FullEnv, LaunchShape};
use serde::{Deserialize, Serialize};

use crate::metrics::{self, METRICS};
use klaraptor_spec::link::LinkSpec;

/// Version of the manifest format.
pub const FORMAT: u32 = 1;

/// Where the profile came from and how the fit went.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Provenance {
    pub collector: String,
    pub captured_at: String,
    pub code_hash: String,
    pub profile_sizes: Vec<Vec<i64>>,
    pub samples: usize,
    pub failed_samples: usize,
    pub generated_by: String,
    /// `SOURCE_DATE_EPOCH` when set, else the profile's capture time: never the wall clock,
    /// so that two links of the same inputs give byte-identical programs.
    pub generated_at: String,
}

/// Everything the rational program of a kernel on a device is made of.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RationalProgram {
    pub format: u32,
    pub kernel: String,
    pub mangled: String,
    pub data: Vec<String>,
    pub dim: u8,
    /// Grid formulas and block constraints, in the annotation language.
    pub grid: Vec<String>,
    pub block: Vec<String>,
    pub device: Device,
    pub regs_per_thread: u32,
    /// The block's shared memory: static plus the dynamic amount the profile's launches
    /// passed; with [`Self::shmem`], the static part only.
    pub smem_per_block: u32,
    /// The dynamic shared memory a launch needs for a block shape (`shmem(…)` or the formula
    /// the pass read), in the annotation language: added to [`Self::smem_per_block`] per
    /// candidate, and a shape whose total exceeds the device's shared memory per block is
    /// never chosen. `None` in manifests written before, and for kernels without it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shmem: Option<String>,
    pub candidates: Vec<[u32; 3]>,
    /// Per-warp metrics ([`METRICS`]) as functions of (data…, bx[, by[, bz]]).
    pub metrics: BTreeMap<String, RationalFn>,
    pub provenance: Provenance,
    /// The C file's name in the models directory.
    pub c_name: String,
    /// The model's time calibrated against the profile's measured times.
    #[serde(default)]
    pub time_fit: TimeFit,
    /// The sectors-per-request ratios per warp footprint, which replace the global ratio
    /// fits for the shapes of those footprints ([`metrics::fit_ratios_by_footprint`]).
    #[serde(default)]
    pub ratios_by_footprint: Vec<metrics::FootprintRatios>,
    /// The launch totals fitted per thread of the kernel's domain, not per launch
    /// ([`metrics::total_unit`]); empty in manifests written before.
    #[serde(default)]
    pub per_domain_thread: std::collections::BTreeSet<String>,
    /// The largest profiled value of each data parameter. Shares ([`metrics::is_share`]: the
    /// L1 hit rate) are evaluated with the data held to these: what a cache keeps depends
    /// on sizes in steps a rational function cannot extrapolate, so the share at a larger
    /// size is taken as at the largest measured one, per block shape. Empty (no holding) in
    /// manifests written before.
    #[serde(default)]
    pub shares_held_at: Vec<f64>,
    /// The launch totals fitted per thread of the domain ([`Self::per_domain_thread`]) that
    /// are evaluated, like the shares, with the data held to [`Self::shares_held_at`]: in a
    /// kernel whose threads follow its data, the work of one thread that the profile shows
    /// growing with every data size far slower than the size itself
    /// ([`boundary_held`]). Empty (nothing held) in manifests written before.
    #[serde(default)]
    pub held_per_thread: std::collections::BTreeSet<String>,
    /// The shape the profile measured fastest at each profiled size
    /// ([`crate::validate::profiled_best`] there): the rational program's `profiled_best`
    /// picks the one of the size nearest a launch's data, and the runtime's refinement tries
    /// it beside the model's best shapes. Empty in manifests written before.
    #[serde(default)]
    pub profiled: Vec<ProfiledAt>,
    /// The shapes that faulted in the profile (their launch lost the CUDA context: an
    /// illegal address, a trap; [`klaraptor_profiler::record::is_fault`]): never candidates.
    /// Empty in manifests written before.
    #[serde(default)]
    pub faulted: Vec<[u32; 3]>,
    /// The shapes left out of the candidates with them: those the profile did not measure
    /// that have at least as many threads as a shape that faulted (a fault that comes with
    /// the block's size, as shared memory sized for the program's block, strikes them too).
    /// Empty in manifests written before.
    #[serde(default)]
    pub left_out_after_faults: Vec<[u32; 3]>,
    /// For a kernel whose blocks wait at barriers: the block size the choice keeps to, and
    /// the candidates left out for it ([`barrier_cap`]). `None` for other kernels and in
    /// manifests written before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub barrier_cap: Option<BarrierCap>,
    /// Whether the model or the profile's fastest shape chooses, decided at the link from
    /// the profile alone, with its evidence ([`crate::decide`]). `None` (the model chooses)
    /// in manifests written before, and in the programs the check itself fits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<crate::decide::Decision>,
    /// For a GPU without its own profile: the GPU whose profile the program was fitted on
    /// (the same architecture; [`crate::transfer`]). `None`: this GPU's own profile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transferred_from: Option<String>,
    /// Whether the kernel's launched threads do not follow its data (the profile's launches
    /// ran more than [`crate::decide::LOOP_EXCESS`] times the threads that cover the domain
    /// once: [`metrics::coverage_excess`]; one block per row, a grid-stride loop under a
    /// capped grid): every launched thread loops over its share of the data, so the launch's
    /// work belongs to all its warps, not to those of the grid formula at one-thread blocks
    /// ([`metrics::busy_fraction`] is 1). False in manifests written before.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub threads_loop: bool,
    /// [`Self::grid`], [`Self::block`] and [`Self::shmem`] parsed, on first use.
    #[serde(skip)]
    parsed: std::sync::OnceLock<Result<LaunchShape, String>>,
}

/// The profile's fastest shape at one profiled size.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProfiledAt {
    pub sizes: Vec<i64>,
    pub block: [u32; 3],
}

/// `predicted = model + overhead_us`, fitted at build time by least squares in relative
/// error over the profile's samples (measured time against the model's time for the same
/// launch). `overhead_us` is what every launch costs besides its kernel's work (the launch
/// itself, a few microseconds): at the small profiling sizes it is most of the measured time.
/// It does not change the ranking (the same for every shape); it makes the predicted
/// microseconds (the runtime's log, `klaraptor explain`) comparable with measured ones.
///
/// The fit also chooses the kernel's memory-level parallelism (`mlp`), which does change the
/// ranking, as the candidate whose model times, plus the fitted overhead, come closest to
/// the measured ones. The model's microseconds are taken as they are (no fitted scale): a
/// free scale let a model 20 times too slow (one request in flight for a loop whose
/// unrolled loads overlap) fit the profile as well as the right one, and the choice of
/// `mlp` was then noise (on the H200 study: picking one-thread blocks for the column sums
/// of the correlation, 32×32 blocks for the matrix products). `scale` is 1 in manifests
/// written since; earlier ones fitted it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TimeFit {
    /// 1 since the model's microseconds are taken as they are; fitted in older manifests.
    pub scale: f64,
    #[serde(default)]
    pub overhead_us: f64,
    /// Samples it was fitted on, and the median relative error of the calibrated time on
    /// them (of the raw model's time, for comparison).
    pub samples: usize,
    pub median_rel_error: f64,
    pub model_median_rel_error: f64,
    /// Global requests a warp keeps in flight together (klaraptor-model's
    /// `WarpMetrics::mlp`), chosen with the calibration ([`fit_time`]): unlike the scale and
    /// the overhead, it changes the ranking. 0 in manifests written before it existed, which
    /// the model reads as 1.
    #[serde(default)]
    pub mlp: f64,
    /// Microseconds each launched warp of a loop kernel adds to the launch, one warp after
    /// another ([`TimeFit::fit_warps`]): work the warps do in turn, such as each warp's atomic
    /// on one address at the end of its loop (docs/model.md, "Work the warps do in turn").
    /// 0 for other kernels and in manifests written before.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub warp_us: f64,
}

fn is_zero(x: &f64) -> bool {
    *x == 0.0
}

impl Default for TimeFit {
    fn default() -> Self {
        TimeFit {
            scale: 1.0,
            overhead_us: 0.0,
            samples: 0,
            median_rel_error: f64::NAN,
            model_median_rel_error: f64::NAN,
            mlp: 1.0,
            warp_us: 0.0,
        }
    }
}

impl TimeFit {
    /// The calibrated time of a launch whose model time is `model_us`.
    pub fn apply(&self, model_us: f64) -> f64 {
        self.scale * model_us + self.overhead_us
    }

    /// [`TimeFit::apply`] for a launch of `warps` warps: plus their cost one after another.
    pub fn apply_warps(&self, model_us: f64, warps: f64) -> f64 {
        self.apply(model_us) + self.warp_us * warps
    }

    /// Fits the overhead on (model µs, measured µs) pairs: the `c ≥ 0` that minimises
    /// `Σ ((t + c − y) / y)²`, i.e. `c = Σ ((y − t) / y²) / Σ (1 / y²)`.
    pub fn fit(points: &[(f64, f64)]) -> TimeFit {
        let pts: Vec<&(f64, f64)> = points
            .iter()
            .filter(|(t, y)| t.is_finite() && *t > 0.0 && *y > 0.0)
            .collect();
        let err = |c: f64| {
            let mut v: Vec<f64> = pts.iter().map(|(t, y)| (t + c - y).abs() / y).collect();
            if v.is_empty() {
                return f64::NAN;
            }
            v.sort_by(|a, b| a.total_cmp(b));
            v[v.len() / 2]
        };
        let (mut num, mut den) = (0.0, 0.0);
        for (t, y) in &pts {
            num += (y - t) / (y * y);
            den += 1.0 / (y * y);
        }
        let c = if den > 0.0 { (num / den).max(0.0) } else { 0.0 };
        TimeFit {
            scale: 1.0,
            overhead_us: c,
            samples: pts.len(),
            median_rel_error: err(c),
            model_median_rel_error: err(0.0),
            mlp: 1.0,
            warp_us: 0.0,
        }
    }

    /// [`TimeFit::fit`] with a cost per launched warp, on (model µs, measured µs, launched
    /// warps) triples: the `c, a ≥ 0` that minimise `Σ ((t + c + a·w − y) / y)²` (weighted
    /// least squares; a coefficient that comes out negative is set to 0 and the other fitted
    /// alone).
    pub fn fit_warps(points: &[(f64, f64, f64)]) -> TimeFit {
        let pts: Vec<&(f64, f64, f64)> = points
            .iter()
            .filter(|(t, y, w)| t.is_finite() && *t > 0.0 && *y > 0.0 && w.is_finite())
            .collect();
        // Normal equations of r = y − t against the columns 1 and w, weights 1 / y².
        let (mut s11, mut s1w, mut sww, mut s1r, mut swr) = (0.0, 0.0, 0.0, 0.0, 0.0);
        for (t, y, w) in &pts {
            let k = 1.0 / (y * y);
            let r = y - t;
            s11 += k;
            s1w += k * w;
            sww += k * w * w;
            s1r += k * r;
            swr += k * r * w;
        }
        let alone = |sxx: f64, sxr: f64| if sxx > 0.0 { (sxr / sxx).max(0.0) } else { 0.0 };
        let det = s11 * sww - s1w * s1w;
        let (mut c, mut a) = if det > 1e-12 * s11 * sww {
            ((s1r * sww - swr * s1w) / det, (s11 * swr - s1w * s1r) / det)
        } else {
            (alone(s11, s1r), 0.0)
        };
        if a < 0.0 {
            (c, a) = (alone(s11, s1r), 0.0);
        }
        if c < 0.0 {
            (c, a) = (0.0, alone(sww, swr));
        }
        let err = |c: f64, a: f64| {
            let mut v: Vec<f64> = pts
                .iter()
                .map(|(t, y, w)| (t + c + a * w - y).abs() / y)
                .collect();
            if v.is_empty() {
                return f64::NAN;
            }
            v.sort_by(|a, b| a.total_cmp(b));
            v[v.len() / 2]
        };
        TimeFit {
            scale: 1.0,
            overhead_us: c,
            samples: pts.len(),
            median_rel_error: err(c, a),
            model_median_rel_error: err(0.0, 0.0),
            mlp: 1.0,
            warp_us: a,
        }
    }
}

/// One candidate, evaluated.
#[derive(Debug, Clone)]
pub struct Ranked {
    pub block: [u32; 3],
    pub grid: [u32; 3],
    pub metrics: WarpMetrics,
    /// The model's prediction; its `time_us` is calibrated ([`TimeFit`]), `model_us` is not.
    pub prediction: Prediction,
    pub model_us: f64,
}

/// File names of a program in the models directory.
pub struct ProgramFiles {
    pub c_name: String,
    pub json_name: String,
}

/// `<output>.klaraptor`: where the rational programs of a binary are kept for people and for
/// `klaraptor inspect`.
pub fn models_dir(output: &Path) -> PathBuf {
    PathBuf::from(format!("{}.klaraptor", output.display()))
}

/// Where the link keeps the profiling variant of `output`:
/// `<output>.klaraptor/<output's file name>.profiling`.
pub fn kept_variant(output: &Path) -> PathBuf {
    let name = output
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    models_dir(output).join(format!("{name}.profiling"))
}

/// Lower case, every run of other characters one `-` (file names of the models).
pub fn slug(s: &str) -> String {
    let mut out: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    while out.contains("--") {
        out = out.replace("--", "-");
    }
    out.trim_matches('-').to_string()
}

/// The candidate block shapes of a `dim`-D kernel before constraints and device limits:
/// 1-D: 1, 2, 4, 8, 16 and every multiple of 32 up to 1024; 2-D: every power-of-two shape
/// with at most 1024 threads; 3-D: the same with bz ≤ 64.
pub fn candidates(dim: u8) -> Vec<[u32; 3]> {
    klaraptor_spec::spec::candidate_blocks(dim)
}

/// The device description for `entry`'s device: a calibrated or shipped description of that
/// device when one exists, else the architecture's table with the entry's SM count.
pub fn device_for(entry: &Entry) -> Result<Device> {
    if let Some(d) = klaraptor_profiler::devices::find(&entry.device.name, &entry.device.uuid)? {
        return Ok(d);
    }
    let (maj, min) = entry
        .device
        .cc
        .split_once('.')
        .and_then(|(a, b)| Some((a.parse().ok()?, b.parse().ok()?)))
        .with_context(|| format!("the profile's compute capability {:?}", entry.device.cc))?;
    let mut d = Device::for_arch(maj, min)?.with_identity(&entry.device.name, &entry.device.uuid);
    if entry.device.sm_count > 0 {
        d.sm_count = entry.device.sm_count;
    }
    Ok(d)
}

/// Builds the program of `spec` from its profile `entry`: the model
/// ([`build_model`]), then the decision whether the model or the profile's fastest shape
/// chooses ([`crate::decide`]), from the profile alone.
pub fn build(spec: &LinkSpec, entry: &Entry, _models_dir: &Path) -> Result<RationalProgram> {
    build_with(spec, entry, &crate::decide::DecisionRule::default())
}

/// [`build`] under a decision rule other than the link's.
pub fn build_with(
    spec: &LinkSpec,
    entry: &Entry,
    rule: &crate::decide::DecisionRule,
) -> Result<RationalProgram> {
    let mut prog = build_model_with(spec, entry, rule)?;
    prog.decision = Some(crate::decide::decide_with(spec, entry, &mut prog, rule));
    Ok(prog)
}

/// The model of `spec` fitted on `entry`, without a decision (the model chooses).
pub fn build_model(spec: &LinkSpec, entry: &Entry) -> Result<RationalProgram> {
    build_model_with(spec, entry, &crate::decide::DecisionRule::default())
}

/// [`build_model`] under the model-building parts of `rule`: whether a loop kernel's work
/// is spread over every launched warp ([`RationalProgram::threads_loop`]) and whether a
/// kernel that waits at barriers keeps to the block sizes its profile measured fast
/// ([`RationalProgram::barrier_cap`]); the link does both.
pub fn build_model_with(
    spec: &LinkSpec,
    entry: &Entry,
    rule: &crate::decide::DecisionRule,
) -> Result<RationalProgram> {
    let spread_loops = rule.spread_loops;
    let device = device_for(entry)?;
    let shape = spec
        .shape()
        .map_err(|e| anyhow::anyhow!("kernel {}: {e}", spec.name))?;
    let constraints = &shape.constraints;
    // Constraints that depend on the data are checked at run time; here only those that
    // rule a shape out for every size.
    let allowed: Vec<[u32; 3]> = candidates(spec.dim)
        .into_iter()
        .filter(|b| device.within_limits(*b) && allowed_for_some_data(constraints, *b))
        .collect();
    if allowed.is_empty() {
        bail!(
            "kernel {}: no block shape satisfies the constraints {:?} within the device limits",
            spec.name,
            spec.block
        );
    }
    // A shape that faulted in the profile is never chosen, nor one the profile did not
    // measure that has as many threads as one that faulted; those it measured are known to
    // run.
    let (faulted, measured) = faults_of(entry);
    let threads = |b: &[u32; 3]| u64::from(b[0]) * u64::from(b[1]) * u64::from(b[2]);
    let least_faulted = faulted.iter().map(threads).min();
    let (cands, left_out): (Vec<[u32; 3]>, Vec<[u32; 3]>) = allowed.into_iter().partition(|b| {
        !faulted.contains(b)
            && (measured.contains(b) || least_faulted.is_none_or(|t| threads(b) < t))
    });
    let left_out_after_faults: Vec<[u32; 3]> = left_out
        .into_iter()
        .filter(|b| !faulted.contains(b))
        .collect();
    if cands.is_empty() {
        bail!(
            "kernel {}: every block shape its constraints and the device allow faulted in the \
             profile ({} shapes) or was not measured and has as many threads as one that did",
            spec.name,
            faulted.len()
        );
    }
    let samples = metrics::fit_samples(spec, entry)?;
    let fitted = metrics::fit_all(spec, &samples, &cands)?;
    let ratios_by_footprint = metrics::fit_ratios_by_footprint(spec, &samples, &cands)?;
    // A kernel that waits at barriers keeps to block sizes its profile measured fast: the
    // candidates are fitted on above (the fit's domain), but larger ones are not chosen.
    let loops = crate::decide::threads_loop(spec, entry);
    let barrier_cap = barrier_cap(spec, entry, loops).filter(|_| rule.cap_at_barriers);
    let (cands, left_out_at_barriers): (Vec<[u32; 3]>, Vec<[u32; 3]>) = cands
        .into_iter()
        .partition(|b| barrier_cap.as_ref().is_none_or(|c| threads(b) <= c.threads));
    let usable = metrics::usable(spec, entry);
    let regs = usable
        .iter()
        .map(|(_, c)| c.regs_per_thread)
        .max()
        .unwrap_or(0);
    // With a formula for the dynamic part, the records' dynamic amount is the program's
    // (what the launch passed), not the shape's: the program keeps the static part.
    let smem = usable
        .iter()
        .map(|(_, c)| {
            c.smem_static
                + if spec.shmem.is_some() {
                    0
                } else {
                    c.smem_dynamic
                }
        })
        .max()
        .unwrap_or(0);
    let c_name = format!(
        "{}.{}.c",
        program_stem(&spec.name, &spec.mangled),
        slug(&device.name)
    );
    let mut prog = RationalProgram {
        format: FORMAT,
        kernel: spec.name.clone(),
        mangled: spec.mangled.clone(),
        data: spec.data.clone(),
        dim: spec.dim,
        grid: spec.grid.clone(),
        block: spec.block.clone(),
        device,
        regs_per_thread: regs,
        smem_per_block: smem,
        shmem: spec.shmem.clone(),
        candidates: cands,
        metrics: fitted.functions,
        provenance: Provenance {
            collector: entry.collector.clone(),
            captured_at: entry.captured_at.clone(),
            code_hash: spec.code_hash.clone(),
            profile_sizes: entry.plan.sizes.clone(),
            samples: entry.samples.len(),
            failed_samples: entry.samples.iter().filter(|s| s.error.is_some()).count(),
            generated_by: format!("klaraptor-cc {}", env!("CARGO_PKG_VERSION")),
            generated_at: klaraptor_profiler::console::build_time(&entry.captured_at),
        },
        c_name,
        time_fit: TimeFit::default(),
        ratios_by_footprint,
        per_domain_thread: fitted.per_domain_thread,
        shares_held_at: (0..spec.data.len())
            .map(|i| {
                samples
                    .iter()
                    .filter_map(|(s, _)| s.sizes.get(i))
                    .fold(0.0, |a: f64, &v| a.max(v as f64))
            })
            .collect(),
        held_per_thread: BTreeSet::new(),
        profiled: Vec::new(),
        faulted,
        left_out_after_faults,
        barrier_cap: barrier_cap.map(|c| BarrierCap {
            left_out: left_out_at_barriers,
            ..c
        }),
        decision: None,
        transferred_from: None,
        threads_loop: spread_loops && loops,
        parsed: Default::default(),
    };
    if rule.hold_boundary_work && !prog.threads_loop {
        let sizes: Vec<Vec<i64>> = samples.iter().map(|(s, _)| s.sizes.clone()).collect();
        prog.held_per_thread = boundary_held(&prog, &sizes);
    }
    prog.time_fit = fit_time(&prog, &usable);
    prog.profiled = profiled_table(entry, spec.data.len());
    Ok(prog)
}

/// Below this elasticity of a per-thread fit in every data size (the relative change of the
/// work over the relative change of the size, across the profiled range), a kernel's work
/// per thread is taken to grow only through the share of its threads at the domain's
/// boundary ([`boundary_held`]). A loop whose length is a data size gives about 1 (a
/// matrix product's row of K: twice the K, twice the work), plus what each thread does
/// once; a stencil's boundary gives 0.2–0.3 over 32–64 (the radius-4 star's instructions
/// per warp: 116, 121, 133 at 32³, 48³, 64³).
pub const HOLD_ELASTICITY: f64 = 0.5;

/// The per-domain-thread fits of `prog` (a kernel whose threads follow its data) to hold at
/// the largest profiled sizes: those whose elasticity in each data size across the profiled
/// range (the fit at the largest sizes against the fit with that one size at its smallest
/// profiled value, the others at their largest), the median over the candidate shapes, is
/// below [`HOLD_ELASTICITY`] in magnitude for every data size that the profile varied.
///
/// The mechanism (docs/model.md, "Work per thread beyond the profiled sizes"): a thread of
/// such a kernel computes its points of the domain; what it does grows with a data size
/// only through a loop whose length that size sets, or through the share of threads at the
/// domain's edge, which do less and whose share shrinks as the domain grows. The first
/// grows without bound and the fit extrapolates it; the second tends to the interior
/// thread's work, which a polynomial numerator fitted over a narrow range does not: the
/// radius-4 star's fit, bilinear in NX and NY over 32–64, gave 918 instructions per warp at
/// 257 × 263 × 251 against 133 at 64³, every shape bound by issue at about the same time,
/// and a choice of 0.26 of the optimum. Held, a thread's work at a larger size is what it
/// was at the largest profiled one.
pub fn boundary_held(prog: &RationalProgram, sizes: &[Vec<i64>]) -> BTreeSet<String> {
    let nd = prog.data.len();
    let lo: Vec<f64> = (0..nd)
        .map(|i| {
            sizes
                .iter()
                .filter_map(|s| s.get(i))
                .fold(f64::INFINITY, |a, &v| a.min(v as f64))
        })
        .collect();
    let hi = &prog.shares_held_at;
    let mut out = BTreeSet::new();
    if nd == 0 || hi.len() != nd {
        return out;
    }
    let nb = usize::from(prog.dim.clamp(1, 3));
    for name in &prog.per_domain_thread {
        let Some(f) = prog.metrics.get(name) else {
            continue;
        };
        let mut worst = 0.0f64;
        let mut known = false;
        for i in 0..nd {
            if !(lo[i].is_finite() && lo[i] > 0.0 && hi[i] > lo[i]) {
                continue; // a size the profile did not vary says nothing
            }
            let mut e: Vec<f64> = prog
                .candidates
                .iter()
                .filter_map(|b| {
                    let mut x: Vec<f64> = hi.clone();
                    for v in b.iter().take(nb) {
                        x.push(f64::from(*v).log2());
                    }
                    let top = f.eval(&x);
                    x[i] = lo[i];
                    let bottom = f.eval(&x);
                    (top > 0.0 && bottom > 0.0 && top.is_finite() && bottom.is_finite())
                        .then(|| (top / bottom).ln() / (hi[i] / lo[i]).ln())
                })
                .collect();
            if e.is_empty() {
                worst = f64::INFINITY;
                break;
            }
            e.sort_by(|a, b| a.total_cmp(b));
            let median = e[e.len() / 2];
            worst = worst.max(median.abs());
            known = true;
        }
        if known && worst < HOLD_ELASTICITY {
            out.insert(name.clone());
        }
    }
    out
}

/// The block size a kernel that waits at barriers keeps to ([`barrier_cap`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BarrierCap {
    /// The most threads a chosen block has: those of the shape measured fastest at
    /// [`Self::sizes`].
    pub threads: u64,
    /// The largest profiled size (most work), where the profile measured it.
    pub sizes: Vec<i64>,
    /// The fastest shape there.
    pub fastest: [u32; 3],
    /// The candidates with more threads, fitted on but never chosen.
    #[serde(default)]
    pub left_out: Vec<[u32; 3]>,
}

/// For a kernel whose blocks wait at barriers ([`crate::decide::waits_at_barriers`]) and
/// whose threads follow its data (not a loop kernel: [`crate::decide::LOOP_EXCESS`]): the
/// block size of the shape its profile measured fastest at the largest profiled size, which
/// the choice does not exceed. The model has no term for a block's wait for its slowest warp
/// at each barrier, a cost that grows with the warps of a block and does not shrink with the
/// data, so it leans to blocks larger than the profile measured fast (docs/model.md,
/// "Kernels whose blocks wait at barriers"). A loop kernel's work per thread changes with
/// the block at every size, so what the profile measured does not bound it: `loops`
/// ([`crate::decide::threads_loop`]). `None` for other kernels.
pub fn barrier_cap(spec: &LinkSpec, entry: &Entry, loops: bool) -> Option<BarrierCap> {
    if loops || !crate::decide::waits_at_barriers(entry) {
        return None;
    }
    let times = crate::validate::ProfileTimes::from_samples(&entry.samples, "");
    let n = spec.data.len();
    let work = |z: &[i64]| z.iter().map(|&v| v.max(1) as f64).product::<f64>();
    let largest = times
        .samples
        .iter()
        .map(|(sz, _, _)| sz)
        .filter(|sz| sz.len() == n)
        .max_by(|a, b| work(a).total_cmp(&work(b)).then_with(|| a.cmp(b)))?
        .clone();
    let best = crate::validate::profiled_best(&times.samples, &largest)?;
    Some(BarrierCap {
        threads: best.block.iter().map(|&x| u64::from(x)).product(),
        sizes: largest,
        fastest: best.block,
        left_out: Vec::new(),
    })
}

/// The shapes that faulted in `entry`'s profile, and those it measured, each sorted.
fn faults_of(entry: &Entry) -> (Vec<[u32; 3]>, Vec<[u32; 3]>) {
    let mut faulted: Vec<[u32; 3]> = entry
        .samples
        .iter()
        .filter(|s| s.error.as_deref().is_some_and(record::is_fault))
        .map(|s| s.block)
        .collect();
    faulted.sort();
    faulted.dedup();
    let mut measured: Vec<[u32; 3]> = entry
        .samples
        .iter()
        .filter(|s| s.error.is_none() && s.counters.is_some())
        .map(|s| s.block)
        .collect();
    measured.sort();
    measured.dedup();
    (faulted, measured)
}

/// The profile's fastest shape at each of its sizes (of `n_data` values).
fn profiled_table(entry: &Entry, n_data: usize) -> Vec<ProfiledAt> {
    let times = crate::validate::ProfileTimes::from_samples(&entry.samples, "");
    let sizes: std::collections::BTreeSet<&Vec<i64>> = times
        .samples
        .iter()
        .map(|(sz, _, _)| sz)
        .filter(|sz| sz.len() == n_data)
        .collect();
    sizes
        .into_iter()
        .filter_map(|sz| {
            let best = crate::validate::profiled_best(&times.samples, sz)?;
            Some(ProfiledAt {
                sizes: best.sizes,
                block: best.block,
            })
        })
        .collect()
}

/// Requests in flight per warp the build tries ([`TimeFit::mlp`]).
pub const MLP_CANDIDATES: [f64; 5] = [1.0, 2.0, 4.0, 8.0, 16.0];

/// Fits the time calibration and the warps' memory-level parallelism on the profile's
/// measured times: for each candidate of [`MLP_CANDIDATES`] the model's times of the
/// profiled launches are calibrated ([`TimeFit::fit`]), and the one with the least median
/// relative error is kept (of equal ones the fewest in flight). (Earlier a larger candidate had to beat a smaller one by a
/// tenth; on the H200 study that kept one request at a time for the matrix products, whose
/// times two explain better, and picked 64-thread blocks where 32x2 and 32x4 are fastest.)
fn fit_time(prog: &RationalProgram, usable: &[(&Sample, &Counters)]) -> TimeFit {
    fit_time_with(prog, usable, &MLP_CANDIDATES)
}

/// [`fit_time`] over the requests in flight `mlps` (the stability check of
/// [`crate::decide`] fits one alone).
pub(crate) fn fit_time_with(
    prog: &RationalProgram,
    usable: &[(&Sample, &Counters)],
    mlps: &[f64],
) -> TimeFit {
    let mut prog = prog.clone();
    let domains: Vec<Option<f64>> = usable
        .iter()
        .map(|(smp, _)| prog.domain_threads(&smp.sizes))
        .collect();
    let mut fits: Vec<TimeFit> = Vec::new();
    for &mlp in mlps {
        prog.time_fit.mlp = mlp;
        let points: Vec<(f64, f64, f64)> = usable
            .iter()
            .zip(&domains)
            .map(|((smp, c), domain)| {
                let m = prog.metrics_in(&smp.sizes, smp.block, smp.grid, *domain);
                let launch = Launch {
                    block: smp.block,
                    grid: smp.grid,
                    regs_per_thread: prog.regs_per_thread,
                    smem_per_block: prog
                        .smem_at(&smp.sizes, smp.block)
                        .unwrap_or(prog.smem_per_block),
                };
                let t = predict(&prog.device, &launch, &m).time_us;
                (t, c.time_ms * 1000.0, metrics::warps(smp.block, smp.grid))
            })
            .collect();
        // A loop kernel's launched warps vary apart from its data (docs/model.md, "Work the
        // warps do in turn"): only there is a cost per warp told from the work.
        let mut f = if prog.threads_loop {
            TimeFit::fit_warps(&points)
        } else {
            let pairs: Vec<(f64, f64)> = points.iter().map(|&(t, y, _)| (t, y)).collect();
            TimeFit::fit(&pairs)
        };
        f.mlp = mlp;
        fits.push(f);
    }
    // The least error wins; of equal ones the first (fewest requests in flight).
    fits.into_iter()
        .filter(|f| f.median_rel_error.is_finite())
        .reduce(|a, b| {
            if b.median_rel_error < a.median_rel_error {
                b
            } else {
                a
            }
        })
        .unwrap_or_default()
}

impl RationalProgram {
    /// The per-warp metrics at `data` for block `b` launched as grid `g`: the fitted totals
    /// divided by the launch's warps, the fitted ratios as they are (all clamped at 0:
    /// counts are never negative, whatever a fitted function does far outside its data).
    pub fn metrics_at(&self, data: &[i64], b: [u32; 3], g: [u32; 3]) -> WarpMetrics {
        self.metrics_in(data, b, g, self.domain_threads(data))
    }

    /// Threads of the kernel's domain at `data` ([`metrics::domain_threads`]).
    pub fn domain_threads(&self, data: &[i64]) -> Option<f64> {
        metrics::domain_threads(&self.data, &self.shape().ok()?.grid, data)
    }

    /// Its grid, constraints and shared-memory formula, parsed once.
    pub fn shape(&self) -> Result<&LaunchShape> {
        self.parsed
            .get_or_init(|| {
                LaunchShape::parse(&self.data, &self.grid, &self.block, self.shmem.as_deref())
            })
            .as_ref()
            .map_err(|e| anyhow::anyhow!("kernel {}: {e}", self.kernel))
    }

    /// [`RationalProgram::metrics_at`] with the domain's threads at `data` given.
    fn metrics_in(
        &self,
        data: &[i64],
        b: [u32; 3],
        g: [u32; 3],
        domain: Option<f64>,
    ) -> WarpMetrics {
        let mut x: Vec<f64> = data.iter().map(|&v| v as f64).collect();
        for v in b.iter().take(usize::from(self.dim.clamp(1, 3))) {
            x.push(f64::from(*v).log2());
        }
        let mut held = x.clone();
        for (v, &max) in held.iter_mut().zip(&self.shares_held_at) {
            if *v > max {
                *v = max;
            }
        }
        let mut v = [0.0; METRICS.len()];
        for (i, name) in METRICS.iter().enumerate() {
            let at = if metrics::is_share(i) || self.held_per_thread.contains(*name) {
                &held
            } else {
                &x
            };
            v[i] = self
                .metrics
                .get(*name)
                .map(|f| f.eval(at).max(0.0))
                .unwrap_or(0.0);
        }
        let fp = metrics::warp_footprint(b);
        if let Some(r) = self.ratios_by_footprint.iter().find(|r| r.footprint == fp) {
            for (name, f) in r.fits() {
                if let Some(i) = METRICS.iter().position(|m| *m == name) {
                    v[i] = f.eval(&x[..data.len()]).max(0.0);
                }
            }
        }
        // Totals are fitted per thread of the domain (metrics.rs, "Per domain thread").
        let unit = metrics::total_unit(domain);
        for (i, x) in v.iter_mut().enumerate() {
            if self.per_domain_thread.contains(METRICS[i]) {
                *x *= unit;
            }
        }
        let mut v = metrics::per_warp_of(&v, b, g);
        // The work belongs to the warps inside the kernel's domain: those of blocks that
        // overhang it test a bound and exit (module doc of metrics.rs).
        let busy = if self.threads_loop {
            1.0
        } else {
            metrics::busy_fraction(domain, b, g)
        };
        for (i, x) in v.iter_mut().enumerate() {
            if metrics::is_total(i) {
                *x /= busy;
            }
        }
        WarpMetrics {
            inst: v[0],
            gld_inst: v[1],
            gst_inst: v[2],
            shared_inst: v[3],
            sync_inst: v[4],
            gld_sectors_per_req: v[5],
            gst_sectors_per_req: v[6],
            dram_bytes: v[7],
            gld_l1_hit_rate: v[8],
            mlp: self.time_fit.mlp,
            // A loop kernel's hits are re-reads of its share in a later pass: the L1 keeps
            // them only while the resident blocks' shares fit (klaraptor-model).
            l1_reuse_loop: if self.threads_loop { 1.0 } else { 0.0 },
        }
    }

    /// Every allowed candidate at `data`, ranked (the first is the choice): the model's
    /// ranking ([`RationalProgram::model_rank`]), with the profile's fastest shape
    /// ([`RationalProgram::profiled_best`]) moved first where the link's decision gave the
    /// choice to the profile ([`crate::decide`]) and that shape is allowed at `data`. The
    /// generated C's `kl_rank` and `kl_select` do the same.
    pub fn rank(&self, data: &[i64]) -> Result<Vec<Ranked>> {
        let mut ranked = self.model_rank(data)?;
        if self.profile_chooses() {
            if let Some(pb) = self.profiled_best(data) {
                if let Some(i) = ranked.iter().position(|r| r.block == pb) {
                    let r = ranked.remove(i);
                    ranked.insert(0, r);
                }
            }
        }
        Ok(ranked)
    }

    /// The shared memory of a block of shape `b` at `data`: [`Self::smem_per_block`] plus
    /// the [`Self::shmem`] formula's amount; `None` when the formula cannot be evaluated, is
    /// negative or does not fit 32 bits.
    pub fn smem_at(&self, data: &[i64], b: [u32; 3]) -> Option<u32> {
        let Some(e) = &self.shape().ok()?.shmem else {
            return Some(self.smem_per_block);
        };
        let env = FullEnv {
            labels: &self.data,
            data,
            block: b,
        };
        let v = e.eval(&env).ok().filter(|v| *v >= 0)?;
        u32::try_from(v).ok()?.checked_add(self.smem_per_block)
    }

    /// Whether the link's decision gives the choice to the profile's fastest shape.
    pub fn profile_chooses(&self) -> bool {
        self.decision
            .as_ref()
            .is_some_and(|d| d.chosen_by == crate::decide::ChosenBy::ProfiledBest)
            && !self.profiled.is_empty()
    }

    /// Whether the link's decision keeps the program's own launch ([`crate::decide`]: the
    /// profile measured the program's block faster than the model's choices): the generated
    /// C then registers no model, so the runtime keeps the launch's dims as the program made
    /// them (its log says `source=program`), and refines nothing.
    pub fn program_chooses(&self) -> bool {
        self.decision
            .as_ref()
            .is_some_and(|d| d.chosen_by == crate::decide::ChosenBy::Program)
    }

    /// Every allowed candidate at `data`, ranked by the model's predicted time alone.
    pub fn model_rank(&self, data: &[i64]) -> Result<Vec<Ranked>> {
        if data.len() != self.data.len() {
            bail!(
                "kernel {} takes {} data value(s) ({}), {} given",
                self.kernel,
                self.data.len(),
                self.data.join(", "),
                data.len()
            );
        }
        let shape = self.shape()?;
        let (grid, cons) = (&shape.grid, &shape.constraints);
        let domain = metrics::domain_threads(&self.data, grid, data);
        let mut out = Vec::new();
        for &b in &self.candidates {
            if !allowed_at(cons, &self.data, data, b) {
                continue;
            }
            let env = FullEnv {
                labels: &self.data,
                data,
                block: b,
            };
            let mut g = [1u32; 3];
            let mut ok = true;
            for (i, e) in grid.iter().enumerate().take(3) {
                match e.eval(&env) {
                    Ok(v) if v >= 1 && v <= i64::from(self.device.max_grid_dim[i]) => {
                        g[i] = v as u32
                    }
                    _ => ok = false,
                }
            }
            if !ok {
                continue;
            }
            // Shared memory that follows the block: a shape over the device's limit per
            // block (the default, without opting in) cannot launch.
            // (A kernel's own amount is not checked: it may opt in to more.)
            let Some(smem) = self
                .smem_at(data, b)
                .filter(|s| self.shmem.is_none() || *s <= self.device.shared_memory.per_block)
            else {
                continue;
            };
            let m = self.metrics_in(data, b, g, domain);
            let launch = Launch {
                block: b,
                grid: g,
                regs_per_thread: self.regs_per_thread,
                smem_per_block: smem,
            };
            let mut p = predict(&self.device, &launch, &m);
            if !p.time_us.is_finite() {
                continue;
            }
            let model_us = p.time_us;
            p.time_us = self.time_fit.apply_warps(model_us, metrics::warps(b, g));
            out.push(Ranked {
                block: b,
                grid: g,
                metrics: m,
                prediction: p,
                model_us,
            });
        }
        // Each place is the C program's scan (`kl_rank`) over the candidates left, in their
        // order (a tie within a relative 1e-9 is not transitive, so no sort can promise the
        // same order): the first is the choice, the next ones what the runtime's refinement
        // tries after it.
        let mut ranked = Vec::with_capacity(out.len());
        while let Some(i) = choose(&out) {
            ranked.push(out.remove(i));
        }
        Ok(ranked)
    }

    /// The profile's fastest shape at the profiled size nearest `data` (the generated C's
    /// `kl_profiled_best`): nearest in the logarithm of the data values, on a tie the larger
    /// size ([`crate::validate::profiled_best`]'s rule). `None` without a table.
    pub fn profiled_best(&self, data: &[i64]) -> Option<[u32; 3]> {
        let samples: Vec<crate::validate::ProfileSample> = self
            .profiled
            .iter()
            .map(|p| (p.sizes.clone(), p.block, 1.0))
            .collect();
        crate::validate::profiled_best(&samples, data).map(|b| b.block)
    }

    /// The manifest and C file names.
    pub fn files(&self) -> ProgramFiles {
        ProgramFiles {
            c_name: self.c_name.clone(),
            json_name: self.c_name.replace(".c", ".json"),
        }
    }

    /// Writes the C file and the manifest into `dir`.
    pub fn write(&self, dir: &Path) -> Result<ProgramFiles> {
        let files = self.files();
        std::fs::write(dir.join(&files.c_name), self.to_c()?)?;
        std::fs::write(
            dir.join(&files.json_name),
            serde_json::to_string_pretty(self)?,
        )?;
        Ok(files)
    }

    /// The program as C99.
    pub fn to_c(&self) -> Result<String> {
        let mut c = String::new();
        let p = &self.provenance;
        // Every string here comes from a profile entry, a device description or the
        // environment, none of which klaraptor trusts: comment text and literals are made by
        // klaraptor_model::c_text, so that no value can leave them (docs/security.md).
        let header = format!(
            "Rational program of kernel {} ({}) for {}.\n\nGenerated by {} on {}.\nProfile: {} samples ({} failed), captured {} by {}, at sizes {:?}\n  ({}); device code hash {}.",
            self.kernel,
            self.mangled,
            self.device.name,
            p.generated_by,
            p.generated_at,
            p.samples,
            p.failed_samples,
            p.captured_at,
            p.collector,
            p.profile_sizes,
            self.data.join(", "),
            p.code_hash,
        );
        c.push_str("/*");
        for line in header.lines() {
            let line = comment_text(line);
            let _ = writeln!(c, " *{}{line}", if line.is_empty() { "" } else { " " });
        }
        let _ = writeln!(
            c,
            " * Model: MWP-CWP (klaraptor-model), device description below; occupancy from\n *   {} registers per thread and {} bytes of shared memory per block.\n * Selection: the smallest predicted time over the candidates the kernel's constraints\n *   and the current device allow; ties (relative 1e-9) go to more threads per block,\n *   then larger bx, then larger by.\n */",
            self.regs_per_thread,
            self.smem_per_block
        );
        c.push_str("#include <stddef.h>\n#include <stdint.h>\n#include <math.h>\n#include \"klaraptor.h\"\n\n");
        c.push_str(C_PRELUDE);
        c.push('\n');
        c.push_str(C_MODEL);
        c.push('\n');
        c.push_str(&device_to_c(&self.device, "kl_dev"));
        let _ = writeln!(
            c,
            "/* Where the profile came from, as the entry says it: collector, capture time, the\n * klaraptor-cc that generated this program and when. */\nKL_UNUSED static const char *const kl_provenance[4] = {{ {}, {}, {}, {} }};",
            string_literal(&p.collector),
            string_literal(&p.captured_at),
            string_literal(&p.generated_by),
            string_literal(&p.generated_at),
        );
        c.push('\n');
        // Fitted metrics.
        let vars = {
            let mut v: Vec<String> = self.data.clone();
            for b in ["bx", "by", "bz"]
                .iter()
                .take(usize::from(self.dim.clamp(1, 3)))
            {
                v.push(b.to_string());
            }
            v
        };
        for name in METRICS {
            let f = self
                .metrics
                .get(name)
                .with_context(|| format!("metric {name} missing"))?;
            c.push_str(&f.to_c(&format!("kl_fit_{name}"))?);
            c.push('\n');
        }
        for (k, r) in self.ratios_by_footprint.iter().enumerate() {
            for (name, f) in r.fits() {
                let _ = writeln!(
                    c,
                    "/* {name} of warps of {}x{}x{} threads, held to [{:?}, {:?}] */",
                    r.footprint[0], r.footprint[1], r.footprint[2], f.min, f.max
                );
                c.push_str(&f.f.to_c(&format!("kl_fit_{name}_w{k}"))?);
                c.push('\n');
            }
        }
        // Candidates.
        let _ = writeln!(
            c,
            "/* Candidate block shapes ({} of them, {}-D{}). */\nstatic const uint32_t kl_candidates[][3] = {{",
            self.candidates.len(),
            self.dim,
            self.barrier_cap.as_ref().map_or(String::new(), |b| format!(
                "; blocks wait at barriers: at most {} threads, those of the fastest shape \
                 measured at the largest profiled size",
                b.threads
            ))
        );
        for chunk in self.candidates.chunks(6) {
            let row: Vec<String> = chunk
                .iter()
                .map(|b| format!("{{{}, {}, {}}}", b[0], b[1], b[2]))
                .collect();
            let _ = writeln!(c, "  {},", row.join(", "));
        }
        c.push_str("};\n\n");
        // Grid formula and constraints.
        let shape = self.shape()?;
        crate::codegen::c_grid_and_constraints(
            &mut c,
            "",
            &self.data,
            &shape.grid,
            &shape.constraints,
        );
        c.push('\n');
        // Shared memory that follows the block.
        match &self.shmem {
            None => c.push_str("/* The block's shared memory: the kernel's own, whatever the shape. */\nstatic int64_t kl_smem(const int64_t *data, const uint32_t block[3]) {\n  (void)data; (void)block;\n  return"),
            Some(f) => {
                let e = shape.shmem.as_ref().expect("parsed with the program");
                let _ = writeln!(
                    c,
                    "/* The block's shared memory: static plus shmem({f}); -1 when it cannot be evaluated. */\nstatic int64_t kl_smem(const int64_t *data, const uint32_t block[3]) {{\n  int err = 0;"
                );
                c.push_str(&crate::codegen::c_bindings(&self.data));
                let _ = writeln!(
                    c,
                    "  const int64_t dyn = {};\n  if (err || dyn < 0 || dyn > INT64_C(4294967295)) return -1;",
                    crate::codegen::c_int(e)
                );
                c.push_str("  return dyn +");
            }
        }
        let _ = writeln!(c, " INT64_C({});\n}}\n", self.smem_per_block);
        // Metrics at a shape.
        let nb = usize::from(self.dim.clamp(1, 3));
        let mut args: Vec<String> = (0..self.data.len())
            .map(|i| format!("(double)data[{i}]"))
            .collect();
        for i in 0..nb {
            args.push(format!("log2((double)block[{i}])"));
        }
        let args = args.join(", ");
        // Shares are evaluated with the data held to the largest profiled sizes.
        let mut held: Vec<String> = (0..self.data.len())
            .map(|i| match self.shares_held_at.get(i) {
                Some(h) => format!("kl_min_held((double)data[{i}], {h:?})"),
                None => format!("(double)data[{i}]"),
            })
            .collect();
        for i in 0..nb {
            held.push(format!("log2((double)block[{i}])"));
        }
        let held = held.join(", ");
        let _ = vars;
        c.push_str("static double kl_nonneg(double v) { return v > 0.0 ? v : 0.0; }\n");
        c.push_str("static double kl_clamp(double v, double lo, double hi) { return v < lo ? lo : v > hi ? hi : v; }\n");
        c.push_str(
            "static double kl_min_held(double v, double held) { return v > held ? held : v; }\n\n",
        );
        c.push_str("/* The per-warp metrics at data for block launched as grid (the fits take log2 of the\n * block dimensions): fitted launch totals\n * divided by the launch's warps (warp-level counts also by its lane occupancy),\n * fitted ratios as they are (clamped at 0). */\nstatic void kl_metrics_at(const int64_t *data, const uint32_t block[3], const uint32_t grid[3], kl_metrics *m) {\n");
        c.push_str("  const uint64_t threads = (uint64_t)block[0] * block[1] * block[2];\n  const uint64_t warps_per_block = (threads + 31) / 32;\n  double warps = (double)grid[0] * (double)grid[1] * (double)grid[2] * (double)warps_per_block;\n  if (warps < 1.0) warps = 1.0;\n  /* warp-level counts were fitted times min(32, threads) / 32 */\n  const double lanes = (double)(threads < 32 ? threads : 32) / 32.0;\n  /* the share of the launch's threads inside the kernel's domain (the grid formula at a\n   * block of one thread): the work belongs to them (busy_fraction in metrics.rs) */\n  double busy = 1.0;\n  /* launch totals were fitted per thread of the domain (metrics.rs: total_unit) */\n  double unit = 1.0;\n  {\n    static const uint32_t one[3] = {1, 1, 1};\n    uint32_t dom[3];\n    if (kl_grid(data, one, dom) == 0) {\n      double domain = 1.0, launched = 1.0;\n      domain *= (double)dom[0]; domain *= (double)dom[1]; domain *= (double)dom[2];\n      if (domain >= 1.0) unit = domain;\n      launched *= (double)grid[0] * (double)block[0];\n      launched *= (double)grid[1] * (double)block[1];\n      launched *= (double)grid[2] * (double)block[2];\n      if (launched > 0.0) {\n        busy = domain / launched;\n        busy = busy < 1e-6 ? 1e-6 : busy > 1.0 ? 1.0 : busy;\n      }\n    }\n  }\n  (void)unit;\n");
        if self.threads_loop {
            c.push_str("  /* the launched threads do not follow the data (a grid-stride loop, one block per row):\n   * every launched thread loops over its share, the work belongs to all of them */\n  busy = 1.0;\n");
        }
        for (i, name) in METRICS.iter().enumerate() {
            let unit = if self.per_domain_thread.contains(*name) {
                " * unit"
            } else {
                ""
            };
            // A thread's work held at the largest profiled sizes (boundary_held).
            let (at, note) = if self.held_per_thread.contains(*name) {
                (
                    &held,
                    " /* a thread's work at the data held to the largest profiled sizes */",
                )
            } else {
                (&args, "")
            };
            if metrics::is_warp_count(i) {
                let _ = writeln!(
                    c,
                    "  m->{name} = kl_nonneg(kl_fit_{name}({at})){unit} / lanes / warps / busy;{note}"
                );
            } else if metrics::is_total(i) {
                let _ = writeln!(
                    c,
                    "  m->{name} = kl_nonneg(kl_fit_{name}({at})){unit} / warps / busy;{note}"
                );
            } else if metrics::is_share(i) {
                let _ = writeln!(
                    c,
                    "  m->{name} = kl_nonneg(kl_fit_{name}({held})); /* at the data held to the largest profiled sizes */"
                );
            } else {
                let _ = writeln!(c, "  m->{name} = kl_nonneg(kl_fit_{name}({args}));");
            }
        }
        let _ = writeln!(
            c,
            "  m->mlp = {:?}; /* requests a warp keeps in flight together (fitted on the profile's times) */",
            self.time_fit.mlp
        );
        let _ = writeln!(
            c,
            "  m->l1_reuse_loop = {}; /* {} */",
            if self.threads_loop { "1.0" } else { "0.0" },
            if self.threads_loop {
                "a loop kernel: its L1 hits are re-reads of its share in a later pass"
            } else {
                "its L1 hits come from neighbouring requests"
            }
        );
        if !self.ratios_by_footprint.is_empty() {
            let dargs: Vec<String> = (0..self.data.len())
                .map(|i| format!("(double)data[{i}]"))
                .collect();
            let dargs = dargs.join(", ");
            c.push_str("  /* sectors per request by warp footprint (metrics.rs: warp_footprint) */\n  {\n    const uint32_t wx = block[0] < 1 ? 1 : block[0] > 32 ? 32 : block[0];\n    const uint32_t cy = 32 / wx < 1 ? 1 : 32 / wx;\n    const uint32_t wy = block[1] < 1 ? 1 : block[1] > cy ? cy : block[1];\n    const uint32_t cz = 32 / (wx * wy) < 1 ? 1 : 32 / (wx * wy);\n    const uint32_t wz = block[2] < 1 ? 1 : block[2] > cz ? cz : block[2];\n");
            for (k, r) in self.ratios_by_footprint.iter().enumerate() {
                let [x, y, z] = r.footprint;
                let _ = writeln!(
                    c,
                    "    {}if (wx == {x} && wy == {y} && wz == {z}) {{",
                    if k == 0 { "" } else { "else " }
                );
                for (name, f) in r.fits() {
                    let _ = writeln!(
                        c,
                        "      m->{name} = kl_nonneg(kl_clamp(kl_fit_{name}_w{k}({dargs}), {:?}, {:?}));",
                        f.min, f.max
                    );
                }
                c.push_str("    }\n");
            }
            c.push_str("  }\n");
        }
        c.push_str("}\n\n");
        // Shared memory that follows the block: within the device's limit per block (the
        // default, without opting in). A kernel's own amount is not checked: it may opt in.
        let smem_filter = if self.shmem.is_some() {
            "    /* shared memory within the device's limit per block (the default, without opting in) */\n    if (smem < 0 || smem > (int64_t)(dev && dev->smem_per_block > 0 ? (uint32_t)dev->smem_per_block : kl_dev.smem_per_block)) continue;\n"
        } else {
            "    if (smem < 0) continue;\n"
        };
        let _ = writeln!(
            c,
            "/* The model's k best distinct shapes for data on dev, best first, and their predicted\n * microseconds (klaraptor_model.rank: the runtime times them on the first launches). Each\n * place is filled by one scan in candidate order: a shape faster by more than a relative\n * 1e-9 replaces the best; one within it replaces it when it has more threads, then larger\n * bx, then larger by. Returns how many shapes the model may choose from. */\nstatic int kl_rank(const int64_t *data, const klaraptor_device *dev, int k, uint32_t (*blocks)[3], double *predicted_us) {{\n  const size_t n = sizeof kl_candidates / sizeof kl_candidates[0];\n  double ts[sizeof kl_candidates / sizeof kl_candidates[0]];\n  unsigned char ok[sizeof kl_candidates / sizeof kl_candidates[0]];\n  int total = 0;\n  for (size_t i = 0; i < n; i++) {{\n    const uint32_t *b = kl_candidates[i];\n    const uint64_t threads = (uint64_t)b[0] * b[1] * b[2];\n    ok[i] = 0;\n    if (dev && ((dev->max_threads_per_block > 0 && threads > (uint64_t)dev->max_threads_per_block) ||\n                (dev->max_block_dim[0] > 0 && (b[0] > (uint32_t)dev->max_block_dim[0] || b[1] > (uint32_t)dev->max_block_dim[1] || b[2] > (uint32_t)dev->max_block_dim[2]))))\n      continue;\n    if (!kl_allowed(data, b)) continue;\n    uint32_t g[3];\n    if (kl_grid(data, b, g) != 0) continue;\n    if (g[0] > kl_dev.max_grid_dim[0] || g[1] > kl_dev.max_grid_dim[1] || g[2] > kl_dev.max_grid_dim[2]) continue;\n    const int64_t smem = kl_smem(data, b);\n{}    kl_metrics m;\n    kl_metrics_at(data, b, g, &m);\n    kl_launch l;\n    l.block[0] = b[0]; l.block[1] = b[1]; l.block[2] = b[2];\n    l.grid[0] = g[0]; l.grid[1] = g[1]; l.grid[2] = g[2];\n    l.regs_per_thread = {};\n    l.smem_per_block = (uint32_t)smem;\n    kl_prediction p;\n    kl_predict(&kl_dev, &l, &m, &p);\n    /* calibrated against the profile's measured times (TimeFit), with a loop kernel's cost per\n     * launched warp (warps in turn) */\n    const double kl_warps = (double)g[0] * (double)g[1] * (double)g[2] * (double)((threads + 31) / 32);\n    const double t = {:?} * p.time_us + {:?} + {:?} * kl_warps;\n    if (!(t == t) || t == INFINITY) continue;\n    ts[i] = t;\n    ok[i] = 1;\n    total++;\n  }}\n  /* each place: the selection rule of the model (kl_choose) over the shapes left */\n  for (int j = 0; j < k; j++) {{\n    double best = INFINITY;\n    const int best_i = kl_choose(ts, ok, kl_candidates, n, &best);\n    if (best_i < 0) break;\n    ok[best_i] = 0;\n    blocks[j][0] = kl_candidates[best_i][0]; blocks[j][1] = kl_candidates[best_i][1]; blocks[j][2] = kl_candidates[best_i][2];\n    if (predicted_us) predicted_us[j] = best;\n  }}\n  return total;\n}}\n\n/* The entry point the runtime calls for the model's choice (klaraptor_model.select): the\n * first of kl_rank. */\nstatic int kl_select(const int64_t *data, const klaraptor_device *dev, uint32_t block[3], double *predicted_us) {{\n  uint32_t b[1][3];\n  double t = 0;\n  if (kl_rank(data, dev, 1, b, &t) < 1) return 1;\n  block[0] = b[0][0]; block[1] = b[0][1]; block[2] = b[0][2];\n  if (predicted_us) *predicted_us = t;\n  return 0;\n}}\n",
            smem_filter, self.regs_per_thread, self.time_fit.scale, self.time_fit.overhead_us, self.time_fit.warp_us
        );
        if self.profile_chooses() {
            // The link's decision (crate::decide): the profiled best is ranked first where it
            // is allowed at the launch's data, the model's order after it.
            let scan = "  for (int j = 0; j < k; j++) {\n    double best = INFINITY;";
            let first = "  /* The link decided that the profile's fastest shape chooses (klaraptor inspect:\n   * chosen by: profiled best): it is ranked first where the data allow it. */\n  int j0 = 0;\n  if (k > 0) {\n    uint32_t pb[3];\n    if (kl_profiled_best(data, dev, pb) == 0) {\n      for (size_t i = 0; i < n; i++) {\n        if (!ok[i] || kl_candidates[i][0] != pb[0] || kl_candidates[i][1] != pb[1] || kl_candidates[i][2] != pb[2]) continue;\n        ok[i] = 0;\n        blocks[0][0] = pb[0]; blocks[0][1] = pb[1]; blocks[0][2] = pb[2];\n        if (predicted_us) predicted_us[0] = ts[i];\n        j0 = 1;\n        break;\n      }\n    }\n  }\n  for (int j = j0; j < k; j++) {\n    double best = INFINITY;";
            if !c.contains(scan) {
                bail!("the generated kl_rank has no scan to put the profiled best before");
            }
            c = c.replacen(scan, first, 1);
            let decl = "static int kl_rank(";
            c = c.replacen(
                decl,
                &format!("static int kl_profiled_best(const int64_t *data, const klaraptor_device *dev, uint32_t block[3]);\n\n{decl}"),
                1,
            );
        }
        let profiled = self.profiled_c(&mut c);
        // The oldest model ABI that holds what the program fills in (3: the SM count; 4: the
        // GPU a transferred program was fitted on), so that objects compiled by an older
        // klaraptor-cc, whose runtime reads up to 3, still take a program of their own GPU.
        let abi = if self.transferred_from.is_some() {
            4
        } else {
            3
        };
        // The link's decision that the program keeps its own launch (crate::decide): the
        // model is there for people (`klaraptor inspect`), never registered.
        let register = if self.program_chooses() {
            "/* The link decided that the program's own launch chooses (klaraptor inspect: chosen\n * by: program's own): no model is registered, so the runtime keeps the launch's dims. */\n__attribute__((unused)) static void kl_register_model(void) { (void)kl_model; }"
        } else {
            "__attribute__((constructor)) static void kl_register_model(void) { klaraptor_register_model(&kl_model); }"
        };
        let _ = writeln!(
            c,
            "\n/* model ABI {abi}: the oldest that holds what this program fills in */\nstatic const klaraptor_model kl_model = {{ {abi}, {}, {}, kl_select, {}, kl_rank, {profiled}, {}, {}, {} }};\n\n{register}",
            string_literal(&self.mangled),
            string_literal(&self.device.name),
            string_literal(&self.c_name),
            string_literal(&self.provenance.code_hash),
            self.device.sm_count,
            self.transferred_from
                .as_deref()
                .map_or("NULL".to_string(), string_literal)
        );
        Ok(c)
    }
}

impl RationalProgram {
    /// Writes `kl_profiled_best` (the table of [`RationalProgram::profiled`] and the pick of
    /// [`RationalProgram::profiled_best`]) into `c`; returns the name the model registers, or
    /// `NULL` without a table.
    fn profiled_c(&self, c: &mut String) -> &'static str {
        let n = self.data.len();
        let rows: Vec<&ProfiledAt> = self
            .profiled
            .iter()
            .filter(|p| p.sizes.len() == n)
            .collect();
        if rows.is_empty() || n == 0 {
            return "NULL";
        }
        let sizes: Vec<String> = rows
            .iter()
            .map(|p| {
                let v: Vec<String> = p.sizes.iter().map(|x| format!("{x}LL")).collect();
                format!("{{{}}}", v.join(", "))
            })
            .collect();
        let blocks: Vec<String> = rows
            .iter()
            .map(|p| format!("{{{}, {}, {}}}", p.block[0], p.block[1], p.block[2]))
            .collect();
        let _ = writeln!(
            c,
            "\n/* The shape the profile measured fastest at each profiled size, and the pick for a launch:\n * the size nearest its data in the logarithm of the values (below 1 taken as 1), on a tie\n * the larger (product of the values, then the values in order). One of the candidates the\n * runtime's refinement times (klaraptor_model.profiled_best). */\nstatic const int64_t kl_pb_sizes[{m}][{n}] = {{ {} }};\nstatic const uint32_t kl_pb_blocks[{m}][3] = {{ {} }};\nstatic double kl_pb_ln(int64_t v) {{ return log(v < 1 ? 1.0 : (double)v); }}\nstatic int kl_profiled_best(const int64_t *data, const klaraptor_device *dev, uint32_t block[3]) {{\n  (void)dev;\n  int best = -1;\n  double bd = 0;\n  for (int i = 0; i < {m}; i++) {{\n    double d = 0;\n    for (int j = 0; j < {n}; j++) {{\n      const double e = kl_pb_ln(kl_pb_sizes[i][j]) - kl_pb_ln(data[j]);\n      d += e * e;\n    }}\n    int better = best < 0;\n    if (!better) {{\n      double m = d > bd ? d : bd;\n      const double tol = 1e-9 * (m > 1e-12 ? m : 1e-12);\n      if (fabs(d - bd) <= tol) {{\n        double wi = 1, wb = 1;\n        for (int j = 0; j < {n}; j++) {{ wi *= (double)kl_pb_sizes[i][j]; wb *= (double)kl_pb_sizes[best][j]; }}\n        if (wi != wb) better = wi > wb;\n        else for (int j = 0; j < {n}; j++) if (kl_pb_sizes[i][j] != kl_pb_sizes[best][j]) {{ better = kl_pb_sizes[i][j] > kl_pb_sizes[best][j]; break; }}\n      }} else {{\n        better = d < bd;\n      }}\n    }}\n    if (better) {{ best = i; bd = d; }}\n  }}\n  if (best < 0) return 1;\n  block[0] = kl_pb_blocks[best][0]; block[1] = kl_pb_blocks[best][1]; block[2] = kl_pb_blocks[best][2];\n  return 0;\n}}",
            sizes.join(", "),
            blocks.join(", "),
            m = rows.len(),
        );
        "kl_profiled_best"
    }
}

/// The index of the chosen shape of `r` (klaraptor-model's [`klaraptor_model::choose`], the
/// selection rule the generated C's `kl_rank` applies: the smallest predicted time, ties
/// within a relative 1e-9 to more threads per block, then larger bx, then larger by).
pub fn choose(r: &[Ranked]) -> Option<usize> {
    let times: Vec<f64> = r.iter().map(|x| x.prediction.time_us).collect();
    let blocks: Vec<[u32; 3]> = r.iter().map(|x| x.block).collect();
    klaraptor_model::choose(&times, &blocks)
}

/// Compiles a program written by [`RationalProgram::write`] in `dir`; returns the object.
pub fn compile(dir: &Path, files: &ProgramFiles, verbose: bool) -> Result<PathBuf> {
    let inc = dir.join("include");
    std::fs::create_dir_all(&inc)?;
    std::fs::write(inc.join("klaraptor.h"), crate::codegen::KLARAPTOR_H)?;
    let src = dir.join(&files.c_name);
    let obj = dir.join(files.c_name.replace(".c", ".o"));
    let include = format!("-I{}", inc.display());
    crate::host_cc::HostCc::from_env()?.compile(
        &["-std=c99", "-O2", "-fPIC", "-ffp-contract=off", &include],
        &src,
        &obj,
        verbose,
    )?;
    Ok(obj)
}

/// Reads every manifest of a models directory.
pub fn load_dir(dir: &Path) -> Result<Vec<(PathBuf, RationalProgram)>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let p = e?.path();
        if p.extension().is_some_and(|x| x == "json") {
            let text = std::fs::read_to_string(&p)?;
            let prog: RationalProgram = serde_json::from_str(&text)
                .with_context(|| format!("{}: not a klaraptor rational program", p.display()))?;
            out.push((p, prog));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

#[cfg(test)]
mod time_fit_tests {
    use super::TimeFit;

    #[test]
    fn recovers_the_overhead() {
        // measured = model + 6 µs (a launch overhead that dominates small launches)
        let pts: Vec<(f64, f64)> = [1.0, 2.0, 4.0, 8.0, 30.0, 100.0]
            .iter()
            .map(|&m| (m, m + 6.0))
            .collect();
        let f = TimeFit::fit(&pts);
        assert_eq!(f.scale, 1.0);
        assert!((f.overhead_us - 6.0).abs() < 1e-9, "{f:?}");
        assert!(f.median_rel_error < 1e-9);
        assert!(f.model_median_rel_error > 0.1);
        assert!((f.apply(10.0) - 16.0).abs() < 1e-9);
    }

    #[test]
    fn a_model_slower_than_measured_gets_no_overhead() {
        // measured = model / 2: no overhead can help, and none below zero is taken.
        let pts: Vec<(f64, f64)> = [2.0, 4.0, 6.0].iter().map(|&m| (m, m / 2.0)).collect();
        let f = TimeFit::fit(&pts);
        assert_eq!(f.overhead_us, 0.0);
        assert!((f.median_rel_error - 1.0).abs() < 1e-9, "{f:?}");
        // No usable point: no overhead, an unknown error.
        let none = TimeFit::fit(&[(f64::NAN, 1.0), (1.0, 0.0)]);
        assert_eq!((none.samples, none.overhead_us), (0, 0.0));
        assert!(none.median_rel_error.is_nan());
    }
}

/// The stem of a rational program's files: the kernel's name, and for an instance of a
/// template kernel its template arguments too (as [`klaraptor_spec::names`] reads them), so that two
/// instances linked into one binary (`stencil1d<3>`, `stencil1d<16>`) get a file each:
/// `stencil1d-3`, `stencil1d-16`, `scale-float-m2` for `scale<float,-2>`. An instance with
/// an argument that is not a word (a qualified or pointer type, a cast literal) or that
/// cannot be read gets a hash of its mangled name (`apply-t5c1e2a7b`).
pub fn program_stem(name: &str, mangled: &str) -> String {
    let base = slug(name);
    let word = |a: &str| {
        let a = a
            .strip_prefix('-')
            .map_or(a.to_string(), |d| format!("m{d}"));
        (!a.is_empty() && a.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_')).then_some(a)
    };
    match klaraptor_spec::names::template_args(name, mangled) {
        None => base,
        Some(args) => {
            match args.and_then(|a| a.iter().map(|x| word(x)).collect::<Option<Vec<_>>>()) {
                Some(words) if !words.is_empty() => format!("{base}-{}", words.join("-")),
                _ => {
                    let h = mangled.bytes().fold(0x811c_9dc5_u32, |h, b| {
                        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
                    });
                    format!("{base}-t{h:08x}")
                }
            }
        }
    }
}

#[cfg(test)]
mod stem_tests {
    use super::program_stem as stem;

    #[test]
    fn template_instances_get_a_file_each() {
        assert_eq!(stem("saxpy", "_Z5saxpyfPKfPfi"), "saxpy");
        assert_eq!(stem("k", "k"), "k");
        assert_eq!(
            stem("stencil1d", "_Z9stencil1dILi3EEvPKfPfi"),
            "stencil1d-3"
        );
        assert_eq!(
            stem("stencil1d", "_Z9stencil1dILi16EEvPKfPfi"),
            "stencil1d-16"
        );
        assert_eq!(stem("scale", "_Z5scaleIfLin2EEvPT_i"), "scale-float-m2");
        assert_eq!(stem("scale", "_ZN2ns5scaleIdEEvPT_i"), "scale-double");
        assert_eq!(stem("scale", "_Z5scaleILj16EEvPfi"), "scale-16u");
        // A class type is a word too; a qualified or pointer type is not: a hash of the
        // mangled name.
        assert_eq!(stem("apply", "_Z5applyI4PlusEvPfi"), "apply-Plus");
        let a = stem("apply", "_Z5applyIN2ns4PlusEEvPfi");
        let b = stem("apply", "_Z5applyIPfEvPfi");
        assert!(
            a.starts_with("apply-t") && b.starts_with("apply-t") && a != b,
            "{a} {b}"
        );
        // A name with digits, and parameters after it, are no template.
        assert_eq!(stem("k2", "_Z2k2PKfi"), "k2");
    }
}
