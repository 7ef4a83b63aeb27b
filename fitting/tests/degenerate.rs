//! Degenerate input gives a clear error or a lower-degree model: never NaN coefficients, never
//! a panic.

mod common;

use common::{families, rel, Rng, SIZES};
use klaraptor_fitting::{
    fit, fit_degrees, DegreeBounds, Domain, FitError, FitOptions, FitProblem, RationalFn, Variable,
};

fn assert_finite(f: &RationalFn) {
    assert!(f
        .num
        .coeffs()
        .iter()
        .chain(f.den.coeffs())
        .all(|c| c.is_finite()));
    let d = &f.diagnostics;
    assert!(d.condition_number.is_finite() && d.fit_max_rel_error.is_finite());
}

fn linear_problem(sizes: &[f64]) -> FitProblem {
    FitProblem {
        vars: vec![Variable::data("N")],
        points: sizes.iter().map(|&n| vec![n]).collect(),
        values: sizes.iter().map(|&n| 4.0 * n + 12.0).collect(),
        domain: Domain::Grid {
            shapes: vec![],
            data: vec![[1.0, 8192.0]],
        },
    }
}

#[test]
fn duplicate_points_change_nothing() {
    let fam = &families()[0];
    let mut problem = fam.problem(0.0, &mut Rng(1));
    let (pts, vals) = (problem.points.clone(), problem.values.clone());
    problem.points.extend(pts);
    problem.values.extend(vals);
    let f = fit(&problem, &FitOptions::uniform(2, 3, 3)).unwrap();
    assert_finite(&f);
    assert_eq!(f.diagnostics.distinct_points * 2, f.diagnostics.points);
    assert_eq!(f.diagnostics.num_degrees, fam.num);
    assert_eq!(f.diagnostics.den_degrees, fam.den);
    for p in fam.points(&[8192.0]) {
        assert!(rel(f.eval(&p), (fam.f)(&p)) < 1e-9);
    }
}

#[test]
fn duplicate_points_with_different_values_are_averaged() {
    let mut problem = linear_problem(&SIZES);
    let n = problem.points.len();
    for k in 0..n {
        let (p, v) = (problem.points[k].clone(), problem.values[k]);
        problem.points.push(p);
        problem.values.push(v * 1.02);
    }
    let f = fit(&problem, &FitOptions::uniform(1, 3, 3)).unwrap();
    assert_finite(&f);
    // Relative least squares between v and 1.02 v: close to 1.01 v.
    assert!(rel(f.eval(&[8192.0]), 1.01 * (4.0 * 8192.0 + 12.0)) < 0.01);
}

#[test]
fn constant_column_gets_degree_zero() {
    // bz is 1 everywhere: it cannot be identified and must not be used.
    let fam = &families()[2]; // N^3/(bx by)
    let base = fam.problem(0.0, &mut Rng(1));
    let problem = FitProblem {
        vars: vec![
            Variable::data("N"),
            Variable::block("bx"),
            Variable::block("by"),
            Variable::block("bz"),
        ],
        points: base
            .points
            .iter()
            .map(|p| vec![p[0], p[1], p[2], 1.0])
            .collect(),
        values: base.values.clone(),
        domain: Domain::Grid {
            shapes: fam.shapes.iter().map(|s| vec![s[0], s[1], 1.0]).collect(),
            data: vec![[1.0, 16384.0]],
        },
    };
    let f = fit(&problem, &FitOptions::uniform(4, 3, 3)).unwrap();
    assert_finite(&f);
    assert_eq!(f.diagnostics.num_degrees, vec![3, 0, 0, 0]);
    assert_eq!(f.diagnostics.den_degrees, vec![0, 1, 1, 0]);
    let x = [8192.0, 64.0, 4.0, 1.0];
    assert!(rel(f.eval(&x), 8192.0f64.powi(3) / 256.0) < 1e-9);
}

#[test]
fn negative_and_zero_values() {
    // Negative everywhere: relative errors do not care about the sign.
    let fam = &families()[0];
    let mut problem = fam.problem(0.0, &mut Rng(1));
    problem.values.iter_mut().for_each(|v| *v = -*v);
    let f = fit(&problem, &FitOptions::uniform(2, 3, 3)).unwrap();
    assert_eq!(f.diagnostics.num_degrees, fam.num);
    let x = [8192.0, 16.0];
    assert!(rel(f.eval(&x), -(fam.f)(&x)) < 1e-9);

    // Values crossing zero (4N − 1000 vanishes at N = 250, between two profiled sizes).
    let mut problem = linear_problem(&SIZES);
    problem.values = SIZES.iter().map(|n| 4.0 * n - 1000.0).collect();
    let f = fit(&problem, &FitOptions::uniform(1, 3, 3)).unwrap();
    assert_finite(&f);
    assert!(rel(f.eval(&[8192.0]), 4.0 * 8192.0 - 1000.0) < 1e-9);
}

#[test]
fn constant_values_give_a_constant() {
    let mut problem = linear_problem(&SIZES);
    problem.values.iter_mut().for_each(|v| *v = 2.5);
    let f = fit(&problem, &FitOptions::uniform(1, 3, 3)).unwrap();
    assert!(f.is_constant());
    assert_eq!(f.eval(&[1e6]), 2.5);
}

