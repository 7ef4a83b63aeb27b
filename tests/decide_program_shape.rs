//! The link's decision (program/src/decide.rs) on profiles that name the program's own block
//! at every profiled size (issue 38): two entries of the idioms suite captured on an NVIDIA
//! H200 on 2026-11-28 with `KLARAPTOR_PROFILE_PROGRAM=1`
//! (tests/fixtures/program-shape-h200-2026-11-28/). The specs are the samples' own
//! annotations, read from their sources as the driver reads them; every figure the decision
//! reports is recomputed here from the entries' samples.
//!
//! A kernel whose blocks wait at barriers (samples/idioms/nbody_tiled): the evidence
//! overrules the model, and the profiled best, not the program's own shape, chooses. A kernel
//! whose threads follow the data (samples/idioms/rowscale_misaligned): the program's own
//! shape was measured about 1.15 times faster than the model's choices, which is below the
//! general factor, so the model keeps the choice; under the smaller factor the same evidence
//! keeps the program's launch.
//!
//! The decision choosing the program's own shape on a profile whose label the test adds (the
//! grid-stride SAXPY's real times) is `held_out_evidence_keeps_the_programs_own_shape` in
//! tests/decide_idioms.rs.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use klaraptor_profiler::record::Entry;
use klaraptor_program::decide::{self, ChosenBy, DecisionRule, HeldOut};
use klaraptor_program::rational;
use klaraptor_spec::annotations;
use klaraptor_spec::link::LinkSpec;

const DIR: &str = "tests/fixtures/program-shape-h200-2026-11-28";

fn entry(file: &str) -> Entry {
    common::fixture_entry(&format!("{DIR}/{file}"))
}

/// samples/idioms/<program>/<program>.cu.
fn source(program: &str) -> (std::path::PathBuf, String) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("samples/idioms")
        .join(program)
        .join(format!("{program}.cu"));
    let text = std::fs::read_to_string(&path).unwrap();
    (path, text)
}

/// The link spec of `e`'s kernel as the annotation in samples/idioms/<program> gives it
/// (data labels, dim, grid formulas, block constraints, shared memory), read from the source
/// with the driver's scanner; the names and code hash are the entry's.
fn spec(e: &Entry, program: &str) -> LinkSpec {
    let (path, text) = source(program);
    let scanned = annotations::scan(&path, &text).unwrap();
    let a = scanned
        .annotations
        .iter()
        .find(|a| a.kernel == e.kernel.name)
        .unwrap_or_else(|| panic!("no annotation of {} in {}", e.kernel.name, path.display()));
    let mut s = common::idiom_spec(e, "", &[]);
    s.data = a.data.iter().map(|d| d.label.clone()).collect();
    s.dim = a.dim;
    s.grid = a.grid.iter().map(|g| g.to_string()).collect();
    s.block = a.constraints.iter().map(|c| c.to_string()).collect();
    s.shmem = a.shmem.as_ref().map(|x| x.to_string());
    assert_eq!(
        s.data, e.kernel.data,
        "the annotation's data labels are the entry's"
    );
    assert_eq!(s.dim, e.kernel.dim);
    s
}

/// The profile's measured times at `sizes`, per block (several samples of one block
/// averaged, as the check does).
fn times(e: &Entry, sizes: &[i64]) -> BTreeMap<[u32; 3], f64> {
    let mut at: BTreeMap<[u32; 3], Vec<f64>> = BTreeMap::new();
    for s in e
        .samples
        .iter()
        .filter(|s| s.sizes == sizes && s.error.is_none())
    {
        if let Some(c) = &s.counters {
            if c.time_ms.is_finite() && c.time_ms > 0.0 {
                at.entry(s.block).or_default().push(c.time_ms);
            }
        }
    }
    at.into_iter()
        .map(|(b, v)| (b, v.iter().sum::<f64>() / v.len() as f64))
        .collect()
}

/// The fastest block at `sizes` and its time.
fn fastest(e: &Entry, sizes: &[i64]) -> ([u32; 3], f64) {
    times(e, sizes)
        .into_iter()
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .expect("a measured sample at the size")
}

/// `block`'s score at `sizes`: the fastest time there over `block`'s.
fn score(e: &Entry, sizes: &[i64], block: [u32; 3]) -> f64 {
    let t = times(e, sizes)[&block];
    fastest(e, sizes).1 / t
}

fn geomean(v: &[f64]) -> f64 {
    (v.iter().map(|x| x.ln()).sum::<f64>() / v.len() as f64).exp()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-12 * a.abs().max(b.abs())
}

