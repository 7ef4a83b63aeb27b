//! `klaraptor choices list|show|prune`: look into the choices cache and clean it.
//!
//! An instrumented program's runtime (`runtime-shim/src/klaraptor_refine.inc`) decides each
//! launch key's shape (kernel, data values, device) by paired comparisons on its launches: a
//! challenger (the model's shapes, the profile's fastest, neighbours of the winner) is timed
//! against the incumbent, the program's own shape first, in adjacent launches, and replaces it
//! only when the paired differences show it faster. Where no comparison reaches a verdict the
//! program's shape is kept (*undecided*); where the launches cannot be timed cleanly, the
//! model's first choice (*unmeasurable*). The decision and its evidence are remembered across
//! runs in the *choices cache* (`runtime-shim/src/klaraptor_choices.inc`): a directory of
//! small `key = value` text files, one per decided key, and one per key still being compared.
//! The runtime writes them; this module only reads, lists and removes them, and never needs
//! the runtime.
//!
//! The directory is `$KLARAPTOR_CHOICES` (`off` or `0` disables the cache), else
//! `$XDG_CACHE_HOME/klaraptor/choices`, else `~/.cache/klaraptor/choices` ([`choices_dir`]).
//! A decided key is `<name>-<16 hex>.choice` ([`ChoiceFile`] parses one), a key not decided
//! yet `<name>-<16 hex>.progress` ([`Progress`]); the runtime writes each through a hidden
//! `.<something>.tmp` file that it renames into place. Files of an older rule ([`OLD_VERSIONS`]:
//! version 1, unpaired medians; version 2, paired comparisons that could decide on a run's
//! start alone; version 3, paired comparisons over the run, but a key found steady had its
//! later comparisons decided on a run's start alone) are not used by the runtime: it measures
//! their keys again and overwrites them.

use std::cmp::Ordering;
use std::ffi::OsString;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};

use crate::profile_cmd::emit;
use serde::{Serialize, Serializer};

/// The environment variable naming the choices cache directory (`off` or `0` disables it,
/// as for the runtime).
pub const ENV_VAR: &str = "KLARAPTOR_CHOICES";

/// The file format version this module reads (the runtime's `CHOICES_VERSION`: decisions by
/// paired comparisons, each judged over the whole run).
pub const FORMAT_VERSION: u32 = 4;

/// The versions of the older rules, each with what it decided by (the runtime's
/// `choices_older_rule`): the runtime does not use their files, measures their keys again
/// and overwrites them.
pub const OLD_VERSIONS: [(u32, &str); 3] = [
    (1, "unpaired medians"),
    (
        2,
        "paired comparisons that could decide on a run's start alone",
    ),
    (
        3,
        "paired comparisons over the run, but a steady key's later ones could decide on a \
         run's start alone",
    ),
];

/// What an older rule's version decided by (`None`: `version` is not an older rule's).
pub fn old_rule(version: u32) -> Option<&'static str> {
    OLD_VERSIONS
        .iter()
        .find(|(v, _)| *v == version)
        .map(|(_, rule)| *rule)
}

/// The most `compared` lines a choice file may have (the runtime's `CHOICE_MAX_CMP`).
pub const MAX_COMPARISONS: usize = 24;

/// How old a runtime's temporary file must be before `prune --invalid` takes it for
/// abandoned (a runtime renames its file into place right after writing it).
pub const STALE_TMP_AGE: Duration = Duration::from_secs(3600);

/// The keys a choice file must have.
const REQUIRED: [&str; 15] = [
    "version",
    "kernel",
    "name",
    "code_hash",
    "device",
    "device_id",
    "data",
    "block",
    "program_block",
    "candidate",
    "confidence",
    "launches",
    "pairs",
    "vs_program",
    "extra_us",
];

/// The keys a progress file must have.
const PROGRESS_REQUIRED: [&str; 12] = [
    "version",
    "kernel",
    "name",
    "code_hash",
    "device",
    "device_id",
    "data",
    "launches",
    "last_run_launches",
    "spent_us",
    "incumbent",
    "walk",
];

/// The most pairs (quadruples) a count may claim, as the runtime reads them.
const MAX_PAIRS: u64 = 1_000_000;

/// The most `pair` lines a progress file's open comparison may have (the runtime's
/// `RF_QUADS_MAX`).
pub const MAX_OPEN_PAIRS: usize = 24;

/// The longest candidate label the runtime writes (`char label[24]`).
const MAX_LABEL: usize = 23;

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

/// The shape a choice decided on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Block {
    /// A block shape `bx × by × bz`.
    Shape([u32; 3]),
    /// The program's own launch shape (see [`ChoiceFile::program_block`]).
    Program,
}

/// How a key's launch was decided (the file's `confidence`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Confidence {
    /// By paired comparisons that reached a verdict.
    Paired,
    /// No comparison reached a verdict: the program's own shape is kept.
    Undecided,
    /// The launches could not be timed cleanly: the model's first choice is kept.
    Unmeasurable,
}

impl Confidence {
    const ALL: [Confidence; 3] = [
        Confidence::Paired,
        Confidence::Undecided,
        Confidence::Unmeasurable,
    ];

    /// The word the file writes.
    pub fn as_str(self) -> &'static str {
        match self {
            Confidence::Paired => "paired",
            Confidence::Undecided => "undecided",
            Confidence::Unmeasurable => "unmeasurable",
        }
    }
}

/// A comparison's outcome, for its challenger.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// Faster than the incumbent: it became the incumbent.
    Win,
    /// Not faster.
    Lose,
    /// Far slower in every launch of its first quadruple.
    Cliff,
    /// No verdict after the most quadruples a comparison takes: the incumbent stays.
    Undecided,
    /// Its launch failed (a shape the kernel's resources refuse).
    Failed,
    /// The paired differences too noisy to resolve anything.
    Unmeasurable,
}

impl Verdict {
    const ALL: [Verdict; 6] = [
        Verdict::Win,
        Verdict::Lose,
        Verdict::Cliff,
        Verdict::Undecided,
        Verdict::Failed,
        Verdict::Unmeasurable,
    ];

    /// The word the file writes.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Win => "win",
            Verdict::Lose => "lose",
            Verdict::Cliff => "cliff",
            Verdict::Undecided => "undecided",
            Verdict::Failed => "failed",
            Verdict::Unmeasurable => "unmeasurable",
        }
    }

    /// What the verdict means, for `show`.
    fn meaning(self) -> &'static str {
        match self {
            Verdict::Win => "faster, it became the incumbent",
            Verdict::Lose => "not faster",
            Verdict::Cliff => "far slower in every launch of its first quadruple",
            Verdict::Undecided => "no verdict, the incumbent stays",
            Verdict::Failed => "its launch failed",
            Verdict::Unmeasurable => "too noisy to tell",
        }
    }
}

fn shape_json<S: Serializer>(b: &[u32; 3], s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&shape_str(b))
}

/// One paired comparison (a `compared` line): a challenger timed against the incumbent in
/// adjacent launches, in quadruples.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    /// The challenger's candidate label (`model#2`, `profiled`, `nearby#1`, `program`).
    pub challenger: String,
    #[serde(serialize_with = "shape_json")]
    pub challenger_block: [u32; 3],
    pub incumbent: String,
    #[serde(serialize_with = "shape_json")]
    pub incumbent_block: [u32; 3],
    /// The quadruples timed.
    pub pairs: u64,
    /// The mean of the relative paired difference (challenger − incumbent) / incumbent over
    /// the quadruples: −0.25 is a challenger 25 % faster.
    pub mean: f64,
    /// Its standard deviation.
    pub sd: f64,
    pub verdict: Verdict,
}

