//! The safe CUPTI API (third layer): the library, the profiler host object, metric
//! configurations (config images), the range profiler of a context, and counter data images.
//!
//! The sequence follows the CUPTI range-profiling documentation (CUDA 12.6 Update 2+):
//! host side, [`HostObject`] → [`MetricConfig`] (config image, number of passes); target side,
//! [`RangeProfiler::enable`] → [`RangeProfiler::counter_data_image`] →
//! [`RangeProfiler::configure`] → per pass start, then push range / launch / pop range for
//! each range of the pass, then stop, until CUPTI says every pass was submitted → decode; then
//! [`MetricConfig::evaluate`] per range.

use crate::debug::debug;
use crate::driver::Context;
use crate::error::{Error, Result};
use crate::load::{self, Candidate};
use crate::sys::cuda::CUdevice;
use crate::sys::cupti::*;
use crate::sys::struct_sizes::*;
use std::ffi::{c_char, CStr, CString};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Parameter structs start zeroed with `structSize` set to the C `*_STRUCT_SIZE`.
trait Params: Sized {
    fn init() -> Self;
}

macro_rules! impl_params {
    ($($t:ident => $size:ident),* $(,)?) => {
        $(impl Params for $t {
            fn init() -> Self {
                $t { structSize: $size, ..Default::default() }
            }
        })*
    };
}

impl_params!(
    CUpti_Profiler_Initialize_Params => CUpti_Profiler_Initialize_Params_STRUCT_SIZE,
    CUpti_Device_GetChipName_Params => CUpti_Device_GetChipName_Params_STRUCT_SIZE,
    CUpti_Profiler_DeviceSupported_Params => CUpti_Profiler_DeviceSupported_Params_STRUCT_SIZE,
    CUpti_Profiler_GetCounterAvailability_Params => CUpti_Profiler_GetCounterAvailability_Params_STRUCT_SIZE,
    CUpti_Profiler_Host_Initialize_Params => CUpti_Profiler_Host_Initialize_Params_STRUCT_SIZE,
    CUpti_Profiler_Host_Deinitialize_Params => CUpti_Profiler_Host_Deinitialize_Params_STRUCT_SIZE,
    CUpti_Profiler_Host_GetSupportedChips_Params => CUpti_Profiler_Host_GetSupportedChips_Params_STRUCT_SIZE,
    CUpti_Profiler_Host_GetBaseMetrics_Params => CUpti_Profiler_Host_GetBaseMetrics_Params_STRUCT_SIZE,
    CUpti_Profiler_Host_GetSubMetrics_Params => CUpti_Profiler_Host_GetSubMetrics_Params_STRUCT_SIZE,
    CUpti_Profiler_Host_GetMetricProperties_Params => CUpti_Profiler_Host_GetMetricProperties_Params_STRUCT_SIZE,
    CUpti_Profiler_Host_ConfigAddMetrics_Params => CUpti_Profiler_Host_ConfigAddMetrics_Params_STRUCT_SIZE,
    CUpti_Profiler_Host_GetConfigImageSize_Params => CUpti_Profiler_Host_GetConfigImageSize_Params_STRUCT_SIZE,
    CUpti_Profiler_Host_GetConfigImage_Params => CUpti_Profiler_Host_GetConfigImage_Params_STRUCT_SIZE,
    CUpti_Profiler_Host_GetNumOfPasses_Params => CUpti_Profiler_Host_GetNumOfPasses_Params_STRUCT_SIZE,
    CUpti_Profiler_Host_EvaluateToGpuValues_Params => CUpti_Profiler_Host_EvaluateToGpuValues_Params_STRUCT_SIZE,
    CUpti_RangeProfiler_Enable_Params => CUpti_RangeProfiler_Enable_Params_STRUCT_SIZE,
    CUpti_RangeProfiler_Disable_Params => CUpti_RangeProfiler_Disable_Params_STRUCT_SIZE,
    CUpti_RangeProfiler_GetCounterDataSize_Params => CUpti_RangeProfiler_GetCounterDataSize_Params_STRUCT_SIZE,
    CUpti_RangeProfiler_CounterDataImage_Initialize_Params => CUpti_RangeProfiler_CounterDataImage_Initialize_Params_STRUCT_SIZE,
    CUpti_RangeProfiler_SetConfig_Params => CUpti_RangeProfiler_SetConfig_Params_STRUCT_SIZE,
    CUpti_RangeProfiler_Start_Params => CUpti_RangeProfiler_Start_Params_STRUCT_SIZE,
    CUpti_RangeProfiler_Stop_Params => CUpti_RangeProfiler_Stop_Params_STRUCT_SIZE,
    CUpti_RangeProfiler_PushRange_Params => CUpti_RangeProfiler_PushRange_Params_STRUCT_SIZE,
    CUpti_RangeProfiler_PopRange_Params => CUpti_RangeProfiler_PopRange_Params_STRUCT_SIZE,
    CUpti_RangeProfiler_DecodeData_Params => CUpti_RangeProfiler_DecodeData_Params_STRUCT_SIZE,
    CUpti_RangeProfiler_GetCounterDataInfo_Params => CUpti_RangeProfiler_GetCounterDataInfo_Params_STRUCT_SIZE,
    CUpti_RangeProfiler_CounterData_GetRangeInfo_Params => CUpti_RangeProfiler_CounterData_GetRangeInfo_Params_STRUCT_SIZE,
);

