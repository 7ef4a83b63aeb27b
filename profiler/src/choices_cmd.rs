//! `klaraptor choices list|show|prune`: look into the choices cache and clean it.
//!
//! An instrumented program's runtime (`runtime-shim/src/klaraptor_rt.c`) times a few
//! candidate launch shapes on the first launches of each (kernel, data values, device),
//! settles on the fastest, and remembers that choice across runs in the *choices cache*: a
//! directory of small `key = value` text files, one per settled choice. The runtime writes
//! them; this module only reads, lists and removes them, and never needs the runtime.
//!
//! The directory is `$KLARAPTOR_CHOICES` (`off` or `0` disables the cache), else
//! `$XDG_CACHE_HOME/klaraptor/choices`, else `~/.cache/klaraptor/choices` ([`choices_dir`]).
//! A file is `<name>-<16 hex>.choice` ([`ChoiceFile`] parses one); the runtime writes each
//! through a hidden `.<something>.tmp` file that it renames into place.

use std::cmp::Ordering;
use std::ffi::OsString;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};

use crate::profile_cmd::emit;
use serde::Serialize;

/// The environment variable naming the choices cache directory (`off` or `0` disables it,
/// as for the runtime).
pub const ENV_VAR: &str = "KLARAPTOR_CHOICES";

/// The only file format version this module reads.
pub const FORMAT_VERSION: u32 = 1;

/// How old a runtime's temporary file must be before `prune --invalid` takes it for
/// abandoned (a runtime renames its file into place right after writing it).
pub const STALE_TMP_AGE: Duration = Duration::from_secs(3600);

/// The keys a choice file must have.
const REQUIRED: [&str; 10] = [
    "version",
    "kernel",
    "name",
    "code_hash",
    "device",
    "device_id",
    "data",
    "block",
    "candidate",
    "launches",
];

/// The choices cache directory: `Ok(None)` when `KLARAPTOR_CHOICES=off` (or `0`) disables
/// it.
/// A directory that does not exist is an empty cache, not an error.
pub fn choices_dir() -> Result<Option<PathBuf>> {
    choices_dir_from(
        std::env::var_os(ENV_VAR),
        std::env::var_os("XDG_CACHE_HOME"),
        std::env::var_os("HOME"),
    )
}

/// [`choices_dir`] from the values of `KLARAPTOR_CHOICES`, `XDG_CACHE_HOME` and `HOME`
/// (an empty value counts as unset).
pub fn choices_dir_from(
    choices: Option<OsString>,
    xdg_cache_home: Option<OsString>,
    home: Option<OsString>,
) -> Result<Option<PathBuf>> {
    let set = |v: Option<OsString>| v.filter(|v| !v.is_empty());
    if let Some(dir) = set(choices) {
        if dir == "off" || dir == "0" {
            return Ok(None);
        }
        return Ok(Some(PathBuf::from(dir)));
    }
    if let Some(cache) = set(xdg_cache_home) {
        return Ok(Some(PathBuf::from(cache).join("klaraptor/choices")));
    }
    if let Some(home) = set(home) {
        return Ok(Some(PathBuf::from(home).join(".cache/klaraptor/choices")));
    }
    bail!(
        "cannot tell where the choices cache is: none of {ENV_VAR}, XDG_CACHE_HOME and HOME \
         is set\n  = help: give --dir <DIR>, or set {ENV_VAR}"
    )
}

/// The shape a choice settled on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Block {
    /// A block shape `bx × by × bz`.
    Shape([u32; 3]),
    /// The program's own launch shape (see [`ChoiceFile::program_block`]).
    Program,
}

/// One measured candidate: its shape (as the file writes it) and its median time.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ShapeTime {
    pub shape: String,
    pub us: f64,
}

/// A parsed choice file.
#[derive(Debug, Clone, PartialEq)]
pub struct ChoiceFile {
    pub version: u32,
    /// The kernel's mangled name.
    pub kernel: String,
    /// The kernel's name in the source.
    pub name: String,
    pub code_hash: String,
    /// The device's name.
    pub device: String,
    /// The device's identity (name, SMs, compute capability, clocks, bus width).
    pub device_id: String,
    /// The data values the choice is for (`n=2048 m=100`; empty for a kernel without).
    pub data: String,
    pub block: Block,
    /// The program's own shape, when [`Block::Program`] won.
    pub program_block: Option<[u32; 3]>,
    /// `model#<i>` (the model's i-th ranked shape), `program` or `profiled`.
    pub candidate: String,
    /// How many launches the choice took to settle.
    pub launches: u64,
    /// The median time of each measured shape, in the file's order.
    pub times_us: Vec<ShapeTime>,
    /// Keys this module does not know, with their values, in the file's order.
    pub other: Vec<(String, String)>,
}

