//! From profile records to fitted metrics.
//!
//! The model (klaraptor-model) takes, for one launch, per-warp averages of what the hardware
//! counted: instructions, global load/store instructions, shared-memory instructions,
//! barriers, 32-byte sectors per global request (coalescing) and DRAM bytes.
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
use klaraptor_profiler::record::{Counters, Entry, Sample};

use crate::linkspec::LinkSpec;

/// The per-warp metrics, in the order of [`per_warp`]'s result.
pub const METRICS: [&str; 8] = [
    "inst",
    "gld_inst",
    "gst_inst",
    "shared_inst",
    "sync_inst",
    "gld_sectors_per_req",
    "gst_sectors_per_req",
    "dram_bytes",
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
    !METRICS[i].ends_with("_per_req")
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
/// [`lane_factor`]), and the two ratios.
pub fn targets(c: &Counters, block: [u32; 3]) -> [f64; 8] {
    let ratio = |a: u64, b: u64| if b == 0 { 0.0 } else { a as f64 / b as f64 };
    let mut v = [
        c.inst_executed as f64,
        c.inst_global_ld as f64,
        c.inst_global_st as f64,
        (c.inst_shared_ld + c.inst_shared_st) as f64,
        c.inst_barrier as f64,
        ratio(c.gld_sectors, c.gld_requests),
        ratio(c.gst_sectors, c.gst_requests),
        (c.dram_bytes_read + c.dram_bytes_write) as f64,
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
pub fn per_warp_of(values: &[f64; 8], block: [u32; 3], grid: [u32; 3]) -> [f64; 8] {
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
pub fn per_warp(c: &Counters, block: [u32; 3], grid: [u32; 3]) -> [f64; 8] {
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

/// Fits every metric of [`METRICS`] over the entry's samples (totals and ratios, see the
/// module documentation). `shapes` are the candidate
/// block shapes the functions will be evaluated on.
pub fn fit_all(
    spec: &LinkSpec,
    entry: &Entry,
    shapes: &[[u32; 3]],
) -> Result<BTreeMap<String, RationalFn>> {
    let samples = usable(spec, entry);
    if samples.len() < 4 {
        bail!(
            "kernel {}: the profile has {} usable samples (of {}); at least 4 are needed to fit",
            spec.name,
            samples.len(),
            entry.samples.len()
        );
    }
    let vars = variables(spec);
    let nblock = usize::from(spec.dim.clamp(1, 3));
    let points: Vec<Vec<f64>> = samples
        .iter()
        .map(|(s, _)| point(spec, &s.sizes, s.block))
        .collect();
    let values: Vec<[f64; 8]> = samples.iter().map(|(s, c)| targets(c, s.block)).collect();
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
    let mut out = BTreeMap::new();
    for (m, name) in METRICS.iter().enumerate() {
        let vals: Vec<f64> = values.iter().map(|v| v[m]).collect();
        let problem = FitProblem {
            vars: vars.clone(),
            points: points.clone(),
            values: vals.clone(),
            domain: domain.clone(),
        };
        let max = vals.iter().fold(0.0f64, |a, v| a.max(v.abs()));
        let f = if max == 0.0 {
            // Never happens in this kernel (no stores, no barriers, …): the constant 0.
            let zeros = DegreeBounds::zeros(vars.len());
            let mut o = options.clone();
            o.value_floor = Some(1.0);
            fit_degrees(&problem, &zeros, &zeros, &o)
        } else {
            fit(&problem, &options)
        }
        .with_context(|| format!("kernel {}: fitting {name}", spec.name))?;
        out.insert(name.to_string(), f);
    }
    Ok(out)
}
