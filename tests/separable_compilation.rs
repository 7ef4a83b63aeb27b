//! Separable compilation (relocatable device code) through klaraptor-cc (issue 40; no GPU;
//! the real klaraptor-cc, the toolchain's nvcc, Debian's cmake, ninja, make and g++), on the
//! project of tests/fixtures/separable-compilation: two annotated kernels in two CUDA
//! sources, each calling a device function the other source defines, so that the program
//! needs nvcc's device link.
//!
//! - CMake with `CUDA_SEPARABLE_COMPILATION ON` (each source compiled with `-rdc=true -c`
//!   through the launcher, nvcc's `-dlink`, the host compiler's link): both objects are
//!   instrumented and keep nvcc's relocatable device code, the program links and starts,
//!   `klaraptor profile` finds both kernels in it, and profiles stored afterwards reach the
//!   next build as rational programs in the executable.
//! - make with `-dc` per source, then `-dlink` and g++, and nvcc's own link (`-rdc=true`
//!   objects, which device-links itself) through klaraptor-cc: the same, the programs coming
//!   from klaraptor-cc's link.
//!
//! Before separable compilation was instrumented, klaraptor-cc compiled `-rdc=true` and
//! `-dc` as given, with a warning: no object carried the runtime or a spec.

mod common;
use common::*;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use klaraptor_profiler::db::ProfileDb;
use klaraptor_spec::link::LinkSpec;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const SCALE: &str = "_Z5scalePKfPfi";
const SHRINK: &str = "_Z6shrinkPKfPfi";
/// A committed profile entry, lent to the fixture's kernels (same data parameter N, 1-D): a
/// database that holds their profiles, without a GPU to profile them.
const LENT_ENTRY: &str =
    "samples/klaraptor-profiles/v1/nvidia-h200-2803d38c/_Z5saxpyfPKfPfi-303aeacbd19721f5.toml";

fn root() -> &'static Path {
    Path::new(ROOT)
}

fn need(tool: &str) {
    let ok = Command::new(tool)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        ok,
        "{tool} is not installed: run scripts/setup (it installs cmake and ninja-build)"
    );
}

/// A scratch root: `src/` (the fixture) and an empty profile database `db/`.
struct Scratch {
    dir: tempfile::TempDir,
}

