//! The instrumented build (no GPU): annotated translation units go through nvcc -cuda,
//! clang-19 and the IO-builder pass; the objects call the runtime and carry their kernel
//! descriptors; links add the runtime; the generated grid formulas agree with the Rust
//! evaluation of the same expressions.

mod common;
use common::*;
use std::path::Path;
use std::process::Command;

use klaraptor_spec::expr;

fn symbols(path: &Path) -> String {
    let o = Command::new("nm").arg(path).output().unwrap();
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A scratch copy of samples/matmul.
fn sample_project() -> tempfile::TempDir {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("samples/matmul");
    let files: Vec<(&str, String)> = ["Makefile", "kernels.h", "main.cu", "mm.cu", "saxpy.cu"]
        .iter()
        .map(|n| (*n, std::fs::read_to_string(dir.join(n)).unwrap()))
        .collect();
    let refs: Vec<(&str, &str)> = files.iter().map(|(a, b)| (*a, b.as_str())).collect();
    project(&refs)
}

#[test]
fn separate_compile_then_link_instruments_and_adds_the_runtime() {
    let d = sample_project();
    let o = Command::new("make")
        .arg(format!("NVCC={} --kl-verbose", klaraptor_cc().display()))
        .current_dir(d.path())
        .env("KLARAPTOR_NVCC", nvcc())
        .output()
        .unwrap();
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains("instrumented a launch of _Z2mmPKfS0_Pfi in _Z6gpu_mmPKfS0_Pfi"),
        "{err}"
    );
    assert!(
        err.contains("instrumented a launch of _Z5saxpyfPKfPfi in _Z9gpu_saxpyfPKfPfi"),
        "{err}"
    );
    assert!(
        err.contains("linking instrumented objects: adding rational programs and the runtime"),
        "{err}"
    );
    // The instrumented objects call the runtime, register their kernels and carry the
    // runtime (weak: driver/src/runtime.rs).
    let mm = symbols(&d.path().join("mm.o"));
    assert!(mm.contains(" W klaraptor_launch_begin"), "{mm}");
    assert!(mm.contains(" W klaraptor_launch_end"), "{mm}");
    assert!(mm.contains(" W klaraptor_register"), "{mm}");
    // The unannotated one is nvcc's own.
    assert!(!symbols(&d.path().join("main.o")).contains("klaraptor"));
    let app = symbols(&d.path().join("matmul"));
    assert!(
        defines(&app, "klaraptor_select") && defines(&app, "klaraptor_register"),
        "{app}"
    );
}

/// `--kl-keep` on a link of instrumented objects keeps the link's work directory (where a
/// link that profiles leaves each recipe run's records).
#[test]
fn a_link_of_instrumented_objects_keeps_its_work_with_kl_keep() {
    let src = "#pragma klaraptor kernel(k) data(n)\n__global__ void k(int n) {}\n\
               int main() { k<<<1, 32>>>(3); return 0; }\n";
    let d = project(&[("k.cu", src)]);
    ok(&run(
        d.path(),
        &klaraptor_cc(),
        &["-c", "k.cu", "-o", "k.o"],
    ));
    let mut cmd = Command::new(klaraptor_cc());
    cmd.args(["k.o", "-o", "app", "--kl-keep"])
        .current_dir(d.path())
        .env("KLARAPTOR_NVCC", nvcc())
        .env("KLARAPTOR_NO_GPU", "1")
        .env("KLARAPTOR_TRANSFER", "off")
        .env("KLARAPTOR_PROFILE_DB", d.path().join("db"))
        .env_remove("NVCC_PREPEND_FLAGS")
        .env_remove("NVCC_APPEND_FLAGS");
    let err = ok(&cmd.output().unwrap());
    let kept = kept_dir(&err);
    assert!(Path::new(kept).is_dir(), "{kept}");
    assert!(d.path().join("app").is_file());
    std::fs::remove_dir_all(kept).unwrap();
}

