//! The sweep: for each shape of a request, warm-up launches, timed launches, the profiler
//! passes, and one JSON line (a `record::Sample`) appended to the request's file.
//!
//! Two modes ([`Settings`], read from the environment once, when the collector starts):
//! - full (the default): time and hardware counters, as below;
//! - time only (`KLARAPTOR_COLLECT_TIME_ONLY=1`): the warm-up and timed launches only. CUPTI
//!   is not loaded and no profiler pass runs, so a shape costs `warmup + runs` launches. Each
//!   sample still has `counters`, with `time_ms`, `time_runs_ms`, `regs_per_thread` and
//!   `smem_*` set and every hardware field 0; `inst_executed == 0` marks such a sample (a
//!   launch that ran executes at least one instruction). The accuracy study uses it for its
//!   exhaustive search over shapes at large sizes.
//!
//! Per context (lazily, once): the device is checked with `cuptiProfilerDeviceSupported`, its
//! chip named, its counter availability read, the metric table resolved against the chip, and
//! one config image built for the table's metrics. Per shape: the range profiler is enabled,
//! configured for one user range with user replay, the shape launched once per pass that the
//! config needs (after an L2 flush, see [`crate::flush`]), the data decoded and evaluated, and
//! the profiler disabled again (the pattern NVIDIA's nvbench uses per measurement).

use crate::cupti::{CounterDataImage, CuptiLib, HostObject, MetricConfig, RangeProfiler};
use crate::debug::{self, debug};
use crate::driver::{Context, Driver, Event, Kernel};
use crate::error::{Error, Result};
use crate::flush::L2Flush;
use crate::load;
use crate::metrics::{self, Resolved, TABLE};
use crate::request::{runtime_error_name, Request};
use crate::stats::median;
use crate::sys::cuda::*;
use klaraptor_profiler::record::{Counters, Sample};
use std::collections::{BTreeMap, HashMap};
use std::ffi::{CString, OsString};
use std::io::Write;
use std::sync::Arc;

/// What the collector does, from the environment (see the module documentation).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Settings {
    /// `KLARAPTOR_COLLECT_TIME_ONLY`: time the shapes, read no counters.
    pub time_only: bool,
    /// `KLARAPTOR_COLLECT_NO_FLUSH`: no L2 flush before the profiler passes.
    pub no_flush: bool,
    /// `KLARAPTOR_COLLECT_EXTRA_METRICS` (comma-separated full metric names): collected
    /// besides the table's and shown in verbose mode's `metric values` line only; for trying
    /// candidate metrics on a new GPU. A name the chip does not have is skipped with a warning.
    pub extra_metrics: Vec<String>,
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
        Settings {
            time_only: flag("KLARAPTOR_COLLECT_TIME_ONLY"),
            no_flush: flag("KLARAPTOR_COLLECT_NO_FLUSH"),
            extra_metrics,
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
}

/// What the profiler passes of one context need.
struct Profiling {
    cupti: Arc<CuptiLib>,
    resolved: Resolved,
    config: MetricConfig,
    flush: Option<L2Flush>,
}

/// How one request went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Summary {
    pub measured: usize,
    pub failed: usize,
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

/// Register count and static shared memory of the kernel.
struct Resources {
    regs: u32,
    smem_static: u32,
}