impl Scratch {
    fn new() -> Scratch {
        let dir = tempfile::tempdir().unwrap();
        copy_dir(
            &root().join("tests/fixtures/separable-compilation"),
            &dir.path().join("src"),
        );
        std::fs::create_dir_all(dir.path().join("tmp")).unwrap();
        Scratch { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn db(&self) -> PathBuf {
        self.path().join("db")
    }

    /// `prog` in the root with klaraptor's environment pinned: the test's nvcc, no GPU, the
    /// scratch database, a private user cache and TMPDIR.
    fn command(&self, prog: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new(prog);
        c.current_dir(self.path())
            .env("KLARAPTOR_NVCC", nvcc())
            .env("KLARAPTOR_NO_GPU", "1")
            .env("KLARAPTOR_TRANSFER", "off")
            .env("KLARAPTOR_PROFILE_DB", self.db())
            .env("XDG_CACHE_HOME", self.path().join("cache"))
            .env("TMPDIR", self.path().join("tmp"))
            .env_remove("KLARAPTOR_COLLECTOR")
            .env_remove("KLARAPTOR_CACHE")
            .env_remove("KLARAPTOR_CACHE_INNER")
            .env_remove("NVCC_PREPEND_FLAGS")
            .env_remove("NVCC_APPEND_FLAGS")
            .env_remove("CUDAARCHS")
            .env_remove("CMAKE_GENERATOR")
            .env_remove("MAKEFLAGS");
        c
    }

    fn klaraptor(&self, args: &[&str]) -> Output {
        self.command(klaraptor()).args(args).output().unwrap()
    }

    /// Stores, for each of `specs`, the lent entry as its profile (as `klaraptor profile`
    /// would store one).
    fn store_profiles(&self, specs: &[LinkSpec]) {
        let db = ProfileDb::open(self.db()).unwrap();
        for s in specs {
            let mut entry = ProfileDb::read_file(&root().join(LENT_ENTRY)).unwrap();
            entry.kernel.mangled = s.mangled.clone();
            entry.kernel.name = s.name.clone();
            entry.kernel.code_hash = s.code_hash.clone();
            db.put(&entry).unwrap();
        }
    }
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// Asserts that `object` was instrumented by klaraptor-cc (it carries the runtime and the
/// spec of `kernel`) and keeps nvcc's relocatable device code, which the device link reads;
/// returns the spec.
fn assert_instrumented_rdc(object: &Path, kernel: &str) -> LinkSpec {
    let bytes = std::fs::read(object).unwrap();
    assert!(
        klaraptor_profiler::gpu_profile::carries_runtime(&bytes),
        "{} is not instrumented",
        object.display()
    );
    assert!(
        contains(&bytes, b"__nv_relfatbin") && contains(&bytes, b"__cudaRegisterLinkedBinary_"),
        "{} has no relocatable device code",
        object.display()
    );
    let specs = klaraptor_spec::link::scan_bytes(&bytes, object).unwrap();
    let ids: Vec<&str> = specs.iter().map(|s| s.mangled.as_str()).collect();
    assert_eq!(ids, [kernel], "{}", object.display());
    specs.into_iter().next().unwrap()
}

/// Asserts that `klaraptor inspect <binary>` lists the H200 programs of both kernels.
fn assert_carries_both(out: &Output) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", stderr(out));
    for (name, mangled) in [("scale", SCALE), ("shrink", SHRINK)] {
        assert!(
            stdout.contains(&format!("kernel {name} ({mangled})")),
            "{stdout}"
        );
    }
    assert!(stdout.contains("device: NVIDIA H200"), "{stdout}");
}

/// Runs the built program without a size: it starts (the device code registers) and needs
/// no GPU.
fn assert_starts(app: &Path) {
    let out = Command::new(app).output().unwrap();
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("give a size"),
        "{}: {}",
        app.display(),
        stderr(&out)
    );
}

#[test]
fn cmake_separable_compilation_is_instrumented_and_modelled() {
    need("cmake");
    need("ninja");
    let s = Scratch::new();
    logged(
        s.command("cmake")
            .args(["-S", "src", "-B", "build", "-G", "Ninja"])
            .arg(format!("-DCMAKE_CUDA_COMPILER={}", nvcc().display()))
            .arg("-DCMAKE_CUDA_ARCHITECTURES=90-real")
            .arg(format!(
                "-DCMAKE_MODULE_PATH={}",
                root().join("cmake").display()
            ))
            .arg(format!("-DKLARAPTOR_CC={}", klaraptor_cc().display()))
            .arg(format!("-DKLARAPTOR_PROFILE_DB={}", s.db().display())),
    );
    let build = || logged(s.command("cmake").args(["--build", "build", "--verbose"]));
    let log = build();
    // Each source compiles through klaraptor-cc with -rdc=true; the device link is nvcc's,
    // the link the host compiler's.
    for src in ["scale.cu", "shrink.cu", "main.cu"] {
        assert!(
            log.lines()
                .any(|l| l.contains("klaraptor-cc") && l.contains("-rdc=true") && l.contains(src)),
            "{src}:\n{log}"
        );
    }
    assert!(
        log.lines()
            .any(|l| l.contains(" -dlink ") && l.contains("cmake_device_link.o")),
        "no device link:\n{log}"
    );
    assert!(!log.contains("not instrumented"), "{log}");
    let objects = s.path().join("build/CMakeFiles/app.dir");
    let specs = vec![
        assert_instrumented_rdc(&objects.join("scale.cu.o"), SCALE),
        assert_instrumented_rdc(&objects.join("shrink.cu.o"), SHRINK),
    ];
    let app = s.path().join("build/app");
    assert_starts(&app);
    // The executable's specs name both kernels: `klaraptor profile` would profile them.
    let prof = s.klaraptor(&["profile", "build/app"]);
    let err = stderr(&prof);
    assert!(
        !prof.status.success()
            && err.contains("no NVIDIA GPU here")
            && err.contains("scale (annotated at")
            && err.contains("shrink (annotated at"),
        "{err}"
    );

    // Their profiles arrive: the next build compiles both sources again and the executable
    // carries both programs.
    s.store_profiles(&specs);
    let log = build();
    assert!(
        log.contains("scale.cu") && log.contains("shrink.cu"),
        "not recompiled:\n{log}"
    );
    assert_starts(&app);
    assert_carries_both(&s.klaraptor(&["inspect", "build/app"]));
}

#[test]
fn make_with_dc_and_dlink_is_instrumented_and_the_nvcc_link_models() {
    need("make");
    let s = Scratch::new();
    let src = s.path().join("src");
    let lib = nvcc().parent().unwrap().parent().unwrap().join("lib64");
    let make = |targets: &[&str]| {
        logged(
            s.command("make")
                .current_dir(&src)
                .arg(format!("NVCC={}", klaraptor_cc().display()))
                .arg(format!("CUDA_LIB={}", lib.display()))
                .args(targets),
        )
    };
    let log = make(&[]);
    assert!(
        log.lines().any(|l| l.contains(" -dc scale.cu")) && log.contains(" -dlink "),
        "{log}"
    );
    assert!(!log.contains("not instrumented"), "{log}");
    let specs = vec![
        assert_instrumented_rdc(&src.join("scale.o"), SCALE),
        assert_instrumented_rdc(&src.join("shrink.o"), SHRINK),
    ];
    // An unannotated source is nvcc's object.
    let main = std::fs::read(src.join("main.o")).unwrap();
    assert!(!klaraptor_profiler::gpu_profile::carries_runtime(&main));
    for app in ["app", "app-nvcc"] {
        assert_starts(&src.join(app));
    }

    // Profiles stored after the compile: klaraptor-cc's link (nvcc's, with the device
    // link) adds the programs the objects do not carry.
    s.store_profiles(&specs);
    std::fs::remove_file(src.join("app-nvcc")).unwrap();
    make(&["app-nvcc"]);
    assert_starts(&src.join("app-nvcc"));
    assert_carries_both(&s.klaraptor(&["inspect", "src/app-nvcc"]));
}
