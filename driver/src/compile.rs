//! `klaraptor-cc`: what happens to one nvcc command line.
//!
//! 1. The command line is parsed against the nvcc option table ([`crate::nvcc_args`]).
//! 2. If no CUDA source it compiles carries a klaraptor annotation, nvcc is *executed in
//!    place of this process* with exactly the user's arguments: same outputs, same
//!    diagnostics, same exit status. Where a `klaraptor.toml` lies beside a source and the
//!    command writes dependencies or preprocessed output, nvcc runs as a child instead and
//!    what it wrote then names the toml, so that make, Ninja and ccache follow its edits.
//! 3. Otherwise each annotated source goes through the front-end (pragmas, `klaraptor.toml`,
//!    libclang). Annotation errors stop the build before nvcc runs, so nothing is written.
//!    A source that libclang cannot parse is handed to nvcc untouched, so the user sees
//!    nvcc's own diagnostics and exit status; when nvcc compiles it, each of its
//!    annotations is a warning saying that its kernel keeps the program's own launch.
//! 4. nvcc compiles the user's files as named on the command line, so diagnostics,
//!    `__FILE__`, line information, the fatbinary's identifier and dependency files are
//!    what nvcc alone would make: instrumented ([`crate::instrument`]) where the command
//!    compiles to objects or links, else the command as given.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result};
use klaraptor_passes::clang::ClangConfig;
use klaraptor_passes::frontend::{self, Analysis, FrontendError, Outcome};

use klaraptor_passes::inject::InjectReport;

use crate::instrument::{
    compile_unit, compile_unit_clang, needs_runtime, CudaTools, HostTools, Unit,
};
use crate::nvcc_args::{self, Arg, Backend, ClangFlags, CommandLine, KlOption, Phase, Role};
use crate::toolchain::Toolchain;

/// An invocation of `klaraptor-cc`, split into the nvcc that runs and its arguments.
pub struct Invocation {
    pub toolchain: Toolchain,
    /// The user's arguments, klaraptor's own options removed.
    pub cl: CommandLine,
    /// What nvcc will actually see: `NVCC_PREPEND_FLAGS`, the arguments with options files
    /// expanded, `NVCC_APPEND_FLAGS`.
    pub view: CommandLine,
}

/// Splits the launcher form off: `klaraptor-cc nvcc …` or `klaraptor-cc /path/to/nvcc …`.
pub fn split_launcher(args: &[String]) -> (Option<&str>, &[String]) {
    match args.first() {
        Some(first) if Path::new(first).file_name().is_some_and(|n| n == "nvcc") => {
            (Some(first.as_str()), &args[1..])
        }
        _ => (None, args),
    }
}

impl Invocation {
    pub fn new(args: &[String]) -> Result<Invocation> {
        let (launcher, rest) = split_launcher(args);
        let toolchain = Toolchain::discover(launcher)?;
        let cl = CommandLine::parse(rest.iter().cloned()).map_err(|e| anyhow::anyhow!(e))?;
        let cwd = std::env::current_dir().context("reading the current directory")?;
        // The view only decides what klaraptor does; an unreadable options file is nvcc's
        // to report, so fall back to the unexpanded line.
        let mut words = nvcc_args::env_flags("NVCC_PREPEND_FLAGS");
        words.extend(cl.expanded(&cwd).unwrap_or_else(|_| cl.clone()).to_args());
        words.extend(nvcc_args::env_flags("NVCC_APPEND_FLAGS"));
        let view = CommandLine::parse(words).unwrap_or_else(|_| cl.clone());
        Ok(Invocation {
            toolchain,
            cl,
            view,
        })
    }

    fn verbose(&self) -> bool {
        self.cl.has_kl(&KlOption::Verbose)
    }

    fn say(&self, msg: impl AsRef<str>) {
        if self.verbose() {
            crate::kl_eprintln!("klaraptor-cc: {}", msg.as_ref());
        }
    }

    /// Replaces this process with nvcc run on `args`. Returns only if nvcc cannot start.
    fn exec_nvcc(&self, args: &[String]) -> anyhow::Error {
        self.say(format!(
            "running {} {}",
            self.toolchain.nvcc.display(),
            shell_words(args)
        ));
        let err = Command::new(&self.toolchain.nvcc).args(args).exec();
        anyhow::anyhow!(err).context(format!("cannot run {}", self.toolchain.nvcc.display()))
    }

    /// Runs nvcc on `args` as a child process and waits for it.
    fn run_nvcc(&self, args: &[String]) -> Result<std::process::ExitStatus> {
        self.say(format!(
            "running {} {}",
            self.toolchain.nvcc.display(),
            shell_words(args)
        ));
        Command::new(&self.toolchain.nvcc)
            .args(args)
            .status()
            .with_context(|| format!("cannot run {}", self.toolchain.nvcc.display()))
    }

