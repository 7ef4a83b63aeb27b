//! Annotated sources through klaraptor-cc and `klaraptor specs`: valid annotations build,
//! invalid ones stop the build with `file:line:col`, what was expected and how to fix it,
//! and leave no output behind.

mod common;
use common::*;

const MM: &str = r#"#include <cstdio>
#pragma kernel_info_size_param_idx_mm = 3;
#pragma kernel_info_dim_mm = 2;
__global__ void mm(const float *a, const float *b, float *c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x, j = blockIdx.y * blockDim.y + threadIdx.y;
  if (i < n && j < n) c[j * n + i] = a[j * n + i] + b[j * n + i];
}
void run(const float *a, const float *b, float *c, int n) {
  mm<<<dim3((n + 31) / 32, (n + 7) / 8), dim3(32, 8)>>>(a, b, c, n);
}
"#;

fn specs(dir: &std::path::Path, file: &str) -> (i32, String, String) {
    let o = run(dir, &klaraptor(), &["specs", file]);
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr(&o),
    )
}

/// Compiles `src` as `k.cu` with `-c -o k.o`; returns (status, stderr, whether k.o exists).
fn compile(files: &[(&str, &str)], extra: &[&str]) -> (i32, String, bool) {
    let d = project(files);
    let mut args = vec!["-c", "k.cu", "-o", "k.o"];
    args.extend(extra);
    let o = run(d.path(), &klaraptor_cc(), &args);
    (
        o.status.code().unwrap_or(-1),
        stderr(&o),
        d.path().join("k.o").exists(),
    )
}

#[test]
fn classic_pragmas_give_a_spec_with_the_default_grid() {
    let d = project(&[("k.cu", MM)]);
    let (code, out, err) = specs(d.path(), "k.cu");
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("[kernel.mm]\nmangled = [\"_Z2mmPKfS0_Pfi\"]\n"),
        "{out}"
    );
    assert!(
        out.contains(
            "data = [\"N=3 (int n)\"]\ndim = 2\ngrid = [\"ceil(N, bx)\", \"ceil(N, by)\"]"
        ),
        "{out}"
    );
}

#[test]
fn our_pragmas_cause_no_warnings_but_foreign_pragmas_are_left_alone() {
    let src = MM.replace(
        "#include <cstdio>",
        "#include <cstdio>\n#pragma mystery_tool optimize",
    );
    let (code, err, built) = compile(&[("k.cu", &src)], &["-Xcompiler", "-Wall"]);
    assert_eq!(code, 0, "{err}");
    assert!(built);
    assert!(
        !err.contains("kernel_info"),
        "our pragmas must not warn:\n{err}"
    );
    assert!(
        err.contains("k.cu:2:9: warning: unknown pragma ignored [-Wunknown-pragmas]"),
        "a foreign pragma still warns, at its own line (the host compiler of an instrumented \
         translation unit is clang-19):\n{err}"
    );
}

#[test]
fn a_missing_argument_index_stops_the_build_with_a_location() {
    let src = MM.replace("idx_mm = 3", "idx_mm = 7");
    let (code, err, built) = compile(&[("k.cu", &src)], &[]);
    assert_eq!(code, 1);
    assert!(!built, "no output may be left behind");
    assert!(
        err.starts_with(
            "k.cu:2:41: error: argument index 7 is out of range: kernel 'mm' has 4 parameter(s)\n"
        ),
        "{err}"
    );
    assert!(err.contains("= help: indices are 0-based; the parameters are (0: const float * a, 1: const float * b, 2: float * c, 3: int n)"), "{err}");
    assert!(err.contains("no output was written"), "{err}");
}

#[test]
fn a_data_argument_must_be_an_integer() {
    let src = MM.replace("idx_mm = 3", "idx_mm = 2");
    let (code, err, built) = compile(&[("k.cu", &src)], &[]);
    assert_eq!((code, built), (1, false));
    assert!(err.starts_with("k.cu:2:41: error: argument 2 ('c', of type 'float *') is not an integer, so it cannot be a data size"), "{err}");
}