impl Collector {
    /// Reads the [`Settings`] from `env`, loads libcuda and (unless time-only) libcupti (see
    /// [`load`] for where), and initialises the profiler.
    pub fn new(env: &dyn Fn(&str) -> Option<OsString>) -> Result<Self> {
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
        })
    }

    /// The settings this collector runs with.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Measures every shape of `req` and appends one line per shape to `req.out_path`.
    pub fn collect(&mut self, req: &Request) -> Result<Summary> {
        let ctx = self.driver.current_context()?.ok_or_else(|| {
            Error::Unusable(
                "no CUDA context is current on the calling thread; klaraptor_collect must be \
                 called after the CUDA runtime has initialised the device"
                    .into(),
            )
        })?;
        let idx = self.context_state(ctx)?;
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
        let mut summary = Summary {
            measured: 0,
            failed: 0,
        };
        let mut unusable: Option<String> = None;
        for (i, shape) in req.shapes.iter().enumerate() {
            let outcome = match &unusable {
                Some(why) => Err(ShapeError::Shape(format!("not run: {why}"))),
                None => self.measure(st, req, i, &resources),
            };
            let (counters, error) = match outcome {
                Ok(c) => (Some(c), None),
                Err(ShapeError::Shape(msg)) => (None, Some(msg)),
                Err(ShapeError::Sticky(msg)) => {
                    unusable = Some(format!("the CUDA context is unusable after {msg}"));
                    (None, Some(msg))
                }
                Err(ShapeError::Collector(e)) => return Err(e),
            };
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
        }
        debug!(
            "{}: {} measured, {} failed, appended to {}",
            req.display_name(),
            summary.measured,
            summary.failed,
            req.out_path.display()
        );
        Ok(summary)
    }

    /// The per-context setup, made on first use of a context.
    fn context_state(&mut self, ctx: Context) -> Result<usize> {
        if let Some(i) = self.contexts.iter().position(|s| s.ctx == ctx) {
            return Ok(i);
        }
        let device = self.driver.current_device()?;
        let profiling = match &self.cupti {
            Some(cupti) => Some(self.profiling_setup(cupti, ctx, device)?),
            None => None,
        };
        self.contexts.push(ContextState {
            ctx,
            device,
            profiling,
        });
        Ok(self.contexts.len() - 1)
    }

    /// The device check, metric table, config image and L2 flush of one context.
    fn profiling_setup(
        &self,
        cupti: &Arc<CuptiLib>,
        ctx: Context,
        device: CUdevice,
    ) -> Result<Profiling> {
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
        let resolved = resolve_on_chip(cupti, &chip, Some(&availability))?;
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
        let config = MetricConfig::new(cupti, &chip, Some(availability), &names)?;
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
        Ok(Profiling {
            cupti: cupti.clone(),
            resolved,
            config,
            flush,
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

    fn measure(
        &self,
        st: &ContextState,
        req: &Request,
        i: usize,
        res: &Resources,
    ) -> std::result::Result<Counters, ShapeError> {
        let runs = self.time_shape(req, i)?;
        let time_ms = median(&runs).ok_or_else(|| {
            ShapeError::Shape(format!("the timed runs gave no usable time: {runs:?}"))
        })?;
        let hw = match &st.profiling {
            Some(p) => Some(self.profile_shape(st.ctx, p, req, i)?),
            None => None,
        };
        Ok(counters(hw.as_ref(), time_ms, runs, res, req.dynamic_smem))
    }

    /// Warm-up launches, then `runs` launches each between two events on the request's
    /// stream; the elapsed time of each, in milliseconds.
    fn time_shape(&self, req: &Request, i: usize) -> std::result::Result<Vec<f64>, ShapeError> {
        for _ in 0..req.warmup {
            self.launch(req, i)?;
        }
        self.driver
            .stream_synchronize(req.stream)
            .map_err(|e| self.after_failed_sync(e))?;
        let start = Event::new(&self.driver)?;
        let stop = Event::new(&self.driver)?;
        let mut runs = Vec::with_capacity(req.runs as usize);
        for _ in 0..req.runs {
            start.record(req.stream)?;
            self.launch(req, i)?;
            stop.record(req.stream)?;
            stop.synchronize().map_err(|e| self.after_failed_sync(e))?;
            runs.push(stop.elapsed_since(&start)?);
        }
        debug!("shape {i}: times {runs:?} ms");
        Ok(runs)
    }

    /// The profiler passes of one shape, decoded into counters.
    fn profile_shape(
        &self,
        ctx: Context,
        st: &Profiling,
        req: &Request,
        i: usize,
    ) -> std::result::Result<metrics::Hardware, ShapeError> {
        self.driver
            .ctx_synchronize()
            .map_err(|e| self.after_failed_sync(e))?;
        let profiler = RangeProfiler::enable(&st.cupti, ctx)?;
        let mut data = profiler.counter_data_image(&st.config, 1)?;
        let mut failed_launch = None;
        {
            let session = profiler.configure(&st.config, &mut data, 1)?;
            let limit = 4 * st.config.passes().max(1) + 4;
            let mut passes = 0;
            loop {
                if let Some(flush) = &st.flush {
                    flush.run(req.stream)?;
                    self.driver.stream_synchronize(req.stream)?;
                }
                session.start()?;
                session.push_range(c"klaraptor")?;
                // After a failed launch the passes still run, empty, so that CUPTI's replay
                // ends in a consistent state before the profiler is disabled.
                if failed_launch.is_none() {
                    let rc = req.launch(i);
                    if rc != 0 {
                        failed_launch = Some(rc);
                    }
                }
                session.pop_range()?;
                let end = session.stop()?;
                passes += 1;
                debug!(
                    "shape {i}: pass {passes} submitted (CUPTI pass index {}, all submitted: {})",
                    end.pass_index, end.all_passes_submitted
                );
                if end.all_passes_submitted {
                    break;
                }
                if passes >= limit {
                    return Err(ShapeError::Collector(Error::Unusable(format!(
                        "CUPTI still asks for passes after {passes} (the config needs {})",
                        st.config.passes()
                    ))));
                }
            }
            let dropped = session.decode()?;
            if dropped > 0 {
                return Err(ShapeError::Collector(Error::Unusable(format!(
                    "CUPTI dropped {dropped} range(s) of shape {i}"
                ))));
            }
        }
        drop(profiler);
        if let Some(rc) = failed_launch {
            return Err(self.failed_launch(rc));
        }
        self.evaluate(st, &data, i)
    }

    fn evaluate(
        &self,
        st: &Profiling,
        data: &CounterDataImage,
        i: usize,
    ) -> std::result::Result<metrics::Hardware, ShapeError> {
        let ranges = data.num_ranges(&st.cupti)?;
        if ranges != 1 {
            return Err(ShapeError::Collector(Error::Unusable(format!(
                "CUPTI decoded {ranges} ranges for shape {i}, expected 1"
            ))));
        }
        if debug::enabled() {
            match data.range_name(&st.cupti, 0) {
                Ok(n) => debug!("shape {i}: range 0 is {n:?}"),
                Err(e) => debug!("shape {i}: range name unavailable ({e})"),
            }
        }
        let values = st.config.evaluate(data, 0)?;
        let names: Vec<&str> = st.config.metric_names().collect();
        let map: HashMap<&str, f64> = names.iter().copied().zip(values).collect();
        if debug::enabled() {
            // One machine-readable line per shape: the raw values behind the sample (the GPU
            // check keeps them as fixtures for the decoding tests).
            let ordered: BTreeMap<&str, f64> = map.iter().map(|(k, v)| (*k, *v)).collect();
            debug!(
                "metric values {}",
                serde_json::to_string(&ordered).unwrap_or_default()
            );
        }
        metrics::decode(&st.resolved, &map)
            .map_err(|e| ShapeError::Shape(format!("the counters could not be decoded: {e}")))
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

/// Chooses the metric table's names valid on `chip`: each candidate is tried by adding it to
/// the config of a scratch host object, which is exactly the check a config image makes.
pub fn resolve_on_chip(
    lib: &Arc<CuptiLib>,
    chip: &str,
    availability: Option<&[u8]>,
) -> Result<Resolved> {
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
/// mode, where `hw` is `None`), the times, and the kernel's resources.
fn counters(
    hw: Option<&metrics::Hardware>,
    time_ms: f64,
    runs: Vec<f64>,
    res: &Resources,
    dynamic_smem: u64,
) -> Counters {
    let zero = metrics::Hardware::default();
    let hw = hw.unwrap_or(&zero);
    Counters {
        inst_executed: hw.inst_executed,
        inst_global_ld: hw.inst_global_ld,
        inst_global_st: hw.inst_global_st,
        inst_shared_ld: hw.inst_shared_ld,
        inst_shared_st: hw.inst_shared_st,
        inst_barrier: hw.inst_barrier,
        gld_requests: hw.gld_requests,
        gst_requests: hw.gst_requests,
        gld_sectors: hw.gld_sectors,
        gst_sectors: hw.gst_sectors,
        dram_bytes_read: hw.dram_bytes_read,
        dram_bytes_write: hw.dram_bytes_write,
        achieved_active_warps: hw.achieved_active_warps,
        time_ms,
        time_runs_ms: runs,
        regs_per_thread: res.regs,
        smem_static: res.smem_static,
        smem_dynamic: u32::try_from(dynamic_smem).unwrap_or(u32::MAX),
    }
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
                dram_bytes_read: 8_388_608,
                dram_bytes_write: 4_194_304,
                achieved_active_warps: 52.75,
                time_ms: 0.0123,
                time_runs_ms: vec![0.0125, 0.0123, 0.0121],
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
        assert!(!Settings::from_env(&env_of(&[("KLARAPTOR_COLLECT_TIME_ONLY", "")])).time_only);
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
                dram_bytes_read: 0,
                dram_bytes_write: 0,
                achieved_active_warps: 0.0,
                time_ms: 0.0123,
                time_runs_ms: vec![0.0125, 0.0123, 0.0121],
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
            dram_bytes_read: full.dram_bytes_read,
            dram_bytes_write: full.dram_bytes_write,
            achieved_active_warps: full.achieved_active_warps,
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
}
