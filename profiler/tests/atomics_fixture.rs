//! What the collector's count of global atomics (`global_atomic_requests`) counts, on records
//! captured on an NVIDIA H100 on 2026-11-26 (tests/fixtures/atomics-h100-2026-11-26): one
//! request per warp that issues an atomic or a reduction, whatever its active lanes. And what
//! those requests cost when they all go to one address.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use klaraptor_profiler::record::Sample;

fn dir(program: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/atomics-h100-2026-11-26")
        .join(program)
}

/// The samples of each kernel of `program`'s records, by kernel name (kernels.tsv).
fn samples(program: &str) -> BTreeMap<String, Vec<Sample>> {
    let d = dir(program);
    let tsv = std::fs::read_to_string(d.join("kernels.tsv")).unwrap();
    let mut out = BTreeMap::new();
    for line in tsv.lines() {
        let f: Vec<&str> = line.split('\t').collect();
        let text = std::fs::read_to_string(d.join(format!("{}.jsonl", f[0]))).unwrap();
        let v: Vec<Sample> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        out.insert(f[2].to_string(), v);
    }
    out
}

fn warps(s: &Sample) -> u64 {
    let threads = u64::from(s.block[0] * s.block[1] * s.block[2]);
    let blocks: u64 = s.grid.iter().map(|&g| u64::from(g)).product();
    blocks * threads.div_ceil(32)
}

fn blocks(s: &Sample) -> u64 {
    s.grid.iter().map(|&g| u64::from(g)).product()
}

fn atomics(s: &Sample) -> u64 {
    s.counters
        .as_ref()
        .and_then(|c| c.global_atomic_requests)
        .expect("the collector counted atomics")
}

#[test]
fn one_request_per_warp_that_issues_an_atomic() {
    let k = samples("reduce_atomic");
    // The warp-shuffle sum: lane 0 of every warp adds the warp's sum.
    let sum = &k["sum_shfl_atomic"];
    assert!(sum.len() >= 16, "{} samples", sum.len());
    for s in sum {
        assert_eq!(atomics(s), warps(s), "{:?} x {:?}", s.block, s.grid);
    }
    // The shared-memory tree: thread 0 of every block.
    for s in &k["dot_smem_atomic"] {
        assert_eq!(atomics(s), blocks(s), "{:?} x {:?}", s.block, s.grid);
    }
    // One key a thread, 32 distinct bins: still one request a warp, for every warp with a
    // key (the last block's warps past the keys have none).
    for s in &samples("histogram_atomic")["histogram_atomic"] {
        let keys = u64::try_from(s.sizes[0]).unwrap();
        let bx = u64::from(s.block[0]);
        let with_keys: u64 = (0..blocks(s))
            .map(|b| keys.saturating_sub(b * bx).min(bx).div_ceil(32))
            .sum();
        assert_eq!(atomics(s), with_keys, "{:?}", s.block);
    }
    // Shared-memory bins: each block adds its 32 counters, one bin a thread, so a block of
    // b threads issues ceil(32 / b) requests a warp-wide pass (fewer where a counter is 0).
    for s in &samples("histogram_shared")["histogram_shared"] {
        let per_block = 32u64.div_ceil(u64::from(s.block[0])).max(1);
        let a = atomics(s);
        assert!(
            a <= blocks(s) * per_block && a * 100 >= blocks(s) * per_block * 95,
            "{:?}: {a} requests, {} blocks",
            s.block,
            blocks(s)
        );
    }
}

/// Requests to one address serialise: dot_smem_atomic with 1- and 2-thread blocks (262144
/// and 131072 blocks, one `atomicAdd` each, nothing else worth the time) takes 1.6–2.0 ns a
/// request, and twice the requests take twice the time.
#[test]
fn atomics_on_one_address_serialise() {
    let k = samples("reduce_atomic");
    let per = |bx: u32| {
        let s = k["dot_smem_atomic"]
            .iter()
            .find(|s| s.block == [bx, 1, 1])
            .unwrap();
        s.counters.as_ref().unwrap().time_ms * 1e6 / atomics(s) as f64
    };
    let (one, two) = (per(1), per(2));
    assert!((1.6..2.0).contains(&one), "{one} ns a request");
    assert!(
        (one / two - 1.0).abs() < 0.05,
        "{one} and {two} ns a request"
    );
}
