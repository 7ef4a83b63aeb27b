//! The C runtime shim (runtime-shim/), tested without a GPU: runtime-shim/tests/test_rt.c is
//! compiled with the shim and a tiny fake of the five CUDA runtime functions the shim calls
//! (runtime-shim/tests/fake_cudart.c), with the system C compiler (`$CC`, else `cc`) and
//! warnings as errors, and run under several KLARAPTOR_* settings; stdout, stderr and the log
//! files are compared exactly. A ThreadSanitizer build of the concurrency case runs where the
//! compiler supports it. Also checks the archive build.rs leaves for the driver to embed.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const CUDA_INCLUDE: &str = env!("KLARAPTOR_RT_CUDA_INCLUDE");

/// Every variable the shim reads: removed before each run, so that only a case's own count.
const SHIM_VARS: [&str; 8] = [
    "KLARAPTOR_FORCE",
    "KLARAPTOR_DISABLE",
    "KLARAPTOR_LOG",
    "KLARAPTOR_REFINE",
    "KLARAPTOR_REFINE_WALK",
    "KLARAPTOR_REFINE_SPAN",
    "KLARAPTOR_REFINE_BUDGET",
    "KLARAPTOR_CHOICES",
];

/// Compiles test_rt with `extra` flags into the test tmpdir; Err(diagnostics) on failure.
fn build(name: &str, extra: &[&str]) -> Result<PathBuf, String> {
    build_test("test_rt.c", name, extra)
}

