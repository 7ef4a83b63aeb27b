//! An interrupted build leaves nothing behind: Ctrl-C (SIGINT), `kill` (SIGTERM) or a closed
//! terminal (SIGHUP) while `klaraptor-cc` runs removes the temporary directories it made
//! (the translation units' work, the link's scratch, a models directory being published),
//! then ends the process by the same signal, so that make, Ninja and shells see what they see
//! when nvcc itself is interrupted (status 130 for SIGINT, 143 for SIGTERM).
//!
//! How: [`install`] gives the three signals a handler that only writes the signal's number
//! into a pipe, and starts one thread that reads the pipe; the cleanup runs there, in ordinary
//! code (not in the handler). Handlers do not survive `exec`, and no signal is blocked, so
//! child processes (nvcc, clang, the recipe runs) start with the default actions; a Ctrl-C
//! reaches them through the terminal's process group, and the cleanup sends SIGTERM to them
//! (a signal aimed at klaraptor-cc alone reaches no one else), waits for the working thread
//! to stop, and waits for the children (at most 5 s) before it removes anything. Paths to
//! remove are those made through [`Scratch::new`] or registered with [`guard`], for as long
//! as they live.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Mutex, Once};

/// The paths removed when the process is interrupted.
static REGISTERED: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// Set once a signal has arrived and the cleanup has begun: from then on the process ends by
/// that signal, never by an error the cleanup itself caused in the other threads.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// Set by a thread that reached [`exit`] during an interrupt and waits there: it no longer
/// writes anything, so the cleanup can remove the directories without racing it.
static STOPPED: AtomicBool = AtomicBool::new(false);

const SIGNALS: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// The pipe's writing end, for the handler (-1 until [`install`] made it).
static PIPE_WRITE: AtomicI32 = AtomicI32::new(-1);

/// Set by the handler: a signal arrived (the cleanup thread may not have read it yet).
static ARRIVED: AtomicBool = AtomicBool::new(false);

/// The signal handler: async-signal-safe work only (an atomic store and a `write`).
extern "C" fn on_signal(sig: libc::c_int) {
    ARRIVED.store(true, Ordering::SeqCst);
    let fd = PIPE_WRITE.load(Ordering::SeqCst);
    if fd >= 0 {
        let byte = sig as u8;
        // SAFETY: write(2) is async-signal-safe; `byte` outlives the call.
        unsafe {
            libc::write(fd, (&byte as *const u8).cast(), 1);
        }
    }
}

/// Gives SIGINT, SIGTERM and SIGHUP the handler and starts the thread that cleans up and
/// ends the process when one arrives. Call it first in `main`; calls after the first do
/// nothing. Where the pipe or the thread cannot be made, the signals keep their default
/// action.
pub fn install() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: pipe2 fills the two descriptors.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return;
        }
        let [read_fd, write_fd] = fds;
        let spawned = std::thread::Builder::new()
            .name("klaraptor-signals".into())
            .spawn(move || loop {
                let mut byte = 0u8;
                // SAFETY: reading one byte into `byte` from the pipe this thread owns.
                let n = unsafe { libc::read(read_fd, (&mut byte as *mut u8).cast(), 1) };
                if n == 1 {
                    end_by(libc::c_int::from(byte));
                }
                if n == 0 {
                    return;
                }
            });
        if spawned.is_err() {
            // SAFETY: closing the descriptors just made.
            unsafe {
                libc::close(read_fd);
                libc::close(write_fd);
            }
            return;
        }
        PIPE_WRITE.store(write_fd, Ordering::SeqCst);
        for sig in SIGNALS {
            // SAFETY: sigaction is plain data, zeroed then filled; the handler is
            // async-signal-safe; SA_RESTART keeps the working thread's system calls going.
            unsafe {
                let mut action: libc::sigaction = std::mem::zeroed();
                action.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as usize;
                action.sa_flags = libc::SA_RESTART;
                libc::sigemptyset(&mut action.sa_mask);
                libc::sigaction(sig, &action, std::ptr::null_mut());
            }
        }
    });
}

/// The children of process `pid` ("self" for this one): running, or ended but not yet
/// waited for.
fn children_of(pid: &str) -> Vec<libc::pid_t> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .filter_map(|t| t.ok())
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|s| {
            s.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<_>>()
        })
        .collect()
}

