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
//! [`metrics`] (the metric table and decoding), [`mod@collect`] (the sweep), [`request`] (the C
//! request). Nothing links against libcuda or libcupti: the crate builds and its tests run on
//! a machine without a GPU.
//!
//! Environment: `KLARAPTOR_CUPTI` (libcupti to use), `KLARAPTOR_LIBCUDA` (libcuda to use),
//! `KLARAPTOR_COLLECT_DEBUG=1` (print each CUDA and CUPTI step on stderr),
//! `KLARAPTOR_COLLECT_NO_FLUSH=1` (no L2 flush before profiler passes).

pub mod collect;
pub mod cupti;
pub(crate) mod debug;
pub mod driver;
pub mod error;
pub mod flush;
pub mod load;
pub mod metrics;
pub mod request;
pub mod stats;
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

/// Measures every shape of one request (see the crate documentation).
pub fn collect(req: &Request) -> error::Result<collect::Summary> {
    let mut guard = COLLECTOR
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let state =
        guard.get_or_insert_with(|| Collector::new(&load::process_env).map_err(|e| e.to_string()));
    match state {
        Ok(c) => c.collect(req),
        Err(why) => Err(Error::Unusable(format!(
            "the collector could not start: {why}"
        ))),
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
