//! A profile database, a calibration report, a device description and the choices cache are
//! data that klaraptor does not trust (docs/security.md): no string in them may become code
//! in a binary built against them. Each string field is given text that would leave a C
//! comment or literal, split a line, or name another path; the reader either refuses the file
//! as damaged, naming the field, or the generated C is the same code as without it.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{copy_dir, fixture_entry, idiom_spec, klaraptor_cc, ok, pinned};
use klaraptor_model::c_text::code_tokens;
use klaraptor_profiler::db::ProfileDb;
use klaraptor_profiler::record::Entry;
use klaraptor_program::untrusted::{field_mut, Baseline, Verdict};

/// What an attacker writes into a field: out of a comment, a new line for the preprocessor,
/// out of a string literal, a line splice, another path.
const INJECTIONS: [&str; 5] = [
    " */ int pwned = 1; /* ",
    "\n#error injected\n",
    "\"; int pwned; \"",
    "\\",
    "/../../../tmp/pwned",
];

const SAXPY_ENTRY: &str =
    "samples/klaraptor-profiles/v1/nvidia-h200-2803d38c/_Z5saxpyfPKfPfi-303aeacbd19721f5.toml";

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The saxpy entry with every string field the format has: a failed sample (an error) and
/// the plan's note set.
fn entry_with_every_field() -> Entry {
    let mut entry = fixture_entry(SAXPY_ENTRY);
    let mut failed = entry.samples[0].clone();
    failed.block = [2048, 1, 1];
    failed.grid = [1, 1, 1];
    failed.counters = None;
    failed.error = Some("block 2048x1x1 exceeds the device's 1024 threads per block".into());
    entry.samples.push(failed);
    if entry.plan.note.is_empty() {
        entry.plan.note = "sizes of the recipe".into();
    }
    entry
}

fn saxpy_spec() -> klaraptor_spec::link::LinkSpec {
    idiom_spec(&fixture_entry(SAXPY_ENTRY), "ceil(N, bx)", &["bx >= 32"])
}

/// A database holding one entry file, `text`, where the saxpy entry belongs.
fn db_with(text: &str) -> (tempfile::TempDir, ProfileDb, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let db = ProfileDb::open(dir.path().join("db")).unwrap();
    let e = fixture_entry(SAXPY_ENTRY);
    let path = db
        .entry_path(&e.kernel.mangled, &e.kernel.code_hash, &e.device.name)
        .unwrap();
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, text).unwrap();
    (dir, db, path)
}

/// A link's reading of the entry `text` from a database: the entry, or `Err` with the warning
/// when it was set aside as damaged.
fn link_reads(text: &str) -> Result<Option<Entry>, String> {
    let (_dir, db, path) = db_with(text);
    let spec = saxpy_spec();
    let entries = db
        .entries_for(&spec.mangled, &spec.code_hash)
        .expect("a damaged entry is a miss, not an error");
    if let Some(w) = db.take_damaged().first() {
        assert!(entries.is_empty());
        let mut aside = path.into_os_string();
        aside.push(".invalid");
        assert!(Path::new(&aside).is_file(), "{w}: not moved aside");
        return Err(w.clone());
    }
    Ok(entries.into_iter().next())
}

#[test]
fn every_string_of_an_entry_is_refused_or_leaves_the_code_unchanged() {
    let base = Baseline::new(saxpy_spec(), &entry_with_every_field()).unwrap();
    for f in [
        "collector",
        "captured_at",
        "kernel.name",
        "plan.note",
        "device.uuid",
    ] {
        assert!(base.fields().iter().any(|x| x == f), "{f} missing");
    }
    assert!(base.fields().iter().any(|f| f.ends_with(".error")));
    let mut verdicts = std::collections::BTreeMap::<&str, usize>::new();
    for field in base.fields() {
        for inj in INJECTIONS {
            let text = base.with(field, inj);
            let verdict = base
                .check(field, &text)
                .unwrap_or_else(|e| panic!("{field} += {inj:?}: {e}"));
            // The database's reader agrees: a refused entry is moved aside with a warning
            // that names the file and the field; another is read as it is.
            match (&verdict, link_reads(&text)) {
                (Verdict::Refused(_), Err(w)) => assert!(
                    w.contains(&format!("field `{field}`")) && w.contains(".toml"),
                    "{w}"
                ),
                (Verdict::Unused, Ok(_)) | (Verdict::Unchanged, Ok(Some(_))) => {}
                (v, read) => panic!("{field} += {inj:?}: {v:?}, but the database read {read:?}"),
            }
            *verdicts
                .entry(match verdict {
                    Verdict::Refused(_) => "refused",
                    Verdict::Unused => "unused",
                    Verdict::Unchanged => "unchanged",
                })
                .or_default() += 1;
        }
    }
    // The names, versions and dates are held to their formats; free text never reaches C.
    assert!(verdicts["refused"] >= 11 * INJECTIONS.len(), "{verdicts:?}");
    assert!(
        verdicts["unchanged"] >= 2 * INJECTIONS.len(),
        "{verdicts:?}"
    );
    assert_eq!(verdicts["unused"], INJECTIONS.len(), "{verdicts:?}");
}

