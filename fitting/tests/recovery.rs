//! Exact recovery from noiseless data, and extrapolation from noisy data, for the families of
//! the acceptance spec.

mod common;

use common::{families, rel, Rng, FAR_SIZES, SIZES};
use klaraptor_fitting::{fit, FitOptions, Screening};

fn options(nvars: usize) -> FitOptions {
    FitOptions::uniform(nvars, 3, 3)
}

#[test]
fn noiseless_families_are_recovered_exactly() {
    for fam in families() {
        let problem = fam.problem(0.0, &mut Rng(1));
        let f =
            fit(&problem, &options(fam.vars.len())).unwrap_or_else(|e| panic!("{}: {e}", fam.name));
        let d = &f.diagnostics;
        eprintln!(
            "{}: num {:?} den {:?} {:?}",
            fam.name, d.num_degrees, d.den_degrees, d.heldout
        );
        assert_eq!(d.num_degrees, fam.num, "{}: numerator degrees", fam.name);
        assert_eq!(d.den_degrees, fam.den, "{}: denominator degrees", fam.name);
        // A polynomial is exactly that: q = 1, and the C has no division.
        if fam.den.iter().all(|&d| d == 0) {
            assert!(f.is_polynomial() && f.to_c("m").unwrap().contains("return num;"));
        }
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
        let mut true_degrees = 0;
        for seed in 1..=10 {
            let problem = fam.problem(0.03, &mut Rng(seed));
            let f = fit(&problem, &options(fam.vars.len()))
                .unwrap_or_else(|e| panic!("{}: {e}", fam.name));
            let d = &f.diagnostics;
            let mut worst = 0.0_f64;
            for p in fam.points(&[8192.0]) {
                worst = worst.max(rel(f.eval(&p), (fam.f)(&p)));
            }
            eprintln!(
                "{} seed {seed}: num {:?} den {:?} worst at 8192: {worst:.4}",
                fam.name, d.num_degrees, d.den_degrees
            );
            assert!(
                worst < 0.10,
                "{} (seed {seed}): relative error {worst:.3} at N = 8192",
                fam.name
            );
            if d.num_degrees == fam.num && d.den_degrees == fam.den {
                true_degrees += 1;
            }
            let h = d.heldout.as_ref().expect("held-out errors");
            assert!(h.extrapolation_points > 0 && h.median_rel_error < 0.05);
        }
        // Selection is not only accurate but finds the structure: "simplest within noise".
        assert!(
            true_degrees >= 8,
            "{}: true degrees in {true_degrees} of 10 seeds",
            fam.name
        );
    }
}

/// The fast screening chooses what an SVD (with reweighting) of every candidate chooses.
#[test]
fn screening_agrees_with_svd_of_every_candidate() {
    for fam in families().into_iter().filter(|f| f.vars.len() == 2) {
        for noise in [0.0, 0.03] {
            let problem = fam.problem(noise, &mut Rng(3));
            let mut options = options(2);
            let fast = fit(&problem, &options).unwrap();
            options.screening = Screening::Svd;
            let slow = fit(&problem, &options).unwrap();
            assert_eq!(
                (&fast.diagnostics.num_degrees, &fast.diagnostics.den_degrees),
                (&slow.diagnostics.num_degrees, &slow.diagnostics.den_degrees),
                "{} with noise {noise}",
                fam.name
            );
        }
    }
}

#[test]
fn diagnostics_describe_the_fit() {
    let fam = &families()[2];
    let f = fit(&fam.problem(0.03, &mut Rng(9)), &options(3)).unwrap();
    let d = &f.diagnostics;
    assert_eq!(d.points, fam.points(&SIZES).len());
    assert_eq!(d.rank, d.unknowns);
    assert!(d.condition_number >= 1.0 && d.condition_number < 1e8);
    let h = d.heldout.as_ref().unwrap();
    assert!(h.points > h.extrapolation_points && h.extrapolation_points > 0);
    assert!(h.median_rel_error <= h.max_rel_error);
    assert!(d.noise_estimate.unwrap() > 0.005 && d.noise_estimate.unwrap() < 0.06);
    let s = d.search.as_ref().unwrap();
    assert!(s.candidates > 100 && s.refit >= 1);
    assert!(d.refit_on_all_points);
}
