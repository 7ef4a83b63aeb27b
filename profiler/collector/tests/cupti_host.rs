//! The CUPTI profiler host API of the toolchain's libcupti (no GPU needed): the metric table
//! resolves on the chips klaraptor targets, and the config image for it builds.

use klaraptor_collector::collect::{resolve_on_chip, Collector};
use klaraptor_collector::cupti::{CuptiLib, HostObject, MetricConfig, MetricKind};
use klaraptor_collector::load::Candidate;
use klaraptor_collector::metrics::{Field, Source};
use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::Arc;

/// The libcupti.so.13 scripts/setup installs (CUDA 13.0 wheels).
fn cupti() -> Arc<CuptiLib> {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.toolchain/cuda/lib/libcupti.so.13");
    assert!(
        path.exists(),
        "{} is missing: run scripts/setup",
        path.display()
    );
    CuptiLib::open(&[Candidate::File(path)]).expect("open the toolchain's libcupti")
}

#[test]
fn the_table_resolves_on_gh100_with_hardware_counters_and_the_gated_adu_barrier() {
    let lib = cupti();
    assert!(lib.supported_chips().unwrap().iter().any(|c| c == "GH100"));
    let r = resolve_on_chip(&lib, "GH100", None).expect("every field has a name on GH100");
    assert_eq!(
        r.source_of(Field::InstGlobalLd),
        Some(Source::Metric("smsp__inst_executed_op_global_ld.sum"))
    );
    assert_eq!(
        r.source_of(Field::InstBarrier),
        Some(Source::DifferenceWhere(
            "smsp__inst_executed_pipe_adu.sum",
            "smsp__inst_executed_op_ldc.sum",
            "smsp__warps_issue_stalled_barrier.sum"
        ))
    );
    assert_eq!(
        r.source_of(Field::AchievedActiveWarps),
        Some(Source::Metric("sm__warps_active.avg.per_cycle_active"))
    );
    assert_eq!(
        r.source_of(Field::GlobalAtomicRequests),
        Some(Source::Sum(
            "l1tex__t_requests_pipe_lsu_mem_global_op_atom.sum",
            "l1tex__t_requests_pipe_lsu_mem_global_op_red.sum"
        ))
    );
    let names = r.metric_names();
    assert_eq!(names.len(), 18);
    let config = MetricConfig::new(&lib, "GH100", None, &names).expect("config image");
    let passes = config.passes();
    assert!((1..=8).contains(&passes), "{passes} passes");
    assert_eq!(config.metric_names().collect::<Vec<_>>(), names);
}

/// The collector leaves the atomics out unless KLARAPTOR_COLLECT_ATOMICS asks: on the GH100
/// their two counters cost a profiler pass of every profiled size.
#[test]
fn the_atomics_cost_a_pass_on_gh100() {
    let lib = cupti();
    let r = resolve_on_chip(&lib, "GH100", None).unwrap();
    let all = r.metric_names();
    let mut without = r.clone();
    without
        .choices
        .retain(|(spec, _)| spec.field != Field::GlobalAtomicRequests);
    let fewer = without.metric_names();
    assert_eq!(all.len(), fewer.len() + 2);
    let passes = |names: &[&str]| {
        MetricConfig::new(&lib, "GH100", None, names)
            .unwrap()
            .passes()
    };
    assert_eq!((passes(&all), passes(&fewer)), (4, 3));
}

/// resolve_on_chip checks every row's first source with one host object and falls back to
/// one host object per metric: both give the same choices on every chip.
#[test]
fn the_one_object_check_chooses_as_the_metric_by_metric_check() {
    let lib = cupti();
    for chip in ["GH100", "GA100", "AD102", "GB100", "GB202"] {
        let fast = resolve_on_chip(&lib, chip, None).unwrap();
        let slow =
            klaraptor_collector::metrics::resolve(klaraptor_collector::metrics::TABLE, |m| {
                let mut host = HostObject::new(&lib, chip, None).unwrap();
                host.add_metrics(&[std::ffi::CString::new(m).unwrap()])
                    .is_ok()
            })
            .unwrap();
        assert_eq!(fast, slow, "{chip}");
    }
}

#[test]
fn the_table_resolves_on_ampere_ada_and_blackwell_too() {
    let lib = cupti();
    for chip in ["GA100", "AD102", "GB100", "GB202"] {
        let r = resolve_on_chip(&lib, chip, None).unwrap_or_else(|e| panic!("{chip}: {e}"));
        assert_eq!(r.metric_names().len(), 18, "{chip}");
        assert!(
            r.source_of(Field::GlobalAtomicRequests).is_some(),
            "{chip}: no counter of global atomics"
        );
        assert!(
            matches!(
                r.source_of(Field::InstBarrier),
                Some(Source::DifferenceWhere(..))
            ),
            "{chip}"
        );
    }
}

/// No chip klaraptor targets has a counter of barrier instructions: the reason the collector
/// approximates them (see `metrics`). Every instruction counter of every chip is checked:
/// none names BAR (the CTA barrier; UTCBAR of Blackwell's tensor cores is another thing).
#[test]
fn no_chip_has_a_barrier_instruction_counter() {
    let lib = cupti();
    for chip in [
        "GV100", "TU102", "GA100", "AD102", "GH100", "GB100", "GB202",
    ] {
        let host = HostObject::new(&lib, chip, None).unwrap();
        let counters = host.base_metrics(MetricKind::Counter).unwrap();
        assert!(counters.len() > 1000, "{chip}: {} counters", counters.len());
        for m in counters.iter().filter(|m| m.contains("inst_executed")) {
            let d = host.metric_properties(m).unwrap().description;
            let names_bar = d
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '.' || c == '_'))
                .any(|w| w == "BAR" || w.starts_with("BAR."));
            assert!(
                !m.contains("op_bar") && !names_bar,
                "{chip}: {m} ({d}) may count barriers: revisit the InstBarrier row"
            );
        }
        assert!(counters.iter().any(|m| m == "smsp__inst_executed_pipe_adu"));
        assert!(counters
            .iter()
            .any(|m| m == "smsp__warps_issue_stalled_barrier"));
    }
}

