//! The MWP-CWP performance model (Hong & Kim, ISCA 2009; Sim et al., PPoPP 2012), as
//! DESIGN.md ("The performance model") states it, with the corrections DESIGN.md asks for and
//! a few of ours. Every equation below names its source: **[HK]** the original model as
//! DESIGN.md writes it, **[D]** a DESIGN.md correction, **[K]** our own change, with the
//! reason. [`predict`] costs a few hundred nanoseconds: no loop runs over blocks or warps.
//!
//! # Inputs
//!
//! Per launch ([`Launch`]): the block and grid, registers per thread and shared memory per
//! block (static + dynamic). Per warp ([`WarpMetrics`], averaged over the warps of the grid,
//! fitted by the lead from hardware counters): warp instructions, global load/store and
//! shared instructions, barriers, L1TEX sectors per global load/store request, DRAM bytes.
//!
//! # Coalescing (Uncoal_per_mw and the weights) [K]
//!
//! A warp request for 4 bytes per thread, perfectly coalesced, touches 4 sectors of 32 bytes;
//! a fully diverged one touches 32 (one per thread). Hong & Kim class each memory instruction
//! as coalesced (one memory transaction) or uncoalesced (`Uncoal_per_mw` transactions, each
//! departing `Departure_del_uncoal` after the previous). The counters give only the *mean*
//! sectors per request, `s`. We read it as the one mixture of the two extremes with that
//! mean: a fraction `w = clamp((s − 4) / (32 − 4), 0, 1)` of the requests is fully diverged
//! (`Uncoal_per_mw = 32` transactions, one per sector) and the rest coalesced. Then, with
//! `gld`, `gst` the load and store instructions and `w_ld`, `w_st` their fractions,
//! `Uncoal_insts = gld·w_ld + gst·w_st`, `Coal_insts = gld + gst − Uncoal_insts`, and the
//! weights are the instruction fractions `W_uncoal = Uncoal_insts / Mem_insts`,
//! `W_coal = 1 − W_uncoal` ([HK]). `s ≤ 4` (broadcasts, narrow accesses) counts as coalesced:
//! fewer bytes, but the same one departure.
//!
//! # Caches [K]
//!
//! The original charges every memory instruction the DRAM latency. The DRAM bytes per warp
//! tell how much of the requested traffic (`32 · (gld·s_ld + gst·s_st)` bytes) reaches DRAM:
//! `h = min(1, dram_bytes / requested)`, and the latency of one request is
//! `Mem_LD = h·mem_latency + (1 − h)·l2_latency`. The bandwidth limit uses the DRAM bytes a
//! memory instruction really moves, `Load_bytes_per_warp = dram_bytes / Mem_insts`.
//!
//! # Sub-partitions [K]
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
//! - `Mem_L_Coal = Mem_LD`; `Mem_L_Uncoal = Mem_LD + (Uncoal_per_mw − 1)·Departure_del_uncoal`;
//!   `Mem_L = W_coal·Mem_L_Coal + W_uncoal·Mem_L_Uncoal` [HK].
//! - `Departure_delay = Uncoal_per_mw·W_uncoal·Departure_del_uncoal + W_coal·Departure_del_coal` [HK].
//! - `Mem_cycles = Coal_insts·Mem_L_Coal + Uncoal_insts·Mem_L_Uncoal` [HK].
//! - `Comp_cycles = issue_cycles·(inst − shared_inst) + shared_issue_cycles·shared_inst`:
//!   every instruction, memory ones included, takes an issue slot [HK]; shared-memory
//!   instructions count as compute at their own cost [D].
//!
//! # One wave (a set of blocks resident together) with `N` warps per scheduler
//!
//! - `MWP_Without_BW = Mem_L / (Departure_delay·P_act)` [HK + sub-partitions].
//! - `BW_per_warp = Freq·Load_bytes_per_warp / Mem_L` (GB/s with Freq in GHz) [HK];
//!   `MWP_peak_BW = Mem_Bandwidth / (BW_per_warp·SMs_active·P_act)`, where `SMs_active`
//!   counts only the SMs that hold a block of this wave [D: fewer blocks than SMs].
//! - `MWP = min(MWP_Without_BW, MWP_peak_BW, N)`; `CWP = min((Mem_cycles + Comp_cycles) /
//!   Comp_cycles, N)` [HK].
//! - Cycles of the wave [HK], with `(MWP − 1)` taken as 0 below 1 (a bandwidth-bound MWP
//!   below one warp) and `Comp_cycles / max(Mem_insts, 1)` (the compute between two memory
//!   periods cannot exceed the warp's compute) [K]:
//!   - both MWP and CWP equal `N` (too few warps to hide anything):
//!     `Mem_cycles + Comp_cycles + Comp_cycles/Mem_insts·(MWP − 1)`;
//!   - else if `CWP ≥ MWP` (memory bound): `Mem_cycles·N/MWP + Comp_cycles/Mem_insts·(MWP − 1)`;
//!   - else (compute bound): `Mem_L + Comp_cycles·N`.
//!   DESIGN.md's second condition also takes `Comp_cycles > Mem_cycles` to the memory-bound
//!   formula; we drop it: with `MWP > CWP` it would charge a compute-heavy kernel
//!   `Mem_cycles·N/MWP`, less than the `N·Comp_cycles` its issue alone needs.
//!   A kernel without memory instructions costs `N·Comp_cycles`.
//! - Synchronisation [HK, Sim et al.]: `Departure_delay·(MWP_SM − 1)·sync_inst·B`, with
//!   `MWP_SM = MWP·P_act` the SM's memory parallelism and `B` the blocks the SM holds in
//!   this wave.
//!
//! # Waves [D]
//!
//! With `A` resident blocks per SM (occupancy), `S` SMs and `G` blocks:
//! `waves = ceil(G / (A·S))`. All waves but the last hold `A` blocks on every SM; the last
//! holds the `r = G − (waves − 1)·A·S` remaining blocks, spread over `min(r, S)` SMs, the
//! busiest holding `ceil(r / S)`. Total cycles = `(waves − 1)·wave(A, S) +
//! wave(ceil(r/S), min(r, S))`; `time_us = cycles / sm_clock_mhz`. This replaces the
//! fractional `Rep = G / (A·S)`, which charged a quarter-full GPU a quarter of a wave and
//! let idle SMs count as working.
//!
//! # Inputs out of range
//!
//! The metrics come from rational functions that may leave their physical range when
//! extrapolated: every metric is clamped to `[0, 1e30]` (NaN counts as 0), a warp executes
//! at least one instruction, shared instructions at most `inst`.

