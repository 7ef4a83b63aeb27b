//! The profile database: where profiling results are kept so that rebuilds, and build
//! machines without a GPU, skip profiling.
//!
//! A database is a directory:
//!
//! ```text
//! <db>/README.txt                                what this directory is (written once)
//! <db>/.gitignore                                ignores the lock and temporary files
//! <db>/.lock, <db>/.lock.queue                   the lock files (see below)
//! <db>/generation                                rewritten by every change (see below)
//! <db>/v<FORMAT_VERSION>/<device>/<kernel>-<code_hash>.toml   one record::Entry per file
//! ```
//!
//! `<device>` is [`device_slug`] of the device name, `<kernel>` is [`kernel_slug`] of the
//! mangled name, `<code_hash>` is the entry's [`KernelId::code_hash`](crate::record::KernelId)
//! (see [`code_hash`]). An entry is *valid* when it parses, has the current
//! [`FORMAT_VERSION`], its key (mangled name, code hash, device name) gives back the
//! path it is stored under, and it is complete: an *incomplete* entry (samples missing
//! because the collector or the GPU failed, [`Entry::incompleteness`]) is kept, listed and
//! prunable, but never returned by [`ProfileDb::get`] or [`ProfileDb::entries_for`], so
//! that the next link that can profiles the kernel again. Entries of other format versions stay in their own `v<N>`
//! directory, are never returned by [`ProfileDb::get`], and are listed as such.
//!
//! Concurrency: [`ProfileDb::put`], [`ProfileDb::remove`] and [`ProfileDb::prune`] hold an
//! exclusive `flock` of `<db>/.lock`; readers hold a shared one (`.lock.queue` keeps a
//! stream of readers from starving a writer). A reader that finds no database answers as
//! for an empty one without looking further (a writer may be creating it). A write goes to a
//! temporary file in the entry's directory (`.<file>.<pid>-<n>.tmp`), is flushed to disk,
//! renamed over the entry and the directory is flushed, so an entry is either the old
//! complete file or the new complete file, also when the writer is killed. A killed
//! writer may leave its temporary file; `prune --invalid` removes it.
//!
//! `<db>/generation` changes with every `put`, `remove` and `prune` (under the exclusive
//! lock), and after a reader moved a damaged entry aside: a compile that read the database (klaraptor-cc puts the rational programs of the
//! kernels it finds profiled into the object) lists it among the object's dependencies and
//! in its preprocessed output, so make, Ninja and ccache rebuild the object when the
//! database changes ([`ProfileDb::ensure_generation`]).

mod filter;
mod naming;

pub use filter::{Date, Pattern, PruneFilter, Timestamp};
pub use naming::{check_code_hash, code_hash, device_slug, entry_file_name, kernel_slug};

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use crate::record::{Entry, FORMAT_VERSION};

/// The environment variable that names the database.
pub const ENV_VAR: &str = "KLARAPTOR_PROFILE_DB";
/// The directory name a project database has (found in the current directory or above).
pub const PROJECT_DIR: &str = "klaraptor-profiles";
const LOCK_FILE: &str = ".lock";
const QUEUE_FILE: &str = ".lock.queue";
const README_FILE: &str = "README.txt";
const GITIGNORE_FILE: &str = ".gitignore";
const TMP_SUFFIX: &str = ".tmp";
const GENERATION_FILE: &str = "generation";

/// The hint every message about a bad entry ends with.
const PRUNE_HINT: &str = "remove it or run `klaraptor profile prune --invalid`";

/// Errors of the profile database. Each names the file concerned and what to do.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    /// The I/O error is part of the message, not its `source()`: a report that prints the
    /// chain (anyhow's `{:#}`) would say it twice.
    #[error("{path}: cannot {action}: {error}", path = path.display())]
    Io {
        path: PathBuf,
        action: &'static str,
        error: io::Error,
    },
    #[error(
        "{path}: not a valid profile entry: {message}\n  ({PRUNE_HINT})",
        path = path.display()
    )]
    Corrupt { path: PathBuf, message: String },
    #[error(
        "{path}: this entry's contents do not match where it is stored ({why}); it belongs at {expected}\n  (move it there, or {PRUNE_HINT})",
        path = path.display(), expected = expected.display()
    )]
    Misplaced {
        path: PathBuf,
        expected: PathBuf,
        why: String,
    },
    #[error("{path}: this entry has format version {found}; this klaraptor reads version {FORMAT_VERSION} (re-profile the kernel to replace it)", path = path.display())]
    OtherVersion { path: PathBuf, found: u32 },
    #[error("invalid {what} `{value}` for a profile entry: {why}")]
    InvalidKey {
        what: &'static str,
        value: String,
        why: String,
    },
    #[error("refusing to store an entry of format version {found}: this klaraptor writes version {FORMAT_VERSION}")]
    WrongVersion { found: u32 },
    #[error("refusing to store the entry of kernel {kernel}: {why}")]
    Refused { kernel: String, why: String },
    #[error("cannot write the entry of kernel `{kernel}` as TOML: {message} (the entry holds a value TOML cannot represent, e.g. an integer above 2^63-1)")]
    Serialize { kernel: String, message: String },
    #[error("{path} ({origin}) exists but is not a directory: point {ENV_VAR} or --db at a directory", path = path.display())]
    NotADirectory { path: PathBuf, origin: Origin },
    #[error("cannot tell where the profile database is: set {ENV_VAR}, or HOME or XDG_CACHE_HOME (or create a `{PROJECT_DIR}/` directory in the project)")]
    NoLocation,
    #[error("prune needs something to select: --invalid, --old-format, --superseded, --all, --device, --kernel or --older-than")]
    EmptyPruneFilter,
}