#[test]
fn one_step_compile_and_link() {
    let d = sample_project();
    let o = run(
        d.path(),
        &klaraptor_cc(),
        &[
            "-O2",
            "-arch=sm_90",
            "main.cu",
            "mm.cu",
            "saxpy.cu",
            "-o",
            "app",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let app = symbols(&d.path().join("app"));
    assert!(defines(&app, "klaraptor_select"), "{app}");
    assert_eq!(
        files_without_sources(d.path()),
        ["app"],
        "no intermediate files are left behind"
    );
}

/// Whether `nm` output lists `name` as defined (the runtime the objects carry is weak and
/// hidden: `t`, `T` or `W` in a binary, as the linker leaves it).
fn defines(nm: &str, name: &str) -> bool {
    nm.lines().any(|l| {
        let w: Vec<&str> = l.split_whitespace().collect();
        w.len() == 3 && w[2] == name && matches!(w[1], "t" | "T" | "W")
    })
}

fn files_without_sources(dir: &Path) -> Vec<String> {
    files(dir)
        .into_iter()
        .filter(|f| !f.ends_with(".cu") && !f.ends_with(".h") && f != "Makefile")
        .collect()
}

#[test]
fn an_annotated_kernel_without_a_launch_gets_a_warning() {
    let src = "#pragma klaraptor kernel(k) data(n)\n__global__ void k(int n) {}\n";
    let d = project(&[("k.cu", src)]);
    let o = run(d.path(), &klaraptor_cc(), &["-c", "k.cu", "-o", "k.o"]);
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains("klaraptor-cc: warning: kernel k (annotated at k.cu:1:19) has no <<<>>> launch in k.cu that klaraptor could instrument"),
        "{err}"
    );
}

/// Relocatable device code (`-dc`, `-rdc=true -c`) is instrumented as a whole-program
/// compile is, and keeps nvcc's registration through the device link; a mode nvcc refuses
/// with `-rdc` (`-dc -rdc=false`) is nvcc's to report; `--kl-backend=clang` hands it to nvcc
/// and says so (tests/separable_compilation.rs links such objects).
#[test]
fn rdc_compiles_are_instrumented() {
    let src = "#pragma klaraptor kernel(k) data(n)\n__global__ void k(int n) {}\nvoid go(int n) { k<<<1, 32>>>(n); }\n";
    let d = project(&[("k.cu", src)]);
    for args in [
        &["-dc", "-arch=sm_90", "k.cu", "-o", "k.o"][..],
        &["-rdc=true", "-c", "-arch=sm_90", "k.cu", "-o", "k.o"],
        &[
            "--kl-backend=clang",
            "-dc",
            "-arch=sm_90",
            "k.cu",
            "-o",
            "k.o",
        ],
    ] {
        let _ = std::fs::remove_file(d.path().join("k.o"));
        let o = run(d.path(), &klaraptor_cc(), args);
        let err = stderr(&o);
        assert!(o.status.success(), "{args:?}: {err}");
        assert!(!err.contains("not instrumented"), "{args:?}: {err}");
        assert_eq!(
            err.contains("--kl-backend=clang does not build relocatable device code"),
            args[0] == "--kl-backend=clang",
            "{args:?}: {err}"
        );
        let syms = symbols(&d.path().join("k.o"));
        assert!(
            syms.contains("klaraptor_launch_begin") && syms.contains("__cudaRegisterLinkedBinary_"),
            "{args:?}: {syms}"
        );
    }
    let o = run(
        d.path(),
        &klaraptor_cc(),
        &["-dc", "-rdc=false", "-arch=sm_90", "k.cu", "-o", "k2.o"],
    );
    assert!(!o.status.success());
    assert!(stderr(&o).contains("nvcc fatal"), "{}", stderr(&o));
    assert!(!d.path().join("k2.o").exists());
}

/// The descriptors' C grid and constraint functions (`pow2` included), compiled with `cc
/// -Wall -Wextra -Werror`, against the Rust evaluation of the same expressions on many
/// inputs (exact: both are 64-bit integer arithmetic with the same rounding; overflow and
/// division by zero must be reported by both).
#[test]
fn generated_grid_formulas_agree_with_the_expression_semantics() {
    let src = r#"
#pragma klaraptor kernel(k) data(N=n, M=m) dim(3) grid(ceil(N, bx), (M - 7) / by + N % 5, max(1, min(N, M) - bz * 3)) block(bx * by * bz <= 1024 && (bx % 32 == 0 || by == 1)) block(!(bz > 4)) block(pow2(bx) || !pow2(by * bz - N % 3))
__global__ void k(int n, long m) {}
void go(int n, long m) { k<<<1, 1>>>(n, m); }
"#;
    let d = project(&[("k.cu", src)]);
    let o = run(
        d.path(),
        &klaraptor_cc(),
        &["-c", "k.cu", "-o", "k.o", "--kl-keep"],
    );
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    let kept = kept_dir(&err);
    let tu = Path::new(kept).join("tu0");
    let harness = r#"#include <stdio.h>
#include <stdint.h>
#include "klaraptor.h"
static const klaraptor_kernel *K;
void klaraptor_register(const klaraptor_kernel *k) { K = k; }
int main(void) {
  long long n, m; unsigned bx, by, bz;
  while (scanf("%lld %lld %u %u %u", &n, &m, &bx, &by, &bz) == 5) {
    int64_t data[2] = { n, m }; uint32_t b[3] = { bx, by, bz }, g[3] = { 0, 0, 0 };
    int e = K->grid(data, b, g);
    printf("%d %u %u %u %d\n", e, g[0], g[1], g[2], K->allowed(data, b));
  }
  return 0;
}
"#;
    let exe = build_harness(&tu, harness);

    let names = ["N", "M"];
    let grid = [
        expr::parse_int("ceil(N, bx)", &names).unwrap(),
        expr::parse_int("(M - 7) / by + N % 5", &names).unwrap(),
        expr::parse_int("max(1, min(N, M) - bz * 3)", &names).unwrap(),
    ];
    let allowed = [
        expr::parse_bool("bx * by * bz <= 1024 && (bx % 32 == 0 || by == 1)", &names).unwrap(),
        expr::parse_bool("!(bz > 4)", &names).unwrap(),
        expr::parse_bool("pow2(bx) || !pow2(by * bz - N % 3)", &names).unwrap(),
    ];
    let mut input = String::new();
    let mut cases = Vec::new();
    let mut seed = 0x2545F4914F6CDD1Du64;
    let mut next = |m: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % m
    };
    for i in 0..5000 {
        let n = next(1 << 20) as i64 - if i % 7 == 0 { 1 << 19 } else { 0 };
        let m = if i % 97 == 0 {
            i64::MIN + next(10) as i64
        } else {
            next(1 << 24) as i64 - 100
        };
        let (bx, by, bz) = (
            next(1025) as i64,
            next(65) as i64 + (i % 3 == 0) as i64,
            next(8) as i64 + 1,
        );
        input += &format!("{n} {m} {bx} {by} {bz}\n");
        cases.push([("N", n), ("M", m), ("bx", bx), ("by", by), ("bz", bz)]);
    }
    let mut child = Command::new(&exe)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let lines: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    assert_eq!(lines.len(), cases.len());
    for (env, line) in cases.iter().zip(&lines) {
        let g: Result<Vec<i64>, _> = grid.iter().map(|e| e.eval(env)).collect();
        let want_grid = match g {
            Ok(g) if g.iter().all(|&v| (1..=u32::MAX as i64).contains(&v)) => {
                format!("0 {} {} {}", g[0], g[1], g[2])
            }
            _ => "1".into(),
        };
        let ok = allowed.iter().all(|c| c.eval(env) == Ok(true));
        let got: Vec<&str> = line.split(' ').collect();
        let got_grid = if got[0] == "0" {
            got[..4].join(" ")
        } else {
            "1".into()
        };
        assert_eq!(got_grid, want_grid, "grid for {env:?}");
        assert_eq!(
            got[4],
            if ok { "1" } else { "0" },
            "constraints for {env:?}"
        );
    }
    std::fs::remove_dir_all(kept).unwrap();
}

