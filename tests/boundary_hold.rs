//! A thread's work held at the largest profiled sizes (`rational::boundary_held`,
//! `RationalProgram::held_per_thread`; docs/model.md, "Work per thread beyond the profiled
//! sizes"), on real H200 profile entries, without a GPU (issue 38).
//!
//! - samples/idioms/rowscale_misaligned (one thread an element of an R × C matrix, the grid
//!   follows the data; tests/fixtures/program-shape-h200-2026-11-28): a thread's
//!   instructions and loads do not grow with R or C, so their per-domain-thread fits are held.
//!   Beyond the profile (4× and 16× its largest sizes, 256 × 253) a warp's instructions and
//!   loads are then the fits' values at 256 × 253; without the rule the same fits, evaluated
//!   where they were not fitted, fall below zero (a warp of no work).
//! - PolyBench's gemm (the committed H200 database, samples/klaraptor-profiles): a thread
//!   loops over NK, so its instructions grow about in proportion to NK (elasticity near 1)
//!   and are not held.
//! - The generated C holds what the Rust holds: compiled with the select harness
//!   (tests/fixtures/select-harness, as tests/link_models.rs builds it), it predicts the
//!   times the Rust predicts at sizes up to 16× the profile's.

mod common;

use std::collections::BTreeSet;
use std::path::Path;

use klaraptor_profiler::record::Entry;
use klaraptor_program::decide::{self, DecisionRule};
use klaraptor_program::metrics;
use klaraptor_program::rational::{self, RationalProgram, HOLD_ELASTICITY};
use klaraptor_spec::annotations;
use klaraptor_spec::link::LinkSpec;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The rowscale_misaligned entry and its spec as the sample's own `#pragma klaraptor` gives it
/// (read with the driver's scanner, as tests/decide_program_shape.rs does).
fn rowscale() -> (LinkSpec, Entry) {
    let e = common::fixture_entry(
        "tests/fixtures/program-shape-h200-2026-11-28/rowscale_misaligned.toml",
    );
    let path = repo().join("samples/idioms/rowscale_misaligned/rowscale_misaligned.cu");
    let text = std::fs::read_to_string(&path).unwrap();
    let scanned = annotations::scan(&path, &text).unwrap();
    let a = scanned
        .annotations
        .iter()
        .find(|a| a.kernel == e.kernel.name)
        .expect("the sample's annotation of rowscale_misaligned");
    let mut s = common::idiom_spec(&e, "", &[]);
    s.data = a.data.iter().map(|d| d.label.clone()).collect();
    s.dim = a.dim;
    s.grid = a.grid.iter().map(|g| g.to_string()).collect();
    s.block = a.constraints.iter().map(|c| c.to_string()).collect();
    s.shmem = a.shmem.as_ref().map(|x| x.to_string());
    assert_eq!(s.data, ["R", "C"]);
    assert_eq!(s.grid, ["ceil(C, bx)", "ceil(R, by)"]);
    (s, e)
}

/// The program without the rule: every fit evaluated at the data as it is.
fn unheld() -> DecisionRule {
    DecisionRule {
        hold_boundary_work: false,
        ..Default::default()
    }
}

/// rowscale_misaligned's grid for block `b` at (R, C).
fn grid(d: &[i64], b: [u32; 3]) -> [u32; 3] {
    [
        (d[1] as u32).div_ceil(b[0]),
        (d[0] as u32).div_ceil(b[1]),
        1,
    ]
}

/// The fits' variables: the data, then log2 of the block's dimensions.
fn point(d: &[f64], b: [u32; 3], dim: u8) -> Vec<f64> {
    let mut x = d.to_vec();
    for v in b.iter().take(usize::from(dim)) {
        x.push(f64::from(*v).log2());
    }
    x
}

fn rel(a: f64, b: f64) -> f64 {
    (a - b).abs() / a.abs().max(b.abs()).max(f64::MIN_POSITIVE)
}