    /// Runs the whole driver; returns the exit status to report.
    pub fn run(self) -> Result<i32> {
        if self.cl.has(Role::Version) {
            use std::io::Write;
            // A closed pipe (`klaraptor-cc --version | head -1`) is not an error of ours.
            let mut out = std::io::stdout().lock();
            let _ = writeln!(
                out,
                "klaraptor-cc {} (commit {})\nwrapping nvcc at {} ({})",
                env!("CARGO_PKG_VERSION"),
                env!("KLARAPTOR_COMMIT"),
                self.toolchain.nvcc.display(),
                self.toolchain.origin
            );
            let _ = out.flush();
            drop(out);
            return Err(self.exec_nvcc(&self.cl.to_args()));
        }
        if self.view.several_inputs_for_one_output() {
            // nvcc refuses it ("A single input file is required for a non-link phase when an
            // outputfile is specified"): let it say so, with its own status, before anything
            // is done or written.
            self.say("several inputs for one output file: running exactly the nvcc command given");
            return Err(self.exec_nvcc(&self.cl.to_args()));
        }
        let dry_run = self.view.has(Role::DryRun);
        let annotated = self.annotated_sources()?;
        if annotated.is_empty() {
            let args = self.cl.to_args();
            if matches!(self.view.phase(), Phase::Link | Phase::Run)
                && !self.cl.has_kl(&KlOption::Off)
                && self.view.inputs().any(needs_runtime)
            {
                if dry_run {
                    crate::kl_eprintln!(
                        "klaraptor-cc: --dryrun: klaraptor-cc would link instrumented objects, \
                         adding their kernels' rational programs and the runtime; below is what \
                         nvcc would run for the command as given"
                    );
                    return Err(self.exec_nvcc(&args));
                }
                // Objects instrumented by an earlier `klaraptor-cc -c` call the runtime.
                self.say("linking instrumented objects: adding rational programs and the runtime");
                let dir = klaraptor_profiler::interrupt::Scratch::new("klaraptor-")?;
                let inputs: Vec<PathBuf> = self.view.inputs().map(Path::to_path_buf).collect();
                let code = self.link(args, inputs, dir.path());
                if self.cl.has_kl(&KlOption::Keep) {
                    // The link's work: the rational programs it generated and, when it
                    // profiled, each recipe run's records (profile/run-<n>/).
                    let kept = dir.keep();
                    crate::kl_eprintln!(
                        "klaraptor-cc: kept intermediate files in {}",
                        kept.display()
                    );
                }
                return code;
            }
            let tomls = self.tomls_to_record(dry_run);
            let generation = self.generation_to_record(dry_run);
            if !tomls.is_empty() || generation.is_some() {
                // The command is nvcc's, but what it writes for make, Ninja or ccache must
                // change when the klaraptor.toml beside a source does, and when the profile
                // database that the compile of an annotated source reads does.
                return self.run_recording_tomls(&args, &tomls, generation.as_deref());
            }
            self.say(
                "nothing for klaraptor in this command: running exactly the nvcc command given",
            );
            return Err(self.exec_nvcc(&args));
        }
        if dry_run {
            // Nothing is run or written: nvcc's own --dryrun of the command as given shows the
            // commands, and one line says what klaraptor-cc would do besides.
            crate::kl_eprintln!("{}", self.dry_run_note(&annotated));
            return Err(self.exec_nvcc(&self.cl.to_args()));
        }
        let cfg = self.clang_config();
        let mut analyses = Vec::new();
        let mut unparsed: Vec<(PathBuf, Vec<String>)> = Vec::new();
        for src in &annotated {
            self.say(format!("front-end: {}", src.display()));
            match frontend::analyze(src, &cfg) {
                Ok(Outcome::Annotated(a)) => analyses.push((src.clone(), a)),
                Ok(Outcome::Unannotated) => {}
                Ok(Outcome::SourceErrors(errors)) => {
                    self.say(format!(
                        "libclang cannot parse {}: the command is compiled as given",
                        src.display()
                    ));
                    unparsed.push((src.clone(), errors));
                }
                Err(FrontendError::User(d)) => {
                    crate::kl_eprintln!("{d}");
                    crate::kl_eprintln!(
                        "klaraptor-cc: stopped before compiling; no output was written"
                    );
                    return Ok(1);
                }
                Err(e) => return Err(anyhow::anyhow!(e)),
            }
        }
        if !unparsed.is_empty() {
            // nvcc decides whether the source compiles: when it does not, its own diagnostics
            // are the user's; when it does, each annotation klaraptor could not apply says so.
            let code = self.compile_as_given()?;
            if code == 0 {
                for (src, errors) in &unparsed {
                    self.warn_unparsed(src, errors);
                }
                for (src, _) in &analyses {
                    crate::kl_eprintln!(
                        "klaraptor-cc: warning: {}: its kernels keep the program's own launch: \
                         the command also compiles {}, which libclang cannot parse, so nvcc \
                         compiled it as given; compile {} in a command of its own",
                        src.display(),
                        unparsed
                            .iter()
                            .map(|(s, _)| s.display().to_string())
                            .collect::<Vec<_>>()
                            .join(", "),
                        src.display()
                    );
                }
            }
            return Ok(code);
        }
        if analyses.is_empty() {
            // No entry of a klaraptor.toml beside a source annotates it: nvcc's command, as
            // given, but a later entry may, so its dependencies name the toml.
            let tomls = self.tomls_to_record(dry_run);
            if !tomls.is_empty() {
                return self.run_recording_tomls(&self.cl.to_args(), &tomls, None);
            }
            return Err(self.exec_nvcc(&self.cl.to_args()));
        }
        self.compile_annotated(&analyses)
    }

    /// Warns, for each annotation of `src` (a source nvcc compiled but libclang cannot parse,
    /// with libclang's `errors`), that its kernel keeps the program's own launch; an
    /// annotation naming a kernel the source's text does not define is reported as such.
    fn warn_unparsed(&self, src: &Path, errors: &[String]) {
        let dirs = self.clang_config().quote_include_dirs();
        let Ok(text) = std::fs::read_to_string(src) else {
            return;
        };
        let why = errors
            .first()
            .map(String::as_str)
            .unwrap_or("no diagnostic");
        let more = match errors.len() {
            0 | 1 => String::new(),
            n => format!(" and {} more", n - 1),
        };
        let kernels = frontend::kernels_by_text(src, &text, &dirs);
        let defined = |k: &str| {
            let short = k.rsplit("::").next().unwrap_or(k);
            kernels.iter().any(|n| n == short)
        };
        let Ok((scanned, toml, _)) = frontend::annotations_of_tu(src, &text, &dirs) else {
            crate::kl_eprintln!(
                "klaraptor-cc: warning: {}: its kernels keep the program's own launch: libclang \
                 cannot parse it ({why}{more}), though nvcc compiles it",
                src.display()
            );
            return;
        };
        let annotations = scanned
            .annotations
            .iter()
            .map(|a| (a, true))
            .chain(toml.iter().map(|t| {
                (
                    &t.annotation,
                    t.source.is_some() || defined(&t.annotation.kernel),
                )
            }));
        for (a, applies) in annotations {
            if !applies {
                continue;
            }
            if !defined(&a.kernel) {
                crate::kl_eprintln!(
                    "klaraptor-cc: warning: {}: no kernel named '{}' in {} (no __global__ \
                     function of that name in it or the files it includes with quotes); the \
                     annotation is not applied",
                    a.loc,
                    a.kernel,
                    src.display()
                );
                continue;
            }
            crate::kl_eprintln!(
                "klaraptor-cc: warning: {}: kernel {} keeps the program's own launch: libclang \
                 cannot parse {} ({why}{more}), though nvcc compiles it, so klaraptor can \
                 neither check this annotation nor instrument the kernel's launches",
                a.loc,
                a.kernel,
                src.display()
            );
        }
    }

    /// What klaraptor-cc would do with the annotated `sources` of a `--dryrun` command.
    fn dry_run_note(&self, sources: &[PathBuf]) -> String {
        let names: Vec<String> = sources.iter().map(|s| s.display().to_string()).collect();
        let what = if self.instruments() {
            format!(
                "check the annotations of {} and instrument the launches of its annotated \
                 kernels{}",
                names.join(", "),
                if self.view.compiles_to_objects() {
                    ""
                } else {
                    ", then link their rational programs and the runtime"
                }
            )
        } else {
            format!(
                "check the annotations of {} and run the command as given (launches are not \
                 instrumented in this mode)",
                names.join(", ")
            )
        };
        format!(
            "klaraptor-cc: --dryrun: klaraptor-cc would {what}; below is what nvcc would run for \
             the command as given"
        )
    }

    /// The CUDA sources of this command that carry annotations (pragmas or a
    /// `klaraptor.toml` beside them), when the command compiles at all.
    fn annotated_sources(&self) -> Result<Vec<PathBuf>> {
        if self.cl.has_kl(&KlOption::Off)
            || self.view.has(Role::Help)
            || self.view.has(Role::Version)
        {
            return Ok(Vec::new());
        }
        if matches!(
            self.view.phase(),
            Phase::Preprocess | Phase::Dependencies | Phase::DeviceLink
        ) {
            return Ok(Vec::new());
        }
        let mut out = Vec::new();
        // Quoted includes are followed as the preprocessor finds them: beside the including
        // file, then in the command's -iquote and -I directories.
        let include_dirs = self.clang_config().quote_include_dirs();
        for src in self.view.cuda_sources() {
            // A source nvcc cannot read is nvcc's to report.
            let Ok(text) = std::fs::read_to_string(src) else {
                continue;
            };
            // A pragma one letter off is ignored by the compiler: say so, or the kernel keeps
            // its own launch without a word.
            for d in frontend::misspelled_pragmas_of_tu(src, &text, &include_dirs) {
                crate::kl_eprintln!(
                    "klaraptor-cc: warning: {}: {}{}",
                    d.loc,
                    d.message,
                    d.help.map(|h| format!(" ({h})")).unwrap_or_default()
                );
            }
            match frontend::annotations_of_tu(src, &text, &include_dirs) {
                Ok((s, t, _)) if s.annotations.is_empty() && t.is_empty() => {}
                // Errors in the annotations are reported by the full front-end.
                _ => out.push(src.to_path_buf()),
            }
        }
        Ok(out)
    }

