//! A fitted function survives JSON (what the driver stores next to the profile database).

mod common;

use common::{families, Rng, FAR_SIZES};
use klaraptor_fitting::{fit, FitOptions, RationalFn};

#[test]
fn json_round_trip_is_exact() {
    for fam in families() {
        let f = fit(
            &fam.problem(0.03, &mut Rng(5)),
            &FitOptions::uniform(fam.vars.len(), 3, 3),
        )
        .unwrap();
        let json = serde_json::to_string_pretty(&f).unwrap();
        let back: RationalFn = serde_json::from_str(&json).unwrap();
        assert_eq!(back, f, "{}", fam.name);
        for p in fam.points(&FAR_SIZES) {
            assert_eq!(back.eval(&p).to_bits(), f.eval(&p).to_bits());
        }
        assert_eq!(back.to_c("m").unwrap(), f.to_c("m").unwrap());
    }
}

#[test]
fn malformed_json_is_rejected() {
    let fam = &families()[0];
    let f = fit(
        &fam.problem(0.0, &mut Rng(5)),
        &FitOptions::uniform(2, 3, 3),
    )
    .unwrap();
    let mut value: serde_json::Value = serde_json::to_value(&f).unwrap();
    // Drop a numerator coefficient: the count no longer matches the degrees.
    value["num"]["coeffs"].as_array_mut().unwrap().pop();
    let err = serde_json::from_value::<RationalFn>(value).unwrap_err();
    assert!(err.to_string().contains("coefficients"), "{err}");

    // One variable too many for the polynomials.
    let mut value: serde_json::Value = serde_json::to_value(&f).unwrap();
    let extra = value["vars"][0].clone();
    value["vars"].as_array_mut().unwrap().push(extra);
    let extra = value["scalings"][0].clone();
    value["scalings"].as_array_mut().unwrap().push(extra);
    let err = serde_json::from_value::<RationalFn>(value).unwrap_err();
    assert!(err.to_string().contains("variables"), "{err}");
}
