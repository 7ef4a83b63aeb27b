//! `klaraptor validate <binary> --sizes "<args>" …`: the accuracy study for a user's own
//! program. For each run (the program's arguments), every annotated kernel the program
//! launches is timed at every candidate block shape, at the data sizes the run launches it
//! with, and klaraptor's choice, the shape the runtime's refinement settled on (`settled`:
//! the binary runs with a fresh choices cache of its own, again until no launch key is left
//! unsettled at exit or `--settle-runs` runs, as a user's successive runs would), the
//! profile's own fastest shape at the nearest profiled size
//! (`profiled_best`, from the profile-database entry the rational program was built from:
//! [`validate::manifest_profile`]), the program's own shape and the block size
//! `cudaOccupancyMaxPotentialBlockSize` suggests (computed, not asked of the GPU:
//! [`validate::computed_occupancy_pick`]) are compared with the fastest; and, where that
//! profile entry names the program's own block (issue 38), `program_profiled`: that block at
//! the nearest profiled size ([`validate::program_profiled`]). Where the link's decision keeps
//! the program's launch ([`crate::rational::RationalProgram::program_chooses`]), klaraptor's
//! pick is the program's own shape the runtime then launches
//! ([`validate::program_chooses_pick`]).
//!
//! Per run, in `<out>/run<i>/`:
//!
//! ```text
//! args                       the program's arguments, as given to --sizes
//! records/                   the sweep: the profiling variant run under the time-only
//!                            collector with a plan of every candidate shape (the profiling
//!                            runtime's layout: kernels.tsv, <stem>.jsonl)
//! variant.log                its KLARAPTOR_LOG: the program's own block per kernel × size
//! variant.{out,err,status}   its output and exit status
//! binary.log                 KLARAPTOR_LOG of the binary's runs, one after another:
//!                            klaraptor's choice, and where it settled (`refine:` lines)
//! binary.{out,err,status}    of its last run
//! choices/                   the choices cache those runs shared
//! wholerun/f<j>.force        the whole-run measurement (unless --no-whole-run): forced
//!                            configuration j, one shape forced per kernel (lines `<mangled>
//!                            <BXxBYxBZ>`; KLARAPTOR_FORCE), as many configurations as
//!                            needed for every compared method's shape of every key
//! wholerun/f<j>.r<k>.times.jsonl
//!                            repeat k (1..=--whole-runs) of the binary run with
//!                            configuration j forced: its KLARAPTOR_LAUNCH_TIMES, per key the
//!                            kernel time of every launch summed (validate::LaunchTimes)
//! wholerun/f<j>.r<k>.{log,out,err,status}
//! ```
//!
//! With `--whole-runs 1` a configuration's one run is `f<j>.times.jsonl`,
//! `f<j>.{log,out,err,status}` (no `.r<k>`), the layout of the directories made before
//! repeats, which `--from` reads as one run per configuration.
//!
//! The whole-run measurement is what the user gets: the sweep times one launch of a key
//! (its first) per shape, repeated; a key whose launches differ (a loop whose work shrinks
//! with a step the data values do not show) or that is launched a few times only is
//! measured by the whole run's kernel time of the key with each method's shape forced:
//! default (the program's own), klaraptor (the model's choice), profiled_best and settled.
//! One whole run of a key made of short kernels (2-10 us launches between synchronisations)
//! spread by +-8 % from run to run on an H200, more than the methods differ; so each
//! configuration runs `--whole-runs` times (default 3), the repeats interleaved (f1.r1, f2.r1,
//! …, f1.r2, f2.r2, …: a slow drift of the GPU hits every shape alike), and a method's
//! whole-run time is the median over its repeats, with their spread
//! ([`validate::whole_run_pick`]).
//!
//! The profile database is `--profile-db`, else the one klaraptor-cc would have used when
//! linking in the binary's directory (`KLARAPTOR_PROFILE_DB`, the nearest
//! `klaraptor-profiles/` at or above that directory, the per-user cache).
//!
//! `--from <out>` analyses such a directory again (made on another machine, or before a
//! rebuild) without running anything. The comparison itself is [`crate::validate`], shared
//! with the accuracy study (bench/accuracy).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde::Serialize;

use klaraptor_profiler::db::{LocateEnv, ProfileDb};

use crate::rational::{self, RationalProgram};
use crate::validate::{self, shape_text, Case, Decision, Method, Pick};
use klaraptor_spec::link::{scan_bytes, LinkSpec};

/// What tells a profiling variant from the program itself: the profiling runtime
/// (runtime-shim/src/klaraptor_prof.c) reads this variable.
const VARIANT_MARK: &[u8] = b"KLARAPTOR_PROFILE_PLAN";
/// What tells a collector with the time-only mode.
const TIME_ONLY_MARK: &[u8] = b"KLARAPTOR_COLLECT_TIME_ONLY";

#[derive(clap::Args, Debug)]
pub struct ValidateArgs {
    /// The program, linked by klaraptor-cc (its rational programs are in
    /// `<binary>.klaraptor/`).
    pub binary: PathBuf,
    /// The program's command-line arguments for one run (what sets the data sizes), e.g.
    /// --sizes "1000 1000". Give it once per run. It may begin with `-` (--sizes "-n 4096").
    #[arg(
        long = "sizes",
        value_name = "ARGS",
        required_unless_present = "from",
        allow_hyphen_values = true
    )]
    pub sizes: Vec<String>,
    /// The program's profiling variant (default: `<binary>.klaraptor/<name>.profiling`,
    /// which klaraptor-cc keeps when it profiled or was given --kl-profiling-variant).
    #[arg(long, value_name = "PATH")]
    pub variant: Option<PathBuf>,
    /// The collector library (default: KLARAPTOR_COLLECTOR, else
    /// libklaraptor_collector.so beside this executable).
    #[arg(long, value_name = "LIB")]
    pub collector: Option<PathBuf>,
    /// Only this kernel (name in the source: every instance of a template; an instance's
    /// run-time name, e.g. `stencil1d<3>`; or its mangled name); repeatable. Default: every
    /// annotated kernel.
    #[arg(long = "kernel", value_name = "KERNEL")]
    pub kernels: Vec<String>,
    /// Timed launches per shape (the median is kept).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub runs: u32,
    /// Untimed launches per shape before the timed ones.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(0..=1000))]
    pub warmup: u32,
    /// Distinct data sizes swept per kernel per run (a kernel launched at more sizes is
    /// timed at its first ones).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub max_sizes: u32,
    /// Stop a program run after this many seconds (0: no limit).
    #[arg(long, default_value_t = 0)]
    pub timeout: u64,
    /// Runs of the binary at most, for its launch keys to settle (the runtime spends at most
    /// KLARAPTOR_REFINE_BUDGET of a run's kernel time on tries and goes on in the next run).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub settle_runs: u32,
    /// Keep the runs' records and logs in this directory (default: a temporary one).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Analyse the runs kept in this directory (an earlier --out) instead of running.
    #[arg(
        long,
        value_name = "DIR",
        conflicts_with_all = ["sizes", "variant", "collector", "out", "whole_runs"]
    )]
    pub from: Option<PathBuf>,
    /// Write the results as JSON to this file.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Compare with the rational program made for this device (a substring of its name),
    /// when the logs do not say which GPU ran.
    #[arg(long)]
    pub device: Option<String>,
    /// The profile database the binary's rational programs were built from, for the
    /// profiled_best method (default: the one klaraptor-cc finds from the binary's
    /// directory: KLARAPTOR_PROFILE_DB, the nearest klaraptor-profiles/, the user cache).
    #[arg(long, value_name = "DIR")]
    pub profile_db: Option<PathBuf>,
    /// Leave out the whole-run measurement (the binary run again per distinct shape of a
    /// kernel's methods, that shape forced, every launch timed).
    #[arg(long)]
    pub no_whole_run: bool,
    /// Runs of the binary per forced shape in the whole-run measurement (1 to 50), the
    /// repeats interleaved across the shapes; a method's whole-run time is their median
    /// (1: one run each).
    #[arg(
        long,
        value_name = "N",
        default_value_t = 3,
        value_parser = clap::value_parser!(u32).range(1..=50),
        conflicts_with = "no_whole_run"
    )]
    pub whole_runs: u32,
}

/// One run of the program.
#[derive(Debug, Clone, Serialize)]
pub struct RunInfo {
    pub id: String,
    pub args: String,
    /// Exit status of the profiling variant and of the binary ("0", "1", "signal 9",
    /// "timeout", or "" when unknown).
    pub variant_status: String,
    pub binary_status: String,
}

