//! Importing a real ncu capture (no GPU): the matmul sample's profiling variant, run under
//! ncu on the H200 (tests/fixtures/ncu-capture-h200-2026-11-22, see its README.txt), joined
//! with the runtime's launch log by `import_captures`, and stored by `klaraptor import`.
//! The variant is rebuilt here from samples/matmul with `--kl-profiling-variant`.

mod common;
use common::*;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use klaraptor_profiler::db::ProfileDb;
use klaraptor_profiler::plan::{self, import_captures, import_ncu};
use klaraptor_profiler::record::{Counters, Entry, Sample};
use klaraptor_spec::link::{scan_bytes, LinkSpec};

const MM: &str = "_Z2mmPKfS0_Pfi";
const SAXPY: &str = "_Z5saxpyfPKfPfi";

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn capture() -> PathBuf {
    repo().join("tests/fixtures/ncu-capture-h200-2026-11-22")
}

fn job() -> PathBuf {
    capture().join("job1")
}

/// The profiling variant of samples/matmul, built once (with an empty profile database, no
/// GPU) under the target's scratch directory.
fn variant() -> &'static Path {
    static VARIANT: OnceLock<PathBuf> = OnceLock::new();
    VARIANT.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("profiling_import-variant");
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("empty-db")).unwrap();
        for f in ["Makefile", "kernels.h", "main.cu", "mm.cu", "saxpy.cu"] {
            std::fs::copy(repo().join("samples/matmul").join(f), dir.join(f)).unwrap();
        }
        let o = Command::new("make")
            .arg(format!(
                "NVCC={} --kl-profiling-variant=matmul.profile",
                klaraptor_cc().display()
            ))
            .current_dir(&dir)
            .env("KLARAPTOR_NVCC", nvcc())
            .env("KLARAPTOR_NO_GPU", "1")
            .env("KLARAPTOR_TRANSFER", "off")
            .env("KLARAPTOR_PROFILE_DB", dir.join("empty-db"))
            .env("XDG_CACHE_HOME", dir.join("cache"))
            .env_remove("NVCC_PREPEND_FLAGS")
            .env_remove("NVCC_APPEND_FLAGS")
            .output()
            .unwrap();
        let err = ok(&o);
        assert!(
            err.contains("profiling variant: matmul.profile (plan matmul.profile.plan)"),
            "{err}"
        );
        dir.join("matmul.profile")
    })
}

fn specs() -> Vec<LinkSpec> {
    let v = variant();
    scan_bytes(&std::fs::read(v).unwrap(), v).unwrap()
}

fn imported() -> &'static [Entry] {
    static ENTRIES: OnceLock<Vec<Entry>> = OnceLock::new();
    ENTRIES.get_or_init(|| import_captures(variant(), &[job()]).expect("importing the capture"))
}

fn entry(mangled: &str) -> &'static Entry {
    imported()
        .iter()
        .find(|e| e.kernel.mangled == mangled)
        .unwrap_or_else(|| panic!("no entry for {mangled}"))
}

fn counters(s: &Sample) -> &Counters {
    s.counters
        .as_ref()
        .unwrap_or_else(|| panic!("{:?} has no counters", s.block))
}

fn sample(e: &Entry, block: [u32; 3]) -> &Sample {
    let mut m = e.samples.iter().filter(|s| s.block == block);
    let s = m.next().unwrap_or_else(|| panic!("no sample of {block:?}"));
    assert!(m.next().is_none(), "two samples of {block:?}");
    s
}

#[test]
fn the_variant_carries_the_sample_specs_and_its_plan() {
    let s = specs();
    let ids: Vec<&str> = s.iter().map(|s| s.mangled.as_str()).collect();
    assert_eq!(ids.len(), 2);
    assert!(ids.contains(&MM) && ids.contains(&SAXPY), "{ids:?}");
    let plan = std::fs::read_to_string(variant().with_extension("profile.plan")).unwrap();
    assert_eq!(plan, plan::plan_file(&s));
}

