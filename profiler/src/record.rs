//! The profile record format: what one profiling run of one kernel on one device leaves.
//!
//! This is the contract between the collector (CUPTI, in-process), the ncu importer used
//! for fixtures, the profile database (storage, keys, locking) and the fit/codegen stages.
//! One [`Entry`] per kernel × device × key; it is stored as TOML (human-readable) by
//! [`crate::db`]. Counters are launch totals exactly as the hardware counts them
//! (warp-level instruction counts, L1TEX requests and 32-byte sectors, DRAM bytes);
//! per-warp quantities are derived by the consumer, never stored.

use serde::{Deserialize, Serialize};

/// Version of this format; an entry of another version is not used (it is re-profiled).
pub const FORMAT_VERSION: u32 = 1;

/// Everything measured for one kernel on one device.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    pub format_version: u32,
    pub kernel: KernelId,
    pub device: DeviceId,
    /// How the records were captured, e.g. "klaraptor-cupti 0.1.0" or "ncu 2025.3.1".
    pub collector: String,
    /// ISO 8601 date-time (UTC) of the capture.
    pub captured_at: String,
    /// CUDA version and driver version, as the driver reports them (e.g. "13.0", "580.82").
    pub cuda_version: String,
    pub driver_version: String,
    pub plan: Plan,
    pub samples: Vec<Sample>,
    /// Set when the profile is missing samples through no fault of the kernel (the
    /// collector or the GPU failed, or a planned size left no samples): why. Such an entry
    /// is never used for a model and is profiled again by the next link that can (see
    /// [`Entry::incompleteness`]). Absent in complete entries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub incomplete: Option<String>,
    /// The block the program itself launched the kernel with, at each profiled size where
    /// the profiling runtime saw it as a legal shape (`KLARAPTOR_PROFILE_PROGRAM`, issue 38):
    /// the profile's sample of that block at that size is the program's own shape. Empty in
    /// entries captured before, and in imports without it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub program: Vec<ProgramBlock>,
}

/// The program's own block at one profiled size ([`Entry::program`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProgramBlock {
    pub sizes: Vec<i64>,
    pub block: [u32; 3],
}

/// Adds `b` to `list` unless a block of the program at its size is there already (the first
/// one seen stays: a program that launches one size with two blocks is named by its first).
pub fn add_program_block(list: &mut Vec<ProgramBlock>, b: ProgramBlock) {
    if !list.iter().any(|p| p.sizes == b.sizes) {
        list.push(b);
    }
}

impl Entry {
    /// Reads an entry from the TOML text of its file, as every reader must: the format, then
    /// its strings and values ([`Entry::check_values`]). The error says what is wrong.
    pub fn from_toml(text: &str) -> Result<Entry, String> {
        let entry =
            toml::from_str::<Entry>(text).map_err(|e| e.to_string().trim_end().to_string())?;
        entry.check_values()?;
        Ok(entry)
    }

    /// The program's own block at the profiled size `sizes` ([`Entry::program`]), if known.
    pub fn program_block(&self, sizes: &[i64]) -> Option<[u32; 3]> {
        self.program
            .iter()
            .find(|p| p.sizes == sizes)
            .map(|p| p.block)
    }

