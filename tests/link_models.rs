//! The instrumented link with a profile database (no GPU): `samples/matmul` built with
//! `make NVCC=klaraptor-cc` beside a copy of the committed H200 profiles
//! (`samples/klaraptor-profiles`, found by walking up from the build directory) links a
//! rational program per kernel; the generated C compiles warning-free and selects exactly
//! what the Rust ranking (`klaraptor explain`) puts first; rebuilds reuse the profile entry
//! while an edited kernel loses it; `--kl-require-model` and `KLARAPTOR_PROFILE_DB` behave as
//! documented.

mod common;
use common::*;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use klaraptor_profiler::db::ProfileDb;
use klaraptor_program::rational::{self, RationalProgram};
use klaraptor_spec::link::{scan_bytes, LinkSpec};

const MM: &str = "_Z2mmPKfS0_Pfi";
const SAXPY: &str = "_Z5saxpyfPKfPfi";

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The committed H200 profiles' directory in `samples/klaraptor-profiles/v1/`.
const H200_DIR: &str = "nvidia-h200-2803d38c";
/// The committed H100 profiles' directory.
const H100_DIR: &str = "nvidia-h100-80gb-hbm3-56ae7a38";

/// `root/samples/matmul` (the sources only, not what a local build left there) and
/// `root/samples/klaraptor-profiles` with the committed H200 profiles only, in the
/// repository's relative layout: the tests of one device's programs.
fn copy_sample(root: &Path) -> PathBuf {
    copy_sample_with(root, &[H200_DIR])
}

/// [`copy_sample`] with the committed profiles of the devices `devices` (their directories
/// under `v1/`).
fn copy_sample_with(root: &Path, devices: &[&str]) -> PathBuf {
    let sample = root.join("samples/matmul");
    std::fs::create_dir_all(&sample).unwrap();
    for f in ["Makefile", "kernels.h", "main.cu", "mm.cu", "saxpy.cu"] {
        std::fs::copy(repo().join("samples/matmul").join(f), sample.join(f)).unwrap();
    }
    let from = repo().join("samples/klaraptor-profiles");
    let to = root.join("samples/klaraptor-profiles");
    std::fs::create_dir_all(to.join("v1")).unwrap();
    for f in ["README.txt", "generation"] {
        std::fs::copy(from.join(f), to.join(f)).unwrap();
    }
    for d in devices {
        copy_dir(&from.join("v1").join(d), &to.join("v1").join(d));
    }
    sample
}

/// `make NVCC="klaraptor-cc <kl_flags>" <targets>` in `dir`, with `env` added.
fn make(dir: &Path, kl_flags: &str, targets: &[&str], env: &[(&str, &Path)]) -> Output {
    let mut c = pinned(dir, Path::new("make"));
    c.arg(format!("NVCC={} {kl_flags}", klaraptor_cc().display()))
        .args(targets);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("cannot run make")
}

/// The sample built once for the read-only tests, under the target's scratch directory.
struct Built {
    sample: PathBuf,
    make_stderr: String,
}

fn built() -> &'static Built {
    static BUILT: OnceLock<Built> = OnceLock::new();
    BUILT.get_or_init(|| {
        let root = Path::new(env!("CARGO_TARGET_TMPDIR")).join("link_models-shared");
        let _ = std::fs::remove_dir_all(&root);
        let sample = copy_sample(&root);
        let make_stderr = ok(&make(&sample, "", &[], &[]));
        Built {
            sample,
            make_stderr,
        }
    })
}

fn specs_of(path: &Path) -> Vec<LinkSpec> {
    scan_bytes(&std::fs::read(path).unwrap(), path).unwrap()
}

fn programs(sample: &Path) -> Vec<(PathBuf, RationalProgram)> {
    rational::load_dir(&sample.join("matmul.klaraptor")).unwrap()
}

