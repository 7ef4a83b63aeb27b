//! The comparisons of the collector's GPU check (see `main.rs`), as functions that return the
//! report, so that tests can run them on committed fixtures.

use klaraptor_collector::metrics::{self, Field, Hardware, Resolved, TABLE};
use klaraptor_profiler::record::{Counters, Sample};
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// ncu metrics for the fields the range profiler does not give.
pub const NCU_EXTRA: [&str; 3] = [
    "gpu__time_duration.sum",
    "launch__registers_per_thread",
    "launch__shared_mem_per_block_static",
];

/// Registers are allocated per warp in units of this many (sm_70 to sm_90: the
/// `cudaOccRegAllocationGranularity` of `cuda_occupancy.h`).
const REG_ALLOC_UNIT: u64 = 256;

/// Metrics that may explain the ADU pipe's count besides barriers and constant loads; shown
/// in the barrier table when ncu's CSV has them (run.sh asks ncu for them).
pub const BARRIER_PROBES: [&str; 4] = [
    "smsp__mio2rf_writeback_active_pipe_adu.sum",
    "sm__mio_pq_read_cycles_active_pipe_adu.sum",
    "smsp__inst_executed_pipe_cbu.sum",
    "smsp__inst_executed_pipe_uniform.sum",
];

const ADU: &str = "smsp__inst_executed_pipe_adu.sum";
const LDC: &str = "smsp__inst_executed_op_ldc.sum";
const STALL_BARRIER: &str = "smsp__warps_issue_stalled_barrier.sum";

/// A comparison: its one-line summary and the whole Markdown report (summary first).
pub struct Report {
    pub summary: String,
    pub markdown: String,
}

/// What `compare` reads.
pub struct Inputs {
    /// The collector's output: `<kernel>.jsonl` and `expected.tsv`.
    pub collector: PathBuf,
    /// ncu's CSV of the same kernels and shapes.
    pub ncu_csv: PathBuf,
    /// The collector's output without the L2 flush.
    pub noflush: Option<PathBuf>,
    /// ncu's CSV of the DRAM byte counters alone (one pass: no kernel replay).
    pub ncu_dram: Option<PathBuf>,
}

/// One kernel launch as ncu reports it.
pub struct NcuLaunch {
    pub kernel: String,
    pub block: [u32; 3],
    pub grid: [u32; 3],
    pub values: HashMap<String, f64>,
    used: bool,
}

