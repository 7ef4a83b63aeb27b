//! samples/reduce through klaraptor-cc, without a GPU: `make NVCC=klaraptor-cc` builds it;
//! the pass reads reduce_detect's dynamic shared memory from its launch (`b *
//! sizeof(float)`, no shmem clause and no warning), reduce_clause's launch (an amount the
//! pass cannot read) takes the clause, and the sampling plan of each kernel, whose
//! annotation says `pow2(bx)`, holds only powers of two.

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

#[test]
fn the_reduce_sample_builds_and_its_plans_hold_powers_of_two() {
    let tmp = sample_copy();
    let dir = tmp.path().join("samples/reduce");
    let db = tmp.path().join("empty-db");
    std::fs::create_dir_all(&db).unwrap();
    let o = Command::new("make")
        .current_dir(&dir)
        .arg(format!("NVCC={} --kl-verbose", klaraptor_cc().display()))
        .env("KLARAPTOR_NVCC", nvcc())
        .env("KLARAPTOR_NO_GPU", "1")
        .env("KLARAPTOR_PROFILE_DB", &db)
        .env("XDG_CACHE_HOME", tmp.path().join(".cache"))
        .env_remove("NVCC_PREPEND_FLAGS")
        .env_remove("NVCC_APPEND_FLAGS")
        .output()
        .unwrap();
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
        klaraptor::linkspec::scan_bytes(&std::fs::read(dir.join("reduce.o")).unwrap(), &dir)
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
