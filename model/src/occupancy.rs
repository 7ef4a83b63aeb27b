//! Occupancy: how many blocks of a kernel one SM holds at once.
//!
//! This is the calculation `cudaOccupancyMaxActiveBlocksPerMultiprocessor` performs, written
//! from the rules NVIDIA documents for it (the occupancy calculator and the programming
//! guide), and checked row by row against the API on a real GPU
//! (`tests/occupancy_replay.rs`). The resident blocks per SM are the minimum of five limits:
//!
//! 1. **warps**: `floor((max_threads_per_sm / warp_size) / warps_per_block)`, where
//!    `warps_per_block = ceil(threads / warp_size)` (a partial warp occupies a whole slot);
//!    a block of more than `max_threads_per_block` threads cannot launch.
//! 2. **blocks**: `max_blocks_per_sm`.
//! 3. **registers**: each warp gets `ceil(regs × warp_size / alloc_unit) × alloc_unit`
//!    registers. The register file is split evenly over the SM's sub-partitions, and a warp
//!    lives in one sub-partition, so an SM holds
//!    `sub_partitions × floor((per_sm / sub_partitions) / regs_per_warp)` warps, i.e.
//!    `floor(that / warps_per_block)` blocks. A block cannot launch when
//!    `regs_per_warp × warps_per_block` exceeds `per_block`, nor when
//!    `regs_per_warp × ceil(warps_per_block / sub_partitions) × sub_partitions` does (the
//!    hardware checks the per-block limit as if every sub-partition received the same number
//!    of warps), nor when `regs > max_per_thread`. A kernel with no registers is not limited.
//! 4. **shared memory**: a block takes `ceil((smem + reserved_per_block) / alloc_unit) ×
//!    alloc_unit` bytes, and cannot launch when that exceeds `per_block_optin +
//!    reserved_per_block` (the kernel is assumed to have opted in, with
//!    `cudaFuncSetAttribute(…, cudaFuncAttributeMaxDynamicSharedMemorySize, …)`, when it needs
//!    more than the default 48 KiB; without it such a launch fails anyway). The SM's capacity
//!    is the carveout: the preference (`per_sm` by default, or a percentage of it) rounded up
//!    to the next carveout the architecture offers; if one block does not fit in that, the
//!    driver takes the smallest carveout that holds one block. Capacity / block bytes,
//!    rounded down.
//! 5. **barriers** (sm_90: 2 per resident-block slot): never binding for kernels using the one
//!    `__syncthreads` barrier, so not modelled.

use crate::device::Device;

/// The most carveout options a device may list (the C structure has room for this many).
pub const MAX_CARVEOUTS: usize = 16;

/// "No limit" in the per-resource limits.
pub const UNLIMITED: u32 = u32::MAX;

/// The resource that bounds the resident blocks (or, with 0 blocks, forbids the launch).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OccupancyLimiter {
    /// Threads (warp slots) per SM, or, with 0 blocks, threads per block.
    Warps,
    /// The resident-block limit per SM.
    Blocks,
    Registers,
    SharedMemory,
}

impl OccupancyLimiter {
    /// The code of the C model (`KL_OCC_*`).
    pub fn code(self) -> i32 {
        match self {
            OccupancyLimiter::Warps => 1,
            OccupancyLimiter::Blocks => 2,
            OccupancyLimiter::Registers => 3,
            OccupancyLimiter::SharedMemory => 4,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            OccupancyLimiter::Warps => "warps",
            OccupancyLimiter::Blocks => "blocks",
            OccupancyLimiter::Registers => "registers",
            OccupancyLimiter::SharedMemory => "shared memory",
        }
    }
}

/// The shared-memory/L1 split the kernel asks for
/// (`cudaFuncAttributePreferredSharedMemoryCarveout`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Carveout {
    /// No preference (-1): the largest shared-memory carveout.
    Default,
    /// A percentage (0..=100) of `shared_memory.per_sm`; larger values count as 100.
    Percent(u32),
}

impl Carveout {
    /// The C model's encoding: -1 for the default, else the percentage.
    pub fn code(self) -> i32 {
        match self {
            Carveout::Default => -1,
            Carveout::Percent(p) => p.min(100) as i32,
        }
    }
}

/// The result of the occupancy calculation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Occupancy {
    /// Resident blocks per SM; 0 when the block cannot launch.
    pub blocks_per_sm: u32,
    /// `blocks_per_sm × warps_per_block`.
    pub warps_per_sm: u32,
    pub warps_per_block: u32,
    /// The first of warps, registers, shared memory, blocks whose limit equals
    /// `blocks_per_sm` (ties are common: see the per-resource limits).
    pub limiter: OccupancyLimiter,
    pub by_warps: u32,
    pub by_blocks: u32,
    /// [`UNLIMITED`] for a kernel without registers.
    pub by_registers: u32,
    /// [`UNLIMITED`] when a block takes no shared memory at all.
    pub by_shared_memory: u32,
}

