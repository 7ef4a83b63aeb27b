//! The link's decision between the model and the profiled best (program/src/decide.rs), on
//! committed PolyBench profiles (NVIDIA H200), without a GPU.

use std::path::{Path, PathBuf};

use klaraptor_profiler::record::Entry;
use klaraptor_program::decide::{self, ChosenBy, DecisionRule};
use klaraptor_program::rational;
use klaraptor_spec::link::LinkSpec;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn entry(file: &str) -> Entry {
    let path = repo()
        .join("samples/klaraptor-profiles/v1/nvidia-h200-2803d38c")
        .join(file);
    toml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn spec(e: &Entry, grid: &[&str]) -> LinkSpec {
    LinkSpec {
        shmem: None,
        name: e.kernel.name.clone(),
        mangled: e.kernel.mangled.clone(),
        data: e.kernel.data.clone(),
        dim: e.kernel.dim,
        grid: grid.iter().map(|g| g.to_string()).collect(),
        block: vec![],
        profile_run: None,
        profile_sizes: vec![],
        code_hash: e.kernel.code_hash.clone(),
        annotated_at: String::new(),
        build_dir: PathBuf::new(),
    }
}

/// fdtd-2d's `hz` update: two folds (256 × 192 and 256 × 256, each fitted on the sizes of
/// less work).
fn fdtd_hz() -> (LinkSpec, Entry) {
    let e = entry("_Z7fdtd_hzPfPKfS1_ii-79ccaed1abee362d.toml");
    (spec(&e, &["ceil(NY, bx)", "ceil(NX, by)"]), e)
}

fn build(s: &LinkSpec, e: &Entry) -> rational::RationalProgram {
    rational::build(s, e, Path::new("")).unwrap()
}

#[test]
fn the_committed_profile_keeps_the_model_with_its_evidence() {
    let (s, e) = fdtd_hz();
    let p = build(&s, &e);
    let d = p.decision.as_ref().expect("a decision in the manifest");
    assert_eq!(d.chosen_by, ChosenBy::Model, "{}", d.why);
    let sizes: Vec<Vec<i64>> = d.held_out.iter().map(|f| f.sizes.clone()).collect();
    assert_eq!(sizes, [vec![256, 192], vec![256, 256]]);
    for f in &d.held_out {
        // Each fold was fitted on the sizes of less work only.
        assert!(f
            .fitted_on
            .iter()
            .all(|z| z[0] * z[1] < f.sizes[0] * f.sizes[1]));
        assert!(f.model_ratio().unwrap() > 0.0 && f.model_ratio().unwrap() <= 1.0);
        assert!(f.profiled_ratio().unwrap() > 0.0 && f.profiled_ratio().unwrap() <= 1.0);
    }
    assert!(d.model_score.is_some() && d.profiled_score.is_some());
    // The model chooses: the first of rank is the model's own first.
    let n = [3001, 5003];
    assert_eq!(
        p.rank(&n).unwrap()[0].block,
        p.model_rank(&n).unwrap()[0].block
    );
    // The decision survives the manifest.
    let back: rational::RationalProgram =
        serde_json::from_str(&serde_json::to_string(&p).unwrap()).unwrap();
    assert_eq!(back.decision, p.decision);
    // The inspect lines say who chooses, with the held-out figures.
    let lines = decide::lines(p.decision.as_ref());
    assert!(
        lines[0].starts_with("chosen by: model (held out: model "),
        "{lines:?}"
    );
    assert!(
        lines.iter().any(|l| l.contains("held out [256, 256]")),
        "{lines:?}"
    );
}

/// Makes every shape but `keep` 4 times slower at the sizes of at least `from_work`: the
/// profile then measures the profiled best of the smaller sizes as fast there and whatever
/// else the model chooses as slow, as a kernel the model mispredicts would be.
fn slow_but(e: &mut Entry, keep: &dyn Fn(&[i64]) -> [u32; 3], from_work: i64) {
    for smp in e.samples.iter_mut() {
        if smp.sizes.iter().product::<i64>() < from_work {
            continue;
        }
        let k = keep(&smp.sizes);
        if let Some(c) = smp.counters.as_mut() {
            if smp.block != k {
                c.time_ms *= 4.0;
                for r in c.time_runs_ms.iter_mut() {
                    *r *= 4.0;
                }
            }
        }
    }
}

#[test]
fn a_model_measured_slow_at_the_held_out_sizes_gives_the_choice_to_the_profile() {
    let (s, mut e) = fdtd_hz();
    let before = build(&s, &e);
    // The profiled best each fold compares with: that of the sizes below it.
    let pb_below = |sz: &[i64]| -> [u32; 3] {
        let w: i64 = sz.iter().product();
        let times: Vec<klaraptor_program::validate::ProfileSample> = e
            .samples
            .iter()
            .filter(|x| x.sizes.iter().product::<i64>() < w && x.error.is_none())
            .filter_map(|x| Some((x.sizes.clone(), x.block, x.counters.as_ref()?.time_ms)))
            .collect();
        klaraptor_program::validate::profiled_best(&times, sz)
            .unwrap()
            .block
    };
    // The shape kept fast at both held-out sizes: the profiled best below the first, which,
    // once every other shape is slow at the first, is also the fastest there, so the second
    // fold's profiled best (from the sizes below it, the first nearest) too.
    let kept = pb_below(&[256, 192]);
    let keep: Vec<(Vec<i64>, [u32; 3])> = [vec![256, 192], vec![256, 256]]
        .into_iter()
        .map(|z| (z, kept))
        .collect();
    for (z, b) in &keep {
        // The model's held-out choice is another shape (else the test shows nothing).
        let f = before.decision.as_ref().unwrap();
        let fold = f.held_out.iter().find(|x| &x.sizes == z).unwrap();
        assert_ne!(fold.model, Some(*b), "{z:?}: the model already picks {b:?}");
    }
    let keep_at = |sz: &[i64]| {
        keep.iter()
            .find(|(z, _)| z.as_slice() == sz)
            .map_or([0, 0, 0], |k| k.1)
    };
    slow_but(&mut e, &keep_at, 256 * 192);
    let p = build(&s, &e);
    let d = p.decision.as_ref().unwrap();
    assert_eq!(d.chosen_by, ChosenBy::ProfiledBest, "{}", d.why);
    assert!(
        d.profiled_score.unwrap() >= 2.0 * d.model_score.unwrap(),
        "{d:?}"
    );
    // rank (what validate's klaraptor method and the generated C's kl_select follow) puts the
    // profiled best first at every size, far beyond the profile too.
    for n in [[256, 256], [3001, 5003], [8192, 8192]] {
        let first = p.rank(&n).unwrap()[0].block;
        assert_eq!(Some(first), p.profiled_best(&n), "{n:?}");
    }
    assert!(decide::lines(p.decision.as_ref())[0].starts_with("chosen by: profiled best"));
    // The same folds under a rule that never demotes keep the model: the decision, not the
    // fit, moved the choice.
    let folds = decide::held_out(&s, &e, &DecisionRule::default());
    let never = DecisionRule {
        factor: f64::INFINITY,
        ..DecisionRule::default()
    };
    assert_eq!(never.apply(folds).chosen_by, ChosenBy::Model);
}

#[test]
fn the_generated_c_ranks_the_profiled_best_first_when_the_profile_chooses() {
    let (s, e) = fdtd_hz();
    let mut p = build(&s, &e);
    let model_c = p.to_c().unwrap();
    assert!(!model_c.contains("int j0 = 0;"));
    p.decision.as_mut().unwrap().chosen_by = ChosenBy::ProfiledBest;
    let c = p.to_c().unwrap();
    assert!(c.contains("chosen by: profiled best"), "the C says why");
    assert!(c.contains("if (kl_profiled_best(data, dev, pb) == 0)"));
    assert!(c.contains("for (int j = j0; j < k; j++)"));
    // Declared before kl_rank uses it, defined after.
    let decl = c.find("static int kl_profiled_best(const int64_t *data, const klaraptor_device *dev, uint32_t block[3]);").unwrap();
    assert!(decl < c.find("static int kl_rank(").unwrap());
    // And it compiles.
    let dir = tempfile::tempdir().unwrap();
    let files = p.write(dir.path()).unwrap();
    rational::compile(dir.path(), &files, false).unwrap();
}

#[test]
fn the_stability_check_is_seeded_and_reports_what_it_compared() {
    let (s, e) = fdtd_hz();
    let p = rational::build_model(&s, &e).unwrap();
    let a = decide::stability(&s, &e, &p, 7).unwrap();
    let b = decide::stability(&s, &e, &p, 7).unwrap();
    assert_eq!(a, b, "the same seed perturbs the same way");
    assert_eq!(a.replicas, decide::REPLICAS);
    assert_eq!(a.mlp.len(), decide::REPLICAS);
    assert_eq!(
        a.probes,
        [vec![256, 256], vec![1024, 1024], vec![4096, 4096]]
    );
    assert!(a.spread > 0.0 && a.spread < 0.5, "{}", a.spread);
    assert_eq!(a.stable, a.worst_loss <= decide::STABLE_WITHIN);
    // Two builds of the same inputs: the same decision, byte for byte.
    let x = serde_json::to_string(&build(&s, &e)).unwrap();
    let y = serde_json::to_string(&build(&s, &e)).unwrap();
    assert_eq!(x, y);
}

#[test]
fn a_calibration_on_a_knife_edge_is_reported_unstable() {
    // gemver's `w` (committed H200 profile): the errors of the calibrations with 4 and 8
    // requests in flight are nearly equal, so perturbing the times by their own spread
    // (1.5 %) flips the calibration, and the choice with it by more than 3 % in predicted
    // time. The check reports it and uses the calibration the copies agree with best.
    let e = entry("_Z8gemver_wPKfS0_Pffi-ffb03f6b6e8aa022.toml");
    let s = spec(&e, &["ceil(N, bx)"]);
    let model = rational::build_model(&s, &e).unwrap();
    let seed = decide::seed_of(&s.mangled, &e.captured_at);
    let st = decide::stability(&s, &e, &model, seed).unwrap();
    assert!(!st.stable, "{st:?}");
    assert!(st.worst_loss > decide::STABLE_WITHIN, "{st:?}");
    assert!(st.mlp.iter().any(|m| *m != model.time_fit.mlp), "{st:?}");
    let agreed = st
        .agreed_mlp
        .expect("a calibration the copies agree with best");
    let p = build(&s, &e);
    let d = p.decision.as_ref().unwrap();
    assert!(d.summary().contains("UNSTABLE"), "{}", d.summary());
    assert_eq!(d.stability.as_ref(), Some(&st));
    assert_eq!(p.time_fit.mlp, agreed, "the agreed calibration is used");
}