impl DbError {
    /// True for an error about one stored entry that re-profiling would replace (corrupt,
    /// misplaced, another version): a driver may warn and carry on as if there were no
    /// entry, then `put` overwrites it.
    pub fn is_bad_entry(&self) -> bool {
        matches!(
            self,
            DbError::Corrupt { .. } | DbError::Misplaced { .. } | DbError::OtherVersion { .. }
        )
    }
}

pub type Result<T, E = DbError> = std::result::Result<T, E>;

fn io_err(path: &Path, action: &'static str) -> impl FnOnce(io::Error) -> DbError {
    let path = path.to_path_buf();
    move |error| DbError::Io {
        path,
        action,
        error,
    }
}

/// Where the database in use came from (for messages).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// Given by the caller (e.g. `--db`).
    Explicit,
    /// The `KLARAPTOR_PROFILE_DB` environment variable.
    EnvVar,
    /// The nearest `klaraptor-profiles/` in the current directory or above it.
    Project { searched_from: PathBuf },
    /// The per-user cache, under `$XDG_CACHE_HOME` or `~/.cache`.
    UserCache { via: &'static str },
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Explicit => f.write_str("given on the command line"),
            Origin::EnvVar => write!(f, "from {ENV_VAR}"),
            Origin::Project { searched_from } => write!(
                f,
                "the project's {PROJECT_DIR}/, the nearest to {}",
                searched_from.display()
            ),
            Origin::UserCache { via } => write!(f, "the user cache, from {via}"),
        }
    }
}

/// The environment [`ProfileDb::locate_in`] looks at (so it can be tested without changing
/// the process's own environment).
#[derive(Debug, Clone, Default)]
pub struct LocateEnv {
    /// `KLARAPTOR_PROFILE_DB`.
    pub profile_db: Option<OsString>,
    /// The current directory.
    pub cwd: PathBuf,
    /// `XDG_CACHE_HOME`.
    pub xdg_cache_home: Option<OsString>,
    /// `HOME`.
    pub home: Option<OsString>,
}

impl LocateEnv {
    /// The process's environment and current directory.
    pub fn from_process() -> Result<LocateEnv> {
        let cwd = std::env::current_dir()
            .map_err(io_err(Path::new("."), "read the current directory"))?;
        Ok(LocateEnv {
            profile_db: std::env::var_os(ENV_VAR),
            cwd,
            xdg_cache_home: std::env::var_os("XDG_CACHE_HOME"),
            home: std::env::var_os("HOME"),
        })
    }
}

/// How one file of the database stands.
#[derive(Debug, Clone, PartialEq)]
pub enum Status {
    /// A valid entry, the newest for its kernel and device.
    Current,
    /// A valid entry for which a newer one (another code hash) of the same kernel and
    /// device exists, at the given path.
    Superseded { by: PathBuf },
    /// An entry of another format version (older or newer than this klaraptor's).
    OtherVersion { version: u32 },
    /// Unreadable or unparsable.
    Corrupt { message: String },
    /// Parses, but its key does not give back its path.
    Misplaced { expected: PathBuf, why: String },
    /// A temporary file left by a writer that was killed.
    Partial,
    /// A well-formed entry whose samples are not all there (the collector or the GPU
    /// failed): never used for a model; the next link that can profiles it again.
    Incomplete { why: String },
    /// A damaged entry a link moved aside (`<entry>.invalid`): kept for a person to look at,
    /// never read for a model; `prune --invalid` removes it.
    SetAside { message: String },
}

impl Status {
    /// Whether `get` can return this entry.
    pub fn is_valid(&self) -> bool {
        matches!(self, Status::Current | Status::Superseded { .. })
    }

    /// A short word for tables.
    pub fn label(&self) -> String {
        match self {
            Status::Current => "ok".into(),
            Status::Superseded { .. } => "superseded".into(),
            Status::OtherVersion { version } if *version < FORMAT_VERSION => {
                format!("old format v{version}")
            }
            Status::OtherVersion { version } => format!("newer format v{version}"),
            Status::Corrupt { .. } => "corrupt".into(),
            Status::Misplaced { .. } => "misplaced".into(),
            Status::Partial => "partial write".into(),
            Status::Incomplete { .. } => "incomplete".into(),
            Status::SetAside { .. } => "invalid (set aside)".into(),
        }
    }
}

/// The fields of an entry that can be read even from another format version (best effort,
/// for listing and pruning).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Summary {
    pub format_version: Option<u32>,
    pub name: Option<String>,
    pub mangled: Option<String>,
    pub code_hash: Option<String>,
    pub device: Option<String>,
    pub device_uuid: Option<String>,
    pub captured_at: Option<String>,
}

/// One file of the database, as [`ProfileDb::list`] sees it.
#[derive(Debug, Clone)]
pub struct Listed {
    pub path: PathBuf,
    pub status: Status,
    /// The entry, when it is valid.
    pub entry: Option<Entry>,
    pub summary: Summary,
    pub modified: Option<SystemTime>,
}