    fn clang_config(&self) -> ClangConfig {
        let mut cfg = ClangConfig::new(self.toolchain.cuda_root());
        for p in crate::toolchain::project_prefixes() {
            let stubs = p.join("clang-cuda-stubs");
            if stubs.is_dir() {
                cfg.stub_include = Some(stubs);
                break;
            }
        }
        for a in &self.view.args {
            let Arg::Flag {
                spec,
                value: Some(v),
                ..
            } = a
            else {
                continue;
            };
            let flag = match spec.role {
                Role::IncludeDir => format!("-I{v}"),
                Role::Define => format!("-D{v}"),
                Role::Undefine => format!("-U{v}"),
                Role::Std => format!("-std={v}"),
                Role::SystemInclude => {
                    cfg.args.extend(["-isystem".to_string(), v.clone()]);
                    continue;
                }
                Role::PreInclude => {
                    cfg.args.extend(["-include".to_string(), v.clone()]);
                    continue;
                }
                _ => continue,
            };
            cfg.args.push(flag);
        }
        cfg
    }

    /// Whether this command's annotated sources are instrumented: it compiles them to
    /// objects (`-c`; with relocatable device code, `-dc` or `-rdc=true -c`, as CMake's
    /// `CUDA_SEPARABLE_COMPILATION` compiles; `-dw`) or links them (with `-rdc=true`, nvcc's
    /// device link then sees the instrumented objects' device code, which is nvcc's own).
    /// A mode that contradicts `-rdc` is nvcc's to refuse.
    fn instruments(&self) -> bool {
        (self.view.compiles_to_objects() || matches!(self.view.phase(), Phase::Link | Phase::Run))
            && !self.view.rdc_contradicts_mode()
    }

    /// Builds a command with annotated sources: instrumented when the command compiles to
    /// objects or links ([`Self::instruments`]), else (`-lib`, `-ptx`, `-cuda`, …) compiled as
    /// given, with the program's own launch dimensions.
    fn compile_annotated(&self, analyses: &[(PathBuf, Analysis)]) -> Result<i32> {
        let work = klaraptor_profiler::interrupt::Scratch::new("klaraptor-")
            .context("creating a temporary directory")?;
        let phase = self.view.phase();
        let code = if self.instruments() {
            self.compile_instrumented(analyses, work.path())?
        } else if self.view.rdc_contradicts_mode() {
            // nvcc refuses the command with its own message and status.
            self.compile_as_given()?
        } else {
            for (src, _) in analyses {
                crate::kl_eprintln!(
                    "klaraptor-cc: warning: {}: launches are not instrumented in this mode ({}); \
                     kernels keep the program's own launch dimensions{}",
                    src.display(),
                    mode_name(phase),
                    if self.cl.backend() == Backend::Clang {
                        ", and nvcc builds it (--kl-backend=clang applies to instrumented \
                         compiles only)"
                    } else {
                        ""
                    }
                );
            }
            self.compile_as_given()?
        };
        if self.cl.has_kl(&KlOption::Keep) {
            let kept = work.keep();
            crate::kl_eprintln!(
                "klaraptor-cc: kept intermediate files in {}",
                kept.display()
            );
        }
        Ok(code)
    }

    /// Compiles each annotated source through the IO-builder pass, then lets nvcc do the
    /// rest of the command (other sources, the link) with the instrumented objects.
    fn compile_instrumented(&self, analyses: &[(PathBuf, Analysis)], work: &Path) -> Result<i32> {
        let tools = HostTools::discover();
        let link = !self.view.compiles_to_objects();
        // With the clang backend: the user's options translated for clang-19 (or the first
        // one it cannot honour, before anything is written), and ptxas and fatbinary.
        let clang = match self.cl.backend() {
            Backend::Nvcc => None,
            Backend::Clang if self.view.rdc() => {
                // nvlink reads the relocatable device code nvcc embeds; clang-19 makes its
                // own kind (-fgpu-rdc), which nvcc's device link does not take.
                crate::kl_eprintln!(
                    "klaraptor-cc: warning: --kl-backend=clang does not build relocatable device \
                     code (-rdc=true, -dc, CMake's CUDA_SEPARABLE_COMPILATION): nvcc builds it, \
                     instrumented as with the default backend"
                );
                None
            }
            Backend::Clang => match self.clang_backend() {
                Ok(c) => Some(c),
                Err(e) => {
                    crate::kl_eprintln!("klaraptor-cc: error: {e:#}");
                    crate::kl_eprintln!(
                        "klaraptor-cc: stopped before compiling; no output was written"
                    );
                    return Ok(1);
                }
            },
        };
        let mut objects: Vec<(PathBuf, PathBuf)> = Vec::new();
        for (i, (src, a)) in analyses.iter().enumerate() {
            for s in &a.specs {
                self.say(format!(
                    "kernel {} ({} data parameter(s), dim {}) annotated at {}",
                    s.name,
                    s.data.len(),
                    s.dim,
                    s.annotated_at
                ));
            }
            let object = if link {
                work.join(format!("{i}.o"))
            } else {
                match self.view.output() {
                    Some(o) => PathBuf::from(o),
                    None => PathBuf::from(src.file_name().unwrap_or_default()).with_extension("o"),
                }
            };
            let deps_file = (!link && self.view.has_any_deps_with_compile()).then(|| {
                self.view
                    .values(Role::DepsFile)
                    .last()
                    .map(PathBuf::from)
                    .unwrap_or_else(|| object.with_extension("d"))
            });
            let target = self
                .view
                .values(Role::DepsTarget)
                .last()
                .map(str::to_string)
                .unwrap_or_else(|| object.display().to_string());
            let unit = Unit {
                source: src,
                analysis: a,
                work: work.join(format!("tu{i}")),
            };
            let deps = deps_file.as_deref().map(|f| (f, target.as_str()));
            // The instrumented object, before it gets the runtime and its rational programs.
            let instrumented = work.join(format!("tu{i}.instrumented.o"));
            let built = match &clang {
                None => compile_unit(
                    &self.toolchain.nvcc,
                    &tools,
                    &self.view,
                    &unit,
                    &instrumented,
                    deps,
                    self.verbose(),
                ),
                Some((cuda, flags)) => compile_unit_clang(
                    cuda,
                    &tools,
                    &self.view,
                    flags,
                    &unit,
                    &instrumented,
                    deps,
                    self.verbose(),
                ),
            };
            match built {
                Ok(report) => self.report(src, a, &report),
                Err(e) => {
                    crate::kl_eprintln!("klaraptor-cc: error: {}: {e:#}", src.display());
                    return Ok(1);
                }
            }
            let used = match self.carry(&tools, &unit.work, src, &instrumented, &object) {
                Ok(u) => u,
                Err(e) => {
                    crate::kl_eprintln!("klaraptor-cc: error: {}: {e:#}", src.display());
                    return Ok(1);
                }
            };
            if deps_file.is_some() {
                self.fix_dependency_files(
                    &[(
                        src.clone(),
                        unit.work.join(src.file_name().unwrap_or_default()),
                    )],
                    deps_file.as_deref(),
                )?;
                if let Some(f) = deps_file.as_deref() {
                    self.add_db_dependencies(f, src, &used)?;
                }
            }
            objects.push((src.clone(), object));
        }
        let mut args: Vec<String> = Vec::new();
        let mut inputs_left = false;
        for arg in &self.cl.args {
            match arg {
                Arg::Input(p) => match objects.iter().find(|(o, _)| o == p) {
                    Some((_, obj)) if link => args.push(obj.display().to_string()),
                    Some(_) => {}
                    None => {
                        inputs_left = true;
                        args.push(p.display().to_string());
                    }
                },
                other => args.extend(other.tokens()),
            }
        }
        if !link && !inputs_left {
            return Ok(0);
        }
        if link {
            let mut inputs: Vec<PathBuf> = self.view.inputs().map(Path::to_path_buf).collect();
            inputs.extend(objects.iter().map(|(_, o)| o.clone()));
            return self.link(args, inputs, work);
        }
        let status = self.run_nvcc(&args)?;
        if status.success() && self.view.has_any_deps_with_compile() {
            // The other sources' dependency files list the klaraptor.toml beside them too.
            self.fix_dependency_files(&[], None)?;
        }
        Ok(status.code().unwrap_or(1))
    }

