//! The sweep: for each shape of a request, warm-up launches, timed launches, the profiler
//! passes, and one JSON line (a `record::Sample`) appended to the request's file.
//!
//! Two modes ([`Settings`], read from the environment once, when the collector starts):
//! - full (the default): time and hardware counters, as below;
//! - time only (`KLARAPTOR_COLLECT_TIME_ONLY=1`): the warm-up and timed launches only. CUPTI
//!   is not loaded and no profiler pass runs, so a shape costs only its timing launches. Each
//!   sample still has `counters`, with `time_ms`, `time_runs_ms`, `regs_per_thread` and
//!   `smem_*` set and every hardware field 0; `inst_executed == 0` marks such a sample (a
//!   launch that ran executes at least one instruction). The accuracy study uses it for its
//!   exhaustive search over shapes at large sizes.
//!
//! Per context (lazily, once): the device is checked with `cuptiProfilerDeviceSupported`, its
//! chip named, its counter availability read, the metric table resolved against the chip, one
//! config image built for the table's metrics, the L2 flush kernel and buffer made, and the
//! range profiler enabled (`cuptiRangeProfilerEnable`); it stays enabled for the context's
//! sessions (`KLARAPTOR_COLLECT_ENABLE_PER_SESSION=1`: enabled for each session, disabled after
//! it, as up to 2026-11-29). A profiler's first pass costs 180-190 ms on an H200 to start, a
//! later session's 8 ms (bench/results/profiling-cost-h200-2026-11-29.md).
//!
//! Per request, in three phases:
//! 1. timing: every shape's warm-up launches, one timed launch, then the timed runs, each
//!    of as many launches back to back as last `KLARAPTOR_COLLECT_BATCH_US` together, behind
//!    a gate kernel that holds the stream while the CPU queues them ([`crate::gate`]). The
//!    profiler is enabled (not started) meanwhile, for every request of the process alike:
//!    on an H200 that adds about 0.1 µs to a launch (1 % of a launch under 10 µs), the same
//!    for every shape and size, which the model's time calibration takes as part of its
//!    per-launch intercept;
//! 2. profiling: the shapes that ran, in as few range-profiler sessions as CUPTI allows (all
//!    of them in one by default; `KLARAPTOR_COLLECT_RANGES=<n>` caps a session at n shapes,
//!    1 being the collector's first design, one session per shape). A session is one
//!    counter-data image with a range per shape, one
//!    `SetConfig` (user ranges, user replay), then the passes the config needs: each pass
//!    launches every shape of the session once inside its own named range
//!    ([`crate::sweep::range_name`]), each launch preceded, outside any range, by an L2 flush
//!    and a stream synchronisation. Then one decode and the evaluation of each range. A session CUPTI refuses as a whole is split in two and tried again, down to one
//!    shape; the size that worked is kept for the context's later requests;
//! 3. writing: one sample per shape, in shape order, each followed by the shim's progress
//!    report.
//!
//! The counters keep their meaning: each shape's range holds exactly one launch of that
//! shape, after a flush that leaves L2 clean of the kernel's data (compulsory DRAM traffic,
//! as ncu's `--cache-control all`), exactly as when each shape had its own session; the
//! write-backs of one shape's dirty lines happen during the next flush, outside any range.
//! What the sessions change is the CPU cost: CUPTI's image, config and decode are paid once
//! per request instead of once per shape, its enable once per context.

use crate::cupti::{CounterDataImage, CuptiLib, HostObject, MetricConfig, RangeProfiler};
use crate::debug::{self, debug};
use crate::driver::{Context, Driver, Event, Kernel};
use crate::error::{Error, Result};
use crate::flush::L2Flush;
use crate::gate::Gate;
use crate::load;
use crate::metrics::{self, Field, Resolved, TABLE};
use crate::request::{runtime_error_name, Request};
use crate::stats::median;
use crate::sweep::{self, SweepStats};
use crate::sys::cuda::*;
use crate::sys::cupti::{
    CUptiResult_CUPTI_ERROR_INSUFFICIENT_PRIVILEGES,
    CUptiResult_CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED,
    CUptiResult_CUPTI_ERROR_NOT_INITIALIZED,
};
use klaraptor_profiler::record::{Counters, Sample};
use std::cell::Cell;
use std::collections::{BTreeMap, HashMap};
use std::ffi::{CString, OsString};
use std::io::Write;
use std::sync::Arc;
use std::time::Instant;

/// What the collector does, from the environment (see the module documentation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// `KLARAPTOR_COLLECT_TIME_ONLY`: time the shapes, read no counters.
    pub time_only: bool,
    /// `KLARAPTOR_COLLECT_NO_FLUSH`: no L2 flush before the profiler passes.
    pub no_flush: bool,
    /// `KLARAPTOR_COLLECT_EXTRA_METRICS` (comma-separated full metric names): collected
    /// besides the table's and shown in verbose mode's `metric values` line only; for trying
    /// candidate metrics on a new GPU. A name the chip does not have is skipped with a warning.
    pub extra_metrics: Vec<String>,
    /// `KLARAPTOR_COLLECT_RANGES` (a positive integer): at most this many shapes per
    /// range-profiler session; `None`: every shape of a request in one session.
    pub ranges_per_session: Option<usize>,
    /// `KLARAPTOR_COLLECT_TIMING`: one `klaraptor-collect: timing …` line per request on
    /// stderr, saying where its wall time went ([`SweepStats`]).
    pub timing: bool,
    /// `KLARAPTOR_COLLECT_ENABLE_PER_SESSION`: the range profiler enabled for each session
    /// and disabled after it, every timed launch made with it disabled (the collector up to
    /// 2026-11-29). By default it is enabled once per context, before the context's first
    /// timed launch, and stays enabled: the first pass after an enable costs 180-190 ms on an
    /// H200, a later session's 8 ms, and every sample of a process is timed alike.
    pub enable_per_session: bool,
    /// `KLARAPTOR_COLLECT_ATOMICS`: also count global atomic and reduction requests
    /// (`global_atomic_requests`). Off by default: no model reads them, and on the GH100
    /// their two counters add a profiler pass to every size (4 instead of 3), about 57 ms.
    pub atomics: bool,
    /// `KLARAPTOR_COLLECT_BATCH_US` (default [`DEFAULT_BATCH_US`]): each timed run launches
    /// the shape back to back until the run lasts about this many microseconds (at most
    /// [`MAX_BATCH`] launches) and records the mean per launch; 0: one launch per run.
    pub batch_us: u32,
}

/// The default of [`Settings::batch_us`]: the events' resolution (about 0.5 µs) then weighs
/// under 1 % of a run.
pub const DEFAULT_BATCH_US: u32 = 100;
/// The most launches in one timed run.
pub const MAX_BATCH: u32 = 100;

