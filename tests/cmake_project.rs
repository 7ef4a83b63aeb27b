//! Objects that link anywhere, CMake and compiler caches (issue 21; no GPU; the real
//! klaraptor-cc, the toolchain's nvcc, Debian's cmake, ninja and g++):
//!
//! - the annotated CMake project of tests/fixtures/cmake-project (the annotated kernel in a
//!   static library, an executable linked by CMake with g++) builds with Ninja and with Unix
//!   Makefiles against a copy of the committed H200 profiles, and the executable carries
//!   the kernel's rational program (`klaraptor inspect`); a second build does nothing;
//! - from an empty database: the build works without a program, `klaraptor profile <app>`
//!   says what it would profile, and a profile stored afterwards reaches the next build
//!   (and a removed one leaves it), also through ccache, where installed;
//! - parallel builds, repeated, give byte-identical objects;
//! - objects carrying the runtime link with plain g++ into an executable and a shared
//!   library; two copies of the runtime in one program share one registry and memo; the
//!   carried runtime profiles when asked to (runtime-shim/tests/test_prof.c linked against
//!   it prints what it prints linked against the sources).

mod common;
use common::*;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use klaraptor_profiler::db::ProfileDb;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const CUDA_INCLUDE: &str = env!("KLARAPTOR_RT_CUDA_INCLUDE");
const SAXPY: &str = "_Z5saxpyfPKfPfi";
/// The committed H200 profile of the fixture's kernel (the same device code as
/// samples/matmul/saxpy.cu, so the same code hash).
const SAXPY_ENTRY: &str =
    "samples/klaraptor-profiles/v1/nvidia-h200-2803d38c/_Z5saxpyfPKfPfi-303aeacbd19721f5.toml";

fn root() -> &'static Path {
    Path::new(ROOT)
}

fn have(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

fn need(tool: &str) {
    assert!(
        have(tool),
        "{tool} is not installed: run scripts/setup (it installs cmake and ninja-build)"
    );
}

/// A scratch root: `src/` (the fixture), and with `profiles` a copy of the committed
/// database as `klaraptor-profiles/` (klaraptor-cc finds it above the build directories).
struct Scratch {
    dir: tempfile::TempDir,
}

impl Scratch {
    fn new(profiles: bool) -> Scratch {
        let dir = tempfile::tempdir().unwrap();
        copy_dir(
            &root().join("tests/fixtures/cmake-project"),
            &dir.path().join("src"),
        );
        if profiles {
            copy_dir(
                &root().join("samples/klaraptor-profiles"),
                &dir.path().join("klaraptor-profiles"),
            );
        }
        std::fs::create_dir_all(dir.path().join("tmp")).unwrap();
        Scratch { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// `prog` in the root, with klaraptor's environment pinned: no GPU, no database from
    /// the environment, a private user cache, ccache directory and TMPDIR.
    fn command(&self, prog: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new(prog);
        c.current_dir(self.path())
            .env("KLARAPTOR_NO_GPU", "1")
            .env("KLARAPTOR_TRANSFER", "off")
            .env("XDG_CACHE_HOME", self.path().join("cache"))
            .env("TMPDIR", self.path().join("tmp"))
            .env("CCACHE_DIR", self.path().join("ccache"))
            .env("CCACHE_CONFIGPATH", self.path().join("ccache.conf"))
            .env_remove("CCACHE_DISABLE")
            .env_remove("CCACHE_NODIRECT")
            .env_remove("CCACHE_RECACHE")
            .env_remove("CCACHE_READONLY")
            .env_remove("CCACHE_PREFIX")
            .env_remove("KLARAPTOR_PROFILE_DB")
            .env_remove("KLARAPTOR_COLLECTOR")
            .env_remove("KLARAPTOR_CACHE")
            .env_remove("KLARAPTOR_CACHE_INNER")
            .env_remove("KLARAPTOR_NVCC")
            .env_remove("NVCC_PREPEND_FLAGS")
            .env_remove("NVCC_APPEND_FLAGS")
            .env_remove("CUDAARCHS")
            .env_remove("CMAKE_GENERATOR");
        c
    }

    /// Configures `build` from `src` with `generator` and the definitions `defs`.
    fn configure(&self, build: &str, generator: &str, defs: &[String]) {
        let out = self
            .command("cmake")
            .args(["-S", "src", "-B", build, "-G", generator])
            .arg(format!("-DCMAKE_CUDA_COMPILER={}", nvcc().display()))
            .arg("-DCMAKE_CUDA_ARCHITECTURES=90-real")
            .arg(format!(
                "-DCMAKE_MODULE_PATH={}",
                root().join("cmake").display()
            ))
            .arg(format!("-DKLARAPTOR_CC={}", klaraptor_cc().display()))
            .args(defs)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "cmake configure failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            stderr(&out)
        );
    }

    /// `cmake --build build --verbose [-j jobs]`; returns its output (stdout and stderr).
    fn build(&self, build: &str, jobs: Option<u32>) -> String {
        let mut c = self.command("cmake");
        c.args(["--build", build, "--verbose"]);
        if let Some(j) = jobs {
            c.arg(format!("-j{j}"));
        }
        logged(&mut c)
    }

    fn klaraptor(&self, args: &[&str]) -> Output {
        self.command(klaraptor()).args(args).output().unwrap()
    }

    /// `klaraptor inspect <build>/app`.
    fn inspect(&self, build: &str) -> Output {
        self.klaraptor(&["inspect", &format!("{build}/app")])
    }

    /// The objects and archives under `build` that klaraptor-cc instrumented (nvcc's own
    /// objects are not reproducible: they name nvcc's temporary files), with their bytes.
    fn objects(&self, build: &str) -> Vec<(PathBuf, Vec<u8>)> {
        let mut out = Vec::new();
        let mut stack = vec![self.path().join(build)];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    stack.push(p);
                } else if p.extension().is_some_and(|x| x == "o" || x == "a") {
                    let bytes = std::fs::read(&p).unwrap();
                    if klaraptor_profiler::gpu_profile::carries_runtime(&bytes) {
                        out.push((p.clone(), bytes));
                    }
                }
            }
        }
        out.sort();
        out
    }
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// Asserts that `klaraptor inspect` lists the fixture's kernel's H200 program.
fn assert_carries_saxpy(out: &Output) {
    let text = ok(out);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(&format!("kernel saxpy ({SAXPY})"))
            && stdout.contains("device: NVIDIA H200"),
        "{stdout}{text}"
    );
}

