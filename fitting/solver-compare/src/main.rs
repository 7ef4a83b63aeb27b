//! LAPACK `dgelsd` against nalgebra's SVD on the least-squares systems klaraptor-fitting
//! solves. Prints the tables the crate documentation quotes.
//!
//! 1. Systems captured from fits where nalgebra's SVD misbehaved (`fixtures/`): consistent
//!    (exact data), so the ideal residual is round-off.
//! 2. Synthetic consistent systems: tensor monomial or Chebyshev bases of degree 3 in 4
//!    variables, with row weights spanning six orders of magnitude like relative-error weights.
//! 3. Whole fits (`fit_with_solver`) of random exact rational functions: how often each solver
//!    fails to recover the function to 1e-8.
//! 4. Time per solve, and per whole fit of the benchmark problem.

use std::time::Instant;

use klaraptor_fitting::{
    fit_with_solver, Domain, FitError, FitOptions, FitProblem, LstsqSolution, LstsqSolver,
    NalgebraSvd, Variable,
};
use nalgebra::{DMatrix, DVector};

/// LAPACK's divide-and-conquer SVD least squares.
struct Dgelsd;

impl LstsqSolver for Dgelsd {
    fn name(&self) -> &str {
        "LAPACK dgelsd"
    }

    fn solve(
        &self,
        a: &DMatrix<f64>,
        b: &DVector<f64>,
        rcond: f64,
    ) -> Result<LstsqSolution, FitError> {
        let (m, n) = a.shape();
        if m == 0 || n == 0 {
            return Ok(LstsqSolution {
                x: DVector::zeros(n),
                rank: 0,
                singular_values: vec![],
            });
        }
        let ldb = m.max(n);
        let mut acopy: Vec<f64> = a.as_slice().to_vec(); // column-major, lda = m
        let mut bb = vec![0.0; ldb];
        bb[..m].copy_from_slice(b.as_slice());
        let mut s = vec![0.0; m.min(n)];
        let mut rank = 0i32;
        let mut info = 0i32;
        let mut query = [0.0f64];
        let mut iquery = [0i32];
        unsafe {
            lapack::dgelsd(
                m as i32,
                n as i32,
                1,
                &mut acopy,
                m as i32,
                &mut bb,
                ldb as i32,
                &mut s,
                rcond,
                &mut rank,
                &mut query,
                -1,
                &mut iquery,
                &mut info,
            );
        }
        let lwork = query[0] as usize;
        let mut work = vec![0.0; lwork.max(1)];
        let mut iwork = vec![0i32; (iquery[0] as usize).max(1)];
        unsafe {
            lapack::dgelsd(
                m as i32,
                n as i32,
                1,
                &mut acopy,
                m as i32,
                &mut bb,
                ldb as i32,
                &mut s,
                rcond,
                &mut rank,
                &mut work,
                lwork as i32,
                &mut iwork,
                &mut info,
            );
        }
        if info != 0 {
            return Err(FitError::SvdDidNotConverge { rows: m, cols: n });
        }
        Ok(LstsqSolution {
            x: DVector::from_column_slice(&bb[..n]),
            rank: rank as usize,
            singular_values: s,
        })
    }
}

/// nalgebra's SVD as it comes (default tolerance 5ε, QR first), without the crate's
/// reconstruction check: what the check protects against.
struct NalgebraUnchecked;

impl LstsqSolver for NalgebraUnchecked {
    fn name(&self) -> &str {
        "nalgebra SVD, unchecked"
    }

    fn solve(
        &self,
        a: &DMatrix<f64>,
        b: &DVector<f64>,
        rcond: f64,
    ) -> Result<LstsqSolution, FitError> {
        let (m, n) = a.shape();
        let (core, rhs) = if m > n {
            let qr = a.clone().qr();
            let mut qtb = b.clone();
            qr.q_tr_mul(&mut qtb);
            (qr.r(), qtb.rows(0, n).into_owned())
        } else {
            (a.clone(), b.clone())
        };
        let svd = nalgebra::SVD::try_new(core, true, true, 5.0 * f64::EPSILON, 10_000)
            .ok_or(FitError::SvdDidNotConverge { rows: m, cols: n })?;
        let smax = svd.singular_values.max();
        let x = svd
            .solve(&rhs, rcond * smax)
            .map_err(|e| FitError::NotFinite(e.to_string()))?;
        let rank = svd.rank(rcond * smax);
        let mut singular_values: Vec<f64> = svd.singular_values.iter().copied().collect();
        singular_values.sort_by(|a, b| b.total_cmp(a));
        Ok(LstsqSolution {
            x,
            rank,
            singular_values,
        })
    }
}

struct Rng(u64);

impl Rng {
    fn uniform(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
    }
}