    /// Makes the instrumented object `instrumented` into the object the user gets,
    /// `object` (written atomically): its launches routed through the runtime it now
    /// carries (runtime.rs), and the rational program of each of its kernels the profile
    /// database has a profile of, for each device it has one for, with their manifests
    /// (`klaraptor_spec::link`). An object in which no launch was instrumented calls nothing of the
    /// runtime and stays as it is. Returns the database files the object now depends on.
    ///
    /// A kernel without a profile, or whose program cannot be built, keeps the program's
    /// own launch (a klaraptor link on a GPU machine, or `klaraptor profile <binary>`,
    /// profiles it); it never fails the compile.
    fn carry(
        &self,
        tools: &HostTools,
        work: &Path,
        source: &Path,
        instrumented: &Path,
        object: &Path,
    ) -> Result<Vec<PathBuf>> {
        let bytes = std::fs::read(instrumented)
            .with_context(|| format!("reading {}", instrumented.display()))?;
        let specs = klaraptor_spec::link::scan_bytes(&bytes, instrumented)?;
        let mut used = Vec::new();
        let mut parts: Vec<PathBuf> = Vec::new();
        if crate::runtime::calls_runtime(&bytes) {
            let routed = work.join("routed.o");
            let name = source
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            crate::runtime::route_launches(instrumented, &routed, &name, self.verbose())?;
            parts.push(routed);
            parts.push(crate::runtime::embedded(work)?);
            let (objects, deps) = self.programs_for(&specs, &work.join("models"));
            parts.extend(objects);
            used = deps;
        } else {
            parts.push(instrumented.to_path_buf());
        }
        let tmp = object.with_extension("o.klaraptor-tmp");
        let joined = if parts.len() == 1 {
            std::fs::copy(&parts[0], &tmp)
                .map(|_| ())
                .with_context(|| format!("writing {}", tmp.display()))
        } else {
            let mut cmd = Command::new(&tools.ld);
            cmd.arg("-r").args(&parts).arg("-o").arg(&tmp);
            self.say(format!("running {cmd:?}"));
            match cmd.output() {
                Ok(out) if out.status.success() => Ok(()),
                Ok(out) => Err(anyhow::anyhow!(
                    "ld -r of the instrumented object with the runtime failed:\n{}",
                    String::from_utf8_lossy(&out.stderr)
                )),
                Err(e) => Err(anyhow::anyhow!(e).context(format!(
                    "cannot run {} (KLARAPTOR_LD names another)",
                    tools.ld.display()
                ))),
            }
        };
        let moved = joined.and_then(|()| {
            std::fs::rename(&tmp, object).with_context(|| format!("writing {}", object.display()))
        });
        if moved.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        moved?;
        Ok(used)
    }

    /// The compiled rational programs of `specs` (and the object embedding their
    /// manifests) for each device the profile database has a profile of, built in `dir`
    /// (link.rs: build_programs); and the database file the object depends on: its
    /// generation file, which every change of the database rewrites (entries themselves
    /// are not listed: a pruned one would stop make without `-MP`). Nothing here fails the
    /// compile: a database that cannot be read is a warning.
    fn programs_for(
        &self,
        specs: &[klaraptor_spec::link::LinkSpec],
        dir: &Path,
    ) -> (Vec<PathBuf>, Vec<PathBuf>) {
        let mut deps = Vec::new();
        if specs.is_empty() {
            return (Vec::new(), deps);
        }
        let db = match klaraptor_profiler::db::ProfileDb::locate() {
            Ok(db) => db,
            Err(e) => {
                crate::kl_eprintln!(
                    "klaraptor-cc: warning: no profile database ({e}); the object carries no \
                     rational program"
                );
                return (Vec::new(), deps);
            }
        };
        match db.ensure_generation() {
            Some(g) => deps.push(g),
            None => self.say(format!(
                "{} cannot be created: the object does not depend on the database's state",
                db.generation_path().display()
            )),
        }
        let mut wanted = Vec::new();
        for s in specs {
            match db.entries_for(&s.mangled, &s.code_hash) {
                Ok(es) => {
                    if es.is_empty() {
                        // Only a kernel with a recipe can be profiled by a link; another
                        // is profiled by `klaraptor profile` running the program as given.
                        let how = if s.profile_run.is_some() && !s.profile_sizes.is_empty() {
                            "the link on a GPU machine or `klaraptor profile <binary>` profiles it"
                        } else {
                            "its annotation has no profile(run=…, sizes=…) recipe, so no link \
                             profiles it: `klaraptor profile <binary> <arguments>` on a GPU \
                             machine profiles it at the sizes that run of the program reaches \
                             (or add a recipe); until then it keeps the program's own launch"
                        };
                        self.say(format!(
                            "kernel {} (annotated at {}): no profile in {}; {how}",
                            s.name,
                            s.annotated_at,
                            db.root().display()
                        ));
                    }
                    wanted.push((s.clone(), es));
                }
                Err(e) => crate::kl_eprintln!(
                    "klaraptor-cc: warning: kernel {} (annotated at {}): reading the profile \
                     database {}: {e}; the object carries no rational program for it",
                    s.name,
                    s.annotated_at,
                    db.root().display()
                ),
            }
        }
        for w in db.take_damaged() {
            crate::kl_eprintln!("klaraptor-cc: warning: {w}");
        }
        if wanted.iter().all(|(_, es)| es.is_empty()) {
            return (Vec::new(), deps);
        }
        if let Err(e) = std::fs::create_dir_all(dir) {
            crate::kl_eprintln!("klaraptor-cc: warning: creating {}: {e}", dir.display());
            return (Vec::new(), deps);
        }
        let mut objects = Vec::new();
        let mut programs = Vec::new();
        let transferred = klaraptor_program::transfer::expand(&mut wanted);
        for built in crate::link::build_programs(&wanted, &transferred, dir, self.verbose()) {
            match built {
                Ok(b) => {
                    self.say(format!(
                        "rational program of {} for {} carried by the object",
                        b.spec.name, b.program.device.name
                    ));
                    objects.push(b.object);
                    programs.push(b.program);
                }
                Err(f) => crate::kl_eprintln!("klaraptor-cc: warning: {}", f.warning()),
            }
        }
        if !programs.is_empty() {
            match crate::link::manifests_object(&programs, dir, self.verbose()) {
                Ok(o) => objects.push(o),
                Err(e) => {
                    crate::kl_eprintln!(
                        "klaraptor-cc: warning: {e:#}; the object carries no rational program"
                    );
                    return (Vec::new(), deps);
                }
            }
        }
        (objects, deps)
    }