/// Compiles `runtime-shim/tests/<source>` with the shim and the fake CUDA runtime.
fn build_test(source: &str, name: &str, extra: &[&str]) -> Result<PathBuf, String> {
    let shim = Path::new(ROOT).join("runtime-shim");
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("runtime-shim");
    std::fs::create_dir_all(&dir).unwrap();
    let exe = dir.join(name);
    let out = Command::new(common::c_compiler())
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-fPIC"])
        .args(extra)
        .arg("-I")
        .arg(shim.join("include"))
        .arg("-I")
        .arg(shim.join("src"))
        .arg("-I")
        .arg(CUDA_INCLUDE)
        .arg(shim.join("src/klaraptor_rt.c"))
        .arg(shim.join("tests").join(source))
        .arg(shim.join("tests/fake_cudart.c"))
        // the fake driver's cuStreamWaitValue32_v2 found by the gate's lookup (dlsym)
        .arg("-rdynamic")
        .arg("-lpthread")
        .arg("-o")
        .arg(&exe)
        .output()
        .expect("running the C compiler");
    if out.status.success() {
        Ok(exe)
    } else {
        Err(format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

fn test_rt() -> &'static Path {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| build("test_rt", &["-O2"]).unwrap_or_else(|e| panic!("{e}")))
}

/// Runs a scenario with exactly the given KLARAPTOR_* variables set.
fn run(exe: &Path, scenario: &str, env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(exe);
    cmd.arg(scenario);
    for v in SHIM_VARS {
        cmd.env_remove(v);
    }
    cmd.env("TMPDIR", env!("CARGO_TARGET_TMPDIR"));
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

fn text(b: &[u8]) -> String {
    without_program_block(&String::from_utf8_lossy(b))
}

/// Decision lines end with ` program_block=AxBxC` (the program's own block) when the
/// launch's dims were changed; the expectations below leave it out, and
/// `decisions_name_the_programs_own_block` checks it.
fn without_program_block(s: &str) -> String {
    s.lines()
        .map(|l| match l.find(" program_block=") {
            Some(i) => format!("{}\n", &l[..i]),
            None => format!("{l}\n"),
        })
        .collect()
}

#[test]
fn decisions_name_the_programs_own_block() {
    let o = run(test_rt(), "launch", &[("KLARAPTOR_LOG", "1")]);
    assert_ok(&o);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    let changed: Vec<&str> = err
        .lines()
        .filter(|l| l.contains(" source=model") || l.contains(" source=forced"))
        .collect();
    assert!(!changed.is_empty(), "{err}");
    for l in changed {
        assert!(l.contains(" program_block="), "{l}");
    }
    for l in err
        .lines()
        .filter(|l| l.contains(" source=fallback") || l.contains(" source=program"))
    {
        assert!(!l.contains(" program_block="), "{l}");
    }
}

fn assert_ok(o: &Output) {
    assert!(
        o.status.success(),
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        text(&o.stdout),
        text(&o.stderr)
    );
}

fn lines(v: &[&str]) -> String {
    v.iter().map(|l| format!("{l}\n")).collect()
}

/// What `test_rt launch` prints without any KLARAPTOR_* setting.
const LAUNCH_DEFAULT: &[&str] = &[
    "mm n=2048 block=32x4x1 grid=64x512x1",
    "mm n=2048 block=32x4x1 grid=64x512x1",
    "mm n=100 block=16x16x1 grid=7x7x1",
    "mm n=7 block=16x16x1 grid=128x128x1",
    "saxpy n=1000000 block=512x1x1 grid=1954x1x1",
    "nomodel n=100 m=50 block=32x16x1 grid=4x4x4",
    "tmpl len=1000 block=128x1x1 grid=8x1x1",
    "other n=100 block=100x1x1 grid=1x1x1",
    "unknown block=2x2x2 grid=2x2x2",
    "mm n_data=2 block=2x2x2 grid=2x2x2",
    "device1 mm n=2048 block=16x16x1 grid=128x128x1",
    "device1 other n=100 block=128x1x1 grid=1x1x1",
    "mm n=2048 block=32x4x1 grid=64x512x1",
    "memo=9 queries=1,1",
];

const LAUNCH_DEFAULT_LOG: &[&str] = &[
    "klaraptor: mm n=2048 block=32x4x1 grid=64x512x1 source=model device=0:NVIDIA H200",
    "klaraptor: mm n=100 block=16x16x1 grid=7x7x1 source=model device=0:NVIDIA H200",
    "klaraptor: mm n=7 block=16x16x1 grid=128x128x1 source=fallback: model block 8x1x1 \
     rejected: it violates the kernel's constraints device=0:NVIDIA H200",
    "klaraptor: saxpy n=1000000 block=512x1x1 grid=1954x1x1 source=model device=0:NVIDIA H200",
    "klaraptor: nomodel n=100 m=50 block=32x16x1 grid=4x4x4 source=program \
     device=0:NVIDIA H200",
    "klaraptor: ns::tmpl<float, 2> len=1000 d1=5 block=128x1x1 grid=8x1x1 source=program \
     device=0:NVIDIA H200",
    "klaraptor: other n=100 block=100x1x1 grid=1x1x1 source=fallback: no model for this device \
     (the model is for NVIDIA A100-SXM4-80GB) device=0:NVIDIA H200",
    "klaraptor: unknown kernel id _Z7unknownv: the launch keeps its dims",
    "klaraptor: mm: the launch passes 2 data values, the descriptor declares 1: the launch \
     keeps its dims",
    "klaraptor: mm n=2048 block=16x16x1 grid=128x128x1 source=fallback: no model for this \
     device (the model is for NVIDIA H200) device=1:NVIDIA A100-SXM4-80GB",
    "klaraptor: other n=100 block=128x1x1 grid=1x1x1 source=model \
     device=1:NVIDIA A100-SXM4-80GB",
];

/// `KLARAPTOR_MODEL_ABI_VERSION` of the runtime's header.
fn model_abi() -> i32 {
    let h = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("runtime-shim/include/klaraptor.h"),
    )
    .unwrap();
    h.lines()
        .find_map(|l| l.strip_prefix("#define KLARAPTOR_MODEL_ABI_VERSION "))
        .and_then(|v| v.trim().parse().ok())
        .expect("no KLARAPTOR_MODEL_ABI_VERSION in klaraptor.h")
}

#[test]
fn unit_cases() {
    let o = run(test_rt(), "unit", &[]);
    assert_ok(&o);
    assert_eq!(
        text(&o.stdout),
        lines(&[
            "ok model_and_grid",
            "ok registry",
            "ok force_parse",
            "ok force",
            "ok limits",
            "ok shmem",
            "ok model_fallbacks",
            "ok memo",
            "ok disable",
            "ok log_append",
            "ok threads",
            "all unit cases passed",
        ])
    );
    assert_eq!(
        text(&o.stderr),
        format!(
            "klaraptor: warning: ignoring the descriptor of kernel _Z4abi2v: ABI version 3, \
             this runtime has 2\nklaraptor: warning: ignoring the rational program of kernel \
             _Z5newerv for NVIDIA H200: model ABI version {newer}, this runtime has {ours} (the \
             objects were compiled by an older klaraptor-cc than the one that linked them: \
             compile them again)\n",
            newer = model_abi() + 1,
            ours = model_abi()
        )
    );
}

#[test]
fn launch_without_settings() {
    let o = run(test_rt(), "launch", &[]);
    assert_ok(&o);
    assert_eq!(text(&o.stdout), lines(LAUNCH_DEFAULT));
    assert_eq!(text(&o.stderr), "");
}

#[test]
fn launch_log_to_stderr() {
    for v in ["0", ""] {
        let o = run(test_rt(), "launch", &[("KLARAPTOR_LOG", v)]);
        assert_ok(&o);
        assert_eq!(text(&o.stderr), "", "KLARAPTOR_LOG={v:?}");
    }
    let o = run(test_rt(), "launch", &[("KLARAPTOR_LOG", "1")]);
    assert_ok(&o);
    assert_eq!(text(&o.stdout), lines(LAUNCH_DEFAULT));
    assert_eq!(text(&o.stderr), lines(LAUNCH_DEFAULT_LOG));
}

#[test]
fn launch_log_to_file_appends() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("decisions.log");
    std::fs::write(&log, "an earlier run\n").unwrap();
    let logs = log.to_str().unwrap();
    for _ in 0..2 {
        let o = run(test_rt(), "launch", &[("KLARAPTOR_LOG", logs)]);
        assert_ok(&o);
        assert_eq!(text(&o.stdout), lines(LAUNCH_DEFAULT));
        assert_eq!(text(&o.stderr), "");
    }
    let once = lines(LAUNCH_DEFAULT_LOG);
    assert_eq!(
        without_program_block(&std::fs::read_to_string(&log).unwrap()),
        format!("an earlier run\n{once}{once}")
    );

    // A log file that cannot be opened: a warning, then the lines go to stderr.
    let bad = dir.path().join("no/such/dir/x.log");
    let o = run(
        test_rt(),
        "launch",
        &[("KLARAPTOR_LOG", bad.to_str().unwrap())],
    );
    assert_ok(&o);
    assert_eq!(
        text(&o.stderr),
        format!(
            "klaraptor: warning: KLARAPTOR_LOG: cannot open {} (No such file or directory); \
             logging to stderr\n{once}",
            bad.display()
        )
    );
}

const FORCE: &str =
    "mm:64x2, _Z5saxpyfPKfPfi:128,nomodel:2048,ns::tmpl<float, 2>:32x1x1,bogus,mm:0x1,other:64";

const FORCE_WARNINGS: &[&str] = &[
    "klaraptor: warning: KLARAPTOR_FORCE: ignoring malformed entry \"bogus\" (expected \
     <kernel>:<bx>[x<by>[x<bz>]] with positive integers)",
    "klaraptor: warning: KLARAPTOR_FORCE: ignoring malformed entry \"mm:0x1\" (expected \
     <kernel>:<bx>[x<by>[x<bz>]] with positive integers)",
];

const FORCE_STDOUT: &[&str] = &[
    "mm n=2048 block=64x2x1 grid=32x1024x1",
    "mm n=2048 block=64x2x1 grid=32x1024x1",
    "mm n=100 block=64x2x1 grid=2x50x1",
    "mm n=7 block=64x2x1 grid=1x4x1",
    "saxpy n=1000000 block=128x1x1 grid=7813x1x1",
    "nomodel n=100 m=50 block=32x16x1 grid=4x4x4",
    "tmpl len=1000 block=32x1x1 grid=32x1x1",
    "other n=100 block=64x1x1 grid=2x1x1",
    "unknown block=2x2x2 grid=2x2x2",
    "mm n_data=2 block=2x2x2 grid=2x2x2",
    "device1 mm n=2048 block=64x2x1 grid=32x1024x1",
    "device1 other n=100 block=64x1x1 grid=2x1x1",
    "mm n=2048 block=64x2x1 grid=32x1024x1",
    "memo=9 queries=1,1",
];

/// The log of `test_rt launch` under KLARAPTOR_FORCE=[`FORCE`].
const FORCE_LOG: &[&str] = &[
    "klaraptor: mm n=2048 block=64x2x1 grid=32x1024x1 source=forced device=0:NVIDIA H200",
    "klaraptor: mm n=100 block=64x2x1 grid=2x50x1 source=forced device=0:NVIDIA H200",
    "klaraptor: mm n=7 block=64x2x1 grid=1x4x1 source=forced device=0:NVIDIA H200",
    "klaraptor: saxpy n=1000000 block=128x1x1 grid=7813x1x1 source=forced \
     device=0:NVIDIA H200",
    "klaraptor: nomodel n=100 m=50 block=32x16x1 grid=4x4x4 source=fallback: forced \
     block 2048x1x1 rejected: block x 2048 exceeds the device's limit of 1024 \
     device=0:NVIDIA H200",
    "klaraptor: ns::tmpl<float, 2> len=1000 d1=5 block=32x1x1 grid=32x1x1 \
     source=forced device=0:NVIDIA H200",
    "klaraptor: other n=100 block=64x1x1 grid=2x1x1 source=forced device=0:NVIDIA H200",
    "klaraptor: unknown kernel id _Z7unknownv: the launch keeps its dims",
    "klaraptor: mm: the launch passes 2 data values, the descriptor declares 1: the \
     launch keeps its dims",
    "klaraptor: mm n=2048 block=64x2x1 grid=32x1024x1 source=forced \
     device=1:NVIDIA A100-SXM4-80GB",
    "klaraptor: other n=100 block=64x1x1 grid=2x1x1 source=forced \
     device=1:NVIDIA A100-SXM4-80GB",
];

#[test]
fn launch_forced() {
    // Without a log: the malformed entries and the illegal forced shape are still reported.
    let o = run(test_rt(), "launch", &[("KLARAPTOR_FORCE", FORCE)]);
    assert_ok(&o);
    assert_eq!(text(&o.stdout), lines(FORCE_STDOUT));
    let mut want = FORCE_WARNINGS.to_vec();
    want.push(
        "klaraptor: warning: nomodel: KLARAPTOR_FORCE forced block 2048x1x1 rejected: block x \
         2048 exceeds the device's limit of 1024",
    );
    assert_eq!(text(&o.stderr), lines(&want));

    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("force.log");
    let o = run(
        test_rt(),
        "launch",
        &[
            ("KLARAPTOR_FORCE", FORCE),
            ("KLARAPTOR_LOG", log.to_str().unwrap()),
        ],
    );
    assert_ok(&o);
    assert_eq!(text(&o.stdout), lines(FORCE_STDOUT));
    assert_eq!(text(&o.stderr), lines(FORCE_WARNINGS));
    assert_eq!(
        without_program_block(&std::fs::read_to_string(&log).unwrap()),
        lines(FORCE_LOG)
    );
}

#[test]
fn launch_disabled() {
    let program: Vec<&str> = vec![
        "mm n=2048 block=16x16x1 grid=128x128x1",
        "mm n=2048 block=16x16x1 grid=128x128x1",
        "mm n=100 block=16x16x1 grid=128x128x1",
        "mm n=7 block=16x16x1 grid=128x128x1",
        "saxpy n=1000000 block=256x1x1 grid=3907x1x1",
        "nomodel n=100 m=50 block=32x16x1 grid=4x4x4",
        "tmpl len=1000 block=128x1x1 grid=8x1x1",
        "other n=100 block=100x1x1 grid=1x1x1",
        "unknown block=2x2x2 grid=2x2x2",
        "mm n_data=2 block=2x2x2 grid=2x2x2",
        "device1 mm n=2048 block=16x16x1 grid=128x128x1",
        "device1 other n=100 block=100x1x1 grid=1x1x1",
        "mm n=2048 block=16x16x1 grid=128x128x1",
        "memo=0 queries=0,0",
    ];
    // DISABLE wins over FORCE; no device is ever asked about.
    for v in ["1", "yes"] {
        let o = run(
            test_rt(),
            "launch",
            &[
                ("KLARAPTOR_DISABLE", v),
                ("KLARAPTOR_FORCE", "mm:64x2"),
                ("KLARAPTOR_LOG", "1"),
            ],
        );
        assert_ok(&o);
        assert_eq!(text(&o.stdout), lines(&program));
        assert_eq!(
            text(&o.stderr),
            "klaraptor: KLARAPTOR_DISABLE is set: every launch keeps the program's dims\n"
        );
    }
    let o = run(test_rt(), "launch", &[("KLARAPTOR_DISABLE", "0")]);
    assert_ok(&o);
    assert_eq!(text(&o.stdout), lines(LAUNCH_DEFAULT));
}

/// The environment is read at the first launch (a program may set it in main), and the
/// first registration, a constructor, warms that read and the first decision's code with the
/// environment the process started with (klaraptor_rt.c: warm_up): what main sets, or
/// unsets, before the first launch is what the runtime obeys.
#[test]
fn environment_set_in_main_is_obeyed() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("main.log");
    let stale = dir.path().join("stale.log");
    // Other values when the process starts; main sets the log and FORCE.
    let o = run(
        test_rt(),
        "env_in_main",
        &[
            ("KLARAPTOR_LOG", stale.to_str().unwrap()),
            ("KLARAPTOR_FORCE", "mm:16x16,bogus start"),
            ("TEST_RT_MAIN_LOG", log.to_str().unwrap()),
            ("TEST_RT_MAIN_FORCE", FORCE),
        ],
    );
    assert_ok(&o);
    assert_eq!(
        text(&o.stdout),
        format!("warmed=1\n{}", lines(FORCE_STDOUT))
    );
    assert_eq!(text(&o.stderr), lines(FORCE_WARNINGS));
    assert_eq!(
        without_program_block(&std::fs::read_to_string(&log).unwrap()),
        lines(FORCE_LOG)
    );
    assert!(!stale.exists(), "{} was created", stale.display());

    // Set when the process starts, unset by main: none of them counts.
    let o = run(
        test_rt(),
        "env_in_main",
        &[
            ("KLARAPTOR_LOG", stale.to_str().unwrap()),
            ("KLARAPTOR_FORCE", "mm:64x2,bogus"),
            ("KLARAPTOR_DISABLE", "1"),
            ("KLARAPTOR_REFINE", "bogus"),
            ("KLARAPTOR_REFINE_BUDGET", "bogus"),
        ],
    );
    assert_ok(&o);
    assert_eq!(
        text(&o.stdout),
        format!("warmed=1\n{}", lines(LAUNCH_DEFAULT))
    );
    assert_eq!(text(&o.stderr), "");
    assert!(!stale.exists(), "{} was created", stale.display());
}