/// A small deterministic generator (splitmix64) for the mutation loop.
fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[test]
fn random_text_in_random_fields_never_changes_the_code() {
    // What the fuzz target (fuzz/fuzz_targets/entry_strings.rs) does at length, here a few
    // hundred times from a fixed seed: text of bytes that matter to C, TOML and paths.
    const ALPHABET: &[u8] = b"*/\\\"'?\n\r\t#;{}()=<>.:-_ aZ09\x00\x1b\x7f";
    let base = Baseline::new(saxpy_spec(), &entry_with_every_field()).unwrap();
    let mut state = 0x6b6c_6172_6170_746f;
    let mut unchanged = 0;
    for _ in 0..400 {
        let field = &base.fields()[splitmix(&mut state) as usize % base.fields().len()];
        // Free text builds a program each time: a few of those are enough.
        let free = field == "plan.note" || field.ends_with(".error");
        if free && unchanged >= 12 {
            continue;
        }
        let len = 1 + splitmix(&mut state) as usize % 12;
        let text: String = (0..len)
            .map(|_| char::from(ALPHABET[splitmix(&mut state) as usize % ALPHABET.len()]))
            .collect();
        match base.check(field, &base.with(field, &text)) {
            Ok(Verdict::Unchanged) => unchanged += 1,
            Ok(_) => {}
            Err(e) => panic!("{field} += {text:?}: {e}"),
        }
    }
    assert!(unchanged > 0);
}

#[test]
fn a_hostile_collector_in_a_shared_database_never_becomes_code() {
    // The report: samples/matmul built with `make NVCC=klaraptor-cc` against a copy of the
    // committed database whose saxpy entry's collector closes the program's header comment.
    let root = tempfile::tempdir().unwrap();
    let sample = root.path().join("samples/matmul");
    std::fs::create_dir_all(&sample).unwrap();
    for f in ["Makefile", "kernels.h", "main.cu", "mm.cu", "saxpy.cu"] {
        std::fs::copy(repo().join("samples/matmul").join(f), sample.join(f)).unwrap();
    }
    let from = repo().join("samples/klaraptor-profiles");
    let to = root.path().join("samples/klaraptor-profiles");
    std::fs::create_dir_all(to.join("v1")).unwrap();
    for f in ["README.txt", "generation"] {
        std::fs::copy(from.join(f), to.join(f)).unwrap();
    }
    copy_dir(
        &from.join("v1/nvidia-h200-2803d38c"),
        &to.join("v1/nvidia-h200-2803d38c"),
    );
    let entry = root.path().join(SAXPY_ENTRY);
    let text = std::fs::read_to_string(&entry).unwrap();
    let hostile = text.replace(
        "collector = \"klaraptor-collector 0.1.0\"",
        "collector = \"klaraptor-collector 0.1.0 */ int pwned = 1; /*\\n#error injected\\n\"",
    );
    assert_ne!(hostile, text, "the fixture's collector line moved");
    std::fs::write(&entry, hostile).unwrap();

    let out = pinned(&sample, Path::new("make"))
        .arg(format!("NVCC={}", klaraptor_cc().display()))
        .output()
        .expect("cannot run make");
    let err = ok(&out);
    assert!(
        err.contains("_Z5saxpyfPKfPfi-303aeacbd19721f5.toml") && err.contains("field `collector`"),
        "the warning names neither the entry nor the field:\n{err}"
    );
    let nm = Command::new("nm")
        .arg(sample.join("matmul"))
        .output()
        .unwrap();
    assert!(nm.status.success());
    assert!(!String::from_utf8_lossy(&nm.stdout).contains("pwned"));
    // saxpy keeps the program's launch; mm, whose entry is intact, has its program.
    let programs: Vec<String> = std::fs::read_dir(sample.join("matmul.klaraptor"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".c"))
        .collect();
    assert!(
        programs.iter().any(|n| n.starts_with("mm.")),
        "{programs:?}"
    );
    assert!(
        !programs.iter().any(|n| n.starts_with("saxpy.")),
        "{programs:?}"
    );
    for p in &programs {
        let c = std::fs::read_to_string(sample.join("matmul.klaraptor").join(p)).unwrap();
        assert!(!c.contains("pwned"), "{p}");
    }
    assert!(Path::new(&format!("{}.invalid", entry.display())).is_file());
}