#[test]
fn builds_with_ninja_and_makefiles_and_the_executable_carries_the_program() {
    need("cmake");
    need("ninja");
    let s = Scratch::new(true);
    for (build, generator) in [("build-ninja", "Ninja"), ("build-make", "Unix Makefiles")] {
        s.configure(build, generator, &[]);
        let log = s.build(build, None);
        // The compiles go through klaraptor-cc, the link is CMake's (the host compiler).
        let link = log
            .lines()
            .find(|l| l.contains(" -o app "))
            .unwrap_or_else(|| panic!("no link line:\n{log}"));
        assert!(
            !link.contains("klaraptor") && link.contains("g++"),
            "{link}"
        );
        assert!(
            log.lines()
                .any(|l| l.contains("klaraptor-cc") && l.contains("saxpy.cu")),
            "{log}"
        );
        // The library carries the runtime and the program; so does the executable.
        let lib = std::fs::read(s.path().join(build).join("libsaxpy.a")).unwrap();
        assert!(klaraptor_profiler::gpu_profile::carries_runtime(&lib));
        assert!(contains(&lib, b"KLARAPTOR-MODEL-BEGIN"));
        assert_carries_saxpy(&s.inspect(build));
        // Nothing to do the second time: the database's generation file is a dependency,
        // not something that changes by itself.
        let again = s.build(build, None);
        assert!(
            !again.contains("klaraptor-cc") && !again.contains("Building CUDA object"),
            "a second build compiled again:\n{again}"
        );
    }
}