    /// Checks the values a model is built from: every sample's data values as many as the
    /// kernel's data labels; every measured sample's times finite and positive (its runs'
    /// finite and not negative), its active warps finite and not negative, its block and grid
    /// non-zero. The error names the first sample at fault.
    ///
    /// First every string is checked against its format ([`Entry::check_text`]): an entry is
    /// data, and text that is not what its field holds is damage, never code.
    pub fn check_values(&self) -> Result<(), String> {
        self.check_text()?;
        for s in &self.samples {
            let at = || {
                format!(
                    "the sample at size {:?} block {}x{}x{}",
                    s.sizes, s.block[0], s.block[1], s.block[2]
                )
            };
            if s.sizes.len() != self.kernel.data.len() {
                return Err(format!(
                    "{} has {} data values for {} data labels",
                    at(),
                    s.sizes.len(),
                    self.kernel.data.len()
                ));
            }
            // A sample that did not run (refused, failed) has no grid.
            let Some(c) = &s.counters else { continue };
            if s.block.contains(&0) || s.grid.contains(&0) {
                return Err(format!("{} has a zero block or grid dimension", at()));
            }
            if !(c.time_ms.is_finite() && c.time_ms > 0.0) {
                return Err(format!("{} has time_ms = {}", at(), c.time_ms));
            }
            if let Some(t) = c
                .time_runs_ms
                .iter()
                .find(|t| !(t.is_finite() && **t >= 0.0))
            {
                return Err(format!("{} has a run of {t} ms", at()));
            }
            if !(c.achieved_active_warps.is_finite() && c.achieved_active_warps >= 0.0) {
                return Err(format!(
                    "{} has achieved_active_warps = {}",
                    at(),
                    c.achieved_active_warps
                ));
            }
        }
        for p in &self.program {
            if p.sizes.len() != self.kernel.data.len() || p.block.contains(&0) {
                return Err(format!(
                    "the program's block {}x{}x{} at size {:?} does not fit the kernel's {} \
                     data labels or is zero",
                    p.block[0],
                    p.block[1],
                    p.block[2],
                    p.sizes,
                    self.kernel.data.len()
                ));
            }
        }
        Ok(())
    }

    /// Checks every string of the entry against the format of its field. Names, versions and
    /// dates that reach generated C, file names or a terminal are held to strict formats
    /// (`text::*`); the free text (the plan's note, samples' errors, `incomplete`) may hold
    /// anything but control characters. The error names the field. A database is shared
    /// (committed, imported from another machine): this is what keeps a hostile entry from
    /// becoming code in a binary built against it.
    pub fn check_text(&self) -> Result<(), String> {
        let field = |name: &str, value: &str, why: Option<String>| match why {
            None => Ok(()),
            Some(why) => Err(format!("field `{name}` = {value:?} {why}")),
        };
        let k = &self.kernel;
        field("kernel.mangled", &k.mangled, text::mangled_name(&k.mangled))?;
        field("kernel.name", &k.name, text::kernel_name(&k.name))?;
        field(
            "kernel.code_hash",
            &k.code_hash,
            crate::db::check_code_hash(&k.code_hash),
        )?;
        for (i, d) in k.data.iter().enumerate() {
            field(&format!("kernel.data[{i}]"), d, text::data_label(d))?;
        }
        let d = &self.device;
        field("device.name", &d.name, text::device_name(&d.name))?;
        field("device.uuid", &d.uuid, text::device_uuid(&d.uuid))?;
        field("device.cc", &d.cc, text::compute_capability(&d.cc))?;
        field(
            "collector",
            &self.collector,
            text::collector(&self.collector),
        )?;
        field(
            "captured_at",
            &self.captured_at,
            text::timestamp(&self.captured_at),
        )?;
        field(
            "cuda_version",
            &self.cuda_version,
            text::version(&self.cuda_version),
        )?;
        field(
            "driver_version",
            &self.driver_version,
            text::version(&self.driver_version),
        )?;
        field(
            "plan.note",
            &self.plan.note,
            text::free_text(&self.plan.note),
        )?;
        for (i, s) in self.samples.iter().enumerate() {
            if let Some(e) = &s.error {
                field(&format!("samples[{i}].error"), e, text::free_text(e))?;
            }
        }
        if let Some(why) = &self.incomplete {
            field("incomplete", why, text::free_text(why))?;
        }
        Ok(())
    }

