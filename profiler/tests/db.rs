//! The profile database on a real filesystem: round trips, atomic writes under a killed
//! writer, concurrent processes and threads, format versions, invalidation, pruning and
//! `locate()` precedence. No GPU: the entries are built from the record types.

use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use klaraptor_profiler::db::{
    code_hash, Date, DbError, LocateEnv, Origin, Pattern, ProfileDb, PruneFilter, Status,
    INVALID_SUFFIX,
};
use klaraptor_profiler::record::{
    Counters, DeviceId, Entry, KernelId, Plan, Sample, FORMAT_VERSION,
};

const H200: &str = "NVIDIA H200";
const A100: &str = "NVIDIA A100-SXM4-80GB";
const MM: &str = "_Z2mmPKfS0_Pfi";

fn device(name: &str) -> DeviceId {
    DeviceId {
        name: name.to_string(),
        uuid: format!("GPU-{:08x}-1111-2222-3333-444455556666", name.len()),
        cc: if name.contains("H200") { "9.0" } else { "8.0" }.into(),
        sm_count: if name.contains("H200") { 132 } else { 108 },
    }
}

/// A realistic entry of a 2-D matrix kernel: every size × shape, the shape of more than
/// 1024 threads failing as the driver reports it. `tag` varies the contents (and `sizes`
/// how many there are) so that concurrent writers write distinguishable entries.
fn entry_with(
    name: &str,
    mangled: &str,
    hash: &str,
    dev: &str,
    captured_at: &str,
    tag: &str,
    sizes: &[i64],
) -> Entry {
    let shapes: Vec<[u32; 3]> = vec![
        [32, 1, 1],
        [32, 4, 1],
        [16, 16, 1],
        [32, 32, 1],
        [1, 32, 1],
        [64, 32, 1],
    ];
    let mut samples = Vec::new();
    for &n in sizes {
        for &b in &shapes {
            let grid = [(n as u32).div_ceil(b[0]), (n as u32).div_ceil(b[1]), 1];
            let threads = b[0] * b[1] * b[2];
            if threads > 1024 {
                samples.push(Sample {
                    sizes: vec![n],
                    block: b,
                    grid,
                    error: Some("too many resources requested for launch (CUDA error 701)".into()),
                    counters: None,
                });
                continue;
            }
            let warps = (u64::from(grid[0]) * u64::from(grid[1])) * u64::from(threads.div_ceil(32));
            let nn = (n * n) as u64;
            let uncoal = if b[0] < 32 { 32 / u64::from(b[0]) } else { 1 };
            let time = 1e-3 * (n as f64).powi(3) / 2.0e6 * (1.0 + uncoal as f64 / 4.0);
            samples.push(Sample {
                sizes: vec![n],
                block: b,
                grid,
                error: None,
                counters: Some(Counters {
                    inst_executed: warps * (12 + 9 * n as u64),
                    inst_global_ld: warps * 2 * n as u64,
                    inst_global_st: warps,
                    inst_shared_ld: 0,
                    inst_shared_st: 0,
                    inst_barrier: 0,
                    gld_requests: warps * 2 * n as u64,
                    gld_sectors: warps * 2 * n as u64 * (4 + uncoal),
                    gst_requests: warps,
                    gst_sectors: warps * 4 * uncoal,
                    gld_l1_hit_sectors: None,
                    dram_bytes_read: 8 * nn,
                    dram_bytes_write: 4 * nn,
                    achieved_active_warps: 41.7 + f64::from(b[1]) / 7.0,
                    global_atomic_requests: None,
                    time_ms: time,
                    time_runs_ms: vec![time * 1.01, time, time * 0.999, 0.1 + 0.2, time],
                    launches_per_run: None,
                    regs_per_thread: 32,
                    smem_static: 0,
                    smem_dynamic: 0,
                }),
            });
        }
    }
    Entry {
        format_version: FORMAT_VERSION,
        kernel: KernelId {
            mangled: mangled.into(),
            name: name.into(),
            code_hash: hash.into(),
            data: vec!["N".into()],
            dim: 2,
        },
        device: device(dev),
        collector: format!("klaraptor-cupti 0.1.0 {tag}"),
        captured_at: captured_at.into(),
        cuda_version: "13.0".into(),
        driver_version: "580.82".into(),
        plan: Plan {
            sizes: sizes.iter().map(|&n| vec![n]).collect(),
            shapes,
            runs: 5,
            warmup: 1,
            note: "powers of two, multiples of 32 in x; \"quoted\" and\nmulti-line".into(),
        },
        samples,
        incomplete: None,
        program: Vec::new(),
    }
}

fn hash_of(code: &str) -> String {
    code_hash(&[code.as_bytes(), b"-O3 -arch=sm_90"])
}

fn mm_entry(dev: &str, code: &str, captured_at: &str) -> Entry {
    entry_with(
        "mm",
        MM,
        &hash_of(code),
        dev,
        captured_at,
        "",
        &[64, 128, 256],
    )
}

fn temp_db() -> (tempfile::TempDir, ProfileDb) {
    let dir = tempfile::tempdir().unwrap();
    let db = ProfileDb::open(dir.path().join("profiles")).unwrap();
    (dir, db)
}