    /// Adds the database files `used` (see [`Self::programs_for`]) to the rule of `source`
    /// in the dependency file `file`.
    fn add_db_dependencies(&self, file: &Path, source: &Path, used: &[PathBuf]) -> Result<()> {
        if used.is_empty() {
            return Ok(());
        }
        let Ok(text) = std::fs::read_to_string(file) else {
            return Ok(());
        };
        let phony = self.view.has(Role::DepsPhony);
        let mut fixed = text.clone();
        for dep in used {
            fixed = add_dependency(&fixed, source, dep, true, phony);
        }
        if fixed != text {
            let tmp = file.with_extension("d.klaraptor-tmp");
            std::fs::write(&tmp, fixed)?;
            std::fs::rename(&tmp, file)?;
        }
        Ok(())
    }

    /// What the clang backend needs: the CUDA tools and the user's options translated.
    fn clang_backend(&self) -> Result<(CudaTools, ClangFlags)> {
        let flags = nvcc_args::clang_flags(&self.view)?;
        let cuda = CudaTools {
            root: self.toolchain.cuda_root(),
            ptxas: self.toolchain.cuda_tool("ptxas")?,
            fatbinary: self.toolchain.cuda_tool("fatbinary")?,
        };
        let archs: Vec<String> = flags
            .targets
            .iter()
            .map(|t| {
                let mut codes: Vec<String> = t.sass.iter().map(|s| format!("sm_{s}")).collect();
                if t.ptx {
                    codes.push(format!("compute_{}", t.arch));
                }
                format!("compute_{} -> {}", t.arch, codes.join(", "))
            })
            .collect();
        self.say(format!(
            "clang backend: clang-19 builds the CUDA against {}; device code: {}",
            cuda.root.display(),
            archs.join("; ")
        ));
        for i in &flags.ignored {
            self.say(format!("clang backend: ignoring {i}"));
        }
        Ok((cuda, flags))
    }

