//! `klaraptor-cc --kl-backend=clang` (no GPU): clang-19 compiles annotated CUDA itself,
//! device and host; the IO-builder pass instruments its host IR; the link is the nvcc
//! backend's (runtime, specs, profiling variant). The binaries' device code is read back
//! from their `.nv_fatbin` section.

mod common;
use common::*;
use std::path::Path;
use std::process::{Command, Output};

fn symbols(path: &Path) -> String {
    let o = Command::new("nm").arg(path).output().unwrap();
    assert!(o.status.success(), "nm {}", path.display());
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn has_symbol(nm: &str, kind: &str, name: &str) -> bool {
    nm.lines().any(|l| l.ends_with(&format!(" {kind} {name}")))
}

/// One image of a CUDA fatbinary: kind (1 PTX, 2 ELF), the SM number (90 for sm_90 and
/// sm_90a alike), and the payload as stored (ELF images are not compressed by default).
struct Image {
    kind: u16,
    sm: u32,
    payload: Vec<u8>,
}

impl std::fmt::Debug for Image {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "kind {} sm {} ({} bytes)",
            self.kind,
            self.sm,
            self.payload.len()
        )
    }
}

impl Image {
    fn holds(&self, symbol: &str) -> bool {
        self.payload.windows(symbol.len() + 2).any(|w| {
            w[0] == 0 && &w[1..=symbol.len()] == symbol.as_bytes() && w[symbol.len() + 1] == 0
        })
    }
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes(b[at..at + 2].try_into().unwrap())
}
fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}
fn u64_at(b: &[u8], at: usize) -> usize {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap()) as usize
}

/// The fatbinaries in `binary`'s `.nv_fatbin` section (one per translation unit), each as
/// its images. A fatbinary starts with magic 0xBA55ED50, a 16-bit version, a 16-bit header
/// size and a 64-bit size of what follows; each image has its own header: kind (16 bits),
/// 16 bits, header size (32), payload size (64), …, the SM number at byte 28.
fn fatbinaries(binary: &Path, scratch: &Path) -> Vec<Vec<Image>> {
    let raw = scratch.join("nv_fatbin.bin");
    let o = Command::new("objcopy")
        .args(["-O", "binary", "--only-section=.nv_fatbin"])
        .arg(binary)
        .arg(&raw)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let b = std::fs::read(&raw).unwrap();
    let mut out = Vec::new();
    let mut off = 0;
    while off + 16 <= b.len() {
        if u32_at(&b, off) != 0xBA55_ED50 {
            off += 8;
            continue;
        }
        let header = u16_at(&b, off + 6) as usize;
        let size = u64_at(&b, off + 8);
        let end = off + header + size;
        let mut images = Vec::new();
        let mut e = off + header;
        while e < end {
            let ih = u32_at(&b, e + 4) as usize;
            let len = u64_at(&b, e + 8);
            images.push(Image {
                kind: u16_at(&b, e),
                sm: u32_at(&b, e + 28),
                payload: b[e + ih..e + ih + len].to_vec(),
            });
            e += ih + len;
        }
        out.push(images);
        off = end;
    }
    out
}

/// The fatbinary whose ELF images define `kernel`.
fn fatbinary_of<'a>(fatbins: &'a [Vec<Image>], kernel: &str) -> &'a [Image] {
    let found: Vec<&Vec<Image>> = fatbins
        .iter()
        .filter(|f| f.iter().any(|i| i.kind == 2 && i.holds(kernel)))
        .collect();
    assert_eq!(
        found.len(),
        1,
        "one fatbinary defines {kernel}: {fatbins:#?}"
    );
    found[0]
}

fn sample_project() -> tempfile::TempDir {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("samples/matmul");
    let files: Vec<(&str, String)> = ["Makefile", "kernels.h", "main.cu", "mm.cu", "saxpy.cu"]
        .iter()
        .map(|n| (*n, std::fs::read_to_string(dir.join(n)).unwrap()))
        .collect();
    let refs: Vec<(&str, &str)> = files.iter().map(|(a, b)| (*a, b.as_str())).collect();
    project(&refs)
}

