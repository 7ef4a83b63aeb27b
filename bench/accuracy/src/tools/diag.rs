//! Prints, for one kernel of a study at one size, every shape's measured time (from a
//! recorded sweep) beside the rational program's prediction and metrics.
//! accuracy-report diag <manifest.json> <records dir> <size,size..>

use anyhow::{Context, Result};
use klaraptor_program::rational::RationalProgram;
use klaraptor_program::validate;

pub fn run(a: &[String]) -> Result<()> {
    let [manifest, records, size] = a else {
        anyhow::bail!("usage: accuracy-report diag <manifest.json> <records dir> <size,size..>");
    };
    let prog: RationalProgram = serde_json::from_str(
        &std::fs::read_to_string(manifest).with_context(|| format!("reading {manifest}"))?,
    )
    .with_context(|| format!("{manifest}: not a rational program manifest"))?;
    let dir = std::path::Path::new(records);
    let size: Vec<i64> = size
        .split(',')
        .map(|s| {
            s.trim()
                .parse()
                .with_context(|| format!("size '{s}': not an integer"))
        })
        .collect::<Result<_>>()?;
    let sweeps = validate::read_records(dir)?;
    let sweep = sweeps
        .iter()
        .find(|w| w.id == prog.mangled)
        .context("kernel not in records")?;
    let measured: std::collections::BTreeMap<[u32; 3], f64> = sweep
        .samples
        .iter()
        .filter(|s| s.sizes == size && s.error.is_none())
        .filter_map(|s| s.counters.as_ref().map(|c| (s.block, c.time_ms * 1000.0)))
        .collect();
    let ranked = prog.rank(&size)?;
    let best = measured.values().cloned().fold(f64::INFINITY, f64::min);
    println!(
        "{} at {:?}: scale {:.3} block {:.3}",
        prog.kernel, size, prog.time_fit.scale, prog.time_fit.overhead_us
    );
    println!("rank block        meas_us  ratio   pred_us  model_us  mwp   cwp  w/sm  inst  gld  gst  s_ld  s_st  l1hit  dram/w  lim");
    for (i, r) in ranked.iter().enumerate() {
        let m = measured.get(&r.block).copied().unwrap_or(f64::NAN);
        let x = &r.metrics;
        println!(
            "{:3} {:>4}x{:<4} {:9.2} {:5.2} {:9.2} {:9.2} {:5.1} {:5.1} {:4} {:5.0} {:4.1} {:4.1} {:5.1} {:5.1} {:5.2} {:7.0} {}",
            i + 1, r.block[0], r.block[1], m, best / m, r.prediction.time_us, r.model_us,
            r.prediction.mwp, r.prediction.cwp, r.prediction.active_warps_per_sm,
            x.inst, x.gld_inst, x.gst_inst, x.gld_sectors_per_req, x.gst_sectors_per_req, x.gld_l1_hit_rate, x.dram_bytes,
            r.prediction.limiter.name()
        );
    }
    Ok(())
}