/// bench/gpu/launch_check.cu launches from `main`, which has C++ cleanups (std::vector), so
/// clang emits the launches as `invoke`s, and at -O2 it would inline the small launch stubs:
/// the pass runs before optimisation and handles `invoke`. Every annotated launch (templates,
/// a loop, a stream with dynamic shared memory) is instrumented; the unannotated one is not.
#[test]
fn launches_in_a_function_with_cleanups_at_o2() {
    let src = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("bench/gpu/launch_check.cu"),
    )
    .unwrap();
    let d = project(&[("launch_check.cu", &src)]);
    let o = run(
        d.path(),
        &klaraptor_cc(),
        &[
            "-O2",
            "-arch=sm_90",
            "launch_check.cu",
            "-o",
            "lc",
            "--kl-verbose",
        ],
    );
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    let launches: Vec<&str> = err
        .lines()
        .filter_map(|l| l.strip_prefix("klaraptor-cc: instrumented a launch of "))
        .collect();
    for k in [
        "_Z5scalePffiPj in main",
        "_Z4axpyIfEvT_PKS0_PS0_iPj in main",
        "_Z4axpyIdEvT_PKS0_PS0_iPj in main",
        "_Z6rowsumPKfPfiPj in main",
        "_Z5emptyi in main",
    ] {
        assert!(launches.contains(&k), "{k} not instrumented:\n{err}");
    }
    assert_eq!(launches.len(), 6, "{err}");
    assert!(
        !err.contains("unannotated")
            && !err
                .lines()
                .any(|l| l.contains("warning") && !l.contains("warning: no profile")),
        "{err}"
    );
}

/// Dynamic shared memory that follows the block: a kernel with `shmem(…)`, one whose launch
/// the pass reads (`b * sizeof(float)` for a block of `b`), one it cannot read (a warning
/// that asks for the clause; the launch keeps its own shape), and a launch whose amount comes
/// from the data only. The objects carry the formulas to the link and the descriptors
/// compute them.
#[test]
fn dynamic_shared_memory_that_follows_the_block() {
    let src = r#"#pragma klaraptor kernel(detected) data(n)
__global__ void detected(float *x, int n) { extern __shared__ float s[]; s[threadIdx.x] = x[n]; }
#pragma klaraptor kernel(clause) data(n) shmem((bx + 1) * 8)
__global__ void clause(float *x, int n) { extern __shared__ double t[]; t[threadIdx.x] = x[n]; }
#pragma klaraptor kernel(unread) data(n)
__global__ void unread(float *x, int n) { extern __shared__ float u[]; u[threadIdx.x] = x[n]; }
int pick(int);
void go(float *x, int n, int b) {
  detected<<<(n + b - 1) / b, b, b * sizeof(float)>>>(x, n);
  clause<<<(n + b - 1) / b, b, (b + 1) * sizeof(double)>>>(x, n);
  unread<<<(n + b - 1) / b, b, pick(b) * sizeof(float)>>>(x, n);
  unread<<<(n + 255) / 256, 256, n * sizeof(float)>>>(x, n);
}
"#;
    let d = project(&[("k.cu", src)]);
    let o = run(
        d.path(),
        &klaraptor_cc(),
        &["-c", "k.cu", "-o", "k.o", "--kl-keep", "--kl-verbose"],
    );
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains(
            "the dynamic shared memory of a launch of detected in _Z2goPfii follows the block: \
             shmem((bx * 4))"
        ),
        "{err}"
    );
    let warning = err
        .lines()
        .find(|l| l.starts_with("klaraptor-cc: warning: k.cu: a launch of unread"))
        .unwrap_or_else(|| panic!("no warning for unread:\n{err}"));
    assert!(
        warning.contains("keeps the program's own launch dims")
            && warning.contains("add shmem(")
            && warning.contains("to the annotation at k.cu:5:"),
        "{warning}"
    );
    // The data-only launch of unread is instrumented as it is; the unreadable one is not.
    assert!(
        err.contains("instrumented a launch of _Z6unreadPfi in _Z2goPfii"),
        "{err}"
    );
    let syms = symbols(&d.path().join("k.o"));
    // The object carries the runtime (weak definitions), and its code calls both entry
    // points (relocations against them).
    assert!(syms.contains(" W klaraptor_launch_begin_shmem"), "{syms}");
    assert!(syms.contains(" W klaraptor_launch_begin\n"), "{syms}");
    let relocs = std::process::Command::new("readelf")
        .arg("-rW")
        .arg(d.path().join("k.o"))
        .output()
        .unwrap();
    let relocs = String::from_utf8_lossy(&relocs.stdout);
    for f in ["klaraptor_launch_begin_shmem", "klaraptor_launch_begin "] {
        assert!(relocs.contains(f), "no call of {f}:\n{relocs}");
    }

    let specs = klaraptor_spec::link::scan_bytes(
        &std::fs::read(d.path().join("k.o")).unwrap(),
        Path::new("k.o"),
    )
    .unwrap();
    let shmem_of = |name: &str| {
        specs
            .iter()
            .find(|s| s.name == name)
            .unwrap_or_else(|| panic!("no spec of {name}"))
            .shmem
            .clone()
    };
    assert_eq!(shmem_of("detected").as_deref(), Some("(bx * 4)"));
    assert_eq!(shmem_of("clause").as_deref(), Some("((bx + 1) * 8)"));
    assert_eq!(shmem_of("unread"), None);

    // The descriptors compute the amounts.
    let kept = kept_dir(&err);
    let tu = Path::new(kept).join("tu0");
    let harness = r#"#include <stdio.h>
