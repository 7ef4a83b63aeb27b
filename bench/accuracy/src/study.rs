//! The study: per kernel × data size, the exhaustive table of measured times over the
//! candidate shapes, the shape each method picks, and how close each comes to the optimum.
//!
//! Every method's shape is timed by the same exhaustive sweep (the profiling variant under
//! the time-only collector: one warm-up and five timed launches per shape, the median kept),
//! so the ratios compare like with like:
//! - **optimum**: the fastest shape of the sweep;
//! - **klaraptor**: the shape the instrumented build chose at that size (its
//!   `KLARAPTOR_LOG` line, `source=model`): the model's first choice; where the link's
//!   decision keeps the program's own launch ([`RationalProgram::program_chooses`], issue 38)
//!   the program's own shape the runtime then launches
//!   ([`klaraptor_program::validate::program_chooses_pick`]: the run's logged block, else the
//!   block the `KLARAPTOR_DISABLE=1` run read back, never the model's first-ranked shape);
//! - **settled**: the shape the runtime's refinement settled on in the same run (its
//!   `refine: settled on` line; the choice run has `KLARAPTOR_CHOICES=off` and `--time 20`,
//!   enough launches to settle), with the launches it took; a case without that line has
//!   none, and the report counts those cases and those where settled is more than 3 % slower
//!   than default;
//! - **profiled_best**: the fastest shape of the kernel's profile (the study database's entry
//!   its rational program was built from, else the profile phase's records) at the profiled
//!   size nearest in the logarithm of the sizes ([`klaraptor_program::validate::profiled_best`]);
//! - **program_profiled** (only where the study database's entry names the program's own
//!   block, [`klaraptor_profiler::record::Entry::program`]; older entries give no such pick):
//!   that block at the profiled size nearest to the case's, by profiled_best's rule
//!   ([`klaraptor_program::validate::program_profiled`], which `klaraptor validate` shares):
//!   the profile's evidence of the program's shape that the link's decision weighed;
//! - **default**: the program's own shape (the block `KLARAPTOR_DISABLE=1 --time` reports,
//!   read back from the device: 32×8 for 2-D kernels, 256 for 1-D ones);
//! - **occupancy**: the block size `cudaOccupancyMaxPotentialBlockSize` returns (the
//!   harness's `KL_OCC` line); for a 2-D kernel its best 2-D factorisation, see
//!   [`occupancy_shape`] (the rule `klaraptor validate` uses too).
//!
//! The ratio of a method is optimum time / method time (1 = optimal). The harness's own
//! `KL_TIME` of the klaraptor and default runs is kept beside, as a cross-check of the
//! sweep's timing.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use klaraptor_profiler::db::ProfileDb;
use klaraptor_profiler::record::ProgramBlock;
use klaraptor_program::rational::{self, RationalProgram};
use klaraptor_program::validate::{
    self as kv, occupancy_shape, shape_text, ProfileTimes, Refines, OCCUPANCY_API,
};
pub use klaraptor_program::validate::{spearman, stats, Case, Method, Pick, Stats};

use crate::inputs::{self, Decision, Env, SummaryRow, TimingOutput};
use crate::sizes::Sizes;

/// A kernel as the study directory knows it.
#[derive(Debug, Clone)]
pub struct Kernel {
    pub program: String,
    pub name: String,
    pub mangled: String,
    pub dim: u8,
    pub labels: Vec<String>,
    pub grid: Vec<String>,
    pub manifest: Option<RationalProgram>,
    /// Every data size the profile records hold for it (and the manifest's plan sizes).
    pub profiled: BTreeSet<Vec<i64>>,
    /// The profile profiled_best picks from (`Err`: why there is none).
    pub profile: std::result::Result<ProfileTimes, String>,
    /// The program's own blocks the study database's entry names (program_profiled picks
    /// from them; empty for an entry captured before issue 38, or without a database entry).
    pub program_blocks: Vec<ProgramBlock>,
}

/// What the issue asks of each kernel's sizes, checked on the data.
#[derive(Debug, Clone)]
pub struct Criteria {
    pub program: String,
    pub kernel: String,
    pub sizes: usize,
    pub non_pow2: bool,
    /// The largest factor by which every grid data parameter exceeds its largest profiled
    /// value, over the kernel's sizes (None without profile sizes).
    pub grid_factor: Option<f64>,
    /// The labels that enter the grid formula.
    pub grid_labels: Vec<String>,
}

impl Criteria {
    pub fn ok(&self) -> bool {
        self.sizes >= 3 && self.non_pow2 && self.grid_factor.is_some_and(|f| f >= 8.0)
    }
}