/// Calls a CUPTI function that takes one parameter struct and checks its result.
macro_rules! cupti_call {
    ($lib:expr, $f:ident, $params:expr) => {{
        let lib: &CuptiLib = $lib;
        let params = $params;
        let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
        // SAFETY: `params` is a parameter struct made by `Params::init` (structSize set, the
        // other fields zero or set by the caller to live pointers), which is the contract
        // of every CUPTI call that takes one; `lib` holds the symbol for as long as it lives.
        let r = unsafe { lib.raw.$f(params) };
        lib.check(stringify!($f), r)
    }};
}

/// CUPTI's profiler calls are not safe to make from several threads at once (host objects
/// created concurrently fail with CUPTI_ERROR_UNKNOWN): every call holds this lock.
static SERIAL: Mutex<()> = Mutex::new(());

/// The loaded libcupti.
pub struct CuptiLib {
    raw: Cupti,
    path: PathBuf,
    /// libnvperf_host/target opened from beside libcupti, kept open for CUPTI.
    _nvperf: Vec<libloading::Library>,
}

impl CuptiLib {
    /// Opens libcupti from the first of `candidates` that has every symbol the collector uses.
    pub fn open(candidates: &[Candidate]) -> Result<Arc<Self>> {
        let (raw, path) = load::open_first(
            "libcupti",
            "set KLARAPTOR_CUPTI to the libcupti.so.13 of CUDA 13 (or the directory holding it); \
             CUDA 13 installs it in <cuda>/lib64 (older toolkits: <cuda>/extras/CUPTI/lib64)",
            candidates,
            // SAFETY: from_library only resolves symbols; their signatures are bindgen's, from
            // the CUDA 13 headers this libcupti implements.
            |lib| unsafe { Cupti::from_library(lib) },
        )?;
        let nvperf = load::preload_nvperf_beside(&path);
        debug!(
            "libcupti from {} ({} Perfworks libraries beside it opened)",
            path.display(),
            nvperf.len()
        );
        Ok(Arc::new(CuptiLib {
            raw,
            path,
            _nvperf: nvperf,
        }))
    }