    /// The instrumented link (link.rs) of `args`, an nvcc link command reading `inputs`.
    fn link(&self, args: Vec<String>, inputs: Vec<PathBuf>, work: &Path) -> Result<i32> {
        let output = self
            .view
            .output()
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("a.out"));
        let job = crate::link::LinkJob {
            nvcc: &self.toolchain.nvcc,
            args,
            inputs,
            output,
            work,
            verbose: self.verbose(),
            require_model: self.cl.has_kl(&KlOption::RequireModel),
            no_profile: self.cl.has_kl(&KlOption::NoProfile),
            profiling_variant: self.cl.profiling_variant(),
        };
        match crate::link::link(&job) {
            Ok(code) => Ok(code),
            Err(e) => {
                crate::kl_eprintln!("klaraptor-cc: error: {e:#}");
                Ok(1)
            }
        }
    }

    /// Warns about annotated kernels whose launches the pass could not instrument.
    fn report(&self, src: &Path, a: &Analysis, r: &InjectReport) {
        for (k, f) in &r.instrumented {
            self.say(format!("instrumented a launch of {k} in {f}"));
        }
        if r.instrumented.is_empty() {
            self.say(format!(
                "{}: no launch instrumented: the object carries no kernel descriptors and \
                 calls nothing of the runtime",
                src.display()
            ));
        }
        for (k, stub) in &r.rerouted {
            self.say(format!(
                "clang backend: the stub {stub} of {k} launches through __cudaLaunchKernel"
            ));
        }
        for l in &r.refused {
            let name = a
                .specs
                .iter()
                .find(|s| s.mangled.contains(&l.kernel))
                .map_or(l.kernel.clone(), |s| {
                    klaraptor_spec::names::instance_name(&s.name, &l.kernel)
                });
            crate::kl_eprintln!(
                "klaraptor-cc: warning: {}: a launch of {} in {} is not instrumented: {}",
                l.at.clone().unwrap_or_else(|| src.display().to_string()),
                name,
                l.function,
                l.reason
            );
        }
        for l in &r.shmem_follows {
            let Some(s) = a.specs.iter().find(|s| s.mangled.contains(&l.kernel)) else {
                continue;
            };
            match crate::instrument::detected_shmem(s, r) {
                Some(Ok(_)) => self.say(format!(
                    "the dynamic shared memory of a launch of {} in {} follows the block: \
                     shmem({}); the runtime passes the amount for the shape it chooses",
                    s.name, l.function, l.detail
                )),
                Some(Err(why)) => crate::kl_eprintln!(
                    "klaraptor-cc: warning: {}: the dynamic shared memory of a launch of {} in {} \
                     reads as shmem({}), which klaraptor cannot use ({why}): the runtime passes \
                     the launch's own amount with the shape it chooses; add shmem(…) to the \
                     annotation at {}",
                    l.at.clone().unwrap_or_else(|| src.display().to_string()),
                    s.name,
                    l.function,
                    l.detail,
                    s.annotated_at
                ),
                None => {}
            }
        }
        for l in &r.shmem_unreadable {
            let s = a.specs.iter().find(|s| s.mangled.contains(&l.kernel));
            crate::kl_eprintln!(
                "klaraptor-cc: warning: {}: a launch of {} in {} keeps the program's own launch \
                 dims: {}; add shmem(<bytes for a block of bx x by x bz threads>) to the \
                 annotation at {} (e.g. shmem(bx * 4) for one float per thread), and klaraptor \
                 will choose its block and pass the amount for it",
                l.at.clone().unwrap_or_else(|| src.display().to_string()),
                s.map_or(l.kernel.clone(), |s| klaraptor_spec::names::instance_name(
                    &s.name, &l.kernel
                )),
                l.function,
                l.detail,
                s.map_or("?".to_string(), |s| s.annotated_at.to_string()),
            );
        }
        for m in &r.missing {
            // A kernel whose launches were left alone with a reason above has had its say.
            if r.refused.iter().any(|l| &l.kernel == m)
                || r.shmem_unreadable.iter().any(|l| &l.kernel == m)
            {
                continue;
            }
            let s = a.specs.iter().find(|s| s.mangled.contains(m));
            // A template's instances are told apart by their template arguments.
            let name = s.map_or(m.to_string(), |s| {
                klaraptor_spec::names::instance_name(&s.name, m)
            });
            let pointer = r
                .unidentified
                .iter()
                .map(|(f, why)| format!("; the launch in {f} is not instrumented: {why}"))
                .collect::<String>();
            crate::kl_eprintln!(
                "klaraptor-cc: warning: kernel {name} (annotated at {}) has no <<<>>> launch in {} that klaraptor \
                 could instrument; launches elsewhere keep their own dimensions{pointer}",
                s.map_or("?".to_string(), |s| s.annotated_at.to_string()),
                src.display()
            );
        }
    }

    /// Compiles a command whose launches klaraptor does not instrument (`-rdc`, `-lib`,
    /// `-ptx`, `-cuda`, …): nvcc runs it as given, so its outputs (line markers, line
    /// information, the fatbinary's identifier) name the user's files, as nvcc alone makes
    /// them; klaraptor's pragmas are ignored by nvcc, as in any included file. Dependency
    /// files also name the sources' `klaraptor.toml`.
    fn compile_as_given(&self) -> Result<i32> {
        let status = self.run_nvcc(&self.cl.to_args())?;
        if status.success() && self.view.has_any_deps_with_compile() {
            self.fix_dependency_files(&[], None)?;
        }
        Ok(status.code().unwrap_or(1))
    }

    /// The CUDA sources of this command with a `klaraptor.toml` beside them, and those files,
    /// when the command writes what a build tool keys its rebuilds on: dependencies (`-M`,
    /// `-MM`, `-MD`, `-MMD`) or preprocessed output (`-E`, which ccache hashes).
    fn tomls_to_record(&self, dry_run: bool) -> Vec<(PathBuf, PathBuf)> {
        if dry_run
            || self.cl.has_kl(&KlOption::Off)
            || self.view.has(Role::Help)
            || self.view.has(Role::Version)
        {
            return Vec::new();
        }
        let writes = matches!(self.view.phase(), Phase::Preprocess | Phase::Dependencies)
            || self.view.has_any_deps_with_compile();
        if !writes {
            return Vec::new();
        }
        self.view
            .cuda_sources()
            .into_iter()
            .filter_map(|s| toml_beside(s).map(|t| (s.to_path_buf(), t)))
            .collect()
    }

    /// Runs the nvcc command `args` as given (its diagnostics and exit status are the
    /// user's), then makes what it wrote name the `klaraptor.toml` of each source in
    /// `tomls`: a dependency of the source's rule in the dependency files, a line marker and
    /// a comment holding the entries that may apply at the end of preprocessed output.
    /// The profile database's generation file (`klaraptor_profiler::db`), when this command
    /// preprocesses (`-E`, which ccache hashes) or lists the dependencies (`-M`, `-MM`) of a
    /// CUDA source with annotations: the compile of such a source puts the rational programs
    /// of the kernels the database has into the object, so what the command writes must
    /// change with the database.
    fn generation_to_record(&self, dry_run: bool) -> Option<PathBuf> {
        if dry_run
            || self.cl.has_kl(&KlOption::Off)
            || self.view.has(Role::Help)
            || self.view.has(Role::Version)
            || !matches!(self.view.phase(), Phase::Preprocess | Phase::Dependencies)
        {
            return None;
        }
        let include_dirs = self.clang_config().quote_include_dirs();
        let annotated = self.view.cuda_sources().into_iter().any(|src| {
            let Ok(text) = std::fs::read_to_string(src) else {
                return false;
            };
            match frontend::annotations_of_tu(src, &text, &include_dirs) {
                Ok((s, t, _)) => !(s.annotations.is_empty() && t.is_empty()),
                Err(_) => true,
            }
        });
        if !annotated {
            return None;
        }
        let db = klaraptor_profiler::db::ProfileDb::locate().ok()?;
        db.ensure_generation()
    }

    fn run_recording_tomls(
        &self,
        args: &[String],
        tomls: &[(PathBuf, PathBuf)],
        generation: Option<&Path>,
    ) -> Result<i32> {
        let phase = self.view.phase();
        // Where -E and -M write: -o, for -M else -MF, else standard output.
        let phase_output = match phase {
            Phase::Preprocess => self.view.output().map(PathBuf::from),
            Phase::Dependencies => self
                .view
                .output()
                .or_else(|| self.view.values(Role::DepsFile).last())
                .map(PathBuf::from),
            _ => None,
        };
        let capture =
            matches!(phase, Phase::Preprocess | Phase::Dependencies) && phase_output.is_none();
        let one_source = self.view.cuda_sources().len() == 1;
        self.say(format!(
            "running the nvcc command given, then recording {} in what it writes",
            tomls
                .iter()
                .map(|(_, t)| t.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ));
        let mut cmd = Command::new(&self.toolchain.nvcc);
        cmd.args(args);
        if capture {
            cmd.stdout(std::process::Stdio::piped());
        }
        let out = cmd
            .spawn()
            .and_then(|c| c.wait_with_output())
            .with_context(|| format!("cannot run {}", self.toolchain.nvcc.display()))?;
        let mut stdout = out.stdout;
        if out.status.success() {
            match phase {
                Phase::Preprocess => {
                    let dirs = self.clang_config().quote_include_dirs();
                    let mut note: String = tomls
                        .iter()
                        .map(|(s, t)| preprocessed_note(s, t, &dirs))
                        .collect();
                    if let Some(g) = generation {
                        note.push_str(&generation_note(g));
                    }
                    match &phase_output {
                        Some(f) => append_to(f, &note)?,
                        None => stdout.extend_from_slice(note.as_bytes()),
                    }
                }
                Phase::Dependencies => {
                    let phony = self.view.has(Role::DepsPhony);
                    let with_generation = |text: String| match generation {
                        Some(g) => self
                            .view
                            .cuda_sources()
                            .iter()
                            .fold(text, |t, src| add_dependency(&t, src, g, one_source, phony)),
                        None => text,
                    };
                    match &phase_output {
                        Some(f) => {
                            self.add_tomls_to_file(f, &[], tomls, one_source)?;
                            if let Ok(text) = std::fs::read_to_string(f) {
                                let fixed = with_generation(text.clone());
                                if fixed != text {
                                    std::fs::write(f, fixed)
                                        .with_context(|| format!("writing {}", f.display()))?;
                                }
                            }
                        }
                        None => {
                            if let Ok(text) = String::from_utf8(stdout.clone()) {
                                stdout =
                                    with_generation(self.with_tomls(&text, &[], tomls, one_source))
                                        .into_bytes();
                            }
                        }
                    }
                }
                _ => {}
            }
            if self.view.has_any_deps_with_compile() {
                self.fix_dependency_files(&[], None)?;
            }
        }
        if capture {
            stdout_bytes_lossy(&stdout);
        }
        Ok(out.status.code().unwrap_or(1))
    }

    /// The dependency file nvcc writes for `source` with `-MD`/`-MMD`: `-MF`, else the
    /// output's name with `.d`, else the source's file name with `.d` (in the current
    /// directory).
    fn deps_file_for(&self, source: &Path) -> PathBuf {
        if let Some(f) = self.view.values(Role::DepsFile).last() {
            return PathBuf::from(f);
        }
        match self.view.output() {
            Some(o) => PathBuf::from(o),
            None => PathBuf::from(source.file_name().unwrap_or_default()),
        }
        .with_extension("d")
    }

    /// Makes the `-MD`/`-MMD` dependency files of this command name the user's files: the
    /// prepared copies of `replaced` (original, copy) become the originals, and the rule of
    /// each CUDA source lists the `klaraptor.toml` beside it. `file` is the one file to fix
    /// (an instrumented compile writes it for the sources of `replaced`); without it, the
    /// files nvcc wrote for the command's sources.
    fn fix_dependency_files(
        &self,
        replaced: &[(PathBuf, PathBuf)],
        file: Option<&Path>,
    ) -> Result<()> {
        let sources: Vec<PathBuf> = match file {
            Some(_) => replaced.iter().map(|(o, _)| o.clone()).collect(),
            None => self
                .view
                .cuda_sources()
                .into_iter()
                .map(Path::to_path_buf)
                .collect(),
        };
        let tomls: Vec<(PathBuf, PathBuf)> = sources
            .iter()
            .filter_map(|s| toml_beside(s).map(|t| (s.clone(), t)))
            .collect();
        // Each file, with how many sources write it and their tomls.
        struct DepsFile {
            path: PathBuf,
            sources: usize,
            tomls: Vec<(PathBuf, PathBuf)>,
        }
        let mut files: Vec<DepsFile> = Vec::new();
        for s in &sources {
            let path = match file {
                Some(f) => f.to_path_buf(),
                None => self.deps_file_for(s),
            };
            let mine = tomls.iter().filter(|(ts, _)| ts == s).cloned();
            match files.iter_mut().find(|d| d.path == path) {
                Some(d) => {
                    d.sources += 1;
                    d.tomls.extend(mine);
                }
                None => files.push(DepsFile {
                    path,
                    sources: 1,
                    tomls: mine.collect(),
                }),
            }
        }
        for d in &files {
            self.add_tomls_to_file(&d.path, replaced, &d.tomls, d.sources == 1)?;
        }
        Ok(())
    }

    /// Rewrites the dependency file `file` with [`Self::with_tomls`] (nothing when it is
    /// missing: nvcc did not write it).
    fn add_tomls_to_file(
        &self,
        file: &Path,
        replaced: &[(PathBuf, PathBuf)],
        tomls: &[(PathBuf, PathBuf)],
        one_source: bool,
    ) -> Result<()> {
        let Ok(text) = std::fs::read_to_string(file) else {
            return Ok(());
        };
        let fixed = self.with_tomls(&text, replaced, tomls, one_source);
        if fixed != text {
            let tmp = file.with_extension("d.klaraptor-tmp");
            std::fs::write(&tmp, fixed)?;
            std::fs::rename(&tmp, file)?;
        }
        Ok(())
    }

    /// The make rules `text` with the prepared copies of `replaced` named as the originals
    /// and, for each (source, toml) of `tomls`, the toml among the prerequisites of the
    /// source's rule (of the first rule when no rule names it and `one_source` says that
    /// `text` is written for one source only), with a rule of its own under `-MP`.
    fn with_tomls(
        &self,
        text: &str,
        replaced: &[(PathBuf, PathBuf)],
        tomls: &[(PathBuf, PathBuf)],
        one_source: bool,
    ) -> String {
        let mut fixed = text.to_string();
        for (orig, copy) in replaced {
            // Paths in a make rule are escaped (`sp\ ace/x.cu`), as nvcc writes the original.
            fixed = fixed.replace(&make_escaped(copy), &make_escaped(orig));
        }
        let phony = self.view.has(Role::DepsPhony);
        for (source, toml) in tomls {
            fixed = add_dependency(&fixed, source, toml, one_source, phony);
        }
        fixed
    }
}