use crate::device::Device;
use crate::occupancy::{occupancy, Occupancy, OccupancyLimiter};

/// Bytes of one L1TEX sector.
pub const SECTOR_BYTES: f64 = 32.0;
/// Sectors of a perfectly coalesced 4-byte-per-thread warp request.
pub const COALESCED_SECTORS: f64 = 4.0;
/// Sectors (transactions) of a fully diverged warp request: `Uncoal_per_mw`.
pub const UNCOAL_PER_MW: f64 = 32.0;
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
    /// Global load and store warp instructions.
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

/// What the per-wave formulas found binding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Regime {
    Compute,
    Latency,
    Bandwidth,
    FewWarps,
}

/// The per-warp quantities of the kernel, independent of the wave.
struct PerWarp {
    mem_insts: f64,
    sync_inst: f64,
    comp_cycles: f64,
    mem_l: f64,
    departure: f64,
    mem_cycles: f64,
    bytes_per_req: f64,
}

struct Wave {
    cycles: f64,
    mwp: f64,
    cwp: f64,
    regime: Regime,
}

fn clean(x: f64) -> f64 {
    if x > 0.0 {
        if x < METRIC_CAP {
            x
        } else {
            METRIC_CAP
        }
    } else {
        0.0
    }
}

fn min2(a: f64, b: f64) -> f64 {
    if a < b {
        a
    } else {
        b
    }
}

fn max2(a: f64, b: f64) -> f64 {
    if a > b {
        a
    } else {
        b
    }
}

