//! The instrumented link: the user's link command, plus a rational program per annotated
//! kernel and device with a profile, plus the runtime.
//!
//! ```text
//! kernel specs  <- the .klaraptor_spec sections of the input objects (`klaraptor_spec::link`)
//! profile entry <- the profile database (kernel × code hash × device)
//!    none, GPU here, recipe given: link the profiling variant at the output path, run the
//!    recipe at each profile size, store the records (`klaraptor_profiler::plan`)
//! fit + codegen -> <output>.klaraptor/<kernel>.<device>.c, compiled (rational.rs)
//! nvcc <user's link command> <rational programs the inputs do not carry>
//! ```
//!
//! The inputs carry the runtime (runtime.rs), and an object compiled when the database had
//! its kernels' profiles carries their rational programs (compile.rs): the link adds what is
//! missing only, and a link by another driver (g++, CMake) works without it.
//!
//! The profiling variant this link made (when it profiled, or was given
//! `--kl-profiling-variant`) is kept as `<output>.klaraptor/<name>.profiling`, where
//! `klaraptor validate` finds it.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use klaraptor_profiler::db::ProfileDb;
use klaraptor_profiler::gpu_profile::{
    carries_runtime, collector_path, current_device, gpu_present, run_recipes, Gpu,
};
use klaraptor_profiler::record::Entry;
use klaraptor_program::rational::{self, kept_variant, ProgramFiles, RationalProgram};
use klaraptor_spec::link::{scan_inputs, LinkSpec};

use crate::runtime;

/// What the link needs from the driver.
pub struct LinkJob<'a> {
    pub nvcc: &'a Path,
    /// The nvcc link command (arguments), without the runtime.
    pub args: Vec<String>,
    /// The files the link reads (objects, archives).
    pub inputs: Vec<PathBuf>,
    /// The executable the link writes.
    pub output: PathBuf,
    pub work: &'a Path,
    pub verbose: bool,
    pub require_model: bool,
    pub no_profile: bool,
    pub profiling_variant: Option<&'a Path>,
}

impl LinkJob<'_> {
    fn say(&self, msg: impl AsRef<str>) {
        if self.verbose {
            crate::kl_eprintln!("klaraptor-cc: {}", msg.as_ref());
        }
    }

    fn nvcc(&self, extra: &[String], output: Option<&Path>) -> Result<std::process::ExitStatus> {
        let mut args = self.args.clone();
        if let Some(o) = output {
            replace_output(&mut args, o);
        }
        args.extend(extra.iter().cloned());
        let mut cmd = Command::new(self.nvcc);
        cmd.args(&args);
        if self.verbose {
            crate::kl_eprintln!("klaraptor-cc: running {cmd:?}");
        }
        cmd.status()
            .with_context(|| format!("cannot run {}", self.nvcc.display()))
    }
}

/// Sets (or adds) `-o <path>` in an nvcc command.
fn replace_output(args: &mut Vec<String>, path: &Path) {
    let p = path.display().to_string();
    let mut i = 0;
    let mut found = false;
    while i < args.len() {
        let a = &args[i];
        if (a == "-o" || a == "--output-file") && i + 1 < args.len() {
            args[i + 1] = p.clone();
            found = true;
            i += 2;
            continue;
        }
        if a.starts_with("--output-file=") {
            args[i] = format!("--output-file={p}");
            found = true;
        } else if a.starts_with("-o") && a.len() > 2 {
            args[i] = format!("-o{p}");
            found = true;
        }
        i += 1;
    }
    if !found {
        args.push("-o".into());
        args.push(p);
    }
}