#include <string.h>
#include <stdint.h>
#include "klaraptor.h"
static const klaraptor_kernel *K[8];
static int n;
void klaraptor_register(const klaraptor_kernel *k) { K[n++] = k; }
int main(void) {
  int64_t data[1] = { 1000 };
  uint32_t b[3] = { 96, 1, 1 };
  for (int i = 0; i < n; i++)
    printf("%s %d %lld\n", K[i]->name, K[i]->abi_version,
           K[i]->shmem ? (long long)K[i]->shmem(data, b) : -2LL);
  return 0;
}
"#;
    let exe = build_harness(&tu, harness);
    let out = Command::new(&exe).output().unwrap();
    let mut lines: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    lines.sort();
    assert_eq!(lines, ["clause 2 776", "detected 2 384", "unread 2 -2"]);
    let _ = std::fs::remove_dir_all(kept);
}

/// Compiles `harness` (C) with the descriptors klaraptor-cc generated in `tu` (kernels.c and
/// its include directory), strictly; returns the executable.
fn build_harness(tu: &Path, harness: &str) -> std::path::PathBuf {
    std::fs::write(tu.join("harness.c"), harness).unwrap();
    let exe = tu.join("harness");
    let cc = Command::new("cc")
        .args(["-std=c99", "-Wall", "-Wextra", "-Werror", "-I"])
        .arg(tu.join("include"))
        .arg(tu.join("kernels.c"))
        .arg(tu.join("harness.c"))
        .arg("-o")
        .arg(&exe)
        .output()
        .unwrap();
    assert!(
        cc.status.success(),
        "{}",
        String::from_utf8_lossy(&cc.stderr)
    );
    exe
}

