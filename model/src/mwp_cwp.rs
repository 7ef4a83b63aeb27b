//! The MWP-CWP performance model (Hong & Kim, ISCA 2009; Sim et al., PPoPP 2012), with the
//! project's corrections. Every equation below names its source: **\[HK\]** the original
//! model, **\[D\]** a correction the project's design made to it from the start, **\[K\]**
//! a later change of ours, with the reason. The computation is `kl_predict` of the C model
//! (`c/kl_model.c`), written once: [`predict`] calls it, and every rational program runs it.
//! It costs a few hundred nanoseconds: no loop runs over blocks or warps.
//!
//! # Inputs
//!
//! Per launch ([`Launch`]): the block and grid, registers per thread and shared memory per
//! block (static + dynamic). Per warp ([`WarpMetrics`], averaged over the warps of the grid,
//! fitted by the lead from hardware counters): warp instructions, global load/store and
//! shared instructions, barriers, L1TEX sectors per global load/store request, the share of
//! load sectors L1 served, DRAM bytes.
//!
//! # Coalescing (Uncoal_per_mw) \[K\]
//!
//! Hong & Kim class each memory instruction as coalesced (one memory transaction) or
//! uncoalesced (`Uncoal_per_mw` transactions, each departing `Departure_del_uncoal` after the
//! previous). What departs one at a time is a 128-byte line (one L1 tag look-up, one L2
//! request): on the H200 a request of 4 sectors in one line departs every 1.1 cycles, one of
//! 32 sectors in 32 lines every 32 cycles (calibration). The counters give the mean sectors
//! per request `s`; the lines it touches follow from the box of threads a warp covers (its
//! footprint, [`WarpRows`]): `rows = wy·wz` rows of `wx` threads, each row's 4-byte elements
//! filling `r = min(4, ceil(wx/8))` sectors of one line. A request whose sectors fit those
//! rows (`s ≤ rows·r`) touches `max(1, s/r)` lines when each row is contiguous along x and
//! `max(1, min(s, rows))` when each row reads one broadcast sector (a matrix product's
//! `A[i][k]`); the counters cannot tell the two apart, and `L` is their mean: 4 sectors of
//! a 32-wide warp are one line, 4 sectors of an 8 × 4 warp are 4 lines (on the H200 8x128
//! blocks make jacobi2d's copy 1.5 times slower than 32x8 ones), 2 sectors of a 16 × 2 warp
//! 1.5 lines (16-wide blocks make 2mm's product 1.35 times slower than 32-wide ones, where
//! `L = s/r = 1` had them equal); from `2·rows·r` sectors on the lanes are spread and
//! `L = s`; linear in between (for 32-wide warps: 1 up to 4 sectors, `s` from 8). A
//! request is then `Uncoal_per_mw = L` transactions, with
//! `Mem_L_kind = Mem_LD + (L − 1)·Departure_del_uncoal` and
//! `Departure_kind = Departure_del_coal + (L − 1)·Departure_del_uncoal`
//! (`= Departure_del_coal` when coalesced), per kind (loads, stores). `Mem_cycles =
//! gld·Mem_L_ld + gst·Mem_L_st`; `Mem_L` and `Departure` are their means over the memory
//! instructions. This replaces our earlier reading of `s` as a mixture of fully coalesced and
//! fully diverged requests, which charged a warp of 4 columns × 8 rows a seventh of a
//! diverged request where it costs 8 lines: on the H200 such blocks make jacobi2d's copy 60 %
//! slower than 32-wide ones, and the mixture predicted them 1 % slower.
//!
//! # Caches \[K\]
//!
//! The original charges every memory instruction the DRAM latency. A request waits for its
//! slowest line, so it waits for DRAM when the bytes it needs come from DRAM, however many
//! of its sectors the L2 serves; and requests of neighbouring warps for the same sector
//! wait for the same fetch. The bytes a request needs are `min(32·s, 4·lanes)`: its sectors,
//! but no more than its active lanes use at 4 bytes each ([`ELEMENT_BYTES`]; a row-spread
//! request fetches whole sectors and uses part of each, its neighbours use the rest; a
//! one-thread warp uses 4 bytes of its sector). So `h = min(1, dram_bytes / Σ needed)` over
//! the warp's requests, and `Mem_LD = h·mem_latency + (1 − h)·l2_latency`: only requests
//! for data that a warp already brought in earlier count as L2 hits.
//!
//! Loads may also hit the SM's L1: the counters give the share `h1` of load sectors the L1
//! served (`gld_l1_hit_rate`, clamped to [0, 1]). Those take `l1_latency`; the rest of the
//! loads and every store (the L1 writes through) go on to L2 as above, and `h` becomes the
//! DRAM bytes over what reaches L2: `Σ needed` counts `(1 − h1)` of the loads' bytes. So
//! `Mem_LD_ld = h1·l1_latency + (1 − h1)·Mem_LD` (one request at a time; for several in
//! flight see below), `Mem_LD_st = Mem_LD`. A warp re-reading
//! a row or a tile (PolyBench's correlation matrix, the matrix products) is served from L1
//! at a few tens of cycles, not the L2's 250; how much of that reuse survives depends on
//! the block (the warps an SM holds share its L1), and the fitted hit rate follows it
//! (on the H200 the correlation matrix at 256 × 256 keeps 99 % hits with 64-thread blocks
//! and 63 % with 256-thread ones, and runs 2.6 times longer). The bandwidth limit
//! uses the DRAM bytes a memory instruction really moves, `Load_bytes_per_warp =
//! dram_bytes / Mem_insts`.
//!
//! # The L1's capacity \[K\]
//!
//! The fitted hit rate is held at the largest profiled sizes (the rational program holds
//! shares there), where a block's data was small. A loop kernel whose hits are re-reads of its
//! block's own share in a later pass of its loop (`l1_reuse_loop` = 1: one block per row
//! reading its row three times) keeps them only while the shares of the blocks resident on an
//! SM fit in the L1 together. The L1 is what the resident blocks' shared memory leaves of the
//! SM's unified L1 and shared memory (`Device::l1_unified_per_sm`, 256 KiB on sm_90); a
//! block's share is what its warps load that the L1 did not serve, each sector once,
//! `(1 − h1)·gld·sectors·32·warps per block`. Past the capacity, `h1` falls in proportion to
//! the part of the resident shares the L1 holds (softmax over rows of 80 KB: four blocks of
//! 512 threads hold 320 KB, two of 1024 hold 160 KB, and the H200 sweep timed 1024 threads
//! 1.37 times faster). Hits from neighbouring requests (`l1_reuse_loop` = 0, every kernel
//! whose threads follow its data) reuse within a short distance and are left as fitted.
//!
//! # Requests in flight together (memory-level parallelism) \[K\]
//!
//! Hong & Kim let a warp wait for each memory request before the next (one memory period
//! per request). A warp running an unrolled loop issues several independent loads before
//! the first returns; alone on its scheduler it then finishes many times sooner than the
//! model says (PolyBench's correlation matrix on the H200: 12 times). `mlp = g` requests in
//! flight together are taken as one request of `g` transactions: `Mem_insts / g` memory
//! periods, each of `Mem_L + (g − 1)·Departure_delay` cycles, departing in `g·Departure_delay`;
//! `g` is capped by the warp's requests, and 1 is the original model. The kernel's `g` is not
//! counted by the hardware: the rational program fits it on the profile's measured times.
//!
//! A group waits for its slowest request, so its loads wait only the L1's latency when all
//! `g` of them hit: with independent hits at rate `h1`, `h1^g` of the groups, and
//! `Mem_LD_ld = h1^g·l1_latency + (1 − h1^g)·Mem_LD` (for `g = 1` the mean above). A
//! matrix-vector kernel whose threads each walk a row hits 7 loads in 8 (each sector
//! serves 8 floats); unrolled by 8, each group holds the miss and waits for memory, where
//! the mean latency (113 cycles, against 640) made a warp of 32 rows look as fast as many
//! narrow warps, and the model chose 32-thread blocks for `mvt` at 10000 (0.70 of the
//! optimum, 4 threads).
//!
//! # Loads that wait for DRAM depart more slowly \[K\]
//!
//! `Departure_del_coal` is measured with lines the L2 holds. A load whose line must come
//! from DRAM holds its miss-handling resources longer: one SM streaming fresh lines departs a
//! coalesced request every `departure_delay_coalesced_dram_cycles` (2.47 on the H200, against
//! 1.1). A load passes two stages in turn, the L1 (every request) and, for the share
//! `1 − h1` that misses, the way to L2 and DRAM (`h·dep_dram + (1 − h)·dep_coal` per
//! request); the slower stage sets the pace:
//! `Departure_ld = max(dep_coal, (1 − h1)·(h·dep_dram + (1 − h)·dep_coal))`. Stores are
//! absorbed by the L2 (write-back) and keep `dep_coal`. This is what makes one-thread blocks
//! slow on a column walk: 23 one-lane warps per SM each stream their own DRAM sectors
//! (PolyBench's column means and deviations at 3001 × 1500 run 1.4 times longer with
//! 1-thread blocks than with 32-thread ones, where the L1 pace alone predicted them equal),
//! while a row walk that hits L1 seven times in eight keeps the L1's pace.
//!
//! # Sub-partitions \[K\]
//!
//! Hong & Kim's SM issues one warp instruction at a time. Since sm_70 an SM has
//! `sub_partitions` (4) warp schedulers, each issuing for its own warps, and one memory
//! pipeline. We apply the model to one scheduler: of `N_sm` resident warps the busiest
//! scheduler holds `N = ceil(N_sm / P)`, and `P_act = min(P, N_sm)` schedulers share the
//! SM's memory pipeline, so a scheduler sees `P_act` times the SM's departure delay and
//! `1 / P_act` of the SM's bandwidth share. With `P = 1` this is the original model.
//!
//! # Per-warp costs
//!
//! - `Mem_L`, `Departure_delay` and `Mem_cycles` per kind of request as above (\[HK\]'s
//!   equations with `Uncoal_per_mw` measured per request instead of one weighted mixture).
//! - `Comp_cycles = issue_cycles·(inst − shared_inst) + shared_issue_cycles·shared_inst`:
//!   every instruction, memory ones included, takes an issue slot \[HK\]; shared-memory
//!   instructions count as compute at their own cost \[D\].
//!
//! # One wave (a set of blocks resident together) with `N` warps per scheduler
//!
//! - `MWP_Without_BW = Mem_L / (Departure_delay·P_act)` \[HK + sub-partitions\].
//! - `BW_per_warp = Freq·Load_bytes_per_warp / Mem_L` (GB/s with Freq in GHz) \[HK\];
//!   `MWP_peak_BW = Mem_Bandwidth / (BW_per_warp·SMs_active·P_act)`, where `SMs_active`
//!   counts only the SMs that hold a block of this wave \[D: fewer blocks than SMs\].
//! - `MWP = min(MWP_Without_BW, MWP_peak_BW, N)`; `CWP = min((Mem_cycles + Comp_cycles) /
//!   Comp_cycles, N)` \[HK\].
//! - Cycles of the wave \[HK\], with `(MWP − 1)` taken as 0 below 1 (a bandwidth-bound MWP
//!   below one warp) and `Comp_cycles / max(Mem_insts, 1)` (the compute between two memory
//!   periods cannot exceed the warp's compute) \[K\]:
//!   - both MWP and CWP equal `N` (too few warps to hide anything):
//!     `Mem_cycles + Comp_cycles + Comp_cycles/Mem_insts·(MWP − 1)`;
//!   - else if `CWP ≥ MWP` (memory bound): `Mem_cycles·N/MWP + Comp_cycles/Mem_insts·(MWP − 1)`,
//!     and at least `Mem_L + Comp_cycles·N` \[K\]: the scheduler issues every instruction of its
//!     warps whatever hides the memory latency (near `MWP = 1` the formula falls below that:
//!     32-row warps of uncoalesced requests predicted faster than coalesced ones);
//!   - else (compute bound): `Mem_L + Comp_cycles·N`.
//!
//!   The design's second condition also takes `Comp_cycles > Mem_cycles` to the memory-bound
//!   formula; we drop it: with `MWP > CWP` it would charge a compute-heavy kernel
//!   `Mem_cycles·N/MWP`, less than the `N·Comp_cycles` its issue alone needs.
//!   A kernel without memory instructions costs `N·Comp_cycles`.
//! - DRAM under load \[K\]: requests queue as their demand nears the bandwidth, so
//!   `MWP_peak_BW` is not a corner. With `m = min(N, MWP_Without_BW)` requests in flight and
//!   `u = m / MWP_peak_BW` (the demand at the unloaded latency over the bandwidth), a request
//!   waits `(1 + u^q)^(1/q)` times its unloaded latency and the SM's memory parallelism is
//!   `MWP = m / (1 + u^q)^(1/q)`, a soft minimum of `m` and `MWP_peak_BW` (`q` =
//!   `dram_queue_exponent`, 1.5 from streaming micro-benchmarks on an H100; 0 keeps the hard
//!   minimum above). A wave with too few warps to hide anything pays the loaded latency:
//!   `Mem_cycles·(1 + u^q)^(1/q) + …`. A kernel that moves no DRAM bytes does not queue.
//! - Synchronisation \[HK, Sim et al.\]: `Departure_delay·(MWP_SM − 1)·sync_inst·B`, with
//!   `MWP_SM = MWP·P_act` the SM's memory parallelism and `B` the blocks the SM holds in
//!   this wave.
//!
//! # Waves \[D\]
//!
//! With `A` resident blocks per SM (occupancy), `S` SMs and `G` blocks:
//! `waves = ceil(G / (A·S))`. All waves but the last hold `A` blocks on every SM; the last
//! holds the `r = G − (waves − 1)·A·S` remaining blocks, spread over `min(r, S)` SMs, the
//! busiest holding `ceil(r / S)`. Total cycles = `(waves − 1)·wave(A, S) +
//! wave(ceil(r/S), min(r, S))`; `time_us = cycles / sm_clock_mhz`. This replaces the
//! fractional `Rep = G / (A·S)`, which charged a quarter-full GPU a quarter of a wave and
//! let idle SMs count as working.
//!
//! # Block drain \[K\]
//!
//! A block's warps do not start together and its slots are freed only when its last warp
//! ends, so each wave lasts `warp_drain_cycles·(warps_per_block − 1)` cycles longer (a
//! calibration figure: a one-element copy over many waves with 1024- and 256-thread blocks,
//! both at full occupancy, 14 cycles per warp on the H200, where the larger blocks take 20 %
//! longer). It matters only where warps live for about one memory round trip.
//!
//! # Block dispatch \[K\]
//!
//! An SM starts (and retires) blocks at a bounded rate, whatever they do: with `G` blocks on
//! `S` SMs the launch takes at least `ceil(G / S)·block_dispatch_cycles`. The total is the
//! larger of that and the waves' cycles (limiter `block dispatch`). It is what makes blocks
//! of 64 threads or fewer slow on a large grid even when every warp has little to do: on the
//! H200 a 4096² stencil takes 165 µs with 64-thread blocks and 72 µs with 256-thread ones,
//! while the waves' cycles are the same.
//!
//! # Block ramp \[K\]
//!
//! The same rate also staggers the start of the first wave: an SM starts its first `B`
//! blocks one `block_dispatch_cycles` apart, so the wave ends `(B − 1)·block_dispatch_cycles`
//! later than if they had all started together. Later waves' blocks start as earlier ones
//! retire, while other blocks run, which the bound above covers. It is what separates, at a
//! few microseconds a launch, four one-warp blocks per SM from one four-warp block: the
//! waves' cycles are the same, the measured times are not (docs/model.md).
//!
//! # Inputs out of range
//!
//! The metrics come from rational functions that may leave their physical range when
//! extrapolated: every metric is clamped to `[0, 1e30]` (NaN counts as 0), a warp executes
//! at least one instruction, shared instructions at most `inst`.