#[test]
fn round_trip_and_layout() {
    let (_tmp, db) = temp_db();
    assert!(!db.exists());
    assert_eq!(db.get(MM, &hash_of("v1"), H200).unwrap(), None);
    assert!(db.list().unwrap().is_empty());
    assert!(!db.exists(), "reading must not create the database");

    let e = mm_entry(H200, "v1", "2026-11-03T10:20:30Z");
    assert_eq!(e.samples.iter().filter(|s| s.error.is_some()).count(), 3);
    let path = db.put(&e).unwrap();
    assert_eq!(
        path,
        db.root()
            .join(format!("v{FORMAT_VERSION}"))
            .join(klaraptor_profiler::db::device_slug(H200))
            .join(format!("{MM}-{}.toml", hash_of("v1")))
    );
    assert_eq!(db.get(MM, &hash_of("v1"), H200).unwrap(), Some(e.clone()));
    // The same kernel on another device is another entry.
    assert_eq!(db.get(MM, &hash_of("v1"), A100).unwrap(), None);
    let a = mm_entry(A100, "v1", "2026-11-04T08:00:00Z");
    db.put(&a).unwrap();
    assert_eq!(
        db.entries_for(MM, &hash_of("v1")).unwrap(),
        vec![a, e.clone()]
    );
    assert!(db.entries_for(MM, &hash_of("v2")).unwrap().is_empty());

    // Human-readable TOML with a header, and the README written once.
    let text = fs::read_to_string(&path).unwrap();
    assert!(text.starts_with("# klaraptor profile entry"), "{text}");
    assert!(
        text.contains("[[samples]]") && text.contains("captured_at = \"2026-11-03T10:20:30Z\"")
    );
    let readme = db.root().join("README.txt");
    assert!(fs::read_to_string(&readme)
        .unwrap()
        .contains("profile database"));
    fs::write(&readme, "kept").unwrap();
    db.put(&e).unwrap();
    assert_eq!(fs::read_to_string(&readme).unwrap(), "kept");

    // The file as read back from anywhere.
    assert_eq!(ProfileDb::read_file(&path).unwrap(), e);
    let listed = db.list().unwrap();
    assert_eq!(listed.len(), 2);
    assert!(listed.iter().all(|l| l.status == Status::Current));

    // Removing.
    assert!(db.remove(MM, &hash_of("v1"), H200).unwrap());
    assert!(!db.remove(MM, &hash_of("v1"), H200).unwrap());
    assert_eq!(db.get(MM, &hash_of("v1"), H200).unwrap(), None);
    assert!(
        !path.parent().unwrap().exists(),
        "empty device directory removed"
    );
}

#[test]
fn floats_and_long_names_survive() {
    let (_tmp, db) = temp_db();
    let long = format!("_ZN5outer{}E4gemmIfLi128EEvPKT_S3_PS1_iii", "x".repeat(400));
    let mut e = entry_with(
        "gemm<float,128>",
        &long,
        &hash_of("t"),
        H200,
        "2026-11-03T10:20:30.123456Z",
        "",
        &[96],
    );
    let c = e.samples[0].counters.as_mut().unwrap();
    c.time_runs_ms = vec![1e-300, 123456.789012345, f64::MIN_POSITIVE, 1.0 / 3.0, 2.0];
    c.inst_executed = i64::MAX as u64;
    let path = db.put(&e).unwrap();
    let name = path.file_name().unwrap().to_str().unwrap();
    assert!(name.len() < 160, "{name}");
    assert_eq!(db.get(&long, &hash_of("t"), H200).unwrap(), Some(e.clone()));

    // A counter TOML cannot hold is refused with a message, and nothing is written.
    e.samples[0].counters.as_mut().unwrap().inst_executed = u64::MAX;
    let err = db.put(&e).unwrap_err();
    assert!(matches!(err, DbError::Serialize { .. }), "{err}");
}

#[test]
fn keys_are_checked() {
    let (_tmp, db) = temp_db();
    let mut e = mm_entry(H200, "v1", "2026-11-03T10:20:30Z");
    e.kernel.code_hash = "../../etc".into();
    assert!(matches!(
        db.put(&e).unwrap_err(),
        DbError::InvalidKey { .. }
    ));
    assert!(matches!(
        db.get(MM, "a/b", H200).unwrap_err(),
        DbError::InvalidKey { .. }
    ));
    assert!(matches!(
        db.get("", "ab", H200).unwrap_err(),
        DbError::InvalidKey { .. }
    ));
    let mut e = mm_entry(H200, "v1", "2026-11-03T10:20:30Z");
    e.format_version = FORMAT_VERSION + 1;
    assert!(matches!(
        db.put(&e).unwrap_err(),
        DbError::WrongVersion { .. }
    ));
    assert!(!db.exists());
}

