//! Reduced profiling plans, replayed (issue 39): "what would the model have chosen had the
//! profile held only these sizes / these shapes?". `reduce-db` writes a copy of a profile
//! database that keeps only the samples a reduced plan would have measured; the study's
//! programs are then rebuilt against the copy (`remodel`, or `prepare.sh models` with
//! `STUDY_DB` = the copy: the same fit, decision and manifests) and replayed against the
//! recorded exhaustive sweeps (`replay --json`); `reduce-compare` sets the reduced replay
//! beside the full one against the bar (the geometric mean within 0.005, no kernel's
//! geometric mean more than 2 % lower).
//!
//! A reduction is three rules, applied in this order to every entry:
//! - `--shapes`: which of the plan's block shapes are profiled at all (`all`; `coarse`: 1-D
//!   powers of two only, 2-D/3-D the shapes whose by and bz are even powers of two,
//!   1, 4, 16, …; an entry left with fewer than [`MIN_SHAPES`] measured shapes at a size keeps
//!   its plan's shapes; `no-tiny`: the shapes of 2 to 31 threads left out, 1×1×1 kept);
//! - `--sizes`: which profiled data sizes are kept (`all`; `drop-largest`; `every-other`:
//!   the 1st, 3rd, … in order of work and the largest; `first:N`: the first N of the plan's
//!   order; `smallest:N`: the N of least work; `adaptive:T`: in order of work, from the
//!   [`MIN_ADAPTIVE`] smallest on, sizes are added until the model fitted on the sizes below
//!   the newest one scores at least T there (its choice's time against the fastest the
//!   profile measured, the link's held-out fold, `klaraptor_program::decide::held_out`);
//!   needs `--study` for the kernels' launch specifications);
//! - `--bound X`: the lower-bound prune ([`bound_prune`]): in order of work, a shape that at
//!   a kept size already ran full waves and was measured more than X times slower than the
//!   fastest shape there (discounted by its partial last wave) is not profiled at the larger
//!   sizes; shapes of a partial warp are kept (the fit's anchors) unless `--bound-tiny`, and
//!   so are loop kernels (`klaraptor_program::decide::threads_loop`, when `--study` gives
//!   the kernel's specification).
//!
//! accuracy-report reduce-db <src db> <dst db> [--sizes RULE] [--shapes RULE]
//!   [--bound X [--bound-tiny]] [--study DIR]... [-v]
//! accuracy-report reduce-compare <full.json> <reduced.json>

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use klaraptor_profiler::db::ProfileDb;
use klaraptor_profiler::record::{Entry, Sample};
use klaraptor_program::rational;
use klaraptor_spec::link::LinkSpec;

/// The fewest measured shapes per size the `coarse` shape rule leaves an entry; below, the
/// entry keeps its plan's shapes.
pub const MIN_SHAPES: usize = 4;

/// The fewest sizes the adaptive size rule keeps: one held-out fold needs
/// `klaraptor_program::decide::MIN_FOLD_SIZES` sizes below it.
pub const MIN_ADAPTIVE: usize = klaraptor_program::decide::MIN_FOLD_SIZES + 1;

/// Which profiled sizes a reduced plan keeps.
#[derive(Debug, Clone, PartialEq)]
pub enum SizeRule {
    All,
    DropLargest,
    EveryOther,
    First(usize),
    Smallest(usize),
    Adaptive(f64),
}

/// Which of the plan's shapes a reduced plan profiles.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ShapeRule {
    All,
    Coarse,
    NoTiny,
}

/// A reduced plan: the three rules of the module documentation.
#[derive(Debug, Clone, PartialEq)]
pub struct Reduction {
    pub sizes: SizeRule,
    pub shapes: ShapeRule,
    pub bound: Option<f64>,
    /// Whether the bound may prune shapes of fewer than 32 threads (a partial warp), which
    /// the plan keeps as the fit's anchors (`klaraptor_profiler::plan::plan_shapes`); off
    /// unless `--bound-tiny`.
    pub bound_tiny: bool,
}

impl SizeRule {
    pub fn parse(s: &str) -> Result<SizeRule> {
        let num = |v: &str, what: &str| -> Result<usize> {
            match v.parse::<usize>() {
                Ok(n) if n >= 1 => Ok(n),
                _ => bail!("--sizes {what}:N needs a whole number N ≥ 1, not {v:?}"),
            }
        };
        Ok(match s.split_once(':') {
            None if s == "all" => SizeRule::All,
            None if s == "drop-largest" => SizeRule::DropLargest,
            None if s == "every-other" => SizeRule::EveryOther,
            Some(("first", n)) => SizeRule::First(num(n, "first")?),
            Some(("smallest", n)) => SizeRule::Smallest(num(n, "smallest")?),
            Some(("adaptive", t)) => match t.parse::<f64>() {
                Ok(t) if t > 0.0 && t <= 1.0 => SizeRule::Adaptive(t),
                _ => bail!("--sizes adaptive:T needs a score T in (0, 1], not {t:?}"),
            },
            _ => bail!(
                "--sizes {s:?}: one of all, drop-largest, every-other, first:N, smallest:N, \
                 adaptive:T"
            ),
        })
    }
}