    /// Where the library was loaded from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn check(&self, call: &'static str, r: CUptiResult) -> Result<()> {
        if r == CUptiResult_CUPTI_SUCCESS {
            debug!("{call}: ok");
            return Ok(());
        }
        let text = self.result_text(r);
        debug!("{call}: FAILED {text} ({r})");
        Err(Error::Cupti {
            call,
            code: r,
            text,
        })
    }

    fn result_text(&self, r: CUptiResult) -> String {
        let mut s: *const c_char = std::ptr::null();
        // SAFETY: cuptiGetResultString writes a pointer to a static string.
        let ok = unsafe { self.raw.cuptiGetResultString(r, &mut s) };
        if ok == CUptiResult_CUPTI_SUCCESS && !s.is_null() {
            // SAFETY: non-null, NUL-terminated, static.
            unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned()
        } else {
            format!("CUptiResult {r}")
        }
    }

    /// CUPTI's API version (`CUPTI_API_VERSION` of the library, e.g. 130000 for 13.0).
    pub fn version(&self) -> Result<u32> {
        let mut v = 0u32;
        // SAFETY: writes one u32.
        let r = unsafe { self.raw.cuptiGetVersion(&mut v) };
        self.check("cuptiGetVersion", r).map(|_| v)
    }

    /// `cuptiProfilerInitialize`: loads the profiler's libraries and hooks the driver. Once per
    /// process, before any range-profiler call.
    pub fn profiler_initialize(&self) -> Result<()> {
        let mut p = CUpti_Profiler_Initialize_Params::init();
        cupti_call!(self, cuptiProfilerInitialize, &mut p)
    }

    /// The chip name CUPTI uses for a device (e.g. "GH100" for an H100 or H200).
    pub fn chip_name(&self, device_index: usize) -> Result<String> {
        let mut p = CUpti_Device_GetChipName_Params {
            deviceIndex: device_index,
            ..Params::init()
        };
        cupti_call!(self, cuptiDeviceGetChipName, &mut p)?;
        c_string(p.pChipName, "cuptiDeviceGetChipName")
    }

    /// Whether the range profiler can work on `device`, and if not, why.
    pub fn device_support(&self, device: CUdevice) -> Result<DeviceSupport> {
        let mut p = CUpti_Profiler_DeviceSupported_Params {
            cuDevice: device,
            api: CUpti_Profiler_API_CUPTI_PROFILER_RANGE_PROFILING,
            ..Params::init()
        };
        cupti_call!(self, cuptiProfilerDeviceSupported, &mut p)?;
        Ok(DeviceSupport {
            overall: p.isSupported,
            aspects: [
                ("architecture", p.architecture),
                ("SLI", p.sli),
                ("vGPU", p.vGpu),
                ("confidential compute", p.confidentialCompute),
                ("CMP", p.cmp),
                ("WSL", p.wsl),
            ],
        })
    }

    /// The counter availability image of the context's device (which counters this process
    /// may read). Must be taken while no profiling session is active on the device.
    pub fn counter_availability(&self, ctx: Context) -> Result<Vec<u8>> {
        let mut p = CUpti_Profiler_GetCounterAvailability_Params {
            ctx: ctx.raw(),
            ..Params::init()
        };
        cupti_call!(self, cuptiProfilerGetCounterAvailability, &mut p)?;
        let mut image = vec![0u8; p.counterAvailabilityImageSize];
        p.pCounterAvailabilityImage = image.as_mut_ptr();
        cupti_call!(self, cuptiProfilerGetCounterAvailability, &mut p)?;
        image.truncate(p.counterAvailabilityImageSize);
        Ok(image)
    }

    /// The chips this CUPTI's host API knows.
    pub fn supported_chips(&self) -> Result<Vec<String>> {
        let mut p = CUpti_Profiler_Host_GetSupportedChips_Params::init();
        cupti_call!(self, cuptiProfilerHostGetSupportedChips, &mut p)?;
        string_array(
            p.ppChipNames,
            p.numChips,
            "cuptiProfilerHostGetSupportedChips",
        )
    }

    fn num_passes(&self, config: &mut AlignedBytes) -> Result<usize> {
        let mut p = CUpti_Profiler_Host_GetNumOfPasses_Params {
            configImageSize: config.len(),
            pConfigImage: config.as_mut_ptr(),
            ..Params::init()
        };
        cupti_call!(self, cuptiProfilerHostGetNumOfPasses, &mut p)?;
        Ok(p.numOfPasses)
    }
}

