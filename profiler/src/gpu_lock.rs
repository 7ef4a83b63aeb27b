//! One profiler per GPU at a time: an exclusive lock per physical GPU, keyed by its UUID.
//!
//! Two processes that read a GPU's performance counters at once fail (CUPTI's
//! `CUPTI_ERROR_HARDWARE_BUSY` for whichever does not hold them), and two that time kernels
//! at once disturb each other's times. `make -j` starts several links at once, so every
//! recipe run that profiles, and every calibration, holds this lock:
//! `<cache>/klaraptor/devices/gpu-<uuid>.lock`, beside the calibration lock (an `flock`,
//! released by the kernel when the holder exits, however it exits). While it holds the
//! lock, the holder writes `pid <pid>: <what>` into the file, so that a process waiting for
//! it can say whom it waits for.

use std::fs::{self, File, OpenOptions, TryLockError};
use std::io::{self, Read as _, Seek as _, SeekFrom, Write as _};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The environment variable that bounds the wait for a GPU another process profiles on:
/// seconds (or a number with `s`, `m` or `h`).
pub const WAIT_ENV: &str = "KLARAPTOR_GPU_WAIT";
/// The default bound of the wait: generous, since a wait ends when the other link's kernel
/// is profiled (seconds to minutes each).
pub const DEFAULT_WAIT: Duration = Duration::from_secs(30 * 60);

/// How often a waiting process tries the lock again.
const POLL: Duration = Duration::from_millis(50);

/// A held GPU lock; dropping it releases the GPU.
#[derive(Debug)]
pub struct GpuLock {
    file: File,
    path: PathBuf,
}

/// How an attempt to take the lock ended.
#[derive(Debug)]
pub enum Acquired {
    /// The lock is held, after `waited`.
    Held { lock: GpuLock, waited: Duration },
    /// Another process still held it after the bound; who, as its lock file said.
    TimedOut { holder: String, waited: Duration },
}

impl GpuLock {
    /// The lock file of the GPU `uuid` (or, without one, its name) in `dir`.
    pub fn path(dir: &Path, uuid: &str) -> PathBuf {
        let key: String = uuid
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        dir.join(format!("gpu-{key}.lock"))
    }

    /// Takes the lock of GPU `uuid` in `dir`, waiting at most `bound` for another holder.
    /// `what` says what this process does with the GPU (a kernel's name) for those who wait.
    /// `on_wait` is called once, when the lock is found held, with the holder's description.
    pub fn acquire(
        dir: &Path,
        uuid: &str,
        what: &str,
        bound: Duration,
        on_wait: &mut dyn FnMut(&str),
    ) -> io::Result<Acquired> {
        fs::create_dir_all(dir)?;
        let path = GpuLock::path(dir, uuid);
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)?;
        let start = Instant::now();
        let mut said = false;
        loop {
            match file.try_lock() {
                Ok(()) => break,
                Err(TryLockError::WouldBlock) => {}
                Err(TryLockError::Error(e)) => return Err(e),
            }
            let holder = holder_of(&mut file);
            // A holder that has just taken the lock may not have written its name yet:
            // say so once the name is there, or after a second anyway.
            if !said && (!holder.is_empty() || start.elapsed() >= Duration::from_secs(1)) {
                said = true;
                on_wait(if holder.is_empty() {
                    "another process"
                } else {
                    &holder
                });
            }
            if start.elapsed() >= bound {
                return Ok(Acquired::TimedOut {
                    holder: if holder.is_empty() {
                        "another process".into()
                    } else {
                        holder
                    },
                    waited: start.elapsed(),
                });
            }
            std::thread::sleep(POLL.min(bound.saturating_sub(start.elapsed())));
        }
        let waited = start.elapsed();
        // Ours now: say who holds it (best effort: a waiter that cannot read it says
        // "another process").
        let _ = file
            .set_len(0)
            .and_then(|_| file.seek(SeekFrom::Start(0)))
            .and_then(|_| writeln!(file, "pid {}: {what}", std::process::id()))
            .and_then(|_| file.flush());
        Ok(Acquired::Held {
            lock: GpuLock { file, path },
            waited,
        })
    }

    /// The lock file.
    pub fn file_path(&self) -> &Path {
        &self.path
    }
}

