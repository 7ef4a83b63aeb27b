//! A translation unit without annotations is compiled by exactly the nvcc command the user
//! gave: the same outputs, the same diagnostics, the same exit status. Each case builds the
//! same sources twice, once with nvcc and once with klaraptor-cc, and compares.

mod common;
use common::*;
use std::path::Path;

const KERNEL: &str = r#"#include <cstdio>
#include "util.h"
__global__ void scale(float *x, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= a;
}
void launch_scale(float *x, float a, int n) { scale<<<(n + 127) / 128, 128>>>(x, a, n); }
"#;
const UTIL_H: &str =
    "#pragma once\nvoid launch_scale(float *x, float a, int n);\nextern __device__ int counter;\n";
const MAIN: &str = r#"#include <cstdio>
#include "util.h"
int main() { float *d; cudaMalloc(&d, 64 * sizeof(float)); launch_scale(d, 2.0f, 64); std::printf("done\n"); return 0; }
"#;
const RDC_DEV: &str = "#include \"util.h\"\n__device__ int counter = 0;\n";
const BROKEN: &str = "__global__ void k(int *x) { x[threadIdx.x] = 1 }\nint main() { return 0; }\n";

/// Runs the same sequence of commands with nvcc and with klaraptor-cc in two directories
/// holding the same files; asserts equal exit codes, diagnostics and outputs.
fn compare(files_in: &[(&str, &str)], steps: &[&[&str]]) {
    compare_with(files_in, steps, normalized)
}

/// Relocatable device code embeds a random module id per compilation (two plain nvcc runs
/// differ in thousands of bytes), so those builds are compared by their symbol tables with
/// the ids masked.
fn symbols(path: &Path) -> Vec<u8> {
    let o = std::process::Command::new("nm")
        .arg("--format=just-symbols")
        .arg(path)
        .output()
        .unwrap();
    let re = regex::bytes::Regex::new(r"[0-9a-f]{8}_[0-9]+_").unwrap();
    let masked = re.replace_all(&o.stdout, &b"ID_"[..]).into_owned();
    let mut lines: Vec<&[u8]> = masked.split(|&b| b == b'\n').collect();
    lines.sort();
    lines.join(&b'\n')
}

fn compare_with(files_in: &[(&str, &str)], steps: &[&[&str]], view: fn(&Path) -> Vec<u8>) {
    let a = project(files_in);
    let b = project(files_in);
    for step in steps {
        let plain = run(a.path(), &nvcc(), step);
        let ours = run(b.path(), &klaraptor_cc(), step);
        let fix = |s: String, d: &Path| s.replace(&d.display().to_string(), "<dir>");
        assert_eq!(
            ours.status.code(),
            plain.status.code(),
            "exit status of {step:?}"
        );
        assert_eq!(
            fix(stderr(&ours), b.path()),
            fix(stderr(&plain), a.path()),
            "diagnostics of {step:?}"
        );
        assert_eq!(ours.stdout, plain.stdout, "standard output of {step:?}");
    }
    assert_eq!(files(b.path()), files(a.path()), "the files produced");
    for f in files(a.path()) {
        if f.ends_with(".cu") || f.ends_with(".h") {
            continue;
        }
        assert!(
            view(&a.path().join(&f)) == view(&b.path().join(&f)),
            "{f} differs"
        );
    }
}

#[test]
fn single_translation_unit_compile_and_link() {
    let src = [("k.cu", KERNEL), ("util.h", UTIL_H), ("main.cu", MAIN)];
    compare(&src, &[&["-O2", "k.cu", "main.cu", "-o", "app"]]);
}