/// Runs the link; returns nvcc's exit status.
pub fn link(job: &LinkJob) -> Result<i32> {
    let specs = scan_inputs(job.inputs.iter().map(PathBuf::as_path))?;
    job.say(format!(
        "link: {} annotated kernel(s) in the inputs",
        specs.len()
    ));
    check_inputs_carry_runtime(&job.inputs)?;
    // The profiling variant of this link, kept beside the rational programs.
    let mut variant_made: Option<PathBuf> = None;
    if let Some(variant) = job.profiling_variant {
        link_variant(job, &specs, variant)?;
        variant_made = Some(variant.to_path_buf());
    }
    let db = ProfileDb::locate()?;
    let mut entries: Vec<(LinkSpec, Vec<Entry>)> = Vec::new();
    for s in &specs {
        let e = db.entries_for(&s.mangled, &s.code_hash)?;
        entries.push((s.clone(), e));
    }
    let missing: Vec<LinkSpec> = entries
        .iter()
        .filter(|(_, e)| e.is_empty())
        .map(|(s, _)| s.clone())
        .collect();
    // The kernels this link tried to profile: each one left without an entry was warned
    // about with its real cause.
    let mut tried: Vec<String> = Vec::new();
    let mut collector_missing = false;
    if !missing.is_empty() && !job.no_profile && gpu_present() {
        collector_missing = collector_path().is_none();
        let (profiled, variant) = profile(job, &missing, &db, &mut tried)?;
        if variant_made.is_none() {
            variant_made = variant;
        }
        for (s, e) in entries.iter_mut() {
            if e.is_empty() && profiled.contains(&s.mangled) {
                *e = db.entries_for(&s.mangled, &s.code_hash)?;
            }
        }
    }
    for w in db.take_damaged() {
        crate::kl_eprintln!("klaraptor-cc: warning: {w}");
    }
    // GPUs of a profiled kernel's architecture without a profile of their own.
    let transferred = klaraptor_program::transfer::expand(&mut entries);
    let mut unmodelled = Vec::new();
    for (s, e) in &entries {
        if e.is_empty() {
            unmodelled.push(s);
        }
    }
    if !unmodelled.is_empty() {
        let names: Vec<String> = unmodelled
            .iter()
            .map(|s| {
                format!(
                    "{} (annotated at {}: {})",
                    klaraptor_spec::names::instance_name(&s.name, &s.mangled),
                    s.annotated_at,
                    why_no_profile(s, job.no_profile, collector_missing, &tried)
                )
            })
            .collect();
        let how = format!(
            "no profile in {} ({}) for {}",
            db.root().display(),
            db.origin(),
            names.join(", "),
        );
        if job.require_model {
            crate::kl_eprintln!("klaraptor-cc: error: {how} (--kl-require-model)");
            // As a failed link: no binary, not even one from an earlier link.
            let _ = std::fs::remove_file(&job.output);
            return Ok(1);
        }
        crate::kl_eprintln!(
            "klaraptor-cc: warning: {how}; these kernels keep the program's own launch dims"
        );
    }
    // Rational programs, next to the output: those the inputs do not carry already (an
    // object compiled when the database had its kernel's profile carries the program).
    let carried = carried_models(&job.inputs)?;
    let models_dir = rational::models_dir(&job.output);
    let staging = job.work.join("models");
    std::fs::create_dir_all(&staging)?;
    let wanted: Vec<(LinkSpec, Vec<Entry>)> = entries
        .iter()
        .map(|(s, es)| {
            let left: Vec<Entry> = es
                .iter()
                .filter(|e| {
                    let have = carried.iter().any(|p| {
                        p.mangled == s.mangled
                            && p.device.name == e.device.name
                            && p.provenance.code_hash == s.code_hash
                    });
                    if have {
                        job.say(format!(
                            "rational program of {} for {}: carried by the inputs",
                            s.name, e.device.name
                        ));
                    }
                    !have
                })
                .cloned()
                .collect();
            (s.clone(), left)
        })
        .collect();
    // The programs the inputs carry are written beside the binary too (from their
    // manifests), for people and `klaraptor inspect/explain`.
    let mut kept = 0;
    for p in &carried {
        let used = entries.iter().any(|(s, es)| {
            p.mangled == s.mangled
                && p.provenance.code_hash == s.code_hash
                && es.iter().any(|e| e.device.name == p.device.name)
        });
        if used {
            p.write(&staging)?;
            kept += 1;
        }
    }
    let mut objects = Vec::new();
    let mut programs = Vec::new();
    for built in build_programs(&wanted, &transferred, &staging, job.verbose) {
        match built {
            Ok(b) => {
                job.say(format!(
                    "rational program of {} for {}{}: {}",
                    klaraptor_spec::names::instance_name(&b.spec.name, &b.spec.mangled),
                    b.program.device.name,
                    b.program
                        .transferred_from
                        .as_ref()
                        .map_or(String::new(), |f| format!(" (transferred from {f})")),
                    models_dir.join(&b.program.c_name).display()
                ));
                objects.push(b.object);
                programs.push(b.program);
            }
            Err(f) => {
                if job.require_model {
                    crate::kl_eprintln!("klaraptor-cc: error: {} (--kl-require-model)", f.how);
                    let _ = std::fs::remove_file(&job.output);
                    return Ok(1);
                }
                crate::kl_eprintln!("klaraptor-cc: warning: {}", f.warning());
            }
        }
    }
    if !programs.is_empty() {
        // Their manifests travel in the binary too (`klaraptor inspect` reads them there).
        objects.push(manifests_object(&programs, &staging, job.verbose)?);
    }
    let extra: Vec<String> = objects.iter().map(|o| o.display().to_string()).collect();
    let status = job.nvcc(&extra, None)?;
    if status.success() {
        if objects.is_empty() && kept == 0 {
            // No rational program in this binary: manifests of an earlier link would make
            // `klaraptor inspect` describe programs the binary does not hold.
            if models_dir.is_dir() {
                std::fs::remove_dir_all(&models_dir)
                    .with_context(|| format!("removing {}", models_dir.display()))?;
            }
        } else {
            publish(&staging, &models_dir)?;
            if let Some(v) = &variant_made {
                keep_variant(v, &job.output)?;
            }
        }
    }
    Ok(status.code().unwrap_or(1))
}

