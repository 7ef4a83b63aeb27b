//! Device calibration: the per-device figures of the MWP-CWP model, measured on the GPU.
//!
//! The measurements are micro-benchmarks in `profiler/calibrate/calibrate.cu` (embedded here
//! as [`CALIBRATE_CU`]). [`Cache::calibrate`] compiles that program with the user's nvcc for
//! the GPU's architecture (once per source × nvcc × architecture), runs it, parses the TOML
//! report it prints ([`DeviceReport`]), checks it ([`DeviceReport::validate`]) and stores it at
//! `$XDG_CACHE_HOME/klaraptor/devices/<uuid>.toml` (or `~/.cache/…`). The driver calls
//! [`ensure_calibrated`] before the first profile on a device: it measures only when no valid
//! report is cached for that device.
//!
//! A report holds the driver's `[attributes]` (the `cudaDeviceAttr` names without the
//! `cudaDevAttr` prefix) and the `[calibration]` figures, each with its spread and a one-line
//! method. Cycle figures are SM clock cycles (`clock64`). `issue_cycles` is per SM
//! sub-partition (warp scheduler); `issue_cycles_per_sm` (an extra) is per SM.
//!
//! Concurrent builds: measurements hold an exclusive lock of `<cache>/klaraptor/devices/.lock`,
//! so two compilers calibrating at once do not disturb each other's benchmarks, and the GPU's
//! own lock ([`crate::gpu_lock`], `gpu-<uuid>.lock` beside it), so that no link profiles on
//! the GPU while it is measured.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fmt;
use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde::{Deserialize, Serialize};

/// The benchmark program's source.
pub const CALIBRATE_CU: &str = include_str!("../calibrate/calibrate.cu");

/// Version of the report format; a cached report of another version is measured again.
pub const FORMAT_VERSION: u32 = 1;

/// Exit status of the benchmark program when no CUDA device is usable.
const EXIT_NO_DEVICE: i32 = 3;

/// The attributes every report must carry (what the model and occupancy read).
pub const REQUIRED_ATTRIBUTES: &[&str] = &[
    "MultiProcessorCount",
    "ClockRate",
    "MemoryClockRate",
    "GlobalMemoryBusWidth",
    "L2CacheSize",
    "MaxThreadsPerBlock",
    "MaxThreadsPerMultiProcessor",
    "MaxBlocksPerMultiprocessor",
    "MaxRegistersPerMultiprocessor",
    "MaxRegistersPerBlock",
    "MaxSharedMemoryPerMultiprocessor",
    "MaxSharedMemoryPerBlock",
    "MaxSharedMemoryPerBlockOptin",
    "ReservedSharedMemoryPerBlock",
    "WarpSize",
    "ComputeCapabilityMajor",
    "ComputeCapabilityMinor",
    "MaxBlockDimX",
    "MaxBlockDimY",
    "MaxBlockDimZ",
    "MaxGridDimX",
    "MaxGridDimY",
    "MaxGridDimZ",
];

/// Attributes that may legitimately be 0 (all others must be positive).
const ZERO_ALLOWED: &[&str] = &["ReservedSharedMemoryPerBlock", "ComputeCapabilityMinor"];

/// One calibration report: what `calibrate` prints and what the cache holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeviceReport {
    pub format_version: u32,
    pub device: DeviceInfo,
    /// Driver attributes by `cudaDeviceAttr` name without the `cudaDevAttr` prefix.
    pub attributes: BTreeMap<String, i64>,
    /// Attributes the runtime could not answer, and how each was obtained instead (or not).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub attribute_notes: BTreeMap<String, String>,
    pub calibration: Calibration,
}

/// What `calibrate --identify` prints: the device without the measurements.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeviceIdentity {
    pub format_version: u32,
    pub device: DeviceInfo,
    pub attributes: BTreeMap<String, i64>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub attribute_notes: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceInfo {
    /// The driver's name, e.g. "NVIDIA H200".
    pub name: String,
    /// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", as nvidia-smi writes it.
    pub uuid: String,
    /// Compute capability, "major.minor".
    pub cc: String,
    #[serde(default)]
    pub pci_bus_id: String,
    /// The kernel module's version, e.g. "580.82.07" (empty where it could not be read).
    pub driver_version: String,
    /// The CUDA version the driver supports, e.g. "13.0".
    #[serde(default)]
    pub cuda_driver_version: String,
    /// The CUDA runtime the benchmark was built with, e.g. "13.0".
    pub runtime_version: String,
    #[serde(default)]
    pub total_memory_bytes: u64,
    /// When the report was made, ISO 8601 UTC.
    pub date: String,
}

