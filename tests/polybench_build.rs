//! `make -C samples/polybench NVCC=klaraptor-cc` on a machine without a GPU: the programs
//! build from the committed H200 profile entries (`samples/klaraptor-profiles/`, captured
//! by the collector on an NVIDIA H200 on 2026-11-22), and every annotated kernel gets its
//! rational program — no "no profile" warning.
//!
//! `scripts/test` builds the representative subset [`SUBSET`]; `scripts/test --full`
//! (`KLARAPTOR_TEST_FULL=1`, as CI runs it) builds all 21 programs.

mod common;
use common::*;

use std::path::Path;
use std::process::Command;

/// Every program of the suite, as `samples/polybench/Makefile` lists them.
const PROGRAMS: [&str; 21] = [
    "2dconv", "2mm", "3dconv", "3mm", "adi", "atax", "bicg", "corr", "covar", "doitgen", "fdtd-2d",
    "gemm", "gemver", "gesummv", "gramschm", "jacobi1d", "jacobi2d", "lu", "mvt", "syr2k", "syrk",
];

/// The programs the default run builds: together they cover every way the suite's sources
/// annotate and launch their kernels (samples/polybench/README.md's table), at a quarter of
/// the full suite's cost (fitting the rational programs at link time dominates it).
#[rustfmt::skip]
const SUBSET: [&str; 5] = [
    // `#pragma klaraptor`, three data parameters (a three-variable fit), sizes given as
    // 3-tuples, two kernels in one source, a profile run line naming one placeholder twice.
    "2mm",
    // Annotations kept out of the source, in `klaraptor.toml`.
    "bicg",
    // Four annotated kernels in one source, 1-D and 2-D ones mixed.
    "corr",
    // The original KLARAPTOR pragmas (`kernel_info_*`), a 2-D kernel, launches in a host
    // time loop.
    "jacobi2d",
    // `data(...)` naming fewer sizes than the kernel's int arguments, a 2-D grid from a
    // single data parameter, launches in a host loop over k.
    "lu",
];

#[test]
fn the_polybench_suite_builds_with_its_rational_programs() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let tmp = tempfile::tempdir().unwrap();
    // The tracked files only: not what a local build left in the tree.
    let listed = Command::new("git")
        .current_dir(repo)
        .args([
            "ls-files",
            "samples/polybench",
            "samples/klaraptor-profiles",
        ])
        .output()
        .expect("git ls-files");
    assert!(listed.status.success());
    let files = String::from_utf8(listed.stdout).unwrap();
    for f in files.lines() {
        let to = tmp.path().join(f);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(repo.join(f), &to).unwrap();
    }
    let dir = tmp.path().join("samples/polybench");
    // The list above is the Makefile's, so that the full run builds (and checks) them all.
    let mk = std::fs::read_to_string(dir.join("Makefile")).unwrap();
    let listed: Vec<&str> = mk
        .lines()
        .find_map(|l| l.strip_prefix("PROGRAMS := "))
        .unwrap()
        .split_whitespace()
        .collect();
    assert_eq!(listed, PROGRAMS, "samples/polybench/Makefile's PROGRAMS");
    let programs: &[&str] = if full() { &PROGRAMS } else { &SUBSET };
    let o = Command::new("make")
        .current_dir(&dir)
        .arg(format!("-j{}", jobs()))
        .arg(format!("NVCC={}", klaraptor_cc().display()))
        .args(programs)
        .env("KLARAPTOR_NVCC", nvcc())
        .env("KLARAPTOR_NO_GPU", "1")
        .env("KLARAPTOR_TRANSFER", "off")
        .env("XDG_CACHE_HOME", tmp.path().join(".cache"))
        .env_remove("KLARAPTOR_PROFILE_DB")
        .env_remove("NVCC_PREPEND_FLAGS")
        .env_remove("NVCC_APPEND_FLAGS")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(!err.contains("warning"), "{err}");
    for p in programs {
        let bin = dir.join(p).join(p);
        assert!(bin.is_file(), "{p} was not built");
        let models = dir.join(p).join(format!("{p}.klaraptor"));
        let c_files = std::fs::read_dir(&models)
            .unwrap_or_else(|e| panic!("{}: {e}", models.display()))
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .path()
                    .extension()
                    .is_some_and(|x| x == "c")
            })
            .count();
        assert!(
            c_files >= 1,
            "{p}: no rational program in {}",
            models.display()
        );
        let o = Command::new(klaraptor())
            .args(["inspect"])
            .arg(&bin)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        assert!(String::from_utf8_lossy(&o.stdout).contains("NVIDIA H200"));
    }
}