/// The profiled sizes of `e`'s samples.
fn sizes(e: &Entry) -> BTreeSet<Vec<i64>> {
    e.samples.iter().map(|s| s.sizes.clone()).collect()
}

/// Every fold's program, model and profiled-best figures are the profile's own: the block
/// the entry names at the held-out size, the times measured there, the fastest shape there.
/// Returns the recomputed (model, program) score of each fold.
fn check_folds(e: &Entry, folds: &[HeldOut]) -> Vec<(f64, f64)> {
    folds
        .iter()
        .map(|f| {
            let (best, best_ms) = fastest(e, &f.sizes);
            assert_eq!((f.best, f.best_ms), (best, best_ms), "{:?}", f.sizes);
            let own = e
                .program_block(&f.sizes)
                .expect("the program's block there");
            assert_eq!(f.program, Some(own), "{:?}", f.sizes);
            assert_eq!(
                f.program_ms,
                Some(times(e, &f.sizes)[&own]),
                "{:?}",
                f.sizes
            );
            let o = score(e, &f.sizes, own);
            assert!(close(f.program_ratio().unwrap(), o), "{:?}", f.sizes);
            let model = f.model.expect("the model's held-out choice");
            assert_eq!(f.model_ms, Some(times(e, &f.sizes)[&model]));
            let m = score(e, &f.sizes, model);
            assert!(close(f.model_ratio().unwrap(), m), "{:?}", f.sizes);
            let profiled = f.profiled.expect("the profiled best of the smaller sizes");
            assert_eq!(f.profiled_ms, Some(times(e, &f.sizes)[&profiled]));
            // The fit saw only the smaller sizes.
            assert!(f
                .fitted_on
                .iter()
                .all(|z| z.iter().product::<i64>() < f.sizes.iter().product::<i64>()));
            assert!(f.note.is_empty(), "{:?}: {}", f.sizes, f.note);
            (m, o)
        })
        .collect()
}

/// Both entries were captured with the program's block named: the `[[program]]` tables
/// parse into `Entry::program`, name one block at each of the entry's profiled sizes (and
/// only those), that block is the one the sample program launches by default, and the
/// profile timed it at every size.
#[test]
fn each_entry_names_the_programs_block_at_every_profiled_size() {
    for (file, program, block, default) in [
        (
            "nbody_tiled.toml",
            "nbody_tiled",
            [256, 1, 1],
            "kl::block_shape(dim3(256))",
        ),
        (
            "rowscale_misaligned.toml",
            "rowscale_misaligned",
            [32, 8, 1],
            "kl::block_shape(dim3(32, 8))",
        ),
    ] {
        let e = entry(file);
        assert_eq!(e.device.name, "NVIDIA H200");
        assert_eq!(e.captured_at, "2026-11-28T23:45:14Z");
        assert_eq!(e.driver_version, "580.159.04");
        assert_eq!(e.cuda_version, "13.0");
        assert_eq!(e.kernel.name, program);
        // The block the program launches when nothing overrides it.
        assert!(source(program).1.contains(default), "{program}: {default}");
        let named: BTreeSet<Vec<i64>> = e.program.iter().map(|p| p.sizes.clone()).collect();
        assert_eq!(named.len(), e.program.len(), "{file}: one block a size");
        assert_eq!(
            named,
            sizes(&e),
            "{file}: the program's block at every size"
        );
        let planned: BTreeSet<Vec<i64>> = e.plan.sizes.iter().cloned().collect();
        assert_eq!(named, planned, "{file}");
        for z in &named {
            assert_eq!(e.program_block(z), Some(block), "{file} at {z:?}");
            assert!(
                times(&e, z).contains_key(&block),
                "{file}: the program's block was timed at {z:?}"
            );
        }
    }
}