#[test]
fn changed_code_invalidates_and_supersedes() {
    let (_tmp, db) = temp_db();
    let old = mm_entry(H200, "v1", "2026-10-01T00:00:00Z");
    db.put(&old).unwrap();
    // The kernel's code changed: the old entry does not answer for the new hash.
    assert_ne!(hash_of("v1"), hash_of("v2"));
    assert_eq!(db.get(MM, &hash_of("v2"), H200).unwrap(), None);
    let new = mm_entry(H200, "v2", "2026-11-01T00:00:00Z");
    let new_path = db.put(&new).unwrap();
    // The same hash on another device is not superseded by it.
    db.put(&mm_entry(A100, "v1", "2026-09-01T00:00:00Z"))
        .unwrap();

    let listed = db.list().unwrap();
    let status_of = |dev: &str, hash: &str| {
        listed
            .iter()
            .find(|l| {
                let e = l.entry.as_ref().unwrap();
                e.device.name == dev && e.kernel.code_hash == hash
            })
            .unwrap()
            .status
            .clone()
    };
    assert_eq!(
        status_of(H200, &hash_of("v1")),
        Status::Superseded { by: new_path }
    );
    assert_eq!(status_of(H200, &hash_of("v2")), Status::Current);
    assert_eq!(status_of(A100, &hash_of("v1")), Status::Current);
    // Superseded entries are still valid for their own hash (e.g. a branch switched back).
    assert_eq!(db.get(MM, &hash_of("v1"), H200).unwrap(), Some(old));

    let filter = PruneFilter {
        superseded: true,
        ..Default::default()
    };
    let dry = db.prune(&filter, true).unwrap();
    assert_eq!(dry.len(), 1);
    assert_eq!(db.list().unwrap().len(), 3, "a dry run removes nothing");
    let removed = db.prune(&filter, false).unwrap();
    assert_eq!(removed.len(), 1);
    assert_eq!(
        removed[0].entry.as_ref().unwrap().kernel.code_hash,
        hash_of("v1")
    );
    assert_eq!(db.get(MM, &hash_of("v1"), H200).unwrap(), None);
    assert_eq!(db.get(MM, &hash_of("v2"), H200).unwrap(), Some(new));
    assert!(db.get(MM, &hash_of("v1"), A100).unwrap().is_some());
}

/// Writes `text` at `<db>/<rel>` as some other program (or version) would have.
fn plant(db: &ProfileDb, rel: &str, text: &str) -> PathBuf {
    let p = db.root().join(rel);
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(&p, text).unwrap();
    p
}

#[test]
fn other_format_versions_are_ignored_listed_and_pruned() {
    let (_tmp, db) = temp_db();
    let current = mm_entry(H200, "v1", "2026-11-03T10:20:30Z");
    db.put(&current).unwrap();
    let dev = klaraptor_profiler::db::device_slug(H200);
    let file = format!("{MM}-{}.toml", hash_of("v1"));
    // An older format (fields since renamed) under v0/, and a newer one under v<next>/.
    let old = plant(
        &db,
        &format!("v0/{dev}/{file}"),
        &format!(
            "format_version = 0\ncaptured_at = \"2025-01-02T03:04:05Z\"\n[kernel]\nmangled = \"{MM}\"\nname = \"mm\"\nhash = \"{}\"\n[device]\nname = \"{H200}\"\n[[records]]\nbx = 32\n",
            hash_of("v1")
        ),
    );
    let next = FORMAT_VERSION + 1;
    let newer = plant(
        &db,
        &format!("v{next}/{dev}/{file}"),
        &format!("format_version = {next}\n[kernel]\nmangled = \"{MM}\"\nname = \"mm\"\n[device]\nname = \"{H200}\"\n"),
    );
    // get only sees the current version.
    assert_eq!(
        db.get(MM, &hash_of("v1"), H200).unwrap(),
        Some(current.clone())
    );
    fs::remove_file(db.entry_path(MM, &hash_of("v1"), H200).unwrap()).unwrap();
    assert_eq!(db.get(MM, &hash_of("v1"), H200).unwrap(), None);
    assert!(db.entries_for(MM, &hash_of("v1")).unwrap().is_empty());
    db.put(&current).unwrap();

    let listed = db.list().unwrap();
    let find = |p: &Path| listed.iter().find(|l| l.path == p).unwrap();
    let o = find(&old);
    assert_eq!(o.status, Status::OtherVersion { version: 0 });
    assert_eq!(o.status.label(), "old format v0");
    assert_eq!(o.summary.name.as_deref(), Some("mm"));
    assert_eq!(o.summary.device.as_deref(), Some(H200));
    assert_eq!(
        o.summary.captured_at.as_deref(),
        Some("2025-01-02T03:04:05Z")
    );
    assert!(o.entry.is_none());
    assert_eq!(find(&newer).status, Status::OtherVersion { version: next });

    // prune --invalid (which the CLI maps to invalid + old format) removes the old one,
    // and leaves the newer version, which a newer klaraptor wrote, alone.
    let removed = db
        .prune(
            &PruneFilter {
                invalid: true,
                old_format: true,
                ..Default::default()
            },
            false,
        )
        .unwrap();
    assert_eq!(
        removed.iter().map(|l| l.path.clone()).collect::<Vec<_>>(),
        vec![old.clone()]
    );
    assert!(!old.exists() && !old.parent().unwrap().exists() && newer.exists());
    assert_eq!(db.get(MM, &hash_of("v1"), H200).unwrap(), Some(current));
}

