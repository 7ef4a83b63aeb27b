//! `klaraptor choices list|show|prune`, run as a user runs them, against a scratch choices
//! cache holding files the runtime wrote (tests/fixtures/choices-cache-2026-11-28, written by
//! runtime-shim/tests/test_refine.c: its README says which case wrote each): choices decided
//! by paired comparisons, undecided and unmeasurable, keys still being measured (with and
//! without pairs of their open comparison), files of older rules (version 1, unpaired
//! medians; version 2, paired comparisons that could decide on a run's start alone; version 3,
//! paired comparisons over the run, but a steady key's later ones could decide on a run's
//! start alone), a damaged file, temporary files and a file that is not the runtime's.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, SystemTime};

macro_rules! fixture {
    ($name:literal) => {
        include_str!(concat!("fixtures/choices-cache-2026-11-28/", $name))
    };
}

/// stencil at n=4096 on an H200 (version 4): model#1 won against the program's 64, model#2
/// against model#1, the others fell off cliffs.
const STENCIL_4096: &str = fixture!("paired-stencil-n4096.choice");
const STENCIL_8192: &str = fixture!("paired-stencil-n8192.choice");
const MULTI_H100: &str = fixture!("paired-multi-h100.choice");
/// The program's shape kept: its challenger lost.
const PROGRAM_KEPT: &str = fixture!("paired-program-kept.choice");
const UNDECIDED: &str = fixture!("undecided.choice");
const UNMEASURABLE: &str = fixture!("unmeasurable.choice");
const MEASURING: &str = fixture!("measuring.progress");
/// A key still being measured, its open comparison with three pairs.
const MEASURING_PAIRS: &str = fixture!("measuring-pairs.progress");
const OLD: &str = fixture!("version1.choice");
const OLD_PROGRESS: &str = fixture!("version1.progress");
/// The same key as STENCIL_4096, decided by version 2's rule.
const V2: &str = fixture!("version2-paired.choice");
const V2_PROGRESS: &str = fixture!("version2-measuring.progress");
/// The same key as STENCIL_4096, decided by version 3's rule.
const V3: &str = fixture!("version3-paired.choice");
/// The same key as MEASURING_PAIRS, measured by version 3's rule (with its phase_drift line).
const V3_PROGRESS: &str = fixture!("version3-measuring-pairs.progress");
/// What the runtime's own test of a damaged file writes (test_refine.c, case cache).
const DAMAGED: &str = "version = 4\nkernel = _Z7stencilPfi\nblock = 12";

// File names as the runtime forms them (<name>-<hash of the key>); the files of one key
// (the fixtures of stencil at n=4096) get made-up hashes, one each.
const F_4096: &str = "stencil-00c0be5a22c05d2a.choice";
const F_8192: &str = "stencil-8d2c5b3961d8ce91.choice";
const F_H100: &str = "multi-c045599f90a0ad65.choice";
const F_OLD: &str = "stencil-0000000000000001.choice";
const F_V2: &str = "stencil-0000000000000002.choice";
const F_V3: &str = "stencil-0000000000000003.choice";
const F_BAD: &str = "stencil-2222222222222222.choice";
const F_STALE: &str = ".stencil-00c0be5a22c05d2a.choice.1234.tmp";
const F_FRESH: &str = ".stencil-8d2c5b3961d8ce91.choice.5678.tmp";
const F_OTHER: &str = "notes.txt";

const L_4096: &str = "stencil n=4096 block=128x1x1 candidate=model#2 confidence=paired \
                      pairs=10 (0.30x the program's time) launches=44 device=NVIDIA H200";
const L_8192: &str = "stencil n=8192 block=128x1x1 candidate=model#2 confidence=paired \
                      pairs=10 (0.30x the program's time) launches=44 device=NVIDIA H200";
const L_H100: &str = "multi n=4096 block=1024x1x1 candidate=model#2 confidence=paired \
                      pairs=11 (0.43x the program's time) launches=50 device=NVIDIA H100 80GB HBM3";
const MISSING: &str = "missing keys name, code_hash, device, device_id, data, program_block, \
                       candidate, confidence, launches, pairs, vs_program, extra_us";