#[test]
fn the_kernel_must_exist_and_be_global() {
    let src = MM
        .replace("_mm = 3", "_mmm = 3")
        .replace("dim_mm", "dim_mmm");
    let (code, err, built) = compile(&[("k.cu", &src)], &[]);
    assert_eq!((code, built), (1, false));
    assert!(
        err.starts_with("k.cu:2:9: error: no kernel named 'mmm' in this translation unit"),
        "{err}"
    );
    assert!(err.contains("= help: check the kernel's name"), "{err}");

    let dev = "#pragma klaraptor kernel(f) data(n)\n__device__ int f(int n) { return n; }\n";
    let (code, err, _) = compile(&[("k.cu", dev)], &[]);
    assert_eq!(code, 1);
    assert!(
        err.starts_with("k.cu:1:19: error: 'f' (declared at "),
        "{err}"
    );
    assert!(err.contains("is not a __global__ kernel"), "{err}");
}

#[test]
fn klaraptor_pragma_with_names_grid_constraints_and_profile() {
    let src = r#"
#pragma klaraptor kernel(gemm) data(NI=ni, NJ=4, NK=nk) dim(2) \
        grid(ceil(NJ, bx), ceil(NI, by)) block(bx % 32 == 0) block(bx * by <= 512) \
        profile(run="./gemm {NI} {NJ} {NK}", sizes=[64, (128, 128, 64)])
__global__ void gemm(float alpha, const float *A, const float *B, int ni, long nj, size_t nk, float *C) {}
"#;
    let d = project(&[("k.cu", src)]);
    let (code, out, err) = specs(d.path(), "k.cu");
    assert_eq!(code, 0, "{err}");
    for want in [
        "data = [\"NI=3 (int ni)\", \"NJ=4 (long nj)\", \"NK=5 (unsigned long nk)\"]",
        "grid = [\"ceil(NJ, bx)\", \"ceil(NI, by)\"]",
        "block = [\"((bx % 32) == 0)\", \"((bx * by) <= 512)\"]",
        "[kernel.gemm.profile]\nrun = \"./gemm {NI} {NJ} {NK}\"\nsizes = [[64, 64, 64], [128, 128, 64]]",
    ] {
        assert!(out.contains(want), "missing {want} in\n{out}");
    }
}

#[test]
fn expression_errors_point_into_the_pragma() {
    let src = "#pragma klaraptor kernel(k) data(N=n) dim(2) grid(ceil(N, bx), ceil(M, by))\n__global__ void k(int n) {}\n";
    let (code, err, built) = compile(&[("k.cu", src)], &[]);
    assert_eq!((code, built), (1, false));
    assert!(
        err.starts_with("k.cu:1:69: error: unknown name 'M'; the names are bx, by, bz, N\n"),
        "{err}"
    );
    assert!(err.contains("\n    | #pragma klaraptor kernel(k)"), "{err}");
}

#[test]
fn klaraptor_toml_annotates_without_touching_the_source() {
    let toml = "[kernel.mm]\ndata = [\"N=n\"]\ndim = 2\nblock = [\"bx >= 32\"]\n";
    let plain = MM.replace(
        "#pragma kernel_info_size_param_idx_mm = 3;\n#pragma kernel_info_dim_mm = 2;\n",
        "",
    );
    let d = project(&[("k.cu", &plain), ("klaraptor.toml", toml)]);
    let (code, out, err) = specs(d.path(), "k.cu");
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("data = [\"N=3 (int n)\"]") && out.contains("block = [\"(bx >= 32)\"]"),
        "{out}"
    );

    let bad = "[kernel.mm]\ndata = [\"N=n\"]\ndim = 2\ngrid = [\"ceil(N, bx)\", \"N +\"]\n";
    let (code, err, built) = compile(&[("k.cu", &plain), ("klaraptor.toml", bad)], &[]);
    assert_eq!((code, built), (1, false));
    assert!(err.starts_with("klaraptor.toml:4:28: error: expected a number, a name or '(', found the end of the expression"), "{err}");
}

