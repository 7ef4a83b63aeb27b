//! From profile records to fitted metrics.
//!
//! The model (klaraptor-model) takes, for one launch, per-warp averages of what the hardware
//! counted: instructions, global load/store requests, shared-memory instructions,
//! barriers, 32-byte sectors per global request (coalescing), the share of global load
//! sectors the L1 served, and DRAM bytes.
//!
//! The model's global memory instructions (`gld_inst`, `gst_inst`) are the requests the
//! L1TEX received (`l1tex__t_requests_pipe_lsu_mem_global_op_{ld,st}`), not the warp
//! instructions executed: an instruction whose lanes are all predicated off is executed
//! (and costs its issue slot, counted in `inst`) but sends nothing to memory. The
//! PolyBench samples' `KL_RECORD_BLOCK` (three stores guarded by "thread 0 of block 0") is
//! such a case: the compiler predicates the stores, every warp executes them, and the
//! executed store count of a one-store copy was 4.2 per warp where 1.0 reached memory
//! (H200 profile of jacobi2d_copy at 64 × 64: 16 132 executed, 3 847 requests).
//!
//! What is fitted is the launch *total* of each count (and the sectors-per-request ratios as
//! they are), as rational functions of the data sizes and the block dimensions; the rational
//! program divides by the warps the launch really runs, computed exactly from the grid
//! formula. Fitting per-warp averages directly extrapolates badly: at the small profiling
//! sizes a large block leaves most of its warps idle (they only test a bound and exit), so
//! the per-warp average there is dominated by a shape-dependent ceiling effect that vanishes
//! at large sizes, while the total is dominated by the real work, a low-degree polynomial
//! in the sizes.
//!
//! # Per domain thread
//!
//! A total is also fitted divided by the threads of the kernel's domain at that size (the grid
//! formula at a block of one thread, [`total_unit`]), and that fit replaces the total's when
//! its held-out error at the largest sizes is below half the total's ([`PER_DOMAIN_GAIN`]).
//! The domain carries the part of the total that grows with the grid, exactly; what is left
//! is the work of one thread, which depends on the loop lengths only. A kernel over an N × N
//! grid with a loop of M has a total of degree (2, 1) in (N, M), six coefficients that six
//! profile sizes cannot identify once the largest are held out; per thread it has two. Where
//! the total is the simpler function (a fixed cost per launch, a domain that does not grow
//! with the work), the total's fit stays. The rational program multiplies the chosen ones
//! back by the domain at the run size.
//!
//! # Shares
//!
//! The L1 hit rate (load sectors the L1 served over load sectors) is fitted as it is, with
//! low degrees (at most 1 in each size, 2 in each block dimension, a denominator of total
//! degree 1). What a cache keeps changes in steps with the sizes and with the warps an SM
//! holds, which no rational function extrapolates: the rational program evaluates it with
//! the data held to the largest profiled sizes (`RationalProgram::shares_held_at`), so at
//! a larger size each block shape keeps the hit rate it had at the largest measured one.
//! Records made before the collector counted L1 hits leave it out (the constant 0).
//!
//! Warp-level counts (instructions, requests) are fitted after multiplying by the launch's
//! lane occupancy `min(32, threads per block) / 32`: a block of fewer than 32 threads runs
//! one warp per block with that many lanes, so the same work takes `32 / lanes` times as
//! many warp instructions. Scaled this way the counts measure the work, nearly independent
//! of the shape (a rational function cannot represent the `min`, but the program knows it
//! exactly and undoes the scaling).

use std::collections::BTreeMap;

use anyhow::{bail, Context, Result};
use klaraptor_fitting::{
    fit, fit_degrees, DegreeBounds, Domain, FitOptions, FitProblem, RationalFn, Variable,
};
use klaraptor_profiler::record::{Counters, Entry, Sample, MIN_MEASURED};
use klaraptor_spec::expr::IntExpr;
use serde::{Deserialize, Serialize};

use klaraptor_spec::link::LinkSpec;

/// The per-warp metrics, in the order of [`per_warp`]'s result.
pub const METRICS: [&str; 9] = [
    "inst",
    "gld_inst",
    "gst_inst",
    "shared_inst",
    "sync_inst",
    "gld_sectors_per_req",
    "gst_sectors_per_req",
    "dram_bytes",
    "gld_l1_hit_rate",
];

/// Metrics fitted as they are (ratios of two counts), not as launch totals.
const RATIOS: [&str; 3] = [
    "gld_sectors_per_req",
    "gst_sectors_per_req",
    "gld_l1_hit_rate",
];

/// Largest data size the fitted functions must stay well-defined for (denominators positive
/// on every candidate shape for every size up to it).
pub const DATA_BOUND: f64 = (1u64 << 24) as f64;