/// Build-time cost of one program.
#[derive(Debug, Clone, Default)]
pub struct Cost {
    pub program: String,
    pub profile_runs: usize,
    pub profile_wall_s: f64,
    pub profile_gpu_s: f64,
    /// Model link minus plain link (fit, code generation, C compile), from build-times.tsv.
    pub fit_s: Option<f64>,
    pub exhaustive_runs: usize,
    pub exhaustive_wall_s: f64,
    pub exhaustive_gpu_s: f64,
}

/// Everything the report shows.
#[derive(Debug, Clone, Default)]
pub struct Study {
    pub env: BTreeMap<String, Env>,
    pub build_info: Option<String>,
    pub cases: Vec<Case>,
    pub kernels: Vec<Kernel>,
    pub criteria: Vec<Criteria>,
    pub costs: Vec<Cost>,
    pub summaries: BTreeMap<String, Vec<SummaryRow>>,
    /// Things that did not go as planned (missing sweeps, failed jobs).
    pub warnings: Vec<String>,
    /// How the sweep timed its shapes: the fewest and most launches per timed run over its
    /// samples; `None` when its records predate the collector's batching (one launch a run,
    /// not gated).
    pub sweep_launches: Option<(u32, u32)>,
    /// Each program's suite and half (empty without a split file).
    pub split: crate::split::Split,
    /// The choice jobs with whole-run launch-times files (`wholerun/`, device.sh's
    /// `WHOLE_RUN=1`) and those without (a choice phase before the whole-run measurement, or
    /// run with `WHOLE_RUN=0`: their records' `whole_run_ms` and `drifts` are null).
    pub whole_run_jobs: usize,
    pub no_whole_run_jobs: usize,
    /// The choice jobs with an isolation plan (`isolated/plan.tsv`, device.sh's
    /// `WHOLE_RUN_ISOLATE=1`).
    pub isolated_jobs: usize,
}

/// Where the inputs are.
pub struct Paths {
    /// The study directory (.dev/study): binaries, kernels.tsv, models/, build-times.tsv.
    pub study: PathBuf,
    /// The unpacked device output ($OUT of device.sh): profile/, exhaustive/, choice/.
    pub device: PathBuf,
    /// Another exhaustive phase's directory to read instead of `device/exhaustive` (a
    /// repeated sweep, for the run-to-run comparison).
    pub exhaustive: Option<PathBuf>,
    /// The study's profile database (.dev/study-db), which the models were built from: the
    /// profile of profiled_best. Without it (or without a kernel's entry there), the profile
    /// phase's records in `device/profile/` are read instead.
    pub profile_db: Option<PathBuf>,
    /// The split of the suites into tuning and test halves (bench/accuracy/split.toml):
    /// records carry each program's suite and half, the report summarises each half.
    pub split: Option<PathBuf>,
}

impl Paths {
    /// Where a phase's output is.
    pub fn phase(&self, phase: &str) -> PathBuf {
        match (&self.exhaustive, phase) {
            (Some(x), "exhaustive") => x.clone(),
            _ => self.device.join(phase),
        }
    }
}

fn is_pow2(v: i64) -> bool {
    v > 0 && (v & (v - 1)) == 0
}

impl Study {
    /// The ratios of a method over the cases where it has one.
    pub fn ratios(&self, m: Method) -> Vec<f64> {
        self.cases.iter().filter_map(|c| c.ratio(m)).collect()
    }

    /// The ratios of a method over the cases where each of the three original methods
    /// (klaraptor, default, occupancy: [`Method::COMMON`]) and `m` have one (so the methods
    /// are compared on the same cases).
    pub fn ratios_common(&self, m: Method) -> Vec<f64> {
        self.cases
            .iter()
            .filter(|c| Method::COMMON.iter().all(|&o| c.ratio(o).is_some()))
            .filter_map(|c| c.ratio(m))
            .collect()
    }

    /// The machine of the exhaustive phase (else of another phase).
    pub fn main_env(&self) -> Option<&Env> {
        ["exhaustive", "choice", "profile"]
            .iter()
            .find_map(|p| self.env.get(*p))
    }

