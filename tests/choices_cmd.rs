//! `klaraptor choices list|show|prune`, run as a user runs them, against a scratch choices
//! cache holding a few files as the runtime writes them, an invalid one, temporary files
//! and a file that is not the runtime's.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, SystemTime};

const MM_2048: &str = "\
# klaraptor: a settled launch choice, written by the program's runtime (safe to delete)
version = 1
kernel = _Z2mmPKfS0_Pfi
name = mm
code_hash = 5f1c0e9a2b7d4c31
device = NVIDIA H200
device_id = NVIDIA H200|sm=132|cc=9.0|clock_khz=1980000|mem_clock_khz=2619000|bus_bits=6144
data = n=2048 m=100
block = 128x2x1
candidate = model#2
launches = 8
times_us = 128x2x1:10.12 32x8x1:14.20 256x1x1:20.01
";

const MM_512: &str = "\
# klaraptor: a settled launch choice, written by the program's runtime (safe to delete)
version = 1
kernel = _Z2mmPKfS0_Pfi
name = mm
code_hash = 5f1c0e9a2b7d4c31
device = NVIDIA H200
device_id = NVIDIA H200|sm=132|cc=9.0|clock_khz=1980000|mem_clock_khz=2619000|bus_bits=6144
data = n=512 m=100
block = program
program_block = 32x8x1
candidate = program
launches = 6
times_us = 32x8x1:3.50 128x2x1:3.61
";

const AXPY: &str = "\
# klaraptor: a settled launch choice, written by the program's runtime (safe to delete)
version = 1
kernel = _Z4axpyfPKfPfi
name = axpy
code_hash = 0123456789abcdef
device = NVIDIA H100 80GB HBM3
device_id = NVIDIA H100 80GB HBM3|sm=132|cc=9.0|clock_khz=1980000|mem_clock_khz=2619000|bus_bits=5120
data = n=1048576
block = 256x1x1
candidate = profiled
launches = 4
times_us =
recorded_by = a newer runtime
";

const F_MM_2048: &str = "mm-0123456789abcdef.choice";
const F_MM_512: &str = "mm-1111111111111111.choice";
const F_AXPY: &str = "axpy-aaaaaaaaaaaaaaaa.choice";
const F_BAD: &str = "bad-2222222222222222.choice";
const F_STALE: &str = ".mm-0123456789abcdef.choice.1234.tmp";
const F_FRESH: &str = ".mm-1111111111111111.choice.5678.tmp";
const F_OTHER: &str = "notes.txt";

