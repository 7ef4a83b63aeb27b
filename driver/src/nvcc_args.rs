//! The nvcc command line, as data.
//!
//! Every option nvcc 13 documents is described once, in [`FLAGS`]: its long spelling
//! (`--output-file`), its short spelling (`-o`), whether it takes a value, whether the short
//! form may glue the value on (`-Idir`, `-O3`), and what it means to us ([`Role`]). The parser
//! walks the arguments against that table and keeps, for every argument, the exact tokens the
//! user wrote, so that an invocation can be re-emitted token for token.
//!
//! nvcc's spelling rules, checked against nvcc 13.0 (`nvcc --dryrun`):
//!
//! ```text
//! --output-file x.o   --output-file=x.o   -o x.o   -o=x.o      accepted
//! -ox.o   -output-file x.o   -compile   -isystemdir   -xcu     "Unknown option"
//! -Idir -DFOO -UFOO -O3 -lm -Ldir -t2 -m64                     accepted (glued short value)
//! -Xcompiler=-fPIC,-Wall   -Xcompiler -fPIC                    accepted (list values)
//! ```
//!
//! Options of klaraptor's own are spelled `--kl-…`; they are split off here and never reach
//! nvcc. Unknown options are kept verbatim (nvcc will report them itself).

use std::fmt;
use std::path::{Path, PathBuf};

/// What an option means to the driver. Most options only need to travel to nvcc unchanged;
/// the roles below are the ones klaraptor looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Selects what nvcc produces (compile only, link, preprocess, …).
    Mode(Phase),
    Output,
    Arch,
    Code,
    Gencode,
    IncludeDir,
    SystemInclude,
    PreInclude,
    Define,
    Undefine,
    Optimize,
    HostDebug,
    DeviceDebug,
    LineInfo,
    Std,
    /// `-x <lang>`: how the inputs that follow are treated.
    Language,
    HostCompiler,
    /// `-Xcompiler`, `-Xlinker`, `-Xptxas`, … : options handed to a sub-tool.
    Forward(Tool),
    Rdc,
    /// Dependency generation: `-M`, `-MM` (instead of compiling), `-MD`, `-MMD` (beside it).
    Deps(DepsKind),
    DepsFile,
    DepsTarget,
    DepsPhony,
    OptionsFile,
    Library,
    LibraryDir,
    Version,
    DryRun,
    Verbose,
    Help,
    /// Everything else: passed to nvcc as written.
    Other,
}

/// The sub-tools that nvcc forwards options to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tool {
    HostCompiler,
    Linker,
    Ptxas,
    Nvlink,
    Archiver,
    Cudafe,
    RunArgs,
}

/// The last phase nvcc runs, chosen by the mode options; [`Phase::Link`] when none is given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// `-c`: compile each source to an object.
    Compile,
    /// `-dc` (`-rdc=true -c`): relocatable device code object.
    CompileRdc,
    /// `-dw` (`-rdc=false -c`).
    CompileWhole,
    /// `-E`: preprocess to standard output.
    Preprocess,
    /// `-M`/`-MM`: write dependencies only.
    Dependencies,
    /// `-cuda`, `-ptx`, `-cubin`, `-fatbin`, `-optix-ir`, … : stop at an intermediate.
    Intermediate,
    /// `-dlink`: device link only.
    DeviceLink,
    /// `-lib`: make a static library.
    Library,
    /// `-link` or no mode: compile what needs it, then link an executable.
    Link,
    /// `-run`: link, then run.
    Run,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DepsKind {
    /// `-M`, `-MM`: dependencies instead of compiling.
    Only,
    /// `-MD`, `-MMD`: dependencies as a side effect of compiling.
    WithCompile,
}

/// How an option takes its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Value {
    /// A switch: `-c`, `-G`.
    None,
    /// One value: `-o x`, `-o=x`, `--output-file x`, `--output-file=x`.
    One,
    /// A comma-separated list: `-Xcompiler -fPIC,-Wall`. The parser keeps the list whole.
    List,
}

/// One row of the option table.
#[derive(Debug)]
pub struct FlagSpec {
    pub long: &'static str,
    pub short: Option<&'static str>,
    pub value: Value,
    /// The short form accepts its value glued on: `-Idir`, `-O3`.
    pub glued: bool,
    pub role: Role,
}