#[test]
fn dependency_files_name_the_original_source() {
    let d = project(&[("k.cu", MM)]);
    let o = run(
        d.path(),
        &klaraptor_cc(),
        &["-c", "k.cu", "-o", "k.o", "-MD"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let deps = std::fs::read_to_string(d.path().join("k.d")).unwrap();
    assert!(deps.starts_with("k.o : k.cu \\\n"), "{deps}");
    assert!(!deps.contains("klaraptor-"), "{deps}");
}

#[test]
fn a_syntax_error_in_an_annotated_source_is_reported_by_nvcc() {
    let src = MM.replace("c[j * n + i] = a", "c[j * n + i] = = a");
    let d = project(&[("k.cu", &src)]);
    let plain = run(d.path(), &nvcc(), &["-c", "k.cu", "-o", "k.o"]);
    let ours = run(d.path(), &klaraptor_cc(), &["-c", "k.cu", "-o", "k.o"]);
    assert_ne!(plain.status.code(), Some(0));
    assert_eq!(ours.status.code(), plain.status.code());
    assert_eq!(stderr(&ours), stderr(&plain));
}

#[test]
fn the_sample_builds_with_make_as_with_nvcc() {
    let sample = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("samples/matmul");
    let names = ["Makefile", "kernels.h", "main.cu", "mm.cu", "saxpy.cu"];
    let texts: Vec<String> = names
        .iter()
        .map(|n| std::fs::read_to_string(sample.join(n)).unwrap())
        .collect();
    let inputs: Vec<(&str, &str)> = names
        .iter()
        .copied()
        .zip(texts.iter().map(String::as_str))
        .collect();
    let (a, b) = (project(&inputs), project(&inputs));
    let make = |dir: &std::path::Path, nvcc: &std::path::Path| {
        std::process::Command::new("make")
            .arg(format!("NVCC={}", nvcc.display()))
            .current_dir(dir)
            .env("KLARAPTOR_NVCC", common::nvcc())
            .output()
            .unwrap()
    };
    let plain = make(a.path(), &nvcc());
    let ours = make(b.path(), &klaraptor_cc());
    assert!(plain.status.success(), "{}", stderr(&plain));
    assert!(ours.status.success(), "{}", stderr(&ours));
    assert_eq!(files(a.path()), files(b.path()));
    // main.o has no annotations: it is nvcc's own output, byte for byte.
    assert_eq!(
        normalized(&a.path().join("main.o")),
        normalized(&b.path().join("main.o"))
    );
    assert!(b.path().join("matmul").is_file());
}

/// A kernel annotated in a file the source includes with quotes (`more.cu` beside it, a
/// header found through -I) is found there, once however often it is included, and named at
/// its own file and line.
#[test]
fn specs_reads_the_pragmas_of_included_files() {
    let stencil = "#ifndef STENCIL_CUH\n#define STENCIL_CUH\n\
                   #pragma klaraptor kernel(stencil) data(n)\n\
                   __global__ void stencil(float *a, int n) {}\n#endif\n";
    let more = "#include \"kernels/stencil.cuh\"\n#pragma klaraptor kernel(more) data(N=1)\n\
                __global__ void more(float *a, int n) {}\n";
    let app = "#include <cstdio>\n#include \"kernels/stencil.cuh\"\n#include \"more.cu\"\n\
               #include \"kernels/stencil.cuh\"\nvoid run(float *a, int n) {\n\
               stencil<<<1, 32>>>(a, n);\n  more<<<1, 32>>>(a, n);\n}\n";
    let d = project(&[
        ("app.cu", app),
        ("more.cu", more),
        ("inc/kernels/stencil.cuh", stencil),
    ]);
    let o = run(d.path(), &klaraptor(), &["specs", "-I", "inc", "app.cu"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(out.matches("[kernel.stencil]").count(), 1, "{out}");
    assert!(
        out.contains("[kernel.stencil]\nmangled = [\"_Z7stencilPfi\"]\n")
            && out.contains("annotated_at = \"inc/kernels/stencil.cuh:3:19\"\n"),
        "{out}"
    );
    assert!(
        out.contains("[kernel.more]\nmangled = [\"_Z4morePfi\"]\n")
            && out.contains("annotated_at = \"more.cu:2:19\"\n"),
        "{out}"
    );
}

/// A kernel annotated in a header found through `-I`, and one in an included `.cu` beside the
/// source: klaraptor-cc instruments the translation unit and its messages name the header.
#[test]
fn klaraptor_cc_instruments_kernels_annotated_in_included_files() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("app");
    std::fs::create_dir_all(src.join("inc/kernels")).unwrap();
    std::fs::write(
        src.join("inc/kernels/stencil.cuh"),
        "#pragma once\n\
         #pragma klaraptor kernel(stencil) data(n) dim(1) grid(ceil(n, bx))\n\
         __global__ void stencil(float *a, int n) {\n\
         \x20 int i = blockIdx.x * blockDim.x + threadIdx.x;\n\
         \x20 if (i > 0 && i < n - 1) a[i] = (a[i - 1] + a[i] + a[i + 1]) / 3;\n\
         }\n",
    )
    .unwrap();
    std::fs::write(
        src.join("more.cu"),
        "#pragma klaraptor kernel(twice) data(n) dim(1) grid(ceil(n, bx))\n\
         __global__ void twice(float *a, int n) {\n\
         \x20 int i = blockIdx.x * blockDim.x + threadIdx.x;\n\
         \x20 if (i < n) a[i] *= 2;\n\
         }\n",
    )
    .unwrap();
    std::fs::write(
        src.join("app.cu"),
        "#include \"kernels/stencil.cuh\"\n\
         #include \"more.cu\"\n\
         void run(float *a, int n) {\n\
         \x20 stencil<<<(n + 127) / 128, 128>>>(a, n);\n\
         \x20 twice<<<(n + 255) / 256, 256>>>(a, n);\n\
         }\n",
    )
    .unwrap();
    let out = compile_no_gpu(
        &src,
        &[
            "--kl-verbose",
            "-arch=sm_90",
            "-I",
            "inc",
            "-c",
            "app.cu",
            "-o",
            "app.o",
        ],
        &dir.path().join("cache"),
    );
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(!err.contains("nothing for klaraptor"), "{err}");
    assert!(
        klaraptor::instrument::needs_runtime(&src.join("app.o")),
        "app.o is not instrumented:\n{err}"
    );
    let obj = src.join("app.o");
    let specs = klaraptor_spec::link::scan_bytes(&std::fs::read(&obj).unwrap(), &obj).unwrap();
    let mut at: Vec<String> = specs
        .iter()
        .map(|s| format!("{} {}", s.name, s.annotated_at))
        .collect();
    at.sort();
    assert_eq!(at.len(), 2, "{at:?}");
    assert!(
        at[0].starts_with("stencil inc/kernels/stencil.cuh:2:"),
        "{at:?}"
    );
    assert!(at[1].starts_with("twice more.cu:1:"), "{at:?}");

    // A source whose only annotated kernel is in the -I directory's header: the quick check
    // that decides whether klaraptor-cc handles a source at all follows -I too.
    std::fs::write(
        src.join("only.cu"),
        "#include \"kernels/stencil.cuh\"\n\
         void run(float *a, int n) { stencil<<<(n + 127) / 128, 128>>>(a, n); }\n",
    )
    .unwrap();
    let out = compile_no_gpu(
        &src,
        &["-arch=sm_90", "-I", "inc", "-c", "only.cu", "-o", "only.o"],
        &dir.path().join("cache"),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        klaraptor::instrument::needs_runtime(&src.join("only.o")),
        "only.o is not instrumented:\n{}",
        stderr(&out)
    );
}

/// `static` kernels and kernels in an anonymous namespace: nvcc registers them under names
/// libclang mangles otherwise (`_Z1kPfi` for `_ZL1kPfi`; the anonymous namespace renamed);
/// their launches are instrumented all the same.
#[test]
fn static_and_anonymous_namespace_kernels_are_instrumented() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("s.cu"),
        "#pragma klaraptor kernel(k) data(n) dim(1) grid(ceil(n, bx))\n\
         static __global__ void k(float *a, int n) {\n\
         \x20 int i = blockIdx.x * blockDim.x + threadIdx.x;\n\
         \x20 if (i < n) a[i] = 0;\n\
         }\n\
         namespace {\n\
         #pragma klaraptor kernel(j) data(n) dim(1) grid(ceil(n, bx))\n\
         __global__ void j(float *a, int n) {\n\
         \x20 int i = blockIdx.x * blockDim.x + threadIdx.x;\n\
         \x20 if (i < n) a[i] = 1;\n\
         }\n\
         }\n\
         void run(float *a, int n) {\n\
         \x20 k<<<(n + 255) / 256, 256>>>(a, n);\n\
         \x20 j<<<(n + 255) / 256, 256>>>(a, n);\n\
         }\n",
    )
    .unwrap();
    let out = compile_no_gpu(
        dir.path(),
        &["--kl-verbose", "-arch=sm_90", "-c", "s.cu", "-o", "s.o"],
        &dir.path().join("cache"),
    );
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(!err.contains("no <<<>>> launch"), "{err}");
    assert!(
        err.contains("instrumented a launch of _ZL1kPfi")
            && err.contains("instrumented a launch of _ZN12_GLOBAL__N_1"),
        "{err}"
    );
}

/// `#pragma klaraptr …` (one letter off): the compiler ignores it; klaraptor-cc says so and
/// builds the program's own launch, as nvcc would.
#[test]
fn a_misspelled_pragma_is_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("t.cu"),
        "#pragma klaraptr kernel(k) data(n) dim(1) grid(ceil(n, bx))\n\
         __global__ void k(float *a, int n) { if (threadIdx.x < n) a[threadIdx.x] = 0; }\n\
         void run(float *a, int n) { k<<<1, 32>>>(a, n); }\n",
    )
    .unwrap();
    let out = compile_no_gpu(
        dir.path(),
        &["-arch=sm_90", "-c", "t.cu", "-o", "t.o"],
        &dir.path().join("cache"),
    );
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains(
            "klaraptor-cc: warning: t.cu:1:9: '#pragma klaraptr' is not a klaraptor annotation"
        ) && err.contains("(write '#pragma klaraptor')"),
        "{err}"
    );
    assert!(dir.path().join("t.o").is_file());
}