impl Default for Settings {
    /// What an empty environment gives.
    fn default() -> Self {
        Settings {
            time_only: false,
            no_flush: false,
            extra_metrics: Vec::new(),
            ranges_per_session: None,
            timing: false,
            enable_per_session: false,
            atomics: false,
            batch_us: DEFAULT_BATCH_US,
        }
    }
}

impl Settings {
    /// Reads the settings; `env` reads an environment variable. A flag is on when its
    /// variable is set to anything but empty or `0`.
    pub fn from_env(env: &dyn Fn(&str) -> Option<OsString>) -> Self {
        let flag = |name: &str| env(name).is_some_and(|v| !v.is_empty() && v != "0");
        let extra_metrics = env("KLARAPTOR_COLLECT_EXTRA_METRICS")
            .map(|v| {
                v.to_string_lossy()
                    .split(',')
                    .map(str::trim)
                    .filter(|m| !m.is_empty())
                    .map(String::from)
                    .collect()
            })
            .unwrap_or_default();
        let ranges_per_session = env("KLARAPTOR_COLLECT_RANGES").and_then(|v| {
            let text = v.to_string_lossy();
            match text.trim().parse::<usize>() {
                Ok(n) if n >= 1 => Some(n),
                _ if text.trim().is_empty() => None,
                _ => {
                    eprintln!(
                        "klaraptor-collect: warning: KLARAPTOR_COLLECT_RANGES={text} is not a \
                         positive integer; every shape of a request goes into one session"
                    );
                    None
                }
            }
        });
        let batch_us = env("KLARAPTOR_COLLECT_BATCH_US").map_or(DEFAULT_BATCH_US, |v| {
            let text = v.to_string_lossy();
            text.trim().parse::<u32>().unwrap_or_else(|_| {
                eprintln!(
                    "klaraptor-collect: warning: KLARAPTOR_COLLECT_BATCH_US={text} is not a \
                     whole number of microseconds; using {DEFAULT_BATCH_US}"
                );
                DEFAULT_BATCH_US
            })
        });
        Settings {
            time_only: flag("KLARAPTOR_COLLECT_TIME_ONLY"),
            no_flush: flag("KLARAPTOR_COLLECT_NO_FLUSH"),
            extra_metrics,
            ranges_per_session,
            timing: flag("KLARAPTOR_COLLECT_TIMING"),
            atomics: flag("KLARAPTOR_COLLECT_ATOMICS"),
            enable_per_session: flag("KLARAPTOR_COLLECT_ENABLE_PER_SESSION"),
            batch_us,
        }
    }
}

/// The loaded libraries and what was set up per CUDA context.
pub struct Collector {
    driver: Arc<Driver>,
    /// `None` in time-only mode.
    cupti: Option<Arc<CuptiLib>>,
    settings: Settings,
    contexts: Vec<ContextState>,
    /// How long [`Collector::new`] took, reported (then zeroed) by the first request.
    init_ms: f64,
    /// Where the last context set-up's time went (ctx_* of [`SweepStats`]).
    setup: SweepStats,
}

// SAFETY: the raw handles inside (contexts, CUPTI objects, device memory) are process-wide
// CUDA objects, not thread-bound; every use goes through `&mut Collector`, which the library
// entry point hands out under one mutex, and each use checks that its context is current.
unsafe impl Send for Collector {}

struct ContextState {
    ctx: Context,
    device: CUdevice,
    /// `None` in time-only mode.
    profiling: Option<Profiling>,
    /// Queued before each timed run ([`crate::gate`]).
    gate: Gate,
}

/// What the profiler passes of one context need.
struct Profiling {
    cupti: Arc<CuptiLib>,
    resolved: Resolved,
    config: MetricConfig,
    /// The config's metric names, in the order its evaluation returns values.
    names: Vec<String>,
    flush: Option<L2Flush>,
    /// The most shapes a session may hold: the setting, lowered when CUPTI refused a
    /// session of that size.
    ranges_per_session: Cell<usize>,
    /// The range profiler, enabled when the context was set up and kept between sessions
    /// (unless [`Settings::enable_per_session`]); `None` after a session that failed, whose
    /// profiler was disabled: the next session enables one again.
    enabled: std::cell::RefCell<Option<RangeProfiler>>,
}

/// How one request went.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    pub measured: usize,
    pub failed: usize,
    /// Where the request's wall time went.
    pub stats: SweepStats,
}

/// Why one shape has no counters.
enum ShapeError {
    /// Recorded in the sample; the sweep goes on.
    Shape(String),
    /// Recorded in the sample; the context is unusable, so the remaining shapes are not run.
    Sticky(String),
    /// The collector itself failed: the request fails.
    Collector(Error),
}

impl From<Error> for ShapeError {
    fn from(e: Error) -> Self {
        ShapeError::Collector(e)
    }
}

/// Why a profiler session gave no counters.
#[derive(Debug)]
enum SessionError {
    /// CUPTI refused the session (a call failed, ranges were dropped or cannot be told
    /// apart): worth trying again with fewer shapes per session.
    Retry(Error),
    /// The context is unusable (an asynchronous error of a launch).
    Sticky(String),
    /// Nothing will work (no permission to read counters, another profiler attached, …).
    Fatal(Error),
}

impl From<Error> for SessionError {
    #[allow(non_upper_case_globals)] // bindgen's names of C enum values
    fn from(e: Error) -> Self {
        match e.cupti_code() {
            Some(
                CUptiResult_CUPTI_ERROR_INSUFFICIENT_PRIVILEGES
                | CUptiResult_CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED
                | CUptiResult_CUPTI_ERROR_NOT_INITIALIZED,
            ) => SessionError::Fatal(e),
            Some(_) => SessionError::Retry(e),
            None => SessionError::Fatal(e),
        }
    }
}

/// What one session measured: per shape (index in the request), its counters or why not.
struct SessionOutcome {
    results: Vec<(usize, std::result::Result<metrics::Hardware, String>)>,
    /// Set when a launch of the session left the context unusable.
    sticky: Option<String>,
}

/// What the timing phase gave for one shape.
#[derive(Debug, Clone, PartialEq)]
enum Timed {
    /// The timed runs (ms per launch), their median, and the launches per run.
    Runs(Vec<f64>, f64, u32),
    Failed(String),
}

/// What the profiler gave for one shape: `None` when it was not asked (time-only mode).
type Profiled = Option<std::result::Result<metrics::Hardware, String>>;

/// Register count and static shared memory of the kernel.
struct Resources {
    regs: u32,
    smem_static: u32,
}