const fn flag(long: &'static str, short: &'static str, role: Role) -> FlagSpec {
    FlagSpec {
        long,
        short: opt(short),
        value: Value::None,
        glued: false,
        role,
    }
}
const fn one(long: &'static str, short: &'static str, role: Role) -> FlagSpec {
    FlagSpec {
        long,
        short: opt(short),
        value: Value::One,
        glued: false,
        role,
    }
}
const fn glued(long: &'static str, short: &'static str, role: Role) -> FlagSpec {
    FlagSpec {
        long,
        short: opt(short),
        value: Value::One,
        glued: true,
        role,
    }
}
const fn list(long: &'static str, short: &'static str, role: Role) -> FlagSpec {
    FlagSpec {
        long,
        short: opt(short),
        value: Value::List,
        glued: false,
        role,
    }
}
const fn opt(s: &'static str) -> Option<&'static str> {
    if s.is_empty() {
        None
    } else {
        Some(s)
    }
}

use Role::*;

/// nvcc 13.0's options (`nvcc --help`), long and short spellings without their dashes.
pub static FLAGS: &[FlagSpec] = &[
    // What to produce.
    flag("cuda", "cuda", Mode(Phase::Intermediate)),
    flag("cubin", "cubin", Mode(Phase::Intermediate)),
    flag("ptx", "ptx", Mode(Phase::Intermediate)),
    flag("fatbin", "fatbin", Mode(Phase::Intermediate)),
    flag("optix-ir", "optix-ir", Mode(Phase::Intermediate)),
    flag("lto-ir", "", Mode(Phase::Intermediate)),
    flag("preprocess", "E", Mode(Phase::Preprocess)),
    flag("generate-dependencies", "M", Deps(DepsKind::Only)),
    flag(
        "generate-nonsystem-dependencies",
        "MM",
        Deps(DepsKind::Only),
    ),
    flag(
        "generate-dependencies-with-compile",
        "MD",
        Deps(DepsKind::WithCompile),
    ),
    flag(
        "generate-nonsystem-dependencies-with-compile",
        "MMD",
        Deps(DepsKind::WithCompile),
    ),
    one("dependency-output", "MF", DepsFile),
    one("dependency-target-name", "MT", DepsTarget),
    flag("generate-dependency-targets", "MP", DepsPhony),
    flag("compile", "c", Mode(Phase::Compile)),
    flag("device-c", "dc", Mode(Phase::CompileRdc)),
    flag("device-w", "dw", Mode(Phase::CompileWhole)),
    flag("device-link", "dlink", Mode(Phase::DeviceLink)),
    flag("link", "link", Mode(Phase::Link)),
    flag("lib", "lib", Mode(Phase::Library)),
    flag("run", "run", Mode(Phase::Run)),
    // Files and paths.
    one("output-file", "o", Output),
    one("pre-include", "include", PreInclude),
    glued("library", "l", Library),
    glued("define-macro", "D", Define),
    glued("undefine-macro", "U", Undefine),
    glued("include-path", "I", IncludeDir),
    one("system-include", "isystem", SystemInclude),
    glued("library-path", "L", LibraryDir),
    one("output-directory", "odir", Other),
    one("compiler-bindir", "ccbin", HostCompiler),
    flag(
        "allow-unsupported-compiler",
        "allow-unsupported-compiler",
        Other,
    ),
    one("archiver-binary", "arbin", Other),
    one("cudart", "cudart", Other),
    one("cudadevrt", "cudadevrt", Other),
    one("libdevice-directory", "ldir", Other),
    one("target-directory", "target-dir", Other),
    list("options-file", "optf", OptionsFile),
    // Code generation and language.
    flag("profile", "pg", Other),
    flag("debug", "g", HostDebug),
    flag("device-debug", "G", DeviceDebug),
    flag("extensible-whole-program", "ewp", Other),
    flag("no-compress", "no-compress", Other),
    one("compress-mode", "compress-mode", Other),
    flag("generate-line-info", "lineinfo", LineInfo),
    list("optimization-info", "opt-info", Other),
    glued("optimize", "O", Optimize),
    one("dopt", "dopt", Other),
    flag("dlink-time-opt", "dlto", Other),
    flag("gen-opt-lto", "gen-opt-lto", Other),
    one("split-compile", "split-compile", Other),
    one("split-compile-extended", "split-compile-extended", Other),
    one(
        "ftemplate-backtrace-limit",
        "ftemplate-backtrace-limit",
        Other,
    ),
    one("ftemplate-depth", "ftemplate-depth", Other),
    flag("no-exceptions", "noeh", Other),
    flag("shared", "shared", Other),
    one("x", "x", Language),
    one("std", "std", Std),
    flag("no-host-device-initializer-list", "nohdinitlist", Other),
    flag("no-host-device-move-forward", "nohdmoveforward", Other),
    flag("expt-relaxed-constexpr", "expt-relaxed-constexpr", Other),
    flag("extended-lambda", "extended-lambda", Other),
    flag("expt-extended-lambda", "expt-extended-lambda", Other),
    glued("machine", "m", Other),
    one("relocatable-device-code", "rdc", Rdc),
    list("entries", "e", Other),
    one("maxrregcount", "maxrregcount", Other),
    flag("use_fast_math", "use_fast_math", Other),
    one("ftz", "ftz", Other),
    one("prec-div", "prec-div", Other),
    one("prec-sqrt", "prec-sqrt", Other),
    one("fmad", "fmad", Other),
    flag(
        "extra-device-vectorization",
        "extra-device-vectorization",
        Other,
    ),
    flag("compile-as-tools-patch", "astoolspatch", Other),
    flag("keep-device-functions", "keep-device-functions", Other),
    one("jump-table-density", "jtd", Other),
    one("default-stream", "default-stream", Other),
    one(
        "static-global-template-stub",
        "static-global-template-stub",
        Other,
    ),
    one(
        "device-entity-has-hidden-visibility",
        "device-entity-has-hidden-visibility",
        Other,
    ),
    one("device-stack-protector", "device-stack-protector", Other),
    flag("fdevice-syntax-only", "fdevice-syntax-only", Other),
    one("fdevice-time-trace", "fdevice-time-trace", Other),
    flag("restrict", "restrict", Other),
    flag("source-in-ptx", "src-in-ptx", Other),
    // Targets.
    one("gpu-architecture", "arch", Arch),
    list("gpu-code", "code", Code),
    one("generate-code", "gencode", Gencode),
    flag("list-gpu-code", "code-ls", Other),
    flag("list-gpu-arch", "arch-ls", Other),
    // Options for the tools nvcc drives.
    list("compiler-options", "Xcompiler", Forward(Tool::HostCompiler)),
    list("linker-options", "Xlinker", Forward(Tool::Linker)),
    list("archive-options", "Xarchive", Forward(Tool::Archiver)),
    list("ptxas-options", "Xptxas", Forward(Tool::Ptxas)),
    list("nvlink-options", "Xnvlink", Forward(Tool::Nvlink)),
    list("cudafe-options", "Xcudafe", Forward(Tool::Cudafe)),
    list("run-args", "run-args", Forward(Tool::RunArgs)),
    flag(
        "forward-unknown-to-host-compiler",
        "forward-unknown-to-host-compiler",
        Other,
    ),
    flag(
        "forward-unknown-to-host-linker",
        "forward-unknown-to-host-linker",
        Other,
    ),
    flag("forward-unknown-opts", "forward-unknown-opts", Other),
    flag("no-device-link", "nodlink", Other),
    flag("dont-use-profile", "noprof", Other),
    // Driver behaviour and diagnostics.
    glued("threads", "t", Other),
    flag("dryrun", "dryrun", DryRun),
    flag("verbose", "v", Verbose),
    flag("keep", "keep", Other),
    one("keep-dir", "keep-dir", Other),
    flag("save-temps", "save-temps", Other),
    flag("clean-targets", "clean", Other),
    flag("use-local-env", "use-local-env", Other),
    one("input-drive-prefix", "idp", Other),
    one("dependency-drive-prefix", "ddp", Other),
    one("drive-prefix", "dp", Other),
    flag("no-align-double", "", Other),
    flag("disable-warnings", "w", Other),
    flag(
        "Wno-deprecated-gpu-targets",
        "Wno-deprecated-gpu-targets",
        Other,
    ),
    flag(
        "Wno-deprecated-declarations",
        "Wno-deprecated-declarations",
        Other,
    ),
    flag("Wreorder", "Wreorder", Other),
    flag("Wdefault-stream-launch", "Wdefault-stream-launch", Other),
    flag("Wmissing-launch-bounds", "Wmissing-launch-bounds", Other),
    flag(
        "Wext-lambda-captures-this",
        "Wext-lambda-captures-this",
        Other,
    ),
    list("Werror", "Werror", Other),
    flag("display-error-number", "err-no", Other),
    flag("no-display-error-number", "no-err-no", Other),
    list("diag-error", "diag-error", Other),
    list("diag-suppress", "diag-suppress", Other),
    list("diag-warn", "diag-warn", Other),
    flag("resource-usage", "res-usage", Other),
    one("time", "time", Other),
    one("qpp-config", "qpp-config", Other),
    flag("help", "h", Help),
    flag("version", "V", Version),
];

/// One argument as the user wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Arg {
    /// A known option. `tokens` are the command-line words it took (one or two).
    Flag {
        spec: &'static FlagSpec,
        value: Option<String>,
        tokens: Vec<String>,
    },
    /// An input file (source, object, library).
    Input(PathBuf),
    /// An option nvcc does not document; nvcc decides what to do with it.
    Unknown(String),
}

impl PartialEq for FlagSpec {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self, other)
    }
}
impl Eq for FlagSpec {}

impl Arg {
    /// The words this argument occupies on the command line, exactly as written.
    pub fn tokens(&self) -> Vec<String> {
        match self {
            Arg::Flag { tokens, .. } => tokens.clone(),
            Arg::Input(path) => vec![path.to_string_lossy().into_owned()],
            Arg::Unknown(t) => vec![t.clone()],
        }
    }
    pub fn role(&self) -> Option<Role> {
        match self {
            Arg::Flag { spec, .. } => Some(spec.role),
            _ => None,
        }
    }
}