impl Listed {
    /// The capture time, when it can be read.
    pub fn captured(&self) -> Option<Timestamp> {
        self.summary
            .captured_at
            .as_deref()
            .and_then(Timestamp::parse_iso8601)
    }
}

/// A profile database (a directory; see the module documentation).
#[derive(Debug, Clone)]
pub struct ProfileDb {
    root: PathBuf,
    origin: Origin,
    /// Damaged entries moved aside by `entries_for`, not yet taken (shared by clones).
    damaged: Arc<Mutex<Vec<String>>>,
}

/// What a damaged entry's file name gets when it is moved aside.
pub const INVALID_SUFFIX: &str = ".invalid";

/// Held for as long as a lock of `<db>/.lock` is held (dropping it unlocks).
struct DbLock {
    _file: Option<File>,
}

static TMP_COUNTER: AtomicU64 = AtomicU64::new(0);

impl ProfileDb {
    /// The database at `path` (need not exist yet: the first `put` creates it).
    pub fn open(path: impl Into<PathBuf>) -> Result<ProfileDb> {
        ProfileDb::open_as(path.into(), Origin::Explicit)
    }

    fn open_as(root: PathBuf, origin: Origin) -> Result<ProfileDb> {
        if root.exists() && !root.is_dir() {
            return Err(DbError::NotADirectory { path: root, origin });
        }
        Ok(ProfileDb {
            root,
            origin,
            damaged: Arc::default(),
        })
    }

    /// The database to use: `KLARAPTOR_PROFILE_DB` if set, else the nearest
    /// `klaraptor-profiles/` directory in the current directory or an ancestor, else
    /// `$XDG_CACHE_HOME/klaraptor/profiles` or `~/.cache/klaraptor/profiles`.
    pub fn locate() -> Result<ProfileDb> {
        ProfileDb::locate_in(&LocateEnv::from_process()?)
    }

    /// [`ProfileDb::locate`] against a given environment.
    pub fn locate_in(env: &LocateEnv) -> Result<ProfileDb> {
        let set = |v: &Option<OsString>| v.clone().filter(|s| !s.is_empty()).map(PathBuf::from);
        if let Some(p) = set(&env.profile_db) {
            return ProfileDb::open_as(env.cwd.join(p), Origin::EnvVar);
        }
        for dir in env.cwd.ancestors() {
            let candidate = dir.join(PROJECT_DIR);
            if candidate.is_dir() {
                return ProfileDb::open_as(
                    candidate,
                    Origin::Project {
                        searched_from: env.cwd.clone(),
                    },
                );
            }
        }
        // XDG: a relative XDG_CACHE_HOME is invalid and is ignored.
        if let Some(p) = set(&env.xdg_cache_home).filter(|p| p.is_absolute()) {
            return ProfileDb::open_as(
                p.join("klaraptor").join("profiles"),
                Origin::UserCache {
                    via: "$XDG_CACHE_HOME",
                },
            );
        }
        if let Some(h) = set(&env.home) {
            return ProfileDb::open_as(
                h.join(".cache").join("klaraptor").join("profiles"),
                Origin::UserCache { via: "~/.cache" },
            );
        }
        Err(DbError::NoLocation)
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn origin(&self) -> &Origin {
        &self.origin
    }

    /// `<db>/generation`, which every change of the database rewrites.
    pub fn generation_path(&self) -> PathBuf {
        self.root.join(GENERATION_FILE)
    }

    /// [`ProfileDb::generation_path`], created (with the database directory) when missing,
    /// so that a build can depend on it before anything is stored; `None` when it cannot be
    /// created (a read-only location).
    pub fn ensure_generation(&self) -> Option<PathBuf> {
        let path = self.generation_path();
        if path.is_file() {
            return Some(path);
        }
        fs::create_dir_all(&self.root).ok()?;
        match OpenOptions::new().write(true).create_new(true).open(&path) {
            Ok(mut f) => {
                f.write_all(b"klaraptor profile database generation 0\n")
                    .ok()?;
                Some(path)
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Some(path),
            Err(_) => None,
        }
    }

    /// Rewrites the generation file with a value of its own (under the exclusive lock).
    fn bump_generation(&self) -> Result<()> {
        let path = self.generation_path();
        let nanos = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let n = TMP_COUNTER.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        let tmp = self
            .root
            .join(format!(".{GENERATION_FILE}.{pid}-{n}{TMP_SUFFIX}"));
        fs::write(
            &tmp,
            format!("klaraptor profile database generation {nanos}.{pid}.{n}\n"),
        )
        .map_err(io_err(&tmp, "write the generation file"))?;
        fs::rename(&tmp, &path).map_err(io_err(&path, "replace the generation file"))
    }

    /// Whether the directory exists (a database nobody wrote to yet does not).
    pub fn exists(&self) -> bool {
        self.root.is_dir()
    }

    fn version_dir(&self, version: u32) -> PathBuf {
        self.root.join(format!("v{version}"))
    }

    /// Where the entry of this key is (or would be) stored.
    pub fn entry_path(&self, mangled: &str, code_hash: &str, device_name: &str) -> Result<PathBuf> {
        self.entry_path_in(FORMAT_VERSION, mangled, code_hash, device_name)
    }

    fn entry_path_in(
        &self,
        version: u32,
        mangled: &str,
        code_hash: &str,
        device_name: &str,
    ) -> Result<PathBuf> {
        check_key(mangled, code_hash, device_name)?;
        Ok(self
            .version_dir(version)
            .join(device_slug(device_name))
            .join(entry_file_name(mangled, code_hash)))
    }

    /// The valid entry of this kernel (mangled name and code hash) on this device, if any.
    ///
    /// `Ok(None)` when there is none; an error when the file exists but cannot be used
    /// (see [`DbError::is_bad_entry`]) or cannot be read.
    pub fn get(&self, mangled: &str, code_hash: &str, device_name: &str) -> Result<Option<Entry>> {
        let path = self.entry_path(mangled, code_hash, device_name)?;
        let Some(_lock) = self.lock_shared()? else {
            return Ok(None);
        };
        let text = match fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_err(&path, "read the profile entry")(e)),
        };
        let entry = parse_entry(&path, &text)?;
        self.check_placement(&path, &entry)?;
        if entry.incompleteness().is_some() {
            return Ok(None);
        }
        Ok(Some(entry))
    }

