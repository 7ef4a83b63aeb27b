//! The GPU machine's job list (`<study>/jobs.txt`) and the sampling plans it names, made
//! from `sizes.toml` and the kernel specs inside each program's profiling variant.
//!
//! `<study>/<program>/` holds, after `bench/accuracy/prepare.sh build`, the profiling variant
//! `<program>` (the name the recipes run) and the instrumented build `<program>.klaraptor`.
//! This module adds:
//!
//! ```text
//! <program>/kernels.tsv            name, mangled id, dim, data labels, grid formulas
//! <program>/<program>.plan         the default sampling plan (what klaraptor-cc profiles)
//! <program>/<program>.candidates.plan   every candidate shape of every kernel
//! <program>/plans/x<k>.plan        job k's plan: the candidate lines of its sweep kernels
//! <program>/recipes.txt            the profile recipe commands
//! jobs.txt                         one line per job (see JOBS_HEADER)
//! ```

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use klaraptor_profiler::plan;
use klaraptor_program::rational;
use klaraptor_spec::link::{self, LinkSpec};

use crate::sizes::Sizes;

/// The first lines of jobs.txt.
pub const JOBS_HEADER: &str = "\
# klaraptor accuracy study: jobs for bench/accuracy/device.sh (written by accuracy-report jobs)
# phase<TAB>id<TAB>program<TAB>est_s<TAB>plan<TAB>command
#   profile     the variant under the full collector with the default plan (a recipe command)
#   exhaustive  the variant under the time-only collector with the job's candidate plan
#   choice      the instrumented build (<program>.klaraptor), once with KLARAPTOR_LOG and
#               KLARAPTOR_CHOICES=off at --time 20 (device.sh replaces the command's
#               --time 5), once with KLARAPTOR_DISABLE=1 as written; with WHOLE_RUN=1
#               (device.sh's default) again as written per distinct shape (own, model's
#               first choice, settled's forced), every launch timed (KLARAPTOR_LAUNCH_TIMES),
#               and with WHOLE_RUN_ISOLATE=1 (its default) per kernel, only that kernel's
#               shape changed, every other kernel at its settled shape
# Commands run in <study>/<program>/; plans are relative to <study>.
";

/// Seconds the full collector is guessed to spend per shape at a profile size (warm-up,
/// timed runs and the profiler's passes, each after an L2 flush), for the estimates.
pub const PROFILE_S_PER_SHAPE: f64 = 0.04;
/// Seconds a program run costs beyond its kernels (context, inputs, reference check).
pub const RUN_OVERHEAD_S: f64 = 1.5;

/// The kernel specs a profiling variant carries.
pub fn specs_of(binary: &Path) -> Result<Vec<LinkSpec>> {
    let bytes = std::fs::read(binary).with_context(|| {
        format!(
            "reading {} (run bench/accuracy/prepare.sh build first)",
            binary.display()
        )
    })?;
    let specs = link::scan_bytes(&bytes, binary)?;
    if specs.is_empty() {
        bail!(
            "{} holds no klaraptor kernel specs: it is not a binary klaraptor-cc linked",
            binary.display()
        );
    }
    Ok(specs)
}

fn plan_line(spec: &LinkSpec) -> String {
    let shapes: Vec<String> = rational::candidates(spec.dim)
        .iter()
        .map(|b| format!("{}x{}x{}", b[0], b[1], b[2]))
        .collect();
    format!("{} {}\n", spec.mangled, shapes.join(" "))
}

/// One profile job's command, and how many profile sizes it runs.
#[derive(Debug, Clone, PartialEq)]
pub struct Recipe {
    /// What the job runs: a recipe command, with `KLARAPTOR_PROFILE_MAX_SIZES=<n>` before it
    /// where it runs more sizes than the runtime sweeps by default (a `{SIZES}` recipe).
    pub command: String,
    /// The profile sizes it runs (1 for a recipe with `{LABEL}` placeholders and for
    /// `sizes.toml`'s commands).
    pub sizes: usize,
}

