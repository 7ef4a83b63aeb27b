//! The profiling runtime's sweep of the program's own block (klaraptor_prof.c,
//! `KLARAPTOR_PROFILE_PROGRAM=1`, issue 38), without a GPU: runtime-shim/tests/test_prof.c is
//! the program (it launches `vadd` with blocks of 256 threads) and
//! runtime-shim/tests/fake_collector.c the collector, both built here as tests/runtime_shim.rs
//! builds them. The records must name the program's block at every swept size, sweep it when
//! the plan lacks it (and only then), and leave it out when it is not a legal shape there.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// test_prof and the fake collector, built once (into a directory of this test's own).
fn built() -> &'static (PathBuf, PathBuf) {
    static BUILT: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    BUILT.get_or_init(|| {
        common::build_test_prof(
            &Path::new(env!("CARGO_TARGET_TMPDIR")).join("profile-program-shape"),
        )
    })
}

/// Runs test_prof at the sizes `args` with the plan's `shapes` for vadd; `program`: the value
/// of KLARAPTOR_PROFILE_PROGRAM (None: unset). Returns the run, the records' lines and the
/// progress lines.
fn sweep(
    name: &str,
    shapes: &str,
    args: &[&str],
    program: Option<&str>,
) -> (Output, Vec<String>, Vec<String>) {
    let (exe, lib) = built();
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("profile-program-shape")
        .join(name);
    let _ = std::fs::remove_dir_all(&dir);
    let records = dir.join("records");
    std::fs::create_dir_all(&records).unwrap();
    let plan = dir.join("plan.txt");
    std::fs::write(&plan, format!("_Z4vaddPfi {shapes}\n")).unwrap();
    let progress = dir.join("progress.tsv");
    let mut cmd = Command::new(exe);
    cmd.args(args)
        .env("KLARAPTOR_PROFILE_OUT", &records)
        .env("KLARAPTOR_PROFILE_PLAN", &plan)
        .env("KLARAPTOR_COLLECTOR", lib)
        .env("KLARAPTOR_PROGRESS", &progress)
        .env("FAKE_COLLECTOR_COUNTERS", "1");
    for v in [
        "KLARAPTOR_FORCE",
        "KLARAPTOR_DISABLE",
        "KLARAPTOR_LOG",
        "KLARAPTOR_PROFILE_MAX_SIZES",
        "KLARAPTOR_PROFILE_SKIP",
        "KLARAPTOR_PROFILE_PROGRAM",
        "FAKE_COLLECTOR_FAIL",
        "FAKE_COLLECTOR_SILENT_LAST",
    ] {
        cmd.env_remove(v);
    }
    if let Some(p) = program {
        cmd.env("KLARAPTOR_PROFILE_PROGRAM", p);
    }
    let o = cmd.output().unwrap();
    assert!(
        o.status.success(),
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    let jsonl: Vec<PathBuf> = std::fs::read_dir(&records)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    assert_eq!(jsonl.len(), 1, "{jsonl:?}");
    let lines = std::fs::read_to_string(&jsonl[0])
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    let progress = std::fs::read_to_string(&progress)
        .unwrap()
        .lines()
        .map(|l| {
            // the elapsed milliseconds of shape and end lines vary
            let f: Vec<&str> = l.split('\t').collect();
            match f[0] {
                "shape" | "end" => f[..f.len() - 1].join("\t"),
                _ => l.to_string(),
            }
        })
        .collect();
    (o, lines, progress)
}

/// The block of each sample line ("BXxBYxBZ"), and "program BXxBYxBZ" for the line that
/// names the program's own block, with the size.
fn summary(lines: &[String]) -> Vec<String> {
    lines
        .iter()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            let n = v["sizes"][0].as_i64().unwrap();
            let b: Vec<String> = v["block"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.to_string())
                .collect();
            let tag = if v["program"] == serde_json::Value::Bool(true) {
                assert!(
                    v.get("grid").is_none() && v.get("counters").is_none(),
                    "{l}"
                );
                "program "
            } else {
                ""
            };
            format!("{n} {tag}{}", b.join("x"))
        })
        .collect()
}

#[test]
fn the_programs_own_block_is_swept_beside_the_plans_shapes_and_named() {
    // The plan lacks the program's 256 threads: swept after the plan's shapes, at each size,
    // and named before the sweep's samples.
    let (_, lines, progress) = sweep(
        "extra",
        "32x1x1 64x1x1",
        &["1000", "1000", "5000"],
        Some("1"),
    );
    assert_eq!(
        summary(&lines),
        [
            "1000 program 256x1x1",
            "1000 32x1x1",
            "1000 64x1x1",
            "1000 256x1x1",
            "5000 program 256x1x1",
            "5000 32x1x1",
            "5000 64x1x1",
            "5000 256x1x1",
        ]
    );
    assert_eq!(
        progress[..5],
        [
            "sweep\tvadd\t1000\t3",
            "shape\tvadd\t1000\t1\t3\t32x1x1\tok",
            "shape\tvadd\t1000\t2\t3\t64x1x1\tok",
            "shape\tvadd\t1000\t3\t3\t256x1x1\tok",
            "end\tvadd\t1000\t3\t0",
        ]
    );
    // The program's sample is measured as the others are.
    let own: serde_json::Value = serde_json::from_str(&lines[3]).unwrap();
    assert!(own["counters"]["time_ms"].as_f64().unwrap() > 0.0, "{own}");
    assert_eq!(own["grid"][0], 4);

    // The plan has it: named, not swept twice.
    let (_, lines, _) = sweep("planned", "32x1x1 256x1x1", &["2000"], Some("1"));
    assert_eq!(
        summary(&lines),
        ["2000 program 256x1x1", "2000 32x1x1", "2000 256x1x1"]
    );

    // Not a legal shape at this size (no grid for n = 0): neither named nor swept, and the
    // plan's shapes are rejected as before.
    let (_, lines, _) = sweep("illegal", "32x1x1", &["0"], Some("1"));
    assert_eq!(summary(&lines), ["0 32x1x1"]);
    assert!(lines[0].contains("\"error\""), "{}", lines[0]);
}

#[test]
fn without_the_setting_the_sweep_is_the_plans_alone() {
    for program in [None, Some("0")] {
        let (_, lines, progress) = sweep("off", "32x1x1 64x1x1", &["1000"], program);
        assert_eq!(summary(&lines), ["1000 32x1x1", "1000 64x1x1"]);
        assert_eq!(progress[0], "sweep\tvadd\t1000\t2");
    }
    // A value that is not 0 or 1 is refused with a warning (and means 0).
    let (o, lines, _) = sweep("bad", "32x1x1", &["1000"], Some("yes"));
    assert_eq!(summary(&lines), ["1000 32x1x1"]);
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("KLARAPTOR_PROFILE_PROGRAM=yes"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}