/// What a validation found.
#[derive(Debug, Clone, Default)]
pub struct Validation {
    pub program: String,
    /// The GPU the runs logged.
    pub device: Option<String>,
    pub runs: Vec<RunInfo>,
    pub cases: Vec<Case>,
    /// Things a reader should know (kernels not swept, sizes beyond --max-sizes …).
    pub notes: Vec<String>,
    /// The collector recorded hardware counters (not its time-only mode).
    pub counters_seen: bool,
}

pub fn run(args: ValidateArgs) -> Result<ExitCode> {
    let specs = binary_specs(&args.binary)?;
    let chosen = select_kernels(&specs, &args.kernels)?;
    let manifests = manifests_of(&args.binary)?;
    let db = profile_db(&args.binary, args.profile_db.as_deref());
    let analyze_dir = |dir: &Path, program: &str| {
        analyze(
            dir,
            program,
            &specs,
            &chosen,
            &manifests,
            args.device.as_deref(),
            db.as_ref().ok(),
        )
    };
    let tmp;
    let dir = if let Some(from) = &args.from {
        from.clone()
    } else {
        let variant = find_variant(&args.binary, args.variant.as_deref(), &chosen)?;
        if !klaraptor_profiler::gpu_profile::gpu_present() {
            bail!(
                "no GPU on this machine (no /dev/nvidiactl or /dev/nvidia0{}): run klaraptor \
                 validate where the program runs, or run it there with --out <dir> and analyse \
                 that directory here with --from <dir>",
                if std::env::var_os("KLARAPTOR_NO_GPU").is_some() {
                    ", or KLARAPTOR_NO_GPU is set"
                } else {
                    ""
                }
            );
        }
        let collector = find_collector(args.collector.as_deref())?;
        let out = match &args.out {
            Some(o) => o.clone(),
            None => {
                tmp = tempfile::Builder::new()
                    .prefix("klaraptor-validate-")
                    .tempdir()?;
                tmp.path().to_path_buf()
            }
        };
        sweep_runs(&args, &variant, &collector, &chosen, &out)?;
        if !args.no_whole_run {
            let first = analyze_dir(&out, "")?;
            whole_runs(&args, &first, &out)?;
        }
        out
    };
    let program = args
        .binary
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut v = analyze_dir(&dir, &program)?;
    if let Err(e) = &db {
        v.notes
            .push(format!("no profile database ({e:#}): no profiled_best"));
    }
    klaraptor_profiler::console::stdout_lossy(&table(&v));
    if let Some(j) = &args.json {
        let text = serde_json::to_string_pretty(&json(&v, &args.binary))? + "\n";
        std::fs::write(j, text).with_context(|| format!("writing {}", j.display()))?;
        klaraptor_profiler::kl_eprintln!("klaraptor validate: wrote {}", j.display());
    }
    if args.out.is_some() {
        klaraptor_profiler::kl_eprintln!(
            "klaraptor validate: the runs' records and logs are in {}",
            dir.display()
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// The kernel specs of a binary linked by klaraptor-cc.
pub fn binary_specs(binary: &Path) -> Result<Vec<LinkSpec>> {
    let bytes = std::fs::read(binary).with_context(|| format!("reading {}", binary.display()))?;
    let specs = scan_bytes(&bytes, binary)?;
    if specs.is_empty() {
        bail!(
            "{} was not built by klaraptor-cc (it holds no klaraptor kernel specs): build it with \
             klaraptor-cc (e.g. `make NVCC=klaraptor-cc`) from sources with annotated kernels",
            binary.display()
        );
    }
    Ok(specs)
}

/// Whether `--kernel w` names `s`: its source name (every instance of a template), its
/// run-time name (`stencil1d<3>`) or its mangled name.
fn names_spec(w: &str, s: &LinkSpec, specs: &[LinkSpec]) -> bool {
    w == s.name || w == s.mangled || w == kernel_name(s, specs).instance
}

/// The specs of the kernels `wanted` names (all when empty).
pub fn select_kernels(specs: &[LinkSpec], wanted: &[String]) -> Result<Vec<LinkSpec>> {
    let mut out: Vec<LinkSpec> = Vec::new();
    for s in specs {
        if out.iter().any(|o| o.mangled == s.mangled) {
            continue;
        }
        if wanted.is_empty() || wanted.iter().any(|w| names_spec(w, s, specs)) {
            out.push(s.clone());
        }
    }
    for w in wanted {
        if !specs.iter().any(|s| names_spec(w, s, specs)) {
            let mut known: Vec<String> = specs
                .iter()
                .map(|s| kernel_name(s, specs).instance)
                .collect();
            known.sort();
            known.dedup();
            bail!(
                "--kernel {w}: the binary has no annotated kernel of that name (it has {})",
                known.join(", ")
            );
        }
    }
    Ok(out)
}

/// The rational programs beside the binary (none when it has none).
pub fn manifests_of(binary: &Path) -> Result<Vec<RationalProgram>> {
    let dir = rational::models_dir(binary);
    if !dir.is_dir() {
        return Ok(Vec::new());
    }
    Ok(rational::load_dir(&dir)?
        .into_iter()
        .map(|(_, p)| p)
        .collect())
}

/// The profile database to read the binary's profiles from: `given`, else the one
/// klaraptor-cc finds when it links in the binary's directory.
pub fn profile_db(binary: &Path, given: Option<&Path>) -> Result<ProfileDb> {
    if let Some(g) = given {
        if !g.is_dir() {
            bail!("--profile-db {}: not a directory", g.display());
        }
        return Ok(ProfileDb::open(g)?);
    }
    let mut env = LocateEnv::from_process()?;
    let dir = binary
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    env.cwd = std::fs::canonicalize(dir).unwrap_or_else(|_| env.cwd.join(dir));
    Ok(ProfileDb::locate_in(&env)?)
}

/// The profiling variant to sweep with, checked against the binary's kernels.
pub fn find_variant(binary: &Path, given: Option<&Path>, kernels: &[LinkSpec]) -> Result<PathBuf> {
    let path = match given {
        Some(p) => p.to_path_buf(),
        None => {
            let p = crate::rational::kept_variant(binary);
            if !p.is_file() {
                bail!(
                    "no profiling variant of {b}: {p} does not exist (klaraptor-cc keeps one \
                     there when its link profiled, or when it is given \
                     --kl-profiling-variant=<path>). Relink the program with klaraptor-cc and \
                     --kl-profiling-variant=<path> added to the link command (one more link, no \
                     GPU needed), then run validate again or pass --variant <path>",
                    b = binary.display(),
                    p = p.display()
                );
            }
            p
        }
    };
    let bytes = std::fs::read(&path)
        .with_context(|| format!("reading the profiling variant {}", path.display()))?;
    if !bytes.windows(VARIANT_MARK.len()).any(|w| w == VARIANT_MARK) {
        bail!(
            "{} is not a profiling variant (no profiling runtime in it): make one with \
             klaraptor-cc --kl-profiling-variant=<path> at the program's link",
            path.display()
        );
    }
    let vspecs = scan_bytes(&bytes, &path)?;
    for k in kernels {
        match vspecs.iter().find(|s| s.mangled == k.mangled) {
            Some(s) if s.code_hash == k.code_hash => {}
            Some(_) => bail!(
                "the profiling variant {} was built from other code of kernel {} than the \
                 binary: relink both from the same objects (klaraptor-cc … \
                 --kl-profiling-variant=<path>)",
                path.display(),
                kernel_name(k, kernels).instance
            ),
            None => bail!(
                "the profiling variant {} has no kernel {}: it is not a variant of this binary",
                path.display(),
                kernel_name(k, kernels).instance
            ),
        }
    }
    Ok(path)
}

/// The collector library to time with.
pub fn find_collector(given: Option<&Path>) -> Result<PathBuf> {
    let p = match given {
        Some(p) => p.to_path_buf(),
        None => klaraptor_profiler::gpu_profile::collector_path().context(
            "no collector: pass --collector <path of libklaraptor_collector.so>, set \
             KLARAPTOR_COLLECTOR, or put libklaraptor_collector.so beside klaraptor (cargo \
             build --release -p klaraptor-collector builds it)",
        )?,
    };
    let bytes =
        std::fs::read(&p).with_context(|| format!("reading the collector {}", p.display()))?;
    if !bytes
        .windows(TIME_ONLY_MARK.len())
        .any(|w| w == TIME_ONLY_MARK)
    {
        klaraptor_profiler::kl_eprintln!(
            "klaraptor validate: warning: {} has no time-only mode ({}): every shape will also \
             run the profiler's passes, which takes much longer (the times are still event \
             times)",
            p.display(),
            String::from_utf8_lossy(TIME_ONLY_MARK)
        );
    }
    Ok(p)
}

/// The plan of an exhaustive search: every candidate shape of each kernel. Shapes the
/// device or the kernel's constraints refuse are recorded as refused by the runtime.
pub fn plan_text(kernels: &[LinkSpec]) -> String {
    let mut s = String::from("# klaraptor validate: every candidate shape\n");
    for k in kernels {
        s.push_str(&k.mangled);
        for b in rational::candidates(k.dim) {
            s.push(' ');
            s.push_str(&shape_text(b));
        }
        s.push('\n');
    }
    s
}

fn status_text(s: Option<std::process::ExitStatus>) -> String {
    use std::os::unix::process::ExitStatusExt;
    match s {
        None => "timeout".into(),
        Some(s) => match (s.code(), s.signal()) {
            (Some(c), _) => c.to_string(),
            (None, Some(sig)) => format!("signal {sig}"),
            _ => "?".into(),
        },
    }
}

/// Runs `cmd` with its output into `<dir>/<name>.out|.err`; `None` when it ran past
/// `timeout` (then it is killed).
fn run_to_files(
    mut cmd: Command,
    dir: &Path,
    name: &str,
    timeout: Option<Duration>,
) -> Result<Option<std::process::ExitStatus>> {
    let out = std::fs::File::create(dir.join(format!("{name}.out")))?;
    let err = std::fs::File::create(dir.join(format!("{name}.err")))?;
    cmd.stdin(Stdio::null()).stdout(out).stderr(err);
    let mut child = cmd
        .spawn()
        .with_context(|| format!("cannot run {:?}", cmd.get_program()))?;
    let start = Instant::now();
    loop {
        if let Some(s) = child.try_wait()? {
            return Ok(Some(s));
        }
        if timeout.is_some_and(|t| start.elapsed() > t) {
            child.kill()?;
            child.wait()?;
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let v: Vec<&str> = text.lines().collect();
    v[v.len().saturating_sub(lines)..].join("\n")
}

fn sweep_runs(
    args: &ValidateArgs,
    variant: &Path,
    collector: &Path,
    kernels: &[LinkSpec],
    out: &Path,
) -> Result<()> {
    let abs = |p: &Path| std::fs::canonicalize(p).with_context(|| format!("{}", p.display()));
    let variant = abs(variant)?;
    let binary = abs(&args.binary)?;
    let collector = abs(collector)?;
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let out = abs(out)?;
    let plan = out.join("plan");
    std::fs::write(&plan, plan_text(kernels))?;
    let timeout = (args.timeout > 0).then(|| Duration::from_secs(args.timeout));
    let names: Vec<String> = kernels
        .iter()
        .map(|k| kernel_name(k, kernels).instance)
        .collect();
    let n = args.sizes.len();
    for (i, sizes) in args.sizes.iter().enumerate() {
        let argv =
            crate::host_cc::split_args(sizes).with_context(|| format!("--sizes {sizes:?}"))?;
        let dir = out.join(format!("run{}", i + 1));
        if dir.exists() {
            std::fs::remove_dir_all(&dir).with_context(|| format!("clearing {}", dir.display()))?;
        }
        let records = dir.join("records");
        std::fs::create_dir_all(&records)?;
        std::fs::write(dir.join("args"), format!("{sizes}\n"))?;
        klaraptor_profiler::kl_eprintln!(
            "klaraptor validate: run {}/{n} `{sizes}`: sweeping {} over every candidate shape \
             ({} timed launches per shape after {} warm-up)",
            i + 1,
            names.join(", "),
            args.runs,
            args.warmup
        );
        let t = Instant::now();
        let mut cmd = Command::new(&variant);
        cmd.args(&argv)
            .env("KLARAPTOR_PROFILE_OUT", &records)
            .env("KLARAPTOR_PROFILE_PLAN", &plan)
            .env("KLARAPTOR_COLLECTOR", &collector)
            .env("KLARAPTOR_COLLECT_TIME_ONLY", "1")
            .env("KLARAPTOR_PROFILE_RUNS", args.runs.to_string())
            .env("KLARAPTOR_PROFILE_WARMUP", args.warmup.to_string())
            .env("KLARAPTOR_PROFILE_MAX_SIZES", args.max_sizes.to_string())
            .env("KLARAPTOR_LOG", dir.join("variant.log"))
            // The sweep is of the candidate shapes (the plan holds every one, so the
            // program's block, where it is one, is timed): the program's own block at each
            // size comes from variant.log, and program_profiled from the profile entry.
            .env_remove("KLARAPTOR_PROFILE_PROGRAM")
            .env_remove("KLARAPTOR_FORCE")
            .env_remove("KLARAPTOR_DISABLE");
        let vs = run_to_files(cmd, &dir, "variant", timeout)?;
        std::fs::write(dir.join("variant.status"), status_text(vs) + "\n")?;
        let err = dir.join("variant.err");
        let errtext = std::fs::read_to_string(&err).unwrap_or_default();
        if errtext.contains("cannot load the collector")
            || errtext.contains("the collector could not start")
            || errtext.contains("has no klaraptor_collect")
        {
            bail!(
                "the collector could not measure (is the NVIDIA driver installed and a GPU \
                 visible?): {}\n(the profiling variant's stderr is in {})",
                errtext
                    .lines()
                    .filter(|l| l.contains("collector"))
                    .collect::<Vec<_>>()
                    .join("; "),
                err.display()
            );
        }
        let swept = validate::read_records(&records)?;
        klaraptor_profiler::kl_eprintln!(
            "klaraptor validate:   swept {} kernel(s) in {:.1} s (exit status {})",
            swept.len(),
            t.elapsed().as_secs_f64(),
            status_text(vs)
        );
        if vs.is_none() {
            klaraptor_profiler::kl_eprintln!(
                "klaraptor validate: warning: the profiling variant ran past --timeout {} s and \
                 was stopped; what it recorded is kept",
                args.timeout
            );
        } else if swept.is_empty() {
            klaraptor_profiler::kl_eprintln!(
                "klaraptor validate: warning: the profiling variant recorded nothing at `{sizes}` \
                 (exit status {}); its last lines:\n{}",
                status_text(vs),
                tail(&err, 8)
            );
        }
        let t = Instant::now();
        // A choices cache of its own, empty at first: the runs settle as a user's first
        // runs do.
        let choices = dir.join("choices");
        match std::fs::remove_dir_all(&choices) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(e).with_context(|| format!("removing {}", choices.display()))
            }
            _ => {}
        }
        let log = dir.join("binary.log");
        let (mut bs, mut runs) = (None, 0);
        while runs < args.settle_runs {
            runs += 1;
            let seen = std::fs::metadata(&log).map_or(0, |m| m.len());
            let mut cmd = Command::new(&binary);
            cmd.args(&argv)
                .env("KLARAPTOR_LOG", &log)
                .env("KLARAPTOR_CHOICES", &choices)
                .env_remove("KLARAPTOR_FORCE")
                .env_remove("KLARAPTOR_DISABLE");
            bs = run_to_files(cmd, &dir, "binary", timeout)?;
            let text = std::fs::read(&log).unwrap_or_default();
            let this_run = String::from_utf8_lossy(text.get(seen as usize..).unwrap_or_default());
            if !bs.is_some_and(|s| s.success())
                || !this_run.contains(" refine: not settled at exit")
            {
                break;
            }
        }
        std::fs::write(dir.join("binary.status"), status_text(bs) + "\n")?;
        klaraptor_profiler::kl_eprintln!(
            "klaraptor validate:   ran the binary for klaraptor's choice {} in {:.1} s (exit \
             status {})",
            if runs == 1 {
                "once".to_string()
            } else {
                format!("{runs} times")
            },
            t.elapsed().as_secs_f64(),
            status_text(bs)
        );
    }
    Ok(())
}

/// The forced shapes of the whole-run measurement of one run: per kernel (mangled name), the
/// distinct shapes of its compared methods over its cases, in order; run `j` forces each
/// kernel's `j`-th shape (a kernel with fewer is not forced there).
pub fn forced_plan(cases: &[&Case]) -> Vec<BTreeMap<String, [u32; 3]>> {
    let mut shapes: BTreeMap<String, BTreeSet<[u32; 3]>> = BTreeMap::new();
    for c in cases {
        for m in [
            Method::Default,
            Method::Klaraptor,
            Method::ProfiledBest,
            Method::Settled,
        ] {
            if let Some(b) = c.picks.get(&m).and_then(|p| p.block) {
                shapes.entry(c.mangled.clone()).or_default().insert(b);
            }
        }
    }
    let n = shapes.values().map(BTreeSet::len).max().unwrap_or(0);
    (0..n)
        .map(|j| {
            shapes
                .iter()
                .filter_map(|(k, s)| s.iter().nth(j).map(|b| (k.clone(), *b)))
                .collect()
        })
        .collect()
}

/// The text of a `.force` file, and the KLARAPTOR_FORCE value, of one forced run.
fn force_text(forced: &BTreeMap<String, [u32; 3]>) -> (String, String) {
    let file = forced
        .iter()
        .map(|(k, b)| format!("{k} {}\n", shape_text(*b)))
        .collect();
    let env = forced
        .iter()
        .map(|(k, b)| format!("{k}:{}", shape_text(*b)))
        .collect::<Vec<_>>()
        .join(",");
    (file, env)
}

/// Reads a `.force` file's text.
pub fn parse_force(text: &str) -> Result<BTreeMap<String, [u32; 3]>> {
    let mut out = BTreeMap::new();
    for l in text.lines().filter(|l| !l.trim().is_empty()) {
        let (k, b) = l
            .trim()
            .rsplit_once(' ')
            .with_context(|| format!("{l:?}: expected <kernel> <BXxBYxBZ>"))?;
        let b = validate::parse_block(b).with_context(|| format!("{l:?}: not a block"))?;
        out.insert(k.to_string(), b);
    }
    Ok(out)
}

/// The file stem of repeat `k` (from 1) of forced configuration `j` (from 1) when each
/// configuration runs `n` times: `f<j>.r<k>`, or `f<j>` when `n` is 1 (the layout before
/// repeats).
pub fn repeat_stem(j: usize, k: u32, n: u32) -> String {
    if n == 1 {
        format!("f{j}")
    } else {
        format!("f{j}.r{k}")
    }
}

/// The order of the whole-run measurement's runs of `configs` forced configurations, each
/// run `n` times: round-robin (every configuration's first repeat, then every one's second,
/// …, so that a slow drift of the GPU's speed hits every shape alike), as (configuration
/// index from 0, file stem: [`repeat_stem`]).
pub fn whole_run_schedule(configs: usize, n: u32) -> Vec<(usize, String)> {
    (1..=n)
        .flat_map(|k| (0..configs).map(move |j| (j, repeat_stem(j + 1, k, n))))
        .collect()
}

/// The whole-run measurement: per run of `v`, the binary again with each method's shapes
/// forced ([`forced_plan`]), every launch timed (KLARAPTOR_LAUNCH_TIMES), `--whole-runs`
/// times per forced configuration, round-robin over the configurations.
fn whole_runs(args: &ValidateArgs, v: &Validation, out: &Path) -> Result<()> {
    let binary = std::fs::canonicalize(&args.binary)
        .with_context(|| format!("{}", args.binary.display()))?;
    let timeout = (args.timeout > 0).then(|| Duration::from_secs(args.timeout));
    for r in &v.runs {
        let cases: Vec<&Case> = v.cases.iter().filter(|c| c.job == r.id).collect();
        let plan = forced_plan(&cases);
        let dir = out.join(&r.id).join("wholerun");
        if dir.exists() {
            std::fs::remove_dir_all(&dir).with_context(|| format!("clearing {}", dir.display()))?;
        }
        std::fs::create_dir_all(&dir)?;
        let argv =
            crate::host_cc::split_args(&r.args).with_context(|| format!("--sizes {:?}", r.args))?;
        let t = Instant::now();
        let n = args.whole_runs;
        for (j, forced) in plan.iter().enumerate() {
            std::fs::write(dir.join(format!("f{}.force", j + 1)), force_text(forced).0)?;
        }
        for (j, stem) in whole_run_schedule(plan.len(), n) {
            let (_, env) = force_text(&plan[j]);
            let mut cmd = Command::new(&binary);
            cmd.args(&argv)
                .env("KLARAPTOR_FORCE", env)
                .env(
                    "KLARAPTOR_LAUNCH_TIMES",
                    dir.join(format!("{stem}.times.jsonl")),
                )
                .env("KLARAPTOR_LOG", dir.join(format!("{stem}.log")))
                .env("KLARAPTOR_REFINE", "off")
                .env("KLARAPTOR_CHOICES", "off")
                .env_remove("KLARAPTOR_DISABLE");
            let st = run_to_files(cmd, &dir, &stem, timeout)?;
            std::fs::write(dir.join(format!("{stem}.status")), status_text(st) + "\n")?;
        }
        klaraptor_profiler::kl_eprintln!(
            "klaraptor validate:   whole-run measurement of `{}`: {} forced configuration(s) \
             x {n} run(s) in {:.1} s",
            r.args,
            plan.len(),
            t.elapsed().as_secs_f64()
        );
    }
    Ok(())
}

/// The forced runs kept in a run directory's `wholerun/` (none without one): per forced
/// configuration `f<j>.force`, in order of `j`, its repeats `f<j>.r<k>` in order of `k`
/// (a repeat is known by any of its files: a run killed at its timeout writes no launch
/// times, and has none), or its one run `f<j>` (a directory made with `--whole-runs 1`, or
/// before repeats).
pub fn read_forced_runs(rdir: &Path) -> Result<Vec<validate::ForcedRun>> {
    let dir = rdir.join("wholerun");
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(&dir) else {
        return Ok(out);
    };
    let mut configs: BTreeMap<u32, BTreeSet<u32>> = BTreeMap::new();
    let mut plain: BTreeSet<u32> = BTreeSet::new();
    let mut repeats: Vec<(u32, u32)> = Vec::new();
    for e in rd {
        let name = e?.file_name().to_string_lossy().into_owned();
        let Some((stem, ext)) = name.split_once('.') else {
            continue;
        };
        let Some(j) = stem.strip_prefix('f').and_then(|j| j.parse::<u32>().ok()) else {
            continue;
        };
        match ext {
            "force" => {
                configs.entry(j).or_default();
            }
            "times.jsonl" => {
                plain.insert(j);
            }
            _ => {
                if let Some(k) = ext
                    .strip_prefix('r')
                    .and_then(|r| r.split_once('.'))
                    .and_then(|(k, _)| k.parse::<u32>().ok())
                {
                    repeats.push((j, k));
                }
            }
        }
    }
    for (j, k) in repeats {
        if let Some(ks) = configs.get_mut(&j) {
            ks.insert(k);
        }
    }
    for (j, ks) in configs {
        let fp = dir.join(format!("f{j}.force"));
        let forced = parse_force(&std::fs::read_to_string(&fp)?)
            .with_context(|| format!("{}", fp.display()))?;
        let mut stems: Vec<String> = Vec::new();
        if ks.is_empty() || plain.contains(&j) {
            stems.push(format!("f{j}"));
        }
        stems.extend(ks.iter().map(|k| format!("f{j}.r{k}")));
        for stem in stems {
            let tp = dir.join(format!("{stem}.times.jsonl"));
            let times = match std::fs::read_to_string(&tp) {
                Ok(t) => {
                    validate::parse_launch_times(&t).with_context(|| format!("{}", tp.display()))?
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
                Err(e) => return Err(e).with_context(|| format!("reading {}", tp.display())),
            };
            out.push(validate::ForcedRun {
                forced: forced.clone(),
                times,
                source: format!(
                    "{}/wholerun/{stem}",
                    rdir.file_name().unwrap_or_default().to_string_lossy()
                ),
            });
        }
    }
    Ok(out)
}

fn read_opt(path: &Path) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

fn decisions_opt(path: &Path) -> Result<Vec<Decision>> {
    if path.is_file() {
        validate::read_decisions(path)
    } else {
        Ok(Vec::new())
    }
}

fn refines_opt(path: &Path) -> Result<validate::Refines> {
    if path.is_file() {
        validate::read_refines(path)
    } else {
        Ok(validate::Refines::default())
    }
}

/// The `run<i>` directories of `dir`, in order of `i`.
fn run_dirs(dir: &Path) -> Result<Vec<(u32, PathBuf)>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let p = e?.path();
        let Some(i) = p
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_prefix("run"))
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if p.is_dir() {
            out.push((i, p));
        }
    }
    out.sort();
    if out.is_empty() {
        bail!(
            "{} holds no run directories (run1/, run2/, …): give the --out directory of a \
             klaraptor validate run",
            dir.display()
        );
    }
    Ok(out)
}

/// The rational program of kernel `k` to compare with: the one made for the GPU the run
/// logged, else the one `device` names, else the only one.
fn manifest_for<'a>(
    k: &LinkSpec,
    name: &str,
    manifests: &'a [RationalProgram],
    logged: Option<&str>,
    device: Option<&str>,
) -> std::result::Result<&'a RationalProgram, String> {
    let mine: Vec<&RationalProgram> = manifests
        .iter()
        .filter(|m| m.mangled == k.mangled)
        .collect();
    if mine.is_empty() {
        return Err(format!(
            "{name} has no rational program (no profile when the binary was linked)"
        ));
    }
    let names = || {
        mine.iter()
            .map(|m| m.device.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    if let Some(d) = device {
        return mine
            .iter()
            .find(|m| m.device.name.contains(d))
            .copied()
            .ok_or_else(|| {
                format!(
                    "{name}: no rational program for --device {d} (only for {})",
                    names()
                )
            });
    }
    if let Some(d) = logged {
        return mine
            .iter()
            .find(|m| m.device.name == d)
            .copied()
            .ok_or_else(|| {
                format!(
                    "{name}: the runs used {d}, for which the binary has no rational program \
                     (only for {})",
                    names()
                )
            });
    }
    if mine.len() == 1 {
        return Ok(mine[0]);
    }
    Err(format!(
        "{name}: the logs do not say which GPU ran and the binary has rational programs for \
         {}: pass --device",
        names()
    ))
}

/// How the logs name kernel `k` of a binary whose annotated kernels are `known`
/// ([`validate::KernelName`]).
pub fn kernel_name(k: &LinkSpec, known: &[LinkSpec]) -> validate::KernelName {
    validate::KernelName::new(
        &k.name,
        &k.mangled,
        known.iter().map(|s| (s.name.as_str(), s.mangled.as_str())),
    )
}

/// Reads the runs kept in `dir` and compares, per kernel × data size, klaraptor's choice,
/// the shape the runtime settled on, the profile's fastest shape, the program's own shape
/// and the occupancy API's block with the fastest shape of the sweep.
///
/// `known` are every annotated kernel of the binary, `kernels` those to compare; `db` the
/// profile database the rational programs were built from (for profiled_best).
pub fn analyze(
    dir: &Path,
    program: &str,
    known: &[LinkSpec],
    kernels: &[LinkSpec],
    manifests: &[RationalProgram],
    device: Option<&str>,
    db: Option<&ProfileDb>,
) -> Result<Validation> {
    let mut v = Validation {
        program: program.to_string(),
        ..Validation::default()
    };
    let mut devices = BTreeSet::new();
    for (i, rdir) in run_dirs(dir)? {
        let id = format!("run{i}");
        let args = read_opt(&rdir.join("args"));
        v.runs.push(RunInfo {
            id: id.clone(),
            args: args.clone(),
            variant_status: read_opt(&rdir.join("variant.status")),
            binary_status: read_opt(&rdir.join("binary.status")),
        });
        let sweeps = validate::read_records(&rdir.join("records"))?;
        let chose = decisions_opt(&rdir.join("binary.log"))?;
        let refines = refines_opt(&rdir.join("binary.log"))?;
        let own = decisions_opt(&rdir.join("variant.log"))?;
        let forced_runs = read_forced_runs(&rdir)?;
        devices.extend(
            chose
                .iter()
                .chain(&own)
                .map(|d| d.device_name().to_string()),
        );
        for sw in &sweeps {
            if !known.iter().any(|k| k.mangled == sw.id) {
                v.notes.push(format!(
                    "{id}: records of {} ({}), which is not an annotated kernel of the binary: \
                     are these the runs of another program?",
                    sw.name, sw.id
                ));
            }
        }
        for k in kernels {
            // The lines of this instance: by its run-time name or mangled name, never by a
            // template's name that another instance shares.
            let kn = kernel_name(k, known);
            let mine = |d: &&Decision| kn.matches(&d.kernel);
            let logged = chose
                .iter()
                .chain(&own)
                .find(mine)
                .map(|d| d.device_name().to_string());
            let manifest = manifest_for(k, &kn.instance, manifests, logged.as_deref(), device);
            if let Err(why) = &manifest {
                let note = format!("{why}: klaraptor's pick is the binary's logged launch only");
                if !v.notes.contains(&note) {
                    v.notes.push(note);
                }
            }
            // The entry the rational program was built from: its samples (profiled_best) and
            // the program's own blocks it names (program_profiled; none in older entries).
            let (profile, program_blocks): (
                std::result::Result<validate::ProfileTimes, String>,
                Vec<klaraptor_profiler::record::ProgramBlock>,
            ) = match (&manifest, db) {
                (Ok(m), Some(db)) => match validate::manifest_entry(db, m) {
                    Ok(e) => (Ok(validate::entry_profile(&e, db)), e.program),
                    Err(why) => (Err(why), Vec::new()),
                },
                (Ok(_), None) => (Err("no profile database".into()), Vec::new()),
                (Err(why), _) => (Err(why.clone()), Vec::new()),
            };
            let program_chooses = manifest.as_ref().is_ok_and(|m| m.program_chooses());
            let Some(sw) = sweeps.iter().find(|s| s.id == k.mangled) else {
                v.notes.push(format!(
                    "{id} (`{args}`): {} was not swept (the program did not launch it, or the \
                     profiling variant failed: see {})",
                    kn.instance,
                    rdir.join("variant.err").display()
                ));
                continue;
            };
            if sw
                .samples
                .iter()
                .any(|s| s.counters.as_ref().is_some_and(|c| c.inst_executed > 0))
            {
                v.counters_seen = true;
            }
            let by_size = sw.by_size();
            let launched: BTreeSet<Vec<i64>> =
                chose.iter().filter(mine).map(|d| d.sizes()).collect();
            let missed = launched
                .iter()
                .filter(|s| !by_size.contains_key(*s))
                .count();
            if missed > 0 {
                v.notes.push(format!(
                    "{id}: the binary launched {} at {} data sizes; the sweep timed {} of them \
                     (the first --max-sizes)",
                    kn.instance,
                    launched.len(),
                    launched.len() - missed
                ));
            }
            for (sizes, samples) in by_size {
                let mut case = Case {
                    program: program.to_string(),
                    kernel: kn.instance.clone(),
                    mangled: k.mangled.clone(),
                    job: id.clone(),
                    dim: k.dim,
                    labels: k.data.clone(),
                    sizes,
                    candidates: manifest.as_ref().map_or_else(
                        |_| rational::candidates(k.dim).len(),
                        |m| m.candidates.len(),
                    ),
                    ..Case::default()
                };
                case.measure(samples.iter().copied());
                let ranking = match &manifest {
                    Ok(m) => case.predict(m),
                    Err(_) => Default::default(),
                };
                let at = |d: &&Decision| mine(d) && d.sizes() == case.sizes;
                let decision = chose.iter().find(at);
                // The program's own shape at this size: the profiling variant's log, else the
                // binary's.
                let own_block = own
                    .iter()
                    .find(at)
                    .and_then(Decision::own_block)
                    .map(|b| (b, "the profiling variant's KLARAPTOR_LOG"))
                    .or_else(|| {
                        decision
                            .and_then(Decision::own_block)
                            .map(|b| (b, "program_block of the binary's KLARAPTOR_LOG"))
                    });
                let mut kp = Pick::default();
                match decision {
                    // The link's decision keeps the program's launch: what the runtime
                    // launches is the program's own shape, not the model's first.
                    _ if program_chooses => {
                        kp = validate::program_chooses_pick(
                            decision,
                            own_block.map(|o| o.0),
                            "the binary's run",
                        )
                    }
                    Some(d) => kp = validate::decision_pick(d, ranking.first, "the binary's run"),
                    None => match (ranking.first, &ranking.error, &manifest) {
                        (Some(f), _, _) => {
                            kp.block = Some(f);
                            kp.how = "the rational program's first-ranked shape (the binary's \
                                      run logged no decision at this size)"
                                .into();
                            kp.flag = Some("shape from the rational program, not a run".into());
                        }
                        (None, Some(e), _) => {
                            kp.how = format!("the rational program could not rank: {e}")
                        }
                        (None, None, Err(why)) => kp.how = why.clone(),
                        (None, None, Ok(_)) => {
                            kp.how = "the rational program allowed no shape".into()
                        }
                    },
                }
                case.picks.insert(Method::Klaraptor, kp);
                let (settled, trying) = refines.of(&kn.names(), &case.sizes);
                case.picks.insert(
                    Method::Settled,
                    validate::settled_pick(settled, trying, "the binary's run"),
                );
                case.picks.insert(
                    Method::ProfiledBest,
                    validate::profiled_best_pick(
                        profile.as_ref().map_err(String::as_str),
                        &case.labels,
                        &case.sizes,
                    ),
                );
                if let Ok(p) = &profile {
                    if let Some(pp) = validate::program_profiled_pick(
                        p,
                        &program_blocks,
                        &case.labels,
                        &case.sizes,
                    ) {
                        case.picks.insert(Method::ProgramProfiled, pp);
                    }
                }
                let mut dp = Pick::default();
                match own_block {
                    Some((b, from)) => {
                        dp.block = Some(b);
                        dp.how = format!("the program's own shape ({from})");
                    }
                    None => dp.how = "not known: no log line of this kernel at this size".into(),
                }
                case.picks.insert(Method::Default, dp);
                let op = match &manifest {
                    Ok(m) => validate::computed_occupancy_pick(
                        m,
                        k.dim,
                        &case.measured,
                        samples.iter().copied(),
                    ),
                    Err(why) => Pick {
                        how: format!(
                            "not computed: no device description and registers without a \
                             rational program ({why})"
                        ),
                        ..Pick::default()
                    },
                };
                case.picks.insert(Method::Occupancy, op);
                case.time_picks();
                for m in Method::COMPARED {
                    if let Some(p) = case.picks.get_mut(&m) {
                        validate::whole_run_pick(p, &forced_runs, &k.mangled, &case.sizes);
                    }
                }
                case.time_whole_run();
                if !case.complete() {
                    v.notes.push(format!(
                        "{id}: the sweep of {} at {} is incomplete ({} of {} shapes; the run was \
                         stopped?): its optimum is over those only",
                        kn.instance,
                        case.sizes_text(),
                        case.measured.len() + case.failed.len(),
                        case.candidates
                    ));
                }
                v.cases.push(case);
            }
        }
    }
    if v.counters_seen {
        v.notes.push(
            "the records hold hardware counters: the collector did not run in its time-only \
             mode (the times are still event times)"
                .into(),
        );
    }
    v.device = match devices.len() {
        0 => None,
        _ => Some(devices.into_iter().collect::<Vec<_>>().join(", ")),
    };
    Ok(v)
}

fn cell(c: &Case, m: Method) -> String {
    let Some(p) = c.picks.get(&m) else {
        return "-".into();
    };
    let Some(b) = p.block else {
        return match m {
            Method::Settled => "did not settle".into(),
            Method::ProfiledBest => "no profile".into(),
            Method::ProgramProfiled => "not named".into(),
            _ => "-".into(),
        };
    };
    let shape = match c.dim {
        0 | 1 => format!("{}", b[0]),
        2 => format!("{}x{}", b[0], b[1]),
        _ => shape_text(b),
    };
    let mut mark = if p.flag.is_some() { "*" } else { "" }.to_string();
    if p.slower_than_default == Some(true) {
        mark.push('!');
    }
    match (p.time_ms, p.ratio) {
        (Some(t), _) if m == Method::Optimum => format!("{shape} {t:.4}ms{mark}"),
        (Some(t), Some(r)) => format!("{shape} {t:.4}ms {r:.2}{mark}"),
        _ => format!("{shape} (not timed){mark}"),
    }
}

/// Writes `rows` (the first the header) to `s` as columns of text: each cell left-aligned to
/// its column's widest, two blanks between columns, no trailing blanks.
fn write_columns(s: &mut String, rows: &[Vec<String>]) {
    let n = rows.first().map_or(0, Vec::len);
    let widths: Vec<usize> = (0..n)
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
    for r in rows {
        let line: Vec<String> = r
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        let _ = writeln!(s, "{}", line.join("  ").trim_end());
    }
}

/// The table `klaraptor validate` prints.
pub fn table(v: &Validation) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "klaraptor validate: {}{}: {} case(s) (kernel x data size) over {} run(s)",
        v.program,
        v.device
            .as_deref()
            .map(|d| format!(" on {d}"))
            .unwrap_or_default(),
        v.cases.len(),
        v.runs.len()
    );
    for r in &v.runs {
        let _ = writeln!(s, "  {}: `{}`", r.id, r.args);
    }
    let _ = writeln!(
        s,
        "Times: the exhaustive sweep's median per shape; ratio = optimum time / time (1 = \
         optimal); * = see the notes below; ! = settled more than 3 % slower than default.\n"
    );
    // program_profiled beside profiled_best where a profile names the program's own block.
    let compared = Method::compared(&v.cases);
    let mut head = vec!["run", "kernel", "sizes", "shapes", "optimum"];
    head.extend(compared.iter().map(|m| m.as_str()));
    head.push("spearman");
    let mut rows: Vec<Vec<String>> = vec![head.iter().map(|h| h.to_string()).collect()];
    for c in &v.cases {
        let sizes: Vec<String> = c
            .labels
            .iter()
            .zip(&c.sizes)
            .map(|(l, v)| format!("{l}={v}"))
            .collect();
        let mut row = vec![
            c.job.clone(),
            c.kernel.clone(),
            sizes.join(" "),
            format!("{}/{}", c.measured.len(), c.candidates),
            cell(c, Method::Optimum),
        ];
        row.extend(compared.iter().map(|&m| cell(c, m)));
        row.push(
            c.spearman
                .map(|r| format!("{r:.2}"))
                .unwrap_or_else(|| "-".into()),
        );
        rows.push(row);
    }
    write_columns(&mut s, &rows);
    let _ = writeln!(s);
    let whole: Vec<&Case> = v.cases.iter().filter(|c| c.drifts.is_some()).collect();
    if !whole.is_empty() {
        let repeats = whole
            .iter()
            .flat_map(|c| c.picks.values().filter_map(|p| p.whole_run_runs))
            .max()
            .unwrap_or(1);
        let _ = writeln!(
            s,
            "Whole run: the kernel time of the key summed over all its launches in a run of \
             the binary, each method's shape forced (what the user gets){}; ratio = the best \
             of the four's mean time per launch over the run / this one's (the times' ratio \
             when the runs launch the key equally often); drift = the last third's mean \
             launch time over the first third's (~ = drifts by more than {:.0} %).\n",
            if repeats > 1 {
                format!(
                    ", the median of up to {repeats} runs ((x %) = their spread, max / min - \
                     1; (1 run): only one counted)"
                )
            } else {
                String::new()
            },
            (validate::DRIFT - 1.0) * 100.0
        );
        let wm = [
            Method::Klaraptor,
            Method::Settled,
            Method::ProfiledBest,
            Method::Default,
        ];
        let mut rows: Vec<Vec<String>> = vec![[
            "run",
            "kernel",
            "sizes",
            "launches",
            "klaraptor",
            "settled",
            "profiled_best",
            "default",
            "drift",
        ]
        .iter()
        .map(|h| h.to_string())
        .collect()];
        for c in &whole {
            let launches = wm
                .iter()
                .filter_map(|m| c.picks.get(m).and_then(|p| p.whole_run_launches))
                .max();
            let drift = wm
                .iter()
                .filter_map(|m| c.picks.get(m).and_then(|p| p.drift))
                .next();
            let mut row = vec![
                c.job.clone(),
                c.kernel.clone(),
                c.labels
                    .iter()
                    .zip(&c.sizes)
                    .map(|(l, v)| format!("{l}={v}"))
                    .collect::<Vec<_>>()
                    .join(" "),
                launches.map_or_else(|| "-".into(), |n| n.to_string()),
            ];
            for m in wm {
                row.push(match c.picks.get(&m) {
                    Some(p) => {
                        let spread = match (p.whole_run_spread, p.whole_run_runs) {
                            (Some(x), _) => format!(" ({:.1}%)", 100.0 * x),
                            (None, Some(1)) if repeats > 1 => " (1 run)".into(),
                            _ => String::new(),
                        };
                        match (p.whole_run_ms, p.whole_run_ratio) {
                            (Some(t), Some(r)) => format!("{t:.3}ms {r:.2}{spread}"),
                            (Some(t), None) => format!("{t:.3}ms{spread}"),
                            _ => "-".into(),
                        }
                    }
                    None => "-".into(),
                });
            }
            row.push(match (drift, c.drifts) {
                (Some(d), Some(true)) => format!("{d:.2}~"),
                (Some(d), _) => format!("{d:.2}"),
                _ => "-".into(),
            });
            rows.push(row);
        }
        write_columns(&mut s, &rows);
        let _ = writeln!(s);
    }
    for x in validate::summaries(&v.cases) {
        let mut line = match (x.geomean, x.min, x.share_ge_090) {
            (Some(g), Some(min), Some(share)) => format!(
                "{:<13}  geometric mean {g:.3} of optimal over {} cases, minimum {min:.3}, \
                 {:.0} % of cases >= 0.90",
                x.method,
                x.cases,
                100.0 * share
            ),
            _ => format!("{:<13}  no timed case", x.method),
        };
        if let Some(n) = x.not_settled.filter(|&n| n > 0) {
            let _ = write!(line, "; {n} case(s) did not settle");
        }
        if let Some(n) = x.slower_than_default {
            let _ = write!(
                line,
                "; {n} case(s) more than 3 % slower than the program's own shape"
            );
        }
        if let Some(n) = x.no_profile.filter(|&n| n > 0) {
            let _ = write!(line, "; {n} case(s) without a profile");
        }
        if let Some(n) = x.undecided.filter(|&n| n > 0) {
            let _ = write!(line, "; {n} case(s) kept undecided");
        }
        if let Some(n) = x.unmeasurable.filter(|&n| n > 0) {
            let _ = write!(line, "; {n} case(s) kept unmeasurable");
        }
        if let (Some(g), Some(min)) = (x.whole_run_geomean, x.whole_run_min) {
            let _ = write!(
                line,
                "; whole run: geometric mean {g:.3} of the best method over {} cases, minimum \
                 {min:.3}{}",
                x.whole_run_cases,
                if x.drifting > 0 {
                    format!(", {} drifting", x.drifting)
                } else {
                    String::new()
                }
            );
        }
        let _ = writeln!(s, "{line}");
    }
    let rhos: Vec<f64> = v.cases.iter().filter_map(|c| c.spearman).collect();
    if !rhos.is_empty() {
        let mut sorted = rhos.clone();
        sorted.sort_by(|a, b| a.total_cmp(b));
        let _ = writeln!(
            s,
            "spearman       median {:.2} over {} cases (predicted against measured time over the \
             shapes)",
            sorted[sorted.len() / 2],
            sorted.len()
        );
    }
    let mut flags = Vec::new();
    for c in &v.cases {
        for &m in &compared {
            if let Some(f) = c.picks.get(&m).and_then(|p| p.flag.as_ref()) {
                flags.push(format!(
                    "{} {} at {}, {}: {f}",
                    c.job,
                    c.kernel,
                    c.sizes_text(),
                    m.as_str()
                ));
            }
        }
        if let Some(p) = c.picks.get(&Method::Settled) {
            if p.block.is_none() {
                flags.push(format!(
                    "{} {} at {}, settled: {}",
                    c.job,
                    c.kernel,
                    c.sizes_text(),
                    p.how
                ));
            }
            if p.slower_than_default == Some(true) {
                let d = c.picks.get(&Method::Default).and_then(|d| d.time_ms);
                flags.push(format!(
                    "{} {} at {}, settled: {:.4} ms, more than 3 % slower than the program's \
                     own shape ({})",
                    c.job,
                    c.kernel,
                    c.sizes_text(),
                    p.time_ms.unwrap_or(f64::NAN),
                    d.map_or_else(|| "-".to_string(), |d| format!("{d:.4} ms"))
                ));
            }
        }
        for m in [Method::ProfiledBest, Method::ProgramProfiled] {
            if let Some(p) = c.picks.get(&m) {
                if p.block.is_none() {
                    flags.push(format!(
                        "{} {} at {}, {}: {}",
                        c.job,
                        c.kernel,
                        c.sizes_text(),
                        m.as_str(),
                        p.how
                    ));
                }
            }
        }
    }
    if !flags.is_empty() || !v.notes.is_empty() {
        let _ = writeln!(s, "\nNotes:");
        for f in flags.iter().chain(&v.notes) {
            let _ = writeln!(s, "- {f}");
        }
    }
    s
}

