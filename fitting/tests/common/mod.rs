//! Shared builders for the integration tests: the families of the acceptance spec sampled on
//! realistic profiling grids (small data sizes × power-of-two block shapes).

#![allow(dead_code)]

use klaraptor_fitting::{Domain, FitProblem, Variable};

/// Data sizes profiled (all ≤ 512).
pub const SIZES: [f64; 8] = [32.0, 64.0, 96.0, 128.0, 192.0, 256.0, 384.0, 512.0];
/// Data sizes the fitted functions are checked at (far beyond the profiled ones).
pub const FAR_SIZES: [f64; 4] = [768.0, 1024.0, 4096.0, 8192.0];
pub const BOUND: f64 = 16384.0;

/// Deterministic generator (splitmix64), so that the tests need no RNG crate.
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    pub fn range(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.uniform()
    }
}

/// Power-of-two block shapes `(bx, by)` with `bx ≤ 1024`, `by ≤ 32`, `bx·by ≤ 1024`.
pub fn shapes_2d() -> Vec<Vec<f64>> {
    let mut out = Vec::new();
    for by in (0..6).map(|e| (1u32 << e) as f64) {
        for bx in (0..11).map(|e| (1u32 << e) as f64) {
            if bx * by <= 1024.0 {
                out.push(vec![bx, by]);
            }
        }
    }
    out
}

pub fn shapes_1d() -> Vec<Vec<f64>> {
    (0..11).map(|e| vec![(1u32 << e) as f64]).collect()
}

/// A test family: a function of `(N, block…)` and its true degrees.
pub struct Family {
    pub name: &'static str,
    pub vars: Vec<Variable>,
    pub f: fn(&[f64]) -> f64,
    pub shapes: Vec<Vec<f64>>,
    pub num: Vec<u32>,
    pub den: Vec<u32>,
}

pub fn families() -> Vec<Family> {
    let n_bx = || vec![Variable::data("N"), Variable::block("bx")];
    let n_bx_by = || {
        vec![
            Variable::data("N"),
            Variable::block("bx"),
            Variable::block("by"),
        ]
    };
    vec![
        Family {
            name: "(N^2 + 3N)/bx",
            vars: n_bx(),
            f: |x| (x[0] * x[0] + 3.0 * x[0]) / x[1],
            shapes: shapes_1d(),
            num: vec![2, 0],
            den: vec![0, 1],
        },
        Family {
            name: "(N bx + 7)/(bx + by)",
            vars: n_bx_by(),
            f: |x| (x[0] * x[1] + 7.0) / (x[1] + x[2]),
            shapes: shapes_2d(),
            num: vec![1, 1, 0],
            den: vec![0, 1, 1],
        },
        Family {
            name: "N^3/(bx by)",
            vars: n_bx_by(),
            f: |x| x[0] * x[0] * x[0] / (x[1] * x[2]),
            shapes: shapes_2d(),
            num: vec![3, 0, 0],
            den: vec![0, 1, 1],
        },
        Family {
            name: "4N + 12",
            vars: n_bx(),
            f: |x| 4.0 * x[0] + 12.0,
            shapes: shapes_1d(),
            num: vec![1, 0],
            den: vec![0, 0],
        },
    ]
}

impl Family {
    /// Points `(N, shape…)` for every profiled size and shape.
    pub fn points(&self, sizes: &[f64]) -> Vec<Vec<f64>> {
        let mut pts = Vec::new();
        for &n in sizes {
            for s in &self.shapes {
                let mut p = vec![n];
                p.extend_from_slice(s);
                pts.push(p);
            }
        }
        pts
    }

    pub fn domain(&self) -> Domain {
        Domain::Grid {
            shapes: self.shapes.clone(),
            data: vec![[1.0, BOUND]],
        }
    }

    /// The problem on the profiled sizes, each value multiplied by `1 + noise·U(−1, 1)`.
    pub fn problem(&self, noise: f64, rng: &mut Rng) -> FitProblem {
        let points = self.points(&SIZES);
        let values = points
            .iter()
            .map(|p| (self.f)(p) * (1.0 + noise * rng.range(-1.0, 1.0)))
            .collect();
        FitProblem {
            vars: self.vars.clone(),
            points,
            values,
            domain: self.domain(),
        }
    }
}

pub fn rel(a: f64, b: f64) -> f64 {
    (a - b).abs() / b.abs()
}