impl Drop for GpuLock {
    fn drop(&mut self) {
        // Empty the file before unlocking, so that nobody reads a stale holder; the lock
        // itself goes with the file descriptor.
        let _ = self.file.set_len(0);
        let _ = self.file.unlock();
    }
}

/// The holder's description in the lock file (empty when there is none).
fn holder_of(file: &mut File) -> String {
    let mut text = String::new();
    if file.seek(SeekFrom::Start(0)).is_err() || file.read_to_string(&mut text).is_err() {
        return String::new();
    }
    text.lines().next().unwrap_or("").trim().to_string()
}

/// Reads a duration such as `1800`, `90s`, `30m`, `1.5h` (seconds without a unit).
pub fn parse_duration(text: &str) -> Option<Duration> {
    let t = text.trim();
    let (num, scale) = match t.char_indices().last()? {
        (i, 's') => (&t[..i], 1.0),
        (i, 'm') => (&t[..i], 60.0),
        (i, 'h') => (&t[..i], 3600.0),
        _ => (t, 1.0),
    };
    let v: f64 = num.trim().parse().ok()?;
    (v.is_finite() && v >= 0.0).then(|| Duration::from_secs_f64(v * scale))
}

/// A duration from the environment variable `name`, else `default`. A value that is not a
/// duration is an error that names the variable.
pub fn duration_from_env(name: &str, default: Duration) -> Result<Duration, String> {
    match std::env::var(name) {
        Ok(v) if !v.trim().is_empty() => parse_duration(&v).ok_or_else(|| {
            format!(
                "{name}={v} is not a duration: give seconds, or a number with s, m or h \
                 (e.g. 90, 30m)"
            )
        }),
        _ => Ok(default),
    }
}

/// The bound of a wait for the GPU lock: [`WAIT_ENV`], else [`DEFAULT_WAIT`].
pub fn wait_bound_from_env() -> Result<Duration, String> {
    duration_from_env(WAIT_ENV, DEFAULT_WAIT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("90"), Some(Duration::from_secs(90)));
        assert_eq!(parse_duration("90s"), Some(Duration::from_secs(90)));
        assert_eq!(parse_duration("30m"), Some(Duration::from_secs(1800)));
        assert_eq!(parse_duration("1.5h"), Some(Duration::from_secs(5400)));
        assert_eq!(parse_duration("0.25"), Some(Duration::from_millis(250)));
        for bad in ["", "m", "-1", "ten", "5d", "NaN"] {
            assert_eq!(parse_duration(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_second_holder_waits_says_whom_for_and_gives_up_at_the_bound() {
        let dir = tempfile::tempdir().unwrap();
        let uuid = "GPU-1234/../x";
        let first = match GpuLock::acquire(dir.path(), uuid, "k1", DEFAULT_WAIT, &mut |_| {
            panic!("nobody holds it")
        })
        .unwrap()
        {
            Acquired::Held { lock, .. } => lock,
            other => panic!("{other:?}"),
        };
        assert_eq!(first.file_path(), dir.path().join("gpu-GPU-1234____x.lock"));
        // flock locks belong to open files: a second open file of this process contends
        // as another process would.
        let mut heard = Vec::new();
        let got = GpuLock::acquire(
            dir.path(),
            uuid,
            "k2",
            Duration::from_millis(300),
            &mut |h| heard.push(h.to_string()),
        )
        .unwrap();
        let me = format!("pid {}: k1", std::process::id());
        match got {
            Acquired::TimedOut { holder, waited } => {
                assert_eq!(holder, me);
                assert!(waited >= Duration::from_millis(300));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(heard, [me]);
        drop(first);
        assert_eq!(
            std::fs::read_to_string(GpuLock::path(dir.path(), uuid)).unwrap(),
            ""
        );
        match GpuLock::acquire(dir.path(), uuid, "k2", Duration::ZERO, &mut |h| {
            panic!("released, yet held by {h}")
        })
        .unwrap()
        {
            Acquired::Held { .. } => {}
            other => panic!("{other:?}"),
        }
    }
}
