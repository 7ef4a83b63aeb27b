//! The study's outputs: the JSON records and summary, the markdown report.

use std::fmt::Write as _;

use crate::study::{self, Case, Method, Study};

pub use klaraptor_program::validate::{MethodSummary, Record};

/// A record of `accuracy-<gpu>-<date>.json` with its program's suite and half
/// (bench/accuracy/split.toml; null where the split does not name the program).
#[derive(Debug, Clone, serde::Serialize)]
pub struct SplitRecord {
    #[serde(flatten)]
    pub record: Record,
    pub suite: Option<String>,
    pub half: Option<String>,
}

/// The records of `accuracy-<gpu>-<date>.json`: one per case × method.
pub fn records(st: &Study) -> Vec<SplitRecord> {
    klaraptor_program::validate::records(&st.cases)
        .into_iter()
        .map(|record| {
            let of = st.split.of(&record.program);
            SplitRecord {
                suite: of.map(|(s, _)| s.to_string()),
                half: of.map(|(_, h)| h.to_string()),
                record,
            }
        })
        .collect()
}

/// The suite the study's cases belong to, as the report's title names it.
fn suite_title(st: &Study) -> String {
    let suites: std::collections::BTreeSet<&str> = st
        .cases
        .iter()
        .filter_map(|c| st.split.of(&c.program).map(|(s, _)| s))
        .collect();
    match suites.into_iter().collect::<Vec<_>>().as_slice() {
        ["polybench"] | [] => "PolyBench samples".into(),
        ["idioms"] => "idioms suite".into(),
        many => format!("{} suites", many.join(" and ")),
    }
}

/// The median of the cases' Spearman ρ (predicted against measured time over the shapes) and
/// how many cases have one; the upper median of an even count, as the summary has it.
fn median_spearman<'a>(cases: impl Iterator<Item = &'a Case>) -> Option<(f64, usize)> {
    let mut v: Vec<f64> = cases.filter_map(|c| c.spearman).collect();
    v.sort_by(|a, b| a.total_cmp(b));
    (!v.is_empty()).then(|| (v[v.len() / 2], v.len()))
}

/// Per half (tuning, test): each method's geometric mean and minimum over the half's cases,
/// the model's median Spearman ρ beside klaraptor's geometric mean, and the kernels whose
/// klaraptor geometric mean falls below 0.95 × their profiled_best's.
fn halves_section(st: &Study) -> String {
    let mut s = String::new();
    let half_of = |c: &Case| st.split.of(&c.program).map(|(_, h)| h);
    if !st.cases.iter().any(|c| half_of(c).is_some()) {
        return s;
    }
    let _ = writeln!(
        s,
        "\n### Tuning and test halves\n\nThe halves are fixed in bench/accuracy/split.toml: \
         model changes are justified on the tuning half; the test half is only measured.\n"
    );
    let _ = writeln!(
        s,
        "| half | method | cases | geometric mean | minimum | cases < 0.80 | median Spearman ρ |"
    );
    let _ = writeln!(s, "| --- | --- | ---: | ---: | ---: | ---: | ---: |");
    for half in ["tuning", "test"] {
        let cases: Vec<&Case> = st
            .cases
            .iter()
            .filter(|c| half_of(c) == Some(half))
            .collect();
        // ρ ranks the model's predictions: a column of klaraptor's row only
        let rho = median_spearman(cases.iter().copied())
            .map_or_else(|| "–".to_string(), |(m, n)| format!("{m:.2} ({n} cases)"));
        for m in Method::compared(&st.cases) {
            let r: Vec<f64> = cases.iter().filter_map(|c| c.ratio(m)).collect();
            if let Some(x) = study::stats(&r) {
                let _ = writeln!(
                    s,
                    "| {half} | {} | {} | {:.3} | {:.3} | {} | {} |",
                    m.as_str(),
                    x.n,
                    x.geomean,
                    x.min,
                    x.below_080,
                    if m == Method::Klaraptor {
                        rho.as_str()
                    } else {
                        ""
                    }
                );
            }
        }
    }
    // (program, mangled) -> the kernel's klaraptor and profiled_best ratios.
    type Ratios = (Vec<f64>, Vec<f64>);
    let mut kernels: std::collections::BTreeMap<(&str, &str), Ratios> =
        std::collections::BTreeMap::new();
    for c in &st.cases {
        if let (Some(k), Some(p)) = (c.ratio(Method::Klaraptor), c.ratio(Method::ProfiledBest)) {
            let e = kernels.entry((&c.program, &c.mangled)).or_default();
            e.0.push(k);
            e.1.push(p);
        }
    }
    let below: Vec<String> = kernels
        .iter()
        .filter_map(|((prog, mangled), (k, p))| {
            let (gk, gp) = (study::stats(k)?.geomean, study::stats(p)?.geomean);
            let kernel = st
                .cases
                .iter()
                .find(|c| c.mangled == *mangled)
                .map_or(*mangled, |c| c.kernel.as_str());
            (gk < 0.95 * gp).then(|| {
                format!(
                    "{kernel} ({prog}, {}: {gk:.3} vs {gp:.3})",
                    half_of_program(st, prog)
                )
            })
        })
        .collect();
    let _ = writeln!(
        s,
        "\nKernels whose klaraptor geometric mean is below 0.95 × their profiled_best's: {}.",
        if below.is_empty() {
            "none".to_string()
        } else {
            below.join("; ")
        }
    );
    s
}