use crate::device::Device;
use crate::occupancy::OccupancyLimiter;

/// Bytes one thread's access is taken to use (4: `float`, `int`), for the bytes a request
/// needs from memory.
pub const ELEMENT_BYTES: f64 = 4.0;
/// Bytes of one L1TEX sector.
pub const SECTOR_BYTES: f64 = 32.0;
/// Sectors of a perfectly coalesced 4-byte-per-thread warp request.
pub const COALESCED_SECTORS: f64 = 4.0;
/// The largest metric value the model takes (fits can produce anything).
pub const METRIC_CAP: f64 = 1e30;

/// One launch: block and grid dimensions, registers per thread, shared memory per block
/// (static + dynamic, bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Launch {
    pub block: [u32; 3],
    pub grid: [u32; 3],
    pub regs_per_thread: u32,
    pub smem_per_block: u32,
}

/// Per-warp metrics, averaged over the warps of the grid.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct WarpMetrics {
    /// Warp instructions executed.
    pub inst: f64,
    /// Global load and store warp requests (instructions that reached memory; one whose
    /// lanes are all predicated off costs an issue slot in `inst`, no request).
    pub gld_inst: f64,
    pub gst_inst: f64,
    /// Shared-memory load and store warp instructions.
    pub shared_inst: f64,
    /// Barrier (`__syncthreads`) warp instructions.
    pub sync_inst: f64,
    /// 32-byte L1TEX sectors per global load / store request (4 = perfectly coalesced
    /// 4-byte accesses, 32 = one sector per thread).
    pub gld_sectors_per_req: f64,
    pub gst_sectors_per_req: f64,
    /// DRAM bytes read and written.
    pub dram_bytes: f64,
    /// The share of global load sectors the L1 served (0 to 1).
    pub gld_l1_hit_rate: f64,
    /// Global requests one warp keeps in flight together (memory-level parallelism within
    /// the warp: independent loads of an unrolled loop); 1 (or less) when each waits for the
    /// previous one, as Hong & Kim assume.
    pub mlp: f64,
    /// 1 when the L1's hits are a loop kernel's re-reads of its block's own share in a later
    /// pass of its loop (then the share must stay in the L1 between the passes: module doc,
    /// "The L1's capacity"); 0 when they come from neighbouring requests (no capacity bound).
    pub l1_reuse_loop: f64,
}