impl ShapeRule {
    pub fn parse(s: &str) -> Result<ShapeRule> {
        match s {
            "all" => Ok(ShapeRule::All),
            "coarse" => Ok(ShapeRule::Coarse),
            "no-tiny" => Ok(ShapeRule::NoTiny),
            _ => bail!("--shapes {s:?}: one of all, coarse, no-tiny"),
        }
    }

    /// Whether the rule profiles `b`.
    pub fn keeps(self, b: [u32; 3]) -> bool {
        let even_pow2 = |v: u32| v.is_power_of_two() && v.trailing_zeros().is_multiple_of(2);
        match self {
            ShapeRule::All => true,
            ShapeRule::NoTiny => {
                let threads = b[0] * b[1] * b[2];
                threads == 1 || threads >= 32
            }
            ShapeRule::Coarse => {
                let threads = b[0] * b[1] * b[2];
                if b[1] == 1 && b[2] == 1 {
                    threads.is_power_of_two()
                } else {
                    // A dimension that is not a power of two (a topped-up plan's) stays.
                    (even_pow2(b[1]) || !b[1].is_power_of_two())
                        && (even_pow2(b[2]) || !b[2].is_power_of_two())
                }
            }
        }
    }
}

/// The work of a size (the product of its data values), as the link's folds order them.
fn work(s: &[i64]) -> f64 {
    s.iter().map(|&v| v.max(1) as f64).product()
}

/// A shape that the lower-bound prune left out of the sizes above one, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Pruned {
    pub block: [u32; 3],
    /// The size whose samples pruned it (it is not profiled at sizes of more work).
    pub at: Vec<i64>,
    /// Its time over the fastest shape's there, and that ratio's bound for the larger sizes
    /// (× waves / ⌈waves⌉: what its last, partial wave may have added).
    pub slower: f64,
    pub bound: f64,
    /// Its grid's blocks there, and the blocks of one full wave (resident blocks per SM ×
    /// SMs).
    pub blocks: u64,
    pub wave: u64,
}

/// The lower-bound prune, over the profiled sizes in order of work (the order a plan would
/// profile them in): at each size, a shape whose grid there already filled every SM to its
/// occupancy limit (at least one full wave: resident blocks per SM, from the sample's
/// registers and shared memory, × the SMs) and whose time was more than `factor` times the
/// fastest shape's, once discounted by its last partial wave (× waves / ⌈waves⌉), is not
/// profiled at the sizes of more work.
///
/// The bound: a larger size adds blocks to such a shape's grid but cannot add resident
/// warps, so its time per unit of work cannot fall below what it was there, less what its
/// partial last wave and the launch overhead added (the overhead weighs more on the
/// faster shape, so it only narrows the measured ratio); the fastest shape's time per unit
/// of work can only fall as the GPU fills. The shape's time is then at least `factor` times
/// the fastest's at every larger size, up to what the memory hierarchy changes with the
/// footprint (the factor's margin, which the replay measures).
pub fn bound_prune(
    samples: &[Sample],
    dev: &klaraptor_model::Device,
    sm_count: u32,
    factor: f64,
    tiny: bool,
) -> Vec<Pruned> {
    let measured: Vec<&Sample> = samples.iter().filter(|s| s.counters.is_some()).collect();
    let mut sizes: Vec<&Vec<i64>> = measured.iter().map(|s| &s.sizes).collect();
    sizes.sort_by(|a, b| work(a).total_cmp(&work(b)).then(a.cmp(b)));
    sizes.dedup();
    let time = |s: &Sample| s.counters.as_ref().map_or(f64::INFINITY, |c| c.time_ms);
    let mut out: Vec<Pruned> = Vec::new();
    // The last size is profiled in full anyway: nothing above it to save.
    for size in sizes.iter().take(sizes.len().saturating_sub(1)) {
        let at: Vec<&Sample> = measured
            .iter()
            .filter(|s| &s.sizes == *size && !out.iter().any(|p| p.block == s.block))
            .copied()
            .collect();
        let best = at.iter().map(|s| time(s)).fold(f64::INFINITY, f64::min);
        for s in at {
            let c = s.counters.as_ref().expect("measured");
            let threads = s.block[0] * s.block[1] * s.block[2];
            if threads < 32 && !tiny {
                continue;
            }
            let occ = klaraptor_model::occupancy::occupancy(
                dev,
                threads,
                c.regs_per_thread,
                c.smem_static + c.smem_dynamic,
            );
            let wave = u64::from(occ.blocks_per_sm) * u64::from(sm_count);
            let blocks = s.grid.iter().map(|&g| u64::from(g)).product::<u64>();
            if wave == 0 || blocks < wave {
                continue;
            }
            let waves = blocks as f64 / wave as f64;
            let slower = time(s) / best;
            let bound = slower * waves / waves.ceil();
            if bound > factor {
                out.push(Pruned {
                    block: s.block,
                    at: (*size).clone(),
                    slower,
                    bound,
                    blocks,
                    wave,
                });
            }
        }
    }
    out
}

