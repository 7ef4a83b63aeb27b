//! The Rust side of the one model: the C of `c/kl_model.c` (compiled into this crate by
//! `build.rs`, through `c/ffi.c`) computes occupancy and the MWP-CWP prediction, and this
//! module hands it Rust's values as the C structures, field for field, and reads the answer
//! back. The same file is what every rational program includes ([`crate::C_MODEL`]), so
//! the link's ranking and the program's are the same computation.

use std::ffi::{c_char, c_int};

use crate::device::Device;
#[cfg(test)]
use crate::mwp_cwp::PerWarp;
use crate::mwp_cwp::{Launch, Limiter, Prediction, WarpMetrics, WarpRows};
use crate::occupancy::{Carveout, Occupancy, OccupancyLimiter, MAX_CARVEOUTS};

/// `kl_device`.
#[repr(C)]
struct KlDevice {
    name: *const c_char,
    uuid: *const c_char,
    cc_major: u32,
    cc_minor: u32,
    sm_count: u32,
    sm_clock_mhz: f64,
    warp_size: u32,
    sub_partitions: u32,
    max_threads_per_block: u32,
    max_threads_per_sm: u32,
    max_blocks_per_sm: u32,
    max_block_dim: [u32; 3],
    max_grid_dim: [u32; 3],
    regs_per_sm: u32,
    regs_per_block: u32,
    max_regs_per_thread: u32,
    reg_alloc_unit: u32,
    smem_per_sm: u32,
    smem_per_block: u32,
    smem_per_block_optin: u32,
    smem_reserved_per_block: u32,
    smem_alloc_unit: u32,
    n_carveouts: u32,
    carveout_bytes: [u32; MAX_CARVEOUTS],
    l1_unified_per_sm: u32,
    mem_latency_cycles: f64,
    l2_latency_cycles: f64,
    l1_latency_cycles: f64,
    departure_delay_coalesced_cycles: f64,
    departure_delay_coalesced_dram_cycles: f64,
    departure_delay_uncoalesced_cycles: f64,
    dram_bandwidth_gbs: f64,
    issue_cycles: f64,
    shared_issue_cycles: f64,
    block_dispatch_cycles: f64,
    warp_drain_cycles: f64,
    dram_queue_exponent: f64,
}

/// `kl_launch`.
#[repr(C)]
struct KlLaunch {
    block: [u32; 3],
    grid: [u32; 3],
    regs_per_thread: u32,
    smem_per_block: u32,
}

/// `kl_metrics`.
#[repr(C)]
struct KlMetrics {
    inst: f64,
    gld_inst: f64,
    gst_inst: f64,
    shared_inst: f64,
    sync_inst: f64,
    gld_sectors_per_req: f64,
    gst_sectors_per_req: f64,
    dram_bytes: f64,
    gld_l1_hit_rate: f64,
    mlp: f64,
    l1_reuse_loop: f64,
}

/// `kl_occupancy_result`.
#[repr(C)]
#[derive(Default)]
struct KlOccupancy {
    blocks_per_sm: u32,
    warps_per_sm: u32,
    warps_per_block: u32,
    limiter: c_int,
    by_warps: u32,
    by_blocks: u32,
    by_registers: u32,
    by_shared_memory: u32,
}

/// `kl_prediction`.
#[repr(C)]
struct KlPrediction {
    cycles: f64,
    time_us: f64,
    mwp: f64,
    cwp: f64,
    active_warps_per_sm: u32,
    active_blocks_per_sm: u32,
    waves: u64,
    limiter: c_int,
    limiter_name: *const c_char,
}

extern "C" {
    fn klaraptor_model_predict(
        d: *const KlDevice,
        l: *const KlLaunch,
        m: *const KlMetrics,
        out: *mut KlPrediction,
    );
    fn klaraptor_model_choose(ts: *const f64, blocks: *const [u32; 3], n: usize) -> c_int;
    fn klaraptor_model_all_hit(h: f64, g: f64) -> f64;
    fn klaraptor_model_warp_rows_of(block: *const u32, out: *mut WarpRows);
    #[cfg(test)]
    fn klaraptor_model_lines_per_request(s: f64, w: *const WarpRows) -> f64;
    #[cfg(test)]
    fn klaraptor_model_per_warp(
        d: *const KlDevice,
        m: *const KlMetrics,
        lanes: f64,
        w: *const WarpRows,
        out: *mut PerWarp,
    );
    fn klaraptor_model_occupancy(
        d: *const KlDevice,
        threads_per_block: u32,
        regs_per_thread: u32,
        smem_per_block: u32,
        carveout_pct: c_int,
        out: *mut KlOccupancy,
    );
}

