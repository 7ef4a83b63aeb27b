//! An interrupted klaraptor-cc leaves nothing behind (no GPU): SIGINT and SIGTERM sent while it
//! compiles an annotated source remove its temporary directories, leave no output, and end
//! it by the same signal, as nvcc ends, wherever in the compile the signal falls.

mod common;
use common::*;

use std::os::unix::process::ExitStatusExt as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Starts `klaraptor-cc -c mm.cu` with a private TMPDIR, sends `sig` `delay` after its
/// temporary directory exists, and checks what is left. Returns false (and checks nothing)
/// when the compile ended before the signal.
fn interrupted_compile(sig: libc::c_int, delay: Duration) -> bool {
    let root = tempfile::tempdir().unwrap();
    let src = root.path().join("src");
    let tmp = root.path().join("tmp");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::create_dir_all(&tmp).unwrap();
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    for f in ["mm.cu", "kernels.h"] {
        std::fs::copy(repo.join("samples/matmul").join(f), src.join(f)).unwrap();
    }
    let mut child = Command::new(klaraptor_cc())
        .current_dir(&src)
        .args(["-O2", "-arch=sm_90", "-c", "mm.cu", "-o", "mm.o"])
        .env("KLARAPTOR_NVCC", nvcc())
        .env("KLARAPTOR_NO_GPU", "1")
        .env("KLARAPTOR_TRANSFER", "off")
        .env("TMPDIR", &tmp)
        .env("XDG_CACHE_HOME", root.path().join("cache"))
        .env_remove("KLARAPTOR_PROFILE_DB")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until klaraptor-cc's work directory exists (and a little more, so that the
    // interrupt falls in the middle of its work), then interrupt it.
    let start = Instant::now();
    let work = loop {
        let found = std::fs::read_dir(&tmp)
            .unwrap()
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .find(|p| {
                p.file_name()
                    .unwrap()
                    .to_string_lossy()
                    .starts_with("klaraptor-")
            });
        if let Some(w) = found {
            break w;
        }
        assert!(
            child.try_wait().unwrap().is_none(),
            "klaraptor-cc ended before it made its work directory"
        );
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no work directory after 60 s"
        );
        std::thread::sleep(Duration::from_millis(5));
    };
    std::thread::sleep(delay);
    if child.try_wait().unwrap().is_some() {
        return false;
    }
    // SAFETY: signalling a child this test started and has not reaped.
    assert_eq!(unsafe { libc::kill(child.id() as libc::pid_t, sig) }, 0);
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.signal(),
        Some(sig),
        "{:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !work.exists(),
        "{} was left behind (at {delay:?}): {:?}",
        work.display(),
        walk(&work)
    );
    let left: Vec<_> = std::fs::read_dir(&tmp).unwrap().collect();
    assert!(left.is_empty(), "left in TMPDIR: {left:?}");
    assert!(!src.join("mm.o").exists(), "a partial output was left");
    true
}

/// Everything under `dir`, for the failure message.
fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        out.push(e.path());
        if e.path().is_dir() {
            out.extend(walk(&e.path()));
        }
    }
    out
}

/// Interrupts compiles at several points of their work (the cleanup removes the work
/// directory while the compile is writing into it, or while nvcc runs); at least two of them
/// must fall mid-build.
fn interrupted_compiles(sig: libc::c_int) {
    let delays = [0, 60, 200, 400].map(Duration::from_millis);
    let hit = delays
        .into_iter()
        .filter(|&d| interrupted_compile(sig, d))
        .count();
    assert!(
        hit >= 2,
        "only {hit} compiles were interrupted mid-build: the test must interrupt them"
    );
}

#[test]
fn sigint_during_a_compile_leaves_nothing_behind() {
    interrupted_compiles(libc::SIGINT);
}

#[test]
fn sigterm_during_a_compile_leaves_nothing_behind() {
    interrupted_compiles(libc::SIGTERM);
}
