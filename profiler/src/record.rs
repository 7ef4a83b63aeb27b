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
