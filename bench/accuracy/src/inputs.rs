//! Readers for what the GPU machine leaves (bench/accuracy/device.sh) and what the build
//! machine keeps in the study directory.
//!
//! ```text
//! <device>/<phase>/env.txt          nvidia-smi line, nvcc --version, date (klaraptor import's format)
//! <device>/<phase>/summary.tsv      id, rc, wall_s, gpu_s, est_s per job
//! <device>/profile/<p>/run<i>/records/           the collector's records (kernels.tsv, <stem>.jsonl)
//! <device>/exhaustive/<p>/x<k>/records/          the time-only sweeps, same format
//! <device>/exhaustive/<p>/x<k>/stdout.txt        the variant's own KL_TIME/KL_OCC lines
//! <device>/choice/<p>/x<k>/model.log             KLARAPTOR_LOG of the instrumented build
//! <device>/choice/<p>/x<k>/model.out, default.out   its --time 5 output, with and without
//!                                                   KLARAPTOR_DISABLE=1
//! <device>/choice/<p>/x<k>/wholerun/<stem>.times.jsonl   whole runs, every launch timed
//!                                                   (WHOLE_RUN=1; [`read_whole_runs`])
//! <device>/choice/<p>/x<k>/isolated/plan.tsv, <stem>.times.jsonl   the isolated whole runs
//!                                                   (WHOLE_RUN_ISOLATE=1; [`read_isolated`])
//! ```

use std::path::Path;

use anyhow::{bail, Context, Result};
use klaraptor_program::validate::parse_block;
pub use klaraptor_program::validate::{
    parse_decision, read_decisions, read_records, Decision, Sweep,
};

/// The machine a phase ran on (env.txt).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Env {
    pub gpu: String,
    pub uuid: String,
    pub cc: String,
    pub driver: String,
    /// "13.0, V13.0.88" from nvcc's "release" line.
    pub cuda: String,
    /// ISO 8601 UTC, e.g. 2026-11-23T10:00:00Z.
    pub date: String,
}

impl Env {
    /// YYYY-MM-DD of the date.
    pub fn day(&self) -> &str {
        self.date.get(..10).unwrap_or(&self.date)
    }
}

pub fn read_env(path: &Path) -> Result<Env> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    parse_env(&text).with_context(|| format!("in {}", path.display()))
}

pub fn parse_env(text: &str) -> Result<Env> {
    let mut lines = text.lines();
    let first = lines.next().unwrap_or("");
    let f: Vec<&str> = first.split(',').map(str::trim).collect();
    if f.len() < 4 {
        bail!(
            "the first line should be `nvidia-smi --query-gpu=name,uuid,compute_cap,\
             driver_version --format=csv,noheader`, not {first:?}"
        );
    }
    let mut env = Env {
        gpu: f[0].into(),
        uuid: f[1].into(),
        cc: f[2].into(),
        driver: f[3].into(),
        ..Env::default()
    };
    for l in lines {
        let l = l.trim();
        if let Some(v) = l.split("release ").nth(1) {
            env.cuda = v.trim().to_string();
        } else if l.len() == 20 && l.ends_with('Z') && l.as_bytes()[10] == b'T' {
            env.date = l.to_string();
        }
    }
    if env.date.is_empty() {
        bail!("no date line (date -u +%Y-%m-%dT%H:%M:%SZ)");
    }
    Ok(env)
}

/// One line of a phase's summary.tsv.
#[derive(Debug, Clone, PartialEq)]
pub struct SummaryRow {
    pub id: String,
    /// Exit status(es) as device.sh wrote them ("0", "124", "0,0" for the two choice runs,
    /// "skipped").
    pub rc: String,
    pub wall_s: f64,
    /// Kernel time the job measured (sum over its timed and warm-up launches), seconds.
    pub gpu_s: f64,
    pub est_s: f64,
}

impl SummaryRow {
    pub fn ran(&self) -> bool {
        self.rc != "skipped"
    }
}

