//! The instrumented compile of one annotated translation unit, to one host object.
//!
//! With the nvcc backend (the default):
//!
//! ```text
//! nvcc -cuda -ccbin clang++-19 <user flags> <source> -o host.ii    (device code embedded as nvcc built it)
//! (klaraptor's pragma lines in host.ii blanked)
//! clang++-19 -S -emit-llvm -O0 host.ii -o host.ll                   (unoptimised: see compile_unit)
//! IO-builder pass: klaraptor_launch_begin() before each annotated launch -> host.inst.bc
//! clang++-19 -c -O<user> host.inst.bc -o host.o
//! cc -c kernels.c -o kernels.o                                      (descriptors: grid formulas, constraints)
//! ld -r host.o kernels.o -o <object>                                (one object: -c then a separate link works)
//! ```
//!
//! With relocatable device code (`-dc`, `-rdc=true -c`, CMake's `CUDA_SEPARABLE_COMPILATION`)
//! the host translation is `nvcc -cuda -rdc=true …`: it embeds the relocatable device code in
//! the section `__nv_relfatbin` with the module id in `__nv_module_id`, and registers through
//! `__cudaRegisterLinkedBinary_<module id>`, which the device link defines. Both survive the
//! clang-19 compile, `ld -r` and objcopy untouched, so `nvcc -dlink` (or nvcc's link with
//! `-rdc=true`) reads the instrumented object as it reads nvcc's own; the stubs launch through
//! `__cudaLaunchKernel` as in a whole-program compile, and the code hash is that of the
//! embedded fatbinary, as there (device functions of other translation units that a kernel
//! calls are not part of it).
//!
//! A unit in which the pass instrumented no launch is `host.o` alone: it references nothing
//! of the runtime, so it links with any driver.
//!
//! With `--kl-backend=clang` ([`compile_unit_clang`]), clang-19 compiles the CUDA itself,
//! from a copy of the source whose klaraptor pragma lines are blank and which starts with a
//! `#line` naming the original:
//!
//! ```text
//! for each virtual architecture XX:
//!   clang++-19 -x cuda --cuda-device-only --cuda-gpu-arch=sm_XX -S copy.cu -o dev.sm_XX.ptx
//!   ptxas -arch=sm_YY dev.sm_XX.ptx -o dev.sm_YY.cubin              (for each real architecture YY)
//! fatbinary --create=dev.fatbin --image3=kind=elf,sm=YY,… --image3=kind=ptx,sm=XX,…
//! clang++-19 -x cuda --cuda-host-only -Xclang -fcuda-include-gpubinary -Xclang dev.fatbin
//!            -S -emit-llvm copy.cu -o host.ll                       (host code, registration, the fatbinary)
//! IO-builder pass (clang's stubs also launch through __cudaLaunchKernel) -> host.inst.bc
//! then as above: clang++-19 -c, cc kernels.c, ld -r
//! ```
//!
//! clang-19's own driver cannot make the fatbinary with CUDA 13: it calls `fatbinary
//! --image=profile=…`, an option CUDA 13's fatbinary no longer has (it takes `--image3`), so
//! the backend runs ptxas and fatbinary itself.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use klaraptor_passes::frontend::Analysis;
use klaraptor_passes::inject::{self, InjectReport, InjectTarget};
use klaraptor_spec::spec::KernelSpec;

use crate::nvcc_args::{Arg, ClangFlags, CommandLine, Phase, Role};
use klaraptor_program::codegen;

/// The tools besides nvcc.
#[derive(Debug, Clone)]
pub struct HostTools {
    pub clang: PathBuf,
    pub ld: PathBuf,
}

impl HostTools {
    pub fn discover() -> HostTools {
        let env = |v: &str, d: &str| {
            std::env::var_os(v)
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from(d))
        };
        HostTools {
            clang: env("KLARAPTOR_CLANG", "clang++-19"),
            ld: env("KLARAPTOR_LD", "ld"),
        }
    }
}

