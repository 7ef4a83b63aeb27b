//! A rational program's model predicts what the crate's does.
//!
//! The crate calls the C model (`c/kl_model.c`) through `src/ffi.rs`; a rational program
//! compiles the same source ([`C_MODEL`]) with its device written by [`device_to_c`]. Both
//! hand the C a device, a launch and metrics their own way; this test holds the two ways
//! equal (it held the former Rust transcription equal to the C until the model was written
//! once).
//!
//! 100 000 random cases — random devices from the architecture tables (SM count, clock,
//! sub-partitions and every calibration figure randomised, written with `device_to_c`),
//! launch shapes (valid and invalid), registers, shared memory, carveouts, and per-warp
//! metrics spanning ten orders of magnitude plus zeros, negatives, NaN and infinities — are
//! evaluated by `kl_occupancy`/`kl_predict` compiled with `cc -O2` and by the crate.
//!
//! Occupancy, waves, active blocks/warps and the limiter must be equal. The floating-point
//! results must agree to a relative 1e-12: the same C on the same machine agrees bit for bit
//! (the test reports how many do) unless the two compiles contract `a*b+c` differently
//! (`-std=c99` keeps GCC from contracting; each contraction changes one rounding, about
//! 1e-16 relative, through a few dozen operations), far below anything that could change
//! which block shape wins.

mod common;

use std::fmt::Write as _;
use std::process::Command;

use common::compile;
use klaraptor_model::device::known_archs;
use klaraptor_model::occupancy::{occupancy_with_carveout, Carveout};
use klaraptor_model::{device_to_c, predict, Device, Launch, WarpMetrics, C_MODEL};

const CASES: usize = 100_000;
const DEVICES: usize = 48;
const TOLERANCE: f64 = 1e-12;

/// splitmix64: a small, well-mixed deterministic generator for reproducible random tests.
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform integer in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo + 1)
    }

    /// Log-uniform in `[lo, hi)`, `lo > 0`.
    pub fn log_uniform(&mut self, lo: f64, hi: f64) -> f64 {
        (lo.ln() + self.unit() * (hi.ln() - lo.ln())).exp()
    }

    pub fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.next_u64() as usize % items.len()]
    }
}

fn random_device(rng: &mut Rng, i: usize) -> Device {
    let archs = known_archs();
    let cc = archs[i % archs.len()];
    let mut d = Device::for_arch(cc.major, cc.minor).unwrap();
    d.name = format!("random device {i} \"sm_{}{}\"", cc.major, cc.minor);
    d.sm_count = rng.range(1, 200) as u32;
    d.sm_clock_mhz = rng.log_uniform(300.0, 3000.0);
    d.sub_partitions = rng.pick(&[1, 2, 4, 4]);
    // The unified L1 and shared memory: the table's, none (0: unknown), or another size.
    d.shared_memory.unified_per_sm = rng.pick(&[0, 96 * 1024, 128 * 1024, 262_144]);
    let c = &mut d.calibration;
    c.mem_latency_cycles.value = rng.log_uniform(50.0, 2000.0);
    c.l2_latency_cycles.value = rng.log_uniform(10.0, c.mem_latency_cycles.value);
    c.l1_latency_cycles.value = rng.log_uniform(5.0, c.l2_latency_cycles.value);
    c.departure_delay_coalesced_cycles.value = rng.log_uniform(0.25, 50.0);
    c.departure_delay_uncoalesced_cycles.value = rng.log_uniform(0.1, 20.0);
    c.dram_bandwidth_gbs.value = rng.log_uniform(50.0, 10_000.0);
    c.issue_cycles.value = rng.log_uniform(0.1, 8.0);
    c.shared_issue_cycles.value = rng.log_uniform(0.25, 32.0);
    c.block_dispatch_cycles.value = rng.log_uniform(10.0, 2000.0);
    c.dram_queue_exponent.value = if rng.range(0, 3) == 0 {
        0.0
    } else {
        rng.log_uniform(0.5, 8.0)
    };
    c.warp_drain_cycles.value = if rng.range(0, 3) == 0 {
        0.0
    } else {
        rng.log_uniform(0.5, 200.0)
    };
    c.departure_delay_coalesced_dram_cycles.value = if rng.range(0, 3) == 0 {
        0.0
    } else {
        rng.log_uniform(0.25, 50.0)
    };
    // The quoted name is no device name a description may hold (validate refuses it); it is
    // set after the check, to exercise the C's string escaping.
    let quoted = std::mem::replace(&mut d.name, format!("random device {i}"));
    d.validate("random").unwrap();
    d.name = quoted;
    d
}

