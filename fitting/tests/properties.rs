//! fit(evaluate(f)) ≈ f for random low-degree rational functions with positive coefficients
//! (the shape of GPU metrics: positive, polynomial over polynomial in N and bx).

mod common;

use common::{rel, shapes_1d, SIZES};
use klaraptor_fitting::{fit, Domain, FitOptions, FitProblem, Variable};
use proptest::prelude::*;

/// `Σ c_ij N^i bx^j` over `i ≤ dn, j ≤ db`, coefficients row-major.
fn poly(c: &[f64], dn: usize, db: usize, n: f64, bx: f64) -> f64 {
    let mut s = 0.0;
    for i in 0..=dn {
        for j in 0..=db {
            s += c[i * (db + 1) + j] * n.powi(i as i32) * bx.powi(j as i32);
        }
    }
    s
}

#[derive(Debug, Clone)]
struct Random {
    num: (usize, usize, Vec<f64>),
    den: (usize, usize, Vec<f64>),
}

impl Random {
    fn eval(&self, n: f64, bx: f64) -> f64 {
        let (dn, db, c) = &self.num;
        let (en, eb, d) = &self.den;
        poly(c, *dn, *db, n, bx) / poly(d, *en, *eb, n, bx)
    }
}

fn coeffs(len: usize) -> impl Strategy<Value = Vec<f64>> {
    // Small positive integers, some zeros: sparse polynomials occur in practice.
    prop::collection::vec(prop_oneof![Just(0.0), (1u32..10).prop_map(f64::from)], len)
        .prop_filter("not identically zero", |v| v.iter().any(|&x| x > 0.0))
}

fn random_function() -> impl Strategy<Value = Random> {
    (0usize..=2, 0usize..=1, 0usize..=1, 0usize..=1).prop_flat_map(|(dn, db, en, eb)| {
        (coeffs((dn + 1) * (db + 1)), coeffs((en + 1) * (eb + 1))).prop_map(move |(c, d)| Random {
            num: (dn, db, c),
            den: (en, eb, d),
        })
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn fit_of_evaluate_is_identity(f in random_function()) {
        let shapes = shapes_1d();
        let mut points = Vec::new();
        for &n in &SIZES {
            for s in &shapes {
                points.push(vec![n, s[0]]);
            }
        }
        let values = points.iter().map(|p| f.eval(p[0], p[1])).collect();
        let problem = FitProblem {
            vars: vec![Variable::data("N"), Variable::block("bx")],
            points: points.clone(),
            values,
            domain: Domain::Grid { shapes: shapes.clone(), data: vec![[1.0, 8192.0]] },
        };
        let fitted = fit(&problem, &FitOptions::uniform(2, 3, 2)).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let mut worst = 0.0_f64;
        for &n in SIZES.iter().chain(&[1000.0, 4096.0, 8192.0]) {
            for s in &shapes {
                worst = worst.max(rel(fitted.eval(&[n, s[0]]), f.eval(n, s[0])));
            }
        }
        prop_assert!(worst < 1e-8, "worst relative error {worst:e} with degrees {:?}/{:?}",
            fitted.diagnostics.num_degrees, fitted.diagnostics.den_degrees);
    }
}