fn program(sample: &Path, mangled: &str) -> RationalProgram {
    programs(sample)
        .into_iter()
        .map(|(_, p)| p)
        .find(|p| p.mangled == mangled)
        .unwrap_or_else(|| panic!("no rational program of {mangled}"))
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn nm(path: &Path) -> String {
    let o = Command::new("nm")
        .arg(path)
        .output()
        .expect("cannot run nm");
    assert!(o.status.success(), "nm {}: {}", path.display(), stderr(&o));
    text(&o.stdout)
}

fn contains_bytes(hay: &[u8], needle: &str) -> bool {
    hay.windows(needle.len()).any(|w| w == needle.as_bytes())
}

#[test]
fn the_sample_links_a_rational_program_per_kernel() {
    let b = built();
    assert!(
        !b.make_stderr.contains("warning"),
        "a build with valid profiles warns:\n{}",
        b.make_stderr
    );
    let bin = b.sample.join("matmul");
    let models = b.sample.join("matmul.klaraptor");
    assert_eq!(
        files(&models),
        [
            "mm.nvidia-h200.c",
            "mm.nvidia-h200.json",
            "saxpy.nvidia-h200.c",
            "saxpy.nvidia-h200.json"
        ]
    );

    // The binary holds the runtime, both programs' registrations and the kernel specs.
    let syms = nm(&bin);
    // (The runtime the objects carry is weak and hidden: `t`, `T` or `W`, as the linker
    // leaves it.)
    for s in ["klaraptor_register_model", "klaraptor_select"] {
        let defined = ["t", "T", "W"]
            .iter()
            .any(|k| syms.lines().any(|l| l.ends_with(&format!(" {k} {s}"))));
        assert!(defined, "{s} missing from nm matmul:\n{syms}");
    }
    let count = |name: &str| syms.lines().filter(|l| l.ends_with(name)).count();
    assert_eq!(count(" kl_register_model"), 2, "{syms}");
    assert_eq!(count(" kl_select"), 2, "{syms}");
    let sections = Command::new("objdump")
        .arg("-h")
        .arg(&bin)
        .output()
        .unwrap();
    assert!(
        text(&sections.stdout).contains(".klaraptor_spec"),
        "{}",
        text(&sections.stdout)
    );
    let bytes = std::fs::read(&bin).unwrap();
    for s in [
        MM,
        SAXPY,
        "NVIDIA H200",
        "mm.nvidia-h200.c",
        "saxpy.nvidia-h200.c",
    ] {
        assert!(contains_bytes(&bytes, s), "{s:?} is not in the binary");
    }
    let specs = specs_of(&bin);
    let ids: Vec<&str> = specs.iter().map(|s| s.mangled.as_str()).collect();
    assert_eq!(
        ids.iter().copied().collect::<BTreeSet<_>>(),
        [MM, SAXPY].into()
    );

    // Each program was made from the committed entry of its kernel's code hash.
    let db = ProfileDb::open(b.sample.parent().unwrap().join("klaraptor-profiles")).unwrap();
    for s in &specs {
        let entries = db.entries_for(&s.mangled, &s.code_hash).unwrap();
        assert_eq!(entries.len(), 1, "{}: {} entries", s.mangled, entries.len());
        let p = program(&b.sample, &s.mangled);
        assert_eq!(p.provenance.code_hash, s.code_hash);
        assert_eq!(p.provenance.samples, entries[0].samples.len());
        assert_eq!(p.provenance.captured_at, entries[0].captured_at);
        assert_eq!(p.device.name, entries[0].device.name);
    }

    // Every C file compiles warning-free as strict C99, and calls the runtime's registration.
    let inc = repo().join("runtime-shim/include");
    for c in ["mm.nvidia-h200.c", "saxpy.nvidia-h200.c"] {
        let obj = b.sample.join(format!("{c}.strict.o"));
        let o = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
            .args([
                "-Wall",
                "-Wextra",
                "-Werror",
                "-std=c99",
                "-pedantic",
                "-c",
                "-I",
            ])
            .arg(&inc)
            .arg(models.join(c))
            .arg("-o")
            .arg(&obj)
            .output()
            .unwrap();
        assert!(o.status.success(), "{c}:\n{}", stderr(&o));
        let syms = nm(&obj);
        assert!(syms.contains(" U klaraptor_register_model"), "{c}: {syms}");
        std::fs::remove_file(&obj).unwrap();
    }
}

#[test]
fn inspect_lists_both_kernels_with_device_and_fit_quality() {
    let b = built();
    let o = pinned(&b.sample, &klaraptor())
        .args(["inspect", "matmul"])
        .output()
        .unwrap();
    ok(&o);
    let out = text(&o.stdout);
    for (mangled, name) in [(MM, "mm"), (SAXPY, "saxpy")] {
        let p = program(&b.sample, mangled);
        let at = out
            .find(&format!("kernel {name} ({mangled})"))
            .unwrap_or_else(|| panic!("{name} not listed:\n{out}"));
        let block = &out[at..];
        let block = &block[..block[1..].find("\nkernel ").map_or(block.len(), |i| i + 1)];
        for want in [
            format!("rational program: matmul.klaraptor/{name}.nvidia-h200.c"),
            "device: NVIDIA H200 (sm_90, 132 SMs)".to_string(),
            format!("{} candidate shapes", p.candidates.len()),
            format!(
                "profile: {} samples ({} failed)",
                p.provenance.samples, p.provenance.failed_samples
            ),
            "fit quality".to_string(),
        ] {
            assert!(block.contains(&want), "{want:?} missing:\n{block}");
        }
        for m in klaraptor_program::metrics::METRICS {
            let line = block
                .lines()
                .find(|l| l.trim_start().starts_with(&format!("{m} ")))
                .unwrap_or_else(|| panic!("no fit line for {m}:\n{block}"));
            assert!(
                line.contains("degrees num") && line.contains("cond"),
                "{line}"
            );
        }
    }
    assert!(out.contains("constraints: (bx >= 32)"), "{out}");
}

/// One row of `klaraptor explain`.
struct Row {
    chosen: bool,
    rank: usize,
    block: [u32; 3],
    grid: [u32; 3],
    us: f64,
}

fn explain_rows(out: &str) -> Vec<Row> {
    let re = regex::Regex::new(
        r"^([* ]) +(\d+) +(\d+)x(\d+)x(\d+) +(\d+)x(\d+)x(\d+) +([0-9.]+(?:e[+-]?\d+)?) ",
    )
    .unwrap();
    out.lines()
        .filter_map(|l| re.captures(l))
        .map(|c| {
            let n = |i: usize| c[i].parse::<u32>().unwrap();
            Row {
                chosen: &c[1] == "*",
                rank: c[2].parse().unwrap(),
                block: [n(3), n(4), n(5)],
                grid: [n(6), n(7), n(8)],
                us: c[9].parse().unwrap(),
            }
        })
        .collect()
}

#[test]
fn explain_ranks_all_66_shapes_with_one_choice() {
    let b = built();
    let o = pinned(&b.sample, &klaraptor())
        .args(["explain", "matmul", "mm", "--size", "4096"])
        .output()
        .unwrap();
    ok(&o);
    let out = text(&o.stdout);
    assert!(out.starts_with("mm on NVIDIA H200 at N=4096"), "{out}");
    let rows = explain_rows(&out);
    assert_eq!(rows.len(), 66, "{out}");
    assert_eq!(rows.iter().filter(|r| r.chosen).count(), 1, "{out}");
    assert!(rows[0].chosen, "the first row is not the choice:\n{out}");
    let ranks: Vec<usize> = rows.iter().map(|r| r.rank).collect();
    assert_eq!(ranks, (1..=66).collect::<Vec<_>>());
    let blocks: BTreeSet<[u32; 3]> = rows.iter().map(|r| r.block).collect();
    assert_eq!(blocks, rational::candidates(2).into_iter().collect());
    for w in rows.windows(2) {
        assert!(w[0].us <= w[1].us + 1e-3, "not sorted by time:\n{out}");
    }
    for r in &rows {
        assert_eq!(
            r.grid,
            [
                4096u32.div_ceil(r.block[0]),
                4096u32.div_ceil(r.block[1]),
                1
            ],
            "grid of {:?}",
            r.block
        );
    }
    // What explain prints is RationalProgram::rank.
    let ranked = program(&b.sample, MM).rank(&[4096]).unwrap();
    assert_eq!(rows[0].block, ranked[0].block);
}

/// splitmix64: a deterministic source of test sizes.
fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// 200 distinct data sizes in 1..=100000: the edges, powers of two and their neighbours,
/// the grid's y limit (65535: shapes with by = 1 drop out above it), and random ones.
fn differential_sizes() -> Vec<i64> {
    let mut s: BTreeSet<i64> = [1, 2, 3, 5, 31, 33, 65_534, 65_535, 65_536, 65_537, 100_000]
        .into_iter()
        .collect();
    for e in 1..=16 {
        for d in [-1, 0, 1] {
            s.insert((1i64 << e) + d);
        }
    }
    let mut state = 0x6b6c_6172_6170_746f;
    while s.len() < 200 {
        s.insert(1 + (splitmix(&mut state) % 100_000) as i64);
    }
    s.into_iter().collect()
}

/// The generated C of mm, called through the `klaraptor_model.select` pointer it registers,
/// picks the block `RationalProgram::rank` (Rust, what `klaraptor explain` shows) ranks first,
/// with the same predicted time, at 200 sizes.
///
/// Tolerance 1e-9 relative on the time. The C evaluates the fitted polynomials in the same
/// Horner order, and the model with the same IEEE double operations in the same order, as
/// the Rust (klaraptor-model's differential test finds the model bit-equal), compiled without
/// FMA contraction; its one libm call, log2 of a power-of-two block dimension, is exact; and
/// the manifest `rank` reads holds the very coefficients the C was written with (serde_json's
/// `float_roundtrip`). So on x86-64 the two agree bit for bit (the test prints how often).
/// The tolerance is for a C compiler that contracts `a*b+c` anyway: each contraction changes
/// one rounding, and evaluating the fits far beyond the profiled sizes (N up to 1e5 from fits
/// on 64..256) amplifies such changes (coefficients read back 1 ulp off, before
/// `float_roundtrip`, moved the times by up to 1.5e-10). 1e-9 is also the selection's own tie
/// tolerance, so a difference within it can only swap shapes the selection treats as tied.
#[test]
fn generated_c_selects_what_rust_ranks_first() {
    let b = built();
    let prog = program(&b.sample, MM);
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("harness");
    build_select_harness(&b.sample.join("matmul.klaraptor/mm.nvidia-h200.c"), &exe);

    // The harness passes the device the program was made for.
    let o = Command::new(&exe).arg("device").output().unwrap();
    let dev = ok_stdout(&o);
    let d = &prog.device;
    for want in [
        format!("id {MM}"),
        format!("model_device {}", d.name),
        format!("name {}", d.name),
        format!("sm_count {}", d.sm_count),
        format!("max_threads_per_block {}", d.max_threads_per_block),
        format!(
            "max_block_dim {} {} {}",
            d.max_block_dim[0], d.max_block_dim[1], d.max_block_dim[2]
        ),
        format!(
            "max_grid_dim {} {} {}",
            d.max_grid_dim[0], d.max_grid_dim[1], d.max_grid_dim[2]
        ),
        format!("max_threads_per_sm {}", d.max_threads_per_sm),
        format!("max_blocks_per_sm {}", d.max_blocks_per_sm),
        format!(
            "cc {}.{}",
            d.compute_capability.major, d.compute_capability.minor
        ),
    ] {
        assert!(dev.lines().any(|l| l == want), "{want:?} not in\n{dev}");
    }

    let sizes: Vec<Vec<i64>> = differential_sizes().into_iter().map(|n| vec![n]).collect();
    assert_eq!(sizes.len(), 200);
    select_matches_rank(&exe, &prog, &sizes);
}

/// Runs the harness's `select` on every size and checks that the C picks the block the Rust
/// ranks first, with the same predicted time within 1e-9 relative (see above).
fn select_matches_rank(exe: &Path, prog: &RationalProgram, sizes: &[Vec<i64>]) {
    let out = harness_output(exe, "select", sizes);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), sizes.len(), "{out}");
    let (mut exact, mut worst) = (0usize, 0.0f64);
    for (n, line) in sizes.iter().zip(&lines) {
        let f: Vec<&str> = line.split_whitespace().collect();
        let k = n.len();
        assert_eq!(f.len(), 5 + k, "{line}");
        let echoed: Vec<i64> = f[..k].iter().map(|v| v.parse().unwrap()).collect();
        assert_eq!(&echoed, n, "{line}");
        let rc: i32 = f[k].parse().unwrap();
        let block = [f[k + 1], f[k + 2], f[k + 3]].map(|v| v.parse::<u32>().unwrap());
        let us: f64 = f[k + 4].parse().unwrap();
        let ranked = prog.rank(n).unwrap();
        let Some(first) = ranked.first() else {
            assert_ne!(rc, 0, "{n:?}: C chose {block:?}, Rust allows no shape");
            continue;
        };
        assert_eq!(rc, 0, "{n:?}: C chose nothing, Rust {:?}", first.block);
        assert_eq!(
            block, first.block,
            "{n:?}: C chose {block:?} ({us} µs), Rust {:?} ({} µs)",
            first.block, first.prediction.time_us
        );
        let want = first.prediction.time_us;
        let rel = (us - want).abs() / want.abs().max(f64::MIN_POSITIVE);
        assert!(
            rel <= 1e-9,
            "{n:?}: C predicts {us} µs, Rust {want} µs (relative {rel:e})"
        );
        exact += usize::from(us.to_bits() == want.to_bits());
        worst = worst.max(rel);
    }
    eprintln!(
        "C vs Rust ({}): {} sizes, same block everywhere; predicted times bit-equal at {exact}, \
         worst relative difference {worst:e}",
        prog.kernel,
        sizes.len()
    );
    assert_c_rank_matches(exe, prog, sizes);
    profiled_matches(exe, prog, sizes);
}