    /// Why this entry cannot be used for a model, when it cannot: what its `incomplete`
    /// field says, else the first sample whose error is the collector's or the GPU's (an
    /// entry stored before completeness was checked, e.g. while another process held the
    /// GPU's counters).
    pub fn incompleteness(&self) -> Option<String> {
        if let Some(why) = &self.incomplete {
            return Some(why.clone());
        }
        let bad: Vec<&Sample> = self
            .samples
            .iter()
            .filter(|s| s.collector_error().is_some())
            .collect();
        let Some(first) = bad.first() else {
            return nothing_ran(&self.samples);
        };
        Some(format!(
            "{} of {} samples failed in the collector or the GPU; the first, at size {:?} \
             block {}x{}x{}: {}",
            bad.len(),
            self.samples.len(),
            first.sizes,
            first.block[0],
            first.block[1],
            first.block[2],
            first.error.as_deref().unwrap_or_default()
        ))
    }
}

/// The formats of an entry's strings: each function says why a value is not of its format
/// (`None`: it is). Shared with the device descriptions and calibration reports that name the
/// same things.
pub mod text {
    pub use klaraptor_model::device::text::{compute_capability, device_name, device_uuid};

    fn only(s: &str, allowed: impl Fn(char) -> bool, max: usize, what: &str) -> Option<String> {
        if s.is_empty() {
            Some(format!("is empty; it must be {what}"))
        } else if s.chars().count() > max {
            Some(format!("has over {max} characters; it must be {what}"))
        } else {
            s.chars()
                .find(|&c| !allowed(c))
                .map(|c| format!("contains {c:?}; it must be {what}"))
        }
    }

    /// A mangled kernel name: what Itanium mangling produces (ASCII letters, digits, `_`,
    /// and `.`/`$` of compiler suffixes).
    pub fn mangled_name(s: &str) -> Option<String> {
        only(
            s,
            |c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '$'),
            4096,
            "a mangled name (ASCII letters, digits, `_`, `.`, `$`)",
        )
    }

    /// A kernel's name in the source, a template instance's with its arguments
    /// (`tile<float, 32>`): letters, digits and the punctuation of C++ types, never `/`,
    /// `\`, quotes or `?`.
    pub fn kernel_name(s: &str) -> Option<String> {
        only(
            s,
            |c| {
                c.is_ascii_alphanumeric()
                    || matches!(c, '_' | ' ' | '<' | '>' | ':' | ',' | '(' | ')' | '*' | '&')
                    || matches!(c, '.' | '+' | '-' | '[' | ']' | '~')
            },
            1024,
            "a kernel name (letters, digits, spaces and `_<>:,()*&.+-[]~`)",
        )
    }

    /// A data label of an annotation: a C identifier.
    pub fn data_label(s: &str) -> Option<String> {
        (!klaraptor_model::c_text::is_identifier(s))
            .then(|| "is not an identifier (ASCII letters, digits, `_`)".to_string())
    }

    /// A collector's name and version, e.g. `klaraptor-collector 0.1.0` or `ncu 2025.3.1`.
    pub fn collector(s: &str) -> Option<String> {
        if !s.starts_with(|c: char| c.is_ascii_alphabetic()) {
            return Some("must start with a letter: a collector's name and version".into());
        }
        only(
            s,
            |c| c.is_ascii_alphanumeric() || matches!(c, ' ' | '.' | '_' | '+' | '-' | '(' | ')'),
            100,
            "a collector's name and version (letters, digits, spaces and `._+-()`)",
        )
    }

    /// An ISO 8601 date-time (UTC `Z` or an offset), as the collector writes it.
    pub fn timestamp(s: &str) -> Option<String> {
        (s.len() > 40 || s.trim() != s || crate::db::Timestamp::parse_iso8601(s).is_none())
            .then(|| "is not an ISO 8601 date-time (e.g. 2026-11-28T10:00:00Z)".to_string())
    }

    /// A version as the driver reports it (`13.0`, `580.159.04`), or empty where unknown.
    pub fn version(s: &str) -> Option<String> {
        let ok = s.is_empty()
            || (s.len() <= 32
                && s.split('.')
                    .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit())));
        (!ok).then(|| "is not a version (digits separated by dots, or empty)".to_string())
    }

    /// Free text for people: anything but control characters (a line break and a tab are
    /// text).
    pub fn free_text(s: &str) -> Option<String> {
        s.chars()
            .find(|&c| c.is_control() && c != '\n' && c != '\t')
            .map(|c| format!("contains the control character {c:?}"))
    }
}