/// One instrumented translation unit.
pub struct Unit<'a> {
    /// The user's source, as named on the command line.
    pub source: &'a Path,
    pub analysis: &'a Analysis,
    /// A private directory for the intermediate files.
    pub work: PathBuf,
}

/// Runs `cmd`; on failure the tool's own diagnostics have already reached stderr.
fn run(cmd: &mut Command, verbose: bool, what: &str) -> Result<()> {
    if verbose {
        crate::kl_eprintln!("klaraptor-cc: running {cmd:?}");
    }
    let status = cmd
        .status()
        .with_context(|| format!("cannot run {what} ({:?})", cmd.get_program()))?;
    if !status.success() {
        bail!("{what} failed ({status})");
    }
    Ok(())
}

/// The user's options that shape the host translation: everything but the inputs, the
/// output, the mode, linking, and the host compiler (which must be clang-19 here).
fn host_translation_flags(cl: &CommandLine) -> Vec<String> {
    let mut out = Vec::new();
    for a in &cl.args {
        match a {
            Arg::Input(_) => {}
            Arg::Flag { spec, .. } => match spec.role {
                Role::Output
                | Role::Mode(_)
                | Role::HostCompiler
                | Role::Library
                | Role::LibraryDir
                | Role::Forward(crate::nvcc_args::Tool::Linker)
                | Role::Deps(_)
                | Role::DepsFile
                | Role::DepsTarget
                | Role::DepsPhony => {}
                _ => out.extend(a.tokens()),
            },
            Arg::Unknown(t) => out.push(t.clone()),
        }
    }
    out
}

/// Options for clang-19 compiling the host IR: the optimisation level, debug info, and the
/// host-compiler options the user gave nvcc.
fn host_codegen_flags(cl: &CommandLine) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(o) = cl.values(Role::Optimize).last() {
        out.push(format!("-O{o}"));
    }
    if let Some(s) = cl.values(Role::Std).last() {
        out.push(format!("-std={s}"));
    }
    if cl.has(Role::HostDebug) {
        out.push("-g".into());
    }
    for v in cl.values(Role::Forward(crate::nvcc_args::Tool::HostCompiler)) {
        out.extend(v.split(',').filter(|s| !s.is_empty()).map(str::to_string));
    }
    out
}

/// The targets the pass instruments: every mangled name of every annotated kernel.
pub fn targets(a: &Analysis) -> Vec<InjectTarget> {
    a.specs
        .iter()
        .flat_map(|s| {
            s.mangled.iter().map(|m| InjectTarget {
                kernel: m.clone(),
                id: m.clone(),
                data_args: s.data.iter().filter_map(|d| d.index()).collect(),
                launch_threads: s
                    .data
                    .iter()
                    .filter(|d| {
                        matches!(d.source, klaraptor_spec::spec::DataSource::LaunchThreads(_))
                    })
                    .count() as u8,
                shmem_clause: s.shmem.is_some(),
            })
        })
        .collect()
}

/// The formula the pass read for the dynamic shared memory of the launches of `spec`'s kernel
/// (a kernel without `shmem(…)`; the first instantiation that has one), parsed and checked as
/// the clause would be: `None` when the pass read none, `Err` with why it cannot be used.
pub fn detected_shmem(
    spec: &KernelSpec,
    report: &InjectReport,
) -> Option<std::result::Result<klaraptor_spec::expr::IntExpr, String>> {
    if spec.shmem.is_some() {
        return None;
    }
    let text = spec.mangled.iter().find_map(|m| report.shmem_formula(m))?;
    let labels: Vec<&str> = spec.data.iter().map(|d| d.label.as_str()).collect();
    Some(
        klaraptor_spec::expr::parse_int(text, &labels)
            .map_err(|e| e.message)
            .and_then(|e| {
                // Every block dimension may appear: the runtime's shapes have 1 beyond the
                // kernel's dimensions, which is what the formula then gets.
                klaraptor_spec::annotations::check_shmem(&e, 3)?;
                Ok(e)
            }),
    )
}