/// A program that never launches leaves no trace of the warm-up at registration, whatever
/// its environment: no log file created or opened, no warning, no choices directory.
/// The first rational program registered before main is run once then (its choice and its
/// profiled best), on a made-up device of its GPU's kind, so that the first decision finds
/// its code warm; not with KLARAPTOR_DISABLE, and never on a device of another name.
#[test]
fn the_first_model_is_warmed_before_main() {
    let o = run(test_rt(), "model_warm", &[]);
    assert_ok(&o);
    assert_eq!(
        text(&o.stdout),
        "model_warm select=1 profiled_best=1 device=NVIDIA H200 sms=132\n"
    );
    assert_eq!(text(&o.stderr), "");
    let o = run(test_rt(), "model_warm", &[("KLARAPTOR_DISABLE", "1")]);
    assert_ok(&o);
    assert_eq!(
        text(&o.stdout),
        "model_warm select=0 profiled_best=0 device= sms=0\n"
    );
}

#[test]
fn warm_up_at_registration_leaves_no_trace() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("never.log");
    let unopenable = dir.path().join("no/such/dir/never.log");
    let choices = dir.path().join("choices");
    let (log, unopenable, choices_s) = (
        log.to_str().unwrap(),
        unopenable.to_str().unwrap(),
        choices.to_str().unwrap(),
    );
    let settings: [&[(&str, &str)]; 4] = [
        &[
            ("KLARAPTOR_LOG", log),
            ("KLARAPTOR_FORCE", "bogus,mm:0x1,mm:64x2"),
            ("KLARAPTOR_REFINE", "bogus"),
            ("KLARAPTOR_REFINE_BUDGET", "bogus"),
            ("KLARAPTOR_CHOICES", choices_s),
        ],
        &[("KLARAPTOR_LOG", log), ("KLARAPTOR_DISABLE", "1")],
        &[
            ("KLARAPTOR_LOG", "1"),
            ("KLARAPTOR_DISABLE", "1"),
            ("KLARAPTOR_FORCE", "bogus"),
        ],
        &[("KLARAPTOR_LOG", unopenable), ("KLARAPTOR_FORCE", "bogus")],
    ];
    for env in settings {
        let o = run(test_rt(), "no_launch", env);
        assert_ok(&o);
        assert_eq!(text(&o.stdout), "warmed=1\n", "{env:?}");
        assert_eq!(text(&o.stderr), "", "{env:?}");
        assert!(
            !Path::new(log).exists(),
            "{env:?}: the log file was created"
        );
        assert!(
            !choices.exists(),
            "{env:?}: the choices directory was created"
        );
    }
}