/// The measured figures. Each has a `<name>_spread` (max − min over the repetitions of that
/// measurement within the run, in the figure's unit) and a line in `methods`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Calibration {
    /// Global (DRAM) memory latency of one load, SM cycles.
    pub mem_latency_cycles: f64,
    pub mem_latency_cycles_spread: f64,
    /// L2 hit latency of one load, SM cycles (for reference).
    pub l2_latency_cycles: f64,
    pub l2_latency_cycles_spread: f64,
    /// Cycles between consecutive coalesced warp memory requests leaving one SM.
    pub departure_delay_coalesced_cycles: f64,
    pub departure_delay_coalesced_cycles_spread: f64,
    /// Cycles between consecutive transactions of an uncoalesced warp request.
    pub departure_delay_uncoalesced_cycles: f64,
    pub departure_delay_uncoalesced_cycles_spread: f64,
    /// Achievable DRAM read bandwidth, 1e9 bytes per second.
    pub dram_bandwidth_gbs: f64,
    pub dram_bandwidth_gbs_spread: f64,
    /// Cycles per warp instruction per SM sub-partition (warp scheduler).
    pub issue_cycles: f64,
    pub issue_cycles_spread: f64,
    /// How each figure was measured, one line each.
    pub methods: BTreeMap<String, String>,
    /// Further measured figures (e.g. `sm_clock_mhz`, `issue_cycles_per_sm`).
    #[serde(flatten)]
    pub extra: BTreeMap<String, f64>,
}

impl Calibration {
    /// The primary figures with their spreads: (name, value, spread, unit).
    pub fn figures(&self) -> [(&'static str, f64, f64, &'static str); 6] {
        [
            (
                "mem_latency_cycles",
                self.mem_latency_cycles,
                self.mem_latency_cycles_spread,
                "cycles",
            ),
            (
                "l2_latency_cycles",
                self.l2_latency_cycles,
                self.l2_latency_cycles_spread,
                "cycles",
            ),
            (
                "departure_delay_coalesced_cycles",
                self.departure_delay_coalesced_cycles,
                self.departure_delay_coalesced_cycles_spread,
                "cycles",
            ),
            (
                "departure_delay_uncoalesced_cycles",
                self.departure_delay_uncoalesced_cycles,
                self.departure_delay_uncoalesced_cycles_spread,
                "cycles",
            ),
            (
                "dram_bandwidth_gbs",
                self.dram_bandwidth_gbs,
                self.dram_bandwidth_gbs_spread,
                "GB/s",
            ),
            (
                "issue_cycles",
                self.issue_cycles,
                self.issue_cycles_spread,
                "cycles",
            ),
        ]
    }
}

/// Plausible ranges of the primary figures (inclusive), on any GPU from sm_70 on: a value
/// outside says the measurement went wrong, not that the GPU is unusual.
const RANGES: &[(&str, f64, f64)] = &[
    ("mem_latency_cycles", 100.0, 10_000.0),
    ("l2_latency_cycles", 20.0, 5_000.0),
    ("departure_delay_coalesced_cycles", 0.01, 1_000.0),
    ("departure_delay_uncoalesced_cycles", 0.01, 1_000.0),
    ("dram_bandwidth_gbs", 1.0, 100_000.0),
    ("issue_cycles", 0.05, 64.0),
];

#[derive(Debug, thiserror::Error)]
pub enum CalibrationError {
    #[error(
        "no usable CUDA GPU: {detail}\n  = help: calibration measures a real GPU; run \
         `klaraptor device calibrate` on the machine that has it (its report can be copied \
         into {devices_dir} here)"
    )]
    NoGpu { detail: String, devices_dir: String },
    #[error(
        "{origin}: not a valid device report: {message}\n  = help: delete it, or run \
         `klaraptor device calibrate --force` to measure again"
    )]
    Parse { origin: String, message: String },
    #[error(
        "{origin}: {field}: {problem}\n  = help: run `klaraptor device calibrate --force` to \
         measure again"
    )]
    Invalid {
        origin: String,
        field: String,
        problem: String,
    },
    #[error(
        "{origin}: report format {found}, this klaraptor reads format {FORMAT_VERSION}\n  = \
         help: run `klaraptor device calibrate --force` to measure again"
    )]
    Version { origin: String, found: u32 },
    /// The I/O error is part of the message, not its `source()`: a report that prints the
    /// chain (anyhow's `{:#}`) would say it twice.
    #[error("cannot {action} {}: {error}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        error: std::io::Error,
    },
    #[error(
        "cannot tell where to cache device reports: neither XDG_CACHE_HOME (absolute) nor HOME \
         is set\n  = help: set XDG_CACHE_HOME to a writable directory"
    )]
    NoCacheDir,
    #[error(
        "compiling the calibration benchmark failed:\n  {command}\n{output}\n  = help: check \
         that this nvcc works (`klaraptor toolchain`), or set KLARAPTOR_NVCC to another one"
    )]
    Compile { command: String, output: String },
    #[error("the calibration benchmark failed ({status}):\n  {command}\n{stderr}")]
    Benchmark {
        command: String,
        status: String,
        stderr: String,
    },
    #[error(
        "GPU {uuid} is still profiled by another process after {waited_s:.0} s ({holder}): \
         not calibrating it now\n  = help: let that build finish, or raise {wait_env} \
         (seconds, or a number with s, m or h)",
        wait_env = crate::gpu_lock::WAIT_ENV
    )]
    GpuBusy {
        uuid: String,
        holder: String,
        waited_s: f64,
    },
    #[error("{0}")]
    Settings(String),
}

