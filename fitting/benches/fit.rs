//! `cargo bench -p klaraptor-fitting`: the acceptance benchmark. 300 noisy points in 4
//! variables (N, bx, by, bz), degree bounds 3 per variable for numerator and denominator, every
//! candidate degree tuple of the crate documentation's search (denominator total degree ≤ 3 by
//! default). Prints wall time (minimum and median: the machine is shared) and the thread's CPU
//! time, then the same fit with other denominator caps and with an SVD of every candidate, as
//! ratios measured in this one run.

use std::time::{Duration, Instant};

use klaraptor_fitting::{fit, Domain, FitOptions, FitProblem, RationalFn, Screening, Variable};

fn splitmix(state: &mut u64) -> f64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
}

/// A made-up metric with the shape of a per-warp instruction count: rational in the block
/// shape (its denominator involves bx·by and bz), quadratic in N.
fn metric(x: &[f64]) -> f64 {
    let (n, bx, by, bz) = (x[0], x[1], x[2], x[3]);
    (n * n * (bx + 2.0) + 5.0 * n * by + 3.0 * bz * n + 100.0) / (bx * by + 4.0 * bz + 16.0)
}

fn problem(noise: f64) -> FitProblem {
    let sizes = [64.0, 96.0, 128.0, 192.0, 256.0, 320.0, 384.0, 448.0, 512.0];
    let mut shapes = Vec::new();
    for bz in [1.0, 2.0, 4.0, 8.0] {
        for by in [1.0, 2.0, 4.0, 8.0, 16.0, 32.0] {
            for bx in [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0] {
                if bx * by * bz <= 1024.0 {
                    shapes.push(vec![bx, by, bz]);
                }
            }
        }
    }
    let mut state = 42u64;
    let mut points = Vec::new();
    let mut values = Vec::new();
    while points.len() < 300 {
        let n = sizes[(splitmix(&mut state) * sizes.len() as f64) as usize];
        let s = &shapes[(splitmix(&mut state) * shapes.len() as f64) as usize];
        let p = vec![n, s[0], s[1], s[2]];
        let v = metric(&p) * (1.0 + noise * (2.0 * splitmix(&mut state) - 1.0));
        points.push(p);
        values.push(v);
    }
    FitProblem {
        vars: vec![
            Variable::data("N"),
            Variable::block("bx"),
            Variable::block("by"),
            Variable::block("bz"),
        ],
        points,
        values,
        domain: Domain::Grid {
            shapes,
            data: vec![[1.0, 65536.0]],
        },
    }
}

/// CPU time of this thread (Linux), robust to other processes sharing the cores.
fn thread_cpu() -> Option<Duration> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let ns: u64 = s.split_whitespace().next()?.parse().ok()?;
    Some(Duration::from_nanos(ns))
}

struct Timing {
    min: Duration,
    median: Duration,
    cpu_median: Option<Duration>,
}

fn time(problem: &FitProblem, options: &FitOptions, runs: usize) -> (Timing, RationalFn) {
    let mut wall = Vec::with_capacity(runs);
    let mut cpu = Vec::with_capacity(runs);
    let mut last = None;
    for _ in 0..runs {
        let c0 = thread_cpu();
        let start = Instant::now();
        let f = fit(problem, options).expect("benchmark fit");
        wall.push(start.elapsed());
        if let (Some(a), Some(b)) = (c0, thread_cpu()) {
            cpu.push(b - a);
        }
        last = Some(f);
    }
    wall.sort();
    cpu.sort();
    let timing = Timing {
        min: wall[0],
        median: wall[runs / 2],
        cpu_median: (cpu.len() == runs).then(|| cpu[runs / 2]),
    };
    (timing, last.expect("at least one run"))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn describe(label: &str, t: &Timing, f: &RationalFn) {
    let d = &f.diagnostics;
    let s = d.search.as_ref().expect("search stats");
    let h = d.heldout.as_ref().expect("held-out errors");
    let at = [8192.0, 32.0, 4.0, 2.0];
    println!("{label}");
    println!(
        "  {} tuples within the bounds: {} pruned, {} screened ({} solvable, {} by SVD fallback), \
         {} refitted by SVD",
        s.candidates + s.pruned,
        s.pruned,
        s.candidates,
        s.screened,
        s.svd_fallback,
        s.refit
    );
    println!(
        "  chosen numerator {:?} / denominator {:?}; held-out median {:.2e}, max {:.2e}; \
         f(8192, 32, 4, 2) off by {:.2} %",
        d.num_degrees,
        d.den_degrees,
        h.median_rel_error,
        h.max_rel_error,
        100.0 * (f.eval(&at) / metric(&at) - 1.0).abs()
    );
    println!(
        "  wall min {:.1} ms, median {:.1} ms; thread CPU median {}",
        ms(t.min),
        ms(t.median),
        t.cpu_median
            .map_or("n/a".into(), |c| format!("{:.1} ms", ms(c)))
    );
}

fn main() {
    // ±2 % multiplicative measurement noise.
    let noisy = problem(0.02);
    println!("klaraptor-fitting bench: 300 points, 4 variables (N, bx, by, bz), ±2 % noise,");
    println!("degree bounds 3 per variable for numerator and denominator\n");

    let options = FitOptions::uniform(4, 3, 3);
    let (base, f) = time(&noisy, &options, 21);
    describe(
        "default (normal-equation screening, denominator total degree <= 3):",
        &base,
        &f,
    );

    for cap in [2, 4, 12] {
        let mut o = options.clone();
        o.den_max_total_degree = cap;
        let runs = if cap > 4 { 3 } else { 11 };
        let (t, f) = time(&noisy, &o, runs);
        describe(
            &format!(
                "\ndenominator total degree <= {cap}{}:",
                if cap == 12 { " (every tuple)" } else { "" }
            ),
            &t,
            &f,
        );
        println!(
            "  ratio to default (wall min): {:.2}",
            ms(t.min) / ms(base.min)
        );
    }

    // Deterministic counters: no noise, which switches on the refinement and SVD fallback.
    let exact = problem(0.0);
    let (t, f) = time(&exact, &options, 11);
    describe(
        "\nsame problem without noise (near-exact path), cap 3:",
        &t,
        &f,
    );
    println!(
        "  ratio to default (wall min): {:.2}",
        ms(t.min) / ms(base.min)
    );

    if std::env::var_os("BENCH_SKIP_SVD").is_none() {
        let mut o = options.clone();
        o.screening = Screening::Svd;
        let (t, f) = time(&noisy, &o, 3);
        describe(
            "\nSVD (with reweighting) of every candidate instead of screening, cap 3:",
            &t,
            &f,
        );
        println!(
            "  ratio to default (wall min): {:.1}",
            ms(t.min) / ms(base.min)
        );
    }
}
