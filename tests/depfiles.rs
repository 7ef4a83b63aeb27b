//! What build tools key their rebuilds on, with a `klaraptor.toml` (issue 28; no GPU; the
//! real klaraptor-cc and the toolchain's nvcc): the dependency files of `-MD`, `-MMD` and
//! `-M` list it, `-E` output changes with it (ccache hashes it), and an object in which no
//! launch was instrumented links with any driver.

mod common;
use common::*;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, SystemTime};

/// A kernel and a `<<<>>>` launch of it; `klaraptor.toml` annotates it.
const SCALE_CU: &str = r#"#include <cuda_runtime.h>
#include "scale.h"
__global__ void scale(float *x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= 2.0f;
}
void run_scale(float *x, int n) { scale<<<(n + 127) / 128, 128>>>(x, n); }
"#;

/// A source beside the toml that none of its entries annotates.
const PLAIN_CU: &str = "__global__ void plain(int *p) { *p = 1; }\n";

fn toml_with(block: &str) -> String {
    format!("[kernel.scale]\ndata = [\"N=n\"]\nblock = [\"{block}\"]\n")
}

/// A scratch root holding `dir/` with `scale.cu` (and its `scale.h`), `plain.cu` and
/// `klaraptor.toml`, an empty
/// `tmp/` (TMPDIR) and a user cache of its own.
struct Scratch {
    root: tempfile::TempDir,
    dir: PathBuf,
}

impl Scratch {
    fn new(sub: &str) -> Scratch {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join(sub);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::create_dir_all(root.path().join("tmp")).unwrap();
        std::fs::write(dir.join("scale.cu"), SCALE_CU).unwrap();
        std::fs::write(dir.join("scale.h"), "void run_scale(float *x, int n);\n").unwrap();
        std::fs::write(dir.join("plain.cu"), PLAIN_CU).unwrap();
        std::fs::write(dir.join("klaraptor.toml"), toml_with("bx >= 32")).unwrap();
        Scratch { root, dir }
    }

    /// `prog` run in `cwd` with klaraptor-cc's environment pinned: the test's nvcc, no GPU,
    /// no profile database from the environment, a private user cache and TMPDIR.
    fn command(&self, prog: &Path, cwd: &Path) -> Command {
        let mut c = Command::new(prog);
        c.current_dir(cwd)
            .env("KLARAPTOR_NVCC", nvcc())
            .env("KLARAPTOR_NO_GPU", "1")
            .env("KLARAPTOR_TRANSFER", "off")
            .env("XDG_CACHE_HOME", self.root.path().join("cache"))
            .env("TMPDIR", self.root.path().join("tmp"))
            .env_remove("KLARAPTOR_PROFILE_DB")
            .env_remove("KLARAPTOR_COLLECTOR")
            .env_remove("NVCC_PREPEND_FLAGS")
            .env_remove("NVCC_APPEND_FLAGS");
        c
    }

    /// klaraptor-cc `args` in the source directory.
    fn cc(&self, args: &[&str]) -> Output {
        self.command(&klaraptor_cc(), &self.dir)
            .args(args)
            .output()
            .unwrap()
    }

    /// The toolchain's nvcc `args` in the source directory.
    fn nvcc(&self, args: &[&str]) -> Output {
        self.command(&nvcc(), &self.dir)
            .args(args)
            .output()
            .unwrap()
    }

    fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.join(name))
            .unwrap_or_else(|e| panic!("reading {name}: {e}"))
    }

    /// Sets the modification time of `name` to `secs` seconds from now.
    fn set_mtime(&self, name: &str, secs: i64) {
        let now = SystemTime::now();
        let t = if secs >= 0 {
            now + Duration::from_secs(secs.unsigned_abs())
        } else {
            now - Duration::from_secs(secs.unsigned_abs())
        };
        std::fs::File::options()
            .write(true)
            .open(self.dir.join(name))
            .unwrap()
            .set_modified(t)
            .unwrap();
    }
}

