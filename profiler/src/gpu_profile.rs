//! Profiling the kernels of a link on this machine's GPU when other links may be doing the
//! same (`make -j`, Ninja): one profiler per GPU at a time, another try when the GPU is busy
//! with someone else's profiler, and no partial profile stored as complete.
//!
//! For each kernel, in turn:
//! 1. take the GPU's lock ([`crate::gpu_lock`], keyed by the GPU's UUID),
//!    waiting at most [`Settings::wait_bound`] (`KLARAPTOR_GPU_WAIT`); a link that waits
//!    says once whom for. Past the bound the kernel keeps the program's launch;
//! 2. look in the database again: a kernel another link profiled meanwhile (the same object
//!    linked into several executables) is reused;
//! 3. run the kernel's recipe at each profile size, one process per size, or one process for
//!    all of them when the recipe says `{SIZES}` (the runtime then sweeps each of them:
//!    `KLARAPTOR_PROFILE_MAX_SIZES` at least their number); a command another kernel of this
//!    link already ran is not run again: a run profiles every planned kernel it launches. A run
//!    whose samples carry a transient collector error (`CUPTI_ERROR_HARDWARE_BUSY`: another
//!    process, e.g. Nsight Compute, holds the GPU's counters) is run again after a pause
//!    that doubles, for at most [`Settings::busy_bound`] (`KLARAPTOR_GPU_BUSY_RETRY`).
//!    A run in which a shape faults (an illegal address: the process's CUDA context is lost,
//!    and nothing after it in that process can run) is stopped there by the profiling
//!    runtime, which says so in `stopped.tsv`; the command is then run again in a new process
//!    that resumes it (`KLARAPTOR_PROFILE_SKIP`): without the shapes the runs have already
//!    (measured, refused, or faulted: the faulting shape is not run again), and with the
//!    shapes of the sweep that faulted run one per collector request, so that the next fault
//!    costs no other shape its sample (in a run of several sizes, the sizes it has finished
//!    are not swept again, the one that faulted goes on without the shapes done, the later ones
//!    are swept as in a first run). Each restart settles at least the shape that faulted;
//!    after [`Settings::max_restarts`] (`KLARAPTOR_PROFILE_RESTARTS`, per size of the run),
//!    or a restart that changed nothing, the shapes left are recorded as not measured. The
//!    records of the runs are merged;
//! 4. store the entry: complete when every profile size left samples and no sample failed
//!    for the collector's or the GPU's reasons (a shape the kernel cannot run is a valid
//!    sample), else marked incomplete (never used for a model; profiled again by the next
//!    link that can), with a warning that quotes the collector's own error, with the kernel,
//!    size and shape;
//! 5. release the lock.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::db::ProfileDb;
use crate::gpu_lock::{self, Acquired, GpuLock};
use crate::record::{self, DeviceId, Entry, KernelId, Sample, FORMAT_VERSION};
use anyhow::{anyhow, bail, Context, Result};

use crate::plan::{RecipeRun, ResumedSweep, RunEnv};
use klaraptor_spec::link::LinkSpec;

/// How long a run whose GPU is busy with another profiler is tried again: seconds, or a
/// number with `s`, `m` or `h`.
pub const BUSY_ENV: &str = "KLARAPTOR_GPU_BUSY_RETRY";
/// The default of [`BUSY_ENV`].
pub const DEFAULT_BUSY: Duration = Duration::from_secs(5 * 60);
/// The longest pause between two tries of a busy run.
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// How many times a recipe command whose run stopped at a fault is run again: a number.
pub const RESTARTS_ENV: &str = "KLARAPTOR_PROFILE_RESTARTS";
/// The default of [`RESTARTS_ENV`]. Each fault costs a process, so a kernel needs as many
/// restarts as it has faulting shapes in the sweeps of one run (a reduction whose shared
/// memory holds 256 threads faults at 6 shapes of the 1-D plan, at 11 of the 2-D one, per
/// size), and one more.
pub const DEFAULT_RESTARTS: u32 = 32;

/// The bounds of the waits.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Settings {
    /// The longest wait for the GPU's lock, per kernel.
    pub wait_bound: Duration,
    /// How long runs that found the GPU busy are tried again, per recipe command.
    pub busy_bound: Duration,
    /// The first pause before a busy run is tried again (then doubled, up to 30 s).
    pub first_backoff: Duration,
    /// How many times a recipe command is run again after its runs stopped at faults (per
    /// profile size, for a command that runs several).
    pub max_restarts: u32,
}