pub fn read_summary(path: &Path) -> Result<Vec<SummaryRow>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut out = Vec::new();
    for (i, l) in text.lines().enumerate() {
        if l.starts_with('#') || l.trim().is_empty() {
            continue;
        }
        let f: Vec<&str> = l.split('\t').collect();
        let num = |s: &str| -> Result<f64> {
            s.trim()
                .parse::<f64>()
                .with_context(|| format!("{}:{}: {s:?} is not a number", path.display(), i + 1))
        };
        if f.len() < 5 {
            bail!(
                "{}:{}: expected id, rc, wall_s, gpu_s, est_s (tab-separated)",
                path.display(),
                i + 1
            );
        }
        out.push(SummaryRow {
            id: f[0].into(),
            rc: f[1].into(),
            wall_s: num(f[2])?,
            gpu_s: num(f[3])?,
            est_s: num(f[4])?,
        });
    }
    Ok(out)
}

/// Every `summary*.tsv` of a phase directory (device.sh writes one per call), merged in file
/// name order: a job's later row replaces its earlier one, except that a skipped row never
/// replaces a row of a run.
pub fn read_summaries(dir: &Path) -> Result<Vec<SummaryRow>> {
    let mut files: Vec<std::path::PathBuf> = match std::fs::read_dir(dir) {
        Ok(rd) => rd
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("summary") && n.ends_with(".tsv"))
            })
            .collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("reading {}", dir.display())),
    };
    files.sort();
    let mut out: Vec<SummaryRow> = Vec::new();
    for f in files {
        for r in read_summary(&f)? {
            match out.iter_mut().find(|o| o.id == r.id) {
                Some(o) => {
                    if r.ran() || !o.ran() {
                        *o = r;
                    }
                }
                None => out.push(r),
            }
        }
    }
    Ok(out)
}

fn field<'a>(tok: &'a str, key: &str) -> Option<&'a str> {
    tok.strip_prefix(key)?.strip_prefix('=')
}

/// `KL_TIME <kernel> <d1>x<d2>... median_ms=<t> block=<bx>x<by>x<bz> launches=<k>`
#[derive(Debug, Clone, PartialEq)]
pub struct KlTime {
    pub kernel: String,
    pub dims: Vec<i64>,
    pub median_ms: f64,
    pub block: [u32; 3],
    pub launches: u64,
}

/// `None` for a line that is not a KL_TIME line.
pub fn parse_kl_time(line: &str) -> Option<Result<KlTime>> {
    let rest = line.strip_prefix("KL_TIME ")?;
    Some(
        (|| -> Result<KlTime> {
            let t: Vec<&str> = rest.split_whitespace().collect();
            if t.len() != 5 {
                bail!("expected `KL_TIME <kernel> <dims> median_ms=… block=… launches=…`");
            }
            let dims = t[1]
                .split('x')
                .map(|d| d.parse::<i64>())
                .collect::<Result<Vec<_>, _>>()
                .with_context(|| format!("dims {:?}", t[1]))?;
            let median_ms = field(t[2], "median_ms")
                .and_then(|v| v.parse().ok())
                .with_context(|| format!("median_ms in {:?}", t[2]))?;
            let block = field(t[3], "block")
                .and_then(parse_block)
                .with_context(|| format!("block in {:?}", t[3]))?;
            let launches = field(t[4], "launches")
                .and_then(|v| v.parse().ok())
                .with_context(|| format!("launches in {:?}", t[4]))?;
            Ok(KlTime {
                kernel: t[0].into(),
                dims,
                median_ms,
                block,
                launches,
            })
        })()
        .with_context(|| format!("in the line {line:?}")),
    )
}

/// `KL_OCC <kernel> block=<n> min_grid=<g>`
#[derive(Debug, Clone, PartialEq)]
pub struct KlOcc {
    pub kernel: String,
    pub block: u32,
    pub min_grid: u32,
}

pub fn parse_kl_occ(line: &str) -> Option<Result<KlOcc>> {
    let rest = line.strip_prefix("KL_OCC ")?;
    Some(
        (|| -> Result<KlOcc> {
            let t: Vec<&str> = rest.split_whitespace().collect();
            if t.len() != 3 {
                bail!("expected `KL_OCC <kernel> block=<n> min_grid=<g>`");
            }
            Ok(KlOcc {
                kernel: t[0].into(),
                block: field(t[1], "block")
                    .and_then(|v| v.parse().ok())
                    .context("block=")?,
                min_grid: field(t[2], "min_grid")
                    .and_then(|v| v.parse().ok())
                    .context("min_grid=")?,
            })
        })()
        .with_context(|| format!("in the line {line:?}")),
    )
}