/// Fraction of fully diverged requests in the mixture with mean `sectors` (module doc).
fn uncoalesced_fraction(sectors: f64) -> f64 {
    let w = (sectors - COALESCED_SECTORS) / (UNCOAL_PER_MW - COALESCED_SECTORS);
    min2(max2(w, 0.0), 1.0)
}

fn per_warp(dev: &Device, m: &WarpMetrics) -> PerWarp {
    let c = &dev.calibration;
    let inst = max2(clean(m.inst), 1.0);
    let gld = clean(m.gld_inst);
    let gst = clean(m.gst_inst);
    let shared = min2(clean(m.shared_inst), inst);
    let s_ld = clean(m.gld_sectors_per_req);
    let s_st = clean(m.gst_sectors_per_req);
    let dram = clean(m.dram_bytes);

    let mem_insts = gld + gst;
    let uncoal = gld * uncoalesced_fraction(s_ld) + gst * uncoalesced_fraction(s_st);
    let coal = max2(mem_insts - uncoal, 0.0);
    let (w_uncoal, w_coal) = if mem_insts > 0.0 {
        let w = uncoal / mem_insts;
        (w, 1.0 - w)
    } else {
        (0.0, 1.0)
    };

    let requested = SECTOR_BYTES * (gld * s_ld + gst * s_st);
    let h = if requested > 0.0 {
        min2(dram / requested, 1.0)
    } else {
        1.0
    };
    let mem_ld = h * c.mem_latency_cycles.value + (1.0 - h) * c.l2_latency_cycles.value;
    let dep_uncoal = c.departure_delay_uncoalesced_cycles.value;
    let mem_l_coal = mem_ld;
    let mem_l_uncoal = mem_ld + (UNCOAL_PER_MW - 1.0) * dep_uncoal;
    let mem_l = w_coal * mem_l_coal + w_uncoal * mem_l_uncoal;
    let departure =
        UNCOAL_PER_MW * w_uncoal * dep_uncoal + w_coal * c.departure_delay_coalesced_cycles.value;
    let mem_cycles = coal * mem_l_coal + uncoal * mem_l_uncoal;
    let comp_cycles = c.issue_cycles.value * (inst - shared) + c.shared_issue_cycles.value * shared;
    let bytes_per_req = if mem_insts > 0.0 {
        dram / mem_insts
    } else {
        0.0
    };
    PerWarp {
        mem_insts,
        sync_inst: clean(m.sync_inst),
        comp_cycles,
        mem_l,
        departure,
        mem_cycles,
        bytes_per_req,
    }
}

/// One wave: `warps_on_sm` warps (of `blocks_on_sm` blocks) on each of `sms` SMs.
fn wave(dev: &Device, k: &PerWarp, warps_on_sm: u64, blocks_on_sm: u64, sms: u64) -> Wave {
    let parts = u64::from(dev.sub_partitions);
    let n = warps_on_sm.div_ceil(parts) as f64;
    let p_act = (if warps_on_sm < parts {
        warps_on_sm
    } else {
        parts
    }) as f64;
    if k.mem_insts <= 0.0 {
        return Wave {
            cycles: n * k.comp_cycles,
            mwp: 0.0,
            cwp: n,
            regime: Regime::Compute,
        };
    }
    let c = &dev.calibration;
    let mwp_no_bw = k.mem_l / (k.departure * p_act);
    let freq_ghz = dev.sm_clock_mhz / 1000.0;
    let bw_per_warp = freq_ghz * k.bytes_per_req / k.mem_l;
    let mwp_bw = if bw_per_warp > 0.0 {
        c.dram_bandwidth_gbs.value / (bw_per_warp * sms as f64 * p_act)
    } else {
        n
    };
    let mwp = min2(min2(mwp_no_bw, mwp_bw), n);
    let cwp_full = (k.mem_cycles + k.comp_cycles) / k.comp_cycles;
    let cwp = min2(cwp_full, n);
    let overlap = max2(mwp - 1.0, 0.0);
    let comp_per_period = k.comp_cycles / max2(k.mem_insts, 1.0);
    let (mut cycles, regime) = if n <= mwp_no_bw && n <= mwp_bw && n <= cwp_full {
        (
            k.mem_cycles + k.comp_cycles + comp_per_period * overlap,
            Regime::FewWarps,
        )
    } else if cwp >= mwp {
        // MWP = N cannot reach here: with CWP ≥ MWP = N the first case applies.
        let regime = if mwp_bw <= mwp_no_bw {
            Regime::Bandwidth
        } else {
            Regime::Latency
        };
        (k.mem_cycles * n / mwp + comp_per_period * overlap, regime)
    } else {
        (k.mem_l + k.comp_cycles * n, Regime::Compute)
    };
    let mwp_sm = mwp * p_act;
    cycles += k.departure * max2(mwp_sm - 1.0, 0.0) * k.sync_inst * blocks_on_sm as f64;
    Wave {
        cycles,
        mwp,
        cwp,
        regime,
    }
}