/// The fewest measured samples a model is fitted from.
pub const MIN_MEASURED: usize = 4;

/// Why `samples` are no profile at all when none of them ran (every shape faulted or was
/// refused): an entry of such samples is incomplete, so that no build reuses it and the next
/// link profiles the kernel again. Quotes the first failure.
pub fn nothing_ran(samples: &[Sample]) -> Option<String> {
    if samples.is_empty() || samples.iter().any(|s| s.error.is_none()) {
        return None;
    }
    let first = &samples[0];
    Some(format!(
        "none of its {} samples ran; the first, at size {:?} block {}x{}x{}: {}",
        samples.len(),
        first.sizes,
        first.block[0],
        first.block[1],
        first.block[2],
        first.error.as_deref().unwrap_or_default()
    ))
}

/// Whose failure a sample's error is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureCause {
    /// The kernel's own: a shape it cannot run (device limits, its constraints, a launch
    /// the GPU refuses for this shape, a fault in the kernel). Profiling again gives the
    /// same answer, so the sample is a valid part of a complete profile.
    Kernel,
    /// The collector's or the GPU's: CUPTI refused (the GPU's counters busy with another
    /// profiler, `CUPTI_ERROR_HARDWARE_BUSY`), the collector could not load or start, the
    /// device was unavailable. Another try may succeed; the profile is incomplete.
    Collector,
}

/// Whose failure the error text of a sample is (the collector's and the profiling
/// runtime's messages, `profiler/collector/src/collect.rs` and
/// `runtime-shim/src/klaraptor_prof.c`). Text of neither is the kernel's: a shape the
/// runtime rejected, or a launch that failed.
pub fn failure_cause(error: &str) -> FailureCause {
    // Whatever follows a fault of the kernel (the context is lost) is the kernel's.
    const KERNEL: [&str; 3] = [
        "the CUDA context is unusable",
        "an error in the kernel",
        "the kernel failed",
    ];
    const COLLECTOR: [&str; 12] = [
        "CUptiResult",
        "CUPTI",
        "the profiler failed",
        "not profiled",
        "not measured",
        "the collector",
        "no usable time",
        "cudaErrorDevicesUnavailable",
        "cudaErrorSystemNotReady",
        "cudaErrorInsufficientDriver",
        "cudaErrorNoDevice",
        "busy",
    ];
    if KERNEL.iter().any(|m| error.contains(m)) {
        FailureCause::Kernel
    } else if COLLECTOR.iter().any(|m| error.contains(m)) {
        FailureCause::Collector
    } else {
        FailureCause::Kernel
    }
}

/// Whether a sample's error says that this shape's own launch faulted (an illegal address, a
/// trap, …) and left the process's CUDA context unusable: the collector's "an error in the
/// kernel: …" (a synchronisation after its launches failed), or "launch failed: …, then …"
/// (its launch failed and the context with it). Such a shape cannot run; the model never
/// chooses it. Not the shapes that only lost their run or profiler pass to another shape's
/// fault ([`lost_to_fault`]), nor a launch the GPU refused ("launch failed: …" alone).
///
/// A profiler session that faults gives the same message to each of its shapes: which one
/// faulted is then known only once each is run alone (profiler/src/gpu_profile.rs does).
pub fn is_fault(error: &str) -> bool {
    error.starts_with("an error in the kernel")
        || (error.starts_with("launch failed") && error.contains(", then "))
}

/// Whether a sample's error says that it was not run or not profiled because another shape
/// of its process had faulted before ("not run: the CUDA context is unusable after …"): it
/// says nothing about this shape, which a new process can measure.
pub fn lost_to_fault(error: &str) -> bool {
    !is_fault(error) && error.contains("the CUDA context is unusable")
}

