//! # klaraptor-collector
//!
//! What it is for: the in-process collector of klaraptor's profiling builds. The profiling
//! variant of a user's program `dlopen`s this library (`libklaraptor_collector.so`) and calls
//! [`klaraptor_collect`] once per intercepted launch (the C interface is
//! `runtime-shim/include/klaraptor_collect.h`); the collector launches each candidate block
//! shape through the shim, times it with CUDA events and reads its hardware counters with the
//! CUPTI range profiler, and appends one `klaraptor_profiler::record::Sample` per shape, as a
//! JSON line, to the request's file.
//!
//! What it is not: the profile database or the choice of sizes and shapes (see
//! `klaraptor-profiler` and the driver), nor a general CUPTI binding.
//!
//! Layout, following the data: [`sys`] (raw bindgen output, libraries loaded at run time
//! by [`load`]), [`error`] (checked results), [`driver`] and [`cupti`] (the safe API),
//! [`metrics`] (the metric table and decoding), [`mod@collect`] (the sweep), [`sweep`] (its
//! sessions' bookkeeping, GPU-free), [`request`] (the C request). Nothing links against
//! libcuda or libcupti: the crate builds and its tests run on a machine without a GPU.
//!
//! Environment (read once, when the collector starts):
//! - `KLARAPTOR_CUPTI` (libcupti to use), `KLARAPTOR_LIBCUDA` (libcuda to use);
//! - `KLARAPTOR_COLLECT_TIME_ONLY=1`: time-only mode. Warm-up and timed launches only: CUPTI
//!   is not loaded and no profiler pass runs. Every measured sample still carries `counters`:
//!   `time_ms` and `time_runs_ms` as in the full mode, `regs_per_thread`, `smem_static` and
//!   `smem_dynamic` set, and every hardware counter (`inst_*`, `g*_requests`, `g*_sectors`,
//!   `dram_bytes_*`, `achieved_active_warps`) 0. `inst_executed == 0` tells such a sample from
//!   a profiled one (a launch that ran executes at least one instruction). For exhaustive
//!   searches over shapes at large sizes (the accuracy study), where only time matters;
//! - `KLARAPTOR_COLLECT_DEBUG=1`: print each CUDA and CUPTI step on stderr, the kernel's
//!   resources, and one `metric values {…}` line of raw CUPTI values per shape;
//! - `KLARAPTOR_COLLECT_NO_FLUSH=1`: no L2 flush before the profiled launches;
//! - `KLARAPTOR_COLLECT_RANGES=<n>`: at most n shapes per range-profiler session (default:
//!   every shape of a request in one session; 1 gives one session per shape, the first
//!   design, for comparisons; see [`mod@collect`]);
//! - `KLARAPTOR_COLLECT_BATCH_US=<µs>` (default 100): how long one timed run should last.
//!   Each run is queued behind a gate kernel ([`gate`]) so that the CPU's queueing is not
//!   timed, and repeats the shape's launch back to back until it lasts about that long (at
//!   most 100 launches, counted from one timed launch after the warm-up); `time_runs_ms`
//!   holds each run's mean per launch and `launches_per_run` the count. 0: one launch a run;
//! - `KLARAPTOR_COLLECT_TIMING=1`: one `klaraptor-collect: timing <kernel> key=value …` line
//!   per request on stderr: where its wall time went ([`sweep::SweepStats`]);
//! - `KLARAPTOR_COLLECT_EXTRA_METRICS=a.sum,b.sum`: metrics collected besides the table's and
//!   only shown in the `metric values` lines (for trying candidate metrics on a GPU);
//! - `KLARAPTOR_COLLECT_ENABLE_PER_SESSION=1`: the range profiler enabled for each session and
//!   disabled after it, the shapes timed with it disabled (by default it is enabled once per
//!   context, before the first timing, and kept: a first pass costs 180-190 ms to start);
//! - `KLARAPTOR_COLLECT_ATOMICS=1`: also count global atomic and reduction requests
//!   (`global_atomic_requests`; otherwise absent from the samples): no model reads them, and
//!   on the GH100 they add a profiler pass to every profiled size.
//!
//! What the fields mean, where the collector's differ from ncu's: `regs_per_thread` is the
//! compiled kernel's count (`CU_FUNC_ATTRIBUTE_NUM_REGS`, as `ptxas -v` and
//! `cudaFuncGetAttributes` give it); ncu's `launch__registers_per_thread` can be larger for
//! kernels of few registers (16 for a 10-register kernel on the H200) and fills the same
//! number of 256-register allocation units per warp. `inst_barrier` is an approximation
//! on every chip (no chip counts barrier instructions): see [`metrics`].

pub mod collect;
pub mod cupti;
pub(crate) mod debug;
pub mod driver;
pub mod error;
pub mod flush;
pub mod gate;
pub mod load;
/// The counter table and its decoding live in the profiler, shared with the ncu import.
pub use klaraptor_profiler::metrics;
pub mod request;
pub mod stats;
pub mod sweep;
pub mod sys;

use collect::Collector;
use error::Error;
use request::Request;
use std::ffi::c_int;
use std::sync::Mutex;
use sys::request::klaraptor_collect_request;

/// The collector of this process: made on the first request, kept (or its failure kept, so
/// that it is reported once per request rather than retried) until the process ends.
static COLLECTOR: Mutex<Option<Result<Collector, String>>> = Mutex::new(None);