/// What `cuptiProfilerDeviceSupported` says about a device.
#[derive(Debug, Clone)]
pub struct DeviceSupport {
    pub overall: CUpti_Profiler_Support_Level,
    pub aspects: [(&'static str, CUpti_Profiler_Support_Level); 6],
}

impl DeviceSupport {
    /// Whether CUPTI says the range profiler cannot work (unsupported or disabled); an
    /// unknown level is not a refusal: the profiler calls themselves will tell.
    #[allow(non_upper_case_globals)]
    pub fn refuses(&self) -> bool {
        matches!(
            self.overall,
            CUpti_Profiler_Support_Level_CUPTI_PROFILER_CONFIGURATION_UNSUPPORTED
                | CUpti_Profiler_Support_Level_CUPTI_PROFILER_CONFIGURATION_DISABLED
        )
    }

    /// The aspects that are not supported, e.g. "vGPU: disabled".
    #[allow(non_upper_case_globals)] // bindgen's names of C enum values
    pub fn problems(&self) -> Vec<String> {
        self.aspects
            .iter()
            .filter(|(_, l)| {
                *l != CUpti_Profiler_Support_Level_CUPTI_PROFILER_CONFIGURATION_SUPPORTED
            })
            .map(|(what, l)| format!("{what}: {}", support_level_name(*l)))
            .collect()
    }
}

#[allow(non_upper_case_globals)] // bindgen's names of C enum values
fn support_level_name(l: CUpti_Profiler_Support_Level) -> &'static str {
    match l {
        CUpti_Profiler_Support_Level_CUPTI_PROFILER_CONFIGURATION_UNSUPPORTED => "unsupported",
        CUpti_Profiler_Support_Level_CUPTI_PROFILER_CONFIGURATION_DISABLED => "disabled",
        CUpti_Profiler_Support_Level_CUPTI_PROFILER_CONFIGURATION_SUPPORTED => "supported",
        _ => "unknown",
    }
}

/// The kind of a metric, as the host API classifies it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricKind {
    Counter,
    Ratio,
    Throughput,
}

impl MetricKind {
    pub const ALL: [MetricKind; 3] = [
        MetricKind::Counter,
        MetricKind::Ratio,
        MetricKind::Throughput,
    ];

    fn raw(self) -> CUpti_MetricType {
        match self {
            MetricKind::Counter => CUpti_MetricType_CUPTI_METRIC_TYPE_COUNTER,
            MetricKind::Ratio => CUpti_MetricType_CUPTI_METRIC_TYPE_RATIO,
            MetricKind::Throughput => CUpti_MetricType_CUPTI_METRIC_TYPE_THROUGHPUT,
        }
    }

    fn from_raw(t: CUpti_MetricType) -> Option<Self> {
        MetricKind::ALL.into_iter().find(|k| k.raw() == t)
    }
}

/// What the host API says about one metric.
#[derive(Debug, Clone)]
pub struct MetricProperties {
    pub description: String,
    pub hw_unit: String,
    pub dim_unit: String,
    pub kind: Option<MetricKind>,
}

/// A profiler host object for one chip: metric enumeration, config images, evaluation.
pub struct HostObject {
    lib: Arc<CuptiLib>,
    obj: *mut CUpti_Profiler_Host_Object,
    /// CUPTI may keep these pointers; they live as long as the object.
    _chip: CString,
    _availability: Option<Vec<u8>>,
}

// SAFETY: the host object is plain CUPTI host memory, not tied to a thread; the collector
// serialises every use behind one mutex.
unsafe impl Send for HostObject {}

impl HostObject {
    /// A host object for `chip` (as [`CuptiLib::chip_name`] gives it). `availability` (from
    /// [`CuptiLib::counter_availability`]) restricts configs to counters this process may
    /// read; without it (no device, e.g. on a build machine) every counter of the chip counts.
    pub fn new(lib: &Arc<CuptiLib>, chip: &str, availability: Option<Vec<u8>>) -> Result<Self> {
        let chip_c = CString::new(chip)
            .map_err(|_| Error::Unusable(format!("chip name {chip:?} contains NUL")))?;
        let mut p = CUpti_Profiler_Host_Initialize_Params {
            profilerType: CUpti_ProfilerType_CUPTI_PROFILER_TYPE_RANGE_PROFILER,
            pChipName: chip_c.as_ptr(),
            pCounterAvailabilityImage: availability
                .as_ref()
                .map_or(std::ptr::null(), |a| a.as_ptr()),
            ..Params::init()
        };
        cupti_call!(lib, cuptiProfilerHostInitialize, &mut p)?;
        Ok(HostObject {
            lib: lib.clone(),
            obj: p.pHostObject,
            _chip: chip_c,
            _availability: availability,
        })
    }