/// What one entry's reduction kept.
#[derive(Debug, Clone, PartialEq)]
pub struct Reduced {
    pub entry: Entry,
    /// Measured samples kept, of those the entry had.
    pub kept: usize,
    pub total: usize,
    pub sizes_kept: usize,
    pub sizes_total: usize,
    /// The shapes the lower-bound prune left out above the smallest size.
    pub pruned: Vec<Pruned>,
    /// Where a rule was not applied, why.
    pub notes: Vec<String>,
}

/// The distinct sizes of an entry's samples in the plan's order (sizes the plan does not
/// list, as in an entry profiled as given, in the order of their first sample).
fn sizes_in_plan_order(e: &Entry) -> Vec<Vec<i64>> {
    let mut out: Vec<Vec<i64>> = Vec::new();
    for s in e
        .plan
        .sizes
        .iter()
        .chain(e.samples.iter().map(|s| &s.sizes))
    {
        if !out.contains(s) && e.samples.iter().any(|x| &x.sizes == s) {
            out.push(s.clone());
        }
    }
    out
}

/// `e` with only the samples `keep` accepts; the plan's sizes and shapes follow (a planned
/// size or shape that left no sample in `e`, e.g. a size the program never launched the
/// kernel at, stays: it costs nothing).
fn restrict(e: &Entry, keep: impl Fn(&Sample) -> bool) -> Entry {
    let mut r = e.clone();
    r.samples.retain(|s| keep(s));
    let sizes: BTreeSet<&Vec<i64>> = r.samples.iter().map(|s| &s.sizes).collect();
    let shapes: BTreeSet<[u32; 3]> = r.samples.iter().map(|s| s.block).collect();
    let had_size = |z: &Vec<i64>| e.samples.iter().any(|s| &s.sizes == z);
    let had_shape = |b: &[u32; 3]| e.samples.iter().any(|s| &s.block == b);
    r.plan.sizes.retain(|z| sizes.contains(z) || !had_size(z));
    r.plan
        .shapes
        .retain(|b| shapes.contains(b) || !had_shape(b));
    r
}

/// Reduces one entry. `spec` is the kernel's launch specification, which only the adaptive
/// size rule needs.
pub fn reduce_entry(e: &Entry, r: &Reduction, spec: Option<&LinkSpec>) -> Result<Reduced> {
    let measured = |x: &Entry| x.samples.iter().filter(|s| s.counters.is_some()).count();
    let mut notes = Vec::new();
    let order = sizes_in_plan_order(e);
    // 1. Shapes.
    let mut cur = restrict(e, |s| r.shapes.keeps(s.block));
    if r.shapes != ShapeRule::All {
        let thin = order.iter().find(|sz| {
            cur.samples
                .iter()
                .filter(|s| &&s.sizes == sz && s.counters.is_some())
                .count()
                < MIN_SHAPES
        });
        if let Some(sz) = thin {
            notes.push(format!(
                "shapes: fewer than {MIN_SHAPES} measured at {sz:?}: the plan's shapes kept"
            ));
            cur = e.clone();
        }
    }
    // 2. Sizes.
    let mut by_work = order.clone();
    by_work.sort_by(|a, b| work(a).total_cmp(&work(b)));
    let keep_sizes: Vec<Vec<i64>> = match &r.sizes {
        SizeRule::All => order.clone(),
        SizeRule::DropLargest if by_work.len() > 1 => by_work[..by_work.len() - 1].to_vec(),
        SizeRule::DropLargest => {
            notes.push("sizes: one size only: kept".into());
            by_work.clone()
        }
        SizeRule::EveryOther => {
            let n = by_work.len();
            by_work
                .iter()
                .enumerate()
                .filter(|(i, _)| i % 2 == 0 || *i + 1 == n)
                .map(|(_, s)| s.clone())
                .collect()
        }
        SizeRule::First(n) => order.iter().take(*n).cloned().collect(),
        SizeRule::Smallest(n) => by_work.iter().take(*n).cloned().collect(),
        SizeRule::Adaptive(t) => {
            let spec = spec.with_context(|| {
                format!(
                    "--sizes adaptive needs the launch specification of {} (code hash {}): \
                     give --study with a directory whose models/ has its manifest",
                    e.kernel.mangled, e.kernel.code_hash
                )
            })?;
            adaptive_sizes(&cur, &by_work, *t, spec, &mut notes)
        }
    };
    cur = restrict(&cur, |s| keep_sizes.contains(&s.sizes));
    // 3. The lower-bound prune.
    let mut pruned = Vec::new();
    // A kernel whose launched threads do not follow its data (one block per row, a
    // grid-stride loop) breaks the bound: a larger size changes each thread's share of the
    // work, not only the blocks. With its specification, the link's test says which.
    let loops = spec.is_some_and(|s| klaraptor_program::decide::threads_loop(s, &cur));
    if loops && r.bound.is_some() {
        notes.push("bound: a loop kernel (threads do not follow the data): not pruned".into());
    }
    if let Some(x) = r.bound.filter(|_| !loops) {
        let dev = rational::device_for(&cur)
            .with_context(|| format!("the device of {}", e.kernel.mangled))?;
        pruned = bound_prune(&cur.samples, &dev, cur.device.sm_count, x, r.bound_tiny);
        if !pruned.is_empty() {
            // The plan keeps the shapes (they were profiled up to the size that pruned them).
            let shapes = cur.plan.shapes.clone();
            cur = restrict(&cur, |s| {
                pruned.iter().find(|p| p.block == s.block).is_none_or(|p| {
                    work(&s.sizes)
                        .total_cmp(&work(&p.at))
                        .then(s.sizes.cmp(&p.at))
                        .is_le()
                })
            });
            cur.plan.shapes = shapes;
        }
    }
    let desc = describe(r);
    if desc != "full plan" {
        cur.plan.note = format!("{} [reduced for a replay: {desc}]", cur.plan.note);
    }
    Ok(Reduced {
        kept: measured(&cur),
        total: measured(e),
        sizes_kept: sizes_in_plan_order(&cur).len(),
        sizes_total: order.len(),
        entry: cur,
        pruned,
        notes,
    })
}