/// The elasticity of `p`'s per-domain-thread fit `name` in data size `i`, from its smallest
/// profiled value `lo` to the largest, the others at their largest: the median over the
/// candidates, as `boundary_held` measures it (printed for the record).
fn elasticity(p: &RationalProgram, name: &str, i: usize, lo: f64) -> f64 {
    let f = &p.metrics[name];
    let hi = &p.shares_held_at;
    let mut e: Vec<f64> = p
        .candidates
        .iter()
        .filter_map(|&b| {
            let mut x = point(hi, b, p.dim);
            let top = f.eval(&x);
            x[i] = lo;
            let bottom = f.eval(&x);
            (top > 0.0 && bottom > 0.0).then(|| (top / bottom).ln() / (hi[i] / lo).ln())
        })
        .collect();
    e.sort_by(|a, b| a.total_cmp(b));
    e[e.len() / 2]
}

/// A sample's warp instructions per thread of the domain (`domain` threads), as the fit of
/// a per-domain-thread total sees them (warp-level counts times the lanes' factor).
fn measured_inst_per_thread(e: &Entry, sizes: &[i64], b: [u32; 3], domain: f64) -> f64 {
    let c = e
        .samples
        .iter()
        .find(|s| s.sizes == sizes && s.block == b && s.error.is_none())
        .and_then(|s| s.counters.as_ref())
        .unwrap_or_else(|| panic!("a sample of {b:?} at {sizes:?}"));
    c.inst_executed as f64 * metrics::lane_factor(b) / domain
}

/// Blocks of one warp or less and of whole warps (a warp's lanes and the launch's warps
/// scale alike), wide, square and tall.
const BLOCKS: [[u32; 3]; 6] = [
    [1, 1, 1],
    [8, 1, 1],
    [32, 8, 1],
    [16, 16, 1],
    [256, 1, 1],
    [2, 128, 1],
];