/// An option of klaraptor's own (`--kl-…`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KlOption {
    /// `--kl-verbose`: say what the driver does and which commands it runs.
    Verbose,
    /// `--kl-keep`: keep intermediate files (annotated copies, specs) and say where.
    Keep,
    /// `--kl-off`: behave exactly as nvcc (ignore annotations).
    Off,
    /// `--kl-require-model`: a link that cannot give every annotated kernel a rational
    /// program (no profile and no GPU to make one) fails instead of warning.
    RequireModel,
    /// `--kl-no-profile`: never profile during the link, even with a GPU present; kernels
    /// without a profile keep the program's own dims.
    NoProfile,
    /// `--kl-profiling-variant=<path>`: also link the profiling variant of the program to
    /// `<path>` and write its sampling plan to `<path>.plan` (to profile elsewhere).
    ProfilingVariant(PathBuf),
    /// `--kl-backend=nvcc|clang`: which compiler builds an instrumented translation unit.
    Backend(Backend),
}

/// What `klaraptor-cc --kl-help` prints: klaraptor-cc's own options, one line each, and the
/// environment variables it reads. The instrumented program's run-time controls are in
/// docs/usage.md.
pub const KL_HELP: &str = "\
klaraptor-cc: use it where you use nvcc; it picks annotated kernels' launch blocks at run time.
Usage: klaraptor-cc [nvcc options] [--kl-... options] <files>...
       klaraptor-cc /path/to/nvcc <nvcc arguments>...   (as a compiler launcher, e.g. CMake's)
Every option but the --kl-... ones goes to nvcc (nvcc --help lists them).

klaraptor-cc's own options (never passed to nvcc):
  --kl-help                      print this help and exit
  --kl-verbose                   say what klaraptor-cc does and which commands it runs
  --kl-keep                      keep the intermediate files and the link's work directory; say where
  --kl-off                       ignore annotations: behave exactly as nvcc
  --kl-require-model             fail a link that cannot give every annotated kernel a rational program
  --kl-no-profile                never profile during the link, even with a GPU
  --kl-profiling-variant=<path>  also link the profiling variant to <path> (its plan to <path>.plan)
  --kl-backend=nvcc|clang        the compiler of instrumented translation units (default: nvcc)

Environment variables klaraptor-cc reads:
  KLARAPTOR_NVCC              the nvcc to run (else $CUDA_HOME/bin/nvcc, $CUDA_PATH/bin/nvcc,
                              nvcc on the PATH, .toolchain/cuda/bin/nvcc)
  KLARAPTOR_HOST_CC           the C compiler of the code klaraptor-cc generates (else $CC, else cc)
  KLARAPTOR_PROFILE_DB        the profile database (else the nearest klaraptor-profiles/ at or
                              above the current directory, else ~/.cache/klaraptor/profiles)
  KLARAPTOR_CACHE             a compiler cache to hand the command to (ccache)
  KLARAPTOR_CACHE_INNER       set by klaraptor-cc for the run the cache makes; do not set it
  KLARAPTOR_TRANSFER=off      build no transferred programs for GPUs without a profile of their own
  KLARAPTOR_NO_GPU=1          behave as on a machine without a GPU: never profile
  KLARAPTOR_COLLECTOR         the collector library (else libklaraptor_collector.so beside klaraptor-cc)
  KLARAPTOR_GPU_WAIT          the longest wait for another link profiling the same GPU (default 30m)
  KLARAPTOR_GPU_BUSY_RETRY    how long a recipe run is retried while another profiler holds the GPU
                              (default 5m)
  KLARAPTOR_PROFILE_RESTARTS  new processes a recipe command may take after faulting shapes (default 32)
  KLARAPTOR_CLANG             the clang++ to run (default clang++-19)
  KLARAPTOR_LD                the ld to run (default ld)
  KLARAPTOR_OBJCOPY           the objcopy to run (default objcopy)
The instrumented program reads KLARAPTOR_LOG, KLARAPTOR_DISABLE, KLARAPTOR_FORCE, KLARAPTOR_REFINE,
KLARAPTOR_REFINE_BUDGET, KLARAPTOR_REFINE_WALK, KLARAPTOR_REFINE_SPAN and KLARAPTOR_CHOICES when
it runs (docs/usage.md of the klaraptor repository).
";

/// The compiler that builds an instrumented translation unit (`--kl-backend=`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Backend {
    /// `nvcc -cuda -ccbin clang++-19`: the device code exactly as nvcc builds it; clang-19
    /// compiles the host translation.
    #[default]
    Nvcc,
    /// clang-19 compiles the CUDA itself, device and host ([`clang_flags`]); the CUDA
    /// toolkit's ptxas and fatbinary assemble the device code.
    Clang,
}

/// What went wrong reading the command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArgError {
    MissingValue(String),
    UnknownKlOption(String),
    OptionsFile { path: PathBuf, message: String },
}

impl fmt::Display for ArgError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ArgError::MissingValue(o) => write!(f, "option '{o}' needs a value"),
            ArgError::UnknownKlOption(o) => write!(
                f,
                "unknown klaraptor option '{o}' (known: --kl-help, --kl-verbose, --kl-keep, \
                 --kl-off, --kl-require-model, --kl-no-profile, --kl-profiling-variant=<path>, \
                 --kl-backend=nvcc|clang)"
            ),
            ArgError::OptionsFile { path, message } => {
                write!(
                    f,
                    "cannot read options file '{}': {message}",
                    path.display()
                )
            }
        }
    }
}
impl std::error::Error for ArgError {}

/// A parsed nvcc command line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommandLine {
    pub args: Vec<Arg>,
    pub kl: Vec<KlOption>,
}

fn lookup(word: &str) -> Option<(&'static FlagSpec, bool)> {
    // `--long` names the long spelling, `-short` the short one; nvcc accepts no other mix.
    if let Some(long) = word.strip_prefix("--") {
        FLAGS.iter().find(|s| s.long == long).map(|s| (s, false))
    } else if let Some(short) = word.strip_prefix('-') {
        FLAGS
            .iter()
            .find(|s| s.short == Some(short))
            .map(|s| (s, true))
    } else {
        None
    }
}

/// Splits `-O3`/`-Idir` into a glued short option and its value.
fn lookup_glued(word: &str) -> Option<(&'static FlagSpec, String)> {
    let body = word.strip_prefix('-').filter(|b| !b.starts_with('-'))?;
    FLAGS
        .iter()
        .filter(|s| s.glued)
        .filter_map(|s| {
            let short = s.short?;
            let rest = body.strip_prefix(short)?;
            (!rest.is_empty()).then(|| (s, rest.to_string()))
        })
        // `-include` must not read as `-I` + "nclude": the longest short name wins.
        .max_by_key(|(s, _)| s.short.map_or(0, str::len))
}

