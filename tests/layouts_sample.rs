//! `samples/layouts`: kernels defined, and annotated, in a `.cu` that the main file
//! `#include`s and in a header under `kernels/`, built by the sample's own Makefiles on a
//! machine without a GPU, in a directory whose path holds a space:
//!
//! - `make NVCC=klaraptor-cc` (separate compile and link, `$(NVCC)`);
//! - `make -f legacy.mk CC=klaraptor-cc` (one command, the compiler named `$(CC)`, which
//!   also reaches klaraptor-cc's environment: it must not compile its generated C with
//!   itself);
//! - plain `make` with nvcc, for comparison.
//!
//! Each klaraptor build must read both annotations where they are written (its "no profile"
//! warning names `brighten.cu:` and `kernels/blur.cuh:`) and produce the program.

mod common;
use common::*;

use std::path::Path;
use std::process::{Command, Output};

fn make(dir: &Path, db: &Path, args: &[String]) -> Output {
    Command::new("make")
        .current_dir(dir)
        .args(args)
        .env("KLARAPTOR_NVCC", nvcc())
        .env("KLARAPTOR_NO_GPU", "1")
        .env("KLARAPTOR_TRANSFER", "off")
        .env("KLARAPTOR_PROFILE_DB", db)
        .env("XDG_CACHE_HOME", dir.join(".cache"))
        .env_remove("CC")
        .env_remove("NVCC_PREPEND_FLAGS")
        .env_remove("NVCC_APPEND_FLAGS")
        .output()
        .unwrap()
}

fn copy_sample(to: &Path) {
    let from = Path::new(env!("CARGO_MANIFEST_DIR")).join("samples/layouts");
    for rel in [
        "Makefile",
        "legacy.mk",
        "main.cu",
        "brighten.cu",
        "layouts.h",
        "kernels/blur.cuh",
    ] {
        let dst = to.join(rel);
        std::fs::create_dir_all(dst.parent().unwrap()).unwrap();
        std::fs::copy(from.join(rel), dst).unwrap();
    }
}

/// The annotations of both kernels were read where they are written.
fn assert_both_annotations_read(how: &str, err: &str) {
    let warning = err
        .lines()
        .find(|l| l.contains("no profile"))
        .unwrap_or_else(|| panic!("{how}: no \"no profile\" warning: the kernels were not treated as annotated\n{err}"));
    for (kernel, at) in [
        ("brighten", "brighten.cu:8:"),
        ("blur3", "kernels/blur.cuh:8:"),
    ] {
        assert!(
            warning.contains(&format!("{kernel} (annotated at {at}")),
            "{how}: {kernel}'s annotation at {at} was not read\n{err}"
        );
    }
    for line in err.lines().filter(|l| l.contains("warning")) {
        assert!(
            line.contains("no profile"),
            "{how}: unexpected warning: {line}\n{err}"
        );
    }
}

#[test]
fn the_layouts_sample_builds_through_its_makefiles() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("my project/layouts");
    copy_sample(&dir);
    let db = tmp.path().join("empty db");
    std::fs::create_dir_all(&db).unwrap();
    let kcc = klaraptor_cc().display().to_string();

    // Plain nvcc: the sample is ordinary CUDA.
    let o = make(&dir, &db, &[format!("NVCC={}", nvcc().display())]);
    assert!(o.status.success(), "plain make: {}", stderr(&o));
    assert!(dir.join("layouts").is_file());
    let o = make(&dir, &db, &["clean".into()]);
    assert!(o.status.success(), "{}", stderr(&o));

    // $(NVCC): separate compile and link through klaraptor-cc.
    let o = make(&dir, &db, &[format!("NVCC={kcc}")]);
    let err = stderr(&o);
    assert!(o.status.success(), "make NVCC=klaraptor-cc: {err}");
    assert!(dir.join("layouts").is_file() && dir.join("main.o").is_file());
    assert_both_annotations_read("make NVCC=klaraptor-cc", &err);
    let o = make(&dir, &db, &["clean".into()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!dir.join("layouts").exists());

    // $(CC): one command compiles and links; CC=klaraptor-cc reaches its environment.
    let o = make(
        &dir,
        &db,
        &["-f".into(), "legacy.mk".into(), format!("CC={kcc}")],
    );
    let err = stderr(&o);
    assert!(
        o.status.success(),
        "make -f legacy.mk CC=klaraptor-cc: {err}"
    );
    assert!(dir.join("layouts").is_file());
    assert_both_annotations_read("make -f legacy.mk CC=klaraptor-cc", &err);
}