#[test]
fn concurrent_launches() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("threads.log");
    let o = run(
        test_rt(),
        "threads",
        &[("KLARAPTOR_LOG", log.to_str().unwrap())],
    );
    assert_ok(&o);
    assert_eq!(
        text(&o.stdout),
        "threads=8 iterations=20000 keys=97 memo=97 mismatches=0\n"
    );
    // Every key decided and logged exactly once.
    let logged = without_program_block(&std::fs::read_to_string(&log).unwrap());
    let mut all: Vec<&str> = logged.lines().collect();
    assert_eq!(all.len(), 97);
    all.sort();
    all.dedup();
    assert_eq!(all.len(), 97);
    assert!(all.iter().all(|l| l.ends_with(" device=0:NVIDIA H200")));
    // mm's model picks 8x1 for n=38 (key 1), which its constraints refuse.
    let model = all.iter().filter(|l| l.contains(" source=model ")).count();
    assert_eq!(model, 96, "{logged}");
    assert!(logged.contains(
        "klaraptor: mm n=38 block=1x1x1 grid=1x1x1 source=fallback: model block 8x1x1 rejected"
    ));
}

#[test]
fn default_device_query_through_cudart() {
    let o = run(test_rt(), "cudart", &[("KLARAPTOR_LOG", "1")]);
    assert_ok(&o);
    assert_eq!(
        text(&o.stdout),
        lines(&[
            "probe n=1000 block=96x1x1 grid=11x1x1",
            "device 0 \"NVIDIA H200\" sms=132 warp=32 threads/block=1024 block=1024x1024x64 \
             grid=2147483647x65535x65535 threads/sm=2048 blocks/sm=32 regs/sm=65536 \
             regs/block=65536 smem/block=49152 smem/block-optin=232448 smem/sm=233472 cc=9.0",
            "device1 probe n=1000 block=1x1x1 grid=1x1x1",
            "no device probe n=1000 block=1x1x1 grid=1x1x1",
            "last error after a failed cudaGetDevice: 0",
            "bad attribute probe n=1000 block=1x1x1 grid=1x1x1",
            "last error after a failed attribute: 0",
        ])
    );
    assert_eq!(
        text(&o.stderr),
        lines(&[
            "klaraptor: probe n=1000 block=96x1x1 grid=11x1x1 source=model device=0:NVIDIA H200",
            "klaraptor: probe n=1000 block=1x1x1 grid=1x1x1 source=fallback: no model for this \
             device (the model is for NVIDIA H200) device=1:NVIDIA A100-SXM4-80GB",
            "klaraptor: probe n=1000 block=1x1x1 grid=1x1x1 source=fallback: no current device \
             (error 100) device=-1:unknown",
            "klaraptor: probe n=1000 block=1x1x1 grid=1x1x1 source=fallback: device query \
             failed: cudaDeviceGetAttribute(106) on device 0: invalid argument device=0:unknown",
        ])
    );
}

