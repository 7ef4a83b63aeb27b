//! Validation of klaraptor's launch choice against an exhaustive search over the block
//! shapes: what `klaraptor validate` (a user's program) and the accuracy study
//! (bench/accuracy, the PolyBench samples) both compute.
//!
//! For one kernel at one data size, the exhaustive sweep (the profiling variant under the
//! time-only collector: warm-up launches, then the median of the timed ones, per shape) gives
//! a measured time per shape. Each method's shape is looked up in that sweep, so every method
//! is timed by the same harness:
//! - **optimum**: the fastest measured shape;
//! - **klaraptor**: the shape the instrumented build chose (its `KLARAPTOR_LOG` line), or the
//!   rational program's first-ranked shape where no run logged one;
//! - **default**: the program's own shape;
//! - **occupancy**: the block `cudaOccupancyMaxPotentialBlockSize` suggests: in the study the
//!   API's own answer (the sample harness calls it on the GPU), in `klaraptor validate`
//!   computed by klaraptor's occupancy calculator ([`computed_occupancy_pick`]); for a 2-D or
//!   3-D kernel its best factorisation ([`occupancy_shape`]).
//!
//! The ratio of a method is optimum time / method time (1 = optimal); Spearman's rank
//! correlation of the rational program's predicted times with the measured ones, over the
//! shapes with both, says how well the model orders the shapes.
//!
//! Also here: the readers of what a sweep and a run leave (the profiling runtime's records,
//! the runtime's decision log lines) and the JSON records both tools write.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{bail, Context, Result};
use klaraptor_profiler::record::Sample;
use serde::Serialize;

use crate::rational::RationalProgram;

/// The methods compared, in report order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Method {
    Optimum,
    Klaraptor,
    Default,
    Occupancy,
}

impl Method {
    pub const ALL: [Method; 4] = [
        Method::Optimum,
        Method::Klaraptor,
        Method::Default,
        Method::Occupancy,
    ];
    /// The methods that are compared with the optimum.
    pub const COMPARED: [Method; 3] = [Method::Klaraptor, Method::Default, Method::Occupancy];
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Optimum => "optimum",
            Method::Klaraptor => "klaraptor",
            Method::Default => "default",
            Method::Occupancy => "occupancy",
        }
    }
}

/// The shape a method picked at one kernel × size, and its time in the sweep.
#[derive(Debug, Clone, Default)]
pub struct Pick {
    pub block: Option<[u32; 3]>,
    /// The sweep's median time of that shape.
    pub time_ms: Option<f64>,
    /// optimum time / time.
    pub ratio: Option<f64>,
    /// The rational program's prediction for that shape, where there is one.
    pub predicted_ms: Option<f64>,
    /// Where the shape came from and how it was timed.
    pub how: String,
    /// A harness's own time of the run that used this shape, and its launch count (a site
    /// in a host loop sums its launches); the study's KL_TIME lines.
    pub harness_ms: Option<f64>,
    pub harness_launches: Option<u64>,
    /// Something a reader should know (a fallback, a disagreement).
    pub flag: Option<String>,
}

/// One kernel at one data size.
#[derive(Debug, Clone, Default)]
pub struct Case {
    pub program: String,
    pub kernel: String,
    /// The run it came from: the study's job id (`<program>/x<k>`), validate's `run<i>`.
    pub job: String,
    pub dim: u8,
    pub labels: Vec<String>,
    pub sizes: Vec<i64>,
    /// Shape → median time (ms) of every shape the sweep measured.
    pub measured: BTreeMap<[u32; 3], f64>,
    /// Shapes that could not be measured, and why.
    pub failed: Vec<([u32; 3], String)>,
    /// How many candidate shapes the kernel has.
    pub candidates: usize,
    /// Shape → predicted time (ms), from the rational program (empty without one).
    pub predicted: BTreeMap<[u32; 3], f64>,
    pub picks: BTreeMap<Method, Pick>,
    /// Spearman's rank correlation of predicted and measured time over the shapes.
    pub spearman: Option<f64>,
}

/// What the rational program made of a case's size ([`Case::predict`]).
#[derive(Debug, Clone, Default)]
pub struct Ranking {
    /// Its first-ranked shape: what the generated C selects.
    pub first: Option<[u32; 3]>,
    /// Why it could not rank, if it could not.
    pub error: Option<String>,
}

impl Case {
    pub fn complete(&self) -> bool {
        self.measured.len() + self.failed.len() >= self.candidates
    }
    pub fn sizes_text(&self) -> String {
        self.sizes
            .iter()
            .map(|v| v.to_string())
            .collect::<Vec<_>>()
            .join("×")
    }
    pub fn work(&self) -> f64 {
        self.sizes.iter().map(|&v| v as f64).product()
    }
    pub fn ratio(&self, m: Method) -> Option<f64> {
        self.picks.get(&m).and_then(|p| p.ratio)
    }

