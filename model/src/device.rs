//! The device description: what occupancy and the model need to know about one GPU.
//!
//! A [`Device`] starts from a per-architecture table ([`Device::for_arch`]: the facts of the
//! CUDA C++ Programming Guide's "Technical Specifications per Compute Capability" table and
//! of the occupancy calculator, plus a reference board of that architecture for the figures
//! that differ between boards), is overridden by what the driver reports
//! ([`Device::from_attributes`], keyed by the `cudaDeviceAttr` names without the
//! `cudaDevAttr` prefix), and by calibration ([`Device::with_calibration`]). It is stored as
//! one human-readable TOML file per device ([`Device::load`], [`Device::to_toml_string`]).
//!
//! Every calibration figure carries its [`Source`]; the device limits carry one source for the
//! whole set ([`Device::limits_source`]) and the list of the attributes the driver did not
//! report ([`Device::from_table`]).

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Where a figure came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Source {
    /// The per-architecture table of this crate (documentation facts or an estimate for the
    /// architecture's reference board).
    ArchTable,
    /// Reported by the driver (`cudaDeviceGetAttribute`), or derived from such figures.
    Driver,
    /// Measured by the calibration micro-benchmarks on this device.
    Calibration,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Source::ArchTable => "arch-table",
            Source::Driver => "driver",
            Source::Calibration => "calibration",
        })
    }
}

/// One calibration figure and where it came from.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Figure {
    pub value: f64,
    pub source: Source,
}

impl Figure {
    fn table(value: f64) -> Figure {
        Figure {
            value,
            source: Source::ArchTable,
        }
    }
}

/// Compute capability, e.g. 9.0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ComputeCapability {
    pub major: u32,
    pub minor: u32,
}

impl fmt::Display for ComputeCapability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// How registers are handed out. Since compute capability 2.0 they are allocated per warp:
/// each warp gets `regs_per_thread * warp_size` rounded up to the allocation unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RegisterGranularity {
    Warp,
}

/// The register file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Registers {
    /// 32-bit registers per SM (`MaxRegistersPerMultiprocessor`).
    pub per_sm: u32,
    /// 32-bit registers one block may use (`MaxRegistersPerBlock`).
    pub per_block: u32,
    /// The most registers one thread may use (255 on sm_70..sm_90).
    pub max_per_thread: u32,
    /// Registers are allocated in units of this many per warp (256).
    pub alloc_unit: u32,
    pub alloc_granularity: RegisterGranularity,
}

/// Shared memory, all in bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SharedMemory {
    /// The largest shared-memory carveout of one SM (`MaxSharedMemoryPerMultiprocessor`).
    pub per_sm: u32,
    /// What a block may use without opting in (`MaxSharedMemoryPerBlock`, 48 KiB).
    pub per_block: u32,
    /// What a block may use after `cudaFuncSetAttribute(…MaxDynamicSharedMemorySize…)`
    /// (`MaxSharedMemoryPerBlockOptin`).
    pub per_block_optin: u32,
    /// Shared memory the driver reserves for every resident block
    /// (`ReservedSharedMemoryPerBlock`; 1 KiB since sm_80, 0 before).
    pub reserved_per_block: u32,
    /// A block's shared memory (its own plus the reserved part) is allocated in units of
    /// this many bytes (256 on sm_7x, 128 since sm_80).
    pub alloc_unit: u32,
    /// The shared-memory capacities (KiB) one SM can be configured to, ascending: the
    /// carveouts of the architecture (e.g. 0, 8, 16, 32, 64, 100, 132, 164, 196, 228 on sm_90).
    pub carveout_kib: Vec<u32>,
    /// The L1 data cache and shared memory together, per SM (bytes): the L1 is what the
    /// shared-memory carveout leaves of it. No driver attribute gives it: the architecture
    /// table's (128 KiB on sm_70, 96 KiB on sm_75, 192 KiB on sm_80, 128 KiB on sm_86 and
    /// sm_89, 256 KiB on sm_90). 0 in descriptions written before: read as the table's
    /// ([`Device::l1_unified_per_sm`]).
    #[serde(default)]
    pub unified_per_sm: u32,
}

/// The figures of the performance model that no driver attribute gives.
///
/// Definitions (the calibration micro-benchmarks must measure these quantities):
/// - `mem_latency_cycles`: latency of one dependent global load that misses L2 (SM cycles).
/// - `l2_latency_cycles`: latency of one dependent global load that hits L2 (SM cycles).
/// - `l1_latency_cycles`: latency of one dependent global load that hits L1 (SM cycles).
///   Device descriptions written before this figure existed read it as the architecture
///   table's estimate ([`L1_LATENCY_ESTIMATE_CYCLES`]).
/// - `departure_delay_coalesced_cycles`: SM cycles between the departures of two consecutive
///   coalesced warp requests (a 4-byte-per-thread warp access, 4 sectors) from one SM.
/// - `departure_delay_coalesced_dram_cycles`: the same gap when the requests' lines miss L2
///   (one SM streaming fresh lines after the L2 was scrubbed): a load that must wait for DRAM
///   holds a miss-handling slot longer. Where it was not measured it is 0, read as
///   `departure_delay_coalesced_cycles`.
/// - `departure_delay_uncoalesced_cycles`: SM cycles between two consecutive *transactions*
///   (32-byte sectors) of one fully diverged warp request; such a request (32 sectors) takes
///   32 times this to depart.
/// - `dram_bandwidth_gbs`: achievable DRAM bandwidth of the whole device (GB/s, 10^9 B/s).
/// - `issue_cycles`: cycles one warp scheduler (SM sub-partition) needs per warp instruction.
/// - `shared_issue_cycles`: cycles per shared-memory warp instruction, per sub-partition,
///   when all sub-partitions use the SM's one shared-memory pipe (conflict-free accesses).
/// - `block_dispatch_cycles`: SM cycles between two blocks one SM starts when blocks do no
///   work (the block scheduler's rate: launching, starting and retiring a block), measured
///   with an empty kernel of many one-warp blocks. Device descriptions written before this
///   figure existed read it as the architecture table's estimate.
/// - `dram_queue_exponent`: how sharply DRAM requests queue as their demand nears the
///   bandwidth. A request's latency grows by `(1 + u^q)^(1/q)`, `u` the demand the resident
///   warps would place at the unloaded latency over `dram_bandwidth_gbs`, so the memory
///   parallelism an SM gets is a soft minimum of its requests in flight and the bandwidth's
///   share (klaraptor-model, "DRAM under load"). 0 keeps the hard minimum of the MWP-CWP
///   paper. The architecture table's [`DRAM_QUEUE_EXPONENT`].
/// - `warp_drain_cycles`: SM cycles a wave of blocks lasts longer per warp of a block beyond
///   the first, measured with a one-element-per-thread copy over many waves launched with
///   blocks of 1024 and of 256 threads (both keep the SM full). Where it was not measured it
///   is 0 (no such cost).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Calibration {
    pub mem_latency_cycles: Figure,
    pub l2_latency_cycles: Figure,
    #[serde(default = "default_l1_latency")]
    pub l1_latency_cycles: Figure,
    pub departure_delay_coalesced_cycles: Figure,
    #[serde(default = "unmeasured")]
    pub departure_delay_coalesced_dram_cycles: Figure,
    pub departure_delay_uncoalesced_cycles: Figure,
    pub dram_bandwidth_gbs: Figure,
    pub issue_cycles: Figure,
    pub shared_issue_cycles: Figure,
    #[serde(default = "default_block_dispatch")]
    pub block_dispatch_cycles: Figure,
    #[serde(default = "unmeasured")]
    pub warp_drain_cycles: Figure,
    #[serde(default = "default_dram_queue")]
    pub dram_queue_exponent: Figure,
}

