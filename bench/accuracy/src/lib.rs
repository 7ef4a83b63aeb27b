//! The accuracy study of klaraptor on its two suites (samples/polybench, samples/idioms).
//!
//! `accuracy-report jobs` turns `sizes.toml` and the profiling variants that
//! `bench/accuracy/prepare.sh` built into the GPU machine's job list; `bench/accuracy/device.sh`
//! runs it there; `accuracy-report report` reads what came back and writes, into
//! `bench/results/`, the records (`accuracy-<gpu>-<date>.json`), the summary per method
//! (`…-summary.json`), the report (`accuracy-<gpu>-<date>.md`) and two charts. See
//! bench/accuracy/README.md.

pub mod charts;
pub mod inputs;
pub mod jobs;
pub mod report;
pub mod sizes;
pub mod split;
pub mod study;
pub mod tools;

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// The kernels the shapes chart shows by default (those of the paper's Fig. 4, and a 2-D
/// one).
pub const SHAPE_KERNELS: [&str; 4] = ["atax_ax", "corr_matrix", "gs_update", "gemm"];

/// The files a report wrote.
#[derive(Debug)]
pub struct Written {
    /// The records (one per case × method), and the summary (one line per method).
    pub json: PathBuf,
    pub summary_json: PathBuf,
    pub markdown: PathBuf,
    pub charts: Vec<PathBuf>,
    pub cases: usize,
}

/// "NVIDIA H200" → "h200".
pub fn gpu_tag(name: &str) -> String {
    let n = name.trim();
    let n = n.strip_prefix("NVIDIA ").unwrap_or(n);
    let out = klaraptor_program::rational::slug(n);
    if out.is_empty() {
        "gpu".into()
    } else {
        out
    }
}

/// Reads the study and the device output, writes the records, the report and the charts
/// into `out`.
///
/// With `repeat` (the unpacked output of a second `PHASE=exhaustive` run, holding
/// `exhaustive/`), the report also times every method's shape by that sweep
/// ([`report::repeat_section`]).
pub fn report(
    paths: &study::Paths,
    sizes: &sizes::Sizes,
    out: &Path,
    date: Option<&str>,
    shape_kernels: &[String],
    repeat: Option<&Path>,
) -> Result<Written> {
    let st = study::Study::load(paths, sizes)?;
    let again = match repeat {
        Some(r) => {
            let x = r.join("exhaustive");
            if !x.join("env.txt").is_file() {
                anyhow::bail!(
                    "{} has no exhaustive/env.txt: --repeat takes the unpacked output of a \
                     second `PHASE=exhaustive bench/accuracy/device.sh` (its $OUT)",
                    r.display()
                );
            }
            let p = study::Paths {
                study: paths.study.clone(),
                device: paths.device.clone(),
                exhaustive: Some(x),
                profile_db: paths.profile_db.clone(),
                split: paths.split.clone(),
            };
            Some(study::Study::load(&p, sizes)?)
        }
        None => None,
    };
    let env = st.main_env().cloned().unwrap_or_default();
    let stem = format!(
        "accuracy-{}-{}",
        gpu_tag(&env.gpu),
        date.unwrap_or_else(|| env.day())
    );
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let json = out.join(format!("{stem}.json"));
    let recs = report::records(&st);
    std::fs::write(&json, serde_json::to_string_pretty(&recs)? + "\n")
        .with_context(|| format!("writing {}", json.display()))?;
    let summary_json = out.join(format!("{stem}-summary.json"));
    std::fs::write(
        &summary_json,
        serde_json::to_string_pretty(&report::summary(&st))? + "\n",
    )
    .with_context(|| format!("writing {}", summary_json.display()))?;
    let ratios = out.join(format!("{stem}-ratios.svg"));
    charts::ratio_chart(
        &st,
        &ratios,
        &format!(
            "klaraptor, default and occupancy shapes against the optimum, {}, largest size per kernel",
            env.gpu
        ),
    )?;
    let shapes = out.join(format!("{stem}-shapes.svg"));
    let shown = charts::shapes_chart(
        &st,
        &shapes,
        shape_kernels,
        &format!(
            "Predicted and measured time over the block shapes, {}",
            env.gpu
        ),
    )?;
    let name = |p: &Path| p.file_name().unwrap().to_string_lossy().into_owned();
    let mut chart_links = vec![(
        "ratios per kernel (Fig. 1 of the KLARAPTOR paper)".to_string(),
        name(&ratios),
    )];
    if shown > 0 {
        chart_links.push((
            "predicted against measured time over the shapes (Fig. 4 of the paper)".into(),
            name(&shapes),
        ));
    }
    let md = out.join(format!("{stem}.md"));
    let mut text = report::markdown(&st, &name(&json), &chart_links);
    if let Some(again) = &again {
        let at = text.find("## Per kernel and size").unwrap_or(text.len());
        text.insert_str(at, &report::repeat_section(&st, again));
    }
    std::fs::write(&md, text).with_context(|| format!("writing {}", md.display()))?;
    Ok(Written {
        json,
        summary_json,
        markdown: md,
        charts: vec![ratios, shapes],
        cases: st.cases.len(),
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn gpu_tags() {
        assert_eq!(super::gpu_tag("NVIDIA H200"), "h200");
        assert_eq!(
            super::gpu_tag("NVIDIA GeForce RTX 4090"),
            "geforce-rtx-4090"
        );
        assert_eq!(super::gpu_tag(""), "gpu");
    }
}