    /// Reads the sweep's samples of this kernel at this size into `measured` and `failed`,
    /// and sets the optimum pick (the fastest measured shape).
    pub fn measure<'a>(&mut self, samples: impl IntoIterator<Item = &'a Sample>) {
        for s in samples {
            match (&s.error, &s.counters) {
                (None, Some(c)) if c.time_ms.is_finite() && c.time_ms > 0.0 => {
                    self.measured.insert(s.block, c.time_ms);
                }
                (Some(e), _) => self.failed.push((s.block, e.clone())),
                _ => self.failed.push((s.block, "no time recorded".into())),
            }
        }
        if let Some((b, t)) = self.fastest() {
            self.picks.insert(
                Method::Optimum,
                Pick {
                    block: Some(b),
                    time_ms: Some(t),
                    ratio: Some(1.0),
                    how: format!(
                        "the fastest of {} measured shapes (exhaustive sweep)",
                        self.measured.len()
                    ),
                    ..Pick::default()
                },
            );
        }
    }

    /// The fastest measured shape and its time.
    pub fn fastest(&self) -> Option<([u32; 3], f64)> {
        self.measured
            .iter()
            .min_by(|a, b| a.1.total_cmp(b.1))
            .map(|(b, t)| (*b, *t))
    }

    /// Ranks every candidate of `manifest` at this size ([`RationalProgram::rank`], the
    /// function the generated C computes) into `predicted`.
    pub fn predict(&mut self, manifest: &RationalProgram) -> Ranking {
        match manifest.rank(&self.sizes) {
            Ok(r) => {
                let first = r.first().map(|x| x.block);
                for x in r {
                    self.predicted
                        .insert(x.block, x.prediction.time_us / 1000.0);
                }
                Ranking { first, error: None }
            }
            Err(e) => Ranking {
                first: None,
                error: Some(format!("{e:#}")),
            },
        }
    }

    /// After the picks are set: each compared method's time and ratio from the sweep, its
    /// prediction, and Spearman over the shapes with both a prediction and a time.
    pub fn time_picks(&mut self) {
        let best = self.fastest();
        if let Some(p) = self.picks.get_mut(&Method::Optimum) {
            if let Some(b) = p.block {
                p.predicted_ms = self.predicted.get(&b).copied();
            }
        }
        for (m, p) in self.picks.iter_mut() {
            if *m == Method::Optimum {
                continue;
            }
            let Some(b) = p.block else { continue };
            p.predicted_ms = self.predicted.get(&b).copied().or(p.predicted_ms);
            match self.measured.get(&b) {
                Some(&t) => {
                    p.time_ms = Some(t);
                    p.ratio = best.map(|(_, bt)| bt / t);
                    p.how.push_str("; timed by the exhaustive sweep");
                }
                None => {
                    p.how.push_str(&format!(
                        "; {} is not among the measured shapes: no time",
                        shape_text(b)
                    ));
                }
            }
        }
        let (mut xs, mut ys) = (Vec::new(), Vec::new());
        for (b, t) in &self.measured {
            if let Some(p) = self.predicted.get(b) {
                xs.push(*p);
                ys.push(*t);
            }
        }
        self.spearman = spearman(&xs, &ys);
    }

    /// The rank (1 = first) of the measured optimum in the predicted order.
    pub fn optimum_rank(&self) -> Option<usize> {
        let best = self.picks.get(&Method::Optimum)?.block?;
        let pb = *self.predicted.get(&best)?;
        Some(self.predicted.values().filter(|&&v| v < pb).count() + 1)
    }
}

/// klaraptor's pick from the decision a run logged at a case's size (`run` says which run,
/// e.g. "the instrumented build"): the block it launched, flagged when the model did not
/// choose it, or when the rational program (`first`, [`Case::predict`]) ranks another shape
/// first.
pub fn decision_pick(d: &Decision, first: Option<[u32; 3]>, run: &str) -> Pick {
    let mut k = Pick {
        block: Some(d.block),
        ..Pick::default()
    };
    if d.from_model() {
        k.how = format!("klaraptor's choice in {run} (KLARAPTOR_LOG, source=model)");
        if let Some(f) = first.filter(|f| *f != d.block) {
            k.flag = Some(format!(
                "the manifest ranks {} first, the run chose {}",
                shape_text(f),
                shape_text(d.block)
            ));
        }
        k.predicted_ms = d.predicted_us.map(|u| u / 1000.0);
    } else {
        k.how = format!(
            "no model choice: the run launched its own shape ({})",
            d.source
        );
        k.flag = Some(format!("klaraptor did not choose: {}", d.source));
    }
    k
}

/// What the study calls the occupancy API in its `how` texts.
pub const OCCUPANCY_API: &str = "cudaOccupancyMaxPotentialBlockSize";