pub type Result<T, E = CalibrationError> = std::result::Result<T, E>;

fn io(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> CalibrationError {
    let path = path.to_path_buf();
    move |error| CalibrationError::Io {
        action,
        path,
        error,
    }
}

fn invalid(origin: &str, field: impl Into<String>, problem: impl Into<String>) -> CalibrationError {
    CalibrationError::Invalid {
        origin: origin.to_string(),
        field: field.into(),
        problem: problem.into(),
    }
}

/// Reads the `format_version` first, so that a report of another version gets a version
/// error rather than a confusing missing-field one.
fn check_version(text: &str, origin: &str) -> Result<()> {
    #[derive(Deserialize)]
    struct Head {
        format_version: Option<u32>,
    }
    let head: Head = toml::from_str(text).map_err(|e| CalibrationError::Parse {
        origin: origin.to_string(),
        message: e.to_string(),
    })?;
    match head.format_version {
        Some(FORMAT_VERSION) => Ok(()),
        Some(found) => Err(CalibrationError::Version {
            origin: origin.to_string(),
            found,
        }),
        None => Err(invalid(origin, "format_version", "missing")),
    }
}

fn validate_device(
    device: &DeviceInfo,
    attributes: &BTreeMap<String, i64>,
    origin: &str,
) -> Result<()> {
    if device.name.trim().is_empty() {
        return Err(invalid(origin, "[device] name", "empty"));
    }
    if !device.uuid.is_empty() && !device.uuid.starts_with("GPU-") {
        return Err(invalid(
            origin,
            "[device] uuid",
            format!("{:?} does not start with \"GPU-\"", device.uuid),
        ));
    }
    // A report is a file klaraptor does not trust (a cache, or copied from elsewhere): its
    // text reaches device descriptions, generated C and terminals only in these formats.
    use crate::record::text;
    let fields = [
        ("name", &device.name, text::device_name(&device.name)),
        ("uuid", &device.uuid, text::device_uuid(&device.uuid)),
        (
            "driver_version",
            &device.driver_version,
            text::version(&device.driver_version),
        ),
        (
            "cuda_driver_version",
            &device.cuda_driver_version,
            text::version(&device.cuda_driver_version),
        ),
        (
            "runtime_version",
            &device.runtime_version,
            text::version(&device.runtime_version),
        ),
        (
            "pci_bus_id",
            &device.pci_bus_id,
            pci_bus_id(&device.pci_bus_id),
        ),
        (
            "date",
            &device.date,
            (!device.date.is_empty())
                .then(|| text::timestamp(&device.date))
                .flatten(),
        ),
    ];
    for (field, value, why) in fields {
        if let Some(why) = why {
            return Err(invalid(
                origin,
                format!("[device] {field}"),
                format!("{value:?} {why}"),
            ));
        }
    }
    for name in REQUIRED_ATTRIBUTES {
        let Some(&v) = attributes.get(*name) else {
            return Err(invalid(origin, format!("[attributes] {name}"), "missing"));
        };
        let ok = if ZERO_ALLOWED.contains(name) {
            v >= 0
        } else {
            v > 0
        };
        if !ok {
            return Err(invalid(
                origin,
                format!("[attributes] {name}"),
                format!("{v} is not a possible value"),
            ));
        }
    }
    let cc = format!(
        "{}.{}",
        attributes["ComputeCapabilityMajor"], attributes["ComputeCapabilityMinor"]
    );
    if device.cc != cc {
        return Err(invalid(
            origin,
            "[device] cc",
            format!(
                "{:?} disagrees with ComputeCapabilityMajor/Minor ({cc})",
                device.cc
            ),
        ));
    }
    Ok(())
}

/// Why `s` is not a PCI bus id as the driver prints it (`0000:19:00.0`): hex digits, `:` and
/// `.`; empty where unknown.
fn pci_bus_id(s: &str) -> Option<String> {
    let ok = s.len() <= 32
        && s.chars()
            .all(|c| c.is_ascii_hexdigit() || c == ':' || c == '.');
    (!ok).then(|| "is not a PCI bus id (hex digits, `:` and `.`)".to_string())
}

impl DeviceReport {
    /// Parses and validates a report; `origin` names it in errors (a path, or the command
    /// that printed it).
    pub fn parse(text: &str, origin: &str) -> Result<DeviceReport> {
        check_version(text, origin)?;
        let r: DeviceReport = toml::from_str(text).map_err(|e| CalibrationError::Parse {
            origin: origin.to_string(),
            message: e.to_string(),
        })?;
        r.validate(origin)?;
        Ok(r)
    }

    /// Reads and validates a report file.
    pub fn load(path: &Path) -> Result<DeviceReport> {
        let text = fs::read_to_string(path).map_err(io("read", path))?;
        DeviceReport::parse(&text, &path.display().to_string())
    }

    /// Checks the report: format version, device fields, the required attributes, and each
    /// figure finite, inside its plausible range, with a spread and a method.
    pub fn validate(&self, origin: &str) -> Result<()> {
        if self.format_version != FORMAT_VERSION {
            return Err(CalibrationError::Version {
                origin: origin.to_string(),
                found: self.format_version,
            });
        }
        validate_device(&self.device, &self.attributes, origin)?;
        let c = &self.calibration;
        for (name, value, spread, _) in c.figures() {
            let field = format!("[calibration] {name}");
            let (_, lo, hi) = RANGES
                .iter()
                .find(|(n, _, _)| *n == name)
                .expect("every figure has a range");
            if !value.is_finite() || value < *lo || value > *hi {
                return Err(invalid(
                    origin,
                    field,
                    format!("{value} is outside the plausible range {lo} ..= {hi}"),
                ));
            }
            if !spread.is_finite() || spread < 0.0 {
                return Err(invalid(
                    origin,
                    format!("[calibration] {name}_spread"),
                    format!("{spread} is not a spread (finite, >= 0)"),
                ));
            }
            if c.methods.get(name).is_none_or(|m| m.trim().is_empty()) {
                return Err(invalid(
                    origin,
                    format!("[calibration.methods] {name}"),
                    "missing: every figure says how it was measured",
                ));
            }
        }
        if c.l2_latency_cycles >= c.mem_latency_cycles {
            return Err(invalid(
                origin,
                "[calibration] l2_latency_cycles",
                format!(
                    "{} is not below mem_latency_cycles ({}): the DRAM walk was served by a cache",
                    c.l2_latency_cycles, c.mem_latency_cycles
                ),
            ));
        }
        if let Some((k, v)) = c.extra.iter().find(|(_, v)| !v.is_finite()) {
            return Err(invalid(
                origin,
                format!("[calibration] {k}"),
                format!("{v} is not a measurement"),
            ));
        }
        Ok(())
    }

    /// The report as TOML (what the cache holds).
    pub fn to_toml(&self) -> String {
        let body = toml::to_string(self).expect("a device report serializes");
        format!(
            "# klaraptor device calibration report (`klaraptor device show` explains it)\n{body}"
        )
    }

    /// The value of a primary or extra figure by name.
    pub fn figure(&self, name: &str) -> Option<f64> {
        let c = &self.calibration;
        c.figures()
            .iter()
            .find(|f| f.0 == name)
            .map(|f| f.1)
            .or_else(|| c.extra.get(name).copied())
    }
}

impl DeviceIdentity {
    pub fn parse(text: &str, origin: &str) -> Result<DeviceIdentity> {
        check_version(text, origin)?;
        let d: DeviceIdentity = toml::from_str(text).map_err(|e| CalibrationError::Parse {
            origin: origin.to_string(),
            message: e.to_string(),
        })?;
        validate_device(&d.device, &d.attributes, origin)?;
        Ok(d)
    }
}

/// The file name of a device's report: its UUID, or a slug of its name where the UUID is
/// unknown.
pub fn report_file_name(device: &DeviceInfo) -> String {
    let key = if device.uuid.is_empty() {
        &device.name
    } else {
        &device.uuid
    };
    let mut slug = String::new();
    for ch in key.chars() {
        if ch.is_ascii_alphanumeric() {
            slug.push(if device.uuid.is_empty() {
                ch.to_ascii_lowercase()
            } else {
                ch
            });
        } else if !slug.ends_with('-') && !slug.is_empty() {
            slug.push('-');
        }
    }
    let slug = slug.trim_end_matches('-');
    format!("{}.toml", if slug.is_empty() { "unnamed" } else { slug })
}

/// Whether this machine appears to have an NVIDIA GPU driver with a device. Only a quick
/// negative check (no CUDA call): `false` means certainly no GPU; `true` means "try".
pub fn gpu_present() -> bool {
    if !cfg!(target_os = "linux") {
        return true;
    }
    let proc_gpus = fs::read_dir("/proc/driver/nvidia/gpus")
        .map(|mut d| d.next().is_some())
        .unwrap_or(false);
    proc_gpus
        || ["/dev/nvidia0", "/dev/nvidiactl", "/dev/dxg"]
            .iter()
            .any(|p| Path::new(p).exists())
}

/// A report file found in the cache, readable or not.
#[derive(Debug)]
pub struct CachedReport {
    pub path: PathBuf,
    pub report: Result<DeviceReport>,
}

/// What [`Cache::ensure`] did.
#[derive(Debug)]
pub struct Ensured {
    pub report: DeviceReport,
    pub path: PathBuf,
    /// True when the figures were measured now, false when a cached report was reused.
    pub measured: bool,
}

/// The calibration cache: `<root>/devices/*.toml` (reports) and `<root>/calibrate/<key>/`
/// (the compiled benchmark), where `<root>` is `$XDG_CACHE_HOME/klaraptor` or
/// `~/.cache/klaraptor`.
#[derive(Debug, Clone)]
pub struct Cache {
    root: PathBuf,
}

impl Cache {
    /// The per-user cache, from `XDG_CACHE_HOME` (when absolute) or `HOME`.
    pub fn from_env() -> Result<Cache> {
        Cache::from_vars(std::env::var_os("XDG_CACHE_HOME"), std::env::var_os("HOME"))
    }

    fn from_vars(xdg: Option<OsString>, home: Option<OsString>) -> Result<Cache> {
        let set = |v: Option<OsString>| v.filter(|s| !s.is_empty()).map(PathBuf::from);
        if let Some(x) = set(xdg).filter(|p| p.is_absolute()) {
            return Ok(Cache::at(x.join("klaraptor")));
        }
        set(home)
            .map(|h| Cache::at(h.join(".cache").join("klaraptor")))
            .ok_or(CalibrationError::NoCacheDir)
    }

    /// A cache rooted at `root` (the `klaraptor` directory itself).
    pub fn at(root: impl Into<PathBuf>) -> Cache {
        Cache { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn devices_dir(&self) -> PathBuf {
        self.root.join("devices")
    }

    pub fn report_path(&self, device: &DeviceInfo) -> PathBuf {
        self.devices_dir().join(report_file_name(device))
    }

    /// Writes a report atomically (temporary file, then rename) and returns its path.
    pub fn store(&self, report: &DeviceReport) -> Result<PathBuf> {
        let dir = self.devices_dir();
        fs::create_dir_all(&dir).map_err(io("create", &dir))?;
        let path = self.report_path(&report.device);
        write_atomic(&path, report.to_toml().as_bytes())?;
        Ok(path)
    }

    /// The cached report of the device with this UUID (a UUID-less device: pass its name).
    /// `Ok(None)` when none is cached; an error when the file exists but is not valid.
    pub fn load(&self, uuid_or_name: &str) -> Result<Option<DeviceReport>> {
        let probe = DeviceInfo {
            name: uuid_or_name.to_string(),
            uuid: if uuid_or_name.starts_with("GPU-") {
                uuid_or_name.to_string()
            } else {
                String::new()
            },
            cc: String::new(),
            pci_bus_id: String::new(),
            driver_version: String::new(),
            cuda_driver_version: String::new(),
            runtime_version: String::new(),
            total_memory_bytes: 0,
            date: String::new(),
        };
        let path = self.report_path(&probe);
        if !path.exists() {
            return Ok(None);
        }
        DeviceReport::load(&path).map(Some)
    }

    /// Every report file in the cache, sorted by path.
    pub fn list(&self) -> Result<Vec<CachedReport>> {
        let dir = self.devices_dir();
        let entries = match fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io("read", &dir)(e)),
        };
        let mut paths: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.extension().is_some_and(|x| x == "toml")
                    && !p
                        .file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with('.'))
            })
            .collect();
        paths.sort();
        Ok(paths
            .into_iter()
            .map(|path| CachedReport {
                report: DeviceReport::load(&path),
                path,
            })
            .collect())
    }

    /// Holds the cache's calibration lock until dropped.
    fn lock(&self) -> Result<File> {
        let dir = self.devices_dir();
        fs::create_dir_all(&dir).map_err(io("create", &dir))?;
        let path = dir.join(".lock");
        let f = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(io("open", &path))?;
        f.lock().map_err(io("lock", &path))?;
        Ok(f)
    }

    fn no_gpu(&self, detail: impl Into<String>) -> CalibrationError {
        CalibrationError::NoGpu {
            detail: detail.into(),
            devices_dir: self.devices_dir().display().to_string(),
        }
    }

    /// Compiles the benchmark for this machine's GPU with `nvcc` (reusing an earlier build of
    /// the same source, nvcc and architecture) and returns the executable.
    pub fn build_benchmark(&self, nvcc: &Path) -> Result<PathBuf> {
        let version = run_capture(Command::new(nvcc).arg("--version"))
            .map_err(|(command, output)| CalibrationError::Compile { command, output })?;
        let archs = native_archs(nvcc);
        let flags = arch_flags(nvcc, archs.as_deref());
        let key = fnv1a64(&[CALIBRATE_CU, &version, &flags.join(" ")]);
        let dir = self.root.join("calibrate").join(format!("{key:016x}"));
        let exe = dir.join("calibrate");
        if exe.is_file() {
            return Ok(exe);
        }
        fs::create_dir_all(&dir).map_err(io("create", &dir))?;
        let src = dir.join("calibrate.cu");
        write_atomic(&src, CALIBRATE_CU.as_bytes())?;
        let tmp = dir.join(format!(".calibrate.{}.tmp", std::process::id()));
        let mut cmd = Command::new(nvcc);
        cmd.arg("-O3").args(&flags).arg("-o").arg(&tmp).arg(&src);
        let out = run_capture(&mut cmd);
        if let Err((command, output)) = out {
            let _ = fs::remove_file(&tmp);
            return Err(CalibrationError::Compile { command, output });
        }
        fs::rename(&tmp, &exe).map_err(io("rename into place", &exe))?;
        Ok(exe)
    }

    /// Runs the benchmark program with `args` and returns its stdout.
    fn run_benchmark(&self, exe: &Path, device: u32, args: &[&str]) -> Result<String> {
        let mut cmd = Command::new(exe);
        cmd.arg("--device").arg(device.to_string()).args(args);
        let command = describe(&cmd);
        let out = cmd.output().map_err(io("run", exe))?;
        let stderr = String::from_utf8_lossy(&out.stderr).trim_end().to_string();
        match out.status.code() {
            Some(0) => Ok(String::from_utf8_lossy(&out.stdout).into_owned()),
            Some(EXIT_NO_DEVICE) => Err(self.no_gpu(
                stderr
                    .strip_prefix("calibrate: ")
                    .unwrap_or(&stderr)
                    .to_string(),
            )),
            _ => Err(CalibrationError::Benchmark {
                command,
                status: out.status.to_string(),
                stderr,
            }),
        }
    }

    /// Which device `device` is (name, UUID, attributes), without measuring.
    pub fn identify(&self, nvcc: &Path, device: u32) -> Result<DeviceIdentity> {
        if !gpu_present() {
            return Err(self.no_gpu(NO_DRIVER));
        }
        let exe = self.build_benchmark(nvcc)?;
        let out = self.run_benchmark(&exe, device, &["--identify"])?;
        DeviceIdentity::parse(&out, &format!("output of {} --identify", exe.display()))
    }

    /// Measures device `device` now (about 10 s), stores the report and returns it.
    pub fn calibrate(&self, nvcc: &Path, device: u32) -> Result<(DeviceReport, PathBuf)> {
        if !gpu_present() {
            return Err(self.no_gpu(NO_DRIVER));
        }
        let _lock = self.lock()?;
        let id = self.identify(nvcc, device)?;
        let _gpu = self.lock_gpu(&id.device)?;
        self.calibrate_locked(nvcc, device)
    }

    /// Holds the GPU's own lock (no profiling on it meanwhile), waiting for it at most
    /// [`crate::gpu_lock::wait_bound_from_env`].
    fn lock_gpu(&self, device: &DeviceInfo) -> Result<crate::gpu_lock::GpuLock> {
        use crate::gpu_lock::{Acquired, GpuLock};
        let bound = crate::gpu_lock::wait_bound_from_env().map_err(CalibrationError::Settings)?;
        let key = if device.uuid.is_empty() {
            &device.name
        } else {
            &device.uuid
        };
        let dir = self.devices_dir();
        let got = GpuLock::acquire(&dir, key, "calibration", bound, &mut |holder| {
            // Not eprintln!: a closed stderr must not stop the link.
            let _ = writeln!(
                std::io::stderr(),
                "klaraptor: waiting for GPU {key} (profiling held by {holder})"
            );
        })
        .map_err(io("lock the GPU in", &dir))?;
        match got {
            Acquired::Held { lock, .. } => Ok(lock),
            Acquired::TimedOut { holder, waited } => Err(CalibrationError::GpuBusy {
                uuid: key.clone(),
                holder,
                waited_s: waited.as_secs_f64(),
            }),
        }
    }

    fn calibrate_locked(&self, nvcc: &Path, device: u32) -> Result<(DeviceReport, PathBuf)> {
        let exe = self.build_benchmark(nvcc)?;
        let out = self.run_benchmark(&exe, device, &[])?;
        let report = DeviceReport::parse(&out, &format!("output of {}", exe.display()))?;
        let path = self.store(&report)?;
        Ok((report, path))
    }

    /// The cached report of device `device` when there is a valid one, else measures it.
    pub fn ensure(&self, nvcc: &Path, device: u32) -> Result<Ensured> {
        if !gpu_present() {
            return Err(self.no_gpu(NO_DRIVER));
        }
        let _lock = self.lock()?;
        let id = self.identify(nvcc, device)?;
        let path = self.report_path(&id.device);
        if let Ok(report) = DeviceReport::load(&path) {
            if report.device.uuid == id.device.uuid && report.device.name == id.device.name {
                return Ok(Ensured {
                    report,
                    path,
                    measured: false,
                });
            }
        }
        let _gpu = self.lock_gpu(&id.device)?;
        let (report, path) = self.calibrate_locked(nvcc, device)?;
        Ok(Ensured {
            report,
            path,
            measured: true,
        })
    }
}

