//! samples/reduce through klaraptor-cc, without a GPU: `make NVCC=klaraptor-cc` builds it;
//! the pass reads reduce_detect's dynamic shared memory from its launch (`b *
//! sizeof(float)`, no shmem clause and no warning), reduce_clause's launch (an amount the
//! pass cannot read) takes the clause, and the sampling plan of each kernel, whose
//! annotation says `pow2(bx)`, holds only powers of two. And with the profile captured on
//! an H200 (tests/fixtures/reduce-h200-2026-11-26: reduce_static's blocks of 512 and 1024
//! threads write past its 256-float shared array and faulted there), the build links every
//! kernel's rational program, and reduce_static's never chooses a shape that faulted.

mod common;
use common::*;

use std::path::Path;
use std::process::Command;

/// A scratch copy of samples/reduce and the harness it includes, without build outputs.
fn sample_copy() -> tempfile::TempDir {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let tmp = tempfile::tempdir().unwrap();
    for (dir, files) in [
        ("samples/reduce", &["Makefile", "reduce.cu"][..]),
        ("samples/polybench/common", &["harness.h"][..]),
    ] {
        std::fs::create_dir_all(tmp.path().join(dir)).unwrap();
        for f in files {
            std::fs::copy(repo.join(dir).join(f), tmp.path().join(dir).join(f)).unwrap();
        }
    }
    tmp
}

/// `make NVCC="klaraptor-cc --kl-verbose"` in the copy's samples/reduce, no GPU, against
/// the profile database `db`.
fn make(tmp: &Path, db: &Path) -> std::process::Output {
    Command::new("make")
        .current_dir(tmp.join("samples/reduce"))
        .arg(format!("NVCC={} --kl-verbose", klaraptor_cc().display()))
        .env("KLARAPTOR_NVCC", nvcc())
        .env("KLARAPTOR_NO_GPU", "1")
        .env("KLARAPTOR_TRANSFER", "off")
        .env("KLARAPTOR_PROFILE_DB", db)
        .env("XDG_CACHE_HOME", tmp.join(".cache"))
        .env_remove("NVCC_PREPEND_FLAGS")
        .env_remove("NVCC_APPEND_FLAGS")
        .output()
        .unwrap()
}