/// `AxBxC` with three positive integers.
fn parse_shape(s: &str) -> Option<[u32; 3]> {
    let mut dims = s
        .split('x')
        .map(|d| d.parse::<u32>().ok().filter(|&d| d > 0));
    let shape = [dims.next()??, dims.next()??, dims.next()??];
    dims.next().is_none().then_some(shape)
}

fn shape_str(b: &[u32; 3]) -> String {
    format!("{}x{}x{}", b[0], b[1], b[2])
}

impl ChoiceFile {
    /// Parses a choice file's text; the error says why the file is invalid.
    pub fn parse(text: &str) -> Result<ChoiceFile, String> {
        let mut fields: Vec<(String, String)> = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let Some((key, value)) = line.split_once('=') else {
                return Err(format!("line {}: not `key = value`", i + 1));
            };
            let (key, value) = (key.trim(), value.trim());
            if key.is_empty() {
                return Err(format!("line {}: no key before `=`", i + 1));
            }
            if fields.iter().any(|(k, _)| k == key) {
                return Err(format!("line {}: `{key}` given twice", i + 1));
            }
            fields.push((key.to_string(), value.to_string()));
        }
        let get = |key: &str| {
            fields
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.clone())
        };
        // The version first: another version may have other keys.
        match get("version").map(|v| (v.parse::<u32>(), v)) {
            None | Some((Ok(FORMAT_VERSION), _)) => {}
            Some((Ok(v), _)) => {
                return Err(format!(
                    "format version {v} (this klaraptor reads version {FORMAT_VERSION})"
                ))
            }
            Some((Err(_), v)) => return Err(format!("version `{v}` is not a number")),
        }
        let missing: Vec<&str> = REQUIRED
            .iter()
            .copied()
            .filter(|k| get(k).is_none())
            .collect();
        if !missing.is_empty() {
            return Err(format!(
                "missing {} {}",
                if missing.len() == 1 { "key" } else { "keys" },
                missing.join(", ")
            ));
        }
        let req = |key: &str| get(key).expect("required keys are present");
        // The cache is a directory anything may write into: its text reaches terminals
        // (`list`, `show`) only in the formats of its keys, never as control characters.
        for (key, value) in &fields {
            if let Some(c) = value.chars().find(|c| c.is_control()) {
                return Err(format!("`{key}` holds the control character {c:?}"));
            }
        }
        use crate::record::text;
        for (key, why) in [
            ("kernel", text::mangled_name(&req("kernel"))),
            ("code_hash", crate::db::check_code_hash(&req("code_hash"))),
            ("device", text::device_name(&req("device"))),
        ] {
            if let Some(why) = why {
                return Err(format!("`{key}` = {:?} {why}", req(key)));
            }
        }

        let block_text = req("block");
        let block =
            if block_text == "program" {
                Block::Program
            } else {
                Block::Shape(parse_shape(&block_text).ok_or_else(|| {
                    format!("block `{block_text}` is neither `AxBxC` nor `program`")
                })?)
            };
        let program_block = match get("program_block") {
            None => None,
            Some(p) => {
                Some(parse_shape(&p).ok_or_else(|| format!("program_block `{p}` is not `AxBxC`"))?)
            }
        };
        let launches_text = req("launches");
        let launches = launches_text
            .parse::<u64>()
            .map_err(|_| format!("launches `{launches_text}` is not a count"))?;
        let times_us = match get("times_us") {
            None => Vec::new(),
            Some(t) => t
                .split_whitespace()
                .map(|item| {
                    item.rsplit_once(':')
                        .and_then(|(shape, us)| {
                            let us = us.parse::<f64>().ok().filter(|u| u.is_finite())?;
                            (!shape.is_empty()).then(|| ShapeTime {
                                shape: shape.to_string(),
                                us,
                            })
                        })
                        .ok_or_else(|| format!("times_us: `{item}` is not `<shape>:<us>`"))
                })
                .collect::<Result<_, _>>()?,
        };
        const KNOWN: [&str; 2] = ["program_block", "times_us"];
        let other = fields
            .iter()
            .filter(|(k, _)| !REQUIRED.contains(&k.as_str()) && !KNOWN.contains(&k.as_str()))
            .cloned()
            .collect();
        Ok(ChoiceFile {
            version: FORMAT_VERSION,
            kernel: req("kernel"),
            name: req("name"),
            code_hash: req("code_hash"),
            device: req("device"),
            device_id: req("device_id"),
            data: req("data"),
            block,
            program_block,
            candidate: req("candidate"),
            launches,
            times_us,
            other,
        })
    }

    /// The block as `list` prints it: `AxBxC`, or `program(AxBxC)`.
    pub fn block_label(&self) -> String {
        match (self.block, self.program_block) {
            (Block::Shape(b), _) => shape_str(&b),
            (Block::Program, Some(p)) => format!("program({})", shape_str(&p)),
            (Block::Program, None) => "program".to_string(),
        }
    }

    /// The shape that was chosen, as `times_us` writes it (when known).
    fn chosen_shape(&self) -> Option<String> {
        match (self.block, self.program_block) {
            (Block::Shape(b), _) | (Block::Program, Some(b)) => Some(shape_str(&b)),
            (Block::Program, None) => None,
        }
    }

    /// `--kernel`: the source name or the mangled name exactly, or a part of the name.
    pub fn matches_kernel(&self, k: &str) -> bool {
        self.name == k || self.kernel == k || self.name.contains(k)
    }

    /// `--device`: a part of the device's name (any case).
    pub fn matches_device(&self, d: &str) -> bool {
        self.device.to_lowercase().contains(&d.to_lowercase())
    }
}