    pub fn load(paths: &Paths, sizes: &Sizes) -> Result<Study> {
        let mut st = Study::default();
        if let Some(p) = &paths.split {
            st.split = crate::split::Split::load(p)?;
        }
        for phase in ["profile", "exhaustive", "choice"] {
            let dir = paths.phase(phase);
            let env = dir.join("env.txt");
            if env.is_file() {
                st.env.insert(phase.into(), inputs::read_env(&env)?);
            }
            let rows = inputs::read_summaries(&dir)?;
            if !rows.is_empty() {
                st.summaries.insert(phase.into(), rows);
            }
        }
        if !st.env.contains_key("exhaustive") {
            anyhow::bail!(
                "{} has no exhaustive/env.txt: give the unpacked output of \
                 `PHASE=exhaustive bench/accuracy/device.sh` (its $OUT)",
                paths.device.display()
            );
        }
        st.build_info = std::fs::read_to_string(paths.study.join("BUILD-INFO"))
            .ok()
            .map(|s| s.trim().to_string());
        for p in sizes.programs() {
            if paths.study.join(&p).is_dir() {
                let gpu = st.env.get("exhaustive").map(|e| e.gpu.clone());
                st.kernels.extend(load_kernels(paths, &p, gpu.as_deref())?);
            } else {
                st.warnings.push(format!(
                    "{p}: not in {} (prepare.sh built a subset?): left out",
                    paths.study.display()
                ));
            }
        }
        for nj in sizes.numbered() {
            let p = &nj.job.program;
            if !paths.study.join(p).is_dir() {
                continue;
            }
            let xdir = paths.phase("exhaustive").join(p).join(&nj.stem);
            let cdir = paths.phase("choice").join(p).join(&nj.stem);
            let sweeps = inputs::read_records(&xdir.join("records"))?;
            let (decisions, refines) = if cdir.join("model.log").is_file() {
                (
                    inputs::read_decisions(&cdir.join("model.log"))?,
                    kv::read_refines(&cdir.join("model.log"))?,
                )
            } else {
                (Vec::new(), Refines::default())
            };
            let model_out = read_opt_timing(&cdir.join("model.out"))?;
            let default_out = read_opt_timing(&cdir.join("default.out"))?;
            let variant_out = read_opt_timing(&xdir.join("stdout.txt"))?;
            let whole_runs = inputs::read_whole_runs(&cdir, &format!("choice/{p}/{}", nj.stem))?;
            let isolated = inputs::read_isolated(&cdir, &format!("choice/{p}/{}", nj.stem))?;
            if cdir.is_dir() {
                if whole_runs.is_empty() {
                    st.no_whole_run_jobs += 1;
                } else {
                    st.whole_run_jobs += 1;
                }
                if isolated.is_some() {
                    st.isolated_jobs += 1;
                }
            }
            // The program's kernels; a sweep is a kernel's by its mangled name (the records
            // name a template instance `stencil1d<3>`, the sizes file the template).
            let of_sweep = |s: &inputs::Sweep| {
                st.kernels
                    .iter()
                    .find(|x| &x.program == p && x.mangled == s.id)
                    .cloned()
            };
            for k in &nj.job.sweep {
                let found: Vec<&inputs::Sweep> = sweeps
                    .iter()
                    .filter(|s| &s.name == k || of_sweep(s).is_some_and(|x| &x.name == k))
                    .collect();
                if found.is_empty() {
                    let rc = st
                        .summaries
                        .get("exhaustive")
                        .and_then(|r| r.iter().find(|r| r.id == nj.id))
                        .map(|r| format!(" (job exit status {})", r.rc))
                        .unwrap_or_else(|| " (the job did not run)".into());
                    st.warnings
                        .push(format!("{}: no sweep of {k} recorded{rc}", nj.id));
                    continue;
                }
                if !st.kernels.iter().any(|x| &x.program == p && &x.name == k) {
                    st.warnings.push(format!(
                        "{}: {k} is not in {}/{p}/kernels.tsv",
                        nj.id,
                        paths.study.display()
                    ));
                    continue;
                }
                let all: Vec<(String, String)> = st
                    .kernels
                    .iter()
                    .filter(|x| &x.program == p)
                    .map(|x| (x.name.clone(), x.mangled.clone()))
                    .collect();
                for sw in found {
                    // Each instance of a template with its own manifest and log lines.
                    let Some(kernel) = of_sweep(sw).or_else(|| {
                        st.kernels
                            .iter()
                            .find(|x| &x.program == p && &x.name == k)
                            .cloned()
                    }) else {
                        continue;
                    };
                    let log_name = kv::KernelName::new(
                        &kernel.name,
                        &kernel.mangled,
                        all.iter().map(|(n, m)| (n.as_str(), m.as_str())),
                    );
                    for n in sw
                        .samples
                        .iter()
                        .filter_map(|s| s.counters.as_ref()?.launches_per_run)
                    {
                        let (lo, hi) = st.sweep_launches.unwrap_or((n, n));
                        st.sweep_launches = Some((lo.min(n), hi.max(n)));
                    }
                    let mut by_size: BTreeMap<Vec<i64>, Vec<&klaraptor_profiler::record::Sample>> =
                        BTreeMap::new();
                    for s in &sw.samples {
                        by_size.entry(s.sizes.clone()).or_default().push(s);
                    }
                    for (size, samples) in by_size {
                        let mut case = build_case(
                            &kernel,
                            &log_name,
                            &nj.id,
                            size,
                            &samples,
                            (&decisions, &refines),
                            [&model_out, &default_out, &variant_out],
                        );
                        time_whole_run(&mut case, &whole_runs);
                        time_isolated(&mut case, isolated.as_ref(), &log_name);
                        if !case.complete() {
                            st.warnings.push(format!(
                                "{}: the sweep of {k} at {} is incomplete: {} of {} shapes \
                                 (killed by its timeout?); its optimum is over those only",
                                nj.id,
                                case.sizes_text(),
                                case.measured.len() + case.failed.len(),
                                case.candidates
                            ));
                        }
                        st.cases.push(case);
                    }
                }
            }
        }
        for (phase, rows) in &st.summaries {
            for r in rows {
                if r.rc != "0" && r.rc != "0,0" && !(phase == "profile" && r.rc == "1") {
                    st.warnings
                        .push(format!("{phase} job {} exited with {}", r.id, r.rc));
                }
            }
        }
        st.criteria = criteria(&st.kernels, &st.cases);
        st.costs = costs(paths, sizes, &st.summaries)?;
        Ok(st)
    }
}