/// The adaptive size rule (module documentation) on `e`'s sizes `by_work` (least work
/// first).
fn adaptive_sizes(
    e: &Entry,
    by_work: &[Vec<i64>],
    t: f64,
    spec: &LinkSpec,
    notes: &mut Vec<String>,
) -> Vec<Vec<i64>> {
    let rule = klaraptor_program::decide::DecisionRule::default();
    for k in MIN_ADAPTIVE..by_work.len() {
        let head = &by_work[..k];
        let sub = restrict(e, |s| head.contains(&s.sizes));
        let folds = klaraptor_program::decide::held_out(spec, &sub, &rule);
        let newest = &by_work[k - 1];
        let score = folds
            .iter()
            .find(|f| &f.sizes == newest)
            .and_then(|f| f.model_ratio());
        if score.is_some_and(|s| s >= t) {
            notes.push(format!(
                "sizes: adaptive stopped at {k} of {}: held-out score {:.3} at {newest:?}",
                by_work.len(),
                score.unwrap_or(f64::NAN)
            ));
            return head.to_vec();
        }
    }
    by_work.to_vec()
}

/// One line: the reduction.
pub fn describe(r: &Reduction) -> String {
    let mut parts = Vec::new();
    match &r.sizes {
        SizeRule::All => {}
        SizeRule::DropLargest => parts.push("sizes drop-largest".to_string()),
        SizeRule::EveryOther => parts.push("sizes every-other".to_string()),
        SizeRule::First(n) => parts.push(format!("sizes first:{n}")),
        SizeRule::Smallest(n) => parts.push(format!("sizes smallest:{n}")),
        SizeRule::Adaptive(t) => parts.push(format!("sizes adaptive:{t}")),
    }
    match r.shapes {
        ShapeRule::All => {}
        ShapeRule::Coarse => parts.push("shapes coarse".into()),
        ShapeRule::NoTiny => parts.push("shapes no-tiny".into()),
    }
    if let Some(x) = r.bound {
        parts.push(format!(
            "bound {x}{}",
            if r.bound_tiny {
                " with tiny shapes"
            } else {
                ""
            }
        ));
    }
    if parts.is_empty() {
        "full plan".into()
    } else {
        parts.join(", ")
    }
}

/// The launch specifications of the manifests under `<study>/<program>/models/`, by
/// (mangled name, code hash).
fn specs_of(studies: &[PathBuf]) -> Result<BTreeMap<(String, String), LinkSpec>> {
    let mut out = BTreeMap::new();
    for study in studies {
        let dirs = std::fs::read_dir(study)
            .with_context(|| format!("--study {}: not a readable directory", study.display()))?;
        for d in dirs {
            let models = d?.path().join("models");
            if !models.is_dir() {
                continue;
            }
            for (_, p) in rational::load_dir(&models)? {
                out.entry((p.mangled.clone(), p.provenance.code_hash.clone()))
                    .or_insert_with(|| super::remodel::spec_of(&p));
            }
        }
    }
    Ok(out)
}