/// The shape the occupancy baseline stands for, from the 1-D block size `n` the occupancy
/// API returns (`source` names where `n` came from, the start of the returned text): `n`
/// itself for a 1-D kernel; otherwise the candidates are powers of two, so `n` is rounded
/// down to a power of two `p` and, of the power-of-two shapes with `p` threads in the
/// kernel's dimensions, the one the sweep measured fastest is taken (the "best
/// factorisation": the most favourable reading of the baseline). The accuracy study and
/// `klaraptor validate` both use this rule.
pub fn occupancy_shape(
    dim: u8,
    n: u32,
    measured: &BTreeMap<[u32; 3], f64>,
    source: &str,
) -> (Option<[u32; 3]>, String) {
    if n == 0 {
        return (None, "the occupancy API returned block 0".into());
    }
    if dim <= 1 {
        return (Some([n, 1, 1]), format!("{source}: block {n}"));
    }
    let p = 1u32 << (31 - n.leading_zeros());
    let mut best: Option<([u32; 3], f64)> = None;
    let mut count = 0;
    for (b, &t) in measured {
        let threads = u64::from(b[0]) * u64::from(b[1]) * u64::from(b[2]);
        let fits = threads == u64::from(p)
            && b.iter().all(|&v| v.is_power_of_two())
            && (dim >= 3 || b[2] == 1);
        if fits {
            count += 1;
            if best.is_none_or(|(_, bt)| t < bt) {
                best = Some((*b, t));
            }
        }
    }
    let rounded = if p == n {
        String::new()
    } else {
        format!(" → {p} (the largest power of two ≤ {n}: candidates are powers of two)")
    };
    match best {
        Some((b, _)) => (
            Some(b),
            format!(
                "{source}: block {n}{rounded}; the fastest of its {count} measured {dim}-D \
                 factorisations"
            ),
        ),
        None => (
            None,
            format!("{source}: block {n}{rounded}; none of its factorisations was measured"),
        ),
    }
}

/// The occupancy baseline where no harness called the API (`klaraptor validate`): the block
/// size `cudaOccupancyMaxPotentialBlockSize(…, 0, 0)` returns, computed by
/// [`klaraptor_model::max_potential_block_size`] (which rests on the occupancy calculator
/// that equals `cudaOccupancyMaxActiveBlocksPerMultiprocessor` on the H200) for the device
/// of `manifest`, then read as a shape by [`occupancy_shape`]. The kernel's registers per
/// thread and shared memory per block are those the sweep's records report for the swept
/// code (`samples`: the most over them; static plus the dynamic shared memory the launches
/// passed), else the rational program's.
pub fn computed_occupancy_pick<'a>(
    manifest: &RationalProgram,
    dim: u8,
    measured: &BTreeMap<[u32; 3], f64>,
    samples: impl IntoIterator<Item = &'a Sample>,
) -> Pick {
    let counted: Vec<(u32, u32)> = samples
        .into_iter()
        .filter_map(|s| s.counters.as_ref())
        .map(|c| {
            (
                c.regs_per_thread,
                c.smem_static.saturating_add(c.smem_dynamic),
            )
        })
        .collect();
    let (regs, smem, from) = match counted
        .iter()
        .copied()
        .reduce(|a, b| (a.0.max(b.0), a.1.max(b.1)))
    {
        Some((r, m)) => (r, m, "the sweep's records"),
        None => (
            manifest.regs_per_thread,
            manifest.smem_per_block,
            "the rational program",
        ),
    };
    let dev = &manifest.device;
    let inputs = format!(
        "{regs} registers/thread and {smem} B shared memory/block from {from}, {} limits",
        dev.name
    );
    let mut p = Pick::default();
    match klaraptor_model::max_potential_block_size(dev, regs, smem) {
        Some(x) => {
            let source = format!("{OCCUPANCY_API} computed by klaraptor ({inputs})");
            let (b, how) = occupancy_shape(dim, x.block_size, measured, &source);
            p.block = b;
            p.how = how;
        }
        None => {
            p.how = format!(
                "{OCCUPANCY_API} computed by klaraptor ({inputs}): no block size can launch \
                 (the API returns block 0)"
            )
        }
    }
    p
}

/// `AxBxC`.
pub fn shape_text(b: [u32; 3]) -> String {
    format!("{}x{}x{}", b[0], b[1], b[2])
}

/// Spearman's rank correlation of two equally long series (ties get their average rank);
/// `None` with fewer than three points or a constant series.
pub fn spearman(a: &[f64], b: &[f64]) -> Option<f64> {
    if a.len() != b.len() || a.len() < 3 {
        return None;
    }
    let ra = ranks(a);
    let rb = ranks(b);
    let n = a.len() as f64;
    let ma = ra.iter().sum::<f64>() / n;
    let mb = rb.iter().sum::<f64>() / n;
    let (mut sab, mut saa, mut sbb) = (0.0, 0.0, 0.0);
    for (x, y) in ra.iter().zip(&rb) {
        sab += (x - ma) * (y - mb);
        saa += (x - ma) * (x - ma);
        sbb += (y - mb) * (y - mb);
    }
    if saa == 0.0 || sbb == 0.0 {
        return None;
    }
    Some(sab / (saa * sbb).sqrt())
}