    /// The base metrics of one kind the chip supports (names without rollup or submetric).
    pub fn base_metrics(&self, kind: MetricKind) -> Result<Vec<String>> {
        let mut p = CUpti_Profiler_Host_GetBaseMetrics_Params {
            pHostObject: self.obj,
            metricType: kind.raw(),
            ..Params::init()
        };
        cupti_call!(&self.lib, cuptiProfilerHostGetBaseMetrics, &mut p)?;
        string_array(
            p.ppMetricNames,
            p.numMetrics,
            "cuptiProfilerHostGetBaseMetrics",
        )
    }

    /// The submetrics (`.sum`, `.avg.per_cycle_active`, …) a metric accepts.
    pub fn sub_metrics(&self, metric: &str, kind: MetricKind) -> Result<Vec<String>> {
        let name = metric_cstring(metric)?;
        let mut p = CUpti_Profiler_Host_GetSubMetrics_Params {
            pHostObject: self.obj,
            metricType: kind.raw(),
            pMetricName: name.as_ptr(),
            ..Params::init()
        };
        cupti_call!(&self.lib, cuptiProfilerHostGetSubMetrics, &mut p)?;
        string_array(
            p.ppSubMetrics,
            p.numOfSubmetrics,
            "cuptiProfilerHostGetSubMetrics",
        )
    }

    /// Description, units and kind of a metric (with or without rollup and submetric).
    pub fn metric_properties(&self, metric: &str) -> Result<MetricProperties> {
        let name = metric_cstring(metric)?;
        let mut p = CUpti_Profiler_Host_GetMetricProperties_Params {
            pHostObject: self.obj,
            pMetricName: name.as_ptr(),
            ..Params::init()
        };
        cupti_call!(&self.lib, cuptiProfilerHostGetMetricProperties, &mut p)?;
        let text = |s: *const c_char| {
            c_string(s, "cuptiProfilerHostGetMetricProperties").unwrap_or_default()
        };
        Ok(MetricProperties {
            description: text(p.pDescription),
            hw_unit: text(p.pHwUnit),
            dim_unit: text(p.pDimUnit),
            kind: MetricKind::from_raw(p.metricType),
        })
    }

    /// Adds metrics (full names: base, rollup, submetric) to the config this object builds.
    /// CUPTI refuses a name the chip does not support with `CUPTI_ERROR_INVALID_METRIC_NAME`.
    pub fn add_metrics(&mut self, names: &[CString]) -> Result<()> {
        let ptrs: Vec<*const c_char> = names.iter().map(|n| n.as_ptr()).collect();
        let mut p = CUpti_Profiler_Host_ConfigAddMetrics_Params {
            pHostObject: self.obj,
            ppMetricNames: ptrs.as_ptr().cast_mut(),
            numMetrics: ptrs.len(),
            ..Params::init()
        };
        cupti_call!(&self.lib, cuptiProfilerHostConfigAddMetrics, &mut p)
    }

    fn config_image(&self) -> Result<AlignedBytes> {
        let mut size = CUpti_Profiler_Host_GetConfigImageSize_Params {
            pHostObject: self.obj,
            ..Params::init()
        };
        cupti_call!(&self.lib, cuptiProfilerHostGetConfigImageSize, &mut size)?;
        let mut image = AlignedBytes::zeroed(size.configImageSize);
        let mut p = CUpti_Profiler_Host_GetConfigImage_Params {
            pHostObject: self.obj,
            configImageSize: image.len(),
            pConfigImage: image.as_mut_ptr(),
            ..Params::init()
        };
        cupti_call!(&self.lib, cuptiProfilerHostGetConfigImage, &mut p)?;
        Ok(image)
    }
}