/// The KL_TIME and KL_OCC lines of a program's output.
#[derive(Debug, Clone, Default)]
pub struct TimingOutput {
    pub times: Vec<KlTime>,
    pub occ: Vec<KlOcc>,
}

impl TimingOutput {
    pub fn time_of(&self, kernel: &str, dims: &[i64]) -> Option<&KlTime> {
        self.times
            .iter()
            .find(|t| t.kernel == kernel && t.dims == dims)
    }
    pub fn occ_of(&self, kernel: &str) -> Option<&KlOcc> {
        self.occ.iter().find(|o| o.kernel == kernel)
    }
}

pub fn read_timing_output(path: &Path) -> Result<TimingOutput> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut out = TimingOutput::default();
    for (i, l) in text.lines().enumerate() {
        let at = || format!("{}:{}", path.display(), i + 1);
        if let Some(t) = parse_kl_time(l) {
            out.times.push(t.with_context(at)?);
        } else if let Some(o) = parse_kl_occ(l) {
            out.occ.push(o.with_context(at)?);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_run_files_in_order() {
        let tmp = tempfile::tempdir().unwrap();
        assert!(read_whole_runs(tmp.path(), "choice/p/x1")
            .unwrap()
            .is_empty());
        let w = tmp.path().join("wholerun");
        std::fs::create_dir_all(&w).unwrap();
        for stem in ["f10", "f2", "model", "default", "extra"] {
            std::fs::write(w.join(format!("{stem}.times.jsonl")), "\n").unwrap();
        }
        std::fs::write(w.join("f2.force"), "k 64x1x1\n").unwrap();
        let runs = read_whole_runs(tmp.path(), "choice/p/x1").unwrap();
        let stems: Vec<&str> = runs.iter().map(|r| r.stem.as_str()).collect();
        assert_eq!(stems, ["default", "model", "f2", "f10", "extra"]);
        assert_eq!(runs[2].source, "choice/p/x1/wholerun/f2");
        std::fs::write(w.join("bad.times.jsonl"), "nonsense\n").unwrap();
        assert!(read_whole_runs(tmp.path(), "choice/p/x1").is_err());
    }

    #[test]
    fn isolated_runs_by_kernel() {
        let tmp = tempfile::tempdir().unwrap();
        assert_eq!(read_isolated(tmp.path(), "choice/p/x1").unwrap(), None);
        let d = tmp.path().join("isolated");
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(
            d.join("plan.tsv"),
            "# kernel\tstem\tkeys\town\tmodel\tsettled\tstatus\tnote\n\
             a\tiso-a\t1\t256x1x1\t8x1x1\t8x1x1\tisolated\t\n\
             a_b\tiso-a_b\t1\t256x1x1\t8x1x1\t64x1x1\tisolated\t\n\
             c\t-\t2\t256x1x1\t8x1x1,16x1x1\t8x1x1,16x1x1\tmixed\tits keys settled on different shapes\n",
        )
        .unwrap();
        for stem in [
            "ref.r10",
            "ref.r2",
            "ref",
            "iso-a-own",
            "iso-a-own.r2",
            "iso-a_b-model",
        ] {
            std::fs::write(d.join(format!("{stem}.times.jsonl")), "\n").unwrap();
        }
        let iso = read_isolated(tmp.path(), "choice/p/x1").unwrap().unwrap();
        assert_eq!(iso.plan.len(), 3);
        assert_eq!(iso.plan[2].stem, None);
        assert_eq!(iso.plan[2].status, "mixed");
        let stems = |v: Vec<&WholeRun>| v.iter().map(|r| r.stem.clone()).collect::<Vec<_>>();
        assert_eq!(
            stems(iso.runs_of(&iso.plan[0])),
            ["ref", "ref.r2", "ref.r10", "iso-a-own", "iso-a-own.r2"]
        );
        assert_eq!(
            stems(iso.runs_of(&iso.plan[1])),
            ["ref", "ref.r2", "ref.r10", "iso-a_b-model"]
        );
        assert!(iso.runs_of(&iso.plan[2]).is_empty());
        assert_eq!(iso.reference[0].source, "choice/p/x1/isolated/ref");
        std::fs::write(d.join("plan.tsv"), "a\tiso-a\n").unwrap();
        assert!(read_isolated(tmp.path(), "choice/p/x1").is_err());
    }

    #[test]
    fn env_lines() {
        let e = parse_env(
            "NVIDIA H200, GPU-85849941-3ec6-b15c-b8d9-73421661c834, 9.0, 580.159.04\n\
             nvcc: NVIDIA (R) Cuda compiler driver\n\
             Cuda compilation tools, release 13.0, V13.0.88\n\
             Build cuda_13.0.r13.0/compiler.36424714_0\n\
             2026-11-23T10:11:12Z\n",
        )
        .unwrap();
        assert_eq!(e.gpu, "NVIDIA H200");
        assert_eq!(e.cc, "9.0");
        assert_eq!(e.driver, "580.159.04");
        assert_eq!(e.cuda, "13.0, V13.0.88");
        assert_eq!(e.day(), "2026-11-23");
        assert!(parse_env("NVIDIA H200\n2026-11-23T10:11:12Z\n").is_err());
        assert!(parse_env("a, b, c, d\n").is_err());
    }

    #[test]
    fn kl_time_and_occ() {
        let t =
            parse_kl_time("KL_TIME gemm 1000x1000x1000 median_ms=0.412000 block=32x8x1 launches=1")
                .unwrap()
                .unwrap();
        assert_eq!(t.kernel, "gemm");
        assert_eq!(t.dims, [1000, 1000, 1000]);
        assert_eq!(t.median_ms, 0.412);
        assert_eq!(t.block, [32, 8, 1]);
        assert_eq!(t.launches, 1);
        assert!(parse_kl_time("KL_TIMEX").is_none());
        assert!(
            parse_kl_time("KL_TIME gemm 1000 median_ms=x block=1x1x1 launches=1")
                .unwrap()
                .is_err()
        );
        let o = parse_kl_occ("KL_OCC gemm block=768 min_grid=264")
            .unwrap()
            .unwrap();
        assert_eq!((o.block, o.min_grid), (768, 264));
        assert!(parse_kl_occ("KL_OCC gemm block=768").unwrap().is_err());
    }

    #[test]
    fn summary_rows() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("summary-20260101T000000.tsv");
        std::fs::write(
            &p,
            "# id\trc\twall_s\tgpu_s\test_s\ngemm/x1\t0\t2.5\t1.25\t2.6\ngemm/x2\tskipped\t0\t0\t2.7\n",
        )
        .unwrap();
        let r = read_summary(&p).unwrap();
        assert_eq!(r.len(), 2);
        assert!(r[0].ran() && !r[1].ran());
        assert_eq!(r[0].gpu_s, 1.25);
        // Two calls merged: a rerun replaces, a skip does not.
        std::fs::write(
            dir.path().join("summary-20260101T000001.tsv"),
            "gemm/x2\t0\t3\t2\t2.7\ngemm/x1\tskipped\t0\t0\t2.6\ngemm/x3\t124\t9\t1\t4\n",
        )
        .unwrap();
        let m = read_summaries(dir.path()).unwrap();
        let ids: Vec<(&str, &str)> = m.iter().map(|r| (r.id.as_str(), r.rc.as_str())).collect();
        assert_eq!(
            ids,
            [("gemm/x1", "0"), ("gemm/x2", "0"), ("gemm/x3", "124")]
        );
        assert_eq!(m[1].wall_s, 3.0);
        assert!(read_summaries(&dir.path().join("nope")).unwrap().is_empty());
        std::fs::write(&p, "gemm/x1\t0\tslow\t1\t1\n").unwrap();
        let e = format!("{:#}", read_summary(&p).unwrap_err());
        assert!(e.contains("T000000.tsv:1") && e.contains("\"slow\""), "{e}");
    }
}