/// The profile recipe commands of a program: its annotations' recipes (in order, without
/// repeats; one command per profile size, or one for all of a kernel's sizes where its
/// recipe says `{SIZES}`), then `sizes.toml`'s `[profile.<program>]` ones.
pub fn recipes(program: &str, specs: &[LinkSpec], sizes: &Sizes) -> Result<Vec<Recipe>> {
    let mut out: Vec<Recipe> = Vec::new();
    let mut without = Vec::new();
    for s in specs {
        if s.profile_run.is_none() {
            without.push(s.name.clone());
            continue;
        }
        if s.profile_sizes.is_empty() {
            continue;
        }
        for run in plan::recipe_runs(s)? {
            let command =
                match plan::max_sizes_for(&run, None).filter(|&n| n > plan::DEFAULT_MAX_SIZES) {
                    Some(n) => format!("{}={n} {}", plan::MAX_SIZES_ENV, run.command),
                    None => run.command,
                };
            if !out.iter().any(|r| r.command == command) {
                out.push(Recipe {
                    command,
                    sizes: run.covers.len().max(1),
                });
            }
        }
    }
    if let Some(extra) = sizes.profile.get(program) {
        for cmd in &extra.run {
            if !out.iter().any(|r| &r.command == cmd) {
                out.push(Recipe {
                    command: cmd.clone(),
                    sizes: 1,
                });
            }
        }
    } else if !without.is_empty() {
        bail!(
            "kernel(s) {} of {program} have no profile recipe in their annotation: add \
             [profile.{program}] run = [\"./{program} …\", …] to sizes.toml",
            without.join(", ")
        );
    }
    Ok(out)
}

/// What [`write`] did.
#[derive(Debug, Default)]
pub struct Written {
    pub programs: usize,
    pub jobs: [usize; 3],
    pub est_s: [f64; 3],
    pub jobs_txt: PathBuf,
}