fn read_opt_timing(path: &Path) -> Result<TimingOutput> {
    if path.is_file() {
        inputs::read_timing_output(path)
    } else {
        Ok(TimingOutput::default())
    }
}

/// The kernels of a program: kernels.tsv (written by `accuracy-report jobs`), the manifests
/// in models/ (of a kernel with programs for several GPUs, the one made for `gpu`, the
/// sweep's GPU, as the runtime picks it), and the sizes in the profile records.
fn load_kernels(paths: &Paths, program: &str, gpu: Option<&str>) -> Result<Vec<Kernel>> {
    let dir = paths.study.join(program);
    let tsv = dir.join("kernels.tsv");
    let text = std::fs::read_to_string(&tsv).with_context(|| {
        format!(
            "reading {} (run bench/accuracy/prepare.sh build, which writes it)",
            tsv.display()
        )
    })?;
    let manifests = if dir.join("models").is_dir() {
        rational::load_dir(&dir.join("models"))?
    } else {
        Vec::new()
    };
    let db = match &paths.profile_db {
        Some(d) if d.is_dir() => Some(ProfileDb::open(d)?),
        _ => None,
    };
    let mut profile_sweeps = Vec::new();
    let pdir = paths.phase("profile").join(program);
    if let Ok(rd) = std::fs::read_dir(&pdir) {
        let mut runs: Vec<PathBuf> = rd.filter_map(|e| e.ok().map(|e| e.path())).collect();
        runs.sort();
        for run in runs {
            if run.join("records").is_dir() {
                profile_sweeps.extend(inputs::read_records(&run.join("records"))?);
            }
        }
    }
    let mut out = Vec::new();
    for (i, l) in text.lines().enumerate() {
        if l.starts_with('#') || l.trim().is_empty() {
            continue;
        }
        let f: Vec<&str> = l.split('\t').collect();
        if f.len() < 5 {
            anyhow::bail!(
                "{}:{}: expected 5 tab-separated fields",
                tsv.display(),
                i + 1
            );
        }
        let mangled = f[1].to_string();
        let mine = || manifests.iter().filter(|(_, m)| m.mangled == mangled);
        let manifest = mine()
            .find(|(_, m)| Some(m.device.name.as_str()) == gpu)
            .or_else(|| mine().next())
            .map(|(_, m)| m.clone());
        let mut profiled: BTreeSet<Vec<i64>> = profile_sweeps
            .iter()
            .filter(|s| s.id == mangled)
            .flat_map(|s| s.samples.iter().map(|x| x.sizes.clone()))
            .collect();
        if let Some(m) = &manifest {
            profiled.extend(m.provenance.profile_sizes.iter().cloned());
        }
        // The entry the rational program was built from: its samples (profiled_best) and
        // the program's own blocks it names (program_profiled; none in older entries).
        let mut program_blocks = Vec::new();
        let from_db = match (&manifest, &db, &paths.profile_db) {
            (Some(m), Some(db), _) => kv::manifest_entry(db, m).map(|e| {
                let p = kv::entry_profile(&e, db);
                program_blocks = e.program;
                p
            }),
            (None, _, _) => Err("no rational program (prepare.sh models not run?)".into()),
            (_, None, Some(d)) => Err(format!("no profile database at {}", d.display())),
            (_, None, None) => Err("no profile database given".into()),
        };
        let profile = from_db.or_else(|why| {
            let found: Vec<&klaraptor_profiler::record::Sample> = profile_sweeps
                .iter()
                .filter(|s| s.id == mangled)
                .flat_map(|s| &s.samples)
                .collect();
            if found.is_empty() {
                Err(why)
            } else {
                Ok(ProfileTimes::from_samples(
                    found,
                    format!(
                        "the profile phase's records ({}/run*/records; {why})",
                        pdir.display()
                    ),
                ))
            }
        });
        out.push(Kernel {
            program: program.to_string(),
            name: f[0].into(),
            mangled,
            dim: f[2]
                .parse()
                .with_context(|| format!("{}:{}: dim", tsv.display(), i + 1))?,
            labels: f[3]
                .split(',')
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect(),
            grid: f[4]
                .split(';')
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect(),
            manifest,
            profiled,
            profile,
            program_blocks,
        });
    }
    Ok(out)
}