/// A kernel template with two instances under one annotation: each instance's descriptor
/// gives the runtime a name of its own (`scale<3>`, `scale<16>`; spec/src/names.rs), so
/// that their `klaraptor: <name> …` log lines, choices-cache files and KLARAPTOR_FORCE
/// entries are told apart; a plain kernel keeps its source name. The names are one word
/// (no blank) and the ids stay the mangled names.
#[test]
fn template_instances_get_a_runtime_name_each() {
    let src = r#"#pragma klaraptor kernel(scale) data(n)
template <int R> __global__ void scale(float *x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= (float)R;
}
#pragma klaraptor kernel(plain) data(n)
__global__ void plain(float *x, int n) { x[n] = 0; }
void go(float *x, int n) {
  scale<3><<<(n + 255) / 256, 256>>>(x, n);
  scale<16><<<(n + 127) / 128, 128>>>(x, n);
  plain<<<1, 1>>>(x, n);
}
"#;
    let d = project(&[("t.cu", src)]);
    let o = run(
        d.path(),
        &klaraptor_cc(),
        &["-c", "t.cu", "-o", "t.o", "--kl-keep", "--kl-verbose"],
    );
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    let kept = kept_dir(&err);
    let tu = Path::new(kept).join("tu0");
    let harness = r#"#include <stdio.h>
#include <stdint.h>
#include "klaraptor.h"
void klaraptor_register(const klaraptor_kernel *k) { printf("%s %s\n", k->id, k->name); }
int main(void) { return 0; }
"#;
    let exe = build_harness(&tu, harness);
    let out = Command::new(&exe).output().unwrap();
    let mut lines: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    lines.sort();
    assert_eq!(
        lines,
        [
            "_Z5plainPfi plain",
            "_Z5scaleILi16EEvPfi scale<16>",
            "_Z5scaleILi3EEvPfi scale<3>",
        ]
    );
    // The link specs keep the source name (the profile database and the rational programs
    // are keyed by the mangled one), and the name the tools show follows from them.
    let specs = klaraptor_spec::link::scan_bytes(
        &std::fs::read(d.path().join("t.o")).unwrap(),
        Path::new("t.o"),
    )
    .unwrap();
    let mut names: Vec<String> = specs
        .iter()
        .map(|s| klaraptor_spec::names::instance_name(&s.name, &s.mangled))
        .collect();
    names.sort();
    assert_eq!(names, ["plain", "scale<16>", "scale<3>"]);

    // With the runtime (and the fake CUDA runtime of tests/runtime_shim.rs): the log names
    // each instance, KLARAPTOR_FORCE takes an instance's name, and `klaraptor validate`'s
    // parser gives each line to its instance.
    let shim = Path::new(env!("CARGO_MANIFEST_DIR")).join("runtime-shim");
    std::fs::write(
        tu.join("launch.c"),
        r#"#include <stdint.h>
#include "klaraptor.h"
int main(void) {
  const char *ids[2] = { "_Z5scaleILi3EEvPfi", "_Z5scaleILi16EEvPfi" };
  int64_t n = 1000;
  for (int i = 0; i < 2; i++) {
    uint64_t gxy = 4 | (UINT64_C(1) << 32), bxy = 256 | (UINT64_C(1) << 32); /* x | y << 32 */
    uint32_t gz = 1, bz = 1;
    klaraptor_select(ids[i], 1, &n, &gxy, &gz, &bxy, &bz);
  }
  return 0;
}
"#,
    )
    .unwrap();
    let exe = tu.join("launch");
    let cc = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-I"])
        .arg(tu.join("include"))
        .arg("-I")
        .arg(shim.join("src"))
        .arg("-I")
        .arg(env!("KLARAPTOR_RT_CUDA_INCLUDE"))
        .arg(tu.join("kernels.c"))
        .arg(tu.join("launch.c"))
        .arg(shim.join("src/klaraptor_rt.c"))
        .arg(shim.join("tests/fake_cudart.c"))
        .arg("-lpthread")
        .arg("-o")
        .arg(&exe)
        .output()
        .unwrap();
    assert!(
        cc.status.success(),
        "{}",
        String::from_utf8_lossy(&cc.stderr)
    );
    let mut cmd = Command::new(&exe);
    for v in [
        "KLARAPTOR_DISABLE",
        "KLARAPTOR_REFINE",
        "KLARAPTOR_REFINE_WALK",
        "KLARAPTOR_REFINE_SPAN",
        "KLARAPTOR_REFINE_BUDGET",
    ] {
        cmd.env_remove(v);
    }
    let o = cmd
        .env("KLARAPTOR_LOG", "1")
        .env("KLARAPTOR_CHOICES", "off")
        .env("KLARAPTOR_FORCE", "scale<16>:64")
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{log}");
    let decisions: Vec<klaraptor_program::validate::Decision> = log
        .lines()
        .filter_map(klaraptor_program::validate::parse_decision)
        .map(|d| d.unwrap())
        .collect();
    assert_eq!(decisions.len(), 2, "{log}");
    let all = specs
        .iter()
        .map(|s| (s.name.as_str(), s.mangled.as_str()))
        .collect::<Vec<_>>();
    for (mangled, name, block, source) in [
        ("_Z5scaleILi3EEvPfi", "scale<3>", 256, "program"),
        ("_Z5scaleILi16EEvPfi", "scale<16>", 64, "forced"),
    ] {
        let k = klaraptor_program::validate::KernelName::new("scale", mangled, all.iter().copied());
        let mine: Vec<_> = decisions.iter().filter(|d| k.matches(&d.kernel)).collect();
        assert_eq!(mine.len(), 1, "{name}: {log}");
        assert_eq!(mine[0].kernel, name, "{log}");
        assert_eq!(mine[0].block, [block, 1, 1], "{log}");
        assert!(mine[0].source.starts_with(source), "{log}");
        assert!(
            log.contains(&format!("klaraptor: {name} n=1000 block={block}x1x1 ")),
            "{log}"
        );
    }
    let _ = std::fs::remove_dir_all(kept);
}

/// Launches whose arguments hold a conditional (`c ? a : b`, a `MIN()` macro, `&&`), a call
/// (in a function with cleanups, where the call is an `invoke`) are instrumented, also when
/// the conditional computes a data argument; linked with a fake CUDA runtime, the data the
/// runtime is given equal the arguments the kernel is launched with, for every path.
#[test]
fn launches_with_conditionals_and_calls_in_their_arguments() {
    let src = r#"#include <vector>
#define MIN(a, b) ((a) < (b) ? (a) : (b))
int g(int x);
#pragma klaraptor kernel(k) data(n)
__global__ void k(int m, float *a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) a[i] = m;
}
void run_cond(int s, int t, float *a, int n) { k<<<(n + 255) / 256, 256>>>(s < t ? s : t, a, n); }
void run_macro(int s, int t, float *a, int n) { k<<<(n + 255) / 256, 256>>>(MIN(s, t), a, n); }
void run_call(int s, float *a, int n) { std::vector<int> v(3); k<<<(n + 255) / 256, 256>>>(g(s), a, n); }
void run_data(int s, float *a, int n, int m) { k<<<(n + 255) / 256, 256>>>(s, a, MIN(n, m)); }
void run_and(int s, float *a, int n, int m) {
  k<<<(n + 255) / 256, 256>>>(s, a, (n > 0 && m > 0) ? n * 2 : m / 4 + (s ? 1 : 2));
}
"#;
    let d = project(&[("k.cu", src)]);
    let o = run(
        d.path(),
        &klaraptor_cc(),
        &["-c", "k.cu", "-o", "k.o", "--kl-keep", "--kl-verbose"],
    );
    let err = ok(&o);
    for f in [
        "_Z8run_condiiPfi",
        "_Z9run_macroiiPfi",
        "_Z8run_calliPfi",
        "_Z8run_dataiPfii",
        "_Z7run_andiPfii",
    ] {
        assert!(
            err.contains(&format!("instrumented a launch of _Z1kiPfi in {f}")),
            "{f}: {err}"
        );
    }
    assert!(!err.contains("has no <<<>>> launch"), "{err}");
    assert!(!err.contains("is not instrumented"), "{err}");
    let kept = kept_dir(&err).to_string();
    let host = Path::new(&kept).join("tu0/host.o");
    // A fake CUDA runtime and klaraptor runtime: what the launch gives each.
    let harness = r#"#include <cstdio>