/// Fails, naming the file and what to do, when an input calls the klaraptor runtime without
/// carrying it (an object an older klaraptor-cc instrumented).
fn check_inputs_carry_runtime(inputs: &[PathBuf]) -> Result<()> {
    for p in inputs {
        let Ok(bytes) = std::fs::read(p) else {
            continue; // nvcc reports missing inputs
        };
        if runtime::calls_runtime(&bytes) && !carries_runtime(&bytes) {
            bail!(
                "{} calls the klaraptor runtime but does not carry it: it was instrumented by \
                 an older klaraptor-cc; rebuild it with this one ({})",
                p.display(),
                env!("CARGO_PKG_VERSION")
            );
        }
    }
    Ok(())
}

/// The manifests of the rational programs `inputs` carry.
fn carried_models(inputs: &[PathBuf]) -> Result<Vec<RationalProgram>> {
    let mut out = Vec::new();
    for p in inputs {
        let Ok(bytes) = std::fs::read(p) else {
            continue;
        };
        out.extend(klaraptor_program::manifests::scan_models(&bytes, p)?);
    }
    Ok(out)
}

/// A rational program built and compiled by [`build_programs`].
pub struct BuiltProgram {
    pub spec: LinkSpec,
    pub program: RationalProgram,
    /// Its C file and manifest (in the staging directory).
    pub files: ProgramFiles,
    /// The compiled C.
    pub object: PathBuf,
}

/// A rational program that could not be built.
pub struct NotBuilt {
    pub spec: LinkSpec,
    pub device: String,
    /// What failed, with the kernel and where it was annotated.
    pub how: String,
}

impl NotBuilt {
    /// The warning for a build that goes on without the program.
    pub fn warning(&self) -> String {
        format!(
            "{}; the kernel keeps the program's own launch dims (`klaraptor profile show {}` \
             shows its samples; `klaraptor profile prune --kernel {}` profiles it again at the \
             next link on a GPU)",
            self.how, self.spec.mangled, self.spec.mangled
        )
    }
}