const NO_DRIVER: &str = "no NVIDIA driver device on this machine (no /dev/nvidia0, \
                         /dev/nvidiactl, /dev/dxg or /proc/driver/nvidia/gpus)";

/// The cached report of the device with this UUID, from the per-user cache.
pub fn load_cached(uuid: &str) -> Result<Option<DeviceReport>> {
    Cache::from_env()?.load(uuid)
}

/// Measures the first visible GPU now and stores its report in the per-user cache.
pub fn calibrate(nvcc: &Path) -> Result<DeviceReport> {
    Cache::from_env()?.calibrate(nvcc, 0).map(|(r, _)| r)
}

/// The first visible GPU's report: the cached one when valid, else measured now.
pub fn ensure_calibrated(nvcc: &Path) -> Result<DeviceReport> {
    Cache::from_env()?.ensure(nvcc, 0).map(|e| e.report)
}

fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let write = || -> std::io::Result<()> {
        let mut f = File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()
    };
    if let Err(e) = write() {
        let _ = fs::remove_file(&tmp);
        return Err(io("write", &tmp)(e));
    }
    fs::rename(&tmp, path).map_err(io("rename into place", path))
}

/// A command line as a person would type it (for error messages).
fn describe(cmd: &Command) -> String {
    std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(|a| a.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Runs a command; its stdout on success, else (command line, combined output).
fn run_capture(cmd: &mut Command) -> std::result::Result<String, (String, String)> {
    let command = describe(cmd);
    match cmd.output() {
        Ok(o) if o.status.success() => Ok(String::from_utf8_lossy(&o.stdout).into_owned()),
        Ok(o) => Err((
            command,
            format!(
                "{}{}({})",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr),
                o.status
            ),
        )),
        Err(e) => Err((command, format!("cannot run it: {e}"))),
    }
}

/// The architectures of the GPUs present, as nvcc's `-arch=native` sees them: the
/// `__nvcc_device_query` helper beside nvcc prints them ("90" or "80,90"). `None` when it is
/// absent or fails (no GPU, or an nvcc older than 11.6).
fn native_archs(nvcc: &Path) -> Option<Vec<u32>> {
    let query = nvcc.parent()?.join("__nvcc_device_query");
    let out = Command::new(query).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let mut archs: Vec<u32> = String::from_utf8_lossy(&out.stdout)
        .split(|c: char| c == ',' || c.is_whitespace())
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    archs.sort_unstable();
    archs.dedup();
    (!archs.is_empty()).then_some(archs)
}

/// Architectures the fallback build covers when the GPU's own is unknown (those this nvcc
/// supports), plus PTX of the newest for JIT on later GPUs.
const FALLBACK_ARCHS: &[u32] = &[70, 75, 80, 86, 89, 90];

fn arch_flags(nvcc: &Path, native: Option<&[u32]>) -> Vec<String> {
    let gencode = |a: u32, code: &str| format!("-gencode=arch=compute_{a},code={code}_{a}");
    if let Some(archs) = native {
        return archs.iter().map(|&a| gencode(a, "sm")).collect();
    }
    let listed = run_capture(Command::new(nvcc).arg("--list-gpu-arch")).unwrap_or_default();
    let supported: Vec<u32> = FALLBACK_ARCHS
        .iter()
        .copied()
        .filter(|a| listed.lines().any(|l| l.trim() == format!("compute_{a}")))
        .collect();
    let Some(&newest) = supported.last() else {
        // An nvcc that lists nothing we know: let it pick its default.
        return Vec::new();
    };
    let mut flags: Vec<String> = supported.iter().map(|&a| gencode(a, "sm")).collect();
    flags.push(gencode(newest, "compute"));
    flags
}

/// FNV-1a, 64 bits: a stable key for the benchmark build (not a security hash).
fn fnv1a64(parts: &[&str]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for b in part.bytes().chain(std::iter::once(0xff)) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

impl fmt::Display for DeviceInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.name)?;
        if !self.uuid.is_empty() {
            write!(f, " ({})", self.uuid)?;
        }
        write!(f, ", compute capability {}", self.cc)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A missing report is said once, also where the error's chain is printed (`{:#}`).
    #[test]
    fn a_missing_report_says_its_io_error_once() {
        let e = anyhow::Error::new(
            DeviceReport::load(Path::new("/nonexistent/report.toml")).unwrap_err(),
        );
        let chain = format!("{e:#}");
        assert_eq!(chain.matches("os error 2").count(), 1, "{chain}");
    }

    #[test]
    fn cache_root_follows_xdg_then_home() {
        let c = Cache::from_vars(Some("/x/cache".into()), Some("/home/u".into())).unwrap();
        assert_eq!(c.root(), Path::new("/x/cache/klaraptor"));
        // A relative XDG_CACHE_HOME is invalid (XDG base directory spec) and is ignored.
        let c = Cache::from_vars(Some("rel".into()), Some("/home/u".into())).unwrap();
        assert_eq!(c.root(), Path::new("/home/u/.cache/klaraptor"));
        let c = Cache::from_vars(None, Some("/home/u".into())).unwrap();
        assert_eq!(
            c.devices_dir(),
            Path::new("/home/u/.cache/klaraptor/devices")
        );
        assert!(matches!(
            Cache::from_vars(Some("".into()), None),
            Err(CalibrationError::NoCacheDir)
        ));
    }

    fn info(name: &str, uuid: &str) -> DeviceInfo {
        DeviceInfo {
            name: name.into(),
            uuid: uuid.into(),
            cc: "9.0".into(),
            pci_bus_id: String::new(),
            driver_version: String::new(),
            cuda_driver_version: String::new(),
            runtime_version: String::new(),
            total_memory_bytes: 0,
            date: String::new(),
        }
    }

    #[test]
    fn report_names_use_the_uuid_or_a_name_slug() {
        let uuid = "GPU-5f3c1a2b-0000-1111-2222-333344445555";
        assert_eq!(
            report_file_name(&info("NVIDIA H200", uuid)),
            format!("{uuid}.toml")
        );
        assert_eq!(
            report_file_name(&info("NVIDIA H200 NVL (rev 2)", "")),
            "nvidia-h200-nvl-rev-2.toml"
        );
        assert_eq!(report_file_name(&info("///", "")), "unnamed.toml");
    }

    #[test]
    fn build_key_changes_with_each_part() {
        let a = fnv1a64(&["src", "nvcc 13.0", "-arch=sm_90"]);
        assert_ne!(a, fnv1a64(&["src", "nvcc 13.0", "-arch=sm_80"]));
        assert_ne!(a, fnv1a64(&["src2", "nvcc 13.0", "-arch=sm_90"]));
        // Part boundaries matter: ("ab", "c") is not ("a", "bc").
        assert_ne!(fnv1a64(&["ab", "c"]), fnv1a64(&["a", "bc"]));
        // Stable across runs and platforms (the cache key must not move).
        assert_eq!(fnv1a64(&[""]), 0xaf64_724c_8602_eb6e);
    }
}