#[test]
fn the_host_api_describes_the_barrier_components() {
    let lib = cupti();
    let host = HostObject::new(&lib, "GH100", None).unwrap();
    let adu = host
        .metric_properties("smsp__inst_executed_pipe_adu")
        .unwrap();
    assert_eq!(adu.kind, Some(MetricKind::Counter));
    assert!(adu.description.contains("adu pipe"), "{}", adu.description);
    let ldc = host
        .metric_properties("smsp__inst_executed_op_ldc")
        .unwrap();
    assert!(ldc.description.contains("LDC"), "{}", ldc.description);
    let stall = host
        .metric_properties("smsp__warps_issue_stalled_barrier")
        .unwrap();
    assert!(
        stall.description.contains("CTA barrier"),
        "{}",
        stall.description
    );
    let counters = host.base_metrics(MetricKind::Counter).unwrap();
    assert!(counters.iter().any(|m| m == "smsp__inst_executed"));
    assert!(!counters
        .iter()
        .any(|m| m == "smsp__inst_executed_op_barrier"));
    let subs = host
        .sub_metrics("sm__warps_active", MetricKind::Counter)
        .unwrap();
    assert!(
        subs.iter().any(|s| s == ".avg.per_cycle_active"),
        "{subs:?}"
    );
}

#[test]
fn an_unknown_metric_or_chip_is_a_named_cupti_error() {
    let lib = cupti();
    let err = resolve_on_chip(&lib, "XX999", None)
        .unwrap_err()
        .to_string();
    assert!(err.contains("cuptiProfilerHostInitialize failed"), "{err}");
    let mut host = HostObject::new(&lib, "GH100", None).unwrap();
    let err = host
        .add_metrics(&[c"smsp__no_such_counter.sum".into()])
        .unwrap_err();
    // CUPTI 13.0 answers CUPTI_ERROR_INVALID_PARAMETER (not …_INVALID_METRIC_NAME).
    assert_eq!(err.cupti_code(), Some(1), "{err}");
    assert!(err
        .to_string()
        .starts_with("cuptiProfilerHostConfigAddMetrics failed: "));
}

#[test]
fn without_a_driver_the_collector_does_not_start_and_says_why() {
    let env = |k: &str| match k {
        "KLARAPTOR_LIBCUDA" => Some(OsString::from("/nonexistent/klaraptor/libcuda.so.1")),
        _ => None,
    };
    let err = Collector::new(&env)
        .err()
        .expect("no driver there")
        .to_string();
    assert!(
        err.starts_with("could not load libcuda (the CUDA driver): /nonexistent/klaraptor/libcuda.so.1: not found"),
        "{err}"
    );
}

#[test]
fn the_c_entry_point_refuses_a_null_request_without_panicking() {
    // SAFETY: NULL is part of the contract (refused).
    let rc = unsafe { klaraptor_collector::klaraptor_collect(std::ptr::null()) };
    assert_eq!(rc, 1);
}

#[test]
fn a_well_formed_request_without_a_usable_gpu_fails_cleanly_and_its_samples_say_why() {
    use klaraptor_collector::sys::request::klaraptor_collect_request;
    use std::ffi::{c_int, c_void};
    unsafe extern "C" fn never(_: *mut c_void, _: c_int) -> c_int {
        panic!("no shape may be launched without a CUDA context");
    }
    let out = std::env::temp_dir().join(format!("klaraptor-collect-{}.jsonl", std::process::id()));
    let out_c = std::ffi::CString::new(out.to_str().unwrap()).unwrap();
    let data = [1024i64];
    let blocks = [256u32, 1, 1];
    let grids = [4u32, 1, 1];
    let req = klaraptor_collect_request {
        abi_version: 2,
        kernel_id: c"saxpy".as_ptr(),
        kernel_name: c"saxpy".as_ptr(),
        n_data: 1,
        data: data.as_ptr(),
        n_shapes: 1,
        blocks: blocks.as_ptr(),
        grids: grids.as_ptr(),
        kernel: 0x1000 as *mut c_void,
        stream: std::ptr::null_mut(),
        dynamic_smem: 0,
        runs: 3,
        warmup: 1,
        out_path: out_c.as_ptr(),
        ctx: std::ptr::null_mut(),
        launch: Some(never),
        progress: None,
    };
    // Here there is no driver (or, on a GPU machine, no context on this thread): the
    // collector must refuse, say why on stderr, and return nonzero; each shape gets a
    // sample that says why (the driver's warning quotes it, and the profile is incomplete).
    let _ = std::fs::remove_file(&out);
    // SAFETY: every pointer of `req` points to live data of this function.
    let rc = unsafe { klaraptor_collector::klaraptor_collect(&req) };
    assert_eq!(rc, 1);
    let text = std::fs::read_to_string(&out).expect("a sample per shape");
    let _ = std::fs::remove_file(&out);
    let samples: Vec<klaraptor_profiler::record::Sample> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(samples.len(), 1, "{text}");
    assert_eq!(samples[0].block, [256, 1, 1]);
    assert_eq!(samples[0].grid, [4, 1, 1]);
    assert!(samples[0].counters.is_none());
    let err = samples[0]
        .collector_error()
        .expect("the collector's failure");
    assert!(err.starts_with("the collector failed: "), "{err}");
}