/// Measures every shape of one request (see the crate documentation). When it fails
/// before writing any sample (the collector cannot start, CUPTI refuses the context, e.g.
/// `CUPTI_ERROR_HARDWARE_BUSY` while another process profiles on the GPU), every shape
/// still gets a sample that says why, in the collector's words: the driver then tells a
/// collector that failed from a kernel that was never launched, and says what failed.
pub fn collect(req: &Request) -> error::Result<collect::Summary> {
    let mut guard = COLLECTOR
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let before = file_len(&req.out_path);
    let state =
        guard.get_or_insert_with(|| Collector::new(&load::process_env).map_err(|e| e.to_string()));
    let result = match state {
        Ok(c) => c.collect(req),
        Err(why) => Err(Error::Unusable(format!(
            "the collector could not start: {why}"
        ))),
    };
    if let Err(e) = &result {
        // Nothing of this request written (the file did not grow): a sample per shape.
        if file_len(&req.out_path) == before {
            let text = failure_lines(
                &req.data,
                &req.shapes,
                &format!("the collector failed: {e}"),
            );
            let written = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&req.out_path)
                .and_then(|mut f| std::io::Write::write_all(&mut f, text.as_bytes()));
            if written.is_ok() {
                for i in 0..req.shapes.len() {
                    req.report(i, false);
                }
            }
        }
    }
    result
}

fn file_len(path: &std::path::Path) -> u64 {
    std::fs::metadata(path).map_or(0, |m| m.len())
}

/// One failed sample per shape, each saying `why`, as the lines of the request's file.
pub fn failure_lines(data: &[i64], shapes: &[request::Shape], why: &str) -> String {
    shapes
        .iter()
        .map(|s| {
            collect::sample_line(&klaraptor_profiler::record::Sample {
                sizes: data.to_vec(),
                block: s.block,
                grid: s.grid,
                error: Some(why.to_string()),
                counters: None,
            })
        })
        .collect()
}

/// Starts the collector ahead of the first request (`klaraptor_collect_prepare_fn` of
/// `klaraptor_collect.h`): loads libcuda and libcupti and initialises the profiler, which
/// takes 150-170 ms on an H200 and needs no CUDA context. The profiling runtime calls it on a
/// thread of its own when the program starts, so that the program's own start (the CUDA
/// context, its inputs) hides it. A request made meanwhile waits for it; a failure is kept
/// and reported by the requests, as when the first request starts the collector. Returns 0
/// when the collector started.
#[no_mangle]
pub extern "C" fn klaraptor_collect_prepare() -> c_int {
    let outcome = std::panic::catch_unwind(|| {
        let mut guard = COLLECTOR
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let state = guard
            .get_or_insert_with(|| Collector::new(&load::process_env).map_err(|e| e.to_string()));
        state.is_ok()
    });
    match outcome {
        Ok(true) => 0,
        _ => 1,
    }
}

/// The C entry point (`klaraptor_collect_fn` of `klaraptor_collect.h`). Returns 0 when every
/// shape was measured or recorded as failed, nonzero when the collector could not work (it
/// says why on stderr).
///
/// # Safety
/// `req` is NULL or points to a request as the header describes, valid for the call.
#[no_mangle]
pub unsafe extern "C" fn klaraptor_collect(req: *const klaraptor_collect_request) -> c_int {
    let outcome = std::panic::catch_unwind(|| {
        // SAFETY: the caller's contract.
        let req = unsafe { Request::from_raw(req) }?;
        collect(&req)
    });
    match outcome {
        Ok(Ok(_)) => 0,
        Ok(Err(e)) => {
            eprintln!("klaraptor-collect: {e}");
            1
        }
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            eprintln!("klaraptor-collect: internal error (please report): {what}");
            2
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_that_failed_early_leaves_a_sample_per_shape_naming_the_error() {
        let shapes = [
            request::Shape {
                block: [32, 1, 1],
                grid: [32, 1, 1],
            },
            request::Shape {
                block: [64, 2, 1],
                grid: [16, 8, 1],
            },
        ];
        let e = Error::Cupti {
            call: "cuptiProfilerCounterAvailability",
            code: 26,
            text: "CUPTI_ERROR_HARDWARE_BUSY".into(),
        };
        let text = failure_lines(&[1024, 7], &shapes, &format!("the collector failed: {e}"));
        let samples: Vec<klaraptor_profiler::record::Sample> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(samples.len(), 2);
        assert_eq!(samples[1].block, [64, 2, 1]);
        assert_eq!(samples[1].grid, [16, 8, 1]);
        assert_eq!(samples[0].sizes, [1024, 7]);
        let err = samples[0].collector_error().unwrap();
        assert_eq!(
            err,
            "the collector failed: cuptiProfilerCounterAvailability failed: \
             CUPTI_ERROR_HARDWARE_BUSY (CUptiResult 26)"
        );
        assert!(klaraptor_profiler::record::is_transient(err));
    }
}

/// The collector's hand-written PTX assembles for the oldest and the newest architecture
/// CUDA 13 targets, with the entry point the collector looks up (ptxas from
/// scripts/setup's toolchain).
#[cfg(test)]
pub(crate) mod ptx_check {
    use std::path::PathBuf;
    use std::process::Command;

    pub fn assembles(file: &str, entry: &str) {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        let ptxas = root.join("../../.toolchain/cuda/bin/ptxas");
        assert!(
            ptxas.exists(),
            "{} is missing: run scripts/setup",
            ptxas.display()
        );
        let src = root.join("src/ptx").join(file);
        let text = std::fs::read_to_string(&src).expect("read the PTX");
        assert!(text.contains(entry), "{file} has no {entry}");
        for arch in ["sm_75", "sm_90"] {
            let out = Command::new(&ptxas)
                .args(["-arch", arch, "-o", "/dev/null"])
                .arg(&src)
                .output()
                .expect("run ptxas");
            assert!(
                out.status.success(),
                "ptxas -arch {arch} {file}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}