#[test]
fn all_zero_values_give_zero() {
    let mut problem = linear_problem(&SIZES);
    problem.values.iter_mut().for_each(|v| *v = 0.0);
    let f = fit(&problem, &FitOptions::uniform(1, 3, 3)).unwrap();
    assert_finite(&f);
    assert!(f.is_constant());
    assert_eq!(f.eval(&[100.0]), 0.0);
}

#[test]
fn fewer_points_than_unknowns_lowers_the_degree() {
    for n in 1..=4 {
        let problem = linear_problem(&SIZES[..n]);
        let f = fit(&problem, &FitOptions::uniform(1, 3, 3)).unwrap();
        assert_finite(&f);
        assert!(
            f.diagnostics.unknowns <= n,
            "{n} points, {} unknowns",
            f.diagnostics.unknowns
        );
    }
    // Asking for the degrees outright is an error that says why.
    let problem = linear_problem(&SIZES[..3]);
    let err = fit_degrees(
        &problem,
        &DegreeBounds(vec![3]),
        &DegreeBounds(vec![1]),
        &FitOptions::uniform(1, 3, 3),
    )
    .unwrap_err();
    assert!(
        matches!(
            err,
            FitError::Underdetermined {
                unknowns: 5,
                distinct_points: 3,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn non_finite_values_are_errors_or_dropped() {
    for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
        let mut problem = linear_problem(&SIZES);
        problem.values[3] = bad;
        let err = fit(&problem, &FitOptions::uniform(1, 3, 3)).unwrap_err();
        assert!(matches!(err, FitError::NonFinite { index: 3, .. }), "{err}");
        assert!(err.to_string().contains("drop_non_finite"));

        let mut options = FitOptions::uniform(1, 3, 3);
        options.drop_non_finite = true;
        let f = fit(&problem, &options).unwrap();
        assert_finite(&f);
        assert_eq!(f.diagnostics.dropped_non_finite, 1);
        assert!(rel(f.eval(&[8192.0]), 4.0 * 8192.0 + 12.0) < 1e-9);
    }
    let mut problem = linear_problem(&SIZES);
    problem.points[0][0] = f64::NAN;
    assert!(matches!(
        fit(&problem, &FitOptions::uniform(1, 3, 3)),
        Err(FitError::NonFinite { index: 0, .. })
    ));
}

#[test]
fn malformed_problems_are_errors() {
    let options = FitOptions::uniform(1, 3, 3);
    let empty = linear_problem(&[]);
    assert!(matches!(fit(&empty, &options), Err(FitError::Empty(_))));

    let mut short = linear_problem(&SIZES);
    short.values.pop();
    assert!(matches!(
        fit(&short, &options),
        Err(FitError::Dimension { .. })
    ));

    let mut ragged = linear_problem(&SIZES);
    ragged.points[2].push(1.0);
    assert!(matches!(
        fit(&ragged, &options),
        Err(FitError::Dimension { .. })
    ));

    let problem = linear_problem(&SIZES);
    assert!(matches!(
        fit(&problem, &FitOptions::uniform(2, 3, 3)),
        Err(FitError::Dimension { .. })
    ));

    let mut bad_domain = linear_problem(&SIZES);
    bad_domain.domain = Domain::Grid {
        shapes: vec![],
        data: vec![[1.0, f64::NAN]],
    };
    assert!(matches!(
        fit(&bad_domain, &options),
        Err(FitError::Domain(_))
    ));
    bad_domain.domain = Domain::Points(vec![vec![1.0, 2.0]]);
    assert!(matches!(
        fit(&bad_domain, &options),
        Err(FitError::Domain(_))
    ));

    let mut bad_options = FitOptions::uniform(1, 3, 3);
    bad_options.rcond = -1.0;
    assert!(matches!(
        fit(&problem, &bad_options),
        Err(FitError::Options(_))
    ));
}

/// `1000/(700 − N)` fitted on N ≤ 512 is exact with a pole at N = 700. On the domain
/// [1, 600] it must be found; on [1, 8192] the pole is inside, so it must be rejected.
#[test]
fn a_pole_on_the_domain_is_rejected() {
    let sizes: Vec<f64> = (1..=16).map(|i| 32.0 * i as f64).collect();
    let mut problem = linear_problem(&sizes);
    problem.values = sizes.iter().map(|n| 1000.0 / (700.0 - n)).collect();
    let options = FitOptions::uniform(1, 3, 3);

    problem.domain = Domain::Grid {
        shapes: vec![],
        data: vec![[1.0, 600.0]],
    };
    let exact = fit(&problem, &options).unwrap();
    assert_eq!(exact.diagnostics.den_degrees, vec![1]);
    assert!(rel(exact.eval(&[600.0]), 10.0) < 1e-9);

    problem.domain = Domain::Grid {
        shapes: vec![],
        data: vec![[1.0, 8192.0]],
    };
    let f = fit(&problem, &options).unwrap();
    assert_finite(&f);
    let s = f.diagnostics.search.as_ref().unwrap();
    assert!(s.rejected_denominator > 0, "{s:?}");
    // Whatever was chosen has a denominator that keeps its sign on [1, 8192].
    for i in 0..=81920 {
        let t = f.scaled(&[1.0 + i as f64 * 0.1]);
        assert!(f.den.eval_scaled(&t) > 0.0);
    }
}
