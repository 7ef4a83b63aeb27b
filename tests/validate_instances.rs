//! `klaraptor validate` on a kernel template with two instances (samples/idioms/template_scale:
//! `stencil1d<3>` and `stencil1d<16>`, one annotation), from the runs of
//! tests/fixtures/template-scale-h200-2026-11-26 (an H200, 2026-11-26; its README says what
//! is there). Each instance's klaraptor and settled columns are its own log lines', matched
//! by its run-time name, and the table and records name the instances. No GPU needed: the
//! analysis reads the kept runs (what `--from` does).

use std::path::{Path, PathBuf};

use klaraptor_program::validate::{self, Case, Method};
use klaraptor_program::validate_cmd::{analyze, table, Validation};
use klaraptor_spec::link::LinkSpec;

const R3: &str = "_Z9stencil1dILi3EEvPKfPfi";
const R16: &str = "_Z9stencil1dILi16EEvPKfPfi";

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/template-scale-h200-2026-11-26")
}

/// The binary's kernel specs, as the link embeds them (the plan's order: R=16 first).
fn specs() -> Vec<LinkSpec> {
    [R16, R3]
        .iter()
        .map(|m| LinkSpec {
            shmem: None,
            name: "stencil1d".into(),
            mangled: m.to_string(),
            data: vec!["N".into()],
            dim: 1,
            grid: vec!["ceil(N, bx)".into()],
            block: vec![],
            profile_run: None,
            profile_sizes: vec![],
            code_hash: String::new(),
            annotated_at: String::new(),
            build_dir: PathBuf::new(),
        })
        .collect()
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let t = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &t);
        } else {
            std::fs::copy(e.path(), t).unwrap();
        }
    }
}

/// The runs with the logs a build with instance names writes (`named/`): the recorded
/// runs, whose log lines the runtime wrote under the template's bare name, with each line
/// named after the instance that logged it.
fn named_runs() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    for r in ["run1", "run2"] {
        copy_dir(&fixture().join(r), &d.path().join(r));
        for log in ["binary.log", "variant.log"] {
            std::fs::copy(
                fixture().join("named").join(format!("{r}.{log}")),
                d.path().join(r).join(log),
            )
            .unwrap();
        }
    }
    d
}

fn analyse(dir: &Path) -> Validation {
    let manifests: Vec<_> = klaraptor_program::rational::load_dir(&fixture().join("models"))
        .unwrap()
        .into_iter()
        .map(|(_, p)| p)
        .collect();
    assert_eq!(manifests.len(), 2);
    let specs = specs();
    analyze(
        dir,
        "template_scale",
        &specs,
        &specs,
        &manifests,
        None,
        None,
    )
    .unwrap()
}

fn case<'a>(v: &'a Validation, job: &str, kernel: &str, n: i64) -> &'a Case {
    v.cases
        .iter()
        .find(|c| c.job == job && c.kernel == kernel && c.sizes == [n])
        .unwrap_or_else(|| {
            panic!(
                "no case {job} {kernel} N={n}:\n{}",
                v.cases
                    .iter()
                    .map(|c| format!("{} {} {:?}", c.job, c.kernel, c.sizes))
                    .collect::<Vec<_>>()
                    .join("\n")
            )
        })
}

/// The shape the fixture's rational program of `mangled` ranks first at `n` with this
/// build's model (the runs were made by the build of 2026-11-26, whose model may rank
/// otherwise: `klaraptor validate` then notes the disagreement).
fn first_ranked(mangled: &str, n: i64) -> [u32; 3] {
    klaraptor_program::rational::load_dir(&fixture().join("models"))
        .unwrap()
        .into_iter()
        .map(|(_, p)| p)
        .find(|p| p.mangled == mangled)
        .unwrap()
        .rank(&[n])
        .unwrap()[0]
        .block
}

fn block(c: &Case, m: Method) -> Option<[u32; 3]> {
    c.picks.get(&m).and_then(|p| p.block)
}

