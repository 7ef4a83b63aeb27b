//! `klaraptor`: inspection and tooling around `klaraptor-cc`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use klaraptor::toolchain::Toolchain;
use klaraptor_passes::clang::ClangConfig;
use klaraptor_passes::frontend::{self, FrontendError, Outcome};

#[derive(Parser)]
#[command(
    name = "klaraptor",
    version,
    about = "Tools around klaraptor-cc: check annotations, look into the rational programs a binary \
             carries, manage profiles and settled choices, calibrate the GPU, validate the choices",
    long_about = "Tools around klaraptor-cc: check annotations, look into the rational programs a \
                  binary carries, manage profiles and settled choices, calibrate the GPU, validate \
                  the choices.\n\nklaraptor-cc itself (the nvcc replacement) lists its own options \
                  with `klaraptor-cc --kl-help`."
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Check the annotations of CUDA sources and print the kernel specs klaraptor-cc builds
    /// from them.
    ///
    /// The annotations are checked against the kernels (with libclang, as klaraptor-cc does);
    /// the specs are printed as TOML, errors on stderr.
    Specs {
        /// CUDA sources.
        #[arg(required = true)]
        sources: Vec<PathBuf>,
        /// Include directories, as for nvcc.
        #[arg(short = 'I', value_name = "DIR")]
        include: Vec<String>,
        /// Macro definitions, as for nvcc.
        #[arg(short = 'D', value_name = "NAME[=VALUE]")]
        define: Vec<String>,
    },
    /// Suggest the annotation of each kernel launch in CUDA sources (where to start
    /// annotating a program).
    ///
    /// For every `<<<…>>>` launch of a __global__ kernel (read with libclang, as klaraptor-cc
    /// reads sources): its file:line and text, and the one-line pragma klaraptor would infer
    /// (`#pragma klaraptor kernel(k)`, with dim(d) for a d-dimensional block: the data are
    /// the threads the launch runs, the blocks divide them exactly), plus, where the kernel
    /// has integer parameters that look like sizes, a commented fuller form naming them.
    Suggest {
        /// CUDA sources.
        #[arg(required = true)]
        sources: Vec<PathBuf>,
        /// Include directories, as for nvcc.
        #[arg(short = 'I', value_name = "DIR")]
        include: Vec<String>,
        /// Macro definitions, as for nvcc.
        #[arg(short = 'D', value_name = "NAME[=VALUE]")]
        define: Vec<String>,
    },
    /// Show which nvcc and CUDA installation klaraptor-cc uses, and why.
    Toolchain,
    /// Calibrate this machine's GPU for the performance model, or show the cached figures.
    Device(klaraptor_profiler::device_cmd::DeviceArgs),
    /// List the rational programs a binary carries and how well each fits its profile.
    ///
    /// For a binary, or every binary in a build directory: each kernel's generated C, the
    /// device it was built for, the profile, the link's decision and the fit quality.
    Inspect {
        /// A binary linked by klaraptor-cc, or a build directory.
        target: PathBuf,
    },
    /// Show why a kernel gets its block at a data size: every candidate shape ranked.
    ///
    /// Each candidate block shape with its predicted time, MWP, CWP, active warps and blocks
    /// per SM, waves and the limiting factor; the choice is marked.
    Explain {
        /// A binary linked by klaraptor-cc, or a build directory.
        target: PathBuf,
        /// The kernel (name in the source: every instance of a template; an instance's
        /// run-time name, e.g. `stencil1d<3>`; or a mangled name).
        kernel: String,
        /// The data sizes, one per data parameter, comma-separated.
        #[arg(long, value_delimiter = ',', required = true)]
        size: Vec<i64>,
        /// Only the program made for this device (a substring of its name).
        #[arg(long)]
        device: Option<String>,
    },
    /// Profile a built program's kernels, or look into the profile database and clean it.
    ///
    /// `klaraptor profile <binary>` runs the profile recipes the database lacks on this GPU;
    /// `list`, `show` and `prune` look into the database.
    Profile(klaraptor_profiler::profile_cmd::ProfileArgs),
    /// Look into the choices cache and clean it: list, show, prune.
    ///
    /// The cache holds the launch shapes an instrumented program decided on by paired
    /// comparisons of its own launches, with their evidence, kept across runs.
    Choices(klaraptor_profiler::choices_cmd::ChoicesArgs),
    /// Print what a profiling variant profiles: its plan, candidates or recipe commands.
    ///
    /// For a variant linked with `klaraptor-cc --kl-profiling-variant=…`: its sampling plan
    /// (the file KLARAPTOR_PROFILE_PLAN names), or with --candidates every candidate shape of
    /// its kernels (an exhaustive search), or with --recipes the recipe commands to run, one
    /// per line (one per profile size, or one for all of a kernel's sizes where its recipe
    /// says {SIZES}).
    Plan {
        binary: PathBuf,
        #[arg(long, conflicts_with = "recipes")]
        candidates: bool,
        #[arg(long)]
        recipes: bool,
    },
    /// Store the records of a profiling variant run on another machine in the profile database.
    ///
    /// Collector runs (records/ and env.txt) or ncu captures (bench/gpu/fixtures/
    /// ncu_capture.sh) become profile-database entries: the flow of a build farm without GPUs.
    Import {
        /// The profiling variant that was run (klaraptor-cc --kl-profiling-variant=…).
        #[arg(long)]
        binary: PathBuf,
        /// Run directories (each with records/, or ncu.csv and launches/; env.txt in it or
        /// its parent).
        #[arg(required = true)]
        captures: Vec<PathBuf>,
        /// The database (default: as klaraptor-cc finds it).
        #[arg(long)]
        db: Option<PathBuf>,
    },
    /// Measure on this GPU how close klaraptor's choices come to the best block shapes.
    ///
    /// Runs the program's profiling variant at each --sizes, timing every candidate shape of
    /// its annotated kernels, then the program itself; prints per kernel and data size the
    /// optimum, klaraptor's choice, the program's own shape, their ratios and the rank
    /// correlation of predicted and measured times.
    Validate(klaraptor_program::validate_cmd::ValidateArgs),
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(code) => code,
        Err(e) => {
            klaraptor::kl_eprintln!("klaraptor: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Cmd::Device(args) => klaraptor_profiler::device_cmd::run(args, &find_nvcc),
        Cmd::Profile(args) => klaraptor_profiler::profile_cmd::run(args, &find_nvcc),
        Cmd::Choices(args) => klaraptor_profiler::choices_cmd::run(args),
        Cmd::Validate(args) => klaraptor_program::validate_cmd::run(args),
        Cmd::Inspect { target } => {
            klaraptor_program::inspect_cmd::inspect(&target)?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Explain {
            target,
            kernel,
            size,
            device,
        } => {
            klaraptor_program::inspect_cmd::explain(&target, &kernel, &size, device.as_deref())?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Plan {
            binary,
            candidates,
            recipes,
        } => {
            let bytes = std::fs::read(&binary)
                .map_err(|e| anyhow::anyhow!("reading {}: {e}", binary.display()))?;
            let specs = klaraptor_spec::link::scan_bytes(&bytes, &binary)?;
            if specs.is_empty() {
                anyhow::bail!("{} holds no klaraptor kernel specs", binary.display());
            }
            if recipes {
                let mut seen = std::collections::BTreeSet::new();
                for s in &specs {
                    if s.profile_sizes.is_empty() {
                        // stdout stays the commands to run; a kernel without a recipe is said
                        // on stderr, with how it is profiled
                        klaraptor::kl_eprintln!(
                            "klaraptor plan: kernel {} has no profile recipe: run `klaraptor \
                             profile {} <arguments>` on a machine with the GPU to profile it at \
                             the sizes the program's run reaches",
                            s.name,
                            binary.display()
                        );
                        continue;
                    }
                    // One command per size, or one for all of them (a `{SIZES}` recipe).
                    for run in klaraptor_profiler::plan::recipe_runs(s)? {
                        if seen.insert(run.command.clone()) {
                            klaraptor::kl_println!("{}", run.command);
                        }
                    }
                }
            } else if candidates {
                klaraptor::kl_println!("# every candidate shape (an exhaustive search)");
                for s in &specs {
                    let shapes: Vec<String> = klaraptor_spec::spec::candidate_blocks(s.dim)
                        .iter()
                        .map(|b| format!("{}x{}x{}", b[0], b[1], b[2]))
                        .collect();
                    klaraptor::kl_println!("{} {}", s.mangled, shapes.join(" "));
                }
            } else {
                klaraptor_profiler::console::stdout_lossy(&klaraptor_profiler::plan::plan_file(
                    &specs,
                ));
            }
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Import {
            binary,
            captures,
            db,
        } => {
            let db = match db {
                Some(p) => klaraptor_profiler::db::ProfileDb::open(p)?,
                None => klaraptor_profiler::db::ProfileDb::locate()?,
            };
            let entries = klaraptor_profiler::plan::import_captures(&binary, &captures)?;
            for e in &entries {
                let ok = e.samples.iter().filter(|s| s.error.is_none()).count();
                let path = db.put(e)?;
                klaraptor::kl_println!(
                    "{} on {}: {} samples ({} failed) -> {}",
                    e.kernel.name,
                    e.device.name,
                    e.samples.len(),
                    e.samples.len() - ok,
                    path.display()
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Toolchain => {
            let tc = Toolchain::discover(None)?;
            klaraptor::kl_println!("nvcc: {} ({})", tc.nvcc.display(), tc.origin);
            klaraptor::kl_println!("CUDA root: {}", tc.cuda_root().display());
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Suggest {
            sources,
            include,
            define,
        } => {
            let cfg = clang_config(&include, &define)?;
            let mut failed = false;
            for src in &sources {
                let (found, errors) = klaraptor_passes::suggest::suggest(src, &cfg)?;
                if !errors.is_empty() {
                    klaraptor::kl_eprintln!(
                        "{}: warning: libclang reports errors, the launches it found may be \
                         incomplete:",
                        src.display()
                    );
                    for e in errors.iter().take(5) {
                        klaraptor::kl_eprintln!("  {e}");
                    }
                }
                if found.is_empty() {
                    klaraptor::kl_println!("# {}: no <<<>>> launch of a kernel", src.display());
                    failed |= !errors.is_empty();
                    continue;
                }
                let here = std::env::current_dir().unwrap_or_default();
                let show =
                    |p: &std::path::Path| p.strip_prefix(&here).unwrap_or(p).display().to_string();
                klaraptor_profiler::console::stdout_lossy(&klaraptor_passes::suggest::render(
                    &found, &show,
                ));
            }
            Ok(if failed {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            })
        }
        Cmd::Specs {
            sources,
            include,
            define,
        } => {
            let cfg = clang_config(&include, &define)?;
            let mut failed = false;
            let mut warned = std::collections::BTreeSet::new();
            for src in &sources {
                // What klaraptor-cc warns about: misspelled pragmas, klaraptor.toml entries
                // that match nothing (each once, however many sources share the toml).
                if let Ok(text) = std::fs::read_to_string(src) {
                    let dirs = cfg.quote_include_dirs();
                    for d in frontend::misspelled_pragmas_of_tu(src, &text, &dirs) {
                        let w = d.as_warning();
                        if warned.insert(w.clone()) {
                            klaraptor::kl_eprintln!("{w}");
                        }
                    }
                }
                match frontend::analyze(src, &cfg) {
                    Ok(Outcome::Unannotated) => {
                        klaraptor::kl_println!("# {}: no annotated kernels", src.display())
                    }
                    Ok(Outcome::SourceErrors(errs)) => {
                        failed = true;
                        klaraptor::kl_eprintln!("{}: the source does not compile:", src.display());
                        for e in errs {
                            klaraptor::kl_eprintln!("  {e}");
                        }
                    }
                    Ok(Outcome::Annotated(a)) => {
                        klaraptor::kl_println!("# {}", src.display());
                        for s in &a.specs {
                            klaraptor::kl_println!("{}", s.to_toml());
                        }
                    }
                    Err(FrontendError::User(d)) => {
                        failed = true;
                        klaraptor::kl_eprintln!("{d}");
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            Ok(if failed {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            })
        }
    }
}

/// The front end's configuration, as klaraptor-cc's: the CUDA headers of its toolchain,
/// clang's CUDA stubs of the project prefix, and the user's -I and -D.
fn clang_config(include: &[String], define: &[String]) -> anyhow::Result<ClangConfig> {
    let tc = Toolchain::discover(None)?;
    let mut cfg = ClangConfig::new(tc.cuda_root());
    cfg.stub_include = klaraptor::toolchain::project_prefixes()
        .into_iter()
        .map(|p| p.join("clang-cuda-stubs"))
        .find(|p| p.is_dir());
    cfg.args.extend(include.iter().map(|i| format!("-I{i}")));
    cfg.args.extend(define.iter().map(|d| format!("-D{d}")));
    Ok(cfg)
}

/// The nvcc that builds what a command compiles on the GPU machine (the calibration
/// benchmark): the driver's toolchain discovery.
fn find_nvcc() -> anyhow::Result<std::path::PathBuf> {
    Ok(Toolchain::discover(None)?.nvcc)
}