impl Comparison {
    /// Parses the value of a `compared` line, as the runtime reads it:
    /// `<label> <AxBxC> vs <label> <AxBxC> pairs=<n> mean=<x> sd=<x> verdict=<word>`.
    pub fn parse(s: &str) -> Result<Comparison, String> {
        let bad = |why: &str| format!("compared `{s}`: {why}");
        let t: Vec<&str> = s.split_whitespace().collect();
        let [ch, ch_block, vs, inc, inc_block, pairs, mean, sd, verdict] = t[..] else {
            return Err(bad(
                "not `<label> <AxBxC> vs <label> <AxBxC> pairs=<n> mean=<x> sd=<x> \
                 verdict=<word>`",
            ));
        };
        if vs != "vs" {
            return Err(bad("no `vs` between the challenger and the incumbent"));
        }
        for label in [ch, inc] {
            if label.len() > MAX_LABEL {
                return Err(bad(&format!("the label `{label}` is too long")));
            }
        }
        let block = |b: &str| parse_shape(b).ok_or_else(|| bad(&format!("`{b}` is not `AxBxC`")));
        fn value<'a>(tok: &'a str, name: &str) -> Option<&'a str> {
            tok.strip_prefix(name)?.strip_prefix('=')
        }
        let value = |tok: &str, name: &str| {
            value(tok, name)
                .map(str::to_string)
                .ok_or_else(|| bad(&format!("`{tok}` is not `{name}=…`")))
        };
        let pairs = value(pairs, "pairs")?;
        let pairs = pairs
            .parse::<u64>()
            .ok()
            .filter(|&p| p <= MAX_PAIRS)
            .ok_or_else(|| bad(&format!("pairs `{pairs}` is not a count")))?;
        let mean_text = value(mean, "mean")?;
        let mean = mean_text
            .parse::<f64>()
            .ok()
            .filter(|m| *m > -1.0 && *m < 1e6)
            .ok_or_else(|| bad(&format!("mean `{mean_text}` is not a relative difference")))?;
        let sd_text = value(sd, "sd")?;
        let sd = sd_text
            .parse::<f64>()
            .ok()
            .filter(|d| *d >= 0.0 && d.is_finite())
            .ok_or_else(|| bad(&format!("sd `{sd_text}` is not a deviation")))?;
        let verdict_text = value(verdict, "verdict")?;
        let verdict = Verdict::ALL
            .into_iter()
            .find(|v| v.as_str() == verdict_text)
            .ok_or_else(|| bad(&format!("`{verdict_text}` is no verdict")))?;
        Ok(Comparison {
            challenger: ch.to_string(),
            challenger_block: block(ch_block)?,
            incumbent: inc.to_string(),
            incumbent_block: block(inc_block)?,
            pairs,
            mean,
            sd,
            verdict,
        })
    }

    /// One line for `show`: `model#2 128x1x1 vs model#1 256x1x1: 3 pairs, -25.00 % time
    /// (sd 0.00 %): win (…)`.
    fn describe(&self) -> String {
        format!(
            "{} {} vs {} {}: {}, {:+.2} % time (sd {:.2} %): {} ({})",
            self.challenger,
            shape_str(&self.challenger_block),
            self.incumbent,
            shape_str(&self.incumbent_block),
            plural(self.pairs as usize, "pair", "pairs"),
            100.0 * self.mean,
            100.0 * self.sd,
            self.verdict.as_str(),
            self.verdict.meaning()
        )
    }
}

/// A parsed choice file (version 4): a decided launch and the evidence it was decided on.
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
    /// The program's own shape at this launch.
    pub program_block: [u32; 3],
    /// `model#<i>` (the model's i-th ranked shape), `program`, `profiled` or `nearby#<i>`.
    pub candidate: String,
    pub confidence: Confidence,
    /// The key's launches when it was decided, every run's.
    pub launches: u64,
    /// The quadruples timed, every comparison's.
    pub pairs: u64,
    /// The chosen shape's time over the program's, from the evidence (the product of the
    /// winning comparisons' ratios; for an unmeasurable key, of the noisy times).
    pub vs_program: f64,
    /// What the timed launches cost, in µs (their absolute paired differences).
    pub extra_us: f64,
    /// The comparisons, in the order they were made.
    pub comparisons: Vec<Comparison>,
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

/// The value of the file's first `version` line, as the runtime reads it (`None`: none).
fn version_of(text: &str) -> Option<&str> {
    text.lines().find_map(|line| {
        let (key, value) = line.trim().split_once('=')?;
        (key.trim() == "version").then(|| value.trim())
    })
}

/// The version of a file of the cache when it is an older rule's (`version = 1`, `2` or `3`,
/// as the runtime compares it: the text exactly): the runtime does not use it, measures its key
/// again and overwrites it.
pub fn old_version(text: &str) -> Option<u32> {
    let v = version_of(text)?;
    OLD_VERSIONS
        .iter()
        .map(|(old, _)| *old)
        .find(|old| old.to_string() == v)
}

/// 1 when a file of the cache is of an older rule ([`old_version`]).
pub fn is_old_format(text: &str) -> bool {
    old_version(text).is_some()
}

/// A file's `key = value` lines, in order (comments and blank lines left out). Only the
/// `repeated` keys may be given more than once. The cache is a directory anything may write
/// into: its text reaches terminals (`list`, `show`) only in the formats of its keys, never
/// as control characters.
fn fields(text: &str, repeated: &[&str]) -> Result<Vec<(String, String)>, String> {
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
        if let Some(c) = key.chars().find(|c| c.is_control()) {
            return Err(format!(
                "line {}: a key holds the control character {c:?}",
                i + 1
            ));
        }
        if !repeated.contains(&key) && fields.iter().any(|(k, _)| k == key) {
            return Err(format!("line {}: `{key}` given twice", i + 1));
        }
        fields.push((key.to_string(), value.to_string()));
    }
    for (key, value) in &fields {
        if let Some(c) = value.chars().find(|c| c.is_control()) {
            return Err(format!("`{key}` holds the control character {c:?}"));
        }
    }
    Ok(fields)
}

fn get<'a>(fields: &'a [(String, String)], key: &str) -> Option<&'a str> {
    fields
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

/// The version (this module's, else why not), then the required keys, then the formats of
/// the key fields every file of the cache has.
fn check_common(fields: &[(String, String)], required: &[&str]) -> Result<(), String> {
    // The version first: another version may have other keys.
    let version = get(fields, "version");
    // An older rule's, as the runtime tells it (the text exactly).
    if let Some((v, rule)) = OLD_VERSIONS
        .iter()
        .find(|(old, _)| version == Some(old.to_string().as_str()))
    {
        return Err(format!(
            "old format (version {v}, decided by {rule}): measured again by the next run"
        ));
    }
    match version.map(|v| (v.parse::<u32>(), v)) {
        None | Some((Ok(FORMAT_VERSION), _)) => {}
        Some((Ok(v), _)) => {
            return Err(format!(
                "format version {v} (this klaraptor reads version {FORMAT_VERSION})"
            ))
        }
        Some((Err(_), v)) => return Err(format!("version `{v}` is not a number")),
    }
    let missing: Vec<&str> = required
        .iter()
        .copied()
        .filter(|k| get(fields, k).is_none())
        .collect();
    if !missing.is_empty() {
        return Err(format!(
            "missing {} {}",
            if missing.len() == 1 { "key" } else { "keys" },
            missing.join(", ")
        ));
    }
    use crate::record::text;
    let req = |key: &str| get(fields, key).expect("required keys are present");
    for (key, why) in [
        ("kernel", text::mangled_name(req("kernel"))),
        ("code_hash", crate::db::check_code_hash(req("code_hash"))),
        ("device", text::device_name(req("device"))),
    ] {
        if let Some(why) = why {
            return Err(format!("`{key}` = {:?} {why}", req(key)));
        }
    }
    Ok(())
}

fn count(fields: &[(String, String)], key: &str, max: u64) -> Result<u64, String> {
    let v = get(fields, key).unwrap_or_default();
    v.parse::<u64>()
        .ok()
        .filter(|&n| n <= max)
        .ok_or_else(|| format!("{key} `{v}` is not a count"))
}

fn microseconds(fields: &[(String, String)], key: &str) -> Result<f64, String> {
    let v = get(fields, key).unwrap_or_default();
    v.parse::<f64>()
        .ok()
        .filter(|u| *u >= 0.0 && u.is_finite())
        .ok_or_else(|| format!("{key} `{v}` is not a time in µs"))
}

