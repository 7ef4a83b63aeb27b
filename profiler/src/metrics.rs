//! The hardware counters klaraptor measures: one table of fields and the metrics each is
//! read from, how the names a chip (or an ncu report) has are chosen from it, and how metric
//! values become the hardware part of a [`crate::record::Counters`]. The in-process collector
//! (`profiler/collector`) resolves the table against what CUPTI says the chip supports; the
//! ncu import ([`crate::plan::import_ncu`]) resolves it against the columns of an ncu raw
//! page. Launch attributes (time, registers, shared memory, block) are not counters: the
//! collector takes them from the launch, the ncu import from its `launch__` columns.
//!
//! Names were checked with the CUPTI 13.0 profiler host API's enumeration for GH100 (H100,
//! H200), GA100, AD102, GB100, GB202, TU102 and GV100 (`tests/cupti_host.rs` repeats the check
//! for GH100, GA100, AD102, GB100 and GB202 on every run).
//!
//! # Barrier instructions: an approximation
//!
//! No chip of these has a counter of barrier instructions: the range profiler's hardware
//! counters count warp instructions by pipe and by a few opcode classes (`op_global_ld`,
//! `op_ldc`, `op_branch`, …) but not `BAR`, and the `smsp__sass_inst_executed_op_*` family
//! has no barrier class either (ncu counts `BAR` only per opcode, by patching the SASS).
//! Barriers execute in the ADU pipe, so `smsp__inst_executed_pipe_adu −
//! smsp__inst_executed_op_ldc` bounds them from above. On the H200 (2026-11-22 GPU check,
//! `profiler/collector/tests/fixtures/h200-2026-11-22`, per-instruction counts from ncu's source page) that
//! difference is the exact `BAR` count plus the reads of special registers (`S2R`/`S2UR`:
//! block and CTA ids) the ADU also serves: +1 per warp in saxpy and the strided copy, +2 in
//! the naive matmul, +2 per warp and +1 per block in the block sum (whose exact count is
//! 7–11 per warp). So the collector uses the difference only where a warp waited at a CTA
//! barrier (`smsp__warps_issue_stalled_barrier > 0`), and 0 elsewhere: exact (0) for kernels
//! without `__syncthreads`, an upper bound (+1 to +3 per warp) for kernels with it. One-warp
//! blocks may pass a barrier without a stall and then count 0; a barrier costs such a block
//! nothing. Chips whose table lacks the stall counter fall back to the plain difference.

use std::collections::HashMap;

/// A hardware quantity the collector reports (a field of `record::Counters`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Field {
    InstExecuted,
    InstGlobalLd,
    InstGlobalSt,
    InstSharedLd,
    InstSharedSt,
    InstBarrier,
    GldRequests,
    GstRequests,
    GldSectors,
    GstSectors,
    GldL1HitSectors,
    DramBytesRead,
    DramBytesWrite,
    AchievedActiveWarps,
    GlobalAtomicRequests,
}

impl Field {
    /// The field's name in a profile record (`record::Counters`).
    pub fn name(self) -> &'static str {
        match self {
            Field::InstExecuted => "inst_executed",
            Field::InstGlobalLd => "inst_global_ld",
            Field::InstGlobalSt => "inst_global_st",
            Field::InstSharedLd => "inst_shared_ld",
            Field::InstSharedSt => "inst_shared_st",
            Field::InstBarrier => "inst_barrier",
            Field::GldRequests => "gld_requests",
            Field::GstRequests => "gst_requests",
            Field::GldSectors => "gld_sectors",
            Field::GstSectors => "gst_sectors",
            Field::GldL1HitSectors => "gld_l1_hit_sectors",
            Field::DramBytesRead => "dram_bytes_read",
            Field::DramBytesWrite => "dram_bytes_write",
            Field::AchievedActiveWarps => "achieved_active_warps",
            Field::GlobalAtomicRequests => "global_atomic_requests",
        }
    }
}