pub fn run(a: &[String]) -> Result<()> {
    const USAGE: &str = "usage: accuracy-report reduce-db <src db> <dst db> [--sizes RULE] \
                         [--shapes RULE] [--bound X [--bound-tiny]] [--study DIR]... [-v]";
    let mut pos = Vec::new();
    let mut r = Reduction {
        sizes: SizeRule::All,
        shapes: ShapeRule::All,
        bound: None,
        bound_tiny: false,
    };
    let mut studies = Vec::new();
    let mut verbose = false;
    let mut it = a.iter();
    while let Some(x) = it.next() {
        let mut val = |flag: &str| {
            it.next()
                .cloned()
                .with_context(|| format!("{flag} needs a value ({USAGE})"))
        };
        match x.as_str() {
            "--sizes" => r.sizes = SizeRule::parse(&val("--sizes")?)?,
            "--shapes" => r.shapes = ShapeRule::parse(&val("--shapes")?)?,
            "--bound" => {
                let v = val("--bound")?;
                match v.parse::<f64>() {
                    Ok(x) if x >= 1.0 && x.is_finite() => r.bound = Some(x),
                    _ => bail!("--bound X needs a factor X ≥ 1, not {v:?}"),
                }
            }
            "--bound-tiny" => r.bound_tiny = true,
            "--study" => studies.push(PathBuf::from(val("--study")?)),
            "-v" => verbose = true,
            f if f.starts_with('-') => bail!("unknown option {f:?} ({USAGE})"),
            _ => pos.push(PathBuf::from(x)),
        }
    }
    let [src, dst] = pos.as_slice() else {
        bail!("{USAGE}");
    };
    if !src.join("v1").is_dir() {
        bail!(
            "{}: not a profile database (no v1/ directory)",
            src.display()
        );
    }
    if dst.exists()
        && std::fs::read_dir(dst)
            .with_context(|| format!("{}: not a readable directory", dst.display()))?
            .next()
            .is_some()
    {
        bail!(
            "{}: exists and is not empty; the reduced database is written into a new or empty \
             directory",
            dst.display()
        );
    }
    if matches!(r.sizes, SizeRule::Adaptive(_)) && studies.is_empty() {
        bail!("--sizes adaptive needs --study <dir> (the kernels' manifests give their launch specifications)");
    }
    let specs = specs_of(&studies)?;
    let from = ProfileDb::open(src)?;
    let to = ProfileDb::open(dst)?;
    let listed = from.list()?;
    let mut per_device: BTreeMap<String, (usize, usize, usize)> = BTreeMap::new();
    let mut tsv = String::from(
        "device\tkernel\tmangled\tcode_hash\tsamples_kept\tsamples\tsizes_kept\tsizes\tbound_pruned\tnotes\n",
    );
    for l in &listed {
        let Some(e) = &l.entry else {
            eprintln!(
                "reduce-db: {} left out ({})",
                l.path.display(),
                l.status.label()
            );
            continue;
        };
        let spec = specs.get(&(e.kernel.mangled.clone(), e.kernel.code_hash.clone()));
        let red = match reduce_entry(e, &r, spec) {
            Ok(x) => x,
            // An entry no study program was built from has no specification: the adaptive
            // rule keeps it whole.
            Err(_) if spec.is_none() => Reduced {
                entry: e.clone(),
                kept: 0,
                total: 0,
                sizes_kept: 0,
                sizes_total: 0,
                pruned: Vec::new(),
                notes: vec!["no manifest in --study: kept whole, not counted".into()],
            },
            Err(err) => return Err(err),
        };
        to.put(&red.entry)
            .with_context(|| format!("writing the reduced entry of {}", e.kernel.mangled))?;
        // With --study, only the entries its programs were built from count.
        if studies.is_empty() || spec.is_some() {
            let d = per_device.entry(e.device.name.clone()).or_default();
            d.0 += red.kept;
            d.1 += red.total;
            d.2 += 1;
        }
        let pruned: Vec<String> = red
            .pruned
            .iter()
            .map(|p| {
                format!(
                    "{}x{}x{} after {:?}: {:.2}x, bound {:.2}x ({} blocks, wave {})",
                    p.block[0], p.block[1], p.block[2], p.at, p.slower, p.bound, p.blocks, p.wave
                )
            })
            .collect();
        tsv.push_str(&format!(
            "{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\n",
            e.device.name,
            e.kernel.name,
            e.kernel.mangled,
            e.kernel.code_hash,
            red.kept,
            red.total,
            red.sizes_kept,
            red.sizes_total,
            pruned.join("; "),
            red.notes.join("; ")
        ));
        if verbose {
            println!(
                "{} {}: {} of {} samples, {} of {} sizes{}{}",
                e.device.name,
                e.kernel.name,
                red.kept,
                red.total,
                red.sizes_kept,
                red.sizes_total,
                if pruned.is_empty() {
                    String::new()
                } else {
                    format!("; pruned above the smallest size: {}", pruned.join(", "))
                },
                if red.notes.is_empty() {
                    String::new()
                } else {
                    format!("; {}", red.notes.join("; "))
                }
            );
        }
    }
    std::fs::write(dst.join("reduction.tsv"), tsv)
        .with_context(|| format!("writing {}", dst.join("reduction.tsv").display()))?;
    println!("reduction: {}", describe(&r));
    for (dev, (k, t, n)) in &per_device {
        println!(
            "{dev}: {n} entries{}, {k} of {t} measured samples kept ({:.1} %)",
            if studies.is_empty() {
                ""
            } else {
                " built into --study programs"
            },
            100.0 * *k as f64 / (*t).max(1) as f64
        );
    }
    Ok(())
}

/// A replay's summary (`replay --json`): the overall geometric means and each kernel's.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct ReplaySummary {
    pub cases: usize,
    pub klaraptor: f64,
    pub model: f64,
    /// "<program> <kernel> <mangled>" -> (klaraptor's geomean, the model's, cases).
    pub kernels: BTreeMap<String, (f64, f64, usize)>,
}

/// The bar: the reduced replay's geomean at most this far below the full one's…
pub const MAX_GEOMEAN_DROP: f64 = 0.005;
/// …and no kernel's geomean below this fraction of its full one.
pub const MIN_KERNEL_RATIO: f64 = 0.98;