impl Settings {
    /// `KLARAPTOR_GPU_WAIT` (default 30 min), `KLARAPTOR_GPU_BUSY_RETRY` (default 5 min) and
    /// `KLARAPTOR_PROFILE_RESTARTS` (default [`DEFAULT_RESTARTS`]).
    pub fn from_env() -> Result<Settings> {
        let wait_bound = gpu_lock::wait_bound_from_env().map_err(|e| anyhow!(e))?;
        let busy_bound =
            gpu_lock::duration_from_env(BUSY_ENV, DEFAULT_BUSY).map_err(|e| anyhow!(e))?;
        let max_restarts = match std::env::var(RESTARTS_ENV) {
            Ok(v) if !v.trim().is_empty() => v
                .trim()
                .parse()
                .map_err(|_| anyhow!("{RESTARTS_ENV}={v} is not a number of restarts (e.g. 32)"))?,
            _ => DEFAULT_RESTARTS,
        };
        Ok(Settings {
            wait_bound,
            busy_bound,
            first_backoff: Duration::from_secs(1).min(busy_bound / 4),
            max_restarts,
        })
    }
}

/// Where and with what the kernels are profiled.
pub struct Target<'a> {
    pub db: &'a ProfileDb,
    /// The GPU the recipes run on (its UUID keys the lock).
    pub device: &'a DeviceId,
    pub driver_version: &'a str,
    pub cuda_version: &'a str,
    /// Where the GPU locks are (`<cache>/klaraptor/devices`).
    pub lock_dir: &'a Path,
    /// A directory of this link's own: each recipe run's records go to a directory in it.
    pub scratch: &'a Path,
    /// The plan file of the profiling variant.
    pub plan: &'a Path,
    pub collector: &'a str,
    pub runs: u32,
    pub warmup: u32,
    pub verbose: bool,
    pub settings: Settings,
}

/// What became of one kernel.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Profiled completely and stored.
    Stored { path: PathBuf, samples: usize },
    /// Another link profiled it while this one waited for the GPU: its entry is used.
    Reused { path: PathBuf },
    /// Stored as incomplete (not used for a model), for the reason given.
    Incomplete { path: PathBuf, why: String },
    /// The recipe runs left no sample of it at all: its launches never reached the
    /// profiling runtime.
    NothingRecorded { commands: Vec<String> },
    /// Another process held the GPU past the bound.
    GpuBusy { holder: String, waited: Duration },
}

impl Outcome {
    /// Whether the kernel now has a complete entry in the database.
    pub fn has_entry(&self) -> bool {
        matches!(self, Outcome::Stored { .. } | Outcome::Reused { .. })
    }

    /// The warning a link prints for a kernel left without a profile, naming what happened.
    pub fn warning(&self, spec: &LinkSpec, gpu: &str) -> Option<String> {
        match self {
            Outcome::Stored { .. } | Outcome::Reused { .. } => None,
            Outcome::Incomplete { path, why } => Some(format!(
                "the profile of {} (annotated at {}) is incomplete and is not used: {why}; the \
                 kernel keeps the program's launch, and the next link on a GPU profiles it \
                 again (kept as {}, `klaraptor profile list --incomplete`)",
                spec.name,
                spec.annotated_at,
                path.display()
            )),
            Outcome::NothingRecorded { commands } => Some(format!(
                "profiling {} recorded nothing: its launches never reached the profiling \
                 runtime (is it launched with <<<>>> by `{}`?)",
                spec.name,
                commands.join("`, `")
            )),
            Outcome::GpuBusy { holder, waited } => Some(format!(
                "GPU {gpu} was still profiled by another link after {:.0} s (held by {holder}): \
                 {} keeps the program's launch; link again later, or raise {}",
                waited.as_secs_f64(),
                spec.name,
                gpu_lock::WAIT_ENV,
            )),
        }
    }
}

/// The key of the GPU's lock: its UUID, else its name.
pub fn gpu_key(device: &DeviceId) -> &str {
    if device.uuid.is_empty() {
        &device.name
    } else {
        &device.uuid
    }
}

