//! The collector's GPU check (bench/gpu/collector/run.sh) in two commands:
//!
//!   compare_ncu metrics [CHIP]
//!       prints, comma-separated, the metrics the collector reads on CHIP (default GH100) as
//!       this machine's libcupti resolves the table, plus those ncu needs for the other fields.
//!   compare_ncu compare <collector dir> <ncu.csv> [<no-flush collector dir>]
//!       joins the collector's JSON lines (<dir>/<kernel>.jsonl, <dir>/expected.tsv) with
//!       ncu's CSV (`--csv --print-units base --print-kernel-base function`) and prints a
//!       Markdown comparison per kernel, shape and metric.

use klaraptor_collector::collect::resolve_on_chip;
use klaraptor_collector::cupti::CuptiLib;
use klaraptor_collector::load;
use klaraptor_collector::metrics::{self, Hardware, Resolved, TABLE};
use klaraptor_profiler::record::Sample;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// ncu metrics for the fields the range profiler does not give.
const NCU_EXTRA: [&str; 3] = [
    "gpu__time_duration.sum",
    "launch__registers_per_thread",
    "launch__shared_mem_per_block_static",
];

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("metrics") => print_metrics(args.get(1).map_or("GH100", String::as_str)),
        Some("compare") if args.len() == 3 || args.len() == 4 => compare(
            Path::new(&args[1]),
            Path::new(&args[2]),
            args.get(3).map(PathBuf::from),
        ),
        _ => Err(
            "usage: compare_ncu metrics [CHIP] | compare_ncu compare <collector dir> \
                  <ncu.csv> [<no-flush collector dir>]"
                .to_string(),
        ),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("compare_ncu: {e}");
            ExitCode::FAILURE
        }
    }
}

fn print_metrics(chip: &str) -> Result<(), String> {
    let lib =
        CuptiLib::open(&load::cupti_candidates(&load::process_env)).map_err(|e| e.to_string())?;
    let resolved = resolve_on_chip(&lib, chip, None).map_err(|e| e.to_string())?;
    let config =
        klaraptor_collector::cupti::MetricConfig::new(&lib, chip, None, &resolved.metric_names())
            .map_err(|e| e.to_string())?;
    eprintln!(
        "compare_ncu: {} metrics on {chip}, {} range-profiler pass(es), libcupti {}",
        resolved.metric_names().len(),
        config.passes(),
        lib.path().display()
    );
    let mut all: Vec<&str> = resolved.metric_names();
    all.extend(NCU_EXTRA);
    println!("{}", all.join(","));
    Ok(())
}

/// One kernel launch as ncu reports it.
struct NcuLaunch {
    kernel: String,
    block: [u32; 3],
    grid: [u32; 3],
    values: HashMap<String, f64>,
    used: bool,
}

