//! Records which commit the driver was built from, for `klaraptor-cc --version`, and builds
//! the C runtime shim (runtime-shim/) twice: into `$OUT_DIR/libklaraptor_rt.a` (for tests
//! and programs that link the runtime themselves), and into the object every instrumented
//! object carries, `$OUT_DIR/klaraptor_rt_embedded.o` (runtime-shim/src/klaraptor_embed.c
//! says how it is made and why), which the driver embeds.

use std::path::PathBuf;
use std::process::Command;

const SHIM_SOURCES: &[&str] = &[
    "runtime-shim/src/klaraptor_rt.c",
    "runtime-shim/src/klaraptor_prof.c",
];
const SHIM_HEADERS: &[&str] = &[
    "runtime-shim/include/klaraptor.h",
    "runtime-shim/src/klaraptor_internal.h",
    "runtime-shim/src/klaraptor_choices.inc",
    "runtime-shim/src/klaraptor_refine.inc",
    "runtime-shim/include/klaraptor_collect.h",
];

/// The third source of the embedded runtime.
const EMBED_SOURCE: &str = "runtime-shim/src/klaraptor_embed.c";

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
    // The cc crate adds CFLAGS to the runtime's compile (a measurement's -DKLARAPTOR_PROBE,
    // say); with cargo_metadata(false) below it does not say so to cargo itself.
    println!("cargo:rerun-if-env-changed=CFLAGS");
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
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").unwrap());
    let out = out_dir.join("libklaraptor_rt.a");
    assert!(out.is_file(), "cc did not produce {}", out.display());
    build_embedded(&include, &out_dir);
}

/// A binutils tool: `$KLARAPTOR_<NAME>` (as the driver reads `KLARAPTOR_LD`), else `name`.
fn tool(name: &str) -> PathBuf {
    let var = format!("KLARAPTOR_{}", name.to_ascii_uppercase());
    println!("cargo:rerun-if-env-changed={var}");
    std::env::var_os(&var)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(name))
}

fn run(cmd: &mut Command) -> Vec<u8> {
    let out = cmd.output().unwrap_or_else(|e| {
        panic!("\n\nklaraptor: cannot run {cmd:?}: {e} (binutils: ld, nm, objcopy)\n\n")
    });
    assert!(
        out.status.success(),
        "\n\nklaraptor: {cmd:?} failed:\n{}{}\n",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// The runtime every instrumented object carries: the shim and the profiling runtime with
/// hidden visibility, partially linked into one object whose defined global symbols are all
/// weak, the profiling runtime's launch entry point renamed (klaraptor_embed.c).
fn build_embedded(include: &std::path::Path, out_dir: &std::path::Path) {
    println!("cargo:rerun-if-changed={EMBED_SOURCE}");
    let objects_dir = out_dir.join("embedded");
    std::fs::create_dir_all(&objects_dir).unwrap();
    let objects = cc::Build::new()
        .out_dir(&objects_dir)
        .files(SHIM_SOURCES)
        .file(EMBED_SOURCE)
        .include("runtime-shim/include")
        .include(include)
        .std("c11")
        .opt_level(2)
        .pic(true)
        .flag("-fvisibility=hidden")
        // Deterministic objects: no path of this build in them.
        .flag_if_supported("-ffile-prefix-map=runtime-shim/=")
        .warnings(true)
        .extra_warnings(true)
        .cargo_metadata(false)
        .compile_intermediates();
    let joined = out_dir.join("klaraptor_rt_embedded.joined.o");
    run(Command::new(tool("ld"))
        .arg("-r")
        .args(&objects)
        .arg("-o")
        .arg(&joined));
    // Every defined global symbol becomes weak (`objcopy --weaken` would weaken the
    // undefined ones too, which the linker then leaves at 0 instead of pulling them from
    // the CUDA runtime).
    let nm = run(Command::new(tool("nm"))
        .args(["-P", "--defined-only", "--extern-only"])
        .arg(&joined));
    let mut weaken = Vec::new();
    for line in String::from_utf8_lossy(&nm).lines() {
        if let Some(name) = line.split_whitespace().next() {
            weaken.push(format!("--weaken-symbol={name}"));
        }
    }
    assert!(
        weaken.iter().any(|w| w.ends_with("=klaraptor_select")),
        "nm found no klaraptor_select in {}",
        joined.display()
    );
    let out = out_dir.join("klaraptor_rt_embedded.o");
    run(Command::new(tool("objcopy"))
        .args(&weaken)
        .arg("--weaken-symbol=__wrap___cudaLaunchKernel")
        .arg("--weaken-symbol=klaraptor__launch_kernel")
        // Small and the same in every build: no debug information of this build's paths.
        .arg("--strip-debug")
        .arg("--redefine-sym=__wrap___cudaLaunchKernel=klaraptor__launch_kernel")
        .arg("--redefine-sym=__real___cudaLaunchKernel=__cudaLaunchKernel")
        .arg(&joined)
        .arg(&out));
}