#[test]
fn corrupt_and_misplaced_entries() {
    let (_tmp, db) = temp_db();
    let e = mm_entry(H200, "v1", "2026-11-03T10:20:30Z");
    let path = db.put(&e).unwrap();
    let text = fs::read_to_string(&path).unwrap();

    // Truncated: get reports the file, the parse error and what to do.
    fs::write(&path, &text[..text.len() / 2]).unwrap();
    let err = db.get(MM, &hash_of("v1"), H200).unwrap_err();
    assert!(err.is_bad_entry());
    let msg = err.to_string();
    assert!(msg.contains(&path.display().to_string()), "{msg}");
    assert!(msg.contains("klaraptor profile prune --invalid"), "{msg}");
    assert!(matches!(err, DbError::Corrupt { .. }));
    // For a link the database is a cache: a damaged entry is a miss, moved aside (listed as
    // such, kept for a person to look at) and said once.
    assert_eq!(db.entries_for(MM, &hash_of("v1")).unwrap(), vec![]);
    let aside = PathBuf::from(format!("{}{INVALID_SUFFIX}", path.display()));
    assert!(aside.is_file() && !path.exists());
    let said = db.take_damaged();
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(
        said[0].contains("TOML parse error") && said[0].contains("moved aside"),
        "{said:?}"
    );
    assert!(db.take_damaged().is_empty());
    let listed = db.list().unwrap();
    assert!(listed
        .iter()
        .any(|l| l.path == aside && l.status.label() == "invalid (set aside)"));
    // A value no model can use (a NaN time) is damage too.
    let at = text.find("\ntime_ms = ").expect("a measured sample") + 1;
    let end = at + text[at..].find('\n').unwrap();
    let nan = format!("{}time_ms = nan{}", &text[..at], &text[end..]);
    fs::write(&path, &nan).unwrap();
    assert!(db.get(MM, &hash_of("v1"), H200).is_err());
    assert_eq!(db.entries_for(MM, &hash_of("v1")).unwrap(), vec![]);
    assert!(db.take_damaged()[0].contains("time_ms = NaN"));
    fs::remove_file(&aside).unwrap();
    // put replaces it.
    db.put(&e).unwrap();
    assert_eq!(db.get(MM, &hash_of("v1"), H200).unwrap(), Some(e.clone()));

    // The right file copied under another device's directory: its key does not match.
    let elsewhere = db.entry_path(MM, &hash_of("v1"), A100).unwrap();
    fs::create_dir_all(elsewhere.parent().unwrap()).unwrap();
    fs::copy(&path, &elsewhere).unwrap();
    let err = db.get(MM, &hash_of("v1"), A100).unwrap_err();
    match &err {
        DbError::Misplaced { expected, .. } => assert_eq!(expected, &path),
        other => panic!("{other}"),
    }
    // Hand-edited so that the contents say another code hash.
    let edited = db.entry_path(MM, &hash_of("v9"), H200).unwrap();
    fs::write(&edited, &text).unwrap();
    assert!(matches!(
        db.get(MM, &hash_of("v9"), H200).unwrap_err(),
        DbError::Misplaced { .. }
    ));
    // Garbage that is not even UTF-8, and a stale temporary file.
    let garbage = plant(&db, &format!("v{FORMAT_VERSION}/x/garbage.toml"), "");
    fs::write(&garbage, [0xff, 0xfe, 0x00]).unwrap();
    let stale = plant(
        &db,
        &format!("v{FORMAT_VERSION}/x/.garbage.toml.1-0.tmp"),
        "format_",
    );
    // Files the database does not know are not touched.
    let notes = plant(&db, "NOTES.md", "ours");

    let listed = db.list().unwrap();
    let label = |p: &Path| listed.iter().find(|l| l.path == p).unwrap().status.label();
    assert_eq!(label(&path), "ok");
    assert_eq!(label(&elsewhere), "misplaced");
    assert_eq!(label(&edited), "misplaced");
    assert_eq!(label(&garbage), "corrupt");
    assert_eq!(label(&stale), "partial write");
    assert_eq!(listed.len(), 5);

    // Scopes that ask about what a corrupt file cannot tell do not select it.
    let by_device = PruneFilter {
        invalid: true,
        device: Some(Pattern::ignoring_case("nvidia a100*")),
        ..Default::default()
    };
    let sel: Vec<PathBuf> = db
        .prune(&by_device, true)
        .unwrap()
        .into_iter()
        .map(|l| l.path)
        .collect();
    assert_eq!(
        sel,
        Vec::<PathBuf>::new(),
        "the misplaced copy says H200 inside"
    );
    let by_device = PruneFilter {
        invalid: true,
        device: Some(Pattern::ignoring_case("nvidia h200")),
        ..Default::default()
    };
    let mut sel: Vec<PathBuf> = db
        .prune(&by_device, true)
        .unwrap()
        .into_iter()
        .map(|l| l.path)
        .collect();
    sel.sort();
    let mut want = vec![elsewhere.clone(), edited.clone()];
    want.sort();
    assert_eq!(sel, want);

    let removed = db
        .prune(
            &PruneFilter {
                invalid: true,
                ..Default::default()
            },
            false,
        )
        .unwrap();
    assert_eq!(removed.len(), 4);
    assert!(path.exists() && notes.exists());
    assert_eq!(db.list().unwrap().len(), 1);
}