/// What bounds the predicted time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Limiter {
    /// Memory bound, limited by the departure rate of requests (Mem_L / Departure_delay).
    MemoryLatency,
    /// Memory bound, limited by DRAM bandwidth.
    MemoryBandwidth,
    /// Compute (issue) bound.
    Compute,
    /// Too few resident warps to hide the memory latency; the resource bounds occupancy.
    Occupancy(OccupancyLimiter),
    /// Fewer blocks than the GPU holds: SMs idle, or fewer resident blocks than occupancy
    /// allows.
    TooFewBlocks,
    /// The launch cannot run: a zero or too large block or grid dimension, or more threads
    /// per block than the device allows.
    ExceedsLimits,
    /// One block needs more registers than a block may have.
    ExceedsRegisters,
    /// One block needs more shared memory than a block may have.
    ExceedsSharedMemory,
    /// The SMs cannot start blocks faster: blocks so small or short that the block
    /// scheduler's rate ([`crate::Calibration::block_dispatch_cycles`]) bounds the time.
    BlockDispatch,
}

impl Limiter {
    /// The code of the C model (`KL_LIMIT_*`).
    pub fn code(self) -> i32 {
        match self {
            Limiter::MemoryLatency => 1,
            Limiter::MemoryBandwidth => 2,
            Limiter::Compute => 3,
            Limiter::Occupancy(OccupancyLimiter::Warps) => 4,
            Limiter::Occupancy(OccupancyLimiter::Blocks) => 5,
            Limiter::Occupancy(OccupancyLimiter::Registers) => 6,
            Limiter::Occupancy(OccupancyLimiter::SharedMemory) => 7,
            Limiter::TooFewBlocks => 8,
            Limiter::ExceedsLimits => 9,
            Limiter::ExceedsRegisters => 10,
            Limiter::ExceedsSharedMemory => 11,
            Limiter::BlockDispatch => 12,
        }
    }

    /// The name the C model reports (`kl_prediction.limiter_name`).
    pub fn name(self) -> &'static str {
        match self {
            Limiter::MemoryLatency => "memory latency",
            Limiter::MemoryBandwidth => "memory bandwidth",
            Limiter::Compute => "compute",
            Limiter::Occupancy(OccupancyLimiter::Warps) => "occupancy (threads)",
            Limiter::Occupancy(OccupancyLimiter::Blocks) => "occupancy (blocks)",
            Limiter::Occupancy(OccupancyLimiter::Registers) => "occupancy (registers)",
            Limiter::Occupancy(OccupancyLimiter::SharedMemory) => "occupancy (shared memory)",
            Limiter::TooFewBlocks => "too few blocks",
            Limiter::ExceedsLimits => "launch exceeds device limits",
            Limiter::ExceedsRegisters => "block exceeds register limit",
            Limiter::ExceedsSharedMemory => "block exceeds shared memory limit",
            Limiter::BlockDispatch => "block dispatch",
        }
    }

    /// Whether the launch cannot run at all.
    pub fn is_unlaunchable(self) -> bool {
        matches!(
            self,
            Limiter::ExceedsLimits | Limiter::ExceedsRegisters | Limiter::ExceedsSharedMemory
        )
    }
}

/// The model's answer for one launch. For a launch that cannot run, `cycles` and `time_us`
/// are infinite and the other figures 0.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Prediction {
    pub cycles: f64,
    pub time_us: f64,
    /// MWP and CWP of one warp scheduler in the first wave (the full one when there are
    /// several waves).
    pub mwp: f64,
    pub cwp: f64,
    /// What one SM really holds in the first wave: `min(occupancy, ceil(blocks / SMs))`
    /// blocks, and their warps.
    pub active_warps_per_sm: u32,
    pub active_blocks_per_sm: u32,
    pub waves: u64,
    pub limiter: Limiter,
}