/// The C's `kl_profiled_best` (the profile's fastest shape at the nearest profiled size, a
/// candidate of the runtime's refinement) picks what `RationalProgram::profiled_best` does,
/// from a table of every profiled size.
fn profiled_matches(exe: &Path, prog: &RationalProgram, sizes: &[Vec<i64>]) {
    assert!(
        prog.profiled.len() >= 3,
        "{}: profiled table {:?}",
        prog.kernel,
        prog.profiled
    );
    // The profiled sizes themselves, and their neighbours, besides the sizes given.
    let mut all: Vec<Vec<i64>> = sizes.to_vec();
    for p in &prog.profiled {
        all.push(p.sizes.clone());
        all.push(p.sizes.iter().map(|v| v + 1).collect());
    }
    let out = harness_output(exe, "profiled", &all);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), all.len(), "{out}");
    for (n, line) in all.iter().zip(&lines) {
        let want = match prog.profiled_best(n) {
            Some(b) => format!("{}x{}x{}", b[0], b[1], b[2]),
            None => "none".into(),
        };
        assert_eq!(
            line.split_whitespace().last(),
            Some(want.as_str()),
            "{n:?}: {line}"
        );
    }
    for p in &prog.profiled {
        assert_eq!(prog.profiled_best(&p.sizes), Some(p.block), "{p:?}");
    }
}