impl CommandLine {
    /// Parses arguments (without the program name). Response files named by
    /// `--options-file` are *not* expanded: see [`CommandLine::expanded`].
    pub fn parse<I, S>(args: I) -> Result<CommandLine, ArgError>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let words: Vec<String> = args.into_iter().map(Into::into).collect();
        let mut out = CommandLine::default();
        let mut i = 0;
        while i < words.len() {
            let w = &words[i];
            i += 1;
            if let Some(kl) = w.strip_prefix("--kl-") {
                out.kl.push(match kl {
                    "verbose" => KlOption::Verbose,
                    "keep" => KlOption::Keep,
                    "off" => KlOption::Off,
                    "require-model" => KlOption::RequireModel,
                    "no-profile" => KlOption::NoProfile,
                    "backend=nvcc" => KlOption::Backend(Backend::Nvcc),
                    "backend=clang" => KlOption::Backend(Backend::Clang),
                    _ => match kl.strip_prefix("profiling-variant=") {
                        Some(p) if !p.is_empty() => KlOption::ProfilingVariant(PathBuf::from(p)),
                        _ => return Err(ArgError::UnknownKlOption(w.clone())),
                    },
                });
                continue;
            }
            if !w.starts_with('-') || w == "-" {
                out.args.push(Arg::Input(PathBuf::from(w)));
                continue;
            }
            let (name, eq_value) = match w.split_once('=') {
                Some((n, v)) => (n, Some(v.to_string())),
                None => (w.as_str(), None),
            };
            let arg = if let Some((spec, _)) = lookup(name) {
                match (spec.value, eq_value) {
                    (Value::None, Some(_)) => Arg::Unknown(w.clone()),
                    (Value::None, None) => Arg::Flag {
                        spec,
                        value: None,
                        tokens: vec![w.clone()],
                    },
                    (_, Some(v)) => Arg::Flag {
                        spec,
                        value: Some(v),
                        tokens: vec![w.clone()],
                    },
                    (_, None) => {
                        let v = words
                            .get(i)
                            .ok_or_else(|| ArgError::MissingValue(w.clone()))?;
                        i += 1;
                        Arg::Flag {
                            spec,
                            value: Some(v.clone()),
                            tokens: vec![w.clone(), v.clone()],
                        }
                    }
                }
            } else if let Some((spec, v)) = lookup_glued(w) {
                Arg::Flag {
                    spec,
                    value: Some(v),
                    tokens: vec![w.clone()],
                }
            } else {
                Arg::Unknown(w.clone())
            };
            out.args.push(arg);
        }
        Ok(out)
    }

    /// The words to hand to nvcc: every argument as the user wrote it, klaraptor's own
    /// options removed.
    pub fn to_args(&self) -> Vec<String> {
        self.args.iter().flat_map(Arg::tokens).collect()
    }

    /// The same command line with `--options-file` arguments replaced by the options their
    /// files hold (recursively), relative paths resolved against `cwd`.
    pub fn expanded(&self, cwd: &Path) -> Result<CommandLine, ArgError> {
        self.expanded_depth(cwd, 0)
    }

    fn expanded_depth(&self, cwd: &Path, depth: usize) -> Result<CommandLine, ArgError> {
        let mut words = Vec::new();
        for arg in &self.args {
            match arg {
                Arg::Flag {
                    spec,
                    value: Some(v),
                    ..
                } if spec.role == OptionsFile => {
                    for file in v.split(',') {
                        let path = cwd.join(file);
                        if depth > 8 {
                            return Err(ArgError::OptionsFile {
                                path,
                                message: "options files nest more than 8 deep".into(),
                            });
                        }
                        let text =
                            std::fs::read_to_string(&path).map_err(|e| ArgError::OptionsFile {
                                path: path.clone(),
                                message: e.to_string(),
                            })?;
                        let inner = CommandLine::parse(split_response_file(&text))?;
                        words.extend(inner.expanded_depth(cwd, depth + 1)?.to_args());
                    }
                }
                other => words.extend(other.tokens()),
            }
        }
        let mut out = CommandLine::parse(words)?;
        out.kl.extend(self.kl.iter().cloned());
        Ok(out)
    }

    /// Values of every option with the given role, in order.
    pub fn values(&self, role: Role) -> impl Iterator<Item = &str> {
        self.args.iter().filter_map(move |a| match a {
            Arg::Flag {
                spec,
                value: Some(v),
                ..
            } if spec.role == role => Some(v.as_str()),
            _ => None,
        })
    }

    pub fn has(&self, role: Role) -> bool {
        self.args.iter().any(|a| a.role() == Some(role))
    }

    pub fn has_kl(&self, o: &KlOption) -> bool {
        self.kl.contains(o)
    }

    /// The path of `--kl-profiling-variant=<path>`, the last one given.
    pub fn profiling_variant(&self) -> Option<&Path> {
        self.kl.iter().rev().find_map(|o| match o {
            KlOption::ProfilingVariant(p) => Some(p.as_path()),
            _ => None,
        })
    }

    /// The backend of `--kl-backend=`, the last one given; nvcc by default.
    pub fn backend(&self) -> Backend {
        self.kl
            .iter()
            .rev()
            .find_map(|o| match o {
                KlOption::Backend(b) => Some(*b),
                _ => None,
            })
            .unwrap_or_default()
    }

    /// The phase nvcc will stop after. When several mode options are given nvcc takes the
    /// last one; dependency-only generation (`-M`) wins over compiling.
    pub fn phase(&self) -> Phase {
        if self
            .args
            .iter()
            .any(|a| a.role() == Some(Deps(DepsKind::Only)))
        {
            return Phase::Dependencies;
        }
        self.args
            .iter()
            .rev()
            .find_map(|a| match a.role() {
                Some(Mode(p)) => Some(p),
                _ => None,
            })
            .unwrap_or(Phase::Link)
    }

    pub fn output(&self) -> Option<&str> {
        self.values(Output).last()
    }

    /// Input files in order.
    pub fn inputs(&self) -> impl Iterator<Item = &Path> {
        self.args.iter().filter_map(|a| match a {
            Arg::Input(path) => Some(path.as_path()),
            _ => None,
        })
    }

    /// Inputs that nvcc compiles as CUDA: `.cu` files, or every source when `-x cu` is
    /// given (nvcc applies `-x` to all inputs, wherever it stands).
    pub fn cuda_sources(&self) -> Vec<&Path> {
        let all_cu = self.values(Language).last() == Some("cu");
        self.inputs()
            .filter(|p| {
                if all_cu {
                    !is_object_like(p)
                } else {
                    p.extension().is_some_and(|e| e == "cu")
                }
            })
            .collect()
    }

    /// Whether dependencies are written beside the compile (`-MD` or `-MMD`).
    pub fn has_any_deps_with_compile(&self) -> bool {
        self.has(Deps(DepsKind::WithCompile))
    }

    /// Whether nvcc refuses this command because an output file is named for a phase that
    /// makes one file per input and there are several inputs (nvcc 13: "A single input file
    /// is required for a non-link phase when an outputfile is specified", for `-c`, `-dc`,
    /// `-dw`, `-cuda`, `-ptx`, `-cubin`, `-fatbin`, `-optix-ir`, `-E` and `-M` alike).
    pub fn several_inputs_for_one_output(&self) -> bool {
        let one_per_input = matches!(
            self.phase(),
            Phase::Compile
                | Phase::CompileRdc
                | Phase::CompileWhole
                | Phase::Intermediate
                | Phase::Preprocess
                | Phase::Dependencies
        );
        one_per_input && self.output().is_some() && self.inputs().nth(1).is_some()
    }

    /// Whether relocatable device code is requested (`-rdc=true` or `-dc`).
    pub fn rdc(&self) -> bool {
        self.phase() == Phase::CompileRdc || self.values(Rdc).last().is_some_and(|v| v == "true")
    }

    /// Whether the mode and `-rdc` contradict each other, which nvcc 13 refuses: `-dc` with
    /// `-rdc=false` ("'--device-c (-dc)' is not compatible with
    /// '--relocatable-device-code=false (-rdc=false)'"), `-dw` with `-rdc=true`.
    pub fn rdc_contradicts_mode(&self) -> bool {
        let rdc = self.values(Rdc).last();
        match self.phase() {
            Phase::CompileRdc => rdc == Some("false"),
            Phase::CompileWhole => rdc == Some("true"),
            _ => false,
        }
    }

    /// Whether the phase compiles each source to an object of its own, with or without
    /// relocatable device code: `-c`, `-dc`, `-dw`.
    pub fn compiles_to_objects(&self) -> bool {
        matches!(
            self.phase(),
            Phase::Compile | Phase::CompileRdc | Phase::CompileWhole
        )
    }
}