/// One whole-run launch-times file of a choice job (`choice/<p>/x<k>/wholerun/<stem>.times.jsonl`,
/// device.sh with `WHOLE_RUN=1`): the instrumented build run once more with every launch of
/// an annotated kernel timed (`KLARAPTOR_LAUNCH_TIMES`), under `KLARAPTOR_DISABLE=1`
/// (`default`), with refinement and the choices cache off (`model`) or with shapes forced
/// (`f<j>`, `KLARAPTOR_FORCE`).
#[derive(Debug, Clone, PartialEq)]
pub struct WholeRun {
    /// The file's stem (`default`, `model`, `f1`, …).
    pub stem: String,
    /// Where it came from, for the records' `how` (`choice/<p>/x<k>/wholerun/<stem>`).
    pub source: String,
    pub times: Vec<klaraptor_program::validate::LaunchTimes>,
}

/// The whole-run files of a choice job's directory, `default` first, then `model`, then the
/// forced runs in their order (`f1`, `f2`, …), then any other; none without `wholerun/` (a
/// choice phase run with `WHOLE_RUN=0`, or by a device.sh before the whole-run measurement).
/// `label` names the job directory in the sources (`choice/<p>/x<k>`). A run killed by its
/// timeout writes no file (the runtime writes at exit): it is simply absent.
pub fn read_whole_runs(job_dir: &Path, label: &str) -> Result<Vec<WholeRun>> {
    let dir = job_dir.join("wholerun");
    let Ok(rd) = std::fs::read_dir(&dir) else {
        return Ok(Vec::new());
    };
    let mut stems = Vec::new();
    for e in rd {
        let name = e?.file_name().to_string_lossy().into_owned();
        if let Some(stem) = name.strip_suffix(".times.jsonl") {
            stems.push(stem.to_string());
        }
    }
    let order = |s: &str| -> (u8, u64, String) {
        // repeats (<stem>.r<k>) after every first run
        if s.contains('.') {
            return (4, 0, s.to_string());
        }
        match s {
            "default" => (0, 0, String::new()),
            "model" => (1, 0, String::new()),
            _ => match s.strip_prefix('f').and_then(|j| j.parse::<u64>().ok()) {
                Some(j) => (2, j, String::new()),
                None => (3, 0, s.to_string()),
            },
        }
    };
    stems.sort_by_key(|s| order(s));
    read_runs(&dir, &format!("{label}/wholerun"), stems)
}