fn ranks(v: &[f64]) -> Vec<f64> {
    let mut idx: Vec<usize> = (0..v.len()).collect();
    idx.sort_by(|&i, &j| v[i].total_cmp(&v[j]));
    let mut r = vec![0.0; v.len()];
    let mut i = 0;
    while i < idx.len() {
        let mut j = i;
        while j + 1 < idx.len() && v[idx[j + 1]] == v[idx[i]] {
            j += 1;
        }
        let avg = (i + j) as f64 / 2.0 + 1.0;
        for &k in &idx[i..=j] {
            r[k] = avg;
        }
        i = j + 1;
    }
    r
}

/// Summary statistics of a method's ratios.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stats {
    pub n: usize,
    pub geomean: f64,
    pub min: f64,
    pub share_ge_090: f64,
    pub below_080: usize,
}

pub fn stats(ratios: &[f64]) -> Option<Stats> {
    if ratios.is_empty() {
        return None;
    }
    let n = ratios.len();
    let geomean = (ratios.iter().map(|r| r.ln()).sum::<f64>() / n as f64).exp();
    Some(Stats {
        n,
        geomean,
        min: ratios.iter().cloned().fold(f64::INFINITY, f64::min),
        share_ge_090: ratios.iter().filter(|&&r| r >= 0.90).count() as f64 / n as f64,
        below_080: ratios.iter().filter(|&&r| r < 0.80).count(),
    })
}

/// One record of the JSON both tools write: one per case × method.
#[derive(Debug, Clone, Serialize)]
pub struct Record {
    pub program: String,
    pub kernel: String,
    /// Data parameter → value (the kernel's annotation labels).
    pub sizes: serde_json::Map<String, serde_json::Value>,
    pub method: &'static str,
    pub block: Option<[u32; 3]>,
    /// The exhaustive sweep's median time of `block` (null: not measured).
    pub time_ms: Option<f64>,
    /// The rational program's prediction for `block`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub predicted_ms: Option<f64>,
    /// optimum time / time.
    pub ratio: Option<f64>,
    /// Where the shape came from and how it was timed.
    pub how: String,
    /// A harness's own median of the run that used this shape, and its launch count.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub harness_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub harness_launches: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flag: Option<String>,
    /// The run the case came from ([`Case::job`]).
    pub job: String,
}

/// The records of `cases`, one per case × method that has a pick.
pub fn records(cases: &[Case]) -> Vec<Record> {
    let mut out = Vec::new();
    for c in cases {
        let mut sizes = serde_json::Map::new();
        for (l, v) in c.labels.iter().zip(&c.sizes) {
            sizes.insert(l.clone(), serde_json::Value::from(*v));
        }
        for m in Method::ALL {
            let Some(p) = c.picks.get(&m) else { continue };
            out.push(Record {
                program: c.program.clone(),
                kernel: c.kernel.clone(),
                sizes: sizes.clone(),
                method: m.as_str(),
                block: p.block,
                time_ms: p.time_ms,
                predicted_ms: p.predicted_ms,
                ratio: p.ratio,
                how: p.how.clone(),
                harness_ms: p.harness_ms,
                harness_launches: p.harness_launches,
                flag: p.flag.clone(),
                job: c.job.clone(),
            });
        }
    }
    out
}

/// `AxBxC`, `AxB` or `A` as a block.
pub fn parse_block(s: &str) -> Option<[u32; 3]> {
    let v: Vec<u32> = s
        .split('x')
        .map(|x| x.parse().ok())
        .collect::<Option<_>>()?;
    match v[..] {
        [x] => Some([x, 1, 1]),
        [x, y] => Some([x, y, 1]),
        [x, y, z] => Some([x, y, z]),
        _ => None,
    }
}

/// One decision line of `KLARAPTOR_LOG` (runtime-shim/src/klaraptor_rt.c, log_decision):
/// `klaraptor: <kernel> L=v… block=AxBxC grid=AxBxC source=<text> device=<i>:<name>
/// [program_block=AxBxC]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub kernel: String,
    pub data: Vec<(String, i64)>,
    pub block: [u32; 3],
    pub grid: [u32; 3],
    /// "model predicted_us=…", "program", "forced", "fallback: …".
    pub source: String,
    pub predicted_us: Option<f64>,
    /// `<ordinal>:<name>`.
    pub device: String,
    /// The program's own block, when the launch was rewritten.
    pub program_block: Option<[u32; 3]>,
}

impl Decision {
    pub fn from_model(&self) -> bool {
        self.source == "model" || self.source.starts_with("model ")
    }
    pub fn sizes(&self) -> Vec<i64> {
        self.data.iter().map(|(_, v)| *v).collect()
    }
    /// The device's name, without its ordinal.
    pub fn device_name(&self) -> &str {
        self.device
            .split_once(':')
            .map_or(self.device.as_str(), |(_, n)| n)
    }
    /// The program's own block: `program_block` when the launch was rewritten, else the
    /// block the launch kept (no model, a fallback).
    pub fn own_block(&self) -> Option<[u32; 3]> {
        match self.program_block {
            Some(b) => Some(b),
            None if self.source == "program" || self.source.starts_with("fallback") => {
                Some(self.block)
            }
            None => None,
        }
    }
}

