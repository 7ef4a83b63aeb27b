//! `sizes.toml`: the study's jobs (a program run at some sizes, the kernels to sweep there)
//! and profile recipes for kernels whose annotation has none.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{bail, Context, Result};
use serde::Deserialize;

/// The whole file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sizes {
    /// Program → recipe commands, for kernels whose annotation states no profile recipe.
    #[serde(default)]
    pub profile: BTreeMap<String, ProfileRecipes>,
    #[serde(default)]
    pub job: Vec<Job>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileRecipes {
    pub run: Vec<String>,
}

/// One run of a program.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Job {
    pub program: String,
    /// The program's command-line sizes (and `--steps T`), without `--time`.
    pub args: String,
    /// Kernels (names in the source) the exhaustive phase sweeps in this run.
    pub sweep: Vec<String>,
    /// Estimated wall time of the exhaustive run, seconds.
    pub est_s: f64,
    /// Estimated wall time of the two choice runs together, seconds (default 3).
    #[serde(default)]
    pub choice_est_s: Option<f64>,
    #[serde(default)]
    pub note: Option<String>,
}

/// A job with its id, `<program>/x<k>` (k counts the program's jobs from 1, in file order).
#[derive(Debug, Clone)]
pub struct NumberedJob {
    pub id: String,
    /// `x<k>`: the file stem of its plan and its directory under the program's.
    pub stem: String,
    pub job: Job,
}

/// Default estimate of the two choice runs of a job (`--time 20` and `--time 5`), seconds.
pub const CHOICE_EST_S: f64 = 3.5;

impl Sizes {
    pub fn load(path: &Path) -> Result<Sizes> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        Self::parse(&text).with_context(|| format!("in {}", path.display()))
    }

    pub fn parse(text: &str) -> Result<Sizes> {
        let s: Sizes = toml::from_str(text)?;
        for (i, j) in s.job.iter().enumerate() {
            j.check().with_context(|| {
                format!("[[job]] number {} ({} {:?})", i + 1, j.program, j.args)
            })?;
        }
        for (p, r) in &s.profile {
            check_program(p)?;
            if r.run.is_empty() {
                bail!("[profile.{p}] has an empty run list");
            }
        }
        Ok(s)
    }

    /// The jobs with their ids.
    pub fn numbered(&self) -> Vec<NumberedJob> {
        let mut count: BTreeMap<&str, usize> = BTreeMap::new();
        self.job
            .iter()
            .map(|j| {
                let k = count.entry(j.program.as_str()).or_insert(0);
                *k += 1;
                let stem = format!("x{k}");
                NumberedJob {
                    id: format!("{}/{stem}", j.program),
                    stem,
                    job: j.clone(),
                }
            })
            .collect()
    }

    /// The programs, in the order of their first job.
    pub fn programs(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for j in &self.job {
            if !out.contains(&j.program) {
                out.push(j.program.clone());
            }
        }
        out
    }
}

fn check_program(p: &str) -> Result<()> {
    if p.is_empty()
        || !p
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        bail!("program name {p:?}: use letters, digits, '-' and '_' (it names a directory)");
    }
    Ok(())
}

impl Job {
    fn check(&self) -> Result<()> {
        check_program(&self.program)?;
        let mut toks = self.args.split_whitespace();
        let mut sizes = 0;
        while let Some(t) = toks.next() {
            if t == "--steps" {
                match toks.next().map(str::parse::<u64>) {
                    Some(Ok(n)) if n >= 1 => {}
                    _ => bail!("args: --steps needs a positive count"),
                }
            } else if t == "--time" {
                bail!("args: leave --time out (the phases add --time 1 or --time 5)");
            } else if t.parse::<u64>().is_ok_and(|v| v >= 1) {
                sizes += 1;
            } else {
                bail!("args: {t:?} is neither a positive size nor --steps T");
            }
        }
        if sizes == 0 {
            bail!("args: no size given");
        }
        if self.sweep.is_empty() {
            bail!("sweep: name at least one kernel");
        }
        if !(self.est_s > 0.0 && self.est_s.is_finite()) {
            bail!("est_s must be a positive number of seconds");
        }
        if let Some(c) = self.choice_est_s {
            if !(c > 0.0 && c.is_finite()) {
                bail!("choice_est_s must be a positive number of seconds");
            }
        }
        Ok(())
    }

