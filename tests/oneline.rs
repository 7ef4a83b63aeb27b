//! The one-line pragma (`#pragma klaraptor kernel(k)`, issue 40): a kernel annotated without
//! `data(…)` has the threads its launch runs per block axis as data (`NX = gridDim.x *
//! blockDim.x`, `NY`, `NZ`), the grid `ceil(NX, bx)` per axis and blocks that divide those
//! threads exactly; the pass computes the values from the launch's own grid and block;
//! `klaraptor profile ./app <args>` profiles such a kernel (no recipe) by running the program
//! as given; `klaraptor suggest` prints the annotation it would infer for each launch.

mod common;

use std::path::Path;
use std::process::Command;

use common::{kept_dir, klaraptor, klaraptor_cc, ok, pinned, project, run_fake_runtime_harness};

/// A saxpy without a bounds check launched with n/256 blocks of 256 (its size lives only in
/// the grid), and a 2-D kernel launched on 16 × 16 tiles.
const APP: &str = r#"#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#pragma klaraptor kernel(saxpy)
__global__ void saxpy(float a, const float *x, float *y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  y[i] = a * x[i] + y[i];
}

#pragma klaraptor kernel(scale2d) dim(2)
__global__ void scale2d(float *m, int pitch) {
  int x = blockIdx.x * blockDim.x + threadIdx.x;
  int y = blockIdx.y * blockDim.y + threadIdx.y;
  m[y * pitch + x] *= 2.0f;
}

void run(float *x, float *y, int n, int w, int h) {
  saxpy<<<n / 256, 256>>>(3.0f, x, y);
  dim3 b(16, 16), g(w / 16, h / 16);
  scale2d<<<g, b>>>(y, w);
}

// A 1-D annotation of a launch that also spreads over y: its data are 0 (it keeps its shape).
void run_rows(float *x, float *y, int n, int rows) {
  saxpy<<<dim3(n / 256, rows), 256>>>(3.0f, x, y);
}
"#;

const MAIN: &str = r#"#include <cstdio>
#include <cuda_runtime.h>
void run(float *x, float *y, int n, int w, int h);
int main() {
  int n = 1 << 20;
  float *x, *y;
  cudaMallocManaged(&x, n * sizeof(float));
  cudaMallocManaged(&y, n * sizeof(float));
  run(x, y, n, 1024, 1024);
  cudaError_t err = cudaDeviceSynchronize();
  std::printf("%s\n", cudaGetErrorString(err));
  return 0;
}
"#;

/// `klaraptor specs` of the one-line pragmas: the data are the launch's threads, the grid
/// covers them, the blocks divide them.
#[test]
fn specs_show_the_inferred_data_grid_and_constraints() {
    let d = project(&[("app.cu", APP)]);
    let o = pinned(d.path(), &klaraptor())
        .args(["specs", "app.cu"])
        .output()
        .unwrap();
    ok(&o);
    let out = String::from_utf8_lossy(&o.stdout);
    for want in [
        "[kernel.saxpy]",
        r#"data = ["NX = gridDim.x * blockDim.x (launch)"]"#,
        r#"grid = ["ceil(NX, bx)"]"#,
        r#"block = ["((NX % bx) == 0)"]"#,
        "[kernel.scale2d]",
        r#"data = ["NX = gridDim.x * blockDim.x (launch)", "NY = gridDim.y * blockDim.y (launch)"]"#,
        r#"grid = ["ceil(NX, bx)", "ceil(NY, by)"]"#,
        r#"block = ["((NX % bx) == 0)", "((NY % by) == 0)"]"#,
    ] {
        assert!(out.contains(want), "no {want} in:\n{out}");
    }
}

/// A program annotated only with one-line pragmas builds through klaraptor-cc (compile and
/// link, no GPU, no profile: the kernels keep their launches, and the hint says how to
/// profile them).
#[test]
fn a_program_with_one_line_pragmas_builds() {
    let d = project(&[("app.cu", APP), ("main.cu", MAIN)]);
    let o = pinned(d.path(), &klaraptor_cc())
        .env("KLARAPTOR_PROFILE_DB", d.path().join("db"))
        .args(["-O2", "app.cu", "main.cu", "-o", "app"])
        .output()
        .unwrap();
    let err = ok(&o);
    assert!(d.path().join("app").is_file());
    assert!(
        err.contains("klaraptor profile <binary> <arguments>"),
        "no hint to profile by running the program:\n{err}"
    );
    let nm = Command::new("nm")
        .arg(d.path().join("app"))
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&nm.stdout).contains("klaraptor_launch_begin"));
    // `klaraptor plan --recipes`: no command to print (stdout empty), and each kernel
    // without a recipe said on stderr with how it is profiled
    let o = pinned(d.path(), &klaraptor())
        .args(["plan", "--recipes", "app"])
        .output()
        .unwrap();
    let err = ok(&o);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.trim().is_empty(), "{out}");
    for k in ["saxpy", "scale2d"] {
        assert!(
            err.contains(&format!(
                "kernel {k} has no profile recipe: run `klaraptor profile app <arguments>`"
            )),
            "{k}: {err}"
        );
    }
}