fn default_block(dim: u8) -> [u32; 3] {
    if dim >= 2 {
        [32, 8, 1]
    } else {
        [256, 1, 1]
    }
}

fn build_case(
    kernel: &Kernel,
    log_name: &kv::KernelName,
    job: &str,
    sizes: Vec<i64>,
    samples: &[&klaraptor_profiler::record::Sample],
    (decisions, refines): (&[Decision], &Refines),
    [model_out, default_out, variant_out]: [&TimingOutput; 3],
) -> Case {
    let mut case = Case {
        program: kernel.program.clone(),
        kernel: log_name.instance.clone(),
        mangled: kernel.mangled.clone(),
        job: job.to_string(),
        dim: kernel.dim,
        labels: kernel.labels.clone(),
        sizes: sizes.clone(),
        candidates: kernel
            .manifest
            .as_ref()
            .map(|m| m.candidates.len())
            .unwrap_or_else(|| rational::candidates(kernel.dim).len()),
        ..Case::default()
    };
    case.measure(samples.iter().copied());
    // Predictions over every candidate, and the model's own first choice.
    let ranking = kernel
        .manifest
        .as_ref()
        .map(|m| case.predict(m))
        .unwrap_or_default();
    let (model_first, rank_error) = (ranking.first, ranking.error);

    // klaraptor
    let decision = decisions
        .iter()
        .find(|d| log_name.matches(&d.kernel) && d.sizes() == sizes);
    let program_chooses = kernel
        .manifest
        .as_ref()
        .is_some_and(RationalProgram::program_chooses);
    let mut k = Pick::default();
    match decision {
        // The link's decision keeps the program's launch: the runtime launches the program's
        // own shape (the block the run logged, else the one the KLARAPTOR_DISABLE=1 run read
        // back), not the model's first-ranked one.
        _ if program_chooses => {
            let own = default_out.time_of(&kernel.name, &sizes).map(|t| t.block);
            k = kv::program_chooses_pick(decision, own, "the instrumented build's run");
            if decision.is_none() && own.is_none() {
                k.block = Some(default_block(kernel.dim));
                k.how
                    .push_str("; the sample's documented default taken (no choice run)");
                k.flag = Some("no choice run: documented default".into());
            }
        }
        Some(d) => {
            k = klaraptor_program::validate::decision_pick(d, model_first, "the instrumented build")
        }
        None => {
            if let Some(f) = model_first {
                k.block = Some(f);
                k.how = "the rational program's first-ranked shape (manifest; no choice-run log \
                         line for this size)"
                    .into();
                k.flag = Some("no choice run: shape from the manifest".into());
            } else {
                k.how = match (&kernel.manifest, &rank_error) {
                    (None, _) => {
                        "no rational program (no profile, or prepare.sh models not run)".into()
                    }
                    (Some(_), Some(e)) => format!("the rational program could not rank: {e}"),
                    (Some(_), None) => "the rational program allowed no shape".into(),
                };
            }
        }
    }
    // settled: the same run's refinement.
    let (settled, trying) = refines.of(&log_name.names(), &sizes);
    let mut st = kv::settled_pick(settled, trying, "the instrumented build's run");
    // The run's KL_TIME is of the shape its launches ended with: the settled one once the
    // runtime settled, else the model's choice.
    if let Some(t) = model_out.time_of(&kernel.name, &sizes) {
        if st.block == Some(t.block) {
            st.harness_ms = Some(t.median_ms);
            st.harness_launches = Some(t.launches);
        }
        if k.block == Some(t.block) {
            k.harness_ms = Some(t.median_ms);
            k.harness_launches = Some(t.launches);
        } else if k.block.is_some() && decision.is_some() && st.block != Some(t.block) {
            let note = format!("KL_TIME reports block {}", shape_text(t.block));
            k.flag = Some(match k.flag.take() {
                Some(f) => format!("{f}; {note}"),
                None => note,
            });
        }
    }
    case.picks.insert(Method::Klaraptor, k);
    case.picks.insert(Method::Settled, st);

    // profiled_best: the kernel's profile at the nearest profiled size.
    case.picks.insert(
        Method::ProfiledBest,
        kv::profiled_best_pick(
            kernel.profile.as_ref().map_err(String::as_str),
            &kernel.labels,
            &sizes,
        ),
    );
    // program_profiled: the program's own block the study database's entry names, at the
    // nearest profiled size it names one at (no pick where the entry names none).
    if let Ok(p) = &kernel.profile {
        if let Some(pp) =
            kv::program_profiled_pick(p, &kernel.program_blocks, &kernel.labels, &sizes)
        {
            case.picks.insert(Method::ProgramProfiled, pp);
        }
    }

    // default
    let mut d = Pick::default();
    if let Some(t) = default_out.time_of(&kernel.name, &sizes) {
        d.block = Some(t.block);
        d.how = "the program's own shape (KLARAPTOR_DISABLE=1, read back from the device)".into();
        d.harness_ms = Some(t.median_ms);
        d.harness_launches = Some(t.launches);
    } else if let Some(pb) = decision.and_then(|x| x.program_block) {
        d.block = Some(pb);
        d.how = "the program's own shape (program_block of the KLARAPTOR_LOG line)".into();
    } else {
        d.block = Some(default_block(kernel.dim));
        d.how = "the sample's documented default (no choice run for this size)".into();
        d.flag = Some("no choice run: documented default".into());
    }
    case.picks.insert(Method::Default, d);

    // occupancy
    let occ = [model_out, default_out, variant_out]
        .iter()
        .find_map(|o| o.occ_of(&kernel.name));
    let mut o = Pick::default();
    match occ {
        Some(x) => {
            let (b, how) = occupancy_shape(kernel.dim, x.block, &case.measured, OCCUPANCY_API);
            o.block = b;
            o.how = how;
        }
        None => o.how = "no KL_OCC line for this kernel".into(),
    }
    case.picks.insert(Method::Occupancy, o);

    case.time_picks();
    case
}