/// [`Calibration::dram_queue_exponent`] of the architecture table: fitted to streaming
/// micro-benchmarks on an H100 (`bench/gpu/loaded`: a sum, a copy and a SAXPY at 2 to 64
/// warps per SM, one request in flight per load of a warp; the bandwidth each reached over
/// the one `(1 + u^q)^(1/q)` predicts from the calibrated unloaded latency and bandwidth:
/// root-mean-square log error 0.11 at q = 1.5, 0.16 at 1 and 2, 0.29 for the hard minimum).
pub const DRAM_QUEUE_EXPONENT: f64 = 1.5;

fn default_dram_queue() -> Figure {
    Figure::table(DRAM_QUEUE_EXPONENT)
}

/// The estimate of [`Calibration::block_dispatch_cycles`] where nothing was measured: about
/// 80 ns per block per SM at 1.98 GHz, what the exhaustive sweeps of the accuracy study show
/// for blocks of 8 to 64 threads on the H200 (`bench/results/accuracy-h200-*`); other
/// architectures have no measurement.
pub const BLOCK_DISPATCH_ESTIMATE_CYCLES: f64 = 160.0;

fn default_block_dispatch() -> Figure {
    Figure::table(BLOCK_DISPATCH_ESTIMATE_CYCLES)
}

/// The estimate of [`Calibration::l1_latency_cycles`] where nothing was measured: an L1 hit
/// of a dependent global load takes about 30–40 SM cycles on every architecture since sm_70.
pub const L1_LATENCY_ESTIMATE_CYCLES: f64 = 33.0;

fn default_l1_latency() -> Figure {
    Figure::table(L1_LATENCY_ESTIMATE_CYCLES)
}

/// A figure nobody measured: 0, read as "no such cost" (`warp_drain_cycles`) or as "use the
/// figure it refines" (`departure_delay_coalesced_dram_cycles`).
fn unmeasured() -> Figure {
    Figure::table(0.0)
}

/// Measured calibration figures; a `None` keeps the device's current figure. Field names
/// are those of the `[calibration]` table the calibration tool prints, so that table
/// deserializes into this type directly (other keys in it are ignored).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Measured {
    #[serde(default)]
    pub mem_latency_cycles: Option<f64>,
    #[serde(default)]
    pub l2_latency_cycles: Option<f64>,
    #[serde(default)]
    pub l1_latency_cycles: Option<f64>,
    #[serde(default)]
    pub departure_delay_coalesced_cycles: Option<f64>,
    #[serde(default)]
    pub departure_delay_coalesced_dram_cycles: Option<f64>,
    #[serde(default)]
    pub departure_delay_uncoalesced_cycles: Option<f64>,
    #[serde(default)]
    pub dram_bandwidth_gbs: Option<f64>,
    #[serde(default)]
    pub issue_cycles: Option<f64>,
    #[serde(default)]
    pub shared_issue_cycles: Option<f64>,
    #[serde(default)]
    pub block_dispatch_cycles: Option<f64>,
    #[serde(default)]
    pub warp_drain_cycles: Option<f64>,
}

/// Everything occupancy and the model need to know about one GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Device {
    /// The driver's name, e.g. "NVIDIA H200".
    pub name: String,
    /// "GPU-…", empty when unknown.
    pub uuid: String,
    /// How this description was made (free text for people).
    #[serde(default)]
    pub note: String,
    pub compute_capability: ComputeCapability,
    /// Where the limits below came from: `driver` when [`Device::from_attributes`] made it
    /// (then `from_table` lists what the driver did not report), `arch-table` otherwise.
    pub limits_source: Source,
    /// Attribute names (`cudaDevAttr…` without the prefix) whose value is the table's.
    #[serde(default)]
    pub from_table: Vec<String>,
    pub sm_count: u32,
    /// Peak SM clock (MHz).
    pub sm_clock_mhz: f64,
    /// Peak memory clock (MHz) as the driver reports it, and the bus width (bits): the
    /// theoretical DRAM bandwidth is 2 × clock × width / 8 (double data rate).
    pub memory_clock_mhz: f64,
    pub memory_bus_width_bits: u32,
    pub warp_size: u32,
    /// Warp schedulers (SM sub-partitions) per SM; each issues for its own warps.
    pub sub_partitions: u32,
    pub max_threads_per_block: u32,
    pub max_threads_per_sm: u32,
    pub max_blocks_per_sm: u32,
    pub max_block_dim: [u32; 3],
    pub max_grid_dim: [u32; 3],
    pub registers: Registers,
    pub shared_memory: SharedMemory,
    pub calibration: Calibration,
}

