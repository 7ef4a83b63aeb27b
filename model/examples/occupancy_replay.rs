//! Replays an occupancy sweep CSV through klaraptor's occupancy and reports disagreements.
//!
//! ```text
//! cargo run -p klaraptor-model --example occupancy_replay -- occupancy.csv
//! ```
//!
//! `bench/gpu/occupancy/run.sh` runs the release build of this on the GPU machine right after
//! the sweep, so a disagreement shows in the same run. Exit status 0 when every row agrees.

#[path = "../tests/replay/mod.rs"]
mod replay;

use std::process::ExitCode;

use klaraptor_model::Device;

fn main() -> ExitCode {
    let Some(path) = std::env::args().nth(1) else {
        eprintln!("usage: occupancy_replay SWEEP.csv");
        return ExitCode::FAILURE;
    };
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("occupancy_replay: {path}: {e}");
            return ExitCode::FAILURE;
        }
    };
    let sweep = match replay::parse(&text, &path) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("occupancy_replay: {e}");
            return ExitCode::FAILURE;
        }
    };
    let dev = match Device::from_attributes(&sweep.attrs) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("occupancy_replay: {path}: header attributes: {e}");
            return ExitCode::FAILURE;
        }
    };
    for line in sweep
        .header
        .iter()
        .filter(|h| h.starts_with("gpu:") || h.starts_with("date:"))
    {
        println!("{line}");
    }
    let bad = replay::mismatches(&dev, &sweep);
    for (row, ours) in bad.iter().take(40) {
        println!("MISMATCH {}", replay::describe(row, *ours));
    }
    println!(
        "occupancy_replay: {} rows, {} agree, {} disagree",
        sweep.rows.len(),
        sweep.rows.len() - bad.len(),
        bad.len()
    );
    if bad.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