/// Profiles `specs` (each with a recipe) one after another on `t`'s GPU and stores their
/// entries (module documentation). Prints what it does and a warning for each kernel left
/// without a complete profile; returns each kernel's outcome, in order.
pub fn profile_kernels(t: &Target, specs: &[&LinkSpec]) -> Result<Vec<Outcome>> {
    let mut ran: BTreeMap<String, Chain> = BTreeMap::new();
    let mut next_run = 0usize;
    let mut out = Vec::new();
    let gpu = gpu_key(t.device).to_string();
    for spec in specs {
        let outcome = profile_one(t, spec, &mut ran, &mut next_run)?;
        match &outcome {
            Outcome::Stored { .. } => {}
            Outcome::Reused { path } => crate::kl_eprintln!(
                "klaraptor-cc: {} was profiled by another link meanwhile: {}",
                spec.name,
                path.display()
            ),
            other => {
                if let Some(w) = other.warning(spec, &gpu) {
                    crate::kl_eprintln!("klaraptor-cc: warning: {w}");
                }
            }
        }
        out.push(outcome);
    }
    Ok(out)
}

fn profile_one(
    t: &Target,
    spec: &LinkSpec,
    ran: &mut BTreeMap<String, Chain>,
    next_run: &mut usize,
) -> Result<Outcome> {
    let gpu = gpu_key(t.device);
    let acquired = GpuLock::acquire(
        t.lock_dir,
        gpu,
        &spec.name,
        t.settings.wait_bound,
        &mut |holder| {
            crate::kl_eprintln!("klaraptor-cc: waiting for GPU {gpu} (profiling held by {holder})")
        },
    )
    .with_context(|| {
        format!(
            "cannot take the lock of GPU {gpu} in {}",
            t.lock_dir.display()
        )
    })?;
    let _lock = match acquired {
        Acquired::Held { lock, .. } => lock,
        Acquired::TimedOut { holder, waited } => return Ok(Outcome::GpuBusy { holder, waited }),
    };
    // Another link may have profiled it while this one waited.
    if t.db
        .entries_for(&spec.mangled, &spec.code_hash)?
        .iter()
        .any(|e| e.device.name == t.device.name)
    {
        let path =
            t.db.entry_path(&spec.mangled, &spec.code_hash, &t.device.name)?;
        return Ok(Outcome::Reused { path });
    }
    let start = Instant::now();
    let plan = crate::plan::read_plan(t.plan)?;
    // Per recipe run (its command and the profile sizes it covers): the runs that serve it.
    let mut runs: Vec<(RecipeRun, Chain)> = Vec::new();
    for run in crate::plan::recipe_runs(spec)? {
        let reusable = match ran.get(&run.command) {
            Some(chain) => {
                let samples = chain.samples(&spec.mangled, &plan)?;
                first_transient(&samples).is_none().then(|| chain.clone())
            }
            None => None,
        };
        let chain = match reusable {
            Some(c) => c,
            None => run_resuming(t, spec, &run, &plan, next_run)?,
        };
        ran.insert(run.command.clone(), chain.clone());
        runs.push((run, chain));
    }
    let took = start.elapsed();
    let mut samples: Vec<Sample> = Vec::new();
    let mut program: Vec<record::ProgramBlock> = Vec::new();
    let mut silent: Vec<String> = Vec::new();
    let mut read: Vec<&Path> = Vec::new();
    for (run, chain) in &runs {
        if read.contains(&chain.dirs[0].as_path()) {
            continue;
        }
        read.push(&chain.dirs[0]);
        let s = chain.samples(&spec.mangled, &plan)?;
        silent.extend(left_without(spec, run, &s));
        for b in chain.program(&spec.mangled)? {
            if s.iter().any(|x| x.sizes == b.sizes) {
                record::add_program_block(&mut program, b);
            }
        }
        samples.extend(s);
    }
    if samples.is_empty() {
        return Ok(Outcome::NothingRecorded {
            commands: runs.into_iter().map(|(r, _)| r.command).collect(),
        });
    }
    let mut why: Vec<String> = Vec::new();
    let failed: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.collector_error().is_some())
        .collect();
    if let Some(first) = failed.first() {
        why.push(format!(
            "{} of {} samples failed in the collector or the GPU; the first: {} at {} block \
             {}x{}x{}: {}",
            failed.len(),
            samples.len(),
            spec.name,
            fmt_values(&spec.data, &first.sizes),
            first.block[0],
            first.block[1],
            first.block[2],
            first.error.as_deref().unwrap_or_default()
        ));
    }
    if failed.is_empty() {
        why.extend(record::nothing_ran(&samples));
    }
    why.extend(silent);
    let n = samples.len();
    let entry = Entry {
        format_version: FORMAT_VERSION,
        kernel: KernelId {
            mangled: spec.mangled.clone(),
            name: spec.name.clone(),
            code_hash: spec.code_hash.clone(),
            data: spec.data.clone(),
            dim: spec.dim,
        },
        device: t.device.clone(),
        collector: format!("klaraptor-collector {}", env!("CARGO_PKG_VERSION")),
        captured_at: crate::console::now_iso8601(),
        cuda_version: t.cuda_version.to_string(),
        driver_version: t.driver_version.to_string(),
        plan: {
            let mut plan = crate::plan::plan_record(spec, t.runs, t.warmup);
            if crate::plan::runs_as_given(spec) {
                // The sizes are those the program's run reached.
                for s in &samples {
                    if !plan.sizes.contains(&s.sizes) {
                        plan.sizes.push(s.sizes.clone());
                    }
                }
            }
            plan
        },
        samples,
        incomplete: (!why.is_empty()).then(|| why.join("; ")),
        program,
    };
    let path = t.db.put(&entry)?;
    Ok(match entry.incomplete {
        Some(why) => Outcome::Incomplete { path, why },
        None => {
            crate::kl_eprintln!(
                "klaraptor-cc: profiled {} ({n} samples in {:.1} s): {}",
                spec.name,
                took.as_secs_f64(),
                path.display()
            );
            Outcome::Stored { path, samples: n }
        }
    })
}

