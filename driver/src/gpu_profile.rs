//! Profiling the kernels of a link on this machine's GPU when other links may be doing the
//! same (`make -j`, Ninja): one profiler per GPU at a time, another try when the GPU is busy
//! with someone else's profiler, and no partial profile stored as complete.
//!
//! For each kernel, in turn:
//! 1. take the GPU's lock ([`klaraptor_profiler::gpu_lock`], keyed by the GPU's UUID),
//!    waiting at most [`Settings::wait_bound`] (`KLARAPTOR_GPU_WAIT`); a link that waits
//!    says once whom for. Past the bound the kernel keeps the program's launch;
//! 2. look in the database again: a kernel another link profiled meanwhile (the same object
//!    linked into several executables) is reused;
//! 3. run the kernel's recipe at each profile size (a command another kernel of this link
//!    already ran is not run again: a run profiles every planned kernel it launches). A run
//!    whose samples carry a transient collector error (`CUPTI_ERROR_HARDWARE_BUSY`: another
//!    process, e.g. Nsight Compute, holds the GPU's counters) is run again after a pause
//!    that doubles, for at most [`Settings::busy_bound`] (`KLARAPTOR_GPU_BUSY_RETRY`);
//! 4. store the entry: complete when every profile size left samples and no sample failed
//!    for the collector's or the GPU's reasons (a shape the kernel cannot run is a valid
//!    sample), else marked incomplete (never used for a model; profiled again by the next
//!    link that can), with a warning that quotes the collector's own error, with the kernel,
//!    size and shape;
//! 5. release the lock.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};
use klaraptor_profiler::db::ProfileDb;
use klaraptor_profiler::gpu_lock::{self, Acquired, GpuLock};
use klaraptor_profiler::record::{self, DeviceId, Entry, KernelId, Sample, FORMAT_VERSION};

use crate::linkspec::LinkSpec;
use crate::profiling::{self, RunEnv};

/// How long a run whose GPU is busy with another profiler is tried again: seconds, or a
/// number with `s`, `m` or `h`.
pub const BUSY_ENV: &str = "KLARAPTOR_GPU_BUSY_RETRY";
/// The default of [`BUSY_ENV`].
pub const DEFAULT_BUSY: Duration = Duration::from_secs(5 * 60);
/// The longest pause between two tries of a busy run.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// The bounds of the waits.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Settings {
    /// The longest wait for the GPU's lock, per kernel.
    pub wait_bound: Duration,
    /// How long runs that found the GPU busy are tried again, per recipe command.
    pub busy_bound: Duration,
    /// The first pause before a busy run is tried again (then doubled, up to 30 s).
    pub first_backoff: Duration,
}

impl Settings {
    /// `KLARAPTOR_GPU_WAIT` (default 30 min) and `KLARAPTOR_GPU_BUSY_RETRY` (default 5 min).
    pub fn from_env() -> Result<Settings> {
        let wait_bound = gpu_lock::wait_bound_from_env().map_err(|e| anyhow!(e))?;
        let busy_bound =
            gpu_lock::duration_from_env(BUSY_ENV, DEFAULT_BUSY).map_err(|e| anyhow!(e))?;
        Ok(Settings {
            wait_bound,
            busy_bound,
            first_backoff: Duration::from_secs(1).min(busy_bound / 4),
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
    let mut ran: BTreeMap<String, PathBuf> = BTreeMap::new();
    let mut next_run = 0usize;
    let mut out = Vec::new();
    let gpu = gpu_key(t.device).to_string();
    for spec in specs {
        let outcome = profile_one(t, spec, &mut ran, &mut next_run)?;
        match &outcome {
            Outcome::Stored { .. } => {}
            Outcome::Reused { path } => eprintln!(
                "klaraptor-cc: {} was profiled by another link meanwhile: {}",
                spec.name,
                path.display()
            ),
            other => {
                if let Some(w) = other.warning(spec, &gpu) {
                    eprintln!("klaraptor-cc: warning: {w}");
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
    ran: &mut BTreeMap<String, PathBuf>,
    next_run: &mut usize,
) -> Result<Outcome> {
    let gpu = gpu_key(t.device);
    let acquired = GpuLock::acquire(
        t.lock_dir,
        gpu,
        &spec.name,
        t.settings.wait_bound,
        &mut |holder| eprintln!("klaraptor-cc: waiting for GPU {gpu} (profiling held by {holder})"),
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
    // Per profile size: its command and the directory of the run that serves it.
    let mut runs: Vec<(usize, String, PathBuf)> = Vec::new();
    for (i, size) in spec.profile_sizes.iter().enumerate() {
        let cmd = profiling::recipe_command(spec, size)?;
        let reusable = match ran.get(&cmd) {
            Some(dir) => {
                let samples = profiling::read_samples(dir, &spec.mangled)?;
                first_transient(&samples).is_none().then(|| dir.clone())
            }
            None => None,
        };
        let dir = match reusable {
            Some(d) => d,
            None => run_until_free(t, spec, i, &cmd, next_run)?,
        };
        ran.insert(cmd.clone(), dir.clone());
        runs.push((i, cmd, dir));
    }
    let took = start.elapsed();
    let mut samples: Vec<Sample> = Vec::new();
    let mut silent: Vec<(usize, String)> = Vec::new();
    let mut read: Vec<&Path> = Vec::new();
    for (i, cmd, dir) in &runs {
        if read.contains(&dir.as_path()) {
            continue;
        }
        read.push(dir);
        let s = profiling::read_samples(dir, &spec.mangled)?;
        if s.is_empty() {
            silent.push((*i, cmd.clone()));
        }
        samples.extend(s);
    }
    if samples.is_empty() {
        return Ok(Outcome::NothingRecorded {
            commands: runs.into_iter().map(|(_, c, _)| c).collect(),
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
    for (i, cmd) in &silent {
        why.push(format!(
            "the run at {} (`{cmd}`) left no sample of it",
            fmt_values(&spec.data, &spec.profile_sizes[*i])
        ));
    }
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
        captured_at: crate::now_iso8601(),
        cuda_version: t.cuda_version.to_string(),
        driver_version: t.driver_version.to_string(),
        plan: profiling::plan_record(spec, t.runs, t.warmup),
        samples,
        incomplete: (!why.is_empty()).then(|| why.join("; ")),
    };
    let path = t.db.put(&entry)?;
    Ok(match entry.incomplete {
        Some(why) => Outcome::Incomplete { path, why },
        None => {
            eprintln!(
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
/// GPU was busy with another profiler, for at most the busy bound. Returns the directory of
/// the last run's records.
fn run_until_free(
    t: &Target,
    spec: &LinkSpec,
    i: usize,
    cmd: &str,
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
        };
        profiling::run_command(spec, i, cmd, &env)?;
        let samples = profiling::read_samples(&dir, &spec.mangled)?;
        let Some(busy) = first_transient(&samples) else {
            return Ok(dir);
        };
        let elapsed = start.elapsed();
        if elapsed >= t.settings.busy_bound {
            return Ok(dir);
        }
        if !said {
            said = true;
            eprintln!(
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

/// The first sample whose error is the collector's and may go away by itself.
fn first_transient(samples: &[Sample]) -> Option<&Sample> {
    samples.iter().find(|s| {
        s.collector_error()
            .is_some_and(klaraptor_profiler::record::is_transient)
    })
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