#[derive(Debug, Args)]
pub struct ChoicesArgs {
    /// The choices cache directory (default: $KLARAPTOR_CHOICES, else
    /// $XDG_CACHE_HOME/klaraptor/choices, else ~/.cache/klaraptor/choices).
    #[arg(long, global = true, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    #[command(subcommand)]
    pub command: ChoicesCommand,
}

#[derive(Debug, Subcommand)]
pub enum ChoicesCommand {
    /// One line per settled choice: kernel, data values, block, candidate, launches,
    /// device and file; invalid files after them (when no filter is given).
    List {
        /// Only choices of this kernel (its name in the source or mangled name, or a part
        /// of the name).
        #[arg(long)]
        kernel: Option<String>,
        /// Only choices of this device (a part of its name, any case).
        #[arg(long)]
        device: Option<String>,
        /// Print a JSON array: every field of each choice, {file, invalid} for invalid
        /// files.
        #[arg(long)]
        json: bool,
    },
    /// Every field of one choice file (a path, or a file name in the directory), or of
    /// every choice of a kernel (as `list --kernel`).
    Show {
        #[arg(value_name = "FILE-or-KERNEL")]
        target: String,
    },
    /// Remove choices: those of --kernel/--device, the invalid files and abandoned
    /// temporary files (--invalid), or every file the runtime wrote (--all). Other files
    /// are never touched.
    Prune {
        /// Valid choices of this kernel (its name in the source or mangled name, or a part
        /// of the name).
        #[arg(long)]
        kernel: Option<String>,
        /// Valid choices of this device (a part of its name, any case).
        #[arg(long)]
        device: Option<String>,
        /// Invalid choice files, and temporary files older than an hour.
        #[arg(long)]
        invalid: bool,
        /// Every `*.choice`, `*.progress` and `.*.tmp` file.
        #[arg(long, conflicts_with_all = ["kernel", "device"])]
        all: bool,
        /// Say what would be removed, remove nothing.
        #[arg(long)]
        dry_run: bool,
    },
}

/// Runs a `klaraptor choices` command and prints its output.
pub fn run(args: ChoicesArgs) -> Result<ExitCode> {
    let dir = match args.dir {
        Some(d) => d,
        None => match choices_dir()? {
            Some(d) => d,
            None => {
                let disabled = format!(
                    "the choices cache is disabled ({ENV_VAR}={})",
                    std::env::var(ENV_VAR).unwrap_or_else(|_| "off".into())
                );
                if let ChoicesCommand::List { json, .. } = args.command {
                    if json {
                        eprintln!("{disabled}");
                        emit("[]\n")?;
                    } else {
                        emit(&format!("{disabled}\n"))?;
                    }
                    return Ok(ExitCode::SUCCESS);
                }
                bail!(disabled);
            }
        },
    };
    let mut out = String::new();
    let code = execute(&dir, &args.command, &mut out)?;
    emit(&out)?;
    Ok(code)
}

/// Runs a command against the cache in `dir`, writing what it prints to `out`.
pub fn execute(dir: &Path, command: &ChoicesCommand, out: &mut String) -> Result<ExitCode> {
    match command {
        ChoicesCommand::List {
            kernel,
            device,
            json,
        } => list(dir, kernel.as_deref(), device.as_deref(), *json, out),
        ChoicesCommand::Show { target } => show(dir, target, out),
        ChoicesCommand::Prune {
            kernel,
            device,
            invalid,
            all,
            dry_run,
        } => prune(
            dir,
            kernel.as_deref(),
            device.as_deref(),
            *invalid,
            *all,
            *dry_run,
            out,
        ),
    }
}