/// How a warning names a mode whose launches klaraptor does not instrument.
fn mode_name(phase: Phase) -> &'static str {
    match phase {
        Phase::Library => "-lib",
        Phase::Intermediate => "-cuda, -ptx, -cubin, -fatbin, -optix-ir or -lto-ir",
        Phase::DeviceLink => "-dlink",
        Phase::Preprocess => "-E",
        Phase::Dependencies => "-M",
        Phase::Compile | Phase::CompileRdc | Phase::CompileWhole | Phase::Link | Phase::Run => {
            "a mode nvcc refuses with these options"
        }
    }
}

/// The `klaraptor.toml` beside `source` (the one its annotations may come from), if there
/// is one.
fn toml_beside(source: &Path) -> Option<PathBuf> {
    let t = klaraptor_spec::annotations::toml_path_for(source);
    t.is_file().then_some(t)
}

/// The words of a make rule (continuation lines joined), split at unescaped blanks.
pub(crate) fn rule_words(rule: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut chars = rule.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                // A line continuation is a blank.
                Some('\n') | None => {
                    if !cur.is_empty() {
                        words.push(std::mem::take(&mut cur));
                    }
                }
                Some(n) => {
                    cur.push(c);
                    cur.push(n);
                }
            },
            c if c.is_whitespace() => {
                if !cur.is_empty() {
                    words.push(std::mem::take(&mut cur));
                }
            }
            c => cur.push(c),
        }
    }
    if !cur.is_empty() {
        words.push(cur);
    }
    words
}

/// The make dependency rules `text` with `dep` among the prerequisites of the rule whose
/// first prerequisite is `source` (or, where `fallback` holds and none is, of the first
/// rule), unless it is listed already; with `phony`, also a rule of its own for `dep` (as
/// `-MP` writes for headers), so that make does not stop when it is deleted.
fn add_dependency(text: &str, source: &Path, dep: &Path, fallback: bool, phony: bool) -> String {
    let (source, dep) = (make_escaped(source), make_escaped(dep));
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    // Rules as ranges of lines: a line ending with a backslash continues on the next.
    let mut rules: Vec<(usize, usize)> = Vec::new();
    let mut start = 0;
    for (i, l) in lines.iter().enumerate() {
        if !l.trim_end_matches(['\n', '\r']).ends_with('\\') {
            rules.push((start, i));
            start = i + 1;
        }
    }
    if start < lines.len() {
        rules.push((start, lines.len() - 1));
    }
    // The prerequisites of a rule that has some.
    let parse = |&(a, b): &(usize, usize)| -> Option<Vec<String>> {
        let words = rule_words(&lines[a..=b].concat());
        let colon = words.iter().position(|w| w == ":" || w.ends_with(':'))?;
        let prereqs: Vec<String> = words[colon + 1..].to_vec();
        (!prereqs.is_empty()).then_some(prereqs)
    };
    let parsed: Vec<((usize, usize), Vec<String>)> = rules
        .iter()
        .filter_map(|r| parse(r).map(|p| (*r, p)))
        .collect();
    let target = parsed
        .iter()
        .find(|(_, p)| p[0] == source)
        .or_else(|| parsed.first().filter(|_| fallback));
    let Some(((_, end), prereqs)) = target else {
        return text.to_string();
    };
    let mut out = String::with_capacity(text.len() + 2 * dep.len() + 16);
    if !prereqs.contains(&dep) {
        for (i, l) in lines.iter().enumerate() {
            if i == *end {
                let body = l.trim_end_matches(['\n', '\r']);
                out.push_str(body);
                out.push_str(" \\\n    ");
                out.push_str(&dep);
                out.push_str(&l[body.len()..]);
                if body.len() == l.len() {
                    out.push('\n');
                }
            } else {
                out.push_str(l);
            }
        }
    } else {
        out.push_str(text);
    }
    let phony_rule = format!("{dep}:");
    if phony && !out.lines().any(|l| l.trim_end() == phony_rule) {
        if !out.is_empty() && !out.ends_with('\n') {
            out.push('\n');
        }
        out.push('\n');
        out.push_str(&phony_rule);
        out.push('\n');
    }
    out
}