/// The lock-free read paths under ThreadSanitizer, where the compiler has it.
#[test]
fn concurrent_launches_under_thread_sanitizer() {
    let exe = match build("test_rt_tsan", &["-O1", "-g", "-fsanitize=thread"]) {
        Ok(exe) => exe,
        Err(e) => {
            eprintln!("skipped: no ThreadSanitizer build here:\n{e}");
            return;
        }
    };
    let o = run(&exe, "threads", &[]);
    let err = text(&o.stderr);
    if err.contains("unexpected memory mapping") {
        eprintln!("skipped: ThreadSanitizer cannot run here:\n{err}");
        return;
    }
    assert_ok(&o);
    assert!(!err.contains("ThreadSanitizer"), "{err}");
    assert_eq!(
        text(&o.stdout),
        "threads=8 iterations=20000 keys=97 memo=97 mismatches=0\n"
    );
}

/// build.rs leaves the archive the driver embeds; it defines the interface and leaves the
/// CUDA runtime to the final link.
#[test]
fn archive_for_the_driver() {
    let archive = Path::new(env!("OUT_DIR")).join("libklaraptor_rt.a");
    assert!(archive.is_file(), "{}", archive.display());
    let o = Command::new("nm").arg(&archive).output().unwrap();
    assert!(o.status.success());
    let syms = text(&o.stdout);
    for def in [
        " T klaraptor_select",
        " T klaraptor_register",
        " T klaraptor_launch_begin",
        " T klaraptor_launch_end",
    ] {
        assert!(syms.contains(def), "{def} missing:\n{syms}");
    }
    for undef in [
        " U cudaGetDevice",
        " U cudaDeviceGetAttribute",
        " U cudaGetDeviceProperties",
        " U cudaEventRecord",
        " U cudaEventQuery",
        " U cudaStreamIsCapturing",
    ] {
        assert!(syms.contains(undef), "{undef} missing:\n{syms}");
    }
    // Refinement never waits for the GPU: the runtime's object references no synchronisation
    // (the launch entry point's measuring mode, KLARAPTOR_LAUNCH_TIMES, may, in
    // klaraptor_prof.c).
    let rt_object: String = syms
        .split("\n\n")
        .filter(|part| part.contains("klaraptor_rt.o:"))
        .collect();
    assert!(rt_object.contains(" T klaraptor_select"), "{syms}");
    assert!(
        !rt_object.contains("Synchronize"),
        "a synchronisation referenced by the runtime:\n{rt_object}"
    );
}

// ---------------------------------------------------------------------------------------------
// The profiling runtime (klaraptor_prof.c): sweeps and their progress reports
// (KLARAPTOR_PROGRESS), with runtime-shim/tests/test_prof.c as the program and
// runtime-shim/tests/fake_collector.c in the collector's place.

/// test_prof and the fake collector, built once.
fn prof_build() -> &'static (PathBuf, PathBuf) {
    static BUILT: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    BUILT.get_or_init(|| {
        common::build_test_prof(&Path::new(env!("CARGO_TARGET_TMPDIR")).join("runtime-shim"))
    })
}