/// Fits, generates (into `staging`) and compiles the rational program of each kernel and
/// profile entry of `wanted`: what a klaraptor link adds to a binary, and what a compile
/// puts into the object when the database has the kernel's profile. A kernel that cannot
/// be modelled (too few usable samples, a failed fit, a program that does not compile) is
/// an `Err`: the caller says why, and the kernel keeps the program's own launch.
pub fn build_programs(
    wanted: &[(LinkSpec, Vec<Entry>)],
    transferred: &klaraptor_program::transfer::Transferred,
    staging: &Path,
    verbose: bool,
) -> Vec<std::result::Result<BuiltProgram, NotBuilt>> {
    let mut out = Vec::new();
    for (s, es) in wanted {
        for e in es {
            let from = transferred.get(&(s.mangled.clone(), e.device.name.clone()));
            let built = rational::build(s, e, staging).and_then(|mut prog| {
                prog.transferred_from = from.cloned();
                let files = prog.write(staging)?;
                let obj = rational::compile(staging, &files, verbose)?;
                Ok((prog, files, obj))
            });
            out.push(match built {
                Ok((program, files, object)) => Ok(BuiltProgram {
                    spec: s.clone(),
                    program,
                    files,
                    object,
                }),
                Err(err) => Err(NotBuilt {
                    spec: s.clone(),
                    device: e.device.name.clone(),
                    how: format!(
                        "no rational program of {} (annotated at {}) for {}: {err:#}",
                        klaraptor_spec::names::instance_name(&s.name, &s.mangled),
                        s.annotated_at,
                        e.device.name
                    ),
                }),
            });
        }
    }
    out
}

/// Compiles the section that embeds the manifests of `programs` (`klaraptor_program::manifests`) into an
/// object under `staging/embed/`.
pub fn manifests_object(
    programs: &[RationalProgram],
    staging: &Path,
    verbose: bool,
) -> Result<PathBuf> {
    let dir = staging.join("embed");
    std::fs::create_dir_all(&dir)?;
    let src = dir.join("manifests.c");
    let obj = dir.join("manifests.o");
    std::fs::write(
        &src,
        klaraptor_program::manifests::c_models_section(programs)?,
    )
    .with_context(|| format!("writing {}", src.display()))?;
    klaraptor_program::host_cc::HostCc::from_env()?.compile(
        &["-std=c99", "-O2", "-fPIC"],
        &src,
        &obj,
        verbose,
    )?;
    Ok(obj)
}

/// Why a kernel has no profile after the link's profiling step, and what to do: the advice
/// fits the real cause (a missing recipe only when there is none).
fn why_no_profile(
    s: &LinkSpec,
    no_profile: bool,
    collector_missing: bool,
    tried: &[String],
) -> &'static str {
    if tried.contains(&s.mangled) {
        "profiling it did not give a complete profile, see the warning above"
    } else if !gpu_present() && (s.profile_run.is_none() || s.profile_sizes.is_empty()) {
        "no GPU here, and no profile(run=…, sizes=…) recipe: run `klaraptor profile <binary> \
         <arguments>` on a machine with a GPU (it profiles the kernel at the sizes that run \
         reaches) and build again, or point KLARAPTOR_PROFILE_DB at a database made on one"
    } else if !gpu_present() {
        "no GPU here: build once on a machine with a GPU, or point KLARAPTOR_PROFILE_DB at a \
         database made on one"
    } else if no_profile {
        "--kl-no-profile was given"
    } else if s.profile_run.is_none() || s.profile_sizes.is_empty() {
        "it has no profile(run=…, sizes=…) recipe, so the link cannot run it: run \
         `klaraptor profile <binary> <arguments>` here (it profiles the kernel at the sizes \
         that run reaches) and link again, or add a recipe to the annotation"
    } else if collector_missing {
        "the collector was not found, see the warning above"
    } else {
        "not profiled"
    }
}

/// Replaces `dir` by `staging`'s sources and manifests (the C files and their JSON), so a
/// reader never sees a half-written set.
fn publish(staging: &Path, dir: &Path) -> Result<()> {
    let tmp = dir.with_extension("klaraptor-new");
    let _ = std::fs::remove_dir_all(&tmp);
    let _interrupted = klaraptor_profiler::interrupt::guard(&tmp);
    std::fs::create_dir_all(&tmp)?;
    for e in std::fs::read_dir(staging)? {
        let p = e?.path();
        if p.extension()
            .is_some_and(|x| x == "c" || x == "json" || x == "h")
        {
            std::fs::copy(&p, tmp.join(p.file_name().unwrap()))?;
        }
    }
    let old = dir.with_extension("klaraptor-old");
    let _ = std::fs::remove_dir_all(&old);
    if dir.exists() {
        std::fs::rename(dir, &old)?;
    }
    std::fs::rename(&tmp, dir).with_context(|| format!("writing {}", dir.display()))?;
    let _ = std::fs::remove_dir_all(&old);
    Ok(())
}