/// samples/idioms/nbody_tiled (blocks that wait at barriers, threads that follow the data):
/// at the one held-out size (N = 4096, fitted on 1024 … 3072) the model's choice was measured
/// at 0.875 of the fastest shape, the profiled best of the smaller sizes at 1.000 and the
/// program's own 256 threads at 0.979. The barrier factor (1.1) applies: the evidence
/// overrules the model. The program's own shape beat the model's choice by more than the
/// factor, but it is slower than the profiled best, so the profiled best chooses.
#[test]
fn the_evidence_overrules_the_model_and_the_profiled_best_chooses_over_the_programs_shape() {
    let e = entry("nbody_tiled.toml");
    let s = spec(&e, "nbody_tiled");
    assert_eq!(s.grid, ["ceil(N, bx)"]);
    assert!(s.block.is_empty());
    assert!(s.shmem.is_some());
    assert!(decide::waits_at_barriers(&e));
    let excess = klaraptor_program::metrics::coverage_excess(&s, &e).unwrap();
    assert!(
        excess <= decide::LOOP_EXCESS,
        "{excess}: the threads follow the data"
    );

    let p = rational::build(&s, &e, Path::new("")).unwrap();
    let d = p.decision.as_ref().expect("a decision in the manifest");
    assert_ne!(d.chosen_by, ChosenBy::Model, "{}", d.why);
    assert_eq!(d.chosen_by, ChosenBy::ProfiledBest, "{}", d.why);
    assert!(d.barriers);
    assert_eq!(d.factor, decide::LOOP_FACTOR);
    assert!(p.profile_chooses() && !p.program_chooses());

    // The folds are the check's, and their figures the profile's.
    assert_eq!(
        d.held_out,
        decide::held_out(&s, &e, &DecisionRule::default())
    );
    assert_eq!(d.held_out.len(), 1, "{:?}", d.held_out);
    let f = &d.held_out[0];
    assert_eq!(f.sizes, [4096]);
    assert_eq!(f.fitted_on, [vec![1024], vec![2048], vec![3072]]);
    let scores = check_folds(&e, &d.held_out);
    // The profiled best is the fastest shape at the nearest smaller size.
    assert_eq!(f.profiled, Some(fastest(&e, &[3072]).0));
    assert_eq!(f.best, [128, 1, 1]);
    assert_eq!(f.program, Some([256, 1, 1]));
    assert_ne!(
        f.program,
        Some(f.best),
        "the program's block is not the fastest"
    );

    // The scores the decision reports are those recomputed from the samples.
    let m = geomean(&scores.iter().map(|x| x.0).collect::<Vec<_>>());
    let o = geomean(&scores.iter().map(|x| x.1).collect::<Vec<_>>());
    let pb = score(&e, &f.sizes, f.profiled.unwrap());
    let (dm, dp, dov, dmv) = (
        d.model_score.unwrap(),
        d.profiled_score.unwrap(),
        d.program_score
            .expect("the program's own shape's score is reported"),
        d.model_score_vs_program.unwrap(),
    );
    assert!(close(dm, m) && close(dmv, m), "{dm} {dmv} {m}");
    assert!(close(dov, o), "{dov} {o}");
    assert!(close(dp, pb), "{dp} {pb}");
    assert_eq!(
        [dm, dp, dov].map(|x| format!("{x:.3}")),
        ["0.875", "1.000", "0.979"]
    );
    // The profiled best beat the model by the barrier factor, not by the general one.
    assert!(dp >= decide::LOOP_FACTOR * dm && dp < decide::DEMOTE_FACTOR * dm);
    // The program's own shape beat the model by the factor too, but not the profiled best.
    assert!(dov >= d.factor * dmv, "{dov} {dmv}");
    assert!(dov < dp, "{dov} {dp}");
    assert!(
        d.why.contains("so the model mispredicts this kernel")
            && d.why.contains("its blocks wait at barriers")
            && d.why.contains(
                "the program's own shape there (1 size(s)) was measured at 0.979 of the fastest \
                 against the model's 0.875, but slower than the profiled best"
            ),
        "{}",
        d.why
    );
    let lines = decide::lines(Some(d));
    assert!(
        lines[0].starts_with(
            "chosen by: profiled best (held out: model 0.875, profiled best 1.000, program's own \
             0.979 (model 0.875 beside it) of the fastest, over 1 size(s))"
        ),
        "{lines:?}"
    );
    assert!(
        lines[2].contains(
            "fastest 128x1x1; model 32x1x1 at 0.875, profiled best 128x1x1 at 1.000, program's \
             own 256x1x1 at 0.979"
        ),
        "{lines:?}"
    );
    // The choice at the held-out size is the fastest shape there.
    assert_eq!(p.rank(&f.sizes).unwrap()[0].block, f.best);

    // Without the barrier evidence (the general factor) the same folds keep the model: the
    // barriers are what make the evidence count.
    let rule = DecisionRule::default();
    let general = rule.apply_for(d.held_out.clone(), Some(excess), false);
    assert_eq!(general.chosen_by, ChosenBy::Model, "{}", general.why);
    assert_eq!(general.program_score, d.program_score);
    assert_eq!(
        rule.apply_for(d.held_out.clone(), Some(excess), true)
            .chosen_by,
        ChosenBy::ProfiledBest
    );
}