impl ChoiceFile {
    /// Parses a choice file's text; the error says why the file is invalid (for a file of
    /// an older rule, [`is_old_format`], that it is one).
    pub fn parse(text: &str) -> Result<ChoiceFile, String> {
        let fields = fields(text, &["compared"])?;
        check_common(&fields, &REQUIRED)?;
        let req = |key: &str| get(&fields, key).expect("required keys are present");

        let block_text = req("block");
        let block =
            if block_text == "program" {
                Block::Program
            } else {
                Block::Shape(parse_shape(block_text).ok_or_else(|| {
                    format!("block `{block_text}` is neither `AxBxC` nor `program`")
                })?)
            };
        let p = req("program_block");
        let program_block =
            parse_shape(p).ok_or_else(|| format!("program_block `{p}` is not `AxBxC`"))?;
        let c = req("confidence");
        let confidence = Confidence::ALL
            .into_iter()
            .find(|k| k.as_str() == c)
            .ok_or_else(|| {
                format!("confidence `{c}` is none of paired, undecided, unmeasurable")
            })?;
        let launches = count(&fields, "launches", u64::MAX)?;
        let pairs = count(&fields, "pairs", MAX_PAIRS)?;
        let vs = req("vs_program");
        let vs_program = vs
            .parse::<f64>()
            .ok()
            .filter(|r| *r > 0.0 && *r < 1e6)
            .ok_or_else(|| format!("vs_program `{vs}` is not a ratio"))?;
        let extra_us = microseconds(&fields, "extra_us")?;
        let comparisons = fields
            .iter()
            .filter(|(k, _)| k == "compared")
            .map(|(_, v)| Comparison::parse(v))
            .collect::<Result<Vec<_>, _>>()?;
        if comparisons.len() > MAX_COMPARISONS {
            return Err(format!(
                "{} compared lines (the runtime writes {MAX_COMPARISONS} at most)",
                comparisons.len()
            ));
        }
        // As the runtime believes it: a shape other than the program's only with the paired
        // comparison it won and a gain over the program's shape, or (a key that could not be
        // measured) as the model's first choice, which only the runtime can check.
        if let Block::Shape(b) = block {
            let won = comparisons.iter().any(|c| {
                c.verdict == Verdict::Win && c.challenger_block == b && c.pairs >= 1 && c.mean < 0.0
            });
            if confidence != Confidence::Unmeasurable
                && (confidence != Confidence::Paired || !won || vs_program >= 1.0)
            {
                return Err(format!(
                    "it claims block {} ({}) without the paired comparisons that show it faster \
                     than the program's",
                    shape_str(&b),
                    confidence.as_str()
                ));
            }
        }
        let known: Vec<&str> = REQUIRED.iter().copied().chain(["compared"]).collect();
        let other = fields
            .iter()
            .filter(|(k, _)| !known.contains(&k.as_str()))
            .cloned()
            .collect();
        Ok(ChoiceFile {
            version: FORMAT_VERSION,
            kernel: req("kernel").to_string(),
            name: req("name").to_string(),
            code_hash: req("code_hash").to_string(),
            device: req("device").to_string(),
            device_id: req("device_id").to_string(),
            data: req("data").to_string(),
            block,
            program_block,
            candidate: req("candidate").to_string(),
            confidence,
            launches,
            pairs,
            vs_program,
            extra_us,
            comparisons,
            other,
        })
    }

    /// The block as `list` prints it: `AxBxC`, or `program(AxBxC)`.
    pub fn block_label(&self) -> String {
        match self.block {
            Block::Shape(b) => shape_str(&b),
            Block::Program => format!("program({})", shape_str(&self.program_block)),
        }
    }

    /// How it was decided, in a few words, for `list`.
    fn decision_brief(&self) -> String {
        match (self.confidence, self.block) {
            (Confidence::Paired, Block::Shape(_)) => {
                format!("({:.2}x the program's time)", self.vs_program)
            }
            (Confidence::Paired, Block::Program) => "(no challenger was faster)".to_string(),
            (Confidence::Undecided, _) => "(no verdict: the program's own shape kept)".to_string(),
            (Confidence::Unmeasurable, _) => {
                "(not timed cleanly: the model's first choice kept)".to_string()
            }
        }
    }

    /// How it was decided, in a sentence, for `show`.
    fn decision_text(&self) -> String {
        let pairs = plural(self.pairs as usize, "pair", "pairs");
        match (self.confidence, self.block) {
            (Confidence::Paired, Block::Shape(_)) => format!(
                "by paired comparisons ({pairs}): {:.2}x the program's time ({:+.1} %)",
                self.vs_program,
                100.0 * (self.vs_program - 1.0)
            ),
            (Confidence::Paired, Block::Program) => format!(
                "by paired comparisons ({pairs}): no challenger was faster than the program's \
                 own shape"
            ),
            (Confidence::Undecided, _) => format!(
                "undecided ({pairs}): no comparison reached a verdict, so the program's own \
                 shape is kept; nothing showed it or another shape to be faster"
            ),
            (Confidence::Unmeasurable, _) => format!(
                "unmeasurable ({pairs}): the launches could not be timed cleanly, so the \
                 model's first choice is kept without a comparison confirming it (the noisy \
                 times put it at {:.2}x the program's)",
                self.vs_program
            ),
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
    /// One line per decided choice: kernel, data values, block, candidate, confidence,
    /// pairs, time against the program's shape, launches, device and file; then keys still
    /// being measured; files of an old format and invalid files after them (when no filter
    /// is given).
    List {
        /// Only choices of this kernel (its name in the source or mangled name, or a part
        /// of the name).
        #[arg(long)]
        kernel: Option<String>,
        /// Only choices of this device (a part of its name, any case).
        #[arg(long)]
        device: Option<String>,
        /// Print a JSON array: every field of each choice with its comparisons, {file,
        /// measuring, …} for keys still being measured, {file, version, old_format} and
        /// {file, invalid} for the others.
        #[arg(long)]
        json: bool,
    },
    /// Every field of one choice file (a path, or a file name in the directory) with the
    /// comparisons it was decided by, or of every choice of a kernel (as `list --kernel`);
    /// of a `.progress` file, what the key has measured so far.
    Show {
        #[arg(value_name = "FILE-or-KERNEL")]
        target: String,
    },
    /// Remove choices: those of --kernel/--device, the invalid files, files of the old
    /// format and abandoned temporary files (--invalid), or every file the runtime wrote
    /// (--all). Other files are never touched.
    Prune {
        /// Valid choices of this kernel (its name in the source or mangled name, or a part
        /// of the name), and its keys still being measured.
        #[arg(long)]
        kernel: Option<String>,
        /// Valid choices of this device (a part of its name, any case), and its keys still
        /// being measured.
        #[arg(long)]
        device: Option<String>,
        /// Invalid files, files of an old format (the runtime measures their keys again
        /// anyway), and temporary files older than an hour.
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
    /// A `*.progress` file: a launch key the runtime has not decided yet.
    Measuring(Box<Progress>),
    /// A `*.choice` or `*.progress` file of an older rule (its version, [`OLD_VERSIONS`]):
    /// the runtime does not use it, measures its key again and overwrites it.
    Old(u32),
    Invalid(String),
    /// A runtime's temporary file, stale when older than [`STALE_TMP_AGE`].
    Tmp {
        stale: bool,
    },
}

/// What a runtime measured of a launch key before its run ended undecided (a `*.progress`
/// file; the next run goes on from it). Besides the key's fields: `launches`,
/// `last_run_launches`, `spent_us`, `incumbent` and `walk`; one `cand` line per candidate and
/// one `compared` line per comparison decided; for the comparison in progress, `open =
/// <block> <grid> pairs=<n> nonstationary=<n> clear=<n> stalled=<n>` (`stalled`: runs that
/// timed no new part of the run, a count ≥ 0; the runtime refuses an open line without it, as
/// this does) and its `n` pairs, one `pair = at=<launch> run=<launches> r=<x> im=<µs> d2=<x>`
/// line each (where in its run the quadruple was timed, of a run how long, its relative paired
/// difference, the incumbent's mean time, the squared difference of the incumbent's two
/// times). Other keys are read past, as the runtime reads past them (version 3's
/// `phase_drift` among them).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Progress {
    pub kernel: String,
    pub name: String,
    pub device: String,
    pub data: String,
    /// The key's launches so far, every run's.
    pub launches: u64,
    /// Candidate shapes with timed launches.
    pub timed: usize,
    /// The comparisons' incumbent so far (the program's own shape until a challenger wins).
    #[serde(serialize_with = "shape_json")]
    pub incumbent: [u32; 3],
    /// What the timed launches cost so far, in µs.
    pub spent_us: f64,
    /// The comparisons decided so far (the open one is not among them).
    pub comparisons: Vec<Comparison>,
}

impl Progress {
    /// Parses a progress file's text; the error says why it is invalid.
    pub fn parse(text: &str) -> Result<Progress, String> {
        let fields = fields(text, &["cand", "compared", "pair"])?;
        check_common(&fields, &PROGRESS_REQUIRED)?;
        let req = |key: &str| get(&fields, key).expect("required keys are present");
        let launches = count(&fields, "launches", i32::MAX as u64 / 2)?;
        count(&fields, "last_run_launches", launches)?;
        let spent_us = microseconds(&fields, "spent_us")?;
        let block_pair = |s: &str| -> Option<[u32; 3]> {
            let t: Vec<&str> = s.split_whitespace().collect();
            let [block, grid] = t[..] else { return None };
            parse_shape(grid)?;
            parse_shape(block)
        };
        let inc = req("incumbent");
        let incumbent =
            block_pair(inc).ok_or_else(|| format!("incumbent `{inc}` is not `AxBxC AxBxC`"))?;
        let walk = req("walk");
        let w: Vec<&str> = walk.split_whitespace().collect();
        if w.len() != 5 || w.iter().any(|n| n.parse::<i32>().is_err()) {
            return Err(format!("walk `{walk}` is not five numbers"));
        }
        let mut timed = 0;
        for (_, c) in fields.iter().filter(|(k, _)| k == "cand") {
            timed +=
                usize::from(parse_cand(c).ok_or_else(|| format!("cand `{c}` cannot be read"))? > 0);
        }
        let comparisons = fields
            .iter()
            .filter(|(k, _)| k == "compared")
            .map(|(_, v)| Comparison::parse(v))
            .collect::<Result<Vec<_>, _>>()?;
        // The open comparison's pairs: as many as its `open` line says, none without one.
        let pairs: Vec<&str> = fields
            .iter()
            .filter(|(k, _)| k == "pair")
            .map(|(_, v)| v.as_str())
            .collect();
        if pairs.len() > MAX_OPEN_PAIRS {
            return Err(format!(
                "{} pair lines (the runtime keeps {MAX_OPEN_PAIRS} at most)",
                pairs.len()
            ));
        }
        for pair in &pairs {
            check_pair(pair)?;
        }
        match get(&fields, "open") {
            Some(open) => {
                let t: Vec<&str> = open.split_whitespace().collect();
                let mut stalled = None;
                let n = match t[..] {
                    [block, grid, pairs, nonstationary, clear, last]
                        if block_pair(&format!("{block} {grid}")).is_some()
                            && named_value::<i32>(nonstationary, "nonstationary").is_some()
                            && named_value::<i32>(clear, "clear").is_some() =>
                    {
                        stalled = named_value::<i32>(last, "stalled");
                        stalled.and(named_value::<usize>(pairs, "pairs"))
                    }
                    _ => None,
                };
                let Some(n) = n else {
                    let why = if t.len() == 5 && !open.contains("stalled=") {
                        " (no stalled=<n>: written before the runtime counted the runs that \
                         timed no new part of the run)"
                    } else {
                        ""
                    };
                    return Err(format!(
                        "open `{open}` cannot be read: not `<block> <grid> pairs=<n> \
                         nonstationary=<n> clear=<n> stalled=<n>`{why}"
                    ));
                };
                if let Some(s) = stalled.filter(|s| *s < 0) {
                    return Err(format!(
                        "open `{open}` has stalled={s}: a count of runs cannot be negative"
                    ));
                }
                if n != pairs.len() {
                    return Err(format!(
                        "open `{open}` has pairs={n} but the file has {}",
                        plural(pairs.len(), "pair line", "pair lines")
                    ));
                }
            }
            None if !pairs.is_empty() => {
                return Err(format!(
                    "{} without an open comparison",
                    plural(pairs.len(), "pair line", "pair lines")
                ))
            }
            None => {}
        }
        Ok(Progress {
            kernel: req("kernel").to_string(),
            name: req("name").to_string(),
            device: req("device").to_string(),
            data: req("data").to_string(),
            launches,
            timed,
            incumbent,
            spent_us,
            comparisons,
        })
    }

    fn matches(&self, kernel: Option<&str>, device: Option<&str>) -> bool {
        kernel.is_none_or(|k| self.name == k || self.kernel == k || self.name.contains(k))
            && device.is_none_or(|d| self.device.to_lowercase().contains(&d.to_lowercase()))
    }
}

/// The value of a `name=<value>` token.
fn named_value<T: std::str::FromStr>(token: &str, name: &str) -> Option<T> {
    token.strip_prefix(name)?.strip_prefix('=')?.parse().ok()
}

/// A progress file's `pair` line, as the runtime reads it: `at=<launch> run=<launches>
/// r=<x> im=<µs> d2=<x>`, a quadruple begun at launch `at` (≥ 0) of its run, of a run of
/// `run` launches (≥ 1), its relative paired difference `r` (> −1), the incumbent's mean
/// time `im` (> 0) and the squared difference of the incumbent's two times `d2` (≥ 0).
fn check_pair(s: &str) -> Result<(), String> {
    let bad = |why: String| format!("pair `{s}` cannot be read: {why}");
    let t: Vec<&str> = s.split_whitespace().collect();
    let [at, run, r, im, d2] = t[..] else {
        return Err(bad(
            "not `at=<launch> run=<launches> r=<x> im=<µs> d2=<x>`".to_string()
        ));
    };
    fn named<'a>(tok: &'a str, name: &str) -> Option<&'a str> {
        tok.strip_prefix(name)?.strip_prefix('=')
    }
    let value =
        |tok, name| named(tok, name).ok_or_else(|| bad(format!("`{tok}` is not `{name}=…`")));
    let (at, run, r, im, d2) = (
        value(at, "at")?,
        value(run, "run")?,
        value(r, "r")?,
        value(im, "im")?,
        value(d2, "d2")?,
    );
    if !at.parse::<i32>().is_ok_and(|a| a >= 0) {
        return Err(bad(format!(
            "at `{at}` is not a launch of the run (0 or more)"
        )));
    }
    if !run.parse::<i32>().is_ok_and(|n| n >= 1) {
        return Err(bad(format!(
            "run `{run}` is not a run's launches (1 or more)"
        )));
    }
    let real = |v: &str, ok: fn(f64) -> bool| v.parse::<f64>().is_ok_and(ok);
    if !real(r, |r| r > -1.0 && r < 1e6) {
        return Err(bad(format!("r `{r}` is not a relative difference")));
    }
    if !real(im, |m| m > 0.0 && m < 1e12) {
        return Err(bad(format!("im `{im}` is not a time in µs")));
    }
    if !real(d2, |d| (0.0..1e24).contains(&d)) {
        return Err(bad(format!("d2 `{d2}` is not a squared difference")));
    }
    Ok(())
}