/// Errors of loading, building or checking a device description.
#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    /// The I/O error is part of the message, not its `source()`: a report that prints the
    /// chain (anyhow's `{:#}`) would say it twice.
    #[error("{path}: cannot read the device description: {error}")]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{origin}: not a valid device description: {message}")]
    Parse { origin: String, message: String },
    #[error("{origin}: field `{field}`: {message}")]
    Invalid {
        origin: String,
        field: String,
        message: String,
    },
    #[error(
        "compute capability {major}.{minor} has no architecture table (known: {known}); \
         add one to model/src/device.rs (ARCH_TABLE) from NVIDIA's compute-capability tables"
    )]
    UnknownArch {
        major: u32,
        minor: u32,
        known: String,
    },
    #[error("driver attribute `{name}` = {value}: {message}")]
    Attribute {
        name: String,
        value: i64,
        message: String,
    },
}

/// The figures that differ between architectures. Facts from the CUDA C++ Programming
/// Guide's compute-capability tables and the occupancy calculator's architecture facts;
/// board figures (SM count, clocks, bus) from the named reference board; calibration
/// figures are estimates until a calibration replaces them (see [`Calibration`]).
struct ArchRow {
    cc: (u32, u32),
    board: &'static str,
    sm_count: u32,
    sm_clock_mhz: f64,
    memory_clock_mhz: f64,
    memory_bus_width_bits: u32,
    max_threads_per_sm: u32,
    max_blocks_per_sm: u32,
    smem_per_sm: u32,
    smem_per_block_optin: u32,
    smem_reserved_per_block: u32,
    smem_alloc_unit: u32,
    carveout_kib: &'static [u32],
    unified_l1_per_sm: u32,
    mem_latency_cycles: f64,
    l2_latency_cycles: f64,
}

const KIB: u32 = 1024;

const ARCH_TABLE: [ArchRow; 6] = [
    ArchRow {
        cc: (7, 0),
        board: "Tesla V100-SXM2",
        sm_count: 80,
        sm_clock_mhz: 1530.0,
        memory_clock_mhz: 877.0,
        memory_bus_width_bits: 4096,
        max_threads_per_sm: 2048,
        max_blocks_per_sm: 32,
        smem_per_sm: 96 * KIB,
        smem_per_block_optin: 96 * KIB,
        smem_reserved_per_block: 0,
        smem_alloc_unit: 256,
        carveout_kib: &[0, 8, 16, 32, 64, 96],
        unified_l1_per_sm: 128 * KIB,
        mem_latency_cycles: 440.0,
        l2_latency_cycles: 190.0,
    },
    ArchRow {
        cc: (7, 5),
        board: "Tesla T4",
        sm_count: 40,
        sm_clock_mhz: 1590.0,
        memory_clock_mhz: 5001.0,
        memory_bus_width_bits: 256,
        max_threads_per_sm: 1024,
        max_blocks_per_sm: 16,
        smem_per_sm: 64 * KIB,
        smem_per_block_optin: 64 * KIB,
        smem_reserved_per_block: 0,
        smem_alloc_unit: 256,
        carveout_kib: &[32, 64],
        unified_l1_per_sm: 96 * KIB,
        mem_latency_cycles: 530.0,
        l2_latency_cycles: 200.0,
    },
    ArchRow {
        cc: (8, 0),
        board: "A100-SXM4-40GB",
        sm_count: 108,
        sm_clock_mhz: 1410.0,
        memory_clock_mhz: 1215.0,
        memory_bus_width_bits: 5120,
        max_threads_per_sm: 2048,
        max_blocks_per_sm: 32,
        smem_per_sm: 164 * KIB,
        smem_per_block_optin: 163 * KIB,
        smem_reserved_per_block: KIB,
        smem_alloc_unit: 128,
        carveout_kib: &[0, 8, 16, 32, 64, 100, 132, 164],
        unified_l1_per_sm: 192 * KIB,
        mem_latency_cycles: 470.0,
        l2_latency_cycles: 200.0,
    },
    ArchRow {
        cc: (8, 6),
        board: "GeForce RTX 3090",
        sm_count: 82,
        sm_clock_mhz: 1695.0,
        memory_clock_mhz: 9751.0,
        memory_bus_width_bits: 384,
        max_threads_per_sm: 1536,
        max_blocks_per_sm: 16,
        smem_per_sm: 100 * KIB,
        smem_per_block_optin: 99 * KIB,
        smem_reserved_per_block: KIB,
        smem_alloc_unit: 128,
        carveout_kib: &[0, 8, 16, 32, 64, 100],
        unified_l1_per_sm: 128 * KIB,
        mem_latency_cycles: 470.0,
        l2_latency_cycles: 210.0,
    },
    ArchRow {
        cc: (8, 9),
        board: "GeForce RTX 4090",
        sm_count: 128,
        sm_clock_mhz: 2520.0,
        memory_clock_mhz: 10501.0,
        memory_bus_width_bits: 384,
        max_threads_per_sm: 1536,
        max_blocks_per_sm: 24,
        smem_per_sm: 100 * KIB,
        smem_per_block_optin: 99 * KIB,
        smem_reserved_per_block: KIB,
        smem_alloc_unit: 128,
        carveout_kib: &[0, 8, 16, 32, 64, 100],
        unified_l1_per_sm: 128 * KIB,
        mem_latency_cycles: 540.0,
        l2_latency_cycles: 270.0,
    },
    ArchRow {
        cc: (9, 0),
        board: "H100 SXM5",
        sm_count: 132,
        sm_clock_mhz: 1980.0,
        memory_clock_mhz: 2619.0,
        memory_bus_width_bits: 5120,
        max_threads_per_sm: 2048,
        max_blocks_per_sm: 32,
        smem_per_sm: 228 * KIB,
        smem_per_block_optin: 227 * KIB,
        smem_reserved_per_block: KIB,
        smem_alloc_unit: 128,
        carveout_kib: &[0, 8, 16, 32, 64, 100, 132, 164, 196, 228],
        unified_l1_per_sm: 256 * KIB,
        mem_latency_cycles: 480.0,
        l2_latency_cycles: 260.0,
    },
];

