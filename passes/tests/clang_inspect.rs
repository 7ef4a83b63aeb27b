//! `klaraptor_passes::clang::inspect` on real CUDA sources, parsed by libclang
//! 19 against the CUDA 13 headers that `scripts/setup` installs.
//!
//! The expected mangled names were checked against `nvcc -ptx -arch=sm_90`
//! (CUDA 13.0.88): they are the `.entry` names in the PTX of each fixture.

mod clang_common;

use std::path::Path;
use std::time::{Duration, Instant};

use clang_common::{config, fixture};
use klaraptor_passes::clang::{inspect, ClangError, FunctionInfo, KernelParam, SourceInfo};

fn p(name: &str, ty: &str, is_integer: bool) -> KernelParam {
    KernelParam {
        name: name.into(),
        ty: ty.into(),
        is_integer,
    }
}

fn run(file: &str, names: &[&str], args: &[&str]) -> SourceInfo {
    let path = fixture(file);
    match inspect(&path, names, &config(args)) {
        Ok(info) => info,
        Err(e) => panic!("inspect({}) failed: {e}", path.display()),
    }
}

fn only<'a>(info: &'a SourceInfo, name: &str) -> &'a FunctionInfo {
    let found = info.find(name);
    assert_eq!(found.len(), 1, "expected one `{name}`, got {found:#?}");
    found[0]
}

fn assert_clean(info: &SourceInfo) {
    assert!(
        info.diagnostics.is_empty(),
        "unexpected errors: {:#?}",
        info.diagnostics
    );
}

#[test]
fn plain_kernel_device_and_host_functions() {
    let info = run("mm.cu", &["mm", "mm_dev", "mm_host", "absent"], &[]);
    assert_clean(&info);
    let names: Vec<&str> = info.functions.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(names, ["mm", "mm_dev", "mm_host"]);
    let shape = vec![
        p("a", "const float *", false),
        p("b", "const float *", false),
        p("c", "float *", false),
        p("n", "int", true),
    ];

    let mm = only(&info, "mm");
    assert!(mm.is_global && !mm.is_template && mm.is_definition);
    assert_eq!(mm.qualified_name, "mm");
    assert_eq!(mm.file, fixture("mm.cu").canonicalize().unwrap());
    assert_eq!((mm.line, mm.col), (4, 17));
    assert_eq!(mm.params, shape);
    assert_eq!(mm.mangled, ["_Z2mmPKfS0_Pfi"]);
    assert!(mm.specializations.is_empty());

    let dev = only(&info, "mm_dev");
    assert!(!dev.is_global && !dev.is_template);
    assert_eq!((dev.line, dev.col), (16, 17));
    assert_eq!(dev.params, shape);
    assert_eq!(dev.mangled, ["_Z6mm_devPKfS0_Pfi"]);

    let host = only(&info, "mm_host");
    assert!(!host.is_global && !host.is_template);
    assert_eq!((host.line, host.col), (21, 6));
    assert_eq!(host.params, shape);
    assert_eq!(host.mangled, ["_Z7mm_hostPKfS0_Pfi"]);
}

#[test]
fn template_kernel_specializations_from_launches() {
    let info = run("axpy.cu", &["axpy"], &[]);
    assert_clean(&info);
    let axpy = only(&info, "axpy");
    assert!(axpy.is_global && axpy.is_template && axpy.is_definition);
    assert_eq!((axpy.line, axpy.col), (3, 17));
    // The template's own parameters: dependent types as written, never integers.
    assert_eq!(
        axpy.params,
        [
            p("a", "T", false),
            p("x", "const T *", false),
            p("y", "T *", false),
            p("n", "int", true),
        ]
    );
    // The two specializations the <<<>>> launches instantiate, in source order.
    assert_eq!(
        axpy.mangled,
        ["_Z4axpyIfEvT_PKS0_PS0_i", "_Z4axpyIdEvT_PKS0_PS0_i"]
    );
    let specs = &axpy.specializations;
    assert_eq!(specs.len(), 2);
    assert_eq!(specs[0].mangled, "_Z4axpyIfEvT_PKS0_PS0_i");
    assert_eq!(
        specs[0].params,
        [
            p("a", "float", false),
            p("x", "const float *", false),
            p("y", "float *", false),
            p("n", "int", true),
        ]
    );
    assert_eq!(specs[1].mangled, "_Z4axpyIdEvT_PKS0_PS0_i");
    assert_eq!(
        specs[1].params,
        [
            p("a", "double", false),
            p("x", "const double *", false),
            p("y", "double *", false),
            p("n", "int", true),
        ]
    );
}