    /// Every valid entry of this kernel (mangled name and code hash), one per device.
    ///
    /// A damaged entry is moved aside ([`ProfileDb::take_damaged`] says so) and, since that
    /// changes the database, the generation file is rewritten afterwards: under the
    /// exclusive lock, taken once the shared one this read holds is released (a reader
    /// cannot turn its shared lock into an exclusive one without risking a deadlock with
    /// another reader doing the same).
    pub fn entries_for(&self, mangled: &str, code_hash: &str) -> Result<Vec<Entry>> {
        check_key(mangled, code_hash, "any device")?;
        let (out, moved) = {
            let Some(lock) = self.lock_shared()? else {
                return Ok(Vec::new());
            };
            let found = self.entries_for_locked(mangled, code_hash);
            drop(lock);
            found?
        };
        if moved {
            // Best effort: a database nobody may write to could not have had an entry moved.
            if let Ok(_lock) = self.lock_exclusive() {
                let _ = self.bump_generation();
            }
        }
        Ok(out)
    }

    /// [`ProfileDb::entries_for`] under its shared lock: the entries, and whether a damaged
    /// one was moved aside.
    fn entries_for_locked(&self, mangled: &str, code_hash: &str) -> Result<(Vec<Entry>, bool)> {
        let file = entry_file_name(mangled, code_hash);
        let mut out = Vec::new();
        let mut moved = false;
        for dev_dir in subdirs(&self.version_dir(FORMAT_VERSION))? {
            let path = dev_dir.join(&file);
            let text = match fs::read(&path) {
                Ok(t) => t,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(io_err(&path, "read the profile entry")(e)),
            };
            // The database is a cache: a damaged entry is a miss. It is moved aside (never
            // deleted) and said once (`take_damaged`).
            let parsed = std::str::from_utf8(&text)
                .map_err(|_| DbError::Corrupt {
                    path: path.clone(),
                    message: "it is not UTF-8 text".into(),
                })
                .and_then(|t| parse_entry(&path, t))
                .and_then(|e| self.check_placement(&path, &e).map(|()| e));
            let entry = match parsed {
                Ok(e) => e,
                Err(err) => {
                    moved |= self.set_aside(&path, &err);
                    continue;
                }
            };
            if entry.incompleteness().is_some() {
                continue;
            }
            out.push(entry);
        }
        out.sort_by(|a, b| a.device.name.cmp(&b.device.name));
        Ok((out, moved))
    }