/// A damaged entry that a link moves aside changes the database as a `put` does: the
/// generation file is rewritten (after the readers' shared lock is released), so that make,
/// Ninja and ccache rebuild the objects compiled from the database.
#[test]
fn moving_a_damaged_entry_aside_bumps_the_generation() {
    let (_tmp, db) = temp_db();
    let e = mm_entry(H200, "v1", "2026-11-03T10:20:30Z");
    let path = db.put(&e).unwrap();
    let generation = db.ensure_generation().unwrap();
    let before = fs::read_to_string(&generation).unwrap();
    // A valid entry read: nothing changes.
    assert_eq!(db.entries_for(MM, &hash_of("v1")).unwrap(), vec![e.clone()]);
    assert_eq!(fs::read_to_string(&generation).unwrap(), before);
    let text = fs::read_to_string(&path).unwrap();
    fs::write(&path, &text[..text.len() / 2]).unwrap();
    assert_eq!(db.entries_for(MM, &hash_of("v1")).unwrap(), vec![]);
    assert!(!path.exists());
    assert_eq!(db.take_damaged().len(), 1);
    let after = fs::read_to_string(&generation).unwrap();
    assert_ne!(after, before, "the generation did not change");
    // The lock is free again: a writer gets it, and a reader after it sees no entry and
    // changes nothing.
    db.put(&e).unwrap();
    let stored = fs::read_to_string(&generation).unwrap();
    db.remove(MM, &hash_of("v1"), H200).unwrap();
    assert_ne!(fs::read_to_string(&generation).unwrap(), stored);
    let stored = fs::read_to_string(&generation).unwrap();
    assert_eq!(db.entries_for(MM, &hash_of("v1")).unwrap(), vec![]);
    assert_eq!(fs::read_to_string(&generation).unwrap(), stored);
}

/// An I/O error is said once, also where the error's chain is printed (anyhow's `{:#}`).
#[test]
fn io_errors_are_said_once() {
    let e = anyhow::Error::new(ProfileDb::read_file(Path::new("/nonexistent/x.toml")).unwrap_err());
    let chain = format!("{e:#}");
    assert_eq!(chain.matches("os error 2").count(), 1, "{chain}");
}

#[test]
fn prune_by_device_kernel_and_date() {
    let (_tmp, db) = temp_db();
    let gemm = "_Z4gemmfPKfS0_iiiPf";
    db.put(&mm_entry(H200, "v1", "2026-01-15T12:00:00Z"))
        .unwrap();
    db.put(&mm_entry(A100, "v1", "2025-12-31T23:59:59Z"))
        .unwrap();
    db.put(&entry_with(
        "gemm",
        gemm,
        &hash_of("g"),
        H200,
        "2025-06-01T00:00:00+02:00",
        "",
        &[64],
    ))
    .unwrap();
    // An entry whose capture time is no date is damage, and is never stored.
    let undated = db.put(&entry_with(
        "gemm",
        gemm,
        &hash_of("g"),
        A100,
        "not a date",
        "",
        &[64],
    ));
    assert!(
        matches!(&undated, Err(DbError::Refused { why, .. }) if why.contains("`captured_at`")),
        "{undated:?}"
    );
    db.put(&entry_with(
        "gemm",
        gemm,
        &hash_of("g"),
        A100,
        "2026-03-01T00:00:00Z",
        "",
        &[64],
    ))
    .unwrap();

    let names = |v: Vec<klaraptor_profiler::db::Listed>| {
        let mut v: Vec<String> = v
            .into_iter()
            .map(|l| {
                let e = l.entry.unwrap();
                format!("{}@{}", e.kernel.name, e.device.name)
            })
            .collect();
        v.sort();
        v
    };
    assert!(matches!(
        db.prune(&PruneFilter::default(), true),
        Err(DbError::EmptyPruneFilter)
    ));
    let older = PruneFilter {
        older_than: Some("2026-01-01".parse::<Date>().unwrap()),
        ..Default::default()
    };
    // Dates with an offset are compared in UTC.
    assert_eq!(
        names(db.prune(&older, true).unwrap()),
        vec![format!("gemm@{H200}"), format!("mm@{A100}")]
    );
    let kernel = PruneFilter {
        kernel: Some(Pattern::new("*gemm*")),
        device: Some(Pattern::ignoring_case("*a100*")),
        ..Default::default()
    };
    assert_eq!(
        names(db.prune(&kernel, true).unwrap()),
        vec![format!("gemm@{A100}")]
    );
    let exact = PruneFilter {
        kernel: Some(Pattern::new("mm")),
        ..Default::default()
    };
    assert_eq!(
        names(db.prune(&exact, false).unwrap()),
        vec![format!("mm@{A100}"), format!("mm@{H200}")]
    );
    assert_eq!(db.list().unwrap().len(), 2);
    let all = PruneFilter {
        all: true,
        ..Default::default()
    };
    assert_eq!(db.prune(&all, false).unwrap().len(), 2);
    assert!(db.list().unwrap().is_empty());
}

