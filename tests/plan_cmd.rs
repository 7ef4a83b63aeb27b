//! `klaraptor plan`: the sampling plan of every kernel spec a binary carries, drawn from the
//! shapes each kernel's constraints allow (plan::kernel_plan). No nvcc, no GPU: the
//! "binary" is a file holding embedded specs as an instrumented object does.

mod common;
use common::*;

use std::path::{Path, PathBuf};
use std::process::Command;

use klaraptor_profiler::plan;
use klaraptor_spec::link::LinkSpec;

fn kernel(
    name: &str,
    mangled: &str,
    data: &[&str],
    dim: u8,
    block: &[&str],
    sizes: &[&[i64]],
) -> LinkSpec {
    LinkSpec {
        shmem: None,
        name: name.into(),
        mangled: mangled.into(),
        data: data.iter().map(|s| s.to_string()).collect(),
        dim,
        grid: Vec::new(),
        block: block.iter().map(|s| s.to_string()).collect(),
        profile_run: Some("./app".into()),
        profile_sizes: sizes.iter().map(|s| s.to_vec()).collect(),
        code_hash: "0000000000000000".into(),
        annotated_at: format!("{name}.cu:1:9"),
        build_dir: PathBuf::from("."),
    }
}

/// A file that carries `specs` between other bytes, as an object's spec section does.
fn binary(dir: &Path, specs: &[LinkSpec]) -> PathBuf {
    let mut bytes = b"\x7fELF not really an object\0".to_vec();
    for s in specs {
        bytes.extend_from_slice(s.embedded().unwrap().as_bytes());
        bytes.extend_from_slice(b"\0\0padding\0");
    }
    let p = dir.join("app.profile");
    std::fs::write(&p, bytes).unwrap();
    p
}

#[test]
fn klaraptor_plan_prints_the_shapes_each_kernel_allows() {
    let specs = [
        LinkSpec {
            grid: vec!["ceil(W, bx)".into(), "ceil(H, by)".into()],
            ..kernel(
                "transpose",
                "_Z9transposePfPKfii",
                &["W", "H"],
                2,
                &["bx == 32 && 32 % by == 0"],
                &[&[64, 64], &[128, 128]],
            )
        },
        kernel(
            "small",
            "_Z5smallPfi",
            &["N"],
            1,
            &["bx <= N"],
            &[&[64], &[200]],
        ),
        kernel("free", "_Z4freePfi", &["N"], 2, &[], &[&[64]]),
    ];
    let dir = tempfile::tempdir().unwrap();
    let bin = binary(dir.path(), &specs);
    let o = Command::new(klaraptor())
        .arg("plan")
        .arg(&bin)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8(o.stdout).unwrap();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 4, "{out}");
    assert!(lines[0].starts_with("# klaraptor sampling plan"), "{out}");
    // The constrained transpose: its six allowed shapes, and nothing else.
    assert_eq!(
        lines[1],
        "_Z9transposePfPKfii 32x1x1 32x2x1 32x4x1 32x8x1 32x16x1 32x32x1"
    );
    // bx <= N: the shapes allowed at N = 64 or at N = 200.
    assert_eq!(
        lines[2],
        "_Z5smallPfi 1x1x1 2x1x1 4x1x1 8x1x1 16x1x1 32x1x1 64x1x1 96x1x1 128x1x1 160x1x1 \
         192x1x1"
    );
    // An unconstrained kernel: the generic plan.
    let generic: Vec<String> = plan::plan_shapes(2)
        .iter()
        .map(|b| format!("{}x{}x{}", b[0], b[1], b[2]))
        .collect();
    assert_eq!(lines[3], format!("_Z4freePfi {}", generic.join(" ")));
    // The same text the profiling variant's plan file gets.
    assert_eq!(out, plan::plan_file(&specs));
}

/// A binary that cannot be read: the error names it.
#[test]
fn klaraptor_plan_of_a_missing_binary_names_it() {
    let dir = tempfile::tempdir().unwrap();
    let o = Command::new(klaraptor())
        .current_dir(dir.path())
        .args(["plan", "nothere"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(
        err.contains("reading nothere: No such file or directory"),
        "{err}"
    );
    assert_eq!(err.matches("(os error 2)").count(), 1, "{err}");
}