/// rowscale_misaligned: the per-domain-thread fits of its instructions and loads are held,
/// and beyond the profile a warp's instructions and loads are the fits' values at the
/// largest profiled sizes; without the rule they are not.
#[test]
fn a_threads_work_that_follows_the_data_is_held_beyond_the_profile() {
    let (s, e) = rowscale();
    let p = rational::build_model(&s, &e).unwrap();
    assert!(DecisionRule::default().hold_boundary_work);
    // One thread an element: the threads follow the data (no loop over it).
    assert!(!decide::threads_loop(&s, &e));
    assert!(!p.threads_loop);
    let hi = [256.0, 253.0];
    assert_eq!(p.shares_held_at, hi, "the largest profiled R and C");

    // The replay's finding (e9c592b): the two totals fitted per domain thread, the
    // instructions and the load requests, are held.
    let pair: BTreeSet<String> = ["gld_inst", "inst"].map(String::from).into();
    eprintln!(
        "rowscale_misaligned: per domain thread {:?}, held {:?}",
        p.per_domain_thread, p.held_per_thread
    );
    assert_eq!(p.per_domain_thread, pair);
    assert_eq!(p.held_per_thread, pair);
    for name in &pair {
        let (er, ec) = (elasticity(&p, name, 0, 64.0), elasticity(&p, name, 1, 67.0));
        eprintln!("rowscale_misaligned {name}: elasticity in R {er:.3}, in C {ec:.3}");
        assert!(er.abs() < HOLD_ELASTICITY && ec.abs() < HOLD_ELASTICITY);
    }
    // The same in the profile itself, whatever the fit: with blocks that do not overhang the
    // matrix (a column of 1 or 8 rows; R is 64, 96, 128, 200 or 256), a thread does the same
    // 46 warp instructions' share (1.4375 per element) at each of the seven profiled sizes.
    let sizes: BTreeSet<Vec<i64>> = e.samples.iter().map(|s| s.sizes.clone()).collect();
    assert_eq!(sizes.len(), 7);
    for b in [[1, 1, 1], [1, 8, 1]] {
        for z in &sizes {
            let per = measured_inst_per_thread(&e, z, b, (z[0] * z[1]) as f64);
            assert_eq!(per, 46.0 / 32.0, "{b:?} at {z:?}");
        }
    }
    let q = rational::build_model_with(&s, &e, &unheld()).unwrap();
    assert!(q.held_per_thread.is_empty(), "{:?}", q.held_per_thread);
    assert_eq!(q.per_domain_thread, p.per_domain_thread);

    for b in BLOCKS {
        let at = |d: &[i64], prog: &RationalProgram| prog.metrics_at(d, b, grid(d, b));
        let top = at(&[256, 253], &p);
        // Inside the profiled range the rule changes nothing.
        for d in [[256, 253], [64, 67], [200, 197], [64, 253]] {
            let (m, n) = (at(&d, &p), at(&d, &q));
            assert_eq!((m.inst, m.gld_inst), (n.inst, n.gld_inst), "{b:?} at {d:?}");
        }
        assert!(top.inst > 0.0 && top.gld_inst > 0.0, "{b:?}: {top:?}");
        for k in [4, 16] {
            let d = [256 * k, 253 * k];
            let m = at(&d, &p);
            // A warp's instructions and loads: the fit per domain thread at 256 × 253, times
            // the domain, over the launch's warps (warp-level counts: and the lanes' factor)
            // and the share of its threads in the domain, which leaves a whole warp's worth.
            for (name, got, was) in [
                ("inst", m.inst, top.inst),
                ("gld_inst", m.gld_inst, top.gld_inst),
            ] {
                let f = p.metrics[name].eval(&point(&hi, b, 2));
                let g = grid(&d, b);
                let want = f * metrics::launched_threads(b, g)
                    / (metrics::lane_factor(b) * metrics::warps(b, g));
                assert!(rel(got, want) < 1e-9, "{name} {b:?} at {d:?}: {got} {want}");
                assert!(
                    rel(got, was) < 1e-9,
                    "{name} {b:?} at {d:?}: {got}, {was} at 1x"
                );
            }
            // Without the rule the fits run on past the profile: here below zero, clamped to
            // no work at all.
            let n = at(&d, &q);
            if b == [32, 8, 1] {
                eprintln!(
                    "rowscale_misaligned 32x8 per warp at {k}x: held inst {:.4} gld_inst {:.4}; \
                     unheld inst {:.4} gld_inst {:.4} (1x: {:.4} {:.4})",
                    m.inst, m.gld_inst, n.inst, n.gld_inst, top.inst, top.gld_inst
                );
            }
            assert!(
                rel(n.inst, m.inst) > 0.5,
                "{b:?} {k}x: {} {}",
                n.inst,
                m.inst
            );
            assert!(
                rel(n.gld_inst, m.gld_inst) > 0.5,
                "{b:?} {k}x: {} {}",
                n.gld_inst,
                m.gld_inst
            );
        }
        // Only the sizes beyond the profile are held: R at 16×, C inside it.
        let d = [4096, 100];
        let m = at(&d, &p);
        let f = p.metrics["inst"].eval(&point(&[256.0, 100.0], b, 2));
        let g = grid(&d, b);
        let want =
            f * metrics::launched_threads(b, g) / (metrics::lane_factor(b) * metrics::warps(b, g));
        assert!(
            rel(m.inst, want) < 1e-9,
            "{b:?} at {d:?}: {} {want}",
            m.inst
        );
    }
}

