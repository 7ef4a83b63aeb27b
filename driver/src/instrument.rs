//! The instrumented compile of one annotated translation unit, to one host object:
//!
//! ```text
//! nvcc -cuda -ccbin clang++-19 <user flags> copy.cu -o host.ii     (device code embedded as nvcc built it)
//! clang++-19 -S -emit-llvm -O<user> host.ii -o host.ll
//! IO-builder pass: klaraptor_select() before each annotated launch -> host.inst.bc
//! clang++-19 -c host.inst.bc -o host.o
//! cc -c kernels.c -o kernels.o                                      (descriptors: grid formulas, constraints)
//! ld -r host.o kernels.o -o <object>                                (one object: -c then a separate link works)
//! ```

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use klaraptor_passes::frontend::Analysis;
use klaraptor_passes::inject::{self, InjectReport, InjectTarget};

use crate::codegen;
use crate::nvcc_args::{Arg, CommandLine, Role};

/// The tools besides nvcc.
#[derive(Debug, Clone)]
pub struct HostTools {
    pub clang: PathBuf,
    pub cc: PathBuf,
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
            cc: env("CC", "cc"),
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
        eprintln!("klaraptor-cc: running {cmd:?}");
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
                data_args: s.data.iter().map(|d| d.index).collect(),
            })
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
    let copy = write_prepared_copy(unit.source, unit.analysis, w)?;
    let dir = unit
        .source
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));

    let ii = w.join("host.ii");
    let mut cmd = Command::new(nvcc);
    cmd.args(host_translation_flags(view))
        .args(["-cuda", "-ccbin"])
        .arg(&tools.clang)
        .arg(format!("-Xcompiler=-iquote,{}", dir.display()))
        .arg(&copy)
        .arg("-o")
        .arg(&ii);
    if let Some((file, target)) = deps {
        let nonsystem = view.args.iter().any(|a| {
            matches!(a, Arg::Flag { spec, .. } if spec.long == "generate-nonsystem-dependencies-with-compile")
        });
        let kind = if nonsystem { "-MMD" } else { "-MD" };
        cmd.arg(kind).arg("-MF").arg(file).arg("-MT").arg(target);
    }
    run(&mut cmd, verbose, "nvcc -cuda (host translation)")?;

    // The pass runs on unoptimised IR, before the inliner can fold a kernel's launch stub
    // into its caller; the user's optimisation level applies when the instrumented IR is
    // compiled (`optnone` is kept off so that it can).
    let ll = w.join("host.ll");
    let codegen_flags = host_codegen_flags(view);
    let unoptimised: Vec<String> = codegen_flags
        .iter()
        .filter(|f| !f.starts_with("-O"))
        .cloned()
        .collect();
    run(
        Command::new(&tools.clang)
            .args(["-S", "-emit-llvm", "-Wno-unused-command-line-argument"])
            .args(&unoptimised)
            .args(["-O0", "-Xclang", "-disable-O0-optnone"])
            .arg(&ii)
            .arg("-o")
            .arg(&ll),
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

    let inc = w.join("include");
    std::fs::create_dir_all(&inc)?;
    std::fs::write(inc.join("klaraptor.h"), codegen::KLARAPTOR_H)?;
    let desc_c = w.join("kernels.c");
    let hash = crate::linkspec::code_hash(
        &std::fs::read_to_string(&ii).with_context(|| format!("reading {}", ii.display()))?,
    );
    let cwd = std::env::current_dir().context("reading the current directory")?;
    let link_specs: Vec<_> = unit
        .analysis
        .specs
        .iter()
        .flat_map(|s| crate::linkspec::LinkSpec::from_spec(s, &hash, &cwd))
        .collect();
    std::fs::write(
        &desc_c,
        format!(
            "{}\n{}",
            codegen::descriptors(&unit.source.display().to_string(), &unit.analysis.specs),
            crate::linkspec::c_section(&link_specs)?
        ),
    )?;
    let desc_o = w.join("kernels.o");
    run(
        Command::new(&tools.cc)
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
            .arg(&host_o)
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
    Ok(report)
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

/// Whether an object or archive was instrumented by klaraptor (it calls the runtime).
pub fn needs_runtime(path: &Path) -> bool {
    let Ok(bytes) = std::fs::read(path) else {
        return false;
    };
    let needle = inject::SELECT_FN.as_bytes();
    bytes.windows(needle.len()).any(|w| w == needle)
}
