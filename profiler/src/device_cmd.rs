//! `klaraptor device calibrate|show`: measure this machine's GPU for the performance model,
//! and show what was measured.
//!
//! The measurements and the cache live in `crate::calibration`; this module only
//! parses the subcommand, finds nvcc, and prints.

use std::fmt::Write as _;
use std::io::{BufRead, IsTerminal, Write as _};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::calibration::{gpu_present, Cache, CachedReport, DeviceReport};
use anyhow::Result;
use clap::{Args, Subcommand};

#[derive(Debug, Args)]
pub struct DeviceArgs {
    #[command(subcommand)]
    pub command: DeviceCommand,
}

#[derive(Debug, Subcommand)]
pub enum DeviceCommand {
    /// Measure the GPU (memory latency, departure delays, DRAM bandwidth, issue rate; about
    /// 10 s) and cache the report, unless a report for this GPU is cached already.
    Calibrate {
        /// Measure again even when a report is cached.
        #[arg(long)]
        force: bool,
        /// The CUDA device index (as CUDA_VISIBLE_DEVICES leaves them).
        #[arg(long, default_value_t = 0)]
        device: u32,
    },
    /// Print the cached calibration reports: attributes, figures, spreads and methods.
    Show {
        /// Print JSON: an array of {path, report} (or {path, error}) objects.
        #[arg(long)]
        json: bool,
        /// Print, for each report, the device description the model builds from it (the
        /// TOML of the files under model/devices/, which ship the GPUs klaraptor knows
        /// without a calibration).
        #[arg(long, conflicts_with = "json")]
        description: bool,
    },
}

/// Runs `klaraptor device`; `find_nvcc` finds the nvcc that builds the calibration
/// benchmark (asked only when one is built).
pub fn run(args: DeviceArgs, find_nvcc: &dyn Fn() -> Result<PathBuf>) -> Result<ExitCode> {
    let cache = Cache::from_env()?;
    match args.command {
        DeviceCommand::Calibrate { force, device } => calibrate(&cache, force, device, find_nvcc),
        DeviceCommand::Show { json, description } => show(&cache, json, description, find_nvcc),
    }
}

fn calibrate(
    cache: &Cache,
    force: bool,
    device: u32,
    find_nvcc: &dyn Fn() -> Result<PathBuf>,
) -> Result<ExitCode> {
    let nvcc = find_nvcc()?;
    if gpu_present() {
        eprintln!(
            "klaraptor: calibrating CUDA device {device} with {} (the benchmark is compiled \
             once; measuring takes about 10 s)",
            nvcc.display()
        );
    }
    let (report, path, measured) = if force {
        let (r, p) = cache.calibrate(&nvcc, device)?;
        (r, p, true)
    } else {
        let e = cache.ensure(&nvcc, device)?;
        (e.report, e.path, e.measured)
    };
    let mut out = String::new();
    if !measured {
        let _ = writeln!(
            out,
            "already calibrated on {} (use --force to measure again)\n",
            report.device.date
        );
    }
    out.push_str(&render(&report, &path));
    emit(&out)?;
    Ok(ExitCode::SUCCESS)
}

