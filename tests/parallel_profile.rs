//! `make -j` on a GPU machine, without a GPU: the driver's profiling step
//! (profiler/src/gpu_profile.rs) with its real recipe runs, the real profiling runtime
//! (runtime-shim/src/klaraptor_prof.c, in runtime-shim/tests/test_prof.c's program) and
//! runtime-shim/tests/fake_collector.c in the collector's place, standing in for the GPU: it
//! can answer as the CUPTI collector does when another process holds the GPU's counters
//! (`CUPTI_ERROR_HARDWARE_BUSY`), and it logs when each request "used the GPU".
//!
//! - a GPU busy for some shapes: nothing stored as complete, the entry is kept as
//!   incomplete, listed and pruned by `klaraptor profile`, the warning quotes the
//!   collector's error with the kernel, size and shape, and the next link profiles again;
//! - a GPU busy for a while: the run is tried again and the profile is complete;
//! - a collector that cannot be loaded, and a kernel the recipe never launches: each warning
//!   says what really happened;
//! - two processes contending for the GPU's lock: their GPU work never overlaps, and the
//!   second reuses the entry the first stored for the kernel both need;
//! - shapes that fault (an illegal address loses the process's CUDA context): the profiling
//!   runtime stops the run at the fault, the driver restarts it without the shapes done, the
//!   profile is complete with the faulting shapes recorded as such, and the model never
//!   chooses them; past the bound on restarts the shapes left are recorded as not measured;
//! - a `{SIZES}` recipe: one process for every profile size (more than the runtime's default
//!   four), each size's samples recorded; its faults resumed size after size, with the bound
//!   on restarts per size; a size it never reaches named in the incomplete entry's reason.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use klaraptor_profiler::db::{ProfileDb, Status};
use klaraptor_profiler::gpu_profile::{self, Outcome, Settings, Target};
use klaraptor_profiler::profile_cmd::{execute, ProfileCommand};
use klaraptor_profiler::record::{self, DeviceId, Sample};
use klaraptor_spec::link::LinkSpec;

const GPU_UUID: &str = "GPU-00000000-1111-2222-3333-444444444444";

/// test_prof (the profiling runtime with a fake CUDA runtime; its kernel is `vadd`) and the
/// fake collector, built once per test process.
fn built() -> &'static (PathBuf, PathBuf) {
    static BUILT: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    BUILT.get_or_init(|| {
        common::build_test_prof(
            &Path::new(env!("CARGO_TARGET_TMPDIR")).join("parallel-profile-bin"),
        )
    })
}

/// The kernel of test_prof, profiled at n = 1000 and 5000 by `recipe` (`{n}` in it).
fn vadd(code_hash: &str, recipe: &str, build_dir: &Path) -> LinkSpec {
    LinkSpec {
        shmem: None,
        name: "vadd".into(),
        mangled: "_Z4vaddPfi".into(),
        data: vec!["n".into()],
        dim: 1,
        grid: vec![],
        block: vec![],
        profile_run: Some(recipe.into()),
        profile_sizes: vec![vec![1000], vec![5000]],
        code_hash: code_hash.into(),
        annotated_at: "vadd.cu:3:9".into(),
        build_dir: build_dir.to_path_buf(),
    }
}

fn device() -> DeviceId {
    DeviceId {
        name: "NVIDIA Test GPU".into(),
        uuid: GPU_UUID.into(),
        cc: "9.0".into(),
        sm_count: 132,
    }
}

/// A link's profiling step on the fake GPU: `dir` holds the database (db/), the locks
/// (locks/) and this link's scratch (`scratch`).
fn profile(
    dir: &Path,
    scratch: &str,
    collector: &Path,
    settings: Settings,
    specs: &[&LinkSpec],
) -> Vec<Outcome> {
    let db = ProfileDb::open(dir.join("db")).unwrap();
    let scratch = dir.join(scratch);
    std::fs::create_dir_all(&scratch).unwrap();
    let plan = scratch.join("plan");
    let owned: Vec<LinkSpec> = specs.iter().map(|s| (*s).clone()).collect();
    std::fs::write(&plan, klaraptor_profiler::plan::plan_file(&owned)).unwrap();
    let dev = device();
    let target = Target {
        db: &db,
        device: &dev,
        driver_version: "580.00",
        cuda_version: "13.0",
        lock_dir: &dir.join("locks"),
        scratch: &scratch,
        plan: &plan,
        collector: collector.to_str().unwrap(),
        runs: 1,
        warmup: 0,
        verbose: false,
        settings,
    };
    gpu_profile::profile_kernels(&target, specs).unwrap()
}