/// PolyBench's gemm on the committed H200 database: every thread loops over NK, so its
/// instructions and loads per domain thread grow about in proportion to NK (elasticity near
/// 1, twice the NK, twice the work): not held, the fit extrapolates them.
#[test]
fn a_threads_work_that_loops_over_a_size_is_not_held() {
    let path = repo().join(
        "samples/klaraptor-profiles/v1/nvidia-h200-2803d38c/_Z4gemmPKfS0_Pfffiii-fe089486fde4b700.toml",
    );
    let e: Entry = toml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert_eq!(e.device.name, "NVIDIA H200");
    let src = std::fs::read_to_string(repo().join("samples/polybench/gemm/gemm.cu")).unwrap();
    assert!(src.contains("grid(ceil(NJ, bx), ceil(NI, by))"));
    let mut s = common::idiom_spec(&e, "", &[]);
    s.grid = vec!["ceil(NJ, bx)".into(), "ceil(NI, by)".into()];
    assert_eq!(s.data, ["NI", "NJ", "NK"]);

    let p = rational::build_model(&s, &e).unwrap();
    assert!(!p.threads_loop, "one thread an element of C");
    assert_eq!(p.shares_held_at, [256.0, 256.0, 256.0]);
    for name in ["inst", "gld_inst"] {
        assert!(
            p.per_domain_thread.contains(name),
            "{:?}",
            p.per_domain_thread
        );
        assert!(
            !p.held_per_thread.contains(name),
            "{name} held: {:?}",
            p.held_per_thread
        );
        let e_nk = elasticity(&p, name, 2, 64.0);
        eprintln!(
            "gemm {name}: elasticity in NI {:.3}, NJ {:.3}, NK {e_nk:.3}",
            elasticity(&p, name, 0, 64.0),
            elasticity(&p, name, 1, 64.0)
        );
        assert!(e_nk > 0.8, "{name}: {e_nk}");
    }
    // The profile itself: a 32 × 8 block's instructions per element of C at NK = 256 over
    // those at NK = 64, NI = NJ = 64 (a measured elasticity near 1).
    let dom = 64.0 * 64.0;
    let r = measured_inst_per_thread(&e, &[64, 64, 256], [32, 8, 1], dom)
        / measured_inst_per_thread(&e, &[64, 64, 64], [32, 8, 1], dom);
    let measured = r.ln() / 4f64.ln();
    eprintln!("gemm measured inst per element, NK 64 -> 256: x{r:.3} (elasticity {measured:.3})");
    assert!(measured > 0.8, "{measured}");
    // Beyond the profile the instructions go on growing with NK.
    let b = [32, 8, 1];
    let g = [8, 32, 1];
    let at = |nk: i64| p.metrics_at(&[256, 256, nk], b, g).inst;
    assert!(at(4096) > 8.0 * at(256), "{} {}", at(4096), at(256));
}

/// Compiles the select harness (tests/fixtures/select-harness) with a generated program.
fn harness(dir: &Path, prog: &RationalProgram, name: &str) -> std::path::PathBuf {
    let c_file = dir.join(format!("{name}.c"));
    std::fs::write(&c_file, prog.to_c().unwrap()).unwrap();
    let exe = dir.join(name);
    common::build_select_harness(&c_file, &exe);
    exe
}

/// The harness's output lines in `mode` (`select`, `rank`), one line of sizes each.
fn harness_lines(exe: &Path, mode: &str, sizes: &[Vec<i64>]) -> Vec<String> {
    let out = common::harness_output(exe, mode, sizes);
    let lines: Vec<String> = out.lines().map(String::from).collect();
    assert_eq!(lines.len(), sizes.len(), "{out}");
    lines
}

/// The C's choice and predicted time at each size (the harness's `select`).
fn c_select(exe: &Path, sizes: &[Vec<i64>]) -> Vec<([u32; 3], f64)> {
    harness_lines(exe, "select", sizes)
        .iter()
        .zip(sizes)
        .map(|(line, n)| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let k = n.len();
            assert_eq!(f.len(), 5 + k, "{line}");
            assert_eq!(f[k], "0", "{n:?}: select failed: {line}");
            let block = [f[k + 1], f[k + 2], f[k + 3]].map(|v| v.parse::<u32>().unwrap());
            (block, f[k + 4].parse().unwrap())
        })
        .collect()
}