/// A device as the C model reads it: the fields `device_to_c` writes, in `kl_device`'s
/// order. The model never reads the name and UUID (the programs' runtime does, from their
/// own `device_to_c` copy): empty strings here, so that no call allocates.
fn c_device(dev: &Device) -> KlDevice {
    let r = &dev.registers;
    let s = &dev.shared_memory;
    let c = &dev.calibration;
    let mut carveout_bytes = [0u32; MAX_CARVEOUTS];
    for (slot, k) in carveout_bytes.iter_mut().zip(&s.carveout_kib) {
        *slot = k.saturating_mul(1024);
    }
    KlDevice {
        name: c"".as_ptr(),
        uuid: c"".as_ptr(),
        cc_major: dev.compute_capability.major,
        cc_minor: dev.compute_capability.minor,
        sm_count: dev.sm_count,
        sm_clock_mhz: dev.sm_clock_mhz,
        warp_size: dev.warp_size,
        sub_partitions: dev.sub_partitions,
        max_threads_per_block: dev.max_threads_per_block,
        max_threads_per_sm: dev.max_threads_per_sm,
        max_blocks_per_sm: dev.max_blocks_per_sm,
        max_block_dim: dev.max_block_dim,
        max_grid_dim: dev.max_grid_dim,
        regs_per_sm: r.per_sm,
        regs_per_block: r.per_block,
        max_regs_per_thread: r.max_per_thread,
        reg_alloc_unit: r.alloc_unit,
        smem_per_sm: s.per_sm,
        smem_per_block: s.per_block,
        smem_per_block_optin: s.per_block_optin,
        smem_reserved_per_block: s.reserved_per_block,
        smem_alloc_unit: s.alloc_unit,
        n_carveouts: s.carveout_kib.len().min(MAX_CARVEOUTS) as u32,
        carveout_bytes,
        l1_unified_per_sm: dev.l1_unified_per_sm(),
        mem_latency_cycles: c.mem_latency_cycles.value,
        l2_latency_cycles: c.l2_latency_cycles.value,
        l1_latency_cycles: c.l1_latency_cycles.value,
        departure_delay_coalesced_cycles: c.departure_delay_coalesced_cycles.value,
        departure_delay_coalesced_dram_cycles: c.departure_delay_coalesced_dram_cycles.value,
        departure_delay_uncoalesced_cycles: c.departure_delay_uncoalesced_cycles.value,
        dram_bandwidth_gbs: c.dram_bandwidth_gbs.value,
        issue_cycles: c.issue_cycles.value,
        shared_issue_cycles: c.shared_issue_cycles.value,
        block_dispatch_cycles: c.block_dispatch_cycles.value,
        warp_drain_cycles: c.warp_drain_cycles.value,
        dram_queue_exponent: c.dram_queue_exponent.value,
    }
}

fn occupancy_limiter(code: c_int) -> OccupancyLimiter {
    match code {
        2 => OccupancyLimiter::Blocks,
        3 => OccupancyLimiter::Registers,
        4 => OccupancyLimiter::SharedMemory,
        _ => OccupancyLimiter::Warps,
    }
}

fn limiter(code: c_int) -> Limiter {
    match code {
        1 => Limiter::MemoryLatency,
        2 => Limiter::MemoryBandwidth,
        3 => Limiter::Compute,
        4 => Limiter::Occupancy(OccupancyLimiter::Warps),
        5 => Limiter::Occupancy(OccupancyLimiter::Blocks),
        6 => Limiter::Occupancy(OccupancyLimiter::Registers),
        7 => Limiter::Occupancy(OccupancyLimiter::SharedMemory),
        8 => Limiter::TooFewBlocks,
        10 => Limiter::ExceedsRegisters,
        11 => Limiter::ExceedsSharedMemory,
        12 => Limiter::BlockDispatch,
        _ => Limiter::ExceedsLimits,
    }
}