/// Warps a launch runs: blocks × warps per block.
pub fn warps(block: [u32; 3], grid: [u32; 3]) -> f64 {
    let threads = u64::from(block[0]) * u64::from(block[1]) * u64::from(block[2]);
    let blocks = u64::from(grid[0]) * u64::from(grid[1]) * u64::from(grid[2]);
    (blocks * threads.div_ceil(32)) as f64
}

/// Whether metric `i` of [`METRICS`] is fitted as a launch total (then divided by the
/// launch's warps) rather than as a ratio.
pub fn is_total(i: usize) -> bool {
    !RATIOS.contains(&METRICS[i])
}

/// Whether metric `i` is a share (between 0 and 1) that tends to a limit as the sizes grow:
/// the L1 hit rate.
pub fn is_share(i: usize) -> bool {
    METRICS[i].ends_with("_rate")
}

/// Whether metric `i` is a warp-level count (scaled by [`lane_factor`] when fitted).
pub fn is_warp_count(i: usize) -> bool {
    is_total(i) && METRICS[i] != "dram_bytes"
}

/// The lanes a warp of this block shape has, over 32: `min(32, threads) / 32`.
pub fn lane_factor(block: [u32; 3]) -> f64 {
    let threads = u64::from(block[0]) * u64::from(block[1]) * u64::from(block[2]);
    threads.min(32) as f64 / 32.0
}

/// What is fitted for one launch ([`METRICS`] order): totals (warp-level counts scaled by
/// [`lane_factor`]), and the ratios. The L1 hit rate is NaN (not fitted) in records made
/// before the collector counted L1 hits.
pub fn targets(c: &Counters, block: [u32; 3]) -> [f64; 9] {
    let ratio = |a: u64, b: u64| if b == 0 { 0.0 } else { a as f64 / b as f64 };
    let mut v = [
        c.inst_executed as f64,
        // Requests, not executed instructions (module doc).
        c.gld_requests as f64,
        c.gst_requests as f64,
        (c.inst_shared_ld + c.inst_shared_st) as f64,
        c.inst_barrier as f64,
        ratio(c.gld_sectors, c.gld_requests),
        ratio(c.gst_sectors, c.gst_requests),
        (c.dram_bytes_read + c.dram_bytes_write) as f64,
        c.gld_l1_hit_sectors
            .map_or(f64::NAN, |h| ratio(h.min(c.gld_sectors), c.gld_sectors)),
    ];
    let f = lane_factor(block);
    for (i, x) in v.iter_mut().enumerate() {
        if is_warp_count(i) {
            *x *= f;
        }
    }
    v
}

/// The per-warp metrics of one launch from [`targets`]-style values.
pub fn per_warp_of(values: &[f64; 9], block: [u32; 3], grid: [u32; 3]) -> [f64; 9] {
    let w = warps(block, grid).max(1.0);
    let f = lane_factor(block);
    let mut out = *values;
    for (i, v) in out.iter_mut().enumerate() {
        if is_warp_count(i) {
            *v /= f;
        }
        if is_total(i) {
            *v /= w;
        }
    }
    out
}

/// The per-warp metrics of one launch ([`METRICS`] order).
pub fn per_warp(c: &Counters, block: [u32; 3], grid: [u32; 3]) -> [f64; 9] {
    per_warp_of(&targets(c, block), block, grid)
}

/// The fit's variables for a kernel: its data parameters, then bx (, by (, bz)).
///
/// The block dimensions enter as their base-2 logarithms (`lbx` = log2 bx, …): candidate
/// shapes are spread geometrically from 1 to 1024, and what changes with a block dimension
/// (coalescing, idle lanes, reuse) changes per doubling, so a low-degree function of the
/// logarithm follows it where a polynomial in bx itself cannot.
pub fn variables(spec: &LinkSpec) -> Vec<Variable> {
    let mut v: Vec<Variable> = spec.data.iter().map(Variable::data).collect();
    for b in ["lbx", "lby", "lbz"]
        .iter()
        .take(usize::from(spec.dim.clamp(1, 3)))
    {
        v.push(Variable::block(*b));
    }
    v
}

/// A sample's coordinates in [`variables`] order.
pub fn point(spec: &LinkSpec, sizes: &[i64], block: [u32; 3]) -> Vec<f64> {
    let mut p: Vec<f64> = sizes.iter().map(|&s| s as f64).collect();
    for b in block.iter().take(usize::from(spec.dim.clamp(1, 3))) {
        p.push(f64::from(*b).log2());
    }
    p
}

/// The usable samples of an entry: measured, with the kernel's number of data values.
pub fn usable<'a>(spec: &LinkSpec, entry: &'a Entry) -> Vec<(&'a Sample, &'a Counters)> {
    entry
        .samples
        .iter()
        .filter(|s| s.error.is_none() && s.sizes.len() == spec.data.len())
        .filter_map(|s| s.counters.as_ref().map(|c| (s, c)))
        .collect()
}