static long long seen_data = -1, seen_m = -1, seen_n = -1;
extern "C" {
unsigned __cudaPushCallConfiguration(uint64_t, uint32_t, uint64_t, uint32_t, size_t, void *) { return 0; }
unsigned __cudaLaunchKernel(const void *, uint64_t, uint32_t, uint64_t, uint32_t, void **args, size_t, void *) {
  seen_m = *(int *)args[0]; seen_n = *(int *)args[2]; return 0;
}
void klaraptor_select(const char *, int32_t, const int64_t *data, uint64_t *, uint32_t *, uint64_t *, uint32_t *) { seen_data = data[0]; }
uint64_t klaraptor_launch_begin(const char *, int32_t, const int64_t *data, uint64_t *, uint32_t *, uint64_t *, uint32_t *, int64_t, void *) { seen_data = data[0]; return 7; }
}
int g(int x) { return x + 1; }
void run_cond(int s, int t, float *a, int n);
void run_macro(int s, int t, float *a, int n);
void run_call(int s, float *a, int n);
void run_data(int s, float *a, int n, int m);
void run_and(int s, float *a, int n, int m);
int main() {
  int bad = 0;
  auto check = [&](const char *what, long long data, long long m, long long n) {
    if (seen_data != data || seen_m != m || seen_n != n) {
      printf("%s: data %lld m %lld n %lld, wanted %lld %lld %lld\n", what, seen_data, seen_m, seen_n, data, m, n);
      bad = 1;
    }
    seen_data = seen_m = seen_n = -1;
  };
  run_cond(5, 3, nullptr, 1000); check("cond", 1000, 3, 1000);
  run_cond(2, 3, nullptr, 1000); check("cond", 1000, 2, 1000);
  run_macro(9, 4, nullptr, 77); check("macro", 77, 4, 77);
  run_call(4, nullptr, 500); check("call", 500, 5, 500);
  run_data(1, nullptr, 300, 200); check("data", 200, 1, 200);
  run_data(1, nullptr, 100, 200); check("data", 100, 1, 100);
  run_and(0, nullptr, 5, 8); check("and", 10, 0, 10);
  run_and(0, nullptr, 5, -8); check("and", -8 / 4 + 2, 0, -8 / 4 + 2);
  run_and(1, nullptr, -5, 40); check("and", 11, 1, 11);
  return bad;
}
"#;
    run_fake_runtime_harness(d.path(), harness, &host);
    let _ = std::fs::remove_dir_all(kept);
}

/// The code hash that keys a kernel's profiles is the same for every compile of the same
/// code: nvcc's names derived from the source's absolute path (`_INTERNAL_<hash>_…` of a
/// `static __device__` variable or an anonymous namespace's device function) and, with
/// `-G`, its temporary files' names (`tmpxft_<pid>_…`) do not enter it: compiles in two
/// directories get one hash, and so do two compiles with `-G`.
#[test]
fn the_code_hash_is_the_same_for_every_compile() {
    let src = r#"static __device__ int counter;
namespace { __device__ float twice(float x) { return 2 * x; } }
#pragma klaraptor kernel(k) data(n)
__global__ void k(float *a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) { a[i] = twice(a[i]); atomicAdd(&counter, 1); }
}
void go(float *a, int n) { k<<<(n + 255) / 256, 256>>>(a, n); }
"#;
    let hash = |dir: &Path, extra: &[&str]| {
        let mut args = vec!["-c", "k.cu", "-o", "k.o"];
        args.extend(extra);
        ok(&run(dir, &klaraptor_cc(), &args));
        let specs = klaraptor_spec::link::scan_bytes(
            &std::fs::read(dir.join("k.o")).unwrap(),
            Path::new("k.o"),
        )
        .unwrap();
        assert_eq!(specs.len(), 1);
        specs[0].code_hash.clone()
    };
    let a = project(&[("k.cu", src)]);
    let b = project(&[("sub/dir/k.cu", src)]);
    let b = b.path().join("sub/dir");
    let plain = hash(a.path(), &[]);
    assert_eq!(plain, hash(&b, &[]), "another directory");
    // -G's line tables name the source's directory, so only the same directory compares.
    let debug = hash(a.path(), &["-G"]);
    assert_eq!(debug, hash(a.path(), &["-G"]), "-G, compiled twice");
}