/// Per-launch and whole-run side by side, over all cases and per half: each compared
/// method's geometric mean of the sweep's ratio (optimum / method, per launch) and of the
/// whole-run ratio (the best whole-run time of the measured methods / the method's:
/// [`klaraptor_program::validate::summaries`]), and the cases whose key drifts. Without any
/// whole-run measurement one sentence says so.
fn whole_run_section(st: &Study) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "\n### Per launch and whole run\n");
    if st.whole_run_jobs == 0 {
        let _ = writeln!(
            s,
            "No whole-run measurement: the choice phase has no `wholerun/` launch-times files \
             (run before device.sh measured whole runs, or with `WHOLE_RUN=0`); the records' \
             `whole_run_ms` and `drifts` are null and the whole-run columns are empty."
        );
        return s;
    }
    let _ = writeln!(
        s,
        "Whole run: the choice job's program run again with the method's shape launched at \
         every launch of the key (its own shape, the model's first choice with refinement off, \
         settled's and profiled_best's forced), every launch timed between CUDA events; the \
         whole-run ratio is the best mean time per launch over the whole run of the measured \
         methods / the method's (1 = the best of them, not the optimum; the ratio of the \
         whole-run times where the runs launch the key equally often: a harness that repeats \
         until a time is reached launches a faster shape more often). A key drifts when the mean of the last third of its \
         launches differs from the first third's by more than {:.0} %. Whole-run files in {} of \
         {} choice jobs.\n",
        100.0 * (klaraptor_program::validate::DRIFT - 1.0),
        st.whole_run_jobs,
        st.whole_run_jobs + st.no_whole_run_jobs
    );
    let _ = writeln!(
        s,
        "| cases | method | per launch: cases | geometric mean | whole run: cases | geometric \
         mean | minimum | drifting keys |"
    );
    let _ = writeln!(s, "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |");
    let half_of = |c: &Case| st.split.of(&c.program).map(|(_, h)| h);
    let mut groups: Vec<(&str, Vec<Case>)> = vec![("all", st.cases.clone())];
    for half in ["tuning", "test"] {
        let cases: Vec<Case> = st
            .cases
            .iter()
            .filter(|c| half_of(c) == Some(half))
            .cloned()
            .collect();
        if !cases.is_empty() {
            groups.push((half, cases));
        }
    }
    let f = |x: Option<f64>| x.map_or_else(|| "–".to_string(), |v| format!("{v:.3}"));
    for (name, cases) in &groups {
        for x in klaraptor_program::validate::summaries(cases) {
            let _ = writeln!(
                s,
                "| {name} | {} | {} | {} | {} | {} | {} | {} |",
                x.method,
                x.cases,
                f(x.geomean),
                x.whole_run_cases,
                f(x.whole_run_geomean),
                f(x.whole_run_min),
                x.drifting
            );
        }
    }
    let drifting = st.cases.iter().filter(|c| c.drifts == Some(true)).count();
    let measured = st.cases.iter().filter(|c| c.drifts.is_some()).count();
    let _ = writeln!(
        s,
        "\n{drifting} of the {measured} cases with a whole-run measurement drift (drifting keys \
         per method: those of its whole-run cases); on those the sweep's one launch per shape \
         does not stand for the run."
    );
    s.push_str(&accept_section(st));
    s
}