/// `name=<number>` tokens, one per name, in order.
fn named_numbers(tokens: &[&str], names: &[&str]) -> bool {
    tokens.len() == names.len()
        && tokens.iter().zip(names).all(|(t, n)| {
            t.strip_prefix(n)
                .and_then(|v| v.strip_prefix('='))
                .and_then(|v| v.parse::<f64>().ok())
                .is_some_and(f64::is_finite)
        })
}

/// A progress file's `cand` line, as the runtime writes it: `<label> <block> <grid>
/// program=<0|1> walked=<0|1> verdict=<word or -> sum_us=<µs> n_us=<n>`; its timed launches.
fn parse_cand(s: &str) -> Option<u64> {
    let t: Vec<&str> = s.split_whitespace().collect();
    let [label, block, grid, program, walked, verdict, sum_us, n_us] = t[..] else {
        return None;
    };
    (label.len() <= MAX_LABEL && parse_shape(block).is_some() && parse_shape(grid).is_some())
        .then_some(())?;
    named_numbers(&[program, walked, sum_us], &["program", "walked", "sum_us"]).then_some(())?;
    let verdict = verdict.strip_prefix("verdict=")?;
    (verdict == "-" || Verdict::ALL.iter().any(|v| v.as_str() == verdict)).then_some(())?;
    n_us.strip_prefix("n_us=")?
        .parse::<u64>()
        .ok()
        .filter(|&n| n <= MAX_PAIRS)
}

/// Reads one file of the cache as `parse` reads its text: a file of an older rule is
/// [`Kind::Old`], whatever else it holds.
fn read_kind<T>(path: &Path, parse: fn(&str) -> Result<T, String>, wrap: fn(T) -> Kind) -> Kind {
    let text = match std::fs::read(path) {
        Err(e) => return Kind::Invalid(format!("cannot read it: {e}")),
        Ok(bytes) => match String::from_utf8(bytes) {
            Err(_) => return Kind::Invalid("not valid UTF-8".to_string()),
            Ok(t) => t,
        },
    };
    if let Some(version) = old_version(&text) {
        return Kind::Old(version);
    }
    match parse(&text) {
        Ok(v) => wrap(v),
        Err(why) => Kind::Invalid(why),
    }
}

/// Every `*.choice`, `*.progress` and `.*.tmp` file in `dir` (none when it does not exist):
/// valid choices sorted by name, data, device and file, then keys still being measured,
/// files of an old format, invalid files and temporary files by file name.
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
            read_kind(&path, ChoiceFile::parse, |c| Kind::Valid(Box::new(c)))
        } else if file.ends_with(".progress") {
            read_kind(&path, Progress::parse, |p| Kind::Measuring(Box::new(p)))
        } else {
            continue;
        };
        found.push(Found { path, file, kind });
    }
    let rank = |f: &Found| match f.kind {
        Kind::Valid(_) => 0,
        Kind::Measuring(_) => 1,
        Kind::Old(_) => 2,
        Kind::Invalid(_) => 3,
        Kind::Tmp { .. } => 4,
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

/// A choice in `list --json`.
#[derive(Serialize)]
struct JsonChoice<'a> {
    file: &'a str,
    version: u32,
    kernel: &'a str,
    name: &'a str,
    code_hash: &'a str,
    device: &'a str,
    device_id: &'a str,
    data: &'a str,
    block: String,
    program_block: String,
    candidate: &'a str,
    confidence: Confidence,
    launches: u64,
    pairs: u64,
    vs_program: f64,
    extra_us: f64,
    comparisons: &'a [Comparison],
    other: serde_json::Map<String, serde_json::Value>,
}