/// Copies the profiling variant `variant` into the models directory of `output` (see
/// [`kept_variant`]).
fn keep_variant(variant: &Path, output: &Path) -> Result<()> {
    let to = kept_variant(output);
    std::fs::copy(variant, &to)
        .with_context(|| format!("keeping the profiling variant as {}", to.display()))?;
    Ok(())
}

/// Links the profiling variant to `path` and writes its plan to `<path>.plan`.
fn link_variant(job: &LinkJob, specs: &[LinkSpec], path: &Path) -> Result<()> {
    // The objects carry the profiling runtime: the program as linked, without rational
    // programs, is the variant (it profiles when KLARAPTOR_PROFILE_PLAN says so).
    let status = job.nvcc(&[], Some(path))?;
    if !status.success() {
        bail!("linking the profiling variant failed ({status})");
    }
    let plan = PathBuf::from(format!("{}.plan", path.display()));
    std::fs::write(&plan, klaraptor_profiler::plan::plan_file(specs))
        .with_context(|| format!("writing {}", plan.display()))?;
    crate::kl_eprintln!(
        "klaraptor-cc: profiling variant: {} (plan {})",
        path.display(),
        plan.display()
    );
    Ok(())
}

/// Profiles `specs` on this machine's GPU and stores the entries (one kernel at a time under
/// the GPU's lock: `klaraptor_profiler::gpu_profile`). Returns the ids that have a complete entry now, and a
/// copy of the profiling variant in the work directory when any has. The ids of the kernels
/// it tried to profile go to `tried` (each of those left without an entry was warned about).
fn profile(
    job: &LinkJob,
    specs: &[LinkSpec],
    db: &ProfileDb,
    tried: &mut Vec<String>,
) -> Result<(Vec<String>, Option<PathBuf>)> {
    let runnable: Vec<&LinkSpec> = specs
        .iter()
        .filter(|s| s.profile_run.is_some() && !s.profile_sizes.is_empty())
        .collect();
    if runnable.is_empty() {
        return Ok((Vec::new(), None));
    }
    let Some(collector) = collector_path() else {
        crate::kl_eprintln!(
            "klaraptor-cc: warning: a GPU is present but the collector \
             (libklaraptor_collector.so beside klaraptor-cc, or KLARAPTOR_COLLECTOR) was not \
             found: not profiling"
        );
        return Ok((Vec::new(), None));
    };
    let (device, driver, cuda) = match current_device(job.nvcc) {
        Ok(d) => d,
        Err(e)
            if e.chain().any(|c| {
                matches!(
                    c.downcast_ref::<klaraptor_profiler::calibration::CalibrationError>(),
                    Some(klaraptor_profiler::calibration::CalibrationError::GpuBusy { .. })
                )
            }) =>
        {
            crate::kl_eprintln!("klaraptor-cc: warning: {e:#}; not profiling in this link");
            tried.extend(runnable.iter().map(|s| s.mangled.clone()));
            return Ok((Vec::new(), None));
        }
        Err(e) => return Err(e),
    };
    let dir = klaraptor_profiler::plan::scratch(job.work)?;
    // The recipe runs the program by the name the user gave it: the variant goes there, and
    // the final link replaces it.
    // The objects carry the profiling runtime: the program as linked is the variant.
    let status = job.nvcc(&[], None)?;
    if !status.success() {
        bail!("linking the profiling variant failed ({status})");
    }
    // The final link replaces the variant at the output path: a copy is kept.
    let copy = dir.join("profiling-variant");
    std::fs::copy(&job.output, &copy)
        .with_context(|| format!("copying the profiling variant {}", job.output.display()))?;
    let gpu = Gpu {
        device,
        driver,
        cuda,
        collector,
    };
    let outcomes = match run_recipes(&gpu, &runnable, db, &dir, job.verbose) {
        Ok(o) => o,
        Err(e) => {
            let _ = std::fs::remove_file(&job.output);
            return Err(e);
        }
    };
    let mut done = Vec::new();
    for (s, o) in runnable.iter().zip(&outcomes) {
        if o.has_entry() {
            done.push(s.mangled.clone());
        }
        tried.push(s.mangled.clone());
    }
    let variant = (!done.is_empty()).then_some(copy);
    Ok((done, variant))
}