/// The flow of a project without profiles: build, `klaraptor profile ./app` (on a GPU
/// machine; here it says what it would profile), build again. The profile is stored here
/// from the committed entry, as `klaraptor profile` stores it (`ProfileDb::put`).
fn profile_later(cache: bool) {
    need("cmake");
    need("ninja");
    let s = Scratch::new(false);
    let db_dir = s.path().join("db");
    let mut defs = vec![format!("-DKLARAPTOR_PROFILE_DB={}", db_dir.display())];
    if cache {
        defs.push("-DKLARAPTOR_CACHE=ccache".into());
    }
    s.configure("build", "Ninja", &defs);
    let log = s.build("build", None);
    assert!(log.contains("ccache") == cache, "{log}");
    // No program, but a working build, and the generation file to depend on.
    let none = s.inspect("build");
    assert!(!none.status.success());
    assert!(
        stderr(&none).contains("carries no rational program"),
        "{}",
        stderr(&none)
    );
    assert!(db_dir.join("generation").is_file());
    let prof = s.klaraptor(&["profile", "--db", db_dir.to_str().unwrap(), "build/app"]);
    assert!(!prof.status.success());
    let err = stderr(&prof);
    assert!(
        err.contains("no NVIDIA GPU here") && err.contains("saxpy (annotated at"),
        "{err}"
    );

    // A profile arrives: the next build compiles the annotated source again, and the
    // executable carries the program.
    let db = ProfileDb::open(&db_dir).unwrap();
    let entry = ProfileDb::read_file(&root().join(SAXPY_ENTRY)).unwrap();
    db.put(&entry).unwrap();
    let log = s.build("build", None);
    assert!(log.contains("saxpy.cu"), "not recompiled:\n{log}");
    assert!(
        !log.contains("main.cu -o"),
        "an unannotated source recompiled:\n{log}"
    );
    assert_carries_saxpy(&s.inspect("build"));

    if cache {
        // From a clean build directory the objects come from the cache, with the program.
        std::fs::remove_dir_all(s.path().join("build")).unwrap();
        s.configure("build", "Ninja", &defs);
        let z = s.command("ccache").arg("-z").output().unwrap();
        ok(&z);
        s.build("build", None);
        let stats = s.command("ccache").arg("--print-stats").output().unwrap();
        let stats = String::from_utf8_lossy(&stats.stdout).into_owned();
        let hits: u64 = stats
            .lines()
            .filter(|l| {
                l.starts_with("direct_cache_hit") || l.starts_with("preprocessed_cache_hit")
            })
            .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
            .sum();
        assert_eq!(hits, 2, "{stats}");
        assert_carries_saxpy(&s.inspect("build"));
    }

    // The profile goes: the stale object (in the cache too) is not used.
    assert!(db
        .remove(SAXPY, &entry.kernel.code_hash, &entry.device.name)
        .unwrap());
    s.build("build", None);
    let gone = s.inspect("build");
    assert!(
        !gone.status.success(),
        "{}",
        String::from_utf8_lossy(&gone.stdout)
    );
}

#[test]
fn a_profile_stored_after_the_build_reaches_the_next_build() {
    profile_later(false);
}

#[test]
fn a_profile_stored_after_the_build_reaches_the_next_build_through_ccache() {
    if !have("ccache") {
        println!("note: ccache is not installed: the build through ccache was not checked");
        return;
    }
    profile_later(true);
}

/// Annotated translation unit `i` of the parallel builds' extra library (no profile).
fn extra_cu(i: usize) -> String {
    format!(
        "#pragma klaraptor kernel(k{i}) data(N=n) dim(1) grid(ceil(N, bx))\n\
         __global__ void k{i}(float *x, int n) {{\n\
         \x20 int j = blockIdx.x * blockDim.x + threadIdx.x;\n\
         \x20 if (j < n) x[j] += {i}.0f;\n\
         }}\n\
         void run_k{i}(float *x, int n) {{ k{i}<<<(n + 255) / 256, 256>>>(x, n); }}\n"
    )
}

#[test]
fn parallel_builds_repeated_give_byte_identical_objects() {
    need("cmake");
    need("ninja");
    // The fixture, and a library of six more annotated translation units, all reading one
    // database at once.
    let s = Scratch::new(true);
    let src = s.path().join("src");
    let mut names = Vec::new();
    for i in 0..6 {
        std::fs::write(src.join(format!("k{i}.cu")), extra_cu(i)).unwrap();
        names.push(format!("k{i}.cu"));
    }
    let mut lists = std::fs::read_to_string(src.join("CMakeLists.txt")).unwrap();
    lists.push_str(&format!("add_library(extra STATIC {})\n", names.join(" ")));
    std::fs::write(src.join("CMakeLists.txt"), lists).unwrap();
    for (build, generator) in [("build-ninja", "Ninja"), ("build-make", "Unix Makefiles")] {
        s.configure(build, generator, &[]);
        s.build(build, Some(8));
        let first = s.objects(build);
        assert_eq!(
            first.len(),
            9,
            "seven instrumented objects and two libraries"
        );
        // Each rebuild is compared with the first build: one in the default run, two with
        // `scripts/test --full`.
        for _ in 0..if full() { 2 } else { 1 } {
            let clean = s
                .command("cmake")
                .args(["--build", build, "--target", "clean"])
                .output()
                .unwrap();
            ok(&clean);
            s.build(build, Some(8));
            let again = s.objects(build);
            assert_eq!(first.len(), again.len());
            for ((p, a), (_, b)) in first.iter().zip(&again) {
                assert!(a == b, "{} differs between two builds", p.display());
            }
        }
        assert_carries_saxpy(&s.inspect(build));
    }
}