    /// Moves a damaged entry to `<entry>.invalid` (replacing an older one there) and keeps a
    /// message for [`ProfileDb::take_damaged`]; whether this call moved it.
    fn set_aside(&self, path: &Path, err: &DbError) -> bool {
        let mut aside = path.as_os_str().to_owned();
        aside.push(INVALID_SUFFIX);
        let aside = PathBuf::from(aside);
        let rename = fs::rename(path, &aside);
        let moved = rename.is_ok();
        let what = match rename {
            Ok(()) => format!("moved aside to {}", aside.display()),
            // Another process moved it first.
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                format!("moved aside to {} by another process", aside.display())
            }
            Err(e) => format!("left in place (it could not be moved aside: {e})"),
        };
        let why = match err {
            DbError::Corrupt { message, .. } => message.clone(),
            e => e.to_string(),
        };
        if let Ok(mut d) = self.damaged.lock() {
            d.push(format!(
                "the profile entry {} is damaged ({why}); {what}, and the kernel is treated as \
                 not profiled",
                path.display()
            ));
        }
        moved
    }

    /// What [`ProfileDb::entries_for`] found damaged and moved aside since the last call, one
    /// message per file, for the caller to show.
    pub fn take_damaged(&self) -> Vec<String> {
        self.damaged
            .lock()
            .map(|mut d| std::mem::take(&mut *d))
            .unwrap_or_default()
    }

    /// Reads one entry file wherever it is (for `klaraptor profile show <file>`): it must
    /// parse and have the current format version.
    pub fn read_file(path: &Path) -> Result<Entry> {
        let text = fs::read_to_string(path).map_err(io_err(path, "read the profile entry"))?;
        parse_entry(path, &text)
    }

    /// Stores an entry (replacing the one of the same key), atomically; returns its path.
    pub fn put(&self, entry: &Entry) -> Result<PathBuf> {
        if entry.format_version != FORMAT_VERSION {
            return Err(DbError::WrongVersion {
                found: entry.format_version,
            });
        }
        let path = self.entry_path(
            &entry.kernel.mangled,
            &entry.kernel.code_hash,
            &entry.device.name,
        )?;
        // What a reader would set aside as damaged is never stored (an import of a capture
        // made elsewhere, say).
        entry.check_values().map_err(|why| DbError::Refused {
            kernel: format!("{:?}", entry.kernel.mangled),
            why,
        })?;
        let text = render_entry(entry)?;
        let _lock = self.lock_exclusive()?;
        self.write_once(README_FILE, &readme_text())?;
        self.write_once(
            GITIGNORE_FILE,
            "# klaraptor profile database: lock and temporary files\n.lock\n.lock.queue\n.*.tmp\n",
        )?;
        let dir = path.parent().expect("an entry path has a directory");
        create_dirs(&self.root, dir)?;
        let file_name = path
            .file_name()
            .expect("an entry path has a file name")
            .to_string_lossy();
        let tmp = dir.join(format!(
            ".{file_name}.{}-{}{TMP_SUFFIX}",
            std::process::id(),
            TMP_COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let written = (|| {
            let mut f = OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&tmp)
                .map_err(io_err(&tmp, "create the temporary file"))?;
            f.write_all(text.as_bytes())
                .map_err(io_err(&tmp, "write the temporary file"))?;
            f.sync_all()
                .map_err(io_err(&tmp, "flush the temporary file to disk"))?;
            drop(f);
            fs::rename(&tmp, &path).map_err(io_err(&path, "move the new entry into place"))
        })();
        if let Err(e) = written {
            let _ = fs::remove_file(&tmp);
            return Err(e);
        }
        sync_dir(dir)?;
        self.bump_generation()?;
        Ok(path)
    }

    /// Removes the entry of this key (of the current format version); whether there was one.
    pub fn remove(&self, mangled: &str, code_hash: &str, device_name: &str) -> Result<bool> {
        let path = self.entry_path(mangled, code_hash, device_name)?;
        if !self.exists() {
            return Ok(false);
        }
        let _lock = self.lock_exclusive()?;
        match fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(io_err(&path, "remove the profile entry")(e)),
        }
        let dir = path.parent().expect("an entry path has a directory");
        sync_dir(dir)?;
        remove_if_empty(dir, &self.root)?;
        self.bump_generation()?;
        Ok(true)
    }

    /// Every file of the database: valid entries, entries of other format versions,
    /// corrupt or misplaced files and leftover temporary files, sorted by kernel name,
    /// mangled name, device and capture time. Files it does not know (e.g. README.txt) are
    /// not listed. An absent database lists nothing.
    pub fn list(&self) -> Result<Vec<Listed>> {
        let Some(_lock) = self.lock_shared()? else {
            return Ok(Vec::new());
        };
        self.list_locked()
    }

    fn list_locked(&self) -> Result<Vec<Listed>> {
        let mut out = Vec::new();
        for vdir in subdirs(&self.root)? {
            let Some(version) = vdir
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_prefix('v'))
                .filter(|n| !n.is_empty() && n.bytes().all(|c| c.is_ascii_digit()))
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            for ddir in subdirs(&vdir)? {
                for path in files(&ddir)? {
                    if let Some(item) = self.examine(version, &path)? {
                        out.push(item);
                    }
                }
            }
        }
        mark_superseded(&mut out);
        out.sort_by(|a, b| {
            let key = |l: &Listed| {
                (
                    l.summary.name.clone(),
                    l.summary.mangled.clone(),
                    l.summary.device.clone(),
                    l.captured(),
                    l.path.clone(),
                )
            };
            key(a).cmp(&key(b))
        });
        Ok(out)
    }

    /// What the file at `path` (in directory `v<version>/<device>/`) is; `None` when it is
    /// not an entry file at all.
    fn examine(&self, version: u32, path: &Path) -> Result<Option<Listed>> {
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            return Ok(None);
        };
        // A file that vanished since the directory was read (only possible when the
        // database is read without a lock) is simply not listed.
        let meta = match fs::symlink_metadata(path) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_err(path, "read the metadata of")(e)),
        };
        let modified = meta.modified().ok();
        let mut item = Listed {
            path: path.to_path_buf(),
            status: Status::Partial,
            entry: None,
            summary: Summary::default(),
            modified,
        };
        if name.starts_with('.') && name.ends_with(TMP_SUFFIX) {
            return Ok(Some(item));
        }
        if name.ends_with(&format!(".toml{INVALID_SUFFIX}")) && !name.starts_with('.') {
            let text = fs::read(path).unwrap_or_default();
            let text = String::from_utf8_lossy(&text);
            item.summary = summarize(&text);
            item.status = Status::SetAside {
                message: match parse_entry(path, &text) {
                    Err(e) => e.to_string(),
                    Ok(_) => "moved aside by a link; it reads as valid now".into(),
                },
            };
            return Ok(Some(item));
        }
        if !name.ends_with(".toml") || name.starts_with('.') {
            return Ok(None);
        }
        let text = match fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::InvalidData => {
                item.status = Status::Corrupt {
                    message: "it is not UTF-8 text".into(),
                };
                return Ok(Some(item));
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_err(path, "read the profile entry")(e)),
        };
        item.summary = summarize(&text);
        if version != FORMAT_VERSION {
            item.status = Status::OtherVersion { version };
            return Ok(Some(item));
        }
        match parse_entry(path, &text).and_then(|e| self.check_placement(path, &e).map(|()| e)) {
            Ok(entry) => {
                item.status = match entry.incompleteness() {
                    Some(why) => Status::Incomplete { why },
                    None => Status::Current,
                };
                item.entry = Some(entry);
            }
            Err(DbError::Corrupt { message, .. }) => item.status = Status::Corrupt { message },
            Err(DbError::Misplaced { expected, why, .. }) => {
                item.status = Status::Misplaced { expected, why }
            }
            Err(DbError::OtherVersion { found, .. }) => {
                item.status = Status::Misplaced {
                    expected: self.version_dir(found),
                    why: format!(
                        "it says format version {found} but is stored under v{FORMAT_VERSION}/"
                    ),
                }
            }
            Err(DbError::InvalidKey { what, value, why }) => {
                item.status = Status::Corrupt {
                    message: format!("its {what} `{value}` cannot key an entry: {why}"),
                }
            }
            Err(e) => return Err(e),
        }
        Ok(Some(item))
    }

    /// Checks that a parsed entry has the current version and is stored where its key says.
    fn check_placement(&self, path: &Path, entry: &Entry) -> Result<()> {
        if entry.format_version != FORMAT_VERSION {
            return Err(DbError::OtherVersion {
                path: path.to_path_buf(),
                found: entry.format_version,
            });
        }
        let expected = self.entry_path(
            &entry.kernel.mangled,
            &entry.kernel.code_hash,
            &entry.device.name,
        )?;
        if !same_place(path, &expected) {
            return Err(DbError::Misplaced {
                path: path.to_path_buf(),
                why: format!(
                    "it holds kernel `{}` with code hash {} on device `{}`",
                    entry.kernel.mangled, entry.kernel.code_hash, entry.device.name
                ),
                expected,
            });
        }
        Ok(())
    }

    /// Removes what `filter` selects (see [`PruneFilter`]); with `dry_run`, removes
    /// nothing. Returns the files selected, with their status.
    pub fn prune(&self, filter: &PruneFilter, dry_run: bool) -> Result<Vec<Listed>> {
        if filter.is_empty() {
            return Err(DbError::EmptyPruneFilter);
        }
        if !self.exists() {
            return Ok(Vec::new());
        }
        let _lock = if dry_run {
            match self.lock_shared()? {
                Some(lock) => lock,
                None => return Ok(Vec::new()),
            }
        } else {
            self.lock_exclusive()?
        };
        let selected: Vec<Listed> = self
            .list_locked()?
            .into_iter()
            .filter(|l| selects(filter, l))
            .collect();
        if dry_run {
            return Ok(selected);
        }
        let mut dirs: Vec<PathBuf> = Vec::new();
        for l in &selected {
            match fs::remove_file(&l.path) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(io_err(&l.path, "remove")(e)),
            }
            if let Some(d) = l.path.parent() {
                if !dirs.iter().any(|x| x == d) {
                    dirs.push(d.to_path_buf());
                }
            }
        }
        for d in &dirs {
            sync_dir(d)?;
            remove_if_empty(d, &self.root)?;
        }
        if !selected.is_empty() {
            self.bump_generation()?;
        }
        Ok(selected)
    }

    /// Opens `<db>/<name>` for locking, creating it. `Ok(None)` when it cannot be created
    /// because the database is read-only (and the file is not there).
    fn open_lock_file(&self, name: &str, may_be_read_only: bool) -> Result<Option<File>> {
        let path = self.root.join(name);
        match OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
        {
            Ok(f) => Ok(Some(f)),
            Err(e) if may_be_read_only && is_read_only(&e) => Ok(File::open(&path).ok()),
            Err(e) => Err(io_err(&path, "open the lock file")(e)),
        }
    }

    /// A shared lock, for readers. `None` when there is no database: the reader then
    /// answers as for an empty one and must not look at the directory, since a writer may
    /// create it and start writing at any moment, unseen by a reader that holds no lock
    /// (such a reader could list the writer's temporary file). A database on a read-only
    /// disk (no lock file, and none can be made) is read unlocked, since nobody can write
    /// to it either.
    ///
    /// Writers are not starved by a stream of readers: a reader passes the turnstile
    /// (`.lock.queue`, taken exclusively for a moment) before it takes its shared lock,
    /// and a waiting writer holds the turnstile while it waits for the readers in place.
    fn lock_shared(&self) -> Result<Option<DbLock>> {
        if !self.exists() {
            return Ok(None);
        }
        let turnstile = self.open_lock_file(QUEUE_FILE, true)?;
        if let Some(t) = &turnstile {
            t.lock()
                .map_err(io_err(&self.root.join(QUEUE_FILE), "lock"))?;
        }
        let Some(file) = self.open_lock_file(LOCK_FILE, true)? else {
            return Ok(Some(DbLock { _file: None }));
        };
        file.lock_shared()
            .map_err(io_err(&self.root.join(LOCK_FILE), "take a shared lock of"))?;
        drop(turnstile);
        Ok(Some(DbLock { _file: Some(file) }))
    }

    /// An exclusive lock, for writers; creates the database directory.
    fn lock_exclusive(&self) -> Result<DbLock> {
        fs::create_dir_all(&self.root)
            .map_err(io_err(&self.root, "create the profile database directory"))?;
        let turnstile = self
            .open_lock_file(QUEUE_FILE, false)?
            .expect("opened for writing or failed");
        turnstile
            .lock()
            .map_err(io_err(&self.root.join(QUEUE_FILE), "lock"))?;
        let file = self
            .open_lock_file(LOCK_FILE, false)?
            .expect("opened for writing or failed");
        file.lock().map_err(io_err(
            &self.root.join(LOCK_FILE),
            "take an exclusive lock of",
        ))?;
        drop(turnstile);
        Ok(DbLock { _file: Some(file) })
    }

    /// Writes `<db>/<name>` unless it exists (under the exclusive lock).
    fn write_once(&self, name: &str, text: &str) -> Result<()> {
        let path = self.root.join(name);
        match OpenOptions::new().write(true).create_new(true).open(&path) {
            Ok(mut f) => f.write_all(text.as_bytes()).map_err(io_err(&path, "write")),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
            Err(e) => Err(io_err(&path, "create")(e)),
        }
    }
}