/// The same agreement for a kernel whose profile counted L1 hits (PolyBench's correlation
/// matrix, committed H200 entry): the C evaluates the hit rate with the data held to the
/// largest profiled sizes, as `RationalProgram::rank` does, at sizes up to 400 times those.
///
/// Each thread of corr_matrix re-reads its column of the data for every later column, so a
/// warp's 32 columns (N · 128 bytes) stay in L1 while few warps share an SM: at 256 × 256
/// the L1 serves 99 % of the load sectors with 64-thread blocks and 63 % with 256-thread
/// ones. Held at the largest profiled sizes, the fitted rate stays a share far past them
/// and keeps that order of the shapes.
#[test]
fn generated_c_holds_the_l1_hit_rate_like_rust() {
    let path = repo().join(
        "samples/klaraptor-profiles/v1/nvidia-h200-2803d38c/_Z11corr_matrixPKfPfii-ca133d4b67228db9.toml",
    );
    let entry: klaraptor_profiler::record::Entry =
        toml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert!(entry
        .samples
        .iter()
        .filter_map(|s| s.counters.as_ref())
        .all(|c| c.gld_l1_hit_sectors.is_some()));
    let spec = corr_matrix_spec(None);
    let dir = tempfile::tempdir().unwrap();
    let prog = rational::build(&spec, &entry, dir.path()).unwrap();
    assert_eq!(prog.shares_held_at, [256.0, 256.0]);
    let hit = |m: i64, n: i64, bx: u32| {
        let grid = [(m as u32).div_ceil(bx), 1, 1];
        prog.metrics_at(&[m, n], [bx, 1, 1], grid).gld_l1_hit_rate
    };
    for (m, n) in [(2048, 256), (1 << 20, 1 << 20)] {
        let (small, large) = (hit(m, n, 64), hit(m, n, 256));
        assert!(small > 0.9 && small <= 1.05, "{small} at 64 threads");
        assert!(large < small - 0.1, "{large} at 256 threads, {small} at 64");
        assert_eq!(hit(m, n, 256), hit(256, 256, 256));
    }
    let c_file = dir.path().join(&prog.c_name);
    std::fs::write(&c_file, prog.to_c().unwrap()).unwrap();
    let exe = dir.path().join("harness");
    build_select_harness(&c_file, &exe);
    let mut state = 0x636f_7272_6d61_7472;
    let mut sizes: Vec<Vec<i64>> = vec![vec![64, 64], vec![256, 256], vec![257, 255]];
    while sizes.len() < 100 {
        let m = 1 + (splitmix(&mut state) % 100_000) as i64;
        let n = 1 + (splitmix(&mut state) % 100_000) as i64;
        sizes.push(vec![m, n]);
    }
    select_matches_rank(&exe, &prog, &sizes);
}

/// Writes `prog`'s C into `dir`, checks that it holds `marker`, builds the select harness
/// with it and checks that the C selects what the Rust ranks first at `sizes` plus `extra`
/// random sizes from `draw`.
fn c_matches_rust(
    dir: &Path,
    prog: &RationalProgram,
    marker: &str,
    mut sizes: Vec<Vec<i64>>,
    extra: usize,
    mut draw: impl FnMut(&mut u64) -> Vec<i64>,
    seed: u64,
) {
    let c_file = dir.join(&prog.c_name);
    std::fs::write(&c_file, prog.to_c().unwrap()).unwrap();
    assert!(std::fs::read_to_string(&c_file).unwrap().contains(marker));
    let exe = dir.join("harness");
    build_select_harness(&c_file, &exe);
    let mut state = seed;
    let target = sizes.len() + extra;
    while sizes.len() < target {
        sizes.push(draw(&mut state));
    }
    select_matches_rank(&exe, prog, &sizes);
}

/// The same agreement for a kernel whose launched threads do not follow its data (the
/// grid-stride SAXPY of samples/idioms, `grid(min(ceil(N, bx), 1056))`, its H200 profile of
/// 2026-11-26 in tests/fixtures/idioms-h200-2026-11-26): the program spreads the launch's
/// work over every launched warp (`threads_loop`), in the C as in the Rust; a warp's loads
/// halve from 128 to 256 threads once the grid is capped, where the grid formula's domain
/// (1056 threads at any N) gave every shape the same.
#[test]
fn generated_c_spreads_a_loop_kernels_work_like_rust() {
    let entry = common::fixture_entry("tests/fixtures/idioms-h200-2026-11-26/saxpy_gs.toml");
    let spec = common::idiom_spec(&entry, "min(ceil(N, bx), 1056)", &[]);
    let dir = tempfile::tempdir().unwrap();
    let prog = rational::build(&spec, &entry, dir.path()).unwrap();
    assert!(prog.threads_loop);
    let n: i64 = 1 << 24;
    let loads = |bx: u32| {
        let grid = [(n as u32).div_ceil(bx).min(1056), 1, 1];
        prog.metrics_at(&[n], [bx, 1, 1], grid).gld_inst
    };
    let (a, b) = (loads(128), loads(256));
    assert!(
        (a / b - 2.0).abs() < 0.2,
        "{a} loads a warp at 128 threads, {b} at 256"
    );
    c_matches_rust(
        dir.path(),
        &prog,
        "busy = 1.0;",
        vec![vec![65536], vec![262144], vec![1 << 24]],
        97,
        |s| vec![1 + (splitmix(s) % 100_000_000) as i64],
        0x7361_7870_795f_6773,
    );
}

/// Dynamic shared memory that follows the block (`shmem(…)`, or the formula the pass read):
/// the rational program computes each candidate's amount, leaves out the shapes over the
/// device's shared memory per block (48 KiB without opting in), and its occupancy uses the
/// amount; the generated C does the same as the Rust ranking.
#[test]
fn shared_memory_that_follows_the_block_filters_the_candidates() {
    let path = repo().join(
        "samples/klaraptor-profiles/v1/nvidia-h200-2803d38c/_Z11corr_matrixPKfPfii-ca133d4b67228db9.toml",
    );
    let entry: klaraptor_profiler::record::Entry =
        toml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let spec = corr_matrix_spec;
    let dir = tempfile::tempdir().unwrap();
    let plain = rational::build(&spec(None), &entry, dir.path()).unwrap();
    // 96 bytes per thread: 512 threads take 48 KiB, 544 more than the device allows.
    let prog = rational::build(&spec(Some("bx * 96")), &entry, dir.path()).unwrap();
    assert_eq!(prog.shmem.as_deref(), Some("bx * 96"));
    let limit = prog.device.shared_memory.per_block;
    assert_eq!(limit, 48 * 1024);
    let base = prog.smem_per_block;
    assert_eq!(prog.smem_at(&[1, 1], [256, 1, 1]), Some(base + 256 * 96));
    let sizes: Vec<Vec<i64>> = vec![vec![64, 64], vec![4096, 256], vec![100_000, 3000]];
    let mut dropped = 0;
    for n in &sizes {
        let all = plain.rank(n).unwrap();
        let ranked = prog.rank(n).unwrap();
        assert!(!ranked.is_empty());
        for r in &ranked {
            assert!(r.block[0] * 96 + base <= limit, "{:?} at {n:?}", r.block);
        }
        let over: Vec<[u32; 3]> = all
            .iter()
            .map(|r| r.block)
            .filter(|b| b[0] * 96 + base > limit)
            .collect();
        assert!(
            !over.is_empty(),
            "the candidates include shapes over the limit"
        );
        assert_eq!(ranked.len() + over.len(), all.len(), "{n:?}");
        dropped += over.len();
    }
    assert!(dropped > 0);
    // A formula of the data too, and one that cannot be evaluated at a shape.
    let by_data = rational::build(&spec(Some("bx * N")), &entry, dir.path()).unwrap();
    assert_eq!(by_data.smem_at(&[10, 100], [32, 1, 1]), Some(base + 3200));
    assert_eq!(by_data.smem_at(&[10, -1], [32, 1, 1]), None);
    assert!(by_data
        .rank(&[4096, 1024])
        .unwrap()
        .iter()
        .all(|r| r.block[0] * 1024 + base <= limit));

    let c_file = dir.path().join(&prog.c_name);
    let text = prog.to_c().unwrap();
    assert!(
        text.contains("shmem(bx * 96)"),
        "the C says where its amount comes from"
    );
    std::fs::write(&c_file, &text).unwrap();
    let exe = dir.path().join("harness");
    build_select_harness(&c_file, &exe);
    let mut state = 0x7368_6d65_6d5f_6278;
    let mut sizes = sizes;
    while sizes.len() < 60 {
        let m = 1 + (splitmix(&mut state) % 100_000) as i64;
        let n = 1 + (splitmix(&mut state) % 100_000) as i64;
        sizes.push(vec![m, n]);
    }
    select_matches_rank(&exe, &prog, &sizes);
}