/// How a field's value is obtained from metric values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// One metric (full name: base metric, rollup, submetric).
    Metric(&'static str),
    /// The first metric minus the second.
    Difference(&'static str, &'static str),
    /// The first metric minus the second where the third is above zero, else 0.
    DifferenceWhere(&'static str, &'static str, &'static str),
    /// The two metrics added.
    Sum(&'static str, &'static str),
}

impl Source {
    /// The metric names this source reads.
    pub fn metrics(&self) -> Vec<&'static str> {
        match *self {
            Source::Metric(m) => vec![m],
            Source::Difference(a, b) => vec![a, b],
            Source::DifferenceWhere(a, b, c) => vec![a, b, c],
            Source::Sum(a, b) => vec![a, b],
        }
    }
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Metric(m) => f.write_str(m),
            Source::Difference(a, b) => write!(f, "{a} - {b}"),
            Source::DifferenceWhere(a, b, c) => write!(f, "{a} - {b} where {c} > 0, else 0"),
            Source::Sum(a, b) => write!(f, "{a} + {b}"),
        }
    }
}

/// Whether a field is a count (integral, stored as u64) or an average.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Count,
    Average,
}

/// One row of the table: a field and its sources, the first one the chip supports wins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Spec {
    pub field: Field,
    pub kind: Kind,
    pub sources: &'static [Source],
}

use Field::*;
use Source::{Difference, DifferenceWhere, Metric, Sum};

/// The metric table (sm_70 and newer). Counts are launch totals over the whole grid.
pub const TABLE: &[Spec] = &[
    Spec {
        field: InstExecuted,
        kind: Kind::Count,
        sources: &[Metric("smsp__inst_executed.sum")],
    },
    Spec {
        field: InstGlobalLd,
        kind: Kind::Count,
        sources: &[
            Metric("smsp__inst_executed_op_global_ld.sum"),
            Metric("smsp__sass_inst_executed_op_global_ld.sum"),
        ],
    },
    Spec {
        field: InstGlobalSt,
        kind: Kind::Count,
        sources: &[
            Metric("smsp__inst_executed_op_global_st.sum"),
            Metric("smsp__sass_inst_executed_op_global_st.sum"),
        ],
    },
    Spec {
        field: InstSharedLd,
        kind: Kind::Count,
        sources: &[
            Metric("smsp__inst_executed_op_shared_ld.sum"),
            Metric("smsp__sass_inst_executed_op_shared_ld.sum"),
        ],
    },
    Spec {
        field: InstSharedSt,
        kind: Kind::Count,
        sources: &[
            Metric("smsp__inst_executed_op_shared_st.sum"),
            Metric("smsp__sass_inst_executed_op_shared_st.sum"),
        ],
    },
    Spec {
        field: InstBarrier,
        kind: Kind::Count,
        // An approximation: see the module documentation.
        sources: &[
            DifferenceWhere(
                "smsp__inst_executed_pipe_adu.sum",
                "smsp__inst_executed_op_ldc.sum",
                "smsp__warps_issue_stalled_barrier.sum",
            ),
            Difference(
                "smsp__inst_executed_pipe_adu.sum",
                "smsp__inst_executed_op_ldc.sum",
            ),
        ],
    },
    Spec {
        field: GldRequests,
        kind: Kind::Count,
        sources: &[Metric("l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum")],
    },
    Spec {
        field: GstRequests,
        kind: Kind::Count,
        sources: &[Metric("l1tex__t_requests_pipe_lsu_mem_global_op_st.sum")],
    },
    Spec {
        field: GldSectors,
        kind: Kind::Count,
        sources: &[Metric("l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum")],
    },
    Spec {
        field: GstSectors,
        kind: Kind::Count,
        sources: &[Metric("l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum")],
    },
    Spec {
        field: GldL1HitSectors,
        kind: Kind::Count,
        sources: &[Metric(
            "l1tex__t_sectors_pipe_lsu_mem_global_op_ld_lookup_hit.sum",
        )],
    },
    Spec {
        field: DramBytesRead,
        kind: Kind::Count,
        // GB20x (GDDR7) names it dram__bytes_op_read.
        sources: &[
            Metric("dram__bytes_read.sum"),
            Metric("dram__bytes_op_read.sum"),
        ],
    },
    Spec {
        field: DramBytesWrite,
        kind: Kind::Count,
        sources: &[
            Metric("dram__bytes_write.sum"),
            Metric("dram__bytes_op_write.sum"),
        ],
    },
    Spec {
        field: AchievedActiveWarps,
        kind: Kind::Average,
        sources: &[Metric("sm__warps_active.avg.per_cycle_active")],
    },
    Spec {
        field: GlobalAtomicRequests,
        kind: Kind::Count,
        // Warp requests of global atomics that return a value (`atomicCAS`, a used
        // `atomicAdd`) and of reductions (an `atomicAdd` whose result is dropped): each
        // request is one warp's access, whatever its active lanes.
        sources: &[Sum(
            "l1tex__t_requests_pipe_lsu_mem_global_op_atom.sum",
            "l1tex__t_requests_pipe_lsu_mem_global_op_red.sum",
        )],
    },
];