/// Threads of the kernel's domain at `sizes` (values of the data labels `data`): its parsed
/// grid formula evaluated at a block of one thread. `None` when the formula cannot be
/// evaluated there.
pub fn domain_threads(data: &[String], grid: &[IntExpr], sizes: &[i64]) -> Option<f64> {
    let mut env: Vec<(&str, i64)> = data
        .iter()
        .map(String::as_str)
        .zip(sizes.iter().copied())
        .collect();
    env.extend([("bx", 1), ("by", 1), ("bz", 1)]);
    let mut domain = 1.0;
    for e in grid.iter().take(3) {
        match e.eval(env.as_slice()) {
            Ok(v) if v >= 1 => domain *= v as f64,
            _ => return None,
        }
    }
    Some(domain)
}

/// Threads a launch of `block` × `grid` runs.
pub fn launched_threads(block: [u32; 3], grid: [u32; 3]) -> f64 {
    (0..3)
        .map(|i| f64::from(grid[i]) * f64::from(block[i]))
        .product()
}

/// Threads a sample's launch ran (its recorded grid × block), over the threads of the
/// kernel's domain ([`domain_threads`]): 1 when the blocks tile the domain, more when the
/// last blocks overhang it. `None` when the formula cannot be evaluated at the sample's sizes.
pub fn overhang(spec: &LinkSpec, grid: &[IntExpr], s: &Sample) -> Option<f64> {
    let domain = domain_threads(&spec.data, grid, &s.sizes)?;
    Some(launched_threads(s.block, s.grid) / domain)
}

/// How far the profile's launches ran beyond covering the kernel's domain once, per axis: the
/// largest, over the usable samples of `entry` and the grid's axes, of the threads a launch
/// ran on an axis (its recorded grid × block there) over the threads a grid that follows the
/// block would run there at most (the axis's grid formula at a block of one thread, `d`, plus
/// the block's rounding, `d + b - 1`). At most 1 when every launch covers the domain once
/// (a formula such as `ceil(N, bx)` or a batch count `B` on an axis of one-thread blocks);
/// about the block's size when the grid does not grow as the block shrinks (one block per row,
/// `grid(M)`; a grid-stride loop under a capped grid, `min(ceil(N, bx), 1056)`; a tile of 32
/// rows walked by `by` rows of threads, `ceil(R, 32)`): the launched threads then do not
/// follow the data, and each thread loops over a share of it that the launch's shape decides.
/// `None` when no sample's grid formula can be evaluated.
pub fn coverage_excess(spec: &LinkSpec, entry: &Entry) -> Option<f64> {
    let grid = spec_grid(spec);
    if grid.is_empty() {
        return None;
    }
    let mut worst: Option<f64> = None;
    for (s, _) in usable(spec, entry) {
        let mut env: Vec<(&str, i64)> = spec
            .data
            .iter()
            .map(String::as_str)
            .zip(s.sizes.iter().copied())
            .collect();
        env.extend([("bx", 1), ("by", 1), ("bz", 1)]);
        for (a, e) in grid.iter().take(3).enumerate() {
            let Ok(d) = e.eval(env.as_slice()) else {
                continue;
            };
            if d < 1 {
                continue;
            }
            let b = f64::from(s.block[a]);
            let ran = f64::from(s.grid[a]) * b;
            let x = ran / (d as f64 + b - 1.0);
            worst = Some(worst.map_or(x, |w| w.max(x)));
        }
    }
    worst
}

/// The share of a launch's threads inside the domain (`domain` threads, [`domain_threads`]):
/// the warps of blocks that overhang it test a bound and exit, so the launch's work belongs
/// to the others. 1 when the domain is unknown; at least 1e-6.
pub fn busy_fraction(domain: Option<f64>, block: [u32; 3], grid: [u32; 3]) -> f64 {
    let launched = launched_threads(block, grid);
    match domain {
        Some(d) if launched > 0.0 => (d / launched).clamp(1e-6, 1.0),
        _ => 1.0,
    }
}

/// The kernel's parsed grid formula (empty when it does not parse: the link refused such a
/// formula before anything is fitted).
fn spec_grid(spec: &LinkSpec) -> Vec<IntExpr> {
    spec.shape().map(|s| s.grid).unwrap_or_default()
}

/// What a fitted launch total is divided by before the fit, and multiplied by again when the
/// program evaluates it: the domain's threads at that size (1 when it is unknown). Module
/// doc, "Per domain thread".
pub fn total_unit(domain: Option<f64>) -> f64 {
    match domain {
        Some(d) if d >= 1.0 => d,
        _ => 1.0,
    }
}

/// Samples whose blocks overhang the domain by more than this are left out of the fits of
/// launch totals: their idle threads (which only test a bound and exit) add a
/// shape-dependent amount that is large at the small profiling sizes and vanishes at the
/// run sizes, and that the degree search would otherwise trade against the real data
/// dependence (with two or more data parameters it then picks, e.g., a function of one of
/// them only).
pub const MAX_FIT_OVERHANG: f64 = 1.25;

