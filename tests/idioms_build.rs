//! `make -C samples/idioms NVCC=klaraptor-cc` on a machine without a GPU: every program of
//! the idioms suite (grid-stride loops, shared memory and barriers, warp shuffles, atomics,
//! 3-D blocks, a batch on the grid's z axis, a kernel template, streams) builds through
//! klaraptor-cc, its annotations read and its launches instrumented. The suite has no
//! committed profile yet, so each kernel keeps the program's own launch: the only warnings
//! allowed are klaraptor-cc's "no profile" ones.
//!
//! `scripts/test` builds and emulates the representative subset [`SUBSET`];
//! `scripts/test --full` (`KLARAPTOR_TEST_FULL=1`, as CI runs it) all 31 programs.

mod common;
use common::*;

use std::path::Path;
use std::process::Command;

/// The programs the default run builds and emulates: together they hold every idiom the
/// suite has (samples/idioms/README.md's table) and every kind of annotation clause.
#[rustfmt::skip]
const SUBSET: [&str; 8] = [
    // A kernel template instantiated twice, template and annotation in a header the
    // program includes; `__constant__` weights.
    "template_scale",
    // Grid-stride loop over a capped grid (`min(...)` in the grid formula), warp shuffles,
    // float atomics, dynamic shared memory from the block (`shmem(bx * 4)`), a `pow2(bx)`
    // constraint, two kernels in one program.
    "reduce_atomic",
    // 3-D blocks and grid.
    "stencil3d7",
    // A batch on the grid's z axis, four data parameters.
    "batched_gemm",
    // One kernel on two streams (`<<<g, b, 0, s>>>`).
    "streams_axpby",
    // `__launch_bounds__`, register-heavy kernels, constraints `bx <= 256` and
    // `bx * by <= 128`, a 1-D and a 2-D kernel in one program.
    "launch_bounds_poly",
    // Shared-memory tiles and `__syncthreads`, the constraint `bx == by`, dynamic shared
    // memory from a 2-D block, three data parameters.
    "gemm_tiled",
    // Dynamic shared memory sized from the block and the data (`shmem((bx + R - 1) * 4)`),
    // a filter in `__constant__` memory, a halo staged before a barrier.
    "conv1d_const",
];

/// The programs of `samples/idioms/Makefile` the run checks: all of them with
/// `scripts/test --full`, else [`SUBSET`] (which must be among them).
fn programs(makefile: &str) -> Vec<String> {
    let all: Vec<String> = makefile
        .lines()
        .find_map(|l| l.strip_prefix("PROGRAMS := "))
        .unwrap()
        .split_whitespace()
        .map(String::from)
        .collect();
    assert!(all.len() >= 11, "{all:?}");
    for p in SUBSET {
        assert!(all.iter().any(|q| q == p), "{p} is not in {all:?}");
    }
    if full() {
        all
    } else {
        SUBSET.iter().map(|p| p.to_string()).collect()
    }
}

#[test]
fn the_idioms_suite_builds_through_klaraptor() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let tmp = tempfile::tempdir().unwrap();
    // The idioms and the PolyBench harness they include, as tracked or (while the suite is
    // new) present in the tree, without build outputs.
    for dir in ["samples/idioms", "samples/polybench/common"] {
        copy_sources(&repo.join(dir), &tmp.path().join(dir));
    }
    let db = tmp.path().join("empty-db");
    std::fs::create_dir_all(&db).unwrap();
    let dir = tmp.path().join("samples/idioms");
    let mk = std::fs::read_to_string(dir.join("Makefile")).unwrap();
    let programs = programs(&mk);
    let o = Command::new("make")
        .current_dir(&dir)
        .arg(format!("-j{}", jobs()))
        .arg(format!("NVCC={}", klaraptor_cc().display()))
        .args(&programs)
        .env("KLARAPTOR_NVCC", nvcc())
        .env("KLARAPTOR_NO_GPU", "1")
        .env("KLARAPTOR_TRANSFER", "off")
        .env("KLARAPTOR_PROFILE_DB", &db)
        .env("XDG_CACHE_HOME", tmp.path().join(".cache"))
        .env_remove("NVCC_PREPEND_FLAGS")
        .env_remove("NVCC_APPEND_FLAGS")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    for line in err.lines().filter(|l| l.contains("warning")) {
        assert!(
            line.contains("no profile"),
            "unexpected warning: {line}\n{err}"
        );
    }
    for p in &programs {
        assert!(dir.join(p).join(p).is_file(), "{p} was not built");
        // One "no profile" warning per program, naming where its annotation is (the
        // program's .cu or a header it includes): its kernels were annotated and
        // instrumented.
        let sources: Vec<String> = std::fs::read_dir(dir.join(p))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".cu") || n.ends_with(".cuh"))
            .collect();
        assert!(
            err.lines().any(|l| l.contains("no profile")
                && sources.iter().any(|f| l.contains(&format!("{f}:")))),
            "{p}: klaraptor-cc did not treat its kernels as annotated\n{err}"
        );
    }
    // template_scale's kernel template and its annotation live in a header the program
    // includes (samples/idioms/template_scale/stencil1d.cuh): both instances were found there.
    assert!(
        err.lines()
            .any(|l| l.contains("no profile") && l.matches("stencil1d.cuh:").count() == 2),
        "the annotation in stencil1d.cuh was not read for both instances\n{err}"
    );
}

/// `make emu-check`: the idioms programs under the CPU emulation (barriers, shuffles and
/// atomics included) at their own block and at odd ones, against their CPU references —
/// each run that a program's `emu.args` lists.
#[test]
fn the_idioms_suite_passes_under_the_cpu_emulation() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let build = tempfile::tempdir().unwrap();
    let idioms = repo.join("samples/idioms");
    let programs = programs(&std::fs::read_to_string(idioms.join("Makefile")).unwrap());
    let runs: usize = programs
        .iter()
        .map(|p| {
            let args = std::fs::read_to_string(idioms.join(p).join("emu.args")).unwrap();
            args.lines()
                .filter(|l| {
                    l.split_whitespace()
                        .next()
                        .is_some_and(|w| !w.starts_with('#'))
                })
                .count()
        })
        .sum();
    let o = Command::new("bash")
        .arg(idioms.join("emu/check.sh"))
        .args(&programs)
        .env("EMU_BUILD", build.path())
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(!out.contains("FAIL"), "{out}");
    assert_eq!(
        out.lines().filter(|l| l.starts_with("ok ")).count(),
        runs,
        "{out}"
    );
    assert!(runs >= 2 * programs.len(), "{runs} runs");
}

/// Copies the regular files under `from` (recursively), leaving out executables and
/// `*.klaraptor` directories (what a local build left there).
fn copy_sources(from: &Path, to: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let path = e.path();
        let name = e.file_name();
        let meta = e.metadata().unwrap();
        if meta.is_dir() {
            if !name.to_string_lossy().ends_with(".klaraptor") {
                copy_sources(&path, &to.join(&name));
            }
        } else if meta.is_file() {
            let exec = meta.permissions().mode() & 0o111 != 0;
            if !exec || name.to_string_lossy().ends_with(".sh") {
                std::fs::copy(&path, to.join(&name)).unwrap();
            }
        }
    }
}
