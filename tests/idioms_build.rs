//! `make -C samples/idioms NVCC=klaraptor-cc` on a machine without a GPU: every program of
//! the idioms suite (grid-stride loops, shared memory and barriers, warp shuffles, atomics,
//! 3-D blocks, a batch on the grid's z axis, a kernel template, streams) builds through
//! klaraptor-cc, its annotations read and its launches instrumented. The suite has no
//! committed profile yet, so each kernel keeps the program's own launch: the only warnings
//! allowed are klaraptor-cc's "no profile" ones.

mod common;
use common::*;

use std::path::Path;
use std::process::Command;

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
    let o = Command::new("make")
        .current_dir(&dir)
        .arg("-j2")
        .arg(format!("NVCC={}", klaraptor_cc().display()))
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
    let mk = std::fs::read_to_string(dir.join("Makefile")).unwrap();
    let programs: Vec<&str> = mk
        .lines()
        .find_map(|l| l.strip_prefix("PROGRAMS := "))
        .unwrap()
        .split_whitespace()
        .collect();
    assert!(programs.len() >= 11, "{programs:?}");
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

/// `make emu-check`: every idioms program under the CPU emulation (barriers, shuffles and
/// atomics included) at its own block and at odd ones, against its CPU reference.
#[test]
fn the_idioms_suite_passes_under_the_cpu_emulation() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let build = tempfile::tempdir().unwrap();
    let o = Command::new("bash")
        .arg(repo.join("samples/idioms/emu/check.sh"))
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
    assert!(
        out.lines().filter(|l| l.starts_with("ok ")).count() >= 40,
        "{out}"
    );
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