/// Runs klaraptor-cc in `dir` with no GPU and an empty profile database of its own.
fn kcc(dir: &Path, args: &[&str]) -> Output {
    Command::new(klaraptor_cc())
        .args(args)
        .current_dir(dir)
        .env("KLARAPTOR_NVCC", nvcc())
        .env("KLARAPTOR_NO_GPU", "1")
        .env("KLARAPTOR_TRANSFER", "off")
        .env("KLARAPTOR_PROFILE_DB", dir.join("profiles"))
        .env_remove("NVCC_PREPEND_FLAGS")
        .env_remove("NVCC_APPEND_FLAGS")
        .output()
        .unwrap()
}

/// The IR of an object's kept intermediate `host.inst.bc` (--kl-keep), as text.
fn kept_ir(stderr: &str) -> (String, std::path::PathBuf) {
    let kept = stderr
        .lines()
        .find_map(|l| l.strip_prefix("klaraptor-cc: kept intermediate files in "))
        .expect("kept dir");
    let bc = Path::new(kept).join("tu0/host.inst.bc");
    let o = Command::new("llvm-dis-19")
        .arg(&bc)
        .arg("-o")
        .arg("-")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        Path::new(kept).to_path_buf(),
    )
}

/// The body of function `name` in textual IR.
fn function<'a>(ir: &'a str, name: &str) -> &'a str {
    let needle = format!("@{name}(");
    let mut at = 0;
    for line in ir.split_inclusive('\n') {
        if line.starts_with("define ") && line.contains(&needle) {
            let end = ir[at..].find("\n}\n").unwrap() + at;
            return &ir[at..end];
        }
        at += line.len();
    }
    panic!("no function {name}")
}

/// samples/matmul through `make NVCC="klaraptor-cc --kl-backend=clang"`: the annotated
/// translation units are compiled by clang-19 (its stub names, its registration), their
/// launches instrumented, their stubs launching through `__cudaLaunchKernel`; the link adds
/// the runtime; the binary holds sm_90 cubins of both kernels from those translation units.
#[test]
fn matmul_sample_through_make() {
    let d = sample_project();
    let o = Command::new("make")
        .arg(format!(
            "NVCC={} --kl-backend=clang --kl-verbose",
            klaraptor_cc().display()
        ))
        .current_dir(d.path())
        .env("KLARAPTOR_NVCC", nvcc())
        .env("KLARAPTOR_NO_GPU", "1")
        .env("KLARAPTOR_TRANSFER", "off")
        .env("KLARAPTOR_PROFILE_DB", d.path().join("profiles"))
        .output()
        .unwrap();
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    for line in [
        "clang backend: clang-19 builds the CUDA against",
        "device code: compute_90 -> sm_90",
        "instrumented a launch of _Z2mmPKfS0_Pfi in _Z6gpu_mmPKfS0_Pfi",
        "instrumented a launch of _Z5saxpyfPKfPfi in _Z9gpu_saxpyfPKfPfi",
        "clang backend: the stub _Z17__device_stub__mmPKfS0_Pfi of _Z2mmPKfS0_Pfi launches \
         through __cudaLaunchKernel",
        "linking instrumented objects: adding rational programs and the runtime",
        "link: 2 annotated kernel(s) in the inputs",
    ] {
        assert!(err.contains(line), "{line}\n{err}");
    }
    assert!(!err.contains("not instrumented"), "{err}");
    // clang's objects: its stub naming, the runtime's entry points (the object carries the
    // runtime, weak: driver/src/runtime.rs), the spec section.
    let mm = symbols(&d.path().join("mm.o"));
    for (kind, sym) in [
        ("T", "_Z17__device_stub__mmPKfS0_Pfi"),
        ("W", "klaraptor_launch_begin"),
        ("W", "klaraptor_launch_end"),
        ("W", "klaraptor_register"),
        ("U", "__cudaGetKernel"),
        ("U", "__cudaLaunchKernel"),
        ("U", "__cudaRegisterFatBinary"),
    ] {
        assert!(has_symbol(&mm, kind, sym), "{kind} {sym} in mm.o:\n{mm}");
    }
    assert!(
        !mm.contains("__device_stub__Z2mm"),
        "not nvcc's stub:\n{mm}"
    );
    let spec = std::fs::read(d.path().join("mm.o")).unwrap();
    assert!(
        spec.windows(22).any(|w| w == b"KLARAPTOR-SPEC-BEGIN v"),
        "mm.o carries its kernel spec"
    );
    // main.cu is not annotated: nvcc's own object.
    assert!(!symbols(&d.path().join("main.o")).contains("klaraptor"));
    let app = d.path().join("matmul");
    let syms = symbols(&app);
    assert!(
        // The runtime the objects carry, hidden: local to the binary.
        ["t", "T", "W"]
            .iter()
            .any(|k| has_symbol(&syms, k, "klaraptor_select"))
            && ["t", "T", "W"]
                .iter()
                .any(|k| has_symbol(&syms, k, "klaraptor_register")),
        "{syms}"
    );
    let fatbins = fatbinaries(&app, d.path());
    for kernel in ["_Z2mmPKfS0_Pfi", "_Z5saxpyfPKfPfi"] {
        let f = fatbinary_of(&fatbins, kernel);
        // -gencode arch=compute_90,code=sm_90: one cubin, no PTX.
        assert_eq!(f.len(), 1, "{kernel}: {f:?}");
        assert_eq!((f[0].kind, f[0].sm), (2, 90), "{kernel}");
        assert_eq!(&f[0].payload[..4], b"\x7fELF");
    }
}