/// Runs one recipe command, again after a pause while its samples of `spec` say that the
/// GPU was busy with another profiler, for at most the busy bound. `resume`: the run resumes
/// one that stopped at a fault ([`RunEnv::resume`]). Returns the directory of the last run's
/// records.
fn run_until_free(
    t: &Target,
    spec: &LinkSpec,
    run: &RecipeRun,
    resume: Option<(&Path, u32)>,
    next_run: &mut usize,
) -> Result<PathBuf> {
    let start = Instant::now();
    let mut backoff = t.settings.first_backoff;
    let mut said = false;
    loop {
        let dir = t.scratch.join(format!("run-{}", *next_run));
        *next_run += 1;
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        let env = RunEnv {
            out_dir: &dir,
            plan: t.plan,
            collector: t.collector,
            runs: t.runs,
            warmup: t.warmup,
            verbose: t.verbose,
            resume,
        };
        crate::plan::run_command(spec, run, &env)?;
        let samples = crate::plan::read_samples(&dir, &spec.mangled)?;
        let Some(busy) = first_transient(&samples) else {
            return Ok(dir);
        };
        let elapsed = start.elapsed();
        if elapsed >= t.settings.busy_bound {
            return Ok(dir);
        }
        if !said {
            said = true;
            crate::kl_eprintln!(
                "klaraptor-cc: the GPU is busy (another profiler holds it?): {} at {} block \
                 {}x{}x{}: {}; trying again for up to {:.0} s",
                spec.name,
                fmt_values(&spec.data, &busy.sizes),
                busy.block[0],
                busy.block[1],
                busy.block[2],
                busy.error.as_deref().unwrap_or_default(),
                t.settings.busy_bound.as_secs_f64()
            );
        }
        std::thread::sleep(backoff.min(t.settings.busy_bound - elapsed));
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// The runs of one recipe command: the first, then each restart that resumed it after its
/// last run stopped at a fault. Their records are merged per kernel ([`Chain::samples`]).
#[derive(Debug, Clone)]
struct Chain {
    dirs: Vec<PathBuf>,
    /// Set when the restarts ended before every shape lost to a fault was measured: why
    /// (what those shapes' samples say after "not measured: ").
    gave_up: Option<String>,
}

/// Where a sample of a run stands for the restarts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Standing {
    /// Measured, or failed for good (refused, its own fault, the collector's error): a
    /// restart leaves it out.
    Settled,
    /// Lost to another shape's fault: a restart runs it again.
    Lost,
}

/// How the samples of one kernel from one run's records stand: a sample lost to another
/// shape's fault is [`Standing::Lost`], and so are the faults of a sweep in which more than
/// one shape has one (a profiler session that faults gives its message to each of its
/// shapes: which one faulted shows once each runs alone, as the restart runs them).
fn standings(samples: &[Sample]) -> Vec<Standing> {
    let faults = |sizes: &[i64]| {
        samples
            .iter()
            .filter(|s| s.sizes == sizes && s.error.as_deref().is_some_and(record::is_fault))
            .count()
    };
    samples
        .iter()
        .map(|s| match s.error.as_deref() {
            Some(e) if record::lost_to_fault(e) => Standing::Lost,
            Some(e) if record::is_fault(e) && faults(&s.sizes) > 1 => Standing::Lost,
            _ => Standing::Settled,
        })
        .collect()
}

impl Chain {
    /// The samples of kernel `id` in the runs, merged: those of the first run, each lost
    /// one replaced by the sample of a later run of the same data size and shape, and the
    /// later runs' samples of the sizes and shapes the first did not have.
    fn merged(&self, id: &str) -> Result<Vec<(Sample, Standing)>> {
        let mut out: Vec<(Sample, Standing)> = Vec::new();
        for dir in &self.dirs {
            let samples = crate::plan::read_samples(dir, id)?;
            let standing = standings(&samples);
            // (One run's records are kept as they are, repeated shapes too: a recipe may run
            // the program twice.)
            let before = out.len();
            for (s, st) in samples.into_iter().zip(standing) {
                match out[..before]
                    .iter()
                    .position(|(o, _)| o.sizes == s.sizes && o.block == s.block)
                {
                    Some(k) if out[k].1 == Standing::Lost => out[k] = (s, st),
                    Some(_) => {}
                    None => out.push((s, st)),
                }
            }
        }
        Ok(out)
    }

    /// The program's own blocks the runs' records name for kernel `id`, one per size (the
    /// first run's first).
    fn program(&self, id: &str) -> Result<Vec<record::ProgramBlock>> {
        let mut out = Vec::new();
        for dir in &self.dirs {
            for b in crate::plan::read_program_blocks(dir, id)? {
                record::add_program_block(&mut out, b);
            }
        }
        Ok(out)
    }

    /// The samples the runs leave of kernel `id` (`plan`: the plan file's kernels and
    /// shapes), merged. A shape still lost to a fault, or a planned shape without a sample
    /// in a sweep that a fault interrupted, is not measured (a collector's failure: the
    /// entry is incomplete), for the reason the restarts ended with.
    fn samples(&self, id: &str, plan: &[(String, Vec<[u32; 3]>)]) -> Result<Vec<Sample>> {
        let merged = self.merged(id)?;
        let why = format!(
            "not measured: {}",
            self.gave_up.as_deref().unwrap_or(
                "another shape's fault lost the CUDA context of its run, and no later run of \
                 the recipe measured it"
            )
        );
        let mut sizes: Vec<Vec<i64>> = Vec::new();
        let mut interrupted: Vec<Vec<i64>> = Vec::new();
        for (s, st) in &merged {
            if !sizes.contains(&s.sizes) {
                sizes.push(s.sizes.clone());
            }
            let fault = s.error.as_deref().is_some_and(record::is_fault);
            if (*st == Standing::Lost || fault) && !interrupted.contains(&s.sizes) {
                interrupted.push(s.sizes.clone());
            }
        }
        let mut out: Vec<Sample> = merged
            .into_iter()
            .map(|(mut s, st)| {
                if st == Standing::Lost {
                    s.error = Some(why.clone());
                    s.counters = None;
                }
                s
            })
            .collect();
        let planned = plan
            .iter()
            .find(|(k, _)| k == id)
            .map(|(_, p)| p.as_slice());
        for at in &interrupted {
            for b in planned.unwrap_or_default() {
                if !out.iter().any(|s| s.sizes == *at && s.block == *b) {
                    out.push(Sample {
                        sizes: at.clone(),
                        block: *b,
                        grid: [0, 0, 0],
                        error: Some(why.clone()),
                        counters: None,
                    });
                }
            }
        }
        out.sort_by_key(|s| sizes.iter().position(|z| *z == s.sizes));
        Ok(out)
    }

    /// What a run that resumes these leaves out (`KLARAPTOR_PROFILE_SKIP`,
    /// [`crate::plan::skip_file`]): per kernel of the plan and data size the runs swept it at,
    /// the shapes settled there. A sweep that a fault interrupted is resumed with the rest,
    /// one shape per request; one that ended is not made again.
    fn resume_sweeps(&self, plan: &[(String, Vec<[u32; 3]>)]) -> Result<Vec<ResumedSweep>> {
        let mut out: Vec<ResumedSweep> = Vec::new();
        let mut ids: Vec<String> = plan.iter().map(|(id, _)| id.clone()).collect();
        for dir in &self.dirs {
            for id in crate::plan::kernels_in(dir) {
                if !ids.contains(&id) {
                    ids.push(id);
                }
            }
        }
        for id in ids {
            let first = out.len();
            for (s, st) in self.merged(&id)? {
                let k = match out[first..].iter().position(|r| r.sizes == s.sizes) {
                    Some(k) => first + k,
                    None => {
                        out.push(ResumedSweep {
                            id: id.clone(),
                            sizes: s.sizes.clone(),
                            done: Vec::new(),
                        });
                        out.len() - 1
                    }
                };
                if st == Standing::Settled {
                    out[k].done.push(s.block);
                }
            }
        }
        Ok(out)
    }
}

/// Runs one recipe command ([`run_until_free`]) and, while its last run stopped at a
/// fault, runs it again in a new process that resumes it (module documentation): at most
/// [`Settings::max_restarts`] times, and not again after a restart that settled nothing.
fn run_resuming(
    t: &Target,
    spec: &LinkSpec,
    run: &RecipeRun,
    plan: &[(String, Vec<[u32; 3]>)],
    next_run: &mut usize,
) -> Result<Chain> {
    // A run of several profile sizes may fault in each of them: as many restarts per size
    // as one run per size would have.
    let sizes = u32::try_from(run.covers.len().max(1)).unwrap_or(u32::MAX);
    let max_restarts = t.settings.max_restarts.saturating_mul(sizes);
    let mut chain = Chain {
        dirs: vec![run_until_free(t, spec, run, None, next_run)?],
        gave_up: None,
    };
    let mut last_skip: Option<String> = None;
    loop {
        let dir = chain.dirs.last().expect("the first run");
        let stops = crate::plan::read_stopped(dir)?;
        let Some(stop) = stops.first() else {
            return Ok(chain);
        };
        let what = describe_fault(spec, dir, stop);
        let sweeps = chain.resume_sweeps(plan)?;
        let skip = crate::plan::skip_file(&sweeps);
        let planned = plan
            .iter()
            .find(|(k, _)| *k == stop.id)
            .map(|(_, p)| p.as_slice())
            .unwrap_or_default();
        let done = sweeps
            .iter()
            .find(|r| r.id == stop.id && r.sizes == stop.sizes)
            .map(|r| r.done.as_slice())
            .unwrap_or_default();
        let left = planned.iter().filter(|b| !done.contains(b)).count();
        let restarts = u32::try_from(chain.dirs.len() - 1).unwrap_or(u32::MAX);
        let stuck = last_skip.as_deref() == Some(skip.as_str());
        if stuck || restarts >= max_restarts {
            let why = if stuck {
                "another shape's fault lost the CUDA context of its run, and the run restarted \
                 without the shapes done stopped at a fault again with nothing more done"
                    .to_string()
            } else if sizes > 1 {
                format!(
                    "another shape's fault lost the CUDA context of its run, and the recipe \
                     was restarted {restarts} times already ({RESTARTS_ENV}={} per size, for \
                     the {sizes} sizes of its run)",
                    t.settings.max_restarts
                )
            } else {
                format!(
                    "another shape's fault lost the CUDA context of its run, and the recipe \
                     was restarted {restarts} times already ({RESTARTS_ENV}={})",
                    t.settings.max_restarts
                )
            };
            crate::kl_eprintln!(
                "klaraptor-cc: warning: {what}; the shapes left of its sweep ({left}) and any \
                 launch after it are not measured: {why}"
            );
            chain.gave_up = Some(why);
            return Ok(chain);
        }
        if left > 0 {
            let s = if left == 1 { "" } else { "s" };
            crate::kl_eprintln!(
                "klaraptor-cc: {what}; going on with the {left} shape{s} left in a new process"
            );
        } else {
            crate::kl_eprintln!(
                "klaraptor-cc: {what}, the last shape of its sweep; going on in a new process"
            );
        }
        let file = t.scratch.join(format!("resume-{}.txt", *next_run));
        std::fs::write(&file, &skip).with_context(|| format!("cannot write {}", file.display()))?;
        let next = run_until_free(t, spec, run, Some((&file, restarts + 1)), next_run)?;
        chain.dirs.push(next);
        last_skip = Some(skip);
    }
}

/// What recipe run `run` left no sample of `spec` at (`samples`: its samples of the kernel),
/// for the reason an entry is incomplete. A run of one size must leave samples (at whatever
/// sizes its launches had: a recipe may pass a matrix order for a kernel whose data size is
/// its square). A run of several sizes must leave samples at as many sizes as it covers;
/// when it does not, the covered sizes it has no sample at exactly are named.
fn left_without(spec: &LinkSpec, run: &RecipeRun, samples: &[Sample]) -> Option<String> {
    let cmd = &run.command;
    let covered = run.sizes(spec);
    match covered.as_slice() {
        [] if samples.is_empty() => Some(format!("the run `{cmd}` left no sample of it")),
        [size] if samples.is_empty() => Some(format!(
            "the run at {} (`{cmd}`) left no sample of it",
            fmt_values(&spec.data, size)
        )),
        [] | [_] => None,
        many if samples.is_empty() => Some(format!(
            "the run at its {} profile sizes (`{cmd}`) left no sample of it",
            many.len()
        )),
        many => {
            let mut reached: Vec<&[i64]> = Vec::new();
            for s in samples {
                if !reached.contains(&s.sizes.as_slice()) {
                    reached.push(&s.sizes);
                }
            }
            let missing: Vec<String> = many
                .iter()
                .filter(|c| !reached.contains(c))
                .map(|c| fmt_values(&spec.data, c))
                .collect();
            (reached.len() < many.len() && !missing.is_empty()).then(|| {
                format!(
                    "the run `{cmd}` left no sample of it at {} ({} of its {} profile sizes)",
                    missing.join(", "),
                    missing.len(),
                    many.len()
                )
            })
        }
    }
}

/// `vadd at n=1000: shape 1024x1x1 faulted (an error in the kernel: …)`: the fault a run of
/// `spec`'s recipe stopped at (`dir`: its records).
fn describe_fault(spec: &LinkSpec, dir: &Path, stop: &crate::plan::Stopped) -> String {
    let name = if stop.id == spec.mangled {
        klaraptor_spec::names::instance_name(&spec.name, &spec.mangled)
    } else {
        std::fs::read_to_string(dir.join("kernels.tsv"))
            .unwrap_or_default()
            .lines()
            .find_map(|l| {
                let f: Vec<&str> = l.split('\t').collect();
                (f.len() == 3 && f[1] == stop.id).then(|| f[2].to_string())
            })
            .unwrap_or_else(|| {
                if stop.id.is_empty() {
                    "a kernel".to_string()
                } else {
                    stop.id.clone()
                }
            })
    };
    let sizes = if stop.id == spec.mangled {
        fmt_values(&spec.data, &stop.sizes)
    } else {
        stop.sizes
            .iter()
            .map(i64::to_string)
            .collect::<Vec<_>>()
            .join(",")
    };
    // A profiler session that faulted gives each of its shapes the fault.
    let together: Vec<String> = crate::plan::read_samples(dir, &stop.id)
        .unwrap_or_default()
        .iter()
        .filter(|s| s.sizes == stop.sizes && s.error.as_deref().is_some_and(record::is_fault))
        .map(|s| format!("{}x{}x{}", s.block[0], s.block[1], s.block[2]))
        .collect();
    match stop.block {
        _ if together.len() > 1 => format!(
            "{name} at {sizes}: a profiler session of the shapes {} faulted ({}); which of them \
             did shows when each runs alone",
            together.join(", "),
            stop.error
        ),
        Some(b) => format!(
            "{name} at {sizes}: shape {}x{}x{} faulted ({})",
            b[0], b[1], b[2], stop.error
        ),
        None => format!("{name} at {sizes}: a shape faulted ({})", stop.error),
    }
}

/// The first sample whose error is the collector's and may go away by itself.
fn first_transient(samples: &[Sample]) -> Option<&Sample> {
    samples
        .iter()
        .find(|s| s.collector_error().is_some_and(crate::record::is_transient))
}

/// `N=64 M=128`, or the bare values when the labels do not match.
fn fmt_values(labels: &[String], values: &[i64]) -> String {
    if labels.len() == values.len() {
        labels
            .iter()
            .zip(values)
            .map(|(l, v)| format!("{l}={v}"))
            .collect::<Vec<_>>()
            .join(" ")
    } else {
        format!("{values:?}")
    }
}

/// Whether this machine has an NVIDIA GPU the profiling variant could run on.
/// `KLARAPTOR_NO_GPU=1` says no (for tests and for builds that must not profile).
pub fn gpu_present() -> bool {
    if std::env::var_os("KLARAPTOR_NO_GPU").is_some_and(|v| v != "0" && !v.is_empty()) {
        return false;
    }
    Path::new("/dev/nvidiactl").exists() || Path::new("/dev/nvidia0").exists()
}

/// The collector library: `KLARAPTOR_COLLECTOR`, else `libklaraptor_collector.so` beside
/// the klaraptor-cc executable.
pub fn collector_path() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("KLARAPTOR_COLLECTOR") {
        return Some(PathBuf::from(p));
    }
    let exe = std::env::current_exe().ok()?;
    let p = exe.parent()?.join("libklaraptor_collector.so");
    p.is_file().then_some(p)
}