/// `None` for a line that is not a decision (other log lines: unknown kernels, memo full).
pub fn parse_decision(line: &str) -> Option<Result<Decision>> {
    let rest = line.strip_prefix("klaraptor: ")?;
    if !rest.contains(" block=") || !rest.contains(" source=") {
        return None;
    }
    Some(
        (|| -> Result<Decision> {
            let (head, tail) = rest.split_once(" source=").context("no source=")?;
            let mut toks = head.split_whitespace();
            let kernel = toks.next().context("no kernel")?.to_string();
            let mut data = Vec::new();
            let (mut block, mut grid) = (None, None);
            for t in toks {
                let (k, v) = t.split_once('=').with_context(|| format!("token {t:?}"))?;
                match k {
                    "block" => block = parse_block(v),
                    "grid" => grid = parse_block(v),
                    _ => data.push((
                        k.to_string(),
                        v.parse::<i64>()
                            .with_context(|| format!("data value {t:?}"))?,
                    )),
                }
            }
            let (tail, program_block) = match tail.rsplit_once(" program_block=") {
                Some((t, pb)) => (t, Some(parse_block(pb.trim()).context("program_block")?)),
                None => (tail, None),
            };
            let (source, device) = tail.rsplit_once(" device=").context("no device=")?;
            let predicted_us = source
                .strip_prefix("model predicted_us=")
                .and_then(|v| v.trim().parse::<f64>().ok());
            Ok(Decision {
                kernel,
                data,
                block: block.context("no block=")?,
                grid: grid.context("no grid=")?,
                source: source.to_string(),
                predicted_us,
                device: device.trim().to_string(),
                program_block,
            })
        })()
        .with_context(|| format!("in the log line {line:?}")),
    )
}

/// The decision lines of a log file (other lines are skipped).
pub fn read_decisions(path: &Path) -> Result<Vec<Decision>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut out = Vec::new();
    for (i, l) in text.lines().enumerate() {
        if let Some(d) = parse_decision(l) {
            out.push(d.with_context(|| format!("{}:{}", path.display(), i + 1))?);
        }
    }
    Ok(out)
}

/// The samples one kernel got in one records directory.
#[derive(Debug, Clone)]
pub struct Sweep {
    /// The kernel's id (mangled name) and source name, from kernels.tsv.
    pub id: String,
    pub name: String,
    pub samples: Vec<Sample>,
}

impl Sweep {
    /// The samples grouped by data size, sizes in order.
    pub fn by_size(&self) -> BTreeMap<Vec<i64>, Vec<&Sample>> {
        let mut out: BTreeMap<Vec<i64>, Vec<&Sample>> = BTreeMap::new();
        for s in &self.samples {
            out.entry(s.sizes.clone()).or_default().push(s);
        }
        out
    }
}