/// The launch-times files `<stem>.times.jsonl` of `dir`, in the order of `stems`; `label`
/// names `dir` in the sources.
fn read_runs(dir: &Path, label: &str, stems: Vec<String>) -> Result<Vec<WholeRun>> {
    let mut out = Vec::new();
    for stem in stems {
        let p = dir.join(format!("{stem}.times.jsonl"));
        let text =
            std::fs::read_to_string(&p).with_context(|| format!("reading {}", p.display()))?;
        let times = klaraptor_program::validate::parse_launch_times(&text)
            .with_context(|| format!("{}", p.display()))?;
        out.push(WholeRun {
            source: format!("{label}/{stem}"),
            stem,
            times,
        });
    }
    Ok(out)
}

/// One kernel's line of a choice job's `isolated/plan.tsv` (device.sh's
/// `WHOLE_RUN_ISOLATE`): how the isolated whole runs treat it.
#[derive(Debug, Clone, PartialEq)]
pub struct IsolationPlan {
    /// The kernel as the log names it (what KLARAPTOR_FORCE takes).
    pub kernel: String,
    /// The stem of its isolated runs (`iso-<kernel>`, the runs `iso-<kernel>-own` and
    /// `iso-<kernel>-model`, each with repeats `.r<k>`); `None` (`-`) when it has none.
    pub stem: Option<String>,
    /// How many keys (data sizes) of it the job's log has.
    pub keys: u32,
    /// Its own shape, the model's first choice and the settled shape over those keys (one
    /// shape, several joined by commas, `-` for none), as the log says.
    pub own: String,
    pub model: String,
    pub settled: String,
    /// `isolated` (it has runs of its own), `alone` (the only kernel of the job whose shape
    /// differs between the methods: the all-at-once whole runs vary it alone), `same` (its
    /// three shapes are one), `mixed` (its keys settled on different shapes: KLARAPTOR_FORCE
    /// is per kernel), `unsettled` (no key of it settled).
    pub status: String,
    /// Why, in words (for the report).
    pub note: String,
}