/// Two translation units annotating one kernel (an instance of a template in a header)
/// differently, linked by the host compiler rather than klaraptor-cc's link (which refuses
/// them): the runtime sees both descriptors, warns once naming the kernel, and keeps the
/// program's own launch for it (no decision is made). Annotated alike, nothing is said and
/// the kernel is decided for.
#[test]
fn conflicting_annotations_in_two_objects_keep_the_programs_launch() {
    let header = "template <int R> __global__ void scale(float *x, int n) {\n\
                  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) x[i] *= R;\n}\n";
    let unit = |f: &str, extra: &str| {
        format!(
            "#include \"k.h\"\n#pragma klaraptor kernel(scale) data(n){extra}\n\
             void go_{f}(float *x, int n) {{ scale<2><<<(n + 255) / 256, 256>>>(x, n); }}\n"
        )
    };
    let main = "#include <stdint.h>\n#include <stdio.h>\n\
        extern \"C\" void klaraptor_select(const char *, int32_t, const int64_t *, uint64_t *, \
        uint32_t *, uint64_t *, uint32_t *);\n\
        int main() { int64_t n = 1000; uint64_t gxy = 4 | (1ull << 32), bxy = 256 | (1ull << 32);\n\
        uint32_t gz = 1, bz = 1;\n\
        klaraptor_select(\"_Z5scaleILi2EEvPfi\", 1, &n, &gxy, &gz, &bxy, &bz);\n\
        printf(\"block=%u\\n\", (unsigned)bxy); return 0; }\n";
    let (a, b, c) = (unit("a", ""), unit("b", " block(bx >= 128)"), unit("c", ""));
    let d = project(&[
        ("k.h", header),
        ("a.cu", &a),
        ("b.cu", &b),
        ("c.cu", &c),
        ("main.cpp", main),
    ]);
    for f in ["a", "b", "c"] {
        ok(&run(
            d.path(),
            &klaraptor_cc(),
            &["-c", &format!("{f}.cu"), "-o", &format!("{f}.o")],
        ));
    }
    let lib = nvcc().parent().unwrap().parent().unwrap().join("lib64");
    let link_and_run = |objs: [&str; 2]| {
        let exe = d.path().join(format!("app_{}", objs[1]));
        let o = Command::new("c++")
            .current_dir(d.path())
            .arg("main.cpp")
            .args(objs)
            .arg("-L")
            .arg(&lib)
            .args(["-lcudart_static", "-lpthread", "-ldl", "-lrt", "-o"])
            .arg(&exe)
            .output()
            .unwrap();
        ok(&o);
        let o = Command::new(&exe)
            .env("KLARAPTOR_LOG", "1")
            .env_remove("KLARAPTOR_FORCE")
            .env_remove("KLARAPTOR_DISABLE")
            .env("KLARAPTOR_CHOICES", "off")
            .output()
            .unwrap();
        (stderr(&o), String::from_utf8_lossy(&o.stdout).into_owned())
    };
    let (err, out) = link_and_run(["a.o", "b.o"]);
    let warning = "klaraptor: warning: kernel scale<2> is annotated differently in two objects \
                   of this program (their block constraints differ";
    assert_eq!(err.matches(warning).count(), 1, "{err}");
    assert!(err.contains("it keeps the program's own launch"), "{err}");
    assert_eq!(out, "block=256\n", "{err}");
    // No decision is made for it (without a GPU, one alike is decided: the log says so).
    assert!(!err.contains("klaraptor: scale<2> n=1000"), "{err}");
    let (err, out) = link_and_run(["a.o", "c.o"]);
    assert!(!err.contains("annotated differently"), "{err}");
    assert!(err.contains("klaraptor: scale<2> n=1000 block="), "{err}");
    assert_eq!(out, "block=256\n", "{err}");
}

/// The diagnostics of launches left alone say which launch, which instance and why: a
/// launch through a function pointer says so; a template instance's launch whose shared
/// memory cannot be read is named with its template arguments, once, with no second "has no
/// <<<>>> launch" warning after it; an instance with no launch at all is named.
#[test]
fn diagnostics_name_the_instance_and_the_reason() {
    let src = r#"#pragma klaraptor kernel(red) data(n)
template <int B> __global__ void red(float *a, int n) { extern __shared__ float s[]; s[0] = a[0]; a[n] = s[0]; }
int pick(int b);
void go(float *a, int n, int b) { red<1><<<(n + 255) / 256, b, pick(b)>>>(a, n); }
template __global__ void red<3>(float *, int);
#pragma klaraptor kernel(k) data(n)
__global__ void k(float *a, int n) { if (n) a[0] = 1; }
void viaptr(float *a, int n) { void (*p)(float *, int) = k; p<<<(n + 255) / 256, 256>>>(a, n); }
"#;
    let d = project(&[("t.cu", src)]);
    let err = ok(&run(
        d.path(),
        &klaraptor_cc(),
        &["-c", "t.cu", "-o", "t.o"],
    ));
    assert!(
        err.contains(
            "warning: t.cu: a launch of red<1> in _Z2goPfii keeps the program's own launch dims"
        ),
        "{err}"
    );
    assert!(!err.contains("kernel red<1> (annotated"), "{err}");
    assert!(
        err.contains("warning: kernel red<3> (annotated at t.cu:1:19) has no <<<>>> launch"),
        "{err}"
    );
    assert!(
        err.contains(
            "kernel k (annotated at t.cu:6:19) has no <<<>>> launch in t.cu that klaraptor could \
             instrument; launches elsewhere keep their own dimensions; the launch in \
             _Z6viaptrPfi is not instrumented: it calls the kernel through a function pointer"
        ),
        "{err}"
    );
}

