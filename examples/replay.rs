//! Replays recorded exhaustive sweeps against the rational programs of a study, without a
//! GPU: for every kernel × size a sweep measured, the program's first-ranked shape is looked
//! up in the sweep; prints each case and the geometric mean of optimum / choice.
//!
//! cargo run --release --example replay -- <study dir> <exhaustive dir> [-v]
//! (`<study>/<program>/models/*.json`, `<exhaustive>/<program>/x*/records/`)

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Result;
use klaraptor::{rational, validate};

fn main() -> Result<()> {
    let a: Vec<String> = std::env::args().skip(1).collect();
    let study = Path::new(&a[0]);
    let sweeps = Path::new(&a[1]);
    let verbose = a.iter().any(|x| x == "-v");
    let mut logs = Vec::new();
    let mut logs_default = Vec::new();
    let mut rows = Vec::new();
    let mut progs: Vec<_> = std::fs::read_dir(study)?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .collect();
    progs.sort();
    for pdir in progs {
        let models = pdir.join("models");
        if !models.is_dir() {
            continue;
        }
        let name = pdir.file_name().unwrap().to_string_lossy().to_string();
        let Ok(xs) = std::fs::read_dir(sweeps.join(&name)) else {
            continue;
        };
        let mut xs: Vec<_> = xs
            .filter_map(|e| e.ok())
            .map(|e| e.path().join("records"))
            .collect();
        xs.sort();
        for (_, prog) in rational::load_dir(&models)? {
            for rec in &xs {
                let sweeps = validate::read_records(rec)?;
                let Some(sweep) = sweeps.iter().find(|w| w.id == prog.mangled) else {
                    continue;
                };
                let mut by_size: BTreeMap<Vec<i64>, BTreeMap<[u32; 3], f64>> = BTreeMap::new();
                for s in &sweep.samples {
                    if let (Some(c), None) = (&s.counters, &s.error) {
                        by_size
                            .entry(s.sizes.clone())
                            .or_default()
                            .insert(s.block, c.time_ms);
                    }
                }
                for (size, meas) in by_size {
                    if meas.len() < prog.candidates.len() / 2 {
                        continue;
                    }
                    let best = meas.values().cloned().fold(f64::INFINITY, f64::min);
                    let ranked = prog.rank(&size)?;
                    let Some(pick) = ranked.iter().find(|r| meas.contains_key(&r.block)) else {
                        continue;
                    };
                    let ratio = best / meas[&pick.block];
                    let def = if prog.dim == 1 {
                        [256, 1, 1]
                    } else {
                        [32, 8, 1]
                    };
                    let rd = meas.get(&def).map(|t| best / t).unwrap_or(f64::NAN);
                    let opt = meas.iter().min_by(|x, y| x.1.total_cmp(y.1)).unwrap().0;
                    logs.push(ratio.ln());
                    logs_default.push(rd.ln());
                    rows.push((
                        ratio,
                        format!(
                            "{:10} {:14} {:>16} opt {:>9} pick {:>9} {:.2}  default {:.2}",
                            name,
                            prog.kernel,
                            format!("{size:?}"),
                            shape(*opt),
                            shape(pick.block),
                            ratio,
                            rd
                        ),
                    ));
                }
            }
        }
    }
    rows.sort_by(|a, b| a.0.total_cmp(&b.0));
    if verbose {
        for r in &rows {
            println!("{}", r.1);
        }
    }
    let gm = |v: &[f64]| (v.iter().sum::<f64>() / v.len() as f64).exp();
    let n = rows.len();
    let below = rows.iter().filter(|r| r.0 < 0.8).count();
    let ge90 = rows.iter().filter(|r| r.0 >= 0.9).count();
    println!(
        "cases {n}  klaraptor geomean {:.3} min {:.3} ≥0.90 {} <0.80 {}  default geomean {:.3}",
        gm(&logs),
        rows.first().map_or(f64::NAN, |r| r.0),
        ge90,
        below,
        gm(&logs_default)
    );
    Ok(())
}

fn shape(b: [u32; 3]) -> String {
    if b[1] == 1 && b[2] == 1 {
        format!("{}", b[0])
    } else {
        format!("{}x{}", b[0], b[1])
    }
}