pub fn compare(inputs: &Inputs) -> Result<Report, String> {
    let samples = read_samples(&inputs.collector)?;
    let mut launches = read_ncu(&inputs.ncu_csv)?;
    let expected = read_expected(&inputs.collector.join("expected.tsv"))?;
    let noflush = match &inputs.noflush {
        Some(d) => read_samples(d)?,
        None => Vec::new(),
    };
    let mut dram_launches = match &inputs.ncu_dram {
        Some(p) => read_ncu(p)?,
        None => Vec::new(),
    };
    let names: Vec<String> = launches
        .first()
        .map(|l| l.values.keys().cloned().collect())
        .unwrap_or_default();
    let resolved = metrics::resolve(TABLE, |m| names.iter().any(|n| n == m))
        .map_err(|missing| format!("ncu's CSV lacks metrics: {}", missing.join("; ")))?;
    let barrier_source = resolved
        .source_of(Field::InstBarrier)
        .map(|s| s.to_string())
        .unwrap_or_default();

    let mut md = String::new();
    let mut tally = Tally::default();
    let mut barriers = Vec::new();
    writeln!(md, "# Collector vs ncu\n").unwrap();
    writeln!(
        md,
        "Counts must be equal (`=`); `≡` marks a register count that differs from ncu's but \
         takes the same number of {REG_ALLOC_UNIT}-register allocation units per warp; DRAM \
         bytes and achieved warps agree within 10 % (`≈`); time is the collector's median of \
         its timed runs (CUDA events) over ncu's `gpu__time_duration`. `!` marks a \
         disagreement. ncu ran with `--clock-control none` and its default `--cache-control \
         all`; the collector flushes L2 before each pass. ncu's `inst_barrier` is computed \
         from ncu's values as the collector computes its own: `{barrier_source}`. See the \
         notes at the end.\n"
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
        let ncu_regs = get(&l.values, "launch__registers_per_thread")? as u64;
        let regs = u64::from(c.regs_per_thread);
        let verdict = if regs == ncu_regs {
            "="
        } else if alloc_units(regs) == alloc_units(ncu_regs) {
            tally.equivalent("regs_per_thread");
            "≡"
        } else {
            "!"
        };
        tally.count(verdict != "!", "regs_per_thread");
        writeln!(md, "| regs_per_thread | {regs} | {ncu_regs} | {verdict} |").unwrap();
        let smem = u64::from(c.smem_static);
        let ncu_smem = get(&l.values, "launch__shared_mem_per_block_static")? as u64;
        tally.count(smem == ncu_smem, "smem_static");
        writeln!(
            md,
            "| smem_static | {smem} | {ncu_smem} | {} |",
            if smem == ncu_smem { "=" } else { "!" }
        )
        .unwrap();
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
            writeln!(
                md,
                "| dram_bytes_write, no L2 flush | {} | | |",
                nf.dram_bytes_write
            )
            .unwrap();
        }
        if let Some(d) = dram_launches
            .iter_mut()
            .find(|d| !d.used && d.kernel == *kernel && d.block == s.block && d.grid == s.grid)
        {
            d.used = true;
            for m in ["dram__bytes_read.sum", "dram__bytes_write.sum"] {
                if let Some(v) = d.values.get(m) {
                    writeln!(md, "| {m}, ncu alone (one pass, no replay) | | {v:.2} | |").unwrap();
                }
            }
        }
        let mut barrier_from_code = None;
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
                "inst_barrier" => {
                    barrier_from_code = Some(e.value);
                    (c.inst_barrier, n.inst_barrier)
                }
                "smem_static" => (u64::from(c.smem_static), ncu_smem),
                "regs_per_thread" => (regs, ncu_regs),
                other => return Err(format!("expected.tsv: unknown field {other}")),
            };
            let ok = a == e.value;
            tally.expected(ok, &e.field);
            let extra = if e.field == "inst_barrier" && !ok {
                format!(" ({:+.3} per warp)", excess_per_warp(a, e.value, s))
            } else {
                String::new()
            };
            writeln!(
                md,
                "| {} from the code | {} | ncu {} | {}{extra} |",
                e.field,
                e.value,
                b,
                if ok { "= collector" } else { "! collector" }
            )
            .unwrap();
        }
        if let Some(code) = barrier_from_code {
            barriers.push(BarrierRow {
                kernel: kernel.clone(),
                sizes: s.sizes.clone(),
                block: s.block,
                grid: s.grid,
                code,
                collector: c.inst_barrier,
                ncu: l.values.clone(),
            });
        }
        writeln!(md).unwrap();
    }
    let unused = launches.iter().filter(|l| !l.used).count();
    barrier_table(&mut md, &barriers);
    notes(&mut md, &barrier_source);
    let summary = format!(
        "collector = ncu: {}/{} values ({}{}); collector = count from the code: {}/{} ({}); \
         failed shapes: {} (one, saxpy 2048 threads, is meant to fail); shapes without an \
         ncu launch: {}; ncu launches without a sample: {unused}",
        tally.agree,
        tally.total,
        tally.disagreements(),
        tally.equivalents(),
        tally.expected_ok,
        tally.expected_total,
        tally.expected_disagreements(),
        tally.collector_errors,
        tally.unmatched
    );
    Ok(Report {
        markdown: format!("{summary}\n\n{md}"),
        summary,
    })
}

/// Register allocation units per warp for `regs` registers per thread.
fn alloc_units(regs: u64) -> u64 {
    (regs * 32).div_ceil(REG_ALLOC_UNIT)
}

fn warps(s: &Sample) -> u64 {
    let threads: u64 = s.block.iter().map(|&d| u64::from(d)).product();
    let blocks: u64 = s.grid.iter().map(|&d| u64::from(d)).product();
    blocks * threads.div_ceil(32)
}