/// The prerequisites of the rule of `target` in the make rules `text` (continuations
/// joined, words split at unescaped blanks).
fn prerequisites(text: &str, target: &str) -> Vec<String> {
    let joined = text.replace("\\\n", " ");
    for line in joined.lines() {
        let mut words = Vec::new();
        let mut cur = String::new();
        let mut chars = line.chars();
        while let Some(c) = chars.next() {
            if c == '\\' {
                cur.push(c);
                if let Some(n) = chars.next() {
                    cur.push(n);
                }
            } else if c.is_whitespace() {
                if !cur.is_empty() {
                    words.push(std::mem::take(&mut cur));
                }
            } else {
                cur.push(c);
            }
        }
        if !cur.is_empty() {
            words.push(cur);
        }
        let Some(colon) = words.iter().position(|w| w == ":" || w.ends_with(':')) else {
            continue;
        };
        let t = words[..colon].join(" ") + words[colon].trim_end_matches(':');
        if t.trim() == target && colon + 1 < words.len() {
            return words[colon + 1..].to_vec();
        }
    }
    panic!("no rule for {target} in:\n{text}");
}

/// Defect 1: `-MD`/`-MMD`/`-M` dependency files did not list the `klaraptor.toml` that
/// annotates a source, so make and Ninja rebuilt nothing when it was edited. Every
/// dependency output of a source beside a klaraptor.toml lists it (escaped for make), also
/// where its entries annotate nothing in that source, and `make` rebuilds on its edit.
#[test]
fn dependency_files_list_the_klaraptor_toml() {
    let s = Scratch::new("src");

    // The instrumented compile.
    ok(&s.cc(&["-arch=sm_90", "-c", "scale.cu", "-o", "scale.o", "-MD"]));
    assert!(klaraptor::instrument::needs_runtime(&s.dir.join("scale.o")));
    let deps = s.read("scale.d");
    let p = prerequisites(&deps, "scale.o");
    assert_eq!(p[0], "scale.cu", "{deps}");
    assert!(p.contains(&"klaraptor.toml".to_string()), "{deps}");

    // -MMD -MP with -MF and -MT: listed, with a rule of its own (make goes on when it is
    // deleted), as -MP gives the headers.
    ok(&s.cc(&[
        "-arch=sm_90",
        "-c",
        "scale.cu",
        "-o",
        "scale2.o",
        "-MMD",
        "-MP",
        "-MF",
        "deps.mk",
        "-MT",
        "the-object",
    ]));
    let deps = s.read("deps.mk");
    assert!(
        prerequisites(&deps, "the-object").contains(&"klaraptor.toml".to_string()),
        "{deps}"
    );
    assert!(deps.lines().any(|l| l == "klaraptor.toml:"), "{deps}");
    // -MP reaches the host translation: the headers have theirs.
    assert!(
        deps.lines().any(|l| l.ends_with("scale.h:")),
        "no rule of a header:\n{deps}"
    );

    // Relocatable device code (compiled from the prepared copy, not instrumented).
    ok(&s.cc(&["-arch=sm_90", "-dc", "scale.cu", "-o", "scale_rdc.o", "-MD"]));
    let deps = s.read("scale_rdc.d");
    assert!(
        prerequisites(&deps, "scale_rdc.o").contains(&"klaraptor.toml".to_string()),
        "{deps}"
    );
    assert!(!deps.contains("klaraptor-"), "names a temporary:\n{deps}");

    // -M on standard output, -MM into -MF.
    let out = s.cc(&["-arch=sm_90", "-M", "scale.cu"]);
    ok(&out);
    let deps = String::from_utf8(out.stdout).unwrap();
    assert!(
        prerequisites(&deps, "scale.o").contains(&"klaraptor.toml".to_string()),
        "{deps}"
    );
    ok(&s.cc(&["-arch=sm_90", "-MM", "scale.cu", "-MF", "scale.mm"]));
    let deps = s.read("scale.mm");
    assert!(
        prerequisites(&deps, "scale.o").contains(&"klaraptor.toml".to_string()),
        "{deps}"
    );

    // A source that no entry annotates: nvcc's own dependency file, plus the toml (an
    // entry added for it must rebuild it).
    ok(&s.nvcc(&["-c", "plain.cu", "-o", "plain.o", "-MD", "-MF", "nvcc.d"]));
    ok(&s.cc(&["-c", "plain.cu", "-o", "plain.o", "-MD", "-MF", "kl.d"]));
    let nv = s.read("nvcc.d");
    let kl = s.read("kl.d");
    let tail = |t: &str| t.lines().rev().take(3).collect::<Vec<_>>().join("\n");
    assert!(
        kl == format!("{} \\\n    klaraptor.toml\n", nv.trim_end_matches('\n')),
        "not nvcc's dependency file and the toml; the last lines of nvcc's:\n{}\nof ours:\n{}",
        tail(&nv),
        tail(&kl)
    );

    // Paths are escaped for make as nvcc escapes the source's.
    let spaced = Scratch::new("sp ace");
    let out = spaced
        .command(&klaraptor_cc(), spaced.root.path())
        .args(["-arch=sm_90", "-c", "sp ace/scale.cu", "-o", "x.o", "-MD"])
        .output()
        .unwrap();
    ok(&out);
    let deps = std::fs::read_to_string(spaced.root.path().join("x.d")).unwrap();
    let p = prerequisites(&deps, "x.o");
    assert_eq!(p[0], "sp\\ ace/scale.cu", "{deps}");
    assert!(p.contains(&"sp\\ ace/klaraptor.toml".to_string()), "{deps}");

    // make: up to date, then out of date once the toml is edited.
    std::fs::write(
        s.dir.join("Makefile"),
        "scale.o: scale.cu\n\t$(KL) -arch=sm_90 -c scale.cu -o scale.o -MMD -MP\n-include scale.d\n",
    )
    .unwrap();
    std::fs::remove_file(s.dir.join("scale.o")).unwrap();
    let kl = format!("KL={}", klaraptor_cc().display());
    let make = |q: bool| {
        let mut c = s.command(Path::new("make"), &s.dir);
        if q {
            c.arg("-q");
        }
        c.arg(&kl).arg("scale.o").output().unwrap()
    };
    ok(&make(false));
    assert_eq!(
        make(true).status.code(),
        Some(0),
        "scale.o is not up to date"
    );
    std::fs::write(s.dir.join("klaraptor.toml"), toml_with("bx >= 64")).unwrap();
    s.set_mtime("klaraptor.toml", 5);
    assert_eq!(
        make(true).status.code(),
        Some(1),
        "an edited klaraptor.toml leaves scale.o up to date"
    );
    ok(&make(false));
    let obj = std::fs::read(s.dir.join("scale.o")).unwrap();
    assert!(
        obj.windows(8).any(|w| w == b"bx >= 64"),
        "scale.o does not carry the edited entry"
    );
    // Deleted: make rebuilds rather than stopping at a missing prerequisite.
    std::fs::remove_file(s.dir.join("klaraptor.toml")).unwrap();
    assert_eq!(make(true).status.code(), Some(1), "{}", stderr(&make(true)));
}