fn show(
    cache: &Cache,
    json: bool,
    description: bool,
    find_nvcc: &dyn Fn() -> Result<PathBuf>,
) -> Result<ExitCode> {
    let listed = cache.list()?;
    if listed.is_empty() {
        if json {
            emit("[]\n")?;
        }
        return nothing_cached(cache, json, find_nvcc);
    }
    let mut ok = true;
    if json {
        let items: Vec<serde_json::Value> = listed
            .iter()
            .map(|c| match &c.report {
                Ok(r) => serde_json::json!({ "path": c.path, "report": r }),
                Err(e) => {
                    ok = false;
                    serde_json::json!({ "path": c.path, "error": e.to_string() })
                }
            })
            .collect();
        emit(&format!("{}\n", serde_json::to_string_pretty(&items)?))?;
    } else {
        let mut out = String::new();
        for CachedReport { path, report } in &listed {
            match report {
                Ok(r) => {
                    if !out.is_empty() {
                        out.push('\n');
                    }
                    if description {
                        out.push_str(&describe(r)?);
                    } else {
                        out.push_str(&render(r, path));
                    }
                }
                Err(e) => {
                    ok = false;
                    eprintln!("klaraptor: error: {e}");
                }
            }
        }
        emit(&out)?;
    }
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// The device description the model builds from report `r`, as TOML.
fn describe(r: &DeviceReport) -> Result<String> {
    let mut d = crate::devices::from_report(r)?;
    d.note = format!(
        "{}: driver attributes and calibration of {}, measured {} (klaraptor device show \
         --description)",
        d.name, r.device.uuid, r.device.date
    );
    Ok(d.to_toml_string())
}

/// Writes to stdout; a reader that went away (`| head`) is not an error.
fn emit(text: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}

/// No report cached: say what to do, and with a GPU and a person at the terminal, offer to
/// measure now.
fn nothing_cached(
    cache: &Cache,
    json: bool,
    find_nvcc: &dyn Fn() -> Result<PathBuf>,
) -> Result<ExitCode> {
    let dir = cache.devices_dir();
    if !gpu_present() {
        eprintln!(
            "klaraptor: no device calibration is cached (in {}), and this machine has no usable \
             GPU (no /dev/nvidia0, /dev/nvidiactl, /dev/dxg or /proc/driver/nvidia/gpus).\n  = \
             help: run `klaraptor device calibrate` on the machine that has the GPU, and copy \
             its report (<GPU uuid>.toml) into {} here",
            dir.display(),
            dir.display()
        );
        return Ok(ExitCode::FAILURE);
    }
    eprintln!(
        "klaraptor: no device calibration is cached (in {}); this machine has a GPU driver.",
        dir.display()
    );
    let interactive = !json && std::io::stdin().is_terminal() && std::io::stderr().is_terminal();
    if !interactive {
        eprintln!("  = help: run `klaraptor device calibrate` (about 10 s)");
        return Ok(ExitCode::FAILURE);
    }
    eprint!("Calibrate now (about 10 s)? [y/N] ");
    std::io::stderr().flush()?;
    let mut answer = String::new();
    std::io::stdin().lock().read_line(&mut answer)?;
    if matches!(answer.trim(), "y" | "Y" | "yes" | "Yes") {
        calibrate(cache, false, 0, find_nvcc)
    } else {
        Ok(ExitCode::FAILURE)
    }
}

/// A report for people: where it is, when it was made, each figure with its spread and
/// method, then the attributes.
pub fn render(r: &DeviceReport, path: &Path) -> String {
    let mut s = String::new();
    let d = &r.device;
    let c = &r.calibration;
    let _ = writeln!(s, "{d}");
    let _ = writeln!(s, "  report: {}", path.display());
    let driver = if d.driver_version.is_empty() {
        "unknown".to_string()
    } else {
        d.driver_version.clone()
    };
    let _ = writeln!(
        s,
        "  made:   {} (driver {driver}, CUDA {}; benchmark built with runtime {})",
        d.date, d.cuda_driver_version, d.runtime_version
    );
    let _ = writeln!(
        s,
        "\ncalibration (cycles are SM clock cycles; spread = max - min over the repetitions of \
         each measurement):"
    );
    for (name, value, spread, unit) in c.figures() {
        let _ = writeln!(
            s,
            "  {name:<36} {value:>10.3} {unit:<6}  spread {spread:.3}"
        );
        if let Some(m) = c.methods.get(name) {
            let _ = writeln!(s, "      {m}");
        }
    }
    if !c.extra.is_empty() {
        let _ = writeln!(s, "\nfurther figures:");
        for (name, value) in &c.extra {
            let _ = writeln!(s, "  {name:<46} {value:>10.3}");
            if let Some(m) = c.methods.get(name) {
                let _ = writeln!(s, "      {m}");
            }
        }
    }
    if let Some(m) = c.methods.get("spread") {
        let _ = writeln!(s, "\n  ({m})");
    }
    let _ = writeln!(s, "\nattributes (the driver's, by cudaDeviceAttr name):");
    for (name, value) in &r.attributes {
        let _ = writeln!(s, "  {name:<36} {value}");
    }
    if !r.attribute_notes.is_empty() {
        let _ = writeln!(s, "\nattribute notes:");
        for (name, note) in &r.attribute_notes {
            let _ = writeln!(s, "  {name}: {note}");
        }
    }
    s
}