fn excess_per_warp(got: u64, want: u64, s: &Sample) -> f64 {
    (got as f64 - want as f64) / warps(s).max(1) as f64
}

struct BarrierRow {
    kernel: String,
    sizes: Vec<i64>,
    block: [u32; 3],
    grid: [u32; 3],
    code: u64,
    collector: u64,
    ncu: HashMap<String, f64>,
}

/// Per shape with a barrier count known from the code: that count, the collector's, and
/// ncu's values of the ADU pipe and of each probe metric the CSV has, per warp.
fn barrier_table(md: &mut String, rows: &[BarrierRow]) {
    if rows.is_empty() {
        return;
    }
    let mut cols: Vec<&str> = vec![ADU, LDC, STALL_BARRIER];
    cols.extend(BARRIER_PROBES);
    cols.retain(|m| rows.iter().any(|r| r.ncu.contains_key(*m)));
    writeln!(
        md,
        "\n## Barrier instructions per warp\n\nThe exact count (from the code), the \
         collector's, and ncu's values of the ADU pipe and of metrics that may tell its other \
         instructions apart, each divided by the launch's warps.\n"
    )
    .unwrap();
    let short = |m: &str| m.trim_end_matches(".sum").to_string();
    let head: Vec<String> = cols.iter().map(|m| format!("`{}`", short(m))).collect();
    writeln!(
        md,
        "| kernel | n | block | from the code | collector | {} |\n| --- | --- | --- | ---: | ---: |{}",
        head.join(" | "),
        " ---: |".repeat(cols.len())
    )
    .unwrap();
    for r in rows {
        let sample = Sample {
            sizes: r.sizes.clone(),
            block: r.block,
            grid: r.grid,
            error: None,
            counters: None,
        };
        let w = warps(&sample).max(1) as f64;
        let vals: Vec<String> = cols
            .iter()
            .map(|m| {
                r.ncu
                    .get(*m)
                    .map_or("–".to_string(), |v| format!("{:.3}", v / w))
            })
            .collect();
        writeln!(
            md,
            "| {} | {:?} | {} | {:.3} | {:.3} | {} |",
            r.kernel,
            r.sizes,
            dims(r.block),
            r.code as f64 / w,
            r.collector as f64 / w,
            vals.join(" | ")
        )
        .unwrap();
    }
}

fn notes(md: &mut String, barrier_source: &str) {
    let table_source = TABLE
        .iter()
        .find(|s| s.field == Field::InstBarrier)
        .and_then(|s| s.sources.first())
        .map(|s| s.to_string())
        .unwrap_or_default();
    writeln!(
        md,
        "\n## Notes\n\n\
         - **regs_per_thread.** The collector reports the compiled kernel's register count \
         (`CU_FUNC_ATTRIBUTE_NUM_REGS`; `ptxas -v` and `cudaFuncGetAttributes` give the same: \
         10 for saxpy and block_sum, 18 for strided_copy, 32 for matmul with nvcc 13.0 for \
         sm_90). ncu's `launch__registers_per_thread` is what the launch was given: 16 where \
         the kernel needs 10 on the H200 (but 18 where it needs 18, so not a rounding to a \
         multiple of 8). Registers are allocated per warp in units of {REG_ALLOC_UNIT}, so 10 \
         and 16 registers per thread take the same 512 registers per warp and give the same \
         occupancy: `≡`. (Occupancy cannot depend on it: 16 registers × 2048 threads fill \
         half the 65536 registers of an SM.) `regs_per_thread from the code` compares with \
         `cudaFuncGetAttributes` in the test program.\n\
         - **inst_barrier is an approximation, on every chip.** CUPTI's range profiler has no \
         counter of barrier instructions on any chip klaraptor targets (GV100 to GB202; the \
         collector's tests check the metric lists). The collector's table says \
         `{table_source}`; ncu's values here were combined as `{barrier_source}` (what ncu's \
         CSV allows). Barriers run in the ADU pipe, which also serves constant loads (`LDC`, subtracted) \
         and special-register reads (`S2R`/`S2UR` of block and CTA ids): on the H200 these \
         add 1 per warp to saxpy and strided_copy, 2 to matmul, and 2 per warp plus 1 per \
         block to block_sum, whose exact count is 7 to 11 per warp. Where no warp waited at \
         a CTA barrier (`smsp__warps_issue_stalled_barrier` = 0) the collector reports 0, \
         which is exact for kernels without `__syncthreads`; kernels with barriers get an \
         upper bound, a few per warp above the exact count (the `! collector` rows with the \
         excess per warp). ncu itself counts `BAR` only per instruction, by patching the \
         SASS (its source page), which a range profiler cannot do.\n\
         - **dram_bytes_write of small kernels.** DRAM writes are write-backs of dirty L2 \
         lines, and the H200's L2 (60 MiB) holds the whole output of matmul (4 MiB) and \
         strided_copy (16 MiB): most of their writes are still in L2 when the kernel ends \
         and reach DRAM later, outside the measured range. What is evicted within the range \
         depends on the L2's state when the kernel starts (after the collector's flush, L2 \
         is full of clean lines; under ncu, after its cache control and the replay's memory \
         restore), not on the kernel alone, so the two tools' small write counts differ by \
         more than 10 % where the output fits in L2 (saxpy n = 2^24, whose 64 MiB output \
         does not fit, agrees within 2 %). Not a collector error: its count is what that \
         launch wrote to DRAM during its own range. Models should take store traffic from \
         `gst_sectors` (exact) and use `dram_bytes_write` only where outputs exceed the L2. \
         The `no L2 flush` rows show the effect of the L2's state: with the dirty lines of \
         the timed runs still in L2, more is written back within the range. The `ncu alone \
         (one pass, no replay)` rows, when present, show ncu without replay."
    )
    .unwrap();
}