/// A file of the cache.
struct Found {
    path: PathBuf,
    file: String,
    kind: Kind,
}

enum Kind {
    Valid(Box<ChoiceFile>),
    /// A `*.progress` file: a launch key the runtime has not settled yet.
    Measuring(Progress),
    Invalid(String),
    /// A runtime's temporary file, stale when older than [`STALE_TMP_AGE`].
    Tmp {
        stale: bool,
    },
}

/// What a runtime measured of a launch key before its run ended unsettled (a `*.progress`
/// file; the next run goes on from it).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Progress {
    pub kernel: String,
    pub name: String,
    pub device: String,
    pub data: String,
    pub launches: u64,
    /// Candidate shapes with samples.
    pub timed: usize,
}

impl Progress {
    /// Parses a progress file's text; the error says why it is invalid.
    pub fn parse(text: &str) -> Result<Progress, String> {
        let mut get = std::collections::BTreeMap::new();
        let mut timed = 0;
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let Some((key, value)) = line.split_once('=') else {
                return Err(format!("line {}: not `key = value`", i + 1));
            };
            let (key, value) = (key.trim(), value.trim());
            if key == "cand" {
                timed += usize::from(!value.ends_with("us=-"));
            } else {
                get.insert(key.to_string(), value.to_string());
            }
        }
        if get.get("version").map(String::as_str) != Some("1") {
            return Err(format!("format version is not {FORMAT_VERSION}"));
        }
        let req = |k: &str| {
            get.get(k)
                .cloned()
                .ok_or_else(|| format!("missing key {k}"))
        };
        let launches = req("launches")?;
        Ok(Progress {
            kernel: req("kernel")?,
            name: req("name")?,
            device: req("device")?,
            data: req("data")?,
            launches: launches
                .parse()
                .map_err(|_| format!("launches `{launches}` is not a count"))?,
            timed,
        })
    }

    fn matches(&self, kernel: Option<&str>, device: Option<&str>) -> bool {
        kernel.is_none_or(|k| self.name == k || self.kernel == k || self.name.contains(k))
            && device.is_none_or(|d| self.device.to_lowercase().contains(&d.to_lowercase()))
    }
}

/// Reads and parses one choice file; `Err` is why it is invalid.
fn read_choice(path: &Path) -> Result<ChoiceFile, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read it: {e}"))?;
    let text = String::from_utf8(bytes).map_err(|_| "not valid UTF-8".to_string())?;
    ChoiceFile::parse(&text)
}

/// Every `*.choice`, `*.progress` and `.*.tmp` file in `dir` (none when it does not exist): valid
/// choices sorted by name, data, device and file, then keys still being measured, invalid
/// files and temporary files by file name.
fn scan(dir: &Path) -> Result<Vec<Found>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => {
            return Err(e).with_context(|| format!("cannot read the directory {}", dir.display()))
        }
    };
    let now = SystemTime::now();
    let mut found = Vec::new();
    for entry in entries {
        let entry =
            entry.with_context(|| format!("cannot read the directory {}", dir.display()))?;
        let path = entry.path();
        let Some(file) = entry.file_name().to_str().map(str::to_string) else {
            continue;
        };
        if !path.is_file() {
            continue;
        }
        let kind = if file.starts_with('.') {
            if !file.ends_with(".tmp") || file.len() <= ".tmp".len() + 1 {
                continue;
            }
            let age = std::fs::metadata(&path)
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| now.duration_since(t).ok());
            Kind::Tmp {
                stale: age.is_some_and(|a| a > STALE_TMP_AGE),
            }
        } else if file.ends_with(".choice") {
            match read_choice(&path) {
                Ok(c) => Kind::Valid(Box::new(c)),
                Err(why) => Kind::Invalid(why),
            }
        } else if file.ends_with(".progress") {
            match std::fs::read_to_string(&path)
                .map_err(|e| format!("cannot read it: {e}"))
                .and_then(|t| Progress::parse(&t))
            {
                Ok(p) => Kind::Measuring(p),
                Err(why) => Kind::Invalid(why),
            }
        } else {
            continue;
        };
        found.push(Found { path, file, kind });
    }
    let rank = |f: &Found| match f.kind {
        Kind::Valid(_) => 0,
        Kind::Measuring(_) => 1,
        Kind::Invalid(_) => 2,
        Kind::Tmp { .. } => 3,
    };
    found.sort_by(|a, b| {
        rank(a)
            .cmp(&rank(b))
            .then_with(|| match (&a.kind, &b.kind) {
                (Kind::Valid(x), Kind::Valid(y)) => x
                    .name
                    .cmp(&y.name)
                    .then_with(|| natural_cmp(&x.data, &y.data))
                    .then_with(|| x.device.cmp(&y.device))
                    .then_with(|| a.file.cmp(&b.file)),
                _ => a.file.cmp(&b.file),
            })
    });
    Ok(found)
}

