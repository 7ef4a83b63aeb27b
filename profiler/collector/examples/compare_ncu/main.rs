//! The collector's GPU check (bench/gpu/collector/run.sh) in three commands:
//!
//!   compare_ncu metrics [CHIP]
//!       prints, comma-separated, the metrics the collector reads on CHIP (default GH100) as
//!       this machine's libcupti resolves the table, plus those ncu needs for the other fields
//!       and, with --probes, the barrier probe metrics (see report.rs).
//!   compare_ncu compare <collector dir> <ncu.csv> [--noflush DIR] [--ncu-dram CSV]
//!       joins the collector's JSON lines (<dir>/<kernel>.jsonl, <dir>/expected.tsv) with
//!       ncu's CSV (`--csv --print-units base --print-kernel-base function`) and prints a
//!       Markdown comparison per kernel, shape and metric, summary on the first line.
//!   compare_ncu time-only <time-only dir> <collector dir>
//!       checks the samples of a KLARAPTOR_COLLECT_TIME_ONLY=1 run against a full run.
//!   compare_ncu same <dir A> <dir B>
//!       checks two full collector runs of the same launches against each other (e.g. one
//!       profiler session per shape against one per request): equal counts, DRAM bytes,
//!       warps and times within noise.

mod report;

use klaraptor_collector::collect::resolve_on_chip;
use klaraptor_collector::cupti::{CuptiLib, MetricConfig};
use klaraptor_collector::load;
use report::{Inputs, BARRIER_PROBES, NCU_EXTRA};
use std::path::PathBuf;
use std::process::ExitCode;

const USAGE: &str = "usage: compare_ncu metrics [CHIP] [--probes] | compare_ncu compare \
                     <collector dir> <ncu.csv> [--noflush DIR] [--ncu-dram CSV] | compare_ncu \
                     time-only <time-only dir> <collector dir> | compare_ncu same <dir A> <dir B>";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("metrics") => print_metrics(&args[1..]),
        Some("compare") => compare(&args[1..]),
        Some("time-only") if args.len() == 3 => {
            report::time_only(&PathBuf::from(&args[1]), &PathBuf::from(&args[2])).map(|r| {
                println!("{}", r.markdown);
                eprintln!("{}", r.summary);
            })
        }
        Some("same") if args.len() == 3 => {
            report::same(&PathBuf::from(&args[1]), &PathBuf::from(&args[2])).map(|r| {
                println!("{}", r.markdown);
                eprintln!("{}", r.summary);
            })
        }
        _ => Err(USAGE.to_string()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("compare_ncu: {e}");
            ExitCode::FAILURE
        }
    }
}

fn print_metrics(args: &[String]) -> Result<(), String> {
    let probes = args.iter().any(|a| a == "--probes");
    let chip = args
        .iter()
        .find(|a| !a.starts_with("--"))
        .map_or("GH100", String::as_str);
    let lib =
        CuptiLib::open(&load::cupti_candidates(&load::process_env)).map_err(|e| e.to_string())?;
    let resolved = resolve_on_chip(&lib, chip, None).map_err(|e| e.to_string())?;
    let config =
        MetricConfig::new(&lib, chip, None, &resolved.metric_names()).map_err(|e| e.to_string())?;
    eprintln!(
        "compare_ncu: {} metrics on {chip}, {} range-profiler pass(es), libcupti {}",
        resolved.metric_names().len(),
        config.passes(),
        lib.path().display()
    );
    let mut all: Vec<&str> = resolved.metric_names();
    all.extend(NCU_EXTRA);
    if probes {
        all.extend(BARRIER_PROBES);
    }
    println!("{}", all.join(","));
    Ok(())
}

fn compare(args: &[String]) -> Result<(), String> {
    let mut positional = Vec::new();
    let (mut noflush, mut ncu_dram) = (None, None);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--noflush" => noflush = Some(PathBuf::from(it.next().ok_or(USAGE)?)),
            "--ncu-dram" => ncu_dram = Some(PathBuf::from(it.next().ok_or(USAGE)?)),
            _ => positional.push(PathBuf::from(a)),
        }
    }
    let [collector, ncu_csv] = <[PathBuf; 2]>::try_from(positional).map_err(|_| USAGE)?;
    let r = report::compare(&Inputs {
        collector,
        ncu_csv,
        noflush,
        ncu_dram,
    })?;
    println!("{}", r.markdown);
    eprintln!("{}", r.summary);
    Ok(())
}
