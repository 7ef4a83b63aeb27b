//! Whole-run launch timing (issue 41) without a GPU: the launch entry point of the profiling
//! runtime (runtime-shim/src/klaraptor_prof.c) under `KLARAPTOR_LAUNCH_TIMES`, built with the
//! shim and the fake CUDA runtime (runtime-shim/tests/fake_cudart.c: events read per-stream
//! clocks that launches move on), driven by tests/fixtures/launch-times/driver.c; its file
//! read by `klaraptor validate`'s parser (validate::parse_launch_times); and the driver's
//! repeated forced runs laid out as `klaraptor validate --whole-runs` keeps them, read back
//! (validate_cmd::read_forced_runs) into the median and spread of each shape's whole runs.

use std::path::{Path, PathBuf};
use std::process::Command;

use klaraptor_program::{validate, validate_cmd};

const CUDA_INCLUDE: &str = env!("KLARAPTOR_RT_CUDA_INCLUDE");

/// The driver built with the shim and the fake CUDA runtime, in `dir`.
fn driver(dir: &Path) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let shim = root.join("runtime-shim");
    let exe = dir.join("driver");
    let cc = std::env::var("CC")
        .ok()
        .filter(|c| !c.is_empty())
        .unwrap_or_else(|| "cc".into());
    let o = Command::new(cc)
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror"])
        .arg("-I")
        .arg(shim.join("include"))
        .arg("-I")
        .arg(shim.join("src"))
        .arg("-I")
        .arg(CUDA_INCLUDE)
        .arg(shim.join("src/klaraptor_rt.c"))
        .arg(shim.join("src/klaraptor_prof.c"))
        .arg(root.join("tests/fixtures/launch-times/driver.c"))
        .arg(shim.join("tests/fake_cudart.c"))
        // the fake driver's cuStreamWaitValue32_v2 found by the gate's lookup (dlsym)
        .args(["-rdynamic", "-ldl", "-lpthread", "-lm", "-o"])
        .arg(&exe)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    exe
}

/// Runs the driver with every launch timed into `times`, `force` (a KLARAPTOR_FORCE value)
/// forced, each launch's time multiplied by `scale`.
fn run_driver(exe: &Path, times: &Path, force: Option<&str>, scale: f64) {
    run_driver_env(exe, times, force, scale, &[]);
}