/// A fresh directory for one case: records/, the plan (vadd: 32, 96 and 2048 threads, then
/// 64), and where the progress goes.
fn prof_case(name: &str) -> (PathBuf, PathBuf, PathBuf, PathBuf) {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("prof-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    let records = dir.join("records");
    std::fs::create_dir_all(&records).unwrap();
    let plan = dir.join("plan.txt");
    std::fs::write(
        &plan,
        "# klaraptor sampling plan\n_Z4vaddPfi 32x1x1 96x1x1 2048x1x1 64x1x1\n",
    )
    .unwrap();
    let progress = dir.join("progress.tsv");
    (dir, records, plan, progress)
}

fn run_prof(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(&prof_build().0);
    cmd.args(args);
    for v in [
        "KLARAPTOR_FORCE",
        "KLARAPTOR_DISABLE",
        "KLARAPTOR_LOG",
        "KLARAPTOR_PROFILE_OUT",
        "KLARAPTOR_PROFILE_PLAN",
        "KLARAPTOR_COLLECTOR",
        "KLARAPTOR_PROGRESS",
        "KLARAPTOR_PROFILE_MAX_SIZES",
        "FAKE_COLLECTOR_FAIL",
        "FAKE_COLLECTOR_SILENT_LAST",
        "FAKE_COLLECTOR_CALLS",
        "KLARAPTOR_PROFILE_PREFETCH",
    ] {
        cmd.env_remove(v);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

/// The progress lines with the elapsed milliseconds (last field of shape and end lines)
/// replaced by "MS", after checking that they are numbers that never decrease in a sweep.
fn progress_lines(text: &str) -> Vec<String> {
    let mut last = 0.0f64;
    text.lines()
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            match f[0] {
                "sweep" => {
                    last = 0.0;
                    l.to_string()
                }
                "shape" | "end" => {
                    let ms: f64 = f
                        .last()
                        .unwrap()
                        .parse()
                        .unwrap_or_else(|_| panic!("{l:?}"));
                    assert!(ms >= last, "{l:?} after {last} ms");
                    last = ms;
                    format!("{}\tMS", f[..f.len() - 1].join("\t"))
                }
                _ => panic!("not a progress line: {l:?}"),
            }
        })
        .collect()
}

fn sweep_of(n: &str, shapes: &[(&str, &str)], ok: usize, not_ok: usize) -> Vec<String> {
    let mut v = vec![format!("sweep\tvadd\t{n}\t{}", shapes.len())];
    for (i, (block, status)) in shapes.iter().enumerate() {
        v.push(format!(
            "shape\tvadd\t{n}\t{}\t{}\t{block}\t{status}\tMS",
            i + 1,
            shapes.len()
        ));
    }
    v.push(format!("end\tvadd\t{n}\t{ok}\t{not_ok}\tMS"));
    v
}

#[test]
fn profiling_progress_in_launch_mode_reports_every_planned_shape() {
    let (_dir, records, plan, progress) = prof_case("launch");
    let o = run_prof(
        &["1000", "1000", "5000"],
        &[
            ("KLARAPTOR_PROFILE_OUT", records.to_str().unwrap()),
            ("KLARAPTOR_PROFILE_PLAN", plan.to_str().unwrap()),
            ("KLARAPTOR_COLLECTOR", "launch"),
            ("KLARAPTOR_PROGRESS", progress.to_str().unwrap()),
        ],
    );
    assert_ok(&o);
    // 2048 threads is over the device's limit: rejected before any launch, so it comes first;
    // 96 threads "fails" in the fake launch entry point. The repeated size is not swept again.
    let shapes = [
        ("2048x1x1", "rejected"),
        ("32x1x1", "launched"),
        ("96x1x1", "failed"),
        ("64x1x1", "launched"),
    ];
    let mut want = sweep_of("1000", &shapes, 2, 2);
    want.extend(sweep_of("5000", &shapes, 2, 2));
    let got = progress_lines(&std::fs::read_to_string(&progress).unwrap());
    assert_eq!(got, want);
    assert_eq!(
        text(&o.stdout),
        lines(&[
            "vadd n=1000 block=256 rc=0",
            "vadd n=1000 block=256 rc=0",
            "vadd n=5000 block=256 rc=0",
            // per size: 32, 64 and 96 once in the sweep; 256 three times (the program).
            "launches: 32=2 64=2 96=2 256=3",
        ])
    );
    // The driver reads every line the runtime writes.
    let text = std::fs::read_to_string(&progress).unwrap();
    let events = klaraptor_profiler::plan::ProgressReader::default().feed(text.as_bytes());
    assert_eq!(events.len(), text.lines().count());
}

#[test]
fn profiling_progress_follows_the_collectors_reports() {
    let (_dir, records, plan, progress) = prof_case("collector");
    let lib = prof_build().1.to_str().unwrap();
    let env = |silent: &'static str| {
        vec![
            ("KLARAPTOR_PROFILE_OUT", records.to_str().unwrap()),
            ("KLARAPTOR_PROFILE_PLAN", plan.to_str().unwrap()),
            ("KLARAPTOR_COLLECTOR", lib),
            ("KLARAPTOR_PROGRESS", progress.to_str().unwrap()),
            ("FAKE_COLLECTOR_SILENT_LAST", silent),
        ]
    };
    let o = run_prof(&["1000"], &env("0"));
    assert_ok(&o);
    let shapes = [
        ("2048x1x1", "rejected"),
        ("32x1x1", "ok"),
        ("96x1x1", "failed"),
        ("64x1x1", "ok"),
    ];
    assert_eq!(
        progress_lines(&std::fs::read_to_string(&progress).unwrap()),
        sweep_of("1000", &shapes, 2, 2)
    );
    // The collector wrote its three lines, the runtime the rejected shape's.
    let jsonl: Vec<_> = std::fs::read_dir(&records)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    assert_eq!(jsonl.len(), 1, "{jsonl:?}");
    assert_eq!(
        std::fs::read_to_string(&jsonl[0]).unwrap().lines().count(),
        4
    );

    // A collector that does not report its last shape: the runtime reports it, as failed.
    std::fs::remove_file(&progress).unwrap();
    let o = run_prof(&["2000"], &env("1"));
    assert_ok(&o);
    let shapes = [
        ("2048x1x1", "rejected"),
        ("32x1x1", "ok"),
        ("96x1x1", "failed"),
        ("64x1x1", "failed"),
    ];
    assert_eq!(
        progress_lines(&std::fs::read_to_string(&progress).unwrap()),
        sweep_of("2000", &shapes, 1, 3)
    );
}