/// Issue 41's acceptance over whole runs, per key: settled ≤ 1.03 × min(the program's own
/// shape, the model's first choice) in kernel time per launch ([`Case::whole_run_accept`]),
/// saying which figure each case took: the isolated whole runs' (only the key's kernel changed
/// shape between the runs compared) where they timed all three shapes, else the all-at-once
/// runs' (like with like where the kernel alone changed shape in its job).
fn accept_section(st: &Study) -> String {
    use klaraptor_program::validate::WHOLE_RUN_ACCEPT;
    let mut s = String::new();
    let _ = writeln!(s, "\n#### Settled against min(own, model), per kernel\n");
    let _ = writeln!(
        s,
        "Issue 41's acceptance: settled ≤ {WHOLE_RUN_ACCEPT:.2} × min(the program's own shape, \
         the model's first choice) in the whole run's kernel time per launch of the key. In the \
         all-at-once whole runs above every kernel of the program takes the method's shape \
         together, so a kernel's time also moves with the caches its neighbours leave; the \
         isolated whole runs (device.sh's `WHOLE_RUN_ISOLATE`, `isolated/`) change only the \
         key's kernel, every other kernel at its settled shape. A case takes the isolated figure \
         where those runs timed all three shapes (`isolated`); else the all-at-once one, which \
         compares like with like where the key's kernel is the only one of its job whose shape \
         differs between the methods (`alone`), and otherwise does not (`all at once`). \
         Isolation plans in {} of {} choice jobs.\n",
        st.isolated_jobs,
        st.whole_run_jobs + st.no_whole_run_jobs
    );
    let acc: Vec<(&Case, f64, &str)> = st
        .cases
        .iter()
        .filter_map(|c| c.whole_run_accept().map(|(r, f)| (c, r, f)))
        .collect();
    if acc.is_empty() {
        let _ = writeln!(
            s,
            "No case has whole-run times of settled, the program's own shape and the model's \
             first choice."
        );
        return s;
    }
    let within = acc
        .iter()
        .filter(|(_, r, _)| *r <= WHOLE_RUN_ACCEPT)
        .count();
    let from = |f: &str| acc.iter().filter(|(_, _, x)| *x == f).count();
    let _ = writeln!(
        s,
        "settled ≤ {WHOLE_RUN_ACCEPT:.2} × min(own, model): **{within} of {} cases**; the figure \
         used: isolated runs {}, all-at-once runs with the kernel alone changing {}, all-at-once \
         runs with other kernels changing too {}.\n",
        acc.len(),
        from("isolated"),
        from("alone"),
        from("all_at_once")
    );
    let shown: Vec<&(&Case, f64, &str)> = acc
        .iter()
        .filter(|(c, r, f)| {
            *f == "isolated"
                || *r > WHOLE_RUN_ACCEPT
                || c.settled_vs_min(false)
                    .is_some_and(|x| x > WHOLE_RUN_ACCEPT)
        })
        .collect();
    if !shown.is_empty() {
        let _ = writeln!(
            s,
            "The cases with an isolated figure, and any above {WHOLE_RUN_ACCEPT:.2} by either \
             figure (settled / min(own, model)):\n"
        );
        let _ = writeln!(
            s,
            "| program | kernel | sizes | all at once | isolated | figure used | ≤ {WHOLE_RUN_ACCEPT:.2} |"
        );
        let _ = writeln!(s, "| --- | --- | --- | ---: | ---: | --- | --- |");
        let f = |x: Option<f64>| x.map_or_else(|| "–".to_string(), |v| format!("{v:.3}"));
        for (c, r, from) in shown {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} | {} |",
                c.program,
                c.kernel,
                sizes_cell(c),
                f(c.settled_vs_min(false)),
                f(c.settled_vs_min(true)),
                from.replace('_', " "),
                if *r <= WHOLE_RUN_ACCEPT {
                    "yes"
                } else {
                    "**no**"
                }
            );
        }
    }
    // Kernels the isolated runs left out, and why (one line per job and kernel).
    let mut left: Vec<String> = Vec::new();
    for c in &st.cases {
        let Some(status) = c.isolation.as_deref() else {
            continue;
        };
        let settled = c
            .picks
            .get(&Method::Settled)
            .and_then(|p| p.block)
            .is_some();
        if settled
            && (matches!(status, "mixed" | "absent")
                || (status == "isolated" && c.settled_vs_min(true).is_none()))
        {
            let why = match status {
                "mixed" => "its keys settled on different shapes (KLARAPTOR_FORCE is per kernel)",
                "absent" => "not in the job's isolation plan",
                _ => "the isolated runs did not time all three shapes of this key",
            };
            let line = format!("{} ({}, {}): {why}", c.kernel, c.job, c.sizes_text());
            if !left.contains(&line) {
                left.push(line);
            }
        }
    }
    if !left.is_empty() {
        let _ = writeln!(
            s,
            "\nNot isolated, the all-at-once figure used: {}.",
            left.join("; ")
        );
    }
    s
}

fn half_of_program<'a>(st: &'a Study, program: &str) -> &'a str {
    st.split.of(program).map_or("no half", |(_, h)| h)
}

/// The summary of `accuracy-<gpu>-<date>-summary.json`: one line per compared method, with
/// settled's counts of cases that did not settle and that are more than 3 % slower than
/// default, and profiled_best's of cases without a profile.
pub fn summary(st: &Study) -> Vec<MethodSummary> {
    klaraptor_program::validate::summaries(&st.cases)
}

/// One case of two sweeps: the same job, kernel and sizes.
fn paired<'a>(st: &'a Study, again: &'a Study) -> Vec<(&'a Case, &'a Case)> {
    st.cases
        .iter()
        .filter_map(|c| {
            again
                .cases
                .iter()
                .find(|d| d.job == c.job && d.kernel == c.kernel && d.sizes == c.sizes)
                .map(|d| (c, d))
        })
        .collect()
}

/// The fastest time of `other`'s sweep over the time it measured for `block`.
fn timed_by(other: &Case, block: Option<[u32; 3]>) -> Option<f64> {
    let best = other
        .measured
        .values()
        .cloned()
        .fold(f64::INFINITY, f64::min);
    let t = other.measured.get(&block?)?;
    best.is_finite().then_some(best / t)
}