/// The same pragma in a header the source includes (found through `-I`): the warning names
/// the header's line.
#[test]
fn a_misspelled_pragma_in_an_included_header_is_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("inc")).unwrap();
    std::fs::write(
        dir.path().join("inc/k.cuh"),
        "#pragma once\n\
         #pragma Klaraptor kernel(k) data(n) dim(1) grid(ceil(n, bx))\n\
         __global__ void k(float *a, int n) { if (threadIdx.x < n) a[threadIdx.x] = 0; }\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("t.cu"),
        "#include \"k.cuh\"\nvoid run(float *a, int n) { k<<<1, 32>>>(a, n); }\n",
    )
    .unwrap();
    let out = compile_no_gpu(
        dir.path(),
        &["-arch=sm_90", "-I", "inc", "-c", "t.cu", "-o", "t.o"],
        &dir.path().join("cache"),
    );
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("warning: inc/k.cuh:2:9: '#pragma Klaraptor' is not a klaraptor annotation"),
        "{err}"
    );
    assert!(dir.path().join("t.o").is_file());
}

/// One kernel (a template defined in two translation units) annotated differently in each:
/// the link is an error naming both annotations; the same annotation twice links.
#[test]
fn a_kernel_annotated_differently_in_two_translation_units_fails_the_link() {
    let kernel = "template <int R> __global__ void k(float *a, int n) {\n\
                  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) a[i] = R; }\n";
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, pragma: &str, body: &str| {
        std::fs::write(dir.path().join(name), format!("{pragma}\n{kernel}{body}")).unwrap();
    };
    let pragma = "#pragma klaraptor kernel(k) data(N=n) dim(1) grid(ceil(N, bx))";
    let body_a = "void fb(float *a, int n);\n\
                  int main() { float *a = nullptr; k<1><<<(1000 + 127) / 128, 128>>>(a, 1000);\n\
                  fb(a, 1000); return 0; }\n";
    let body_b = "void fb(float *a, int n) { k<1><<<(n + 255) / 256, 256>>>(a, n); }\n";
    let cache = dir.path().join("cache");
    let build = |b_pragma: &str| {
        write("a.cu", pragma, body_a);
        write("b.cu", b_pragma, body_b);
        for f in ["a", "b"] {
            let src = format!("{f}.cu");
            let obj = format!("{f}.o");
            let o = compile_no_gpu(dir.path(), &["-arch=sm_90", "-c", &src, "-o", &obj], &cache);
            assert!(o.status.success(), "{}", stderr(&o));
        }
        compile_no_gpu(
            dir.path(),
            &["-arch=sm_90", "a.o", "b.o", "-o", "app"],
            &cache,
        )
    };
    let o = build(&format!("{pragma} block(bx >= 64)"));
    let err = stderr(&o);
    assert!(!o.status.success(), "{err}");
    assert!(
        err.contains("kernel k is annotated differently in two translation units")
            && err.contains("a.cu:1:")
            && err.contains("b.cu:1:")
            && err.contains("block(bx >= 64)"),
        "{err}"
    );
    assert!(!dir.path().join("app").exists());
    let o = build(pragma);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(dir.path().join("app").is_file());
}