/// The device the profiling variant runs on (device 0, or the first of
/// `CUDA_VISIBLE_DEVICES`), from its calibration report: the first profile on a device
/// calibrates it (`klaraptor device calibrate`, about 10 s), later ones reuse the report.
/// Returns the device, the driver version and the CUDA runtime version.
pub fn current_device(nvcc: &Path) -> Result<(DeviceId, String, String)> {
    crate::kl_eprintln!("klaraptor-cc: identifying and (once per device) calibrating the GPU");
    let r = crate::calibration::ensure_calibrated(nvcc)
        .context("calibrating the GPU before its first profile")?;
    let sm = r
        .attributes
        .get("MultiProcessorCount")
        .map_or(0, |v| u32::try_from(*v).unwrap_or(0));
    Ok((
        DeviceId {
            name: r.device.name.clone(),
            uuid: r.device.uuid.clone(),
            cc: r.device.cc.clone(),
            sm_count: sm,
        },
        r.device.driver_version.clone(),
        r.device.runtime_version.clone(),
    ))
}

/// The GPU the recipes run on, and the collector that measures them.
pub struct Gpu {
    pub device: DeviceId,
    pub driver: String,
    pub cuda: String,
    pub collector: PathBuf,
}

impl Gpu {
    /// This machine's GPU (calibrated once per device, `current_device`) and the collector
    /// ([`collector_path`]); an error says what is missing.
    pub fn here(nvcc: &Path) -> Result<Gpu> {
        let Some(collector) = collector_path() else {
            bail!(
                "the collector (libklaraptor_collector.so beside klaraptor-cc, or \
                 KLARAPTOR_COLLECTOR) was not found"
            );
        };
        let (device, driver, cuda) = current_device(nvcc)?;
        Ok(Gpu {
            device,
            driver,
            cuda,
            collector,
        })
    }
}