fn metric(rng: &mut Rng) -> f64 {
    match rng.range(0, 99) {
        0..=9 => 0.0,
        10..=12 => -rng.log_uniform(1e-3, 1e3),
        13 => f64::NAN,
        14 => f64::INFINITY,
        15 => 1e35,
        _ => rng.log_uniform(1e-3, 1e7),
    }
}

fn sectors(rng: &mut Rng) -> f64 {
    match rng.range(0, 9) {
        0 => 4.0,
        1 => 32.0,
        2 => metric(rng),
        _ => rng.unit() * 40.0,
    }
}

fn hit_rate(rng: &mut Rng) -> f64 {
    match rng.range(0, 9) {
        0 => 0.0,
        1 => 1.0,
        2 => metric(rng),
        _ => rng.unit(),
    }
}

fn block_dim(rng: &mut Rng, max: u32) -> u32 {
    match rng.range(0, 19) {
        0 => 0,
        1 => max + 1,
        2..=9 => 1 << rng.range(0, 10),
        _ => rng.range(1, u64::from(max)) as u32,
    }
}

fn grid_dim(rng: &mut Rng, max: u32) -> u32 {
    match rng.range(0, 49) {
        0 => 0,
        1 => max.saturating_add(1),
        2 => max,
        3..=20 => 1,
        _ => rng.log_uniform(1.0, f64::from(max)) as u32,
    }
}

struct Case {
    dev: usize,
    launch: Launch,
    occ_threads: u32,
    carveout: i32,
    metrics: WarpMetrics,
}

fn random_case(rng: &mut Rng, devs: &[Device]) -> Case {
    let dev = rng.range(0, devs.len() as u64 - 1) as usize;
    let d = &devs[dev];
    let mut block = [0u32; 3];
    if rng.range(0, 9) < 8 {
        // A shape within the thread limit, as a candidate set would hold.
        let max = u64::from(d.max_threads_per_block);
        let bx = if rng.range(0, 1) == 0 {
            1 << rng.range(0, 10)
        } else {
            rng.range(1, max)
        };
        let by = if rng.range(0, 1) == 0 {
            1
        } else {
            rng.range(1, max / bx)
        };
        let bz = if rng.range(0, 3) > 0 {
            1
        } else {
            rng.range(1, (max / (bx * by)).min(64))
        };
        block = [bx as u32, by as u32, bz as u32];
    } else {
        for (i, b) in block.iter_mut().enumerate() {
            *b = block_dim(rng, d.max_block_dim[i]);
        }
    }
    let mut grid = [0u32; 3];
    for (i, g) in grid.iter_mut().enumerate() {
        *g = grid_dim(rng, d.max_grid_dim[i]);
    }
    let optin = d.shared_memory.per_block_optin;
    let smem = match rng.range(0, 9) {
        0..=4 => 0,
        5 => optin,
        6 => optin + 1,
        _ => rng.log_uniform(1.0, 260_000.0) as u32,
    };
    let metrics = WarpMetrics {
        inst: metric(rng),
        gld_inst: metric(rng),
        gst_inst: metric(rng),
        shared_inst: metric(rng),
        sync_inst: metric(rng),
        gld_sectors_per_req: sectors(rng),
        gst_sectors_per_req: sectors(rng),
        dram_bytes: metric(rng),
        gld_l1_hit_rate: hit_rate(rng),
        mlp: match rng.range(0, 4) {
            0 => 1.0,
            1 => rng.range(2, 17) as f64,
            _ => metric(rng),
        },
        l1_reuse_loop: rng.range(0, 2) as f64,
    };
    Case {
        dev,
        launch: Launch {
            block,
            grid,
            regs_per_thread: if rng.range(0, 3) == 0 {
                rng.range(0, 260) as u32
            } else {
                rng.range(8, 96) as u32
            },
            smem_per_block: smem,
        },
        occ_threads: rng.range(0, 1100) as u32,
        carveout: if rng.range(0, 2) == 0 {
            -1
        } else {
            rng.range(0, 110) as i32
        },
        metrics,
    }
}

const DRIVER: &str = r#"
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

static double from_bits(uint64_t b)
{
    double d;
    memcpy(&d, &b, sizeof d);
    return d;
}