/// A cache directory with three choices, one each of versions 1, 2 and 3 (older rules), a
/// damaged one, a stale and a fresh temporary file, and a file the runtime did not write.
fn cache() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    std::fs::write(p.join(F_4096), STENCIL_4096).unwrap();
    std::fs::write(p.join(F_8192), STENCIL_8192).unwrap();
    std::fs::write(p.join(F_H100), MULTI_H100).unwrap();
    std::fs::write(p.join(F_OLD), OLD).unwrap();
    std::fs::write(p.join(F_V2), V2).unwrap();
    std::fs::write(p.join(F_V3), V3).unwrap();
    std::fs::write(p.join(F_BAD), DAMAGED).unwrap();
    std::fs::write(p.join(F_STALE), "half").unwrap();
    File::options()
        .write(true)
        .open(p.join(F_STALE))
        .unwrap()
        .set_modified(SystemTime::now() - Duration::from_secs(2 * 3600))
        .unwrap();
    std::fs::write(p.join(F_FRESH), "half").unwrap();
    std::fs::write(p.join(F_OTHER), "mine").unwrap();
    dir
}

/// Runs `klaraptor choices <args>` with the cache location from `env` only.
fn choices(env: &[(&str, &Path)], args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_klaraptor"));
    cmd.arg("choices")
        .args(args)
        .env_remove("KLARAPTOR_CHOICES")
        .env_remove("XDG_CACHE_HOME")
        .env_remove("HOME");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

/// Runs `klaraptor choices --dir <dir> <args>`.
fn in_dir(dir: &Path, args: &[&str]) -> Output {
    let mut all = vec!["--dir", dir.to_str().unwrap()];
    all.extend_from_slice(args);
    choices(&[], &all)
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8(o.stderr.clone()).unwrap()
}

/// The files left in `dir`, sorted.
fn files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

fn sorted(names: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = names.iter().map(|s| s.to_string()).collect();
    v.sort();
    v
}

#[test]
fn list_prints_one_line_per_choice_then_the_old_and_invalid_files() {
    let dir = cache();
    let d = dir.path().display();
    let o = in_dir(dir.path(), &["list"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        format!(
            "{L_H100} {F_H100}\n\
             {L_4096} {F_4096}\n\
             {L_8192} {F_8192}\n\
             {F_OLD}: old format (version 1, measured again by the next run)\n\
             {F_V2}: old format (version 2, measured again by the next run)\n\
             {F_V3}: old format (version 3, measured again by the next run)\n\
             {F_BAD}: invalid: {MISSING}\n\
             3 choices in {d}, 3 of an old format, 1 invalid\n"
        )
    );
    assert_eq!(stderr(&o), "");
}

#[test]
fn list_filters_by_kernel_and_device() {
    let dir = cache();
    let d = dir.path().display();
    let stencil_lines = format!("{L_4096} {F_4096}\n{L_8192} {F_8192}\n2 choices in {d}\n");
    // The source name, the mangled name, a part of the name; the device, any case.
    for args in [
        &["list", "--kernel", "stencil"][..],
        &["list", "--kernel", "_Z7stencilPfi"],
        &["list", "--device", "h200"],
        &["list", "--kernel", "ten", "--device", "H200"],
    ] {
        let o = in_dir(dir.path(), args);
        assert!(o.status.success());
        assert_eq!(stdout(&o), stencil_lines, "{args:?}");
    }
    let o = in_dir(dir.path(), &["list", "--kernel", "ult"]);
    assert_eq!(stdout(&o), format!("{L_H100} {F_H100}\n1 choice in {d}\n"));
    // A part of the mangled name is not a match.
    let o = in_dir(dir.path(), &["list", "--kernel", "_Z7sten"]);
    assert_eq!(stdout(&o), format!("0 choices in {d}\n"));
}

#[test]
fn list_json_has_every_field_and_the_evidence() {
    let dir = cache();
    let o = in_dir(dir.path(), &["list", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let cmp = |ch: &str, cb: &str, inc: &str, ib: &str, pairs: u64, mean: f64, verdict: &str| {
        serde_json::json!({
            "challenger": ch, "challenger_block": cb, "incumbent": inc, "incumbent_block": ib,
            "pairs": pairs, "mean": mean, "sd": 0.0, "verdict": verdict
        })
    };
    let stencil = |file: &str, data: &str| {
        serde_json::json!({
            "file": file,
            "version": 4,
            "kernel": "_Z7stencilPfi",
            "name": "stencil",
            "code_hash": "00c0ffee00c0ffee",
            "device": "NVIDIA H200",
            "device_id": "NVIDIA H200|sm=132|cc=9.0|bus_bits=0",
            "data": data,
            "block": "128x1x1",
            "program_block": "64x1x1",
            "candidate": "model#2",
            "confidence": "paired",
            "launches": 44,
            "pairs": 10,
            "vs_program": 0.3,
            "extra_us": 540.0,
            "comparisons": [
                cmp("model#1", "256x1x1", "program", "64x1x1", 2, -0.6, "win"),
                cmp("model#2", "128x1x1", "model#1", "256x1x1", 6, -0.25, "win"),
                cmp("model#3", "512x1x1", "model#2", "128x1x1", 1, 0.66667, "cliff"),
                cmp("program", "64x1x1", "model#2", "128x1x1", 1, 2.33333, "cliff"),
            ],
            "other": {}
        })
    };
    let expected = serde_json::json!([
        {
            "file": F_H100,
            "version": 4,
            "kernel": "_Z5multiPfi",
            "name": "multi",
            "code_hash": "0a0a0a0a0a0a0a0a",
            "device": "NVIDIA H100 80GB HBM3",
            "device_id": "NVIDIA H100 80GB HBM3|sm=132|cc=9.0|bus_bits=0",
            "data": "n=4096",
            "block": "1024x1x1",
            "program_block": "64x1x1",
            "candidate": "model#2",
            "confidence": "paired",
            "launches": 50,
            "pairs": 11,
            "vs_program": 0.4286,
            "extra_us": 310.0,
            "comparisons": [
                cmp("model#1", "512x1x1", "program", "64x1x1", 2, -0.42857, "win"),
                cmp("model#2", "1024x1x1", "model#1", "512x1x1", 8, -0.25, "win"),
                cmp("model#3", "256x1x1", "model#2", "1024x1x1", 1, 0.5, "cliff"),
            ],
            "other": {}
        },
        stencil(F_4096, "n=4096"),
        stencil(F_8192, "n=8192"),
        {"file": F_OLD, "version": 1, "old_format": "measured again by the next run"},
        {"file": F_V2, "version": 2, "old_format": "measured again by the next run"},
        {"file": F_V3, "version": 3, "old_format": "measured again by the next run"},
        {"file": F_BAD, "invalid": MISSING}
    ]);
    assert_eq!(v, expected);

    let o = in_dir(dir.path(), &["list", "--json", "--kernel", "nothing"]);
    assert_eq!(stdout(&o).trim(), "[]");
}

#[test]
fn show_a_kernel_a_file_name_and_a_path() {
    let dir = cache();
    let path = dir.path().join(F_4096);
    let block = format!(
        "file        {}\n\
         kernel      stencil (_Z7stencilPfi)\n\
         code hash   00c0ffee00c0ffee\n\
         device      NVIDIA H200\n\
         device id   NVIDIA H200|sm=132|cc=9.0|bus_bits=0\n\
         data        n=4096\n\
         block       128x1x1 (the program's own: 64x1x1)\n\
         candidate   model#2 (the model's 2nd ranked shape)\n\
         decision    by paired comparisons (10 pairs): 0.30x the program's time (-70.0 %)\n\
         launches    44\n\
         extra time  540.0 µs (what the timed launches cost)\n\
         compared    model#1 256x1x1 vs program 64x1x1: 2 pairs, -60.00 % time (sd 0.00 %): \
         win (faster, it became the incumbent)\n\
         \x20           model#2 128x1x1 vs model#1 256x1x1: 6 pairs, -25.00 % time (sd 0.00 %): \
         win (faster, it became the incumbent)\n\
         \x20           model#3 512x1x1 vs model#2 128x1x1: 1 pair, +66.67 % time (sd 0.00 %): \
         cliff (far slower in every launch of its first quadruple)\n\
         \x20           program 64x1x1 vs model#2 128x1x1: 1 pair, +233.33 % time (sd 0.00 %): \
         cliff (far slower in every launch of its first quadruple)\n",
        path.display()
    );
    for target in [F_4096, path.to_str().unwrap()] {
        let o = in_dir(dir.path(), &["show", target]);
        assert!(o.status.success(), "{}", stderr(&o));
        assert_eq!(stdout(&o), block, "{target}");
    }

    // A kernel: each of its choices, in list's order.
    let o = in_dir(dir.path(), &["show", "stencil"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let blocks: Vec<&str> = out.split("\n\n").collect();
    assert_eq!(blocks.len(), 2, "{out}");
    assert_eq!(format!("{}\n", blocks[0]), block);
    assert!(blocks[1].contains(F_8192), "{out}");
    assert!(blocks[1].contains("\ndata        n=8192\n"), "{out}");
}

/// How each key was decided, in words: the program's shape kept because its challenger lost,
/// kept because nothing reached a verdict (never said to be settled or faster), the model's
/// first choice kept because nothing could be timed cleanly.
#[test]
fn show_says_how_each_key_was_decided() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    std::fs::write(p.join("stencil-000000000000000a.choice"), PROGRAM_KEPT).unwrap();
    std::fs::write(p.join("stencil-000000000000000b.choice"), UNDECIDED).unwrap();
    std::fs::write(p.join("stencil-000000000000000c.choice"), UNMEASURABLE).unwrap();
    let o = in_dir(p, &["list"]);
    assert_eq!(
        stdout(&o),
        format!(
            "stencil n=4096 block=program(64x1x1) candidate=program confidence=paired pairs=3 \
             (no challenger was faster) launches=28 device=NVIDIA H200 \
             stencil-000000000000000a.choice\n\
             stencil n=4096 block=program(64x1x1) candidate=program confidence=undecided \
             pairs=24 (no verdict: the program's own shape kept) launches=1200 device=NVIDIA \
             H200 stencil-000000000000000b.choice\n\
             stencil n=4096 block=256x1x1 candidate=model#1 confidence=unmeasurable pairs=3 \
             (not timed cleanly: the model's first choice kept) launches=14 device=NVIDIA H200 \
             stencil-000000000000000c.choice\n\
             3 choices in {}\n",
            p.display()
        )
    );
    let show = |f: &str| {
        let o = in_dir(p, &["show", f]);
        assert!(o.status.success(), "{}", stderr(&o));
        let out = stdout(&o);
        let from = out.find("\nblock ").unwrap() + 1;
        out[from..].to_string()
    };
    assert_eq!(
        show("stencil-000000000000000a.choice"),
        "block       64x1x1 (the program's own)\n\
         candidate   program (the program's own shape)\n\
         decision    by paired comparisons (3 pairs): no challenger was faster than the \
         program's own shape\n\
         launches    28\n\
         extra time  18.5 µs (what the timed launches cost)\n\
         compared    model#1 256x1x1 vs program 64x1x1: 3 pairs, +3.09 % time (sd 1.36 %): \
         lose (not faster)\n"
    );
    let undecided = show("stencil-000000000000000b.choice");
    assert_eq!(
        undecided,
        "block       64x1x1 (the program's own)\n\
         candidate   program (the program's own shape)\n\
         decision    undecided (24 pairs): no comparison reached a verdict, so the program's \
         own shape is kept; nothing showed it or another shape to be faster\n\
         launches    1200\n\
         extra time  466.7 µs (what the timed launches cost)\n\
         compared    model#1 256x1x1 vs program 64x1x1: 24 pairs, -0.48 % time (sd 8.27 %): \
         undecided (no verdict, the incumbent stays)\n"
    );
    assert!(!undecided.contains("settled"));
    assert_eq!(
        show("stencil-000000000000000c.choice"),
        "block       256x1x1 (the program's own: 64x1x1)\n\
         candidate   model#1 (the model's 1st ranked shape)\n\
         decision    unmeasurable (3 pairs): the launches could not be timed cleanly, so the \
         model's first choice is kept without a comparison confirming it (the noisy times put \
         it at 1.39x the program's)\n\
         launches    14\n\
         extra time  23.7 µs (what the timed launches cost)\n\
         compared    model#1 256x1x1 vs program 64x1x1: 3 pairs, +6.94 % time (sd 92.33 %): \
         unmeasurable (too noisy to tell)\n"
    );
}

#[test]
fn show_nothing_matched_is_an_error() {
    let dir = cache();
    let d = dir.path().display();
    let o = in_dir(dir.path(), &["show", "gemm"]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(stdout(&o), "");
    assert_eq!(
        stderr(&o),
        format!(
            "klaraptor: error: no choice for kernel `gemm` in {d}\n  (`klaraptor choices list` \
             shows what the cache holds)\n"
        )
    );
    let o = in_dir(dir.path(), &["show", "gemm-0000000000000000.choice"]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        stderr(&o),
        format!(
            "klaraptor: error: no choice file `gemm-0000000000000000.choice` (neither a path \
             nor a file in {d})\n"
        )
    );
    // An invalid file is not shown: why it is invalid is the error.
    let o = in_dir(dir.path(), &["show", F_BAD]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        stderr(&o),
        format!(
            "klaraptor: error: {}: invalid: {MISSING}\n",
            dir.path().join(F_BAD).display()
        )
    );
}

#[test]
fn show_a_file_of_an_older_rule_says_it_is_measured_again() {
    let dir = cache();
    let o = in_dir(dir.path(), &["show", F_OLD]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        format!(
            "{}: old format (version 1, of an older rule: unpaired medians): the program's \
             runtime does not use it; its next run measures the launch again and replaces the \
             file\n",
            dir.path().join(F_OLD).display()
        )
    );
    // Version 2: a file the previous klaraptor read as valid, an older rule's now.
    let o = in_dir(dir.path(), &["show", F_V2]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        format!(
            "{}: old format (version 2, of an older rule: paired comparisons that could \
             decide on a run's start alone): the program's runtime does not use it; its next \
             run measures the launch again and replaces the file\n",
            dir.path().join(F_V2).display()
        )
    );
    // Version 3: a file the previous klaraptor read as valid, an older rule's now.
    let o = in_dir(dir.path(), &["show", F_V3]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        format!(
            "{}: old format (version 3, of an older rule: paired comparisons over the run, \
             but a steady key's later ones could decide on a run's start alone): the \
             program's runtime does not use it; its next run measures the launch again and \
             replaces the file\n",
            dir.path().join(F_V3).display()
        )
    );
    // `show <kernel>` shows the valid choices only.
    let o = in_dir(dir.path(), &["show", "stencil"]);
    let out = stdout(&o);
    assert!(!out.contains(F_V2) && !out.contains(F_V3), "{out}");
}

#[test]
fn prune_without_an_option_says_which_to_give() {
    let dir = cache();
    let before = files(dir.path());
    for args in [&["prune"][..], &["prune", "--dry-run"]] {
        let o = in_dir(dir.path(), args);
        assert_eq!(o.status.code(), Some(1));
        let err = stderr(&o);
        for option in ["--kernel", "--device", "--invalid", "--all"] {
            assert!(err.contains(option), "{err}");
        }
        assert_eq!(stdout(&o), "");
    }
    assert_eq!(files(dir.path()), before);
}

#[test]
fn prune_a_kernel() {
    let dir = cache();
    let d = dir.path().display();
    let o = in_dir(dir.path(), &["prune", "--kernel", "multi", "--dry-run"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        format!("would remove {F_H100}\n1 file would be removed from {d}\n")
    );
    assert!(dir.path().join(F_H100).exists());

    let o = in_dir(dir.path(), &["prune", "--kernel", "multi"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        format!("removed {F_H100}\n1 file removed from {d}\n")
    );
    assert_eq!(
        files(dir.path()),
        sorted(&[F_4096, F_8192, F_OLD, F_V2, F_V3, F_BAD, F_STALE, F_FRESH, F_OTHER])
    );

    // --kernel and --device together: both must match.
    let o = in_dir(
        dir.path(),
        &["prune", "--kernel", "stencil", "--device", "H100"],
    );
    assert_eq!(stdout(&o), format!("0 files removed from {d}\n"));
    let o = in_dir(dir.path(), &["prune", "--device", "h200"]);
    assert_eq!(
        stdout(&o),
        format!("removed {F_4096}\nremoved {F_8192}\n2 files removed from {d}\n")
    );
    assert_eq!(
        files(dir.path()),
        sorted(&[F_OLD, F_V2, F_V3, F_BAD, F_STALE, F_FRESH, F_OTHER])
    );
}

#[test]
fn prune_invalid_removes_old_and_invalid_files_and_stale_temporary_files() {
    let dir = cache();
    let d = dir.path().display();
    let o = in_dir(dir.path(), &["prune", "--invalid"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        format!(
            "removed {F_OLD} (old format, version 1: measured again by the next run)\n\
             removed {F_V2} (old format, version 2: measured again by the next run)\n\
             removed {F_V3} (old format, version 3: measured again by the next run)\n\
             removed {F_BAD} (invalid: {MISSING})\n\
             removed {F_STALE} (a temporary file older than an hour)\n\
             5 files removed from {d}\n"
        )
    );
    assert_eq!(
        files(dir.path()),
        sorted(&[F_4096, F_8192, F_H100, F_FRESH, F_OTHER])
    );
}

#[test]
fn prune_all_removes_what_the_runtime_wrote_only() {
    let dir = cache();
    let o = in_dir(dir.path(), &["prune", "--all"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).ends_with(&format!("9 files removed from {}\n", dir.path().display())));
    assert_eq!(files(dir.path()), sorted(&[F_OTHER]));
}

#[test]
fn a_file_that_is_not_utf8_is_invalid() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("x-0000000000000000.choice"),
        b"version = 4\n\xff\n",
    )
    .unwrap();
    let o = in_dir(dir.path(), &["list"]);
    assert_eq!(
        stdout(&o),
        format!(
            "x-0000000000000000.choice: invalid: not valid UTF-8\n0 choices in {}, 1 invalid\n",
            dir.path().display()
        )
    );
}

#[test]
fn klaraptor_choices_off_disables_the_cache() {
    let dir = cache();
    let off: &[(&str, &Path)] = &[
        ("KLARAPTOR_CHOICES", Path::new("off")),
        ("HOME", dir.path()),
    ];
    let o = choices(off, &["list"]);
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(
        stdout(&o),
        "the choices cache is disabled (KLARAPTOR_CHOICES=off)\n"
    );
    for args in [&["show", "mm"][..], &["prune", "--all"]] {
        let o = choices(off, args);
        assert_eq!(o.status.code(), Some(1), "{args:?}");
        assert_eq!(
            stderr(&o),
            "klaraptor: error: the choices cache is disabled (KLARAPTOR_CHOICES=off)\n"
        );
    }
    // `0` too, as for the runtime.
    let o = choices(&[("KLARAPTOR_CHOICES", Path::new("0"))], &["list"]);
    assert_eq!(
        stdout(&o),
        "the choices cache is disabled (KLARAPTOR_CHOICES=0)\n"
    );
    let o = choices(off, &["list", "--json"]);
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(stdout(&o), "[]\n");
    // --dir still names a directory.
    let mut args = vec!["--dir", dir.path().to_str().unwrap(), "list"];
    let o = choices(off, &args);
    assert!(
        stdout(&o).ends_with(", 3 of an old format, 1 invalid\n"),
        "{}",
        stdout(&o)
    );
    args.push("--json");
    assert!(choices(off, &args).status.success());
    assert_eq!(files(dir.path()).len(), 10);
}

#[test]
fn the_directory_from_the_environment_and_a_missing_one() {
    let root = tempfile::tempdir().unwrap();
    let missing: PathBuf = root.path().join("no/such/dir");
    let o = choices(&[("KLARAPTOR_CHOICES", &missing)], &["list"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), format!("0 choices in {}\n", missing.display()));
    let o = choices(&[("KLARAPTOR_CHOICES", &missing)], &["list", "--json"]);
    assert_eq!(stdout(&o).trim(), "[]");
    let o = choices(&[("KLARAPTOR_CHOICES", &missing)], &["prune", "--all"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        format!("0 files removed from {}\n", missing.display())
    );
    assert!(!missing.exists());

    // XDG_CACHE_HOME, else HOME.
    let xdg = root.path().join("xdg");
    let dir = xdg.join("klaraptor/choices");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(F_4096), STENCIL_4096).unwrap();
    let o = choices(
        &[
            ("XDG_CACHE_HOME", &xdg),
            ("HOME", Path::new("/nonexistent")),
        ],
        &["list"],
    );
    assert!(
        stdout(&o).ends_with(&format!("\n1 choice in {}\n", dir.display())),
        "{}",
        stdout(&o)
    );
    let home = root.path().join("home");
    let o = choices(&[("HOME", &home)], &["list"]);
    assert_eq!(
        stdout(&o),
        format!(
            "0 choices in {}\n",
            home.join(".cache/klaraptor/choices").display()
        )
    );
}

/// Keys not decided yet (`*.progress`, as a run's exit leaves them) are listed with what they
/// have measured and pruned with their kernel's choices; progress files of older rules
/// (versions 1, 2 and 3) are listed as such, a damaged one as invalid.
#[test]
fn keys_still_being_measured_are_listed_and_pruned() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    let f = "stencil-3333333333333333.progress";
    let f_pairs = "stencil-6666666666666666.progress";
    let f_old = "stencil-5555555555555555.progress";
    let f_v2 = "stencil-7777777777777777.progress";
    let f_v3 = "stencil-aaaaaaaaaaaaaaaa.progress";
    let f_bad = "stencil-4444444444444444.progress";
    std::fs::write(p.join(f), MEASURING).unwrap();
    std::fs::write(p.join(f_pairs), MEASURING_PAIRS).unwrap();
    std::fs::write(p.join(f_old), OLD_PROGRESS).unwrap();
    std::fs::write(p.join(f_v2), V2_PROGRESS).unwrap();
    std::fs::write(p.join(f_v3), V3_PROGRESS).unwrap();
    // What the runtime's own test of a damaged progress file writes (test_refine.c, case
    // progress).
    std::fs::write(p.join(f_bad), MEASURING.replacen("sum_us=", "sum_us=x", 1)).unwrap();
    std::fs::write(p.join(F_H100), MULTI_H100).unwrap();
    let o = in_dir(p, &["list"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        format!(
            "{L_H100} {F_H100}\n\
             stencil n=4096 measuring: not decided after launches=150 (1 comparison decided, \
             2 shapes timed, incumbent 256x1x1) device=NVIDIA H200 {f}\n\
             stencil n=4096 measuring: not decided after launches=1050 (1 comparison decided, \
             3 shapes timed, incumbent 256x1x1) device=NVIDIA H200 {f_pairs}\n\
             {f_old}: old format (version 1, measured again by the next run)\n\
             {f_v2}: old format (version 2, measured again by the next run)\n\
             {f_v3}: old format (version 3, measured again by the next run)\n\
             {f_bad}: invalid: cand `model#1 256x1x1 16x1x1 program=0 walked=0 verdict=win \
             sum_us=x160.0000 n_us=4` cannot be read\n\
             1 choice in {}, 2 still being measured, 3 of an old format, 1 invalid\n",
            p.display()
        )
    );
    let o = in_dir(p, &["list", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        v[1],
        serde_json::json!({
            "file": f,
            "measuring": true,
            "kernel": "_Z7stencilPfi",
            "name": "stencil",
            "device": "NVIDIA H200",
            "data": "n=4096",
            "launches": 150,
            "timed": 2,
            "incumbent": "256x1x1",
            "spent_us": 240.0,
            "comparisons": [{
                "challenger": "model#1", "challenger_block": "256x1x1",
                "incumbent": "program", "incumbent_block": "64x1x1",
                "pairs": 2, "mean": -0.6, "sd": 0.0, "verdict": "win"
            }]
        })
    );
    assert_eq!(v[2]["file"], f_pairs);
    assert_eq!(v[2]["launches"], 1050);
    let old = |file: &str, version: u32| {
        serde_json::json!({
            "file": file, "version": version, "old_format": "measured again by the next run"
        })
    };
    assert_eq!(v[3], old(f_old, 1));
    assert_eq!(v[4], old(f_v2, 2));
    assert_eq!(v[5], old(f_v3, 3));
    // `show` of a progress file: what the key has measured so far.
    let o = in_dir(p, &["show", f]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        format!(
            "file        {}\n\
             kernel      stencil (_Z7stencilPfi)\n\
             device      NVIDIA H200\n\
             data        n=4096\n\
             decision    not yet, after launches=150 (2 shapes timed): the next run goes on \
             comparing\n\
             incumbent   256x1x1\n\
             extra time  240.0 µs (what the timed launches cost)\n\
             compared    model#1 256x1x1 vs program 64x1x1: 2 pairs, -60.00 % time (sd 0.00 %): \
             win (faster, it became the incumbent)\n",
            p.join(f).display()
        )
    );
    let o = in_dir(p, &["show", f_pairs]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains(
            "\ndecision    not yet, after launches=1050 (3 shapes timed): the next run goes on \
             comparing\n"
        ),
        "{}",
        stdout(&o)
    );
    let o = in_dir(p, &["show", f_old]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains(": old format (version 1, "),
        "{}",
        stdout(&o)
    );
    let o = in_dir(p, &["show", f_v2]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains(": old format (version 2, of an older rule: paired comparisons "),
        "{}",
        stdout(&o)
    );
    let o = in_dir(p, &["show", f_v3]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains(
            ": old format (version 3, of an older rule: paired comparisons over the run, but a \
             steady key's later ones could decide on a run's start alone): "
        ),
        "{}",
        stdout(&o)
    );
    // The open comparison's pairs, damaged: invalid, with the reason.
    let f_bad_pair = "stencil-8888888888888888.progress";
    let bad_pair = MEASURING_PAIRS.replacen("pair = at=100 run=150", "pair = at=100 run=0", 1);
    std::fs::write(p.join(f_bad_pair), bad_pair).unwrap();
    let o = in_dir(p, &["show", f_bad_pair]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains(
            ": invalid: pair `at=100 run=0 r=-0.250000 im=40.0000 d2=0.0000` cannot be read: \
             run `0` is not a run's launches (1 or more)\n"
        ),
        "{}",
        stderr(&o)
    );
    let f_miscount = "stencil-9999999999999999.progress";
    let miscount = MEASURING_PAIRS.replacen("pairs=3 ", "pairs=2 ", 1);
    std::fs::write(p.join(f_miscount), miscount).unwrap();
    let o = in_dir(p, &["show", f_miscount]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains(
            ": invalid: open `128x1x1 32x1x1 pairs=2 nonstationary=0 clear=0 stalled=0` has pairs=2 \
             but the file has 3 pair lines\n"
        ),
        "{}",
        stderr(&o)
    );
    std::fs::remove_file(p.join(f_bad_pair)).unwrap();
    std::fs::remove_file(p.join(f_miscount)).unwrap();
    let o = in_dir(p, &["show", f_bad]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains(": invalid: cand `model#1 "),
        "{}",
        stderr(&o)
    );
    // --kernel takes the keys still being measured with the decided ones.
    let o = in_dir(p, &["prune", "--kernel", "stencil"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(files(p), sorted(&[F_H100, f_old, f_v2, f_v3, f_bad]));
    let o = in_dir(p, &["prune", "--invalid"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(files(p), sorted(&[F_H100]));
}

/// Two instances of a kernel template, as a build with instance names leaves them: the
/// runtime names each file and `name` after the instance (`stencil1d<3>`; the file name keeps
/// letters and digits only). `list` shows which is which, `--kernel` takes an instance's
/// name, or the template's for both.
#[test]
fn template_instances_are_listed_by_their_names() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    let choice = |mangled: &str, name: &str| {
        STENCIL_4096
            .replace("_Z7stencilPfi", mangled)
            .replace("name = stencil", &format!("name = {name}"))
            .replace("data = n=4096", "data = N=1048576")
    };
    let f3 = "stencil1d_3_-0123456789abcdef.choice";
    let f16 = "stencil1d_16_-fedcba9876543210.choice";
    std::fs::write(
        p.join(f3),
        choice("_Z9stencil1dILi3EEvPKfPfi", "stencil1d<3>"),
    )
    .unwrap();
    std::fs::write(
        p.join(f16),
        choice("_Z9stencil1dILi16EEvPKfPfi", "stencil1d<16>"),
    )
    .unwrap();
    let rest = "block=128x1x1 candidate=model#2 confidence=paired pairs=10 (0.30x the \
                program's time) launches=44 device=NVIDIA H200";
    let l3 = format!("stencil1d<3> N=1048576 {rest} {f3}\n");
    let l16 = format!("stencil1d<16> N=1048576 {rest} {f16}\n");
    let d = p.display();
    let o = in_dir(p, &["list", "--kernel", "stencil1d<3>"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), format!("{l3}1 choice in {d}\n"));
    let o = in_dir(p, &["list", "--kernel", "_Z9stencil1dILi16EEvPKfPfi"]);
    assert_eq!(stdout(&o), format!("{l16}1 choice in {d}\n"));
    let o = in_dir(p, &["list", "--kernel", "stencil1d"]);
    let out = stdout(&o);
    assert!(out.contains(&l3) && out.contains(&l16), "{out}");
}