/// The kernels' specs, with the shared-memory formulas the pass read ([`detected_shmem`]) for
/// those without `shmem(…)`: what the descriptors and the link work from.
pub fn specs_with_detected_shmem(specs: &[KernelSpec], report: &InjectReport) -> Vec<KernelSpec> {
    specs
        .iter()
        .map(|s| {
            let mut s = s.clone();
            if let Some(Ok(e)) = detected_shmem(&s, report) {
                s.shmem = Some(e);
            }
            s
        })
        .collect()
}

/// Compiles `unit` to the host object `object` (written atomically).
/// `deps` is the dependency file and its target when the user asked for `-MD`/`-MMD`.
pub fn compile_unit(
    nvcc: &Path,
    tools: &HostTools,
    view: &CommandLine,
    unit: &Unit,
    object: &Path,
    deps: Option<(&Path, &str)>,
    verbose: bool,
) -> Result<InjectReport> {
    let w = &unit.work;
    // nvcc translates the user's file itself, named as the user named it: the device code's
    // line information, the fatbinary's identifier (which nvcc takes from the input's path,
    // and embeds with -lineinfo or -G) and the dependency file are what nvcc alone would
    // make, and the code hash does not depend on a temporary directory. The klaraptor
    // pragmas stay in the text: nvcc ignores them, as in an included file.
    std::fs::create_dir_all(w).with_context(|| format!("creating {}", w.display()))?;
    let ii = w.join("host.ii");
    let mut cmd = Command::new(nvcc);
    cmd.args(host_translation_flags(view));
    if view.phase() == Phase::CompileRdc && view.values(Role::Rdc).last() != Some("true") {
        // `-dc` is `-rdc=true -c`: the translation embeds relocatable device code (section
        // `__nv_relfatbin`) and registers it through `__cudaRegisterLinkedBinary_<module>`,
        // which the device link (`nvcc -dlink`, or nvcc's link with `-rdc=true`) defines.
        cmd.arg("-rdc=true");
    }
    cmd.args(["-cuda", "-ccbin"])
        .arg(&tools.clang)
        .arg(unit.source)
        .arg("-o")
        .arg(&ii);
    if let Some((file, target)) = deps {
        let nonsystem = view.args.iter().any(|a| {
            matches!(a, Arg::Flag { spec, .. } if spec.long == "generate-nonsystem-dependencies-with-compile")
        });
        let kind = if nonsystem { "-MMD" } else { "-MD" };
        cmd.arg(kind).arg("-MF").arg(file).arg("-MT").arg(target);
        if view.has(Role::DepsPhony) {
            cmd.arg("-MP");
        }
    }
    run(&mut cmd, verbose, "nvcc -cuda (host translation)")?;
    blank_klaraptor_pragmas(&ii)?;

    // The pass runs on unoptimised IR, before the inliner can fold a kernel's launch stub
    // into its caller; the user's optimisation level applies when the instrumented IR is
    // compiled (`optnone` is kept off so that it can). Above -O0 the IR is made at that
    // level with the optimisation passes off, so that it carries what only the front end
    // adds (type-based alias information, lifetimes, inlining hints): IR made at -O0 and
    // optimised later loses them, and host loops the user compiled at -O3 ran up to 2.4
    // times slower than nvcc's build of them (bench/results/e2e-h200-2026-11-28.md).
    let ll = w.join("host.ll");
    let codegen_flags = host_codegen_flags(view);
    let unoptimised: Vec<String> = codegen_flags
        .iter()
        .filter(|f| !f.starts_with("-O"))
        .cloned()
        .collect();
    let mut ir = Command::new(&tools.clang);
    ir.args(["-S", "-emit-llvm", "-Wno-unused-command-line-argument"])
        .args(&unoptimised);
    match view.values(Role::Optimize).last().unwrap_or("0") {
        "0" => ir.args(["-O0", "-Xclang", "-disable-O0-optnone"]),
        o => ir
            .arg(format!("-O{o}"))
            .args(["-Xclang", "-disable-llvm-passes"]),
    };
    run(
        ir.arg(&ii).arg("-o").arg(&ll),
        verbose,
        "clang++-19 (host IR)",
    )?;
    let bc = w.join("host.inst.bc");
    let report = inject::instrument_file(&ll, &bc, &targets(unit.analysis))
        .with_context(|| format!("instrumenting the launches of {}", unit.source.display()))?;
    let host_o = w.join("host.o");
    run(
        Command::new(&tools.clang)
            .args(["-c", "-Wno-unused-command-line-argument"])
            .args(&codegen_flags)
            .arg(&bc)
            .arg("-o")
            .arg(&host_o),
        verbose,
        "clang++-19 (host object)",
    )?;
    let hash = klaraptor_spec::link::code_hash(
        &std::fs::read_to_string(&ii).with_context(|| format!("reading {}", ii.display()))?,
    );
    finish_object(tools, unit, &host_o, &hash, &report, object, verbose)?;
    Ok(report)
}