    pub fn choice_est(&self) -> f64 {
        self.choice_est_s.unwrap_or(CHOICE_EST_S)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbering_is_per_program() {
        let s = Sizes::parse(
            r#"
[[job]]
program = "a"
args = "10"
sweep = ["k"]
est_s = 1
[[job]]
program = "b"
args = "10 20 --steps 1"
sweep = ["k"]
est_s = 1
[[job]]
program = "a"
args = "30"
sweep = ["k"]
est_s = 2
choice_est_s = 7
"#,
        )
        .unwrap();
        let ids: Vec<String> = s.numbered().into_iter().map(|j| j.id).collect();
        assert_eq!(ids, ["a/x1", "b/x1", "a/x2"]);
        assert_eq!(s.programs(), ["a", "b"]);
        assert_eq!(s.job[2].choice_est(), 7.0);
        assert_eq!(s.job[0].choice_est(), CHOICE_EST_S);
    }

    #[test]
    fn bad_jobs_are_refused_with_their_number() {
        for (args, why) in [
            ("10 --time 5", "leave --time out"),
            ("", "no size"),
            ("10 x", "neither"),
            ("10 --steps", "--steps needs"),
        ] {
            let text = format!(
                "[[job]]\nprogram = \"a\"\nargs = \"{args}\"\nsweep = [\"k\"]\nest_s = 1\n"
            );
            let e = format!("{:#}", Sizes::parse(&text).unwrap_err());
            assert!(e.contains("number 1") && e.contains(why), "{e}");
        }
        let e = Sizes::parse("[[job]]\nprogram = \"a\"\nargs = \"1\"\nsweep = []\nest_s = 1\n")
            .unwrap_err();
        assert!(format!("{e:#}").contains("at least one kernel"));
        let e =
            Sizes::parse("[[job]]\nprogram = \"a/b\"\nargs = \"1\"\nsweep = [\"k\"]\nest_s = 1\n")
                .unwrap_err();
        assert!(format!("{e:#}").contains("names a directory"));
        assert!(Sizes::parse("[[job]]\nprogram = \"a\"\nargz = \"1\"\n").is_err());
    }

    #[test]
    fn the_idioms_sizes_parse() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("sizes-idioms.toml");
        let s = Sizes::load(&path).unwrap();
        let mut seen = std::collections::BTreeSet::new();
        for j in &s.job {
            assert!(
                seen.insert((j.program.clone(), j.args.clone())),
                "{j:?} twice"
            );
        }
        // Every program of samples/idioms has jobs, at least three each.
        let mk = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../samples/idioms/Makefile"),
        )
        .unwrap();
        let progs = mk
            .lines()
            .find_map(|l| l.strip_prefix("PROGRAMS := "))
            .unwrap();
        for p in progs.split_whitespace() {
            let n = s.job.iter().filter(|j| j.program == p).count();
            assert!(n >= 3, "{p}: {n} jobs in sizes-idioms.toml");
        }
        // The fourth batch (issue 38, split.toml's `fourth_batch`) is swept in a device call
        // of its own; the rest together, as before. Each must fit in about 6 minutes.
        let split: toml::Value = toml::from_str(
            &std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("split.toml"))
                .unwrap(),
        )
        .unwrap();
        let fourth: Vec<&str> = split["idioms"]["fourth_batch"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        for (name, in_fourth) in [("the fourth batch", true), ("the others", false)] {
            let total: f64 = s
                .job
                .iter()
                .filter(|j| fourth.contains(&j.program.as_str()) == in_fourth)
                .map(|j| j.est_s)
                .sum();
            assert!(
                total > 0.0 && total < 360.0,
                "the idioms' exhaustive phase for {name} is estimated at {total} s"
            );
        }
    }

    #[test]
    fn the_committed_sizes_parse() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("sizes.toml");
        let s = Sizes::load(&path).unwrap();
        assert!(s.job.len() >= 60);
        assert!(s.profile.contains_key("jacobi1d") && s.profile.contains_key("jacobi2d"));
        // Unique (program, args): each job is a distinct run.
        let mut seen = std::collections::BTreeSet::new();
        for j in &s.job {
            assert!(
                seen.insert((j.program.clone(), j.args.clone())),
                "{j:?} twice"
            );
        }
    }
}
