//! `accuracy-report`: the job list for the GPU machine, and the report from what it measured.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use klaraptor_accuracy::{jobs, sizes::Sizes, study::Paths};

#[derive(Parser)]
#[command(
    name = "accuracy-report",
    version,
    about = "klaraptor's accuracy study on the PolyBench and idioms suites (bench/accuracy/README.md)"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Write <study>/jobs.txt and the plans it names, from sizes.toml and the profiling
    /// variants prepare.sh built into <study>/<program>/.
    Jobs {
        #[arg(long, default_value = ".dev/study")]
        study: PathBuf,
        #[arg(long, default_value = "bench/accuracy/sizes.toml")]
        sizes: PathBuf,
        /// Only these programs (default: every program of sizes.toml).
        #[arg(long = "program", value_name = "PROGRAM")]
        programs: Vec<String>,
    },
    /// Read the device output (device.sh's $OUT, unpacked) and the study directory; write
    /// accuracy-<gpu>-<date>.{json,md} and two SVG charts into --out.
    Report {
        /// The unpacked device output: profile/, exhaustive/, choice/.
        #[arg(long)]
        device: PathBuf,
        #[arg(long, default_value = ".dev/study")]
        study: PathBuf,
        #[arg(long, default_value = "bench/accuracy/sizes.toml")]
        sizes: PathBuf,
        #[arg(long, default_value = "bench/results")]
        out: PathBuf,
        /// The date in the file names (default: the exhaustive phase's, from its env.txt).
        #[arg(long)]
        date: Option<String>,
        /// Kernels for the predicted-against-measured chart.
        #[arg(long, value_delimiter = ',')]
        shape_kernels: Option<Vec<String>>,
        /// A second exhaustive phase's output (holding exhaustive/): the report adds how
        /// every method, and each sweep's optimum, fare when timed by it.
        #[arg(long)]
        repeat: Option<PathBuf>,
        /// The study's profile database (what `prepare.sh import` filled and the models
        /// were built from): profiled_best's profile. Where it has no entry of a kernel,
        /// the profile phase's records in --device are read.
        #[arg(long, default_value = ".dev/study-db")]
        db: PathBuf,
        /// The suites' tuning and test halves: each record says its program's suite and
        /// half, and the report summarises each half.
        #[arg(long, default_value = "bench/accuracy/split.toml")]
        split: PathBuf,
    },
    /// Replay recorded exhaustive sweeps against a study's rational programs, without a
    /// GPU: per case the choice's ratio to the sweep's optimum, the model's and
    /// profiled_best's; per kernel the link's decision. Arguments: <study dir> <exhaustive
    /// dir> [--db <profile db>] [--device <name>] [--json <file>] [-v]; KL_REPLAY_DUMP,
    /// KL_REPLAY_RANKS.
    Replay {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Rebuild a study's rational programs in place from its profile database with the
    /// current model. Arguments: <study dir> <profile db>; KL_REMODEL_FROM=<device>.
    Remodel {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Write a copy of a profile database that keeps only the samples of a reduced plan
    /// (issue 39). Arguments: <src db> <dst db> [--sizes RULE] [--shapes RULE] [--bound X]
    /// [--study DIR]... [-v] (bench/accuracy/src/tools/reduce.rs).
    ReduceDb {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Set a reduced plan's replay beside the full one's (both `replay --json`): the
    /// geomean's change and the worst kernel's, against the bar of issue 39. Arguments:
    /// <full.json> <reduced.json>.
    ReduceCompare {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// One kernel at one size: every shape's measured time beside the program's prediction
    /// and metrics. Arguments: <manifest.json> <records dir> <size,size..>.
    Diag {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("accuracy-report: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    use klaraptor_accuracy::tools;
    match cli.command {
        Cmd::Replay { args } => tools::replay::run(&args),
        Cmd::Remodel { args } => tools::remodel::run(&args),
        Cmd::Diag { args } => tools::diag::run(&args),
        Cmd::ReduceDb { args } => tools::reduce::run(&args),
        Cmd::ReduceCompare { args } => tools::reduce::run_compare(&args),
        Cmd::Jobs {
            study,
            sizes,
            programs,
        } => {
            let s = Sizes::load(&sizes)?;
            let w = jobs::write(&study, &s, &programs)?;
            println!(
                "{}: {} programs; jobs: profile {} (~{:.0} s), exhaustive {} (~{:.0} s), \
                 choice {} (~{:.0} s)",
                w.jobs_txt.display(),
                w.programs,
                w.jobs[0],
                w.est_s[0],
                w.jobs[1],
                w.est_s[1],
                w.jobs[2],
                w.est_s[2]
            );
            Ok(())
        }
        Cmd::Report {
            device,
            study,
            sizes,
            out,
            date,
            shape_kernels,
            repeat,
            db,
            split,
        } => {
            let s = Sizes::load(&sizes)?;
            let kernels = shape_kernels.unwrap_or_else(|| {
                klaraptor_accuracy::SHAPE_KERNELS
                    .iter()
                    .map(|k| k.to_string())
                    .collect()
            });
            let w = klaraptor_accuracy::report(
                &Paths {
                    study,
                    device,
                    exhaustive: None,
                    profile_db: Some(db),
                    split: split.is_file().then_some(split),
                },
                &s,
                &out,
                date.as_deref(),
                &kernels,
                repeat.as_deref(),
            )?;
            println!(
                "{} cases: {}, {}, {}, {}",
                w.cases,
                w.markdown.display(),
                w.json.display(),
                w.summary_json.display(),
                w.charts
                    .iter()
                    .map(|c| c.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            Ok(())
        }
    }
}
