//! # klaraptor (the driver)
//!
//! What it is for: `klaraptor-cc`, the drop-in replacement for `nvcc`, and `klaraptor`, the
//! inspection tool. The driver reads the nvcc command line ([`nvcc_args`]), finds the CUDA
//! toolchain ([`toolchain`]), and orchestrates the stages: the front-end and (to come) the
//! launch-injection pass in `klaraptor-passes`, profiling in `klaraptor-profiler`, fitting
//! in `klaraptor-fitting`, code generation and the instrumented link ([`compile`]).
//!
//! What it is not: no analysis, model or numerical code lives here; the driver only wires
//! the stages together and maps their errors to messages and exit codes.

pub mod choices_cmd;
pub mod codegen;
pub mod compile;
pub mod decide;
pub mod device_cmd;
pub mod devices;
pub mod gpu_profile;
pub mod inspect_cmd;
pub mod instrument;
pub mod interrupt;
pub mod link;
pub mod linkspec;
pub mod metrics;
pub mod names;
pub mod nvcc_args;
pub mod profile_cmd;
pub mod profiling;
pub mod rational;
pub mod runtime;
pub mod toolchain;
pub mod transfer;
pub mod validate;
pub mod validate_cmd;

/// The current time as ISO 8601 UTC (`2026-11-22T10:04:05Z`), for records.
pub fn now_iso8601() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    iso8601(secs)
}

/// The time a generated file says it was made: `SOURCE_DATE_EPOCH` (seconds since 1970, the
/// convention of reproducible builds) when it is set, else `inputs_time`, a time that comes
/// with the inputs (a profile's capture time), never the wall clock: two builds of the same
/// inputs give the same bytes.
pub fn build_time(inputs_time: &str) -> String {
    std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|v| v.trim().parse::<i64>().ok())
        .map(iso8601)
        .unwrap_or_else(|| inputs_time.to_string())
}

/// Seconds since 1970-01-01 UTC as ISO 8601 (`2026-11-22T10:04:05Z`).
pub fn iso8601(secs: i64) -> String {
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil date from days since 1970-01-01 (the proleptic Gregorian calendar).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}