impl Drop for HostObject {
    fn drop(&mut self) {
        let mut p = CUpti_Profiler_Host_Deinitialize_Params {
            pHostObject: self.obj,
            ..Params::init()
        };
        // A failure here leaves nothing to do; verbose mode shows it.
        let _ = cupti_call!(&self.lib, cuptiProfilerHostDeinitialize, &mut p);
    }
}

/// A config image for one set of metrics on one chip, with the host object that built it
/// (which also evaluates the counter data collected with it).
pub struct MetricConfig {
    host: HostObject,
    names: Vec<CString>,
    image: AlignedBytes,
    passes: usize,
}

impl MetricConfig {
    /// Builds the config image for `metrics` (full metric names).
    pub fn new(
        lib: &Arc<CuptiLib>,
        chip: &str,
        availability: Option<Vec<u8>>,
        metrics: &[&str],
    ) -> Result<Self> {
        let names = metrics
            .iter()
            .map(|m| metric_cstring(m))
            .collect::<Result<Vec<_>>>()?;
        let mut host = HostObject::new(lib, chip, availability)?;
        host.add_metrics(&names)?;
        let mut image = host.config_image()?;
        let passes = lib.num_passes(&mut image)?;
        debug!(
            "config for {} metrics on {chip}: {} bytes, {passes} pass(es)",
            names.len(),
            image.len()
        );
        Ok(MetricConfig {
            host,
            names,
            image,
            passes,
        })
    }

    /// How many replays of a range CUPTI needs to collect every metric.
    pub fn passes(&self) -> usize {
        self.passes
    }

    pub fn host(&self) -> &HostObject {
        &self.host
    }

    /// The metric names, in the order [`MetricConfig::evaluate`] returns values.
    pub fn metric_names(&self) -> impl Iterator<Item = &str> {
        self.names.iter().map(|n| n.to_str().unwrap_or(""))
    }

    /// The value of every metric of this config in range `range` of a decoded image.
    pub fn evaluate(&self, data: &CounterDataImage, range: usize) -> Result<Vec<f64>> {
        let ptrs: Vec<*const c_char> = self.names.iter().map(|n| n.as_ptr()).collect();
        let mut values = vec![f64::NAN; ptrs.len()];
        let mut p = CUpti_Profiler_Host_EvaluateToGpuValues_Params {
            pHostObject: self.host.obj,
            pCounterDataImage: data.bytes.as_ptr(),
            counterDataImageSize: data.bytes.len(),
            rangeIndex: range,
            ppMetricNames: ptrs.as_ptr().cast_mut(),
            numMetrics: ptrs.len(),
            pMetricValues: values.as_mut_ptr(),
            ..Params::init()
        };
        cupti_call!(&self.lib(), cuptiProfilerHostEvaluateToGpuValues, &mut p)?;
        Ok(values)
    }

    fn lib(&self) -> &CuptiLib {
        &self.host.lib
    }
}

/// The range profiler enabled on one CUDA context; disabled when dropped.
pub struct RangeProfiler {
    lib: Arc<CuptiLib>,
    obj: *mut CUpti_RangeProfiler_Object,
}

// SAFETY: as for HostObject: used only under the collector's mutex, with its context current.
unsafe impl Send for RangeProfiler {}

impl RangeProfiler {
    /// `cuptiRangeProfilerEnable` on `ctx`.
    pub fn enable(lib: &Arc<CuptiLib>, ctx: Context) -> Result<Self> {
        let mut p = CUpti_RangeProfiler_Enable_Params {
            ctx: ctx.raw(),
            ..Params::init()
        };
        cupti_call!(lib, cuptiRangeProfilerEnable, &mut p)?;
        Ok(RangeProfiler {
            lib: lib.clone(),
            obj: p.pRangeProfilerObject,
        })
    }

