//! Replays the collector's first H200 check (2026-11-22, `fixtures/h200-2026-11-22`, from
//! `bench/gpu/collector/run.sh`): the raw CUPTI values of the verbose log decode into the
//! counters the collector wrote, the comparison with ncu gives the committed report's
//! numbers, and ncu's per-instruction counts of block_sum explain the barrier approximation.

#[allow(dead_code)]
#[path = "../examples/compare_ncu/report.rs"]
mod report;

use klaraptor_collector::metrics::{self, Hardware, TABLE};
use klaraptor_collector::stats::median;
use klaraptor_profiler::record::{Counters, Sample};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/h200-2026-11-22")
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// What the verbose log says, in its order.
struct Log {
    /// (kernel, sizes, shapes) per request.
    requests: Vec<(String, Vec<i64>, usize)>,
    /// The timed runs of each measured shape.
    times: Vec<Vec<f64>>,
    /// The raw metric values of each measured shape.
    values: Vec<HashMap<String, f64>>,
    /// `Field <- source` lines.
    choices: Vec<String>,
}

fn parse_log(text: &str) -> Log {
    let mut log = Log {
        requests: Vec::new(),
        times: Vec::new(),
        values: Vec::new(),
        choices: Vec::new(),
    };
    for line in text.lines() {
        let Some(l) = line.strip_prefix("klaraptor-collect: ") else {
            continue;
        };
        // Verbose lines carry their time since the first ("[  12.345 ms] ") since 2026-11-29.
        let l = match l.strip_prefix('[').and_then(|r| r.split_once(" ms] ")) {
            Some((t, rest)) if t.trim().parse::<f64>().is_ok() => rest,
            _ => l,
        };
        if let Some(json) = l.strip_prefix("metric values ") {
            log.values.push(serde_json::from_str(json).expect(json));
        } else if let Some((_, t)) = l.split_once(": times ") {
            let list = t.trim_end_matches(" ms");
            log.times.push(serde_json::from_str(list).expect(list));
        } else if l.contains(" <- ") {
            log.choices.push(l.to_string());
        } else if let Some((head, rest)) = l.split_once("]: ") {
            if let Some(n) = rest.split_once(" shape(s)").map(|(n, _)| n) {
                let (kernel, sizes) = head.split_once(" [").unwrap();
                let sizes = sizes
                    .split(", ")
                    .map(|v| v.parse().unwrap())
                    .collect::<Vec<i64>>();
                log.requests
                    .push((kernel.to_string(), sizes, n.parse().unwrap()));
            }
        }
    }
    log
}

fn hardware(c: &Counters) -> Hardware {
    Hardware {
        inst_executed: c.inst_executed,
        inst_global_ld: c.inst_global_ld,
        inst_global_st: c.inst_global_st,
        inst_shared_ld: c.inst_shared_ld,
        inst_shared_st: c.inst_shared_st,
        inst_barrier: c.inst_barrier,
        gld_requests: c.gld_requests,
        gst_requests: c.gst_requests,
        gld_sectors: c.gld_sectors,
        gst_sectors: c.gst_sectors,
        gld_l1_hit_sectors: c.gld_l1_hit_sectors,
        dram_bytes_read: c.dram_bytes_read,
        dram_bytes_write: c.dram_bytes_write,
        achieved_active_warps: c.achieved_active_warps,
        global_atomic_requests: c.global_atomic_requests,
    }
}