fn check_key(mangled: &str, code_hash: &str, device_name: &str) -> Result<()> {
    if mangled.is_empty() {
        return Err(DbError::InvalidKey {
            what: "mangled kernel name",
            value: String::new(),
            why: "it is empty".into(),
        });
    }
    if device_name.is_empty() {
        return Err(DbError::InvalidKey {
            what: "device name",
            value: String::new(),
            why: "it is empty".into(),
        });
    }
    if let Some(why) = check_code_hash(code_hash) {
        return Err(DbError::InvalidKey {
            what: "code hash",
            value: code_hash.to_string(),
            why,
        });
    }
    Ok(())
}

fn is_read_only(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::PermissionDenied | io::ErrorKind::ReadOnlyFilesystem
    )
}

/// Whether two paths name the same place (compared component-wise, so `a//b` = `a/b`).
fn same_place(a: &Path, b: &Path) -> bool {
    a.components().eq(b.components())
}

fn parse_entry(path: &Path, text: &str) -> Result<Entry> {
    Entry::from_toml(text).map_err(|message| DbError::Corrupt {
        path: path.to_path_buf(),
        message,
    })
}

/// The TOML text of an entry: a comment saying what the file is, then the entry.
fn render_entry(entry: &Entry) -> Result<String> {
    let body = toml::to_string(entry).map_err(|e| DbError::Serialize {
        kernel: entry.kernel.mangled.clone(),
        message: e.to_string(),
    })?;
    let one_line = |s: &str| s.replace(['\n', '\r'], " ");
    Ok(format!(
        "# klaraptor profile entry (format {}): kernel `{}` ({}) on {}.\n\
         # kernel.mangled, kernel.code_hash and device.name must match this file's path;\n\
         # see README.txt at the top of the database.\n\n{body}",
        entry.format_version,
        one_line(&entry.kernel.name),
        one_line(&entry.kernel.mangled),
        one_line(&entry.device.name),
    ))
}