/// A choice job's isolated whole runs (`isolated/`): the plan, the reference runs (`ref`,
/// `ref.r<k>`: every kernel with one settled shape forced to it) and each isolated kernel's
/// runs (`iso-<kernel>-own`, `iso-<kernel>-model`, repeats `.r<k>`: that kernel with the
/// method's shape, every other one as in the reference).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Isolated {
    pub plan: Vec<IsolationPlan>,
    /// The reference runs.
    pub reference: Vec<WholeRun>,
    /// The other runs, in the order of their stems.
    pub runs: Vec<WholeRun>,
}

impl Isolated {
    /// The runs that measure kernel `plan`'s shapes like with like: the reference runs and
    /// its own isolated runs; none unless it was isolated.
    pub fn runs_of<'a>(&'a self, plan: &IsolationPlan) -> Vec<&'a WholeRun> {
        let Some(stem) = &plan.stem else {
            return Vec::new();
        };
        let prefix = format!("{stem}-");
        self.reference
            .iter()
            .chain(self.runs.iter().filter(|r| r.stem.starts_with(&prefix)))
            .collect()
    }
}

/// Parses `isolated/plan.tsv`: `# kernel stem keys own model settled status note`, one
/// kernel a line.
pub fn parse_isolation_plan(text: &str) -> Result<Vec<IsolationPlan>> {
    let mut out = Vec::new();
    for (i, l) in text.lines().enumerate() {
        if l.trim().is_empty() || l.starts_with('#') {
            continue;
        }
        let f: Vec<&str> = l.split('\t').collect();
        if f.len() < 7 {
            bail!(
                "line {}: expected kernel, stem, keys, own, model, settled, status[, note] \
                 separated by tabs, not {l:?}",
                i + 1
            );
        }
        out.push(IsolationPlan {
            kernel: f[0].to_string(),
            stem: (f[1] != "-").then(|| f[1].to_string()),
            keys: f[2]
                .parse()
                .with_context(|| format!("line {}: keys {:?}", i + 1, f[2]))?,
            own: f[3].to_string(),
            model: f[4].to_string(),
            settled: f[5].to_string(),
            status: f[6].to_string(),
            note: f.get(7).unwrap_or(&"").to_string(),
        });
    }
    Ok(out)
}

/// A choice job's isolated whole runs; `None` without `isolated/plan.tsv` (a choice phase
/// run with `WHOLE_RUN_ISOLATE=0` or `WHOLE_RUN=0`, or before the isolated runs). `label`
/// names the job directory in the sources (`choice/<p>/x<k>`).
pub fn read_isolated(job_dir: &Path, label: &str) -> Result<Option<Isolated>> {
    let dir = job_dir.join("isolated");
    let plan_path = dir.join("plan.tsv");
    if !plan_path.is_file() {
        return Ok(None);
    }
    let text = std::fs::read_to_string(&plan_path)
        .with_context(|| format!("reading {}", plan_path.display()))?;
    let plan = parse_isolation_plan(&text).with_context(|| format!("{}", plan_path.display()))?;
    let mut stems = Vec::new();
    for e in std::fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))? {
        let name = e?.file_name().to_string_lossy().into_owned();
        if let Some(stem) = name.strip_suffix(".times.jsonl") {
            stems.push(stem.to_string());
        }
    }
    // the repeats (<stem>.r<k>) in their order, after the first
    let order = |s: &str| -> (String, u64) {
        match s
            .rsplit_once(".r")
            .and_then(|(a, k)| Some((a, k.parse().ok()?)))
        {
            Some((a, k)) => (a.to_string(), k),
            None => (s.to_string(), 1),
        }
    };
    stems.sort_by_key(|s| order(s));
    let (reference, runs): (Vec<String>, Vec<String>) =
        stems.into_iter().partition(|s| order(s).0 == "ref");
    let label = format!("{label}/isolated");
    Ok(Some(Isolated {
        plan,
        reference: read_runs(&dir, &label, reference)?,
        runs: read_runs(&dir, &label, runs)?,
    }))
}