#[test]
fn the_raw_metric_values_of_the_log_decode_into_the_committed_samples() {
    let dir = fixture();
    let log = parse_log(&read(&dir.join("collector.stderr.txt")));
    let samples = report::read_samples(&dir.join("collector")).unwrap();
    assert_eq!(
        log.requests.len(),
        5,
        "saxpy ×2, matmul, block_sum, strided_copy"
    );
    assert_eq!(log.values.len(), 15);
    assert_eq!(log.times.len(), 15);

    // The table resolved as it did on the H200, where every metric it tried was collected.
    let names: HashSet<&str> = log.values[0].keys().map(String::as_str).collect();
    assert!(log.values.iter().all(|v| v.len() == names.len()));
    let resolved = metrics::resolve(TABLE, |m| names.contains(m)).unwrap();
    let mine: Vec<String> = resolved
        .choices
        .iter()
        .map(|(spec, src)| format!("{:?} <- {src}", spec.field))
        .collect();
    assert_eq!(mine, log.choices);

    let mut per_kernel: HashMap<&str, Vec<&Sample>> = HashMap::new();
    for (k, s) in &samples {
        per_kernel.entry(k.as_str()).or_default().push(s);
    }
    let mut measured = 0;
    for (kernel, sizes, n) in &log.requests {
        let list = per_kernel.get_mut(kernel.as_str()).unwrap();
        for s in list.drain(..*n) {
            assert_eq!(&s.sizes, sizes, "{kernel}");
            let Some(c) = &s.counters else {
                assert!(s.error.is_some(), "{kernel} {:?}", s.block);
                continue;
            };
            let values: HashMap<&str, f64> = log.values[measured]
                .iter()
                .map(|(k, v)| (k.as_str(), *v))
                .collect();
            let hw = metrics::decode(&resolved, &values).unwrap();
            assert_eq!(hw, hardware(c), "{kernel} {sizes:?} {:?}", s.block);
            assert_eq!(
                c.time_runs_ms, log.times[measured],
                "{kernel} {:?}",
                s.block
            );
            assert_eq!(Some(c.time_ms), median(&c.time_runs_ms));
            measured += 1;
        }
    }
    assert_eq!(measured, 15);
    assert!(
        per_kernel.values().all(|l| l.is_empty()),
        "every sample paired"
    );
}

/// Cells of the comparison's tables: (shape heading, metric) → the other cells.
fn table_rows(md: &str) -> Vec<((String, String), Vec<String>)> {
    let mut heading = String::new();
    let mut out = Vec::new();
    for line in md.lines() {
        if line.starts_with("### ") || line.starts_with("## ") {
            heading = line.to_string();
        } else if line.starts_with("| ")
            && !line.starts_with("| metric")
            && !line.starts_with("| ---")
        {
            let cells: Vec<String> = line
                .trim_matches('|')
                .split(" | ")
                .map(|c| c.trim().to_string())
                .collect();
            out.push(((heading.clone(), cells[0].clone()), cells[1..].to_vec()));
        }
    }
    out
}

#[test]
fn the_comparison_gives_the_committed_reports_numbers_and_new_verdicts() {
    let dir = fixture();
    let r = report::compare(&report::Inputs {
        collector: dir.join("collector"),
        ncu_csv: dir.join("ncu.csv"),
        noflush: Some(dir.join("collector-noflush")),
        ncu_dram: None,
    })
    .unwrap();
    assert_eq!(
        r.summary,
        "collector = ncu: 222/225 values (disagreements: dram_bytes_write ×3 (L2 write-back, \
         see notes); equal as allocated, not as numbers: regs_per_thread ×9); collector = \
         count from the code: 40/55 (disagreements: inst_barrier ×15 (an upper bound by \
         design, see notes)); failed shapes: 1 (one, saxpy 2048 threads, is meant to fail); \
         shapes without an ncu launch: 0; ncu launches without a sample: 0"
    );
    let committed = read(&dir.join("collector-vs-ncu.md"));
    // The report of 2026-11-22 counted the 9 register counts as disagreements.
    assert!(committed.starts_with(
        "collector = ncu: 213/225 values (disagreements: dram_bytes_write ×3, \
         regs_per_thread ×9); collector = count from the code: 40/55 (disagreements: \
         inst_barrier ×15)"
    ));
    let new: HashMap<_, _> = table_rows(&r.markdown).into_iter().collect();
    let old = table_rows(&committed);
    // 15 measured shapes × (15 metrics, time, DRAM reads without flush), 55 counts from code.
    assert_eq!(old.len(), 15 * 17 + 55, "rows of the committed tables");
    let mut changed = 0;
    for (key, cells) in &old {
        let now = new
            .get(key)
            .unwrap_or_else(|| panic!("{key:?} is gone from the report"));
        let n = cells.len();
        assert_eq!(
            &now[..n - 1],
            &cells[..n - 1],
            "{key:?}: the values are unchanged"
        );
        let (was, is) = (&cells[n - 1], &now[n - 1]);
        if was != is {
            changed += 1;
            match key.1.as_str() {
                "regs_per_thread" => assert_eq!((was.as_str(), is.as_str()), ("!", "≡")),
                "inst_barrier from the code" => {
                    assert!(
                        is.starts_with(was.as_str()) && is.ends_with(" per warp)"),
                        "{is}"
                    )
                }
                other => panic!("{key:?}: verdict of {other} changed from {was} to {is}"),
            }
        }
    }
    assert_eq!(changed, 9 + 15);
    assert!(r.markdown.contains("## Notes"));
    // The barrier table: block_sum's exact counts per warp are 1 + log2(block).
    let rows = table_rows(&r.markdown);
    for (block, code) in [
        ("64x1x1", "7.000"),
        ("256x1x1", "9.000"),
        ("1024x1x1", "11.000"),
    ] {
        assert!(
            rows.iter().any(|((h, m), c)| h.starts_with("## Barrier")
                && m == "block_sum"
                && c[1] == block
                && c[2] == code),
            "{block}"
        );
    }
}