/// The run-to-run section: every method's shape timed by a second, independent exhaustive
/// sweep (`again`), and each sweep's optimum timed by the other, which is what a perfect
/// choice scores when measured again: one minus it is the noise of the sweep's medians.
pub fn repeat_section(st: &Study, again: &Study) -> String {
    let mut s = String::new();
    let pairs = paired(st, again);
    let when = again
        .env
        .get("exhaustive")
        .map(|e| e.date.clone())
        .unwrap_or_default();
    let _ = writeln!(
        s,
        "## Run to run
"
    );
    let _ = writeln!(
        s,
        "A second exhaustive sweep (run {when}, same binaries and shapes) timed the same {} \
         cases again. Every method keeps its shape; its ratio is taken in each sweep.\n",
        pairs.len()
    );
    let _ = writeln!(
        s,
        "| method | geometric mean, this sweep | minimum | geometric mean, second sweep | minimum | cases < 0.80 (second) |"
    );
    let _ = writeln!(s, "| --- | ---: | ---: | ---: | ---: | ---: |");
    let cell = |v: Option<study::Stats>| match v {
        Some(x) => (
            format!("{:.3}", x.geomean),
            format!("{:.3}", x.min),
            x.below_080.to_string(),
        ),
        None => ("–".into(), "–".into(), "–".into()),
    };
    for m in Method::compared(&st.cases) {
        let first: Vec<f64> = pairs.iter().filter_map(|(c, _)| c.ratio(m)).collect();
        let second: Vec<f64> = pairs
            .iter()
            .filter_map(|(c, d)| timed_by(d, c.picks.get(&m).and_then(|p| p.block)))
            .collect();
        let (g1, m1, _) = cell(study::stats(&first));
        let (g2, m2, b2) = cell(study::stats(&second));
        let _ = writeln!(s, "| {} | {g1} | {m1} | {g2} | {m2} | {b2} |", m.as_str());
    }
    let optimum = |a: &Case| a.picks.get(&Method::Optimum).and_then(|p| p.block);
    let forward: Vec<(f64, &Case, &Case)> = pairs
        .iter()
        .filter_map(|(c, d)| timed_by(d, optimum(c)).map(|r| (r, *c, *d)))
        .collect();
    let backward: Vec<f64> = pairs
        .iter()
        .filter_map(|(c, d)| timed_by(c, optimum(d)))
        .collect();
    let f: Vec<f64> = forward.iter().map(|x| x.0).collect();
    if let (Some(a), Some(b)) = (study::stats(&f), study::stats(&backward)) {
        let _ = writeln!(
            s,
            "\nThe optimum of this sweep, timed by the second: geometric mean {:.3}, minimum \
             {:.3}, {} cases below 0.90; the second's optimum timed by this one: {:.3}, minimum \
             {:.3}. That is what a perfect choice scores when it is measured again: the rest \
             of the way to 1 is the noise of the sweeps' medians, not the model.",
            a.geomean,
            a.min,
            f.iter().filter(|r| **r < 0.90).count(),
            b.geomean,
            b.min
        );
    }
    let mut noisy: Vec<&(f64, &Case, &Case)> = forward.iter().filter(|x| x.0 < 0.90).collect();
    noisy.sort_by(|a, b| a.0.total_cmp(&b.0));
    if !noisy.is_empty() {
        let _ = writeln!(
            s,
            "\n| program | kernel | sizes | optimum here | its ratio in the second sweep | optimum there |"
        );
        let _ = writeln!(s, "| --- | --- | --- | --- | ---: | --- |");
        for (r, c, d) in noisy {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} {:.4} ms | {:.2} | {} |",
                c.program,
                c.kernel,
                sizes_cell(c),
                shape(optimum(c), c.dim),
                c.measured
                    .get(&optimum(c).unwrap_or_default())
                    .copied()
                    .unwrap_or(f64::NAN),
                r,
                shape(optimum(d), d.dim)
            );
        }
    }
    s.push('\n');
    s
}

/// A block as the tables show it: bx for a 1-D kernel, bx×by for a 2-D one.
fn shape(b: Option<[u32; 3]>, dim: u8) -> String {
    match b {
        Some([x, _, _]) if dim <= 1 => format!("{x}"),
        Some([x, y, 1]) => format!("{x}×{y}"),
        Some([x, y, z]) => format!("{x}×{y}×{z}"),
        None => "–".into(),
    }
}

fn ratio_cell(c: &Case, m: Method) -> String {
    let p = c.picks.get(&m);
    match p {
        Some(p) if p.block.is_some() => {
            let r = p
                .ratio
                .map(|r| format!("{r:.2}"))
                .unwrap_or_else(|| "–".into());
            let mut mark = if p.flag.is_some() { "*" } else { "" }.to_string();
            if p.slower_than_default == Some(true) {
                mark.push('!');
            }
            let n = p.launches.map(|n| format!(" ({n}×)")).unwrap_or_default();
            format!("{} {r}{mark}{n}", shape(p.block, c.dim))
        }
        _ => "–".into(),
    }
}

fn sizes_cell(c: &Case) -> String {
    format!("{} = {}", c.labels.join("×"), c.sizes_text())
}

fn tick(ok: bool) -> &'static str {
    if ok {
        "met"
    } else {
        "**not met**"
    }
}