#[test]
fn import_gives_an_entry_per_kernel_with_the_capture_environment() {
    let entries = imported();
    assert_eq!(entries.len(), 2);
    for spec in specs() {
        let e = entry(&spec.mangled);
        assert_eq!(e.kernel.name, spec.name);
        assert_eq!(e.kernel.code_hash, spec.code_hash);
        assert_eq!(e.kernel.data, ["N"]);
        assert_eq!(e.kernel.dim, spec.dim);
        // env.txt: nvidia-smi's line, ncu's and nvcc's versions, the date.
        assert_eq!(e.device.name, "NVIDIA H200");
        assert_eq!(e.device.uuid, "GPU-85849941-3ec6-b15c-b8d9-73421661c834");
        assert_eq!(e.device.cc, "9.0");
        assert_eq!(e.driver_version, "580.159.04");
        assert_eq!(e.cuda_version, "13.0");
        assert_eq!(e.captured_at, "2026-11-22T16:07:23Z");
        assert_eq!(
            e.collector,
            "ncu (Version 2025.3.1.0 (build 36398880) (public-release))"
        );
        // device__attribute_multiprocessor_count of the CSV.
        assert_eq!(e.device.sm_count, 132);
        assert_eq!(e.plan.sizes, spec.profile_sizes);
        assert_eq!((e.plan.runs, e.plan.warmup), (1, 0));
    }
}

#[test]
fn mm_has_every_planned_launch_in_plan_order_and_not_its_own() {
    let e = entry(MM);
    // The plan at capture time: all 66 power-of-two shapes of at most 1024 threads, by
    // outer, bx inner (the launch log's order). The program's own 32x8 launch is not a sample.
    let mut plan = Vec::new();
    for ey in 0..=10u32 {
        for ex in 0..=(10 - ey) {
            plan.push([1u32 << ex, 1 << ey, 1]);
        }
    }
    let blocks: Vec<[u32; 3]> = e.samples.iter().map(|s| s.block).collect();
    assert_eq!(blocks, plan);
    for s in &e.samples {
        assert_eq!(s.sizes, [64]);
        assert!(s.error.is_none(), "{s:?}");
        assert_eq!(
            s.grid,
            [64u32.div_ceil(s.block[0]), 64u32.div_ceil(s.block[1]), 1]
        );
        let c = counters(s);
        assert_eq!(c.regs_per_thread, 32);
        assert_eq!((c.smem_static, c.smem_dynamic), (0, 0));
        assert_eq!(c.time_runs_ms, [c.time_ms]);
        assert_eq!(c.achieved_active_warps, 0.0, "not in this capture");
    }
}

/// Counters against rows of job1/ncu.csv read by hand (IDs 0, 35, 42; row 66 is the
/// program's own 32x8 launch, with other DRAM bytes and time: it must not be the sample).
/// inst_barrier: this capture has no barrier-stall column, so it is
/// smsp__inst_executed_pipe_adu.sum − smsp__inst_executed_op_ldc.sum.
#[test]
fn mm_counters_equal_the_csv() {
    let e = entry(MM);
    let want = |block: [u32; 3], v: [u64; 13], time_ns: f64| {
        let c = counters(sample(e, block));
        let got = [
            c.inst_executed,
            c.inst_global_ld,
            c.inst_global_st,
            c.inst_shared_ld,
            c.inst_shared_st,
            c.inst_barrier,
            c.gld_requests,
            c.gst_requests,
            c.gld_sectors,
            c.gst_sectors,
            c.dram_bytes_read,
            c.dram_bytes_write,
            u64::from(c.regs_per_thread),
        ];
        assert_eq!(got, v, "{block:?}");
        assert!(
            (c.time_ms - time_ns / 1e6).abs() < 1e-15,
            "{block:?}: {}",
            c.time_ms
        );
    };
    // ID 0: 1x1x1, grid 64x64. adu 24,576 − ldc 16,384 = 8,192.
    want(
        [1, 1, 1],
        [
            1_388_544, 524_288, 4_096, 0, 0, 8_192, 524_288, 4_096, 524_288, 4_096, 38_656, 0, 32,
        ],
        7968.0,
    );
    // ID 35: 32x8x1, grid 2x8. adu 768 − ldc 512 = 256.
    want(
        [32, 8, 1],
        [
            43_392, 16_384, 128, 0, 0, 256, 16_384, 128, 40_960, 512, 38_656, 0, 32,
        ],
        5376.0,
    );
    // ID 42: 16x16x1, grid 4x4: fewer sectors per load than 32x8.
    want(
        [16, 16, 1],
        [
            43_392, 16_384, 128, 0, 0, 256, 16_384, 128, 32_768, 512, 38_656, 0, 32,
        ],
        5120.0,
    );
}