#[test]
fn locate_precedence() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let project = root.join("proj");
    let deep = project.join("samples/gemm/build");
    fs::create_dir_all(&deep).unwrap();
    fs::create_dir_all(project.join("klaraptor-profiles")).unwrap();
    fs::create_dir_all(project.join("samples/klaraptor-profiles")).unwrap();
    let os = |p: &Path| Some(OsString::from(p));
    let mut env = LocateEnv {
        profile_db: os(&root.join("explicit")),
        cwd: deep.clone(),
        xdg_cache_home: os(&root.join("xdg")),
        home: os(&root.join("home")),
    };
    // 1. The environment variable (relative to the current directory when relative).
    let db = ProfileDb::locate_in(&env).unwrap();
    assert_eq!(
        (db.root(), db.origin()),
        (root.join("explicit").as_path(), &Origin::EnvVar)
    );
    env.profile_db = Some("rel/db".into());
    assert_eq!(
        ProfileDb::locate_in(&env).unwrap().root(),
        deep.join("rel/db")
    );
    // 2. The nearest klaraptor-profiles/ at or above the current directory.
    env.profile_db = Some(OsString::new());
    let db = ProfileDb::locate_in(&env).unwrap();
    assert_eq!(db.root(), project.join("samples/klaraptor-profiles"));
    assert!(matches!(db.origin(), Origin::Project { .. }));
    assert!(db.origin().to_string().contains("klaraptor-profiles"));
    env.cwd = project.join("samples");
    assert_eq!(
        ProfileDb::locate_in(&env).unwrap().root(),
        project.join("samples/klaraptor-profiles")
    );
    env.cwd = project.clone();
    assert_eq!(
        ProfileDb::locate_in(&env).unwrap().root(),
        project.join("klaraptor-profiles")
    );
    // 3. $XDG_CACHE_HOME (only when absolute), 4. ~/.cache.
    env.cwd = root.join("elsewhere");
    env.profile_db = None;
    let db = ProfileDb::locate_in(&env).unwrap();
    assert_eq!(db.root(), root.join("xdg/klaraptor/profiles"));
    assert_eq!(
        db.origin(),
        &Origin::UserCache {
            via: "$XDG_CACHE_HOME"
        }
    );
    env.xdg_cache_home = Some("relative/cache".into());
    let db = ProfileDb::locate_in(&env).unwrap();
    assert_eq!(db.root(), root.join("home/.cache/klaraptor/profiles"));
    assert_eq!(db.origin(), &Origin::UserCache { via: "~/.cache" });
    env.home = None;
    assert!(matches!(
        ProfileDb::locate_in(&env),
        Err(DbError::NoLocation)
    ));
    // A file where the database should be.
    fs::write(root.join("afile"), "").unwrap();
    env.profile_db = os(&root.join("afile"));
    let err = ProfileDb::locate_in(&env).unwrap_err();
    assert!(matches!(err, DbError::NotADirectory { .. }), "{err}");
    assert!(err.to_string().contains("KLARAPTOR_PROFILE_DB"), "{err}");
}

#[test]
fn locate_reads_the_process_environment() {
    // In a child process, so that the environment of this one stays untouched.
    let tmp = tempfile::tempdir().unwrap();
    let out = child(
        "locate",
        tmp.path(),
        &[(
            "KLARAPTOR_PROFILE_DB",
            tmp.path().join("viaenv").as_os_str(),
        )],
    )
    .wait_with_output()
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains(&format!(
            "LOCATED {} (from KLARAPTOR_PROFILE_DB)",
            tmp.path().join("viaenv").display()
        )),
        "{stdout}"
    );
}

// ---------------------------------------------------------------------------------------
// Several processes. The test executable runs itself again with KLARAPTOR_DB_TEST_ROLE set;
// `child_role` does the work then (and nothing otherwise).

const ROLE: &str = "KLARAPTOR_DB_TEST_ROLE";
const ROLE_DB: &str = "KLARAPTOR_DB_TEST_DB";
const ROLE_ID: &str = "KLARAPTOR_DB_TEST_ID";
const WRITER_ROUNDS: u32 = 15;
/// How many fresh databases `readers_of_a_database_being_created_see_nothing_partial` creates.
const DB_CREATIONS: u32 = 40;

fn child(role: &str, db: &Path, extra: &[(&str, &std::ffi::OsStr)]) -> Child {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--exact",
        "child_role",
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(ROLE, role)
    .env(ROLE_DB, db)
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    for (k, v) in extra {
        cmd.env(k, v);
    }
    cmd.spawn().unwrap()
}

/// The entry writer `id` writes in round `round`: its contents (and size) depend on both,
/// so a reader can rebuild the expected entry from its `collector` field.
fn variant(id: u32, round: u32) -> Entry {
    let sizes: Vec<i64> = (0..(1 + (id + round) % 4)).map(|k| 64 << k).collect();
    entry_with(
        "mm",
        MM,
        &hash_of("shared"),
        H200,
        &format!("2026-11-03T10:{:02}:{:02}Z", id % 60, round % 60),
        &format!("writer {id} round {round}"),
        &sizes,
    )
}

/// A large entry (≈ 150 kB of TOML), so that a write takes long enough to be interrupted.
fn big_variant(round: u32) -> Entry {
    let sizes: Vec<i64> = (0..60).map(|k| 32 + k).collect();
    entry_with(
        "mm",
        MM,
        &hash_of("big"),
        H200,
        "2026-11-03T10:00:00Z",
        &format!("big round {round}"),
        &sizes,
    )
}

