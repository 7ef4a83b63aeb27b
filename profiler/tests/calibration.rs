//! Device calibration: the benchmark source compiles for every supported architecture with
//! the project's nvcc; reports parse and validate (the real H200 report, once committed as a
//! fixture), bad reports are refused with the file and field named; the cache round-trips.

use std::path::{Path, PathBuf};
use std::process::Command;

use klaraptor_profiler::calibration::{
    gpu_present, Cache, CalibrationError, DeviceReport, CALIBRATE_CU, FORMAT_VERSION,
    REQUIRED_ATTRIBUTES,
};

/// The nvcc that `scripts/setup` installs (or KLARAPTOR_NVCC).
fn nvcc() -> PathBuf {
    if let Some(p) = std::env::var_os("KLARAPTOR_NVCC") {
        return PathBuf::from(p);
    }
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.toolchain/cuda/bin/nvcc");
    assert!(
        p.is_file(),
        "{} is missing: run scripts/setup first",
        p.display()
    );
    p
}

fn source_file(dir: &Path) -> PathBuf {
    let src = dir.join("calibrate.cu");
    std::fs::write(&src, CALIBRATE_CU).unwrap();
    src
}

fn listed_archs() -> String {
    let out = Command::new(nvcc())
        .arg("--list-gpu-arch")
        .output()
        .unwrap();
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn benchmark_compiles_for_each_supported_architecture() {
    let dir = tempfile::tempdir().unwrap();
    let src = source_file(dir.path());
    let listed = listed_archs();
    // CUDA 13 dropped sm_70 (Volta); an older nvcc still builds it, and then so must we.
    let required = ["75", "80", "90"];
    for arch in ["70", "75", "80", "90"] {
        let supported = listed
            .lines()
            .any(|l| l.trim() == format!("compute_{arch}"));
        if !supported {
            assert!(
                !required.contains(&arch),
                "nvcc does not list compute_{arch}:\n{listed}"
            );
            continue;
        }
        let exe = dir.path().join(format!("calibrate_sm{arch}"));
        let out = Command::new(nvcc())
            .args([
                "-O3",
                &format!("-arch=sm_{arch}"),
                "-Werror",
                "all-warnings",
            ])
            .args(["-Xcompiler", "-Wall,-Wextra,-Werror"])
            .arg("-o")
            .arg(&exe)
            .arg(&src)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "sm_{arch}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(exe.is_file());
    }
}

/// The issue-rate figure divides cycles by an instruction count the program assumes
/// (`kInstPerStep` = 8 per unrolled step, 16 extra steps between the two bodies). Check that
/// assumption against what the compiler emits for sm_90: the 32-step instance of each issue
/// kernel has exactly 128 more FP32 FMA / INT32 add / xor instructions than the 16-step one.
#[test]
fn issue_kernels_have_the_instruction_counts_the_program_divides_by() {
    let dir = tempfile::tempdir().unwrap();
    let src = source_file(dir.path());
    let ptx = dir.path().join("calibrate.ptx");
    let out = Command::new(nvcc())
        .args(["-O3", "-arch=sm_90", "-ptx", "-o"])
        .arg(&ptx)
        .arg(&src)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&ptx).unwrap();
    // kernel name → (fma.rn.f32, add.s32, xor.b32) in its body
    let count = |kernel: &str, steps: u32| -> (usize, usize, usize) {
        let marker = format!("{kernel}ILi{steps}E");
        let start = text
            .match_indices(".entry ")
            .map(|(i, _)| i)
            .find(|&i| {
                text[i..]
                    .lines()
                    .next()
                    .is_some_and(|l| l.contains(&marker))
            })
            .unwrap_or_else(|| panic!("no entry {marker} in the PTX"));
        let body = &text[start..];
        let body = &body[..body.find("\n}\n").expect("end of the entry")];
        let ops = |op: &str| {
            body.lines()
                .filter(|l| l.trim_start().starts_with(op))
                .count()
        };
        (ops("fma.rn.f32"), ops("add.s32"), ops("xor.b32"))
    };
    for kernel in ["issue_fp32", "issue_int32", "issue_mixed"] {
        let (f1, a1, x1) = count(kernel, 16);
        let (f2, a2, x2) = count(kernel, 32);
        let extra = (f2 - f1) + (a2 - a1) + (x2 - x1);
        assert_eq!(
            extra,
            16 * 8,
            "{kernel}: 16 more steps must add 128 instructions"
        );
        match kernel {
            "issue_fp32" => assert_eq!(f2 - f1, 128),
            "issue_int32" => assert_eq!((a2 - a1, x2 - x1), (64, 64)),
            _ => assert_eq!((f2 - f1, a2 - a1, x2 - x1), (64, 32, 32)),
        }
    }
}

