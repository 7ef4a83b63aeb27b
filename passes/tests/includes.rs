//! Annotations in the files a translation unit includes: the fast check
//! (`frontend::annotations_of`, `annotations_of_tu`) and the full front-end
//! (`frontend::analyze`, libclang) find the pragmas of every file included with
//! quotes (beside the includer, or through -I), each with its own file and
//! line, once; angle-bracket includes and system headers are not read.
//!
//! The fixtures are under tests/fixtures/includes: app.cu includes
//! "kernels/stencil.cuh" (found through -I inc; included again by more.cu and
//! a second time by app.cu, behind an include guard), "more.cu" (beside it),
//! <angled.cuh> (through -I, but with angle brackets) and "vendor.cuh" (found
//! only in the -isystem directory sys). Each of them annotates a kernel.

mod clang_common;

use std::path::{Path, PathBuf};

use klaraptor_passes::clang::{inspect, ClangConfig};
use klaraptor_passes::frontend::{analyze, annotations_of, annotations_of_tu, Outcome};
use klaraptor_spec::annotations::{scan_file, scan_unit, Scanned};
use klaraptor_spec::includes::quoted_closure;
use klaraptor_spec::spec::KernelSpec;

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/includes")
}

fn at(rel: &str) -> PathBuf {
    dir().join(rel)
}

/// The configuration of the sample: -I inc, -isystem sys.
fn cfg() -> ClangConfig {
    let inc = at("inc").display().to_string();
    let sys = at("sys").display().to_string();
    clang_common::config(&["-I", &inc, "-isystem", &sys])
}

fn text(rel: &str) -> String {
    std::fs::read_to_string(at(rel)).unwrap()
}

/// `kernel @ file:line:col` of each annotation, the fixture directory written `F`.
fn places(s: &Scanned) -> Vec<String> {
    let f = dir().display().to_string();
    s.annotations
        .iter()
        .map(|a| format!("{} @ {}", a.kernel, a.loc.to_string().replace(&f, "F")))
        .collect()
}

fn specs(main: &str) -> Vec<KernelSpec> {
    match analyze(&at(main), &cfg()) {
        Ok(Outcome::Annotated(a)) => a.specs,
        other => panic!("{main}: expected annotated kernels, got {other:?}"),
    }
}

fn user_error(main: &str) -> String {
    match analyze(&at(main), &cfg()) {
        Err(e) => e.to_string().replace(&dir().display().to_string(), "F"),
        other => panic!("{main}: expected an error, got {other:?}"),
    }
}

#[test]
fn the_fast_check_reads_a_quoted_include_beside_the_source() {
    // Without the -I directories only more.cu is found (kernels/stencil.cuh is not beside
    // the source, nor beside more.cu), with its own file and line.
    let (s, toml, _) = annotations_of(&at("app.cu"), &text("app.cu")).unwrap();
    assert_eq!(places(&s), ["more @ F/more.cu:4:19"]);
    assert!(toml.is_empty());
    assert!(
        s.pragma_lines.is_empty(),
        "app.cu itself holds no pragma: nothing of it is blanked"
    );
}

#[test]
fn the_fast_check_follows_include_directories() {
    let (s, _, _) =
        annotations_of_tu(&at("app.cu"), &text("app.cu"), &cfg().quote_include_dirs()).unwrap();
    assert_eq!(
        places(&s),
        [
            "stencil @ F/inc/kernels/stencil.cuh:5:19",
            "more @ F/more.cu:4:19"
        ],
        "kernels/stencil.cuh (three includes) gives one annotation; <angled.cuh> and the \
         system header vendor.cuh give none"
    );
}

#[test]
fn analyze_resolves_the_kernels_of_included_files() {
    let specs = specs("app.cu");
    let f = dir().display().to_string();
    let got: Vec<(String, Vec<String>, String, String)> = specs
        .iter()
        .map(|s| {
            (
                s.name.clone(),
                s.mangled.clone(),
                s.annotated_at.to_string().replace(&f, "F"),
                format!("{}:{}", s.defined_in.display(), s.defined_line),
            )
        })
        .collect();
    let real = |rel: &str| at(rel).canonicalize().unwrap().display().to_string();
    assert_eq!(
        got,
        [
            (
                "stencil".to_string(),
                vec!["_Z7stencilPfi".to_string()],
                "F/inc/kernels/stencil.cuh:5:19".to_string(),
                format!("{}:7", real("inc/kernels/stencil.cuh")),
            ),
            (
                "more".to_string(),
                vec!["_Z4morePfi".to_string()],
                "F/more.cu:4:19".to_string(),
                format!("{}:5", real("more.cu")),
            ),
        ]
    );
    assert_eq!(specs[0].constraints[0].to_string(), "((bx % 32) == 0)");
    assert_eq!(specs[1].data[0].label, "N");
    assert_eq!(specs[1].profile.as_ref().unwrap().sizes, [[256]]);
}