/// The markdown report. `files` are the chart and JSON file names, for links.
pub fn markdown(st: &Study, json_name: &str, charts: &[(String, String)]) -> String {
    let mut s = String::new();
    let env = st.main_env().cloned().unwrap_or_default();
    let _ = writeln!(
        s,
        "# Accuracy of klaraptor's launch choice: {} on {}, {}\n",
        suite_title(st),
        env.gpu,
        env.day()
    );
    let _ = writeln!(
        s,
        "GPU: {} ({}, compute capability {}), driver {}, CUDA {}.",
        env.gpu, env.uuid, env.cc, env.driver, env.cuda
    );
    let phases: Vec<String> = st
        .env
        .iter()
        .map(|(p, e)| format!("{p} {}", e.date))
        .collect();
    let _ = writeln!(s, "Phases run (UTC): {}.", phases.join(", "));
    if let Some(b) = &st.build_info {
        let _ = writeln!(s, "Build: {}.", b.replace('\n', "; "));
    }
    let _ = writeln!(
        s,
        "Records: [`{json_name}`]({json_name}); written by `accuracy-report` \
         (bench/accuracy). Method and rules: [below](#how-each-method-was-timed).\n"
    );

    // Summary.
    let _ = writeln!(s, "## Summary\n");
    let _ = writeln!(
        s,
        "Ratio = time of the optimal shape / time of the method's shape, both from the same \
         exhaustive sweep (1 = optimal). Over {} kernel × size cases ({} kernels):\n",
        st.cases.len(),
        st.criteria.len()
    );
    let _ = writeln!(
        s,
        "| method | cases | geometric mean | minimum | share ≥ 0.90 | cases < 0.80 |"
    );
    let _ = writeln!(s, "| --- | ---: | ---: | ---: | ---: | ---: |");
    // program_profiled beside profiled_best where a profile names the program's own block.
    let methods = Method::compared(&st.cases);
    let mut all = std::collections::BTreeMap::new();
    for &m in &methods {
        let r = st.ratios(m);
        if let Some(x) = study::stats(&r) {
            all.insert(m, x);
            let _ = writeln!(
                s,
                "| {} | {} | {:.3} | {:.3} | {:.0} % | {} |",
                m.as_str(),
                x.n,
                x.geomean,
                x.min,
                100.0 * x.share_ge_090,
                x.below_080
            );
        } else {
            let _ = writeln!(s, "| {} | 0 | – | – | – | – |", m.as_str());
        }
    }
    s.push_str(&halves_section(st));
    s.push_str(&whole_run_section(st));
    let sums = summary(st);
    let sum_of = |m: Method| sums.iter().find(|x| x.method == m.as_str());
    if let Some(x) = sum_of(Method::Settled) {
        let _ = writeln!(
            s,
            "\nsettled: the shape the runtime's refinement kept in the choice run; {} of {} \
             cases did not settle (no `refine: settled` line at that size: too few launches, \
             or a runtime without refinement), {} are more than 3 % slower than default.",
            x.not_settled.unwrap_or(0),
            st.cases.len(),
            x.slower_than_default.unwrap_or(0)
        );
    }
    if let Some(x) = sum_of(Method::ProfiledBest) {
        let _ = writeln!(
            s,
            "\nprofiled_best: the profile's fastest shape at the nearest profiled size, without \
             a model; {} of {} cases without a profile.",
            x.no_profile.unwrap_or(0),
            st.cases.len()
        );
    }
    if let Some(x) = sum_of(Method::ProgramProfiled) {
        let named = st
            .cases
            .iter()
            .filter(|c| c.picks.contains_key(&Method::ProgramProfiled))
            .count();
        let _ = writeln!(
            s,
            "\nprogram_profiled: the program's own block as the profile recorded it at the \
             nearest profiled size it names one at (the shape whose profiled time the link's \
             decision weighed for keeping the program's launch); {named} of {} cases have a \
             profile that names the program's blocks, {} of them without a ratio.",
            st.cases.len(),
            named.saturating_sub(x.cases)
        );
    }
    let common: Vec<(Method, Option<study::Stats>)> = Method::COMMON
        .iter()
        .map(|&m| (m, study::stats(&st.ratios_common(m))))
        .collect();
    if let Some((_, Some(first))) = common.first() {
        let parts: Vec<String> = common
            .iter()
            .filter_map(|(m, x)| x.map(|x| format!("{} {:.3}", m.as_str(), x.geomean)))
            .collect();
        let _ = writeln!(
            s,
            "\nOn the {} cases where all three methods have a ratio, the geometric means are: {}.",
            first.n,
            parts.join(", ")
        );
    }
    let k = all.get(&Method::Klaraptor);
    let gm = |m: Method| {
        common
            .iter()
            .find(|(x, _)| *x == m)
            .and_then(|(_, x)| x.map(|x| x.geomean))
    };
    let _ = writeln!(s, "\nTargets of the issue (#7):\n");
    let _ = writeln!(
        s,
        "- geometric mean ≥ 0.95: {}",
        k.map(|x| format!("{:.3}, {}", x.geomean, tick(x.geomean >= 0.95)))
            .unwrap_or_else(|| "no data".into())
    );
    let _ = writeln!(
        s,
        "- no case below 0.80: {}",
        k.map(|x| format!("minimum {:.3}, {}", x.min, tick(x.below_080 == 0)))
            .unwrap_or_else(|| "no data".into())
    );
    for other in [Method::Default, Method::Occupancy] {
        let _ = writeln!(
            s,
            "- better than {} (geometric mean on the common cases): {}",
            other.as_str(),
            match (gm(Method::Klaraptor), gm(other)) {
                (Some(a), Some(b)) => format!("{a:.3} vs {b:.3}, {}", tick(a > b)),
                _ => "no data".into(),
            }
        );
    }
    let settled = sum_of(Method::Settled).filter(|x| x.cases > 0);
    let _ = writeln!(
        s,
        "\nAcceptance of the runtime's refinement (settled):\n\n{}",
        match settled {
            Some(x) => {
                let g = x.geomean.unwrap_or(f64::NAN);
                let min = x.min.unwrap_or(f64::NAN);
                let slow = x.slower_than_default.unwrap_or(0);
                format!(
                    "- geometric mean ≥ 0.99 of optimal: {g:.3}, {}\n\
                     - no case below 0.90: minimum {min:.3}, {}\n\
                     - never more than 3 % slower than default: {slow} case(s), {}\n\
                     - every case settled: {} of {}, {}",
                    tick(g >= 0.99),
                    tick(x.below_090 == 0),
                    tick(slow == 0),
                    x.cases + x.without_ratio - x.not_settled.unwrap_or(0),
                    st.cases.len(),
                    tick(x.not_settled == Some(0))
                )
            }
            None => "- no data: no case settled (the choice phase ran before the runtime's \
                     refinement, or with too few launches)"
                .to_string(),
        }
    );
    if let Some((median, n)) = median_spearman(st.cases.iter()) {
        let rhos: Vec<f64> = st.cases.iter().filter_map(|c| c.spearman).collect();
        let min = rhos.iter().copied().fold(f64::INFINITY, f64::min);
        let _ = writeln!(
            s,
            "\nSpearman's ρ between predicted and measured time over the shapes: median {median:.2} \
             over {n} cases, {:.0} % of them ≥ 0.8, minimum {min:.2}.",
            100.0 * rhos.iter().filter(|&&r| r >= 0.8).count() as f64 / n as f64,
        );
    }
    if !charts.is_empty() {
        let _ = writeln!(s);
        for (title, file) in charts {
            let _ = writeln!(s, "![{title}]({file})\n");
        }
    }

    // Per case.
    let _ = writeln!(s, "## Per kernel and size\n");
    let _ = writeln!(
        s,
        "Each method cell: its shape (bx×by, or bx for 1-D) and its ratio; * marks a flag \
         (listed under [Flags](#flags-and-warnings)), ! a settled shape more than 3 % slower \
         than default; settled's cell also gives the launches it took (n×), or – when it did \
         not settle. ρ: Spearman over the shapes.\n"
    );
    let heads: Vec<&str> = methods.iter().map(|m| m.as_str()).collect();
    let _ = writeln!(
        s,
        "| program | kernel | sizes | shapes | optimum | {} | ρ |",
        heads.join(" | ")
    );
    let _ = writeln!(
        s,
        "| --- | --- | --- | ---: | --- | {}---: |",
        "--- | ".repeat(methods.len())
    );
    for c in &st.cases {
        let o = c.picks.get(&Method::Optimum);
        let cells: Vec<String> = methods.iter().map(|&m| ratio_cell(c, m)).collect();
        let _ = writeln!(
            s,
            "| {} | {} | {} | {}/{} | {} {} | {} | {} |",
            c.program,
            c.kernel,
            sizes_cell(c),
            c.measured.len(),
            c.candidates,
            shape(o.and_then(|p| p.block), c.dim),
            o.and_then(|p| p.time_ms)
                .map(|t| format!("{t:.4} ms"))
                .unwrap_or_else(|| "–".into()),
            cells.join(" | "),
            c.spearman
                .map(|r| format!("{r:.2}"))
                .unwrap_or_else(|| "–".into())
        );
    }

    // Spearman.
    let _ = writeln!(s, "\n## Predicted against measured time over the shapes\n");
    let _ = writeln!(
        s,
        "ρ: Spearman's rank correlation between the rational program's predicted time and the \
         measured time, over the shapes measured at that size (ties share their average rank). \
         Rank of the optimum: where the measured optimum stands in the predicted order (1 = the \
         model ranks it first).\n"
    );
    let _ = writeln!(
        s,
        "| program | kernel | sizes | shapes | ρ | rank of the optimum |"
    );
    let _ = writeln!(s, "| --- | --- | --- | ---: | ---: | ---: |");
    for c in &st.cases {
        let n = c
            .measured
            .keys()
            .filter(|b| c.predicted.contains_key(*b))
            .count();
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} |",
            c.program,
            c.kernel,
            sizes_cell(c),
            n,
            c.spearman
                .map(|r| format!("{r:.3}"))
                .unwrap_or_else(|| "–".into()),
            c.optimum_rank()
                .map(|r| format!("{r} of {}", c.predicted.len()))
                .unwrap_or_else(|| "–".into())
        );
    }

    // Harness cross-check.
    let _ = writeln!(s, "\n## Sweep against harness timing\n");
    let _ = writeln!(
        s,
        "The choice runs time their shape with the sample's own harness (`--time 20` for the \
         instrumented build, `--time 5` for the default: one warm-up, then the median of the \
         timed repetitions, each timed as `samples/polybench/common/harness.h` says). The \
         instrumented build's time is of the shape its launches ended with: settled's where it \
         settled, else klaraptor's. Where the site is a single launch, that median should match \
         the sweep's time of the same shape.\n"
    );
    let _ = writeln!(
        s,
        "| program | kernel | sizes | method | shape | sweep ms | harness ms | harness / sweep |"
    );
    let _ = writeln!(s, "| --- | --- | --- | --- | --- | ---: | ---: | ---: |");
    let mut far = 0;
    let mut compared = 0;
    for c in &st.cases {
        for m in [Method::Klaraptor, Method::Settled, Method::Default] {
            let Some(p) = c.picks.get(&m) else { continue };
            if let (Some(t), Some(h), Some(1)) = (p.time_ms, p.harness_ms, p.harness_launches) {
                compared += 1;
                let q = h / t;
                if !(0.8..=1.25).contains(&q) {
                    far += 1;
                }
                let _ = writeln!(
                    s,
                    "| {} | {} | {} | {} | {} | {:.4} | {:.4} | {:.2} |",
                    c.program,
                    c.kernel,
                    sizes_cell(c),
                    m.as_str(),
                    shape(p.block, c.dim),
                    t,
                    h,
                    q
                );
            }
        }
    }
    let _ = writeln!(
        s,
        "\n{compared} single-launch sites compared; {far} differ by more than a factor 1.25."
    );

    // Cost.
    let _ = writeln!(
        s,
        "\n## Build-time cost: klaraptor against an exhaustive search\n"
    );
    let _ = writeln!(
        s,
        "klaraptor's cost is paid once per kernel and device, at build time: the profile runs \
         (the recipe commands under the full collector: every planned shape at the small \
         profile sizes, with hardware counters) and the fit (the model link's time minus the \
         plain link's, on the build machine: fitting, code generation, compiling the rational \
         programs). It then covers every data size. The exhaustive search is paid again at \
         every new data size; here it ran once per study size. Wall time includes process \
         start and input generation; GPU time sums the timed and warm-up launches the \
         collector measured.\n"
    );
    let _ = writeln!(
        s,
        "| program | profile runs | profile wall s | profile GPU s | fit s | exhaustive runs | exhaustive wall s | exhaustive GPU s |"
    );
    let _ = writeln!(
        s,
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    );
    let mut tot = study::Cost::default();
    let mut fit_all = Some(0.0);
    for c in &st.costs {
        let _ = writeln!(
            s,
            "| {} | {} | {:.1} | {:.2} | {} | {} | {:.1} | {:.2} |",
            c.program,
            c.profile_runs,
            c.profile_wall_s,
            c.profile_gpu_s,
            c.fit_s
                .map(|f| format!("{f:.1}"))
                .unwrap_or_else(|| "–".into()),
            c.exhaustive_runs,
            c.exhaustive_wall_s,
            c.exhaustive_gpu_s
        );
        tot.profile_runs += c.profile_runs;
        tot.profile_wall_s += c.profile_wall_s;
        tot.profile_gpu_s += c.profile_gpu_s;
        tot.exhaustive_runs += c.exhaustive_runs;
        tot.exhaustive_wall_s += c.exhaustive_wall_s;
        tot.exhaustive_gpu_s += c.exhaustive_gpu_s;
        fit_all = match (fit_all, c.fit_s) {
            (Some(a), Some(b)) => Some(a + b),
            _ => None,
        };
    }
    let _ = writeln!(
        s,
        "| **total** | {} | {:.1} | {:.2} | {} | {} | {:.1} | {:.2} |",
        tot.profile_runs,
        tot.profile_wall_s,
        tot.profile_gpu_s,
        fit_all
            .map(|f| format!("{f:.1}"))
            .unwrap_or_else(|| "–".into()),
        tot.exhaustive_runs,
        tot.exhaustive_wall_s,
        tot.exhaustive_gpu_s
    );
    for (phase, rows) in &st.summaries {
        let ran: Vec<_> = rows.iter().filter(|r| r.ran()).collect();
        let est: f64 = ran.iter().map(|r| r.est_s).sum();
        let wall: f64 = ran.iter().map(|r| r.wall_s).sum();
        let _ = writeln!(
            s,
            "\nPhase {phase}: {} of {} jobs ran, {wall:.0} s wall against {est:.0} s estimated.",
            ran.len(),
            rows.len()
        );
    }

    // Criteria.
    let _ = writeln!(s, "\n## Sizes against the issue's criteria\n");
    let _ = writeln!(
        s,
        "At least three sizes per kernel, one not a power of two, and one at which every data \
         parameter of the grid formula is at least 8 × its largest profiled value (×profiled: \
         the best such factor over the kernel's sizes; the profiled sizes are those of its \
         profile records). Data parameters that only set a loop length may be smaller there \
         (bench/accuracy/sizes.toml says why).\n"
    );
    let _ = writeln!(
        s,
        "| program | kernel | sizes | not a power of two | grid parameters | ×profiled | |"
    );
    let _ = writeln!(s, "| --- | --- | ---: | --- | --- | ---: | --- |");
    for c in &st.criteria {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} |",
            c.program,
            c.kernel,
            c.sizes,
            if c.non_pow2 { "yes" } else { "no" },
            c.grid_labels.join(", "),
            c.grid_factor
                .map(|f| format!("{f:.1}"))
                .unwrap_or_else(|| "no profile sizes".into()),
            if c.ok() { "ok" } else { "**short**" }
        );
    }

    // Method.
    let _ = writeln!(s, "\n## How each method was timed\n");
    // The kernels whose link's decision keeps the program's launch (issue 38).
    let program_keeps: Vec<String> = st
        .kernels
        .iter()
        .filter(|k| k.manifest.as_ref().is_some_and(|m| m.program_chooses()))
        .map(|k| format!("{} ({})", k.name, k.program))
        .collect();
    let runs = match st.sweep_launches {
        Some((lo, hi)) => format!(
            "one warm-up launch, one timed launch, then five timed runs, each queued behind the \
             collector's gate kernel (so that the CPU's queueing is not timed) and holding {lo} \
             to {hi} launches back to back, as many as last about 100 µs; the median of the \
             runs' mean time per launch kept"
        ),
        None => "one warm-up launch, then five launches each between two CUDA events, the \
                 median kept"
            .to_string(),
    };
    let _ = writeln!(
        s,
        "- **Exhaustive sweep** (the *optimum* and every other method's time): the program's \
         profiling variant (`klaraptor-cc --kl-profiling-variant`) ran at each study size with \
         `--time 1`; at the first launch of each swept kernel the profiling runtime launched \
         every candidate shape (66 power-of-two shapes in 2-D; 1, 2, 4, 8, 16 and the 32 \
         multiples of 32 in 1-D) under the time-only collector (`KLARAPTOR_COLLECT_TIME_ONLY=1`: \
         {runs}; no L2 flush between them, as a program launching the kernel repeatedly sees \
         it). For a kernel launched from a host loop (lu, gramschm, adi's column kernels, \
         doitgen, 3dconv) that is the loop's first launch.\n\
         - **klaraptor**: the instrumented build, `KLARAPTOR_LOG=… KLARAPTOR_CHOICES=off \
         <program> <sizes> --time 20`; the log's decision (`source=model`) gives the shape: \
         the model's first choice; its time is the sweep's time of that shape.{}\n\
         - **settled**: the same run; on the first launches of each kernel × size the runtime \
         times the model's top shapes and the program's own on the GPU and keeps the fastest \
         (`refine: settled on block=… after launches=<n>` in the log; no choices cache across \
         runs). Its time is the sweep's time of that shape; a case without that line has no \
         settled shape. Flagged (!) when more than 3 % slower than default in the sweep.\n\
         - **profiled_best**: the fastest shape the kernel's own profile measured (the study \
         database's entry its rational program was built from, else the profile phase's \
         records) at the profiled size nearest to the case's in the logarithm of the sizes \
         (Euclidean over `ln` of each data value; a tie goes to the larger size), with the \
         grid of the annotation's formula as the sweep launches it: the choice a table of the \
         profile gives without a model.{}\n\
         - **default**: the same build with `KLARAPTOR_DISABLE=1 … --time 5`; the block the \
         harness read back from the device (32×8 for 2-D kernels, 256 for 1-D).\n\
         - **occupancy**: `cudaOccupancyMaxPotentialBlockSize(&grid, &block, kernel, 0, 0)` \
         (the `KL_OCC` line of the harness). 1-D kernels use that block. For 2-D kernels the \
         block size is rounded down to a power of two (the candidates are powers of two) and \
         the fastest measured shape with that many threads is taken: the most favourable \
         reading of \"its best 2-D factorisation\". A shape that is not among the measured \
         ones gets no time and no ratio (said in its record).\n\
         - **predicted**: the rational program's time for each shape, from its manifest \
         (`<binary>.klaraptor/*.json`, `RationalProgram::rank` at the case's sizes).\n\
         - The harness's own `KL_TIME` medians of the instrumented and default runs are in the \
         records (`harness_ms`) and compared above; for a site in a host loop they sum the \
         loop's launches.",
        if program_keeps.is_empty() {
            String::new()
        } else {
            format!(
                " Where the link's decision keeps the program's launch (chosen by: program's \
                 own; here {}), the runtime launches the program's own shape: klaraptor's is the \
                 block the run logged (`source=program`), else the one the \
                 `KLARAPTOR_DISABLE=1` run read back, not the model's first-ranked shape.",
                program_keeps.join(", ")
            )
        },
        if methods.contains(&Method::ProgramProfiled) {
            "\n- **program_profiled**: the program's own block as the study database's entry \
             recorded it (the entry's `program` blocks, kept by profiling since issue 38; older \
             entries name none, and the method is absent) at the profiled size nearest to the \
             case's it names one at, by profiled_best's rule \
             (`klaraptor_program::validate::program_profiled`, which `klaraptor validate` \
             shares), timed by the sweep: whether the profile's evidence about the program's \
             shape, which the link's decision weighed for keeping the program's launch, \
             carries over to the case's size. `default` is the program's block at the case's \
             own size."
        } else {
            ""
        }
    );

    // Flags.
    let _ = writeln!(s, "\n## Flags and warnings\n");
    let mut any = false;
    for w in &st.warnings {
        any = true;
        let _ = writeln!(s, "- {w}");
    }
    let unsettled: Vec<String> = st
        .cases
        .iter()
        .filter(|c| {
            c.picks
                .get(&Method::Settled)
                .is_some_and(|p| p.block.is_none())
        })
        .map(|c| format!("{} {} at {}", c.program, c.kernel, c.sizes_text()))
        .collect();
    if !unsettled.is_empty() {
        any = true;
        if unsettled.len() == st.cases.len() {
            let _ = writeln!(
                s,
                "- settled: no case settled (no `refine: settled` line in any choice run)"
            );
        } else {
            let _ = writeln!(s, "- settled: did not settle: {}", unsettled.join("; "));
        }
    }
    for c in &st.cases {
        for &m in &methods {
            if let Some(f) = c.picks.get(&m).and_then(|p| p.flag.as_ref()) {
                any = true;
                let _ = writeln!(
                    s,
                    "- {} {} at {}: {}: {f}",
                    c.program,
                    c.kernel,
                    c.sizes_text(),
                    m.as_str()
                );
            }
        }
        if let Some(p) = c
            .picks
            .get(&Method::Settled)
            .filter(|p| p.slower_than_default == Some(true))
        {
            any = true;
            let _ = writeln!(
                s,
                "- {} {} at {}: settled: {} at {:.4} ms, more than 3 % slower than default ({} \
                 at {:.4} ms)",
                c.program,
                c.kernel,
                c.sizes_text(),
                shape(p.block, c.dim),
                p.time_ms.unwrap_or(f64::NAN),
                shape(c.picks.get(&Method::Default).and_then(|d| d.block), c.dim),
                c.picks
                    .get(&Method::Default)
                    .and_then(|d| d.time_ms)
                    .unwrap_or(f64::NAN)
            );
        }
        for m in [Method::ProfiledBest, Method::ProgramProfiled] {
            if let Some(p) = c.picks.get(&m).filter(|p| p.block.is_none()) {
                any = true;
                let _ = writeln!(
                    s,
                    "- {} {} at {}: {}: {}",
                    c.program,
                    c.kernel,
                    c.sizes_text(),
                    m.as_str(),
                    p.how
                );
            }
        }
        if !c.failed.is_empty() {
            any = true;
            let shapes: Vec<String> = c
                .failed
                .iter()
                .map(|(b, why)| format!("{} ({why})", shape(Some(*b), c.dim)))
                .collect();
            let _ = writeln!(
                s,
                "- {} {} at {}: shapes not measured: {}",
                c.program,
                c.kernel,
                c.sizes_text(),
                shapes.join("; ")
            );
        }
    }
    if !any {
        let _ = writeln!(s, "None.");
    }
    s
}