/// Fields a chip may lack a counter for: [`resolve`] leaves them out instead of failing, and
/// [`decode`] gives `None`. L1 hits and atomics are new in the table: logs and chips without
/// the counter still give every other field.
pub const OPTIONAL: &[Field] = &[GldL1HitSectors, GlobalAtomicRequests];

/// The source chosen for each field of the table on one chip.
#[derive(Debug, Clone, PartialEq)]
pub struct Resolved {
    pub choices: Vec<(Spec, Source)>,
}

impl Resolved {
    /// Every metric to collect, each once, in table order.
    pub fn metric_names(&self) -> Vec<&'static str> {
        let mut out: Vec<&'static str> = Vec::new();
        for (_, s) in &self.choices {
            for m in s.metrics() {
                if !out.contains(&m) {
                    out.push(m);
                }
            }
        }
        out
    }

    pub fn source_of(&self, field: Field) -> Option<Source> {
        self.choices
            .iter()
            .find(|(s, _)| s.field == field)
            .map(|(_, src)| *src)
    }
}

/// Chooses, for each row of `table`, the first source whose metrics all pass `is_valid`;
/// an [`OPTIONAL`] field without one is left out. On failure returns one line per other
/// field that has no valid source, naming what was tried.
pub fn resolve(
    table: &[Spec],
    is_valid: impl FnMut(&str) -> bool,
) -> Result<Resolved, Vec<String>> {
    resolve_with(table, OPTIONAL, is_valid)
}