/// Fewest samples within [`MAX_FIT_OVERHANG`] the fits use by themselves.
pub const MIN_TILED_SAMPLES: usize = 16;

/// The samples the fits use: the usable ones whose blocks tile the domain within
/// [`MAX_FIT_OVERHANG`], or all usable ones when fewer than [`MIN_TILED_SAMPLES`] do.
pub fn fit_samples<'a>(
    spec: &LinkSpec,
    entry: &'a Entry,
) -> Result<Vec<(&'a Sample, &'a Counters)>> {
    let all = usable(spec, entry);
    // (A formula that does not parse was refused before; without one nothing is left out.)
    let grid = spec_grid(spec);
    let tiled: Vec<_> = all
        .iter()
        .copied()
        .filter(|(s, _)| {
            grid.is_empty() || overhang(spec, &grid, s).is_none_or(|o| o <= MAX_FIT_OVERHANG)
        })
        .collect();
    // Too few tiled samples (a kernel profiled only at sizes below its blocks): all of them.
    let samples = if tiled.len() >= MIN_TILED_SAMPLES {
        tiled
    } else {
        all
    };
    if samples.len() < MIN_MEASURED {
        bail!(
            "kernel {}: the profile has {} usable samples (of {}); at least {MIN_MEASURED} are \
             needed to fit",
            spec.name,
            samples.len(),
            entry.samples.len()
        );
    }
    Ok(samples)
}

/// Fits every metric of [`METRICS`] over the samples ([`fit_samples`]; totals and ratios, see
/// the module documentation). `shapes` are the candidate
/// block shapes the functions will be evaluated on.
pub fn fit_all(
    spec: &LinkSpec,
    samples: &[(&Sample, &Counters)],
    shapes: &[[u32; 3]],
) -> Result<Fitted> {
    let vars = variables(spec);
    let nblock = usize::from(spec.dim.clamp(1, 3));
    let points: Vec<Vec<f64>> = samples
        .iter()
        .map(|(s, _)| point(spec, &s.sizes, s.block))
        .collect();
    let values: Vec<[f64; 9]> = samples.iter().map(|(s, c)| targets(c, s.block)).collect();
    let grid = spec_grid(spec);
    let units: Option<Vec<f64>> = (!grid.is_empty()).then(|| {
        samples
            .iter()
            .map(|(s, _)| total_unit(domain_threads(&spec.data, &grid, &s.sizes)))
            .collect()
    });
    let domain = Domain::Grid {
        shapes: shapes
            .iter()
            .map(|b| {
                b.iter()
                    .take(nblock)
                    .map(|&x| f64::from(x).log2())
                    .collect()
            })
            .collect(),
        data: vec![[1.0, DATA_BOUND]; spec.data.len()],
    };
    let ndata = spec.data.len();
    let num = DegreeBounds(
        (0..vars.len())
            .map(|i| if i < ndata { 3 } else { 2 })
            .collect(),
    );
    let den = DegreeBounds(vec![1; vars.len()]);
    let mut options = FitOptions::new(num, den);
    options.den_max_total_degree = 2;
    options.drop_non_finite = true;
    // A share that tends to a limit as the sizes grow: low degrees in the sizes, so that it
    // does not run off (or past 1) when extrapolated.
    let mut share_options = FitOptions::new(
        DegreeBounds(
            (0..vars.len())
                .map(|i| if i < ndata { 1 } else { 2 })
                .collect(),
        ),
        DegreeBounds(vec![1; vars.len()]),
    );
    share_options.den_max_total_degree = 1;
    share_options.drop_non_finite = true;
    let run = |vals: Vec<f64>, m: usize| -> Result<RationalFn> {
        let name = METRICS[m];
        let options = if is_share(m) {
            &share_options
        } else {
            &options
        };
        let max = vals.iter().fold(0.0f64, |a, v| a.max(v.abs()));
        let problem = FitProblem {
            vars: vars.clone(),
            points: points.clone(),
            values: vals,
            domain: domain.clone(),
        };
        if max == 0.0 {
            // Never happens in this kernel (no stores, no barriers, …): the constant 0.
            let zeros = DegreeBounds::zeros(vars.len());
            let mut o = options.clone();
            o.value_floor = Some(1.0);
            fit_degrees(&problem, &zeros, &zeros, &o)
        } else {
            fit(&problem, options)
        }
        .with_context(|| format!("kernel {}: fitting {name}", spec.name))
    };
    let mut out = Fitted::default();
    for (m, name) in METRICS.iter().enumerate() {
        let mut vals: Vec<f64> = values.iter().map(|v| v[m]).collect();
        if !vals.iter().any(|v| v.is_finite()) {
            // Not counted (L1 hits in older records): the constant 0, the model without it.
            vals.iter_mut().for_each(|v| *v = 0.0);
        }
        let nonzero = vals.iter().any(|v| *v != 0.0);
        let mut f = run(vals.clone(), m)?;
        if let (true, true, Some(units)) = (is_total(m), nonzero, &units) {
            // The same total per thread of the domain; kept where it extrapolates clearly
            // better to the held-out largest sizes (module doc, "Per domain thread").
            let per: Vec<f64> = vals.iter().zip(units).map(|(v, u)| v / u).collect();
            let g = run(per, m)?;
            if heldout_score(&g) < PER_DOMAIN_GAIN * heldout_score(&f) {
                f = g;
                out.per_domain_thread.insert(name.to_string());
            }
        }
        out.functions.insert(name.to_string(), f);
    }
    Ok(out)
}