/// The instrumented object hands the runtime the threads each launch runs: NX = grid.x *
/// block.x (and NY for a 2-D annotation), computed from the launch's own grid and block; a
/// 1-D annotation's launch that also spreads over y gives 0.
#[test]
fn the_instrumented_launch_passes_the_threads_it_runs() {
    let d = project(&[("app.cu", APP)]);
    let o = pinned(d.path(), &klaraptor_cc())
        .args(["-c", "app.cu", "-o", "app.o", "--kl-keep"])
        .output()
        .unwrap();
    let err = ok(&o);
    let kept = kept_dir(&err).to_string();
    let host = Path::new(&kept).join("tu0/host.o");
    let harness = r#"#include <cstdio>
#include <cstring>
struct dim3 { unsigned x, y, z; };
static long long seen[4][3];
static int n_seen = 0, n_data[4];
extern "C" {
unsigned __cudaPushCallConfiguration(uint64_t, uint32_t, uint64_t, uint32_t, size_t, void *) { return 1; }
unsigned __cudaLaunchKernel(const void *, uint64_t, uint32_t, uint64_t, uint32_t, void **, size_t, void *) { return 0; }
static void note(int32_t n, const int64_t *data) {
  n_data[n_seen] = n;
  for (int i = 0; i < n && i < 3; i++) seen[n_seen][i] = data[i];
  n_seen++;
}
void klaraptor_select(const char *, int32_t n, const int64_t *data, uint64_t *, uint32_t *, uint64_t *, uint32_t *) { note(n, data); }
uint64_t klaraptor_launch_begin(const char *, int32_t n, const int64_t *data, uint64_t *, uint32_t *, uint64_t *, uint32_t *, int64_t, void *) { note(n, data); return 7; }
}
void run(float *x, float *y, int n, int w, int h);
void run_rows(float *x, float *y, int n, int rows);
int main() {
  run(nullptr, nullptr, 1000 * 256, 640, 480);
  run_rows(nullptr, nullptr, 4096, 3);
  int bad = n_seen != 3;
  if (n_data[0] != 1 || seen[0][0] != 1000 * 256) bad = 1;
  if (n_data[1] != 2 || seen[1][0] != 640 || seen[1][1] != 480) bad = 1;
  if (n_data[2] != 1 || seen[2][0] != 0) bad = 1;
  for (int k = 0; k < n_seen; k++)
    printf("launch %d: %d values: %lld %lld\n", k, n_data[k], seen[k][0], seen[k][1]);
  return bad;
}
"#;
    run_fake_runtime_harness(d.path(), harness, &host);
    let _ = std::fs::remove_dir_all(kept);
}

/// `klaraptor suggest` prints, for each launch, its file:line and text and the one-line
/// pragma (dim(2) for a 2-D block), a commented fuller form for a kernel with a size
/// argument, and a warning naming the line of a launch whose block it cannot read.
#[test]
fn suggest_prints_the_annotation_of_each_launch() {
    let src = r#"__global__ void copy(const float *in, float *out) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  out[i] = in[i];
}
__global__ void vadd(const float *a, float *b, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) b[i] += a[i];
}
__global__ void tile(float *m, int w, int h) {
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x < w && y < h) m[y * w + x] = 0;
}
void go(const float *in, float *out, int n, int w, int h, dim3 pb) {
  copy<<<n / 256, 256>>>(in, out);
  vadd<<<(n + 127) / 128, 128>>>(in, out, n);
  dim3 b(16, 16);
  tile<<<dim3((w + 15) / 16, (h + 15) / 16), b>>>(out, w, h);
  copy<<<n / 64, pb>>>(in, out);
}
"#;
    let d = project(&[("k.cu", src)]);
    let o = pinned(d.path(), &klaraptor())
        .args(["suggest", "k.cu"])
        .output()
        .unwrap();
    ok(&o);
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let block = |line: u32| -> String {
        let head = format!("k.cu:{line}:3: launch of ");
        let at = out
            .find(&head)
            .unwrap_or_else(|| panic!("no launch at line {line}:\n{out}"));
        out[at..].split("\n\n").next().unwrap().to_string()
    };
    let copy = block(14);
    assert!(copy.contains("copy<<<n / 256, 256>>>(in, out)"), "{copy}");
    assert!(copy.contains("above its definition (k.cu:1)"), "{copy}");
    assert!(
        copy.lines()
            .any(|l| l == "  #pragma klaraptor kernel(copy)"),
        "{copy}"
    );
    assert!(!copy.contains("data("), "{copy}");
    let vadd = block(15);
    assert!(
        vadd.lines()
            .any(|l| l == "  #pragma klaraptor kernel(vadd)"),
        "{vadd}"
    );
    assert!(
        vadd.contains("// #pragma klaraptor kernel(vadd) data(N=n) grid(ceil(N, bx))"),
        "{vadd}"
    );
    let tile = block(17);
    assert!(
        tile.lines()
            .any(|l| l == "  #pragma klaraptor kernel(tile) dim(2)"),
        "{tile}"
    );
    assert!(
        tile.contains("data(N1=w, N2=h) dim(2) grid(ceil(N1, bx), ceil(N2, by))"),
        "{tile}"
    );
    let unread = block(18);
    assert!(
        unread.contains(
            "k.cu:18:3: warning: klaraptor cannot read how many dimensions the block `pb` has"
        ),
        "{unread}"
    );
}