/// klaraptor-cc `args` in `dir` with the test's nvcc, no GPU, no profile database from the
/// environment and the user cache `cache`.
fn compile_no_gpu(
    dir: &std::path::Path,
    args: &[&str],
    cache: &std::path::Path,
) -> std::process::Output {
    std::process::Command::new(klaraptor_cc())
        .current_dir(dir)
        .args(args)
        .env("KLARAPTOR_NVCC", nvcc())
        .env("KLARAPTOR_NO_GPU", "1")
        .env("KLARAPTOR_TRANSFER", "off")
        .env("XDG_CACHE_HOME", cache)
        .env_remove("KLARAPTOR_PROFILE_DB")
        .output()
        .unwrap()
}

/// `grid(N / (bx - bx))` divides by zero at every block shape: found when the annotation is
/// checked, at the pragma, not at the link (which found no allowed shape) or at run time.
#[test]
fn a_grid_that_divides_by_zero_everywhere_is_an_error_at_the_pragma() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("z.cu"),
        "#pragma klaraptor kernel(k) data(n) dim(1) grid(n / (bx - bx))\n\
         __global__ void k(float *a, int n) { if (threadIdx.x < n) a[threadIdx.x] = 0; }\n\
         void run(float *a, int n) { k<<<1, 32>>>(a, n); }\n",
    )
    .unwrap();
    let out = compile_no_gpu(
        dir.path(),
        &["-arch=sm_90", "-c", "z.cu", "-o", "z.o"],
        &dir.path().join("cache"),
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("z.cu:1:19: error: kernel 'k': grid formula 1")
            && err.contains("division by zero"),
        "{err}"
    );
    assert!(!dir.path().join("z.o").exists());
}