#[test]
fn the_reduce_sample_builds_and_its_plans_hold_powers_of_two() {
    let tmp = sample_copy();
    let dir = tmp.path().join("samples/reduce");
    let db = tmp.path().join("empty-db");
    std::fs::create_dir_all(&db).unwrap();
    let o = make(tmp.path(), &db);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(dir.join("reduce").is_file());
    // The only warning: no profile (no GPU here). None about the shared memory of a launch.
    for line in err.lines().filter(|l| l.contains("warning")) {
        assert!(
            line.contains("no profile"),
            "unexpected warning: {line}\n{err}"
        );
    }
    assert!(
        err.contains(
            "the dynamic shared memory of a launch of reduce_detect in \
             _ZL13launch_detectPKfPfij follows the block: shmem((bx * 4))"
        ),
        "{err}"
    );
    for k in ["reduce_detect", "reduce_clause", "reduce_static"] {
        assert!(
            err.contains(&format!("instrumented a launch of _Z{}{k}PKfPfi", k.len())),
            "{k}: {err}"
        );
    }
    assert!(!err.contains("add shmem("), "{err}");

    // What the object carries to the link: the formulas, the constraints, the recipe.
    let specs =
        klaraptor_spec::link::scan_bytes(&std::fs::read(dir.join("reduce.o")).unwrap(), &dir)
            .unwrap();
    let spec = |name: &str| {
        specs
            .iter()
            .find(|s| s.name == name)
            .unwrap_or_else(|| panic!("no spec of {name}: {specs:?}"))
    };
    assert_eq!(spec("reduce_detect").shmem.as_deref(), Some("(bx * 4)"));
    assert_eq!(spec("reduce_clause").shmem.as_deref(), Some("(bx * 4)"));
    assert_eq!(spec("reduce_static").shmem, None);
    for k in ["reduce_detect", "reduce_clause"] {
        assert_eq!(spec(k).block, ["(pow2(bx) && (bx >= 32))"], "{k}");
        assert_eq!(spec(k).grid, ["ceil(N, bx)"], "{k}");
    }
    assert_eq!(spec("reduce_static").block, ["pow2(bx)"]);
    assert_eq!(
        spec("reduce_static").profile_run.as_deref(),
        Some("./reduce {N}")
    );

    // The sampling plan the profiling variant gets: only powers of two; no shape below 32
    // threads where the annotation says bx >= 32, and none above 1024 (the device).
    let o = Command::new(klaraptor())
        .arg("plan")
        .arg(dir.join("reduce"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8(o.stdout).unwrap();
    let plan = |mangled: &str| -> Vec<String> {
        let line = out
            .lines()
            .find(|l| l.starts_with(&format!("{mangled} ")))
            .unwrap_or_else(|| panic!("no plan of {mangled}:\n{out}"));
        line.split(' ').skip(1).map(str::to_string).collect()
    };
    let pow2_shapes = |from: u32| -> Vec<String> {
        (0..=10)
            .map(|k| 1u32 << k)
            .filter(|&b| b >= from)
            .map(|b| format!("{b}x1x1"))
            .collect()
    };
    assert_eq!(plan("_Z13reduce_detectPKfPfi"), pow2_shapes(32), "{out}");
    assert_eq!(plan("_Z13reduce_clausePKfPfi"), pow2_shapes(32), "{out}");
    assert_eq!(plan("_Z13reduce_staticPKfPfi"), pow2_shapes(1), "{out}");
}

#[test]
fn the_h200_profile_with_faulted_shapes_links_and_they_are_never_chosen() {
    let tmp = sample_copy();
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let db = tmp.path().join("db");
    copy_dir(&repo.join("tests/fixtures/reduce-h200-2026-11-26"), &db);
    let o = make(tmp.path(), &db);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    // The entry holds the faults as the profiler stored them: 8 failed samples, each an
    // illegal address at 512 or 1024 threads.
    let entry = klaraptor_profiler::db::ProfileDb::read_file(
        &db.join("v1/nvidia-h200-2803d38c/_Z13reduce_staticPKfPfi-ef7e01bc92375e1d.toml"),
    )
    .unwrap();
    let failed: Vec<_> = entry.samples.iter().filter(|s| s.error.is_some()).collect();
    assert_eq!(failed.len(), 8);
    for s in &failed {
        assert!(s.block[0] >= 512, "{s:?}");
        assert!(
            s.error
                .as_deref()
                .unwrap()
                .contains("CUDA_ERROR_ILLEGAL_ADDRESS"),
            "{s:?}"
        );
    }
    let o = Command::new(klaraptor())
        .arg("inspect")
        .arg(tmp.path().join("samples/reduce/reduce"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8(o.stdout).unwrap();
    for k in ["reduce_detect", "reduce_clause", "reduce_static"] {
        assert!(out.contains(&format!("kernel {k} (")), "{k}:\n{out}");
    }
    let s = out.split("kernel reduce_static (").nth(1).unwrap();
    let s = s.split("\nkernel ").next().unwrap();
    assert!(
        s.contains("faulted in the profile, never chosen: 512x1x1, 1024x1x1"),
        "{s}"
    );
    assert!(s.contains("device: NVIDIA H200"), "{s}");
    assert!(
        !s.contains("dynamic shared memory follows the block"),
        "{s}"
    );
    let d = out.split("kernel reduce_detect (").nth(1).unwrap();
    assert!(
        d.contains("dynamic shared memory follows the block: shmem((bx * 4)) bytes"),
        "{d}"
    );
}