/// Each compared method's whole-run time of `case` from the job's whole-run files, and the
/// case's whole-run ratios and drift ([`kv::whole_run_pick`], [`Case::time_whole_run`], which
/// `klaraptor validate` uses too). A file's line of the case's key (its mangled name and data
/// values) measures the shape the key was launched with, whichever run it came from (the
/// program's own run measures default, the model's run klaraptor's first choice, a forced run
/// its forced shape; one shape serves every method that picked it); a line whose key was
/// launched with several shapes comes after the others, so that such a run only explains why
/// a shape has no time. Without whole-run files nothing changes (`drifts` stays null).
pub fn time_whole_run(case: &mut Case, runs: &[inputs::WholeRun]) {
    if runs.is_empty() {
        return;
    }
    let forced = forced_runs(case, runs.iter(), |r| {
        // a repeat (WHOLE_RUN_REPEATS) is <stem>.r<k>
        match r.stem.split('.').next().unwrap_or_default() {
            "default" => format!("{}, KLARAPTOR_DISABLE=1", r.source),
            "model" => format!("{}, refinement off", r.source),
            _ => format!("{}, KLARAPTOR_FORCE", r.source),
        }
    });
    if forced.is_empty() {
        for m in Method::COMPARED {
            if let Some(p) = case.picks.get_mut(&m).filter(|p| p.block.is_some()) {
                p.how
                    .push_str("; the job's whole runs did not launch this key: no whole-run time");
            }
        }
        return;
    }
    for m in Method::COMPARED {
        if let Some(p) = case.picks.get_mut(&m) {
            kv::whole_run_pick(p, &forced, &case.mangled, &case.sizes);
        }
    }
    case.time_whole_run();
}

/// The lines of `case`'s key in `runs`, each as a run that forced the shape it launched (a
/// line launched with one shape first; a line of several shapes after them, so that it only
/// explains why a shape has no time); `source` says where a run came from.
fn forced_runs<'a>(
    case: &Case,
    runs: impl Iterator<Item = &'a inputs::WholeRun> + Clone,
    source: impl Fn(&inputs::WholeRun) -> String,
) -> Vec<kv::ForcedRun> {
    let mut forced = Vec::new();
    for mixed in [false, true] {
        for r in runs.clone() {
            for t in &r.times {
                if t.kernel == case.mangled && t.sizes == case.sizes && (t.blocks_seen > 1) == mixed
                {
                    forced.push(kv::ForcedRun {
                        forced: [(case.mangled.clone(), t.block)].into_iter().collect(),
                        times: vec![t.clone()],
                        source: source(r),
                    });
                }
            }
        }
    }
    forced
}