/// The comparison of a reduced replay with the full one.
#[derive(Debug, Clone, PartialEq)]
pub struct Comparison {
    pub delta: f64,
    /// The kernel whose geomean fell the most (reduced / full), and that ratio.
    pub worst: Option<(String, f64)>,
    pub passes: bool,
}

pub fn compare(full: &ReplaySummary, reduced: &ReplaySummary) -> Result<Comparison> {
    if full.cases != reduced.cases {
        bail!(
            "the replays differ in cases ({} full, {} reduced): not the same study and sweeps",
            full.cases,
            reduced.cases
        );
    }
    let mut worst: Option<(String, f64)> = None;
    for (k, (g, _, _)) in &full.kernels {
        let Some((h, _, _)) = reduced.kernels.get(k) else {
            bail!("kernel {k} is in the full replay but not in the reduced one");
        };
        let ratio = h / g;
        if worst.as_ref().is_none_or(|w| ratio < w.1) {
            worst = Some((k.clone(), ratio));
        }
    }
    let delta = reduced.klaraptor - full.klaraptor;
    let passes = delta >= -MAX_GEOMEAN_DROP - 1e-12
        && worst.as_ref().is_none_or(|w| w.1 >= MIN_KERNEL_RATIO);
    Ok(Comparison {
        delta,
        worst,
        passes,
    })
}

pub fn run_compare(a: &[String]) -> Result<()> {
    let [full, reduced] = a else {
        bail!("usage: accuracy-report reduce-compare <full.json> <reduced.json> (replay --json)");
    };
    let read = |p: &str| -> Result<ReplaySummary> {
        let text = std::fs::read_to_string(p).with_context(|| format!("reading {p}"))?;
        serde_json::from_str(&text).with_context(|| format!("{p}: not a replay --json summary"))
    };
    let (f, r) = (read(full)?, read(reduced)?);
    let c = compare(&f, &r)?;
    println!(
        "geomean {:.4} -> {:.4} (Δ {:+.4}); worst kernel {}; {}",
        f.klaraptor,
        r.klaraptor,
        c.delta,
        c.worst
            .as_ref()
            .map_or("-".into(), |(k, x)| format!("{k} ×{x:.3}")),
        if c.passes {
            "within the bar"
        } else {
            "OUTSIDE the bar (Δ ≥ -0.005, every kernel ≥ 0.98×)"
        }
    );
    Ok(())
}