/// Joins the instrumented host object with the kernels' descriptors and link specs into
/// `object` (written atomically). When the pass instrumented no launch (`report`), the
/// host object is the object, alone: nothing in it calls the runtime, so descriptors (which
/// register with the runtime) would leave an undefined `klaraptor_register` in a link
/// without it, and specs would have the link model kernels whose launches keep their own
/// dimensions.
fn finish_object(
    tools: &HostTools,
    unit: &Unit,
    host_o: &Path,
    hash: &str,
    report: &InjectReport,
    object: &Path,
    verbose: bool,
) -> Result<()> {
    if report.instrumented.is_empty() {
        let tmp = object.with_extension("o.klaraptor-tmp");
        let r = std::fs::copy(host_o, &tmp)
            .with_context(|| format!("writing {}", tmp.display()))
            .and_then(|_| {
                std::fs::rename(&tmp, object)
                    .with_context(|| format!("writing {}", object.display()))
            });
        if r.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        return r;
    }
    let w = &unit.work;
    let inc = w.join("include");
    std::fs::create_dir_all(&inc)?;
    std::fs::write(inc.join("klaraptor.h"), codegen::KLARAPTOR_H)?;
    let desc_c = w.join("kernels.c");
    let cwd = std::env::current_dir().context("reading the current directory")?;
    let specs = specs_with_detected_shmem(&unit.analysis.specs, report);
    let link_specs: Vec<_> = specs
        .iter()
        .flat_map(|s| klaraptor_spec::link::LinkSpec::from_spec(s, hash, &cwd))
        .collect();
    std::fs::write(
        &desc_c,
        format!(
            "{}\n{}",
            codegen::descriptors(&unit.source.display().to_string(), &specs),
            klaraptor_spec::link::c_section(&link_specs)?
        ),
    )?;
    let desc_o = w.join("kernels.o");
    run(
        klaraptor_program::host_cc::HostCc::from_env()?
            .command()
            .args(["-std=c99", "-O2", "-fPIC", "-c", "-I"])
            .arg(&inc)
            .arg(&desc_c)
            .arg("-o")
            .arg(&desc_o),
        verbose,
        "cc (kernel descriptors)",
    )?;
    let tmp = object.with_extension("o.klaraptor-tmp");
    let r = run(
        Command::new(&tools.ld)
            .arg("-r")
            .arg(host_o)
            .arg(&desc_o)
            .arg("-o")
            .arg(&tmp),
        verbose,
        "ld -r",
    );
    if r.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    r?;
    std::fs::rename(&tmp, object).with_context(|| format!("writing {}", object.display()))?;
    Ok(())
}