impl Collector {
    /// Reads the [`Settings`] from `env`, loads libcuda and (unless time-only) libcupti (see
    /// [`load`] for where), and initialises the profiler.
    pub fn new(env: &dyn Fn(&str) -> Option<OsString>) -> Result<Self> {
        let started = Instant::now();
        let settings = Settings::from_env(env);
        let driver = Driver::open(&load::cuda_candidates(env))?;
        let cupti = if settings.time_only {
            debug!(
                "CUDA driver {}; time-only mode (KLARAPTOR_COLLECT_TIME_ONLY): CUPTI not loaded, \
                 no profiler passes, hardware counters 0",
                driver.version()?
            );
            None
        } else {
            let cupti = CuptiLib::open(&load::cupti_candidates(env))?;
            debug!(
                "CUDA driver {}, CUPTI API version {}",
                driver.version()?,
                cupti.version()?
            );
            cupti.profiler_initialize()?;
            Some(cupti)
        };
        Ok(Collector {
            driver,
            cupti,
            settings,
            contexts: Vec::new(),
            init_ms: ms_since(started),
            setup: SweepStats::default(),
        })
    }

    /// The settings this collector runs with.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Measures every shape of `req` and appends one line per shape to `req.out_path`
    /// (module documentation: the three phases).
    pub fn collect(&mut self, req: &Request) -> Result<Summary> {
        let started = Instant::now();
        let ctx = self.driver.current_context()?.ok_or_else(|| {
            Error::Unusable(
                "no CUDA context is current on the calling thread; klaraptor_collect must be \
                 called after the CUDA runtime has initialised the device"
                    .into(),
            )
        })?;
        let known = self.contexts.len();
        let idx = self.context_state(ctx)?;
        let mut stats = SweepStats {
            shapes: req.shapes.len(),
            collector_init_ms: std::mem::take(&mut self.init_ms),
            ..SweepStats::default()
        };
        if self.contexts.len() > known {
            stats.context_setup_ms = ms_since(started);
            stats.ctx_device_ms = self.setup.ctx_device_ms;
            stats.ctx_resolve_ms = self.setup.ctx_resolve_ms;
            stats.ctx_config_ms = self.setup.ctx_config_ms;
            stats.ctx_flush_ms = self.setup.ctx_flush_ms;
            stats.ctx_gate_ms = self.setup.ctx_gate_ms;
        }
        let st = &self.contexts[idx];
        let resources = self.resources(req.kernel, st.device)?;
        let mut out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&req.out_path)
            .map_err(|e| {
                Error::Unusable(format!(
                    "cannot open {} for appending: {e}",
                    req.out_path.display()
                ))
            })?;
        debug!(
            "{} {:?}: {} shape(s), {} warm-up and {} timed run(s) each, {} profiler pass(es); \
             {} registers per thread, {} bytes of static shared memory",
            req.display_name(),
            req.data,
            req.shapes.len(),
            req.warmup,
            req.runs,
            st.profiling.as_ref().map_or(0, |p| p.config.passes()),
            resources.regs,
            resources.smem_static
        );

        // 1. Timing.
        let t = Instant::now();
        let mut unusable: Option<String> = None;
        let mut timed = Vec::with_capacity(req.shapes.len());
        if !req.shapes.is_empty() {
            let start = Event::new(&self.driver)?;
            let stop = Event::new(&self.driver)?;
            for i in 0..req.shapes.len() {
                if let Some(why) = &unusable {
                    timed.push(Timed::Failed(format!("not run: {why}")));
                    continue;
                }
                timed.push(match self.time_shape(&st.gate, req, i, &start, &stop) {
                    Ok((runs, n)) => match median(&runs) {
                        Some(m) => Timed::Runs(runs, m, n),
                        None => {
                            Timed::Failed(format!("the timed runs gave no usable time: {runs:?}"))
                        }
                    },
                    Err(ShapeError::Shape(msg)) => Timed::Failed(msg),
                    Err(ShapeError::Sticky(msg)) => {
                        unusable = Some(format!("the CUDA context is unusable after {msg}"));
                        Timed::Failed(msg)
                    }
                    Err(ShapeError::Collector(e)) => return Err(e),
                });
            }
        }
        stats.timing_ms = ms_since(t);

        // 2. Profiling.
        let mut profiled: Vec<Profiled> = vec![None; req.shapes.len()];
        let mut profiler_error = None;
        if let Some(p) = &st.profiling {
            let todo: Vec<usize> = (0..req.shapes.len())
                .filter(|&i| matches!(timed[i], Timed::Runs(..)))
                .collect();
            match &unusable {
                Some(why) => {
                    for &i in &todo {
                        profiled[i] = Some(Err(format!("not profiled: {why}")));
                    }
                }
                None => {
                    profiler_error =
                        self.profile_shapes(st.ctx, p, req, &todo, &mut profiled, &mut stats);
                }
            }
            // In full mode a sample without hardware counters must say why: never zeros.
            for &i in &todo {
                if profiled[i].is_none() {
                    profiled[i] = Some(Err("not profiled (no session measured it)".into()));
                }
            }
        }