/// A source nvcc compiles but libclang cannot parse (a host call of `max(float, float)`,
/// which only nvcc's headers declare for the host): the build succeeds with nvcc's own
/// object, and each annotation says that its kernel keeps the program's own launch, with
/// the file, the line and libclang's error; a pragma naming a kernel the file does not
/// define is reported.
#[test]
fn a_source_libclang_cannot_parse_warns_for_each_annotation() {
    let src = "#pragma klaraptor kernel(k) data(n)\n\
               __global__ void k(float *a, int n) { if (n) a[0] = 1; }\n\
               #pragma klaraptor kernel(nothere) data(n)\n\
               float larger(float a, float b) { return max(a, b); }\n\
               void go(float *a, int n) { k<<<(n + 255) / 256, 256>>>(a, n); }\n";
    let (code, err, wrote) = compile(&[("k.cu", src)], &[]);
    assert_eq!(code, 0, "{err}");
    assert!(wrote, "{err}");
    assert!(
        err.contains(
            "klaraptor-cc: warning: k.cu:1:19: kernel k keeps the program's own launch: \
             libclang cannot parse k.cu (k.cu:4:41: error: no matching function for call to 'max')"
        ),
        "{err}"
    );
    assert!(
        err.contains("klaraptor-cc: warning: k.cu:3:19: no kernel named 'nothere' in k.cu"),
        "{err}"
    );
}