/// Fraction of the theoretical DRAM bandwidth a streaming kernel achieves; the default
/// `dram_bandwidth_gbs` until calibration measures it (HBM and GDDR parts reach 85–93 %).
const DRAM_EFFICIENCY: f64 = 0.9;

/// The compute capabilities with an architecture table.
pub fn known_archs() -> Vec<ComputeCapability> {
    ARCH_TABLE
        .iter()
        .map(|r| ComputeCapability {
            major: r.cc.0,
            minor: r.cc.1,
        })
        .collect()
}

fn known_list() -> String {
    known_archs()
        .iter()
        .map(|c| format!("sm_{}{}", c.major, c.minor))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Theoretical DRAM bandwidth (GB/s) of a double-data-rate bus.
fn peak_dram_gbs(memory_clock_mhz: f64, bus_bits: u32) -> f64 {
    2.0 * memory_clock_mhz * 1e6 * f64::from(bus_bits) / 8.0 / 1e9
}

/// How a driver attribute lands in a [`Device`].
struct AttrField {
    name: &'static str,
    /// Zero is a legitimate value (otherwise zero means "not reported").
    zero_ok: bool,
    set: fn(&mut Device, u32),
}

/// The driver attributes [`Device::from_attributes`] reads, as data.
const ATTRIBUTES: &[AttrField] = &[
    AttrField {
        name: "MultiProcessorCount",
        zero_ok: false,
        set: |d, v| d.sm_count = v,
    },
    AttrField {
        name: "ClockRate",
        zero_ok: false,
        set: |d, v| d.sm_clock_mhz = f64::from(v) / 1000.0,
    },
    AttrField {
        name: "MemoryClockRate",
        zero_ok: false,
        set: |d, v| d.memory_clock_mhz = f64::from(v) / 1000.0,
    },
    AttrField {
        name: "GlobalMemoryBusWidth",
        zero_ok: false,
        set: |d, v| d.memory_bus_width_bits = v,
    },
    AttrField {
        name: "WarpSize",
        zero_ok: false,
        set: |d, v| d.warp_size = v,
    },
    AttrField {
        name: "MaxThreadsPerBlock",
        zero_ok: false,
        set: |d, v| d.max_threads_per_block = v,
    },
    AttrField {
        name: "MaxThreadsPerMultiProcessor",
        zero_ok: false,
        set: |d, v| d.max_threads_per_sm = v,
    },
    AttrField {
        name: "MaxBlocksPerMultiprocessor",
        zero_ok: false,
        set: |d, v| d.max_blocks_per_sm = v,
    },
    AttrField {
        name: "MaxRegistersPerMultiprocessor",
        zero_ok: false,
        set: |d, v| d.registers.per_sm = v,
    },
    AttrField {
        name: "MaxRegistersPerBlock",
        zero_ok: false,
        set: |d, v| d.registers.per_block = v,
    },
    AttrField {
        name: "MaxSharedMemoryPerMultiprocessor",
        zero_ok: false,
        set: |d, v| d.shared_memory.per_sm = v,
    },
    AttrField {
        name: "MaxSharedMemoryPerBlock",
        zero_ok: false,
        set: |d, v| d.shared_memory.per_block = v,
    },
    AttrField {
        name: "MaxSharedMemoryPerBlockOptin",
        zero_ok: false,
        set: |d, v| d.shared_memory.per_block_optin = v,
    },
    AttrField {
        name: "ReservedSharedMemoryPerBlock",
        zero_ok: true,
        set: |d, v| d.shared_memory.reserved_per_block = v,
    },
    AttrField {
        name: "MaxBlockDimX",
        zero_ok: false,
        set: |d, v| d.max_block_dim[0] = v,
    },
    AttrField {
        name: "MaxBlockDimY",
        zero_ok: false,
        set: |d, v| d.max_block_dim[1] = v,
    },
    AttrField {
        name: "MaxBlockDimZ",
        zero_ok: false,
        set: |d, v| d.max_block_dim[2] = v,
    },
    AttrField {
        name: "MaxGridDimX",
        zero_ok: false,
        set: |d, v| d.max_grid_dim[0] = v,
    },
    AttrField {
        name: "MaxGridDimY",
        zero_ok: false,
        set: |d, v| d.max_grid_dim[1] = v,
    },
    AttrField {
        name: "MaxGridDimZ",
        zero_ok: false,
        set: |d, v| d.max_grid_dim[2] = v,
    },
];

impl Device {
    /// Whether block `b` is within the device's limits (threads per block, each dimension).
    pub fn within_limits(&self, b: [u32; 3]) -> bool {
        b[0] <= self.max_block_dim[0]
            && b[1] <= self.max_block_dim[1]
            && b[2] <= self.max_block_dim[2]
            && u64::from(b[0]) * u64::from(b[1]) * u64::from(b[2])
                <= u64::from(self.max_threads_per_block)
    }

    /// The architecture table's description of compute capability `major.minor`, with the
    /// reference board's SM count and clocks.
    pub fn for_arch(major: u32, minor: u32) -> Result<Device, DeviceError> {
        let row = ARCH_TABLE
            .iter()
            .find(|r| r.cc == (major, minor))
            .ok_or_else(|| DeviceError::UnknownArch {
                major,
                minor,
                known: known_list(),
            })?;
        Ok(Device::from_row(row))
    }

    /// [`SharedMemory::unified_per_sm`], or the architecture table's where the description
    /// has none (0 for an architecture the table does not know).
    pub fn l1_unified_per_sm(&self) -> u32 {
        if self.shared_memory.unified_per_sm > 0 {
            return self.shared_memory.unified_per_sm;
        }
        let cc = (self.compute_capability.major, self.compute_capability.minor);
        ARCH_TABLE
            .iter()
            .find(|r| r.cc == cc)
            .map_or(0, |r| r.unified_l1_per_sm)
    }

    fn from_row(r: &ArchRow) -> Device {
        Device {
            name: format!("sm_{}{} ({} reference)", r.cc.0, r.cc.1, r.board),
            uuid: String::new(),
            note: format!(
                "architecture table for sm_{}{}; SM count and clocks of a {}; calibration \
                 figures are estimates",
                r.cc.0, r.cc.1, r.board
            ),
            compute_capability: ComputeCapability {
                major: r.cc.0,
                minor: r.cc.1,
            },
            limits_source: Source::ArchTable,
            from_table: Vec::new(),
            sm_count: r.sm_count,
            sm_clock_mhz: r.sm_clock_mhz,
            memory_clock_mhz: r.memory_clock_mhz,
            memory_bus_width_bits: r.memory_bus_width_bits,
            warp_size: 32,
            sub_partitions: 4,
            max_threads_per_block: 1024,
            max_threads_per_sm: r.max_threads_per_sm,
            max_blocks_per_sm: r.max_blocks_per_sm,
            max_block_dim: [1024, 1024, 64],
            max_grid_dim: [i32::MAX as u32, 65535, 65535],
            registers: Registers {
                per_sm: 64 * KIB,
                per_block: 64 * KIB,
                max_per_thread: 255,
                alloc_unit: 256,
                alloc_granularity: RegisterGranularity::Warp,
            },
            shared_memory: SharedMemory {
                per_sm: r.smem_per_sm,
                per_block: 48 * KIB,
                per_block_optin: r.smem_per_block_optin,
                reserved_per_block: r.smem_reserved_per_block,
                alloc_unit: r.smem_alloc_unit,
                carveout_kib: r.carveout_kib.to_vec(),
                unified_per_sm: r.unified_l1_per_sm,
            },
            calibration: Calibration {
                mem_latency_cycles: Figure::table(r.mem_latency_cycles),
                l2_latency_cycles: Figure::table(r.l2_latency_cycles),
                l1_latency_cycles: default_l1_latency(),
                // The L1TEX unit moves about one 32-byte sector per cycle: a coalesced
                // request (4 sectors) departs in about 4 cycles, a diverged one in about
                // 1 cycle per sector.
                departure_delay_coalesced_cycles: Figure::table(4.0),
                departure_delay_coalesced_dram_cycles: unmeasured(),
                departure_delay_uncoalesced_cycles: Figure::table(1.0),
                dram_bandwidth_gbs: Figure::table(
                    DRAM_EFFICIENCY * peak_dram_gbs(r.memory_clock_mhz, r.memory_bus_width_bits),
                ),
                // One warp instruction per scheduler per cycle (dispatch limit).
                issue_cycles: Figure::table(1.0),
                // One conflict-free shared-memory warp access per SM per cycle, shared by
                // the four sub-partitions.
                shared_issue_cycles: Figure::table(4.0),
                block_dispatch_cycles: default_block_dispatch(),
                warp_drain_cycles: unmeasured(),
                dram_queue_exponent: default_dram_queue(),
            },
        }
    }

    /// A description from the driver's attributes (names of `cudaDeviceAttr` without the
    /// `cudaDevAttr` prefix, e.g. `MultiProcessorCount`, `ClockRate` in kHz). The compute
    /// capability (`ComputeCapabilityMajor`/`Minor`) picks the architecture table; every
    /// other attribute the driver reports replaces the table's figure, and those it does not
    /// report are listed in [`Device::from_table`]. Unknown names are ignored. The DRAM
    /// bandwidth becomes 90 % of the theoretical bandwidth of the reported memory clock and
    /// bus width (source `driver`) until calibration measures it.
    pub fn from_attributes(attrs: &BTreeMap<String, i64>) -> Result<Device, DeviceError> {
        let get_cc = |name: &str| -> Result<u32, DeviceError> {
            let v = *attrs.get(name).ok_or_else(|| DeviceError::Attribute {
                name: name.to_string(),
                value: 0,
                message: "missing: the compute capability picks the architecture table".into(),
            })?;
            u32::try_from(v).map_err(|_| DeviceError::Attribute {
                name: name.to_string(),
                value: v,
                message: "not a compute capability".into(),
            })
        };
        let major = get_cc("ComputeCapabilityMajor")?;
        let minor = get_cc("ComputeCapabilityMinor")?;
        let mut dev = Device::for_arch(major, minor)?;
        dev.name = format!("sm_{major}{minor} device");
        dev.note = format!(
            "driver attributes over the sm_{major}{minor} architecture table; calibration \
             figures are estimates until calibrated"
        );
        dev.limits_source = Source::Driver;
        dev.from_table.clear();
        for field in ATTRIBUTES {
            match attrs.get(field.name) {
                None => dev.from_table.push(field.name.to_string()),
                Some(&v) => {
                    let value = u32::try_from(v).map_err(|_| DeviceError::Attribute {
                        name: field.name.to_string(),
                        value: v,
                        message: "out of range (expected 0 ..= 4294967295)".into(),
                    })?;
                    if value == 0 && !field.zero_ok {
                        dev.from_table.push(field.name.to_string());
                    } else {
                        (field.set)(&mut dev, value);
                    }
                }
            }
        }
        let has = |n: &str| !dev.from_table.iter().any(|t| t == n);
        if has("MemoryClockRate") && has("GlobalMemoryBusWidth") {
            dev.calibration.dram_bandwidth_gbs = Figure {
                value: DRAM_EFFICIENCY
                    * peak_dram_gbs(dev.memory_clock_mhz, dev.memory_bus_width_bits),
                source: Source::Driver,
            };
        }
        dev.validate("driver attributes")?;
        Ok(dev)
    }

    /// Sets the name and UUID (the attributes do not carry them).
    pub fn with_identity(mut self, name: &str, uuid: &str) -> Device {
        self.name = name.to_string();
        self.uuid = uuid.to_string();
        self
    }

    /// Replaces the calibration figures that `m` has (source `calibration`).
    pub fn with_calibration(mut self, m: &Measured) -> Result<Device, DeviceError> {
        let c = &mut self.calibration;
        let pairs: [(&mut Figure, Option<f64>); 11] = [
            (&mut c.mem_latency_cycles, m.mem_latency_cycles),
            (&mut c.l2_latency_cycles, m.l2_latency_cycles),
            (&mut c.l1_latency_cycles, m.l1_latency_cycles),
            (
                &mut c.departure_delay_coalesced_cycles,
                m.departure_delay_coalesced_cycles,
            ),
            (
                &mut c.departure_delay_coalesced_dram_cycles,
                m.departure_delay_coalesced_dram_cycles,
            ),
            (
                &mut c.departure_delay_uncoalesced_cycles,
                m.departure_delay_uncoalesced_cycles,
            ),
            (&mut c.dram_bandwidth_gbs, m.dram_bandwidth_gbs),
            (&mut c.issue_cycles, m.issue_cycles),
            (&mut c.shared_issue_cycles, m.shared_issue_cycles),
            (&mut c.block_dispatch_cycles, m.block_dispatch_cycles),
            (&mut c.warp_drain_cycles, m.warp_drain_cycles),
        ];
        for (fig, v) in pairs {
            if let Some(value) = v {
                *fig = Figure {
                    value,
                    source: Source::Calibration,
                };
            }
        }
        self.validate("calibration")?;
        Ok(self)
    }

    /// Theoretical DRAM bandwidth (GB/s) from the memory clock and bus width.
    pub fn peak_dram_bandwidth_gbs(&self) -> f64 {
        peak_dram_gbs(self.memory_clock_mhz, self.memory_bus_width_bits)
    }

    /// Parses a TOML description; `origin` names it in errors (a path, usually).
    pub fn from_toml_str(text: &str, origin: &str) -> Result<Device, DeviceError> {
        let dev: Device = toml::from_str(text).map_err(|e| DeviceError::Parse {
            origin: origin.to_string(),
            message: e.to_string(),
        })?;
        dev.validate(origin)?;
        Ok(dev)
    }

    /// Reads and checks a TOML description.
    pub fn load(path: &Path) -> Result<Device, DeviceError> {
        let text = std::fs::read_to_string(path).map_err(|error| DeviceError::Io {
            path: path.to_path_buf(),
            error,
        })?;
        Device::from_toml_str(&text, &path.display().to_string())
    }

    /// The TOML description, with a comment header saying what the file is.
    pub fn to_toml_string(&self) -> String {
        let body = toml::to_string(self).expect("a Device always serializes to TOML");
        format!(
            "# klaraptor device description (model/src/device.rs documents every field).\n\
             # {}\n\n{body}",
            self.note
        )
    }

    /// Checks every figure the model divides by or relies on; the error names the field.
    pub fn validate(&self, origin: &str) -> Result<(), DeviceError> {
        let bad = |field: &str, message: String| DeviceError::Invalid {
            origin: origin.to_string(),
            field: field.to_string(),
            message,
        };
        let text = [
            ("name", text::device_name(&self.name)),
            ("uuid", text::device_uuid(&self.uuid)),
            ("note", text::note(&self.note)),
        ];
        for (field, why) in text {
            if let Some(why) = why {
                return Err(bad(field, why));
            }
        }
        for a in &self.from_table {
            if !crate::c_text::is_identifier(a) {
                return Err(bad(
                    "from_table",
                    format!("{a:?} is not an attribute name (an identifier)"),
                ));
            }
        }
        let positive: [(&str, u32); 16] = [
            ("sm_count", self.sm_count),
            ("memory_bus_width_bits", self.memory_bus_width_bits),
            ("sub_partitions", self.sub_partitions),
            ("max_threads_per_block", self.max_threads_per_block),
            ("max_threads_per_sm", self.max_threads_per_sm),
            ("max_blocks_per_sm", self.max_blocks_per_sm),
            ("max_block_dim[0]", self.max_block_dim[0]),
            ("max_block_dim[1]", self.max_block_dim[1]),
            ("max_block_dim[2]", self.max_block_dim[2]),
            ("max_grid_dim[0]", self.max_grid_dim[0]),
            ("registers.per_sm", self.registers.per_sm),
            ("registers.per_block", self.registers.per_block),
            ("registers.max_per_thread", self.registers.max_per_thread),
            ("registers.alloc_unit", self.registers.alloc_unit),
            ("shared_memory.per_sm", self.shared_memory.per_sm),
            ("shared_memory.alloc_unit", self.shared_memory.alloc_unit),
        ];
        for (field, v) in positive {
            if v == 0 {
                return Err(bad(field, "must be positive".into()));
            }
        }
        if self.max_grid_dim[1] == 0 || self.max_grid_dim[2] == 0 {
            return Err(bad("max_grid_dim", "must be positive".into()));
        }
        if self.warp_size != 32 {
            return Err(bad(
                "warp_size",
                format!(
                    "is {}; the model assumes 32-thread warps (32-byte sectors, 4 per \
                     coalesced request)",
                    self.warp_size
                ),
            ));
        }
        if (self.registers.per_sm / self.sub_partitions) * self.sub_partitions
            != self.registers.per_sm
        {
            return Err(bad(
                "registers.per_sm",
                format!(
                    "{} registers do not split evenly over {} sub-partitions",
                    self.registers.per_sm, self.sub_partitions
                ),
            ));
        }
        let smem = &self.shared_memory;
        if smem.carveout_kib.is_empty() || smem.carveout_kib.windows(2).any(|w| w[0] >= w[1]) {
            return Err(bad(
                "shared_memory.carveout_kib",
                "must list the carveouts in strictly ascending order".into(),
            ));
        }
        if smem.carveout_kib.len() > crate::occupancy::MAX_CARVEOUTS {
            return Err(bad(
                "shared_memory.carveout_kib",
                format!("at most {} carveouts", crate::occupancy::MAX_CARVEOUTS),
            ));
        }
        let largest = u64::from(*smem.carveout_kib.last().unwrap_or(&0)) * 1024;
        if u64::from(smem.per_sm) > largest {
            return Err(bad(
                "shared_memory.per_sm",
                format!(
                    "{} bytes exceed the largest carveout ({largest} bytes)",
                    smem.per_sm
                ),
            ));
        }
        if u64::from(smem.per_block_optin) + u64::from(smem.reserved_per_block)
            > u64::from(smem.per_sm)
        {
            return Err(bad(
                "shared_memory.per_block_optin",
                "plus reserved_per_block exceeds per_sm".into(),
            ));
        }
        let positive_f: [(&str, f64); 2] = [
            ("sm_clock_mhz", self.sm_clock_mhz),
            ("memory_clock_mhz", self.memory_clock_mhz),
        ];
        let c = &self.calibration;
        let figures: [(&str, &Figure); 9] = [
            ("calibration.mem_latency_cycles", &c.mem_latency_cycles),
            ("calibration.l2_latency_cycles", &c.l2_latency_cycles),
            ("calibration.l1_latency_cycles", &c.l1_latency_cycles),
            (
                "calibration.departure_delay_coalesced_cycles",
                &c.departure_delay_coalesced_cycles,
            ),
            (
                "calibration.departure_delay_uncoalesced_cycles",
                &c.departure_delay_uncoalesced_cycles,
            ),
            ("calibration.dram_bandwidth_gbs", &c.dram_bandwidth_gbs),
            ("calibration.issue_cycles", &c.issue_cycles),
            ("calibration.shared_issue_cycles", &c.shared_issue_cycles),
            (
                "calibration.block_dispatch_cycles",
                &c.block_dispatch_cycles,
            ),
        ];
        let all = positive_f
            .into_iter()
            .chain(figures.into_iter().map(|(n, f)| (n, f.value)));
        for (field, v) in all {
            if !(v.is_finite() && v > 0.0) {
                return Err(bad(field, format!("is {v}; must be a positive number")));
            }
        }
        let non_negative: [(&str, f64); 3] = [
            ("calibration.warp_drain_cycles", c.warp_drain_cycles.value),
            (
                "calibration.dram_queue_exponent",
                c.dram_queue_exponent.value,
            ),
            (
                "calibration.departure_delay_coalesced_dram_cycles",
                c.departure_delay_coalesced_dram_cycles.value,
            ),
        ];
        for (field, v) in non_negative {
            if !(v.is_finite() && v >= 0.0) {
                return Err(bad(field, format!("is {v}; must be a number ≥ 0")));
            }
        }
        Ok(())
    }
}

/// The formats of the text a device description, a calibration report and a profile entry
/// hold about a device: each function says why a value is not of its format (`None`: it is).
/// The text reaches generated C, file names and terminals; descriptions and reports are files
/// klaraptor does not trust, so anything else is refused.
pub mod text {
    /// A device's name as the driver reports it (`NVIDIA H100 80GB HBM3`): ASCII letters,
    /// digits, spaces and `._()+-`, at most 96 characters.
    pub fn device_name(s: &str) -> Option<String> {
        if s.trim().is_empty() || s.len() > 96 {
            return Some("is not a device name (1 to 96 characters)".into());
        }
        s.chars()
            .find(|&c| {
                !(c.is_ascii_alphanumeric() || matches!(c, ' ' | '.' | '_' | '(' | ')' | '+' | '-'))
            })
            .map(|c| {
                format!("contains {c:?}; a device name holds ASCII letters, digits, spaces and `._()+-`")
            })
    }

    /// A device's UUID as the driver prints it (`GPU-` or `MIG-`, then hex digits and `-`),
    /// or empty where unknown.
    pub fn device_uuid(s: &str) -> Option<String> {
        let ok = s.is_empty()
            || ((s.starts_with("GPU-") || s.starts_with("MIG-"))
                && s.len() <= 80
                && s[4..].chars().all(|c| c.is_ascii_hexdigit() || c == '-'));
        (!ok).then(|| "is not a device UUID (`GPU-` and hex digits, or empty)".to_string())
    }

    /// A compute capability, `major.minor` (`9.0`).
    pub fn compute_capability(s: &str) -> Option<String> {
        let ok = s.split_once('.').is_some_and(|(a, b)| {
            (1..=2).contains(&a.len())
                && (1..=2).contains(&b.len())
                && a.bytes().chain(b.bytes()).all(|c| c.is_ascii_digit())
        });
        (!ok).then(|| "is not a compute capability (`major.minor`, e.g. 9.0)".to_string())
    }

    /// A description's note for people: one line of printable text.
    pub fn note(s: &str) -> Option<String> {
        s.chars()
            .find(|c| c.is_control())
            .map(|c| format!("contains the control character {c:?}; a note is one line"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A missing file is said once, also where the error's chain is printed (anyhow's `{:#}`).
    #[test]
    fn a_missing_description_says_its_io_error_once() {
        let e = Device::load(Path::new("/nonexistent/dev.toml")).unwrap_err();
        let mut chain = e.to_string();
        let mut next = std::error::Error::source(&e);
        while let Some(c) = next {
            chain.push_str(&format!(": {c}"));
            next = c.source();
        }
        assert_eq!(chain.matches("os error 2").count(), 1, "{chain}");
        assert!(
            chain.starts_with("/nonexistent/dev.toml: cannot read"),
            "{chain}"
        );
    }

    #[test]
    fn every_table_row_is_valid_and_round_trips_through_toml() {
        for cc in known_archs() {
            let dev = Device::for_arch(cc.major, cc.minor).unwrap();
            dev.validate("table").unwrap();
            let text = dev.to_toml_string();
            let back = Device::from_toml_str(&text, "round trip").unwrap();
            assert_eq!(back, dev, "{text}");
        }
    }

    #[test]
    fn sm90_table_has_the_documented_limits() {
        let d = Device::for_arch(9, 0).unwrap();
        assert_eq!(d.max_threads_per_sm / d.warp_size, 64);
        assert_eq!(d.max_blocks_per_sm, 32);
        assert_eq!(d.shared_memory.per_sm, 233_472);
        assert_eq!(d.shared_memory.per_block_optin, 232_448);
        assert_eq!(d.shared_memory.reserved_per_block, 1024);
        // H100 SXM5: 2619 MHz × 5120 bits, double data rate = 3352 GB/s.
        assert!((d.peak_dram_bandwidth_gbs() - 3352.32).abs() < 0.01);
        assert_eq!(
            (
                Device::for_arch(8, 6).unwrap().max_blocks_per_sm,
                Device::for_arch(8, 9).unwrap().max_blocks_per_sm,
                Device::for_arch(7, 5).unwrap().max_threads_per_sm
            ),
            (16, 24, 1024)
        );
    }

    #[test]
    fn unknown_arch_names_the_known_ones() {
        let e = Device::for_arch(10, 0).unwrap_err().to_string();
        assert!(
            e.contains("10.0") && e.contains("sm_90") && e.contains("sm_70"),
            "{e}"
        );
    }

    fn h200_attrs() -> BTreeMap<String, i64> {
        [
            ("ComputeCapabilityMajor", 9),
            ("ComputeCapabilityMinor", 0),
            ("MultiProcessorCount", 132),
            ("ClockRate", 1_980_000),
            ("MemoryClockRate", 3_201_000),
            ("GlobalMemoryBusWidth", 6144),
            ("ReservedSharedMemoryPerBlock", 1024),
            ("L2CacheSize", 52_428_800),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }

    #[test]
    fn attributes_override_the_table_and_missing_ones_are_listed() {
        let dev = Device::from_attributes(&h200_attrs()).unwrap();
        assert_eq!(dev.limits_source, Source::Driver);
        assert_eq!(dev.sm_clock_mhz, 1980.0);
        assert_eq!(dev.memory_clock_mhz, 3201.0);
        assert_eq!(dev.memory_bus_width_bits, 6144);
        assert_eq!(dev.calibration.dram_bandwidth_gbs.source, Source::Driver);
        let peak = 2.0 * 3201e6 * 768.0 / 1e9;
        assert!((dev.calibration.dram_bandwidth_gbs.value - 0.9 * peak).abs() < 1e-9);
        assert!(dev.from_table.contains(&"MaxThreadsPerBlock".to_string()));
        assert!(!dev.from_table.contains(&"ClockRate".to_string()));
        // The table's limits stand where the driver was silent.
        assert_eq!(dev.shared_memory.per_sm, 233_472);
    }

    #[test]
    fn zero_clock_counts_as_not_reported_but_zero_reserved_is_a_value() {
        let mut a = h200_attrs();
        a.insert("ClockRate".into(), 0);
        a.insert("ReservedSharedMemoryPerBlock".into(), 0);
        let dev = Device::from_attributes(&a).unwrap();
        assert_eq!(dev.sm_clock_mhz, 1980.0);
        assert!(dev.from_table.contains(&"ClockRate".to_string()));
        assert_eq!(dev.shared_memory.reserved_per_block, 0);
    }

    #[test]
    fn bad_attributes_are_refused_with_their_name() {
        let mut a = h200_attrs();
        a.insert("MultiProcessorCount".into(), -3);
        let e = Device::from_attributes(&a).unwrap_err().to_string();
        assert!(e.contains("MultiProcessorCount") && e.contains("-3"), "{e}");
        let mut a = h200_attrs();
        a.remove("ComputeCapabilityMajor");
        let e = Device::from_attributes(&a).unwrap_err().to_string();
        assert!(e.contains("ComputeCapabilityMajor"), "{e}");
        let mut a = h200_attrs();
        a.insert("WarpSize".into(), 64);
        let e = Device::from_attributes(&a).unwrap_err().to_string();
        assert!(e.contains("warp_size"), "{e}");
    }

    #[test]
    fn calibration_replaces_figures_and_marks_them() {
        let m = Measured {
            mem_latency_cycles: Some(612.5),
            issue_cycles: Some(1.25),
            ..Measured::default()
        };
        let dev = Device::for_arch(9, 0)
            .unwrap()
            .with_calibration(&m)
            .unwrap();
        let c = &dev.calibration;
        assert_eq!(c.mem_latency_cycles.value, 612.5);
        assert_eq!(c.mem_latency_cycles.source, Source::Calibration);
        assert_eq!(c.issue_cycles.source, Source::Calibration);
        assert_eq!(c.l2_latency_cycles.source, Source::ArchTable);
        let bad = Measured {
            dram_bandwidth_gbs: Some(-1.0),
            ..Measured::default()
        };
        let e = Device::for_arch(9, 0)
            .unwrap()
            .with_calibration(&bad)
            .unwrap_err()
            .to_string();
        assert!(e.contains("calibration.dram_bandwidth_gbs"), "{e}");
    }

    #[test]
    fn calibration_tool_table_deserializes_into_measured() {
        let text = "mem_latency_cycles = 700.0\nmem_latency_cycles_spread = 3.0\n\
                    dram_bandwidth_gbs = 4100.0\n[methods]\nmem_latency_cycles = \"chase\"\n";
        let m: Measured = toml::from_str(text).unwrap();
        assert_eq!(m.mem_latency_cycles, Some(700.0));
        assert_eq!(m.dram_bandwidth_gbs, Some(4100.0));
        assert_eq!(m.issue_cycles, None);
    }

    #[test]
    fn parse_errors_name_the_file_and_position() {
        let e = Device::from_toml_str("name = \"x\"\nsm_count = \"many\"\n", "dev.toml")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("dev.toml:") && e.contains("line 2"), "{e}");
        let mut dev = Device::for_arch(8, 0).unwrap();
        dev.shared_memory.carveout_kib = vec![0, 64, 32];
        let text = dev.to_toml_string();
        let e = Device::from_toml_str(&text, "a100.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("a100.toml") && e.contains("carveout_kib"), "{e}");
    }
}
