//! Whole-run launch timing (issue 41) without a GPU: the launch entry point of the profiling
//! runtime (runtime-shim/src/klaraptor_prof.c) under `KLARAPTOR_LAUNCH_TIMES`, built with the
//! shim and the fake CUDA runtime (runtime-shim/tests/fake_cudart.c: events read per-stream
//! clocks that launches move on), driven by tests/fixtures/launch-times/driver.c; its file
//! read by `klaraptor validate`'s parser (validate::parse_launch_times).

use std::path::Path;
use std::process::Command;

use klaraptor_program::validate;

const CUDA_INCLUDE: &str = env!("KLARAPTOR_RT_CUDA_INCLUDE");

#[test]
fn every_launch_of_a_key_is_summed_and_drift_is_seen() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let shim = root.join("runtime-shim");
    let tmp = tempfile::tempdir().unwrap();
    let exe = tmp.path().join("driver");
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
        .args(["-ldl", "-lpthread", "-lm", "-o"])
        .arg(&exe)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let times = tmp.path().join("times.jsonl");
    let o = Command::new(&exe)
        .env("KLARAPTOR_LAUNCH_TIMES", &times)
        .env("KLARAPTOR_CHOICES", "off")
        .env_remove("KLARAPTOR_PROFILE_OUT")
        .env_remove("KLARAPTOR_PROFILE_PLAN")
        .env_remove("KLARAPTOR_FORCE")
        .env_remove("KLARAPTOR_DISABLE")
        .env_remove("KLARAPTOR_LOG")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
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