/// Defect 2: ccache keys on `-E` output, which did not depend on `klaraptor.toml`, so an
/// edited entry gave back the stale object. `klaraptor-cc -E` is nvcc's output followed by
/// a line marker naming the toml and a comment holding its entries; the output changes
/// when an entry does, not when a comment does; the tail is valid C. With ccache
/// installed, a build through it after an edit gives the new object.
#[test]
fn preprocessed_output_follows_the_klaraptor_toml() {
    let s = Scratch::new("src");
    let e = |args: &[&str]| -> Vec<u8> {
        let out = s.cc(args);
        ok(&out);
        out.stdout
    };
    let nv = s.nvcc(&["-arch=sm_90", "-E", "scale.cu"]);
    ok(&nv);
    let first = e(&["-arch=sm_90", "-E", "scale.cu"]);
    assert!(first.starts_with(&nv.stdout), "not nvcc's output first");
    let tail = String::from_utf8(first[nv.stdout.len()..].to_vec()).unwrap();
    assert!(tail.starts_with("# 1 \"klaraptor.toml\"\n"), "{tail}");
    assert!(
        tail.contains("kernel(scale) data(N=n)") && tail.contains("bx >= 32"),
        "{tail}"
    );
    // The same into a file.
    e(&["-arch=sm_90", "-E", "scale.cu", "-o", "scale.i"]);
    assert_eq!(std::fs::read(s.dir.join("scale.i")).unwrap(), first);
    // The tail compiles.
    let c = s.dir.join("tail.c");
    std::fs::write(&c, format!("{tail}int kl_probe;\n")).unwrap();
    let cc = Command::new("cc")
        .args(["-fsyntax-only", "-Wall", "-Werror", "-x", "c"])
        .arg(&c)
        .output()
        .unwrap();
    ok(&cc);

    // An edited entry changes the output; a comment does not.
    std::fs::write(s.dir.join("klaraptor.toml"), toml_with("bx >= 64")).unwrap();
    let second = e(&["-arch=sm_90", "-E", "scale.cu"]);
    assert_ne!(first, second, "-E output ignores klaraptor.toml");
    assert!(String::from_utf8_lossy(&second).contains("bx >= 64"));
    std::fs::write(
        s.dir.join("klaraptor.toml"),
        format!("# tuned\n{}", toml_with("bx >= 64")),
    )
    .unwrap();
    assert_eq!(e(&["-arch=sm_90", "-E", "scale.cu"]), second);
    // An entry that ends a C comment stays inside it.
    std::fs::write(
        s.dir.join("klaraptor.toml"),
        "[kernel.scale]\ndata = [\"N=n\"]\nprofile = { run = \"./a */ {N}\", sizes = [64] }\n",
    )
    .unwrap();
    let third = e(&["-arch=sm_90", "-E", "scale.cu"]);
    let tail = String::from_utf8(third[nv.stdout.len()..].to_vec()).unwrap();
    std::fs::write(&c, format!("{tail}int kl_probe;\n")).unwrap();
    ok(&Command::new("cc")
        .args(["-fsyntax-only", "-x", "c"])
        .arg(&c)
        .output()
        .unwrap());

    // Through ccache, where it is installed (scripts/setup does not install it).
    if Command::new("ccache").arg("--version").output().is_err() {
        println!("note: ccache is not installed: the build through ccache was not checked");
        return;
    }
    std::fs::write(s.dir.join("klaraptor.toml"), toml_with("bx >= 32")).unwrap();
    // Files older than the compile, so that ccache's direct mode applies.
    for f in ["scale.cu", "klaraptor.toml"] {
        s.set_mtime(f, -60);
    }
    let ccache = |tag: &str| {
        let out = s
            .command(Path::new("ccache"), &s.dir)
            .env("CCACHE_DIR", s.root.path().join("ccache"))
            .env("CCACHE_CONFIGPATH", s.root.path().join("ccache.conf"))
            .env_remove("CCACHE_DISABLE")
            .env_remove("CCACHE_NODIRECT")
            .env_remove("CCACHE_RECACHE")
            .env_remove("CCACHE_READONLY")
            .env_remove("CCACHE_PREFIX")
            .arg(klaraptor_cc())
            .args(["-arch=sm_90", "-c", "scale.cu", "-o", "scale.o"])
            .output()
            .unwrap();
        ok(&out);
        let obj = std::fs::read(s.dir.join("scale.o")).unwrap();
        assert!(
            obj.windows(tag.len()).any(|w| w == tag.as_bytes()),
            "ccache gave an object without {tag}"
        );
    };
    ccache("bx >= 32");
    ccache("bx >= 32");
    std::fs::write(s.dir.join("klaraptor.toml"), toml_with("bx >= 64")).unwrap();
    s.set_mtime("klaraptor.toml", -30);
    ccache("bx >= 64");
    ccache("bx >= 64");
}