#[derive(Default)]
struct Tally {
    agree: usize,
    total: usize,
    wrong: BTreeMap<String, usize>,
    equivalent: BTreeMap<String, usize>,
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
    fn equivalent(&mut self, name: &str) {
        *self.equivalent.entry(name.to_string()).or_default() += 1;
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
    fn equivalents(&self) -> String {
        if self.equivalent.is_empty() {
            return String::new();
        }
        let parts: Vec<String> = self
            .equivalent
            .iter()
            .map(|(k, v)| format!("{k} ×{v}"))
            .collect();
        format!("; equal as allocated, not as numbers: {}", parts.join(", "))
    }
    fn expected_disagreements(&self) -> String {
        list(&self.expected_wrong)
    }
}

fn list(m: &BTreeMap<String, usize>) -> String {
    if m.is_empty() {
        return "no disagreement".into();
    }
    let parts: Vec<String> = m
        .iter()
        .map(|(k, v)| {
            let why = match k.as_str() {
                "inst_barrier" => " (an upper bound by design, see notes)",
                "dram_bytes_write" => " (L2 write-back, see notes)",
                _ => "",
            };
            format!("{k} ×{v}{why}")
        })
        .collect();
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

/// The time-only check: every sample of `time_only` (a run with
/// `KLARAPTOR_COLLECT_TIME_ONLY=1`) against the same shape of `full` (a normal run): a
/// measured shape has counters with every hardware field 0 and the same resources, a failed
/// shape fails in both; the times are shown side by side.
pub fn time_only(time_only: &Path, full: &Path) -> Result<Report, String> {
    let fast = read_samples(time_only)?;
    if fast.is_empty() {
        return Err(format!(
            "{}: no samples (did the time-only run fail?)",
            time_only.display()
        ));
    }
    let full = read_samples(full)?;
    let mut md = String::new();
    writeln!(
        md,
        "# Time-only mode vs the full collector\n\n| kernel | n | block | time-only ms | full ms \
         | ratio | |\n| --- | --- | --- | ---: | ---: | ---: | --- |"
    )
    .unwrap();
    let (mut ok, mut bad) = (0, 0);
    let mut ratios = Vec::new();
    for (kernel, s) in &fast {
        let other = full
            .iter()
            .find(|(k, o)| k == kernel && o.sizes == s.sizes && o.block == s.block)
            .map(|(_, o)| o);
        let (verdict, times) = match (other, &s.counters) {
            (None, _) => ("! no such shape in the full run".to_string(), None),
            (Some(o), None) if o.counters.is_none() => ("= failed in both".to_string(), None),
            (Some(_), None) => (
                format!(
                    "! failed only in time-only mode: {}",
                    s.error.as_deref().unwrap_or("?")
                ),
                None,
            ),
            (Some(o), Some(c)) => match &o.counters {
                None => ("! failed only in the full run".to_string(), None),
                Some(f) => {
                    let mut why = Vec::new();
                    if !hardware_is_zero(c) {
                        why.push("hardware counters are not 0");
                    }
                    if (c.regs_per_thread, c.smem_static, c.smem_dynamic)
                        != (f.regs_per_thread, f.smem_static, f.smem_dynamic)
                    {
                        why.push("resources differ");
                    }
                    if c.time_runs_ms.is_empty() || !c.time_ms.is_finite() || c.time_ms <= 0.0 {
                        why.push("no time");
                    }
                    let v = if why.is_empty() {
                        "=".to_string()
                    } else {
                        format!("! {}", why.join(", "))
                    };
                    (v, Some((c.time_ms, f.time_ms)))
                }
            },
        };
        if verdict.starts_with('=') {
            ok += 1;
        } else {
            bad += 1;
        }
        let (a, b, r) = match times {
            Some((a, b)) => {
                ratios.push(a / b);
                (
                    format!("{a:.4}"),
                    format!("{b:.4}"),
                    format!("×{:.2}", a / b),
                )
            }
            None => ("".into(), "".into(), "".into()),
        };
        writeln!(
            md,
            "| {kernel} | {:?} | {} | {a} | {b} | {r} | {verdict} |",
            s.sizes,
            dims(s.block)
        )
        .unwrap();
    }
    ratios.sort_by(f64::total_cmp);
    let median = ratios.get(ratios.len() / 2).copied().unwrap_or(f64::NAN);
    let summary = format!(
        "time-only mode: {ok}/{} samples as expected ({bad} not); median time ratio \
         time-only/full ×{median:.2}",
        ok + bad
    );
    Ok(Report {
        markdown: format!("{summary}\n\n{md}"),
        summary,
    })
}

/// Two full collector runs of the same launches (e.g. one profiler session per shape,
/// `KLARAPTOR_COLLECT_RANGES=1`, against one session per request): the counts that do not
/// depend on timing (instructions, requests, sectors, resources) must be equal; DRAM bytes,
/// achieved warps and times are compared within noise and summarised.
pub fn same(a_dir: &Path, b_dir: &Path) -> Result<Report, String> {
    let a = read_samples(a_dir)?;
    if a.is_empty() {
        return Err(format!("{}: no samples", a_dir.display()));
    }
    let b = read_samples(b_dir)?;
    let mut md = String::new();
    writeln!(
        md,
        "# Collector run A ({}) vs run B ({})\n\n| kernel | sizes | block | counts | DRAM read \
         A / B | DRAM write A / B | warps A / B | ms A / B |\n| --- | --- | --- | --- | ---: | \
         ---: | ---: | ---: |",
        a_dir.display(),
        b_dir.display()
    )
    .unwrap();
    let (mut equal, mut differ, mut failed, mut missing) = (0, 0, 0, 0);
    let (mut dram_r, mut dram_w, mut both) = (0, 0, 0);
    let (mut warps, mut times) = (Vec::new(), Vec::new());
    for (kernel, s) in &a {
        let other = b
            .iter()
            .find(|(k, o)| k == kernel && o.sizes == s.sizes && o.block == s.block)
            .map(|(_, o)| o);
        let Some(o) = other else {
            missing += 1;
            writeln!(
                md,
                "| {kernel} | {:?} | {} | ! not in B | | | | |",
                s.sizes,
                dims(s.block)
            )
            .unwrap();
            continue;
        };
        let (c, d) = match (&s.counters, &o.counters) {
            (Some(c), Some(d)) => (c, d),
            (None, None) => {
                failed += 1;
                continue;
            }
            _ => {
                differ += 1;
                writeln!(
                    md,
                    "| {kernel} | {:?} | {} | ! measured in one run only: {} | | | | |",
                    s.sizes,
                    dims(s.block),
                    s.error.as_deref().or(o.error.as_deref()).unwrap_or("?")
                )
                .unwrap();
                continue;
            }
        };
        both += 1;
        let counts = |x: &Counters| {
            [
                x.inst_executed,
                x.inst_global_ld,
                x.inst_global_st,
                x.inst_shared_ld,
                x.inst_shared_st,
                x.inst_barrier,
                x.gld_requests,
                x.gst_requests,
                x.gld_sectors,
                x.gst_sectors,
                u64::from(x.regs_per_thread),
                u64::from(x.smem_static),
                u64::from(x.smem_dynamic),
            ]
        };
        const NAMES: [&str; 13] = [
            "inst_executed",
            "inst_global_ld",
            "inst_global_st",
            "inst_shared_ld",
            "inst_shared_st",
            "inst_barrier",
            "gld_requests",
            "gst_requests",
            "gld_sectors",
            "gst_sectors",
            "regs_per_thread",
            "smem_static",
            "smem_dynamic",
        ];
        let diffs: Vec<String> = counts(c)
            .iter()
            .zip(counts(d))
            .zip(NAMES)
            .filter(|((x, y), _)| **x != *y)
            .map(|((x, y), n)| format!("{n} {x} vs {y}"))
            .collect();
        let verdict = if diffs.is_empty() {
            equal += 1;
            "=".to_string()
        } else {
            differ += 1;
            format!("! {}", diffs.join(", "))
        };
        // DRAM: equal within 5 % or 8 KiB (refresh, page-table walks and the like).
        let dram_ok = |x: u64, y: u64| within(x as f64, y as f64, 0.05, 8192.0);
        dram_r += usize::from(dram_ok(c.dram_bytes_read, d.dram_bytes_read));
        dram_w += usize::from(dram_ok(c.dram_bytes_write, d.dram_bytes_write));
        if d.achieved_active_warps > 0.0 {
            warps.push(c.achieved_active_warps / d.achieved_active_warps);
        }
        if d.time_ms > 0.0 {
            times.push(c.time_ms / d.time_ms);
        }
        writeln!(
            md,
            "| {kernel} | {:?} | {} | {verdict} | {} / {} | {} / {} | {:.2} / {:.2} | {:.4} / {:.4} |",
            s.sizes,
            dims(s.block),
            c.dram_bytes_read,
            d.dram_bytes_read,
            c.dram_bytes_write,
            d.dram_bytes_write,
            c.achieved_active_warps,
            d.achieved_active_warps,
            c.time_ms,
            d.time_ms
        )
        .unwrap();
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
    };
    let summary = format!(
        "collector A vs B: counts equal in {equal}/{both} samples measured by both ({differ} \
         differ, {failed} failed in both, {missing} missing from B); DRAM bytes within 5 % or \
         8 KiB: read {dram_r}/{both}, write {dram_w}/{both}; median ratio A/B: achieved warps \
         ×{:.3}, time ×{:.3}",
        median(&mut warps),
        median(&mut times)
    );
    Ok(Report {
        markdown: format!("{summary}\n\n{md}"),
        summary,
    })
}

fn hardware_is_zero(c: &Counters) -> bool {
    [
        c.inst_executed,
        c.inst_global_ld,
        c.inst_global_st,
        c.inst_shared_ld,
        c.inst_shared_st,
        c.inst_barrier,
        c.gld_requests,
        c.gst_requests,
        c.gld_sectors,
        c.gst_sectors,
        c.dram_bytes_read,
        c.dram_bytes_write,
    ]
    .iter()
    .all(|&v| v == 0)
        && c.achieved_active_warps == 0.0
}

/// The collector's samples, per kernel file, in file order.
pub fn read_samples(dir: &Path) -> Result<Vec<(String, Sample)>, String> {
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
pub fn read_ncu(path: &Path) -> Result<Vec<NcuLaunch>, String> {
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
