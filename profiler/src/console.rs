//! What klaraptor's tools print and stamp: messages written so that a closed pipe never
//! fails a build (`klaraptor-cc … 2>&1 | head -1`), and the times records and generated files
//! carry.

/// Writes `text` to stderr as one write, ignoring errors: klaraptor's own messages must
/// never fail a build whose stderr is closed (`klaraptor-cc … 2>&1 | head -1`), where
/// `eprintln!` would panic.
pub fn stderr_lossy(text: &str) {
    use std::io::Write;
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(text.as_bytes());
    let _ = err.flush();
}

/// Writes `text` to stdout, ignoring errors (a closed pipe: `klaraptor … | head -1`), where
/// `println!` would panic.
pub fn stdout_lossy(text: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
}

/// `eprintln!` that ignores write errors ([`stderr_lossy`]): for every message of klaraptor's
/// own.
#[macro_export]
macro_rules! kl_eprintln {
    ($($arg:tt)*) => {
        $crate::console::stderr_lossy(&format!("{}\n", format_args!($($arg)*)))
    };
}

/// `println!` that ignores write errors ([`stdout_lossy`]).
#[macro_export]
macro_rules! kl_println {
    ($($arg:tt)*) => {
        $crate::console::stdout_lossy(&format!("{}\n", format_args!($($arg)*)))
    };
}

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