/// ncu's per-instruction counts of block_sum (block 64, its first launch): `BAR` executes as
/// often as the test program's formula says, ncu's LDC count is the collector's
/// `op_ldc`, and what the ADU executes besides LDC and BAR is made of special-register reads.
#[test]
fn the_sass_counts_of_block_sum_explain_the_adu_pipe() {
    let dir = fixture();
    let text = read(&dir.join("ncu-block_sum-sass.csv"));
    let mut count: HashMap<String, u64> = HashMap::new();
    let mut header: Option<Vec<String>> = None;
    for line in text.lines() {
        let cells: Vec<String> = line
            .trim_matches('"')
            .split("\",\"")
            .map(String::from)
            .collect();
        if cells.first().is_some_and(|c| c == "Address") {
            header = Some(cells);
            continue;
        }
        let Some(h) = &header else { continue };
        if !cells[0].starts_with("0x") {
            continue;
        }
        let col = |name: &str| h.iter().position(|c| c == name).unwrap();
        let executed: u64 = cells[col("Instructions Executed")].parse().unwrap();
        // "@!P0  LDC.64 R2, c[0x0][0x210]" → "LDC"
        let source = cells[col("Source")].trim();
        let op = source
            .split_whitespace()
            .find(|w| !w.starts_with('@'))
            .unwrap();
        let base = op.split('.').next().unwrap().to_string();
        *count.entry(base).or_default() += executed;
    }
    let warps = 4_194_304u64 / 32;
    let expected = read(&dir.join("collector/expected.tsv"));
    let bar_expected: u64 = expected
        .lines()
        .find(|l| {
            l.starts_with("block_sum\t") && l.contains("\t64x1x1\t") && l.contains("inst_barrier")
        })
        .and_then(|l| l.rsplit('\t').next())
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(count["BAR"], bar_expected);
    assert_eq!(count["BAR"], warps * 7);

    let log = parse_log(&read(&dir.join("collector.stderr.txt")));
    // block_sum's first shape is the 11th measured one (6 saxpy, 4 matmul before it).
    let v = &log.values[10];
    assert_eq!(v["smsp__inst_executed_op_shared_ld.sum"], 1_638_400.0);
    assert_eq!(v["smsp__inst_executed_op_ldc.sum"] as u64, count["LDC"]);
    let rest = v["smsp__inst_executed_pipe_adu.sum"] as u64 - count["LDC"] - count["BAR"];
    assert_eq!(rest, warps * 5 / 2, "2.5 per warp");
    assert!(
        rest <= count["S2R"] + count["S2UR"],
        "only special-register reads are left"
    );
}