#[derive(Serialize)]
#[serde(untagged)]
enum JsonItem<'a> {
    Valid(Box<JsonChoice<'a>>),
    Measuring {
        file: &'a str,
        measuring: bool,
        #[serde(flatten)]
        progress: &'a Progress,
    },
    Old {
        file: &'a str,
        version: u32,
        old_format: &'a str,
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
    let (mut valid, mut invalid, mut measuring, mut old) = (0, 0, 0, 0);
    for f in &found {
        match &f.kind {
            Kind::Valid(c) if wanted(c) => {
                valid += 1;
                if json {
                    items.push(JsonItem::Valid(Box::new(JsonChoice {
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
                        program_block: shape_str(&c.program_block),
                        candidate: &c.candidate,
                        confidence: c.confidence,
                        launches: c.launches,
                        pairs: c.pairs,
                        vs_program: c.vs_program,
                        extra_us: c.extra_us,
                        comparisons: &c.comparisons,
                        other: c
                            .other
                            .iter()
                            .map(|(k, v)| (k.clone(), v.clone().into()))
                            .collect(),
                    })));
                } else {
                    let _ = writeln!(
                        out,
                        "{} {} block={} candidate={} confidence={} pairs={} {} launches={} \
                         device={} {}",
                        c.name,
                        c.data,
                        c.block_label(),
                        c.candidate,
                        c.confidence.as_str(),
                        c.pairs,
                        c.decision_brief(),
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
                        "{} {} measuring: not decided after launches={} ({} decided, {} \
                         timed, incumbent {}) device={} {}",
                        p.name,
                        p.data,
                        p.launches,
                        plural(p.comparisons.len(), "comparison", "comparisons"),
                        plural(p.timed, "shape", "shapes"),
                        shape_str(&p.incumbent),
                        p.device,
                        f.file
                    );
                }
            }
            Kind::Old(version) if !filtered => {
                old += 1;
                if json {
                    items.push(JsonItem::Old {
                        file: &f.file,
                        version: *version,
                        old_format: "measured again by the next run",
                    });
                } else {
                    let _ = writeln!(
                        out,
                        "{}: old format (version {version}, measured again by the next run)",
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
        if old > 0 {
            let _ = write!(out, ", {old} of an old format");
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
    if target.ends_with(".choice")
        || target.ends_with(".progress")
        || target.contains(std::path::MAIN_SEPARATOR)
    {
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
    let kind = if path.extension().is_some_and(|e| e == "progress") {
        read_kind(path, Progress::parse, |p| Kind::Measuring(Box::new(p)))
    } else {
        read_kind(path, ChoiceFile::parse, |c| Kind::Valid(Box::new(c)))
    };
    match kind {
        Kind::Valid(c) => {
            render(&c, path, out);
            Ok(ExitCode::SUCCESS)
        }
        Kind::Old(version) => {
            let _ = writeln!(
                out,
                "{}: old format (version {version}, of an older rule: {}): the program's \
                 runtime does not use it; its next run measures the launch again and replaces \
                 the file",
                path.display(),
                old_rule(version).unwrap_or("unknown")
            );
            Ok(ExitCode::SUCCESS)
        }
        Kind::Invalid(why) => bail!("{}: invalid: {why}", path.display()),
        Kind::Measuring(p) => {
            render_progress(&p, path, out);
            Ok(ExitCode::SUCCESS)
        }
        Kind::Tmp { .. } => unreachable!("read as a choice or progress file"),
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
            format!("{c} (a neighbour of the incumbent, proposed by the runtime's walk)")
        }
        _ => c.to_string(),
    }
}

fn render_comparisons(comparisons: &[Comparison], out: &mut String) {
    if comparisons.is_empty() {
        let _ = writeln!(out, "compared    nothing");
    }
    for (i, cmp) in comparisons.iter().enumerate() {
        let _ = writeln!(
            out,
            "{}{}",
            if i == 0 {
                "compared    "
            } else {
                "            "
            },
            cmp.describe()
        );
    }
}

/// A key not decided yet (`show <file>.progress`).
fn render_progress(p: &Progress, path: &Path, out: &mut String) {
    let _ = writeln!(out, "file        {}", path.display());
    let _ = writeln!(out, "kernel      {} ({})", p.name, p.kernel);
    let _ = writeln!(out, "device      {}", p.device);
    let _ = writeln!(out, "data        {}", p.data);
    let _ = writeln!(
        out,
        "decision    not yet, after launches={} ({} timed): the next run goes on comparing",
        p.launches,
        plural(p.timed, "shape", "shapes")
    );
    let _ = writeln!(out, "incumbent   {}", shape_str(&p.incumbent));
    let _ = writeln!(
        out,
        "extra time  {:.1} µs (what the timed launches cost)",
        p.spent_us
    );
    render_comparisons(&p.comparisons, out);
}

fn render(c: &ChoiceFile, path: &Path, out: &mut String) {
    let _ = writeln!(out, "file        {}", path.display());
    let _ = writeln!(out, "kernel      {} ({})", c.name, c.kernel);
    let _ = writeln!(out, "code hash   {}", c.code_hash);
    let _ = writeln!(out, "device      {}", c.device);
    let _ = writeln!(out, "device id   {}", c.device_id);
    let _ = writeln!(out, "data        {}", c.data);
    let block = match c.block {
        Block::Shape(b) => format!(
            "{} (the program's own: {})",
            shape_str(&b),
            shape_str(&c.program_block)
        ),
        Block::Program => format!("{} (the program's own)", shape_str(&c.program_block)),
    };
    let _ = writeln!(out, "block       {block}");
    let _ = writeln!(out, "candidate   {}", candidate_text(&c.candidate));
    let _ = writeln!(out, "decision    {}", c.decision_text());
    let _ = writeln!(out, "launches    {}", c.launches);
    let _ = writeln!(
        out,
        "extra time  {:.1} µs (what the timed launches cost)",
        c.extra_us
    );
    render_comparisons(&c.comparisons, out);
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
             --invalid (invalid files, files of an old format and stale temporary files) or \
             --all (everything the runtime wrote in {})",
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
            Kind::Old(v) if invalid => Some(format!(
                "old format, version {v}: measured again by the next run"
            )),
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

    // Files the runtime wrote (tests/fixtures/choices-cache-2026-11-28/README.txt says which
    // case of runtime-shim/tests/test_refine.c wrote each).
    const PAIRED: &str =
        include_str!("../../tests/fixtures/choices-cache-2026-11-28/paired-stencil-n4096.choice");
    const PROGRAM_KEPT: &str =
        include_str!("../../tests/fixtures/choices-cache-2026-11-28/paired-program-kept.choice");
    const UNDECIDED: &str =
        include_str!("../../tests/fixtures/choices-cache-2026-11-28/undecided.choice");
    const UNMEASURABLE: &str =
        include_str!("../../tests/fixtures/choices-cache-2026-11-28/unmeasurable.choice");
    const OLD: &str = include_str!("../../tests/fixtures/choices-cache-2026-11-28/version1.choice");
    const PROGRESS: &str =
        include_str!("../../tests/fixtures/choices-cache-2026-11-28/measuring.progress");
    /// A key still being measured with three pairs of its open comparison.
    const PROGRESS_PAIRS: &str =
        include_str!("../../tests/fixtures/choices-cache-2026-11-28/measuring-pairs.progress");
    const OLD_PROGRESS: &str =
        include_str!("../../tests/fixtures/choices-cache-2026-11-28/version1.progress");
    /// Files of version 2 (paired comparisons that could decide on a run's start alone).
    const V2: &str =
        include_str!("../../tests/fixtures/choices-cache-2026-11-28/version2-paired.choice");
    const V2_PROGRESS: &str =
        include_str!("../../tests/fixtures/choices-cache-2026-11-28/version2-measuring.progress");
    /// Files of version 3 (paired comparisons over the run, but a steady key's later ones
    /// could decide on a run's start alone).
    const V3: &str =
        include_str!("../../tests/fixtures/choices-cache-2026-11-28/version3-paired.choice");
    const V3_PROGRESS: &str = include_str!(
        "../../tests/fixtures/choices-cache-2026-11-28/version3-measuring-pairs.progress"
    );

    fn without(text: &str, key: &str) -> String {
        text.lines()
            .filter(|l| !l.starts_with(&format!("{key} =")))
            .map(|l| format!("{l}\n"))
            .collect()
    }

    fn cmp(ch: &str, cb: u32, inc: &str, ib: u32, pairs: u64, mean: f64, v: Verdict) -> Comparison {
        Comparison {
            challenger: ch.into(),
            challenger_block: [cb, 1, 1],
            incumbent: inc.into(),
            incumbent_block: [ib, 1, 1],
            pairs,
            mean,
            sd: 0.0,
            verdict: v,
        }
    }

    #[test]
    fn parses_a_file_decided_by_paired_comparisons() {
        let c = ChoiceFile::parse(PAIRED).unwrap();
        assert_eq!(
            c,
            ChoiceFile {
                version: 4,
                kernel: "_Z7stencilPfi".into(),
                name: "stencil".into(),
                code_hash: "00c0ffee00c0ffee".into(),
                device: "NVIDIA H200".into(),
                device_id: "NVIDIA H200|sm=132|cc=9.0|bus_bits=0".into(),
                data: "n=4096".into(),
                block: Block::Shape([128, 1, 1]),
                program_block: [64, 1, 1],
                candidate: "model#2".into(),
                confidence: Confidence::Paired,
                launches: 44,
                pairs: 10,
                vs_program: 0.3,
                extra_us: 540.0,
                comparisons: vec![
                    cmp("model#1", 256, "program", 64, 2, -0.6, Verdict::Win),
                    cmp("model#2", 128, "model#1", 256, 6, -0.25, Verdict::Win),
                    cmp("model#3", 512, "model#2", 128, 1, 0.66667, Verdict::Cliff),
                    cmp("program", 64, "model#2", 128, 1, 2.33333, Verdict::Cliff),
                ],
                other: vec![],
            }
        );
        assert_eq!(c.block_label(), "128x1x1");
        assert_eq!(c.decision_brief(), "(0.30x the program's time)");
        assert_eq!(
            c.decision_text(),
            "by paired comparisons (10 pairs): 0.30x the program's time (-70.0 %)"
        );
        assert_eq!(
            c.comparisons[1].describe(),
            "model#2 128x1x1 vs model#1 256x1x1: 6 pairs, -25.00 % time (sd 0.00 %): win \
             (faster, it became the incumbent)"
        );
    }

    #[test]
    fn the_program_kept_undecided_and_unmeasurable_say_so() {
        let kept = ChoiceFile::parse(PROGRAM_KEPT).unwrap();
        assert_eq!(kept.block, Block::Program);
        assert_eq!(kept.confidence, Confidence::Paired);
        assert_eq!(kept.block_label(), "program(64x1x1)");
        assert_eq!(
            kept.decision_text(),
            "by paired comparisons (3 pairs): no challenger was faster than the program's own \
             shape"
        );
        assert_eq!(kept.comparisons[0].verdict, Verdict::Lose);

        let u = ChoiceFile::parse(UNDECIDED).unwrap();
        assert_eq!(u.block, Block::Program);
        assert_eq!(u.confidence, Confidence::Undecided);
        assert_eq!(u.pairs, 24);
        assert_eq!(u.comparisons[0].verdict, Verdict::Undecided);
        assert_eq!(
            u.decision_brief(),
            "(no verdict: the program's own shape kept)"
        );
        let text = u.decision_text();
        assert!(
            text.starts_with(
                "undecided (24 pairs): no comparison reached a verdict, so the program's own \
                 shape is kept"
            ),
            "{text}"
        );
        assert!(!text.contains("settled"), "{text}");

        let m = ChoiceFile::parse(UNMEASURABLE).unwrap();
        assert_eq!(m.block, Block::Shape([256, 1, 1]));
        assert_eq!(m.confidence, Confidence::Unmeasurable);
        assert_eq!(m.candidate, "model#1");
        assert_eq!(m.vs_program, 1.3946);
        assert_eq!(m.comparisons[0].verdict, Verdict::Unmeasurable);
        assert!(m.decision_text().starts_with(
            "unmeasurable (3 pairs): the launches could not be timed cleanly, so the model's \
             first choice is kept"
        ));
    }

    #[test]
    fn files_of_the_old_rules_are_told_apart() {
        assert_eq!(old_version(OLD), Some(1));
        assert_eq!(old_version(OLD_PROGRESS), Some(1));
        assert_eq!(old_version(V2), Some(2));
        assert_eq!(old_version(V2_PROGRESS), Some(2));
        assert_eq!(old_version(V3), Some(3));
        assert_eq!(old_version(V3_PROGRESS), Some(3));
        for text in [PAIRED, PROGRESS, PROGRESS_PAIRS] {
            assert!(!is_old_format(text));
        }
        let old = "old format (version 1, decided by unpaired medians): measured again by the \
                   next run";
        assert_eq!(ChoiceFile::parse(OLD).unwrap_err(), old);
        assert_eq!(Progress::parse(OLD_PROGRESS).unwrap_err(), old);
        // Version 2: valid then, an older rule now, whatever it holds.
        let old = "old format (version 2, decided by paired comparisons that could decide on a \
                   run's start alone): measured again by the next run";
        assert_eq!(ChoiceFile::parse(V2).unwrap_err(), old);
        assert_eq!(Progress::parse(V2_PROGRESS).unwrap_err(), old);
        let v2 = PAIRED.replace("version = 4", "version = 2");
        assert_eq!(ChoiceFile::parse(&v2).unwrap_err(), old);
        assert_eq!(
            old_rule(2),
            Some("paired comparisons that could decide on a run's start alone")
        );
        // Version 3: valid then, an older rule now (its progress files with phase_drift).
        let old = "old format (version 3, decided by paired comparisons over the run, but a \
                   steady key's later ones could decide on a run's start alone): measured \
                   again by the next run";
        assert_eq!(ChoiceFile::parse(V3).unwrap_err(), old);
        assert_eq!(Progress::parse(V3_PROGRESS).unwrap_err(), old);
        assert!(V3_PROGRESS.contains("\nphase_drift = -1\n"));
        let v3 = PAIRED.replace("version = 4", "version = 3");
        assert_eq!(ChoiceFile::parse(&v3).unwrap_err(), old);
        let v3 = PROGRESS_PAIRS.replace("version = 4", "version = 3");
        assert_eq!(Progress::parse(&v3).unwrap_err(), old);
        assert_eq!(
            old_rule(3),
            Some(
                "paired comparisons over the run, but a steady key's later ones could decide \
                 on a run's start alone"
            )
        );
        assert_eq!(old_rule(4), None);
        // As the runtime compares it: the text exactly.
        assert!(!is_old_format(
            &PAIRED.replace("version = 4", "version = 02")
        ));
        assert!(!is_old_format(
            &PAIRED.replace("version = 4", "version = 03")
        ));
    }

    #[test]
    fn each_required_key_missing_is_invalid() {
        for key in REQUIRED {
            let err = ChoiceFile::parse(&without(PAIRED, key)).unwrap_err();
            assert_eq!(err, format!("missing key {key}"), "{key}");
        }
        let err = ChoiceFile::parse("version = 4\nkernel = k\n").unwrap_err();
        assert_eq!(
            err,
            "missing keys name, code_hash, device, device_id, data, block, program_block, \
             candidate, confidence, launches, pairs, vs_program, extra_us"
        );
        for key in PROGRESS_REQUIRED {
            let err = Progress::parse(&without(PROGRESS, key)).unwrap_err();
            assert_eq!(err, format!("missing key {key}"), "{key}");
        }
    }

    #[test]
    fn another_version_is_invalid() {
        let err = ChoiceFile::parse(&PAIRED.replace("version = 4", "version = 5")).unwrap_err();
        assert_eq!(err, "format version 5 (this klaraptor reads version 4)");
        let err = ChoiceFile::parse(&PAIRED.replace("version = 4", "version = two")).unwrap_err();
        assert_eq!(err, "version `two` is not a number");
        // Said before any missing key: another version may have other keys.
        let err = ChoiceFile::parse("version = 5\nkernel = k\n").unwrap_err();
        assert_eq!(err, "format version 5 (this klaraptor reads version 4)");
        let err = Progress::parse(&PROGRESS.replace("version = 4", "version = 5")).unwrap_err();
        assert_eq!(err, "format version 5 (this klaraptor reads version 4)");
        // Not an older rule's version either, as the runtime reads it: another version.
        let err = ChoiceFile::parse(&PAIRED.replace("version = 4", "version = 02")).unwrap_err();
        assert_eq!(err, "format version 2 (this klaraptor reads version 4)");
        let err = ChoiceFile::parse(&PAIRED.replace("version = 4", "version = 03")).unwrap_err();
        assert_eq!(err, "format version 3 (this klaraptor reads version 4)");
    }

    #[test]
    fn bad_values_and_lines_are_invalid() {
        let bad = |from: &str, to: &str| {
            assert!(PAIRED.contains(from), "{from}");
            ChoiceFile::parse(&PAIRED.replacen(from, to, 1)).unwrap_err()
        };
        assert_eq!(
            bad("block = 128x1x1", "block = 128x1"),
            "block `128x1` is neither `AxBxC` nor `program`"
        );
        assert_eq!(
            bad("block = 128x1x1", "block = 0x1x1"),
            "block `0x1x1` is neither `AxBxC` nor `program`"
        );
        assert_eq!(
            bad("program_block = 64x1x1", "program_block = program"),
            "program_block `program` is not `AxBxC`"
        );
        assert_eq!(
            bad("confidence = paired", "confidence = settled"),
            "confidence `settled` is none of paired, undecided, unmeasurable"
        );
        assert_eq!(
            bad("launches = 44", "launches = -1"),
            "launches `-1` is not a count"
        );
        assert_eq!(
            bad("pairs = 10", "pairs = 1000001"),
            "pairs `1000001` is not a count"
        );
        for ratio in ["0", "-0.3", "nan", "1e6", "x"] {
            assert_eq!(
                bad("vs_program = 0.3000", &format!("vs_program = {ratio}")),
                format!("vs_program `{ratio}` is not a ratio")
            );
        }
        assert_eq!(
            bad("extra_us = 540.0", "extra_us = -1"),
            "extra_us `-1` is not a time in µs"
        );
        assert_eq!(
            bad("launches = 44", "launches = 44\nlaunches = 45"),
            "line 14: `launches` given twice"
        );
        assert_eq!(
            bad("launches = 44", "launches 44"),
            "line 13: not `key = value`"
        );
    }

    #[test]
    fn bad_compared_lines_are_invalid() {
        let line = "model#2 128x1x1 vs model#1 256x1x1 pairs=6 mean=-0.25000 sd=0.00000 \
                    verdict=win";
        assert!(PAIRED.contains(line));
        let bad = |to: &str| {
            ChoiceFile::parse(&PAIRED.replace(line, to))
                .map(|_| ())
                .unwrap_err()
        };
        for (to, why) in [
            (
                "model#2 128x1x1 model#1 256x1x1 pairs=3 mean=-0.25 sd=0 verdict=win",
                "not `<label> <AxBxC> vs <label> <AxBxC> pairs=<n> mean=<x> sd=<x> \
                 verdict=<word>`",
            ),
            (
                "model#2 128x1x1 vs model#1 256x1x1 pairs=3 mean=-0.25 sd=0 verdict=win x",
                "not `<label> <AxBxC> vs <label> <AxBxC> pairs=<n> mean=<x> sd=<x> \
                 verdict=<word>`",
            ),
            (
                "model#2 128x1x1 against model#1 256x1x1 pairs=3 mean=-0.25 sd=0 verdict=win",
                "no `vs` between the challenger and the incumbent",
            ),
            (
                "model#2 128x1 vs model#1 256x1x1 pairs=3 mean=-0.25 sd=0 verdict=win",
                "`128x1` is not `AxBxC`",
            ),
            (
                "model#2 128x1x1 vs model#1 256x1x1 n=3 mean=-0.25 sd=0 verdict=win",
                "`n=3` is not `pairs=…`",
            ),
            (
                "model#2 128x1x1 vs model#1 256x1x1 pairs=-3 mean=-0.25 sd=0 verdict=win",
                "pairs `-3` is not a count",
            ),
            (
                "model#2 128x1x1 vs model#1 256x1x1 pairs=3 mean=-1 sd=0 verdict=win",
                "mean `-1` is not a relative difference",
            ),
            (
                "model#2 128x1x1 vs model#1 256x1x1 pairs=3 mean=-0.25 sd=-0.1 verdict=win",
                "sd `-0.1` is not a deviation",
            ),
            (
                "model#2 128x1x1 vs model#1 256x1x1 pairs=3 mean=-0.25 sd=0 verdict=best",
                "`best` is no verdict",
            ),
            (
                "a_label_of_twenty_four_c 128x1x1 vs model#1 256x1x1 pairs=3 mean=-0.25 sd=0 \
                 verdict=win",
                "the label `a_label_of_twenty_four_c` is too long",
            ),
        ] {
            let err = bad(to);
            assert_eq!(err, format!("compared `{to}`: {why}"), "{to}");
        }
        // At most as many comparisons as the runtime keeps.
        let many = format!(
            "{PAIRED}{}",
            format!("compared = {line}\n").repeat(MAX_COMPARISONS - 3)
        );
        assert_eq!(
            ChoiceFile::parse(&many).unwrap_err(),
            "25 compared lines (the runtime writes 24 at most)"
        );
        let max = format!(
            "{PAIRED}{}",
            format!("compared = {line}\n").repeat(MAX_COMPARISONS - 4)
        );
        assert_eq!(ChoiceFile::parse(&max).unwrap().comparisons.len(), 24);
    }

    #[test]
    fn a_gain_claimed_without_its_evidence_is_invalid() {
        let claim = "it claims block 512x1x1 (paired) without the paired comparisons that show \
                     it faster than the program's";
        // The runtime's own test of this (test_refine.c, old_rule): the compared lines
        // cut and the block changed to one no comparison won.
        let cut = &PAIRED[..PAIRED.find("compared = ").unwrap()];
        let text = cut.replace("block = 128x1x1", "block = 512x1x1");
        assert_eq!(ChoiceFile::parse(&text).unwrap_err(), claim);
        // A shape that only lost (cliff).
        let text = PAIRED.replace("block = 128x1x1", "block = 512x1x1");
        assert_eq!(ChoiceFile::parse(&text).unwrap_err(), claim);
        // Its win without a gain, and no gain over the program's shape.
        let text = PAIRED.replace(
            "pairs=6 mean=-0.25000 sd=0.00000 verdict=win",
            "pairs=6 mean=0.01000 sd=0.00000 verdict=win",
        );
        assert!(ChoiceFile::parse(&text).is_err());
        let text = PAIRED.replace("vs_program = 0.3000", "vs_program = 1.0000");
        assert!(ChoiceFile::parse(&text).is_err());
        // A shape other than the program's kept undecided.
        let text = PAIRED.replace("confidence = paired", "confidence = undecided");
        assert_eq!(
            ChoiceFile::parse(&text).unwrap_err(),
            "it claims block 128x1x1 (undecided) without the paired comparisons that show it \
             faster than the program's"
        );
        // An unmeasurable key's shape is the model's first choice, without comparisons.
        let text = without(UNMEASURABLE, "compared");
        assert!(ChoiceFile::parse(&text).unwrap().comparisons.is_empty());
    }

    #[test]
    fn unknown_keys_are_kept() {
        let text = format!("{PAIRED}future = a = b\nrecorded_at = 2026-11-28\n");
        let c = ChoiceFile::parse(&text).unwrap();
        assert_eq!(
            c.other,
            vec![
                ("future".to_string(), "a = b".to_string()),
                ("recorded_at".to_string(), "2026-11-28".to_string())
            ]
        );
        assert_eq!(c.comparisons.len(), 4);
    }

    #[test]
    fn control_characters_are_refused_in_keys_and_values() {
        let err = ChoiceFile::parse(&format!("{PAIRED}\u{1b}[2J = x\n")).unwrap_err();
        assert_eq!(err, "line 21: a key holds the control character '\\u{1b}'");
        let err =
            ChoiceFile::parse(&PAIRED.replace("verdict=cliff", "verdict=\u{7}cliff")).unwrap_err();
        assert_eq!(err, "`compared` holds the control character '\\u{7}'");
        let err =
            Progress::parse(&PROGRESS.replace("name = stencil", "name = \u{1b}[2J")).unwrap_err();
        assert_eq!(err, "`name` holds the control character '\\u{1b}'");
    }

    #[test]
    fn progress_files() {
        let p = Progress::parse(PROGRESS).unwrap();
        assert_eq!(
            p,
            Progress {
                kernel: "_Z7stencilPfi".into(),
                name: "stencil".into(),
                device: "NVIDIA H200".into(),
                data: "n=4096".into(),
                launches: 150,
                timed: 2,
                incumbent: [256, 1, 1],
                spent_us: 240.0,
                comparisons: vec![cmp("model#1", 256, "program", 64, 2, -0.6, Verdict::Win)],
            }
        );
        // What the runtime's own test damages (test_refine.c, progress) it refuses too.
        let err = Progress::parse(&PROGRESS.replacen("sum_us=", "sum_us=x", 1)).unwrap_err();
        assert!(err.starts_with("cand `model#1 256x1x1 16x1x1 "), "{err}");
        let err =
            Progress::parse(&PROGRESS.replace("incumbent = 256x1x1 16x1x1", "incumbent = 256x1x1"))
                .unwrap_err();
        assert_eq!(err, "incumbent `256x1x1` is not `AxBxC AxBxC`");
        let err = Progress::parse(
            &PROGRESS.replace("last_run_launches = 150", "last_run_launches = 151"),
        )
        .unwrap_err();
        assert_eq!(err, "last_run_launches `151` is not a count");
        let err =
            Progress::parse(&PROGRESS.replace("walk = 0 0 0 1 0", "walk = 0 0 0 1")).unwrap_err();
        assert_eq!(err, "walk `0 0 0 1` is not five numbers");
        let err = Progress::parse(&PROGRESS.replace(" nonstationary=0", "")).unwrap_err();
        assert_eq!(
            err,
            "open `128x1x1 32x1x1 pairs=0 clear=0 stalled=0` cannot be read: not `<block> <grid> \
             pairs=<n> nonstationary=<n> clear=<n> stalled=<n>`"
        );
        // Version 2's open line, with the sums versions 3 and 4 no longer keep.
        let v2_open = "open = 128x1x1 32x1x1 pairs=0 sum_r=0.000000 sum_r2=0.000000 \
                       inc_lo=100.0000 inc_hi=100.0000 sum_m=0.0000 sum_m2=0.0000 \
                       sum_d2=0.0000 nonstationary=0 clear=0";
        let text = PROGRESS.replace(
            "open = 128x1x1 32x1x1 pairs=0 nonstationary=0 clear=0 stalled=0",
            v2_open,
        );
        assert!(Progress::parse(&text)
            .unwrap_err()
            .starts_with("open `128x1x1 32x1x1 pairs=0 sum_r="));
        // Version 4 has no phase_drift; a key it does not know is read past, as the runtime
        // reads past it, whatever its value (given once, as any key).
        assert!(!PROGRESS.contains("phase_drift"));
        for drift in ["-1", "0", "1", "2", "x"] {
            let text = PROGRESS.replace(
                "spent_us = ",
                &format!("phase_drift = {drift}\nspent_us = "),
            );
            assert_eq!(Progress::parse(&text).unwrap(), p, "{drift}");
        }
        let text = PROGRESS.replace(
            "spent_us = ",
            "phase_drift = 0\nphase_drift = 1\nspent_us = ",
        );
        assert_eq!(
            Progress::parse(&text).unwrap_err(),
            "line 12: `phase_drift` given twice"
        );
        // Without a comparison in progress.
        assert!(Progress::parse(&without(PROGRESS, "open")).is_ok());
    }

    #[test]
    fn progress_open_line_needs_a_non_negative_stalled_count() {
        // The runtime writes `stalled=N` (runs that timed no new part of the run) since
        // 87fe758 and refuses an open line without it, or with a negative count; so does this.
        let open = "open = 128x1x1 32x1x1 pairs=3 nonstationary=0 clear=0 stalled=0";
        assert!(PROGRESS_PAIRS.contains(open) && PROGRESS.contains(" stalled=0\n"));
        let with = |stalled: &str| {
            PROGRESS_PAIRS.replace(
                open,
                &format!("open = 128x1x1 32x1x1 pairs=3 nonstationary=0 clear=0{stalled}"),
            )
        };
        assert_eq!(
            Progress::parse(&with(" stalled=1")).unwrap(),
            Progress::parse(PROGRESS_PAIRS).unwrap()
        );
        // A version-4 file of the runtime before 87fe758: no stalled=.
        assert_eq!(
            Progress::parse(&with("")).unwrap_err(),
            "open `128x1x1 32x1x1 pairs=3 nonstationary=0 clear=0` cannot be read: not \
             `<block> <grid> pairs=<n> nonstationary=<n> clear=<n> stalled=<n>` (no \
             stalled=<n>: written before the runtime counted the runs that timed no new part of \
             the run)"
        );
        assert_eq!(
            Progress::parse(&with(" stalled=-1")).unwrap_err(),
            "open `128x1x1 32x1x1 pairs=3 nonstationary=0 clear=0 stalled=-1` has stalled=-1: a \
             count of runs cannot be negative"
        );
        for bad in [
            " stalled=x",
            " stalled=",
            " stalled=1.5",
            " stalled=1 more=0",
            " stall=1",
        ] {
            let err = Progress::parse(&with(bad)).unwrap_err();
            assert!(
                err.ends_with(
                    "cannot be read: not `<block> <grid> pairs=<n> nonstationary=<n> \
                               clear=<n> stalled=<n>`"
                ),
                "{bad}: {err}"
            );
        }
        // In its place, after clear=, as the runtime reads it.
        let err = Progress::parse(&PROGRESS_PAIRS.replace(
            open,
            "open = 128x1x1 32x1x1 pairs=3 stalled=0 nonstationary=0 clear=0",
        ))
        .unwrap_err();
        assert!(err.contains("cannot be read"), "{err}");
    }

    #[test]
    fn progress_files_with_the_open_comparisons_pairs() {
        let p = Progress::parse(PROGRESS_PAIRS).unwrap();
        assert_eq!(p.launches, 1050);
        assert_eq!(p.timed, 3);
        assert_eq!(p.incumbent, [256, 1, 1]);
        assert_eq!(p.spent_us, 300.0);
        assert_eq!(
            p.comparisons,
            vec![cmp("model#1", 256, "program", 64, 2, -0.6, Verdict::Win)]
        );
        let open = "open = 128x1x1 32x1x1 pairs=3 nonstationary=0 clear=0 stalled=0";
        let first = "pair = at=100 run=150 r=-0.250000 im=40.0000 d2=0.0000";
        assert!(PROGRESS_PAIRS.contains(open) && PROGRESS_PAIRS.contains(first));
        let pair_lines = PROGRESS_PAIRS
            .lines()
            .filter(|l| l.starts_with("pair = "))
            .count();
        assert_eq!(pair_lines, 3);

        // The count of pair lines is the open line's pairs=N.
        let err = Progress::parse(&PROGRESS_PAIRS.replace("pairs=3 ", "pairs=4 ")).unwrap_err();
        assert_eq!(
            err,
            "open `128x1x1 32x1x1 pairs=4 nonstationary=0 clear=0 stalled=0` has pairs=4 but the \
             file has 3 pair lines"
        );
        let err =
            Progress::parse(&PROGRESS_PAIRS.replacen(&format!("{first}\n"), "", 1)).unwrap_err();
        assert_eq!(
            err,
            "open `128x1x1 32x1x1 pairs=3 nonstationary=0 clear=0 stalled=0` has pairs=3 but the \
             file has 2 pair lines"
        );
        let err = Progress::parse(&without(PROGRESS_PAIRS, "open")).unwrap_err();
        assert_eq!(err, "3 pair lines without an open comparison");
        let err = Progress::parse(&format!("{PROGRESS}{first}\n")).unwrap_err();
        assert_eq!(
            err,
            "open `128x1x1 32x1x1 pairs=0 nonstationary=0 clear=0 stalled=0` has pairs=0 but the \
             file has 1 pair line"
        );
        // At most as many as the runtime keeps.
        let many = |n: usize| {
            PROGRESS_PAIRS
                .replace("pairs=3 ", &format!("pairs={n} "))
                .replace(&format!("{first}\n"), &format!("{first}\n").repeat(n - 2))
        };
        assert!(Progress::parse(&many(MAX_OPEN_PAIRS)).is_ok());
        assert_eq!(
            Progress::parse(&many(MAX_OPEN_PAIRS + 1)).unwrap_err(),
            "25 pair lines (the runtime keeps 24 at most)"
        );

        // Malformed pair lines, refused as the runtime refuses them.
        for (to, why) in [
            (
                "at=100 run=150 r=-0.25 im=40",
                "not `at=<launch> run=<launches> r=<x> im=<µs> d2=<x>`",
            ),
            (
                "at=100 run=150 r=-0.25 im=40 d2=0 x=1",
                "not `at=<launch> run=<launches> r=<x> im=<µs> d2=<x>`",
            ),
            ("at=100 n=150 r=-0.25 im=40 d2=0", "`n=150` is not `run=…`"),
            (
                "at=-1 run=150 r=-0.25 im=40 d2=0",
                "at `-1` is not a launch of the run (0 or more)",
            ),
            (
                "at=1.5 run=150 r=-0.25 im=40 d2=0",
                "at `1.5` is not a launch of the run (0 or more)",
            ),
            (
                "at=100 run=0 r=-0.25 im=40 d2=0",
                "run `0` is not a run's launches (1 or more)",
            ),
            (
                "at=100 run=-1 r=-0.25 im=40 d2=0",
                "run `-1` is not a run's launches (1 or more)",
            ),
            (
                "at=100 run=150 r=-1 im=40 d2=0",
                "r `-1` is not a relative difference",
            ),
            (
                "at=100 run=150 r=nan im=40 d2=0",
                "r `nan` is not a relative difference",
            ),
            (
                "at=100 run=150 r=-0.25 im=0 d2=0",
                "im `0` is not a time in µs",
            ),
            (
                "at=100 run=150 r=-0.25 im=40 d2=-1",
                "d2 `-1` is not a squared difference",
            ),
        ] {
            let text = PROGRESS_PAIRS.replacen(first, &format!("pair = {to}"), 1);
            assert_eq!(
                Progress::parse(&text).unwrap_err(),
                format!("pair `{to}` cannot be read: {why}"),
                "{to}"
            );
        }
    }

    #[test]
    fn matching() {
        let c = ChoiceFile::parse(PAIRED).unwrap();
        assert!(c.matches_kernel("stencil"));
        assert!(c.matches_kernel("sten"));
        assert!(c.matches_kernel("_Z7stencilPfi"));
        assert!(!c.matches_kernel("_Z7sten"));
        assert!(!c.matches_kernel("stencils"));
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