// ---------------------------------------------------------------------------------------
// Reports

/// The real report of the H200 (written by `bench/gpu/calibrate/run.sh`).
const H200_FIXTURE: &str = "tests/fixtures/calibration-h200.toml";

#[test]
fn the_h200_report_parses_and_is_plausible() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(H200_FIXTURE);
    if !path.is_file() {
        let msg = format!(
            "{} is absent: run bench/gpu/calibrate/run.sh on the H200 and commit one of its \
             reports there",
            path.display()
        );
        if std::env::var_os("KLARAPTOR_REQUIRE_FIXTURES").is_some_and(|v| v == "1") {
            panic!("{msg}");
        }
        eprintln!("skipped: {msg}");
        return;
    }
    let r = DeviceReport::load(&path).unwrap_or_else(|e| panic!("{e}"));
    assert!(r.device.name.contains("H200"), "{}", r.device.name);
    assert_eq!(r.device.cc, "9.0");
    assert!(r.device.uuid.starts_with("GPU-"));
    assert_eq!(r.attributes["MultiProcessorCount"], 132);
    assert_eq!(r.attributes["WarpSize"], 32);
    for name in REQUIRED_ATTRIBUTES {
        assert!(r.attributes.contains_key(*name), "{name}");
    }
    let c = &r.calibration;
    // HBM3e behind a 50 MB L2: DRAM latency well above L2's, bandwidth in the TB/s.
    assert!(c.mem_latency_cycles > 1.5 * c.l2_latency_cycles);
    assert!(c.dram_bandwidth_gbs > 2000.0 && c.dram_bandwidth_gbs < 5000.0);
    assert!(c.departure_delay_uncoalesced_cycles > 0.0);
    assert!(c.issue_cycles >= 0.5 && c.issue_cycles <= 4.0);
    // Round trip through the cache.
    let dir = tempfile::tempdir().unwrap();
    let cache = Cache::at(dir.path());
    cache.store(&r).unwrap();
    assert_eq!(cache.load(&r.device.uuid).unwrap(), Some(r));
}

/// A hand-written report with SYNTHETIC figures (not a measurement): the base that the
/// error-case tests break one field at a time, and the cache round trip's payload.
const SYNTHETIC: &str = r#"
format_version = 1

[device]
name = "Synthetic GPU (test data)"
uuid = "GPU-00000000-1111-2222-3333-444444444444"
cc = "9.0"
pci_bus_id = "00000000:00:00.0"
driver_version = "0.0.0"
cuda_driver_version = "13.0"
runtime_version = "13.0"
total_memory_bytes = 1073741824
date = "2000-01-01T00:00:00Z"

[attributes]
MultiProcessorCount = 4
ClockRate = 1000000
MemoryClockRate = 1000000
GlobalMemoryBusWidth = 256
L2CacheSize = 1048576
MaxThreadsPerBlock = 1024
MaxThreadsPerMultiProcessor = 2048
MaxBlocksPerMultiprocessor = 32
MaxRegistersPerMultiprocessor = 65536
MaxRegistersPerBlock = 65536
MaxSharedMemoryPerMultiprocessor = 233472
MaxSharedMemoryPerBlock = 49152
MaxSharedMemoryPerBlockOptin = 232448
ReservedSharedMemoryPerBlock = 1024
WarpSize = 32
ComputeCapabilityMajor = 9
ComputeCapabilityMinor = 0
MaxBlockDimX = 1024
MaxBlockDimY = 1024
MaxBlockDimZ = 64
MaxGridDimX = 2147483647
MaxGridDimY = 65535
MaxGridDimZ = 65535