fn unlaunchable(limiter: Limiter) -> Prediction {
    Prediction {
        cycles: f64::INFINITY,
        time_us: f64::INFINITY,
        mwp: 0.0,
        cwp: 0.0,
        active_warps_per_sm: 0,
        active_blocks_per_sm: 0,
        waves: 0,
        limiter,
    }
}

/// Predicts the execution time of one launch (module doc).
pub fn predict(dev: &Device, launch: &Launch, m: &WarpMetrics) -> Prediction {
    for i in 0..3 {
        let (b, g) = (launch.block[i], launch.grid[i]);
        if b == 0 || g == 0 || b > dev.max_block_dim[i] || g > dev.max_grid_dim[i] {
            return unlaunchable(Limiter::ExceedsLimits);
        }
    }
    let threads =
        u64::from(launch.block[0]) * u64::from(launch.block[1]) * u64::from(launch.block[2]);
    if threads > u64::from(dev.max_threads_per_block) {
        return unlaunchable(Limiter::ExceedsLimits);
    }
    let occ: Occupancy = occupancy(
        dev,
        threads as u32,
        launch.regs_per_thread,
        launch.smem_per_block,
    );
    if occ.blocks_per_sm == 0 {
        return unlaunchable(match occ.limiter {
            OccupancyLimiter::Registers => Limiter::ExceedsRegisters,
            OccupancyLimiter::SharedMemory => Limiter::ExceedsSharedMemory,
            _ => Limiter::ExceedsLimits,
        });
    }
    let k = per_warp(dev, m);
    let blocks = u64::from(launch.grid[0]) * u64::from(launch.grid[1]) * u64::from(launch.grid[2]);
    let a = u64::from(occ.blocks_per_sm);
    let sms = u64::from(dev.sm_count);
    let wpb = u64::from(occ.warps_per_block);
    let per_wave = a * sms;
    let waves = blocks.div_ceil(per_wave);
    let rest = blocks - (waves - 1) * per_wave;
    let last_blocks_on_sm = rest.div_ceil(sms);
    let last_sms = if rest < sms { rest } else { sms };
    let last = wave(
        dev,
        &k,
        last_blocks_on_sm * wpb,
        last_blocks_on_sm,
        last_sms,
    );
    let (cycles, first, first_blocks_on_sm) = if waves > 1 {
        let full = wave(dev, &k, a * wpb, a, sms);
        ((waves - 1) as f64 * full.cycles + last.cycles, full, a)
    } else {
        (last.cycles, last, last_blocks_on_sm)
    };
    let limiter = if blocks < sms {
        Limiter::TooFewBlocks
    } else {
        match first.regime {
            Regime::Compute => Limiter::Compute,
            Regime::Bandwidth => Limiter::MemoryBandwidth,
            Regime::Latency => Limiter::MemoryLatency,
            Regime::FewWarps if first_blocks_on_sm < a => Limiter::TooFewBlocks,
            Regime::FewWarps => Limiter::Occupancy(occ.limiter),
        }
    };
    Prediction {
        cycles,
        time_us: cycles / dev.sm_clock_mhz,
        mwp: first.mwp,
        cwp: first.cwp,
        active_warps_per_sm: (first_blocks_on_sm * wpb) as u32,
        active_blocks_per_sm: first_blocks_on_sm as u32,
        waves,
        limiter,
    }
}