static uint64_t to_bits(double d)
{
    uint64_t b;
    memcpy(&b, &d, sizeof b);
    return b;
}

int main(void)
{
    unsigned dev;
    kl_launch l;
    uint32_t occ_threads;
    int carveout;
    uint64_t mb[11];
    while (scanf("%u %" SCNu32 " %" SCNu32 " %" SCNu32 " %" SCNu32 " %" SCNu32 " %" SCNu32
                 " %" SCNu32 " %" SCNu32 " %" SCNu32 " %d"
                 " %" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64
                 " %" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64
                 " %" SCNu64,
                 &dev, &l.block[0], &l.block[1], &l.block[2], &l.grid[0], &l.grid[1],
                 &l.grid[2], &l.regs_per_thread, &l.smem_per_block, &occ_threads, &carveout,
                 &mb[0], &mb[1], &mb[2], &mb[3], &mb[4], &mb[5], &mb[6], &mb[7], &mb[8],
                 &mb[9], &mb[10]) == 22) {
        kl_metrics m;
        kl_occupancy_result o;
        kl_prediction p;
        int rc;
        const kl_device *d = devices[dev];
        m.inst = from_bits(mb[0]);
        m.gld_inst = from_bits(mb[1]);
        m.gst_inst = from_bits(mb[2]);
        m.shared_inst = from_bits(mb[3]);
        m.sync_inst = from_bits(mb[4]);
        m.gld_sectors_per_req = from_bits(mb[5]);
        m.gst_sectors_per_req = from_bits(mb[6]);
        m.dram_bytes = from_bits(mb[7]);
        m.gld_l1_hit_rate = from_bits(mb[8]);
        m.mlp = from_bits(mb[9]);
        m.l1_reuse_loop = from_bits(mb[10]);
        kl_occupancy(d, occ_threads, l.regs_per_thread, l.smem_per_block, carveout, &o);
        rc = kl_predict(d, &l, &m, &p);
        printf("%" PRIu32 " %" PRIu32 " %" PRIu32 " %d %" PRIu32 " %" PRIu32 " %" PRIu32
               " %" PRIu32 " %d %d %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64
               " %" PRIu32 " %" PRIu32 " %" PRIu64 " %s\n",
               o.blocks_per_sm, o.warps_per_sm, o.warps_per_block, o.limiter, o.by_warps,
               o.by_blocks, o.by_registers, o.by_shared_memory, rc, p.limiter,
               to_bits(p.cycles), to_bits(p.time_us), to_bits(p.mwp), to_bits(p.cwp),
               p.active_warps_per_sm, p.active_blocks_per_sm, p.waves, p.limiter_name);
    }
    return 0;
}
"#;

fn rel_diff(a: f64, b: f64) -> f64 {
    if a == b || (a.is_nan() && b.is_nan()) {
        0.0
    } else {
        (a - b).abs() / a.abs().max(b.abs())
    }
}