/// [`resolve`], with `optional` the fields that may go without a source.
pub fn resolve_with(
    table: &[Spec],
    optional: &[Field],
    mut is_valid: impl FnMut(&str) -> bool,
) -> Result<Resolved, Vec<String>> {
    let mut choices = Vec::new();
    let mut missing = Vec::new();
    let mut known: HashMap<&'static str, bool> = HashMap::new();
    for spec in table {
        let mut chosen = None;
        for src in spec.sources {
            let ok = src
                .metrics()
                .into_iter()
                .all(|m| *known.entry(m).or_insert_with(|| is_valid(m)));
            if ok {
                chosen = Some(*src);
                break;
            }
        }
        match chosen {
            Some(src) => choices.push((*spec, src)),
            None if optional.contains(&spec.field) => {}
            None => missing.push(format!(
                "{:?} (tried {})",
                spec.field,
                spec.sources
                    .iter()
                    .map(|s| s.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        }
    }
    if missing.is_empty() {
        Ok(Resolved { choices })
    } else {
        Err(missing)
    }
}

/// The hardware counters of one launch, decoded from metric values.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Hardware {
    pub inst_executed: u64,
    pub inst_global_ld: u64,
    pub inst_global_st: u64,
    pub inst_shared_ld: u64,
    pub inst_shared_st: u64,
    pub inst_barrier: u64,
    pub gld_requests: u64,
    pub gst_requests: u64,
    pub gld_sectors: u64,
    pub gst_sectors: u64,
    /// `None` where the table resolved without it ([`OPTIONAL`]).
    pub gld_l1_hit_sectors: Option<u64>,
    pub dram_bytes_read: u64,
    pub dram_bytes_write: u64,
    pub achieved_active_warps: f64,
    /// `None` where the table resolved without it ([`OPTIONAL`]).
    pub global_atomic_requests: Option<u64>,
}

/// What a sample records of a launch besides its hardware counters.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LaunchFigures {
    pub time_ms: f64,
    pub time_runs_ms: Vec<f64>,
    pub regs_per_thread: u32,
    pub smem_static: u32,
    pub smem_dynamic: u32,
}

impl Hardware {
    /// The counters of a profile record: these hardware counts and the launch's figures.
    pub fn into_counters(self, launch: LaunchFigures) -> crate::record::Counters {
        crate::record::Counters {
            inst_executed: self.inst_executed,
            inst_global_ld: self.inst_global_ld,
            inst_global_st: self.inst_global_st,
            inst_shared_ld: self.inst_shared_ld,
            inst_shared_st: self.inst_shared_st,
            inst_barrier: self.inst_barrier,
            gld_requests: self.gld_requests,
            gst_requests: self.gst_requests,
            gld_sectors: self.gld_sectors,
            gst_sectors: self.gst_sectors,
            gld_l1_hit_sectors: self.gld_l1_hit_sectors,
            dram_bytes_read: self.dram_bytes_read,
            dram_bytes_write: self.dram_bytes_write,
            achieved_active_warps: self.achieved_active_warps,
            global_atomic_requests: self.global_atomic_requests,
            time_ms: launch.time_ms,
            time_runs_ms: launch.time_runs_ms,
            launches_per_run: None,
            regs_per_thread: launch.regs_per_thread,
            smem_static: launch.smem_static,
            smem_dynamic: launch.smem_dynamic,
        }
    }
}

/// Why metric values could not be decoded.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DecodeError {
    #[error("metric {0} has no value")]
    Missing(&'static str),
    #[error("{field:?} ({from}) is {value}, not a finite non-negative number")]
    Invalid {
        field: Field,
        from: String,
        value: f64,
    },
}

/// Decodes metric values (full metric name → value, as CUPTI evaluates them for one range)
/// into counters. Counts are rounded to the nearest integer (CUPTI returns doubles); a count
/// that is negative, NaN or infinite is an error, so is a missing metric.
pub fn decode(resolved: &Resolved, values: &HashMap<&str, f64>) -> Result<Hardware, DecodeError> {
    let get = |m: &'static str| values.get(m).copied().ok_or(DecodeError::Missing(m));
    let mut count = HashMap::new();
    let mut average = HashMap::new();
    for (spec, src) in &resolved.choices {
        let v = match *src {
            Source::Metric(m) => get(m)?,
            Source::Difference(a, b) => get(a)? - get(b)?,
            Source::Sum(a, b) => get(a)? + get(b)?,
            Source::DifferenceWhere(a, b, c) => {
                let (va, vb, gate) = (get(a)?, get(b)?, get(c)?);
                if gate.is_nan() {
                    gate
                } else if gate > 0.0 {
                    va - vb
                } else {
                    0.0
                }
            }
        };
        // A difference of two exact counts may come out as -0.0 or a rounding hair below.
        if !v.is_finite() || v < -0.5 {
            return Err(DecodeError::Invalid {
                field: spec.field,
                from: src.to_string(),
                value: v,
            });
        }
        match spec.kind {
            Kind::Count => {
                count.insert(spec.field, v.round().max(0.0) as u64);
            }
            Kind::Average => {
                average.insert(spec.field, v.max(0.0));
            }
        }
    }
    let c = |f: Field| count.get(&f).copied().unwrap_or(0);
    Ok(Hardware {
        inst_executed: c(InstExecuted),
        inst_global_ld: c(InstGlobalLd),
        inst_global_st: c(InstGlobalSt),
        inst_shared_ld: c(InstSharedLd),
        inst_shared_st: c(InstSharedSt),
        inst_barrier: c(InstBarrier),
        gld_requests: c(GldRequests),
        gst_requests: c(GstRequests),
        gld_sectors: c(GldSectors),
        gst_sectors: c(GstSectors),
        gld_l1_hit_sectors: count.get(&GldL1HitSectors).copied(),
        dram_bytes_read: c(DramBytesRead),
        dram_bytes_write: c(DramBytesWrite),
        achieved_active_warps: average.get(&AchievedActiveWarps).copied().unwrap_or(0.0),
        global_atomic_requests: count.get(&GlobalAtomicRequests).copied(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL_FIELDS: [Field; 15] = [
        InstExecuted,
        InstGlobalLd,
        InstGlobalSt,
        InstSharedLd,
        InstSharedSt,
        InstBarrier,
        GldRequests,
        GstRequests,
        GldSectors,
        GstSectors,
        GldL1HitSectors,
        DramBytesRead,
        DramBytesWrite,
        AchievedActiveWarps,
        GlobalAtomicRequests,
    ];

    #[test]
    fn table_covers_every_field_once_with_well_formed_names() {
        for f in ALL_FIELDS {
            assert_eq!(
                TABLE.iter().filter(|s| s.field == f).count(),
                1,
                "{f:?} must have exactly one row"
            );
        }
        assert_eq!(TABLE.len(), ALL_FIELDS.len());
        for spec in TABLE {
            assert!(!spec.sources.is_empty(), "{:?}", spec.field);
            for m in spec.sources.iter().flat_map(|s| s.metrics()) {
                let (base, rest) = m.split_once('.').expect("a rollup");
                assert!(base.contains("__"), "{m}: unit__counter");
                assert!(
                    base.chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'),
                    "{m}"
                );
                match spec.kind {
                    Kind::Count => assert_eq!(rest, "sum", "{m}: counts are launch totals"),
                    Kind::Average => assert!(rest.starts_with("avg"), "{m}"),
                }
            }
        }
    }

    const ADU: &str = "smsp__inst_executed_pipe_adu.sum";
    const LDC: &str = "smsp__inst_executed_op_ldc.sum";
    const STALL_BARRIER: &str = "smsp__warps_issue_stalled_barrier.sum";

    #[test]
    fn resolve_takes_the_first_valid_source_and_asks_each_name_once() {
        let mut asked = Vec::new();
        let r = resolve(TABLE, |m| {
            asked.push(m.to_string());
            // A chip with neither the barrier-stall counter nor the global-load op counter.
            m != STALL_BARRIER && m != "smsp__inst_executed_op_global_ld.sum"
        })
        .unwrap();
        assert_eq!(r.source_of(InstBarrier), Some(Difference(ADU, LDC)));
        assert_eq!(
            r.source_of(InstGlobalLd),
            Some(Metric("smsp__sass_inst_executed_op_global_ld.sum"))
        );
        let mut unique = asked.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), asked.len(), "no name is asked twice");
        let names = r.metric_names();
        assert!(names.contains(&ADU));
        assert!(!names.contains(&STALL_BARRIER));
        assert_eq!(
            names.len(),
            17,
            "13 single metrics + a difference of two + a sum of two"
        );
    }

    #[test]
    fn with_every_counter_the_barrier_count_is_gated_by_barrier_stalls() {
        let r = resolve(TABLE, |_| true).unwrap();
        assert_eq!(
            r.source_of(InstBarrier),
            Some(DifferenceWhere(ADU, LDC, STALL_BARRIER))
        );
        assert_eq!(r.metric_names().len(), 18);
        assert_eq!(
            r.source_of(InstBarrier).unwrap().to_string(),
            "smsp__inst_executed_pipe_adu.sum - smsp__inst_executed_op_ldc.sum \
             where smsp__warps_issue_stalled_barrier.sum > 0, else 0"
        );
    }

    #[test]
    fn a_chip_without_the_l1_hit_counter_gives_every_other_field() {
        const HIT: &str = "l1tex__t_sectors_pipe_lsu_mem_global_op_ld_lookup_hit.sum";
        let r = resolve(TABLE, |m| m != HIT).unwrap();
        assert_eq!(r.source_of(GldL1HitSectors), None);
        assert!(!r.metric_names().contains(&HIT));
        let hw = decode(&r, &saxpy_values()).unwrap();
        assert_eq!(hw.gld_l1_hit_sectors, None);
        assert_eq!(hw.gld_sectors, 32768 * 8);
        let mut v = saxpy_values();
        v.insert(HIT, 4096.0);
        assert_eq!(
            decode(&gh100_like(), &v).unwrap().gld_l1_hit_sectors,
            Some(4096)
        );
    }

    #[test]
    fn resolve_names_each_field_without_a_valid_source() {
        let err = resolve(TABLE, |m| !m.starts_with("dram__")).unwrap_err();
        assert_eq!(
            err,
            vec![
                "DramBytesRead (tried dram__bytes_read.sum, dram__bytes_op_read.sum)".to_string(),
                "DramBytesWrite (tried dram__bytes_write.sum, dram__bytes_op_write.sum)"
                    .to_string(),
            ]
        );
    }

    /// The values CUPTI would evaluate for saxpy over n = 2^20 floats in blocks of 256
    /// threads, with a cold L2: each of the 32768 warps issues one 128-byte load of x and of
    /// y (4 sectors each) and one store of y; 3 × 4 MiB come from and go to DRAM. The ADU
    /// executes 4 LDC and one special-register read per warp (as on the H200), and no warp
    /// waits at a barrier.
    fn saxpy_values() -> HashMap<&'static str, f64> {
        let warps = (1u64 << 20) / 32;
        HashMap::from([
            ("smsp__inst_executed.sum", (warps * 12) as f64),
            ("smsp__inst_executed_op_global_ld.sum", (warps * 2) as f64),
            ("smsp__inst_executed_op_global_st.sum", warps as f64),
            ("smsp__inst_executed_op_shared_ld.sum", 0.0),
            ("smsp__inst_executed_op_shared_st.sum", 0.0),
            (ADU, (warps * 5) as f64),
            (LDC, (warps * 4) as f64),
            (STALL_BARRIER, 0.0),
            (
                "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
                (warps * 2) as f64,
            ),
            (
                "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum",
                warps as f64,
            ),
            (
                "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
                (warps * 8) as f64,
            ),
            (
                "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum",
                (warps * 4) as f64,
            ),
            (
                "l1tex__t_sectors_pipe_lsu_mem_global_op_ld_lookup_hit.sum",
                0.0,
            ),
            ("dram__bytes_read.sum", 8_388_608.0),
            ("dram__bytes_write.sum", 4_194_304.0),
            ("sm__warps_active.avg.per_cycle_active", 52.75),
            ("l1tex__t_requests_pipe_lsu_mem_global_op_atom.sum", 0.0),
            ("l1tex__t_requests_pipe_lsu_mem_global_op_red.sum", 0.0),
        ])
    }

    fn gh100_like() -> Resolved {
        resolve(TABLE, |_| true).unwrap()
    }

    /// The table as a chip without the barrier-stall counter resolves it (and as the H200
    /// check of 2026-11-22 ran).
    fn ungated() -> Resolved {
        resolve(TABLE, |m| m != STALL_BARRIER).unwrap()
    }

    #[test]
    fn decode_maps_each_metric_to_its_field() {
        let hw = decode(&gh100_like(), &saxpy_values()).unwrap();
        let warps = 32768;
        assert_eq!(
            hw,
            Hardware {
                inst_executed: warps * 12,
                inst_global_ld: warps * 2,
                inst_global_st: warps,
                inst_shared_ld: 0,
                inst_shared_st: 0,
                inst_barrier: 0,
                gld_requests: warps * 2,
                gst_requests: warps,
                gld_sectors: warps * 8,
                gst_sectors: warps * 4,
                gld_l1_hit_sectors: Some(0),
                dram_bytes_read: 8_388_608,
                dram_bytes_write: 4_194_304,
                achieved_active_warps: 52.75,
                global_atomic_requests: Some(0),
            }
        );
    }

    #[test]
    fn decode_computes_the_barrier_difference_where_warps_waited_and_rounds_counts() {
        let mut v = saxpy_values();
        // 4096 warps × 2 BAR.SYNC, and 100 LDC.
        v.insert(ADU, 8292.0000001);
        v.insert(LDC, 100.0);
        v.insert(STALL_BARRIER, 5321.0);
        v.insert("dram__bytes_read.sum", 1023.9999);
        let hw = decode(&gh100_like(), &v).unwrap();
        assert_eq!(hw.inst_barrier, 8192);
        assert_eq!(hw.dram_bytes_read, 1024);
    }

    #[test]
    fn atomics_and_reductions_add_up_and_are_optional() {
        // A warp-shuffle sum: one reduction (an atomicAdd whose result is dropped) a warp,
        // and a counter bumped with a returning atomicAdd by each block's first warp.
        let mut v = saxpy_values();
        v.insert("l1tex__t_requests_pipe_lsu_mem_global_op_red.sum", 32768.0);
        v.insert("l1tex__t_requests_pipe_lsu_mem_global_op_atom.sum", 4096.0);
        let hw = decode(&gh100_like(), &v).unwrap();
        assert_eq!(hw.global_atomic_requests, Some(32768 + 4096));
        // A chip (or an ncu report) without the counters: every other field, atomics None.
        let without =
            resolve(TABLE, |m| !m.contains("_op_atom") && !m.contains("_op_red")).unwrap();
        assert_eq!(without.source_of(GlobalAtomicRequests), None);
        let hw = decode(&without, &saxpy_values()).unwrap();
        assert_eq!(hw.global_atomic_requests, None);
        assert_eq!(hw.gld_requests, 2 * 32768);
    }

    #[test]
    fn without_barrier_stalls_the_adus_other_instructions_are_not_barriers() {
        let v = saxpy_values();
        assert_eq!(decode(&gh100_like(), &v).unwrap().inst_barrier, 0);
        // Without the gate, saxpy's special-register reads pass for one barrier per warp.
        assert_eq!(decode(&ungated(), &v).unwrap().inst_barrier, 32768);
        let mut v = saxpy_values();
        v.insert(STALL_BARRIER, f64::NAN);
        assert!(matches!(
            decode(&gh100_like(), &v),
            Err(DecodeError::Invalid {
                field: InstBarrier,
                ..
            })
        ));
        v.remove(STALL_BARRIER);
        assert_eq!(
            decode(&gh100_like(), &v),
            Err(DecodeError::Missing(STALL_BARRIER))
        );
    }

    #[test]
    fn decode_refuses_missing_negative_and_nan_values() {
        let r = gh100_like();
        let mut v = saxpy_values();
        v.remove("dram__bytes_write.sum");
        assert_eq!(
            decode(&r, &v),
            Err(DecodeError::Missing("dram__bytes_write.sum"))
        );

        let mut v = saxpy_values();
        v.insert(ADU, 0.0);
        v.insert(LDC, 5.0);
        v.insert(STALL_BARRIER, 1.0);
        let e = decode(&r, &v).unwrap_err();
        assert_eq!(
            e.to_string(),
            "InstBarrier (smsp__inst_executed_pipe_adu.sum - smsp__inst_executed_op_ldc.sum \
             where smsp__warps_issue_stalled_barrier.sum > 0, else 0) is -5, not a finite \
             non-negative number"
        );

        let mut v = saxpy_values();
        v.insert("sm__warps_active.avg.per_cycle_active", f64::NAN);
        assert!(matches!(
            decode(&r, &v),
            Err(DecodeError::Invalid {
                field: AchievedActiveWarps,
                ..
            })
        ));
    }
}