#[test]
fn analyze_compiles_the_source_as_it_is_when_only_headers_hold_pragmas() {
    let Ok(Outcome::Annotated(a)) = analyze(&at("app.cu"), &cfg()) else {
        panic!("app.cu should be annotated");
    };
    assert_eq!(a.stripped, text("app.cu"));
    assert!(a.has_pragmas);
}

#[test]
fn libclang_and_the_fast_check_agree_on_the_files() {
    let main = at("app.cu");
    let info = inspect(&main, &["stencil", "more"], &cfg()).unwrap();
    assert!(info.diagnostics.is_empty(), "{:?}", info.diagnostics);
    let by_clang: Vec<PathBuf> = info
        .quoted_includes(&main.canonicalize().unwrap())
        .iter()
        .map(|i| i.file.canonicalize().unwrap())
        .collect();
    let by_text: Vec<PathBuf> = quoted_closure(&main, &text("app.cu"), &cfg().quote_include_dirs())
        .into_iter()
        .skip(1)
        .map(|f| f.canonical)
        .collect();
    assert_eq!(
        by_clang,
        [
            at("inc/kernels/stencil.cuh").canonicalize().unwrap(),
            at("more.cu").canonicalize().unwrap()
        ]
    );
    assert_eq!(by_text, by_clang);
    // libclang saw the other two, and why they are left out.
    let angled = info
        .inclusions
        .iter()
        .find(|i| i.file.ends_with("angled.cuh"))
        .unwrap();
    assert!(!angled.quoted && !angled.system, "{angled:?}");
    let vendor = info
        .inclusions
        .iter()
        .find(|i| i.file.ends_with("vendor.cuh"))
        .unwrap();
    assert!(vendor.quoted && vendor.system, "{vendor:?}");
    assert_eq!(vendor.line, 7);
    assert_eq!(vendor.from, Some(main.canonicalize().unwrap()));
}

#[test]
fn a_system_header_is_not_read_but_a_user_header_is() {
    let names: Vec<String> = specs("app.cu").into_iter().map(|s| s.name).collect();
    assert_eq!(names, ["stencil", "more"], "no 'angled', no 'vendor'");
    // With sys as an ordinary -I directory, vendor.cuh is a user header and is read.
    let inc = at("inc").display().to_string();
    let sys = at("sys").display().to_string();
    let cfg = clang_common::config(&["-I", &inc, "-I", &sys]);
    let Ok(Outcome::Annotated(a)) = analyze(&at("app.cu"), &cfg) else {
        panic!("app.cu should be annotated");
    };
    let names: Vec<&str> = a.specs.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["stencil", "more", "vendor"]);
}

#[test]
fn a_header_included_twice_gives_one_annotation() {
    // stencil.cuh is included twice by app.cu and once by more.cu.
    let n = specs("app.cu")
        .iter()
        .filter(|s| s.name == "stencil")
        .count();
    assert_eq!(n, 1);
    let (s, _, _) = annotations_of_tu(
        &at("more.cu"),
        &text("more.cu"),
        &cfg().quote_include_dirs(),
    )
    .unwrap();
    assert_eq!(
        places(&s),
        [
            "more @ F/more.cu:4:19",
            "stencil @ F/inc/kernels/stencil.cuh:5:19"
        ]
    );
}

