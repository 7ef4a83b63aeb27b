//! The emitted C, compiled with `cc -std=c99 -Wall -Wextra -Werror -O2` and run on 10 000
//! random points per function, agrees with `RationalFn::eval`.
//!
//! Tolerance: bit-for-bit on x86-64, where nothing may legally differ: both sides evaluate the
//! same expression tree (same Horner grouping, same scaling expression), each constant is
//! printed with the shortest digits that read back to the same double, SSE2 arithmetic rounds
//! every operation once, and `-std=c99` turns off GCC's contraction of `a + t*b` into fused
//! multiply-adds. Elsewhere a 1e-12 relative difference is allowed: on targets where the C
//! compiler contracts by default (aarch64 in GNU mode) each Horner step may round once less,
//! a difference of a few ulps times the evaluation's condition number.

mod common;

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::Command;

use common::{families, Rng, BOUND};
use klaraptor_fitting::{
    fit, fit_degrees, DegreeBounds, Domain, FitOptions, FitProblem, RationalFn, Variable,
};

const POINTS: usize = 10_000;

/// Functions covering the emission's cases: rational in one, two and three variables, noisy
/// (unround coefficients) and exact, a polynomial, a constant, dense and sparse Horner trees.
fn functions() -> Vec<(RationalFn, Vec<Vec<f64>>)> {
    let mut out = Vec::new();
    for (i, fam) in families().into_iter().enumerate() {
        for noise in [0.0, 0.03] {
            let problem = fam.problem(noise, &mut Rng(100 + i as u64));
            let f = fit(&problem, &FitOptions::uniform(fam.vars.len(), 3, 3)).expect("fit");
            out.push((f, fam.shapes.clone()));
        }
    }
    // A dense model (every coefficient non-zero, 18 + 4 terms).
    let fam = &families()[1];
    let problem = fam.problem(0.03, &mut Rng(7));
    let dense = fit_degrees(
        &problem,
        &DegreeBounds(vec![2, 2, 1]),
        &DegreeBounds(vec![0, 1, 1]),
        &FitOptions::uniform(3, 3, 3),
    )
    .expect("dense fit");
    out.push((dense, fam.shapes.clone()));
    // A constant (every variable unused).
    let constant = FitProblem {
        vars: vec![Variable::data("N"), Variable::block("bx")],
        points: vec![vec![32.0, 1.0], vec![64.0, 2.0], vec![128.0, 4.0]],
        values: vec![3.25, 3.25, 3.25],
        domain: Domain::Points(vec![]),
    };
    let c = fit(&constant, &FitOptions::uniform(2, 3, 3)).expect("constant fit");
    assert!(c.is_constant());
    out.push((c, vec![vec![1.0], vec![2.0]]));
    out
}

fn random_points(f: &RationalFn, shapes: &[Vec<f64>], rng: &mut Rng) -> Vec<Vec<f64>> {
    (0..POINTS)
        .map(|_| {
            let mut p = vec![rng.range(1.0, BOUND)];
            let s = &shapes[(rng.uniform() * shapes.len() as f64) as usize];
            p.extend_from_slice(&s[..f.vars.len() - 1]);
            p
        })
        .collect()
}

fn workdir() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("c_emission");
    std::fs::create_dir_all(&dir).expect("temporary directory");
    dir
}

#[test]
fn emitted_c_agrees_with_eval() {
    let fns = functions();
    let mut rng = Rng(2024);
    let mut source = String::from("#include <stdio.h>\n#include <stdlib.h>\n\n");
    let mut inputs = String::new();
    let mut expected = Vec::new();
    for (k, (f, shapes)) in fns.iter().enumerate() {
        source.push_str(&f.to_c(&format!("metric_{k}")).expect("to_c"));
        source.push('\n');
        for p in random_points(f, shapes, &mut rng) {
            let _ = write!(inputs, "{k}");
            for x in &p {
                let _ = write!(inputs, " {x:?}");
            }
            inputs.push('\n');
            expected.push(f.eval(&p));
        }
    }
    // main: read "k x0 x1 …" per line, print metric_k(x…) with 17 significant digits.
    source.push_str("int main(void)\n{\n    int k;\n    double x[4];\n");
    source.push_str(
        "    while (scanf(\"%d\", &k) == 1) {\n        double r = 0.0;\n        switch (k) {\n",
    );
    for (k, (f, _)) in fns.iter().enumerate() {
        let n = f.vars.len();
        let args: Vec<String> = (0..n).map(|i| format!("x[{i}]")).collect();
        let _ =
            writeln!(
            source,
            "        case {k}: if (scanf(\"{}\", {}) != {n}) return 1; r = metric_{k}({}); break;",
            vec!["%lf"; n].join(" "),
            (0..n).map(|i| format!("&x[{i}]")).collect::<Vec<_>>().join(", "),
            args.join(", ")
        );
    }
    source.push_str("        default: return 2;\n        }\n        printf(\"%.17g\\n\", r);\n    }\n    return 0;\n}\n");

    let dir = workdir();
    let c_path = dir.join("metrics.c");
    let exe = dir.join("metrics");
    let in_path = dir.join("points.txt");
    std::fs::write(&c_path, &source).unwrap();
    std::fs::write(&in_path, &inputs).unwrap();
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = Command::new(&cc)
        .args(["-std=c99", "-Wall", "-Wextra", "-Werror", "-O2", "-o"])
        .arg(&exe)
        .arg(&c_path)
        .output()
        .unwrap_or_else(|e| panic!("cannot run `{cc}`: {e}"));
    assert!(
        out.status.success(),
        "{cc} failed on {}:\n{}",
        c_path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.stderr.is_empty(),
        "warnings: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = Command::new(&exe)
        .stdin(std::fs::File::open(&in_path).unwrap())
        .output()
        .expect("run the compiled metrics");
    assert!(run.status.success(), "harness exited with {:?}", run.status);
    let got: Vec<f64> = String::from_utf8(run.stdout)
        .unwrap()
        .lines()
        .map(|l| l.parse().expect("a number"))
        .collect();
    assert_eq!(got.len(), expected.len());
    let mut identical = 0;
    let mut worst = 0.0_f64;
    for (g, e) in got.iter().zip(&expected) {
        assert!(e.is_finite(), "Rust evaluation is not finite");
        if g.to_bits() == e.to_bits() {
            identical += 1;
        }
        worst = worst.max((g - e).abs() / e.abs().max(f64::MIN_POSITIVE));
    }
    eprintln!(
        "{} functions × {POINTS} points: {identical} of {} bit-identical, worst relative difference {worst:e}",
        fns.len(),
        expected.len()
    );
    if cfg!(target_arch = "x86_64") {
        assert_eq!(
            identical,
            expected.len(),
            "worst relative difference {worst:e}"
        );
    } else {
        assert!(worst <= 1e-12, "worst relative difference {worst:e}");
    }
}

#[test]
fn emitted_c_reads_like_code() {
    let fam = &families()[2];
    let f = fit(
        &fam.problem(0.0, &mut Rng(1)),
        &FitOptions::uniform(3, 3, 3),
    )
    .unwrap();
    let c = f.to_c("ipw").unwrap();
    for needle in [
        "static double ipw(double N, double bx, double by)",
        "const double t_N = (N - 272.0) * ",
        "held-out relative error",
        "condition number",
        "rank 7",
        "return num / den;",
    ] {
        assert!(c.contains(needle), "missing `{needle}` in:\n{c}");
    }
    assert!(f.to_c("2bad").is_err());
    assert!(f.to_c("double").is_err());
}