[calibration]
mem_latency_cycles = 500.0
mem_latency_cycles_spread = 5.0
l2_latency_cycles = 200.0
l2_latency_cycles_spread = 2.0
departure_delay_coalesced_cycles = 2.0
departure_delay_coalesced_cycles_spread = 0.1
departure_delay_uncoalesced_cycles = 1.0
departure_delay_uncoalesced_cycles_spread = 0.1
dram_bandwidth_gbs = 1000.0
dram_bandwidth_gbs_spread = 10.0
issue_cycles = 1.0
issue_cycles_spread = 0.0
sm_clock_mhz = 1000.0
issue_cycles_per_sm = 0.25

[calibration.methods]
mem_latency_cycles = "synthetic"
l2_latency_cycles = "synthetic"
departure_delay_coalesced_cycles = "synthetic"
departure_delay_uncoalesced_cycles = "synthetic"
dram_bandwidth_gbs = "synthetic"
issue_cycles = "synthetic"
"#;

const ORIGIN: &str = "some/dir/report.toml";

fn parse(text: &str) -> Result<DeviceReport, CalibrationError> {
    DeviceReport::parse(text, ORIGIN)
}

/// The error for `SYNTHETIC` with `from` replaced by `to`, as text.
fn error_after(from: &str, to: &str) -> String {
    assert!(SYNTHETIC.contains(from), "the base has no {from:?}");
    let text = SYNTHETIC.replacen(from, to, 1);
    let e = parse(&text).expect_err(&format!("{from:?} -> {to:?} must be refused"));
    let msg = e.to_string();
    assert!(msg.contains(ORIGIN), "the error names the file: {msg}");
    msg
}

#[test]
fn the_synthetic_base_is_valid() {
    let r = parse(SYNTHETIC).unwrap();
    assert_eq!(r.format_version, FORMAT_VERSION);
    assert_eq!(r.calibration.mem_latency_cycles, 500.0);
    assert_eq!(r.calibration.extra["sm_clock_mhz"], 1000.0);
    assert_eq!(r.figure("issue_cycles_per_sm"), Some(0.25));
    assert_eq!(r.figure("dram_bandwidth_gbs"), Some(1000.0));
    assert_eq!(r.figure("no_such_figure"), None);
    // TOML out and back in gives the same report.
    assert_eq!(parse(&r.to_toml()).unwrap(), r);
}

#[test]
fn a_missing_figure_is_named() {
    let msg = error_after("issue_cycles = 1.0\n", "");
    assert!(msg.contains("issue_cycles"), "{msg}");
}

#[test]
fn an_implausible_figure_is_named_with_its_range() {
    let msg = error_after("mem_latency_cycles = 500.0", "mem_latency_cycles = -3.0");
    assert!(msg.contains("[calibration] mem_latency_cycles"), "{msg}");
    assert!(msg.contains("-3") && msg.contains("100"), "{msg}");
    let msg = error_after("dram_bandwidth_gbs = 1000.0", "dram_bandwidth_gbs = nan");
    assert!(msg.contains("dram_bandwidth_gbs"), "{msg}");
}

#[test]
fn a_negative_spread_is_refused() {
    let msg = error_after("issue_cycles_spread = 0.0", "issue_cycles_spread = -1.0");
    assert!(msg.contains("issue_cycles_spread"), "{msg}");
}

#[test]
fn l2_latency_must_be_below_memory_latency() {
    let msg = error_after("l2_latency_cycles = 200.0", "l2_latency_cycles = 600.0");
    assert!(
        msg.contains("l2_latency_cycles") && msg.contains("mem_latency_cycles"),
        "{msg}"
    );
}

#[test]
fn a_missing_method_is_named() {
    let msg = error_after("issue_cycles = \"synthetic\"\n", "");
    assert!(msg.contains("[calibration.methods] issue_cycles"), "{msg}");
}

#[test]
fn a_missing_or_impossible_attribute_is_named() {
    let msg = error_after("WarpSize = 32\n", "");
    assert!(
        msg.contains("[attributes] WarpSize") && msg.contains("missing"),
        "{msg}"
    );
    let msg = error_after("MultiProcessorCount = 4", "MultiProcessorCount = 0");
    assert!(msg.contains("[attributes] MultiProcessorCount"), "{msg}");
    let msg = error_after("ComputeCapabilityMinor = 0", "ComputeCapabilityMinor = 9");
    assert!(msg.contains("[device] cc") && msg.contains("9.9"), "{msg}");
}