fn compare(dir: &Path, ncu_csv: &Path, noflush: Option<PathBuf>) -> Result<(), String> {
    let samples = read_samples(dir)?;
    let mut launches = read_ncu(ncu_csv)?;
    let expected = read_expected(&dir.join("expected.tsv"))?;
    let noflush = match &noflush {
        Some(d) => read_samples(d)?,
        None => Vec::new(),
    };
    let names: Vec<String> = launches
        .first()
        .map(|l| l.values.keys().cloned().collect())
        .unwrap_or_default();
    let resolved = metrics::resolve(TABLE, |m| names.iter().any(|n| n == m))
        .map_err(|missing| format!("ncu's CSV lacks metrics: {}", missing.join("; ")))?;

    let mut md = String::new();
    let mut tally = Tally::default();
    writeln!(md, "# Collector vs ncu\n").unwrap();
    writeln!(
        md,
        "Counts must be equal (`=`); DRAM bytes and achieved warps agree within 10 % (`≈`); \
         time is the collector's median of its timed runs (CUDA events) over ncu's \
         `gpu__time_duration`. `!` marks a disagreement. ncu ran with `--clock-control none` \
         and its default `--cache-control all`; the collector flushes L2 before each pass.\n"
    )
    .unwrap();
    let mut current = String::new();
    for (kernel, s) in &samples {
        if *kernel != current {
            current = kernel.clone();
            writeln!(md, "\n## {kernel}\n").unwrap();
        }
        let head = format!(
            "### n = {:?}, block {}, grid {}",
            s.sizes,
            dims(s.block),
            dims(s.grid)
        );
        let Some(c) = &s.counters else {
            writeln!(
                md,
                "{head}\n\ncollector: error `{}`\n",
                s.error.as_deref().unwrap_or("?")
            )
            .unwrap();
            tally.collector_errors += 1;
            continue;
        };
        let Some(l) = launches
            .iter_mut()
            .find(|l| !l.used && l.kernel == *kernel && l.block == s.block && l.grid == s.grid)
        else {
            writeln!(
                md,
                "{head}\n\nno ncu launch with this kernel, block and grid\n"
            )
            .unwrap();
            tally.unmatched += 1;
            continue;
        };
        l.used = true;
        let n = ncu_hardware(&resolved, &l.values)?;
        writeln!(
            md,
            "{head}\n\n| metric | collector | ncu | |\n| --- | ---: | ---: | --- |"
        )
        .unwrap();
        let counts = [
            ("inst_executed", c.inst_executed, n.inst_executed),
            ("inst_global_ld", c.inst_global_ld, n.inst_global_ld),
            ("inst_global_st", c.inst_global_st, n.inst_global_st),
            ("inst_shared_ld", c.inst_shared_ld, n.inst_shared_ld),
            ("inst_shared_st", c.inst_shared_st, n.inst_shared_st),
            ("inst_barrier", c.inst_barrier, n.inst_barrier),
            ("gld_requests", c.gld_requests, n.gld_requests),
            ("gst_requests", c.gst_requests, n.gst_requests),
            ("gld_sectors", c.gld_sectors, n.gld_sectors),
            ("gst_sectors", c.gst_sectors, n.gst_sectors),
            (
                "regs_per_thread",
                u64::from(c.regs_per_thread),
                get(&l.values, "launch__registers_per_thread")? as u64,
            ),
            (
                "smem_static",
                u64::from(c.smem_static),
                get(&l.values, "launch__shared_mem_per_block_static")? as u64,
            ),
        ];
        for (name, a, b) in counts {
            let ok = a == b;
            tally.count(ok, name);
            writeln!(
                md,
                "| {name} | {a} | {b} | {} |",
                if ok { "=" } else { "!" }
            )
            .unwrap();
        }
        let close = [
            (
                "dram_bytes_read",
                c.dram_bytes_read as f64,
                n.dram_bytes_read as f64,
            ),
            (
                "dram_bytes_write",
                c.dram_bytes_write as f64,
                n.dram_bytes_write as f64,
            ),
            (
                "achieved_active_warps",
                c.achieved_active_warps,
                n.achieved_active_warps,
            ),
        ];
        for (name, a, b) in close {
            let ok = within(
                a,
                b,
                0.10,
                if name.starts_with("dram") {
                    65536.0
                } else {
                    0.5
                },
            );
            tally.count(ok, name);
            writeln!(
                md,
                "| {name} | {a:.2} | {b:.2} | {} |",
                if ok { "≈" } else { "!" }
            )
            .unwrap();
        }
        let ncu_ms = get(&l.values, "gpu__time_duration.sum")? / 1e6;
        writeln!(
            md,
            "| time_ms | {:.4} (runs {}) | {ncu_ms:.4} | ×{:.2} |",
            c.time_ms,
            c.time_runs_ms
                .iter()
                .map(|t| format!("{t:.4}"))
                .collect::<Vec<_>>()
                .join(" "),
            c.time_ms / ncu_ms
        )
        .unwrap();
        if let Some(nf) = noflush
            .iter()
            .find(|(k, o)| k == kernel && o.sizes == s.sizes && o.block == s.block)
            .and_then(|(_, o)| o.counters.as_ref())
        {
            writeln!(
                md,
                "| dram_bytes_read, no L2 flush | {} | | |",
                nf.dram_bytes_read
            )
            .unwrap();
        }
        for e in expected
            .iter()
            .filter(|e| e.kernel == *kernel && vec![e.n] == s.sizes && e.block == dims(s.block))
        {
            let (a, b) = match e.field.as_str() {
                "inst_global_ld" => (c.inst_global_ld, n.inst_global_ld),
                "inst_global_st" => (c.inst_global_st, n.inst_global_st),
                "gld_requests" => (c.gld_requests, n.gld_requests),
                "gld_sectors" => (c.gld_sectors, n.gld_sectors),
                "gst_sectors" => (c.gst_sectors, n.gst_sectors),
                "inst_barrier" => (c.inst_barrier, n.inst_barrier),
                "smem_static" => (u64::from(c.smem_static), u64::from(c.smem_static)),
                other => return Err(format!("expected.tsv: unknown field {other}")),
            };
            let ok = a == e.value;
            tally.expected(ok, &e.field);
            writeln!(
                md,
                "| {} from the code | {} | ncu {} | {} |",
                e.field,
                e.value,
                b,
                if ok { "= collector" } else { "! collector" }
            )
            .unwrap();
        }
        writeln!(md).unwrap();
    }
    let unused = launches.iter().filter(|l| !l.used).count();
    let summary = format!(
        "collector = ncu: {}/{} values ({}); collector = count from the code: {}/{} ({}); \
         failed shapes: {} (one, saxpy 2048 threads, is meant to fail); shapes without an \
         ncu launch: {}; ncu launches without a sample: {unused}",
        tally.agree,
        tally.total,
        tally.disagreements(),
        tally.expected_ok,
        tally.expected_total,
        tally.expected_disagreements(),
        tally.collector_errors,
        tally.unmatched
    );
    println!("{summary}\n\n{md}");
    eprintln!("{summary}");
    Ok(())
}

