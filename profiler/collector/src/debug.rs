//! Verbose mode: with `KLARAPTOR_COLLECT_DEBUG=1` (any value but empty or `0`) the collector
//! prints each CUDA and CUPTI step on stderr, so that one run on a GPU says where it stopped.

use std::sync::OnceLock;

/// Whether verbose mode is on (read once per process).
pub fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| {
        std::env::var_os("KLARAPTOR_COLLECT_DEBUG").is_some_and(|v| !v.is_empty() && v != "0")
    })
}

/// Milliseconds since the collector's first verbose line: each line carries it, so that a
/// run's lines are also its timeline.
pub fn elapsed_ms() -> f64 {
    static START: OnceLock<std::time::Instant> = OnceLock::new();
    START
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_secs_f64()
        * 1e3
}

/// Prints one line on stderr in verbose mode, after the milliseconds since the first.
macro_rules! debug {
    ($($arg:tt)*) => {
        if $crate::debug::enabled() {
            eprintln!(
                "klaraptor-collect: [{:9.3} ms] {}",
                $crate::debug::elapsed_ms(),
                format_args!($($arg)*)
            );
        }
    };
}
pub(crate) use debug;