/// Runs the profile recipes of `specs` on `gpu` (the program they run must be in place: a
/// binary carrying the runtime profiles when told to, runtime.rs) and stores the entries
/// in `db`, one kernel at a time under the GPU's lock (gpu_profile.rs); `dir` is scratch.
/// Returns one outcome per spec.
pub fn run_recipes(
    gpu: &Gpu,
    specs: &[&LinkSpec],
    db: &ProfileDb,
    dir: &Path,
    verbose: bool,
) -> Result<Vec<Outcome>> {
    let plan = dir.join("plan");
    let specs_owned: Vec<LinkSpec> = specs.iter().map(|s| (*s).clone()).collect();
    std::fs::write(&plan, crate::plan::plan_file(&specs_owned))
        .with_context(|| format!("writing {}", plan.display()))?;
    let (runs, warmup) = (5, 1);
    let settings = Settings::from_env()?;
    let lock_dir = crate::calibration::Cache::from_env()?.devices_dir();
    let target = Target {
        db,
        device: &gpu.device,
        driver_version: &gpu.driver,
        cuda_version: &gpu.cuda,
        lock_dir: &lock_dir,
        scratch: dir,
        plan: &plan,
        collector: &gpu.collector.display().to_string(),
        runs,
        warmup,
        verbose,
        settings,
    };
    profile_kernels(&target, specs)
}

/// The string by which an object, archive or binary shows it carries [`EMBEDDED`]
/// (runtime-shim/src/klaraptor_embed.c).
pub const EMBEDDED_MARKER: &[u8] = b"KLARAPTOR-RT-EMBEDDED v1";

/// Whether `bytes` (an object, archive or binary) carries the runtime.
pub fn carries_runtime(bytes: &[u8]) -> bool {
    bytes
        .windows(EMBEDDED_MARKER.len())
        .any(|w| w == EMBEDDED_MARKER)
}