    /// A counter data image for `config`'s metrics with room for `max_ranges` ranges.
    pub fn counter_data_image(
        &self,
        config: &MetricConfig,
        max_ranges: usize,
    ) -> Result<CounterDataImage> {
        let ptrs: Vec<*const c_char> = config.names.iter().map(|n| n.as_ptr()).collect();
        let mut size = CUpti_RangeProfiler_GetCounterDataSize_Params {
            pRangeProfilerObject: self.obj,
            pMetricNames: ptrs.as_ptr().cast_mut(),
            numMetrics: ptrs.len(),
            maxNumOfRanges: max_ranges,
            // One node per distinct range name, plus room for whatever else CUPTI keeps in
            // the tree (the header only asks for at least maxNumOfRanges); a few bytes each.
            maxNumRangeTreeNodes: u32::try_from(max_ranges.saturating_mul(2).saturating_add(1))
                .unwrap_or(u32::MAX),
            ..Params::init()
        };
        cupti_call!(&self.lib, cuptiRangeProfilerGetCounterDataSize, &mut size)?;
        let mut image = CounterDataImage {
            bytes: AlignedBytes::zeroed(size.counterDataSize),
        };
        let mut init = CUpti_RangeProfiler_CounterDataImage_Initialize_Params {
            pRangeProfilerObject: self.obj,
            counterDataSize: image.bytes.len(),
            pCounterData: image.bytes.as_mut_ptr(),
            ..Params::init()
        };
        cupti_call!(
            &self.lib,
            cuptiRangeProfilerCounterDataImageInitialize,
            &mut init
        )?;
        Ok(image)
    }

    /// Sets the configuration for user ranges with user replay: the caller replays each
    /// range (`start`, `push_range`, launches, `pop_range`, `stop`) until `stop` says every
    /// pass was submitted, then decodes. CUPTI keeps pointers to both images until the
    /// decode, so the returned [`Configured`] borrows them.
    pub fn configure<'a>(
        &'a self,
        config: &'a MetricConfig,
        data: &'a mut CounterDataImage,
        max_ranges_per_pass: usize,
    ) -> Result<Configured<'a>> {
        let mut p = CUpti_RangeProfiler_SetConfig_Params {
            pRangeProfilerObject: self.obj,
            configSize: config.image.len(),
            pConfig: config.image.as_ptr(),
            counterDataImageSize: data.bytes.len(),
            pCounterDataImage: data.bytes.as_mut_ptr(),
            range: CUpti_ProfilerRange_CUPTI_UserRange,
            replayMode: CUpti_ProfilerReplayMode_CUPTI_UserReplay,
            maxRangesPerPass: max_ranges_per_pass,
            numNestingLevels: 1,
            minNestingLevel: 1,
            passIndex: 0,
            targetNestingLevel: 1,
            ..Params::init()
        };
        cupti_call!(&self.lib, cuptiRangeProfilerSetConfig, &mut p)?;
        Ok(Configured {
            profiler: self,
            _config: config,
            _data: data,
        })
    }
}

impl Drop for RangeProfiler {
    fn drop(&mut self) {
        let mut p = CUpti_RangeProfiler_Disable_Params {
            pRangeProfilerObject: self.obj,
            ..Params::init()
        };
        let _ = cupti_call!(&self.lib, cuptiRangeProfilerDisable, &mut p);
    }
}

/// A configured range profiler: the pass loop and the decode.
pub struct Configured<'a> {
    profiler: &'a RangeProfiler,
    _config: &'a MetricConfig,
    _data: &'a mut CounterDataImage,
}

/// What `cuptiRangeProfilerStop` reports.
#[derive(Debug, Clone, Copy)]
pub struct PassEnd {
    pub pass_index: usize,
    pub all_passes_submitted: bool,
}