#[derive(Default)]
struct Tally {
    agree: usize,
    total: usize,
    wrong: BTreeMap<String, usize>,
    expected_ok: usize,
    expected_total: usize,
    expected_wrong: BTreeMap<String, usize>,
    collector_errors: usize,
    unmatched: usize,
}

impl Tally {
    fn count(&mut self, ok: bool, name: &str) {
        self.total += 1;
        if ok {
            self.agree += 1;
        } else {
            *self.wrong.entry(name.to_string()).or_default() += 1;
        }
    }
    fn expected(&mut self, ok: bool, name: &str) {
        self.expected_total += 1;
        if ok {
            self.expected_ok += 1;
        } else {
            *self.expected_wrong.entry(name.to_string()).or_default() += 1;
        }
    }
    fn disagreements(&self) -> String {
        list(&self.wrong)
    }
    fn expected_disagreements(&self) -> String {
        list(&self.expected_wrong)
    }
}

fn list(m: &BTreeMap<String, usize>) -> String {
    if m.is_empty() {
        return "no disagreement".into();
    }
    let parts: Vec<String> = m.iter().map(|(k, v)| format!("{k} ×{v}")).collect();
    format!("disagreements: {}", parts.join(", "))
}

fn within(a: f64, b: f64, rel: f64, abs: f64) -> bool {
    (a - b).abs() <= abs.max(rel * a.abs().max(b.abs()))
}

fn dims(d: [u32; 3]) -> String {
    format!("{}x{}x{}", d[0], d[1], d[2])
}

fn get(values: &HashMap<String, f64>, m: &str) -> Result<f64, String> {
    values
        .get(m)
        .copied()
        .ok_or_else(|| format!("ncu's CSV has no {m}"))
}