#[derive(Serialize)]
struct JsonCase {
    kernel: String,
    mangled: String,
    job: String,
    sizes: BTreeMap<String, i64>,
    measured: usize,
    failed: usize,
    candidates: usize,
    spearman: Option<f64>,
    /// Rank of the measured optimum in the predicted order (1 = first).
    optimum_rank: Option<usize>,
    /// The block the runtime settled on (null: it did not settle, `settled_why` says why),
    /// and the launches it took.
    settled: Option<[u32; 3]>,
    settled_launches: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    settled_why: Option<String>,
    /// The profile's fastest block at the nearest profiled size (null: no profile).
    profiled_best: Option<[u32; 3]>,
    /// The program's own block the profile names at the nearest profiled size it names one
    /// at (null: at none of as many data values); absent where the profile names none
    /// (entries captured before issue 38).
    #[serde(skip_serializing_if = "Option::is_none")]
    program_profiled: Option<Option<[u32; 3]>>,
    /// Whether the key's per-launch cost drifts over the run (null: no whole-run
    /// measurement).
    drifts: Option<bool>,
}

#[derive(Serialize)]
struct JsonOut<'a> {
    tool: String,
    binary: String,
    program: &'a str,
    device: Option<&'a str>,
    written_at: String,
    runs: &'a [RunInfo],
    summary: Vec<validate::MethodSummary>,
    cases: Vec<JsonCase>,
    records: Vec<validate::Record>,
    notes: &'a [String],
}

