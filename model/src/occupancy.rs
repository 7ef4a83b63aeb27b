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
//!
//! The computation is `kl_occupancy` of the C model (`c/kl_model.c`), which the rational
//! programs run too.

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
    crate::ffi::occupancy(
        dev,
        threads_per_block,
        regs_per_thread,
        smem_per_block,
        carveout,
    )
}

/// The block size `cudaOccupancyMaxPotentialBlockSize` suggests for a kernel
/// ([`max_potential_block_size`]), and what it achieves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PotentialBlockSize {
    /// Threads per block (1-D).
    pub block_size: u32,
    /// Resident blocks per SM at that size.
    pub blocks_per_sm: u32,
    /// `block_size × blocks_per_sm`: the occupancy the search maximises.
    pub threads_per_sm: u32,
    /// `blocks_per_sm × sm_count`: the smallest grid that fills every SM at that occupancy
    /// (the API's `minGridSize`).
    pub min_grid_size: u32,
}

/// The block size `cudaOccupancyMaxPotentialBlockSize(&minGrid, &block, kernel, 0, 0)`
/// returns (no dynamic shared memory beyond `smem_per_block`, no block-size limit), computed
/// with [`occupancy`] instead of the driver; `None` when no block size can launch (the API
/// then returns block 0).
///
/// What this relies on, from the CUDA runtime's documentation of the function (the comment
/// of `cudaOccupancyMaxPotentialBlockSizeVariableSMemWithFlags` in `cuda_runtime.h`, which
/// the plain form calls, and the driver API's `cuOccupancyMaxPotentialBlockSize`): it
/// "returns … a suggested grid / block size pair that achieves the best potential occupancy
/// (i.e. the maximum number of active warps with the smallest number of blocks)". The header's
/// inline search makes that precise, and is what is reproduced here (rules, not its code):
/// - the block sizes tried are the multiples of the warp size (the search granularity) from
///   the largest block the kernel may have down to one warp; the largest is the device's
///   `max_threads_per_block` (with no limit given, the kernel's own `maxThreadsPerBlock`
///   attribute, which `__launch_bounds__` or its registers may lower, bounds it too: a size
///   over the register limit gets 0 blocks from [`occupancy`], so it never wins; a
///   `__launch_bounds__` limit is not known here). When that largest size is not a multiple
///   of the warp size it is tried itself first, then the multiples below it;
/// - the occupancy of a size is `size × resident blocks per SM` threads (the API's
///   `cudaOccupancyMaxActiveBlocksPerMultiprocessor`, which [`occupancy`] equals on the
///   H200, `tests/occupancy_replay.rs`);
/// - the sizes are tried from the largest down and a size replaces the best only with
///   strictly more threads, so among equal occupancies the largest block wins (the fewest
///   blocks); stopping early once the SM is full, as the header does, changes nothing.
///
/// `smem_per_block` is the block's shared memory: the kernel's static shared memory plus the
/// dynamic amount the launch would pass as `dynamicSMemSize` (the same for every size).
pub fn max_potential_block_size(
    dev: &Device,
    regs_per_thread: u32,
    smem_per_block: u32,
) -> Option<PotentialBlockSize> {
    let warp = dev.warp_size.max(1);
    let limit = dev.max_threads_per_block;
    let mut best: Option<PotentialBlockSize> = None;
    // The limit itself, then every multiple of the warp size below it, largest first.
    let below = (1..=(limit.saturating_sub(1) / warp))
        .rev()
        .map(|k| k * warp);
    for size in std::iter::once(limit).chain(below) {
        if size == 0 {
            continue;
        }
        let blocks = occupancy(dev, size, regs_per_thread, smem_per_block).blocks_per_sm;
        let threads = u64::from(size) * u64::from(blocks);
        if threads > best.map_or(0, |b| u64::from(b.threads_per_sm)) {
            best = Some(PotentialBlockSize {
                block_size: size,
                blocks_per_sm: blocks,
                threads_per_sm: u32::try_from(threads).unwrap_or(UNLIMITED),
                min_grid_size: blocks.saturating_mul(dev.sm_count),
            });
        }
    }
    best
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
    fn potential_block_size_by_hand() {
        let d = sm(9, 0);
        let at = |regs, smem| max_potential_block_size(&d, regs, smem).unwrap();
        // 32 regs: 1024 threads take 2 blocks by warps and registers (64 warps): the SM is
        // full at the first size tried.
        let p = at(32, 0);
        assert_eq!(
            (p.block_size, p.blocks_per_sm, p.threads_per_sm),
            (1024, 2, 2048)
        );
        assert_eq!(p.min_grid_size, 2 * 132);
        // 40 regs (1280/warp): 12 warps per sub-partition, 48 per SM = 1536 threads. 1024
        // threads (32 warps) fit once: 1024. 768 (24 warps) fit twice: 1536, the most any
        // size reaches; 512 × 3 and 384 × 4 tie with it, and the largest block wins.
        let p = at(40, 0);
        assert_eq!(
            (p.block_size, p.blocks_per_sm, p.threads_per_sm),
            (768, 2, 1536)
        );
        // 33 regs round to the same 1280 per warp.
        assert_eq!(at(33, 0).block_size, 768);
        // 64 regs (2048/warp): 32 warps per SM; 1024 threads fit once, nothing does better.
        assert_eq!(at(64, 0).block_size, 1024);
        // 72 regs (2304/warp): 7 warps per sub-partition, 28 per SM; 896 threads (28 warps)
        // fit once (64512 registers), 928 do not launch.
        let p = at(72, 0);
        assert_eq!((p.block_size, p.threads_per_sm), (896, 896));
        // 255 regs (8192/warp): 8 warps per SM, and more than 8 warps do not launch: 256.
        let p = at(255, 0);
        assert_eq!(
            (p.block_size, p.blocks_per_sm, p.min_grid_size),
            (256, 1, 132)
        );
        // Shared memory: 150000 B + 1 KiB reserved -> 151040 B, one block per SM: every
        // size gives its own size, so 1024.
        let p = at(16, 150_000);
        assert_eq!((p.block_size, p.blocks_per_sm), (1024, 1));
        // 60000 B -> 61056 B per block, 3 per SM: 1024 × 2 (warps) = 2048 still wins.
        assert_eq!(at(16, 60_000).block_size, 1024);
        // 110000 B -> 111104 B, 2 per SM: 1024 × 2 = 2048.
        assert_eq!(at(16, 110_000).threads_per_sm, 2048);
        // 256 regs are over the per-thread limit: no size launches (the API returns 0).
        assert_eq!(max_potential_block_size(&d, 256, 0), None);
        // So is more shared memory than a block may opt in to.
        assert_eq!(max_potential_block_size(&d, 16, 232_449), None);
    }

    #[test]
    fn potential_block_size_ties_and_limits() {
        // sm_86: 1536 threads per SM. 1024 threads fit once (1024), 768 twice (1536), as do
        // 512 × 3 and 384 × 4 ...: the largest of the ties, 768.
        let a = sm(8, 6);
        let p = max_potential_block_size(&a, 32, 0).unwrap();
        assert_eq!((p.block_size, p.blocks_per_sm), (768, 2));
        // A largest block of 1000 threads (32 warps, not a multiple of the warp size) fits
        // twice on sm_90: 2000 threads; 512 fits four times: 2048, which wins.
        let mut odd = sm(9, 0);
        odd.max_threads_per_block = 1000;
        let p = max_potential_block_size(&odd, 32, 0).unwrap();
        assert_eq!((p.block_size, p.threads_per_sm), (512, 2048));
        // With one block per SM a size gives itself: 1000 is tried itself, and beats 992.
        odd.max_blocks_per_sm = 1;
        let p = max_potential_block_size(&odd, 32, 0).unwrap();
        assert_eq!((p.block_size, p.threads_per_sm), (1000, 1000));
    }

    /// The search applied to the API's own answers: for every kernel of the H200 sweep
    /// (`tests/fixtures/occupancy-h200.csv`, answers of
    /// `cudaOccupancyMaxActiveBlocksPerMultiprocessor` at every multiple of 32 up to 1024,
    /// default carveout, no dynamic shared memory), the block size with the most resident
    /// threads, the largest on ties, equals [`max_potential_block_size`] on the device the
    /// sweep's header describes. This checks the occupancy at every size the search visits
    /// and the sizes it visits, over registers 10..255 and static shared memory up to 48 KiB
    /// (the tie rule itself is the documented one on both sides).
    #[test]
    fn potential_block_size_from_the_h200_sweep() {
        use std::collections::BTreeMap;
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/occupancy-h200.csv");
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e} (the committed H200 sweep)", path.display()));
        let mut attrs = BTreeMap::new();
        // (kernel, regs, static smem, max dyn smem) -> block size -> blocks
        type Key = (String, u32, u32, String);
        let mut answers: BTreeMap<Key, BTreeMap<u32, u32>> = BTreeMap::new();
        for (i, l) in text.lines().enumerate() {
            if let Some(a) = l.strip_prefix("# attr ") {
                let mut it = a.split_whitespace();
                let (n, v) = (
                    it.next().unwrap(),
                    it.next().unwrap().parse::<i64>().unwrap(),
                );
                attrs.insert(n.to_string(), v);
                continue;
            }
            if l.starts_with('#') || l.starts_with("kernel,") || l.trim().is_empty() {
                continue;
            }
            let f: Vec<&str> = l.split(',').collect();
            assert_eq!(f.len(), 9, "{}:{}", path.display(), i + 1);
            let num = |j: usize| f[j].parse::<i64>().unwrap();
            // The default carveout and no dynamic shared memory: what the search asks.
            if num(4) != -1 || num(6) != 0 {
                continue;
            }
            let blocks = if num(7) == 0 { num(8) as u32 } else { 0 };
            answers
                .entry((f[0].into(), num(1) as u32, num(2) as u32, f[3].into()))
                .or_default()
                .insert(num(5) as u32, blocks);
        }
        let dev = Device::from_attributes(&attrs).unwrap();
        assert_eq!((dev.max_threads_per_block, dev.warp_size), (1024, 32));
        let mut checked = 0;
        for ((kernel, regs, smem, _), by_size) in &answers {
            let sizes: Vec<u32> = (1..=32).map(|k| 32 * k).collect();
            assert!(
                sizes.iter().all(|s| by_size.contains_key(s)),
                "{kernel}: the sweep lacks a multiple of 32"
            );
            let mut api: Option<(u32, u64)> = None;
            for &s in sizes.iter().rev() {
                let t = u64::from(s) * u64::from(by_size[&s]);
                if t > api.map_or(0, |(_, bt)| bt) {
                    api = Some((s, t));
                }
            }
            let ours = max_potential_block_size(&dev, *regs, *smem);
            assert_eq!(
                ours.map(|p| (p.block_size, u64::from(p.threads_per_sm))),
                api,
                "{kernel} ({regs} regs, {smem} B static shared memory)"
            );
            checked += 1;
        }
        assert!(checked >= 20, "only {checked} kernels in the sweep");
    }

    #[test]
    fn zero_threads_and_zero_registers() {
        let d = sm(9, 0);
        assert_eq!(occupancy(&d, 0, 32, 0).blocks_per_sm, 0);
        let o = occupancy(&d, 128, 0, 0);
        assert_eq!((o.by_registers, o.blocks_per_sm), (UNLIMITED, 16));
    }
}