/// A second annotated translation unit for the link tests.
const SCALE_CU: &str = r#"#pragma klaraptor kernel(scale) data(N=n) dim(1) grid(ceil(N, bx))
__global__ void scale(float *x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= 2.0f;
}
void gpu_scale(float *x, int n) { scale<<<(n + 127) / 128, 128>>>(x, n); }
"#;

#[test]
fn objects_carrying_the_runtime_link_with_gpp_into_an_executable_and_a_shared_library() {
    let s = Scratch::new(true);
    let src = s.path().join("src");
    std::fs::write(src.join("scale.cu"), SCALE_CU).unwrap();
    let cc = |args: &[&str]| {
        let out = s
            .command(klaraptor_cc())
            .current_dir(&src)
            .env("KLARAPTOR_NVCC", nvcc())
            // The flags of the committed profile's build (samples/matmul), and position-
            // independent host code for the shared library.
            .args([
                "-gencode",
                "arch=compute_90,code=sm_90",
                "-Xcompiler",
                "-fPIC",
            ])
            .args(args)
            .output()
            .unwrap();
        ok(&out);
    };
    for f in ["saxpy", "scale", "main"] {
        cc(&["-c", &format!("{f}.cu"), "-o", &format!("{f}.o")]);
    }
    for f in ["saxpy.o", "scale.o"] {
        let bytes = std::fs::read(src.join(f)).unwrap();
        assert!(
            klaraptor_profiler::gpu_profile::carries_runtime(&bytes),
            "{f}"
        );
    }
    let cuda = nvcc().parent().unwrap().parent().unwrap().to_path_buf();
    let lib_dirs = [
        format!("-L{}", cuda.join("lib64").display()),
        format!("-L{}", cuda.join("lib").display()),
    ];
    let gpp = |args: &[&str]| {
        let out = Command::new("g++")
            .current_dir(&src)
            .args(args)
            .args(&lib_dirs)
            .args(["-lcudart_static", "-ldl", "-lrt", "-lpthread"])
            .output()
            .unwrap();
        ok(&out);
    };
    gpp(&["main.o", "saxpy.o", "scale.o", "-o", "app"]);
    gpp(&["-shared", "saxpy.o", "scale.o", "-o", "libkernels.so"]);
    gpp(&[
        "main.o",
        "-o",
        "app-shared",
        "-L.",
        "-lkernels",
        "-Wl,-rpath,$ORIGIN",
    ]);
    let nm = |args: &[&str]| -> String {
        let out = Command::new("nm")
            .current_dir(&src)
            .args(args)
            .output()
            .unwrap();
        ok(&out);
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    for bin in ["app", "libkernels.so"] {
        // One copy of the runtime: one definition of each of its functions.
        let syms = nm(&[bin]);
        for f in [
            "klaraptor_select",
            "klaraptor_register",
            "klaraptor_launch_begin",
        ] {
            let n = syms
                .lines()
                .filter(|l| l.split_whitespace().last() == Some(f))
                .count();
            assert_eq!(n, 1, "{bin}: {n} definitions of {f}");
        }
    }
    // The shared library keeps its copy to itself.
    let dynamic = nm(&["-D", "--defined-only", "libkernels.so"]);
    assert!(!dynamic.contains("klaraptor"), "{dynamic}");
    // Both programs are listed by inspect (the saxpy program; scale has no profile).
    assert_carries_saxpy(
        &s.command(klaraptor())
            .arg("inspect")
            .arg(src.join("app"))
            .output()
            .unwrap(),
    );
    assert_carries_saxpy(
        &s.command(klaraptor())
            .arg("inspect")
            .arg(src.join("libkernels.so"))
            .output()
            .unwrap(),
    );
}

fn cc() -> String {
    std::env::var("CC")
        .ok()
        .filter(|c| !c.is_empty())
        .unwrap_or_else(|| "cc".into())
}

fn run_ok(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        stderr(&out)
    );
    out
}

