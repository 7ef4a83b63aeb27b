//! Shared helpers for the integration tests: the real nvcc and klaraptor-cc, run in
//! scratch directories.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The nvcc that `scripts/setup` installs. Tests need it: they compile real CUDA.
pub fn nvcc() -> PathBuf {
    if let Some(p) = std::env::var_os("KLARAPTOR_NVCC") {
        return PathBuf::from(p);
    }
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join(".toolchain/cuda/bin/nvcc");
    assert!(
        p.is_file(),
        "{} is missing: run scripts/setup first",
        p.display()
    );
    p
}

/// Whether the slow tests check everything (`scripts/test --full`, which sets
/// `KLARAPTOR_TEST_FULL=1`, as CI does) rather than their representative subset: every
/// program of the sample suites instead of a few chosen to cover each feature the suite
/// exercises, and every repetition of a check that repeats.
pub fn full() -> bool {
    std::env::var_os("KLARAPTOR_TEST_FULL").is_some_and(|v| v == "1")
}

/// How many jobs a test's own `make -j` runs: the machine's CPUs.
pub fn jobs() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get())
}

pub fn klaraptor_cc() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_klaraptor-cc"))
}

pub fn klaraptor() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_klaraptor"))
}

/// A scratch directory holding the given files.
pub fn project(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in files {
        let p = dir.path().join(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    dir
}

/// Runs `prog args…` in `dir`, with klaraptor-cc pointed at the same nvcc the test uses.
pub fn run(dir: &Path, prog: &Path, args: &[&str]) -> Output {
    Command::new(prog)
        .args(args)
        .current_dir(dir)
        .env("KLARAPTOR_NVCC", nvcc())
        .env_remove("NVCC_PREPEND_FLAGS")
        .env_remove("NVCC_APPEND_FLAGS")
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", prog.display()))
}

/// `prog` in `dir` with klaraptor-cc's environment pinned: the test's nvcc, no GPU (never
/// profile, whatever the machine), no transferred programs, no database or collector from the
/// environment, and a user cache of the directory's own (a calibration cached on this machine
/// would change the device description).
pub fn pinned(dir: &Path, prog: &Path) -> Command {
    let mut c = Command::new(prog);
    c.current_dir(dir)
        .env("KLARAPTOR_NVCC", nvcc())
        .env("KLARAPTOR_NO_GPU", "1")
        .env("KLARAPTOR_TRANSFER", "off")
        .env("XDG_CACHE_HOME", dir.join(".test-cache"))
        .env_remove("KLARAPTOR_PROFILE_DB")
        .env_remove("KLARAPTOR_COLLECTOR")
        .env_remove("NVCC_PREPEND_FLAGS")
        .env_remove("NVCC_APPEND_FLAGS");
    c
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Runs `cmd`, which must succeed (its output is in the panic otherwise); returns its stdout
/// and stderr together.
pub fn logged(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{cmd:?} failed:\n{text}");
    text
}

/// Asserts that the command succeeded (saying its status, stdout and stderr otherwise) and
/// returns its stderr.
pub fn ok(o: &Output) -> String {
    let err = stderr(o);
    assert!(
        o.status.success(),
        "failed ({}):\n{}\n{err}",
        o.status,
        String::from_utf8_lossy(&o.stdout)
    );
    err
}

/// The directory a `--kl-keep` run of klaraptor-cc kept, as its stderr `err` names it.
pub fn kept_dir(err: &str) -> &str {
    err.lines()
        .find_map(|l| l.strip_prefix("klaraptor-cc: kept intermediate files in "))
        .unwrap_or_else(|| panic!("no kept directory:\n{err}"))
}

/// The part of a fake CUDA runtime and klaraptor runtime that no harness looks at: fatbinary
/// and kernel registration, the call configuration's pop, the kernel handle and the end of a
/// launch.
const FAKE_RUNTIME_STUBS: &str = r#"#include <cstdint>
#include <cstddef>
extern "C" {
unsigned __cudaPopCallConfiguration(void *, void *, size_t *, void **) { return 0; }
unsigned __cudaGetKernel(void **h, const void *stub) { *h = (void *)stub; return 0; }
void **__cudaRegisterFatBinary(void *) { static void *h; return &h; }
void __cudaRegisterFatBinaryEnd(void **) {}
void __cudaUnregisterFatBinary(void **) {}
void __cudaRegisterFunction(void **, const char *, char *, const char *, int, void *, void *, void *, void *, int *) {}
void klaraptor_launch_end(uint64_t) {}
}
"#;

/// Compiles `harness` (C++: the fake runtime's `__cudaPushCallConfiguration`,
/// `__cudaLaunchKernel`, `klaraptor_select` and `klaraptor_launch_begin`, which record what
/// the launch gives them, and a `main` that checks it), after [`FAKE_RUNTIME_STUBS`], with
/// the instrumented host object `host` into `dir`, runs it and asserts that it exits 0
/// (saying its stdout otherwise).
pub fn run_fake_runtime_harness(dir: &Path, harness: &str, host: &Path) {
    let src = dir.join("harness.cpp");
    std::fs::write(&src, [FAKE_RUNTIME_STUBS, harness].concat()).unwrap();
    let exe = dir.join("harness");
    let cc = Command::new("c++")
        .arg(&src)
        .arg(host)
        .arg("-o")
        .arg(&exe)
        .output()
        .unwrap();
    assert!(cc.status.success(), "{}", stderr(&cc));
    let out = Command::new(&exe).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// Every regular file under `dir`, relative, sorted.
pub fn files(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p.strip_prefix(dir).unwrap().display().to_string());
            }
        }
    }
    out.sort();
    out
}