/// Best-effort header of an entry of any version: each field is read on its own, so a
/// field that is missing or of another type leaves only that field unknown.
fn summarize(text: &str) -> Summary {
    let Ok(t) = toml::from_str::<toml::Table>(text) else {
        return Summary::default();
    };
    fn pick<T: serde::de::DeserializeOwned>(t: &toml::Table, path: &[&str]) -> Option<T> {
        let (last, tables) = path.split_last()?;
        let mut cur = t;
        for k in tables {
            cur = cur.get(*k)?.as_table()?;
        }
        cur.get(*last)?.clone().try_into().ok()
    }
    Summary {
        format_version: pick(&t, &["format_version"]),
        name: pick(&t, &["kernel", "name"]),
        mangled: pick(&t, &["kernel", "mangled"]),
        code_hash: pick(&t, &["kernel", "code_hash"]),
        device: pick(&t, &["device", "name"]),
        device_uuid: pick(&t, &["device", "uuid"]),
        captured_at: pick(&t, &["captured_at"]),
    }
}

/// Marks every valid entry that has a newer sibling (same mangled name and device name,
/// another code hash) as superseded. Newest: the latest capture time; an unreadable time
/// counts as oldest; ties go to the file modified last, then to the path.
fn mark_superseded(items: &mut [Listed]) {
    let mut newest: BTreeMap<(String, String), usize> = BTreeMap::new();
    let rank = |l: &Listed| (l.captured(), l.modified, l.path.clone());
    for (i, l) in items.iter().enumerate() {
        let Some(e) = l.entry.as_ref().filter(|_| l.status.is_valid()) else {
            continue;
        };
        let key = (e.kernel.mangled.clone(), e.device.name.clone());
        match newest.get(&key) {
            Some(&j) if rank(&items[j]) >= rank(l) => {}
            _ => {
                newest.insert(key, i);
            }
        }
    }
    let winners: Vec<(usize, PathBuf)> = items
        .iter()
        .enumerate()
        .filter_map(|(i, l)| {
            let e = l.entry.as_ref().filter(|_| l.status.is_valid())?;
            let j = newest[&(e.kernel.mangled.clone(), e.device.name.clone())];
            (j != i).then(|| (i, items[j].path.clone()))
        })
        .collect();
    for (i, by) in winners {
        items[i].status = Status::Superseded { by };
    }
}