/// A per-domain-thread fit replaces the total's when its held-out score is below this share
/// of the total's.
pub const PER_DOMAIN_GAIN: f64 = 0.5;

fn heldout_score(f: &RationalFn) -> f64 {
    f.diagnostics
        .heldout
        .as_ref()
        .map(|h| h.score)
        .unwrap_or(f64::INFINITY)
}

/// The fitted metrics of a kernel ([`fit_all`]).
#[derive(Debug, Clone, Default)]
pub struct Fitted {
    /// Every metric of [`METRICS`], by name.
    pub functions: BTreeMap<String, RationalFn>,
    /// The launch totals fitted per thread of the kernel's domain ([`total_unit`]).
    pub per_domain_thread: std::collections::BTreeSet<String>,
}

/// The box of threads a block's first warp covers: `min(bx, 32)` threads along x, then as
/// many rows along y as fit in 32 threads (at most `by`), then layers along z. Threads are
/// numbered x first, so every full warp of a block of power-of-two dimensions covers a box of
/// this shape, and the coalescing of an access whose address is affine in the thread index
/// (how many 32-byte sectors one warp request touches) depends on the block only through it:
/// 4x128 and 4x16 blocks both make warps of 4 columns × 8 rows.
pub fn warp_footprint(block: [u32; 3]) -> [u32; 3] {
    let wx = block[0].clamp(1, 32);
    let wy = block[1].clamp(1, (32 / wx).max(1));
    let wz = block[2].clamp(1, (32 / (wx * wy)).max(1));
    [wx, wy, wz]
}

/// The sectors-per-request ratios of the blocks of one warp footprint, as functions of the
/// data sizes alone.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FootprintRatios {
    pub footprint: [u32; 3],
    /// `None`: no request of that kind was measured with this footprint; the global fit
    /// stands.
    pub gld_sectors_per_req: Option<RatioFit>,
    pub gst_sectors_per_req: Option<RatioFit>,
}

/// A fitted ratio and the range its measurements spanned: the ratio tends to a limit as the
/// sizes grow, and the function is held within what was measured rather than let run off
/// with its extrapolation (a degree-1 rational function whose pole sits past the profiled
/// sizes would).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RatioFit {
    pub f: RationalFn,
    pub min: f64,
    pub max: f64,
}

impl FootprintRatios {
    /// The fitted ratios, by metric name ([`METRICS`]).
    pub fn fits(&self) -> impl Iterator<Item = (&'static str, &RatioFit)> {
        [
            ("gld_sectors_per_req", &self.gld_sectors_per_req),
            ("gst_sectors_per_req", &self.gst_sectors_per_req),
        ]
        .into_iter()
        .filter_map(|(n, f)| f.as_ref().map(|f| (n, f)))
    }
}

impl RatioFit {
    /// The ratio at these data sizes.
    pub fn eval(&self, data: &[f64]) -> f64 {
        self.f.eval(data).clamp(self.min, self.max)
    }
}