/// The kernel spec's code hash is the clang backend's device code's: not the nvcc build's
/// (a profile of one says nothing of the other), and the same on every build.
#[test]
fn code_hash_is_the_clang_device_codes() {
    let d = sample_project();
    let hash = |args: &[&str]| {
        let o = kcc(d.path(), args);
        assert!(o.status.success(), "{}", stderr(&o));
        let bytes = std::fs::read(d.path().join("mm.o")).unwrap();
        let text = String::from_utf8_lossy(&bytes).into_owned();
        let at = text.find("code_hash = \"").expect("code_hash in the spec") + 13;
        text[at..at + 16].to_string()
    };
    let clang = [
        "--kl-backend=clang",
        "-O2",
        "-arch=sm_90",
        "-c",
        "mm.cu",
        "-o",
        "mm.o",
    ];
    let a = hash(&clang);
    let b = hash(&clang);
    let n = hash(&["-O2", "-arch=sm_90", "-c", "mm.cu", "-o", "mm.o"]);
    assert_eq!(a, b);
    assert_ne!(a, n);
    assert!(a.chars().all(|c| c.is_ascii_hexdigit()), "{a}");
}

/// bench/gpu/launch_check.cu (templates, a loop, a stream with dynamic shared memory, an
/// unannotated kernel, launches as `invoke`s in a function with cleanups) in one step at
/// -O2 for two architectures: every annotated launch is instrumented, the rewritten IR has
/// the select before each push and the stubs use the launch entry, and the binary holds
/// cubins for sm_80 and sm_90 of every kernel plus compute_90 PTX.
#[test]
fn launch_check_two_architectures() {
    let src = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("bench/gpu/launch_check.cu"),
    )
    .unwrap();
    let d = project(&[("launch_check.cu", &src)]);
    let o = kcc(
        d.path(),
        &[
            "--kl-backend=clang",
            "--kl-verbose",
            "--kl-keep",
            "-O2",
            "-gencode",
            "arch=compute_80,code=sm_80",
            "--generate-code=arch=compute_90,code=[sm_90,compute_90]",
            "launch_check.cu",
            "-o",
            "lc",
        ],
    );
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains("device code: compute_80 -> sm_80; compute_90 -> sm_90, compute_90"),
        "{err}"
    );
    let launches: Vec<&str> = err
        .lines()
        .filter_map(|l| l.strip_prefix("klaraptor-cc: instrumented a launch of "))
        .collect();
    for k in [
        "_Z5scalePffiPj in main",
        "_Z4axpyIfEvT_PKS0_PS0_iPj in main",
        "_Z4axpyIdEvT_PKS0_PS0_iPj in main",
        "_Z6rowsumPKfPfiPj in main",
        "_Z5emptyi in main",
    ] {
        assert!(launches.contains(&k), "{k} not instrumented:\n{err}");
    }
    assert_eq!(launches.len(), 6, "{err}");
    assert!(!err.contains("not instrumented"), "{err}");

    let (ir, kept) = kept_ir(&err);
    let main = function(&ir, "main");
    // Six selects, each right before a push; seven pushes (the unannotated kernel's too).
    let lines: Vec<&str> = main.lines().map(str::trim).collect();
    let pushes: Vec<usize> = lines
        .iter()
        .enumerate()
        .filter(|(_, l)| l.contains("@__cudaPushCallConfiguration("))
        .map(|(i, _)| i)
        .collect();
    assert_eq!(pushes.len(), 7, "{main}");
    let selected = pushes
        .iter()
        .filter(|&&p| {
            lines[..p]
                .iter()
                .rev()
                .take(5)
                .any(|l| l.contains(" = call i64 @klaraptor_launch_begin("))
        })
        .count();
    assert_eq!(selected, 6, "{main}");
    assert!(
        lines
            .iter()
            .filter(|l| l.contains("@__cudaPushCallConfiguration("))
            .filter(|l| l.contains("klaraptor.block_xy.v"))
            .count()
            == 6
    );
    for stub in [
        "_Z20__device_stub__scalePffiPj",
        "_Z19__device_stub__axpyIfEvT_PKS0_PS0_iPj",
        "_Z21__device_stub__rowsumPKfPfiPj",
    ] {
        let body = function(&ir, stub);
        assert!(body.contains("@klaraptor.launch("), "{body}");
        assert!(!body.contains("@cudaLaunchKernel("), "{body}");
    }
    let plain = function(&ir, "_Z26__device_stub__unannotatedPfiPj");
    assert!(plain.contains("@cudaLaunchKernel("), "{plain}");
    std::fs::remove_dir_all(kept).unwrap();

    let fatbins = fatbinaries(&d.path().join("lc"), d.path());
    let f = fatbinary_of(&fatbins, "_Z5scalePffiPj");
    let mut images: Vec<(u16, u32)> = f.iter().map(|i| (i.kind, i.sm)).collect();
    images.sort();
    assert_eq!(images, [(1, 90), (2, 80), (2, 90)]);
    for i in f.iter().filter(|i| i.kind == 2) {
        for k in [
            "_Z5scalePffiPj",
            "_Z4axpyIfEvT_PKS0_PS0_iPj",
            "_Z4axpyIdEvT_PKS0_PS0_iPj",
            "_Z6rowsumPKfPfiPj",
            "_Z11unannotatedPfiPj",
            "_Z5emptyi",
        ] {
            assert!(i.holds(k), "sm_{} cubin defines {k}", i.sm);
        }
    }
}