/// Alternative kernels under `#ifdef`, each with its pragma: the pragmas of the branch the
/// preprocessor skips are ignored (no "annotated twice", no "no kernel named"), and the
/// kernel that is compiled gets its own branch's annotation. Each branch in turn, with -D on
/// the command line, through `klaraptor specs` and klaraptor-cc.
#[test]
fn pragmas_in_inactive_ifdef_branches_are_ignored() {
    let src = "#ifdef WIDE\n\
               #pragma klaraptor kernel(k) data(n) block(bx >= 128)\n\
               __global__ void k(float *a, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) a[i] = 2; }\n\
               #else\n\
               #pragma klaraptor kernel(k) data(n) block(bx <= 64)\n\
               __global__ void k(float *a, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) a[i] = 1; }\n\
               #endif\n\
               #if defined(EXTRA) && EXTRA > 1\n\
               #pragma klaraptor kernel(extra) data(n) grid(n / (bx - bx))\n\
               __global__ void extra(float *a, int n) {}\n\
               #endif\n\
               #if 0\n\
               #pragma klaraptor kernel(gone) data(\n\
               #endif\n\
               void run(float *a, int n) { k<<<(n + 255) / 256, 256>>>(a, n); }\n";
    let dir = project(&[("k.cu", src)]);
    for (define, block) in [(None, "bx <= 64"), (Some("-DWIDE"), "bx >= 128")] {
        let mut args = vec!["specs"];
        args.extend(define);
        args.push("k.cu");
        let o = run(dir.path(), &klaraptor(), &args);
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        let err = ok(&o);
        assert!(out.contains(&format!("block = [\"({block})\"]")), "{out}");
        assert!(out.contains("annotated_at = \"k.cu:"), "{out}");
        assert!(!out.contains("extra") && !out.contains("gone"), "{out}");

        let mut args = vec!["-arch=sm_90", "-c", "k.cu", "-o", "k.o"];
        args.extend(define);
        let o = compile_no_gpu(dir.path(), &args, &dir.path().join("cache"));
        let err2 = stderr(&o);
        assert!(o.status.success(), "{err}{err2}");
        let obj = dir.path().join("k.o");
        let specs = klaraptor_spec::link::scan_bytes(&std::fs::read(&obj).unwrap(), &obj).unwrap();
        assert_eq!(specs.len(), 1, "{err2}");
        let line = if define.is_some() { 2 } else { 5 };
        assert!(
            specs[0]
                .annotated_at
                .to_string()
                .starts_with(&format!("k.cu:{line}:")),
            "{}",
            specs[0].annotated_at
        );
        std::fs::remove_file(&obj).unwrap();
    }
    // The branch made active by a -D with a value: its pragma applies (and is checked).
    let o = compile_no_gpu(
        dir.path(),
        &["-arch=sm_90", "-DEXTRA=2", "-c", "k.cu", "-o", "k.o"],
        &dir.path().join("cache"),
    );
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("k.cu:9:") && err.contains("kernel 'extra'"),
        "{err}"
    );
}

/// A source that cannot be read: the error names it and says the system's reason once
/// (klaraptor prints the error's chain, whose cause the message already holds).
#[test]
fn an_unreadable_source_is_said_once() {
    let d = project(&[]);
    let (code, _, err) = specs(d.path(), "nothere.cu");
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("cannot read nothere.cu: "), "{err}");
    assert_eq!(err.matches("(os error 2)").count(), 1, "{err}");
}

