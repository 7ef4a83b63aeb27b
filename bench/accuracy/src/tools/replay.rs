//! Replays recorded exhaustive sweeps against the rational programs of a study, without a
//! GPU: for every kernel × size a sweep measured, the program's first-ranked shape is looked
//! up in the sweep; prints each case and the geometric mean of optimum / choice.
//!
//! With a profile database (`--db`, default `.dev/study-db` when it exists), it also replays
//! `profiled_best`: the fastest shape of the profile each rational program was built from, at
//! the profiled size nearest to the case's in the logarithm of the sizes
//! (`klaraptor_program::validate::profiled_best`, what the study and `klaraptor validate` use), looked
//! up in the same sweep; and lists the kernels where it beats the model by more than 5 %.
//!
//! Per kernel it prints the link's decision (`klaraptor_program::decide`: chosen by, the held-out
//! scores; with `-v` every fold) beside the sweep's geomeans of klaraptor (the decided
//! choice), the model alone and profiled_best, and lists the kernels below 0.95 × their
//! profiled_best. `KL_REPLAY_DUMP=<file>` appends one line per case (program, kernel,
//! sizes, the model's ratio, profiled_best's, the model's predicted time of profiled_best
//! over its choice's, the in-sample and held-out model scores, the held-out profiled best's
//! score, how still the profile's fastest shape stands ([`stationary`]), the mangled name)
//! for trying rules offline.
//!
//! `KL_REPLAY_RANKS=<file>` appends one JSON line per case (the ranking, profiled best, the
//! program's shape and the sweep's times) for `bench/gpu/refine/simulate.py`.
//!
//! A binary that carries programs for several GPUs replays one: `--device` names it exactly
//! (e.g. "NVIDIA H100 80GB HBM3"), as the runtime matches it.
//!
//! `--json <file>` writes the geometric means, overall and per kernel, for `reduce-compare`.
//!
//! accuracy-report replay <study dir> <exhaustive dir> [--db <profile db>]
//!   [--device <name>] [--json <file>] [-v]
//! (`<study>/<program>/models/*.json`, `<exhaustive>/<program>/x*/records/`)

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Result};
use klaraptor_profiler::db::ProfileDb;
use klaraptor_program::{rational, validate};

/// One kernel × size of a sweep.
struct Row {
    program: String,
    kernel: String,
    mangled: String,
    size: Vec<i64>,
    optimum: [u32; 3],
    pick: [u32; 3],
    ratio: f64,
    /// The model's own first-ranked shape (before the link's decision) and its ratio.
    model_pick: [u32; 3],
    model_ratio: f64,
    /// Who chooses (the link's decision, `klaraptor_program::decide`).
    chosen_by: &'static str,
    /// The documented default (256, 32×8) and its ratio (NaN: not measured).
    default: f64,
    /// profiled_best's shape and ratio (`None`: no profile, or its shape was not measured).
    profiled: Option<([u32; 3], Option<f64>)>,
}