fn quick(busy_bound_ms: u64) -> Settings {
    Settings {
        wait_bound: Duration::from_secs(120),
        busy_bound: Duration::from_millis(busy_bound_ms),
        first_backoff: Duration::from_millis(50),
        max_restarts: gpu_profile::DEFAULT_RESTARTS,
    }
}

fn fresh(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("parallel-profile-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The intervals the fake collector logged: (pid, start ns, stop ns).
fn intervals(log: &Path) -> Vec<(u32, i128, i128)> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            (
                f[0].parse().unwrap(),
                f[1].parse().unwrap(),
                f[2].parse().unwrap(),
            )
        })
        .collect()
}

fn run_cmd(db: &ProfileDb, command: ProfileCommand) -> String {
    let mut out = String::new();
    execute(db, &command, &mut out).unwrap();
    out
}

#[test]
fn a_gpu_busy_for_some_shapes_stores_nothing_as_complete_and_says_why() {
    let (exe, lib) = built();
    let dir = fresh("busy");
    let log = dir.join("gpu.log");
    let recipe = format!(
        "FAKE_COLLECTOR_BUSY=32,64 FAKE_COLLECTOR_LOG={} {} {{n}}",
        log.display(),
        exe.display()
    );
    let spec = vadd("0123456789abcdef", &recipe, &dir);
    let out = profile(&dir, "link1", lib, quick(300), &[&spec]);
    let (path, why) = match &out[..] {
        [Outcome::Incomplete { path, why }] => (path.clone(), why.clone()),
        other => panic!("{other:?}"),
    };
    // The busy runs were tried again, for the bound, then given up.
    assert!(intervals(&log).len() >= 4, "{:?}", intervals(&log));
    // The warning quotes the collector, with the kernel, the size and the shape, and does
    // not blame the annotation.
    let warning = out[0].warning(&spec, GPU_UUID).unwrap();
    for want in [
        "the profile of vadd (annotated at vadd.cu:3:9) is incomplete and is not used",
        "4 of 38 samples failed in the collector or the GPU",
        "the first: vadd at n=1000 block 32x1x1: the profiler failed: cuptiRangeProfilerStart \
         failed: CUPTI_ERROR_HARDWARE_BUSY: the hardware is busy (CUptiResult 26)",
        "keeps the program's launch",
    ] {
        assert!(warning.contains(want), "{want:?} not in {warning}");
    }
    assert!(!warning.contains("recipe") && !warning.contains("never reached"));
    assert!(why.contains("CUptiResult 26"));
    // Nothing a model could use; the entry is kept, marked, listed and prunable.
    let db = ProfileDb::open(dir.join("db")).unwrap();
    assert!(db
        .entries_for(&spec.mangled, &spec.code_hash)
        .unwrap()
        .is_empty());
    assert_eq!(
        db.get(&spec.mangled, &spec.code_hash, &device().name)
            .unwrap(),
        None
    );
    let listed = db.list().unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].path, path);
    assert!(
        matches!(&listed[0].status, Status::Incomplete { why: w } if *w == why),
        "{:?}",
        listed[0].status
    );
    let text = run_cmd(&db, ProfileCommand::List { incomplete: true });
    assert!(text.contains("incomplete"), "{text}");
    assert!(text.contains("CUPTI_ERROR_HARDWARE_BUSY"), "{text}");
    assert!(text.contains("prune --incomplete"), "{text}");

    // The next link that can profiles it again, and replaces the incomplete entry.
    let free = vadd(
        "0123456789abcdef",
        &format!("{} {{n}}", exe.display()),
        &dir,
    );
    let out = profile(&dir, "link2", lib, quick(300), &[&free]);
    assert!(
        matches!(&out[..], [Outcome::Stored { samples: 38, path: p }] if *p == path),
        "{out:?}"
    );
    let entries = db.entries_for(&spec.mangled, &spec.code_hash).unwrap();
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].incomplete, None);
    // 96 threads fail in the fake GPU for the kernel's own reasons: a valid sample.
    assert_eq!(
        entries[0]
            .samples
            .iter()
            .filter(|s| s.error.as_deref() == Some("launch failed"))
            .count(),
        2
    );
    assert_eq!(
        run_cmd(&db, ProfileCommand::List { incomplete: true })
            .lines()
            .nth(1),
        Some("no incomplete entries")
    );

    // Prune --incomplete removes an incomplete entry and leaves a complete one.
    let other = vadd("fedcba9876543210", &recipe, &dir);
    let out = profile(&dir, "link3", lib, quick(0), &[&other]);
    assert!(matches!(out[..], [Outcome::Incomplete { .. }]), "{out:?}");
    let text = run_cmd(
        &db,
        ProfileCommand::Prune {
            dry_run: false,
            invalid: false,
            old_format: false,
            superseded: false,
            incomplete: true,
            all: false,
            device: None,
            kernel: None,
            older_than: None,
        },
    );
    assert!(text.contains("fedcba9876543210"), "{text}");
    let left = db.list().unwrap();
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].status, Status::Current);
}