#[test]
fn separate_compilation_then_link() {
    let src = [("k.cu", KERNEL), ("util.h", UTIL_H), ("main.cu", MAIN)];
    compare(
        &src,
        &[
            &[
                "-c",
                "k.cu",
                "-o",
                "k.o",
                "-gencode",
                "arch=compute_90,code=sm_90",
            ],
            &[
                "-c",
                "main.cu",
                "-gencode=arch=compute_90,code=sm_90",
                "-MD",
            ],
            &[
                "k.o",
                "main.o",
                "-o",
                "app",
                "-gencode",
                "arch=compute_90,code=sm_90",
            ],
        ],
    );
}

#[test]
fn relocatable_device_code() {
    let src = [
        ("k.cu", KERNEL),
        ("util.h", UTIL_H),
        ("main.cu", MAIN),
        ("dev.cu", RDC_DEV),
    ];
    compare_with(
        &src,
        &[
            &["-rdc=true", "-c", "k.cu", "dev.cu", "-arch=sm_90"],
            &["-dc", "main.cu", "-arch", "sm_90"],
            &[
                "-rdc=true",
                "-arch=sm_90",
                "k.o",
                "dev.o",
                "main.o",
                "-o",
                "app",
            ],
        ],
        symbols,
    );
}

#[test]
fn a_syntax_error_gives_nvccs_own_diagnostic_and_status() {
    compare(&[("bad.cu", BROKEN)], &[&["-c", "bad.cu", "-o", "bad.o"]]);
}

#[test]
fn options_files_and_launcher_form() {
    let src = [
        ("k.cu", KERNEL),
        ("util.h", UTIL_H),
        ("opts.rsp", "-c -O3 -DUSE_X=1"),
    ];
    let a = project(&src);
    let b = project(&src);
    let nv = nvcc().display().to_string();
    let plain = run(a.path(), &nvcc(), &["--options-file", "opts.rsp", "k.cu"]);
    // The launcher form: klaraptor-cc /path/to/nvcc <args>, as CMake's launcher runs it.
    let ours = run(
        b.path(),
        &klaraptor_cc(),
        &[&nv, "--options-file", "opts.rsp", "k.cu"],
    );
    assert_eq!(ours.status.code(), plain.status.code());
    assert_eq!(stderr(&ours), stderr(&plain));
    assert_eq!(
        normalized(&a.path().join("k.o")),
        normalized(&b.path().join("k.o"))
    );
}

#[test]
fn dryrun_and_version() {
    let d = project(&[("k.cu", KERNEL), ("util.h", UTIL_H)]);
    let v = run(d.path(), &klaraptor_cc(), &["--version"]);
    let out = String::from_utf8_lossy(&v.stdout);
    assert!(v.status.success());
    assert!(out.starts_with("klaraptor-cc "), "{out}");
    assert!(
        out.contains(&format!(
            "wrapping nvcc at {} (from KLARAPTOR_NVCC)",
            nvcc().display()
        )),
        "{out}"
    );
    assert!(
        out.contains("Cuda compilation tools, release 13.0"),
        "{out}"
    );
    let plain = run(d.path(), &nvcc(), &["--dryrun", "-c", "k.cu"]);
    let ours = run(d.path(), &klaraptor_cc(), &["--dryrun", "-c", "k.cu"]);
    let strip = |s: String| {
        regex::Regex::new(r"tmpxft_[0-9a-f]+")
            .unwrap()
            .replace_all(&s, "T")
            .into_owned()
    };
    assert_eq!(strip(stderr(&ours)), strip(stderr(&plain)));
    assert!(!d.path().join("k.o").exists(), "--dryrun writes nothing");
}

#[test]
fn environment_flags_are_applied_once() {
    let src = [("k.cu", KERNEL), ("util.h", UTIL_H)];
    let d = project(&src);
    let o = std::process::Command::new(klaraptor_cc())
        .args(["k.cu"])
        .current_dir(d.path())
        .env("KLARAPTOR_NVCC", nvcc())
        .env("NVCC_PREPEND_FLAGS", "-c")
        .env("NVCC_APPEND_FLAGS", "-o from_env.o")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(d.path().join("from_env.o").is_file());
}