/// The host code of an instrumented source is optimised as the user asked: above -O0 its IR
/// is made at that level with the optimisation passes held back until after the launch
/// injection, so it keeps what only the front end adds (type-based alias information,
/// lifetimes) and the codegen optimises as nvcc's host compiler would. IR made at -O0 lost
/// them, and an instrumented gesummv's host loops ran 2.4 times slower than nvcc's build of
/// them on an H200 (bench/results/e2e-h200-2026-11-28.md).
#[test]
fn host_code_keeps_the_users_optimisation_level() {
    let src = r#"
#pragma klaraptor kernel(k) data(N=n) dim(1) grid(ceil(N, bx))
__global__ void k(float *a, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) a[i] = 0; }
void reference(double *out, const float *in, int n) { for (int i = 0; i < n; i++) out[i] = 2.0 * in[i]; }
void go(float *a, int n) { k<<<(n + 255) / 256, 256>>>(a, n); }
"#;
    let d = project(&[("k.cu", src)]);
    for (opt, tbaa) in [("-O3", true), ("-O0", false)] {
        let o = run(
            d.path(),
            &klaraptor_cc(),
            &["-c", "k.cu", opt, "-o", "k.o", "--kl-keep", "--kl-verbose"],
        );
        let err = stderr(&o);
        assert!(o.status.success(), "{err}");
        assert!(err.contains("instrumented a launch of _Z1kPfi"), "{err}");
        let ll = std::fs::read_to_string(Path::new(kept_dir(&err)).join("tu0/host.ll")).unwrap();
        assert_eq!(
            ll.contains("!tbaa"),
            tbaa,
            "{opt}: type-based alias information"
        );
        assert!(
            !ll.contains("optnone"),
            "{opt}: optnone would keep the codegen from optimising"
        );
    }
}

/// A kernel without a profile recipe is not told that a link will profile it (none can):
/// the compile says that `klaraptor profile <binary> <arguments>` profiles it at the sizes
/// that run reaches (or to add a recipe), and that the kernel keeps the program's own launch
/// until then; a kernel with one is told how it gets profiled.
#[test]
fn the_no_profile_hint_says_what_a_kernel_without_a_recipe_needs() {
    let src = r#"
#pragma klaraptor kernel(bare) data(N=n) dim(1) grid(ceil(N, bx))
__global__ void bare(float *a, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) a[i] = 0; }
#pragma klaraptor kernel(timed) data(N=n) dim(1) grid(ceil(N, bx)) profile(run="./app {N}", sizes=[1024, 4096])
__global__ void timed(float *a, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) a[i] = 1; }
void go(float *a, int n) { bare<<<(n + 255) / 256, 256>>>(a, n); timed<<<(n + 127) / 128, 128>>>(a, n); }
"#;
    let d = project(&[("k.cu", src)]);
    let o = pinned(d.path(), &klaraptor_cc())
        .env("KLARAPTOR_PROFILE_DB", d.path().join("db"))
        .args(["-c", "k.cu", "-o", "k.o", "--kl-verbose"])
        .output()
        .unwrap();
    let err = ok(&o);
    let line = |k: &str| {
        err.lines()
            .find(|l| l.contains(&format!("kernel {k} (annotated at")) && l.contains("no profile"))
            .unwrap_or_else(|| panic!("no hint for {k}:\n{err}"))
            .to_string()
    };
    let bare = line("bare");
    assert!(
        bare.contains("has no profile(run=…, sizes=…) recipe, so no link profiles it")
            && bare.contains("`klaraptor profile <binary> <arguments>`"),
        "{bare}"
    );
    assert!(bare.contains("keeps the program's own launch"), "{bare}");
    let timed = line("timed");
    assert!(
        timed.contains("`klaraptor profile <binary>` profiles it"),
        "{timed}"
    );
    assert!(!timed.contains("recipe"), "{timed}");
}

/// A debug compile (`-g`, as CMake's Debug configuration gives): nvcc's object then names
/// three of its temporary files (the host unit, the stub, the fatbin), each renamed to its
/// own stable name; it used to fail in objcopy ("target of more than one redefinition").
#[test]
fn a_debug_compile_is_instrumented() {
    let d = sample_project();
    ok(&run(
        d.path(),
        &klaraptor_cc(),
        &[
            "-g",
            "-O0",
            "-arch=sm_90",
            "-c",
            "saxpy.cu",
            "-o",
            "saxpy.o",
        ],
    ));
    let syms = symbols(&d.path().join("saxpy.o"));
    assert!(syms.contains(" W klaraptor_launch_begin"), "{syms}");
    let files = Command::new("readelf")
        .args(["-s", "saxpy.o"])
        .current_dir(d.path())
        .output()
        .unwrap();
    let files = String::from_utf8_lossy(&files.stdout);
    assert!(files.contains(" saxpy.cu"), "{files}");
    assert!(!files.contains("tmpxft_"), "{files}");
}