/// Separate compile then link with flags that must reach the right tools: -O0 (the pass's
/// unoptimised IR path), -g, -lineinfo, -Xptxas, -maxrregcount, -D/-I/-std, -Xcompiler,
/// -MD; no -arch (nvcc 13's default, sm_75); the profiling variant links too, with the
/// stubs' launches reaching its `__wrap___cudaLaunchKernel`.
#[test]
fn flags_dependencies_default_architecture_and_the_profiling_variant() {
    let d = sample_project();
    std::fs::create_dir(d.path().join("inc")).unwrap();
    std::fs::write(d.path().join("inc/extra.h"), "#define EXTRA_SCALE 1\n").unwrap();
    let src = std::fs::read_to_string(d.path().join("saxpy.cu")).unwrap();
    std::fs::write(
        d.path().join("saxpy.cu"),
        format!(
            "#include <extra.h>\n#if !defined(EXTRA_SCALE) || !defined(FROM_D)\n#error flags\n#endif\n{src}"
        ),
    )
    .unwrap();
    let o = kcc(
        d.path(),
        &[
            "--kl-backend=clang",
            "--kl-verbose",
            "-O0",
            "-g",
            "-lineinfo",
            "-Xptxas",
            "-O3",
            "-maxrregcount=40",
            "-DFROM_D=1",
            "-Iinc",
            "-std=c++17",
            "-Xcompiler",
            "-fPIC,-Wall",
            "-MD",
            "-c",
            "saxpy.cu",
            "-o",
            "saxpy.o",
        ],
    );
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains("device code: compute_75 -> sm_75, compute_75"),
        "{err}"
    );
    let ran = |tool: &str| -> Vec<&str> {
        err.lines()
            .filter(|l| l.starts_with("klaraptor-cc: running ") && l.contains(tool))
            .collect()
    };
    let ptxas = ran("/ptxas\"");
    assert_eq!(ptxas.len(), 1, "{err}");
    for a in [
        "\"-arch=sm_75\"",
        "\"-lineinfo\"",
        "\"-O3\"",
        "\"-maxrregcount=40\"",
    ] {
        assert!(ptxas[0].contains(a), "{a} in {}", ptxas[0]);
    }
    let device: Vec<&str> = ran("\"--cuda-device-only\"");
    assert_eq!(device.len(), 1, "{err}");
    for a in [
        "\"-gline-tables-only\"",
        "\"-DFROM_D=1\"",
        "\"-Iinc\"",
        "\"-O3\"",
    ] {
        assert!(device[0].contains(a), "{a} in {}", device[0]);
    }
    assert!(!device[0].contains("-fPIC"), "{}", device[0]);
    let host: Vec<&str> = ran("\"--cuda-host-only\"");
    assert_eq!(host.len(), 1, "{err}");
    for a in ["\"-fPIC\"", "\"-Wall\"", "\"-g\"", "\"-O0\"", "\"-MD\""] {
        assert!(host[0].contains(a), "{a} in {}", host[0]);
    }
    // The dependency file names the user's source and header, not klaraptor's copy.
    let deps = std::fs::read_to_string(d.path().join("saxpy.d")).unwrap();
    assert!(deps.starts_with("saxpy.o: saxpy.cu"), "{deps}");
    assert!(deps.contains("inc/extra.h"), "{deps}");
    assert!(!deps.contains("klaraptor-"), "{deps}");
    let o = kcc(
        d.path(),
        &["--kl-backend=clang", "-O2", "-c", "mm.cu", "-o", "mm.o"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let o = kcc(d.path(), &["-O2", "-c", "main.cu", "-o", "main.o"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = kcc(
        d.path(),
        &[
            "--kl-verbose",
            "--kl-profiling-variant=matmul.profile",
            "main.o",
            "mm.o",
            "saxpy.o",
            "-o",
            "matmul",
        ],
    );
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("profiling variant: matmul.profile"), "{err}");
    let variant = symbols(&d.path().join("matmul.profile"));
    // The carried runtime's launch entry point, which profiles when asked to.
    assert!(
        has_symbol(&variant, "t", "klaraptor__launch_kernel"),
        "{variant}"
    );
    let plan = std::fs::read_to_string(d.path().join("matmul.profile.plan")).unwrap();
    assert!(
        plan.contains("_Z2mmPKfS0_Pfi") && plan.contains("_Z5saxpyfPKfPfi"),
        "{plan}"
    );
    // Both clang-built objects' stubs call the entry point the variant wraps.
    for obj in ["mm.o", "saxpy.o"] {
        assert!(
            has_symbol(&symbols(&d.path().join(obj)), "U", "__cudaLaunchKernel"),
            "{obj}"
        );
    }
    let fatbins = fatbinaries(&d.path().join("matmul"), d.path());
    let f = fatbinary_of(&fatbins, "_Z5saxpyfPKfPfi");
    let mut images: Vec<(u16, u32)> = f.iter().map(|i| (i.kind, i.sm)).collect();
    images.sort();
    assert_eq!(images, [(1, 75), (2, 75)]);
}

/// An option the backend cannot honour stops the build before anything is written, naming
/// the option and what to do.
#[test]
fn an_option_without_translation_is_refused_by_name() {
    let d = sample_project();
    for (args, flag, why) in [
        (
            vec!["-use_fast_math", "-arch=sm_90"],
            "-use_fast_math",
            "has no equivalent",
        ),
        (
            vec!["-arch=sm_100"],
            "-arch=sm_100",
            "cannot generate code for sm_100",
        ),
        (
            vec!["-Xcudafe", "--diag_suppress=177"],
            "-Xcudafe --diag_suppress=177",
            "does not run cudafe++",
        ),
    ] {
        let mut all = vec!["--kl-backend=clang", "-c", "mm.cu", "-o", "mm.o"];
        all.extend(args);
        let o = kcc(d.path(), &all);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{err}");
        assert!(
            err.contains(&format!(
                "klaraptor-cc: error: --kl-backend=clang cannot build with nvcc option '{flag}': "
            )) && err.contains(why)
                && err.contains("build with the nvcc backend (without --kl-backend=clang)")
                && err.contains("stopped before compiling; no output was written"),
            "{err}"
        );
        assert!(!d.path().join("mm.o").exists());
    }
    let o = kcc(d.path(), &["--kl-backend=gcc", "-c", "mm.cu"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("unknown klaraptor option '--kl-backend=gcc'"),
        "{}",
        stderr(&o)
    );
}

/// A translation unit nvcc builds (with a warning) and clang-19 does not: a
/// `__host__ __device__` function calling a host function, which clang rejects when it
/// compiles the device side. The error carries clang's diagnostic and says which step
/// failed and what to do; nothing is written; the nvcc backend builds it.
#[test]
fn a_translation_unit_clang_cannot_build_says_why() {
    let src = "#pragma klaraptor kernel(k) data(n)\n\
               int host_only(int n) { return n + 1; }\n\
               __host__ __device__ int twice(int n) { return 2 * host_only(n); }\n\
               __global__ void k(int *x, int n) { x[0] = twice(n); }\n\
               void go(int *x, int n) { k<<<1, 1>>>(x, n); }\n";
    let d = project(&[("hd.cu", src)]);
    let o = kcc(
        d.path(),
        &[
            "--kl-backend=clang",
            "-arch=sm_90",
            "-c",
            "hd.cu",
            "-o",
            "hd.o",
        ],
    );
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("hd.cu:3:51: error: reference to __host__ function 'host_only' in __host__ __device__ function"),
        "{err}"
    );
    assert!(
        err.contains(
            "klaraptor-cc: error: hd.cu: the clang backend could not build hd.cu (see the \
             messages above); build it with the nvcc backend (without --kl-backend=clang): \
             clang++-19 (device code for sm_90) failed"
        ),
        "{err}"
    );
    assert!(!d.path().join("hd.o").exists());
    let o = kcc(d.path(), &["-arch=sm_90", "-c", "hd.cu", "-o", "hd.o"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(has_symbol(
        &symbols(&d.path().join("hd.o")),
        "W",
        "klaraptor_launch_begin"
    ));
}

/// `--default-stream per-thread`: the stubs launch through the per-thread entry points
/// (`__cudaLaunchKernel_ptsz`, falling back to `cudaLaunchKernel_ptsz`), as nvcc's do.
#[test]
fn per_thread_default_stream() {
    let d = sample_project();
    let o = kcc(
        d.path(),
        &[
            "--kl-backend=clang",
            "--default-stream",
            "per-thread",
            "-arch=sm_90",
            "-c",
            "mm.cu",
            "-o",
            "mm.o",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let mm = symbols(&d.path().join("mm.o"));
    for sym in [
        "__cudaLaunchKernel_ptsz",
        "cudaLaunchKernel_ptsz",
        "__cudaGetKernel",
    ] {
        assert!(has_symbol(&mm, "U", sym), "U {sym}:\n{mm}");
    }
    assert!(!has_symbol(&mm, "U", "cudaLaunchKernel"), "{mm}");
}