        // 3. Writing, in shape order, each sample followed by its progress report.
        let t = Instant::now();
        let mut summary = Summary {
            measured: 0,
            failed: 0,
            stats: SweepStats::default(),
        };
        for (i, (shape, (timed, hw))) in req
            .shapes
            .iter()
            .zip(timed.into_iter().zip(profiled))
            .enumerate()
        {
            let (counters, error) = outcome(timed, hw, &resources, req.dynamic_smem);
            if let Some(msg) = &error {
                summary.failed += 1;
                eprintln!(
                    "klaraptor-collect: {} {:?} block {:?}: {msg}",
                    req.display_name(),
                    req.data,
                    shape.block
                );
            } else {
                summary.measured += 1;
            }
            let ok = error.is_none();
            let sample = Sample {
                sizes: req.data.clone(),
                block: shape.block,
                grid: shape.grid,
                error,
                counters,
            };
            out.write_all(sample_line(&sample).as_bytes())
                .and_then(|_| out.flush())
                .map_err(|e| {
                    Error::Unusable(format!("cannot write to {}: {e}", req.out_path.display()))
                })?;
            req.report(i, ok);
        }
        stats.write_ms = ms_since(t);
        stats.total_ms = ms_since(started);
        debug!(
            "{}: {} measured, {} failed, appended to {}",
            req.display_name(),
            summary.measured,
            summary.failed,
            req.out_path.display()
        );
        if self.settings.timing || debug::enabled() {
            eprintln!(
                "klaraptor-collect: timing {} {stats}",
                req.display_name().replace(char::is_whitespace, "_")
            );
        }
        summary.stats = stats;
        match profiler_error {
            Some(e) => Err(e),
            None => Ok(summary),
        }
    }

    /// The per-context setup, made on first use of a context.
    fn context_state(&mut self, ctx: Context) -> Result<usize> {
        if let Some(i) = self.contexts.iter().position(|s| s.ctx == ctx) {
            return Ok(i);
        }
        let device = self.driver.current_device()?;
        let mut setup = SweepStats::default();
        let profiling = match &self.cupti {
            Some(cupti) => Some(self.profiling_setup(cupti, ctx, device, &mut setup)?),
            None => None,
        };
        let t = Instant::now();
        let gate = Gate::new(&self.driver)?;
        setup.ctx_gate_ms = ms_since(t);
        self.setup = setup;
        self.contexts.push(ContextState {
            ctx,
            device,
            profiling,
            gate,
        });
        Ok(self.contexts.len() - 1)
    }

    /// The device check, metric table, config image and L2 flush of one context.
    fn profiling_setup(
        &self,
        cupti: &Arc<CuptiLib>,
        ctx: Context,
        device: CUdevice,
        setup: &mut SweepStats,
    ) -> Result<Profiling> {
        let t = Instant::now();
        let name = self.driver.device_name(device)?;
        match cupti.device_support(device) {
            Ok(s) if s.refuses() => {
                return Err(Error::Unusable(format!(
                    "CUPTI cannot profile device {device} ({name}): {}",
                    s.problems().join(", ")
                )))
            }
            Ok(s) => debug!("CUPTI device support: {:?}", s.problems()),
            Err(e) => debug!("could not ask whether the device is supported ({e}); going on"),
        }
        debug!("device support asked");
        let chip = cupti.chip_name(usize::try_from(device).unwrap_or(0))?;
        let cc = (
            self.driver.device_attribute(
                CUdevice_attribute_enum_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                device,
            )?,
            self.driver.device_attribute(
                CUdevice_attribute_enum_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                device,
            )?,
        );
        debug!(
            "device {device}: {name}, chip {chip}, compute capability {}.{}",
            cc.0, cc.1
        );
        let availability = cupti.counter_availability(ctx)?;
        debug!("counter availability read");
        setup.ctx_device_ms = ms_since(t);
        let t = Instant::now();
        let mut resolved = resolve_on_chip(cupti, &chip, Some(&availability))?;
        if !self.settings.atomics {
            resolved
                .choices
                .retain(|(spec, _)| spec.field != Field::GlobalAtomicRequests);
        }
        for (spec, src) in &resolved.choices {
            debug!("{:?} <- {src}", spec.field);
        }
        let mut names: Vec<&str> = resolved.metric_names();
        for m in &self.settings.extra_metrics {
            if names.contains(&m.as_str()) {
                continue;
            }
            match usable_on_chip(cupti, &chip, Some(&availability), m) {
                Ok(()) => {
                    debug!("extra metric {m}");
                    names.push(m);
                }
                Err(e) => eprintln!(
                    "klaraptor-collect: warning: extra metric {m} skipped: not usable on \
                     {chip} ({e})"
                ),
            }
        }
        setup.ctx_resolve_ms = ms_since(t);
        let t = Instant::now();
        let config = MetricConfig::new(cupti, &chip, Some(availability), &names)?;
        setup.ctx_config_ms = ms_since(t);
        let t = Instant::now();
        let flush = if self.settings.no_flush {
            debug!("L2 flush disabled by KLARAPTOR_COLLECT_NO_FLUSH");
            None
        } else {
            match L2Flush::new(&self.driver, device) {
                Ok(f) => {
                    debug!(
                        "L2 flush ready: {} MiB read before each pass",
                        f.bytes() >> 20
                    );
                    Some(f)
                }
                Err(e) => {
                    eprintln!(
                        "klaraptor-collect: warning: no L2 flush before the profiler passes \
                         ({e}); the DRAM counters will miss data that stays in L2"
                    );
                    None
                }
            }
        };
        setup.ctx_flush_ms = ms_since(t);
        let names = config.metric_names().map(String::from).collect();
        let ranges = self.settings.ranges_per_session.unwrap_or(usize::MAX);
        // Enabled now, before any shape is timed, so that every timed launch of the process
        // runs alike. Refused (another process holds the counters), the first session tries
        // again and reports it.
        let enabled = if self.settings.enable_per_session {
            None
        } else {
            match RangeProfiler::enable(cupti, ctx) {
                Ok(r) => Some(r),
                Err(e) => {
                    debug!("range profiler not enabled at set-up ({e}); the first session tries");
                    None
                }
            }
        };
        Ok(Profiling {
            cupti: cupti.clone(),
            resolved,
            config,
            names,
            flush,
            ranges_per_session: Cell::new(ranges),
            enabled: std::cell::RefCell::new(enabled),
        })
    }

    /// The kernel's registers per thread and static shared memory, as the driver gives them
    /// for the compiled kernel (`CU_FUNC_ATTRIBUTE_NUM_REGS`: what `ptxas -v` and
    /// `cudaFuncGetAttributes` say). ncu's `launch__registers_per_thread` can be larger for
    /// small kernels (16 for a 10-register kernel on the H200): the register file is
    /// allocated in units of 256 registers per warp, which both counts fill alike.
    fn resources(&self, kernel: Kernel, device: CUdevice) -> Result<Resources> {
        let attr = |a: CUfunction_attribute| -> Result<u32> {
            let v = match self.driver.kernel_attribute(kernel, a, device) {
                Ok(v) => {
                    if debug::enabled() {
                        match self.driver.kernel_function_attribute(kernel, a) {
                            Ok(f) if f == v => {}
                            Ok(f) => debug!(
                                "attribute {a}: cuKernelGetAttribute says {v}, the function in \
                                 this context {f}"
                            ),
                            Err(e) => debug!("attribute {a}: no function in this context: {e}"),
                        }
                    }
                    v
                }
                Err(e) => {
                    debug!("cuKernelGetAttribute failed ({e}); trying the kernel's function");
                    self.driver.kernel_function_attribute(kernel, a)?
                }
            };
            Ok(u32::try_from(v).unwrap_or(0))
        };
        Ok(Resources {
            regs: attr(CUfunction_attribute_enum_CU_FUNC_ATTRIBUTE_NUM_REGS)?,
            smem_static: attr(CUfunction_attribute_enum_CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES)?,
        })
    }

    /// Warm-up launches, one timed launch that sets how many launches a run needs
    /// ([`batch`]), then `runs` timed runs of that many launches: the mean time per launch of
    /// each run, in milliseconds, and the launches per run.
    fn time_shape(
        &self,
        gate: &Gate,
        req: &Request,
        i: usize,
        start: &Event,
        stop: &Event,
    ) -> std::result::Result<(Vec<f64>, u32), ShapeError> {
        for _ in 0..req.warmup {
            self.launch(req, i)?;
        }
        self.driver
            .stream_synchronize(req.stream)
            .map_err(|e| self.after_failed_sync(e))?;
        let one = self.timed_run(gate, req, i, 1, start, stop)?;
        let n = batch(one, self.settings.batch_us);
        let mut runs = Vec::with_capacity(req.runs as usize);
        for _ in 0..req.runs {
            runs.push(self.timed_run(gate, req, i, n, start, stop)?);
        }
        debug!("shape {i}: one launch {one} ms; {n} launch(es) a run: {runs:?} ms per launch");
        Ok((runs, n))
    }

    /// One timed run: the gate, the start event, `n` launches, the stop event; again with a
    /// longer gate while the queueing does not fit in it. The mean per launch (ms).
    fn timed_run(
        &self,
        gate: &Gate,
        req: &Request,
        i: usize,
        n: u32,
        start: &Event,
        stop: &Event,
    ) -> std::result::Result<f64, ShapeError> {
        loop {
            let queueing = Instant::now();
            gate.hold(req.stream)?;
            start.record(req.stream)?;
            for _ in 0..n {
                self.launch(req, i)?;
            }
            stop.record(req.stream)?;
            let queued = queueing.elapsed();
            let fitted = gate.fitted(queued);
            stop.synchronize().map_err(|e| self.after_failed_sync(e))?;
            if fitted {
                return Ok(stop.elapsed_since(start)? / f64::from(n));
            }
            debug!(
                "queueing {n} launch(es) took {queued:?}, longer than the gate allows: again \
                 with a gate of {:?}",
                gate.length()
            );
        }
    }

    /// The profiler passes of the shapes `todo` (indices into the request, in order), in
    /// sessions of at most `p.ranges_per_session` shapes; each shape's counters, or why it
    /// has none, go into `profiled`. Returns the error that stopped the profiler, if one
    /// did: the shapes it left get a message, and the request then fails, after its samples
    /// are written.
    fn profile_shapes(
        &self,
        ctx: Context,
        p: &Profiling,
        req: &Request,
        todo: &[usize],
        profiled: &mut [Profiled],
        stats: &mut SweepStats,
    ) -> Option<Error> {
        let mut queue = sweep::sessions(todo, p.ranges_per_session.get());
        let mut stopped: Option<String> = None;
        let mut fatal = None;
        let mut refused = None;
        while let Some(chunk) = queue.pop_front() {
            if let Some(why) = &stopped {
                for &i in &chunk {
                    profiled[i] = Some(Err(format!("not profiled: {why}")));
                }
                continue;
            }
            stats.sessions += 1;
            match self.profile_session(ctx, p, req, &chunk, stats) {
                Ok(done) => {
                    for (i, r) in done.results {
                        profiled[i] = Some(r);
                    }
                    if let Some(msg) = done.sticky {
                        stopped = Some(format!("the CUDA context is unusable after {msg}"));
                    }
                }
                Err(SessionError::Retry(e)) => match sweep::halve(&chunk) {
                    Some((a, b, half)) => {
                        eprintln!(
                            "klaraptor-collect: warning: CUPTI refused a profiler session of {} \
                             shapes ({e}); trying sessions of at most {half}",
                            chunk.len()
                        );
                        p.ranges_per_session.set(half);
                        queue.push_front(b);
                        queue.push_front(a);
                    }
                    None => {
                        let msg = format!("the profiler failed: {e}");
                        profiled[chunk[0]] = Some(Err(msg.clone()));
                        refused.get_or_insert(msg);
                    }
                },
                Err(SessionError::Sticky(msg)) => {
                    for &i in &chunk {
                        profiled[i] = Some(Err(msg.clone()));
                    }
                    stopped = Some(format!("the CUDA context is unusable after {msg}"));
                }
                Err(SessionError::Fatal(e)) => {
                    for &i in &chunk {
                        profiled[i] = Some(Err(format!("the profiler failed: {e}")));
                    }
                    stopped = Some(format!("the profiler failed: {e}"));
                    fatal = Some(e);
                }
            }
        }
        // A profiler that measured nothing at all fails the request, as it always did.
        let none_measured = !todo.iter().any(|&i| matches!(profiled[i], Some(Ok(_))));
        match (fatal, refused) {
            (Some(e), _) => Some(e),
            (None, Some(msg)) if none_measured => Some(Error::Unusable(format!(
                "no shape of {} could be profiled; the first: {msg}",
                req.display_name()
            ))),
            _ => None,
        }
    }

    /// One range-profiler session over the shapes `chunk` (module documentation).
    fn profile_session(
        &self,
        ctx: Context,
        p: &Profiling,
        req: &Request,
        chunk: &[usize],
        stats: &mut SweepStats,
    ) -> std::result::Result<SessionOutcome, SessionError> {
        self.driver
            .ctx_synchronize()
            .map_err(|e| self.session_sync_error(e))?;
        let t = Instant::now();
        let kept = p.enabled.borrow_mut().take();
        let profiler = match kept {
            Some(r) => r,
            None => RangeProfiler::enable(&p.cupti, ctx)?,
        };
        let mut data = profiler.counter_data_image(&p.config, chunk.len())?;
        let names: Vec<CString> = chunk.iter().map(|&i| sweep::range_name(i)).collect();
        let mut failed: Vec<Option<i32>> = vec![None; chunk.len()];
        {
            let session = profiler.configure(&p.config, &mut data, chunk.len())?;
            stats.session_setup_ms += ms_since(t);
            let t = Instant::now();
            let limit = 4 * p.config.passes().max(1) + 4;
            let mut passes = 0;
            loop {
                let ts = Instant::now();
                session.start()?;
                stats.pass_start_ms += ms_since(ts);
                debug!("pass {} started in {:.1} ms", passes + 1, ms_since(ts));
                for (k, &i) in chunk.iter().enumerate() {
                    let ts = Instant::now();
                    // The previous range's work (and whatever CUPTI queued at its pop) is
                    // done before the flush, and the flush before this range opens: no
                    // range sees another's traffic. (With a session per shape, the stop
                    // and start between the ranges did the same.)
                    self.driver
                        .ctx_synchronize()
                        .map_err(|e| self.session_sync_error(e))?;
                    stats.pass_sync_ms += ms_since(ts);
                    let ts = Instant::now();
                    if let Some(flush) = &p.flush {
                        flush.run(req.stream).map_err(SessionError::Fatal)?;
                        self.driver
                            .stream_synchronize(req.stream)
                            .map_err(|e| self.session_sync_error(e))?;
                    }
                    stats.pass_flush_ms += ms_since(ts);
                    let ts = Instant::now();
                    session.push_range(&names[k])?;
                    // After a failed launch the shape's range stays, empty, in every pass,
                    // so that the passes replay the same ranges.
                    if failed[k].is_none() {
                        let rc = req.launch(i);
                        if rc != 0 {
                            failed[k] = Some(rc);
                        }
                    }
                    session.pop_range()?;
                    stats.pass_ranges_ms += ms_since(ts);
                }
                let ts = Instant::now();
                let end = session.stop()?;
                stats.pass_stop_ms += ms_since(ts);
                passes += 1;
                debug!(
                    "session of {} shape(s): pass {passes} submitted (CUPTI pass index {}, all \
                     submitted: {})",
                    chunk.len(),
                    end.pass_index,
                    end.all_passes_submitted
                );
                if end.all_passes_submitted {
                    break;
                }
                if passes >= limit {
                    return Err(SessionError::Fatal(Error::Unusable(format!(
                        "CUPTI still asks for passes after {passes} (the config needs {})",
                        p.config.passes()
                    ))));
                }
            }
            stats.passes += passes;
            stats.passes_ms += ms_since(t);
            let t = Instant::now();
            let dropped = session.decode()?;
            stats.decode_ms += ms_since(t);
            if dropped > 0 {
                return Err(SessionError::Retry(Error::Unusable(format!(
                    "CUPTI dropped {dropped} of {} range(s)",
                    chunk.len()
                ))));
            }
        }
        let t = Instant::now();
        if self.settings.enable_per_session {
            drop(profiler);
        } else {
            *p.enabled.borrow_mut() = Some(profiler);
        }
        stats.decode_ms += ms_since(t);

        let t = Instant::now();
        let mut results = Vec::with_capacity(chunk.len());
        let mut sticky = None;
        for (k, &i) in chunk.iter().enumerate() {
            if let Some(rc) = failed[k] {
                match self.failed_launch(rc) {
                    ShapeError::Sticky(msg) => {
                        sticky.get_or_insert_with(|| msg.clone());
                        results.push((i, Err(msg)));
                    }
                    ShapeError::Shape(msg) => results.push((i, Err(msg))),
                    ShapeError::Collector(e) => return Err(SessionError::Fatal(e)),
                }
            }
        }
        let ranges = data.num_ranges(&p.cupti)?;
        let range_names: Vec<Option<String>> = (0..ranges)
            .map(|r| data.range_name(&p.cupti, r).ok())
            .collect();
        let map = sweep::map_ranges(&range_names, chunk)
            .map_err(|e| SessionError::Retry(Error::Unusable(e)))?;
        for (r, i) in map.pairs {
            if results.iter().any(|(s, _)| *s == i) {
                continue; // its launch failed
            }
            debug!("shape {i}: range {r} is {:?}", range_names[r]);
            results.push((i, self.evaluate(p, &data, r)));
        }
        for i in map.missing {
            if !results.iter().any(|(s, _)| *s == i) {
                results.push((i, Err("CUPTI returned no range for this shape".into())));
            }
        }
        results.sort_by_key(|(i, _)| *i);
        stats.evaluate_ms += ms_since(t);
        Ok(SessionOutcome { results, sticky })
    }

    /// The counters of range `range` of a decoded image.
    fn evaluate(
        &self,
        p: &Profiling,
        data: &CounterDataImage,
        range: usize,
    ) -> std::result::Result<metrics::Hardware, String> {
        let values = p
            .config
            .evaluate(data, range)
            .map_err(|e| format!("CUPTI could not evaluate its range: {e}"))?;
        let map: HashMap<&str, f64> = p.names.iter().map(String::as_str).zip(values).collect();
        if debug::enabled() {
            // One machine-readable line per shape: the raw values behind the sample (the GPU
            // check keeps them as fixtures for the decoding tests).
            let ordered: BTreeMap<&str, f64> = map.iter().map(|(k, v)| (*k, *v)).collect();
            debug!(
                "metric values {}",
                serde_json::to_string(&ordered).unwrap_or_default()
            );
        }
        metrics::decode(&p.resolved, &map)
            .map_err(|e| format!("the counters could not be decoded: {e}"))
    }

    /// Launches shape `i` through the shim; a nonzero result is a failed shape.
    fn launch(&self, req: &Request, i: usize) -> std::result::Result<(), ShapeError> {
        match req.launch(i) {
            0 => Ok(()),
            rc => Err(self.failed_launch(rc)),
        }
    }

    fn failed_launch(&self, rc: i32) -> ShapeError {
        let msg = format!("launch failed: {} ({rc})", runtime_error_name(rc));
        match self.driver.ctx_synchronize() {
            Ok(()) => ShapeError::Shape(msg),
            Err(e) => ShapeError::Sticky(format!("{msg}, then {e}")),
        }
    }

    /// A synchronisation inside a profiler session failed: the context is unusable
    /// (sticky), else CUPTI or the collector is at fault.
    fn session_sync_error(&self, e: Error) -> SessionError {
        match self.driver.ctx_synchronize() {
            Err(again) => SessionError::Sticky(format!("an error in the kernel: {again}")),
            Ok(()) if e.cuda_code().is_some() => SessionError::Retry(e),
            Ok(()) => SessionError::Fatal(e),
        }
    }

    /// A synchronisation failed: an asynchronous error of a launch (sticky when the context
    /// stays unusable), or the collector's own mistake.
    fn after_failed_sync(&self, e: Error) -> ShapeError {
        match self.driver.ctx_synchronize() {
            Err(again) => ShapeError::Sticky(format!("an error in the kernel: {again}")),
            Ok(()) if e.cuda_code().is_some() => {
                ShapeError::Shape(format!("the kernel failed: {e}"))
            }
            Ok(()) => ShapeError::Collector(e),
        }
    }
}