/// Whether a collector error may go away by itself (another process holds the GPU's
/// counters, or the device is busy): worth trying again after a while.
pub fn is_transient(error: &str) -> bool {
    error.contains("HARDWARE_BUSY")
        || error.contains("(CUptiResult 26)")
        || error.contains("cudaErrorDevicesUnavailable")
        || error.contains("busy")
}

/// The key of an entry: a kernel, identified so that a change to its device code or to the
/// flags that change that code invalidates the entry.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct KernelId {
    /// The mangled name (what `__cudaRegisterFunction` registers).
    pub mangled: String,
    /// The name in the source (for people).
    pub name: String,
    /// Hex digest of the kernel's device code and code-changing flags (see `crate::db`).
    pub code_hash: String,
    /// Labels of the data parameters, in annotation order.
    pub data: Vec<String>,
    /// Declared dimensionality of the block (1, 2 or 3).
    pub dim: u8,
}

/// The device the records were measured on.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct DeviceId {
    /// The driver's name, e.g. "NVIDIA H200".
    pub name: String,
    /// The device UUID ("GPU-…"), empty when unknown.
    pub uuid: String,
    /// Compute capability as "major.minor", e.g. "9.0".
    pub cc: String,
    pub sm_count: u32,
}

/// The sampling plan the records follow.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// Data sizes profiled, one value per data parameter each.
    pub sizes: Vec<Vec<i64>>,
    /// Block shapes profiled at every size.
    pub shapes: Vec<[u32; 3]>,
    /// Timed runs per shape (the median is kept), after `warmup` untimed ones.
    pub runs: u32,
    pub warmup: u32,
    /// Free text: why these sizes and shapes.
    pub note: String,
}

/// One launch shape at one data size.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// One value per data parameter.
    pub sizes: Vec<i64>,
    pub block: [u32; 3],
    pub grid: [u32; 3],
    /// `None` when the launch succeeded; the error otherwise (then `counters` is `None`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counters: Option<Counters>,
}

impl Sample {
    /// The error of this sample when it is the collector's or the GPU's, not the kernel's
    /// (see [`failure_cause`]).
    pub fn collector_error(&self) -> Option<&str> {
        self.error
            .as_deref()
            .filter(|e| failure_cause(e) == FailureCause::Collector)
    }
}