/// A cache directory with three valid choices, an invalid one, a stale and a fresh
/// temporary file, and a file the runtime did not write.
fn cache() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    std::fs::write(p.join(F_MM_2048), MM_2048).unwrap();
    std::fs::write(p.join(F_MM_512), MM_512).unwrap();
    std::fs::write(p.join(F_AXPY), AXPY).unwrap();
    std::fs::write(p.join(F_BAD), MM_2048.replace("version = 1", "version = 2")).unwrap();
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
fn list_prints_one_line_per_choice_then_the_invalid_files() {
    let dir = cache();
    let d = dir.path().display();
    let o = in_dir(dir.path(), &["list"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        format!(
            "axpy n=1048576 block=256x1x1 candidate=profiled launches=4 device=NVIDIA H100 80GB HBM3 {F_AXPY}\n\
             mm n=512 m=100 block=program(32x8x1) candidate=program launches=6 device=NVIDIA H200 {F_MM_512}\n\
             mm n=2048 m=100 block=128x2x1 candidate=model#2 launches=8 device=NVIDIA H200 {F_MM_2048}\n\
             {F_BAD}: invalid: format version 2 (this klaraptor reads version 1)\n\
             3 choices in {d}, 1 invalid\n"
        )
    );
    assert_eq!(stderr(&o), "");
}

#[test]
fn list_filters_by_kernel_and_device() {
    let dir = cache();
    let d = dir.path().display();
    let mm_lines = format!(
        "mm n=512 m=100 block=program(32x8x1) candidate=program launches=6 device=NVIDIA H200 {F_MM_512}\n\
         mm n=2048 m=100 block=128x2x1 candidate=model#2 launches=8 device=NVIDIA H200 {F_MM_2048}\n\
         2 choices in {d}\n"
    );
    // The source name, the mangled name, a part of the name; the device, any case.
    for args in [
        &["list", "--kernel", "mm"][..],
        &["list", "--kernel", "_Z2mmPKfS0_Pfi"],
        &["list", "--device", "h200"],
        &["list", "--kernel", "m", "--device", "H200"],
    ] {
        let o = in_dir(dir.path(), args);
        assert!(o.status.success());
        assert_eq!(stdout(&o), mm_lines, "{args:?}");
    }
    let o = in_dir(dir.path(), &["list", "--kernel", "xp"]);
    assert_eq!(
        stdout(&o),
        format!(
            "axpy n=1048576 block=256x1x1 candidate=profiled launches=4 device=NVIDIA H100 80GB HBM3 {F_AXPY}\n\
             1 choice in {d}\n"
        )
    );
    // A part of the mangled name is not a match.
    let o = in_dir(dir.path(), &["list", "--kernel", "_Z2mm"]);
    assert_eq!(stdout(&o), format!("0 choices in {d}\n"));
}

#[test]
fn list_json_has_every_field() {
    let dir = cache();
    let o = in_dir(dir.path(), &["list", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let expected = serde_json::json!([
        {
            "file": F_AXPY,
            "version": 1,
            "kernel": "_Z4axpyfPKfPfi",
            "name": "axpy",
            "code_hash": "0123456789abcdef",
            "device": "NVIDIA H100 80GB HBM3",
            "device_id": "NVIDIA H100 80GB HBM3|sm=132|cc=9.0|clock_khz=1980000|mem_clock_khz=2619000|bus_bits=5120",
            "data": "n=1048576",
            "block": "256x1x1",
            "program_block": null,
            "candidate": "profiled",
            "launches": 4,
            "times_us": [],
            "other": {"recorded_by": "a newer runtime"}
        },
        {
            "file": F_MM_512,
            "version": 1,
            "kernel": "_Z2mmPKfS0_Pfi",
            "name": "mm",
            "code_hash": "5f1c0e9a2b7d4c31",
            "device": "NVIDIA H200",
            "device_id": "NVIDIA H200|sm=132|cc=9.0|clock_khz=1980000|mem_clock_khz=2619000|bus_bits=6144",
            "data": "n=512 m=100",
            "block": "program",
            "program_block": "32x8x1",
            "candidate": "program",
            "launches": 6,
            "times_us": [{"shape": "32x8x1", "us": 3.5}, {"shape": "128x2x1", "us": 3.61}],
            "other": {}
        },
        {
            "file": F_MM_2048,
            "version": 1,
            "kernel": "_Z2mmPKfS0_Pfi",
            "name": "mm",
            "code_hash": "5f1c0e9a2b7d4c31",
            "device": "NVIDIA H200",
            "device_id": "NVIDIA H200|sm=132|cc=9.0|clock_khz=1980000|mem_clock_khz=2619000|bus_bits=6144",
            "data": "n=2048 m=100",
            "block": "128x2x1",
            "program_block": null,
            "candidate": "model#2",
            "launches": 8,
            "times_us": [
                {"shape": "128x2x1", "us": 10.12},
                {"shape": "32x8x1", "us": 14.2},
                {"shape": "256x1x1", "us": 20.01}
            ],
            "other": {}
        },
        {"file": F_BAD, "invalid": "format version 2 (this klaraptor reads version 1)"}
    ]);
    assert_eq!(v, expected);

    let o = in_dir(dir.path(), &["list", "--json", "--kernel", "nothing"]);
    assert_eq!(stdout(&o).trim(), "[]");
}

#[test]
fn show_a_kernel_a_file_name_and_a_path() {
    let dir = cache();
    let path = dir.path().join(F_MM_2048);
    let block = format!(
        "file        {}\n\
         kernel      mm (_Z2mmPKfS0_Pfi)\n\
         code hash   5f1c0e9a2b7d4c31\n\
         device      NVIDIA H200\n\
         device id   NVIDIA H200|sm=132|cc=9.0|clock_khz=1980000|mem_clock_khz=2619000|bus_bits=6144\n\
         data        n=2048 m=100\n\
         block       128x2x1\n\
         candidate   model#2 (the model's 2nd ranked shape)\n\
         launches    8\n\
         times       128x2x1       10.12 µs  (chosen)\n\
         \x20           32x8x1        14.20 µs\n\
         \x20           256x1x1       20.01 µs\n",
        path.display()
    );
    for target in [F_MM_2048, path.to_str().unwrap()] {
        let o = in_dir(dir.path(), &["show", target]);
        assert!(o.status.success(), "{}", stderr(&o));
        assert_eq!(stdout(&o), block, "{target}");
    }

    // A kernel: each of its choices, in list's order.
    let o = in_dir(dir.path(), &["show", "mm"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let blocks: Vec<&str> = out.split("\n\n").collect();
    assert_eq!(blocks.len(), 2, "{out}");
    assert!(blocks[0].contains(F_MM_512), "{out}");
    assert!(
        blocks[0].contains("\nblock       32x8x1 (the program's own)\n"),
        "{out}"
    );
    assert!(
        blocks[0].contains("\ncandidate   program (the program's own shape)\n"),
        "{out}"
    );
    assert!(
        blocks[0].ends_with(
            "\ntimes       32x8x1         3.50 µs  (chosen)\n            128x2x1        3.61 µs"
        ),
        "{out}"
    );
    assert_eq!(blocks[1], block);

    // Unknown keys and empty times.
    let o = in_dir(dir.path(), &["show", "_Z4axpyfPKfPfi"]);
    let out = stdout(&o);
    assert!(out.contains("\ntimes       none recorded\n"), "{out}");
    assert!(out.ends_with("\nrecorded_by a newer runtime\n"), "{out}");
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
            "klaraptor: error: {}: invalid: format version 2 (this klaraptor reads version 1)\n",
            dir.path().join(F_BAD).display()
        )
    );
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
    let o = in_dir(dir.path(), &["prune", "--kernel", "axpy", "--dry-run"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        format!("would remove {F_AXPY}\n1 file would be removed from {d}\n")
    );
    assert!(dir.path().join(F_AXPY).exists());

    let o = in_dir(dir.path(), &["prune", "--kernel", "axpy"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        format!("removed {F_AXPY}\n1 file removed from {d}\n")
    );
    assert_eq!(
        files(dir.path()),
        sorted(&[F_MM_2048, F_MM_512, F_BAD, F_STALE, F_FRESH, F_OTHER])
    );

    // --kernel and --device together: both must match.
    let o = in_dir(dir.path(), &["prune", "--kernel", "mm", "--device", "H100"]);
    assert_eq!(stdout(&o), format!("0 files removed from {d}\n"));
    let o = in_dir(dir.path(), &["prune", "--device", "h200"]);
    assert_eq!(
        stdout(&o),
        format!("removed {F_MM_512}\nremoved {F_MM_2048}\n2 files removed from {d}\n")
    );
    assert_eq!(
        files(dir.path()),
        sorted(&[F_BAD, F_STALE, F_FRESH, F_OTHER])
    );
}

#[test]
fn prune_invalid_removes_invalid_files_and_stale_temporary_files() {
    let dir = cache();
    let d = dir.path().display();
    let o = in_dir(dir.path(), &["prune", "--invalid"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        format!(
            "removed {F_BAD} (invalid: format version 2 (this klaraptor reads version 1))\n\
             removed {F_STALE} (a temporary file older than an hour)\n\
             2 files removed from {d}\n"
        )
    );
    assert_eq!(
        files(dir.path()),
        sorted(&[F_MM_2048, F_MM_512, F_AXPY, F_FRESH, F_OTHER])
    );
}

#[test]
fn prune_all_removes_what_the_runtime_wrote_only() {
    let dir = cache();
    let o = in_dir(dir.path(), &["prune", "--all"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).ends_with(&format!("6 files removed from {}\n", dir.path().display())));
    assert_eq!(files(dir.path()), sorted(&[F_OTHER]));
}

#[test]
fn a_file_that_is_not_utf8_is_invalid() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("x-0000000000000000.choice"),
        b"version = 1\n\xff\n",
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
    assert!(stdout(&o).ends_with(", 1 invalid\n"), "{}", stdout(&o));
    args.push("--json");
    assert!(choices(off, &args).status.success());
    assert_eq!(files(dir.path()).len(), 7);
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
    std::fs::write(dir.join(F_MM_2048), MM_2048).unwrap();
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

/// A key the runtime has not settled yet, as its exit writes it (`*.progress`).
const MM_PROGRESS: &str = "\
# klaraptor: what the program's runtime measured of a launch that has not settled yet; the next run goes on from here (safe to delete)
version = 1
kernel = _Z2mmPfS_S_ii
name = mm
code_hash = 0123456789abcdef
device = NVIDIA H200
device_id = NVIDIA H200|sm=132|cc=9.0|clock_khz=1980000|mem_clock_khz=2619000|bus_bits=6144
data = n=4096 m=100
launches = 150
last_run_launches = 150
cand = program 32x8x1 128x13x1 program=1 walked=0 out=0 batch=1 us=412.500,409.000
cand = model#1 128x2x1 32x50x1 program=0 walked=0 out=0 batch=1 us=300.125
cand = model#2 64x4x1 64x25x1 program=0 walked=0 out=0 batch=0 us=-
";

#[test]
fn keys_still_being_measured_are_listed_and_pruned() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    let f = "mm-3333333333333333.progress";
    std::fs::write(p.join(f), MM_PROGRESS).unwrap();
    std::fs::write(
        p.join("mm-4444444444444444.progress"),
        "version = 1\nkernel = x\n",
    )
    .unwrap();
    std::fs::write(p.join(F_AXPY), AXPY).unwrap();
    let o = in_dir(p, &["list"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        format!(
            "axpy n=1048576 block=256x1x1 candidate=profiled launches=4 device=NVIDIA H100 80GB HBM3 {F_AXPY}\n\
             mm n=4096 m=100 measuring: not settled after launches=150 (2 shapes timed) device=NVIDIA H200 {f}\n\
             mm-4444444444444444.progress: invalid: missing key launches\n\
             1 choice in {}, 1 still being measured, 1 invalid\n",
            p.display()
        )
    );
    let o = in_dir(p, &["list", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v[1]["measuring"], true);
    assert_eq!(v[1]["launches"], 150);
    // --kernel takes the keys still being measured with the settled ones
    let o = in_dir(p, &["prune", "--kernel", "mm"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!files(p).contains(&f.to_string()), "{:?}", files(p));
    assert!(files(p).contains(&F_AXPY.to_string()));
}

/// Two instances of a kernel template, as a build with instance names leaves them: the
/// runtime names each file and `name` after the instance (`stencil1d<3>`; the file name keeps
/// letters and digits only). `list` shows which is which, `--kernel` takes an instance's
/// name, or the template's for both.
#[test]
fn template_instances_are_listed_by_their_names() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    let choice = |mangled: &str, name: &str, block: &str| {
        MM_2048
            .replace("_Z2mmPKfS0_Pfi", mangled)
            .replace("name = mm", &format!("name = {name}"))
            .replace("data = n=2048 m=100", "data = N=1048576")
            .replace("block = 128x2x1", &format!("block = {block}"))
    };
    let f3 = "stencil1d_3_-0123456789abcdef.choice";
    let f16 = "stencil1d_16_-fedcba9876543210.choice";
    std::fs::write(
        p.join(f3),
        choice("_Z9stencil1dILi3EEvPKfPfi", "stencil1d<3>", "224x1x1"),
    )
    .unwrap();
    std::fs::write(
        p.join(f16),
        choice("_Z9stencil1dILi16EEvPKfPfi", "stencil1d<16>", "64x1x1"),
    )
    .unwrap();
    let l3 = format!(
        "stencil1d<3> N=1048576 block=224x1x1 candidate=model#2 launches=8 device=NVIDIA H200 {f3}\n"
    );
    let l16 = format!(
        "stencil1d<16> N=1048576 block=64x1x1 candidate=model#2 launches=8 device=NVIDIA H200 {f16}\n"
    );
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
