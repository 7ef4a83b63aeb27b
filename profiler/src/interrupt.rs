//! An interrupted build leaves nothing behind: Ctrl-C (SIGINT), `kill` (SIGTERM) or a closed
//! terminal (SIGHUP) while `klaraptor-cc` runs removes the temporary directories it made
//! (the translation units' work, the link's scratch, a models directory being published),
//! then ends the process by the same signal, so that make, Ninja and shells see what they see
//! when nvcc itself is interrupted (status 130 for SIGINT, 143 for SIGTERM).
//!
//! How: [`install`] blocks the three signals in every thread and starts one thread that
//! waits for them with `sigwait`; the cleanup runs there, in ordinary code (not in a signal
//! handler). Child processes (nvcc, clang, the recipe runs) start with the signals unblocked
//! (the standard library resets the mask in each child); a Ctrl-C reaches them through the
//! terminal's process group, and the cleanup passes a signal aimed at klaraptor-cc alone on
//! to them and waits for them (at most 5 s) before it removes anything. Paths to remove are
//! those made through [`Scratch::new`] or registered with [`guard`], for as long as they
//! live.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, Once};

/// The paths removed when the process is interrupted.
static REGISTERED: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

const SIGNALS: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// Blocks SIGINT, SIGTERM and SIGHUP in this thread (and the threads it starts later) and
/// starts the thread that cleans up and ends the process when one arrives. Call it first in
/// `main`, before any other thread starts; calls after the first do nothing.
pub fn install() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: sigset_t is plain data, initialised by sigemptyset before use; the mask
        // calls only change this thread's mask.
        let set = unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            for s in SIGNALS {
                libc::sigaddset(&mut set, s);
            }
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
            set
        };
        let spawned = std::thread::Builder::new()
            .name("klaraptor-signals".into())
            .spawn(move || loop {
                let mut sig: libc::c_int = 0;
                // SAFETY: `set` is a valid signal set; sigwait writes the signal into `sig`.
                if unsafe { libc::sigwait(&set, &mut sig) } == 0 {
                    end_by(sig);
                }
            });
        if spawned.is_err() {
            // No thread: give the signals back their default action rather than ignore them.
            // SAFETY: as above.
            unsafe {
                libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
            }
        }
    });
}

/// Passes `sig` on to this process's children (nvcc, clang, a recipe run: a `kill` aimed at
/// klaraptor-cc alone would leave them writing outputs and temporary files) and waits a
/// little for them to end, so that they clean up after themselves first.
fn stop_children(sig: libc::c_int) {
    let children: Vec<libc::pid_t> = std::fs::read_dir("/proc/self/task")
        .into_iter()
        .flatten()
        .filter_map(|t| t.ok())
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|s| {
            s.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<_>>()
        })
        .collect();
    for &pid in &children {
        // SAFETY: signalling our own children.
        unsafe {
            libc::kill(pid, sig);
        }
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let mut left = children;
    while !left.is_empty() && std::time::Instant::now() < deadline {
        left.retain(|&pid| {
            let mut status = 0;
            // SAFETY: reaping our own child without blocking.
            unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) == 0 }
        });
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// Stops the children, removes every registered path, then ends the process by `sig` with
/// its default action.
fn end_by(sig: libc::c_int) -> ! {
    stop_children(sig);
    let paths = match REGISTERED.lock() {
        Ok(mut g) => std::mem::take(&mut *g),
        Err(p) => std::mem::take(&mut *p.into_inner()),
    };
    for p in paths.iter().rev() {
        if p.is_dir() {
            let _ = std::fs::remove_dir_all(p);
        } else {
            let _ = std::fs::remove_file(p);
        }
    }
    // SAFETY: resetting a disposition and unblocking it in this thread, then raising it:
    // the default action of these signals ends the process.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        let mut one: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut one);
        libc::sigaddset(&mut one, sig);
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &one, std::ptr::null_mut());
        libc::raise(sig);
    }
    // Not reached for these signals; exit as a shell reports a death by signal otherwise.
    std::process::exit(128 + sig)
}

/// Registers `path` for removal if the process is interrupted, until the returned guard is
/// dropped (the path itself is left alone then: its owner removes or keeps it).
pub fn guard(path: &Path) -> Guard {
    if let Ok(mut g) = REGISTERED.lock() {
        g.push(path.to_path_buf());
    }
    Guard(path.to_path_buf())
}

/// A path registered by [`guard`]; dropping it unregisters the path.
#[derive(Debug)]
pub struct Guard(PathBuf);

impl Drop for Guard {
    fn drop(&mut self) {
        if let Ok(mut g) = REGISTERED.lock() {
            if let Some(i) = g.iter().rposition(|p| *p == self.0) {
                g.remove(i);
            }
        }
    }
}

/// A temporary directory (`$TMPDIR/<prefix>XXXXXX`) removed when it is dropped, and also
/// when the process is interrupted first.
#[derive(Debug)]
pub struct Scratch {
    // Field order: the guard is dropped (unregistered) before the directory is removed.
    _guard: Guard,
    dir: tempfile::TempDir,
}

impl Scratch {
    pub fn new(prefix: &str) -> io::Result<Scratch> {
        let dir = tempfile::Builder::new().prefix(prefix).tempdir()?;
        Ok(Scratch {
            _guard: guard(dir.path()),
            dir,
        })
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Keeps the directory (`--kl-keep`): no longer removed, neither on drop nor on an
    /// interrupt. Returns its path.
    pub fn keep(self) -> PathBuf {
        let Scratch { _guard, dir } = self;
        drop(_guard);
        dir.keep()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn registered() -> Vec<PathBuf> {
        REGISTERED.lock().unwrap().clone()
    }

    #[test]
    fn a_scratch_directory_is_registered_while_it_lives() {
        let s = Scratch::new("klaraptor-test-").unwrap();
        let p = s.path().to_path_buf();
        assert!(p.is_dir());
        assert!(registered().contains(&p));
        drop(s);
        assert!(!p.exists());
        assert!(!registered().contains(&p));
    }

    #[test]
    fn a_guard_unregisters_without_removing() {
        let d = tempfile::tempdir().unwrap();
        let g = guard(d.path());
        assert!(registered().contains(&d.path().to_path_buf()));
        drop(g);
        assert!(!registered().contains(&d.path().to_path_buf()));
        assert!(d.path().is_dir());
    }
}
