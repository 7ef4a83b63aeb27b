//! Command lines that klaraptor-cc must treat as nvcc does (no GPU; the real klaraptor-cc
//! and the toolchain's nvcc, issue 28): `--dryrun` on an annotated source, a source path
//! with a space and a comma, several sources for one `-o` in a compile-only command, a
//! closed stderr, `klaraptor validate --sizes` values that begin with a dash, and what
//! `-lineinfo`, `-G` and `-cuda` outputs name.

mod common;
use common::*;

use std::io::BufRead as _;
use std::os::fd::{FromRawFd as _, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// A scratch root holding `sub/` with the annotated sample source (samples/matmul's mm.cu
/// and kernels.h), an empty `tmp/` (klaraptor-cc's TMPDIR) and a user cache of its own.
struct Scratch {
    root: tempfile::TempDir,
    src: PathBuf,
}

impl Scratch {
    fn new(sub: &str) -> Scratch {
        let root = tempfile::tempdir().unwrap();
        let src = root.path().join(sub);
        std::fs::create_dir_all(&src).unwrap();
        std::fs::create_dir_all(root.path().join("tmp")).unwrap();
        let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
        for f in ["mm.cu", "kernels.h"] {
            std::fs::copy(repo.join("samples/matmul").join(f), src.join(f)).unwrap();
        }
        Scratch { root, src }
    }

    fn tmp(&self) -> PathBuf {
        self.root.path().join("tmp")
    }

    /// `prog` run in `dir`, with klaraptor-cc's environment pinned: the test's nvcc, no GPU,
    /// no profile database from the environment, a private user cache and TMPDIR.
    fn command(&self, prog: &Path, dir: &Path) -> Command {
        let mut c = Command::new(prog);
        c.current_dir(dir)
            .env("KLARAPTOR_NVCC", nvcc())
            .env("KLARAPTOR_NO_GPU", "1")
            .env("KLARAPTOR_TRANSFER", "off")
            .env("XDG_CACHE_HOME", self.root.path().join("cache"))
            .env("TMPDIR", self.tmp())
            .env_remove("KLARAPTOR_PROFILE_DB")
            .env_remove("KLARAPTOR_COLLECTOR")
            .env_remove("NVCC_PREPEND_FLAGS")
            .env_remove("NVCC_APPEND_FLAGS");
        c
    }

    /// klaraptor-cc `args` in the source directory.
    fn cc(&self, args: &[&str]) -> Output {
        self.command(&klaraptor_cc(), &self.src)
            .args(args)
            .output()
            .unwrap()
    }

    /// The toolchain's nvcc `args` in the source directory, in the same environment.
    fn nvcc(&self, args: &[&str]) -> Output {
        self.command(&nvcc(), &self.src)
            .args(args)
            .output()
            .unwrap()
    }
}

/// nvcc's `--dryrun` lines (`#$ …`), its per-run temporary names made equal.
fn dryrun_lines(stderr: &str) -> Vec<String> {
    let re = regex::Regex::new(r"tmpxft_[0-9a-f]{8}_[0-9a-f]{8}").unwrap();
    stderr
        .lines()
        .filter(|l| l.starts_with("#$ "))
        .map(|l| re.replace_all(l, "tmpxft_X").into_owned())
        .collect()
}

/// Defect 1: `--dryrun` on an annotated source printed clang's "no input files" and
/// failed. It must print what would run (nvcc's own --dryrun of the command, and a line of
/// klaraptor-cc's), exit 0 and write nothing.
#[test]
fn dryrun_of_an_annotated_source_prints_the_commands_and_writes_nothing() {
    let s = Scratch::new("src");
    for flag in ["--dryrun", "-dryrun"] {
        let args = [flag, "-O2", "-arch=sm_90", "-c", "mm.cu", "-o", "mm.o"];
        let out = s.cc(&args);
        let err = ok(&out);
        let notes: Vec<&str> = err
            .lines()
            .filter(|l| l.starts_with("klaraptor-cc:"))
            .collect();
        assert_eq!(notes.len(), 1, "{flag}: one line of klaraptor-cc's:\n{err}");
        assert!(
            notes[0].contains("--dryrun")
                && notes[0].contains("instrument")
                && notes[0].contains("mm.cu"),
            "{flag}: {}",
            notes[0]
        );
        let nv = s.nvcc(&args);
        assert!(nv.status.success(), "nvcc {flag}: {}", stderr(&nv));
        let expected = dryrun_lines(&stderr(&nv));
        assert!(!expected.is_empty(), "nvcc printed no commands");
        assert_eq!(
            dryrun_lines(&err),
            expected,
            "{flag}: not nvcc's own commands"
        );
        assert_eq!(files(&s.src), ["kernels.h", "mm.cu"], "{flag}: wrote files");
        assert_eq!(
            files(&s.tmp()),
            Vec::<String>::new(),
            "{flag}: left temporaries"
        );
    }

    // A link of an instrumented object is not done either.
    ok(&s.cc(&["-O2", "-arch=sm_90", "-c", "mm.cu", "-o", "mm.o"]));
    let err = ok(&s.cc(&["--dryrun", "-arch=sm_90", "mm.o", "-o", "app"]));
    assert!(
        err.lines()
            .any(|l| l.starts_with("klaraptor-cc: --dryrun:") && l.contains("instrumented")),
        "{err}"
    );
    assert!(!dryrun_lines(&err).is_empty(), "{err}");
    assert_eq!(
        files(&s.src),
        ["kernels.h", "mm.cu", "mm.o"],
        "the dry link wrote files"
    );
}

/// Defect 2: the source's directory went to the host compiler through a comma-joined
/// `-Xcompiler=-iquote,<dir>`, which nvcc splits at commas (and its shell at spaces).
#[test]
fn a_source_directory_with_a_space_and_a_comma_stays_whole() {
    let s = Scratch::new("sp ace,dir");
    let root = s.root.path();
    let compile = |args: &[&str]| {
        s.command(&klaraptor_cc(), root)
            .args(["-O2", "-arch=sm_90"])
            .args(args)
            .output()
            .unwrap()
    };

    // The instrumented compile, with a dependency file.
    let err = ok(&compile(&["-c", "sp ace,dir/mm.cu", "-o", "mm.o", "-MD"]));
    assert!(!err.contains("error"), "{err}");
    assert!(
        klaraptor::instrument::needs_runtime(&root.join("mm.o")),
        "mm.o is not instrumented"
    );
    // The dependency file names the user's files, escaped for make as nvcc writes them.
    let deps = std::fs::read_to_string(root.join("mm.d")).unwrap();
    assert!(deps.starts_with("mm.o : sp\\ ace,dir/mm.cu \\\n"), "{deps}");
    assert!(deps.contains(" sp\\ ace,dir/kernels.h"), "{deps}");
    assert!(!deps.contains(" sp ace"), "an unescaped space:\n{deps}");
    assert!(
        !deps.contains("klaraptor-"),
        "names a temporary file:\n{deps}"
    );

    // Relocatable device code: instrumented too.
    let err = ok(&compile(&["-dc", "sp ace,dir/mm.cu", "-o", "mm_rdc.o"]));
    assert!(!err.contains("not instrumented"), "{err}");
    assert!(
        klaraptor::instrument::needs_runtime(&root.join("mm_rdc.o")),
        "mm_rdc.o is not instrumented"
    );
}

/// The code hash an instrumented object's specs carry (`code_hash = "…"`).
fn code_hash(object: &[u8]) -> String {
    let text = String::from_utf8_lossy(object);
    let re = regex::Regex::new(r#"code_hash = "([0-9a-f]{16})""#).unwrap();
    re.captures(&text).expect("no code hash in the object")[1].to_string()
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

/// `-lineinfo` and `-G` make nvcc embed the fatbinary's identifier, the input's path as
/// given: an instrumented object named klaraptor-cc's temporary copy there, so the code hash
/// changed with every compile (a profile never found again) and tools showed a deleted
/// file. Now nvcc translates the user's file: with `-lineinfo` two compiles give one hash
/// and the object names `mm.cu`, as plain nvcc's does; with `-G` (whose device debug
/// information names nvcc's temporary files, which the code hash leaves out) nothing names
/// the temporary directory. `-cuda` output's line markers name the user's file.
#[test]
fn line_information_and_identifiers_name_the_users_file() {
    let s = Scratch::new("src");
    let arch = "-gencode=arch=compute_90,code=sm_90";
    // klaraptor-cc's temporary directories (nvcc's own temporary files live in TMPDIR too).
    let tmp = format!("{}/klaraptor-", s.tmp().display());
    let mut hashes = Vec::new();
    for (i, flag) in ["-lineinfo", "-lineinfo", "-G"].iter().enumerate() {
        let out = format!("mm{i}.o");
        ok(&s.cc(&[flag, arch, "-c", "mm.cu", "-o", &out]));
        let obj = std::fs::read(s.src.join(&out)).unwrap();
        assert!(!contains(&obj, &tmp), "{flag}: the object names {tmp}");
        assert!(
            !contains(&obj, "/klaraptor-"),
            "{flag}: names a temporary copy"
        );
        hashes.push(code_hash(&obj));
    }
    assert_eq!(
        hashes[0], hashes[1],
        "-lineinfo: the code hash moved between compiles"
    );
    ok(&s.nvcc(&["-lineinfo", arch, "-c", "mm.cu", "-o", "plain.o"]));
    let plain = std::fs::read(s.src.join("plain.o")).unwrap();
    let ours = std::fs::read(s.src.join("mm0.o")).unwrap();
    assert!(contains(&plain, "mm.cu") && contains(&ours, "mm.cu"));
    // The pragma lines stay in the file nvcc translates; the host compile never warns
    // about them, even under -Wall.
    let err = ok(&s.cc(&["-Xcompiler", "-Wall", arch, "-c", "mm.cu", "-o", "wall.o"]));
    assert!(!err.contains("pragma"), "{err}");

    // -cuda: not instrumented, nvcc runs the command as given.
    let err = ok(&s.cc(&[arch, "-cuda", "mm.cu", "-o", "mm.cu.ii"]));
    assert!(err.contains("not instrumented in this mode"), "{err}");
    let ii = std::fs::read_to_string(s.src.join("mm.cu.ii")).unwrap();
    let markers: Vec<&str> = ii
        .lines()
        .filter(|l| l.starts_with("# ") && l.contains("mm.cu\""))
        .collect();
    assert!(!markers.is_empty(), "no line marker names mm.cu");
    assert!(!ii.contains(&tmp), "-cuda output names a temporary file");
}

/// Defect 3: `-c a.cu b.cu -o x.o` with an annotated source wrote the last object and
/// exited 0; nvcc refuses the command, and klaraptor-cc must refuse it as nvcc does.
#[test]
fn several_sources_for_one_object_fail_as_nvcc_fails() {
    let s = Scratch::new("src");
    std::fs::write(
        s.src.join("other.cu"),
        "__global__ void other(int *p) { *p = 1; }\n",
    )
    .unwrap();
    std::fs::copy(s.src.join("mm.cu"), s.src.join("mm2.cu")).unwrap();
    for inputs in [
        ["mm.cu", "other.cu"],
        ["other.cu", "mm.cu"],
        ["mm.cu", "mm2.cu"],
    ] {
        let mut args = vec!["-O2", "-arch=sm_90", "-c"];
        args.extend(inputs);
        args.extend(["-o", "x.o"]);
        let nv = s.nvcc(&args);
        assert!(!nv.status.success(), "nvcc accepted {args:?}");
        let kl = s.cc(&args);
        assert_eq!(
            kl.status.code(),
            nv.status.code(),
            "{args:?}: {}",
            stderr(&kl)
        );
        assert_eq!(stderr(&kl), stderr(&nv), "{args:?}");
        assert!(
            stderr(&kl).contains("A single input file is required"),
            "{}",
            stderr(&kl)
        );
        assert!(!s.src.join("x.o").exists(), "{args:?} wrote x.o");
        assert_eq!(files(&s.tmp()), Vec::<String>::new(), "left temporaries");
    }
}

/// A pipe whose read end is closed: every write to the other end fails with EPIPE.
fn closed_pipe() -> Stdio {
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills two new descriptors this test owns from here on.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: each descriptor is owned once.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    drop(read);
    Stdio::from(write)
}

/// Defect 4: `klaraptor-cc … 2>&1 | head -1` panicked (exit 101) at its first message after
/// the reader had gone. klaraptor-cc must go on (or fail) as it would with a stderr.
#[test]
fn a_closed_stderr_never_panics() {
    let s = Scratch::new("src");
    let src = s.src.clone();
    std::fs::write(
        src.join("bad.cu"),
        std::fs::read_to_string(src.join("mm.cu"))
            .unwrap()
            .replace("data(N=n)", "data(N=nope)"),
    )
    .unwrap();
    let with_closed_stderr = |args: &[&str]| {
        s.command(&klaraptor_cc(), &src)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(closed_pipe())
            .output()
            .unwrap()
    };
    // (arguments, the exit status, the file it must leave)
    let cases: [(&[&str], i32, Option<&str>); 4] = [
        (
            &[
                "--kl-verbose",
                "-O2",
                "-arch=sm_90",
                "-c",
                "mm.cu",
                "-o",
                "mm.o",
            ],
            0,
            Some("mm.o"),
        ),
        (
            &["-O2", "-arch=sm_90", "-dc", "mm.cu", "-o", "mm_rdc.o"],
            0,
            Some("mm_rdc.o"),
        ),
        (&["-arch=sm_90", "-c", "bad.cu", "-o", "bad.o"], 1, None),
        (&["--kl-nonsense", "-c", "mm.cu"], 1, None),
    ];
    for (args, code, output) in cases {
        let out = with_closed_stderr(args);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {:?}", out.status);
        assert!(
            !String::from_utf8_lossy(&out.stdout).contains("panicked"),
            "{args:?}"
        );
        if let Some(o) = output {
            assert!(src.join(o).is_file(), "{args:?}: no {o}");
        }
    }
    assert!(!src.join("bad.o").exists());

    // As `2>&1 | head -1`: the reader takes one line and goes.
    let mut child = s
        .command(&klaraptor_cc(), &src)
        .args([
            "--kl-verbose",
            "-O2",
            "-arch=sm_90",
            "-c",
            "mm.cu",
            "-o",
            "mm2.o",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    std::io::BufReader::new(child.stderr.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    let status = child.wait().unwrap();
    assert!(first.starts_with("klaraptor-cc:"), "{first}");
    assert!(!first.contains("panicked"), "{first}");
    assert_ne!(status.code(), Some(101), "{status:?}");
    assert_eq!(status.code(), Some(0), "{status:?}");
}

/// Defect 5: clap refused `--sizes "-s 4096 -q"` (only `--sizes="-s 4096 -q"` worked).
#[test]
fn validate_takes_sizes_that_begin_with_a_dash() {
    let s = Scratch::new("src");
    for args in [
        vec!["validate", "./app", "--sizes", "-s 4096 -q"],
        vec![
            "validate", "./app", "--sizes", "-n 5", "--sizes", "--big 1", "--runs", "3",
        ],
        vec!["validate", "./app", "--sizes=-s 4096 -q"],
    ] {
        let out = s
            .command(&klaraptor(), &s.src)
            .args(&args)
            .output()
            .unwrap();
        let err = stderr(&out);
        // The arguments are taken; validate stops at the missing program.
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(
            err.starts_with("klaraptor: error: reading ./app"),
            "{args:?}: {err}"
        );
    }
}