#[test]
fn errors_in_an_included_header_name_the_header() {
    let err = user_error("bad.cu");
    assert_eq!(
        err,
        format!(
            "F/bad.cuh:2:40: error: argument index 7 is out of range: kernel 'scale' has 2 \
             parameter(s)\n    | #pragma klaraptor kernel(scale) data(N=7)\n    | {}^\n    \
             = help: indices are 0-based; the parameters are (0: float * a, 1: int n)",
            " ".repeat(39)
        )
    );
    let err = user_error("bad_parse.cu");
    assert!(
        err.starts_with(
            "F/bad_parse.cuh:2:41: error: unknown clause 'dims'\n    | #pragma klaraptor \
             kernel(scale) data(n) dims(2)\n"
        ),
        "{err}"
    );
    // The fast check reports it at the same place.
    let e = annotations_of(&at("bad_parse.cu"), &text("bad_parse.cu")).unwrap_err();
    assert_eq!(e.0[0].loc.file, at("bad_parse.cuh"));
    assert_eq!((e.0[0].loc.line, e.0[0].loc.col), (2, 41));
}

#[test]
fn a_kernel_annotated_in_two_files_is_annotated_twice() {
    let err = user_error("twice.cu");
    assert_eq!(
        err,
        format!(
            "F/second.cuh:2:19: error: kernel 'k' is annotated twice\n    | #pragma klaraptor \
             kernel(k) data(n)\n    | {}^\n    = help: the first annotation is at \
             F/first.cuh:1:19; keep one",
            " ".repeat(18)
        )
    );
}

#[test]
fn a_toml_entry_may_name_an_included_file() {
    let main = at("with_toml/main.cu");
    let (_, toml, _) = annotations_of(&main, &text("with_toml/main.cu")).unwrap();
    assert_eq!(
        toml.len(),
        1,
        "the entry names tk.cuh, which main.cu includes"
    );
    let Ok(Outcome::Annotated(a)) = analyze(&main, &cfg()) else {
        panic!("main.cu should be annotated through klaraptor.toml");
    };
    assert_eq!(a.specs.len(), 1);
    assert_eq!(a.specs[0].mangled, ["_Z2tkPfi"]);
    assert!(!a.has_pragmas);
}

#[test]
fn classic_pragmas_of_one_kernel_may_be_split_over_files() {
    let main_text = "#include \"k.cuh\"\n#pragma kernel_info_dim_k = 2;\n";
    let header_text = "#pragma kernel_info_size_param_idx_k = 1;\n";
    let main = scan_file(Path::new("k.cu"), main_text);
    let header = scan_file(Path::new("k.cuh"), header_text);
    let s = scan_unit(&[(&main, main_text), (&header, header_text)]).unwrap();
    assert_eq!(places(&s), ["k @ k.cuh:1:9"]);
    assert_eq!(s.annotations[0].dim, 2);
    // Only the main file's pragma line is blanked: the second line of k.cu.
    let second_line = main_text.find('\n').unwrap() + 1..main_text.len();
    assert_eq!(s.pragma_lines, vec![second_line]);
}

/// A pragma one letter off `klaraptor` in an included header is reported with the header's
/// own file and line, once even when the header is included twice; the main file's too.
#[test]
fn misspelled_pragmas_in_included_files_are_found() {
    use klaraptor_passes::frontend::misspelled_pragmas_of_tu;
    let tmp = tempfile::tempdir().unwrap();
    let inc = tmp.path().join("inc");
    std::fs::create_dir_all(&inc).unwrap();
    std::fs::write(
        inc.join("k.cuh"),
        "#pragma once\n#pragma klaraptr kernel(k) data(N=n) dim(1) grid(ceil(N, bx))\n\
         __global__ void k(int n) {}\n",
    )
    .unwrap();
    std::fs::write(tmp.path().join("near.cuh"), "#include \"k.cuh\"\n").unwrap();
    let main = tmp.path().join("app.cu");
    let src = "#include \"k.cuh\"\n#include \"near.cuh\"\n#pragma Klaraptor kernel(j)\n\
               __global__ void j() {}\n";
    std::fs::write(&main, src).unwrap();
    let found: Vec<String> = misspelled_pragmas_of_tu(&main, src, std::slice::from_ref(&inc))
        .iter()
        .map(|d| {
            d.loc
                .to_string()
                .replace(&tmp.path().display().to_string(), "T")
        })
        .collect();
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(
        found.iter().any(|l| l.starts_with("T/inc/k.cuh:2:")),
        "{found:?}"
    );
    assert!(
        found.iter().any(|l| l.starts_with("T/app.cu:3:")),
        "{found:?}"
    );
    // Without the -I directory the header is not found, and only the main file's is.
    assert_eq!(misspelled_pragmas_of_tu(&main, src, &[]).len(), 1);
}