/// The collector is started ahead, on a thread of the runtime's own, as the program starts
/// (its libraries take 150-170 ms on an H200): the first sweep finds it started; with
/// KLARAPTOR_PROFILE_PREFETCH=0 the first sweep starts it.
#[test]
fn profiling_starts_the_collector_ahead_unless_told_not_to() {
    let (dir, records, plan, _progress) = prof_case("prefetch");
    let lib = prof_build().1.to_str().unwrap().to_string();
    let calls = dir.join("calls.txt");
    for (prefetch, expect) in [(None, "prepare\ncollect\n"), (Some("0"), "collect\n")] {
        let _ = std::fs::remove_file(&calls);
        let mut env = vec![
            ("KLARAPTOR_PROFILE_OUT", records.to_str().unwrap()),
            ("KLARAPTOR_PROFILE_PLAN", plan.to_str().unwrap()),
            ("KLARAPTOR_COLLECTOR", lib.as_str()),
            ("FAKE_COLLECTOR_CALLS", calls.to_str().unwrap()),
        ];
        if let Some(v) = prefetch {
            env.push(("KLARAPTOR_PROFILE_PREFETCH", v));
        }
        let o = run_prof(&["1000"], &env);
        assert_ok(&o);
        assert_eq!(
            std::fs::read_to_string(&calls).unwrap(),
            expect,
            "KLARAPTOR_PROFILE_PREFETCH={prefetch:?}"
        );
    }
    // Without a plan for the program's kernels (or without profiling) nothing is started.
    let _ = std::fs::remove_file(&calls);
    let o = run_prof(
        &["1000"],
        &[
            ("KLARAPTOR_COLLECTOR", lib.as_str()),
            ("FAKE_COLLECTOR_CALLS", calls.to_str().unwrap()),
        ],
    );
    assert_ok(&o);
    assert!(!calls.exists());
}

#[test]
fn profiling_progress_when_the_collector_fails_or_is_missing() {
    let (_dir, records, plan, progress) = prof_case("broken");
    let lib = prof_build().1.to_str().unwrap().to_string();
    let base = [
        ("KLARAPTOR_PROFILE_OUT", records.to_str().unwrap()),
        ("KLARAPTOR_PROFILE_PLAN", plan.to_str().unwrap()),
        ("KLARAPTOR_PROGRESS", progress.to_str().unwrap()),
    ];
    let shapes = [
        ("2048x1x1", "rejected"),
        ("32x1x1", "failed"),
        ("96x1x1", "failed"),
        ("64x1x1", "failed"),
    ];
    let mut env = base.to_vec();
    env.extend([
        ("KLARAPTOR_COLLECTOR", lib.as_str()),
        ("FAKE_COLLECTOR_FAIL", "1"),
    ]);
    let o = run_prof(&["1000"], &env);
    assert_ok(&o);
    let err = text(&o.stderr);
    assert!(
        err.contains("klaraptor-profile: the collector failed on vadd"),
        "{err}"
    );
    assert_eq!(
        progress_lines(&std::fs::read_to_string(&progress).unwrap()),
        sweep_of("1000", &shapes, 0, 4)
    );

    std::fs::remove_file(&progress).unwrap();
    let mut env = base.to_vec();
    env.push((
        "KLARAPTOR_COLLECTOR",
        "/nonexistent/libklaraptor_collector.so",
    ));
    let o = run_prof(&["3000"], &env);
    assert_ok(&o);
    assert!(
        text(&o.stderr).contains("cannot load the collector"),
        "{}",
        text(&o.stderr)
    );
    assert_eq!(
        progress_lines(&std::fs::read_to_string(&progress).unwrap()),
        sweep_of("3000", &shapes, 0, 4)
    );
}

#[test]
fn profiling_progress_goes_to_a_file_descriptor_or_nowhere() {
    let (dir, records, plan, progress) = prof_case("fd");
    let base = [
        ("KLARAPTOR_PROFILE_OUT", records.to_str().unwrap()),
        ("KLARAPTOR_PROFILE_PLAN", plan.to_str().unwrap()),
        ("KLARAPTOR_COLLECTOR", "launch"),
    ];
    // fd:2: on stderr, among the program's own messages.
    let mut env = base.to_vec();
    env.push(("KLARAPTOR_PROGRESS", "fd:2"));
    let o = run_prof(&["1000"], &env);
    assert_ok(&o);
    let err = text(&o.stderr);
    let got: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("sweep\t") || l.starts_with("shape\t") || l.starts_with("end\t"))
        .collect();
    assert_eq!(got.len(), 6, "{err}");
    // Not set: no file, no lines; a bad descriptor: a warning, and the program runs.
    let mut env = base.to_vec();
    env.push(("KLARAPTOR_PROFILE_MAX_SIZES", "4"));
    let o = run_prof(&["2000"], &env);
    assert_ok(&o);
    assert_eq!(text(&o.stderr), "");
    assert!(!progress.exists());
    let mut env = base.to_vec();
    env.push(("KLARAPTOR_PROGRESS", "fd:999"));
    let o = run_prof(&["3000"], &env);
    assert_ok(&o);
    assert_eq!(
        text(&o.stderr),
        "klaraptor-profile: KLARAPTOR_PROGRESS=fd:999 is not an open file descriptor; no \
         progress reports\n"
    );
    // A progress file that cannot be created: a warning, and the profile goes on.
    let mut env = base.to_vec();
    let bad = dir.join("no-such-dir/progress.tsv");
    env.push(("KLARAPTOR_PROGRESS", bad.to_str().unwrap()));
    let o = run_prof(&["4000"], &env);
    assert_ok(&o);
    assert!(
        text(&o.stderr).contains("cannot write the progress file"),
        "{}",
        text(&o.stderr)
    );
    assert!(std::fs::read_dir(&records).unwrap().count() > 0);
}