/// Fits the sectors-per-request ratios per warp footprint ([`warp_footprint`]), for every
/// footprint of `shapes` that the profile sampled at two sizes or more.
///
/// Coalescing is a step function of the block: 4 sectors per request from 8 columns up, 8 at
/// 4 columns, 16 at 2, 32 at 1 for a row-major 2-D access. One smooth function of the block
/// dimensions over all shapes cannot follow the steps and smears them (on the H200 the
/// global fit of jacobi2d's copy predicted 7.0 sectors for 4x128 blocks, which make 8, and
/// 4.2 for 32x8, which make 4), and the model then sees little difference between shapes
/// whose times differ by 60 %. Within one footprint the ratio depends on the data sizes only
/// (boundary and alignment effects), smoothly. A footprint without such a fit keeps the
/// global one.
pub fn fit_ratios_by_footprint(
    spec: &LinkSpec,
    samples: &[(&Sample, &Counters)],
    shapes: &[[u32; 3]],
) -> Result<Vec<FootprintRatios>> {
    let mut wanted: Vec<[u32; 3]> = shapes.iter().map(|b| warp_footprint(*b)).collect();
    wanted.sort();
    wanted.dedup();
    let vars: Vec<Variable> = spec.data.iter().map(Variable::data).collect();
    let mut out = Vec::new();
    for fp in wanted {
        let group: Vec<_> = samples
            .iter()
            .filter(|(s, _)| warp_footprint(s.block) == fp)
            .collect();
        let ratio = |which: fn(&Counters) -> (u64, u64)| {
            let rows: Vec<(Vec<f64>, f64)> = group
                .iter()
                .filter_map(|(s, c)| {
                    let (sectors, requests) = which(c);
                    (requests > 0).then(|| {
                        let x = s.sizes.iter().map(|&v| v as f64).collect();
                        (x, sectors as f64 / requests as f64)
                    })
                })
                .collect();
            fit_ratio(&vars, &rows)
        };
        let fits = FootprintRatios {
            footprint: fp,
            gld_sectors_per_req: ratio(|c| (c.gld_sectors, c.gld_requests))
                .with_context(|| format!("kernel {}: fitting load sectors", spec.name))?,
            gst_sectors_per_req: ratio(|c| (c.gst_sectors, c.gst_requests))
                .with_context(|| format!("kernel {}: fitting store sectors", spec.name))?,
        };
        if fits.gld_sectors_per_req.is_some() || fits.gst_sectors_per_req.is_some() {
            out.push(fits);
        }
    }
    Ok(out)
}

