//! The instrumented link: the user's link command, plus a rational program per annotated
//! kernel and device with a profile, plus the runtime.
//!
//! ```text
//! kernel specs  <- the .klaraptor_spec sections of the input objects (linkspec.rs)
//! profile entry <- the profile database (kernel × code hash × device)
//!    none, GPU here, recipe given: link the profiling variant at the output path, run the
//!    recipe at each profile size, store the records (profiling.rs)
//! fit + codegen -> <output>.klaraptor/<kernel>.<device>.c, compiled (rational.rs)
//! nvcc <user's link command> <rational programs> libklaraptor_rt.a
//! ```
//!
//! The profiling variant this link made (when it profiled, or was given
//! `--kl-profiling-variant`) is kept as `<output>.klaraptor/<name>.profiling`, where
//! `klaraptor validate` finds it.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use klaraptor_profiler::db::ProfileDb;
use klaraptor_profiler::record::{DeviceId, Entry};

use crate::linkspec::{scan_inputs, LinkSpec};
use crate::profiling;
use crate::{gpu_profile, rational, runtime};

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

/// Whether this machine has an NVIDIA GPU the profiling variant could run on.
/// `KLARAPTOR_NO_GPU=1` says no (for tests and for builds that must not profile).
pub fn gpu_present() -> bool {
    if std::env::var_os("KLARAPTOR_NO_GPU").is_some_and(|v| v != "0" && !v.is_empty()) {
        return false;
    }
    Path::new("/dev/nvidiactl").exists() || Path::new("/dev/nvidia0").exists()
}

/// The collector library: `KLARAPTOR_COLLECTOR`, else `libklaraptor_collector.so` beside
/// the klaraptor-cc executable.
pub fn collector_path() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("KLARAPTOR_COLLECTOR") {
        return Some(PathBuf::from(p));
    }
    let exe = std::env::current_exe().ok()?;
    let p = exe.parent()?.join("libklaraptor_collector.so");
    p.is_file().then_some(p)
}

/// The device the profiling variant runs on (device 0, or the first of
/// `CUDA_VISIBLE_DEVICES`), from its calibration report: the first profile on a device
/// calibrates it (`klaraptor device calibrate`, about 10 s), later ones reuse the report.
/// Returns the device, the driver version and the CUDA runtime version.
fn current_device(nvcc: &Path) -> Result<(DeviceId, String, String)> {
    crate::kl_eprintln!("klaraptor-cc: identifying and (once per device) calibrating the GPU");
    let r = klaraptor_profiler::calibration::ensure_calibrated(nvcc)
        .context("calibrating the GPU before its first profile")?;
    let sm = r
        .attributes
        .get("MultiProcessorCount")
        .map_or(0, |v| u32::try_from(*v).unwrap_or(0));
    Ok((
        DeviceId {
            name: r.device.name.clone(),
            uuid: r.device.uuid.clone(),
            cc: r.device.cc.clone(),
            sm_count: sm,
        },
        r.device.driver_version.clone(),
        r.device.runtime_version.clone(),
    ))
}