/// Rebuilds what an entry must be from its tag; panics if it was not written whole.
fn check_whole(e: &Entry) {
    let tag = e.collector.strip_prefix("klaraptor-cupti 0.1.0 ").unwrap();
    let words: Vec<&str> = tag.split(' ').collect();
    let expected = match words.as_slice() {
        ["writer", id, "round", round] => variant(id.parse().unwrap(), round.parse().unwrap()),
        ["big", "round", round] => big_variant(round.parse().unwrap()),
        _ => panic!("unexpected entry {tag}"),
    };
    assert!(
        &expected == e,
        "entry `{tag}` differs from what was written"
    );
}

#[test]
#[ignore = "run by the other tests in a child process"]
fn child_role() {
    let Some(role) = std::env::var_os(ROLE) else {
        return;
    };
    let db = ProfileDb::open(std::env::var_os(ROLE_DB).unwrap()).unwrap();
    let id: u32 = std::env::var(ROLE_ID)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    match role.to_str().unwrap() {
        "locate" => {
            let db = ProfileDb::locate().unwrap();
            println!("LOCATED {} ({})", db.root().display(), db.origin());
        }
        "writer" => {
            for round in 0..WRITER_ROUNDS {
                db.put(&variant(id, round)).unwrap();
                let other = entry_with(
                    "k",
                    &format!("_Z1kv{id}"),
                    &hash_of("o"),
                    A100,
                    "2026-11-03T00:00:00Z",
                    "",
                    &[32],
                );
                db.put(&other).unwrap();
            }
        }
        "big-writer" => {
            // Writes until killed.
            for round in 0.. {
                db.put(&big_variant(round)).unwrap();
            }
        }
        other => panic!("unknown role {other}"),
    }
}

#[test]
fn killed_writer_leaves_no_partial_entry_and_no_lock() {
    let (_tmp, db) = temp_db();
    let dir = db
        .entry_path(MM, &hash_of("big"), H200)
        .unwrap()
        .parent()
        .unwrap()
        .to_path_buf();
    let entry = db.entry_path(MM, &hash_of("big"), H200).unwrap();
    // Whether a temporary file of the writer with this process id is there.
    let has_tmp = |pid: u32| {
        let mark = format!(".{pid}-");
        fs::read_dir(&dir)
            .map(|rd| {
                rd.flatten().any(|d| {
                    let n = d.file_name().to_string_lossy().into_owned();
                    n.ends_with(".tmp") && n.contains(&mark)
                })
            })
            .unwrap_or(false)
    };
    // Polls until `cond` holds; fails the test if the writer died or it takes too long.
    let wait_for = |w: &mut Child, what: &str, cond: &dyn Fn() -> bool| {
        let start = Instant::now();
        while !cond() {
            if let Some(status) = w.try_wait().unwrap() {
                panic!("the writer exited ({status}) before {what}");
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "timed out: {what}"
            );
        }
        start.elapsed()
    };
    let mut interrupted = 0;
    // Kill a writer at different moments of its second write, measured in units of how
    // long its first write took: while it writes the temporary file, while it flushes it
    // to disk, while it moves it into place, or just after.
    for fraction in [0.0, 0.15, 0.3, 0.45, 0.6, 0.75, 0.9, 1.0, 1.1, 1.4] {
        let _ = fs::remove_file(&entry);
        let mut w = child("big-writer", db.root(), &[]);
        let pid = w.id();
        wait_for(&mut w, "its first write began", &|| has_tmp(pid));
        let first = wait_for(&mut w, "its first write ended", &|| entry.exists());
        wait_for(&mut w, "its second write began", &|| has_tmp(pid));
        std::thread::sleep(first.mul_f64(fraction));
        w.kill().unwrap();
        w.wait().unwrap();

        // Whatever is visible is whole (list parses every entry), and the entry is there.
        let listed = db.list().unwrap();
        assert!(listed
            .iter()
            .any(|l| l.path == entry && l.status == Status::Current));
        for l in &listed {
            match &l.status {
                Status::Current => check_whole(l.entry.as_ref().unwrap()),
                Status::Partial => {}
                other => panic!("{}: {other:?}", l.path.display()),
            }
        }
        if listed.iter().any(|l| l.status == Status::Partial) {
            interrupted += 1;
        }
    }
    assert!(
        interrupted > 0,
        "no writer was caught in the middle of a write"
    );

    // The dead writer's lock is gone: a write does not wait for it.
    let (tx, rx) = std::sync::mpsc::channel();
    let db2 = db.clone();
    std::thread::spawn(move || {
        let r = db2
            .put(&mm_entry(A100, "v1", "2026-11-03T10:20:30Z"))
            .map(|_| ());
        tx.send(r.map_err(|e| e.to_string())).unwrap();
    });
    rx.recv_timeout(Duration::from_secs(30))
        .expect("put blocked on the lock of a killed writer")
        .unwrap();

    // prune --invalid clears the leftovers and nothing else.
    let removed = db
        .prune(
            &PruneFilter {
                invalid: true,
                ..Default::default()
            },
            false,
        )
        .unwrap();
    assert!(removed.iter().all(|l| l.status == Status::Partial) && !removed.is_empty());
    assert!(db
        .list()
        .unwrap()
        .iter()
        .all(|l| l.status == Status::Current));
}

