//! The isolated whole runs (device.sh's `WHOLE_RUN_ISOLATE`) on the fixture
//! `tests/fixtures/corr-x1-isolated/`: PolyBench corr at 1000 × 256, its all-at-once whole runs
//! and model.log real (H200, 2026-11-28), its isolated runs constructed in the same format (see
//! the fixture's README). Checks that device.sh plans the runs the fixture holds, that the
//! report reads them per kernel (a kernel's figures from the reference runs and its own
//! isolated runs only), and that issue 41's acceptance takes the isolated figure where there is
//! one and says which figure it took.

use std::path::{Path, PathBuf};
use std::process::Command;

use klaraptor_accuracy::inputs::{self, Isolated};
use klaraptor_accuracy::study::{self, Case, Method, Pick};
use klaraptor_program::validate::KernelName;

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/corr-x1-isolated")
}

const KERNELS: [(&str, &str); 4] = [
    ("corr_mean", "_Z9corr_meanPKfPfii"),
    ("corr_std", "_Z8corr_stdPKfS0_Pfii"),
    ("corr_center", "_Z11corr_centerPfPKfS1_ii"),
    ("corr_matrix", "_Z11corr_matrixPKfPfii"),
];

fn name_of(kernel: &str) -> KernelName {
    let mangled = KERNELS.iter().find(|(n, _)| *n == kernel).unwrap().1;
    KernelName::new(kernel, mangled, KERNELS.iter().copied())
}

/// A case of `kernel` at 1000 × 256 with the shapes of the fixture's model.log: the
/// program's own, the model's first choice and the settled one.
fn case(kernel: &str, own: [u32; 3], model: [u32; 3], settled: [u32; 3]) -> Case {
    let mut c = Case {
        program: "corr".into(),
        kernel: kernel.into(),
        mangled: name_of(kernel).mangled,
        job: "corr/x1".into(),
        dim: if kernel == "corr_center" { 2 } else { 1 },
        labels: vec!["M".into(), "N".into()],
        sizes: vec![1000, 256],
        ..Case::default()
    };
    for (m, b) in [
        (Method::Default, own),
        (Method::Klaraptor, model),
        (Method::Settled, settled),
    ] {
        c.picks.insert(
            m,
            Pick {
                block: Some(b),
                ..Pick::default()
            },
        );
    }
    c
}

fn timed(mut c: Case, iso: Option<&Isolated>) -> Case {
    let dir = fixture();
    let whole = inputs::read_whole_runs(&dir, "choice/corr/x1").unwrap();
    assert_eq!(whole.len(), 9, "three rounds of default, model and f1");
    study::time_whole_run(&mut c, &whole);
    let name = name_of(&c.kernel);
    study::time_isolated(&mut c, iso, &name);
    c
}

fn close(a: Option<f64>, want: f64) -> bool {
    a.is_some_and(|a| (a - want).abs() < 1e-9)
}

/// device.sh plans, for the fixture's model.log, the runs the fixture holds: its plan.tsv,
/// the reference and each isolated run with the shapes their .force files list.
#[test]
fn device_sh_plans_the_fixtures_runs() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new("bash")
        .arg(root.join("device.sh"))
        .arg("--isolate-plan")
        .arg(fixture().join("model.log"))
        .output()
        .expect("running bash");
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    let iso = fixture().join("isolated");
    let read = |name: &str| std::fs::read_to_string(iso.join(name)).unwrap();
    let plan: Vec<String> = text
        .lines()
        .filter_map(|l| l.strip_prefix("P\t"))
        .map(String::from)
        .collect();
    let want: Vec<String> = read("plan.tsv")
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(String::from)
        .collect();
    assert_eq!(plan, want);
    // A KLARAPTOR_FORCE value as device.sh's .force file.
    let as_file = |force: &str| -> String {
        force
            .split(',')
            .filter(|e| !e.is_empty())
            .map(|e| {
                let (k, b) = e.rsplit_once(':').unwrap();
                format!("{k} {b}\n")
            })
            .collect()
    };
    let reference = text.lines().find_map(|l| l.strip_prefix("R\t")).unwrap();
    assert_eq!(
        reference,
        "corr_center:32x8x1,corr_matrix:8x1x1,corr_mean:256x1x1,corr_std:32x1x1"
    );
    assert_eq!(as_file(reference), read("ref.force"));
    let mut stems = vec!["ref".to_string()];
    for l in text.lines().filter_map(|l| l.strip_prefix("I\t")) {
        let f: Vec<&str> = l.split('\t').collect();
        assert_eq!(as_file(f[2]), read(&format!("{}.force", f[0])), "{l}");
        stems.push(f[0].to_string());
    }
    // every planned run, two rounds; nothing else
    let mut want_files: Vec<String> = stems
        .iter()
        .flat_map(|s| [format!("{s}.times.jsonl"), format!("{s}.r2.times.jsonl")])
        .collect();
    want_files.sort();
    let mut files: Vec<String> = std::fs::read_dir(&iso)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".times.jsonl"))
        .collect();
    files.sort();
    assert_eq!(files, want_files);
}