/// Compares texts with their runs of digits as numbers (`n=512` before `n=2048`).
fn natural_cmp(a: &str, b: &str) -> Ordering {
    let (mut a, mut b) = (a, b);
    loop {
        let (Some(ca), Some(cb)) = (a.chars().next(), b.chars().next()) else {
            return a.len().cmp(&b.len());
        };
        if ca.is_ascii_digit() && cb.is_ascii_digit() {
            let na = a.find(|c: char| !c.is_ascii_digit()).unwrap_or(a.len());
            let nb = b.find(|c: char| !c.is_ascii_digit()).unwrap_or(b.len());
            let (da, db) = (
                a[..na].trim_start_matches('0'),
                b[..nb].trim_start_matches('0'),
            );
            let o = da.len().cmp(&db.len()).then_with(|| da.cmp(db));
            if o != Ordering::Equal {
                return o;
            }
            (a, b) = (&a[na..], &b[nb..]);
        } else {
            if ca != cb {
                return ca.cmp(&cb);
            }
            (a, b) = (&a[ca.len_utf8()..], &b[cb.len_utf8()..]);
        }
    }
}

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

#[derive(Serialize)]
#[serde(untagged)]
enum JsonItem<'a> {
    Valid {
        file: &'a str,
        version: u32,
        kernel: &'a str,
        name: &'a str,
        code_hash: &'a str,
        device: &'a str,
        device_id: &'a str,
        data: &'a str,
        block: String,
        program_block: Option<String>,
        candidate: &'a str,
        launches: u64,
        times_us: &'a [ShapeTime],
        other: serde_json::Map<String, serde_json::Value>,
    },
    Measuring {
        file: &'a str,
        measuring: bool,
        #[serde(flatten)]
        progress: &'a Progress,
    },
    Invalid {
        file: &'a str,
        invalid: &'a str,
    },
}

fn list(
    dir: &Path,
    kernel: Option<&str>,
    device: Option<&str>,
    json: bool,
    out: &mut String,
) -> Result<ExitCode> {
    let found = scan(dir)?;
    let filtered = kernel.is_some() || device.is_some();
    let wanted = |c: &ChoiceFile| {
        kernel.is_none_or(|k| c.matches_kernel(k)) && device.is_none_or(|d| c.matches_device(d))
    };
    let mut items = Vec::new();
    let (mut valid, mut invalid, mut measuring) = (0, 0, 0);
    for f in &found {
        match &f.kind {
            Kind::Valid(c) if wanted(c) => {
                valid += 1;
                if json {
                    items.push(JsonItem::Valid {
                        file: &f.file,
                        version: c.version,
                        kernel: &c.kernel,
                        name: &c.name,
                        code_hash: &c.code_hash,
                        device: &c.device,
                        device_id: &c.device_id,
                        data: &c.data,
                        block: match c.block {
                            Block::Shape(b) => shape_str(&b),
                            Block::Program => "program".into(),
                        },
                        program_block: c.program_block.as_ref().map(shape_str),
                        candidate: &c.candidate,
                        launches: c.launches,
                        times_us: &c.times_us,
                        other: c
                            .other
                            .iter()
                            .map(|(k, v)| (k.clone(), v.clone().into()))
                            .collect(),
                    });
                } else {
                    let _ = writeln!(
                        out,
                        "{} {} block={} candidate={} launches={} device={} {}",
                        c.name,
                        c.data,
                        c.block_label(),
                        c.candidate,
                        c.launches,
                        c.device,
                        f.file
                    );
                }
            }
            Kind::Measuring(p) if p.matches(kernel, device) => {
                measuring += 1;
                if json {
                    items.push(JsonItem::Measuring {
                        file: &f.file,
                        measuring: true,
                        progress: p,
                    });
                } else {
                    let _ = writeln!(
                        out,
                        "{} {} measuring: not settled after launches={} ({} timed) device={} {}",
                        p.name,
                        p.data,
                        p.launches,
                        plural(p.timed, "shape", "shapes"),
                        p.device,
                        f.file
                    );
                }
            }
            Kind::Invalid(why) if !filtered => {
                invalid += 1;
                if json {
                    items.push(JsonItem::Invalid {
                        file: &f.file,
                        invalid: why,
                    });
                } else {
                    let _ = writeln!(out, "{}: invalid: {why}", f.file);
                }
            }
            _ => {}
        }
    }
    if json {
        let text = serde_json::to_string_pretty(&items).context("cannot render JSON")?;
        let _ = writeln!(out, "{text}");
    } else {
        let _ = write!(
            out,
            "{} in {}",
            plural(valid, "choice", "choices"),
            dir.display()
        );
        if measuring > 0 {
            let _ = write!(out, ", {measuring} still being measured");
        }
        if invalid > 0 {
            let _ = write!(out, ", {invalid} invalid");
        }
        out.push('\n');
    }
    Ok(ExitCode::SUCCESS)
}