/// This process's descendants (nvcc, and the cicc, ptxas and host compilers it runs; clang;
/// a recipe run), parents before their children.
fn descendants() -> Vec<libc::pid_t> {
    let mut all = children_of("self");
    let mut i = 0;
    while i < all.len() {
        let more = children_of(&all[i].to_string());
        all.extend(
            more.into_iter()
                .filter(|p| !all.contains(p))
                .collect::<Vec<_>>(),
        );
        i += 1;
    }
    all
}

/// Whether child `pid` is still running. Does not reap it: its exit status stays for the
/// thread that waits for it.
fn running(pid: libc::pid_t) -> bool {
    // SAFETY: siginfo_t is plain data that waitid fills; WNOWAIT leaves the child waitable.
    unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        let r = libc::waitid(
            libc::P_PID,
            pid as libc::id_t,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        );
        r == 0 && info.si_pid() == 0
    }
}

/// Sends SIGTERM once to every descendant not in `signalled` (and adds it there): a `kill`
/// aimed at klaraptor-cc alone would leave them writing outputs and temporary files.
/// SIGTERM whatever the signal that arrived, and to the whole tree: nvcc ignores a SIGINT
/// that does not reach its own children (as a Ctrl-C does, through the terminal's process
/// group) and finishes its work; it ends on SIGTERM, but leaves its children running.
/// Returns this process's own children.
fn signal_descendants(signalled: &mut Vec<libc::pid_t>) -> Vec<libc::pid_t> {
    for pid in descendants() {
        if !signalled.contains(&pid) {
            signalled.push(pid);
            // SAFETY: signalling a process this one started (or one that started).
            unsafe {
                libc::kill(pid, libc::SIGTERM);
            }
        }
    }
    children_of("self")
}

/// Removes the temporary files of the nvcc processes among `pids`: nvcc ended by a signal
/// leaves them (`$TMPDIR/tmpxft_<pid in 8 hex digits>_…`).
fn remove_nvcc_files(pids: &[libc::pid_t]) {
    let dir = std::env::temp_dir();
    let prefixes: Vec<String> = pids.iter().map(|p| format!("tmpxft_{p:08x}_")).collect();
    for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
        let name = e.file_name();
        let name = name.to_string_lossy();
        if prefixes.iter().any(|p| name.starts_with(p.as_str())) {
            let path = e.path();
            let _ = if path.is_dir() {
                std::fs::remove_dir_all(&path)
            } else {
                std::fs::remove_file(&path)
            };
        }
    }
}

/// Stops the children and the working thread, removes every registered path, then ends the
/// process by `sig` with its default action.
fn end_by(sig: libc::c_int) -> ! {
    INTERRUPTED.store(true, Ordering::SeqCst);
    // The working thread goes on until a child's failure brings it to `exit`, where it
    // stops: until then it may write into the directories about to be removed (recreating
    // them) or start another child. Signal each child it starts, until it stops (or a while).
    let mut signalled = Vec::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    while !STOPPED.load(Ordering::SeqCst) && std::time::Instant::now() < deadline {
        signal_descendants(&mut signalled);
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    // Let the children end, a few seconds at most, then remove what nvcc left.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let left: Vec<_> = signal_descendants(&mut signalled)
            .into_iter()
            .filter(|&p| running(p))
            .collect();
        if left.is_empty() || std::time::Instant::now() >= deadline {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    remove_nvcc_files(&signalled);
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

/// Whether a signal has arrived and the process is being ended by it. Work that fails then
/// (a child killed by the signal, a file in a directory just removed) is a consequence of the
/// interrupt, not an error to report.
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst) || ARRIVED.load(Ordering::SeqCst)
}

/// Ends the process with `code`, unless an interrupt is being handled: then this thread waits
/// for the cleanup thread, which ends the process by the signal (as make and shells expect),
/// rather than racing it with an exit status of its own.
pub fn exit(code: i32) -> ! {
    if interrupted() {
        STOPPED.store(true, Ordering::SeqCst);
        loop {
            std::thread::park();
        }
    }
    std::process::exit(code)
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
        // Made and registered under the lock the cleanup takes, so that an interrupt never
        // falls between the two and leaves an unregistered directory behind.
        let mut registered = REGISTERED.lock().unwrap_or_else(|p| p.into_inner());
        let dir = tempfile::Builder::new().prefix(prefix).tempdir()?;
        registered.push(dir.path().to_path_buf());
        drop(registered);
        Ok(Scratch {
            _guard: Guard(dir.path().to_path_buf()),
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