/// samples/idioms/rowscale_misaligned (threads that follow the data, no barriers): over the
/// four held-out sizes the program's own 32 × 8 blocks were measured at 0.997 of the fastest
/// shape against the model's 0.866, about 1.15 times faster: below the general factor (2),
/// so the model keeps the choice. The same folds under the smaller factor (1.1) keep the
/// program's launch: the rule works the other way as soon as the factor is met.
#[test]
fn the_model_keeps_the_choice_when_the_programs_shape_is_not_the_factor_faster() {
    let e = entry("rowscale_misaligned.toml");
    let s = spec(&e, "rowscale_misaligned");
    assert_eq!(s.grid, ["ceil(C, bx)", "ceil(R, by)"]);
    assert!(s.block.is_empty() && s.shmem.is_none());
    assert!(!decide::waits_at_barriers(&e));
    let excess = klaraptor_program::metrics::coverage_excess(&s, &e).unwrap();
    assert!(excess <= decide::LOOP_EXCESS, "{excess}");

    let p = rational::build(&s, &e, Path::new("")).unwrap();
    let d = p.decision.as_ref().expect("a decision in the manifest");
    assert_eq!(d.chosen_by, ChosenBy::Model, "{}", d.why);
    assert!(!d.barriers);
    assert_eq!(d.factor, decide::DEMOTE_FACTOR);
    assert!(!p.profile_chooses() && !p.program_chooses());

    assert_eq!(
        d.held_out,
        decide::held_out(&s, &e, &DecisionRule::default())
    );
    let held: Vec<&[i64]> = d.held_out.iter().map(|f| f.sizes.as_slice()).collect();
    assert_eq!(
        held,
        [&[128, 128][..], &[200, 197], &[256, 67], &[256, 253]],
        "the sizes with at least 3 of less work below them"
    );
    let scores = check_folds(&e, &d.held_out);
    let m = geomean(&scores.iter().map(|x| x.0).collect::<Vec<_>>());
    let o = geomean(&scores.iter().map(|x| x.1).collect::<Vec<_>>());
    let (dm, dov, dmv) = (
        d.model_score.unwrap(),
        d.program_score
            .expect("the program's own shape's score is reported"),
        d.model_score_vs_program.unwrap(),
    );
    assert!(close(dm, m) && close(dmv, m), "{dm} {dmv} {m}");
    assert!(close(dov, o), "{dov} {o}");
    assert_eq!([dmv, dov].map(|x| format!("{x:.3}")), ["0.866", "0.997"]);
    // About 1.15 times faster: the smaller factor's evidence, not the general one's.
    let ratio = dov / dmv;
    assert_eq!(format!("{ratio:.2}"), "1.15");
    assert!(
        (decide::LOOP_FACTOR..decide::DEMOTE_FACTOR).contains(&ratio),
        "{ratio}"
    );
    assert!(
        d.why.contains(
            "the program's own shape there (4 size(s)) was measured at 0.997 of the fastest \
             against the model's 0.866: not 2.0 times faster"
        ),
        "{}",
        d.why
    );
    assert!(
        decide::lines(Some(d))[0].starts_with("chosen by: model (held out: model 0.866"),
        "{:?}",
        decide::lines(Some(d))
    );

    // The same real folds under the smaller factor: the program's own shape wins. (It is
    // also the profiled best at every held-out size here, so it is no slower than that.)
    for f in &d.held_out {
        assert_eq!(f.profiled, f.program, "{:?}", f.sizes);
    }
    let small = DecisionRule {
        factor: decide::LOOP_FACTOR,
        ..DecisionRule::default()
    };
    let k = small.apply_with(d.held_out.clone(), Some(excess));
    assert_eq!(k.chosen_by, ChosenBy::Program, "{}", k.why);
    assert_eq!(k.factor, decide::LOOP_FACTOR);
    assert_eq!(
        (k.program_score, k.model_score_vs_program),
        (d.program_score, d.model_score_vs_program)
    );
    assert!(
        k.why.contains("so the program keeps its launch"),
        "{}",
        k.why
    );
    // The rule as the link applies it to a kernel that waits at barriers: the same.
    assert_eq!(
        DecisionRule::default()
            .apply_for(d.held_out.clone(), Some(excess), true)
            .chosen_by,
        ChosenBy::Program
    );
    // A factor just above the measured ratio keeps the model.
    let above = DecisionRule {
        factor: ratio * 1.001,
        ..DecisionRule::default()
    };
    assert_eq!(
        above.apply_with(d.held_out.clone(), Some(excess)).chosen_by,
        ChosenBy::Model
    );
}