/// A kernel annotated in its source and launched through `cudaLaunchKernel`, which the
/// pass cannot bracket.
const UNBRACKETED_CU: &str = r#"#include <cuda_runtime.h>
#pragma klaraptor kernel(fill) data(n)
__global__ void fill(int *p, int n) { if ((int)threadIdx.x < n) p[threadIdx.x] = 1; }
int go(int *p, int n) {
  void *args[] = {&p, &n};
  return cudaLaunchKernel((const void *)fill, dim3(1), dim3(32), args, 0, 0) != cudaSuccess;
}
"#;

const MAIN_CU: &str = r#"int go(int *p, int n);
int main(int argc, char **argv) { (void)argv; return argc > 99 ? go(nullptr, argc) : 0; }
"#;

fn nm(path: &Path) -> String {
    let o = Command::new("nm").arg(path).output().unwrap();
    assert!(o.status.success(), "nm {}", path.display());
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Defect 3: an annotated translation unit whose launches klaraptor-cc could not
/// instrument still carried the kernel descriptors, whose constructor calls the runtime's
/// `klaraptor_register`: linking it with nvcc, g++ or even klaraptor-cc (which adds the
/// runtime only for objects that call it) failed with an undefined reference. Such an
/// object references nothing of klaraptor's and links with any driver; so does one built
/// with `-dc`.
#[test]
fn objects_without_instrumented_launches_link_with_any_driver() {
    let s = Scratch::new("src");
    std::fs::write(s.dir.join("fill.cu"), UNBRACKETED_CU).unwrap();
    std::fs::write(s.dir.join("main.cu"), MAIN_CU).unwrap();
    let err = ok(&s.cc(&["-arch=sm_90", "-c", "fill.cu", "-o", "fill.o"]));
    assert!(
        err.contains("kernel fill (annotated at fill.cu:2:19) has no <<<>>> launch"),
        "{err}"
    );
    let syms = nm(&s.dir.join("fill.o"));
    assert!(!syms.contains("klaraptor"), "{syms}");
    assert!(syms.contains(" T _Z2goPii"), "{syms}");
    ok(&s.nvcc(&["-arch=sm_90", "-c", "main.cu", "-o", "main.o"]));

    // nvcc's link, klaraptor-cc's, and g++ with the CUDA runtime.
    ok(&s.nvcc(&["-arch=sm_90", "main.o", "fill.o", "-o", "app_nvcc"]));
    ok(&s.cc(&["-arch=sm_90", "main.o", "fill.o", "-o", "app_kl"]));
    let lib = nvcc().parent().unwrap().parent().unwrap().join("lib64");
    let gxx = s
        .command(Path::new("g++"), &s.dir)
        .args(["main.o", "fill.o", "-o", "app_gxx", "-L"])
        .arg(&lib)
        .args(["-lcudart_static", "-ldl", "-lpthread", "-lrt"])
        .output()
        .unwrap();
    ok(&gxx);
    for app in ["app_nvcc", "app_kl", "app_gxx"] {
        // No launch at this argc: the program runs without a GPU.
        let out = Command::new(s.dir.join(app)).output().unwrap();
        assert!(out.status.success(), "{app}: {}", stderr(&out));
    }

    // Relocatable device code, linked by nvcc.
    ok(&s.cc(&["-arch=sm_90", "-dc", "fill.cu", "-o", "fill_rdc.o"]));
    assert!(!nm(&s.dir.join("fill_rdc.o")).contains("klaraptor"));
    ok(&s.nvcc(&["-arch=sm_90", "-dc", "main.cu", "-o", "main_rdc.o"]));
    ok(&s.nvcc(&[
        "-arch=sm_90",
        "-rdc=true",
        "main_rdc.o",
        "fill_rdc.o",
        "-o",
        "app_rdc",
    ]));

    // A unit with an instrumented launch still registers its kernels.
    ok(&s.cc(&["-arch=sm_90", "-c", "scale.cu", "-o", "scale.o"]));
    let syms = nm(&s.dir.join("scale.o"));
    assert!(
        syms.contains(" W klaraptor_register") && syms.contains(" W klaraptor_launch_begin"),
        "{syms}"
    );
}