#[test]
fn namespaces_and_integer_types() {
    let info = run("ns.cu", &["scale", "gather"], &[]);
    assert_clean(&info);

    let scale = only(&info, "scale");
    assert_eq!(scale.qualified_name, "lin::detail::scale");
    assert!(scale.is_global);
    assert_eq!((scale.line, scale.col), (10, 17));
    assert_eq!(
        scale.params,
        [
            p("v", "float *", false),
            p("s", "float", false),
            p("n", "unsigned long", true), // std::size_t
        ]
    );
    assert_eq!(scale.mangled, ["_ZN3lin6detail5scaleEPffm"]);
    // Qualified look-ups find the same function; partial qualification does not.
    let q = inspect(&fixture("ns.cu"), &["lin::detail::scale"], &config(&[])).unwrap();
    assert_eq!(q.functions.len(), 1);
    assert_eq!(q.functions[0].mangled, scale.mangled);
    assert!(info.function("::lin::detail::scale").is_some());
    assert!(info.function("detail::scale").is_none());

    let gather = only(&info, "gather");
    assert!(gather.is_global);
    assert_eq!(
        gather.params,
        [
            p("src", "const double *__restrict", false),
            p("dst", "double *", false),
            p("map", "const int *", false), // pointer to idx_t
            p("n", "int", true),            // typedef int idx_t
            p("stride", "const unsigned long", true), // const size_t
            p("off", "long", true),         // int64_t
            p("total", "const unsigned long long", true), // using alias, const
            p("tag", "unsigned short", true),
            p("c", "char", false), // characters are not sizes
            p("flag", "bool", false),
            p("ref", "float &", false),
        ]
    );
    assert_eq!(gather.mangled, ["_Z6gatherPKdPdPKiimlytcbRf"]);
}

#[test]
fn kernel_in_local_header_with_user_flags() {
    let include = fixture("include");
    let inc = format!("-I{}", include.display());
    let info = run(
        "uses_header.cu",
        &["vadd", "vsub"],
        &[&inc, "-DVEC_SCALE=2.0f"],
    );
    assert_clean(&info);

    let vadd = only(&info, "vadd");
    assert_eq!(
        vadd.file,
        include.join("vec_kernels.cuh").canonicalize().unwrap()
    );
    assert_eq!((vadd.line, vadd.col), (5, 17));
    let shape = [
        p("a", "const float *", false),
        p("b", "const float *", false),
        p("c", "float *", false),
        p("n", "long", true),
    ];
    assert_eq!(vadd.params, shape);
    assert_eq!(vadd.mangled, ["_Z4vaddPKfS0_Pfl"]);

    let vsub = only(&info, "vsub");
    assert_eq!(vsub.file, fixture("uses_header.cu").canonicalize().unwrap());
    assert_eq!(vsub.params, shape);
    assert_eq!(vsub.mangled, ["_Z4vsubPKfS0_Pfl"]);

    // Without the -D the header does not compile: the error points into it.
    let info = run("uses_header.cu", &["vadd"], &[&inc]);
    assert_eq!(info.diagnostics.len(), 1, "{:#?}", info.diagnostics);
    let expected_prefix = format!(
        "{}:9:30: error: ",
        include.join("vec_kernels.cuh").display()
    );
    assert!(
        info.diagnostics[0].starts_with(&expected_prefix)
            && info.diagnostics[0].contains("VEC_SCALE"),
        "{:#?}",
        info.diagnostics
    );
    // ... and without the -I the header is not found at all.
    let info = run("uses_header.cu", &["vadd"], &["-DVEC_SCALE=2.0f"]);
    assert!(info.find("vadd").is_empty());
    assert!(
        info.diagnostics[0].ends_with("'vec_kernels.cuh' file not found"),
        "{:#?}",
        info.diagnostics
    );
}