fn embedded_object(dir: &Path) -> PathBuf {
    klaraptor::runtime::embedded(dir).unwrap()
}

/// One carrier of the runtime: a translation unit registering kernel `id` and calling
/// `klaraptor_select` from `select_<tag>`, partially linked with the carried runtime, as
/// klaraptor-cc makes an object.
const CARRIER_C: &str = r#"#include <stdint.h>
#include "klaraptor.h"
static int grid_1d(const int64_t *d, const uint32_t b[3], uint32_t g[3]) {
  g[0] = (uint32_t)((d[0] + b[0] - 1) / b[0]); g[1] = g[2] = 1; return 0;
}
static const char *const names[] = {"n"};
static const klaraptor_kernel k = {KLARAPTOR_ABI_VERSION, ID, ID, 1, names, 1, grid_1d, 0, -1, -1, 0, 0};
__attribute__((constructor)) static void reg(void) { klaraptor_register(&k); }
unsigned SELECT(const char *id, int64_t n) {
  uint64_t gxy = 1 | (1ull << 32), bxy = 256 | (1ull << 32);
  uint32_t gz = 1, bz = 1;
  klaraptor_select(id, 1, &n, &gxy, &gz, &bxy, &bz);
  return (unsigned)(bxy & 0xffffffffu);
}
"#;

const SHARED_MAIN_C: &str = r#"#include <stdint.h>
#include <stdio.h>
#include <stddef.h>
unsigned select_a(const char *id, int64_t n);
unsigned select_b(const char *id, int64_t n);
size_t klaraptor__memo_size(void);
/* The CUDA runtime's launch entry point, which the carried runtime passes launches on to
 * (none here). */
int __cudaLaunchKernel(void *k, uint64_t gxy, uint32_t gz, uint64_t bxy, uint32_t bz, void **a,
                       size_t shmem, void *stream) {
  (void)k; (void)gxy; (void)gz; (void)bxy; (void)bz; (void)a; (void)shmem; (void)stream;
  return 0;
}
int main(void) {
  /* Each object selects for the kernel the other one registered. */
  unsigned a = select_a("kb", 1000), b = select_b("ka", 1000);
  printf("a=%u b=%u memo=%zu\n", a, b, klaraptor__memo_size());
  return 0;
}
"#;

#[test]
fn two_copies_of_the_runtime_share_one_registry_and_memo() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let rt = embedded_object(d);
    // Every symbol the carried runtime defines is weak; none it needs is (a weak undefined
    // symbol would not pull the CUDA runtime's definition out of libcudart_static.a).
    let nm = run_ok(Command::new("nm").arg(&rt));
    let nm = String::from_utf8_lossy(&nm.stdout).into_owned();
    for l in nm.lines() {
        let kind = l.split_whitespace().rev().nth(1).unwrap_or("");
        assert!(
            !matches!(kind, "T" | "D" | "B" | "R" | "w" | "v"),
            "carried runtime: {l}"
        );
    }
    assert!(nm.contains(" W klaraptor_select") && nm.contains(" U __cudaLaunchKernel"));
    let shim = root().join("runtime-shim");
    std::fs::write(d.join("carrier.c"), CARRIER_C).unwrap();
    for (tag, id) in [("a", "ka"), ("b", "kb")] {
        let obj = d.join(format!("{tag}.o"));
        run_ok(
            Command::new(cc())
                .args(["-std=c11", "-fPIC", "-O2", "-c"])
                .arg(format!("-DID=\"{id}\""))
                .arg(format!("-DSELECT=select_{tag}"))
                .arg("-I")
                .arg(shim.join("include"))
                .arg(d.join("carrier.c"))
                .arg("-o")
                .arg(&obj),
        );
        run_ok(
            Command::new("ld")
                .arg("-r")
                .arg(&obj)
                .arg(&rt)
                .arg("-o")
                .arg(d.join(format!("carrier_{tag}.o"))),
        );
    }
    std::fs::write(d.join("main.c"), SHARED_MAIN_C).unwrap();
    let exe = d.join("shared");
    run_ok(
        Command::new(cc())
            .args(["-std=c11", "-O1"])
            .arg("-I")
            .arg(CUDA_INCLUDE)
            .arg(d.join("main.c"))
            .arg(d.join("carrier_a.o"))
            .arg(d.join("carrier_b.o"))
            .arg(shim.join("tests/fake_cudart.c"))
            .args(["-ldl", "-lpthread", "-o"])
            .arg(&exe),
    );
    let out = run_ok(
        Command::new(&exe)
            .env("KLARAPTOR_FORCE", "ka:64,kb:128")
            .env_remove("KLARAPTOR_DISABLE")
            .env_remove("KLARAPTOR_LOG")
            .env("KLARAPTOR_CHOICES", d.join("choices")),
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "a=128 b=64 memo=2\n",
        "{}",
        stderr(&out)
    );
}