fn is_object_like(p: &Path) -> bool {
    matches!(
        p.extension().and_then(|e| e.to_str()),
        Some("o" | "obj" | "a" | "so" | "lib" | "dll" | "ptx" | "cubin" | "fatbin")
    )
}

/// Splits an nvcc options file into words: whitespace separates, single and double quotes
/// group, a backslash escapes the next character.
pub fn split_response_file(text: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut quote: Option<char> = None;
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), '\\') | (None, '\\') => {
                if let Some(n) = chars.next() {
                    cur.push(n);
                }
                in_word = true;
            }
            (Some(_), c) => cur.push(c),
            (None, '"' | '\'') => {
                quote = Some(c);
                in_word = true;
            }
            (None, c) if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            (None, c) => {
                cur.push(c);
                in_word = true;
            }
        }
    }
    if in_word {
        words.push(cur);
    }
    words
}

/// `-Xcompiler` options that hand each of `words` to the host compiler as one argument,
/// whatever it holds.
///
/// nvcc splits an `-Xcompiler` value at commas (and a `-I` value too), and runs the host
/// compiler through `sh`, so a word with a space, a comma or a shell character would reach
/// it cut up or expanded. Checked with nvcc 13.0: a comma inside double quotes does not
/// split, the quotes reach the shell, and nvcc turns `\\` into `\` and `\c` into `c`. So a word
/// that is not plain is written `"…"` with `$`, `` ` ``, `"` and `\` as `\\\c`: nvcc makes that
/// `\c`, which the shell reads inside double quotes as `c`.
pub fn host_compiler_options<S: AsRef<str>>(words: &[S]) -> Vec<String> {
    words
        .iter()
        .map(|w| format!("-Xcompiler={}", quote_list_word(w.as_ref())))
        .collect()
}

fn quote_list_word(w: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "_./+-=:@%".contains(c);
    if !w.is_empty() && w.chars().all(plain) {
        return w.to_string();
    }
    let mut out = String::from("\"");
    for c in w.chars() {
        if matches!(c, '$' | '`' | '"' | '\\') {
            out.push_str("\\\\\\");
        }
        out.push(c);
    }
    out.push('"');
    out
}

/// nvcc reads `NVCC_PREPEND_FLAGS` and `NVCC_APPEND_FLAGS` itself; the driver needs them
/// only to know what nvcc will see (which phase, which outputs).
pub fn env_flags(var: &str) -> Vec<String> {
    std::env::var(var)
        .map(|v| split_response_file(&v))
        .unwrap_or_default()
}

/// The GPU architectures the clang backend can build: those both CUDA 13 (sm_75 and newer)
/// and clang-19 (up to sm_90a) know.
pub const CLANG_ARCHS: &[&str] = &["75", "80", "86", "87", "89", "90", "90a"];

/// Device code for one virtual architecture: PTX generated by clang-19 for `arch`
/// (`--cuda-gpu-arch=sm_<arch>`; its `.target sm_<arch>` is what nvcc's `compute_<arch>`
/// PTX targets), assembled by ptxas into a cubin for each of `sass`, and embedded as PTX
/// when `ptx`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuTarget {
    pub arch: String,
    pub sass: Vec<String>,
    pub ptx: bool,
}

/// The user's nvcc options as the clang backend applies them ([`clang_flags`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClangFlags {
    /// For the host and the device compiles (`-I -D -U -isystem -include -std -w …`).
    pub both: Vec<String>,
    /// For the host compile only (`-Xcompiler …`, options nvcc forwards to its host
    /// compiler).
    pub host: Vec<String>,
    /// For the device compiles only (optimisation, line info, device debug, ftz, fmad).
    pub device: Vec<String>,
    /// For ptxas (`-Xptxas`, `-maxrregcount`, `-lineinfo`, `-G`, `--resource-usage`).
    pub ptxas: Vec<String>,
    /// For fatbinary (`-g` with `-G`).
    pub fatbinary: Vec<String>,
    pub targets: Vec<GpuTarget>,
    /// Options that change nothing with this backend (said with `--kl-verbose`).
    pub ignored: Vec<String>,
}

/// An nvcc option the clang backend cannot honour.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClangFlagError {
    /// The option as the user wrote it.
    pub flag: String,
    pub why: String,
}

impl fmt::Display for ClangFlagError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "--kl-backend=clang cannot build with nvcc option '{}': {}; drop the option, or \
             build with the nvcc backend (without --kl-backend=clang)",
            self.flag, self.why
        )
    }
}
impl std::error::Error for ClangFlagError {}