/// corr_center: settled (the program's own 32×8) reads 1.050 × the model's first choice in
/// the real all-at-once runs, 1.0075 in the isolated ones, and the acceptance takes the
/// isolated figure; its lines in the other kernels' isolated runs do not count.
#[test]
fn isolated_figures_of_corr_center() {
    let iso = inputs::read_isolated(&fixture(), "choice/corr/x1")
        .unwrap()
        .unwrap();
    assert_eq!(iso.plan.len(), 4);
    let c = timed(
        case("corr_center", [32, 8, 1], [1024, 1, 1], [32, 8, 1]),
        Some(&iso),
    );
    // all at once (real): the own/settled shape's three default runs, the model's six runs
    let own_all = 0.275104 / 62.0;
    let model_all = (0.26096 + 0.262816) / 2.0 / 62.0;
    assert!(close(c.settled_vs_min(false), own_all / model_all));
    assert!((c.settled_vs_min(false).unwrap() - 1.050).abs() < 5e-4);
    // isolated: ref, ref.r2 against iso-corr_center-model, .r2
    let s = &c.picks[&Method::Settled];
    assert!(close(s.whole_run_iso_launch_ms, 0.2621 / 62.0), "{s:?}");
    assert!(close(s.whole_run_iso_ms, 0.2621), "{s:?}");
    assert_eq!(s.whole_run_iso_runs, Some(2));
    let k = &c.picks[&Method::Klaraptor];
    assert!(close(k.whole_run_iso_ms, 0.26015), "{k:?}");
    assert!(
        close(c.picks[&Method::Default].whole_run_iso_ms, 0.2621),
        "own is settled's shape: the same runs"
    );
    assert!(close(c.settled_vs_min(true), 0.2621 / 0.26015));
    let (r, from) = c.whole_run_accept().unwrap();
    assert_eq!(from, "isolated");
    assert!(close(Some(r), 0.2621 / 0.26015) && r <= 1.03);
    assert_eq!(c.isolation.as_deref(), Some("isolated"));
    assert!(
        s.how.contains("isolated (only corr_center changes shape")
            && s.how
                .contains("isolated/ref, every kernel at its settled shape")
            && !s.how.contains("iso-corr_std"),
        "{}",
        s.how
    );
    assert!(k
        .how
        .contains("iso-corr_center-model, corr_center at the model's first choice"));
}

/// corr_std: its three shapes differ; each from its own runs (own and model) and the
/// reference (settled).
#[test]
fn isolated_figures_of_corr_std() {
    let iso = inputs::read_isolated(&fixture(), "choice/corr/x1")
        .unwrap()
        .unwrap();
    let c = timed(
        case("corr_std", [256, 1, 1], [8, 1, 1], [32, 1, 1]),
        Some(&iso),
    );
    let ms = |m: Method| c.picks[&m].whole_run_iso_ms;
    assert!(close(ms(Method::Settled), (0.3540 + 0.3552) / 2.0));
    assert!(close(ms(Method::Klaraptor), (0.3576 + 0.3570) / 2.0));
    assert!(close(ms(Method::Default), (0.3736 + 0.3731) / 2.0));
    assert!(close(c.settled_vs_min(true), 0.3546 / 0.3573));
    assert_eq!(c.whole_run_accept().unwrap().1, "isolated");
    // the all-at-once figure is there too, from the real runs
    assert!(c.settled_vs_min(false).is_some());
}

/// Without isolated figures the acceptance takes the all-at-once one, and says how far it
/// compares like with like: `alone` where the kernel is the only one changing shape in its
/// job, `all_at_once` otherwise (no isolation plan; a kernel whose keys settled on different
/// shapes).
#[test]
fn the_all_at_once_figure_where_nothing_is_isolated() {
    let iso = inputs::read_isolated(&fixture(), "choice/corr/x1")
        .unwrap()
        .unwrap();
    let center = || case("corr_center", [32, 8, 1], [1024, 1, 1], [32, 8, 1]);
    let all = timed(center(), None).settled_vs_min(false).unwrap();

    let none = timed(center(), None);
    assert_eq!(none.isolation, None);
    assert_eq!(none.settled_vs_min(true), None);
    assert_eq!(none.whole_run_accept(), Some((all, "all_at_once")));

    let with = |status: &str| {
        let mut x = iso.clone();
        for p in &mut x.plan {
            if p.kernel == "corr_center" {
                p.status = status.into();
                p.stem = None;
                p.note = format!("({status})");
            }
        }
        timed(center(), Some(&x))
    };
    let mixed = with("mixed");
    assert_eq!(mixed.isolation.as_deref(), Some("mixed"));
    assert_eq!(mixed.picks[&Method::Settled].whole_run_iso_ms, None);
    assert_eq!(mixed.whole_run_accept(), Some((all, "all_at_once")));
    assert!(mixed.picks[&Method::Settled]
        .how
        .contains("isolated whole runs: none of this kernel (mixed: (mixed))"));
    let alone = with("alone");
    assert_eq!(alone.whole_run_accept(), Some((all, "alone")));

    // A kernel the plan does not name.
    let mut x = iso.clone();
    x.plan.retain(|p| p.kernel != "corr_center");
    let absent = timed(center(), Some(&x));
    assert_eq!(absent.isolation.as_deref(), Some("absent"));
    assert_eq!(absent.whole_run_accept().unwrap().1, "all_at_once");
}