#[test]
fn a_gpu_busy_for_a_while_is_tried_again_until_it_is_free() {
    let (exe, lib) = built();
    let dir = fresh("busy-once");
    let log = dir.join("gpu.log");
    // The first run finds every shape busy; the later ones find the GPU free.
    let recipe = format!(
        "if mkdir busy-once 2>/dev/null; then export FAKE_COLLECTOR_BUSY=all; fi; \
         FAKE_COLLECTOR_LOG={} {} {{n}}",
        log.display(),
        exe.display()
    );
    let spec = vadd("00000000000000aa", &recipe, &dir);
    let out = profile(&dir, "link", lib, quick(60_000), &[&spec]);
    assert!(
        matches!(out[..], [Outcome::Stored { samples: 38, .. }]),
        "{out:?}"
    );
    // Three requests: n=1000 busy, n=1000 again, n=5000.
    assert_eq!(intervals(&log).len(), 3);
    let db = ProfileDb::open(dir.join("db")).unwrap();
    let e = &db.entries_for(&spec.mangled, &spec.code_hash).unwrap()[0];
    assert!(e.samples.iter().all(|s| s.collector_error().is_none()));
}

#[test]
fn warnings_name_the_real_cause() {
    let (exe, _) = built();
    let dir = fresh("causes");
    // No collector to load: the runtime's samples say so; this is no fault of the recipe.
    let spec = vadd(
        "00000000000000bb",
        &format!("{} {{n}}", exe.display()),
        &dir,
    );
    let missing = dir.join("no-such/libklaraptor_collector.so");
    let out = profile(&dir, "link1", &missing, quick(0), &[&spec]);
    let w = out[0].warning(&spec, GPU_UUID).unwrap();
    assert!(matches!(out[0], Outcome::Incomplete { .. }), "{out:?}");
    assert!(
        w.contains(&format!(
            "the first: vadd at n=1000 block 1x1x1: not measured: cannot load the collector {}",
            missing.display()
        )),
        "{w}"
    );
    assert!(!w.contains("never reached"), "{w}");
    // A recipe that never launches the kernel: that, and only that, is what the warning says.
    let idle = vadd("00000000000000cc", "true {n}", &dir);
    let out = profile(&dir, "link2", &built().1, quick(0), &[&idle]);
    assert_eq!(
        out,
        [Outcome::NothingRecorded {
            commands: vec!["true 1000".into(), "true 5000".into()]
        }]
    );
    assert_eq!(
        out[0].warning(&idle, GPU_UUID).unwrap(),
        "profiling vadd recorded nothing: its launches never reached the profiling runtime (is \
         it launched with <<<>>> by `true 1000`, `true 5000`?)"
    );
    // A size the recipe does not launch the kernel at: incomplete, saying which.
    let half = vadd(
        "00000000000000dd",
        &format!("test {{n}} = 5000 || {} {{n}}", exe.display()),
        &dir,
    );
    let out = profile(&dir, "link3", &built().1, quick(0), &[&half]);
    match &out[..] {
        [Outcome::Incomplete { why, .. }] => assert_eq!(
            why,
            &format!(
                "the run at n=5000 (`test 5000 = 5000 || {} 5000`) left no sample of it",
                exe.display()
            )
        ),
        other => panic!("{other:?}"),
    }
}

/// The environment variable that makes [`child_link`] one of the contending links.
const CHILD: &str = "KLARAPTOR_TEST_PARALLEL_CHILD";