/// The generated C of rowscale_misaligned evaluates the held fits at the held data, as the
/// Rust does: at sizes up to 16× the profile's it chooses what the Rust ranks first with the
/// same predicted time, ranks the same three shapes first, and predicts each of six shapes
/// (each alone a program's candidate) as the Rust does; the prediction there is not the one
/// without the rule, so the agreement is the held one's.
#[test]
fn the_generated_c_holds_a_threads_work_like_rust() {
    let (s, e) = rowscale();
    let p = rational::build_model(&s, &e).unwrap();
    let q = rational::build_model_with(&s, &e, &unheld()).unwrap();
    assert!(p.held_per_thread.contains("inst") && p.held_per_thread.contains("gld_inst"));
    let c = p.to_c().unwrap();
    for name in ["inst", "gld_inst"] {
        let line = c
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("m->{name} = ")))
            .unwrap_or_else(|| panic!("no m->{name} in the C"));
        assert!(
            line.contains("kl_min_held((double)data[0], 256.0)")
                && line.contains("kl_min_held((double)data[1], 253.0)")
                && line.contains("a thread's work at the data held"),
            "{line}"
        );
    }
    let qc = q.to_c().unwrap();
    let line = qc
        .lines()
        .find(|l| l.trim_start().starts_with("m->inst = "))
        .unwrap();
    assert!(!line.contains("kl_min_held"), "{line}");

    let sizes: Vec<Vec<i64>> = vec![
        vec![256, 253],
        vec![200, 197],
        vec![64, 67],
        vec![1024, 1012],
        vec![4096, 4048],
        vec![4096, 100],
        vec![100, 4048],
        vec![3001, 4049],
    ];
    let dir = tempfile::tempdir().unwrap();
    let exe = harness(dir.path(), &p, "rowscale_misaligned");
    for ((block, us), n) in c_select(&exe, &sizes).into_iter().zip(&sizes) {
        let first = &p.rank(n).unwrap()[0];
        assert_eq!(block, first.block, "{n:?}");
        let want = first.prediction.time_us;
        assert!(rel(us, want) <= 1e-9, "{n:?}: C {us} µs, Rust {want} µs");
    }
    common::assert_c_rank_matches(&exe, &p, &sizes);

    // Shape by shape, at 16× the profile: a program whose one candidate is the shape.
    let big = vec![4096, 4048];
    for b in BLOCKS {
        let mut one = p.clone();
        one.candidates = vec![b];
        let exe = harness(dir.path(), &one, &format!("one_{}x{}", b[0], b[1]));
        let (block, us) = c_select(&exe, std::slice::from_ref(&big))[0];
        assert_eq!(block, b);
        let rust = p
            .rank(&big)
            .unwrap()
            .into_iter()
            .find(|r| r.block == b)
            .unwrap();
        let want = rust.prediction.time_us;
        assert!(rel(us, want) <= 1e-9, "{b:?}: C {us} µs, Rust {want} µs");
        let without = q
            .rank(&big)
            .unwrap()
            .into_iter()
            .find(|r| r.block == b)
            .unwrap();
        eprintln!(
            "rowscale_misaligned {b:?} at 4096x4048: C {us:.3} µs, Rust {want:.3} µs; \
             without the rule {:.3} µs (inst a warp {:.4} held, {:.4} not)",
            without.prediction.time_us, rust.metrics.inst, without.metrics.inst
        );
        assert!(rust.metrics.inst > 0.0 && without.metrics.inst == 0.0);
        // Blocks of whole warps are bound by their instructions and loads here; those of one
        // or eight threads by the blocks an SM holds, whatever a warp does.
        if b[0] * b[1] >= 32 {
            assert!(
                rel(want, without.prediction.time_us) > 0.1,
                "{b:?}: {want} µs held, {} µs not",
                without.prediction.time_us
            );
        }
    }
}