/// `shmem(bx * 1000000)`: more than any GPU gives a block at every shape; `klaraptor specs`
/// and klaraptor-cc refuse it at the clause (nothing is written).
#[test]
fn a_shmem_formula_above_the_limit_at_every_shape_is_an_error() {
    let src = "#pragma klaraptor kernel(k) data(n) shmem(bx * 1000000)\n\
               __global__ void k(float *a, int n) { extern __shared__ float s[]; if (n) a[0] = s[0]; }\n\
               void go(float *a, int n) { k<<<1, 32, 32 * 4>>>(a, n); }\n";
    let d = project(&[("k.cu", src)]);
    let (code, _, err) = specs(d.path(), "k.cu");
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("k.cu:1:43: error: shmem((bx * 1000000)) is more shared memory than a block")
            && err.contains("232448 bytes (227 KiB")
            && err.contains("= help: shmem(…) gives the bytes of dynamic shared memory ONE block"),
        "{err}"
    );
    let (code, err, wrote) = compile(&[("k.cu", src)], &["-arch=sm_90"]);
    assert_eq!(code, 1, "{err}");
    assert!(!wrote && err.contains("k.cu:1:43: error: shmem("), "{err}");
}

/// `klaraptor.toml` entries that match nothing (a misspelled kernel, a `source` that does not
/// exist, a `source` that defines no such kernel) are warnings naming the toml's line, the
/// entry and what it did not match, from `klaraptor specs` and from klaraptor-cc, which
/// builds all the same; an entry without `source` whose kernel another `.cu` file beside the
/// toml defines, or one for this translation unit, is no warning.
#[test]
fn klaraptor_toml_entries_that_match_nothing_are_warnings() {
    let toml = "[kernel.scal]\n\
                data = [\"n\"]\n\
                \n\
                [kernel.twice]\n\
                source = \"nothere.cu\"\n\
                data = [\"n\"]\n\
                \n\
                [kernel.other]\n\
                source = \"other.cu\"\n\
                data = [\"n\"]\n\
                \n\
                [kernel.elsewhere]\n\
                data = [\"n\"]\n\
                \n\
                [kernel.used]\n\
                source = \"k.cu\"\n\
                data = [\"n\"]\n";
    let k = "__global__ void scale(float *a, int n) { if (n) a[0] = 1; }\n\
             __global__ void used(float *a, int n) { if (n) a[0] = 2; }\n\
             void go(float *a, int n) { scale<<<1, 32>>>(a, n); used<<<1, 32>>>(a, n); }\n";
    let files = [
        ("klaraptor.toml", toml),
        ("k.cu", k),
        ("b.cu", "__global__ void elsewhere(float *a, int n) {}\n"),
        ("other.cu", "__global__ void other2(float *a, int n) {}\n"),
    ];
    let d = project(&files);
    let want = [
        "klaraptor.toml:1:1: warning: the entry [kernel.scal] of klaraptor.toml matches no \
         kernel: no .cu file in . (nor a file one includes with quotes) defines a __global__ \
         function named 'scal'",
        "did you mean 'scale'?",
        "klaraptor.toml:5:11: warning: the entry [kernel.twice] of klaraptor.toml matches \
         nothing: its source, nothere.cu, does not exist",
        "klaraptor.toml:9:11: warning: the entry [kernel.other] of klaraptor.toml matches \
         nothing: other.cu defines no kernel named 'other'",
        "did you mean 'other2'?",
    ];
    let (code, out, err) = specs(d.path(), "k.cu");
    assert_eq!(code, 0, "{err}");
    for w in want {
        assert!(err.contains(w), "missing {w:?} in:\n{err}");
    }
    assert_eq!(err.matches("warning:").count(), 3, "{err}");
    assert!(out.contains("[kernel.used]"), "{out}");

    let (code, err, wrote) = compile(&files, &["-arch=sm_90"]);
    assert_eq!(code, 0, "{err}");
    assert!(wrote, "{err}");
    for w in want {
        let w = w.replacen(
            "klaraptor.toml:",
            "klaraptor-cc: warning: klaraptor.toml:",
            1,
        );
        let w = w.replacen(": warning: the entry", ": the entry", 1);
        assert!(err.contains(&w), "missing {w:?} in:\n{err}");
    }
    assert_eq!(err.matches("matches no kernel").count(), 1, "{err}");
    assert_eq!(err.matches("matches nothing").count(), 2, "{err}");
}
