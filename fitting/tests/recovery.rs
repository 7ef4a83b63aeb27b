//! Exact recovery from noiseless data, and extrapolation from noisy data, for the families of
//! the acceptance spec.

mod common;

use common::{families, rel, Rng, FAR_SIZES, SIZES};
use klaraptor_fitting::{fit, FitOptions};

fn options(nvars: usize) -> FitOptions {
    FitOptions::uniform(nvars, 3, 3)
}

#[test]
fn noiseless_families_are_recovered_exactly() {
    for fam in families() {
        let problem = fam.problem(0.0, &mut Rng(1));
        let f = fit(&problem, &options(fam.vars.len())).unwrap_or_else(|e| panic!("{}: {e}", fam.name));
        let d = &f.diagnostics;
        eprintln!("{}: num {:?} den {:?} {:?}", fam.name, d.num_degrees, d.den_degrees, d.heldout);
        assert_eq!(d.num_degrees, fam.num, "{}: numerator degrees", fam.name);
        assert_eq!(d.den_degrees, fam.den, "{}: denominator degrees", fam.name);
        let mut worst = 0.0_f64;
        for p in fam.points(&SIZES).iter().chain(&fam.points(&FAR_SIZES)) {
            worst = worst.max(rel(f.eval(p), (fam.f)(p)));
        }
        assert!(worst < 1e-9, "{}: worst relative error {worst:e}", fam.name);
    }
}

#[test]
fn noisy_families_extrapolate_to_8192() {
    for fam in families() {
        for seed in 1..=10 {
            let problem = fam.problem(0.03, &mut Rng(seed));
            let f = fit(&problem, &options(fam.vars.len())).unwrap_or_else(|e| panic!("{}: {e}", fam.name));
            let d = &f.diagnostics;
            let mut worst = 0.0_f64;
            for p in fam.points(&[8192.0]) {
                worst = worst.max(rel(f.eval(&p), (fam.f)(&p)));
            }
            eprintln!(
                "{} seed {seed}: num {:?} den {:?} worst at 8192: {worst:.4}",
                fam.name, d.num_degrees, d.den_degrees
            );
            assert!(worst < 0.10, "{} (seed {seed}): relative error {worst:.3} at N = 8192", fam.name);
        }
    }
}