fn ncu_hardware(resolved: &Resolved, values: &HashMap<String, f64>) -> Result<Hardware, String> {
    let map: HashMap<&str, f64> = values.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    metrics::decode(resolved, &map).map_err(|e| format!("ncu values: {e}"))
}

/// The collector's samples, per kernel file, in file order.
fn read_samples(dir: &Path) -> Result<Vec<(String, Sample)>, String> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    files.sort();
    let mut out = Vec::new();
    for f in files {
        let kernel = f.file_stem().unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(&f).map_err(|e| format!("{}: {e}", f.display()))?;
        for (i, line) in text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
        {
            let s: Sample = serde_json::from_str(line)
                .map_err(|e| format!("{}:{}: not a profile sample: {e}", f.display(), i + 1))?;
            out.push((kernel.clone(), s));
        }
    }
    Ok(out)
}

struct Expected {
    kernel: String,
    n: i64,
    block: String,
    field: String,
    value: u64,
}

fn read_expected(path: &Path) -> Result<Vec<Expected>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    text.lines()
        .skip(1)
        .filter(|l| !l.is_empty())
        .enumerate()
        .map(|(i, l)| {
            let f: Vec<&str> = l.split('\t').collect();
            let bad = || {
                format!(
                    "{}:{}: expected 6 tab-separated fields",
                    path.display(),
                    i + 2
                )
            };
            if f.len() != 6 {
                return Err(bad());
            }
            Ok(Expected {
                kernel: f[0].into(),
                n: f[1].parse().map_err(|_| bad())?,
                block: f[2].into(),
                field: f[4].into(),
                value: f[5].parse().map_err(|_| bad())?,
            })
        })
        .collect()
}

/// Parses ncu's `--csv` details output (one row per launch and metric).
fn read_ncu(path: &Path) -> Result<Vec<NcuLaunch>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut lines = text.lines().skip_while(|l| !l.starts_with("\"ID\""));
    let header = csv_fields(lines.next().ok_or_else(|| {
        format!(
            "{}: no CSV header (\"ID\",…) in ncu's output",
            path.display()
        )
    })?);
    let col = |name: &str| {
        header
            .iter()
            .position(|h| h == name)
            .ok_or_else(|| format!("{}: no column {name:?} in {header:?}", path.display()))
    };
    let (id, kernel, block, grid, metric, value) = (
        col("ID")?,
        col("Kernel Name")?,
        col("Block Size")?,
        col("Grid Size")?,
        col("Metric Name")?,
        col("Metric Value")?,
    );
    let mut order: Vec<String> = Vec::new();
    let mut by_id: HashMap<String, NcuLaunch> = HashMap::new();
    for line in lines {
        let f = csv_fields(line);
        if f.len() <= value.max(metric) {
            continue;
        }
        let entry = by_id.entry(f[id].clone()).or_insert_with(|| {
            order.push(f[id].clone());
            NcuLaunch {
                kernel: f[kernel].clone(),
                block: triple(&f[block]),
                grid: triple(&f[grid]),
                values: HashMap::new(),
                used: false,
            }
        });
        if let Ok(v) = f[value].replace(',', "").parse::<f64>() {
            entry.values.insert(f[metric].clone(), v);
        }
    }
    Ok(order.into_iter().filter_map(|i| by_id.remove(&i)).collect())
}

/// "(256, 1, 1)" → [256, 1, 1].
fn triple(s: &str) -> [u32; 3] {
    let mut out = [1u32; 3];
    for (i, part) in s
        .split(|c: char| !c.is_ascii_digit())
        .filter(|p| !p.is_empty())
        .take(3)
        .enumerate()
    {
        out[i] = part.parse().unwrap_or(0);
    }
    out
}

/// The fields of one CSV line (double-quoted fields, "" inside quotes).
fn csv_fields(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                cur.push('"');
                chars.next();
            }
            ('"', _) => quoted = !quoted,
            (',', false) => out.push(std::mem::take(&mut cur)),
            _ => cur.push(c),
        }
    }
    out.push(cur);
    out
}