#[test]
fn saxpy_records_the_refused_shapes_as_failed_samples() {
    let e = entry(SAXPY);
    let spec = specs().into_iter().find(|s| s.mangled == SAXPY).unwrap();
    assert_eq!(spec.block, ["(bx >= 32)"]);
    // The 1-D plan, in order: the five shapes under one warp break the constraint bx >= 32
    // and were never launched; the 14 others were. saxpy runs on n*n = 4096 elements.
    let blocks: Vec<[u32; 3]> = e.samples.iter().map(|s| s.block).collect();
    assert_eq!(blocks, plan::plan_shapes(1));
    assert_eq!(e.samples.len(), 19);
    for s in &e.samples {
        assert_eq!(s.sizes, [4096]);
        if s.block[0] < 32 {
            assert_eq!(
                s.error.as_deref(),
                Some("it violates the kernel's constraints")
            );
            assert!(s.counters.is_none());
            assert_eq!(s.grid, [0, 0, 0]);
        } else {
            assert!(s.error.is_none(), "{s:?}");
            assert_eq!(s.grid, [4096u32.div_ceil(s.block[0]), 1, 1]);
            assert_eq!(counters(s).regs_per_thread, 16);
        }
    }
    assert_eq!(e.samples.iter().filter(|s| s.error.is_some()).count(), 5);
    // ID 69: 96x1x1, grid 43. adu 643 − ldc 514 = 129.
    let c = counters(sample(e, [96, 1, 1]));
    assert_eq!(
        [
            c.inst_executed,
            c.inst_global_ld,
            c.inst_global_st,
            c.inst_barrier,
            c.gld_requests,
            c.gst_requests,
            c.gld_sectors,
            c.gst_sectors,
            c.dram_bytes_read,
            c.dram_bytes_write
        ],
        [2_440, 256, 128, 129, 256, 128, 1_024, 512, 35_584, 0]
    );
    assert!((c.time_ms - 2208e-6).abs() < 1e-15);
    // ID 74 is the planned 256x1x1 (DRAM 35,328 B, 2,176 ns); ID 81, the program's own launch
    // of the same shape, read 35,584 B.
    let c = counters(sample(e, [256, 1, 1]));
    assert_eq!(c.dram_bytes_read, 35_328);
    assert_eq!(c.inst_executed, 2_432);
    assert!((c.time_ms - 2176e-6).abs() < 1e-15);
}