/// runtime-shim/tests/test_prof.c linked against the sources (as tests/runtime_shim.rs
/// does), and against the carried runtime, twice (two carriers): both must profile alike.
#[test]
fn the_carried_runtime_profiles_on_request() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let rt = embedded_object(d);
    let shim = root().join("runtime-shim");
    let from_sources = d.join("test_prof_sources");
    let mut c = Command::new(cc());
    common::shim_c_flags(&mut c);
    run_ok(
        c.arg(shim.join("src/klaraptor_rt.c"))
            .arg(shim.join("src/klaraptor_prof.c"))
            .arg(shim.join("tests/test_prof.c"))
            .arg(shim.join("tests/fake_cudart.c"))
            .args(["-ldl", "-lpthread", "-o"])
            .arg(&from_sources),
    );
    // The program's launches go where klaraptor-cc routes them, and the CUDA runtime's
    // entry point is the test's.
    let carried = d.join("test_prof_carried");
    let mut c = Command::new(cc());
    common::shim_c_flags(&mut c);
    run_ok(
        c.arg("-D__wrap___cudaLaunchKernel=klaraptor__launch_kernel")
            .arg("-D__real___cudaLaunchKernel=__cudaLaunchKernel")
            .arg(shim.join("tests/test_prof.c"))
            .arg(shim.join("tests/fake_cudart.c"))
            .arg(&rt)
            .arg(&rt)
            .args(["-ldl", "-lpthread", "-o"])
            .arg(&carried),
    );
    let collector = d.join("libfake_collector.so");
    let mut c = Command::new(cc());
    common::shim_c_flags(&mut c);
    run_ok(
        c.arg("-shared")
            .arg(shim.join("tests/fake_collector.c"))
            .arg("-o")
            .arg(&collector),
    );
    let plan = d.join("plan");
    std::fs::write(&plan, "_Z4vaddPfi 32x1x1 64x1x1 128x1x1 2048x1x1\n").unwrap();
    let run = |exe: &Path, name: &str, profile: bool| -> (String, Vec<String>) {
        let records = d.join(name);
        std::fs::create_dir_all(&records).unwrap();
        let mut cmd = Command::new(exe);
        cmd.args(["1000", "5000", "1000"])
            .env_remove("KLARAPTOR_PROFILE_SKIP")
            .env_remove("KLARAPTOR_PROGRESS")
            .env_remove("KLARAPTOR_FORCE")
            .env_remove("KLARAPTOR_DISABLE");
        if profile {
            cmd.env("KLARAPTOR_PROFILE_OUT", &records)
                .env("KLARAPTOR_PROFILE_PLAN", &plan)
                .env("KLARAPTOR_COLLECTOR", &collector);
        } else {
            cmd.env_remove("KLARAPTOR_PROFILE_OUT")
                .env_remove("KLARAPTOR_PROFILE_PLAN");
        }
        let out = run_ok(&mut cmd);
        let mut files: Vec<String> = std::fs::read_dir(&records)
            .unwrap()
            .map(|e| {
                let p = e.unwrap().path();
                format!(
                    "{}: {} lines",
                    p.file_name().unwrap().to_string_lossy(),
                    std::fs::read_to_string(&p).unwrap().lines().count()
                )
            })
            .collect();
        files.sort();
        (String::from_utf8_lossy(&out.stdout).into_owned(), files)
    };
    let a = run(&from_sources, "records-sources", true);
    let b = run(&carried, "records-carried", true);
    assert!(!a.1.is_empty(), "the source build recorded nothing: {a:?}");
    assert_eq!(
        a, b,
        "the carried runtime profiles otherwise than the sources"
    );
    // Not asked to profile: every launch passes through, once.
    let quiet = run(&carried, "records-quiet", false);
    assert!(quiet.1.is_empty(), "{quiet:?}");
    assert_eq!(
        quiet.0.lines().last(),
        Some("launches: 256=3"),
        "{}",
        quiet.0
    );
}