#[test]
fn syntax_error_is_reported() {
    let info = run("broken.cu", &["bad"], &[]);
    assert!(info.has_errors());
    let expected = format!(
        "{}:4:24: error: expected ';' at end of declaration",
        fixture("broken.cu").display()
    );
    assert_eq!(info.diagnostics, [expected]);
    // What clang could still make of the kernel is reported.
    let bad = only(&info, "bad");
    assert!(bad.is_global);
    assert_eq!(bad.params, [p("x", "float *", false), p("n", "int", true)]);
}

#[test]
fn declarations_instantiations_and_overloads() {
    let names = ["later", "plain_c", "fill", "launch_fill", "hidden", "over"];
    let info = run("misc.cu", &names, &[]);
    assert_clean(&info);

    // Declared on line 5, defined on line 59: one entry, at the definition,
    // with the definition's parameter names.
    let later = only(&info, "later");
    assert!(later.is_definition && later.is_global);
    assert_eq!((later.line, later.col), (59, 17));
    assert_eq!(
        later.params,
        [p("out", "float *", false), p("count", "unsigned int", true)]
    );
    assert_eq!(later.mangled, ["_Z5laterPfj"]);

    let plain = only(&info, "plain_c");
    assert_eq!(plain.mangled, ["plain_c"]);
    assert_eq!(plain.params[1], p("n", "long long", true));

    // Every specialization this TU emits (the same set nvcc emits): the
    // explicit instantiation, the explicit specialization, the address taken,
    // and the launch inside the instantiated host template -- but not the
    // `extern template` one, which another TU provides.
    let fill = only(&info, "fill");
    assert!(fill.is_template && fill.is_global);
    assert_eq!(
        fill.params,
        [
            p("out", "T *", false),
            p("value", "T", false),
            p("n", "unsigned int", true), // std::uint32_t
        ]
    );
    let mut mangled = fill.mangled.clone();
    mangled.sort();
    assert_eq!(
        mangled,
        [
            "_Z4fillIcLi8EEvPT_S0_j",
            "_Z4fillIfLi32EEvPT_S0_j",
            "_Z4fillIiLi128EEvPT_S0_j",
            "_Z4fillIsLi64EEvPT_S0_j",
        ]
    );
    let by_name = |m: &str| {
        fill.specializations
            .iter()
            .find(|s| s.mangled == m)
            .unwrap_or_else(|| panic!("no {m}"))
    };
    assert_eq!(
        by_name("_Z4fillIiLi128EEvPT_S0_j").params[1],
        p("value", "int", true)
    );
    assert_eq!(
        by_name("_Z4fillIsLi64EEvPT_S0_j").params[1],
        p("value", "short", true)
    );
    assert_eq!(
        by_name("_Z4fillIcLi8EEvPT_S0_j").params[1],
        p("value", "char", false)
    );
    // The explicit specialization has its own parameter names.
    assert_eq!(
        by_name("_Z4fillIfLi32EEvPT_S0_j").params,
        [
            p("out", "float *", false),
            p("v", "float", false),
            p("count", "unsigned int", true),
        ]
    );

    let launcher = only(&info, "launch_fill");
    assert!(launcher.is_template && !launcher.is_global);
    assert_eq!(launcher.mangled, ["_Z11launch_fillIiEvPT_S0_j"]);

    // Anonymous namespace: clang's name; nvcc uses a per-file unique one.
    let hidden = only(&info, "hidden");
    assert_eq!(hidden.qualified_name, "(anonymous namespace)::hidden");
    assert_eq!(hidden.mangled, ["_ZN12_GLOBAL__N_106hiddenEPd"]);

    let over = info.find("over");
    assert_eq!(over.len(), 2);
    assert_eq!(over[0].mangled, ["_Z4overPfi"]);
    assert_eq!(over[0].params[0], p("p", "float *", false));
    assert_eq!(over[1].mangled, ["_Z4overPdi"]);
    assert_eq!(over[1].params[0], p("p", "double *", false));
}