fn clang_arch(name: &str, flag: &str) -> Result<(bool, String), ClangFlagError> {
    let (virt, num) = if let Some(n) = name.strip_prefix("compute_") {
        (true, n)
    } else if let Some(n) = name.strip_prefix("sm_") {
        (false, n)
    } else {
        return Err(ClangFlagError {
            flag: flag.into(),
            why: format!(
                "'{name}' is not an architecture the clang backend can name (it needs \
                 sm_XX or compute_XX; 'native', 'all' and 'all-major' are not supported)"
            ),
        });
    };
    if !CLANG_ARCHS.contains(&num) {
        return Err(ClangFlagError {
            flag: flag.into(),
            why: format!(
                "clang-19 with CUDA 13 cannot generate code for {name} (it can for {})",
                CLANG_ARCHS
                    .iter()
                    .map(|a| format!("sm_{a}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        });
    }
    Ok((virt, num.to_string()))
}

fn add_target(targets: &mut Vec<GpuTarget>, t: GpuTarget) {
    match targets.iter_mut().find(|x| x.arch == t.arch) {
        Some(x) => {
            for s in t.sass {
                if !x.sass.contains(&s) {
                    x.sass.push(s);
                }
            }
            x.ptx |= t.ptx;
        }
        None => targets.push(t),
    }
}

/// `-code` values for the virtual architecture `arch`: sm_YY → a cubin, compute_<arch> →
/// PTX.
fn code_list(arch: &str, codes: &str, flag: &str) -> Result<GpuTarget, ClangFlagError> {
    let mut t = GpuTarget {
        arch: arch.to_string(),
        sass: Vec::new(),
        ptx: false,
    };
    let codes = codes
        .trim_matches(|c| c == '"' || c == '\'')
        .trim_start_matches('[')
        .trim_end_matches(']');
    for c in codes.split(',').map(str::trim).filter(|c| !c.is_empty()) {
        let (virt, num) = clang_arch(c, flag)?;
        if virt {
            if num != arch {
                return Err(ClangFlagError {
                    flag: flag.into(),
                    why: format!(
                        "PTX for {c} cannot come from compute_{arch} (nvcc refuses it too)"
                    ),
                });
            }
            t.ptx = true;
        } else if !t.sass.contains(&num) {
            t.sass.push(num);
        }
    }
    Ok(t)
}

/// The GPU targets of a command line, as nvcc 13 reads them (checked with `nvcc --dryrun`):
/// no architecture means sm_75 (a cubin and its PTX); `-arch=sm_XX` alone is
/// `-gencode arch=compute_XX,code=[sm_XX,compute_XX]`; `-arch=compute_XX` alone is PTX only;
/// `-arch=compute_XX -code=…` lists the codes; of several `-arch` the last counts;
/// `-gencode` entries add to what `-arch` gives.
fn clang_targets(cl: &CommandLine) -> Result<Vec<GpuTarget>, ClangFlagError> {
    let mut targets = Vec::new();
    let flag_of = |role: Role| {
        cl.args
            .iter()
            .rev()
            .find(|a| a.role() == Some(role))
            .map(|a| a.tokens().join(" "))
            .unwrap_or_default()
    };
    let arch = cl.values(Arch).last();
    let codes: Vec<&str> = cl.values(Code).collect();
    match (arch, codes.is_empty()) {
        (None, false) => {
            return Err(ClangFlagError {
                flag: flag_of(Code),
                why: "--gpu-code needs --gpu-architecture (nvcc refuses it too)".into(),
            })
        }
        (Some(a), true) => {
            let flag = flag_of(Arch);
            let (virt, num) = clang_arch(a, &flag)?;
            let sass = if virt { vec![] } else { vec![num.clone()] };
            add_target(
                &mut targets,
                GpuTarget {
                    arch: num,
                    sass,
                    ptx: true,
                },
            );
        }
        (Some(a), false) => {
            let flag = format!("{} {}", flag_of(Arch), flag_of(Code));
            let (virt, num) = clang_arch(a, &flag)?;
            if !virt {
                return Err(ClangFlagError {
                    flag,
                    why: format!(
                        "with --gpu-code, --gpu-architecture must be a virtual architecture \
                         (compute_{num}), as nvcc requires"
                    ),
                });
            }
            for c in codes {
                add_target(&mut targets, code_list(&num, c, &flag)?);
            }
        }
        (None, true) => {}
    }
    for a in &cl.args {
        let Arg::Flag {
            spec,
            value: Some(v),
            tokens,
        } = a
        else {
            continue;
        };
        if spec.role != Gencode {
            continue;
        }
        let flag = tokens.join(" ");
        let v = v.trim_matches(|c| c == '"' || c == '\'');
        let parsed = v.strip_prefix("arch=").and_then(|r| r.split_once(",code="));
        let Some((arch, codes)) = parsed else {
            return Err(ClangFlagError {
                flag,
                why: "expected arch=compute_XX,code=… ".into(),
            });
        };
        let (virt, num) = clang_arch(arch, &flag)?;
        if !virt {
            return Err(ClangFlagError {
                flag,
                why: format!("arch= must be a virtual architecture (compute_{num})"),
            });
        }
        add_target(&mut targets, code_list(&num, codes, &flag)?);
    }
    if targets.is_empty() {
        // nvcc 13's default.
        targets.push(GpuTarget {
            arch: "75".into(),
            sass: vec!["75".into()],
            ptx: true,
        });
    }
    Ok(targets)
}

/// Translates the options of an nvcc command line for the clang backend: where each goes
/// (host compile, device compile, ptxas, fatbinary), which change nothing here, and the
/// first one it cannot honour. Options about outputs, modes, dependency files, libraries
/// and linking are the driver's, and the link is nvcc's as with the nvcc backend.
///
/// The option table of docs/clang-backend.md says the same.
pub fn clang_flags(cl: &CommandLine) -> Result<ClangFlags, ClangFlagError> {
    let mut out = ClangFlags {
        targets: clang_targets(cl)?,
        ..ClangFlags::default()
    };
    let forward_unknown = cl.args.iter().any(|a| {
        matches!(a, Arg::Flag { spec, .. }
            if spec.long == "forward-unknown-to-host-compiler" || spec.long == "forward-unknown-opts")
    });
    let device_debug = cl.has(DeviceDebug);
    if device_debug {
        out.device.extend(["-O0", "-g"].map(String::from));
        out.ptxas
            .extend(["-g", "--dont-merge-basicblocks", "--return-at-end"].map(String::from));
        out.fatbinary.push("-g".into());
    } else {
        // nvcc optimises device code whatever -O says (-O is for the host compiler).
        out.device.push("-O3".into());
        if cl.has(LineInfo) {
            out.device.push("-gline-tables-only".into());
            out.ptxas.push("-lineinfo".into());
        }
    }
    for a in &cl.args {
        let (spec, value, tokens) = match a {
            Arg::Input(_) => continue,
            Arg::Unknown(t) if forward_unknown => {
                out.host.push(t.clone());
                continue;
            }
            Arg::Unknown(t) => {
                return Err(ClangFlagError {
                    flag: t.clone(),
                    why: "nvcc does not know this option either".into(),
                })
            }
            Arg::Flag {
                spec,
                value,
                tokens,
            } => (*spec, value.as_deref(), tokens),
        };
        let flag = tokens.join(" ");
        let v = value.unwrap_or("");
        let refuse = |why: &str| {
            Err(ClangFlagError {
                flag: flag.clone(),
                why: why.to_string(),
            })
        };
        match spec.role {
            // The driver's: what to build, where, dependency files, the link, klaraptor's
            // view of the options files (already expanded), the architectures (above).
            Mode(_) | Output | Deps(_) | DepsFile | DepsTarget | DepsPhony | OptionsFile
            | Library | LibraryDir | Arch | Code | Gencode | LineInfo | DeviceDebug => {}
            Forward(Tool::Linker | Tool::Nvlink | Tool::Archiver) => {}
            IncludeDir => out.both.push(format!("-I{v}")),
            Define => out.both.push(format!("-D{v}")),
            Undefine => out.both.push(format!("-U{v}")),
            SystemInclude => out.both.extend(["-isystem".to_string(), v.to_string()]),
            PreInclude => out.both.extend(["-include".to_string(), v.to_string()]),
            Std => out.both.push(format!("-std={v}")),
            // The host's; the device code is optimised by the rules above.
            Optimize => {}
            HostDebug => out.host.push("-g".into()),
            Forward(Tool::HostCompiler) => {
                out.host
                    .extend(v.split(',').filter(|s| !s.is_empty()).map(String::from));
            }
            Forward(Tool::Ptxas) => {
                out.ptxas
                    .extend(v.split(',').filter(|s| !s.is_empty()).map(String::from));
            }
            Language if v == "cu" => {}
            Language => return refuse("the clang backend compiles CUDA sources only (-x cu)"),
            HostCompiler => out
                .ignored
                .push(format!("{flag} (the host compiler is clang++-19)")),
            Rdc if v == "false" => {}
            Rdc => return refuse("relocatable device code is not supported by the clang backend"),
            Forward(Tool::Cudafe) => {
                return refuse("the clang backend does not run cudafe++, so it has nothing to pass")
            }
            Forward(Tool::RunArgs) => {}
            Version | Help => {}
            DryRun => {
                return refuse("the clang backend runs its commands; use --kl-verbose to see them")
            }
            Verbose => out.ignored.push(format!("{flag} (use --kl-verbose)")),
            Other => match spec.long {
                "machine" if v == "64" => {}
                "maxrregcount" => out.ptxas.push(format!("-maxrregcount={v}")),
                "resource-usage" => out.ptxas.push("-v".into()),
                "disable-warnings" => out.both.push("-w".into()),
                "Wno-deprecated-declarations" => {
                    out.both.push("-Wno-deprecated-declarations".into())
                }
                "Wreorder" => out.both.push("-Wreorder".into()),
                "Werror" if v.split(',').all(|w| w == "all-warnings") => {
                    out.both.push("-Werror".into())
                }
                "ftemplate-depth" => out.both.push(format!("-ftemplate-depth={v}")),
                "ftemplate-backtrace-limit" => {
                    out.both.push(format!("-ftemplate-backtrace-limit={v}"))
                }
                // As nvcc: the runtime API's per-thread entry points for the host code
                // (the macro), and the stubs' launches through cudaLaunchKernel_ptsz (a
                // cc1 option: clang-19's driver passes -fgpu-default-stream for HIP only).
                "default-stream" if v == "per-thread" => {
                    out.both
                        .push("-DCUDA_API_PER_THREAD_DEFAULT_STREAM=1".into());
                    out.host
                        .extend(["-Xclang", "-fgpu-default-stream=per-thread"].map(String::from));
                }
                // nvcc 13 takes "null" as a deprecated spelling of "legacy".
                "default-stream" if v == "legacy" || v == "null" => {}
                "ftz" if v == "true" => out.device.push("-fgpu-flush-denormals-to-zero".into()),
                "ftz" if v == "false" => out.device.push("-fno-gpu-flush-denormals-to-zero".into()),
                "fmad" if v == "true" => out.device.push("-ffp-contract=fast".into()),
                "fmad" if v == "false" => out.device.push("-ffp-contract=off".into()),
                "prec-div" | "prec-sqrt" if v == "true" => {}
                "profile" => out.host.push("-pg".into()),
                "no-exceptions" => out.host.push("-fno-exceptions".into()),
                "compiler-bindir"
                | "allow-unsupported-compiler"
                | "Wno-deprecated-gpu-targets"
                | "expt-relaxed-constexpr"
                | "expt-extended-lambda"
                | "extended-lambda"
                | "restrict"
                | "threads"
                | "split-compile"
                | "split-compile-extended"
                | "forward-unknown-to-host-compiler"
                | "forward-unknown-to-host-linker"
                | "forward-unknown-opts"
                | "no-device-link"
                | "dont-use-profile"
                | "shared"
                | "cudart"
                | "cudadevrt" => out.ignored.push(flag.clone()),
                "use_fast_math" | "prec-div" | "prec-sqrt" => {
                    return refuse(
                        "clang-19 has no equivalent that computes the same (its -ffast-math \
                         also assumes no NaNs or infinities)",
                    )
                }
                "keep" | "keep-dir" | "save-temps" => {
                    return refuse("use --kl-keep to keep the clang backend's intermediate files")
                }
                _ => return refuse("the clang backend has no translation for it"),
            },
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> CommandLine {
        CommandLine::parse(split_response_file(s)).unwrap()
    }

    #[test]
    fn glued_short_options_prefer_the_longest_name() {
        let c = parse("-include cstdio -Idir -isystem /x");
        assert_eq!(c.values(PreInclude).collect::<Vec<_>>(), ["cstdio"]);
        assert_eq!(c.values(IncludeDir).collect::<Vec<_>>(), ["dir"]);
        assert_eq!(c.values(SystemInclude).collect::<Vec<_>>(), ["/x"]);
    }

    #[test]
    fn a_value_on_a_switch_is_not_that_switch() {
        let c = parse("-c=1");
        assert_eq!(c.args, vec![Arg::Unknown("-c=1".into())]);
    }

    #[test]
    fn missing_value_is_an_error() {
        assert_eq!(
            CommandLine::parse(["-o"]).unwrap_err(),
            ArgError::MissingValue("-o".into())
        );
    }

    #[test]
    fn several_inputs_for_one_output_is_refused_for_per_input_phases_only() {
        for line in [
            "-c a.cu b.cu -o x.o",
            "-c a.cu b.o -o x.o",
            "-dc a.cu b.cu -o x.o",
            "-ptx a.cu b.cu -o x.ptx",
            "-E a.cu b.cu -o x.ii",
            "-M a.cu b.cu -o x.d",
        ] {
            assert!(parse(line).several_inputs_for_one_output(), "{line}");
        }
        for line in [
            "-c a.cu -o x.o",
            "-c a.cu b.cu",
            "a.cu b.cu -o app",
            "-lib a.cu b.cu -o x.a",
            "-dlink a.o b.o -o x.o",
            "-c a.cu -Xlinker b.o -o x.o",
        ] {
            assert!(!parse(line).several_inputs_for_one_output(), "{line}");
        }
    }

    #[test]
    fn host_compiler_options_keep_each_word_whole() {
        assert_eq!(
            host_compiler_options(&["-iquote", "src/dir", ""]),
            [
                "-Xcompiler=-iquote",
                "-Xcompiler=src/dir",
                "-Xcompiler=\"\""
            ]
        );
        assert_eq!(
            host_compiler_options(&["sp ace,dir", "a$b\"c\\d`e'f"]),
            [
                "-Xcompiler=\"sp ace,dir\"",
                "-Xcompiler=\"a\\\\\\$b\\\\\\\"c\\\\\\\\d\\\\\\`e'f\""
            ]
        );
    }

    #[test]
    fn response_file_quoting() {
        assert_eq!(
            split_response_file("-D 'A=1 2' \"-Ib c\" x\\ y\n-c"),
            ["-D", "A=1 2", "-Ib c", "x y", "-c"]
        );
    }

    #[test]
    fn kl_help_lists_every_option_of_our_own() {
        // Each option the parser knows is in the help, and each option the help lists (but
        // --kl-help, which main_with answers before parsing) is known to the parser.
        let listed: Vec<&str> = KL_HELP
            .lines()
            .filter_map(|l| l.trim_start().strip_prefix("--kl-"))
            .map(|rest| rest.split_whitespace().next().unwrap())
            .collect();
        assert_eq!(listed.len(), 8, "{listed:?}");
        for opt in &listed {
            let word = format!(
                "--kl-{}",
                opt.replace("<path>", "x").replace("nvcc|clang", "nvcc")
            );
            if word == "--kl-help" {
                continue;
            }
            let cl = CommandLine::parse([word.as_str()]).unwrap_or_else(|e| panic!("{word}: {e}"));
            assert_eq!(cl.kl.len(), 1, "{word}");
        }
        let e = CommandLine::parse(["--kl-nonsense"])
            .unwrap_err()
            .to_string();
        for opt in &listed {
            assert!(
                e.contains(&format!("--kl-{opt}")),
                "{opt} missing from: {e}"
            );
        }
        assert!(
            KL_HELP.lines().all(|l| l.chars().count() <= 104),
            "a line of the help is too long"
        );
    }
}

#[cfg(test)]
mod clang_flag_tests {
    use super::*;

    fn flags(s: &str) -> Result<ClangFlags, ClangFlagError> {
        clang_flags(&CommandLine::parse(split_response_file(s)).unwrap())
    }

    fn t(arch: &str, sass: &[&str], ptx: bool) -> GpuTarget {
        GpuTarget {
            arch: arch.into(),
            sass: sass.iter().map(|s| s.to_string()).collect(),
            ptx,
        }
    }

    fn targets(s: &str) -> Vec<GpuTarget> {
        flags(s).unwrap().targets
    }

    fn refused(s: &str) -> ClangFlagError {
        flags(s).expect_err(s)
    }

    #[test]
    fn architectures_as_nvcc_13_reads_them() {
        assert_eq!(targets("-c x.cu"), [t("75", &["75"], true)]);
        assert_eq!(targets("-arch=sm_90 -c x.cu"), [t("90", &["90"], true)]);
        assert_eq!(
            targets("--gpu-architecture compute_80"),
            [t("80", &[], true)]
        );
        assert_eq!(
            targets("-arch=compute_80 -code=sm_86,compute_80"),
            [t("80", &["86"], true)]
        );
        assert_eq!(
            targets("-arch=compute_80 -code=sm_80,sm_86"),
            [t("80", &["80", "86"], false)]
        );
        assert_eq!(
            targets(
                "-gencode arch=compute_80,code=sm_80 \
                 \"--generate-code=arch=compute_90,code=[sm_90,compute_90]\""
            ),
            [t("80", &["80"], false), t("90", &["90"], true)]
        );
        assert_eq!(
            targets("-gencode=arch=compute_90a,code=sm_90a"),
            [t("90a", &["90a"], false)]
        );
        // -arch and -gencode add up; of several -arch the last counts.
        assert_eq!(
            targets("-arch=sm_80 -gencode arch=compute_90,code=sm_90"),
            [t("80", &["80"], true), t("90", &["90"], false)]
        );
        assert_eq!(targets("-arch=sm_80 -arch=sm_90"), [t("90", &["90"], true)]);
        // The same virtual architecture twice is one PTX compile.
        assert_eq!(
            targets("-gencode arch=compute_80,code=sm_80 -gencode arch=compute_80,code=sm_86"),
            [t("80", &["80", "86"], false)]
        );
    }

    #[test]
    fn architectures_it_cannot_build() {
        let e = refused("-arch=sm_100 -c x.cu");
        assert_eq!(e.flag, "-arch=sm_100");
        assert!(e.why.contains("cannot generate code for sm_100"), "{e}");
        assert!(e.why.contains("sm_90a"), "{e}");
        for (line, flag) in [
            ("-arch=native", "-arch=native"),
            ("-arch all-major", "-arch all-major"),
            ("-code=sm_90", "-code=sm_90"),
            ("-arch=sm_90 -code=sm_90", "-arch=sm_90 -code=sm_90"),
            (
                "-arch=compute_80 -code=compute_90",
                "-arch=compute_80 -code=compute_90",
            ),
            (
                "-gencode arch=sm_90,code=sm_90",
                "-gencode arch=sm_90,code=sm_90",
            ),
            ("-gencode sm_90", "-gencode sm_90"),
        ] {
            assert_eq!(refused(line).flag, flag, "{line}");
        }
    }

    #[test]
    fn where_each_option_goes() {
        let f = flags(
            "-O2 -DX=1 -UY -Iinc -isystem /sys -include pre.h -std=c++17 -g -lineinfo \
             -Xcompiler -fPIC,-Wall -Xptxas -v,-O2 -maxrregcount=32 -ftz=true -fmad=false \
             --default-stream per-thread -w -ccbin g++ --expt-relaxed-constexpr -lcublas \
             -L/opt/lib -Xlinker -rpath=/x -MD -MF x.d -c x.cu -o x.o",
        )
        .unwrap();
        assert_eq!(
            f.both,
            [
                "-DX=1",
                "-UY",
                "-Iinc",
                "-isystem",
                "/sys",
                "-include",
                "pre.h",
                "-std=c++17",
                "-DCUDA_API_PER_THREAD_DEFAULT_STREAM=1",
                "-w"
            ]
        );
        assert_eq!(
            f.host,
            [
                "-g",
                "-fPIC",
                "-Wall",
                "-Xclang",
                "-fgpu-default-stream=per-thread"
            ]
        );
        assert_eq!(
            f.device,
            [
                "-O3",
                "-gline-tables-only",
                "-fgpu-flush-denormals-to-zero",
                "-ffp-contract=off"
            ]
        );
        assert_eq!(f.ptxas, ["-lineinfo", "-v", "-O2", "-maxrregcount=32"]);
        assert!(f.fatbinary.is_empty());
        assert_eq!(
            f.ignored,
            [
                "-ccbin g++ (the host compiler is clang++-19)",
                "--expt-relaxed-constexpr"
            ]
        );
    }

    #[test]
    fn device_debug() {
        let f = flags("-G -lineinfo -c x.cu").unwrap();
        assert_eq!(f.device, ["-O0", "-g"]);
        assert_eq!(
            f.ptxas,
            ["-g", "--dont-merge-basicblocks", "--return-at-end"]
        );
        assert_eq!(f.fatbinary, ["-g"]);
    }

    #[test]
    fn unknown_options_go_to_the_host_compiler_only_when_nvcc_would_forward_them() {
        let f = flags("-forward-unknown-to-host-compiler -fopenmp -c x.cu").unwrap();
        assert_eq!(f.host, ["-fopenmp"]);
        let e = refused("-fopenmp -c x.cu");
        assert_eq!(e.flag, "-fopenmp");
        assert!(
            e.to_string().contains("nvcc does not know this option"),
            "{e}"
        );
    }

    #[test]
    fn options_without_a_translation_are_refused_by_name() {
        for line in [
            "-use_fast_math",
            "--use_fast_math",
            "-prec-div=false",
            "-Xcudafe --diag_suppress=177",
            "--keep",
            "-save-temps",
            "-dopt on",
            "--diag-suppress 177",
            "-m32",
            "-x c++",
            "-Werror cross-execution-space-call",
            "--dryrun",
        ] {
            let e = refused(&format!("{line} -c x.cu"));
            assert_eq!(e.flag, line, "{line}");
            let msg = e.to_string();
            assert!(
                msg.starts_with(&format!(
                    "--kl-backend=clang cannot build with nvcc option '{line}': "
                )) && msg.ends_with("build with the nvcc backend (without --kl-backend=clang)"),
                "{msg}"
            );
        }
        // These have one.
        for line in [
            "-Werror all-warnings",
            "-prec-div=true",
            "-m64",
            "-x cu",
            "-rdc=false",
            "--default-stream null",
        ] {
            flags(&format!("{line} -c x.cu")).unwrap_or_else(|e| panic!("{line}: {e}"));
        }
    }

    #[test]
    fn the_backend_option() {
        let cl = CommandLine::parse(["--kl-backend=clang", "-c", "x.cu"]).unwrap();
        assert_eq!(cl.backend(), Backend::Clang);
        let cl = CommandLine::parse(["--kl-backend=clang", "--kl-backend=nvcc"]).unwrap();
        assert_eq!(cl.backend(), Backend::Nvcc);
        assert_eq!(
            CommandLine::parse(["x.cu"]).unwrap().backend(),
            Backend::Nvcc
        );
        let e = CommandLine::parse(["--kl-backend=gcc"]).unwrap_err();
        assert!(e.to_string().contains("--kl-backend=nvcc|clang"), "{e}");
    }
}