#[test]
fn concurrent_processes_never_see_a_partial_entry() {
    let (_tmp, db) = temp_db();
    let writers: Vec<Child> = (0..4)
        .map(|id| child("writer", db.root(), &[(ROLE_ID, id.to_string().as_ref())]))
        .collect();
    let done = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..3)
        .map(|r| {
            let db = db.clone();
            let done = done.clone();
            std::thread::spawn(move || {
                let mut seen = 0;
                while !done.load(Ordering::Relaxed) {
                    if r == 0 {
                        for l in db.list().unwrap() {
                            // Readers hold the shared lock: no write is under way, so
                            // no temporary file can be seen either.
                            assert!(l.status.is_valid(), "{}: {:?}", l.path.display(), l.status);
                            check_whole_or_other(l.entry.as_ref().unwrap());
                        }
                    } else if let Some(e) = db.get(MM, &hash_of("shared"), H200).unwrap() {
                        check_whole(&e);
                        seen += 1;
                    }
                }
                seen
            })
        })
        .collect();
    for w in writers {
        let out = w.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "writer failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    done.store(true, Ordering::Relaxed);
    let seen: usize = readers.into_iter().map(|r| r.join().unwrap()).sum();
    assert!(seen > 0, "the readers never saw an entry");
    let e = db.get(MM, &hash_of("shared"), H200).unwrap().unwrap();
    check_whole(&e);
    assert!(
        e.collector
            .ends_with(&format!("round {}", WRITER_ROUNDS - 1)),
        "{}",
        e.collector
    );
    assert_eq!(db.list().unwrap().len(), 5);
}

/// A reader that finds no database holds no lock, so it must answer as for an empty one and
/// not look at the directory a writer may be creating at that moment (it would see the
/// writer's temporary file). The window is short: many fresh databases, each read by
/// threads that spin while the first entry is written.
#[test]
fn readers_of_a_database_being_created_see_nothing_partial() {
    let invalid = PruneFilter {
        invalid: true,
        ..Default::default()
    };
    for round in 0..DB_CREATIONS {
        let (_tmp, db) = temp_db();
        let done = AtomicBool::new(false);
        std::thread::scope(|s| {
            let readers: Vec<_> = (0..2)
                .map(|r| {
                    let (db, done, invalid) = (&db, &done, &invalid);
                    s.spawn(move || {
                        while !done.load(Ordering::SeqCst) {
                            if r == 0 {
                                for l in db.list().unwrap() {
                                    assert!(
                                        l.status.is_valid(),
                                        "{}: {:?}",
                                        l.path.display(),
                                        l.status
                                    );
                                    check_whole(l.entry.as_ref().unwrap());
                                }
                            } else {
                                let selected = db.prune(invalid, true).unwrap();
                                assert!(
                                    selected.is_empty(),
                                    "prune --invalid selected {}",
                                    selected[0].path.display()
                                );
                                if let Some(e) = db.get(MM, &hash_of("shared"), H200).unwrap() {
                                    check_whole(&e);
                                }
                            }
                        }
                    })
                })
                .collect();
            db.put(&variant(0, round)).unwrap();
            done.store(true, Ordering::SeqCst);
            for r in readers {
                r.join().unwrap();
            }
        });
        assert_eq!(
            db.get(MM, &hash_of("shared"), H200).unwrap(),
            Some(variant(0, round))
        );
    }
}

fn check_whole_or_other(e: &Entry) {
    if e.kernel.mangled == MM {
        check_whole(e);
    } else {
        let id = e.kernel.mangled.strip_prefix("_Z1kv").unwrap();
        assert_eq!(
            e,
            &entry_with(
                "k",
                &format!("_Z1kv{id}"),
                &hash_of("o"),
                A100,
                "2026-11-03T00:00:00Z",
                "",
                &[32]
            )
        );
    }
}

#[test]
fn concurrent_threads_never_see_a_partial_entry() {
    let (_tmp, db) = temp_db();
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        let writers: Vec<_> = (0..4u32)
            .map(|id| {
                let db = &db;
                s.spawn(move || {
                    for round in 0..15 {
                        db.put(&variant(id, round)).unwrap();
                    }
                })
            })
            .collect();
        let reader = s.spawn(|| {
            let mut n = 0;
            while !done.load(Ordering::Relaxed) {
                if let Some(e) = db.get(MM, &hash_of("shared"), H200).unwrap() {
                    check_whole(&e);
                    n += 1;
                }
                for l in db.list().unwrap() {
                    assert!(l.status.is_valid(), "{:?}", l.status);
                }
            }
            n
        });
        for w in writers {
            w.join().unwrap();
        }
        done.store(true, Ordering::Relaxed);
        assert!(reader.join().unwrap() > 0);
    });
    let listed = db.list().unwrap();
    assert_eq!(listed.len(), 1);
    // No temporary file is left behind by writers that finished.
    let dir = listed[0].path.parent().unwrap();
    assert_eq!(fs::read_dir(dir).unwrap().count(), 1);
}