fn show(dir: &Path, target: &str, out: &mut String) -> Result<ExitCode> {
    // A path, or a file name of the directory, rather than a kernel.
    let file = [PathBuf::from(target), dir.join(target)]
        .into_iter()
        .find(|p| p.is_file());
    if target.ends_with(".choice") || target.contains(std::path::MAIN_SEPARATOR) {
        return match file {
            Some(path) => show_file(&path, out),
            None => bail!(
                "no choice file `{target}` (neither a path nor a file in {})",
                dir.display()
            ),
        };
    }
    let mut shown = 0;
    for f in &scan(dir)? {
        if let Kind::Valid(c) = &f.kind {
            if c.matches_kernel(target) {
                if shown > 0 {
                    out.push('\n');
                }
                render(c, &f.path, out);
                shown += 1;
            }
        }
    }
    if shown == 0 {
        // Not a kernel: maybe a file after all.
        if let Some(path) = file {
            return show_file(&path, out);
        }
        bail!(
            "no choice for kernel `{target}` in {}\n  (`klaraptor choices list` shows what \
             the cache holds)",
            dir.display()
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn show_file(path: &Path, out: &mut String) -> Result<ExitCode> {
    match read_choice(path) {
        Ok(c) => {
            render(&c, path, out);
            Ok(ExitCode::SUCCESS)
        }
        Err(why) => bail!("{}: invalid: {why}", path.display()),
    }
}

fn ordinal(i: u64) -> String {
    let suffix = match (i % 10, i % 100) {
        (_, 11..=13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{i}{suffix}")
}

fn candidate_text(c: &str) -> String {
    if let Some(i) = c.strip_prefix("model#").and_then(|i| i.parse::<u64>().ok()) {
        return format!("{c} (the model's {} ranked shape)", ordinal(i));
    }
    match c {
        "program" => format!("{c} (the program's own shape)"),
        "profiled" => format!("{c} (the shape the profile measured fastest)"),
        _ if c.starts_with("nearby#") => {
            format!("{c} (a neighbour of the best measured shape, found by the runtime's walk)")
        }
        _ => c.to_string(),
    }
}

fn render(c: &ChoiceFile, path: &Path, out: &mut String) {
    let _ = writeln!(out, "file        {}", path.display());
    let _ = writeln!(out, "kernel      {} ({})", c.name, c.kernel);
    let _ = writeln!(out, "code hash   {}", c.code_hash);
    let _ = writeln!(out, "device      {}", c.device);
    let _ = writeln!(out, "device id   {}", c.device_id);
    let _ = writeln!(out, "data        {}", c.data);
    let block = match (c.block, c.program_block) {
        (Block::Shape(b), _) => shape_str(&b),
        (Block::Program, Some(p)) => format!("{} (the program's own)", shape_str(&p)),
        (Block::Program, None) => "the program's own".to_string(),
    };
    let _ = writeln!(out, "block       {block}");
    let _ = writeln!(out, "candidate   {}", candidate_text(&c.candidate));
    let _ = writeln!(out, "launches    {}", c.launches);
    if c.times_us.is_empty() {
        let _ = writeln!(out, "times       none recorded");
    } else {
        let chosen = c.chosen_shape();
        let width = c.times_us.iter().map(|t| t.shape.len()).max().unwrap_or(0);
        for (i, t) in c.times_us.iter().enumerate() {
            let _ = writeln!(
                out,
                "{}{:<width$}  {:>10.2} µs{}",
                if i == 0 {
                    "times       "
                } else {
                    "            "
                },
                t.shape,
                t.us,
                if chosen.as_deref() == Some(t.shape.as_str()) {
                    "  (chosen)"
                } else {
                    ""
                }
            );
        }
    }
    for (k, v) in &c.other {
        let _ = writeln!(out, "{k:<11} {v}");
    }
}

fn prune(
    dir: &Path,
    kernel: Option<&str>,
    device: Option<&str>,
    invalid: bool,
    all: bool,
    dry_run: bool,
    out: &mut String,
) -> Result<ExitCode> {
    if kernel.is_none() && device.is_none() && !invalid && !all {
        bail!(
            "say what to remove: --kernel <K> and/or --device <D> (their valid choices), \
             --invalid (invalid files and stale temporary files) or --all (everything the \
             runtime wrote in {})",
            dir.display()
        );
    }
    let filtered = kernel.is_some() || device.is_some();
    let mut removed = 0;
    for f in scan(dir)? {
        let why = match &f.kind {
            _ if all => None,
            Kind::Valid(c)
                if filtered
                    && kernel.is_none_or(|k| c.matches_kernel(k))
                    && device.is_none_or(|d| c.matches_device(d)) =>
            {
                None
            }
            Kind::Measuring(p) if filtered && p.matches(kernel, device) => None,
            Kind::Invalid(why) if invalid => Some(format!("invalid: {why}")),
            Kind::Tmp { stale: true } if invalid => {
                Some("a temporary file older than an hour".to_string())
            }
            _ => continue,
        };
        if !dry_run {
            match std::fs::remove_file(&f.path) {
                Ok(()) => {}
                // Removed meanwhile (by another prune, or renamed by a runtime).
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => {
                    return Err(e).with_context(|| format!("cannot remove {}", f.path.display()))
                }
            }
        }
        removed += 1;
        let _ = writeln!(
            out,
            "{} {}{}",
            if dry_run { "would remove" } else { "removed" },
            f.file,
            why.map(|w| format!(" ({w})")).unwrap_or_default()
        );
    }
    let _ = writeln!(
        out,
        "{} {} from {}",
        plural(removed, "file", "files"),
        if dry_run {
            "would be removed"
        } else {
            "removed"
        },
        dir.display()
    );
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    const VALID: &str = "\
# klaraptor: a settled launch choice, written by the program's runtime (safe to delete)
version = 1
kernel = _Z2mmPKfS0_Pfi
name = mm
code_hash = 5f1c0e9a2b7d4c31
device = NVIDIA H200
device_id = NVIDIA H200|sm=132|cc=9.0|clock_khz=1980000|mem_clock_khz=2619000|bus_bits=6144
data = n=2048 m=100
block = 128x2x1
candidate = model#2
launches = 8
times_us = 128x2x1:10.12 32x8x1:14.20 256x1x1:20.01
";

    fn without(key: &str) -> String {
        VALID
            .lines()
            .filter(|l| !l.starts_with(&format!("{key} =")))
            .map(|l| format!("{l}\n"))
            .collect()
    }

    #[test]
    fn parses_a_valid_file() {
        let c = ChoiceFile::parse(VALID).unwrap();
        assert_eq!(
            c,
            ChoiceFile {
                version: 1,
                kernel: "_Z2mmPKfS0_Pfi".into(),
                name: "mm".into(),
                code_hash: "5f1c0e9a2b7d4c31".into(),
                device: "NVIDIA H200".into(),
                device_id: "NVIDIA H200|sm=132|cc=9.0|clock_khz=1980000|mem_clock_khz=2619000|\
                            bus_bits=6144"
                    .into(),
                data: "n=2048 m=100".into(),
                block: Block::Shape([128, 2, 1]),
                program_block: None,
                candidate: "model#2".into(),
                launches: 8,
                times_us: vec![
                    ShapeTime {
                        shape: "128x2x1".into(),
                        us: 10.12
                    },
                    ShapeTime {
                        shape: "32x8x1".into(),
                        us: 14.20
                    },
                    ShapeTime {
                        shape: "256x1x1".into(),
                        us: 20.01
                    },
                ],
                other: vec![],
            }
        );
        assert_eq!(c.block_label(), "128x2x1");
    }

    #[test]
    fn any_order_blank_lines_and_an_empty_times_us() {
        let mut lines: Vec<&str> = VALID.lines().collect();
        lines.reverse();
        let text = lines.join("\n\n").replace(
            "times_us = 128x2x1:10.12 32x8x1:14.20 256x1x1:20.01",
            "times_us =",
        );
        let c = ChoiceFile::parse(&text).unwrap();
        assert_eq!(c.name, "mm");
        assert_eq!(c.data, "n=2048 m=100");
        assert!(c.times_us.is_empty());
        // times_us itself may be left out.
        assert!(ChoiceFile::parse(&without("times_us"))
            .unwrap()
            .times_us
            .is_empty());
    }

    #[test]
    fn each_required_key_missing_is_invalid() {
        for key in REQUIRED {
            let err = ChoiceFile::parse(&without(key)).unwrap_err();
            assert_eq!(err, format!("missing key {key}"), "{key}");
        }
        let err = ChoiceFile::parse("version = 1\nkernel = k\n").unwrap_err();
        assert_eq!(
            err,
            "missing keys name, code_hash, device, device_id, data, block, candidate, launches"
        );
    }

    #[test]
    fn another_version_is_invalid() {
        let err = ChoiceFile::parse(&VALID.replace("version = 1", "version = 2")).unwrap_err();
        assert_eq!(err, "format version 2 (this klaraptor reads version 1)");
        let err = ChoiceFile::parse(&VALID.replace("version = 1", "version = one")).unwrap_err();
        assert_eq!(err, "version `one` is not a number");
        // Said before any missing key: another version may have other keys.
        let err = ChoiceFile::parse("version = 2\nkernel = k\n").unwrap_err();
        assert_eq!(err, "format version 2 (this klaraptor reads version 1)");
    }

    #[test]
    fn bad_block_launches_times_and_lines_are_invalid() {
        let bad = |from: &str, to: &str| ChoiceFile::parse(&VALID.replace(from, to)).unwrap_err();
        assert_eq!(
            bad("block = 128x2x1", "block = 128x2"),
            "block `128x2` is neither `AxBxC` nor `program`"
        );
        assert_eq!(
            bad("block = 128x2x1", "block = 0x2x1"),
            "block `0x2x1` is neither `AxBxC` nor `program`"
        );
        assert_eq!(
            bad("launches = 8", "launches = -1"),
            "launches `-1` is not a count"
        );
        assert_eq!(
            bad("32x8x1:14.20", "32x8x1"),
            "times_us: `32x8x1` is not `<shape>:<us>`"
        );
        assert_eq!(
            bad("launches = 8", "launches = 8\nlaunches = 9"),
            "line 12: `launches` given twice"
        );
        assert_eq!(
            bad("launches = 8", "launches 8"),
            "line 11: not `key = value`"
        );
    }

    #[test]
    fn block_program_with_program_block() {
        let text = VALID.replace("block = 128x2x1", "block = program\nprogram_block = 32x8x1");
        let c = ChoiceFile::parse(&text.replace("model#2", "program")).unwrap();
        assert_eq!(c.block, Block::Program);
        assert_eq!(c.program_block, Some([32, 8, 1]));
        assert_eq!(c.block_label(), "program(32x8x1)");
        assert_eq!(c.chosen_shape().as_deref(), Some("32x8x1"));
        assert_eq!(c.candidate, "program");
        let err = ChoiceFile::parse(&text.replace("= 32x8x1", "= 32x8")).unwrap_err();
        assert_eq!(err, "program_block `32x8` is not `AxBxC`");
    }

    #[test]
    fn unknown_keys_are_kept() {
        let text = format!("{VALID}future = a = b\nrecorded_at = 2026-11-23\n");
        let c = ChoiceFile::parse(&text).unwrap();
        assert_eq!(
            c.other,
            vec![
                ("future".to_string(), "a = b".to_string()),
                ("recorded_at".to_string(), "2026-11-23".to_string())
            ]
        );
        assert_eq!(c.launches, 8);
    }

    #[test]
    fn matching() {
        let c = ChoiceFile::parse(VALID).unwrap();
        assert!(c.matches_kernel("mm"));
        assert!(c.matches_kernel("m"));
        assert!(c.matches_kernel("_Z2mmPKfS0_Pfi"));
        assert!(!c.matches_kernel("_Z2mm"));
        assert!(!c.matches_kernel("mmm"));
        assert!(c.matches_device("h200"));
        assert!(!c.matches_device("H100"));
    }

    #[test]
    fn directory_from_the_environment() {
        let os = |s: &str| Some(OsString::from(s));
        assert_eq!(
            choices_dir_from(os("/c"), os("/x"), os("/h")).unwrap(),
            Some(PathBuf::from("/c"))
        );
        assert_eq!(
            choices_dir_from(os("off"), os("/x"), os("/h")).unwrap(),
            None
        );
        assert_eq!(choices_dir_from(os("0"), os("/x"), os("/h")).unwrap(), None);
        assert_eq!(
            choices_dir_from(os(""), os("/x"), os("/h")).unwrap(),
            Some(PathBuf::from("/x/klaraptor/choices"))
        );
        assert_eq!(
            choices_dir_from(None, os(""), os("/h")).unwrap(),
            Some(PathBuf::from("/h/.cache/klaraptor/choices"))
        );
        assert!(choices_dir_from(None, None, None).is_err());
    }

    #[test]
    fn data_sorts_by_number() {
        assert_eq!(natural_cmp("n=512", "n=2048"), Ordering::Less);
        assert_eq!(natural_cmp("n=2048 m=10", "n=2048 m=9"), Ordering::Greater);
        assert_eq!(natural_cmp("n=2048", "n=2048"), Ordering::Equal);
        assert_eq!(natural_cmp("", "n=1"), Ordering::Less);
        assert_eq!(natural_cmp("n=07", "n=7"), Ordering::Equal);
    }
}