/// Launches per timed run: enough that the run lasts `target_us`, from the time of one
/// launch (`one_ms`); 1 when the target is 0 or the time is unusable, at most [`MAX_BATCH`].
fn batch(one_ms: f64, target_us: u32) -> u32 {
    if target_us == 0 || !(one_ms.is_finite() && one_ms > 0.0) {
        return 1;
    }
    let n = (f64::from(target_us) / (one_ms * 1e3)).ceil();
    if n >= f64::from(MAX_BATCH) {
        MAX_BATCH
    } else {
        (n as u32).max(1)
    }
}

/// Milliseconds since `t`.
fn ms_since(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

/// A shape's sample from its timing and its profile: counters when both worked (hardware
/// counters 0 in time-only mode, where it was not profiled), else the first failure.
fn outcome(
    timed: Timed,
    hw: Profiled,
    res: &Resources,
    dynamic_smem: u64,
) -> (Option<Counters>, Option<String>) {
    match (timed, hw) {
        (Timed::Failed(msg), _) => (None, Some(msg)),
        (Timed::Runs(..), Some(Err(msg))) => (None, Some(msg)),
        (Timed::Runs(runs, t, n), hw) => {
            let hw = hw.map(|h| h.expect("the error case is matched above"));
            let mut c = counters(hw.as_ref(), t, runs, res, dynamic_smem);
            c.launches_per_run = Some(n);
            (Some(c), None)
        }
    }
}

/// Chooses the metric table's names valid on `chip`: each candidate is tried by adding it to
/// the config of a scratch host object, which is exactly the check a config image makes.
pub fn resolve_on_chip(
    lib: &Arc<CuptiLib>,
    chip: &str,
    availability: Option<&[u8]>,
) -> Result<Resolved> {
    // The common case first: every row's first source usable, checked with one host object
    // (about 5 ms) instead of one per metric (about 90 ms for the table on an H200).
    let mut first: Vec<&'static str> = Vec::new();
    for m in TABLE.iter().flat_map(|spec| spec.sources[0].metrics()) {
        if !first.contains(&m) {
            first.push(m);
        }
    }
    let names: Vec<CString> = first.iter().filter_map(|m| CString::new(*m).ok()).collect();
    if names.len() == first.len() {
        let mut host = HostObject::new(lib, chip, availability.map(<[u8]>::to_vec))?;
        if host.add_metrics(&names).is_ok() {
            return Ok(Resolved {
                choices: TABLE.iter().map(|spec| (*spec, spec.sources[0])).collect(),
            });
        }
        debug!("not every first choice of the metric table is usable on {chip}; one by one");
    }
    let mut fatal = None;
    let resolved = metrics::resolve(TABLE, |m| {
        if fatal.is_some() {
            return false;
        }
        let Ok(name) = CString::new(m) else {
            return false;
        };
        match HostObject::new(lib, chip, availability.map(<[u8]>::to_vec)) {
            Err(e) => {
                fatal = Some(e);
                false
            }
            Ok(mut host) => match host.add_metrics(&[name]) {
                Ok(()) => true,
                Err(e) => {
                    debug!("{m} is not usable on {chip}: {e}");
                    false
                }
            },
        }
    });
    if let Some(e) = fatal {
        return Err(e);
    }
    resolved.map_err(|missing| Error::MissingMetrics {
        chip: chip.to_string(),
        missing,
    })
}

/// Whether `metric` can be added to a config on `chip` (the check [`resolve_on_chip`] makes
/// for each name of the table).
pub fn usable_on_chip(
    lib: &Arc<CuptiLib>,
    chip: &str,
    availability: Option<&[u8]>,
    metric: &str,
) -> Result<()> {
    let name = CString::new(metric)
        .map_err(|_| Error::Unusable(format!("metric name {metric:?} contains NUL")))?;
    let mut host = HostObject::new(lib, chip, availability.map(<[u8]>::to_vec))?;
    host.add_metrics(&[name])
}

/// The counters of one measured shape: the hardware part from `hw` (all 0 in time-only
/// mode, where `hw` is `None`, and no L1 hit count), the times, and the kernel's resources.
fn counters(
    hw: Option<&metrics::Hardware>,
    time_ms: f64,
    runs: Vec<f64>,
    res: &Resources,
    dynamic_smem: u64,
) -> Counters {
    hw.cloned()
        .unwrap_or_default()
        .into_counters(metrics::LaunchFigures {
            time_ms,
            time_runs_ms: runs,
            regs_per_thread: res.regs,
            smem_static: res.smem_static,
            smem_dynamic: u32::try_from(dynamic_smem).unwrap_or(u32::MAX),
        })
}

/// One sample as the line appended to the output file.
pub fn sample_line(sample: &Sample) -> String {
    let mut line = serde_json::to_string(sample).expect("a Sample always serialises");
    line.push('\n');
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    fn saxpy_sample() -> Sample {
        Sample {
            sizes: vec![1 << 20],
            block: [256, 1, 1],
            grid: [4096, 1, 1],
            error: None,
            counters: Some(Counters {
                inst_executed: 393_216,
                inst_global_ld: 65_536,
                inst_global_st: 32_768,
                inst_shared_ld: 0,
                inst_shared_st: 0,
                inst_barrier: 0,
                gld_requests: 65_536,
                gst_requests: 32_768,
                gld_sectors: 262_144,
                gst_sectors: 131_072,
                gld_l1_hit_sectors: Some(0),
                dram_bytes_read: 8_388_608,
                dram_bytes_write: 4_194_304,
                achieved_active_warps: 52.75,
                global_atomic_requests: Some(0),
                time_ms: 0.0123,
                time_runs_ms: vec![0.0125, 0.0123, 0.0121],
                launches_per_run: None,
                regs_per_thread: 16,
                smem_static: 0,
                smem_dynamic: 0,
            }),
        }
    }

    #[test]
    fn a_sample_line_is_one_json_object_that_reads_back_as_the_same_sample() {
        let s = saxpy_sample();
        let line = sample_line(&s);
        assert!(line.ends_with('\n'));
        assert_eq!(line.matches('\n').count(), 1);
        let back: Sample = serde_json::from_str(line.trim_end()).unwrap();
        assert_eq!(back, s);
        assert!(
            !line.contains("\"error\""),
            "no error field for a good sample: {line}"
        );
    }

    fn env_of(vars: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<OsString> {
        move |k: &str| {
            vars.iter()
                .find(|(name, _)| *name == k)
                .map(|(_, v)| OsString::from(v))
        }
    }

    fn env_of_owned(vars: Vec<(&'static str, &'static str)>) -> impl Fn(&str) -> Option<OsString> {
        move |k: &str| {
            vars.iter()
                .find(|(name, _)| *name == k)
                .map(|(_, v)| OsString::from(v))
        }
    }

    #[test]
    fn settings_come_from_the_environment() {
        assert_eq!(Settings::from_env(&env_of(&[])), Settings::default());
        let s = Settings::from_env(&env_of(&[
            ("KLARAPTOR_COLLECT_TIME_ONLY", "1"),
            ("KLARAPTOR_COLLECT_NO_FLUSH", "yes"),
            (
                "KLARAPTOR_COLLECT_EXTRA_METRICS",
                " smsp__inst_executed_pipe_cbu.sum,,sm__cycles_elapsed.max ",
            ),
        ]));
        assert!(s.time_only && s.no_flush);
        assert_eq!(
            s.extra_metrics,
            ["smsp__inst_executed_pipe_cbu.sum", "sm__cycles_elapsed.max"]
        );
        assert!(!Settings::from_env(&env_of(&[("KLARAPTOR_COLLECT_TIME_ONLY", "0")])).time_only);
        assert_eq!(s.ranges_per_session, None);
        assert!(!s.timing);
        let s = Settings::from_env(&env_of(&[
            ("KLARAPTOR_COLLECT_RANGES", " 8 "),
            ("KLARAPTOR_COLLECT_TIMING", "1"),
            ("KLARAPTOR_COLLECT_ENABLE_PER_SESSION", "1"),
            ("KLARAPTOR_COLLECT_ATOMICS", "1"),
        ]));
        assert_eq!(s.ranges_per_session, Some(8));
        assert!(s.timing && s.enable_per_session && s.atomics);
        let d = Settings::default();
        assert!(!d.enable_per_session && !d.atomics);
        for bad in ["0", "-2", "many", ""] {
            let s = Settings::from_env(&env_of_owned(vec![("KLARAPTOR_COLLECT_RANGES", bad)]));
            assert_eq!(s.ranges_per_session, None, "{bad:?}");
        }
        assert!(!Settings::from_env(&env_of(&[("KLARAPTOR_COLLECT_TIME_ONLY", "")])).time_only);
        assert_eq!(s.batch_us, DEFAULT_BATCH_US);
        let batch = |v: &'static str| {
            Settings::from_env(&env_of_owned(vec![("KLARAPTOR_COLLECT_BATCH_US", v)])).batch_us
        };
        assert_eq!((batch("0"), batch(" 250 ")), (0, 250));
        for bad in ["-1", "lots", "1.5"] {
            assert_eq!(batch(bad), DEFAULT_BATCH_US, "{bad:?}");
        }
    }

    #[test]
    fn a_run_launches_enough_to_last_the_target_within_bounds() {
        // 5 µs a launch, 100 µs a run: 20 launches; 7 µs: 15 (rounded up).
        assert_eq!(batch(0.005, 100), 20);
        assert_eq!(batch(0.007, 100), 15);
        // A launch that outlasts the target runs alone; a tiny one, at most MAX_BATCH times.
        assert_eq!(batch(2.0, 100), 1);
        assert_eq!(batch(0.0001, 100), MAX_BATCH);
        // Batching off, or a first time that cannot be used: one launch a run.
        assert_eq!(batch(0.005, 0), 1);
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert_eq!(batch(bad, 100), 1, "{bad}");
        }
    }

    #[test]
    fn a_time_only_sample_has_times_and_resources_and_zero_hardware_counters() {
        let res = Resources {
            regs: 10,
            smem_static: 4096,
        };
        let c = counters(None, 0.0123, vec![0.0125, 0.0123, 0.0121], &res, 512);
        assert_eq!(
            c,
            Counters {
                inst_executed: 0,
                inst_global_ld: 0,
                inst_global_st: 0,
                inst_shared_ld: 0,
                inst_shared_st: 0,
                inst_barrier: 0,
                gld_requests: 0,
                gst_requests: 0,
                gld_sectors: 0,
                gst_sectors: 0,
                gld_l1_hit_sectors: None,
                dram_bytes_read: 0,
                dram_bytes_write: 0,
                achieved_active_warps: 0.0,
                global_atomic_requests: None,
                time_ms: 0.0123,
                time_runs_ms: vec![0.0125, 0.0123, 0.0121],
                launches_per_run: None,
                regs_per_thread: 10,
                smem_static: 4096,
                smem_dynamic: 512,
            }
        );
        // A measured shape keeps every hardware field.
        let full = saxpy_sample().counters.unwrap();
        let hw = metrics::Hardware {
            inst_executed: full.inst_executed,
            inst_global_ld: full.inst_global_ld,
            inst_global_st: full.inst_global_st,
            inst_shared_ld: full.inst_shared_ld,
            inst_shared_st: full.inst_shared_st,
            inst_barrier: full.inst_barrier,
            gld_requests: full.gld_requests,
            gst_requests: full.gst_requests,
            gld_sectors: full.gld_sectors,
            gst_sectors: full.gst_sectors,
            gld_l1_hit_sectors: full.gld_l1_hit_sectors,
            dram_bytes_read: full.dram_bytes_read,
            dram_bytes_write: full.dram_bytes_write,
            achieved_active_warps: full.achieved_active_warps,
            global_atomic_requests: full.global_atomic_requests,
        };
        let res = Resources {
            regs: full.regs_per_thread,
            smem_static: full.smem_static,
        };
        let c = counters(Some(&hw), full.time_ms, full.time_runs_ms.clone(), &res, 0);
        assert_eq!(c, full);
    }

    #[test]
    fn a_failed_shape_has_an_error_and_no_counters() {
        let s = Sample {
            sizes: vec![2048],
            block: [1024, 2, 1],
            grid: [2, 1024, 1],
            error: Some("launch failed: cudaErrorInvalidConfiguration (9)".into()),
            counters: None,
        };
        let line = sample_line(&s);
        assert!(!line.contains("counters"), "{line}");
        let back: Sample = serde_json::from_str(&line).unwrap();
        assert_eq!(back, s);
    }

    fn some_hardware() -> metrics::Hardware {
        metrics::Hardware {
            inst_executed: 1000,
            inst_global_ld: 100,
            inst_global_st: 50,
            inst_shared_ld: 0,
            inst_shared_st: 0,
            inst_barrier: 0,
            gld_requests: 100,
            gst_requests: 50,
            gld_sectors: 400,
            gst_sectors: 200,
            gld_l1_hit_sectors: Some(100),
            dram_bytes_read: 12_800,
            dram_bytes_write: 6_400,
            achieved_active_warps: 12.5,
            global_atomic_requests: Some(0),
        }
    }

    #[test]
    fn each_shape_gets_its_own_outcome_so_one_failure_loses_no_other_shape() {
        let res = Resources {
            regs: 32,
            smem_static: 0,
        };
        let runs = vec![0.02, 0.01, 0.03];
        // Measured: the profile's counters with the timing's times.
        let (c, e) = outcome(
            Timed::Runs(runs.clone(), 0.02, 4),
            Some(Ok(some_hardware())),
            &res,
            0,
        );
        assert_eq!(e, None);
        let c = c.unwrap();
        assert_eq!((c.inst_executed, c.dram_bytes_read), (1000, 12_800));
        assert_eq!((c.time_ms, c.time_runs_ms.clone()), (0.02, runs.clone()));
        assert_eq!(c.launches_per_run, Some(4));
        assert_eq!(c.regs_per_thread, 32);
        // Time-only: not profiled, zero hardware counters.
        let (c, e) = outcome(Timed::Runs(runs.clone(), 0.02, 1), None, &res, 0);
        assert_eq!((c.unwrap().inst_executed, e), (0, None));
        // Profiled in vain: no counters at all (never zeros that look measured).
        let (c, e) = outcome(
            Timed::Runs(runs, 0.02, 1),
            Some(Err("CUPTI returned no range for this shape".into())),
            &res,
            0,
        );
        assert_eq!(c, None);
        assert_eq!(e.as_deref(), Some("CUPTI returned no range for this shape"));
        // Failed at launch: the timing's message wins.
        let (c, e) = outcome(
            Timed::Failed("launch failed: cudaErrorInvalidConfiguration (9)".into()),
            None,
            &res,
            0,
        );
        assert_eq!(c, None);
        assert!(e.unwrap().starts_with("launch failed"));
    }

    #[test]
    fn a_refused_session_is_retried_smaller_unless_nothing_can_work() {
        let cupti = |code| Error::Cupti {
            call: "cuptiRangeProfilerSetConfig",
            code,
            text: String::new(),
        };
        assert!(matches!(
            SessionError::from(cupti(
                crate::sys::cupti::CUptiResult_CUPTI_ERROR_INVALID_PARAMETER
            )),
            SessionError::Retry(_)
        ));
        assert!(matches!(
            SessionError::from(cupti(CUptiResult_CUPTI_ERROR_INSUFFICIENT_PRIVILEGES)),
            SessionError::Fatal(_)
        ));
        assert!(matches!(
            SessionError::from(cupti(
                CUptiResult_CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED
            )),
            SessionError::Fatal(_)
        ));
        assert!(matches!(
            SessionError::from(Error::Unusable("no context".into())),
            SessionError::Fatal(_)
        ));
    }
}