/// The CUDA toolkit's tools the clang backend runs besides clang++-19.
#[derive(Debug, Clone)]
pub struct CudaTools {
    /// The toolkit root (`--cuda-path`: `bin/ptxas`, `include/`, `nvvm/libdevice/`).
    pub root: PathBuf,
    pub ptxas: PathBuf,
    pub fatbinary: PathBuf,
}

/// Empty stand-ins for two headers clang-19's CUDA wrapper includes and CUDA 13 no longer
/// has (texture references are gone; nothing of them is used).
const CLANG_MISSING_HEADERS: &[&str] = &["texture_fetch_functions.h", "curand_mtgp32_kernel.h"];

/// Runs a step of the clang backend; on failure says which step and what to do (the tool's
/// own diagnostics are on stderr already).
fn run_step(cmd: &mut Command, verbose: bool, what: &str, source: &Path) -> Result<()> {
    run(cmd, verbose, what).with_context(|| {
        format!(
            "the clang backend could not build {} (see the messages above); build it with the \
             nvcc backend (without --kl-backend=clang)",
            source.display()
        )
    })
}

/// The instrumented compile with clang-19 compiling the CUDA itself (see the module docs).
/// `flags` is the translation of the user's options ([`crate::nvcc_args::clang_flags`]).
#[allow(clippy::too_many_arguments)]
pub fn compile_unit_clang(
    cuda: &CudaTools,
    tools: &HostTools,
    view: &CommandLine,
    flags: &ClangFlags,
    unit: &Unit,
    object: &Path,
    deps: Option<(&Path, &str)>,
    verbose: bool,
) -> Result<InjectReport> {
    let w = &unit.work;
    let copy = write_prepared_copy(unit.source, unit.analysis, w)?;
    let dir = unit
        .source
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let stubs = w.join("clang-cuda-stubs");
    std::fs::create_dir_all(&stubs)?;
    for h in CLANG_MISSING_HEADERS {
        std::fs::write(stubs.join(h), "")?;
    }
    let cuda_front = |cmd: &mut Command| {
        cmd.args(["-x", "cuda"])
            .arg(format!("--cuda-path={}", cuda.root.display()))
            // clang-19 knows CUDA up to 12.5 and says so; CUDA 13's headers work.
            .arg("-Wno-unknown-cuda-version")
            .arg("-isystem")
            .arg(&stubs);
        // CCCL (libcu++, CUB, Thrust), where nvcc finds it (nvcc.profile).
        let cccl = cuda.root.join("include/cccl");
        if cccl.is_dir() {
            cmd.arg("-isystem").arg(cccl);
        }
        cmd.arg("-iquote").arg(dir).args(&flags.both);
    };

    // Device code: PTX per virtual architecture, a cubin per real one, one fatbinary.
    let mut images = Vec::new();
    for t in &flags.targets {
        let ptx = w.join(format!("dev.sm_{}.ptx", t.arch));
        let mut cmd = Command::new(&tools.clang);
        cuda_front(&mut cmd);
        cmd.args(["--cuda-device-only", "-S"])
            .arg(format!("--cuda-gpu-arch=sm_{}", t.arch))
            .args(&flags.device)
            .arg(&copy)
            .arg("-o")
            .arg(&ptx);
        run_step(
            &mut cmd,
            verbose,
            &format!("clang++-19 (device code for sm_{})", t.arch),
            unit.source,
        )?;
        for sm in &t.sass {
            let cubin = w.join(format!("dev.sm_{sm}.cubin"));
            run_step(
                Command::new(&cuda.ptxas)
                    .arg(format!("-arch=sm_{sm}"))
                    .arg("-m64")
                    .args(&flags.ptxas)
                    .arg(&ptx)
                    .arg("-o")
                    .arg(&cubin),
                verbose,
                &format!("ptxas (sm_{sm})"),
                unit.source,
            )?;
            images.push(format!(
                "--image3=kind=elf,sm={sm},file={}",
                cubin.display()
            ));
        }
        if t.ptx {
            images.push(format!(
                "--image3=kind=ptx,sm={},file={}",
                t.arch,
                ptx.display()
            ));
        }
    }
    let fatbin = w.join("dev.fatbin");
    run_step(
        Command::new(&cuda.fatbinary)
            .arg("-64")
            .arg(format!("--create={}", fatbin.display()))
            .args(&flags.fatbinary)
            .args(&images),
        verbose,
        "fatbinary",
        unit.source,
    )?;

    // Host code, with the fatbinary embedded and registered, as IR the pass can read: not
    // optimised yet (the inliner would fold the launch stubs into their callers), but with
    // the user's -O level's front-end semantics (macros, inlining hints, TBAA) when it is
    // above 0, so that the codegen below optimises as a plain clang build would.
    let ll = w.join("host.ll");
    let opt = view.values(Role::Optimize).last().unwrap_or("0");
    let mut cmd = Command::new(&tools.clang);
    cuda_front(&mut cmd);
    cmd.args(["--cuda-host-only", "-S", "-emit-llvm"]);
    for t in &flags.targets {
        cmd.arg(format!("--cuda-gpu-arch=sm_{}", t.arch));
    }
    cmd.args(&flags.host)
        .args(["-Xclang", "-fcuda-include-gpubinary", "-Xclang"])
        .arg(&fatbin);
    if opt == "0" {
        cmd.args(["-O0", "-Xclang", "-disable-O0-optnone"]);
    } else {
        cmd.arg(format!("-O{opt}"))
            .args(["-Xclang", "-disable-llvm-passes"]);
    }
    if let Some((file, target)) = deps {
        let nonsystem = view.args.iter().any(|a| {
            matches!(a, Arg::Flag { spec, .. } if spec.long == "generate-nonsystem-dependencies-with-compile")
        });
        cmd.arg(if nonsystem { "-MMD" } else { "-MD" })
            .arg("-MF")
            .arg(file)
            .arg("-MT")
            .arg(target);
        if view.has(Role::DepsPhony) {
            cmd.arg("-MP");
        }
    }
    cmd.arg(&copy).arg("-o").arg(&ll);
    run_step(&mut cmd, verbose, "clang++-19 (host code)", unit.source)?;
    if let Some((file, _)) = deps {
        // The stand-in headers live in this temporary directory: a dependency on them
        // would make the next `make` look for files that are gone.
        drop_dependencies_under(file, &stubs)?;
    }

    let bc = w.join("host.inst.bc");
    let report = inject::instrument_file_with(
        &ll,
        &bc,
        &targets(unit.analysis),
        inject::InjectOptions {
            clang_stubs_via_launch_entry: true,
        },
    )
    .with_context(|| format!("instrumenting the launches of {}", unit.source.display()))?;
    let host_o = w.join("host.o");
    run_step(
        Command::new(&tools.clang)
            .args(["-c", "-Wno-unused-command-line-argument"])
            .args(host_codegen_flags(view))
            .arg(&bc)
            .arg("-o")
            .arg(&host_o),
        verbose,
        "clang++-19 (host object)",
        unit.source,
    )?;
    let bytes = std::fs::read(&fatbin).with_context(|| format!("reading {}", fatbin.display()))?;
    let mut text = String::with_capacity(bytes.len() * 2 + 32);
    text.push_str("clang-19 device code\n");
    for b in bytes {
        text.push_str(&format!("{b:02x}"));
    }
    let hash = klaraptor_spec::link::code_hash(&text);
    finish_object(tools, unit, &host_o, &hash, &report, object, verbose)?;
    Ok(report)
}