#[test]
fn c_model_equals_rust_model_on_random_inputs() {
    let mut rng = Rng(0x6b6c_6172_6170_746f);
    let devs: Vec<Device> = (0..DEVICES).map(|i| random_device(&mut rng, i)).collect();
    let cases: Vec<Case> = (0..CASES).map(|_| random_case(&mut rng, &devs)).collect();

    let mut src = String::from(C_MODEL);
    for (i, d) in devs.iter().enumerate() {
        src.push_str(&device_to_c(d, &format!("device_{i}")));
    }
    src.push_str("static const kl_device *const devices[] = {");
    for i in 0..devs.len() {
        write!(src, "&device_{i}, ").unwrap();
    }
    src.push_str("};\n");
    src.push_str(DRIVER);

    let dir = tempfile::tempdir().unwrap();
    let exe = compile(dir.path(), &[("diff.c", &src)], &["-O2"], "diff");

    let mut input = String::with_capacity(CASES * 200);
    for c in &cases {
        let l = &c.launch;
        let m = &c.metrics;
        writeln!(
            input,
            "{} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {}",
            c.dev,
            l.block[0],
            l.block[1],
            l.block[2],
            l.grid[0],
            l.grid[1],
            l.grid[2],
            l.regs_per_thread,
            l.smem_per_block,
            c.occ_threads,
            c.carveout,
            m.inst.to_bits(),
            m.gld_inst.to_bits(),
            m.gst_inst.to_bits(),
            m.shared_inst.to_bits(),
            m.sync_inst.to_bits(),
            m.gld_sectors_per_req.to_bits(),
            m.gst_sectors_per_req.to_bits(),
            m.dram_bytes.to_bits(),
            m.gld_l1_hit_rate.to_bits(),
            m.mlp.to_bits(),
            m.l1_reuse_loop.to_bits()
        )
        .unwrap();
    }
    let input_path = dir.path().join("cases.txt");
    std::fs::write(&input_path, input).unwrap();
    let out = Command::new(&exe)
        .stdin(std::fs::File::open(&input_path).unwrap())
        .output()
        .unwrap();
    assert!(out.status.success(), "the C driver failed: {out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines.len(),
        CASES,
        "the C driver answered {} cases",
        lines.len()
    );

    let (mut bitwise, mut worst, mut launchable) = (0usize, 0.0f64, 0usize);
    let mut by_limiter = [0usize; 13];
    for (i, (c, line)) in cases.iter().zip(&lines).enumerate() {
        let d = &devs[c.dev];
        let f: Vec<&str> = line.splitn(18, ' ').collect();
        let u = |k: usize| f[k].parse::<u64>().unwrap();
        let fl = |k: usize| f64::from_bits(u(k));
        let carve = if c.carveout < 0 {
            Carveout::Default
        } else {
            Carveout::Percent(c.carveout as u32)
        };
        let o = occupancy_with_carveout(
            d,
            c.occ_threads,
            c.launch.regs_per_thread,
            c.launch.smem_per_block,
            carve,
        );
        let rust_occ = [
            u64::from(o.blocks_per_sm),
            u64::from(o.warps_per_sm),
            u64::from(o.warps_per_block),
            o.limiter.code() as u64,
            u64::from(o.by_warps),
            u64::from(o.by_blocks),
            u64::from(o.by_registers),
            u64::from(o.by_shared_memory),
        ];
        let c_occ: Vec<u64> = (0..8).map(u).collect();
        assert_eq!(
            rust_occ.to_vec(),
            c_occ,
            "case {i}: occupancy differs (threads {}, regs {}, smem {}, carveout {}, device {})",
            c.occ_threads,
            c.launch.regs_per_thread,
            c.launch.smem_per_block,
            c.carveout,
            d.name
        );

        let p = predict(d, &c.launch, &c.metrics);
        let rc: i32 = f[8].parse().unwrap();
        let limiter: i32 = f[9].parse().unwrap();
        let ctx = || {
            format!(
                "case {i}: {:?} {:?} on {}\nC: {line}\nRust: {p:?}",
                c.launch, c.metrics, d.name
            )
        };
        assert_eq!(limiter, p.limiter.code(), "{}", ctx());
        assert_eq!(f[17], p.limiter.name(), "{}", ctx());
        assert_eq!(rc != 0, p.limiter.is_unlaunchable(), "{}", ctx());
        assert_eq!(
            (u(14), u(15), u(16)),
            (
                u64::from(p.active_warps_per_sm),
                u64::from(p.active_blocks_per_sm),
                p.waves
            ),
            "{}",
            ctx()
        );
        let pairs = [
            (fl(10), p.cycles),
            (fl(11), p.time_us),
            (fl(12), p.mwp),
            (fl(13), p.cwp),
        ];
        let mut same = true;
        for (cv, rv) in pairs {
            let r = rel_diff(cv, rv);
            assert!(r <= TOLERANCE, "{}: relative difference {r:e}", ctx());
            assert!(!rv.is_nan(), "{}: NaN", ctx());
            worst = worst.max(r);
            same &= cv.to_bits() == rv.to_bits();
        }
        bitwise += usize::from(same);
        by_limiter[p.limiter.code() as usize] += 1;
        if !p.limiter.is_unlaunchable() {
            launchable += 1;
            assert!(p.cycles.is_finite() && p.cycles > 0.0, "{}", ctx());
        }
    }
    eprintln!(
        "differential: {CASES} cases ({launchable} launchable), {bitwise} bit-identical, \
         worst relative difference {worst:e}"
    );
    eprintln!("cases per limiter code (1..=12): {:?}", &by_limiter[1..]);
    // The random inputs must exercise every branch of the model, not only its refusals.
    for (code, n) in by_limiter.iter().enumerate().skip(1) {
        assert!(*n >= 20, "limiter code {code} reached only {n} times");
    }
    assert!(
        launchable > CASES * 2 / 5,
        "only {launchable} launchable cases"
    );
}