/// Hardware counters of one launch (totals over the whole grid), its resources and time.
/// ncu names (sm_70+) are given for each field; the CUPTI collector reads the same metrics.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Counters {
    /// `smsp__inst_executed.sum`: warp-level instructions executed.
    pub inst_executed: u64,
    /// `smsp__inst_executed_op_global_ld.sum`, `…_op_global_st.sum`.
    pub inst_global_ld: u64,
    pub inst_global_st: u64,
    /// `smsp__inst_executed_op_shared_ld.sum`, `…_op_shared_st.sum`.
    pub inst_shared_ld: u64,
    pub inst_shared_st: u64,
    /// Barrier instructions (`smsp__inst_executed_op_barrier.sum` or equivalent).
    pub inst_barrier: u64,
    /// `l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum`, `…_op_st.sum`.
    pub gld_requests: u64,
    pub gst_requests: u64,
    /// `l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum`, `…_op_st.sum` (32-byte sectors).
    pub gld_sectors: u64,
    pub gst_sectors: u64,
    /// `l1tex__t_sectors_pipe_lsu_mem_global_op_ld_lookup_hit.sum`: load sectors the L1
    /// served. `None` in records made before the collector read it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gld_l1_hit_sectors: Option<u64>,
    /// `dram__bytes_read.sum`, `dram__bytes_write.sum`.
    pub dram_bytes_read: u64,
    pub dram_bytes_write: u64,
    /// `sm__warps_active.avg.per_cycle_active`: achieved active warps per SM.
    pub achieved_active_warps: f64,
    /// `l1tex__t_requests_pipe_lsu_mem_global_op_atom.sum` + `…_op_red.sum`: warp requests of
    /// global atomics and reductions. `None` in records made before the collector read it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub global_atomic_requests: Option<u64>,
    /// Median elapsed time in milliseconds and every timed run (each the mean per launch of
    /// its launches).
    pub time_ms: f64,
    #[serde(default)]
    pub time_runs_ms: Vec<f64>,
    /// Launches per timed run, back to back behind a gate kernel (the collector's
    /// `KLARAPTOR_COLLECT_BATCH_US`). `None` in records made before the collector batched:
    /// each of their runs is one launch between a pair of events queued on an idle GPU, so
    /// it includes the time the CPU took to queue the launch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launches_per_run: Option<u32>,
    /// `launch__registers_per_thread`.
    pub regs_per_thread: u32,
    /// `launch__shared_mem_per_block_static`, `…_dynamic` (bytes).
    pub smem_static: u32,
    pub smem_dynamic: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_of_the_collector_and_the_gpu_are_told_from_the_kernels_own() {
        for msg in [
            "the profiler failed: cuptiRangeProfilerStart failed: CUPTI_ERROR_HARDWARE_BUSY \
             (CUptiResult 26)",
            "not profiled: the profiler failed: x",
            "not profiled (no session measured it)",
            "CUPTI returned no range for this shape",
            "the collector failed: cuptiProfilerInitialize failed: x (CUptiResult 17)",
            "not measured: cannot load the collector /x.so: no such file",
            "the timed runs gave no usable time: []",
            "launch failed: cudaErrorDevicesUnavailable (46)",
        ] {
            assert_eq!(failure_cause(msg), FailureCause::Collector, "{msg}");
        }
        for msg in [
            "launch failed: cudaErrorInvalidConfiguration (9)",
            "launch failed",
            "an error in the kernel: cuCtxSynchronize failed: CUDA_ERROR_ILLEGAL_ADDRESS",
            "not run: the CUDA context is unusable after launch failed: x (700)",
            "not profiled: the CUDA context is unusable after an error in the kernel: y",
            "the kernel failed: cuEventSynchronize failed: z",
            "block 2048x1x1 exceeds the device's 1024 threads per block",
        ] {
            assert_eq!(failure_cause(msg), FailureCause::Kernel, "{msg}");
        }
        // Which of the kernel's failures are faults of the shape itself, and which were
        // lost to another shape's fault.
        let own = "an error in the kernel: cuCtxSynchronize failed: CUDA_ERROR_ILLEGAL_ADDRESS \
                   (700): an illegal memory access was encountered";
        let sticky_launch = "launch failed: cudaErrorIllegalAddress (700), then cuCtxSynchronize \
                             failed: CUDA_ERROR_ILLEGAL_ADDRESS (700): x";
        for msg in [own, sticky_launch] {
            assert!(is_fault(msg) && !lost_to_fault(msg), "{msg}");
            assert_eq!(failure_cause(msg), FailureCause::Kernel, "{msg}");
        }
        for msg in [
            format!("not run: the CUDA context is unusable after {own}"),
            format!("not profiled: the CUDA context is unusable after {sticky_launch}"),
        ] {
            assert!(!is_fault(&msg) && lost_to_fault(&msg), "{msg}");
        }
        for msg in [
            "launch failed: cudaErrorInvalidConfiguration (9)",
            "launch failed",
            "the kernel failed: cuEventSynchronize failed: z",
            "block 2048x1x1 exceeds the device's 1024 threads per block",
            "the collector failed: cuEventCreate failed: CUDA_ERROR_ILLEGAL_ADDRESS (700): x",
        ] {
            assert!(!is_fault(msg) && !lost_to_fault(msg), "{msg}");
        }
        assert!(is_transient("x CUPTI_ERROR_HARDWARE_BUSY (CUptiResult 26)"));
        assert!(!is_transient("x (CUptiResult 35)"));
    }

    /// An entry of kernel `k` (data N, 1-D) profiled at N = 64 with 32 threads, holding
    /// `samples`.
    fn tiny_entry(samples: Vec<Sample>) -> Entry {
        Entry {
            format_version: FORMAT_VERSION,
            kernel: KernelId {
                mangled: "_Z1kv".into(),
                name: "k".into(),
                code_hash: "0".repeat(16),
                data: vec!["N".into()],
                dim: 1,
            },
            device: DeviceId {
                name: "GPU".into(),
                uuid: String::new(),
                cc: "9.0".into(),
                sm_count: 1,
            },
            collector: String::new(),
            captured_at: String::new(),
            cuda_version: String::new(),
            driver_version: String::new(),
            plan: Plan {
                sizes: vec![vec![64]],
                shapes: vec![[32, 1, 1]],
                runs: 1,
                warmup: 0,
                note: String::new(),
            },
            samples,
            incomplete: None,
            program: Vec::new(),
        }
    }

    #[test]
    fn an_entry_with_collector_failures_is_incomplete() {
        let sample = |error: Option<&str>| Sample {
            sizes: vec![64],
            block: [32, 1, 1],
            grid: [2, 1, 1],
            error: error.map(String::from),
            counters: None,
        };
        let mut e = tiny_entry(vec![sample(None), sample(Some("launch failed"))]);
        assert_eq!(e.incompleteness(), None);
        e.samples
            .push(sample(Some("the profiler failed: x (CUptiResult 26)")));
        let why = e.incompleteness().unwrap();
        assert!(why.starts_with("1 of 3 samples failed"), "{why}");
        assert!(why.contains("block 32x1x1: the profiler failed: x (CUptiResult 26)"));
        e.incomplete = Some("no samples at N=128".into());
        assert!(e.incompleteness().unwrap().contains("no samples at N=128"));
        e.incomplete = None;
        // Samples that all failed, for the kernel's own reasons: no profile at all.
        e.samples = vec![
            sample(Some("launch failed")),
            sample(Some("an error in the kernel")),
        ];
        let why = e.incompleteness().unwrap();
        assert!(why.starts_with("none of its 2 samples ran"), "{why}");
        assert!(why.contains("block 32x1x1: launch failed"), "{why}");
        e.samples.push(sample(None));
        assert_eq!(e.incompleteness(), None);
        e.incomplete = Some("no samples at N=128".into());
        assert_eq!(e.incompleteness().as_deref(), Some("no samples at N=128"));
        let text = toml::to_string(&e).unwrap();
        let back: Entry = toml::from_str(&text).unwrap();
        assert_eq!(back, e);
    }

    #[test]
    fn the_programs_own_blocks_round_trip_and_old_entries_have_none() {
        let s = Sample {
            sizes: vec![64],
            block: [32, 1, 1],
            grid: [2, 1, 1],
            error: None,
            counters: None,
        };
        let mut e = tiny_entry(vec![s]);
        e.collector = "klaraptor-collector 0.1.0".into();
        e.captured_at = "2026-01-01T00:00:00Z".into();
        // Without blocks of the program the text has no trace of them (an entry as before).
        let old = toml::to_string(&e).unwrap();
        assert!(!old.contains("program"), "{old}");
        assert_eq!(Entry::from_toml(&old).unwrap().program, Vec::new());
        add_program_block(
            &mut e.program,
            ProgramBlock {
                sizes: vec![64],
                block: [256, 1, 1],
            },
        );
        // A second block at the same size is not added.
        add_program_block(
            &mut e.program,
            ProgramBlock {
                sizes: vec![64],
                block: [128, 1, 1],
            },
        );
        let text = toml::to_string(&e).unwrap();
        assert!(text.contains("[[program]]"), "{text}");
        let back = Entry::from_toml(&text).unwrap();
        assert_eq!(back, e);
        assert_eq!(back.program_block(&[64]), Some([256, 1, 1]));
        assert_eq!(back.program_block(&[128]), None);
        // A block that does not fit the kernel is damage.
        e.program[0].sizes = vec![64, 2];
        let err = Entry::from_toml(&toml::to_string(&e).unwrap()).unwrap_err();
        assert!(err.contains("the program's block 256x1x1"), "{err}");
    }
}