/// Removes from the make dependency file `file` every prerequisite under `dir` (and the
/// phony rules `-MP` wrote for them). Paths keep their escapes (`\ ` for a space).
fn drop_dependencies_under(file: &Path, dir: &Path) -> Result<()> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    let dir = dir.display().to_string().replace(' ', "\\ ");
    let under = |w: &str| w.starts_with(&dir);
    let mut out = String::new();
    // One rule per logical line (continuations joined), words split at unescaped spaces.
    for rule in text.replace("\\\n", " ").lines() {
        let words = crate::compile::rule_words(rule);
        let Some(first) = words.first() else {
            out.push('\n');
            continue;
        };
        if first.strip_suffix(':').is_some_and(under) {
            continue;
        }
        let kept: Vec<&str> = words
            .iter()
            .skip(1)
            .map(String::as_str)
            .filter(|w| !under(w))
            .collect();
        out.push_str(first);
        if !kept.is_empty() {
            out.push(' ');
            out.push_str(&kept.join(" \\\n  "));
        }
        out.push('\n');
    }
    if out != text {
        std::fs::write(file, out).with_context(|| format!("writing {}", file.display()))?;
    }
    Ok(())
}

/// Writes the source the compiler sees into `dir`: the user's text with klaraptor's pragma
/// lines blank, after a `#line` directive naming the original (so diagnostics, `__FILE__`
/// and dependency files name the user's file). Keeps the file name: nvcc derives default
/// output names from it.
pub fn write_prepared_copy(source: &Path, a: &Analysis, dir: &Path) -> Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    let copy = dir.join(source.file_name().context("source has no file name")?);
    let quoted = source
        .display()
        .to_string()
        .replace('\\', "\\\\")
        .replace('"', "\\\"");
    std::fs::write(&copy, format!("#line 1 \"{quoted}\"\n{}", a.stripped))
        .with_context(|| format!("writing {}", copy.display()))?;
    Ok(copy)
}

