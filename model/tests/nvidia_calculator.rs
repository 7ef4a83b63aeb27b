//! klaraptor's occupancy equals NVIDIA's own occupancy calculator, `cuda_occupancy.h` (the
//! host-side header of the CUDA toolkit that `scripts/setup` installs under
//! `.toolchain/cuda/include`), on random inputs for every architecture table: block sizes,
//! register counts, shared memory and carveout preferences.
//!
//! This is an oracle independent of our code, available without a GPU; the GPU sweep
//! (`tests/occupancy_replay.rs`) then checks the driver itself. The header is only compiled
//! and called here, as a test oracle. The kernel is described as one that opted in to the
//! maximum dynamic shared memory, as the model assumes (see `occupancy.rs`).

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

use klaraptor_model::device::known_archs;
use klaraptor_model::occupancy::{occupancy_with_carveout, Carveout};
use klaraptor_model::Device;

const ORACLE: &str = r#"
#include <cstdio>
#include <cuda_occupancy.h>

int main()
{
    int major, minor, sms, tpb, tpsm, regs_block, regs_sm, warp, threads, regs, carveout;
    unsigned long smem_block, smem_sm, optin, reserved, smem;
    while (std::scanf("%d %d %d %d %d %d %d %d %lu %lu %lu %lu %d %d %lu %d", &major, &minor,
                      &sms, &tpb, &tpsm, &regs_block, &regs_sm, &warp, &smem_block, &smem_sm,
                      &optin, &reserved, &threads, &regs, &smem, &carveout) == 16) {
        cudaOccDeviceProp p;
        p.computeMajor = major;
        p.computeMinor = minor;
        p.maxThreadsPerBlock = tpb;
        p.maxThreadsPerMultiprocessor = tpsm;
        p.regsPerBlock = regs_block;
        p.regsPerMultiprocessor = regs_sm;
        p.warpSize = warp;
        p.sharedMemPerBlock = smem_block;
        p.sharedMemPerMultiprocessor = smem_sm;
        p.numSms = sms;
        p.sharedMemPerBlockOptin = optin;
        p.reservedSharedMemPerBlock = reserved;
        cudaOccFuncAttributes a;
        a.maxThreadsPerBlock = tpb;
        a.numRegs = regs;
        a.sharedSizeBytes = 0;
        a.partitionedGCConfig = PARTITIONED_GC_OFF;
        a.shmemLimitConfig = FUNC_SHMEM_LIMIT_OPTIN;
        a.maxDynamicSharedSizeBytes = optin;
        a.numBlockBarriers = 1;
        a.virtualResourceCount = 0;
        cudaOccDeviceState s;
        s.carveoutConfig = carveout;
        cudaOccResult r;
        cudaOccError e = cudaOccMaxActiveBlocksPerMultiprocessor(&r, &p, &a, &s, threads, smem);
        std::printf("%d %d\n", (int)e, e == CUDA_OCC_SUCCESS ? r.activeBlocksPerMultiprocessor : 0);
    }
    return 0;
}
"#;

struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        // xorshift64*: enough mixing for picking test inputs.
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n
    }
}

#[test]
fn occupancy_equals_cuda_occupancy_h_on_every_architecture() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let include = root.join(".toolchain/cuda/include");
    assert!(
        include.join("cuda_occupancy.h").exists(),
        "{}: cuda_occupancy.h missing; run scripts/setup (it installs the CUDA toolkit headers)",
        include.display()
    );
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("oracle.cpp");
    std::fs::write(&src, ORACLE).unwrap();
    let exe = dir.path().join("oracle");
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    let out = Command::new(&cxx)
        .arg("-O1")
        .arg("-I")
        .arg(&include)
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .output()
        .unwrap_or_else(|e| panic!("cannot run the C++ compiler `{cxx}` ({e}); set CXX"));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let mut rng = Rng(0x0cc0_9a2c_ee1d_5eed);
    let mut input = String::new();
    let mut cases = Vec::new();
    for cc in known_archs() {
        let d = Device::for_arch(cc.major, cc.minor).unwrap();
        let optin = u64::from(d.shared_memory.per_block_optin);
        // Every register count with every warp count (and one thread more), no shared
        // memory, plus random cases.
        let mut grid = Vec::new();
        for regs in 0..=255u32 {
            for warps in 1..=33u32 {
                grid.push((32 * warps, regs, 0u32, -1i32));
                grid.push((32 * warps - 31, regs, 0, -1));
            }
        }
        for _ in 0..5000 {
            let threads = match rng.below(4) {
                0 => 1 + rng.below(64),
                1 => 32 * (1 + rng.below(32)),
                _ => 1 + rng.below(1100),
            } as u32;
            let regs = match rng.below(3) {
                0 => rng.below(256), // 0..=255: no kernel can use more
                _ => 8 + rng.below(120),
            } as u32;
            let smem = match rng.below(6) {
                0 | 1 => 0,
                2 => optin - rng.below(3) + 1,
                _ => rng.below(optin + 2000),
            } as u32;
            let carveout: i32 = match rng.below(3) {
                0 => rng.below(101) as i32,
                _ => -1,
            };
            grid.push((threads, regs, smem, carveout));
        }
        for (threads, regs, smem, carveout) in grid {
            writeln!(
                input,
                "{} {} {} {} {} {} {} {} {} {} {} {} {threads} {regs} {smem} {carveout}",
                cc.major,
                cc.minor,
                d.sm_count,
                d.max_threads_per_block,
                d.max_threads_per_sm,
                d.registers.per_block,
                d.registers.per_sm,
                d.warp_size,
                d.shared_memory.per_block,
                d.shared_memory.per_sm,
                optin,
                d.shared_memory.reserved_per_block
            )
            .unwrap();
            cases.push((d.clone(), threads, regs, smem, carveout));
        }
    }
    let input_path = dir.path().join("cases.txt");
    std::fs::write(&input_path, &input).unwrap();
    let run = Command::new(&exe)
        .stdin(std::fs::File::open(&input_path).unwrap())
        .output()
        .unwrap();
    assert!(run.status.success(), "{run:?}");
    let answers = String::from_utf8(run.stdout).unwrap();
    let answers: Vec<&str> = answers.lines().collect();
    assert_eq!(answers.len(), cases.len());
    let mut nonzero = 0;
    for ((d, threads, regs, smem, carveout), line) in cases.iter().zip(answers) {
        let mut f = line.split_whitespace().map(|v| v.parse::<i64>().unwrap());
        let (err, blocks) = (f.next().unwrap(), f.next().unwrap());
        let c = if *carveout < 0 {
            Carveout::Default
        } else {
            Carveout::Percent(*carveout as u32)
        };
        let ours = occupancy_with_carveout(d, *threads, *regs, *smem, c);
        // The calculator refuses (error) what cannot run; ours says 0 blocks.
        let theirs = if err == 0 { blocks } else { 0 };
        assert_eq!(
            i64::from(ours.blocks_per_sm),
            theirs,
            "sm_{}: threads {threads}, regs {regs}, smem {smem}, carveout {carveout}: \
             calculator {theirs} (error {err}), klaraptor {ours:?}",
            d.compute_capability
        );
        nonzero += usize::from(theirs > 0);
    }
    assert!(nonzero > cases.len() / 2, "only {nonzero} launchable cases");
}
