//! `klaraptor device show|calibrate`, run as a user runs them, on a machine without a GPU.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use klaraptor_profiler::calibration::gpu_present;

fn klaraptor_device(cache: &Path, args: &[&str]) -> Output {
    Command::new(common::klaraptor())
        .arg("device")
        .args(args)
        .env("XDG_CACHE_HOME", cache)
        .env("KLARAPTOR_NVCC", common::nvcc())
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn show_with_no_cache_and_no_gpu_says_what_to_do() {
    if gpu_present() {
        eprintln!("skipped: this machine has a GPU driver");
        return;
    }
    let cache = tempfile::tempdir().unwrap();
    let o = klaraptor_device(cache.path(), &["show"]);
    assert!(!o.status.success());
    let err = text(&o.stderr);
    let devices = cache.path().join("klaraptor/devices");
    assert!(err.contains("no device calibration is cached"), "{err}");
    assert!(err.contains(&devices.display().to_string()), "{err}");
    assert!(err.contains("no usable GPU"), "{err}");
    assert!(err.contains("klaraptor device calibrate"), "{err}");
    assert!(o.stdout.is_empty());

    // --json: an empty array on stdout, the same message on stderr.
    let o = klaraptor_device(cache.path(), &["show", "--json"]);
    assert!(!o.status.success());
    assert_eq!(text(&o.stdout).trim(), "[]");
    assert!(text(&o.stderr).contains("no usable GPU"));
}

#[test]
fn calibrate_without_a_gpu_is_a_clear_error() {
    if gpu_present() {
        eprintln!("skipped: this machine has a GPU driver");
        return;
    }
    let cache = tempfile::tempdir().unwrap();
    let o = klaraptor_device(cache.path(), &["calibrate"]);
    assert!(!o.status.success());
    let err = text(&o.stderr);
    assert!(err.contains("no usable CUDA GPU"), "{err}");
    assert!(
        !cache
            .path()
            .join("klaraptor/devices")
            .join(".lock")
            .exists()
            && !cache.path().join("klaraptor/calibrate").exists(),
        "nothing is compiled or locked without a GPU"
    );
}

#[test]
fn show_names_a_damaged_report() {
    let cache = tempfile::tempdir().unwrap();
    let devices = cache.path().join("klaraptor/devices");
    std::fs::create_dir_all(&devices).unwrap();
    let bad = devices.join("GPU-deadbeef.toml");
    std::fs::write(&bad, "format_version = 1\n[device]\nname = \"x\"\n").unwrap();
    let o = klaraptor_device(cache.path(), &["show"]);
    assert!(!o.status.success());
    let err = text(&o.stderr);
    assert!(err.contains(&bad.display().to_string()), "{err}");
    assert!(err.contains("klaraptor device calibrate --force"), "{err}");
}

/// With the H200's real report in the cache, `show` prints every figure with its spread and
/// method, the attributes, and where the file is; `--json` gives the same report.
#[test]
fn show_prints_the_h200_report() {
    let fixture =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("profiler/tests/fixtures/calibration-h200.toml");
    if !fixture.is_file() {
        let msg = format!(
            "{} is absent (bench/gpu/calibrate/run.sh)",
            fixture.display()
        );
        if std::env::var_os("KLARAPTOR_REQUIRE_FIXTURES").is_some_and(|v| v == "1") {
            panic!("{msg}");
        }
        eprintln!("skipped: {msg}");
        return;
    }
    let report = klaraptor_profiler::calibration::DeviceReport::load(&fixture).unwrap();
    let cache = tempfile::tempdir().unwrap();
    let store = klaraptor_profiler::calibration::Cache::at(cache.path().join("klaraptor"));
    let path = store.store(&report).unwrap();

    let o = klaraptor_device(cache.path(), &["show"]);
    let out = text(&o.stdout);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(out.contains(&report.device.name), "{out}");
    assert!(out.contains(&path.display().to_string()), "{out}");
    assert!(out.contains(&report.device.date), "{out}");
    for (name, _, _, _) in report.calibration.figures() {
        assert!(out.contains(name), "{name} missing:\n{out}");
        assert!(out.contains(&report.calibration.methods[name]), "{out}");
    }
    assert!(out.contains("MultiProcessorCount"), "{out}");

    let o = klaraptor_device(cache.path(), &["show", "--json"]);
    assert!(o.status.success());
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        v[0]["report"]["device"]["uuid"],
        report.device.uuid.as_str()
    );
    assert_eq!(
        v[0]["report"]["calibration"]["mem_latency_cycles"].as_f64(),
        Some(report.calibration.mem_latency_cycles)
    );
}

/// The H100's shipped description (model/devices/) is what `show --description` builds from
/// its real calibration report (captured on an NVIDIA H100 80GB HBM3, 2026-11-25): the file
/// is derived, byte for byte, never edited by hand.
#[test]
fn the_shipped_h100_description_comes_from_its_calibration_report() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let report = klaraptor_profiler::calibration::DeviceReport::load(
        &root.join("profiler/tests/fixtures/calibration-h100-80gb-hbm3.toml"),
    )
    .unwrap();
    let cache = tempfile::tempdir().unwrap();
    let store = klaraptor_profiler::calibration::Cache::at(cache.path().join("klaraptor"));
    store.store(&report).unwrap();
    let o = klaraptor_device(cache.path(), &["show", "--description"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let shipped =
        std::fs::read_to_string(root.join("model/devices/nvidia-h100-80gb-hbm3.toml")).unwrap();
    assert_eq!(text(&o.stdout), shipped);
    // And the model finds it by name, with no calibration cached.
    let d = klaraptor_profiler::devices::find("NVIDIA H100 80GB HBM3", "GPU-not-this-one")
        .unwrap()
        .expect("the H100 is shipped");
    assert_eq!(d.sm_count, 132);
}