/// A copy of the fixture's collector output in a fresh temporary directory, with `edit`
/// applied to each sample and `expected_extra` appended to expected.tsv.
fn edited_copy(name: &str, edit: impl Fn(&mut Sample), expected_extra: &str) -> PathBuf {
    let src = fixture().join("collector");
    let dst =
        std::env::temp_dir().join(format!("klaraptor-collector-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dst);
    std::fs::create_dir_all(&dst).unwrap();
    for e in std::fs::read_dir(&src).unwrap() {
        let p = e.unwrap().path();
        let file = p.file_name().unwrap().to_owned();
        let text = read(&p);
        let out = if p.extension().is_some_and(|x| x == "jsonl") {
            text.lines()
                .map(|l| {
                    let mut s: Sample = serde_json::from_str(l).unwrap();
                    edit(&mut s);
                    serde_json::to_string(&s).unwrap() + "\n"
                })
                .collect()
        } else {
            text + expected_extra
        };
        std::fs::write(dst.join(file), out).unwrap();
    }
    dst
}

#[test]
fn the_time_only_check_accepts_zero_counters_and_refuses_measured_ones() {
    let fast = edited_copy(
        "time-only",
        |s| {
            if let Some(c) = &mut s.counters {
                let keep = (
                    c.time_ms,
                    c.time_runs_ms.clone(),
                    c.regs_per_thread,
                    c.smem_static,
                    c.smem_dynamic,
                );
                *c = Counters {
                    inst_executed: 0,
                    inst_global_ld: 0,
                    inst_global_st: 0,
                    inst_shared_ld: 0,
                    inst_shared_st: 0,
                    inst_barrier: 0,
                    gld_requests: 0,
                    gst_requests: 0,
                    gld_sectors: 0,
                    gst_sectors: 0,
                    gld_l1_hit_sectors: None,
                    dram_bytes_read: 0,
                    dram_bytes_write: 0,
                    achieved_active_warps: 0.0,
                    global_atomic_requests: None,
                    time_ms: keep.0,
                    time_runs_ms: keep.1,
                    launches_per_run: None,
                    regs_per_thread: keep.2,
                    smem_static: keep.3,
                    smem_dynamic: keep.4,
                };
            }
        },
        "",
    );
    let full = fixture().join("collector");
    let r = report::time_only(&fast, &full).unwrap();
    assert_eq!(
        r.summary,
        "time-only mode: 16/16 samples as expected (0 not); median time ratio time-only/full ×1.00"
    );
    // A full run passed off as time-only: only the failed shape is as expected.
    let r = report::time_only(&full, &full).unwrap();
    assert!(
        r.summary.starts_with("time-only mode: 1/16 samples"),
        "{}",
        r.summary
    );
    assert!(r.markdown.contains("! hardware counters are not 0"));
    std::fs::remove_dir_all(fast).unwrap();
}

#[test]
fn the_register_count_of_the_runtime_is_compared_exactly() {
    let dir = edited_copy(
        "regs",
        |_| {},
        "saxpy\t16777216\t32x1x1\t524288x1x1\tregs_per_thread\t10\n\
         matmul\t1024\t32x4x1\t32x256x1\tregs_per_thread\t31\n",
    );
    let r = report::compare(&report::Inputs {
        collector: dir.clone(),
        ncu_csv: fixture().join("ncu.csv"),
        noflush: None,
        ncu_dram: None,
    })
    .unwrap();
    assert!(r
        .markdown
        .contains("| regs_per_thread from the code | 10 | ncu 16 | = collector |"));
    assert!(r
        .markdown
        .contains("| regs_per_thread from the code | 31 | ncu 32 | ! collector |"));
    assert!(
        r.summary.contains("collector = count from the code: 41/57"),
        "{}",
        r.summary
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn two_runs_of_the_same_launches_compare_equal_in_counts_and_close_in_dram() {
    let dir = fixture();
    // The same run against itself.
    let r = report::same(&dir.join("collector"), &dir.join("collector")).unwrap();
    assert!(
        r.summary.starts_with("collector A vs B: counts equal in 15/15 samples measured by both (0 differ, 1 failed in both, 0 missing from B); DRAM bytes within 5 % or 8 KiB: read 15/15, write 15/15; median ratio A/B: achieved warps ×1.000, time ×1.000"),
        "{}",
        r.summary
    );
    // With and without the L2 flush: the same counts, not the same DRAM bytes.
    let r = report::same(&dir.join("collector"), &dir.join("collector-noflush")).unwrap();
    assert!(
        r.summary.contains("counts equal in 15/15 samples"),
        "{}",
        r.summary
    );
    assert!(!r.summary.contains("read 15/15"), "{}", r.summary);
    // An instruction count that moved is named.
    let edited = edited_copy(
        "same",
        |s| {
            if let Some(c) = &mut s.counters {
                if s.block == [128, 1, 1] {
                    c.inst_executed += 1;
                }
            }
        },
        "",
    );
    let r = report::same(&dir.join("collector"), &edited).unwrap();
    assert!(
        !r.summary.contains("counts equal in 15/15"),
        "{}",
        r.summary
    );
    assert!(r.markdown.contains("! inst_executed "), "{}", r.markdown);
    let _ = std::fs::remove_dir_all(edited);
}