/// Writes the plans, kernel tables, recipes and jobs.txt for `programs` (all of sizes.toml's
/// when empty).
pub fn write(study: &Path, sizes: &Sizes, programs: &[String]) -> Result<Written> {
    let all = sizes.programs();
    for p in programs {
        if !all.contains(p) {
            bail!(
                "{p} has no job in sizes.toml (programs there: {})",
                all.join(", ")
            );
        }
    }
    let chosen: Vec<String> = if programs.is_empty() {
        all
    } else {
        programs.to_vec()
    };
    let mut w = Written::default();
    let mut profile = String::new();
    let mut exhaustive = String::new();
    let mut choice = String::new();
    let numbered = sizes.numbered();
    for p in &chosen {
        let dir = study.join(p);
        let specs = specs_of(&dir.join(p))?;
        w.programs += 1;
        // kernels.tsv
        let mut tsv = String::from("# name\tmangled\tdim\tdata\tgrid\n");
        for s in &specs {
            let _ = writeln!(
                tsv,
                "{}\t{}\t{}\t{}\t{}",
                s.name,
                s.mangled,
                s.dim,
                s.data.join(","),
                s.grid.join(";")
            );
        }
        std::fs::write(dir.join("kernels.tsv"), tsv)?;
        std::fs::write(dir.join(format!("{p}.plan")), plan::plan_file(&specs))?;
        let mut cands = String::from("# every candidate shape (an exhaustive search)\n");
        for s in &specs {
            cands.push_str(&plan_line(s));
        }
        std::fs::write(dir.join(format!("{p}.candidates.plan")), cands)?;
        // Profile jobs.
        let recipes = recipes(p, &specs, sizes)?;
        let commands: Vec<&str> = recipes.iter().map(|r| r.command.as_str()).collect();
        std::fs::write(dir.join("recipes.txt"), commands.join("\n") + "\n")?;
        let shapes_per_run: usize = specs.iter().map(|s| plan::plan_shapes_for(s).len()).sum();
        for (
            i,
            Recipe {
                command: cmd,
                sizes: n_sizes,
            },
        ) in recipes.iter().enumerate()
        {
            check_command(cmd)?;
            // A run of several sizes sweeps the shapes at each of them.
            let est = RUN_OVERHEAD_S + PROFILE_S_PER_SHAPE * (shapes_per_run * n_sizes) as f64;
            let _ = writeln!(
                profile,
                "profile\t{p}/run{}\t{p}\t{est:.1}\t{p}/{p}.plan\t{cmd}",
                i + 1
            );
            w.jobs[0] += 1;
            w.est_s[0] += est;
        }
        // Exhaustive and choice jobs.
        let plans = dir.join("plans");
        std::fs::create_dir_all(&plans)?;
        for nj in numbered.iter().filter(|j| &j.job.program == p) {
            let mut plan = format!(
                "# {}: every candidate shape of {} at `{} {}`\n",
                nj.id,
                nj.job.sweep.join(", "),
                p,
                nj.job.args
            );
            for k in &nj.job.sweep {
                let matching: Vec<&LinkSpec> = specs.iter().filter(|s| &s.name == k).collect();
                if matching.is_empty() {
                    let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
                    bail!(
                        "sizes.toml job {} sweeps {k:?}, which {} does not have (its kernels: {})",
                        nj.id,
                        dir.join(p).display(),
                        names.join(", ")
                    );
                }
                for s in matching {
                    plan.push_str(&plan_line(s));
                }
            }
            std::fs::write(plans.join(format!("{}.plan", nj.stem)), plan)?;
            let _ = writeln!(
                exhaustive,
                "exhaustive\t{}\t{p}\t{:.1}\t{p}/plans/{}.plan\t./{p} {} --time 1",
                nj.id, nj.job.est_s, nj.stem, nj.job.args
            );
            let _ = writeln!(
                choice,
                "choice\t{}\t{p}\t{:.1}\t-\t./{p}.klaraptor {} --time 5",
                nj.id,
                nj.job.choice_est(),
                nj.job.args
            );
            w.jobs[1] += 1;
            w.jobs[2] += 1;
            w.est_s[1] += nj.job.est_s;
            w.est_s[2] += nj.job.choice_est();
        }
    }
    let mut text = String::from(JOBS_HEADER);
    let _ = writeln!(
        text,
        "# estimated seconds: profile {:.0}, exhaustive {:.0}, choice {:.0}",
        w.est_s[0], w.est_s[1], w.est_s[2]
    );
    text.push_str(&profile);
    text.push_str(&exhaustive);
    text.push_str(&choice);
    w.jobs_txt = study.join("jobs.txt");
    std::fs::write(&w.jobs_txt, text)
        .with_context(|| format!("writing {}", w.jobs_txt.display()))?;
    Ok(w)
}

/// A command goes into one TSV field and a shell: no tabs, no newlines.
fn check_command(cmd: &str) -> Result<()> {
    if cmd.contains('\t') || cmd.contains('\n') {
        bail!("recipe command {cmd:?} contains a tab or a newline");
    }
    Ok(())
}

/// One line of jobs.txt.
#[derive(Debug, Clone, PartialEq)]
pub struct JobLine {
    pub phase: String,
    pub id: String,
    pub program: String,
    pub est_s: f64,
    pub plan: Option<String>,
    pub command: String,
}

/// Reads jobs.txt.
pub fn read(path: &Path) -> Result<Vec<JobLine>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut out = Vec::new();
    for (i, l) in text.lines().enumerate() {
        if l.starts_with('#') || l.trim().is_empty() {
            continue;
        }
        let f: Vec<&str> = l.split('\t').collect();
        if f.len() != 6 {
            bail!(
                "{}:{}: expected 6 tab-separated fields, found {}",
                path.display(),
                i + 1,
                f.len()
            );
        }
        out.push(JobLine {
            phase: f[0].into(),
            id: f[1].into(),
            program: f[2].into(),
            est_s: f[3]
                .parse()
                .with_context(|| format!("{}:{}: est_s {:?}", path.display(), i + 1, f[3]))?,
            plan: (f[4] != "-").then(|| f[4].to_string()),
            command: f[5].into(),
        });
    }
    Ok(out)
}