/// Runs the link; returns nvcc's exit status.
pub fn link(job: &LinkJob) -> Result<i32> {
    let specs = scan_inputs(job.inputs.iter().map(PathBuf::as_path))?;
    job.say(format!(
        "link: {} annotated kernel(s) in the inputs",
        specs.len()
    ));
    let archive = runtime::archive(job.work)?.display().to_string();
    // The profiling variant of this link, kept beside the rational programs.
    let mut variant_made: Option<PathBuf> = None;
    if let Some(variant) = job.profiling_variant {
        link_variant(job, &specs, variant, &archive)?;
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
        let (profiled, variant) = profile(job, &missing, &archive, &db, &mut tried)?;
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
                    s.name,
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
    // Rational programs, next to the output.
    let models_dir = rational::models_dir(&job.output);
    let staging = job.work.join("models");
    std::fs::create_dir_all(&staging)?;
    let mut objects = Vec::new();
    for (s, es) in &entries {
        for e in es {
            // A kernel that cannot be modelled (too few usable samples, a failed fit, a
            // rational program that does not compile) never fails the build: it keeps the
            // program's launch, and the link says why, unless the user asked for models.
            let built = rational::build(s, e, &models_dir).and_then(|prog| {
                let files = prog.write(&staging)?;
                let obj = rational::compile(&staging, &files, job.verbose)?;
                Ok((files, obj))
            });
            match built {
                Ok((files, obj)) => {
                    job.say(format!(
                        "rational program of {} for {}: {}",
                        s.name,
                        e.device.name,
                        models_dir.join(&files.c_name).display()
                    ));
                    objects.push(obj);
                }
                Err(err) => {
                    let how = format!(
                        "no rational program of {} (annotated at {}) for {}: {err:#}",
                        s.name, s.annotated_at, e.device.name
                    );
                    if job.require_model {
                        crate::kl_eprintln!("klaraptor-cc: error: {how} (--kl-require-model)");
                        let _ = std::fs::remove_file(&job.output);
                        return Ok(1);
                    }
                    crate::kl_eprintln!(
                        "klaraptor-cc: warning: {how}; the kernel keeps the program's own \
                         launch dims (`klaraptor profile show {}` shows its samples; \
                         `klaraptor profile prune --kernel {}` profiles it again at the next \
                         link on a GPU)",
                        s.mangled,
                        s.mangled
                    );
                }
            }
        }
    }
    let mut extra: Vec<String> = objects.iter().map(|o| o.display().to_string()).collect();
    extra.push(archive);
    let status = job.nvcc(&extra, None)?;
    if status.success() {
        if objects.is_empty() {
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
    } else if !gpu_present() {
        "no GPU here: build once on a machine with a GPU, or point KLARAPTOR_PROFILE_DB at a \
         database made on one"
    } else if no_profile {
        "--kl-no-profile was given"
    } else if s.profile_run.is_none() || s.profile_sizes.is_empty() {
        "add a profile(run=…, sizes=…) recipe to the annotation so klaraptor-cc can profile \
         it here"
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
    let _interrupted = crate::interrupt::guard(&tmp);
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

/// Where the link keeps the profiling variant of `output`:
/// `<output>.klaraptor/<output's file name>.profiling`.
pub fn kept_variant(output: &Path) -> PathBuf {
    let name = output
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    rational::models_dir(output).join(format!("{name}.profiling"))
}

/// Links the profiling variant to `path` and writes its plan to `<path>.plan`.
fn link_variant(job: &LinkJob, specs: &[LinkSpec], path: &Path, archive: &str) -> Result<()> {
    let mut extra: Vec<String> = profiling::WRAP_FLAGS
        .iter()
        .map(|s| s.to_string())
        .collect();
    extra.push(archive.to_string());
    let status = job.nvcc(&extra, Some(path))?;
    if !status.success() {
        bail!("linking the profiling variant failed ({status})");
    }
    let plan = PathBuf::from(format!("{}.plan", path.display()));
    std::fs::write(&plan, profiling::plan_file(specs))
        .with_context(|| format!("writing {}", plan.display()))?;
    crate::kl_eprintln!(
        "klaraptor-cc: profiling variant: {} (plan {})",
        path.display(),
        plan.display()
    );
    Ok(())
}

/// Profiles `specs` on this machine's GPU and stores the entries (one kernel at a time under
/// the GPU's lock: gpu_profile.rs). Returns the ids that have a complete entry now, and a
/// copy of the profiling variant in the work directory when any has. The ids of the kernels
/// it tried to profile go to `tried` (each of those left without an entry was warned about).
fn profile(
    job: &LinkJob,
    specs: &[LinkSpec],
    archive: &str,
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
    let dir = profiling::scratch(job.work)?;
    let plan = dir.join("plan");
    let specs_owned: Vec<LinkSpec> = runnable.iter().map(|s| (*s).clone()).collect();
    std::fs::write(&plan, profiling::plan_file(&specs_owned))?;
    // The recipe runs the program by the name the user gave it: the variant goes there, and
    // the final link replaces it.
    let mut extra: Vec<String> = profiling::WRAP_FLAGS
        .iter()
        .map(|s| s.to_string())
        .collect();
    extra.push(archive.to_string());
    let status = job.nvcc(&extra, None)?;
    if !status.success() {
        bail!("linking the profiling variant failed ({status})");
    }
    // The final link replaces the variant at the output path: a copy is kept.
    let copy = dir.join("profiling-variant");
    std::fs::copy(&job.output, &copy)
        .with_context(|| format!("copying the profiling variant {}", job.output.display()))?;
    let (runs, warmup) = (5, 1);
    let result = (|| -> Result<Vec<gpu_profile::Outcome>> {
        let settings = gpu_profile::Settings::from_env()?;
        let lock_dir = klaraptor_profiler::calibration::Cache::from_env()?.devices_dir();
        let target = gpu_profile::Target {
            db,
            device: &device,
            driver_version: &driver,
            cuda_version: &cuda,
            lock_dir: &lock_dir,
            scratch: &dir,
            plan: &plan,
            collector: &collector.display().to_string(),
            runs,
            warmup,
            verbose: job.verbose,
            settings,
        };
        gpu_profile::profile_kernels(&target, &runnable)
    })();
    let outcomes = match result {
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