/// What `klaraptor-cc -E` appends to nvcc's preprocessed output of `source`, beside which
/// lies `toml`: a line marker naming the toml (a tool that reads the included files from
/// the markers, such as ccache in its direct mode, then hashes it), and a comment holding
/// the toml's entries that may apply to the translation unit, each in one canonical line
/// (so that the output, which ccache hashes, changes when they do). If the toml or the
/// source's annotations do not read, the comment holds the toml's text. Fed back to a
/// compiler, the output compiles as before.
fn preprocessed_note(source: &Path, toml: &Path, include_dirs: &[PathBuf]) -> String {
    let entries = std::fs::read_to_string(source)
        .ok()
        .and_then(|text| {
            klaraptor_passes::frontend::annotations_of_tu(source, &text, include_dirs).ok()
        })
        .map(|(_, entries, _)| {
            entries
                .iter()
                .map(canonical_entry)
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_else(|| std::fs::read_to_string(toml).unwrap_or_default());
    let quoted = toml
        .display()
        .to_string()
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n");
    let mut body = String::new();
    for l in entries.lines() {
        body.push_str("\n   ");
        // Nothing may end the comment early.
        body.push_str(&l.replace("*/", "*\\/"));
    }
    format!(
        "# 1 \"{quoted}\"\n/* klaraptor-cc: the entries of {} that may apply to {}:{body}\n*/\n",
        toml.display().to_string().replace("*/", "*\\/"),
        source.display().to_string().replace("*/", "*\\/"),
    )
}

/// What `klaraptor-cc -E` appends to nvcc's preprocessed output of a source with
/// annotations: a line marker naming the profile database's generation file (ccache's
/// direct mode then hashes it), and a comment holding its content, which every change of the
/// database rewrites (so the output, which ccache's preprocessor mode hashes, changes with
/// the database whose profiles the compile puts into the object).
fn generation_note(generation: &Path) -> String {
    let content = std::fs::read_to_string(generation).unwrap_or_default();
    let quoted = generation
        .display()
        .to_string()
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n");
    format!(
        "# 1 \"{quoted}\"\n/* klaraptor-cc: the profile database {} at {} */\n",
        generation.display().to_string().replace("*/", "*\\/"),
        content.trim().replace("*/", "*\\/"),
    )
}

/// A `klaraptor.toml` entry in one line, in the syntax of `#pragma klaraptor`.
fn canonical_entry(t: &klaraptor_spec::config::TomlKernel) -> String {
    use klaraptor_spec::annotations::ArgRef;
    let a = &t.annotation;
    let data: Vec<String> = a
        .data
        .iter()
        .filter_map(|d| match &d.arg {
            ArgRef::Index(i) => Some(format!("{}={i}", d.label)),
            ArgRef::Name(n) => Some(format!("{}={n}", d.label)),
            ArgRef::Launch(_) => None,
        })
        .collect();
    let mut line = format!("kernel({})", a.kernel);
    if !data.is_empty() {
        line.push_str(&format!(" data({})", data.join(", ")));
    }
    line.push_str(&format!(" dim({})", a.dim));
    let grid: Vec<String> = a.grid.iter().map(ToString::to_string).collect();
    line.push_str(&format!(" grid({})", grid.join(", ")));
    for b in &a.constraints {
        line.push_str(&format!(" block({b})"));
    }
    if let Some(e) = &a.shmem {
        line.push_str(&format!(" shmem({e})"));
    }
    if let Some(p) = &a.profile {
        let sizes: Vec<String> = p
            .sizes
            .iter()
            .map(|s| {
                let v: Vec<String> = s.iter().map(i64::to_string).collect();
                format!("({})", v.join(", "))
            })
            .collect();
        line.push_str(&format!(
            " profile(run={:?}, sizes=[{}])",
            p.run,
            sizes.join(", ")
        ));
    }
    if let Some(s) = &t.source {
        line.push_str(&format!(" source({:?})", s.display().to_string()));
    }
    line
}

/// Appends `text` to the file `path`.
fn append_to(path: &Path, text: &str) -> Result<()> {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))?;
    f.write_all(text.as_bytes())
        .with_context(|| format!("writing {}", path.display()))
}

/// `path` as a make rule names it (as the host compiler writes dependency files): a space
/// or `#` behind a backslash, `$` doubled.
fn make_escaped(path: &Path) -> String {
    let mut out = String::new();
    for c in path.display().to_string().chars() {
        match c {
            ' ' | '#' => {
                out.push('\\');
                out.push(c);
            }
            '$' => out.push_str("$$"),
            c => out.push(c),
        }
    }
    out
}

/// Writes `bytes` to stdout, ignoring errors, as [`stdout_lossy`].
fn stdout_bytes_lossy(bytes: &[u8]) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(bytes);
    let _ = out.flush();
}

fn shell_words(args: &[String]) -> String {
    args.iter()
        .map(|a| {
            if a.is_empty() || a.contains(|c: char| c.is_whitespace() || "'\"\\$`".contains(c)) {
                format!("'{}'", a.replace('\'', "'\\''"))
            } else {
                a.clone()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The compiler cache klaraptor-cc hands its command to (`KLARAPTOR_CACHE`, e.g. `ccache`).
pub const CACHE_ENV: &str = "KLARAPTOR_CACHE";
/// Set for the klaraptor-cc the cache runs, so that it compiles instead of handing over
/// again.
const CACHE_INNER_ENV: &str = "KLARAPTOR_CACHE_INNER";

/// With `KLARAPTOR_CACHE` set (the CMake module sets it for `KLARAPTOR_CACHE=ccache`):
/// replaces this process by `<cache> <this klaraptor-cc> <arguments>`, the nvcc of the
/// launcher form (`klaraptor-cc /path/to/nvcc …`, as CMake runs a launcher) passed in
/// `KLARAPTOR_NVCC` instead of as an argument, which a cache would take for a second
/// source file and refuse to cache. Returns only when the cache cannot be started.
fn hand_to_cache(args: &[String]) -> Option<anyhow::Error> {
    let cache = std::env::var_os(CACHE_ENV).filter(|c| !c.is_empty())?;
    if std::env::var_os(CACHE_INNER_ENV).is_some() {
        return None;
    }
    let me = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => return Some(anyhow::anyhow!(e).context("locating klaraptor-cc itself")),
    };
    let (launcher, rest) = split_launcher(args);
    let mut cmd = Command::new(&cache);
    cmd.arg(me)
        .args(rest)
        .env(CACHE_INNER_ENV, "1")
        .env_remove(CACHE_ENV);
    if let Some(nvcc) = launcher {
        if nvcc.contains('/') {
            cmd.env("KLARAPTOR_NVCC", nvcc);
        }
    }
    let err = cmd.exec();
    Some(anyhow::anyhow!(err).context(format!(
        "cannot run the compiler cache {} ({CACHE_ENV} names it)",
        Path::new(&cache).display()
    )))
}

/// Entry point of the `klaraptor-cc` binary.
pub fn main_with(args: Vec<OsString>) -> i32 {
    klaraptor_profiler::interrupt::install();
    let args: Vec<String> = args
        .into_iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    if args.iter().any(|a| a == "--kl-help") {
        use std::io::Write;
        // Answered before anything else: it needs no nvcc, and a closed pipe is no error.
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(crate::nvcc_args::KL_HELP.as_bytes());
        let _ = out.flush();
        return 0;
    }
    if let Some(e) = hand_to_cache(&args) {
        crate::kl_eprintln!("klaraptor-cc: error: {e:#}");
        return 1;
    }
    match Invocation::new(&args).and_then(Invocation::run) {
        Ok(code) => code,
        // An error caused by an interrupt (its cleanup removed the work directory, a child
        // ended by the signal) is not reported: the process ends by the signal instead.
        Err(_) if klaraptor_profiler::interrupt::interrupted() => 1,
        Err(e) => {
            crate::kl_eprintln!("klaraptor-cc: error: {e:#}");
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_toml_joins_the_rule_of_its_source() {
        let text = "a.o : a.cu \\\n    a.h\n\nb.o : sp\\ ace/b.cu \\\n    b.h\n";
        let toml = Path::new("sp ace/klaraptor.toml");
        let out = add_dependency(text, Path::new("sp ace/b.cu"), toml, false, false);
        assert_eq!(
            out,
            "a.o : a.cu \\\n    a.h\n\nb.o : sp\\ ace/b.cu \\\n    b.h \\\n    sp\\ ace/klaraptor.toml\n"
        );
        // Listed once, whatever the number of calls.
        assert_eq!(
            add_dependency(&out, Path::new("sp ace/b.cu"), toml, false, false),
            out
        );
        // No rule of that source: nothing, unless the text is that source's alone.
        let c = Path::new("c.cu");
        assert_eq!(add_dependency(text, c, toml, false, false), text);
        assert!(add_dependency(text, c, toml, true, false)
            .starts_with("a.o : a.cu \\\n    a.h \\\n    sp\\ ace/klaraptor.toml\n\nb.o"));
    }

    #[test]
    fn under_mp_the_toml_gets_a_rule_of_its_own() {
        // clang's form: `target:` glued, a one-line rule, no final newline.
        let text = "x.o: x.cu\n\nx.h:";
        let out = add_dependency(
            text,
            Path::new("x.cu"),
            Path::new("klaraptor.toml"),
            false,
            true,
        );
        assert_eq!(
            out,
            "x.o: x.cu \\\n    klaraptor.toml\n\nx.h:\n\nklaraptor.toml:\n"
        );
    }
}
