//! Records which commit the driver was built from, for `klaraptor-cc --version`, and builds
//! the C runtime shim (runtime-shim/) into `$OUT_DIR/libklaraptor_rt.a`, which the driver
//! embeds and links into instrumented programs.

use std::path::PathBuf;
use std::process::Command;

const SHIM_SOURCES: &[&str] = &[
    "runtime-shim/src/klaraptor_rt.c",
    "runtime-shim/src/klaraptor_prof.c",
];
const SHIM_HEADERS: &[&str] = &[
    "runtime-shim/include/klaraptor.h",
    "runtime-shim/src/klaraptor_internal.h",
    "runtime-shim/include/klaraptor_collect.h",
];

fn main() {
    record_commit();
    build_runtime_shim();
}

fn record_commit() {
    let commit = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=KLARAPTOR_COMMIT={commit}");
    println!("cargo:rerun-if-changed=.git/HEAD");
    println!("cargo:rerun-if-changed=.git/refs/heads");
}

/// The CUDA headers: `KLARAPTOR_CUDA_INCLUDE`, else `.toolchain/cuda/include`.
fn cuda_include() -> PathBuf {
    println!("cargo:rerun-if-env-changed=KLARAPTOR_CUDA_INCLUDE");
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap());
    let dir = match std::env::var_os("KLARAPTOR_CUDA_INCLUDE") {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => manifest.join(".toolchain/cuda/include"),
    };
    if !dir.join("cuda_runtime_api.h").is_file() {
        panic!(
            "\n\nklaraptor: the CUDA headers were not found: {} has no cuda_runtime_api.h.\n\
             Run scripts/setup to install the toolchain under .toolchain/, or set\n\
             KLARAPTOR_CUDA_INCLUDE to a CUDA include directory.\n\n",
            dir.display()
        );
    }
    dir
}

fn build_runtime_shim() {
    let include = cuda_include();
    for f in SHIM_SOURCES.iter().chain(SHIM_HEADERS) {
        println!("cargo:rerun-if-changed={f}");
    }
    // Warnings are errors in the integration test (tests/runtime_shim.rs), which compiles
    // the shim again, with a fake of the CUDA runtime, against the same headers. Not here:
    // another compiler version must not break the driver build.
    println!(
        "cargo:rustc-env=KLARAPTOR_RT_CUDA_INCLUDE={}",
        include.display()
    );
    let mut build = cc::Build::new();
    build
        .files(SHIM_SOURCES)
        .include("runtime-shim/include")
        .include(&include)
        .std("c11")
        .opt_level(2)
        .pic(true)
        .warnings(true)
        .extra_warnings(true)
        .cargo_metadata(false);
    build.compile("klaraptor_rt");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").unwrap()).join("libklaraptor_rt.a");
    assert!(out.is_file(), "cc did not produce {}", out.display());
}