/// The isolated whole-run figures of `case` (after [`time_whole_run`]), from the job's
/// isolated runs (device.sh's `WHOLE_RUN_ISOLATE`): where the plan isolated the case's kernel
/// (`log_name`), each compared method's whole-run time of the key from the reference runs
/// (every kernel with one settled shape forced to it) and the kernel's own isolated runs (it
/// alone with the program's own shape, or left to the model's first choice): only this
/// kernel's shape differs between them, so the caches it starts from do not depend on the
/// method ([`Pick::whole_run_iso_ms`] and the rest, [`Case::settled_vs_min`]). The case
/// records the plan's status of its kernel ([`Case::isolation`]); its `how` texts say what
/// the isolated runs gave.
pub fn time_isolated(case: &mut Case, iso: Option<&inputs::Isolated>, log_name: &kv::KernelName) {
    let Some(iso) = iso else { return };
    let Some(plan) = iso.plan.iter().find(|p| log_name.matches(&p.kernel)) else {
        case.isolation = Some("absent".into());
        if let Some(p) = case.picks.get_mut(&Method::Settled) {
            p.how
                .push_str("; the job's isolation plan does not name this kernel: not isolated");
        }
        return;
    };
    case.isolation = Some(plan.status.clone());
    if plan.status != "isolated" {
        if let Some(p) = case.picks.get_mut(&Method::Settled) {
            p.how.push_str(&format!(
                "; isolated whole runs: none of this kernel ({}: {})",
                plan.status, plan.note
            ));
        }
        return;
    }
    let runs = iso.runs_of(plan);
    let forced = forced_runs(case, runs.into_iter(), |r| {
        let what = match r.stem.split('.').next().unwrap_or_default() {
            "ref" => "every kernel at its settled shape".to_string(),
            s if s.ends_with("-own") => format!("{} at its own shape", plan.kernel),
            s if s.ends_with("-model") => format!("{} at the model's first choice", plan.kernel),
            _ => "KLARAPTOR_FORCE".to_string(),
        };
        format!("{}, {what}", r.source)
    });
    for m in Method::COMPARED {
        let Some(p) = case.picks.get_mut(&m) else {
            continue;
        };
        if p.block.is_none() {
            continue;
        }
        let mut scratch = Pick {
            block: p.block,
            ..Pick::default()
        };
        if forced.is_empty() {
            scratch.how = "; the isolated runs did not launch this key".into();
        } else {
            kv::whole_run_pick(&mut scratch, &forced, &case.mangled, &case.sizes);
        }
        p.whole_run_iso_ms = scratch.whole_run_ms;
        p.whole_run_iso_launch_ms = scratch.whole_run_launch_ms;
        p.whole_run_iso_runs = scratch.whole_run_runs;
        p.whole_run_iso_spread = scratch.whole_run_spread;
        if matches!(m, Method::Settled | Method::Default | Method::Klaraptor) {
            let text = scratch.how.strip_prefix("; ").unwrap_or(&scratch.how);
            p.how.push_str(&format!(
                "; isolated (only {} changes shape between the runs): {text}",
                plan.kernel
            ));
        }
    }
}

/// The labels a kernel's grid formulas mention.
pub fn grid_labels(k: &Kernel) -> Vec<String> {
    let mut out = Vec::new();
    for g in &k.grid {
        for tok in g.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
            if k.labels.iter().any(|l| l == tok) && !out.iter().any(|o: &String| o == tok) {
                out.push(tok.to_string());
            }
        }
    }
    out
}

fn criteria(kernels: &[Kernel], cases: &[Case]) -> Vec<Criteria> {
    let mut out = Vec::new();
    for k in kernels {
        let mine: Vec<&Case> = cases
            .iter()
            .filter(|c| c.program == k.program && c.mangled == k.mangled && !c.measured.is_empty())
            .collect();
        if mine.is_empty() {
            continue;
        }
        let sizes: BTreeSet<&Vec<i64>> = mine.iter().map(|c| &c.sizes).collect();
        let non_pow2 = sizes.iter().any(|s| s.iter().any(|&v| !is_pow2(v)));
        let gl = grid_labels(k);
        let idx: Vec<usize> = gl
            .iter()
            .filter_map(|l| k.labels.iter().position(|x| x == l))
            .collect();
        let grid_factor = if k.profiled.is_empty() || idx.is_empty() {
            None
        } else {
            let maxp: Vec<f64> = idx
                .iter()
                .map(|&i| {
                    k.profiled
                        .iter()
                        .filter_map(|s| s.get(i))
                        .fold(0.0f64, |a, &v| a.max(v as f64))
                })
                .collect();
            sizes
                .iter()
                .map(|s| {
                    idx.iter()
                        .zip(&maxp)
                        .map(|(&i, &m)| s.get(i).map(|&v| v as f64 / m.max(1.0)).unwrap_or(0.0))
                        .fold(f64::INFINITY, f64::min)
                })
                .fold(None, |a: Option<f64>, f| Some(a.map_or(f, |a| a.max(f))))
        };
        out.push(Criteria {
            program: k.program.clone(),
            kernel: kv::KernelName::new(
                &k.name,
                &k.mangled,
                kernels
                    .iter()
                    .filter(|x| x.program == k.program)
                    .map(|x| (x.name.as_str(), x.mangled.as_str())),
            )
            .instance,
            sizes: sizes.len(),
            non_pow2,
            grid_factor,
            grid_labels: gl,
        });
    }
    out
}