/// `kl_occupancy`.
pub(crate) fn occupancy(
    dev: &Device,
    threads_per_block: u32,
    regs_per_thread: u32,
    smem_per_block: u32,
    carveout: Carveout,
) -> Occupancy {
    let d = c_device(dev);
    let mut out = KlOccupancy::default();
    // SAFETY: `d` and `out` are valid `kl_device` and `kl_occupancy_result` values (same
    // layout, `repr(C)`; the strings `d` points at are static), and the C reads the device
    // and writes `out` only.
    unsafe {
        klaraptor_model_occupancy(
            &d,
            threads_per_block,
            regs_per_thread,
            smem_per_block,
            carveout.code(),
            &mut out,
        );
    }
    Occupancy {
        blocks_per_sm: out.blocks_per_sm,
        warps_per_sm: out.warps_per_sm,
        warps_per_block: out.warps_per_block,
        limiter: occupancy_limiter(out.limiter),
        by_warps: out.by_warps,
        by_blocks: out.by_blocks,
        by_registers: out.by_registers,
        by_shared_memory: out.by_shared_memory,
    }
}

fn metrics(m: &WarpMetrics) -> KlMetrics {
    KlMetrics {
        inst: m.inst,
        gld_inst: m.gld_inst,
        gst_inst: m.gst_inst,
        shared_inst: m.shared_inst,
        sync_inst: m.sync_inst,
        gld_sectors_per_req: m.gld_sectors_per_req,
        gst_sectors_per_req: m.gst_sectors_per_req,
        dram_bytes: m.dram_bytes,
        gld_l1_hit_rate: m.gld_l1_hit_rate,
        mlp: m.mlp,
        l1_reuse_loop: m.l1_reuse_loop,
    }
}

/// `kl_choose` over every shape.
pub(crate) fn choose(times: &[f64], blocks: &[[u32; 3]]) -> Option<usize> {
    assert_eq!(times.len(), blocks.len(), "one time per shape");
    // SAFETY: `times` and `blocks` hold `n` doubles and `n` `uint32_t[3]`, only read.
    let i = unsafe { klaraptor_model_choose(times.as_ptr(), blocks.as_ptr(), times.len()) };
    usize::try_from(i).ok()
}

/// `kl_all_hit`.
pub(crate) fn all_hit(h: f64, g: f64) -> f64 {
    // SAFETY: a pure function of two doubles.
    unsafe { klaraptor_model_all_hit(h, g) }
}

/// `kl_warp_rows_of`.
pub(crate) fn warp_rows_of(block: [u32; 3]) -> WarpRows {
    let mut out = WarpRows::default();
    // SAFETY: `block` is three `uint32_t`, `out` a `kl_warp_rows` (`repr(C)`).
    unsafe { klaraptor_model_warp_rows_of(block.as_ptr(), &mut out) };
    out
}

/// `kl_lines_per_request`.
#[cfg(test)]
pub(crate) fn lines_per_request(s: f64, w: WarpRows) -> f64 {
    // SAFETY: `w` is a `kl_warp_rows` (`repr(C)`), only read.
    unsafe { klaraptor_model_lines_per_request(s, &w) }
}

/// `kl_per_warp_costs`.
#[cfg(test)]
pub(crate) fn per_warp(dev: &Device, m: &WarpMetrics, lanes: f64, w: WarpRows) -> PerWarp {
    let d = c_device(dev);
    let km = metrics(m);
    let mut out = PerWarp::default();
    // SAFETY: as in `occupancy`; `out` is a `kl_per_warp` (`repr(C)`), written only.
    unsafe { klaraptor_model_per_warp(&d, &km, lanes, &w, &mut out) };
    out
}

/// `kl_predict`.
pub(crate) fn predict(dev: &Device, launch: &Launch, m: &WarpMetrics) -> Prediction {
    let d = c_device(dev);
    let l = KlLaunch {
        block: launch.block,
        grid: launch.grid,
        regs_per_thread: launch.regs_per_thread,
        smem_per_block: launch.smem_per_block,
    };
    let km = metrics(m);
    let mut out = KlPrediction {
        cycles: 0.0,
        time_us: 0.0,
        mwp: 0.0,
        cwp: 0.0,
        active_warps_per_sm: 0,
        active_blocks_per_sm: 0,
        waves: 0,
        limiter: 0,
        limiter_name: std::ptr::null(),
    };
    // SAFETY: as in `occupancy`: valid `repr(C)` values of the C structures; the C writes
    // `out` only (its `limiter_name` points at a static string, not read here).
    unsafe { klaraptor_model_predict(&d, &l, &km, &mut out) };
    Prediction {
        cycles: out.cycles,
        time_us: out.time_us,
        mwp: out.mwp,
        cwp: out.cwp,
        active_warps_per_sm: out.active_warps_per_sm,
        active_blocks_per_sm: out.active_blocks_per_sm,
        waves: out.waves,
        limiter: limiter(out.limiter),
    }
}