/// File contents with nvcc's per-run temporary names (`tmpxft_<pid>_<n>`) made equal.
pub fn normalized(path: &Path) -> Vec<u8> {
    let bytes = std::fs::read(path).unwrap();
    let re = regex::bytes::Regex::new(r"tmpxft_[0-9a-f]{8}_[0-9a-f]{8}").unwrap();
    re.replace_all(&bytes, &b"tmpxft_XXXXXXXX_XXXXXXXX"[..])
        .into_owned()
}

/// Copies the directory `from` to `to`, recursively, without a profile database's lock files
/// (`.lock*`).
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap();
        if p.is_dir() {
            copy_dir(&p, &to.join(name));
        } else if !name.to_string_lossy().starts_with(".lock") {
            std::fs::copy(&p, to.join(name)).unwrap();
        }
    }
}

/// A committed profile entry (a path under the repository).
pub fn fixture_entry(rel: &str) -> klaraptor_profiler::record::Entry {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(rel);
    toml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// The spec of a kernel as its annotation gives it (grid formulas and block constraints),
/// with the rest from its profile entry.
pub fn idiom_spec(
    entry: &klaraptor_profiler::record::Entry,
    grid: &str,
    block: &[&str],
) -> klaraptor_spec::link::LinkSpec {
    klaraptor_spec::link::LinkSpec {
        shmem: None,
        name: entry.kernel.name.clone(),
        mangled: entry.kernel.mangled.clone(),
        data: entry.kernel.data.clone(),
        dim: entry.kernel.dim,
        grid: vec![grid.to_string()],
        block: block.iter().map(|b| b.to_string()).collect(),
        profile_run: None,
        profile_sizes: vec![],
        code_hash: entry.kernel.code_hash.clone(),
        annotated_at: String::new(),
        build_dir: PathBuf::new(),
    }
}

/// The C compiler the runtime's C tests are built with: `$CC`, else `cc`.
pub fn c_compiler() -> String {
    std::env::var("CC")
        .ok()
        .filter(|c| !c.is_empty())
        .unwrap_or_else(|| "cc".into())
}

/// The flags the runtime's C sources and tests are built with here: C11, every warning an
/// error, position-independent, and the runtime's and CUDA's headers.
pub fn shim_c_flags(cmd: &mut Command) {
    let shim = Path::new(env!("CARGO_MANIFEST_DIR")).join("runtime-shim");
    cmd.args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-fPIC", "-O1"])
        .arg("-I")
        .arg(shim.join("include"))
        .arg("-I")
        .arg(shim.join("src"))
        .arg("-I")
        .arg(env!("KLARAPTOR_RT_CUDA_INCLUDE"));
}

/// Builds the profiling runtime's test program (runtime-shim/tests/test_prof.c linked with the
/// real klaraptor_rt.c and klaraptor_prof.c and the fake CUDA runtime; its kernel is `vadd`)
/// and the fake collector (a shared library) into `dir`, warnings as errors. Returns the
/// program and the library.
pub fn build_test_prof(dir: &Path) -> (PathBuf, PathBuf) {
    let shim = Path::new(env!("CARGO_MANIFEST_DIR")).join("runtime-shim");
    std::fs::create_dir_all(dir).unwrap();
    let exe = dir.join("test_prof");
    let lib = dir.join("libfake_collector.so");
    let mut cmd = Command::new(c_compiler());
    shim_c_flags(&mut cmd);
    cmd.arg(shim.join("src/klaraptor_rt.c"))
        .arg(shim.join("src/klaraptor_prof.c"))
        .arg(shim.join("tests/test_prof.c"))
        .arg(shim.join("tests/fake_cudart.c"))
        .args(["-ldl", "-lpthread", "-o"])
        .arg(&exe);
    let mut lib_cmd = Command::new(c_compiler());
    shim_c_flags(&mut lib_cmd);
    lib_cmd
        .arg("-shared")
        .arg(shim.join("tests/fake_collector.c"))
        .arg("-o")
        .arg(&lib);
    for mut c in [cmd, lib_cmd] {
        let o = c.output().expect("running the C compiler");
        assert!(
            o.status.success(),
            "{c:?}:\n{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
    }
    (exe, lib)
}

/// The output of tests/fixtures/select-harness/harness.c (a generated rational program
/// compiled with it: `exe`) in `mode` (`select`, `rank`, `profiled`), fed one line of sizes
/// each; panics with its stderr when it fails.
pub fn harness_output(exe: &Path, mode: &str, sizes: &[Vec<i64>]) -> String {
    use std::io::Write as _;
    use std::process::Stdio;
    let mut child = Command::new(exe)
        .arg(mode)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    {
        let mut stdin = child.stdin.take().unwrap();
        for n in sizes {
            let line: Vec<String> = n.iter().map(i64::to_string).collect();
            writeln!(stdin, "{}", line.join(" ")).unwrap();
        }
    }
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).unwrap()
}

/// Compiles tests/fixtures/select-harness/harness.c with the generated rational program
/// `c_file` into `exe`, with the flags klaraptor-cc compiles rational programs with.
pub fn build_select_harness(c_file: &Path, exe: &Path) {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let o = Command::new(c_compiler())
        .args([
            "-std=c99",
            "-O2",
            "-ffp-contract=off",
            "-Wall",
            "-Wextra",
            "-I",
        ])
        .arg(repo.join("runtime-shim/include"))
        .arg(repo.join("tests/fixtures/select-harness/harness.c"))
        .arg(c_file)
        .arg("-lm")
        .arg("-o")
        .arg(exe)
        .output()
        .unwrap();
    assert!(o.status.success(), "building the harness:\n{}", stderr(&o));
}

/// The C's `kl_rank` (the shapes the runtime's refinement tries) gives the Rust ranking's
/// first three shapes in order, and as many allowed shapes.
pub fn assert_c_rank_matches(
    exe: &Path,
    prog: &klaraptor_program::rational::RationalProgram,
    sizes: &[Vec<i64>],
) {
    let out = harness_output(exe, "rank", sizes);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), sizes.len(), "{out}");
    for (n, line) in sizes.iter().zip(&lines) {
        let f: Vec<&str> = line.split_whitespace().collect();
        let k = n.len();
        let ranked = prog.rank(n).unwrap();
        let total: usize = f[k].parse().unwrap();
        assert_eq!(total, ranked.len(), "{n:?}: {line}");
        let want: Vec<String> = ranked
            .iter()
            .take(3)
            .map(|r| format!("{}x{}x{}", r.block[0], r.block[1], r.block[2]))
            .collect();
        assert_eq!(f[k + 1..].to_vec(), want, "{n:?}: C ranks {line}");
    }
}