/// Every kernel's samples in a records directory (the profiling runtime's layout:
/// `kernels.tsv` with `<stem> TAB <id> TAB <name>` lines, `<stem>.jsonl` per kernel). A
/// directory without `kernels.tsv` has none.
pub fn read_records(dir: &Path) -> Result<Vec<Sweep>> {
    let index = dir.join("kernels.tsv");
    let text = match std::fs::read_to_string(&index) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("reading {}", index.display())),
    };
    let mut by_stem: BTreeMap<String, (String, String)> = BTreeMap::new();
    for (i, l) in text.lines().enumerate() {
        if l.trim().is_empty() {
            continue;
        }
        let f: Vec<&str> = l.split('\t').collect();
        if f.len() < 3 {
            bail!(
                "{}:{}: expected <stem> TAB <id> TAB <name>",
                index.display(),
                i + 1
            );
        }
        by_stem.insert(f[0].into(), (f[1].into(), f[2].into()));
    }
    let mut out = Vec::new();
    for (stem, (id, name)) in by_stem {
        let path = dir.join(format!("{stem}.jsonl"));
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        };
        let mut samples = Vec::new();
        let n = text.lines().count();
        for (i, l) in text.lines().enumerate() {
            if l.trim().is_empty() {
                continue;
            }
            match serde_json::from_str::<Sample>(l) {
                Ok(s) => samples.push(s),
                // A run killed by its timeout can leave half a line at the end.
                Err(_) if i + 1 == n && !text.ends_with('\n') => {}
                Err(e) => {
                    return Err(e)
                        .with_context(|| format!("{}:{}: not a sample", path.display(), i + 1))
                }
            }
        }
        out.push(Sweep { id, name, samples });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spearman_values() {
        let a = [1.0, 2.0, 3.0, 4.0, 5.0];
        assert_eq!(spearman(&a, &[10.0, 20.0, 30.0, 40.0, 50.0]), Some(1.0));
        assert_eq!(spearman(&a, &[5.0, 4.0, 3.0, 2.0, 1.0]), Some(-1.0));
        // A monotone transform does not change it.
        let r = spearman(&a, &[1.0, 8.0, 27.0, 64.0, 125.0]).unwrap();
        assert!((r - 1.0).abs() < 1e-12);
        // Ties share their average rank: y = 1 3 2 2 5 has ranks 1 4 2.5 2.5 5; against
        // x = 1..5 that gives, by hand, sum dx·dy = 6.5, sum dx² = 10, sum dy² = 9.5.
        let r = spearman(&a, &[1.0, 3.0, 2.0, 2.0, 5.0]).unwrap();
        assert!((r - 6.5 / 95f64.sqrt()).abs() < 1e-12, "{r}");
        assert_eq!(spearman(&[1.0, 2.0], &[1.0, 2.0]), None);
        assert_eq!(spearman(&a, &[1.0; 5]), None);
    }

    #[test]
    fn stats_values() {
        let s = stats(&[1.0, 0.5, 0.95, 0.85]).unwrap();
        assert_eq!(s.n, 4);
        assert!((s.geomean - (1.0f64 * 0.5 * 0.95 * 0.85).powf(0.25)).abs() < 1e-12);
        assert_eq!(s.min, 0.5);
        assert_eq!(s.share_ge_090, 0.5);
        assert_eq!(s.below_080, 1);
        assert!(stats(&[]).is_none());
    }

    #[test]
    fn blocks() {
        assert_eq!(parse_block("32x8x1"), Some([32, 8, 1]));
        assert_eq!(parse_block("32x8"), Some([32, 8, 1]));
        assert_eq!(parse_block("256"), Some([256, 1, 1]));
        assert_eq!(parse_block("1x2x3x4"), None);
        assert_eq!(parse_block("ax1"), None);
        assert_eq!(shape_text([16, 4, 2]), "16x4x2");
    }

    #[test]
    fn decisions() {
        let d = parse_decision(
            "klaraptor: gemm NI=1000 NJ=1000 NK=1000 block=64x4x1 grid=16x250x1 source=model \
             predicted_us=388 device=0:NVIDIA H200 program_block=32x8x1",
        )
        .unwrap()
        .unwrap();
        assert_eq!(d.kernel, "gemm");
        assert_eq!(d.sizes(), [1000, 1000, 1000]);
        assert_eq!(d.data[1].0, "NJ");
        assert_eq!(d.block, [64, 4, 1]);
        assert_eq!(d.grid, [16, 250, 1]);
        assert!(d.from_model());
        assert_eq!(d.predicted_us, Some(388.0));
        assert_eq!(d.device, "0:NVIDIA H200");
        assert_eq!(d.device_name(), "NVIDIA H200");
        assert_eq!(d.program_block, Some([32, 8, 1]));
        assert_eq!(d.own_block(), Some([32, 8, 1]));
        let f = parse_decision(
            "klaraptor: mvt_x1 N=5000 block=256x1x1 grid=20x1x1 source=fallback: no model for \
             this device (the model is for NVIDIA H100) device=0:NVIDIA H200",
        )
        .unwrap()
        .unwrap();
        assert!(!f.from_model());
        assert!(f.source.starts_with("fallback: no model"));
        assert_eq!(f.program_block, None);
        assert_eq!(f.own_block(), Some([256, 1, 1]));
        let p = parse_decision(
            "klaraptor: k N=7 block=128x1x1 grid=1x1x1 source=program device=1:Some GPU",
        )
        .unwrap()
        .unwrap();
        assert_eq!(p.own_block(), Some([128, 1, 1]));
        assert_eq!(p.device_name(), "Some GPU");
        // The runtime names the program's block on every rewritten launch; a rewritten
        // launch without it tells nothing of the program's own block.
        let same =
            parse_decision("klaraptor: k N=7 block=128x1x1 grid=1x1x1 source=forced device=0:G")
                .unwrap()
                .unwrap();
        assert_eq!(same.own_block(), None);
        assert!(parse_decision("klaraptor: the memo is full: later decisions are made").is_none());
        assert!(parse_decision(
            "klaraptor: k N=x block=1x1x1 grid=1x1x1 source=program device=0:G"
        )
        .unwrap()
        .is_err());
    }

    /// A sample as the time-only collector writes it (hardware counters 0).
    fn sample(block: [u32; 3], time_ms: Option<f64>, error: Option<&str>) -> Sample {
        let counters = time_ms.map(|t| {
            serde_json::from_str::<serde_json::Value>(&format!(
                r#"{{"inst_executed":0,"inst_global_ld":0,"inst_global_st":0,"inst_shared_ld":0,"inst_shared_st":0,"inst_barrier":0,"gld_requests":0,"gst_requests":0,"gld_sectors":0,"gst_sectors":0,"dram_bytes_read":0,"dram_bytes_write":0,"achieved_active_warps":0.0,"time_ms":{t},"time_runs_ms":[{t},{t},{t},{t},{t}],"regs_per_thread":16,"smem_static":0,"smem_dynamic":0}}"#
            ))
            .unwrap()
        });
        serde_json::from_value(serde_json::json!({
            "sizes": [100],
            "block": block,
            "grid": [1, 1, 1],
            "error": error,
            "counters": counters,
        }))
        .unwrap()
    }

    #[test]
    fn a_case_from_samples() {
        let samples = [
            sample([32, 1, 1], Some(4.0), None),
            sample([64, 1, 1], Some(2.0), None),
            sample([128, 1, 1], Some(1.0), None),
            sample([256, 1, 1], Some(1.25), None),
            sample(
                [2048, 1, 1],
                None,
                Some("more threads than the device allows"),
            ),
            sample([512, 1, 1], Some(0.0), None),
        ];
        let mut c = Case {
            kernel: "k".into(),
            dim: 1,
            labels: vec!["N".into()],
            sizes: vec![100],
            candidates: 6,
            ..Case::default()
        };
        c.measure(&samples);
        assert_eq!(c.measured.len(), 4);
        assert_eq!(c.failed.len(), 2);
        assert_eq!(c.failed[1].1, "no time recorded");
        assert!(c.complete());
        let opt = &c.picks[&Method::Optimum];
        assert_eq!((opt.block, opt.time_ms), (Some([128, 1, 1]), Some(1.0)));
        // Predictions that order the shapes exactly as measured, except 256 and 128.
        for (b, p) in [(32, 40.0), (64, 20.0), (128, 12.0), (256, 11.0)] {
            c.predicted.insert([b, 1, 1], p);
        }
        c.picks.insert(
            Method::Klaraptor,
            Pick {
                block: Some([256, 1, 1]),
                ..Pick::default()
            },
        );
        c.picks.insert(
            Method::Default,
            Pick {
                block: Some([512, 1, 1]),
                ..Pick::default()
            },
        );
        c.time_picks();
        let k = &c.picks[&Method::Klaraptor];
        assert_eq!(k.time_ms, Some(1.25));
        assert_eq!(k.ratio, Some(0.8));
        assert_eq!(k.predicted_ms, Some(11.0));
        let d = &c.picks[&Method::Default];
        assert_eq!((d.time_ms, d.ratio), (None, None));
        assert!(
            d.how.contains("512x1x1 is not among the measured"),
            "{}",
            d.how
        );
        assert_eq!(c.picks[&Method::Optimum].predicted_ms, Some(12.0));
        // Ranks: measured 4 3 1 2, predicted 4 3 2 1: sum d² = 2, rho = 1 - 6·2/(4·15).
        assert!((c.spearman.unwrap() - 0.8).abs() < 1e-12);
        assert_eq!(c.optimum_rank(), Some(2));
        let recs = records(std::slice::from_ref(&c));
        let methods: Vec<&str> = recs.iter().map(|r| r.method).collect();
        assert_eq!(methods, ["optimum", "klaraptor", "default"]);
        assert_eq!(recs[1].sizes["N"], 100);
    }

    #[test]
    fn occupancy_rule() {
        let mut m = BTreeMap::new();
        m.insert([1024, 1, 1], 3.0);
        m.insert([512, 1, 1], 2.0);
        m.insert([256, 2, 1], 1.5);
        m.insert([32, 16, 1], 1.0);
        m.insert([16, 32, 1], 1.2);
        m.insert([32, 32, 1], 0.5);
        // Not a power of two: never a factorisation.
        m.insert([30, 1, 1], 0.1);
        // 1-D: the block itself, in the study's words.
        let (b, how) = occupancy_shape(1, 768, &m, OCCUPANCY_API);
        assert_eq!(b, Some([768, 1, 1]));
        assert_eq!(how, "cudaOccupancyMaxPotentialBlockSize: block 768");
        // 2-D, a power of two: the fastest of its factorisations.
        let (b, how) = occupancy_shape(2, 512, &m, OCCUPANCY_API);
        assert_eq!(b, Some([32, 16, 1]));
        assert_eq!(
            how,
            "cudaOccupancyMaxPotentialBlockSize: block 512; the fastest of its 4 measured 2-D \
             factorisations"
        );
        // Not a power of two: rounded down.
        let (b, how) = occupancy_shape(2, 768, &m, "computed");
        assert_eq!(b, Some([32, 16, 1]));
        assert!(how.starts_with("computed: block 768 → 512"), "{how}");
        let (b, how) = occupancy_shape(2, 64, &m, OCCUPANCY_API);
        assert_eq!(b, None);
        assert!(how.contains("none of its factorisations"));
        // 3-D kernels may use z; 2-D ones may not.
        m.insert([8, 8, 8], 0.2);
        assert_eq!(occupancy_shape(3, 512, &m, "x").0, Some([8, 8, 8]));
        assert_eq!(occupancy_shape(2, 512, &m, "x").0, Some([32, 16, 1]));
        assert_eq!(occupancy_shape(2, 0, &m, OCCUPANCY_API).0, None);
    }

    /// klaraptor's `cudaOccupancyMaxPotentialBlockSize` against the API's own answers: the
    /// accuracy study on the H200 recorded, per kernel, the block size the sample harness got
    /// from the API (bench/results/accuracy-h200-2026-11-22-d.json, records of method
    /// "occupancy"); the kernels' registers per thread and static shared memory are in their
    /// committed H200 profiles (samples/klaraptor-profiles), the device's limits in
    /// model/devices/nvidia-h200.toml.
    #[test]
    fn computed_block_size_equals_the_api_in_the_h200_study() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let study = root.join("bench/results/accuracy-h200-2026-11-22-d.json");
        let recs: Vec<serde_json::Value> =
            serde_json::from_str(&std::fs::read_to_string(&study).unwrap()).unwrap();
        let prefix = format!("{OCCUPANCY_API}: block ");
        let mut api: BTreeMap<String, u32> = BTreeMap::new();
        for r in recs.iter().filter(|r| r["method"] == "occupancy") {
            let how = r["how"].as_str().unwrap();
            let n: u32 = how
                .strip_prefix(&prefix)
                .and_then(|t| t.split(|c: char| !c.is_ascii_digit()).next())
                .and_then(|t| t.parse().ok())
                .unwrap_or_else(|| panic!("{}: no block size in {how:?}", study.display()));
            let k = r["kernel"].as_str().unwrap().to_string();
            let before = api.insert(k.clone(), n);
            assert!(before.is_none_or(|b| b == n), "{k}: two API answers");
        }
        let dev =
            klaraptor_model::Device::load(&root.join("model/devices/nvidia-h200.toml")).unwrap();
        let mut ours: BTreeMap<String, (u32, u32, u32)> = BTreeMap::new();
        let db = root.join("samples/klaraptor-profiles/v1");
        for d in std::fs::read_dir(&db).unwrap() {
            let d = d.unwrap().path();
            if !d
                .file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("nvidia-h200")
            {
                continue;
            }
            for f in std::fs::read_dir(&d).unwrap() {
                let f = f.unwrap().path();
                let e: klaraptor_profiler::record::Entry =
                    toml::from_str(&std::fs::read_to_string(&f).unwrap())
                        .unwrap_or_else(|e| panic!("{}: {e}", f.display()));
                let c = e.samples.iter().filter_map(|s| s.counters.as_ref());
                let regs = c.clone().map(|c| c.regs_per_thread).max().unwrap();
                let smem = c.map(|c| c.smem_static).max().unwrap();
                let b = klaraptor_model::max_potential_block_size(&dev, regs, smem)
                    .map_or(0, |p| p.block_size);
                ours.insert(e.kernel.name.clone(), (b, regs, smem));
            }
        }
        let mut agree = 0;
        let mut differ = Vec::new();
        for (k, n) in &api {
            let (b, regs, smem) = ours
                .get(k)
                .unwrap_or_else(|| panic!("{k}: no committed H200 profile"));
            if b == n {
                agree += 1;
            } else {
                differ.push(format!(
                    "{k} ({regs} regs, {smem} B): API {n}, klaraptor {b}"
                ));
            }
        }
        assert!(differ.is_empty(), "{differ:?}");
        assert!(agree >= 40, "only {agree} kernels compared");
        eprintln!(
            "max_potential_block_size equals the API on {agree} of {} study kernels",
            api.len()
        );
    }

    #[test]
    fn records_directory() {
        let dir = tempfile::tempdir().unwrap();
        assert!(read_records(dir.path()).unwrap().is_empty());
        std::fs::write(dir.path().join("kernels.tsv"), "abc\t_Z1kPf\tk\n").unwrap();
        let line = serde_json::to_string(&sample([64, 1, 1], Some(2.0), None)).unwrap();
        // A half-written last line (a killed run) is dropped.
        std::fs::write(
            dir.path().join("abc.jsonl"),
            format!("{line}\n{{\"sizes\":[1"),
        )
        .unwrap();
        let r = read_records(dir.path()).unwrap();
        assert_eq!(r.len(), 1);
        assert_eq!((r[0].id.as_str(), r[0].name.as_str()), ("_Z1kPf", "k"));
        assert_eq!(r[0].samples.len(), 1);
        assert_eq!(r[0].by_size().len(), 1);
        // A damaged line elsewhere is an error that names the file and line.
        std::fs::write(dir.path().join("abc.jsonl"), format!("nonsense\n{line}\n")).unwrap();
        let e = format!("{:#}", read_records(dir.path()).unwrap_err());
        assert!(e.contains("abc.jsonl:1"), "{e}");
        std::fs::write(dir.path().join("kernels.tsv"), "abc\n").unwrap();
        assert!(read_records(dir.path()).is_err());
    }
}