fn div_ceil(a: u64, b: u64) -> u64 {
    a.div_ceil(b)
}

fn round_up(a: u64, unit: u64) -> u64 {
    div_ceil(a, unit) * unit
}

/// The smallest carveout (bytes) that holds `bytes`; `None` when none does.
fn snap_carveout(dev: &Device, bytes: u64) -> Option<u64> {
    dev.shared_memory
        .carveout_kib
        .iter()
        .map(|&k| u64::from(k) * 1024)
        .find(|&c| c >= bytes)
}

/// Resident blocks per SM with the driver's default carveout; `smem_per_block` is the
/// block's static plus dynamic shared memory (bytes).
pub fn occupancy(
    dev: &Device,
    threads_per_block: u32,
    regs_per_thread: u32,
    smem_per_block: u32,
) -> Occupancy {
    occupancy_with_carveout(
        dev,
        threads_per_block,
        regs_per_thread,
        smem_per_block,
        Carveout::Default,
    )
}

/// [`occupancy`] with a carveout preference.
pub fn occupancy_with_carveout(
    dev: &Device,
    threads_per_block: u32,
    regs_per_thread: u32,
    smem_per_block: u32,
    carveout: Carveout,
) -> Occupancy {
    let warp = u64::from(dev.warp_size);
    let threads = u64::from(threads_per_block);
    let wpb = div_ceil(threads, warp);

    // 1. Warp slots.
    let by_warps = if threads == 0 || threads > u64::from(dev.max_threads_per_block) {
        0
    } else {
        (u64::from(dev.max_threads_per_sm) / warp) / wpb
    };

    // 2. Resident-block slots.
    let by_blocks = u64::from(dev.max_blocks_per_sm);

    // 3. Registers, allocated per warp within one sub-partition's share of the file.
    let r = &dev.registers;
    let parts = u64::from(dev.sub_partitions);
    let regs_per_warp = round_up(u64::from(regs_per_thread) * warp, u64::from(r.alloc_unit));
    let by_registers = if regs_per_thread > r.max_per_thread
        || regs_per_warp * wpb > u64::from(r.per_block)
        || regs_per_warp * round_up(wpb, parts) > u64::from(r.per_block)
    {
        0
    } else {
        match (u64::from(r.per_sm) / parts).checked_div(regs_per_warp) {
            // A kernel without registers is not limited by them.
            None => u64::from(UNLIMITED),
            // A block of no threads (wpb = 0) does not launch.
            Some(warps_per_part) => (warps_per_part * parts).checked_div(wpb).unwrap_or(0),
        }
    };

    // 4. Shared memory, within the carveout the driver picks.
    let s = &dev.shared_memory;
    let block_bytes = round_up(
        u64::from(smem_per_block) + u64::from(s.reserved_per_block),
        u64::from(s.alloc_unit),
    );
    let by_shared_memory =
        if block_bytes > u64::from(s.per_block_optin) + u64::from(s.reserved_per_block) {
            0
        } else if block_bytes == 0 {
            u64::from(UNLIMITED)
        } else {
            let preferred = match carveout {
                Carveout::Default => u64::from(s.per_sm),
                Carveout::Percent(p) => u64::from(p.min(100)) * u64::from(s.per_sm) / 100,
            };
            // Validation guarantees per_sm (and so every preference) fits the largest carveout.
            let preferred = snap_carveout(dev, preferred).unwrap_or(u64::from(s.per_sm));
            let capacity = if preferred >= block_bytes {
                preferred
            } else {
                snap_carveout(dev, block_bytes).unwrap_or(u64::from(s.per_sm))
            };
            capacity / block_bytes
        };

    let limits = [
        (OccupancyLimiter::Warps, by_warps),
        (OccupancyLimiter::Registers, by_registers),
        (OccupancyLimiter::SharedMemory, by_shared_memory),
        (OccupancyLimiter::Blocks, by_blocks),
    ];
    let blocks = limits.iter().map(|&(_, v)| v).min().unwrap_or(0);
    let limiter = limits
        .iter()
        .find(|&&(_, v)| v == blocks)
        .map(|&(l, _)| l)
        .unwrap_or(OccupancyLimiter::Warps);
    let clamp = |v: u64| u32::try_from(v).unwrap_or(UNLIMITED);
    Occupancy {
        blocks_per_sm: clamp(blocks),
        warps_per_sm: clamp(blocks * wpb),
        warps_per_block: clamp(wpb),
        limiter,
        by_warps: clamp(by_warps),
        by_blocks: clamp(by_blocks),
        by_registers: clamp(by_registers),
        by_shared_memory: clamp(by_shared_memory),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sm(major: u32, minor: u32) -> Device {
        Device::for_arch(major, minor).unwrap()
    }

    // Every expected value below is worked out by hand from the rules in the module doc.

    #[test]
    fn warp_slots_bound_small_register_kernels() {
        let d = sm(9, 0);
        // 256 threads = 8 warps; 64 warp slots -> 8 blocks; 32 regs -> 1024 regs/warp,
        // 16384/1024 = 16 warps per sub-partition, 64 per SM -> 8 blocks too.
        let o = occupancy(&d, 256, 32, 0);
        assert_eq!((o.blocks_per_sm, o.warps_per_sm), (8, 64));
        assert_eq!((o.by_warps, o.by_registers), (8, 8));
        assert_eq!(o.limiter, OccupancyLimiter::Warps);
        // 1024 blocks of 1..32 threads: 64 slots, but at most 32 blocks.
        let o = occupancy(&d, 1, 16, 0);
        assert_eq!((o.blocks_per_sm, o.limiter), (32, OccupancyLimiter::Blocks));
        assert_eq!(o.warps_per_sm, 32);
        // 33 threads take 2 warps -> 32 blocks by warps and by blocks: warps listed first.
        let o = occupancy(&d, 33, 16, 0);
        assert_eq!((o.blocks_per_sm, o.limiter), (32, OccupancyLimiter::Warps));
    }

    #[test]
    fn registers_round_per_warp_and_per_sub_partition() {
        let d = sm(9, 0);
        // 40 regs: 1280/warp (multiple of 256). 16384/1280 = 12 warps per sub-partition
        // -> 48 per SM; 256-thread blocks (8 warps) -> 6.
        let o = occupancy(&d, 256, 40, 0);
        assert_eq!(
            (o.blocks_per_sm, o.limiter),
            (6, OccupancyLimiter::Registers)
        );
        // 33 regs: 1056 -> 1280 per warp, same as 40.
        assert_eq!(occupancy(&d, 256, 33, 0).blocks_per_sm, 6);
        // 255 regs: 8160 -> 8192 per warp; 2 warps per sub-partition, 8 per SM.
        // 256 threads (8 warps): 8192 × 8 = 65536 fits the block limit -> 1 block.
        let o = occupancy(&d, 256, 255, 0);
        assert_eq!((o.blocks_per_sm, o.by_registers), (1, 1));
        // 288 threads (9 warps): 8192 × 9 > 65536 -> cannot launch.
        let o = occupancy(&d, 288, 255, 0);
        assert_eq!(
            (o.blocks_per_sm, o.limiter),
            (0, OccupancyLimiter::Registers)
        );
        // 128 regs, 160 threads (5 warps): 4096 × 5 = 20480 fits; rounded to 8 warps
        // (sub-partitions) 32768 fits too. Per sub-partition 4 warps -> 16 per SM -> 3.
        assert_eq!(occupancy(&d, 160, 128, 0).blocks_per_sm, 3);
        // 64 regs, 1024 threads: 2048 × 32 = 65536 fits -> 1 block.
        assert_eq!(occupancy(&d, 1024, 64, 0).blocks_per_sm, 1);
        // 72 regs (2304/warp), 896 threads (28 warps): 2304 × 28 = 64512 fits, but the
        // hardware check with 28 rounded to 28 (already a multiple of 4) also fits:
        // 16384/2304 = 7 per sub-partition, 28 per SM -> 1 block.
        assert_eq!(occupancy(&d, 896, 72, 0).blocks_per_sm, 1);
        // 72 regs, 928 threads (29 warps): 2304 × 29 = 66816 > 65536 -> 0.
        assert_eq!(occupancy(&d, 928, 72, 0).blocks_per_sm, 0);
        // 56 regs (1792/warp), 1120 threads is over the thread limit -> 0 by warps.
        let o = occupancy(&d, 1120, 56, 0);
        assert_eq!((o.blocks_per_sm, o.limiter), (0, OccupancyLimiter::Warps));
    }

    #[test]
    fn the_per_block_register_check_rounds_warps_to_sub_partitions() {
        // Where a block may use the whole register file (sm_70..sm_90), the per-block check
        // coincides with the per-sub-partition limit: 80 regs (2560/warp), 25 warps: 64000
        // fits per block, but 16384 / 2560 = 6 warps per sub-partition hold only 24.
        let d = sm(9, 0);
        assert_eq!(occupancy(&d, 800, 80, 0).blocks_per_sm, 0);
        assert_eq!(occupancy(&d, 960, 64, 0).blocks_per_sm, 1);
        // With a smaller per-block limit the rounding shows: 72 regs (2304/warp) and
        // 14 warps need 32256 <= 32768, but 16 warps' worth (36864) does not fit.
        let mut half = sm(9, 0);
        half.registers.per_block = 32_768;
        assert_eq!(occupancy(&half, 448, 72, 0).blocks_per_sm, 0);
        assert_eq!(occupancy(&half, 416, 72, 0).blocks_per_sm, 0);
        // 12 warps: 27648 either way; 7 per sub-partition, 28 per SM -> 2 blocks.
        assert_eq!(occupancy(&half, 384, 72, 0).blocks_per_sm, 2);
    }

    #[test]
    fn shared_memory_counts_reserved_bytes_and_granularity() {
        let d = sm(9, 0);
        // 10000 B + 1024 reserved = 11024 -> 11136 (128-byte units). 233472/11136 = 20.
        let o = occupancy(&d, 64, 16, 10_000);
        assert_eq!(
            (o.blocks_per_sm, o.limiter),
            (20, OccupancyLimiter::SharedMemory)
        );
        // No dynamic shared memory still takes the reserved 1 KiB: 228 blocks, not binding.
        assert_eq!(occupancy(&d, 64, 16, 0).by_shared_memory, 228);
        // The opt-in maximum fits exactly once; one byte more cannot launch.
        assert_eq!(occupancy(&d, 64, 16, 232_448).blocks_per_sm, 1);
        let o = occupancy(&d, 64, 16, 232_449);
        assert_eq!(
            (o.blocks_per_sm, o.limiter),
            (0, OccupancyLimiter::SharedMemory)
        );
        // sm_70: 256-byte units, nothing reserved; no shared memory is unlimited.
        let v = sm(7, 0);
        assert_eq!(occupancy(&v, 64, 16, 0).by_shared_memory, UNLIMITED);
        assert_eq!(occupancy(&v, 64, 16, 1).by_shared_memory, 384); // 98304 / 256
        assert_eq!(occupancy(&v, 64, 16, 98_304).blocks_per_sm, 1);
        assert_eq!(occupancy(&v, 64, 16, 98_305).blocks_per_sm, 0);
    }

    #[test]
    fn carveout_preference_rounds_up_to_an_offered_size() {
        let d = sm(9, 0);
        let at = |pct, smem| {
            occupancy_with_carveout(&d, 32, 16, smem, Carveout::Percent(pct)).by_shared_memory
        };
        // 25 % of 233472 = 58368 -> 64 KiB carveout; 4096 + 1024 = 5120 per block -> 12.
        assert_eq!(at(25, 4096), 12);
        // 0 % -> 0 KiB, smaller than a block: the driver takes the smallest carveout that
        // holds one block (8 KiB for 5120 B) -> 1.
        assert_eq!(at(0, 4096), 1);
        // 0 % with 20000 B: 21024 -> 21120 per block; 32 KiB carveout -> 1.
        assert_eq!(at(0, 20_000), 1);
        // 50 % = 116736 -> 132 KiB = 135168; 135168 / 5120 = 26.
        assert_eq!(at(50, 4096), 26);
        // 100 % and the default are the full 228 KiB.
        assert_eq!(at(100, 4096), 45);
        assert_eq!(occupancy(&d, 32, 16, 4096).by_shared_memory, 45);
        // Turing has no 0 KiB carveout: 0 % means 32 KiB. 4096 B -> 8 blocks.
        let t = sm(7, 5);
        assert_eq!(
            occupancy_with_carveout(&t, 32, 16, 4096, Carveout::Percent(0)).by_shared_memory,
            8
        );
    }

    #[test]
    fn other_architectures_use_their_own_limits() {
        // sm_86: 48 warps, 16 blocks. 128 threads: 12 by warps; 96 threads: 16 by warps
        // and by blocks.
        let a = sm(8, 6);
        assert_eq!(occupancy(&a, 128, 32, 0).blocks_per_sm, 12);
        assert_eq!(occupancy(&a, 96, 32, 0).blocks_per_sm, 16);
        // sm_75: 32 warps, 16 blocks, 64 KiB: 1024 threads -> 1; 512 threads -> 2.
        let t = sm(7, 5);
        assert_eq!(occupancy(&t, 1024, 32, 0).blocks_per_sm, 1);
        assert_eq!(occupancy(&t, 512, 32, 0).blocks_per_sm, 2);
        // sm_89: 24 blocks: 32-thread blocks -> 24.
        assert_eq!(occupancy(&sm(8, 9), 32, 32, 0).blocks_per_sm, 24);
    }

    #[test]
    fn zero_threads_and_zero_registers() {
        let d = sm(9, 0);
        assert_eq!(occupancy(&d, 0, 32, 0).blocks_per_sm, 0);
        let o = occupancy(&d, 128, 0, 0);
        assert_eq!((o.by_registers, o.blocks_per_sm), (UNLIMITED, 16));
    }
}