#[test]
fn each_instance_gets_its_own_choice() {
    let d = named_runs();
    let v = analyse(d.path());
    assert_eq!(v.cases.len(), 4, "{}", table(&v));
    assert_eq!(v.device.as_deref(), Some("NVIDIA H200"));
    // run1 launches both instances at N = 1048576: stencil1d<3> chose 224, stencil1d<16> 64,
    // and neither settled in the ten runs (`not settled at exit`: the shape it launched).
    let a = case(&v, "run1", "stencil1d<3>", 1048576);
    let b = case(&v, "run1", "stencil1d<16>", 1048576);
    assert_eq!((a.mangled.as_str(), b.mangled.as_str()), (R3, R16));
    assert_eq!(block(a, Method::Klaraptor), Some([224, 1, 1]));
    assert_eq!(block(b, Method::Klaraptor), Some([64, 1, 1]));
    for (c, mangled) in [(a, R3), (b, R16)] {
        let k = &c.picks[&Method::Klaraptor];
        // The run's choice is checked against each instance's own rational program: a flag
        // only where this build's model ranks another shape first, naming both.
        let first = first_ranked(mangled, 1048576);
        if Some(first) == k.block {
            assert!(k.flag.is_none(), "{}: {:?} {}", c.kernel, k.flag, k.how);
        } else {
            let want = format!(
                "the manifest ranks {}x{}x{} first",
                first[0], first[1], first[2]
            );
            assert!(
                k.flag.as_deref().is_some_and(|f| f.contains(&want)),
                "{}: {:?}",
                c.kernel,
                k.flag
            );
        }
        assert!(k.how.contains("source=model"), "{}", k.how);
        assert!(k.ratio.is_some());
        assert_eq!(block(c, Method::Default), Some([256, 1, 1]));
    }
    // The settled column is each instance's own line too (their sweeps differ: 64 is far
    // from the optimum of stencil1d<3>, not of stencil1d<16>).
    assert!(
        a.picks[&Method::Settled].block != Some([64, 1, 1]),
        "{:?}",
        a.picks[&Method::Settled]
    );
    // run2: stencil1d<3> at N = 4194304, stencil1d<16> at 3145728; one size each.
    assert_eq!(
        block(case(&v, "run2", "stencil1d<3>", 4194304), Method::Klaraptor),
        Some([256, 1, 1])
    );
    assert_eq!(
        block(
            case(&v, "run2", "stencil1d<16>", 3145728),
            Method::Klaraptor
        ),
        Some([64, 1, 1])
    );
    assert!(
        !v.notes.iter().any(|n| n.contains("data sizes")),
        "{:?}",
        v.notes
    );

    // The table names the instances; the JSON records carry both names.
    let t = table(&v);
    let rows: Vec<&str> = t
        .lines()
        .filter(|l| l.starts_with("run1 ") || l.starts_with("run2 "))
        .collect();
    assert_eq!(rows.len(), 4, "{t}");
    assert!(
        rows.iter().filter(|l| l.contains(" stencil1d<3> ")).count() == 2
            && rows
                .iter()
                .filter(|l| l.contains(" stencil1d<16> "))
                .count()
                == 2,
        "{t}"
    );
    // Notes of disagreement name only the instances whose ranking moved.
    if first_ranked(R16, 1048576) == [64, 1, 1] && first_ranked(R16, 3145728) == [64, 1, 1] {
        assert!(!t.contains("the manifest ranks 64x1x1"), "{t}");
    }
    let recs = validate::records(&v.cases);
    let k16: Vec<_> = recs
        .iter()
        .filter(|r| r.kernel == "stencil1d<16>" && r.method == "klaraptor")
        .collect();
    assert_eq!(k16.len(), 2);
    assert!(k16
        .iter()
        .all(|r| r.mangled == R16 && r.block == Some([64, 1, 1])));
    let j = serde_json::to_value(k16[0]).unwrap();
    assert_eq!(j["kernel"], "stencil1d<16>");
    assert_eq!(j["mangled"], R16);
}

/// The runs as recorded: both instances logged as `stencil1d`. Such a line cannot say which
/// instance it is, so neither takes it (before, both took the first one's): each instance's
/// klaraptor pick is its own rational program's first-ranked shape, said in the notes.
#[test]
fn a_bare_template_name_is_nobodys() {
    let v = analyse(&fixture());
    assert_eq!(v.cases.len(), 4, "{}", table(&v));
    let a = case(&v, "run1", "stencil1d<3>", 1048576);
    let b = case(&v, "run1", "stencil1d<16>", 1048576);
    assert_eq!(block(a, Method::Klaraptor), Some(first_ranked(R3, 1048576)));
    assert_eq!(
        block(b, Method::Klaraptor),
        Some(first_ranked(R16, 1048576))
    );
    for c in [a, b] {
        let k = &c.picks[&Method::Klaraptor];
        assert_eq!(
            k.flag.as_deref(),
            Some("shape from the rational program, not a run"),
            "{}",
            k.how
        );
        assert!(c.picks[&Method::Settled].block.is_none());
    }
}