/// The per-warp quantities of the kernel, independent of the wave (`kl_per_warp`).
#[cfg(test)]
#[derive(Debug, Clone, Copy, Default, PartialEq)]
#[repr(C)]
pub(crate) struct PerWarp {
    pub mem_insts: f64,
    pub sync_inst: f64,
    pub comp_cycles: f64,
    pub mem_l: f64,
    pub departure: f64,
    pub mem_cycles: f64,
    pub bytes_per_req: f64,
}

/// The chance that all of a group of `g` requests hit, each with probability `h`: `h^g`,
/// by squaring for the whole part of `g` and linear in its fraction (`h^n·(1 − f·(1 − h))`,
/// exact at whole `g`), so that no libm is needed (`kl_all_hit`).
pub fn all_hit(h: f64, g: f64) -> f64 {
    crate::ffi::all_hit(h, g)
}

/// How a warp's requests meet the cache lines: the rows of the box of threads one warp of
/// a block covers (`min(bx, 32)` threads along x, then as many rows along y as fit in 32
/// threads, then layers along z: `wy·wz`) and the sectors one row of `wx` 4-byte elements
/// takes in its line (`min(4, ceil(wx/8))`) (`kl_warp_rows`).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
#[repr(C)]
pub struct WarpRows {
    pub rows: f64,
    pub row_sectors: f64,
}

impl WarpRows {
    pub fn of(block: [u32; 3]) -> WarpRows {
        crate::ffi::warp_rows_of(block)
    }
}

/// Sectors of one 128-byte line.
pub const LINE_SECTORS: f64 = 4.0;

/// The 128-byte lines one warp request of mean `s` sectors touches (module doc): a request
/// whose sectors fit its footprint's rows touches `s / row_sectors` lines (at least one) if
/// each row is contiguous along x, `min(s, rows)` if each row reads one broadcast sector;
/// the counters cannot tell the two apart, so the mean. From twice that many sectors on, the
/// lanes are spread and every sector is its own line; linear in between
/// (`kl_lines_per_request`).
#[cfg(test)]
fn lines_per_request(s: f64, w: WarpRows) -> f64 {
    crate::ffi::lines_per_request(s, w)
}

/// The per-warp costs of `m` on `dev` with `lanes` active lanes a warp (`kl_per_warp_costs`).
#[cfg(test)]
fn per_warp(dev: &Device, m: &WarpMetrics, lanes: f64, w: WarpRows) -> PerWarp {
    crate::ffi::per_warp(dev, m, lanes, w)
}

/// The selection rule between shapes with predicted times `times` (one per shape of
/// `blocks`), scanned in order: a shape faster than the best by more than a relative 1e-9
/// replaces it; one within that replaces it when it has more threads per block, then a
/// larger bx, then a larger by (`kl_choose`: the rational programs' `kl_rank` applies the
/// same code). `None` when there is no shape.
pub fn choose(times: &[f64], blocks: &[[u32; 3]]) -> Option<usize> {
    crate::ffi::choose(times, blocks)
}