fn costs(
    paths: &Paths,
    sizes: &Sizes,
    summaries: &BTreeMap<String, Vec<SummaryRow>>,
) -> Result<Vec<Cost>> {
    let mut out = Vec::new();
    for p in sizes.programs() {
        let mut c = Cost {
            program: p.clone(),
            ..Cost::default()
        };
        let prefix = format!("{p}/");
        for r in summaries.get("profile").into_iter().flatten() {
            if r.id.starts_with(&prefix) && r.ran() {
                c.profile_runs += 1;
                c.profile_wall_s += r.wall_s;
                c.profile_gpu_s += r.gpu_s;
            }
        }
        for r in summaries.get("exhaustive").into_iter().flatten() {
            if r.id.starts_with(&prefix) && r.ran() {
                c.exhaustive_runs += 1;
                c.exhaustive_wall_s += r.wall_s;
                c.exhaustive_gpu_s += r.gpu_s;
            }
        }
        let bt = paths.study.join(&p).join("build-times.tsv");
        if let Ok(text) = std::fs::read_to_string(&bt) {
            let get = |key: &str| -> Option<f64> {
                text.lines()
                    .find_map(|l| l.strip_prefix(key)?.trim().parse().ok())
            };
            if let (Some(plain), Some(model)) = (get("plain_link_s\t"), get("model_link_s\t")) {
                c.fit_s = Some((model - plain).max(0.0));
            }
        }
        out.push(c);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// time_whole_run on CONSTRUCTED launch times: a line measures the shape it was launched
    /// with whichever run wrote it; a mixed line only explains; no files change nothing.
    #[test]
    fn whole_run_times_of_a_case() {
        let lt = |b: [u32; 3], total: f64, seen: u32| kv::LaunchTimes {
            kernel: "_Z1kPf".into(),
            name: "k".into(),
            sizes: vec![4096],
            launches: 4,
            timed: 4,
            total_ms: total,
            first_ms: Some(total / 4.0),
            last_ms: Some(total / 4.0),
            head_ms: Some(total / 4.0),
            tail_ms: Some(total / 4.0),
            min_ms: None,
            max_ms: None,
            trend: Some(0.0),
            block: b,
            grid: [16, 1, 1],
            blocks_seen: seen,
        };
        let run = |stem: &str, times| inputs::WholeRun {
            stem: stem.into(),
            source: format!("choice/p/x1/wholerun/{stem}"),
            times,
        };
        let mut c = Case {
            mangled: "_Z1kPf".into(),
            sizes: vec![4096],
            ..Case::default()
        };
        let pick = |b: [u32; 3]| Pick {
            block: Some(b),
            ..Pick::default()
        };
        c.picks.insert(Method::Default, pick([256, 1, 1]));
        c.picks.insert(Method::Klaraptor, pick([128, 1, 1]));
        c.picks.insert(Method::Occupancy, pick([128, 1, 1]));
        c.picks.insert(Method::Settled, pick([64, 1, 1]));
        let mut none = c.clone();
        time_whole_run(&mut none, &[]);
        assert_eq!(none.drifts, None);
        let mut other = lt([256, 1, 1], 1.0, 1);
        other.sizes = vec![8192];
        let mut miss = c.clone();
        time_whole_run(&mut miss, &[run("default", vec![other])]);
        assert!(miss.picks[&Method::Default]
            .how
            .contains("did not launch this key"));
        let runs = [
            run("default", vec![lt([256, 1, 1], 8.0, 1)]),
            run(
                "model",
                vec![lt([64, 1, 1], 2.0, 2), lt([128, 1, 1], 4.0, 1)],
            ),
        ];
        time_whole_run(&mut c, &runs);
        let r = |m: Method| c.picks[&m].whole_run_ratio;
        assert_eq!(r(Method::Default), Some(0.5));
        assert_eq!(r(Method::Klaraptor), Some(1.0));
        assert_eq!(
            r(Method::Occupancy),
            Some(1.0),
            "one shape serves every method"
        );
        assert_eq!(r(Method::Settled), None);
        assert!(c.picks[&Method::Settled].how.contains("and others"));
        assert!(c.picks[&Method::Default]
            .how
            .contains("KLARAPTOR_DISABLE=1"));
        assert_eq!(c.drifts, Some(false));
    }

    #[test]
    fn grid_labels_of_formulas() {
        let k = Kernel {
            program: "p".into(),
            name: "k".into(),
            mangled: "m".into(),
            dim: 2,
            labels: vec!["NI".into(), "NJ".into(), "NK".into()],
            grid: vec!["ceil(NJ, bx)".into(), "ceil(NI, by)".into()],
            manifest: None,
            profiled: BTreeSet::new(),
            profile: Err("none".into()),
            program_blocks: Vec::new(),
        };
        assert_eq!(grid_labels(&k), ["NJ", "NI"]);
    }
}