#[test]
fn errors_without_a_translation_unit() {
    let missing = fixture("no_such_file.cu");
    match inspect(&missing, &["k"], &config(&[])) {
        Err(ClangError::SourceNotFound(p)) => assert_eq!(p, missing),
        other => panic!("expected SourceNotFound, got {other:?}"),
    }
    // An argument the clang driver rejects: no translation unit at all.
    match inspect(&fixture("mm.cu"), &["mm"], &config(&["-std=c++99"])) {
        Err(e @ ClangError::Parse { .. }) => {
            let text = e.to_string();
            assert!(
                text.contains("mm.cu") && text.contains("-std=c++99"),
                "{text}"
            );
        }
        other => panic!("expected a parse failure, got {other:?}"),
    }
    // An unknown flag is an error clang reports, with a translation unit.
    let info = run("mm.cu", &["mm"], &["-fno-such-flag"]);
    assert_eq!(
        info.diagnostics,
        ["error: unknown argument: '-fno-such-flag'"]
    );
    assert_eq!(only(&info, "mm").mangled, ["_Z2mmPKfS0_Pfi"]);
}

#[test]
fn parallel_threads() {
    let handles: Vec<_> = ["mm.cu", "axpy.cu", "ns.cu", "mm.cu"]
        .into_iter()
        .map(|file| {
            std::thread::spawn(move || {
                let info =
                    inspect(&fixture(file), &["mm", "axpy", "gather"], &config(&[])).unwrap();
                assert!(
                    info.diagnostics.is_empty(),
                    "{file}: {:#?}",
                    info.diagnostics
                );
                info.functions[0].mangled[0].clone()
            })
        })
        .collect();
    let got: Vec<String> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(
        got,
        [
            "_Z2mmPKfS0_Pfi",
            "_Z4axpyIfEvT_PKS0_PS0_i",
            "_Z6gatherPKdPdPKiimlytcbRf",
            "_Z2mmPKfS0_Pfi"
        ]
    );
}

/// Not a benchmark: prints how long `inspect` takes (run with `--nocapture`)
/// and fails only if it is absurdly slow.
#[test]
fn timing() {
    let cfg = config(&[]);
    let file = fixture("mm.cu");
    let mut times = Vec::new();
    for _ in 0..3 {
        let t = Instant::now();
        let info = inspect(Path::new(&file), &["mm"], &cfg).unwrap();
        times.push(t.elapsed());
        assert_clean(&info);
    }
    eprintln!("inspect(mm.cu): {times:?}");
    assert!(
        times.iter().all(|t| *t < Duration::from_secs(30)),
        "{times:?}"
    );
}

/// The lines of inactive conditional branches are reported, per file, with the -D flags of
/// the configuration deciding which branch is active.
#[test]
fn skipped_branches_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("alt.cu");
    std::fs::write(
        &src,
        "#ifdef FAST\n\
         __global__ void fast(float *a, int n) {}\n\
         #else\n\
         __global__ void slow(float *a, int n) {}\n\
         #endif\n\
         #if 0\n\
         never\n\
         #endif\n",
    )
    .unwrap();
    let skipped = |args: &[&str]| {
        let info = inspect(&src, &["fast", "slow"], &config(args)).unwrap();
        assert_clean(&info);
        (1..=8)
            .filter(|&l| info.is_skipped(&src, l))
            .collect::<Vec<u32>>()
    };
    assert_eq!(skipped(&[]), [1, 2, 3, 6, 7, 8]);
    assert_eq!(skipped(&["-DFAST"]), [3, 4, 5, 6, 7, 8]);
    // A header read twice: a line skipped in one reading only is active.
    let h = dir.path().join("h.cuh");
    std::fs::write(
        &h,
        "#ifdef ONE\n__global__ void one(int n) {}\n#endif\n#if 0\nnever\n#endif\n",
    )
    .unwrap();
    std::fs::write(
        &src,
        "#define ONE\n#include \"h.cuh\"\n#undef ONE\n#include \"h.cuh\"\n",
    )
    .unwrap();
    let info = inspect(&src, &["one"], &config(&[])).unwrap();
    assert_clean(&info);
    let lines: Vec<u32> = (1..=6).filter(|&l| info.is_skipped(&h, l)).collect();
    assert_eq!(lines, [4, 5, 6]);
}