impl Configured<'_> {
    fn lib(&self) -> &CuptiLib {
        &self.profiler.lib
    }

    pub fn start(&self) -> Result<()> {
        let mut p = CUpti_RangeProfiler_Start_Params {
            pRangeProfilerObject: self.profiler.obj,
            ..Params::init()
        };
        cupti_call!(self.lib(), cuptiRangeProfilerStart, &mut p)
    }

    pub fn push_range(&self, name: &CStr) -> Result<()> {
        let mut p = CUpti_RangeProfiler_PushRange_Params {
            pRangeProfilerObject: self.profiler.obj,
            pRangeName: name.as_ptr(),
            ..Params::init()
        };
        cupti_call!(self.lib(), cuptiRangeProfilerPushRange, &mut p)
    }

    pub fn pop_range(&self) -> Result<()> {
        let mut p = CUpti_RangeProfiler_PopRange_Params {
            pRangeProfilerObject: self.profiler.obj,
            ..Params::init()
        };
        cupti_call!(self.lib(), cuptiRangeProfilerPopRange, &mut p)
    }

    pub fn stop(&self) -> Result<PassEnd> {
        let mut p = CUpti_RangeProfiler_Stop_Params {
            pRangeProfilerObject: self.profiler.obj,
            ..Params::init()
        };
        cupti_call!(self.lib(), cuptiRangeProfilerStop, &mut p)?;
        Ok(PassEnd {
            pass_index: p.passIndex,
            all_passes_submitted: p.isAllPassSubmitted != 0,
        })
    }

    /// Decodes the collected passes into the counter data image (CUPTI synchronises the
    /// context first). Returns the number of ranges dropped for lack of room.
    pub fn decode(self) -> Result<usize> {
        let mut p = CUpti_RangeProfiler_DecodeData_Params {
            pRangeProfilerObject: self.profiler.obj,
            ..Params::init()
        };
        cupti_call!(self.lib(), cuptiRangeProfilerDecodeData, &mut p)?;
        Ok(p.numOfRangeDropped)
    }
}

/// A counter data image: where decoded counter values of the ranges live.
pub struct CounterDataImage {
    bytes: AlignedBytes,
}

impl CounterDataImage {
    /// How many ranges the image holds.
    pub fn num_ranges(&self, lib: &CuptiLib) -> Result<usize> {
        let mut p = CUpti_RangeProfiler_GetCounterDataInfo_Params {
            pCounterDataImage: self.bytes.as_ptr(),
            counterDataImageSize: self.bytes.len(),
            ..Params::init()
        };
        cupti_call!(lib, cuptiRangeProfilerGetCounterDataInfo, &mut p)?;
        Ok(p.numTotalRanges)
    }

    /// The name of range `index` (nested names joined with "/").
    pub fn range_name(&self, lib: &CuptiLib, index: usize) -> Result<String> {
        let mut p = CUpti_RangeProfiler_CounterData_GetRangeInfo_Params {
            pCounterDataImage: self.bytes.as_ptr(),
            counterDataImageSize: self.bytes.len(),
            rangeIndex: index,
            rangeDelimiter: c"/".as_ptr(),
            ..Params::init()
        };
        cupti_call!(lib, cuptiRangeProfilerCounterDataGetRangeInfo, &mut p)?;
        c_string(p.rangeName, "cuptiRangeProfilerCounterDataGetRangeInfo")
    }
}

/// A byte buffer aligned to 8 bytes (CUPTI's images must be).
struct AlignedBytes {
    words: Vec<u64>,
    len: usize,
}

impl AlignedBytes {
    fn zeroed(len: usize) -> Self {
        AlignedBytes {
            words: vec![0; len.div_ceil(8)],
            len,
        }
    }
    fn len(&self) -> usize {
        self.len
    }
    fn as_ptr(&self) -> *const u8 {
        self.words.as_ptr().cast()
    }
    fn as_mut_ptr(&mut self) -> *mut u8 {
        self.words.as_mut_ptr().cast()
    }
}

fn metric_cstring(name: &str) -> Result<CString> {
    CString::new(name).map_err(|_| Error::Unusable(format!("metric name {name:?} contains NUL")))
}

fn c_string(p: *const c_char, call: &str) -> Result<String> {
    if p.is_null() {
        return Err(Error::Unusable(format!("{call} returned no string")));
    }
    // SAFETY: CUPTI returns NUL-terminated strings that live at least until the next call
    // on the same object; we copy at once.
    Ok(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

fn string_array(p: *const *const c_char, n: usize, call: &str) -> Result<Vec<String>> {
    if n == 0 {
        return Ok(Vec::new());
    }
    if p.is_null() {
        return Err(Error::Unusable(format!(
            "{call} returned {n} names but no array"
        )));
    }
    // SAFETY: CUPTI returns an array of `n` string pointers.
    let ptrs = unsafe { std::slice::from_raw_parts(p, n) };
    ptrs.iter().map(|&s| c_string(s, call)).collect()
}