fn ok_stdout(o: &Output) -> String {
    ok(o);
    text(&o.stdout)
}

#[test]
fn a_rebuild_reuses_the_entry_and_an_edited_kernel_loses_it() {
    let root = tempfile::tempdir().unwrap();
    let sample = copy_sample(root.path());
    ok(&make(&sample, "", &[], &[]));
    let before = specs_of(&sample.join("mm.o"));
    assert_eq!(before.len(), 1);

    // Everything rebuilt, nothing changed: the same code hash, the same entry, no warning.
    let err = ok(&make(&sample, "", &["-B"], &[]));
    assert!(!err.contains("no profile"), "{err}");
    assert!(!err.contains("warning"), "{err}");
    let again = specs_of(&sample.join("mm.o"));
    assert_eq!(again[0].code_hash, before[0].code_hash);
    assert_eq!(files(&sample.join("matmul.klaraptor")).len(), 4);

    // An edited kernel: a new code hash, no entry for it, the warning naming it; saxpy, in
    // another translation unit, keeps its program.
    let mm_cu = sample.join("mm.cu");
    let src = std::fs::read_to_string(&mm_cu).unwrap();
    let edited = src.replace("float acc = 0.0f;", "float acc = 1.0f;");
    assert_ne!(edited, src, "mm.cu no longer has the line this test edits");
    std::fs::write(&mm_cu, edited).unwrap();
    let err = ok(&make(&sample, "", &[], &[]));
    let after = specs_of(&sample.join("mm.o"));
    assert_ne!(after[0].code_hash, before[0].code_hash);
    let db = sample.parent().unwrap().join("klaraptor-profiles");
    assert!(
        err.contains(&format!("warning: no profile in {}", db.display())),
        "{err}"
    );
    assert!(err.contains("for mm (annotated at mm.cu:"), "{err}");
    assert!(!err.contains("saxpy (annotated"), "{err}");
    assert_eq!(
        files(&sample.join("matmul.klaraptor")),
        ["saxpy.nvidia-h200.c", "saxpy.nvidia-h200.json"]
    );
}

#[test]
fn an_empty_database_warns_and_require_model_fails_the_link() {
    let root = tempfile::tempdir().unwrap();
    let sample = copy_sample(root.path());
    let empty = root.path().join("empty-db");
    std::fs::create_dir(&empty).unwrap();

    // KLARAPTOR_PROFILE_DB wins over the project's database: the warning names it, the
    // program links with its own launch dims, and no models directory is left.
    let err = ok(&make(
        &sample,
        "",
        &[],
        &[("KLARAPTOR_PROFILE_DB", empty.as_path())],
    ));
    assert!(
        err.contains(&format!(
            "warning: no profile in {} (from KLARAPTOR_PROFILE_DB)",
            empty.display()
        )),
        "{err}"
    );
    assert!(
        err.contains("mm (annotated at mm.cu:") && err.contains("saxpy (annotated at saxpy.cu:"),
        "{err}"
    );
    assert!(sample.join("matmul").is_file());
    assert!(!sample.join("matmul.klaraptor").exists());
    assert!(
        !empty.join("v1").exists(),
        "the database got entries: {:?}",
        files(&empty)
    );

    // --kl-require-model: the same link is an error (exit 1), and no binary is left, not even
    // the one linked above.
    let link = |extra: &[&str], db: Option<&Path>| {
        let mut c = pinned(&sample, &klaraptor_cc());
        c.args(extra).args([
            "-gencode",
            "arch=compute_90,code=sm_90",
            "main.o",
            "mm.o",
            "saxpy.o",
            "-o",
            "matmul",
        ]);
        if let Some(db) = db {
            c.env("KLARAPTOR_PROFILE_DB", db);
        }
        c.output().unwrap()
    };
    let o = link(&["--kl-require-model"], Some(&empty));
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains(&format!("error: no profile in {}", empty.display()))
            && err.contains("(--kl-require-model)"),
        "{err}"
    );
    assert!(!sample.join("matmul").exists(), "a binary was left");

    // With the project's database every kernel has a program: the flag changes nothing.
    let err = ok(&link(&["--kl-require-model"], None));
    assert!(!err.contains("no profile"), "{err}");
    assert!(sample.join("matmul").is_file());
    assert_eq!(files(&sample.join("matmul.klaraptor")).len(), 4);
}

#[test]
fn a_kernel_that_cannot_be_modelled_keeps_its_launch_and_the_build_goes_on() {
    let root = tempfile::tempdir().unwrap();
    let sample = copy_sample(root.path());
    // mm's entry keeps 3 measured samples (a model needs 4): the rest faulted, as the
    // samples of a kernel whose larger shapes run out of its shared memory do.
    let db = root.path().join("samples/klaraptor-profiles");
    let path = files_under(&db)
        .into_iter()
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with(&format!("{MM}-")))
        })
        .expect("the committed H200 profile has mm");
    let mut entry: klaraptor_profiler::record::Entry =
        toml::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    for s in entry.samples.iter_mut().skip(3) {
        s.counters = None;
        s.error = Some("launch failed with CUDA error 700".into());
    }
    std::fs::write(&path, toml::to_string(&entry).unwrap()).unwrap();

    let err = ok(&make(&sample, "", &[], &[]));
    assert!(
        err.contains("warning: no rational program of mm (annotated at mm.cu:")
            && err.contains("the profile has 3 usable samples")
            && err.contains("keeps the program's own launch dims")
            && err.contains(&format!("klaraptor profile prune --kernel {MM}")),
        "{err}"
    );
    assert!(sample.join("matmul").is_file());
    assert_eq!(
        files(&sample.join("matmul.klaraptor")),
        ["saxpy.nvidia-h200.c", "saxpy.nvidia-h200.json"]
    );

    // --kl-require-model keeps the strict behaviour: the link fails and leaves no binary.
    let o = pinned(&sample, &klaraptor_cc())
        .args([
            "--kl-require-model",
            "-gencode",
            "arch=compute_90,code=sm_90",
        ])
        .args(["main.o", "mm.o", "saxpy.o", "-o", "matmul"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("error: no rational program of mm") && err.contains("(--kl-require-model)"),
        "{err}"
    );
    assert!(!sample.join("matmul").exists(), "a binary was left");
}

fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(files_under(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[test]
fn a_damaged_entry_is_a_miss_kept_aside_and_the_link_succeeds() {
    let root = tempfile::tempdir().unwrap();
    let sample = copy_sample(root.path());
    let db = root.path().join("samples/klaraptor-profiles");
    let entry_of = |mangled: &str| {
        files_under(&db)
            .into_iter()
            .find(|p| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with(&format!("{mangled}-")))
            })
            .unwrap()
    };
    // mm's entry cut in the middle (a disk that filled up); saxpy's with a NaN time.
    let mm = entry_of(MM);
    let text = std::fs::read_to_string(&mm).unwrap();
    std::fs::write(&mm, &text[..text.len() / 2]).unwrap();
    let saxpy = entry_of(SAXPY);
    let text = std::fs::read_to_string(&saxpy).unwrap();
    let nan = regex::Regex::new(r"(?m)^time_ms = .*$")
        .unwrap()
        .replace(&text, "time_ms = nan")
        .into_owned();
    assert_ne!(nan, text);
    std::fs::write(&saxpy, nan).unwrap();

    let err = ok(&make(&sample, "", &[], &[]));
    for (path, why) in [(&mm, "TOML parse error"), (&saxpy, "time_ms = NaN")] {
        let aside = PathBuf::from(format!("{}.invalid", path.display()));
        assert!(
            err.contains(&format!(
                "warning: the profile entry {} is damaged",
                path.display()
            )) && err.contains(why)
                && err.contains(&format!("moved aside to {}", aside.display())),
            "{err}"
        );
        assert!(aside.is_file() && !path.exists());
    }
    // Both kernels keep the program's launch; the binary links.
    assert!(err.contains("no profile in"), "{err}");
    assert!(sample.join("matmul").is_file());
    assert!(!sample.join("matmul.klaraptor").exists());

    // `klaraptor profile list` shows them as such; prune --invalid removes them.
    let list = pinned(&sample, &klaraptor())
        .args(["profile", "list"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&list.stdout).into_owned() + &stderr(&list);
    assert_eq!(text.matches("invalid (set aside)").count(), 2, "{text}");
    let prune = pinned(&sample, &klaraptor())
        .args(["profile", "prune", "--invalid"])
        .output()
        .unwrap();
    assert!(prune.status.success(), "{}", stderr(&prune));
    assert!(!PathBuf::from(format!("{}.invalid", mm.display())).exists());
}

#[test]
fn two_links_of_the_same_inputs_give_the_same_programs() {
    let root = tempfile::tempdir().unwrap();
    let sample = copy_sample(root.path());
    let snapshot = |dir: &Path| -> Vec<(String, Vec<u8>)> {
        let mut out: Vec<(String, Vec<u8>)> = files(dir)
            .into_iter()
            .map(|f| (f.clone(), std::fs::read(dir.join(&f)).unwrap()))
            .collect();
        out.sort();
        out
    };
    ok(&make(&sample, "", &[], &[]));
    let first = snapshot(&sample.join("matmul.klaraptor"));
    assert_eq!(first.len(), 4);
    // A second link a second or more later, from the same objects and profiles.
    std::thread::sleep(std::time::Duration::from_millis(1100));
    std::fs::remove_file(sample.join("matmul")).unwrap();
    ok(&make(&sample, "", &[], &[]));
    let second = snapshot(&sample.join("matmul.klaraptor"));
    for ((name, a), (_, b)) in first.iter().zip(&second) {
        assert!(
            a == b,
            "{name} differs between two links of the same inputs"
        );
    }
    assert_eq!(first.len(), second.len());
    // SOURCE_DATE_EPOCH names the time instead of the profile's (the objects, which carry
    // the programs, are compiled again).
    std::fs::remove_file(sample.join("matmul")).unwrap();
    for o in ["main.o", "mm.o", "saxpy.o"] {
        std::fs::remove_file(sample.join(o)).unwrap();
    }
    let epoch = root.path().join("1700000000");
    let o = pinned(&sample, Path::new("make"))
        .arg(format!("NVCC={}", klaraptor_cc().display()))
        .env("SOURCE_DATE_EPOCH", epoch.file_name().unwrap())
        .output()
        .unwrap();
    ok(&o);
    let c = std::fs::read_to_string(sample.join("matmul.klaraptor/mm.nvidia-h200.c")).unwrap();
    assert!(
        c.contains("2023-11-14T22:13:20Z"),
        "{}",
        &c[..600.min(c.len())]
    );
}

#[test]
fn the_generated_c_is_built_by_a_c_compiler_whatever_cc_says() {
    let root = tempfile::tempdir().unwrap();
    let sample = copy_sample(root.path());
    // Objects compiled without a profile carry no program: the link generates and compiles
    // them.
    let empty = root.path().join("empty-db");
    let objs = make(
        &sample,
        "",
        &["main.o", "mm.o", "saxpy.o"],
        &[("KLARAPTOR_PROFILE_DB", empty.as_path())],
    );
    ok(&objs);
    let relink = |env: &[(&str, &str)]| {
        let _ = std::fs::remove_file(sample.join("matmul"));
        let mut c = pinned(&sample, Path::new("make"));
        c.arg(format!("NVCC={}", klaraptor_cc().display()));
        for (k, v) in env {
            c.env(k, v);
        }
        c.output().unwrap()
    };
    // $CC with arguments, as a shell splits them.
    let err = ok(&relink(&[("CC", "gcc -m64")]));
    assert!(!err.contains("warning"), "{err}");
    assert_eq!(files(&sample.join("matmul.klaraptor")).len(), 4);
    // $CC naming klaraptor-cc (a Makefile that calls nvcc through $(CC), built with
    // `make CC=klaraptor-cc`): not used for the generated C.
    let kcc = klaraptor_cc().display().to_string();
    let err = ok(&relink(&[("CC", kcc.as_str())]));
    assert!(!err.contains("warning"), "{err}");
    assert_eq!(files(&sample.join("matmul.klaraptor")).len(), 4);
    // KLARAPTOR_HOST_CC naming klaraptor-cc is refused with a clear message; the kernels
    // keep their launch and the program links.
    let err = ok(&relink(&[("KLARAPTOR_HOST_CC", kcc.as_str())]));
    assert!(
        err.contains("KLARAPTOR_HOST_CC=") && err.contains("is not a C compiler"),
        "{err}"
    );
    assert!(sample.join("matmul").is_file());
}

#[test]
fn a_two_dimensional_block_with_a_batch_on_the_grids_z_axis() {
    // The committed gemm profile (2-D blocks), read as a batched kernel whose grid has a
    // third axis that is no block dimension: the program ranks 2-D shapes and launches the
    // batch on z, and its C says the same.
    let path = repo().join(
        "samples/klaraptor-profiles/v1/nvidia-h200-2803d38c/_Z4gemmPKfS0_Pfffiii-fe089486fde4b700.toml",
    );
    let entry: klaraptor_profiler::record::Entry =
        toml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let spec = LinkSpec {
        shmem: None,
        name: "gemm".into(),
        mangled: "_Z4gemmPKfS0_Pfffiii".into(),
        data: vec!["NI".into(), "NJ".into(), "NK".into()],
        dim: 2,
        grid: vec!["ceil(NJ, bx)".into(), "ceil(NI, by)".into(), "7".into()],
        block: vec![],
        profile_run: None,
        profile_sizes: vec![],
        code_hash: "fe089486fde4b700".into(),
        annotated_at: String::new(),
        build_dir: Default::default(),
    };
    let dir = tempfile::tempdir().unwrap();
    let prog = rational::build(&spec, &entry, dir.path()).unwrap();
    let ranked = prog.rank(&[1000, 2000, 300]).unwrap();
    assert!(!ranked.is_empty());
    for r in &ranked {
        assert_eq!(r.block[2], 1, "{:?}", r.block);
        assert_eq!(
            r.grid,
            [
                2000u32.div_ceil(r.block[0]),
                1000u32.div_ceil(r.block[1]),
                7
            ]
        );
    }
    let c = prog.to_c().unwrap();
    assert!(c.contains("const int64_t g2 = INT64_C(7);"), "{c}");
}

/// The link spec of the committed H200 profile of corr's `corr_matrix` (its annotation's
/// grid), with the dynamic shared memory formula `shmem`.
fn corr_matrix_spec(shmem: Option<&str>) -> LinkSpec {
    LinkSpec {
        shmem: shmem.map(str::to_string),
        name: "corr_matrix".into(),
        mangled: "_Z11corr_matrixPKfPfii".into(),
        data: vec!["M".into(), "N".into()],
        dim: 1,
        grid: vec!["ceil(M, bx)".into()],
        block: vec![],
        profile_run: None,
        profile_sizes: vec![],
        code_hash: "ca133d4b67228db9".into(),
        annotated_at: String::new(),
        build_dir: Default::default(),
    }
}

/// A GPU of the profiled GPU's architecture with a description but no profile (the shipped
/// H100 description; the copied profiles are the H200's alone) gets a transferred program: fitted
/// on the H200's profile, generated for the H100's description, said so in its manifest and by
/// `klaraptor inspect`; the H200's own programs are unchanged. `KLARAPTOR_TRANSFER=off` (what
/// the other tests set) builds none.
#[test]
fn a_gpu_without_a_profile_gets_programs_transferred_from_one_of_its_architecture() {
    let root = tempfile::tempdir().unwrap();
    let sample = copy_sample(root.path());
    let mut c = pinned(&sample, Path::new("make"));
    c.arg(format!("NVCC={}", klaraptor_cc().display()))
        .env_remove("KLARAPTOR_TRANSFER");
    ok(&c.output().unwrap());
    let progs = programs(&sample);
    let mut devices: Vec<(String, String, Option<String>)> = progs
        .iter()
        .map(|(_, p)| {
            (
                p.kernel.clone(),
                p.device.name.clone(),
                p.transferred_from.clone(),
            )
        })
        .collect();
    devices.sort();
    let h100 = "NVIDIA H100 80GB HBM3".to_string();
    let h200 = "NVIDIA H200".to_string();
    assert_eq!(
        devices,
        [
            ("mm".into(), h100.clone(), Some(h200.clone())),
            ("mm".into(), h200.clone(), None),
            ("saxpy".into(), h100.clone(), Some(h200.clone())),
            ("saxpy".into(), h200.clone(), None),
        ]
    );
    // The transferred program is the H200 profile's, with the H100's description.
    let (_, mm100) = progs
        .iter()
        .find(|(_, p)| p.kernel == "mm" && p.device.name == h100)
        .unwrap();
    let (_, mm200) = progs
        .iter()
        .find(|(_, p)| p.kernel == "mm" && p.device.name == h200)
        .unwrap();
    assert_eq!(mm100.provenance.captured_at, mm200.provenance.captured_at);
    assert_eq!(mm100.provenance.samples, mm200.provenance.samples);
    assert_ne!(mm100.device.memory_clock_mhz, mm200.device.memory_clock_mhz);
    let o = pinned(&sample, &klaraptor())
        .args(["inspect", "matmul"])
        .output()
        .unwrap();
    let out = ok_stdout(&o);
    assert_eq!(
        out.matches("transferred from NVIDIA H200").count(),
        2,
        "{out}"
    );
    // The generated C tells the runtime (model ABI 4), which says so in its log.
    let c = |p: &RationalProgram| {
        std::fs::read_to_string(sample.join("matmul.klaraptor").join(&p.c_name)).unwrap()
    };
    assert!(c(mm100).contains(", \"NVIDIA H200\" };"), "{}", c(mm100));
    assert!(c(mm200).contains(", NULL };"), "{}", c(mm200));
    // Each program declares the oldest model ABI that holds it: 4 for the transferred one
    // (its field), 3 for the GPU's own, which a runtime of ABI 3 (objects compiled by an
    // older klaraptor-cc) still takes.
    assert!(c(mm100).contains("kl_model = { 4, "), "{}", c(mm100));
    assert!(c(mm200).contains("kl_model = { 3, "), "{}", c(mm200));
    // And the programs the same link builds with transfers off: the H200's alone, the same.
    let other = tempfile::tempdir().unwrap();
    let plain = copy_sample(other.path());
    ok(&make(&plain, "", &[], &[]));
    let plain_progs = programs(&plain);
    assert_eq!(plain_progs.len(), 2);
    let (_, p200) = plain_progs.iter().find(|(_, p)| p.kernel == "mm").unwrap();
    assert_eq!(
        p200.rank(&[4096]).unwrap()[0].block,
        mm200.rank(&[4096]).unwrap()[0].block
    );
}

/// The whole committed database holds both GPUs' own profiles of the sample (the H200's of
/// 2026-11-22, the H100's of 2026-11-26, same code hashes): one link builds each GPU's own
/// program from its own profile, none transferred even with transfers on, and `klaraptor
/// inspect` lists both devices for each kernel.
#[test]
fn the_committed_database_gives_each_gpu_its_own_programs() {
    let root = tempfile::tempdir().unwrap();
    let sample = copy_sample_with(root.path(), &[H200_DIR, H100_DIR]);
    let mut c = pinned(&sample, Path::new("make"));
    c.arg(format!("NVCC={}", klaraptor_cc().display()))
        .env_remove("KLARAPTOR_TRANSFER");
    let err = ok(&c.output().unwrap());
    assert!(!err.contains("warning"), "{err}");
    assert_eq!(
        files(&sample.join("matmul.klaraptor")),
        [
            "mm.nvidia-h100-80gb-hbm3.c",
            "mm.nvidia-h100-80gb-hbm3.json",
            "mm.nvidia-h200.c",
            "mm.nvidia-h200.json",
            "saxpy.nvidia-h100-80gb-hbm3.c",
            "saxpy.nvidia-h100-80gb-hbm3.json",
            "saxpy.nvidia-h200.c",
            "saxpy.nvidia-h200.json"
        ]
    );
    let db = ProfileDb::open(root.path().join("samples/klaraptor-profiles")).unwrap();
    let specs = specs_of(&sample.join("matmul"));
    for (_, p) in programs(&sample) {
        assert_eq!(
            p.transferred_from, None,
            "{} on {}",
            p.kernel, p.device.name
        );
        let spec = specs.iter().find(|s| s.mangled == p.mangled).unwrap();
        let entries = db.entries_for(&p.mangled, &spec.code_hash).unwrap();
        let own = entries
            .iter()
            .find(|e| e.device.name == p.device.name)
            .unwrap_or_else(|| panic!("no entry of {} on {}", p.kernel, p.device.name));
        assert_eq!(p.provenance.captured_at, own.captured_at);
        assert_eq!(p.provenance.samples, own.samples.len());
    }
    let o = pinned(&sample, &klaraptor())
        .args(["inspect", "matmul"])
        .output()
        .unwrap();
    let out = ok_stdout(&o);
    for name in ["mm", "saxpy"] {
        for dev in ["nvidia-h200", "nvidia-h100-80gb-hbm3"] {
            assert!(
                out.contains(&format!(
                    "rational program: matmul.klaraptor/{name}.{dev}.c"
                )),
                "{name} on {dev}:\n{out}"
            );
        }
    }
    assert!(!out.contains("transferred"), "{out}");
}

/// Work the warps of a loop kernel do in turn (samples/idioms/reduce_atomic's
/// `sum_shfl_atomic`: a grid-stride sum under a grid capped at 1056 blocks, each warp's
/// shuffle-reduced sum added to one address with `atomicAdd`), profiled on an NVIDIA H200 and
/// an NVIDIA H100 80GB HBM3 on 2026-11-26 (tests/fixtures/idioms-batch2-*-2026-11-26). The
/// time calibration finds the cost each launched warp adds, about the 1.77 ns an atomic on
/// one address takes on these GPUs (profiler/tests/atomics_fixture.rs), and with it the
/// profile's times are explained (median error below 5 %, against about 30 % without it).
/// At 16 M elements the program then takes blocks of 128 threads or more, which the sweeps
/// measured at 0.75–1.00 of the fastest (the model without the cost took 64 or 96: 0.42–0.63).
/// The generated C ranks as the Rust does.
#[test]
fn a_loop_kernels_warps_in_turn_are_charged_in_c_as_in_rust() {
    for gpu in ["h200", "h100"] {
        let entry = common::fixture_entry(&format!(
            "tests/fixtures/idioms-batch2-{gpu}-2026-11-26/sum_shfl_atomic.toml"
        ));
        let spec = common::idiom_spec(&entry, "min(ceil(N, bx), 1056)", &[]);
        let dir = tempfile::tempdir().unwrap();
        let prog = rational::build(&spec, &entry, dir.path()).unwrap();
        assert!(prog.threads_loop);
        let tf = &prog.time_fit;
        assert!(
            (0.0014..0.0022).contains(&tf.warp_us),
            "{gpu}: {} µs a warp",
            tf.warp_us
        );
        assert!(tf.median_rel_error < 0.05, "{gpu}: {tf:?}");
        let n: i64 = 1 << 24;
        let top = prog.rank(&[n]).unwrap()[0].block;
        assert!(top[0] >= 128, "{gpu}: {top:?} at {n}");
        // The profile's 256-thread launch at 262 144 elements: 8 192 warps, each one atomic.
        let s = entry
            .samples
            .iter()
            .find(|s| s.sizes == [262144] && s.block == [256, 1, 1])
            .unwrap();
        let measured = s.counters.as_ref().unwrap().time_ms * 1000.0;
        let ranked = prog.rank(&[262144]).unwrap();
        let at = ranked.iter().find(|r| r.block == [256, 1, 1]).unwrap();
        assert!(
            (at.prediction.time_us / measured - 1.0).abs() < 0.15,
            "{gpu}: {} µs predicted, {measured} measured",
            at.prediction.time_us
        );
        assert!(
            tf.apply(at.model_us) < 0.5 * measured,
            "{gpu}: the warps' cost is most of that launch"
        );
        c_matches_rust(
            dir.path(),
            &prog,
            "kl_warps",
            vec![vec![65536], vec![262144], vec![n]],
            97,
            |s| vec![1 + (splitmix(s) % 100_000_000) as i64],
            0x7375_6d5f_7368_666c,
        );
    }
}

/// The L1's capacity for a loop kernel's re-reads (samples/idioms/softmax_rows: one block per
/// row, three passes over the row, the second and third served by the L1), profiled on an
/// NVIDIA H100 80GB HBM3 on 2026-11-25 (tests/fixtures/idioms-h100-2026-11-25) at rows of at
/// most 512 floats. At 1000 rows of 20 000 floats (80 KB a row) four resident blocks of 512
/// threads hold 320 KB, more than the 256 KB of L1 and shared memory an SM has; two of 1024
/// hold 160 KB. The sweeps measured 1024 threads fastest and 512 at 0.68–0.73 of it. The
/// program ranks 1024 above 512 there, and not with an L1 large enough for every share; the
/// generated C ranks as the Rust does.
#[test]
fn a_loop_kernels_re_reads_need_its_blocks_shares_to_fit_the_l1() {
    let entry = common::fixture_entry("tests/fixtures/idioms-h100-2026-11-25/softmax_rows.toml");
    let spec = common::idiom_spec(&entry, "M", &["bx % 32 == 0"]);
    let dir = tempfile::tempdir().unwrap();
    let prog = rational::build(&spec, &entry, dir.path()).unwrap();
    assert!(prog.threads_loop);
    assert_eq!(prog.device.l1_unified_per_sm(), 256 * 1024);
    let wide = [1000, 20000];
    let place = |p: &rational::RationalProgram, bx: u32| {
        p.model_rank(&wide)
            .unwrap()
            .iter()
            .position(|r| r.block == [bx, 1, 1])
            .unwrap()
    };
    assert!(place(&prog, 1024) < place(&prog, 512));
    let mut roomy = prog.clone();
    roomy.device.shared_memory.unified_per_sm = 1 << 30;
    assert!(
        place(&roomy, 512) < place(&roomy, 1024),
        "with every share in the L1, 512 threads are predicted faster"
    );
    c_matches_rust(
        dir.path(),
        &prog,
        "m->l1_reuse_loop = 1.0;",
        vec![vec![128, 128], vec![4096, 4096], wide.to_vec()],
        57,
        |s| {
            let m = 1 + (splitmix(s) % 20_000) as i64;
            vec![m, 1 + (splitmix(s) % 40_000) as i64]
        },
        0x736f_6674_6d61_7821,
    );
}