#[test]
fn klaraptor_import_stores_the_entries() {
    let db_dir = tempfile::tempdir().unwrap();
    let o = Command::new(klaraptor())
        .arg("import")
        .arg("--binary")
        .arg(variant())
        .arg("--db")
        .arg(db_dir.path())
        .arg(job())
        .env("XDG_CACHE_HOME", db_dir.path().join("cache"))
        .output()
        .unwrap();
    let err = ok(&o);
    assert!(
        err.contains("has no column for achieved_active_warps"),
        "the missing column is not said:\n{err}"
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("mm on NVIDIA H200: 66 samples (0 failed)"),
        "{out}"
    );
    assert!(
        out.contains("saxpy on NVIDIA H200: 19 samples (5 failed)"),
        "{out}"
    );
    let db = ProfileDb::open(db_dir.path()).unwrap();
    for spec in specs() {
        let stored = db.entries_for(&spec.mangled, &spec.code_hash).unwrap();
        assert_eq!(stored.len(), 1, "{}", spec.mangled);
        assert_eq!(&stored[0], entry(&spec.mangled));
    }
}

#[test]
fn a_launch_log_that_does_not_match_the_csv_is_refused() {
    let csv = std::fs::read_to_string(job().join("ncu.csv")).unwrap();
    let dir = job().join("launches");
    let log =
        std::fs::read_to_string(dir.join(format!("{}.launches.jsonl", plan::stem_in(&dir, MM))))
            .unwrap();
    let (all, _) = import_ncu(&csv, &log, MM).unwrap();
    assert_eq!(all.len(), 66);

    // One launch fewer in the log than ncu profiled.
    let short: String = log.lines().skip(1).map(|l| format!("{l}\n")).collect();
    let err = format!("{:#}", import_ncu(&csv, &short, MM).unwrap_err());
    assert!(
        err.contains("ncu profiled 67 launches of _Z2mmPKfS0_Pfi but the runtime logged 66"),
        "{err}"
    );
    // Two launches swapped: the blocks no longer line up.
    let mut lines: Vec<&str> = log.lines().collect();
    lines.swap(0, 1);
    let err = format!("{:#}", import_ncu(&csv, &lines.join("\n"), MM).unwrap_err());
    assert!(err.contains("ncu row and launch log disagree"), "{err}");
    // A kernel the CSV does not have: nothing to join.
    let (none, _) = import_ncu(&csv, "", "_Z5otherv").unwrap();
    assert!(none.is_empty());
}

/// `klaraptor import` of a capture directory that is missing, empty, of something else, or
/// that holds no record of the binary's kernels is an error saying so (it stored nothing);
/// and `KLARAPTOR_NVCC` naming no nvcc is an error naming the variable, not a silent fall
/// back to another nvcc.
#[test]
fn import_of_no_capture_and_a_wrong_klaraptor_nvcc_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir_all(d.join("empty")).unwrap();
    std::fs::create_dir_all(d.join("junk")).unwrap();
    std::fs::write(d.join("junk/notes.txt"), "hello").unwrap();
    std::fs::create_dir_all(d.join("norecords/records")).unwrap();
    std::fs::write(d.join("norecords/env.txt"), "").unwrap();
    for (capture, says) in [
        ("missing", "capture directory "),
        ("empty", "is not a capture: it holds neither records/"),
        ("junk", "is not a capture: it holds neither records/"),
        ("norecords", "hold no record of a kernel of"),
    ] {
        let o = Command::new(klaraptor())
            .arg("import")
            .arg("--binary")
            .arg(variant())
            .arg("--db")
            .arg(d.join("db"))
            .arg(d.join(capture))
            .env("XDG_CACHE_HOME", d.join("cache"))
            .output()
            .unwrap();
        let err = stderr(&o);
        assert!(!o.status.success(), "{capture}: {err}");
        assert!(err.contains(says), "{capture}: {err}");
        assert!(!d.join("db/v1").exists(), "{capture}: stored something");
    }
    let o = Command::new(klaraptor_cc())
        .args(["--version"])
        .env("KLARAPTOR_NVCC", "/nonexistent/nvcc")
        .output()
        .unwrap();
    let err = stderr(&o);
    assert!(!o.status.success(), "{err}");
    assert!(
        err.contains("KLARAPTOR_NVCC=/nonexistent/nvcc is not an executable file"),
        "{err}"
    );
}