fn load(path: &str) -> (DMatrix<f64>, DVector<f64>) {
    let text = std::fs::read_to_string(path).expect("fixture");
    let mut lines = text.lines();
    let dims: Vec<usize> = lines
        .next()
        .unwrap()
        .split_whitespace()
        .map(|x| x.parse().unwrap())
        .collect();
    let (m, n) = (dims[0], dims[1]);
    let mut a = DMatrix::zeros(m, n);
    let mut b = DVector::zeros(m);
    for (r, line) in lines.enumerate() {
        let v: Vec<f64> = line
            .split_whitespace()
            .map(|x| x.parse().unwrap())
            .collect();
        for c in 0..n {
            a[(r, c)] = v[c];
        }
        b[r] = v[n];
    }
    (a, b)
}

fn rel_residual(a: &DMatrix<f64>, b: &DVector<f64>, x: &DVector<f64>) -> f64 {
    (a * x - b).norm() / b.norm()
}

fn solvers() -> [(&'static str, Box<dyn LstsqSolver>); 2] {
    [
        ("nalgebra", Box::new(NalgebraSvd)),
        ("dgelsd", Box::new(Dgelsd)),
    ]
}

/// The solvers plus the unchecked nalgebra SVD, for the accuracy tables.
fn all_solvers() -> [(&'static str, Box<dyn LstsqSolver>); 3] {
    [
        ("nalgebra", Box::new(NalgebraSvd)),
        ("dgelsd", Box::new(Dgelsd)),
        ("unchecked", Box::new(NalgebraUnchecked)),
    ]
}

fn fixtures() {
    println!("1. captured systems (consistent; ideal relative residual ~1e-16)");
    for name in ["sk2_case_a", "sk2_case_b"] {
        let (a, b) = load(&format!(
            "{}/fixtures/{name}.txt",
            env!("CARGO_MANIFEST_DIR")
        ));
        for (label, s) in all_solvers() {
            match s.solve(&a, &b, 1e-12) {
                Ok(sol) => println!(
                    "   {name} {}x{}  {label:<9} residual {:.1e}",
                    a.nrows(),
                    a.ncols(),
                    rel_residual(&a, &b, &sol.x)
                ),
                Err(e) => println!("   {name} {label:<9} error: {e}"),
            }
        }
    }
}

/// `m` random points in [0, 1]^4 (or [−1, 1]^4 for Chebyshev), all tensor terms of degree
/// ≤ 3 per variable, columns normalised, rows weighted over six decades.
fn synthetic(rng: &mut Rng, m: usize, chebyshev: bool) -> DMatrix<f64> {
    let n = 256;
    let mut a = DMatrix::zeros(m, n);
    for r in 0..m {
        let x: Vec<f64> = (0..4)
            .map(|_| {
                if chebyshev {
                    2.0 * rng.uniform() - 1.0
                } else {
                    rng.uniform()
                }
            })
            .collect();
        let w = 10f64.powf(-6.0 * rng.uniform());
        for c in 0..n {
            let mut v = w;
            let mut idx = c;
            for xi in &x {
                let k = idx % 4;
                idx /= 4;
                v *= if chebyshev {
                    (k as f64 * xi.acos()).cos()
                } else {
                    xi.powi(k as i32)
                };
            }
            a[(r, c)] = v;
        }
    }
    for c in 0..n {
        let norm = a.column(c).norm();
        a.column_mut(c).scale_mut(1.0 / norm);
    }
    a
}

fn synthetic_table() {
    println!("2. synthetic consistent systems, 600x256 (degree 3 in 4 variables), 20 each");
    for chebyshev in [false, true] {
        let mut rng = Rng(7);
        let mut stats = [(0.0f64, 0.0f64, 0usize, 0.0f64); 2];
        for _ in 0..20 {
            let a = synthetic(&mut rng, 600, chebyshev);
            let xstar = DVector::from_fn(256, |_, _| 2.0 * rng.uniform() - 1.0);
            let b = &a * &xstar;
            for (i, (_, s)) in solvers().iter().enumerate() {
                let sol = s.solve(&a, &b, 1e-14).expect("solve");
                let res = rel_residual(&a, &b, &sol.x);
                stats[i].0 = stats[i].0.max(res);
                stats[i].2 = sol.rank;
                stats[i].3 = sol.singular_values[0] / sol.singular_values[255];
                if sol.rank == 256 {
                    stats[i].1 = stats[i].1.max((&sol.x - &xstar).norm() / xstar.norm());
                }
            }
        }
        for (i, (label, _)) in solvers().iter().enumerate() {
            println!(
                "   {:<10} {label:<9} worst residual {:.1e}, worst solution error {:.1e} \
                 (rank {}, condition {:.1e})",
                if chebyshev { "Chebyshev" } else { "monomial" },
                stats[i].0,
                stats[i].1,
                stats[i].2,
                stats[i].3
            );
        }
    }
}

/// A random exact rational function in (N, bx) with small positive integer coefficients, as
/// in the crate's property test.
fn random_problem(rng: &mut Rng) -> (FitProblem, impl Fn(f64, f64) -> f64, String) {
    let mut pick = |len: usize| -> Vec<f64> {
        loop {
            let v: Vec<f64> = (0..len)
                .map(|_| {
                    if rng.uniform() < 0.3 {
                        0.0
                    } else {
                        (1.0 + 9.0 * rng.uniform()).floor()
                    }
                })
                .collect();
            if v.iter().any(|&c| c > 0.0) {
                return v;
            }
        }
    };
    let (dn, db) = (2usize, 1usize);
    let (en, eb) = (1usize, 1usize);
    let c = pick((dn + 1) * (db + 1));
    let d = pick((en + 1) * (eb + 1));
    let poly = move |c: &[f64], dn: usize, db: usize, n: f64, bx: f64| -> f64 {
        let mut s = 0.0;
        for i in 0..=dn {
            for j in 0..=db {
                s += c[i * (db + 1) + j] * n.powi(i as i32) * bx.powi(j as i32);
            }
        }
        s
    };
    let text = format!("num {c:?} / den {d:?} (coefficients of N^i bx^j, i-major)");
    let f = move |n: f64, bx: f64| poly(&c, dn, db, n, bx) / poly(&d, en, eb, n, bx);
    let sizes = [32.0, 64.0, 96.0, 128.0, 192.0, 256.0, 384.0, 512.0];
    let shapes: Vec<f64> = (0..11).map(|e| (1u32 << e) as f64).collect();
    let mut points = Vec::new();
    for &n in &sizes {
        for &bx in &shapes {
            points.push(vec![n, bx]);
        }
    }
    let values = points.iter().map(|p| f(p[0], p[1])).collect();
    let problem = FitProblem {
        vars: vec![Variable::data("N"), Variable::block("bx")],
        points,
        values,
        domain: Domain::Grid {
            shapes: shapes.iter().map(|&b| vec![b]).collect(),
            data: vec![[1.0, 8192.0]],
        },
    };
    (problem, f, text)
}

fn pipeline_table(cases: usize) {
    println!(
        "3. whole fits of {cases} random exact rational functions (num <= (2,1), den <= (1,1))"
    );
    for (label, solver) in all_solvers() {
        let mut rng = Rng(11);
        let mut failures = 0;
        let mut errors = 0;
        let start = Instant::now();
        for _ in 0..cases {
            let (problem, f, text) = random_problem(&mut rng);
            match fit_with_solver(&problem, &FitOptions::uniform(2, 3, 2), solver.as_ref()) {
                Ok(g) => {
                    let mut worst = 0.0f64;
                    for n in [32.0, 100.0, 512.0, 1000.0, 8192.0] {
                        for e in 0..11 {
                            let bx = (1u32 << e) as f64;
                            let t = f(n, bx);
                            worst = worst.max((g.eval(&[n, bx]) - t).abs() / t.abs());
                        }
                    }
                    if worst > 1e-8 {
                        failures += 1;
                        if failures <= 3 {
                            println!(
                                "     {text}: chose {:?}/{:?}, worst relative error {worst:.1e}",
                                g.diagnostics.num_degrees, g.diagnostics.den_degrees
                            );
                        }
                    }
                }
                Err(_) => errors += 1,
            }
        }
        println!(
            "   {label:<9} not recovered to 1e-8: {failures}, errors: {errors}, total time {:.2} s",
            start.elapsed().as_secs_f64()
        );
    }
}

fn timing_table() {
    println!("4. time per solve (Chebyshev design, 240 rows, weighted), median of 200");
    let mut rng = Rng(3);
    for n in [8usize, 32, 64, 128] {
        let full = synthetic(&mut rng, 240, true);
        let a = full.columns(0, n).into_owned();
        let b = DVector::from_fn(240, |_, _| rng.uniform());
        for (label, s) in solvers() {
            let mut times: Vec<f64> = (0..200)
                .map(|_| {
                    let t = Instant::now();
                    let _ = s.solve(&a, &b, 1e-12);
                    t.elapsed().as_secs_f64()
                })
                .collect();
            times.sort_by(f64::total_cmp);
            println!("   240x{n:<4} {label:<9} {:.1} us", times[100] * 1e6);
        }
    }
}

fn main() {
    let (solves0, rejected0, failed0) = klaraptor_fitting::linalg::nalgebra_svd_check_counts();
    fixtures();
    synthetic_table();
    let cases = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1000);
    pipeline_table(cases);
    let (solves, rejected, failed) = klaraptor_fitting::linalg::nalgebra_svd_check_counts();
    println!(
        "   nalgebra decompositions rejected by the reconstruction check: {} in {} solves, \
         solves with every attempt rejected: {}",
        rejected - rejected0,
        solves - solves0,
        failed - failed0
    );
    timing_table();
}