/// Runs runtime-shim/tests/test_refine.c in a fresh scratch directory.
fn run_refine(exe: &Path, scenario: &str) -> Output {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("runtime-shim")
        .join(format!(
            "refine-{}-{scenario}",
            exe.file_name().unwrap().to_string_lossy()
        ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut cmd = Command::new(exe);
    cmd.arg(scenario).arg(&dir);
    for v in SHIM_VARS {
        cmd.env_remove(v);
    }
    cmd.output().unwrap()
}

fn test_refine() -> &'static Path {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| {
        build_test("test_refine.c", "test_refine", &["-O2"]).unwrap_or_else(|e| panic!("{e}"))
    })
}

/// Refinement against the fake GPU: the order of the paired comparisons and their quadruples,
/// verdicts and settling, results read only when ready (no synchronisation: the fake counts
/// every wait), a new key's shapes evaluated once (the decision's ranking reused by the
/// setup), stream capture, a failing challenger, the neighbour walk, the spanning rule,
/// the cap on keys refining at once, KLARAPTOR_REFINE, the choices cache with its evidence
/// (written, read back, a damaged file, an unwritable directory, a file of the older rule, a
/// claimed gain without evidence), two threads on two streams, the budget, progress kept
/// across runs, two GPUs, shared memory; and the launch patterns of real programs: a noise
/// matrix (false switches at most 1 %, a 10 % gain found), the program's shape best by 3-5 %
/// under drift (kept), a short kernel between drifting host gaps (never 3 % slower than the
/// program's shape), Gaussian elimination's two kernels with synchronisations and shrinking
/// work, a key launched ten times a run, a key whose faster shape changes over the run (judged
/// over the run with the cache; by the run's start without), a key whose run's first launches
/// are not its run, runs longer than the last, a cache that cannot be written, a part of the
/// run never timed, short kernels timed
/// behind the gate (and without it, where the driver refuses it), and unmeasurable and
/// undecided keys.
#[test]
fn refinement_cases() {
    let o = run_refine(test_refine(), "unit");
    let err = text(&o.stderr);
    assert!(o.status.success(), "{}{err}", text(&o.stdout));
    assert_eq!(
        text(&o.stdout),
        lines(&[
            "ok order",
            "ok deferred",
            "ok ranked_once",
            "ok capture",
            "ok failed",
            "ok walk",
            "ok span",
            "ok many_keys",
            "ok controls",
            "ok cache",
            "ok old_rule",
            "ok threads",
            "ok budget",
            "ok progress",
            "ok devices",
            "ok shmem",
            "ok noise",
            "ok drift_keep",
            "ok host_gaps",
            "ok elimination",
            "ok ten",
            "ok crossover",
            "ok run_start",
            "ok run_lengths",
            "ok short_gated",
            "ok undecided",
            "all refinement cases passed",
        ])
    );
    // Exactly one warning for the damaged file, one for the unwritable directory, one for the
    // claimed gain without evidence, one for the damaged progress file and one for the
    // directory below a regular file.
    let warnings: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("klaraptor: warning:"))
        .collect();
    assert_eq!(warnings.len(), 5, "{err}");
    assert!(
        warnings[0].contains("ignoring the damaged choices cache file")
            && warnings[0].contains("/choices-damaged/stencil-"),
        "{err}"
    );
    assert!(
        warnings[1].contains("cannot write the choices cache in /proc/klaraptor-no-such-dir"),
        "{err}"
    );
    assert!(
        warnings[2].contains("/choices-old/stencil-")
            && warnings[2]
                .contains("(it claims a gain without the paired comparisons that show it)"),
        "{err}"
    );
    assert!(
        warnings[3].contains("/choices-progress-damaged/stencil-")
            && warnings[3].contains(".progress (a candidate line cannot be read)"),
        "{err}"
    );
    assert!(
        warnings[4].contains("cannot write the choices cache in ")
            && warnings[4].contains("/a-file/sub (Not a directory)"),
        "{err}"
    );
}

/// Two processes settling the same key at once write the choices cache atomically: a third
/// reading it meanwhile never sees half a file, and no temporary file is left.
#[test]
fn refinement_cache_shared_by_processes() {
    let o = run_refine(test_refine(), "processes");
    assert!(o.status.success(), "{}{}", text(&o.stdout), text(&o.stderr));
    assert_eq!(text(&o.stdout), "ok processes\n");
}

/// Refinement's state under ThreadSanitizer (two threads, two streams), where the compiler
/// has it.
#[test]
fn refinement_under_thread_sanitizer() {
    let exe = match build_test(
        "test_refine.c",
        "test_refine_tsan",
        &["-O1", "-g", "-fsanitize=thread"],
    ) {
        Ok(exe) => exe,
        Err(e) => {
            eprintln!("skipped: no ThreadSanitizer build here:\n{e}");
            return;
        }
    };
    let o = run_refine(&exe, "unit");
    let err = text(&o.stderr);
    if err.contains("unexpected memory mapping") {
        eprintln!("skipped: ThreadSanitizer cannot run here:\n{err}");
        return;
    }
    assert!(o.status.success(), "{err}");
    assert!(!err.contains("ThreadSanitizer"), "{err}");
}
