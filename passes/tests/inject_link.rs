//! End to end: the rewritten host IR compiles with clang++-19 to an object that nvcc links
//! into a real executable. Needs the CUDA toolkit (`$KLARAPTOR_CUDA_PATH`, else
//! `.toolchain/cuda`, made by `scripts/setup`) and `clang++-19` on the PATH. The binaries
//! are not run (no GPU here).
//!
//! `klaraptor_select` comes from `fixtures/inject/runtime_stub.c`, a stand-in that leaves
//! the launch configuration unchanged; the real runtime is in runtime-shim/ and comes with
//! the next piece.

mod inject_common;

use std::path::{Path, PathBuf};
use std::process::Command;

use inject_common::*;
use klaraptor_passes::inject::{InjectOptions, InjectTarget};

fn nvcc() -> PathBuf {
    let cuda = match std::env::var_os("KLARAPTOR_CUDA_PATH") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => repo_root().join(".toolchain/cuda"),
    };
    let nvcc = cuda.join("bin/nvcc");
    assert!(
        nvcc.is_file(),
        "no nvcc at {} (run scripts/setup or set KLARAPTOR_CUDA_PATH)",
        nvcc.display()
    );
    nvcc
}

fn ok(cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Instruments `fixture`, compiles it, links it with nvcc; returns the executable.
fn build(test: &str, fixture_name: &str, targets: &[InjectTarget], opt: &str) -> PathBuf {
    build_with(test, fixture_name, targets, opt, InjectOptions::default())
}

fn build_with(
    test: &str,
    fixture_name: &str,
    targets: &[InjectTarget],
    opt: &str,
    options: InjectOptions,
) -> PathBuf {
    let (report, ll) = run_with(test, fixture_name, targets, options).unwrap();
    assert!(!report.instrumented.is_empty());
    let dir = ll.parent().unwrap().to_path_buf();
    let obj = dir.join("host.o");
    ok(Command::new("clang++-19")
        .arg(opt)
        .args(["-c", "-x", "ir"])
        .arg(&ll)
        .arg("-o")
        .arg(&obj));
    let undefined = ok(Command::new("nm").arg("-u").arg(&obj));
    assert!(
        undefined.lines().any(|l| {
            // `_shmem` where the launch's dynamic shared memory follows its block
            let l = l.trim_end();
            l.ends_with(" klaraptor_launch_begin") || l.ends_with(" klaraptor_launch_begin_shmem")
        }) && undefined
            .lines()
            .any(|l| l.trim_end().ends_with(" klaraptor_launch_end")),
        "the object calls klaraptor_launch_begin and _end:\n{undefined}"
    );
    let exe = dir.join("app");
    ok(Command::new(nvcc())
        .args(["-ccbin", "clang++-19"])
        .arg(&obj)
        .arg(fixture("runtime_stub.c"))
        .arg("-o")
        .arg(&exe));
    let defined = ok(Command::new("nm").arg(&exe));
    assert!(
        defined
            .lines()
            .any(|l| l.ends_with(" T klaraptor_launch_begin")),
        "klaraptor_launch_begin linked in"
    );
    exe
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[test]
fn rewritten_o0_ir_links_into_an_executable() {
    let targets = [
        target("_Z5relaxPfi", &[1]),
        target("_ZN3lin6detail5scaleEPffm", &[2]),
        target("plain_c", &[1]),
    ];
    let exe = build("link_multi_o0", "multi.O0.ll", &targets, "-O0");
    assert!(is_executable(&exe));
}

#[test]
fn rewritten_o2_ir_links_into_an_executable() {
    let targets = [
        target("_Z5scalePfii", &[1, 2]),
        target("_Z6narrowPftsm", &[1, 2, 3]),
    ];
    let exe = build("link_loops_o2", "loops.O2.ll", &targets, "-O2");
    assert!(is_executable(&exe));
}

#[test]
fn rewritten_templates_and_debug_ir_link() {
    let exe = build(
        "link_templates_o2",
        "templates.O2.ll",
        &[target("_Z4axpyIfEvT_PKS0_PS0_i", &[3])],
        "-O2",
    );
    assert!(is_executable(&exe));
    let exe = build(
        "link_streams_o0g",
        "streams.O0g.ll",
        &[target("_Z7stencilPKfPfii", &[2, 3])],
        "-O0",
    );
    assert!(is_executable(&exe));
}

/// clang's own CUDA compile (the clang backend's IR), its stubs launching through
/// `__cudaLaunchKernel`: the handle lookup and both launch entry points resolve against the
/// static CUDA runtime.
#[test]
fn rewritten_clang_backend_ir_links() {
    let options = InjectOptions {
        clang_stubs_via_launch_entry: true,
    };
    for (opt, fixture_name) in [
        ("-O0", "templates.clang.O0.ll"),
        ("-O2", "multi.clang.O2.ll"),
    ] {
        let targets = if fixture_name.starts_with("templates") {
            vec![target("_Z4axpyIfEvT_PKS0_PS0_i", &[3])]
        } else {
            vec![target("_Z5relaxPfi", &[1]), target("plain_c", &[1])]
        };
        let exe = build_with(
            &format!("link_{}", fixture_name.replace('.', "_")),
            fixture_name,
            &targets,
            opt,
            options,
        );
        assert!(is_executable(&exe));
        let obj = exe.parent().unwrap().join("host.o");
        let undefined = ok(Command::new("nm").arg("-u").arg(&obj));
        for sym in ["__cudaGetKernel", "__cudaLaunchKernel", "cudaLaunchKernel"] {
            assert!(
                undefined
                    .lines()
                    .any(|l| l.trim_end().ends_with(&format!(" {sym}"))),
                "{fixture_name}: the object calls {sym}:\n{undefined}"
            );
        }
    }
}
