//! How long the C model takes to evaluate a kernel's candidate block shapes.
//!
//! ```text
//! cargo run --release -p klaraptor-model --example c_predict_timing [DEVICE.toml]
//! ```
//!
//! Compiles [`C_MODEL`] with `cc -O2` together with the device (default:
//! `model/devices/nvidia-h200.toml`) and a driver that, for a 2-D kernel, evaluates
//! `kl_predict` over every candidate (bx, by) with bx, by powers of two and bx·by ≤ 1024
//! (66 shapes), the grid from `ceil(N / bx) × ceil(N / by)`, and keeps the fastest — what a
//! rational program does on a memo miss, minus the fitted metric functions. It reports the
//! nanoseconds per candidate and the microseconds per full evaluation (best and median of
//! 15 trials of 2000 evaluations each), then the same for the Rust `predict`.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

use klaraptor_model::{device_to_c, predict, Device, Launch, WarpMetrics, C_MODEL};

const DRIVER: &str = r#"
#include <stdio.h>
#include <time.h>

#define TRIALS 15
#define REPS 2000

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* Per-warp metrics of a naive matrix multiply of size n (a stand-in for the fitted
 * rational functions: the real ones are evaluated once per candidate too). */
static void metrics(unsigned n, unsigned bx, unsigned by, kl_metrics *m)
{
    double dn = (double)n;
    m->inst = 12.0 * dn + 40.0;
    m->gld_inst = 2.0 * dn;
    m->gst_inst = 1.0;
    m->shared_inst = 0.0;
    m->sync_inst = 0.0;
    m->gld_sectors_per_req = bx >= 8 ? 4.0 + 8.0 / (double)bx : 32.0 / (double)bx;
    m->gst_sectors_per_req = bx >= 8 ? 4.0 : 32.0 / (double)bx;
    m->dram_bytes = 2.0 * dn * 128.0 / (double)(by < 8 ? by : 8);
    m->gld_l1_hit_rate = 0.5;
    m->mlp = 1.0;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(void)
{
    unsigned bxs[128], bys[128];
    int n_cand = 0, t, r, c;
    double trial_ns[TRIALS];
    volatile unsigned sink = 0;
    unsigned bx, by;
    for (bx = 1; bx <= 1024; bx *= 2) {
        for (by = 1; bx * by <= 1024; by *= 2) {
            bxs[n_cand] = bx;
            bys[n_cand] = by;
            n_cand++;
        }
    }
    for (t = 0; t < TRIALS; t++) {
        double start = now_ns();
        for (r = 0; r < REPS; r++) {
            unsigned n = 1024u + (unsigned)(r & 1023);
            double best = HUGE_VAL;
            int best_i = -1;
            for (c = 0; c < n_cand; c++) {
                kl_launch l;
                kl_metrics m;
                kl_prediction p;
                l.block[0] = bxs[c];
                l.block[1] = bys[c];
                l.block[2] = 1;
                l.grid[0] = (n + bxs[c] - 1) / bxs[c];
                l.grid[1] = (n + bys[c] - 1) / bys[c];
                l.grid[2] = 1;
                l.regs_per_thread = 32;
                l.smem_per_block = 0;
                metrics(n, bxs[c], bys[c], &m);
                if (kl_predict(&device, &l, &m, &p) == 0 && p.cycles < best) {
                    best = p.cycles;
                    best_i = c;
                }
            }
            sink += (unsigned)best_i;
        }
        trial_ns[t] = (now_ns() - start) / REPS;
    }
    qsort(trial_ns, TRIALS, sizeof trial_ns[0], cmp);
    printf("%d %.1f %.1f %u\n", n_cand, trial_ns[0], trial_ns[TRIALS / 2], sink);
    return 0;
}
"#;

fn run() -> Result<(), String> {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dev_path = std::env::args()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| manifest.join("devices/nvidia-h200.toml"));
    let dev = Device::load(&dev_path).map_err(|e| e.to_string())?;

    let dir = std::env::temp_dir().join(format!("kl-predict-timing-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let src = dir.join("timing.c");
    let exe = dir.join("timing");
    let text = format!(
        "#define _POSIX_C_SOURCE 199309L\n#include <stdlib.h>\n{C_MODEL}\n{}\n{DRIVER}",
        device_to_c(&dev, "device")
    );
    std::fs::write(&src, text).map_err(|e| e.to_string())?;
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = Command::new(&cc)
        .args([
            "-std=c99",
            "-O2",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-pedantic",
        ])
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .output()
        .map_err(|e| format!("cannot run `{cc}`: {e}"))?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    let out = Command::new(&exe).output().map_err(|e| e.to_string())?;
    let _ = std::fs::remove_dir_all(&dir);
    let line = String::from_utf8_lossy(&out.stdout).into_owned();
    let f: Vec<f64> = line
        .split_whitespace()
        .take(3)
        .map(|v| v.parse().unwrap_or(f64::NAN))
        .collect();
    let (n_cand, best, median) = (f[0], f[1], f[2]);
    println!("device: {} ({})", dev.name, dev_path.display());
    println!("C kl_predict, cc -O2, {n_cand} candidates (bx, by powers of two, bx*by <= 1024):");
    println!(
        "  full evaluation: best {:.2} us, median {:.2} us; per candidate: best {:.1} ns, median {:.1} ns",
        best / 1e3,
        median / 1e3,
        best / n_cand,
        median / n_cand
    );

    // The Rust reference over the same candidates, for comparison.
    let mut shapes = Vec::new();
    let mut bx = 1u32;
    while bx <= 1024 {
        let mut by = 1u32;
        while bx * by <= 1024 {
            shapes.push((bx, by));
            by *= 2;
        }
        bx *= 2;
    }
    let reps = 2000u32;
    let mut trials = Vec::new();
    let mut sink = 0usize;
    for _ in 0..15 {
        let start = Instant::now();
        for r in 0..reps {
            let n = 1024 + (r & 1023);
            let dn = f64::from(n);
            let mut best = (f64::INFINITY, 0usize);
            for (i, &(bx, by)) in shapes.iter().enumerate() {
                let fx = f64::from(bx);
                let m = WarpMetrics {
                    inst: 12.0 * dn + 40.0,
                    gld_inst: 2.0 * dn,
                    gst_inst: 1.0,
                    shared_inst: 0.0,
                    sync_inst: 0.0,
                    gld_sectors_per_req: if bx >= 8 { 4.0 + 8.0 / fx } else { 32.0 / fx },
                    gst_sectors_per_req: if bx >= 8 { 4.0 } else { 32.0 / fx },
                    dram_bytes: 2.0 * dn * 128.0 / f64::from(by.min(8)),
                    gld_l1_hit_rate: 0.5,
                    mlp: 1.0,
                    l1_reuse_loop: 0.0,
                };
                let l = Launch {
                    block: [bx, by, 1],
                    grid: [n.div_ceil(bx), n.div_ceil(by), 1],
                    regs_per_thread: 32,
                    smem_per_block: 0,
                };
                let p = predict(&dev, &l, &m);
                if p.cycles < best.0 {
                    best = (p.cycles, i);
                }
            }
            sink += best.1;
        }
        trials.push(start.elapsed().as_nanos() as f64 / f64::from(reps));
    }
    trials.sort_by(f64::total_cmp);
    let n = shapes.len() as f64;
    println!(
        "Rust predict (release): full evaluation: best {:.2} us, median {:.2} us; per candidate: best {:.1} ns (checksum {sink})",
        trials[0] / 1e3,
        trials[7] / 1e3,
        trials[0] / n
    );
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("c_predict_timing: {e}");
            ExitCode::FAILURE
        }
    }
}