#[test]
fn two_links_take_turns_on_the_gpu_and_the_second_reuses_the_first_ones_entry() {
    let (exe, lib) = built();
    let dir = fresh("contend");
    let log = dir.join("gpu.log");
    let me = std::env::current_exe().unwrap();
    // Each link profiles a kernel of its own, then the kernel both link (one object in two
    // executables). Each kernel's recipe is its own command (a shell comment tells them
    // apart), so no link reuses its own runs for another kernel.
    let children: Vec<_> = ["00000000000000a1", "00000000000000a2"]
        .iter()
        .map(|own| {
            Command::new(&me)
                .args([
                    "--exact",
                    "child_link",
                    "--ignored",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(CHILD, own)
                .env("TEST_DIR", &dir)
                .env("TEST_EXE", exe)
                .env("TEST_LIB", lib)
                .env("TEST_LOG", &log)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut outcomes = Vec::new();
    let mut stderr = String::new();
    let mut pids = Vec::new();
    for c in children {
        pids.push(c.id());
        let o = c.wait_with_output().unwrap();
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert!(o.status.success(), "{out}\n{err}");
        outcomes.extend(
            out.lines()
                // libtest's "test child_link ... " may begin the first line.
                .filter_map(|l| l.split_once("OUTCOME ").map(|(_, o)| o.to_string())),
        );
        stderr.push_str(&err);
    }
    outcomes.sort();
    assert_eq!(
        outcomes,
        [
            "00000000000000a1 stored",
            "00000000000000a2 stored",
            "0000000000000s0s reused",
            "0000000000000s0s stored",
        ],
        "{stderr}"
    );
    // The GPU work never overlapped: 3 kernels × 2 sizes, one after another.
    let mut iv = intervals(&log);
    assert_eq!(iv.len(), 6, "{iv:?}");
    iv.sort_by_key(|i| i.1);
    for w in iv.windows(2) {
        assert!(w[1].1 >= w[0].2, "overlapping GPU work: {w:?}");
    }
    // A link that waited said for whom, once per wait.
    let waits: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("klaraptor-cc: waiting for GPU"))
        .collect();
    assert!(!waits.is_empty(), "{stderr}");
    for w in &waits {
        assert!(
            pids.iter().any(|p| {
                w.starts_with(&format!(
                    "klaraptor-cc: waiting for GPU {GPU_UUID} (profiling held by pid {p}: vadd)"
                ))
            }),
            "{w}"
        );
    }
    assert!(
        stderr.contains("vadd was profiled by another link meanwhile"),
        "{stderr}"
    );
    let db = ProfileDb::open(dir.join("db")).unwrap();
    assert_eq!(db.list().unwrap().len(), 3);
}

/// One of the contending links of the test above (run as a child process by it; does
/// nothing on its own).
#[test]
#[ignore = "a child process of two_links_take_turns_on_the_gpu_…, which runs it"]
fn child_link() {
    let Ok(own) = std::env::var(CHILD) else {
        return;
    };
    let var = |k: &str| PathBuf::from(std::env::var_os(k).unwrap());
    let dir = var("TEST_DIR");
    let recipe = |tag: &str| {
        format!(
            "FAKE_COLLECTOR_SLEEP_MS=300 FAKE_COLLECTOR_LOG={} {} {{n}} # {tag}",
            var("TEST_LOG").display(),
            var("TEST_EXE").display()
        )
    };
    let mine = vadd(&own, &recipe(&own), &dir);
    let shared = vadd("0000000000000s0s", &recipe("shared"), &dir);
    let out = profile(
        &dir,
        &format!("link-{own}"),
        &var("TEST_LIB"),
        quick(0),
        &[&mine, &shared],
    );
    for (s, o) in [&mine, &shared].iter().zip(&out) {
        let word = match o {
            Outcome::Stored { .. } => "stored",
            Outcome::Reused { .. } => "reused",
            other => panic!("{other:?}"),
        };
        println!("OUTCOME {} {word}", s.code_hash);
    }
}

/// The shapes of vadd's plan with at least `threads` threads, sorted.
fn planned_from(spec: &LinkSpec, threads: u32) -> Vec<[u32; 3]> {
    let mut v: Vec<[u32; 3]> = klaraptor_profiler::plan::plan_shapes_for(spec)
        .into_iter()
        .filter(|b| b[0] * b[1] * b[2] >= threads)
        .collect();
    v.sort();
    v
}

/// A recipe in which vadd's blocks of 288 threads or more fault (as a reduction whose
/// shared memory is sized for the program's 256-thread blocks): each run launches it at
/// {n} and then at 2{n}, so that a fault in the first sweep would lose the second as well.
fn faulting_recipe(exe: &Path) -> String {
    format!(
        "FAKE_COLLECTOR_FAULT=288 FAKE_COLLECTOR_COUNTERS=1 {} {{n}} $(({{n}} * 2))",
        exe.display()
    )
}

#[test]
fn shapes_that_fault_lose_only_themselves_and_are_never_chosen() {
    let (exe, lib) = built();
    let dir = fresh("fault");
    let spec = vadd("000000000000fa17", &faulting_recipe(exe), &dir);
    let out = profile(&dir, "link", lib, quick(0), &[&spec]);
    // 19 shapes at n = 1000, 2000, 5000 and 10000.
    assert!(
        matches!(out[..], [Outcome::Stored { samples: 76, .. }]),
        "{out:?}"
    );
    let db = ProfileDb::open(dir.join("db")).unwrap();
    let entries = db.entries_for(&spec.mangled, &spec.code_hash).unwrap();
    assert_eq!(entries.len(), 1);
    let e = &entries[0];
    assert_eq!(e.incompleteness(), None);
    let mut planned = klaraptor_profiler::plan::plan_shapes_for(&spec);
    planned.sort();
    let faulting = planned_from(&spec, 288);
    assert_eq!(faulting.len(), 6, "{faulting:?}");
    for n in [1000, 2000, 5000, 10000] {
        let at: Vec<&Sample> = e.samples.iter().filter(|s| s.sizes == [n]).collect();
        let mut blocks: Vec<[u32; 3]> = at.iter().map(|s| s.block).collect();
        blocks.sort();
        // Every planned shape once: measured, failed for its own reasons, or faulted.
        assert_eq!(blocks, planned, "n={n}");
        for s in at {
            let err = s.error.as_deref();
            if faulting.contains(&s.block) {
                assert!(
                    err.is_some_and(|e| record::is_fault(e)
                        && e.starts_with("an error in the kernel: ")
                        && e.contains("CUDA_ERROR_ILLEGAL_ADDRESS")),
                    "{s:?}"
                );
                assert_eq!(s.collector_error(), None, "{s:?}");
            } else if s.block == [96, 1, 1] {
                // Refused by "the GPU" (test_prof's launch entry point): no fault.
                assert_eq!(err, Some("launch failed"), "{s:?}");
                assert!(!record::is_fault(err.unwrap()));
            } else {
                assert_eq!(err, None, "{s:?}");
                assert!(s.counters.is_some(), "{s:?}");
            }
        }
    }

    // The model: a faulted shape is never a candidate, nor a shape the profile did not run
    // that has as many threads as one that faulted; those that ran are.
    let prog = klaraptor_program::rational::build(&spec, e, &dir).unwrap();
    let mut faulted = prog.faulted.clone();
    faulted.sort();
    assert_eq!(faulted, faulting);
    for b in &faulting {
        assert!(!prog.candidates.contains(b), "{b:?} is a candidate");
    }
    assert!(
        prog.candidates.iter().all(|b| b[0] * b[1] * b[2] < 288),
        "{:?}",
        prog.candidates
    );
    for b in [[256, 1, 1], [96, 1, 1], [32, 1, 1], [1, 1, 1]] {
        assert!(prog.candidates.contains(&b), "{b:?} is not a candidate");
    }
    assert!(prog
        .rank(&[100_000])
        .unwrap()
        .iter()
        .all(|r| r.block[0] < 288));
    // The manifest keeps them (and one written before loads without them).
    let json = serde_json::to_string(&prog).unwrap();
    let back: klaraptor_program::rational::RationalProgram = serde_json::from_str(&json).unwrap();
    assert_eq!(back.faulted, prog.faulted);
    let mut old: serde_json::Value = serde_json::from_str(&json).unwrap();
    old.as_object_mut().unwrap().remove("faulted");
    let old: klaraptor_program::rational::RationalProgram = serde_json::from_value(old).unwrap();
    assert!(old.faulted.is_empty());
}

#[test]
fn a_fault_in_a_profiler_session_blames_no_shape_until_each_runs_alone() {
    let (exe, lib) = built();
    let dir = fresh("fault-session");
    // The fault shows in the profiler session of all the shapes, which each get its message.
    let recipe = format!(
        "FAKE_COLLECTOR_FAULT=288 FAKE_COLLECTOR_FAULT_AT=session FAKE_COLLECTOR_COUNTERS=1 {} \
         {{n}}",
        exe.display()
    );
    let spec = vadd("000000000000fa1a", &recipe, &dir);
    let out = profile(&dir, "link", lib, quick(0), &[&spec]);
    assert!(
        matches!(out[..], [Outcome::Stored { samples: 38, .. }]),
        "{out:?}"
    );
    let db = ProfileDb::open(dir.join("db")).unwrap();
    let e = &db.entries_for(&spec.mangled, &spec.code_hash).unwrap()[0];
    let faulting = planned_from(&spec, 288);
    for s in &e.samples {
        let fault = s.error.as_deref().is_some_and(record::is_fault);
        assert_eq!(fault, faulting.contains(&s.block), "{s:?}");
        if !fault && s.block != [96, 1, 1] {
            assert!(s.error.is_none() && s.counters.is_some(), "{s:?}");
        }
    }
    let prog = klaraptor_program::rational::build(&spec, e, &dir).unwrap();
    assert_eq!(prog.faulted, faulting);
    assert!(prog.candidates.contains(&[1, 1, 1]));
}

#[test]
fn past_the_bound_on_restarts_the_shapes_left_are_not_measured_and_the_profile_incomplete() {
    let (exe, lib) = built();
    let dir = fresh("fault-bound");
    let spec = vadd("000000000000fa18", &faulting_recipe(exe), &dir);
    let settings = Settings {
        max_restarts: 2,
        ..quick(0)
    };
    let out = profile(&dir, "link", lib, settings, &[&spec]);
    let why = match &out[..] {
        [Outcome::Incomplete { why, .. }] => why.clone(),
        other => panic!("{other:?}"),
    };
    assert!(why.contains("not measured: "), "{why}");
    assert!(why.contains("restarted 2 times"), "{why}");
    assert!(why.contains("KLARAPTOR_PROFILE_RESTARTS"), "{why}");
    let warning = out[0].warning(&spec, GPU_UUID).unwrap();
    assert!(
        warning.contains("is incomplete and is not used"),
        "{warning}"
    );
    // What the runs did measure is kept: at n=1000, the shapes the first restart measured
    // before the next fault, and the three shapes that faulted (288, 320 and 352 threads: the
    // first run and the two restarts); the shapes left are not measured.
    let db = ProfileDb::open(dir.join("db")).unwrap();
    let listed = db.list().unwrap();
    assert_eq!(listed.len(), 1);
    let e = ProfileDb::read_file(&listed[0].path).unwrap();
    let at = |n: i64, b: u32| {
        e.samples
            .iter()
            .find(|s| s.sizes == [n] && s.block == [b, 1, 1])
            .unwrap_or_else(|| panic!("no sample at n={n} block {b}"))
    };
    for b in [288, 320, 352] {
        assert!(at(1000, b).error.as_deref().is_some_and(record::is_fault));
    }
    assert_eq!(at(1000, 256).error, None);
    assert!(at(1000, 256).counters.is_some());
    for b in [384, 512, 1024] {
        let left = at(1000, b).error.as_deref().unwrap();
        assert!(left.starts_with("not measured: "), "{left}");
        assert!(at(1000, b).collector_error().is_some());
    }
    assert_eq!(e.samples.iter().filter(|s| s.sizes == [1000]).count(), 19);
    // The launch at 2000 that this recipe makes after it was never reached.
    assert!(!e.samples.iter().any(|s| s.sizes == [2000]));
}

/// The profiling runtime's side, without the driver: a run stops at the first fault and says
/// so (`stopped.tsv`, its exit status); `KLARAPTOR_PROFILE_SKIP` resumes it.
#[test]
fn the_runtime_stops_at_a_fault_and_resumes_without_the_shapes_done() {
    let (exe, lib) = built();
    let dir = fresh("fault-runtime");
    let spec = vadd("000000000000fa19", "", &dir);
    let plan = dir.join("plan");
    std::fs::write(
        &plan,
        klaraptor_profiler::plan::plan_file(std::slice::from_ref(&spec)),
    )
    .unwrap();
    let run = |name: &str, skip: Option<&str>| {
        let out = dir.join(name);
        std::fs::create_dir_all(&out).unwrap();
        let mut cmd = Command::new(exe);
        cmd.args(["1000", "2000"])
            .env("KLARAPTOR_PROFILE_OUT", &out)
            .env("KLARAPTOR_PROFILE_PLAN", &plan)
            .env("KLARAPTOR_COLLECTOR", lib)
            .env("FAKE_COLLECTOR_FAULT", "288")
            .env_remove("KLARAPTOR_PROFILE_SKIP");
        if let Some(text) = skip {
            let f = dir.join(format!("{name}.skip"));
            std::fs::write(&f, text).unwrap();
            cmd.env("KLARAPTOR_PROFILE_SKIP", f);
        }
        let o = cmd.output().unwrap();
        let samples = klaraptor_profiler::plan::read_samples(&out, &spec.mangled).unwrap();
        let stopped = std::fs::read_to_string(out.join("stopped.tsv")).ok();
        (o, samples, stopped)
    };
    let blocks = |s: &[Sample], n: i64| -> Vec<u32> {
        s.iter()
            .filter(|s| s.sizes == [n])
            .map(|s| s.block[0])
            .collect()
    };
    // One request for the whole sweep: the fault at 288 threads loses every other shape's
    // sample, and the process stops before its own launch and the sweep at 2000.
    let (o, samples, stopped) = run("first", None);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(70), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&o.stdout), "");
    assert!(
        stderr.contains("klaraptor-profile: vadd at 1000: block 288x1x1 faulted"),
        "{stderr}"
    );
    assert_eq!(samples.len(), 19);
    assert!(blocks(&samples, 2000).is_empty());
    let stopped = stopped.expect("stopped.tsv");
    assert!(
        stopped.starts_with(
            "fault\t_Z4vaddPfi\t1000\t288x1x1\tan error in the kernel: cuCtxSynchronize failed: \
             CUDA_ERROR_ILLEGAL_ADDRESS"
        ),
        "{stopped}"
    );
    // Resumed without 96 (refused) and 288 (faulted): one shape per request now, so the
    // shapes before the next fault (320) are measured, and the run stops there.
    let (o, samples, stopped) = run("second", Some("_Z4vaddPfi 1000 96x1x1 288x1x1\n"));
    assert_eq!(o.status.code(), Some(70));
    assert_eq!(
        blocks(&samples, 1000),
        [1, 2, 4, 8, 16, 32, 64, 128, 160, 192, 224, 256, 320]
    );
    assert!(
        samples[..12].iter().all(|s| s.error.is_none()),
        "{samples:?}"
    );
    assert!(samples[12].error.as_deref().is_some_and(record::is_fault));
    assert!(stopped.unwrap().contains("\t1000\t320x1x1\t"));
    // Everything at 1000 done: no sweep there; the one at 2000 is swept whole, as a first.
    let all: Vec<String> = klaraptor_profiler::plan::plan_shapes_for(&spec)
        .iter()
        .map(|b| format!("{}x{}x{}", b[0], b[1], b[2]))
        .collect();
    let (o, samples, stopped) = run(
        "third",
        Some(&format!("_Z4vaddPfi 1000 {}\n", all.join(" "))),
    );
    assert_eq!(o.status.code(), Some(70));
    assert!(blocks(&samples, 1000).is_empty());
    assert_eq!(blocks(&samples, 2000).len(), 19);
    assert!(stopped.unwrap().contains("\t2000\t288x1x1\t"));
    // Nothing left: the program runs to its end, with its own launches only.
    let (o, samples, stopped) = run(
        "fourth",
        Some(&format!(
            "# resume\n_Z4vaddPfi 1000 {0}\n_Z4vaddPfi 2000 {0}\n",
            all.join(" ")
        )),
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(samples.is_empty() && stopped.is_none());
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        "vadd n=1000 block=256 rc=0\nvadd n=2000 block=256 rc=0\nlaunches: 256=2\n"
    );
}

/// vadd's recipe `recipe` at the profile sizes n = `sizes`.
fn vadd_at(code_hash: &str, recipe: &str, dir: &Path, sizes: &[i64]) -> LinkSpec {
    LinkSpec {
        profile_sizes: sizes.iter().map(|&n| vec![n]).collect(),
        ..vadd(code_hash, recipe, dir)
    }
}

/// The run directories a link's profiling made in its scratch (one per process).
fn run_dirs(scratch: &Path) -> usize {
    std::fs::read_dir(scratch)
        .unwrap()
        .filter(|e| {
            let e = e.as_ref().unwrap();
            e.file_name().to_string_lossy().starts_with("run-") && e.path().is_dir()
        })
        .count()
}

/// A `{SIZES}` recipe: one process for all the profile sizes, more of them than the
/// runtime sweeps by default (4), each swept and recorded as its own size.
#[test]
fn a_sizes_recipe_profiles_every_size_in_one_process() {
    let (exe, lib) = built();
    let dir = fresh("sizes-one-process");
    let log = dir.join("gpu.log");
    let recipe = format!(
        "FAKE_COLLECTOR_COUNTERS=1 FAKE_COLLECTOR_LOG={} {} {{SIZES}}",
        log.display(),
        exe.display()
    );
    let sizes = [1000, 2000, 3000, 4000, 5000, 6000];
    let spec = vadd_at("00000000000051e5", &recipe, &dir, &sizes);
    assert_eq!(
        klaraptor_profiler::plan::recipe_runs(&spec).unwrap()[0].command,
        format!(
            "FAKE_COLLECTOR_COUNTERS=1 FAKE_COLLECTOR_LOG={} {} 1000 2000 3000 4000 5000 6000",
            log.display(),
            exe.display()
        )
    );
    let out = profile(&dir, "link", lib, quick(0), &[&spec]);
    // 19 shapes at each of the 6 sizes.
    assert!(
        matches!(out[..], [Outcome::Stored { samples: 114, .. }]),
        "{out:?}"
    );
    // One process: one run directory, and every request the collector had came from one pid.
    assert_eq!(run_dirs(&dir.join("link")), 1);
    let requests = intervals(&log);
    assert!(!requests.is_empty());
    assert!(
        requests.iter().all(|r| r.0 == requests[0].0),
        "{requests:?}"
    );
    let db = ProfileDb::open(dir.join("db")).unwrap();
    let e = &db.entries_for(&spec.mangled, &spec.code_hash).unwrap()[0];
    assert_eq!(e.incompleteness(), None);
    assert_eq!(e.plan.sizes, spec.profile_sizes);
    let mut planned = klaraptor_profiler::plan::plan_shapes_for(&spec);
    planned.sort();
    for n in sizes {
        let mut blocks: Vec<[u32; 3]> = e
            .samples
            .iter()
            .filter(|s| s.sizes == [n])
            .map(|s| s.block)
            .collect();
        blocks.sort();
        assert_eq!(blocks, planned, "n={n}");
    }
    // The model is fitted from them.
    let prog = klaraptor_program::rational::build(&spec, e, &dir).unwrap();
    assert!(prog.candidates.contains(&[256, 1, 1]));
}

/// A `{SIZES}` run whose shapes fault at every size: each restart resumes it in a new
/// process without the shapes (and sizes) done, and the bound on restarts holds per size of
/// the run, so the profile is as complete as one run per size would make it.
#[test]
fn a_sizes_recipe_that_faults_resumes_size_after_size() {
    let (exe, lib) = built();
    let dir = fresh("sizes-fault");
    let recipe = format!(
        "FAKE_COLLECTOR_FAULT=288 FAKE_COLLECTOR_COUNTERS=1 {} {{SIZES}}",
        exe.display()
    );
    let spec = vadd_at("00000000000051e6", &recipe, &dir, &[1000, 2000, 5000]);
    let faulting = planned_from(&spec, 288);
    // Six faulting shapes a size, one process each: six restarts per size are enough (18
    // for the run), which a bound of six for the whole run would not be.
    assert_eq!(faulting.len(), 6);
    let settings = Settings {
        max_restarts: 6,
        ..quick(0)
    };
    let out = profile(&dir, "link", lib, settings, &[&spec]);
    assert!(
        matches!(out[..], [Outcome::Stored { samples: 57, .. }]),
        "{out:?}"
    );
    assert_eq!(run_dirs(&dir.join("link")), 19);
    let db = ProfileDb::open(dir.join("db")).unwrap();
    let e = &db.entries_for(&spec.mangled, &spec.code_hash).unwrap()[0];
    assert_eq!(e.incompleteness(), None);
    let mut planned = klaraptor_profiler::plan::plan_shapes_for(&spec);
    planned.sort();
    for n in [1000, 2000, 5000] {
        let at: Vec<&Sample> = e.samples.iter().filter(|s| s.sizes == [n]).collect();
        let mut blocks: Vec<[u32; 3]> = at.iter().map(|s| s.block).collect();
        blocks.sort();
        assert_eq!(blocks, planned, "n={n}");
        for s in at {
            let fault = s.error.as_deref().is_some_and(record::is_fault);
            assert_eq!(fault, faulting.contains(&s.block), "{s:?}");
        }
    }

    // Past the bound (two restarts a size, six for the run), the sizes the run never reached
    // are named in the reason the entry is incomplete.
    let dir = fresh("sizes-fault-bound");
    let spec = vadd_at("00000000000051e7", &recipe, &dir, &[1000, 2000, 5000]);
    let settings = Settings {
        max_restarts: 2,
        ..quick(0)
    };
    let out = profile(&dir, "link", lib, settings, &[&spec]);
    let why = match &out[..] {
        [Outcome::Incomplete { why, .. }] => why.clone(),
        other => panic!("{other:?}"),
    };
    assert!(
        why.contains("restarted 6 times already (KLARAPTOR_PROFILE_RESTARTS=2 per size, for the 3 sizes of its run)"),
        "{why}"
    );
    assert!(
        why.contains(&format!(
            "the run `{}` left no sample of it at n=5000 (1 of its 3 profile sizes)",
            recipe.replace("{SIZES}", "1000 2000 5000")
        )),
        "{why}"
    );
}

/// A `{SIZES}` run that never launches the kernel at one of its sizes: the entry is
/// incomplete and says which size.
#[test]
fn a_size_a_sizes_recipe_never_reaches_is_named() {
    let (exe, lib) = built();
    let dir = fresh("sizes-missing");
    // The program is given two of the three sizes (the rest of the line is a comment).
    let recipe = format!("{} 1000 3000 # {{SIZES}}", exe.display());
    let spec = vadd_at("00000000000051e8", &recipe, &dir, &[1000, 2000, 3000]);
    let out = profile(&dir, "link", lib, quick(0), &[&spec]);
    let why = match &out[..] {
        [Outcome::Incomplete { why, .. }] => why.clone(),
        other => panic!("{other:?}"),
    };
    assert_eq!(
        why,
        format!(
            "the run `{} 1000 3000 # 1000 2000 3000` left no sample of it at n=2000 (1 of its \
             3 profile sizes)",
            exe.display()
        )
    );
    assert_eq!(run_dirs(&dir.join("link")), 1);
}