/// Blanks klaraptor's pragma lines (`#pragma klaraptor`, the original `#pragma kernel_info_…`)
/// in the host translation `ii` (the compiled file's and those of the files it includes, each
/// on one line once preprocessed), so that clang-19
/// compiling it never warns about them (`-Wunknown-pragmas` under the user's `-Wall`); the
/// line count, and with it every line marker, is unchanged.
fn blank_klaraptor_pragmas(ii: &Path) -> Result<()> {
    let text = std::fs::read_to_string(ii).with_context(|| format!("reading {}", ii.display()))?;
    let is_ours = klaraptor_spec::annotations::is_own_pragma_line;
    if !text.lines().any(is_ours) {
        return Ok(());
    }
    let mut out = String::with_capacity(text.len());
    for line in text.split_inclusive('\n') {
        if is_ours(line) {
            out.push_str(if line.ends_with('\n') { "\n" } else { "" });
        } else {
            out.push_str(line);
        }
    }
    std::fs::write(ii, out).with_context(|| format!("writing {}", ii.display()))
}

/// Whether an object or archive was instrumented by klaraptor (it calls the runtime).
pub fn needs_runtime(path: &Path) -> bool {
    let Ok(bytes) = std::fs::read(path) else {
        return false;
    };
    inject::ENTRY_FNS.iter().any(|f| {
        let needle = f.as_bytes();
        bytes.windows(needle.len()).any(|w| w == needle)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dependencies_under_a_directory_are_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("x.d");
        std::fs::write(
            &f,
            "x.o: x.cu /tmp/kl\\ 1/stubs/a.h \\\n  inc/my\\ header.h /tmp/kl\\ 1/stubs/b.h \\\n  \
             /usr/include/stdio.h\n\n/tmp/kl\\ 1/stubs/a.h:\n\ninc/my\\ header.h:\n",
        )
        .unwrap();
        drop_dependencies_under(&f, Path::new("/tmp/kl 1/stubs")).unwrap();
        assert_eq!(
            std::fs::read_to_string(&f).unwrap(),
            "x.o: x.cu \\\n  inc/my\\ header.h \\\n  /usr/include/stdio.h\n\n\ninc/my\\ header.h:\n"
        );
    }
}