/// Predicts the execution time of one launch (module doc), with the C model
/// (`kl_predict`, the code every rational program runs).
pub fn predict(dev: &Device, launch: &Launch, m: &WarpMetrics) -> Prediction {
    crate::ffi::predict(dev, launch, m)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h100() -> Device {
        Device::for_arch(9, 0).unwrap()
    }

    fn launch(block: u32, grid: u32) -> Launch {
        Launch {
            block: [block, 1, 1],
            grid: [grid, 1, 1],
            regs_per_thread: 16,
            smem_per_block: 0,
        }
    }

    /// A coalesced streaming kernel (c = a + b): 2 loads, 1 store, 128 DRAM bytes each.
    fn vector_add() -> WarpMetrics {
        WarpMetrics {
            inst: 20.0,
            gld_inst: 2.0,
            gst_inst: 1.0,
            gld_sectors_per_req: 4.0,
            gst_sectors_per_req: 4.0,
            dram_bytes: 384.0,
            ..WarpMetrics::default()
        }
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * b.abs().max(1.0)
    }

    #[test]
    fn a_memory_bound_wave_still_issues_its_instructions() {
        let d = h100();
        // A warp of 1272 instructions and 8 requests (a small perceptron per pixel): as a row
        // of 64 pixels its requests are coalesced; as a column of 32 (1 × 64 blocks) each
        // takes 32 sectors in 32 lines, and the wave is memory bound near MWP = 1.
        let m = |sectors: f64| WarpMetrics {
            inst: 1272.0,
            gld_inst: 4.0,
            gst_inst: 4.0,
            gld_sectors_per_req: sectors,
            gst_sectors_per_req: sectors,
            dram_bytes: 512.0,
            ..WarpMetrics::default()
        };
        let shaped = |block: [u32; 3], grid: [u32; 3]| Launch {
            block,
            grid,
            regs_per_thread: 64,
            smem_per_block: 0,
        };
        let rows = predict(&d, &shaped([64, 1, 1], [64, 4096, 1]), &m(4.0));
        let cols = predict(&d, &shaped([1, 64, 1], [4096, 64, 1]), &m(32.0));
        assert_eq!(rows.limiter, Limiter::Compute);
        assert_eq!(cols.limiter, Limiter::MemoryLatency);
        // The same instructions on the same warps per SM: the column walk cannot be faster.
        assert!(
            cols.cycles >= rows.cycles,
            "columns {} cycles, rows {}",
            cols.cycles,
            rows.cycles
        );
    }

    #[test]
    fn a_loops_re_reads_hit_only_while_the_blocks_shares_fit_the_l1() {
        let d = h100();
        assert_eq!(d.l1_unified_per_sm(), 256 * 1024);
        // One block per row of 20 000 floats, read in three passes: each warp of a 512-thread
        // block loads 117 requests of 4 sectors, two thirds of them served by the L1 (the
        // re-reads); a block's share is 16 warps x 117 x 4 x 32 B / 3, about 80 KB.
        let row = |threads: f64, reuse: f64| WarpMetrics {
            inst: 60_000.0 / threads * 8.0,
            gld_inst: 60_000.0 / threads,
            gst_inst: 20_000.0 / threads,
            gld_sectors_per_req: 4.0,
            gst_sectors_per_req: 4.0,
            dram_bytes: 160_000.0 / (threads / 32.0),
            gld_l1_hit_rate: 2.0 / 3.0,
            mlp: 1.0,
            l1_reuse_loop: reuse,
            ..WarpMetrics::default()
        };
        let go = |threads: u32, reuse: f64| {
            predict(&d, &launch(threads, 1000), &row(f64::from(threads), reuse))
        };
        // Four resident blocks of 512 threads hold 320 KB: past the L1. Two of 1024 hold 160 KB.
        let (small, large) = (go(512, 1.0), go(1024, 1.0));
        assert_eq!(
            (small.active_blocks_per_sm, large.active_blocks_per_sm),
            (4, 2)
        );
        assert!(
            small.cycles > large.cycles,
            "512: {}, 1024: {}",
            small.cycles,
            large.cycles
        );
        // Hits from neighbouring requests (0) keep their rate: 512 is not slowed.
        let near = go(512, 0.0);
        assert!(near.cycles < small.cycles);
        // 1024 threads fit: the same as without the bound.
        assert!((go(1024, 0.0).cycles - large.cycles).abs() < 1e-9 * large.cycles);
    }

    #[test]
    fn block_dispatch_bounds_many_small_blocks() {
        let mut d = h100();
        d.calibration.block_dispatch_cycles.value = 160.0;
        // A warp with next to nothing to do: 32-thread blocks, 4000 per SM.
        let tiny = WarpMetrics {
            inst: 4.0,
            ..WarpMetrics::default()
        };
        let blocks = 4000 * d.sm_count;
        let p = predict(&d, &launch(32, blocks), &tiny);
        assert_eq!(p.limiter, Limiter::BlockDispatch);
        assert!((p.cycles - 4000.0 * 160.0).abs() < 1e-6);
        // The same work in 256-thread blocks: an eighth of the blocks, an eighth of the bound.
        let q = predict(&d, &launch(256, blocks / 8), &tiny);
        assert!(q.cycles >= 500.0 * 160.0 - 1e-6);
        assert!(q.cycles < p.cycles);
        // Without the figure (0), the bound disappears.
        d.calibration.block_dispatch_cycles.value = 0.0;
        assert_ne!(
            predict(&d, &launch(32, blocks), &tiny).limiter,
            Limiter::BlockDispatch
        );
    }

    #[test]
    fn the_first_waves_blocks_start_one_dispatch_apart() {
        let mut d = h100();
        d.calibration.block_dispatch_cycles.value = 160.0;
        d.calibration.warp_drain_cycles.value = 0.0;
        let m = vector_add();
        let sms = d.sm_count;
        // One wave either way, the same warps on each SM: 4 one-warp blocks, or one block
        // of four warps. The SM starts the small blocks 160 cycles apart: the last one
        // ends 3 × 160 cycles later.
        let small = predict(&d, &launch(32, 4 * sms), &m);
        let large = predict(&d, &launch(128, sms), &m);
        assert_eq!((small.waves, large.waves), (1, 1));
        assert_eq!(small.active_blocks_per_sm, 4);
        assert!(
            (small.cycles - large.cycles - 3.0 * 160.0).abs() < 1e-6,
            "{} {}",
            small.cycles,
            large.cycles
        );
        // Without the figure, the two are the same.
        d.calibration.block_dispatch_cycles.value = 0.0;
        let small = predict(&d, &launch(32, 4 * sms), &m);
        let large = predict(&d, &launch(128, sms), &m);
        assert!((small.cycles - large.cycles).abs() < 1e-6);
    }

    // Hand derivation for the sm_90 table (480-cycle DRAM latency, 4-cycle coalesced
    // departure, 0.9 × 3352.32 GB/s, 1980 MHz, 132 SMs, 4 schedulers, 1 issue cycle):
    // 256-thread blocks, 16 registers: 8 resident blocks (64 warps) per SM.
    // Per warp: Mem_L = 480, Departure = 4, Mem_cycles = 3 × 480, Comp_cycles = 20,
    // 128 DRAM bytes per memory instruction.
    #[test]
    fn streaming_kernel_by_hand() {
        // The paper's hard minimum of MWP (DRAM under load is tested below).
        let mut d = h100();
        d.calibration.dram_queue_exponent.value = 0.0;
        let p = predict(&d, &launch(256, 65536), &vector_add());
        // 65536 blocks, 1056 per wave: 62 full waves and 64 blocks left.
        assert_eq!(p.waves, 63);
        assert_eq!((p.active_blocks_per_sm, p.active_warps_per_sm), (8, 64));
        let bw = 0.9 * 3352.32;
        let bw_per_warp = 1.98 * 128.0 / 480.0;
        // Full wave: N = 64 / 4 = 16 per scheduler; MWP_Without_BW = 480 / (4 × 4) = 30.
        let mwp_full = bw / (bw_per_warp * 132.0 * 4.0); // 10.82: bandwidth bound
        let full = 1440.0 * 16.0 / mwp_full + 20.0 / 3.0 * (mwp_full - 1.0);
        // Last wave: 64 SMs hold 1 block (8 warps, N = 2): MWP = CWP = N.
        let last = 1440.0 + 20.0 + 20.0 / 3.0 * (2.0 - 1.0);
        assert!(close(p.mwp, mwp_full), "{} vs {mwp_full}", p.mwp);
        assert_eq!(p.cwp, 16.0);
        // The first wave's 8 blocks per SM start one dispatch apart (block ramp).
        let ramp = 7.0 * d.calibration.block_dispatch_cycles.value;
        assert!(close(p.cycles, 62.0 * full + last + ramp), "{}", p.cycles);
        assert!(close(p.time_us, p.cycles / 1980.0));
        assert_eq!(p.limiter, Limiter::MemoryBandwidth);
        // 201 MB at ~3 TB/s is about 67 µs; the model says 70.
        assert!(p.time_us > 60.0 && p.time_us < 80.0, "{}", p.time_us);
    }

    #[test]
    fn fewer_blocks_than_sms_share_the_bandwidth_over_the_busy_ones() {
        let mut d = h100();
        d.calibration.dram_queue_exponent.value = 0.0;
        let p = predict(&d, &launch(256, 10), &vector_add());
        assert_eq!(p.limiter, Limiter::TooFewBlocks);
        assert_eq!((p.waves, p.active_blocks_per_sm), (1, 1));
        // One block per SM: N = 2 per scheduler, MWP = CWP = N: no latency is hidden.
        assert!(close(p.cycles, 1440.0 + 20.0 + 20.0 / 3.0));
        // More blocks of the same size cost no more while SMs are idle.
        let q = predict(&d, &launch(256, 132), &vector_add());
        assert_eq!(q.cycles, p.cycles);
    }

    #[test]
    fn dram_under_load_by_hand() {
        // The streaming kernel above, one full wave (1056 blocks of 256 threads, N = 16 per
        // scheduler), with requests that queue as their demand nears the bandwidth.
        let mut d = h100();
        d.calibration.block_dispatch_cycles.value = 0.0;
        d.calibration.warp_drain_cycles.value = 0.0;
        let q = 1.5;
        d.calibration.dram_queue_exponent.value = q;
        let p = predict(&d, &launch(256, 1056), &vector_add());
        let bw = 0.9 * 3352.32;
        let bw_per_warp = 1.98 * 128.0 / 480.0;
        let mwp_bw = bw / (bw_per_warp * 132.0 * 4.0); // 10.82
        let in_flight = 16.0f64.min(480.0 / (4.0 * 4.0)); // N = 16 < MWP_Without_BW = 30
        let u = in_flight / mwp_bw;
        let load = (1.0 + u.powf(q)).powf(1.0 / q);
        let mwp = in_flight / load; // below both N and the bandwidth's 10.82
        assert!(mwp < mwp_bw && mwp < 16.0);
        assert!(close(p.mwp, mwp), "{} vs {mwp}", p.mwp);
        let wave = 1440.0 * 16.0 / mwp + 20.0 / 3.0 * (mwp - 1.0);
        assert!(close(p.cycles, wave), "{} vs {wave}", p.cycles);
        // More warps per SM reach more of the bandwidth: a wave of half the warps per SM
        // takes more than half the time (the hard minimum said exactly half).
        let half = predict(&d, &launch(128, 1056), &vector_add());
        assert!(
            half.cycles > 0.5 * p.cycles * 1.05,
            "{} {}",
            half.cycles,
            p.cycles
        );
        // q = 0: the hard minimum.
        d.calibration.dram_queue_exponent.value = 0.0;
        assert!(close(
            predict(&d, &launch(256, 1056), &vector_add()).mwp,
            mwp_bw
        ));
    }

    #[test]
    fn a_partial_last_wave_costs_its_own_occupancy() {
        let d = h100();
        let m = vector_add();
        let one = predict(&d, &launch(256, 1056), &m);
        let more = predict(&d, &launch(256, 1057), &m);
        assert_eq!((one.waves, more.waves), (1, 2));
        // The extra block runs alone on one SM: one block's time, not 1/1056 of a wave.
        let alone = predict(&d, &launch(256, 1), &m);
        assert!(close(more.cycles, one.cycles + alone.cycles));
    }

    #[test]
    fn one_scheduler_gives_the_original_model() {
        // With sub_partitions = 1 the wave is Hong & Kim's SM: N = all resident warps.
        let mut d = h100();
        d.sub_partitions = 1;
        let m = WarpMetrics {
            inst: 200.0,
            gld_inst: 4.0,
            gld_sectors_per_req: 4.0,
            dram_bytes: 512.0,
            ..WarpMetrics::default()
        };
        // 128 threads (4 warps), 16 blocks resident (warp slots) -> N = 64 per SM.
        let p = predict(&d, &launch(128, 16 * 132), &m);
        assert_eq!((p.waves, p.active_warps_per_sm), (1, 64));
        let mem_l: f64 = 480.0;
        let mwp_no_bw = mem_l / 4.0; // 120
        let bw_per_warp = 1.98 * 128.0 / mem_l;
        let mwp_bw = 0.9 * 3352.32 / (bw_per_warp * 132.0);
        let mwp = mwp_no_bw.min(mwp_bw).min(64.0); // bandwidth: 42.86
        let mem_cycles = 4.0 * mem_l;
        let comp: f64 = 200.0;
        let cwp = ((mem_cycles + comp) / comp).min(64.0); // 10.6
        assert!(cwp < mwp);
        // MWP > CWP: compute bound, Mem_L + Comp_cycles × N, and the ramp of 16 blocks.
        let ramp = 15.0 * d.calibration.block_dispatch_cycles.value;
        assert!(close(p.cycles, mem_l + comp * 64.0 + ramp), "{}", p.cycles);
        assert_eq!(p.limiter, Limiter::Compute);
    }

    #[test]
    fn compute_heavy_kernels_are_compute_bound() {
        let d = h100();
        let m = WarpMetrics {
            inst: 5000.0,
            gld_inst: 1.0,
            gld_sectors_per_req: 4.0,
            dram_bytes: 128.0,
            ..WarpMetrics::default()
        };
        let p = predict(&d, &launch(256, 1056), &m);
        assert_eq!(p.limiter, Limiter::Compute);
        // N = 16 per scheduler: Mem_L + 16 × 5000, and the ramp of 8 blocks per SM.
        let ramp = 7.0 * d.calibration.block_dispatch_cycles.value;
        assert!(close(p.cycles, 480.0 + 16.0 * 5000.0 + ramp));
        // No memory at all: N × Comp_cycles.
        let pure = WarpMetrics {
            inst: 5000.0,
            ..WarpMetrics::default()
        };
        let q = predict(&d, &launch(256, 1056), &pure);
        assert!(close(q.cycles, 16.0 * 5000.0 + ramp));
        assert_eq!(q.limiter, Limiter::Compute);
    }

    #[test]
    fn requests_in_flight_together_wait_once() {
        let d = h100();
        // 8 loads per warp, 4 in flight together: 2 periods of Mem_L + 3 departures.
        let m = WarpMetrics {
            inst: 40.0,
            gld_inst: 8.0,
            gld_sectors_per_req: 4.0,
            dram_bytes: 8.0 * 128.0,
            mlp: 4.0,
            ..WarpMetrics::default()
        };
        let k = per_warp(&d, &m, 32.0, WarpRows::of([32, 1, 1]));
        assert!(close(k.mem_insts, 2.0));
        assert!(close(k.mem_l, 480.0 + 3.0 * 4.0));
        assert!(close(k.departure, 16.0));
        assert!(close(k.mem_cycles, 2.0 * 492.0));
        // 1 (or 0, the default, or NaN) is Hong & Kim's one request at a time; more in flight
        // than the warp has requests is the warp's requests.
        for mlp in [1.0, 0.0, f64::NAN] {
            let k = per_warp(
                &d,
                &WarpMetrics { mlp, ..m },
                32.0,
                WarpRows::of([32, 1, 1]),
            );
            assert!(close(k.mem_cycles, 8.0 * 480.0), "{mlp}");
        }
        let all = per_warp(
            &d,
            &WarpMetrics { mlp: 64.0, ..m },
            32.0,
            WarpRows::of([32, 1, 1]),
        );
        assert!(close(all.mem_insts, 1.0) && close(all.mem_l, 480.0 + 7.0 * 4.0));
        // A lone warp per scheduler finishes sooner with its loads overlapped.
        let one = predict(&d, &launch(32, 132), &WarpMetrics { mlp: 1.0, ..m });
        let four = predict(&d, &launch(32, 132), &m);
        assert!(
            four.cycles < one.cycles / 3.0,
            "{} vs {}",
            four.cycles,
            one.cycles
        );
    }

    #[test]
    fn larger_blocks_drain_longer() {
        // A copy of one element per thread over many waves: blocks of 1024 and 256 threads
        // both fill the SM; with a drain of 14 cycles per warp each of the waves of the
        // 1024-thread launch lasts 24 × 14 cycles longer.
        let mut d = h100();
        d.calibration.block_dispatch_cycles.value = 0.0;
        let m = vector_add();
        let (big, small) = (launch(1024, 1 << 16), launch(256, 1 << 18));
        let (b0, s0) = (predict(&d, &big, &m), predict(&d, &small, &m));
        d.calibration.warp_drain_cycles.value = 14.0;
        let (b1, s1) = (predict(&d, &big, &m), predict(&d, &small, &m));
        assert_eq!(b0.waves, s0.waves);
        assert!(close(b1.cycles - b0.cycles, b0.waves as f64 * 31.0 * 14.0));
        assert!(close(s1.cycles - s0.cycles, s0.waves as f64 * 7.0 * 14.0));
    }

    #[test]
    fn lines_per_request_and_uncoalesced_cost() {
        // Warps one row of 32 (blocks 32 or more wide): 4 sectors fill one line.
        let row = WarpRows::of([256, 1, 1]);
        assert_eq!(
            row,
            WarpRows {
                rows: 1.0,
                row_sectors: 4.0
            }
        );
        assert_eq!(lines_per_request(1.0, row), 1.0);
        assert_eq!(lines_per_request(4.0, row), 1.0);
        assert_eq!(lines_per_request(6.0, row), 4.5);
        assert_eq!(lines_per_request(8.0, row), 8.0);
        assert_eq!(lines_per_request(32.0, row), 32.0);
        // Blocks 8 wide make warps of 8 columns × 4 rows: 4 sectors are 4 lines (jacobi2d's
        // copy on the H200: 8x128 blocks take 1.5 times as long as 32x8 ones).
        let narrow = WarpRows::of([8, 128, 1]);
        assert_eq!(
            narrow,
            WarpRows {
                rows: 4.0,
                row_sectors: 1.0
            }
        );
        assert_eq!(lines_per_request(4.0, narrow), 4.0);
        // 16 wide: two rows of two sectors; 4 columns × 8 rows with a broadcast load (1
        // sector) beside a row-spread one (8): 4.5 sectors, 4.5 lines.
        assert_eq!(lines_per_request(4.0, WarpRows::of([16, 64, 1])), 2.0);
        // Two sectors of a 16-wide warp: one row's two (1 line, B[k][j] in a matrix
        // product) or one from each row (2 lines, A[i][k] broadcast): 1.5 lines. On the H200
        // 16-wide blocks make 2mm's product 1.35 times slower than 32-wide ones.
        assert_eq!(lines_per_request(2.0, WarpRows::of([16, 16, 1])), 1.5);
        assert_eq!(lines_per_request(4.5, WarpRows::of([4, 32, 1])), 4.5);
        // A one-thread warp: one sector, one line; a 3-D footprint counts its layers as rows.
        assert_eq!(lines_per_request(1.0, WarpRows::of([1, 1, 1])), 1.0);
        assert_eq!(WarpRows::of([8, 2, 8]).rows, 4.0);
        let d = h100();
        // 18 lines per load (18 sectors): Mem_L = 480 + 17 × 1, Departure = 4 + 17 × 1. The
        // DRAM bytes cover the 128 bytes the request needs: every request waits for DRAM.
        let m = WarpMetrics {
            inst: 10.0,
            gld_inst: 1.0,
            gld_sectors_per_req: 18.0,
            dram_bytes: 18.0 * 32.0,
            ..WarpMetrics::default()
        };
        let k = per_warp(&d, &m, 32.0, WarpRows::of([32, 1, 1]));
        assert!(close(k.mem_l, 480.0 + 17.0));
        assert!(close(k.departure, 4.0 + 17.0));
        assert!(close(k.mem_cycles, 497.0));
        // Uncoalesced sectors served by the L2 do not make a request faster than DRAM: the
        // same DRAM bytes with 4 or 8 sectors per request give the same latency.
        let four = per_warp(
            &d,
            &WarpMetrics {
                gld_sectors_per_req: 4.0,
                dram_bytes: 128.0,
                ..m
            },
            32.0,
            WarpRows::of([32, 1, 1]),
        );
        let eight = per_warp(
            &d,
            &WarpMetrics {
                gld_sectors_per_req: 8.0,
                dram_bytes: 128.0,
                ..m
            },
            32.0,
            WarpRows::of([32, 1, 1]),
        );
        assert!(close(four.mem_l, 480.0));
        assert!(close(eight.mem_l, 480.0 + 7.0));
        // A one-thread warp needs 4 bytes per request: its 32-byte sector, shared with the
        // warps of the neighbouring threads, is fetched once from DRAM for all of them, and
        // each of them waits for it.
        let one = per_warp(
            &d,
            &WarpMetrics {
                gld_sectors_per_req: 1.0,
                dram_bytes: 4.0,
                ..m
            },
            1.0,
            WarpRows::of([1, 1, 1]),
        );
        assert!(close(one.mem_l, 480.0));
        // More sectors per request never makes a launch faster.
        let mut last = 0.0;
        for s in [1.0, 4.0, 8.0, 16.0, 24.0, 32.0] {
            let m = WarpMetrics {
                gld_sectors_per_req: s,
                dram_bytes: s * 32.0,
                ..m
            };
            let c = predict(&d, &launch(128, 4096), &m).cycles;
            assert!(c >= last, "{s} sectors: {c} < {last}");
            last = c;
        }
    }

    #[test]
    fn l2_hits_shorten_the_latency() {
        let d = h100();
        let m = WarpMetrics {
            inst: 10.0,
            gld_inst: 2.0,
            gld_sectors_per_req: 4.0,
            dram_bytes: 64.0, // a quarter of the 256 requested bytes
            ..WarpMetrics::default()
        };
        let k = per_warp(&d, &m, 32.0, WarpRows::of([32, 1, 1]));
        assert!(close(k.mem_l, 0.25 * 480.0 + 0.75 * 260.0));
        assert!(close(k.bytes_per_req, 32.0));
    }

    #[test]
    fn l1_hits_shorten_loads_not_stores() {
        let d = h100();
        let l1 = d.calibration.l1_latency_cycles.value;
        // Half the load sectors hit L1; the other half (128 bytes) come from DRAM.
        let m = WarpMetrics {
            inst: 10.0,
            gld_inst: 2.0,
            gld_sectors_per_req: 4.0,
            dram_bytes: 128.0,
            gld_l1_hit_rate: 0.5,
            ..WarpMetrics::default()
        };
        let k = per_warp(&d, &m, 32.0, WarpRows::of([32, 1, 1]));
        assert!(close(k.mem_l, 0.5 * l1 + 0.5 * 480.0), "{}", k.mem_l);
        // Stores go to L2 whatever the loads' hit rate: one load, one store, no DRAM.
        let m = WarpMetrics {
            gld_inst: 1.0,
            gst_inst: 1.0,
            gst_sectors_per_req: 4.0,
            dram_bytes: 0.0,
            gld_l1_hit_rate: 1.0,
            ..m
        };
        let k = per_warp(&d, &m, 32.0, WarpRows::of([32, 1, 1]));
        assert!(close(k.mem_l, 0.5 * l1 + 0.5 * 260.0), "{}", k.mem_l);
        // Rates out of range are held to [0, 1].
        let over = WarpMetrics {
            gld_l1_hit_rate: 7.0,
            ..m
        };
        let k2 = per_warp(&d, &over, 32.0, WarpRows::of([32, 1, 1]));
        assert!(close(k2.mem_l, k.mem_l));
    }

    #[test]
    fn a_group_in_flight_waits_unless_all_its_loads_hit() {
        let d = h100();
        let l1 = d.calibration.l1_latency_cycles.value;
        // A thread walking its row: 7 load sectors in 8 hit L1, the misses come from L2.
        let m = WarpMetrics {
            inst: 64.0,
            gld_inst: 16.0,
            gld_sectors_per_req: 4.0,
            dram_bytes: 0.0,
            gld_l1_hit_rate: 0.875,
            mlp: 1.0,
            ..WarpMetrics::default()
        };
        let w = WarpRows::of([32, 1, 1]);
        // One at a time: each request waits the mean latency.
        let one = per_warp(&d, &m, 32.0, w);
        assert!(
            close(one.mem_l, 0.875 * l1 + 0.125 * 260.0),
            "{}",
            one.mem_l
        );
        // 8 in flight: all 8 hit with probability 0.875^8, else the group waits for L2.
        let all_hit = 0.875f64.powi(8);
        assert!(close(super::all_hit(0.875, 8.0), all_hit));
        assert!(close(super::all_hit(0.5, 2.5), 0.25 * 0.75));
        assert_eq!(super::all_hit(0.3, 1.0), 0.3);
        let eight = per_warp(&d, &WarpMetrics { mlp: 8.0, ..m }, 32.0, w);
        let mem_ld = all_hit * l1 + (1.0 - all_hit) * 260.0;
        assert!(close(eight.mem_insts, 2.0));
        assert!(close(eight.mem_l, mem_ld + 7.0 * 4.0), "{}", eight.mem_l);
        // Every load hitting, or none, is the same whatever the group.
        for h1 in [0.0, 1.0] {
            let a = per_warp(
                &d,
                &WarpMetrics {
                    gld_l1_hit_rate: h1,
                    ..m
                },
                32.0,
                w,
            );
            let b = per_warp(
                &d,
                &WarpMetrics {
                    gld_l1_hit_rate: h1,
                    mlp: 8.0,
                    ..m
                },
                32.0,
                w,
            );
            assert!(close(b.mem_l, a.mem_l + 7.0 * 4.0), "{h1}");
        }
    }

    #[test]
    fn loads_that_wait_for_dram_depart_at_the_dram_rate() {
        let mut d = h100();
        let coal = d.calibration.departure_delay_coalesced_cycles.value;
        // One-lane warps streaming columns: every load sector misses L1 and comes from DRAM.
        let stream = WarpMetrics {
            inst: 40.0,
            gld_inst: 10.0,
            gst_inst: 1.0,
            gld_sectors_per_req: 1.0,
            gst_sectors_per_req: 1.0,
            dram_bytes: 44.0,
            gld_l1_hit_rate: 0.0,
            mlp: 1.0,
            ..WarpMetrics::default()
        };
        let w = WarpRows::of([1, 1, 1]);
        // Not measured (0): every request departs at the coalesced gap.
        assert_eq!(
            d.calibration.departure_delay_coalesced_dram_cycles.value,
            0.0
        );
        let before = per_warp(&d, &stream, 1.0, w);
        assert!(close(before.departure, coal), "{}", before.departure);
        d.calibration.departure_delay_coalesced_dram_cycles.value = 3.0 * coal;
        let after = per_warp(&d, &stream, 1.0, w);
        // Ten loads at the DRAM gap, one store (absorbed by L2) at the coalesced one.
        assert!(
            close(after.departure, (10.0 * 3.0 * coal + coal) / 11.0),
            "{}",
            after.departure
        );
        // Loads that mostly hit L1 keep the L1's pace: 1/8 of 3x is below 1x.
        let row_walk = WarpMetrics {
            gld_l1_hit_rate: 0.875,
            gld_sectors_per_req: 4.0,
            dram_bytes: 10.0 * 16.0,
            ..stream
        };
        let rw = per_warp(&d, &row_walk, 32.0, WarpRows::of([32, 1, 1]));
        assert!(close(rw.departure, coal), "{}", rw.departure);
        // With many warps, each keeping 8 loads in flight, the slower departure bounds MWP,
        // so the launch takes longer.
        let busy = WarpMetrics {
            inst: 400.0,
            gld_inst: 100.0,
            dram_bytes: 404.0,
            mlp: 8.0,
            ..stream
        };
        let l = launch(1, 132 * 24);
        let t0 = predict(&h100(), &l, &busy).time_us;
        let t1 = predict(&d, &l, &busy).time_us;
        assert!(t1 > t0, "{t0} {t1}");
    }

    #[test]
    fn barriers_add_departure_times_parallelism() {
        let d = h100();
        let base = WarpMetrics {
            inst: 300.0,
            gld_inst: 2.0,
            shared_inst: 20.0,
            gld_sectors_per_req: 4.0,
            dram_bytes: 256.0,
            ..WarpMetrics::default()
        };
        let synced = WarpMetrics {
            sync_inst: 3.0,
            ..base
        };
        let l = launch(256, 1056);
        let (a, b) = (predict(&d, &l, &base), predict(&d, &l, &synced));
        // 8 blocks per SM, MWP of the SM = 4 × MWP, departure 4 cycles.
        let expected = 4.0 * (4.0 * a.mwp - 1.0) * 3.0 * 8.0;
        assert!(
            close(b.cycles - a.cycles, expected),
            "{}",
            b.cycles - a.cycles
        );
        // Shared instructions cost their own issue cycles: 280 × 1 + 20 × 4.
        assert!(close(
            per_warp(&d, &base, 32.0, WarpRows::of([32, 1, 1])).comp_cycles,
            280.0 + 80.0
        ));
    }

    #[test]
    fn launches_that_cannot_run() {
        let d = h100();
        let m = vector_add();
        let cases = [
            (launch(2048, 10), Limiter::ExceedsLimits),
            (launch(0, 10), Limiter::ExceedsLimits),
            (launch(256, 0), Limiter::ExceedsLimits),
            (
                Launch {
                    block: [1, 1, 65],
                    ..launch(1, 1)
                },
                Limiter::ExceedsLimits,
            ),
            (
                Launch {
                    block: [64, 32, 1],
                    ..launch(1, 1)
                },
                Limiter::ExceedsLimits,
            ),
            (
                Launch {
                    regs_per_thread: 255,
                    ..launch(1024, 10)
                },
                Limiter::ExceedsRegisters,
            ),
            (
                Launch {
                    smem_per_block: 300_000,
                    ..launch(32, 10)
                },
                Limiter::ExceedsSharedMemory,
            ),
        ];
        for (l, limiter) in cases {
            let p = predict(&d, &l, &m);
            assert_eq!(p.limiter, limiter, "{l:?}");
            assert!(p.limiter.is_unlaunchable());
            assert_eq!(p.cycles, f64::INFINITY);
        }
    }

    #[test]
    fn occupancy_limiters_and_garbage_metrics() {
        let d = h100();
        // Few warps per SM by registers: 128 regs, 256 threads -> 2 blocks (16 warps),
        // N = 4 per scheduler: MWP = CWP = N.
        let l = Launch {
            regs_per_thread: 128,
            ..launch(256, 132 * 2 * 5)
        };
        let p = predict(&d, &l, &vector_add());
        assert_eq!(p.limiter, Limiter::Occupancy(OccupancyLimiter::Registers));
        assert_eq!(p.active_warps_per_sm, 16);
        // NaN, negative and infinite metrics give a finite, positive answer.
        let bad = WarpMetrics {
            inst: f64::NAN,
            gld_inst: -3.0,
            gst_inst: f64::INFINITY,
            shared_inst: f64::NAN,
            sync_inst: -1.0,
            gld_sectors_per_req: f64::NAN,
            gst_sectors_per_req: 1e300,
            dram_bytes: f64::NEG_INFINITY,
            gld_l1_hit_rate: f64::NAN,
            mlp: f64::NAN,
            l1_reuse_loop: f64::NAN,
        };
        let q = predict(&d, &launch(256, 4096), &bad);
        assert!(q.cycles.is_finite() && q.cycles > 0.0, "{q:?}");
        let zero = predict(&d, &launch(256, 4096), &WarpMetrics::default());
        assert!(zero.cycles > 0.0);
    }

    #[test]
    fn limiter_codes_are_distinct() {
        let all = [
            Limiter::MemoryLatency,
            Limiter::MemoryBandwidth,
            Limiter::Compute,
            Limiter::Occupancy(OccupancyLimiter::Warps),
            Limiter::Occupancy(OccupancyLimiter::Blocks),
            Limiter::Occupancy(OccupancyLimiter::Registers),
            Limiter::Occupancy(OccupancyLimiter::SharedMemory),
            Limiter::TooFewBlocks,
            Limiter::ExceedsLimits,
            Limiter::ExceedsRegisters,
            Limiter::ExceedsSharedMemory,
        ];
        for (i, l) in all.iter().enumerate() {
            assert_eq!(l.code(), i as i32 + 1);
        }
    }
}