#[test]
fn calibration_reports_and_device_descriptions_refuse_text_out_of_format() {
    use klaraptor_profiler::calibration::DeviceReport;
    let report =
        std::fs::read_to_string(repo().join("profiler/tests/fixtures/calibration-h200.toml"))
            .unwrap();
    DeviceReport::parse(&report, "fixture").unwrap();
    let value: toml::Value = toml::from_str(&report).unwrap();
    let device = value.get("device").unwrap().as_table().unwrap();
    let mut checked = 0;
    for (key, v) in device {
        if !v.is_str() {
            continue;
        }
        for inj in INJECTIONS {
            let mut bad = value.clone();
            field_mut(&mut bad, &format!("device.{key}"))
                .unwrap()
                .push_str(inj);
            let err = DeviceReport::parse(&toml::to_string(&bad).unwrap(), "hostile.toml")
                .expect_err(&format!("[device] {key} += {inj:?} was accepted"))
                .to_string();
            assert!(
                err.contains(&format!("[device] {key}")) && err.contains("hostile.toml"),
                "{key}: {err}"
            );
            checked += 1;
        }
    }
    assert!(checked >= 8 * INJECTIONS.len(), "{checked}");

    // A device description: its name and UUID are held to their formats; its note, text for
    // people, is one line, and only ever comment text in C.
    use klaraptor_model::{device_to_c, Device};
    let (file, text) = klaraptor_profiler::devices::SHIPPED[0];
    let plain = code_tokens(&device_to_c(
        &Device::from_toml_str(text, file).unwrap(),
        "d",
    ));
    let value: toml::Value = toml::from_str(text).unwrap();
    let mut accepted = 0;
    for key in ["name", "uuid", "note"] {
        for inj in INJECTIONS {
            let mut bad = value.clone();
            field_mut(&mut bad, key).unwrap().push_str(inj);
            match Device::from_toml_str(&toml::to_string(&bad).unwrap(), file) {
                Err(e) => assert!(e.to_string().contains(key), "{key}: {e}"),
                Ok(d) => {
                    assert_eq!(key, "note", "{key} += {inj:?} was accepted");
                    assert_eq!(code_tokens(&device_to_c(&d, "d")), plain, "{inj:?}");
                    accepted += 1;
                }
            }
        }
    }
    // Every injection but the line break is one line of text.
    assert_eq!(accepted, INJECTIONS.len() - 1);
}

#[test]
fn choice_files_refuse_names_out_of_format_and_control_characters() {
    use klaraptor_profiler::choices_cmd::ChoiceFile;
    // A file in the format the runtime writes (klaraptor_choices.inc's choices_write) and
    // believes: a shape other than the program's, with the paired comparison it won.
    let valid = "version = 4\nkernel = _Z2mmPKfS0_Pfi\nname = mm\ncode_hash = 5f1c0e9a2b7d4c31\n\
                 device = NVIDIA H200\n\
                 device_id = NVIDIA H200|sm=132|cc=9.0|bus_bits=6144\n\
                 data = n=2048\nblock = 128x2x1\nprogram_block = 32x8x1\n\
                 candidate = model#2\nconfidence = paired\nlaunches = 8\npairs = 3\n\
                 vs_program = 0.7500\nextra_us = 41.5\n\
                 compared = model#2 128x2x1 vs program 32x8x1 pairs=3 mean=-0.25000 \
                 sd=0.01000 verdict=win\n";
    ChoiceFile::parse(valid).unwrap();
    for key in ["kernel", "code_hash", "device"] {
        for inj in INJECTIONS.iter().chain(&["\u{1b}[2J"]) {
            // A line break ends the value: what follows is another line of the file.
            let inj = inj.replace('\n', "");
            let text = valid.replacen(&format!("\n{key} = "), &format!("\n{key} = x{inj}"), 1);
            let err =
                ChoiceFile::parse(&text).expect_err(&format!("{key} += {inj:?} was accepted"));
            assert!(err.contains(&format!("`{key}`")), "{key}: {err}");
        }
    }
    for key in [
        "name",
        "data",
        "candidate",
        "device_id",
        "confidence",
        "compared",
    ] {
        let text = valid.replacen(&format!("\n{key} = "), &format!("\n{key} = \u{1b}[2J"), 1);
        let err = ChoiceFile::parse(&text).expect_err(key);
        assert!(err.contains(&format!("`{key}`")), "{key}: {err}");
    }
}