fn run_driver_env(exe: &Path, times: &Path, force: Option<&str>, scale: f64, env: &[(&str, &str)]) {
    let mut cmd = Command::new(exe);
    cmd.env("KLARAPTOR_LAUNCH_TIMES", times)
        .env("KLARAPTOR_CHOICES", "off")
        .env("KLARAPTOR_REFINE", "off")
        .env("DRIVER_SCALE", scale.to_string())
        .env_remove("KLARAPTOR_PROFILE_OUT")
        .env_remove("KLARAPTOR_PROFILE_PLAN")
        .env_remove("KLARAPTOR_FORCE")
        .env_remove("KLARAPTOR_DISABLE")
        .env_remove("KLARAPTOR_LOG");
    if let Some(f) = force {
        cmd.env("KLARAPTOR_FORCE", f);
    }
    cmd.envs(env.iter().copied());
    let o = cmd.output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn every_launch_of_a_key_is_summed_and_drift_is_seen() {
    let tmp = tempfile::tempdir().unwrap();
    let exe = driver(tmp.path());
    let times = tmp.path().join("times.jsonl");
    run_driver(&exe, &times, None, 1.0);
    let text = std::fs::read_to_string(&times).unwrap();
    let t = validate::parse_launch_times(&text).unwrap();
    assert_eq!(t.len(), 3, "{text}");
    let elim = t.iter().find(|x| x.name == "elim").unwrap();
    assert_eq!(
        (elim.kernel.as_str(), elim.sizes.as_slice()),
        ("_Z4elimPfii", &[1000][..])
    );
    assert_eq!((elim.launches, elim.timed), (999, 999));
    // Sum over t of (1000 - t) / 100 us: the load (1000 us) and the host work are outside.
    let want_ms: f64 = (0..999).map(|t| (1000.0 - t as f64) / 100.0).sum::<f64>() / 1000.0;
    assert!(
        (elim.total_ms - want_ms).abs() < 1e-3 * want_ms,
        "{elim:?} vs {want_ms}"
    );
    assert!((elim.first_ms.unwrap() - 0.01).abs() < 1e-6, "{elim:?}");
    assert!(elim.drifts() && elim.drift().unwrap() < 0.5, "{elim:?}");
    assert!(elim.trend.unwrap() < -0.9, "{elim:?}");
    assert_eq!(elim.block, [256, 1, 1]);
    let smooth = t.iter().find(|x| x.sizes == [4096]).unwrap();
    assert_eq!((smooth.launches, smooth.timed), (10, 10));
    assert!((smooth.total_ms - 0.5).abs() < 1e-6, "{smooth:?}");
    assert!(!smooth.drifts());
    // A launch into a capturing stream is counted, not timed.
    let captured = t.iter().find(|x| x.sizes == [64]).unwrap();
    assert_eq!(
        (captured.launches, captured.timed, captured.total_ms),
        (1, 0, 0.0)
    );
}

/// The program's own launches (`KLARAPTOR_DISABLE=1`: the program's own shape's whole run, as
/// the accuracy study measures it) are timed alike, with the program's blocks and grids.
#[test]
fn the_programs_own_launches_are_timed_under_disable() {
    let tmp = tempfile::tempdir().unwrap();
    let exe = driver(tmp.path());
    let times = tmp.path().join("times.jsonl");
    run_driver_env(&exe, &times, None, 1.0, &[("KLARAPTOR_DISABLE", "1")]);
    let text = std::fs::read_to_string(&times).unwrap();
    let t = validate::parse_launch_times(&text).unwrap();
    assert_eq!(t.len(), 3, "{text}");
    let elim = t.iter().find(|x| x.name == "elim").unwrap();
    assert_eq!((elim.launches, elim.timed), (999, 999));
    assert_eq!(
        (elim.block, elim.grid, elim.blocks_seen),
        ([256, 1, 1], [4, 1, 1], 1)
    );
    let want_ms: f64 = (0..999).map(|t| (1000.0 - t as f64) / 100.0).sum::<f64>() / 1000.0;
    assert!((elim.total_ms - want_ms).abs() < 1e-3 * want_ms, "{elim:?}");
}

/// The whole-run measurement's repeats (`klaraptor validate --whole-runs`), as validate lays
/// them out in a run directory's `wholerun/`, made by the driver with its shapes forced:
/// each shape's time is the median of its repeats, the spread max / min - 1, a repeat whose
/// forced shape was not the one launched is left out; a directory made before repeats (one
/// run per forced configuration) is still read.
#[test]
fn repeated_forced_runs_are_read_back_as_a_median() {
    let tmp = tempfile::tempdir().unwrap();
    let exe = driver(tmp.path());
    let elim = "_Z4elimPfii";
    // Sum over t of (1000 - t) / 100 us, at scale 1.
    let base: f64 = (0..999).map(|t| (1000.0 - t as f64) / 100.0).sum::<f64>() / 1000.0;

    let rdir = tmp.path().join("run1");
    let w = rdir.join("wholerun");
    std::fs::create_dir_all(&w).unwrap();
    std::fs::write(w.join("f1.force"), format!("{elim} 128x1x1\n")).unwrap();
    std::fs::write(w.join("f2.force"), format!("{elim} 256x1x1\n")).unwrap();
    let force128 = format!("{elim}:128x1x1");
    // Round-robin, as validate runs them; f1's third repeat launched the program's own 256
    // (as a forced shape that fell back would): left out.
    let plan: [(&str, Option<&str>, f64); 6] = [
        ("f1.r1", Some(&force128), 1.10),
        ("f2.r1", Some("_Z4elimPfii:256x1x1"), 1.02),
        ("f1.r2", Some(&force128), 0.95),
        ("f2.r2", Some("_Z4elimPfii:256x1x1"), 0.98),
        ("f1.r3", None, 0.50),
        ("f2.r3", Some("_Z4elimPfii:256x1x1"), 1.00),
    ];
    for (stem, force, scale) in plan {
        run_driver(&exe, &w.join(format!("{stem}.times.jsonl")), force, scale);
        std::fs::write(w.join(format!("{stem}.status")), "0\n").unwrap();
    }
    let runs = validate_cmd::read_forced_runs(&rdir).unwrap();
    assert_eq!(
        runs.iter().map(|r| r.source.as_str()).collect::<Vec<_>>(),
        [
            "run1/wholerun/f1.r1",
            "run1/wholerun/f1.r2",
            "run1/wholerun/f1.r3",
            "run1/wholerun/f2.r1",
            "run1/wholerun/f2.r2",
            "run1/wholerun/f2.r3",
        ]
    );
    let pick = |runs: &[validate::ForcedRun], b: [u32; 3]| {
        let mut p = validate::Pick {
            block: Some(b),
            ..validate::Pick::default()
        };
        validate::whole_run_pick(&mut p, runs, elim, &[1000]);
        p
    };
    let close = |a: f64, b: f64| (a - b).abs() < 1e-3 * b.abs().max(1e-9);
    let p = pick(&runs, [128, 1, 1]);
    assert_eq!(p.whole_run_runs, Some(2), "{}", p.how);
    let ms = p.whole_run_ms.unwrap();
    assert!(close(ms, base * (1.10 + 0.95) / 2.0), "{ms} {base}");
    let sp = p.whole_run_spread.unwrap();
    assert!(close(sp, 1.10 / 0.95 - 1.0), "{sp}");
    assert!(
        p.how.contains("(run1/wholerun/f1.r3) launched 256x1x1"),
        "{}",
        p.how
    );
    assert!(p.how.contains("median of 2 whole runs"), "{}", p.how);
    assert_eq!(p.whole_run_launches, Some(999));
    let p = pick(&runs, [256, 1, 1]);
    assert_eq!(p.whole_run_runs, Some(3), "{}", p.how);
    assert!(close(p.whole_run_ms.unwrap(), base), "{p:?}");
    assert!(
        close(p.whole_run_spread.unwrap(), 1.02 / 0.98 - 1.0),
        "{p:?}"
    );

    // Before repeats (and with --whole-runs 1): f<j>.times.jsonl, one run per configuration.
    let old = tmp.path().join("run2");
    let w = old.join("wholerun");
    std::fs::create_dir_all(&w).unwrap();
    std::fs::write(w.join("f1.force"), format!("{elim} 128x1x1\n")).unwrap();
    run_driver(&exe, &w.join("f1.times.jsonl"), Some(&force128), 1.0);
    std::fs::write(w.join("f1.status"), "0\n").unwrap();
    let runs = validate_cmd::read_forced_runs(&old).unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].source, "run2/wholerun/f1");
    let p = pick(&runs, [128, 1, 1]);
    assert_eq!((p.whole_run_runs, p.whole_run_spread), (Some(1), None));
    assert!(close(p.whole_run_ms.unwrap(), base), "{p:?}");
    assert!(p.how.contains("; whole run with it forced: "), "{}", p.how);
}