pub fn run(a: &[String]) -> Result<()> {
    let verbose = a.iter().any(|x| x == "-v");
    let mut pos = Vec::new();
    let mut db_arg: Option<PathBuf> = None;
    let mut device: Option<String> = None;
    let mut json: Option<PathBuf> = None;
    let mut it = a.iter();
    while let Some(x) = it.next() {
        match x.as_str() {
            "-v" => {}
            "--db" => match it.next() {
                Some(d) => db_arg = Some(PathBuf::from(d)),
                None => bail!("--db needs a directory"),
            },
            "--json" => match it.next() {
                Some(f) => json = Some(PathBuf::from(f)),
                None => bail!("--json needs a file"),
            },
            "--device" => match it.next() {
                Some(d) => device = Some(d.clone()),
                None => bail!("--device needs a device name"),
            },
            _ => pos.push(x.clone()),
        }
    }
    let [study, sweeps] = pos.as_slice() else {
        bail!(
            "usage: accuracy-report replay <study dir> <exhaustive dir> [--db <profile db>] [--device <name>] [--json <file>] [-v]"
        );
    };
    let (study, sweeps) = (Path::new(study), Path::new(sweeps));
    let db = match db_arg {
        Some(d) if d.is_dir() => Some(ProfileDb::open(d)?),
        Some(d) => bail!("--db {}: not a directory", d.display()),
        None => {
            let d = Path::new(".dev/study-db");
            d.is_dir().then(|| ProfileDb::open(d)).transpose()?
        }
    };
    let mut rows = Vec::new();
    let mut no_profile = Vec::new();
    // (program, mangled) -> held-out model score, profiled best score, folds.
    type Evidence = (Option<f64>, Option<f64>, usize);
    let mut evidence: BTreeMap<(String, String), Evidence> = BTreeMap::new();
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
            if device.as_ref().is_some_and(|d| prog.device.name != *d) {
                continue;
            }
            if let Some(d) = &prog.decision {
                evidence.insert(
                    (name.clone(), prog.mangled.clone()),
                    (d.model_score, d.profiled_score, d.held_out.len()),
                );
                if verbose {
                    println!("{name} {}: {}", prog.kernel, d.summary());
                    for f in &d.in_sample {
                        println!(
                            "    in sample {:?}: best {} ; model {} {} ; model at 16x {} {}",
                            f.sizes,
                            shape(f.best),
                            f.model.map_or("-".into(), shape),
                            f.model_ratio.map_or("-".into(), |x| format!("{x:.3}")),
                            f.far.map_or("-".into(), shape),
                            f.far_ratio.map_or("-".into(), |x| format!("{x:.3}")),
                        );
                    }
                    for f in &d.held_out {
                        println!(
                            "    held out {:?}: best {} ; model {} {} ; profiled {} {} ; spread {:.3} {}",
                            f.sizes,
                            shape(f.best),
                            f.model.map_or("-".into(), shape),
                            f.model_ratio().map_or("-".into(), |x| format!("{x:.3}")),
                            f.profiled.map_or("-".into(), shape),
                            f.profiled_ratio().map_or("-".into(), |x| format!("{x:.3}")),
                            f.spread,
                            f.note
                        );
                    }
                }
            }
            let profile = match &db {
                Some(db) => validate::manifest_profile(db, &prog),
                None => Err("no profile database (--db)".to_string()),
            };
            if let Err(why) = &profile {
                no_profile.push(format!("{name} {}: {why}", prog.kernel));
            }
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
                    let model_ranked = prog.model_rank(&size)?;
                    let model_pick = model_ranked
                        .iter()
                        .find(|r| meas.contains_key(&r.block))
                        .map_or(pick.block, |r| r.block);
                    let def = if prog.dim == 1 {
                        [256, 1, 1]
                    } else {
                        [32, 8, 1]
                    };
                    let profiled = profile.as_ref().ok().and_then(|p| {
                        validate::profiled_best(&p.samples, &size)
                            .map(|b| (b.block, meas.get(&b.block).map(|t| best / t)))
                    });
                    if let Ok(path) = std::env::var("KL_REPLAY_DUMP") {
                        use std::io::Write as _;
                        let pbb = profiled.map(|p| p.0);
                        let pred = |b: [u32; 3]| {
                            model_ranked
                                .iter()
                                .find(|r| r.block == b)
                                .map(|r| r.prediction.time_us)
                        };
                        let gap = pbb.and_then(|b| {
                            Some(pred(b)? / model_ranked.first()?.prediction.time_us)
                        });
                        let ins = prog.decision.as_ref().map(|d| {
                            let v: Vec<f64> =
                                d.in_sample.iter().filter_map(|x| x.model_ratio).collect();
                            validate::stats(&v).map_or(f64::NAN, |s| s.geomean)
                        });
                        let ho = prog.decision.as_ref().and_then(|d| d.model_score);
                        let ho_pb = prog.decision.as_ref().and_then(|d| d.profiled_score);
                        let still = profile.as_ref().ok().and_then(|p| stationary(&p.samples));
                        let mut f = std::fs::OpenOptions::new()
                            .create(true)
                            .append(true)
                            .open(path)?;
                        writeln!(
                            f,
                            "{}\t{}\t{:?}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}",
                            name,
                            prog.kernel,
                            size,
                            best / meas[&model_pick],
                            profiled.and_then(|p| p.1).unwrap_or(f64::NAN),
                            gap.unwrap_or(f64::NAN),
                            ins.unwrap_or(f64::NAN),
                            ho.unwrap_or(f64::NAN),
                            ho_pb.unwrap_or(f64::NAN),
                            still.unwrap_or(f64::NAN),
                            prog.mangled
                        )?;
                    }
                    if let Ok(path) = std::env::var("KL_REPLAY_RANKS") {
                        // One JSON line per case for the refinement simulator
                        // (bench/gpu/refine/simulate.py): the ranking the rational program
                        // gives (what its `rank` returns), its profiled best, the program's
                        // own shape and every time the sweep measured.
                        use std::io::Write as _;
                        let times: BTreeMap<String, f64> = meas
                            .iter()
                            .map(|(b, t)| (format!("{}x{}x{}", b[0], b[1], b[2]), *t))
                            .collect();
                        let line = serde_json::json!({
                            "device": prog.device.name,
                            "program": name,
                            "kernel": prog.kernel,
                            "dim": prog.dim,
                            "size": size,
                            "ranked": ranked.iter().map(|r| r.block).collect::<Vec<_>>(),
                            "predicted_us": ranked.iter().map(|r| r.prediction.time_us).collect::<Vec<_>>(),
                            "profiled": prog.profiled_best(&size),
                            "program_shape": def,
                            "times_ms": times,
                            // The profile's timed samples (sizes, block, ms), for rules
                            // that read the measurements themselves.
                            "profile_samples": profile.as_ref().map_or(Vec::new(), |p| p.samples.clone()),
                        });
                        let mut f = std::fs::OpenOptions::new()
                            .create(true)
                            .append(true)
                            .open(path)?;
                        writeln!(f, "{line}")?;
                    }
                    rows.push(Row {
                        program: name.clone(),
                        kernel: prog.kernel.clone(),
                        mangled: prog.mangled.clone(),
                        optimum: *meas.iter().min_by(|x, y| x.1.total_cmp(y.1)).unwrap().0,
                        pick: pick.block,
                        ratio: best / meas[&pick.block],
                        model_pick,
                        model_ratio: best / meas[&model_pick],
                        chosen_by: prog
                            .decision
                            .as_ref()
                            .map_or("model", |d| d.chosen_by.as_str()),
                        default: meas.get(&def).map(|t| best / t).unwrap_or(f64::NAN),
                        profiled,
                        size,
                    });
                }
            }
        }
    }
    rows.sort_by(|a, b| a.ratio.total_cmp(&b.ratio));
    let pb = |r: &Row| r.profiled.and_then(|p| p.1);
    if verbose {
        for r in &rows {
            println!(
                "{:10} {:14} {:>16} opt {:>9} pick {:>9} {:.2} (model {:>9} {:.2})  profiled_best {:>9} {}  default {:.2}",
                r.program,
                r.kernel,
                format!("{:?}", r.size),
                shape(r.optimum),
                shape(r.pick),
                r.ratio,
                shape(r.model_pick),
                r.model_ratio,
                r.profiled.map_or_else(|| "-".into(), |p| shape(p.0)),
                pb(r).map_or_else(|| "-".into(), |x| format!("{x:.2}")),
                r.default
            );
        }
    }
    let summary = |v: &[f64]| -> String {
        match validate::stats(v) {
            Some(s) => format!(
                "geomean {:.3} min {:.3} ≥0.90 {} <0.80 {}",
                s.geomean,
                s.min,
                v.iter().filter(|&&r| r >= 0.9).count(),
                s.below_080
            ),
            None => "no case".into(),
        }
    };
    let k: Vec<f64> = rows.iter().map(|r| r.ratio).collect();
    let km: Vec<f64> = rows.iter().map(|r| r.model_ratio).collect();
    let d: Vec<f64> = rows
        .iter()
        .map(|r| r.default)
        .filter(|x| x.is_finite())
        .collect();
    let p: Vec<f64> = rows.iter().filter_map(pb).collect();
    println!("cases {}", rows.len());
    println!("klaraptor      {}", summary(&k));
    println!("model alone    {}", summary(&km));
    println!(
        "profiled_best  {} (over {} cases; {} without a profile or a timed shape)",
        summary(&p),
        p.len(),
        rows.len() - p.len()
    );
    println!("default        {} (over {} cases)", summary(&d), d.len());
    // Per kernel: the link's decision and its evidence, and the sweep's verdict (issue 27's
    // acceptance: no kernel whose geomean is below 0.95 × its profiled_best's).
    let mut kernels: BTreeMap<(String, String), Vec<&Row>> = BTreeMap::new();
    for r in &rows {
        kernels
            .entry((r.program.clone(), r.mangled.clone()))
            .or_default()
            .push(r);
    }
    let geo = |v: Vec<f64>| validate::stats(&v).map_or(f64::NAN, |s| s.geomean);
    let mut failing = Vec::new();
    println!(
        "\nper kernel: chosen by, held-out model / profiled best (the link's check), then the \
         sweep's geomeans: klaraptor, model alone, profiled_best"
    );
    for ((program, mangled), v) in &kernels {
        let gk = geo(v.iter().map(|r| r.ratio).collect());
        let gm = geo(v.iter().map(|r| r.model_ratio).collect());
        let gp = geo(v.iter().filter_map(|r| pb(r)).collect());
        let ev = evidence.get(&(program.clone(), mangled.clone()));
        let flag = if gk < 0.95 * gp {
            "  < 0.95 × profiled_best"
        } else {
            ""
        };
        if !flag.is_empty() {
            failing.push(format!("{program} {}", v[0].kernel));
        }
        println!(
            "  {:10} {:14} {:13} held-out {:>5} / {:>5} (n {})  sweep {gk:.3} {gm:.3} {gp:.3}{flag}",
            program,
            v[0].kernel,
            v[0].chosen_by,
            ev.and_then(|e| e.0).map_or("-".into(), |x| format!("{x:.3}")),
            ev.and_then(|e| e.1).map_or("-".into(), |x| format!("{x:.3}")),
            ev.map_or(0, |e| e.2),
        );
    }
    if let Some(path) = &json {
        let summary = super::reduce::ReplaySummary {
            cases: rows.len(),
            klaraptor: geo(k.clone()),
            model: geo(km.clone()),
            kernels: kernels
                .iter()
                .map(|((program, mangled), v)| {
                    (
                        format!("{program} {} {mangled}", v[0].kernel),
                        (
                            geo(v.iter().map(|r| r.ratio).collect()),
                            geo(v.iter().map(|r| r.model_ratio).collect()),
                            v.len(),
                        ),
                    )
                })
                .collect(),
        };
        super::reduce::write_summary(path, &summary)?;
    }
    println!(
        "kernels below 0.95 × their profiled_best: {} {:?}",
        failing.len(),
        failing
    );
    // Where the profile alone beats the model by more than 5 %.
    let mut better: BTreeMap<(String, String, String), Vec<&Row>> = BTreeMap::new();
    for r in &rows {
        if pb(r).is_some_and(|x| x > 1.05 * r.ratio) {
            better
                .entry((r.program.clone(), r.kernel.clone(), r.mangled.clone()))
                .or_default()
                .push(r);
        }
    }
    if !better.is_empty() {
        println!("\nprofiled_best beats klaraptor by more than 5 %:");
        for ((program, kernel, mangled), v) in &better {
            let all: Vec<&Row> = rows
                .iter()
                .filter(|r| &r.program == program && &r.mangled == mangled)
                .collect();
            let gk = validate::stats(&all.iter().map(|r| r.ratio).collect::<Vec<_>>())
                .map_or(f64::NAN, |s| s.geomean);
            let gp = validate::stats(&all.iter().filter_map(|r| pb(r)).collect::<Vec<_>>())
                .map_or(f64::NAN, |s| s.geomean);
            println!(
                "  {program} {kernel} ({mangled}): {} of {} sizes; over its sizes klaraptor {gk:.3}, profiled_best {gp:.3}",
                v.len(),
                all.len()
            );
            for r in v {
                println!(
                    "    {:?}: klaraptor {} {:.2}, profiled_best {} {:.2}, optimum {}",
                    r.size,
                    shape(r.pick),
                    r.ratio,
                    shape(r.profiled.unwrap().0),
                    pb(r).unwrap(),
                    shape(r.optimum)
                );
            }
        }
    }
    for n in &no_profile {
        println!("no profile: {n}");
    }
    Ok(())
}

fn shape(b: [u32; 3]) -> String {
    if b[1] == 1 && b[2] == 1 {
        format!("{}", b[0])
    } else {
        format!("{}x{}", b[0], b[1])
    }
}

/// How still the profile's fastest shape stands over its sizes: the shape fastest at the
/// largest profiled size, timed at every profiled size, as the worst of (fastest time there /
/// its time there). 1 when one shape was fastest at every size.
fn stationary(samples: &[validate::ProfileSample]) -> Option<f64> {
    let mut by: BTreeMap<&[i64], BTreeMap<[u32; 3], f64>> = BTreeMap::new();
    for (sz, b, t) in samples {
        by.entry(sz.as_slice()).or_default().insert(*b, *t);
    }
    let work = |s: &[i64]| s.iter().map(|&v| v.max(1) as f64).product::<f64>();
    let (_, last) = by.iter().max_by(|a, b| work(a.0).total_cmp(&work(b.0)))?;
    let (&top, _) = last.iter().min_by(|a, b| a.1.total_cmp(b.1))?;
    by.values()
        .map(|m| {
            let best = m.values().cloned().fold(f64::INFINITY, f64::min);
            m.get(&top).map_or(0.0, |t| best / t)
        })
        .reduce(f64::min)
}