/// Whether `prune` with `f` removes `l`.
fn selects(f: &PruneFilter, l: &Listed) -> bool {
    let kind = if f.all {
        true
    } else if f.invalid || f.old_format || f.superseded || f.incomplete {
        match &l.status {
            Status::Corrupt { .. }
            | Status::Misplaced { .. }
            | Status::Partial
            | Status::SetAside { .. } => f.invalid,
            Status::OtherVersion { version } => f.old_format && *version < FORMAT_VERSION,
            Status::Superseded { .. } => f.superseded,
            Status::Incomplete { .. } => f.incomplete,
            Status::Current => false,
        }
    } else {
        l.status.is_valid()
    };
    if !kind {
        return false;
    }
    let s = &l.summary;
    let device_ok = f.device.as_ref().is_none_or(|p| {
        s.device.as_deref().is_some_and(|d| p.matches(d))
            || s.device_uuid
                .as_deref()
                .is_some_and(|u| !u.is_empty() && p.matches(u))
    });
    let kernel_ok = f.kernel.as_ref().is_none_or(|p| {
        s.name.as_deref().is_some_and(|n| p.matches(n))
            || s.mangled.as_deref().is_some_and(|m| p.matches(m))
    });
    let date_ok = f
        .older_than
        .is_none_or(|d| l.captured().is_some_and(|t| t < d.start()));
    device_ok && kernel_ok && date_ok
}

/// The subdirectories of `dir` (none when it does not exist), sorted.
fn subdirs(dir: &Path) -> Result<Vec<PathBuf>> {
    entries_of(dir, true)
}

/// The plain files of `dir`, sorted.
fn files(dir: &Path) -> Result<Vec<PathBuf>> {
    entries_of(dir, false)
}

fn entries_of(dir: &Path, want_dirs: bool) -> Result<Vec<PathBuf>> {
    let rd = match fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_err(dir, "list the directory")(e)),
    };
    let mut out = Vec::new();
    for de in rd {
        let de = de.map_err(io_err(dir, "list the directory"))?;
        let ft = de
            .file_type()
            .map_err(io_err(&de.path(), "read the type of"))?;
        if (want_dirs && ft.is_dir()) || (!want_dirs && ft.is_file()) {
            out.push(de.path());
        }
    }
    out.sort();
    Ok(out)
}

/// Creates `dir` (under `root`) and flushes each new directory's parent, so the new
/// directories survive a crash.
fn create_dirs(root: &Path, dir: &Path) -> Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    fs::create_dir_all(dir).map_err(io_err(dir, "create the directory"))?;
    let mut d = dir;
    while let Some(parent) = d.parent() {
        sync_dir(parent)?;
        if same_place(parent, root) || !parent.starts_with(root) {
            break;
        }
        d = parent;
    }
    Ok(())
}

/// Removes `dir` and then its parents up to (not including) `root` while they are empty.
fn remove_if_empty(dir: &Path, root: &Path) -> Result<()> {
    let mut d = dir;
    while d.starts_with(root) && !same_place(d, root) {
        match fs::remove_dir(d) {
            Ok(()) => {}
            // Not empty, or already gone: stop quietly.
            Err(_) => break,
        }
        match d.parent() {
            Some(p) => d = p,
            None => break,
        }
    }
    Ok(())
}

/// Flushes a directory (its entries: a rename or a new file) to disk.
#[cfg(unix)]
fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|f| f.sync_all())
        .map_err(io_err(dir, "flush the directory to disk"))
}

#[cfg(not(unix))]
fn sync_dir(_dir: &Path) -> Result<()> {
    Ok(())
}

fn readme_text() -> String {
    format!(
        "This directory is a klaraptor profile database.

klaraptor-cc profiles each annotated CUDA kernel on the GPU it runs on and keeps the
measurements here, so that rebuilds, and build machines without a GPU, do not profile
again. A project may commit this directory (as `{PROJECT_DIR}/`) to share its profiles.

Layout:
  v<format>/<device>/<kernel>-<code hash>.toml   one profile entry per file (TOML)
  .lock, .lock.queue                             taken by readers and writers; do not remove
                                                 them while klaraptor runs
  generation                                     changes with every change of the database;
                                                 builds depend on it (touch it after copying
                                                 entries in by hand)
An entry belongs to one kernel (its mangled name, and a hash of its device code and of the
compiler flags that change that code) on one device. When the kernel's code changes, its
hash changes and the kernel is profiled again; the old entry stays until pruned.

Inspect and clean it with:
  klaraptor profile list [--incomplete]
  klaraptor profile show <kernel or file> [--samples]
  klaraptor profile prune --invalid | --incomplete | --superseded | --device D | --kernel K | --older-than YYYY-MM-DD

An entry marked `incomplete` lacks samples because the collector or the GPU failed (e.g.
another profiler held the GPU's counters); it is never used for a model, and the next
link on a GPU profiles the kernel again.

klaraptor finds its database in ${ENV_VAR}, else in the nearest `{PROJECT_DIR}/`
directory at or above the current directory, else in $XDG_CACHE_HOME/klaraptor/profiles
(~/.cache/klaraptor/profiles).

This database stores format version {FORMAT_VERSION}.
"
    )
}