/// An error in a one-line pragma (a name that is not one of the launch's) stops the build
/// with the file, line and column, and says which names there are.
#[test]
fn an_error_in_a_one_line_pragma_names_file_and_line() {
    let src = "#pragma klaraptor kernel(k) grid(ceil(N, bx))\n__global__ void k(float *a) { a[threadIdx.x] = 0; }\nvoid go(float *a) { k<<<4, 64>>>(a); }\n";
    let d = project(&[("k.cu", src)]);
    let o = pinned(d.path(), &klaraptor_cc())
        .args(["-c", "k.cu", "-o", "k.o"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = common::stderr(&o);
    assert!(
        err.contains("k.cu:1:39: error: unknown name 'N'; the names are bx, by, bz, NX"),
        "{err}"
    );
    assert!(!d.path().join("k.o").exists());
}

/// `klaraptor profile ./app <args>` takes the program's arguments after it; without a GPU it
/// says that it would run the program to profile the kernels without a recipe.
#[test]
fn profile_without_a_recipe_runs_the_program_as_given() {
    let d = project(&[("app.cu", APP), ("main.cu", MAIN)]);
    ok(&pinned(d.path(), &klaraptor_cc())
        .env("KLARAPTOR_PROFILE_DB", d.path().join("db"))
        .args(["-O2", "app.cu", "main.cu", "-o", "app"])
        .output()
        .unwrap());
    let o = pinned(d.path(), &klaraptor())
        .args(["profile", "--db", "db", "./app", "-n", "4096"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = common::stderr(&o);
    for k in ["saxpy", "scale2d"] {
        assert!(
            err.contains(&format!(
                "kernel {k} (annotated at app.cu:"
            )) && err.contains("recipe: it is profiled at the data sizes its launches reach in `./app -n 4096`"),
            "{k}: {err}"
        );
    }
    assert!(err.contains("no NVIDIA GPU here"), "{err}");
    assert!(
        err.contains("klaraptor profile runs the program to profile "),
        "{err}"
    );
}

/// A single profiled size is enough for a rational program: the H200 profile of the saxpy
/// sample restricted to its largest size (as `klaraptor profile ./app` of a run that reaches
/// one size leaves it) fits, and at that size the program ranks only shapes that divide the
/// launch's threads, its first choice among them.
#[test]
fn a_profile_of_one_size_gives_a_rational_program() {
    let mut entry = common::fixture_entry(
        "samples/klaraptor-profiles/v1/nvidia-h200-2803d38c/_Z5saxpyfPKfPfi-303aeacbd19721f5.toml",
    );
    entry.samples.retain(|s| s.sizes == [65536]);
    entry.plan.sizes = vec![vec![65536]];
    entry.kernel.data = vec!["NX".into()];
    let mut spec = common::idiom_spec(&entry, "ceil(NX, bx)", &["((NX % bx) == 0)"]);
    spec.data = vec!["NX".into()];
    let models = tempfile::tempdir().unwrap();
    let prog = klaraptor_program::rational::build(&spec, &entry, models.path()).unwrap();
    for n in [65536i64, 1 << 20, 1000 * 256] {
        let ranked = prog.rank(&[n]).unwrap();
        assert!(!ranked.is_empty(), "nothing ranked at {n}");
        for r in &ranked {
            assert_eq!(n % i64::from(r.block[0]), 0, "{:?} at {n}", r.block);
            assert_eq!(
                i64::from(r.grid[0]) * i64::from(r.block[0]),
                n,
                "{:?} {:?} at {n}",
                r.block,
                r.grid
            );
        }
    }
}