/// One ratio of one footprint as a function of the data sizes: a constant when the rows
/// hold fewer than three sizes, else a rational function of degree at most one in each size
/// (the ratio tends to its interior value as boundary effects fade). `None` without rows.
fn fit_ratio(vars: &[Variable], rows: &[(Vec<f64>, f64)]) -> Result<Option<RatioFit>> {
    if rows.is_empty() {
        return Ok(None);
    }
    let min = rows.iter().map(|r| r.1).fold(f64::INFINITY, f64::min);
    let max = rows.iter().map(|r| r.1).fold(f64::NEG_INFINITY, f64::max);
    let held = |f: RationalFn| Some(RatioFit { f, min, max });
    let problem = FitProblem {
        vars: vars.to_vec(),
        points: rows.iter().map(|r| r.0.clone()).collect(),
        values: rows.iter().map(|r| r.1).collect(),
        domain: Domain::Grid {
            shapes: Vec::new(),
            data: vec![[1.0, DATA_BOUND]; vars.len()],
        },
    };
    let zeros = DegreeBounds::zeros(vars.len());
    let mut distinct: Vec<&Vec<f64>> = problem.points.iter().collect();
    distinct.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    distinct.dedup();
    if distinct.len() >= 3 {
        let ones = DegreeBounds::uniform(vars.len(), 1);
        let mut o = FitOptions::new(ones.clone(), ones);
        o.den_max_total_degree = 1;
        if let Ok(f) = fit(&problem, &o) {
            return Ok(held(f));
        }
    }
    let mut constant = FitOptions::new(zeros.clone(), zeros.clone());
    constant.value_floor = Some(1e-6);
    Ok(held(fit_degrees(&problem, &zeros, &zeros, &constant)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two launches of the matmul sample's mm at N = 64 on the H200, as ncu counted them
    /// (tests/fixtures/ncu-capture-h200-2026-11-22/job1/ncu.csv, rows ID 0 and ID 35; barriers
    /// are pipe_adu − op_ldc there).
    fn mm_row(id: u32) -> ([u32; 3], [u32; 3], Counters) {
        let (block, grid, inst, ld, st, bar, ld_req, st_req, ld_sec, st_sec) = match id {
            0 => (
                [1, 1, 1],
                [64, 64, 1],
                1_388_544,
                524_288,
                4_096,
                24_576 - 16_384,
                524_288,
                4_096,
                524_288,
                4_096,
            ),
            35 => (
                [32, 8, 1],
                [2, 8, 1],
                43_392,
                16_384,
                128,
                768 - 512,
                16_384,
                128,
                40_960,
                512,
            ),
            _ => unreachable!("only rows 0 and 35 are transcribed"),
        };
        let c = Counters {
            inst_executed: inst,
            inst_global_ld: ld,
            inst_global_st: st,
            inst_shared_ld: 0,
            inst_shared_st: 0,
            inst_barrier: bar,
            gld_requests: ld_req,
            gst_requests: st_req,
            gld_sectors: ld_sec,
            gst_sectors: st_sec,
            gld_l1_hit_sectors: None,
            dram_bytes_read: 38_656,
            dram_bytes_write: 0,
            achieved_active_warps: 0.0,
            global_atomic_requests: None,
            time_ms: if id == 0 { 0.007968 } else { 0.005376 },
            time_runs_ms: vec![],
            launches_per_run: None,
            regs_per_thread: 32,
            smem_static: 0,
            smem_dynamic: 0,
        };
        (block, grid, c)
    }

    #[test]
    fn warps_and_lanes() {
        assert_eq!(warps([1, 1, 1], [64, 64, 1]), 4096.0);
        assert_eq!(warps([32, 8, 1], [2, 8, 1]), 128.0);
        assert_eq!(warps([33, 1, 1], [1, 1, 1]), 2.0);
        assert_eq!(warps([4, 4, 4], [3, 1, 2]), 12.0);
        assert_eq!(lane_factor([1, 1, 1]), 1.0 / 32.0);
        assert_eq!(lane_factor([4, 2, 2]), 0.5);
        assert_eq!(lane_factor([32, 8, 1]), 1.0);
        let warp_counts: Vec<&str> = (0..METRICS.len())
            .filter(|&i| is_warp_count(i))
            .map(|i| METRICS[i])
            .collect();
        assert_eq!(
            warp_counts,
            ["inst", "gld_inst", "gst_inst", "shared_inst", "sync_inst"]
        );
        assert!(
            is_total(7) && !is_warp_count(7),
            "DRAM bytes are not per lane"
        );
        assert!(!is_total(5) && !is_total(6) && !is_total(8));
    }

    #[test]
    fn targets_of_real_launches() {
        // 1x1x1: one lane per warp, so the warp-level counts are 32 times the work; scaled by
        // 1/32 they equal the 32x8 launch's (same work, full warps). The ratios differ: one
        // sector per request for single-lane warps, 2.5 and 4 for 32x8's rows.
        // The capture predates L1 hit counts: that ratio is unknown (NaN, not fitted).
        let (b, _, c) = mm_row(0);
        let t = targets(&c, b);
        assert_eq!(
            t[..8],
            [43_392.0, 16_384.0, 128.0, 0.0, 256.0, 1.0, 1.0, 38_656.0]
        );
        assert!(t[8].is_nan());
        let (b, _, c) = mm_row(35);
        assert_eq!(
            targets(&c, b)[..8],
            [43_392.0, 16_384.0, 128.0, 0.0, 256.0, 2.5, 4.0, 38_656.0]
        );
        // With the count: hit sectors over load sectors.
        let mut hits = c.clone();
        hits.gld_l1_hit_sectors = Some(30_720);
        assert_eq!(targets(&hits, b)[8], 0.75);
        // No requests: a ratio of 0, not NaN.
        let mut none = hits.clone();
        none.gst_requests = 0;
        none.gst_sectors = 0;
        none.gld_sectors = 0;
        assert_eq!(targets(&none, b)[6], 0.0);
        assert_eq!(targets(&none, b)[8], 0.0);
    }

    #[test]
    fn per_warp_of_real_launches() {
        // Each warp of mm at N = 64 runs the same 339 instructions, 128 loads, 1 store and 2
        // barrier-pipe instructions whatever the shape; DRAM bytes are shared by all warps.
        let (b, g, c) = mm_row(0);
        let want0 = [339.0, 128.0, 1.0, 0.0, 2.0, 1.0, 1.0, 38_656.0 / 4096.0];
        assert_eq!(per_warp_of(&targets(&c, b), b, g)[..8], want0);
        assert_eq!(per_warp(&c, b, g)[..8], want0);
        let (b, g, mut c) = mm_row(35);
        let want35 = [339.0, 128.0, 1.0, 0.0, 2.0, 2.5, 4.0, 302.0];
        assert_eq!(per_warp_of(&targets(&c, b), b, g)[..8], want35);
        // The L1 hit rate is a ratio: the same per warp as for the launch.
        c.gld_l1_hit_sectors = Some(10_240);
        assert_eq!(per_warp(&c, b, g)[..8], want35);
        assert_eq!(per_warp(&c, b, g)[8], 0.25);
        // Per warp times warps gives the raw totals back.
        let (b0, g0, c0) = mm_row(0);
        assert_eq!(want0[0] * warps(b0, g0), c0.inst_executed as f64);
        assert_eq!(want35[0] * warps(b, g), c.inst_executed as f64);
    }

    #[test]
    fn warp_footprints() {
        assert_eq!(warp_footprint([4, 128, 1]), [4, 8, 1]);
        assert_eq!(warp_footprint([4, 16, 1]), [4, 8, 1]);
        assert_eq!(warp_footprint([32, 8, 1]), [32, 1, 1]);
        assert_eq!(warp_footprint([1024, 1, 1]), [32, 1, 1]);
        assert_eq!(warp_footprint([1, 64, 1]), [1, 32, 1]);
        assert_eq!(warp_footprint([2, 2, 64]), [2, 2, 8]);
        // A block smaller than a warp is its own footprint.
        assert_eq!(warp_footprint([4, 2, 1]), [4, 2, 1]);
        assert_eq!(warp_footprint([96, 1, 1]), [32, 1, 1]);
    }

    /// The link spec of a committed 2-D kernel whose grid is `ceil(N, bx) × ceil(N, by)`.
    fn square_grid_spec(name: &str, mangled: &str, data: &[&str], code_hash: &str) -> LinkSpec {
        LinkSpec {
            shmem: None,
            name: name.into(),
            mangled: mangled.into(),
            data: data.iter().map(|d| d.to_string()).collect(),
            dim: 2,
            grid: vec!["ceil(N, bx)".into(), "ceil(N, by)".into()],
            block: vec![],
            profile_run: None,
            profile_sizes: vec![],
            code_hash: code_hash.into(),
            annotated_at: String::new(),
            build_dir: Default::default(),
        }
    }

    /// syrk as profiled on the H200 (committed entry, 2026-11-22): C = αAAᵀ + βC over an
    /// N × N grid with a loop of M. Its instruction total, about N²·(2.6 + 0.11·M), has a
    /// degree-(2, 1) numerator that the six profile sizes cannot identify once the largest
    /// are held out: the total's fit fell back to a constant (90 % off). Per thread of the
    /// domain it is linear in M, and that fit is kept.
    #[test]
    fn syrk_instructions_fit_per_domain_thread() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../",
            "samples/klaraptor-profiles/v1/nvidia-h200-2803d38c/_Z4syrkPKfPfffii-26d0f09c6d19ffe8.toml",
        );
        let entry: Entry = toml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let spec = square_grid_spec("syrk", "_Z4syrkPKfPfffii", &["N", "M"], "26d0f09c6d19ffe8");
        let shapes = crate::rational::candidates(2);
        let samples = fit_samples(&spec, &entry).unwrap();
        let fitted = fit_all(&spec, &samples, &shapes).unwrap();
        assert!(fitted.per_domain_thread.contains("inst"));
        assert!(fitted.per_domain_thread.contains("gld_inst"));
        // At 2048 × 64 (8 × the largest profiled N) with 32x8 blocks, the launch's
        // instructions per warp from the fit are those of the measured law within 5 %.
        let f = &fitted.functions["inst"];
        let (n, m) = (2048.0, 64.0);
        let per_thread = f.eval(&[n, m, 5.0, 3.0]);
        let law = 2.56 + 0.1133 * m;
        assert!(
            (per_thread / law - 1.0).abs() < 0.05,
            "{per_thread} vs {law}"
        );
    }

    /// jacobi2d's copy kernel as profiled on the H200 (committed entry, 2026-11-22): the
    /// per-footprint fits give the sectors per request the layout makes, 4 for warps 8
    /// columns wide or more, 8 for 4 columns, 16 for 2, 32 for 1, at a size 8x the largest
    /// profiled, and stay within the measured range far beyond it.
    #[test]
    fn ratios_by_footprint_follow_the_steps_of_coalescing() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(
            "samples/klaraptor-profiles/v1/nvidia-h200-2803d38c/_Z13jacobi2d_copyPfPKfi-d74a5b006d8f83bf.toml",
        );
        let entry: Entry = toml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let spec = square_grid_spec(
            "jacobi2d_copy",
            "_Z13jacobi2d_copyPfPKfi",
            &["N"],
            "d74a5b006d8f83bf",
        );
        let shapes = crate::rational::candidates(2);
        let samples = fit_samples(&spec, &entry).unwrap();
        let fits = fit_ratios_by_footprint(&spec, &samples, &shapes).unwrap();
        let at = |fp: [u32; 3], n: f64| {
            let r = fits.iter().find(|r| r.footprint == fp).unwrap();
            (
                r.gld_sectors_per_req.as_ref().unwrap().eval(&[n]),
                r.gst_sectors_per_req.as_ref().unwrap().eval(&[n]),
            )
        };
        for (fp, want) in [
            ([32, 1, 1], 4.0),
            ([16, 2, 1], 4.0),
            ([8, 4, 1], 4.0),
            ([4, 8, 1], 8.0),
            ([2, 16, 1], 16.0),
            ([1, 32, 1], 32.0),
        ] {
            for n in [2048.0, 1e7] {
                let (ld, st) = at(fp, n);
                assert!(
                    (ld / want - 1.0).abs() < 0.04,
                    "{fp:?} at {n}: {ld} load sectors"
                );
                assert!(
                    (st / want - 1.0).abs() < 0.04,
                    "{fp:?} at {n}: {st} store sectors"
                );
            }
        }
        // Every candidate of full warps has its footprint's fit (the plan samples every
        // width); blocks of fewer threads that the plan did not sample keep the global fit.
        for b in shapes.into_iter().filter(|b| b[0] * b[1] * b[2] >= 32) {
            let fp = warp_footprint(b);
            assert!(fits.iter().any(|r| r.footprint == fp), "{b:?}: {fp:?}");
        }
    }
}