/// Writes `s` to `path` as JSON.
pub fn write_summary(path: &Path, s: &ReplaySummary) -> Result<()> {
    std::fs::write(path, serde_json::to_string_pretty(s)?)
        .with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use klaraptor_profiler::record::{Counters, DeviceId, KernelId, Plan, FORMAT_VERSION};

    fn counters(time_ms: f64) -> Counters {
        Counters {
            inst_executed: 1000,
            inst_global_ld: 10,
            inst_global_st: 10,
            inst_shared_ld: 0,
            inst_shared_st: 0,
            inst_barrier: 0,
            gld_requests: 10,
            gst_requests: 10,
            gld_sectors: 40,
            gst_sectors: 40,
            gld_l1_hit_sectors: None,
            dram_bytes_read: 4096,
            dram_bytes_write: 4096,
            achieved_active_warps: 32.0,
            global_atomic_requests: None,
            time_ms,
            time_runs_ms: vec![time_ms; 3],
            launches_per_run: None,
            regs_per_thread: 32,
            smem_static: 0,
            smem_dynamic: 0,
        }
    }

    /// A 1-D kernel over N profiled at `sizes` (plan order) with the generic 1-D plan: the
    /// time is N × 1e-6 ms, × 8 for one thread a block, × 4 for two, × 3 for 1024 threads.
    fn entry(sizes: &[i64]) -> Entry {
        let shapes = klaraptor_profiler::plan::plan_shapes(1);
        let mut samples = Vec::new();
        for &n in sizes {
            for &b in &shapes {
                let slow = match b[0] {
                    1 => 8.0,
                    2 => 4.0,
                    1024 => 3.0,
                    _ => 1.0 + f64::from(b[0]) * 1e-4,
                };
                samples.push(Sample {
                    sizes: vec![n],
                    block: b,
                    grid: [(n as u32).div_ceil(b[0]), 1, 1],
                    error: None,
                    counters: Some(counters(n as f64 * 1e-6 * slow)),
                });
            }
        }
        // Through serde, so that fields with defaults need not be named here.
        serde_json::from_value(serde_json::json!({
            "format_version": FORMAT_VERSION,
            "kernel": KernelId {
                mangled: "_Z1kPfi".into(),
                name: "k".into(),
                code_hash: "0123456789abcdef".into(),
                data: vec!["N".into()],
                dim: 1,
            },
            "device": DeviceId {
                name: "NVIDIA H200".into(),
                uuid: String::new(),
                cc: "9.0".into(),
                sm_count: 132,
            },
            "collector": "constructed",
            "captured_at": "2026-01-01T00:00:00Z",
            "cuda_version": "13.0",
            "driver_version": "580.00.00",
            "plan": Plan {
                sizes: sizes.iter().map(|&n| vec![n]).collect(),
                shapes,
                runs: 3,
                warmup: 0,
                note: "constructed".into(),
            },
            "samples": samples,
        }))
        .unwrap()
    }

    fn sizes_of(e: &Entry) -> Vec<i64> {
        let mut v: Vec<i64> = e.samples.iter().map(|s| s.sizes[0]).collect();
        v.dedup();
        v
    }

    fn reduce(e: &Entry, sizes: SizeRule, shapes: ShapeRule, bound: Option<f64>) -> Reduced {
        let r = Reduction {
            sizes,
            shapes,
            bound,
            bound_tiny: true,
        };
        reduce_entry(e, &r, None).unwrap()
    }

    #[test]
    fn size_rules_keep_the_sizes_they_say() {
        // Plan order is not work order.
        let e = entry(&[65536, 262144, 131072, 1048576, 524288]);
        let all = ShapeRule::All;
        let r = reduce(&e, SizeRule::DropLargest, all, None);
        assert_eq!(sizes_of(&r.entry), [65536, 262144, 131072, 524288]);
        assert_eq!(r.entry.plan.sizes, [[65536], [262144], [131072], [524288]]);
        assert_eq!(
            (r.kept, r.total, r.sizes_kept, r.sizes_total),
            (76, 95, 4, 5)
        );
        let r = reduce(&e, SizeRule::EveryOther, all, None);
        // The 1st, 3rd and 5th of least work, in the plan's order.
        assert_eq!(sizes_of(&r.entry), [65536, 262144, 1048576]);
        let r = reduce(&e, SizeRule::First(2), all, None);
        assert_eq!(sizes_of(&r.entry), [65536, 262144]);
        let r = reduce(&e, SizeRule::Smallest(2), all, None);
        assert_eq!(sizes_of(&r.entry), [65536, 131072]);
        assert!(r
            .entry
            .plan
            .note
            .ends_with("[reduced for a replay: sizes smallest:2]"));
        let r = reduce(&e, SizeRule::All, all, None);
        assert_eq!(r.entry, e, "the full plan is the entry unchanged");
        // A planned size the program never reached stays in the plan.
        let mut unreached = e.clone();
        unreached.plan.sizes.push(vec![7]);
        let r = reduce(&unreached, SizeRule::All, all, None);
        assert_eq!(r.entry, unreached);
        let r = reduce(&unreached, SizeRule::DropLargest, all, None);
        assert_eq!(r.entry.plan.sizes.last(), Some(&vec![7]));
        // The adaptive rule needs the kernel's specification.
        let err = reduce_entry(
            &e,
            &Reduction {
                sizes: SizeRule::Adaptive(0.9),
                shapes: all,
                bound: None,
                bound_tiny: false,
            },
            None,
        )
        .unwrap_err();
        assert!(format!("{err:#}").contains("needs the launch specification"));
    }

    #[test]
    fn coarse_shapes() {
        let keeps = |b| ShapeRule::Coarse.keeps(b);
        assert!(keeps([256, 1, 1]) && keeps([1, 1, 1]) && !keeps([96, 1, 1]));
        assert!(keeps([64, 4, 1]) && keeps([1024, 1, 1]) && keeps([4, 16, 4]));
        assert!(!keeps([128, 2, 1]) && !keeps([8, 8, 2]) && keeps([12, 3, 1]));
        let e = entry(&[65536, 131072]);
        let r = reduce(&e, SizeRule::All, ShapeRule::Coarse, None);
        assert_eq!(
            r.entry.plan.shapes.len(),
            11,
            "1-D: the powers of two 1 … 1024"
        );
        assert_eq!((r.kept, r.total), (22, 38));
    }

    #[test]
    fn the_bound_prunes_slow_full_wave_shapes_above_their_size() {
        let e = entry(&[262144, 65536, 131072]);
        let r = reduce(&e, SizeRule::All, ShapeRule::All, Some(2.0));
        // At 65536: 1 and 2 threads are 8× and 4× the fastest with full waves (32 resident
        // blocks × 132 SMs = 4224 ≤ 65536 and 32768 blocks: 15.5 and 7.8 waves, whose
        // partial last wave discounts the bound to 7.74× and 3.88×); 1024 threads is 3×
        // slower but its 64 blocks fill no wave (264): it stays, and at 131072 (128 blocks)
        // too; the largest size prunes nothing.
        let pruned: Vec<([u32; 3], i64)> = r.pruned.iter().map(|p| (p.block, p.at[0])).collect();
        assert_eq!(pruned, [([1, 1, 1], 65536), ([2, 1, 1], 65536)]);
        assert_eq!((r.pruned[0].blocks, r.pruned[0].wave), (65536, 4224));
        assert!((r.pruned[0].slower - 8.0).abs() < 0.01);
        assert!((r.pruned[0].bound - 8.0 * 65536.0 / 4224.0 / 16.0).abs() < 0.01);
        // Still measured at the size that pruned it, gone above it, and still in the plan.
        let at = |n: i64, b: u32| {
            r.entry
                .samples
                .iter()
                .any(|s| s.sizes == [n] && s.block == [b, 1, 1])
        };
        assert!(at(65536, 1) && !at(131072, 1) && !at(262144, 2) && at(262144, 1024));
        assert_eq!(r.entry.plan.shapes, e.plan.shapes);
        assert_eq!(r.kept, 57 - 4);
        // A factor above every shape's bound prunes nothing; a partial last wave is
        // discounted: 1 thread at 1.5 waves ([6336]: 8 × 1.5 / 2 = 6×) is kept at 6.5.
        assert!(reduce(&e, SizeRule::All, ShapeRule::All, Some(9.0))
            .pruned
            .is_empty());
        let e = entry(&[6336, 65536]);
        let r = reduce(&e, SizeRule::All, ShapeRule::All, Some(6.5));
        assert!(r.pruned.is_empty(), "{:?}", r.pruned);
        let r = reduce(&e, SizeRule::All, ShapeRule::All, Some(5.5));
        assert_eq!(r.pruned.len(), 1);
        assert!((r.pruned[0].bound - 6.0).abs() < 0.01);
        // Without --bound-tiny, shapes of a partial warp are never pruned.
        let r = Reduction {
            sizes: SizeRule::All,
            shapes: ShapeRule::All,
            bound: Some(1.5),
            bound_tiny: false,
        };
        assert!(reduce_entry(&e, &r, None).unwrap().pruned.is_empty());
    }

    #[test]
    fn rules_parse_with_clear_errors() {
        assert_eq!(SizeRule::parse("first:3").unwrap(), SizeRule::First(3));
        assert_eq!(
            SizeRule::parse("adaptive:0.95").unwrap(),
            SizeRule::Adaptive(0.95)
        );
        let e = |s: &str| format!("{:#}", SizeRule::parse(s).unwrap_err());
        assert!(e("first:0").contains("whole number N ≥ 1"));
        assert!(e("adaptive:2").contains("in (0, 1]"));
        assert!(e("largest").contains("one of all, drop-largest"));
        assert!(format!("{:#}", ShapeRule::parse("fine").unwrap_err()).contains("all, coarse"));
        let nt = |b| ShapeRule::NoTiny.keeps(b);
        assert!(
            nt([1, 1, 1]) && !nt([8, 1, 1]) && !nt([2, 4, 1]) && nt([32, 1, 1]) && nt([1, 64, 1])
        );
    }

    #[test]
    fn reduce_db_writes_a_new_database_and_refuses_a_used_one() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src");
        ProfileDb::open(&src)
            .unwrap()
            .put(&entry(&[65536, 131072, 262144]))
            .unwrap();
        let dst = dir.path().join("dst");
        let s = |p: &Path| p.to_string_lossy().to_string();
        run(&[s(&src), s(&dst), "--sizes".into(), "drop-largest".into()]).unwrap();
        let got = ProfileDb::open(&dst)
            .unwrap()
            .get("_Z1kPfi", "0123456789abcdef", "NVIDIA H200")
            .unwrap()
            .unwrap();
        assert_eq!(sizes_of(&got), [65536, 131072]);
        let tsv = std::fs::read_to_string(dst.join("reduction.tsv")).unwrap();
        assert!(tsv.lines().nth(1).unwrap().contains("\t38\t57\t2\t3\t"));
        let again = run(&[s(&src), s(&dst)]).unwrap_err();
        assert!(format!("{again:#}").contains("exists and is not empty"));
        let nodb = run(&[s(&dst.join("v1")), s(&dir.path().join("x"))]).unwrap_err();
        assert!(format!("{nodb:#}").contains("not a profile database"));
        let bad = run(&[
            s(&src),
            s(&dir.path().join("y")),
            "--bound".into(),
            "0.5".into(),
        ]);
        assert!(format!("{:#}", bad.unwrap_err()).contains("factor X ≥ 1"));
    }

    #[test]
    fn compare_against_the_bar() {
        let sum = |g: f64, k: &[(&str, f64)]| ReplaySummary {
            cases: 4,
            klaraptor: g,
            model: g,
            kernels: k
                .iter()
                .map(|(n, x)| (n.to_string(), (*x, *x, 2)))
                .collect(),
        };
        let full = sum(0.97, &[("a", 0.96), ("b", 0.98)]);
        let ok = compare(&full, &sum(0.966, &[("a", 0.95), ("b", 0.98)])).unwrap();
        assert!(ok.passes && (ok.delta + 0.004).abs() < 1e-9);
        assert_eq!(ok.worst.as_ref().unwrap().0, "a");
        let drop = compare(&full, &sum(0.964, &[("a", 0.96), ("b", 0.98)])).unwrap();
        assert!(!drop.passes, "the geomean fell by more than 0.005");
        let kernel = compare(&full, &sum(0.97, &[("a", 0.93), ("b", 0.99)])).unwrap();
        assert!(!kernel.passes, "a kernel fell by more than 2 %");
        let mut other = sum(0.97, &[("a", 0.96)]);
        other.cases = 3;
        assert!(compare(&full, &other).is_err());
    }
}