#[test]
fn device_fields_are_checked() {
    let msg = error_after("uuid = \"GPU-", "uuid = \"XYZ-");
    assert!(msg.contains("[device] uuid"), "{msg}");
    let msg = error_after("name = \"Synthetic GPU (test data)\"", "name = \" \"");
    assert!(msg.contains("[device] name"), "{msg}");
}

#[test]
fn another_format_version_is_a_version_error() {
    let e = parse(&SYNTHETIC.replacen("format_version = 1", "format_version = 7", 1)).unwrap_err();
    assert!(
        matches!(e, CalibrationError::Version { found: 7, .. }),
        "{e}"
    );
    let msg = error_after("format_version = 1\n", "");
    assert!(msg.contains("format_version"), "{msg}");
}

#[test]
fn broken_toml_is_a_parse_error_with_the_line() {
    let msg = error_after("[calibration]\n", "[calibration\n");
    assert!(msg.contains("line"), "{msg}");
}

#[test]
fn a_non_finite_extra_is_refused() {
    let msg = error_after("sm_clock_mhz = 1000.0", "sm_clock_mhz = inf");
    assert!(msg.contains("sm_clock_mhz"), "{msg}");
}

// ---------------------------------------------------------------------------------------
// Cache

#[test]
fn the_cache_round_trips_and_writes_atomically() {
    let dir = tempfile::tempdir().unwrap();
    let cache = Cache::at(dir.path().join("klaraptor"));
    let r = parse(SYNTHETIC).unwrap();
    assert_eq!(cache.load(&r.device.uuid).unwrap(), None);
    assert!(cache.list().unwrap().is_empty());

    let path = cache.store(&r).unwrap();
    assert_eq!(
        path,
        dir.path()
            .join("klaraptor/devices/GPU-00000000-1111-2222-3333-444444444444.toml")
    );
    assert_eq!(cache.load(&r.device.uuid).unwrap().as_ref(), Some(&r));

    // Overwriting replaces the file and leaves no temporary file behind.
    let mut r2 = r.clone();
    r2.calibration.mem_latency_cycles = 510.0;
    cache.store(&r2).unwrap();
    assert_eq!(cache.load(&r.device.uuid).unwrap(), Some(r2.clone()));
    let names: Vec<String> = std::fs::read_dir(cache.devices_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, vec!["GPU-00000000-1111-2222-3333-444444444444.toml"]);

    // A device without a UUID is filed under its name.
    let mut r3 = r.clone();
    r3.device.uuid.clear();
    let p3 = cache.store(&r3).unwrap();
    assert!(
        p3.ends_with("synthetic-gpu-test-data.toml"),
        "{}",
        p3.display()
    );
    assert_eq!(cache.load("Synthetic GPU (test data)").unwrap(), Some(r3));

    // A damaged file is listed with its error, and loading it says which file.
    std::fs::write(
        cache.devices_dir().join("GPU-broken.toml"),
        "format_version = 1\n",
    )
    .unwrap();
    let listed = cache.list().unwrap();
    assert_eq!(listed.len(), 3);
    let broken = listed
        .iter()
        .find(|c| c.path.ends_with("GPU-broken.toml"))
        .unwrap();
    let msg = broken.report.as_ref().unwrap_err().to_string();
    assert!(
        msg.contains("GPU-broken.toml") && msg.contains("device"),
        "{msg}"
    );
    assert!(cache.load("GPU-broken").is_err());
}

#[test]
fn without_a_gpu_calibration_says_so_before_compiling() {
    if gpu_present() {
        eprintln!("skipped: this machine has a GPU driver");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cache = Cache::at(dir.path());
    for e in [
        cache.calibrate(&nvcc(), 0).map(|_| ()).unwrap_err(),
        cache.ensure(&nvcc(), 0).map(|_| ()).unwrap_err(),
        cache.identify(&nvcc(), 0).map(|_| ()).unwrap_err(),
    ] {
        assert!(matches!(e, CalibrationError::NoGpu { .. }), "{e}");
        assert!(e.to_string().contains("no usable CUDA GPU"), "{e}");
    }
    // Nothing was compiled or written.
    assert!(!dir.path().join("calibrate").exists());
}