fn json<'a>(v: &'a Validation, binary: &Path) -> JsonOut<'a> {
    let summary = validate::summaries(&v.cases);
    JsonOut {
        tool: format!("klaraptor validate {}", env!("CARGO_PKG_VERSION")),
        binary: binary.display().to_string(),
        program: &v.program,
        device: v.device.as_deref(),
        written_at: klaraptor_profiler::console::now_iso8601(),
        runs: &v.runs,
        summary,
        cases: v
            .cases
            .iter()
            .map(|c| JsonCase {
                kernel: c.kernel.clone(),
                mangled: c.mangled.clone(),
                job: c.job.clone(),
                sizes: c
                    .labels
                    .iter()
                    .cloned()
                    .zip(c.sizes.iter().copied())
                    .collect(),
                measured: c.measured.len(),
                failed: c.failed.len(),
                candidates: c.candidates,
                spearman: c.spearman,
                optimum_rank: c.optimum_rank(),
                settled: c.picks.get(&Method::Settled).and_then(|p| p.block),
                settled_launches: c.picks.get(&Method::Settled).and_then(|p| p.launches),
                settled_why: c
                    .picks
                    .get(&Method::Settled)
                    .filter(|p| p.block.is_none())
                    .map(|p| p.how.clone()),
                profiled_best: c.picks.get(&Method::ProfiledBest).and_then(|p| p.block),
                program_profiled: c.picks.get(&Method::ProgramProfiled).map(|p| p.block),
                drifts: c.drifts,
            })
            .collect(),
        records: validate::records(&v.cases),
        notes: &v.notes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_may_begin_with_a_dash() {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            args: ValidateArgs,
        }
        use clap::Parser as _;
        let cli = Cli::try_parse_from([
            "validate",
            "./app",
            "--sizes",
            "-s 4096 -q",
            "--sizes=-n 5",
            "--sizes",
            "--big",
            "--runs",
            "3",
        ])
        .unwrap();
        assert_eq!(cli.args.sizes, ["-s 4096 -q", "-n 5", "--big"]);
        assert_eq!(cli.args.runs, 3);
        assert_eq!(cli.args.binary, Path::new("./app"));
    }

    #[test]
    fn whole_run_forcing() {
        let case = |k: &str, sizes: i64, shapes: &[(Method, [u32; 3])]| {
            let mut c = Case {
                mangled: k.into(),
                sizes: vec![sizes],
                ..Case::default()
            };
            for (m, b) in shapes {
                c.picks.insert(
                    *m,
                    Pick {
                        block: Some(*b),
                        ..Pick::default()
                    },
                );
            }
            c
        };
        let a = case(
            "_Z1av",
            10,
            &[
                (Method::Default, [256, 1, 1]),
                (Method::Klaraptor, [128, 1, 1]),
                (Method::Settled, [128, 1, 1]),
                (Method::Occupancy, [1024, 1, 1]),
            ],
        );
        let a2 = case("_Z1av", 20, &[(Method::ProfiledBest, [64, 1, 1])]);
        let b = case("_Z1bv", 10, &[(Method::Default, [32, 8, 1])]);
        let plan = forced_plan(&[&a, &a2, &b]);
        // a: 64, 128, 256 (occupancy is not forced); b: 32x8 in the first run only.
        assert_eq!(plan.len(), 3);
        assert_eq!(plan[0]["_Z1av"], [64, 1, 1]);
        assert_eq!(plan[0]["_Z1bv"], [32, 8, 1]);
        assert_eq!(plan[2].len(), 1);
        let (file, env) = force_text(&plan[0]);
        assert_eq!(env, "_Z1av:64x1x1,_Z1bv:32x8x1");
        assert_eq!(parse_force(&file).unwrap(), plan[0]);
        assert!(parse_force("_Z1av 64xq\n").is_err());
        assert!(forced_plan(&[]).is_empty());
    }

    /// --whole-runs: 3 by default, 1 to 50, not with --no-whole-run or --from.
    #[test]
    fn whole_runs_option() {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            args: ValidateArgs,
        }
        use clap::Parser as _;
        let parse = |extra: &[&str]| {
            let mut argv = vec!["validate", "./app", "--sizes", "10"];
            argv.extend(extra);
            Cli::try_parse_from(argv).map(|c| c.args.whole_runs)
        };
        assert_eq!(parse(&[]).unwrap(), 3);
        assert_eq!(parse(&["--whole-runs", "1"]).unwrap(), 1);
        assert_eq!(parse(&["--whole-runs=50"]).unwrap(), 50);
        for bad in ["0", "51", "-1", "x"] {
            let e = parse(&[&format!("--whole-runs={bad}")])
                .unwrap_err()
                .to_string();
            assert!(e.contains("--whole-runs"), "{bad}: {e}");
        }
        assert!(parse(&["--whole-runs", "0"])
            .unwrap_err()
            .to_string()
            .contains("1..=50"));
        assert!(parse(&["--whole-runs", "2", "--no-whole-run"]).is_err());
        assert!(parse(&["--no-whole-run"]).is_ok());
        assert!(
            Cli::try_parse_from(["validate", "./app", "--from", "d", "--whole-runs", "2"]).is_err()
        );
    }

    /// The repeats run round-robin over the forced configurations; one repeat keeps the
    /// layout before repeats.
    #[test]
    fn whole_run_order() {
        let stems = |c, n| {
            whole_run_schedule(c, n)
                .into_iter()
                .map(|(j, s)| format!("{j}:{s}"))
                .collect::<Vec<_>>()
                .join(" ")
        };
        assert_eq!(
            stems(3, 2),
            "0:f1.r1 1:f2.r1 2:f3.r1 0:f1.r2 1:f2.r2 2:f3.r2"
        );
        assert_eq!(stems(2, 1), "0:f1 1:f2");
        assert_eq!(stems(0, 3), "");
    }

    /// read_forced_runs: the repeats of the new layout (a repeat without launch times, as a
    /// run killed at its timeout leaves, still counts as a run), a directory made before
    /// repeats (one run per configuration), and the whole-run times and spread they give.
    #[test]
    fn forced_runs_read_back() {
        let line = |b: u32, total: f64| {
            format!(
                "{{\"kernel\":\"_Z1kPfi\",\"name\":\"k\",\"sizes\":[4096],\"launches\":10,\
                 \"timed\":10,\"total_ms\":{total},\"first_ms\":null,\"last_ms\":null,\
                 \"head_ms\":null,\"tail_ms\":null,\"min_ms\":null,\"max_ms\":null,\
                 \"trend\":null,\"block\":[{b},1,1],\"grid\":[16,1,1],\"blocks_seen\":1}}\n"
            )
        };
        let tmp = tempfile::tempdir().unwrap();
        let rdir = tmp.path().join("run2");
        let w = rdir.join("wholerun");
        std::fs::create_dir_all(&w).unwrap();
        assert!(read_forced_runs(&rdir).unwrap().is_empty());
        let put = |name: &str, text: &str| std::fs::write(w.join(name), text).unwrap();
        put("f1.force", "_Z1kPfi 128x1x1\n");
        put("f2.force", "_Z1kPfi 256x1x1\n");
        for (j, k, b, t) in [
            (1, 1, 128, 10.0),
            (2, 1, 256, 20.0),
            (1, 2, 128, 12.0),
            (2, 2, 256, 21.0),
            (1, 3, 512, 1.0), // fell back: left out
            (2, 3, 256, 22.0),
        ] {
            put(&format!("f{j}.r{k}.times.jsonl"), &line(b, t));
            put(&format!("f{j}.r{k}.status"), "0\n");
            put(&format!("f{j}.r{k}.log"), "");
        }
        put("f1.r4.status", "timeout\n");
        put("f1.r4.out", "");
        let runs = read_forced_runs(&rdir).unwrap();
        let sources: Vec<&str> = runs.iter().map(|r| r.source.as_str()).collect();
        assert_eq!(
            sources,
            [
                "run2/wholerun/f1.r1",
                "run2/wholerun/f1.r2",
                "run2/wholerun/f1.r3",
                "run2/wholerun/f1.r4",
                "run2/wholerun/f2.r1",
                "run2/wholerun/f2.r2",
                "run2/wholerun/f2.r3",
            ]
        );
        assert!(runs[3].times.is_empty());
        assert_eq!(runs[4].forced["_Z1kPfi"], [256, 1, 1]);
        let pick = |runs: &[validate::ForcedRun], b: [u32; 3]| {
            let mut p = Pick {
                block: Some(b),
                ..Pick::default()
            };
            validate::whole_run_pick(&mut p, runs, "_Z1kPfi", &[4096]);
            p
        };
        let p = pick(&runs, [128, 1, 1]);
        assert_eq!((p.whole_run_ms, p.whole_run_runs), (Some(11.0), Some(2)));
        assert!((p.whole_run_spread.unwrap() - 0.2).abs() < 1e-12);
        assert!(
            p.how
                .contains("(run2/wholerun/f1.r4) did not launch this key"),
            "{}",
            p.how
        );
        let p = pick(&runs, [256, 1, 1]);
        assert_eq!((p.whole_run_ms, p.whole_run_runs), (Some(21.0), Some(3)));
        assert!((p.whole_run_spread.unwrap() - 0.1).abs() < 1e-12);

        // The layout before repeats (and of --whole-runs 1): f<j>.times.jsonl, one run each.
        let old = tmp.path().join("run1");
        let w = old.join("wholerun");
        std::fs::create_dir_all(&w).unwrap();
        let put = |name: &str, text: &str| std::fs::write(w.join(name), text).unwrap();
        put("f1.force", "_Z1kPfi 128x1x1\n");
        put("f1.times.jsonl", &line(128, 10.0));
        put("f1.status", "0\n");
        put("f1.log", "");
        put("f2.force", "_Z1kPfi 256x1x1\n");
        put("f2.status", "timeout\n");
        put("f10.force", "_Z1kPfi 64x1x1\n");
        put("f10.times.jsonl", &line(64, 5.0));
        let runs = read_forced_runs(&old).unwrap();
        let sources: Vec<&str> = runs.iter().map(|r| r.source.as_str()).collect();
        assert_eq!(
            sources,
            ["run1/wholerun/f1", "run1/wholerun/f2", "run1/wholerun/f10"]
        );
        let p = pick(&runs, [128, 1, 1]);
        assert_eq!(
            (p.whole_run_ms, p.whole_run_runs, p.whole_run_spread),
            (Some(10.0), Some(1), None)
        );
        assert!(
            p.how.contains(
                "; whole run with it forced: 10.0000 ms over 10 launches (run1/wholerun/f1)"
            ),
            "{}",
            p.how
        );
        assert_eq!(pick(&runs, [64, 1, 1]).whole_run_ms, Some(5.0));
        assert_eq!(pick(&runs, [256, 1, 1]).whole_run_ms, None);
    }

    /// The whole-run table shows each time's spread over the repeats.
    #[test]
    fn table_shows_the_spread() {
        let mut c = Case {
            kernel: "k".into(),
            mangled: "_Z1kPfi".into(),
            job: "run1".into(),
            dim: 1,
            labels: vec!["N".into()],
            sizes: vec![4096],
            ..Case::default()
        };
        let wr = |b: u32, ms: f64, runs: u32, spread: Option<f64>| Pick {
            block: Some([b, 1, 1]),
            whole_run_ms: Some(ms),
            whole_run_runs: Some(runs),
            whole_run_spread: spread,
            whole_run_launches: Some(10),
            whole_run_launch_ms: Some(ms / 10.0),
            ..Pick::default()
        };
        c.picks
            .insert(Method::Default, wr(256, 2.0, 3, Some(0.041)));
        c.picks.insert(Method::Klaraptor, wr(128, 1.0, 1, None));
        c.time_whole_run();
        let v = Validation {
            program: "app".into(),
            cases: vec![c.clone()],
            ..Validation::default()
        };
        let t = table(&v);
        assert!(t.contains("the median of up to 3 runs"), "{t}");
        let row = t
            .lines()
            .find(|l| l.starts_with("run1") && l.contains("2.000ms"))
            .unwrap_or_else(|| panic!("{t}"));
        assert!(row.contains("2.000ms 0.50 (4.1%)"), "{row}");
        assert!(row.contains("1.000ms 1.00 (1 run)"), "{row}");
        // One run per shape (--whole-runs 1): no spread, as before.
        for p in c.picks.values_mut() {
            p.whole_run_runs = Some(1);
            p.whole_run_spread = None;
        }
        let t = table(&Validation {
            cases: vec![c],
            ..Validation::default()
        });
        assert!(
            !t.contains("median of up to") && !t.contains("(1 run)"),
            "{t}"
        );
        assert!(t.contains("2.000ms 0.50"), "{t}");
    }

    #[test]
    fn exhaustive_plan() {
        let k = LinkSpec {
            shmem: None,
            name: "k".into(),
            mangled: "_Z1kPfi".into(),
            data: vec!["N".into()],
            dim: 1,
            grid: vec![],
            block: vec![],
            profile_run: None,
            profile_sizes: vec![],
            code_hash: String::new(),
            annotated_at: String::new(),
            build_dir: PathBuf::new(),
        };
        let p = plan_text(std::slice::from_ref(&k));
        let line = p.lines().nth(1).unwrap();
        let f: Vec<&str> = line.split(' ').collect();
        assert_eq!(f[0], "_Z1kPfi");
        assert_eq!(f.len() - 1, rational::candidates(1).len());
        assert_eq!(f[1], "1x1x1");
        assert_eq!(*f.last().unwrap(), "1024x1x1");
    }
}
