//! Reading klaraptor's annotations out of a CUDA source, before any compiler sees it.
//!
//! Two pragma styles are understood:
//!
//! ```text
//! #pragma kernel_info_size_param_idx_mm = 3;      // the original KLARAPTOR pragmas
//! #pragma kernel_info_dim_mm = 2;
//!
//! #pragma klaraptor kernel(gemm) data(NI=3, NJ=4, NK=5) dim(2) \
//!         grid(ceil(NJ, bx), ceil(NI, by)) block(bx * by >= 32) \
//!         profile(run="./gemm {NI} {NJ} {NK}", sizes=[64, 128, 256])
//! ```
//!
//! Annotations are read from the text before preprocessing; pragmas inside comments do not
//! count. A pragma in a branch the preprocessor skips is dropped once libclang has said which
//! branches those are ([`FileScan::active`]). Pragmas that are not ours are left alone. The
//! lines holding our pragmas are blanked (not removed, so line numbers stay right) in the
//! copy the compiler sees: see [`strip`].
//!
//! A translation unit's annotations may also be written in the files it includes: each file
//! is read on its own ([`scan_file`]) and the files are then checked together
//! ([`scan_unit`]); which files belong to the unit is decided in [`crate::frontend`].

use std::ops::Range;
use std::path::{Path, PathBuf};

use crate::diag::{Diagnostic, Diagnostics, Location};
use crate::expr::{self, BoolExpr, ExprError, IntExpr};

/// How an annotation names a kernel argument that carries a data size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArgRef {
    /// 0-based position in the kernel's parameter list.
    Index(usize),
    /// The parameter's name in the kernel's definition.
    Name(String),
    /// No argument: the threads each launch runs along a block axis (0 = x, 1 = y, 2 = z),
    /// `gridDim * blockDim` on that axis, as the launch computed them. What a pragma without
    /// `data(…)` has ([`launch_data`]).
    Launch(u8),
}

/// A data parameter: a name used in formulas, bound to a kernel argument.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataParam {
    pub label: String,
    pub arg: ArgRef,
    pub loc: Location,
}

/// How to run the program at a given data size, and which small sizes to profile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProfileRecipe {
    /// A command line; `{LABEL}` is replaced by the data parameter's value, or
    /// [`ALL_SIZES`] by every profile size (the command then runs once for all of them).
    pub run: String,
    /// Each entry gives one value per data parameter, in the order of `data(…)`.
    pub sizes: Vec<Vec<i64>>,
}

/// The placeholder of a recipe that runs once for all of a kernel's profile sizes: it is
/// replaced by the sizes, each size's values (in the order of `data(…)`) joined by `,` and
/// the sizes separated by spaces (`./gemm --sizes {SIZES}` runs
/// `./gemm --sizes 64,64,64 128,128,128 …`).
pub const ALL_SIZES: &str = "{SIZES}";

/// Whether recipe `run` of a kernel whose data labels are `labels` runs once for all its
/// profile sizes ([`ALL_SIZES`]). A kernel with a data parameter called `SIZES` keeps
/// `{SIZES}` as that parameter's value, as before the placeholder existed.
pub fn runs_all_sizes<S: AsRef<str>>(run: &str, labels: &[S]) -> bool {
    run.contains(ALL_SIZES) && !labels.iter().any(|l| l.as_ref() == "SIZES")
}

/// What is wrong with the placeholders of recipe `run` for a kernel whose data labels are
/// `labels`, if anything: the message (it follows what names the recipe) and, where the
/// caller's general advice is not enough, how to fix it. A recipe names the data parameters
/// (`{N}`: one command per size) or [`ALL_SIZES`] (one command for all the sizes), never
/// both.
pub fn check_recipe_placeholders(
    run: &str,
    labels: &[&str],
) -> Result<(), (String, Option<String>)> {
    let braced = |ls: &[&str]| {
        ls.iter()
            .map(|l| format!("{{{l}}}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let used: Vec<&str> = labels
        .iter()
        .copied()
        .filter(|l| run.contains(&format!("{{{l}}}")))
        .collect();
    let all = runs_all_sizes(run, labels);
    if all && !used.is_empty() {
        let example = |v: i64| vec![v.to_string(); labels.len().max(1)].join(",");
        return Err((
            format!(
                "uses {ALL_SIZES}, which runs the command once for all the profile sizes, \
                 together with {}, which run{} it once per size: use one or the other",
                braced(&used),
                if used.len() == 1 { "s" } else { "" }
            ),
            Some(format!(
                "write run=\"./app --sizes {ALL_SIZES}\" to run the program once with every \
                 size ({ALL_SIZES} becomes e.g. `{} {}`: each size's values joined by commas in \
                 the order of data(…), the sizes separated by spaces), or run=\"./app {}\" to \
                 run it once per size",
                example(64),
                example(128),
                labels
                    .iter()
                    .map(|l| format!("{{{l}}}"))
                    .collect::<Vec<_>>()
                    .join(" ")
            )),
        ));
    }
    if !all && used.is_empty() {
        return Err((
            format!(
                "uses none of the data parameters ({}) nor {ALL_SIZES}: every size would run the \
                 same command",
                braced(labels)
            ),
            None,
        ));
    }
    Ok(())
}

/// Where an annotation came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// `#pragma kernel_info_size_param_idx_<k>` / `kernel_info_dim_<k>`.
    Classic,
    /// `#pragma klaraptor …`.
    Pragma,
    /// `klaraptor.toml` beside the source.
    Toml,
}

/// Everything the user said about one kernel, before it is checked against the source.
#[derive(Debug, Clone, PartialEq)]
pub struct KernelAnnotation {
    pub kernel: String,
    pub data: Vec<DataParam>,
    pub dim: u8,
    /// One formula per dimension (`dim` of them).
    pub grid: Vec<IntExpr>,
    /// All must hold for a block shape to be a candidate.
    pub constraints: Vec<BoolExpr>,
    /// `shmem(…)`: the bytes of dynamic shared memory a launch needs for a block shape (a
    /// formula of the data and the block); the runtime passes that amount with the shape it
    /// chooses. `None`: the launch's own amount (see the IO-builder pass's detection).
    pub shmem: Option<IntExpr>,
    pub profile: Option<ProfileRecipe>,
    pub loc: Location,
    pub style: Style,
}

/// What [`scan`] found in one source (or [`scan_unit`] in a translation unit).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Scanned {
    pub annotations: Vec<KernelAnnotation>,
    /// Byte ranges of the lines that hold our pragmas (continuations included), in the
    /// source itself (the main file of a translation unit): the lines [`strip`] blanks.
    pub pragma_lines: Vec<Range<usize>>,
}

const CLASSIC_SIZE: &str = "kernel_info_size_param_idx_";
const CLASSIC_DIM: &str = "kernel_info_dim_";

/// A cheap test: could this text hold annotations at all? (No false negatives.)
pub fn mentions_annotations(text: &str) -> bool {
    text.contains("klaraptor") || text.contains(CLASSIC_SIZE) || text.contains(CLASSIC_DIM)
}

/// Whether `line` is a klaraptor pragma on one line: `#pragma klaraptor …` or one of the
/// original KLARAPTOR pragmas (`#pragma kernel_info_…`), as a preprocessor leaves them (a
/// pragma continued with `\` is joined into one line there).
pub fn is_own_pragma_line(line: &str) -> bool {
    let Some(after) = line
        .trim_start()
        .strip_prefix('#')
        .map(str::trim_start)
        .and_then(|l| l.strip_prefix("pragma"))
    else {
        return false;
    };
    if !after.starts_with([' ', '\t']) {
        return false;
    }
    let word: String = after
        .trim_start()
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect();
    word == "klaraptor" || word.starts_with(CLASSIC_SIZE) || word.starts_with(CLASSIC_DIM)
}

/// `#pragma` lines of `text` (the contents of `file`) whose name is within two edits of
/// `klaraptor` but is not it (`#pragma klaraptr …`, `#pragma Klaraptor …`): each a diagnostic
/// for a warning, since the compiler ignores such a pragma and the kernel would silently keep
/// its own launch.
pub fn misspelled_pragmas(file: &Path, text: &str) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let t = line.trim_start();
        let Some(rest) = t.strip_prefix('#') else {
            continue;
        };
        let rest = rest.trim_start();
        let Some(after) = rest.strip_prefix("pragma") else {
            continue;
        };
        if !after.starts_with([' ', '\t']) {
            continue;
        }
        let word_at = line.len() - after.trim_start().len();
        let word: String = after
            .trim_start()
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if word.is_empty() || word == "klaraptor" || word.starts_with("kernel_info_") {
            continue;
        }
        if edit_distance(&word.to_ascii_lowercase(), "klaraptor") <= 2 {
            out.push(
                Diagnostic::new(
                    Location::new(file, i as u32 + 1, word_at as u32 + 1),
                    format!(
                        "'#pragma {word}' is not a klaraptor annotation: the compiler ignores it \
                         and the kernel keeps its own launch"
                    ),
                )
                .help("write '#pragma klaraptor'"),
            );
        }
    }
    out
}

/// The Levenshtein distance of two short ASCII words.
pub fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            cur[j + 1] = (prev[j] + usize::from(ca != cb))
                .min(prev[j + 1] + 1)
                .min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

/// Finds and parses every annotation in `text` (the contents of `file`).
pub fn scan(file: &Path, text: &str) -> Result<Scanned, Diagnostics> {
    scan_unit(&[(&scan_file(file, text), text)])
}

/// One file's pragmas, parsed but not yet checked against the other files of its
/// translation unit: see [`scan_unit`].
#[derive(Debug, Clone)]
pub struct FileScan {
    /// The file, as the annotations' locations name it.
    pub file: PathBuf,
    annotations: Vec<KernelAnnotation>,
    classic: Vec<Classic>,
    pragma_lines: Vec<Range<usize>>,
    errors: Vec<Diagnostic>,
}

impl FileScan {
    /// The kernels this file's pragmas name (those that could be read).
    pub fn kernels(&self) -> Vec<&str> {
        let mut out: Vec<&str> = self.annotations.iter().map(|a| a.kernel.as_str()).collect();
        for c in &self.classic {
            if !out.contains(&c.kernel.as_str()) {
                out.push(&c.kernel);
            }
        }
        out
    }

    /// Whether the file holds any of our pragmas (valid or not).
    pub fn has_pragmas(&self) -> bool {
        !self.pragma_lines.is_empty()
    }

    /// The scan without the pragmas on the lines `inactive` says the preprocessor skipped
    /// (an inactive `#if`/`#ifdef`/`#else` branch): their annotations and their errors are
    /// dropped, as the compiler drops the code beside them. Their lines are still blanked
    /// by [`strip`].
    pub fn active(&self, inactive: impl Fn(u32) -> bool) -> FileScan {
        FileScan {
            file: self.file.clone(),
            annotations: self
                .annotations
                .iter()
                .filter(|a| !inactive(a.loc.line))
                .cloned()
                .collect(),
            classic: self
                .classic
                .iter()
                .filter(|c| !inactive(c.loc.line))
                .cloned()
                .collect(),
            pragma_lines: self.pragma_lines.clone(),
            errors: self
                .errors
                .iter()
                .filter(|d| !inactive(d.loc.line))
                .cloned()
                .collect(),
        }
    }

    /// Whether the file holds errors in its pragmas.
    pub fn has_errors(&self) -> bool {
        !self.errors.is_empty()
    }
}

/// Parses the pragmas of one file (`text`, the contents of `file`) on its own.
pub fn scan_file(file: &Path, text: &str) -> FileScan {
    let mut out = FileScan {
        file: file.to_path_buf(),
        annotations: Vec::new(),
        classic: Vec::new(),
        pragma_lines: Vec::new(),
        errors: Vec::new(),
    };
    if !mentions_annotations(text) {
        return out;
    }
    for p in pragmas(text) {
        let body = p.text.trim_start();
        let lead = p.text.len() - body.len();
        let at = |off: usize| p.location(file, lead + off);
        let word_end = body
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(body.len());
        let word = &body[..word_end];
        let result = if word == "klaraptor" {
            parse_klaraptor(&body[word_end..], &|off| at(word_end + off), at(0))
                .map(|a| out.annotations.push(a))
        } else if let Some((kernel, is_size)) = word
            .strip_prefix(CLASSIC_SIZE)
            .map(|k| (k, true))
            .or_else(|| word.strip_prefix(CLASSIC_DIM).map(|k| (k, false)))
        {
            parse_classic(
                kernel,
                &body[word_end..],
                &|off| at(word_end + off),
                at(0),
                is_size,
            )
            .map(|c| out.classic.push(c))
        } else {
            continue;
        };
        out.pragma_lines.push(p.lines.clone());
        if let Err(d) = result {
            out.errors.push(d.with_source(text));
        }
    }
    out
}

/// The annotations of a translation unit made of several files, each scanned by
/// [`scan_file`] and given with its text: the main file first, then the files it includes.
/// Each file must be given once (the preprocessor reads a header included twice only once
/// for our purposes: a kernel is defined once). The original KLARAPTOR pragmas of one kernel
/// may be spread over several files, as the preprocessor joins them; a kernel annotated in
/// two places is an error. [`Scanned::pragma_lines`] are those of the first file.
pub fn scan_unit(files: &[(&FileScan, &str)]) -> Result<Scanned, Diagnostics> {
    let mut out = Scanned::default();
    let mut errors = Vec::new();
    let mut classic: Vec<Classic> = Vec::new();
    for (i, (f, _)) in files.iter().enumerate() {
        out.annotations.extend(f.annotations.iter().cloned());
        classic.extend(f.classic.iter().cloned());
        errors.extend(f.errors.iter().cloned());
        if i == 0 {
            out.pragma_lines = f.pragma_lines.clone();
        }
    }
    // Attaches the line a diagnostic points at, from whichever file it is in.
    let source_of = |d: Diagnostic| match files.iter().find(|(f, _)| f.file == d.loc.file) {
        Some((_, text)) => d.with_source(text),
        None => d,
    };
    match merge_classic(classic) {
        Ok(anns) => out.annotations.extend(anns),
        Err(d) => errors.extend(d.0.into_iter().map(source_of)),
    }
    for (i, a) in out.annotations.iter().enumerate() {
        if let Some(prev) = out.annotations[..i].iter().find(|b| b.kernel == a.kernel) {
            errors.push(source_of(
                Diagnostic::new(
                    a.loc.clone(),
                    format!("kernel '{}' is annotated twice", a.kernel),
                )
                .help(format!("the first annotation is at {}; keep one", prev.loc)),
            ));
        }
    }
    if errors.is_empty() {
        Ok(out)
    } else {
        errors.sort_by(|a, b| a.loc.cmp(&b.loc));
        Err(Diagnostics(errors))
    }
}

/// The text the compiler sees: our pragma lines replaced by empty lines.
pub fn strip(text: &str, pragma_lines: &[Range<usize>]) -> String {
    let mut out = String::with_capacity(text.len());
    let mut last = 0;
    for r in pragma_lines {
        out.push_str(&text[last..r.start]);
        out.extend(text[r.clone()].chars().filter(|&c| c == '\n'));
        last = r.end;
    }
    out.push_str(&text[last..]);
    out
}

// ---------------------------------------------------------------------------------------
// Finding pragmas

/// A `#pragma` directive with its continuation lines joined.
struct Pragma {
    /// The directive's text after `pragma`, continuations joined, comments removed.
    text: String,
    /// Byte range of the physical lines in the source.
    lines: Range<usize>,
    /// Where each joined piece starts: (offset in `text`, line, column).
    pieces: Vec<(usize, u32, u32)>,
}

impl Pragma {
    fn location(&self, file: &Path, off: usize) -> Location {
        let &(start, line, col) = self
            .pieces
            .iter()
            .rev()
            .find(|(s, _, _)| *s <= off)
            .unwrap_or(&self.pieces[0]);
        Location::new(file, line, col + (off - start) as u32)
    }
}

fn pragmas(text: &str) -> Vec<Pragma> {
    let mut out = Vec::new();
    let mut in_comment = false;
    let mut line_starts = Vec::new();
    let mut off = 0;
    for l in text.split_inclusive('\n') {
        line_starts.push(off);
        off += l.len();
    }
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let mut i = 0;
    while i < lines.len() {
        let raw = lines[i].trim_end_matches(['\n', '\r']);
        if in_comment {
            if raw.contains("*/") {
                in_comment = false;
            }
            i += 1;
            continue;
        }
        let t = raw.trim_start();
        let directive = t
            .strip_prefix('#')
            .map(str::trim_start)
            .and_then(|d| d.strip_prefix("pragma"));
        match directive {
            Some(rest) if rest.starts_with(char::is_whitespace) => {
                let first = i;
                let mut text_out = String::new();
                let mut pieces = Vec::new();
                let col0 = (raw.len() - rest.len()) as u32 + 1;
                let mut piece = rest;
                let mut col = col0;
                loop {
                    let cont = piece.ends_with('\\');
                    let body = if cont {
                        &piece[..piece.len() - 1]
                    } else {
                        piece
                    };
                    pieces.push((text_out.len(), i as u32 + 1, col));
                    text_out.push_str(body);
                    if !cont || i + 1 >= lines.len() {
                        break;
                    }
                    text_out.push(' ');
                    i += 1;
                    piece = lines[i].trim_end_matches(['\n', '\r']);
                    col = 1;
                }
                let end = line_starts[i] + lines[i].len();
                let stripped = strip_comments(&text_out);
                out.push(Pragma {
                    text: stripped,
                    lines: line_starts[first]..end,
                    pieces,
                });
            }
            _ => {
                // Track block comments so a `#pragma` inside one is not read.
                let mut s = raw;
                while let Some(open) = find_outside_strings(s, "/*") {
                    match s[open + 2..].find("*/") {
                        Some(close) => s = &s[open + 2 + close + 2..],
                        None => {
                            in_comment = true;
                            break;
                        }
                    }
                }
            }
        }
        i += 1;
    }
    out
}

pub(crate) fn find_outside_strings(s: &str, pat: &str) -> Option<usize> {
    let mut in_str = false;
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'\\' if in_str => i += 1,
            b'"' => in_str = !in_str,
            _ if !in_str && b[i..].starts_with(pat.as_bytes()) => return Some(i),
            b'/' if !in_str && b[i..].starts_with(b"//") => return None,
            _ => {}
        }
        i += 1;
    }
    None
}

/// Replaces comments by spaces (so offsets keep their meaning).
fn strip_comments(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut in_str = false;
    let mut chars = s.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        if in_str {
            out.push(c);
            if c == '\\' {
                if let Some((_, n)) = chars.next() {
                    out.push(n);
                }
            } else if c == '"' {
                in_str = false;
            }
            continue;
        }
        if c == '"' {
            in_str = true;
            out.push(c);
        } else if s[i..].starts_with("//") {
            out.extend(std::iter::repeat_n(' ', s[i..].chars().count()));
            break;
        } else if s[i..].starts_with("/*") {
            let len = s[i + 2..].find("*/").map_or(s.len() - i, |e| e + 4);
            let skipped = s[i..i + len].chars().count();
            out.extend(std::iter::repeat_n(' ', skipped));
            for _ in 1..skipped {
                chars.next();
            }
        } else {
            out.push(c);
        }
    }
    out
}

// ---------------------------------------------------------------------------------------
// The original KLARAPTOR pragmas

#[derive(Debug, Clone)]
struct Classic {
    kernel: String,
    value: usize,
    is_size: bool,
    loc: Location,
    value_loc: Location,
}

fn parse_classic(
    kernel: &str,
    rest: &str,
    at: &dyn Fn(usize) -> Location,
    start: Location,
    is_size: bool,
) -> Result<Classic, Diagnostic> {
    let what = if is_size { CLASSIC_SIZE } else { CLASSIC_DIM };
    let example = if is_size {
        "#pragma kernel_info_size_param_idx_mm = 3;"
    } else {
        "#pragma kernel_info_dim_mm = 2;"
    };
    if kernel.is_empty() {
        return Err(
            Diagnostic::new(start, format!("expected a kernel name after '{what}'"))
                .help(format!("write e.g. '{example}'")),
        );
    }
    let t = rest.trim_start();
    let mut off = rest.len() - t.len();
    let Some(t) = t.strip_prefix('=') else {
        return Err(
            Diagnostic::new(at(off), "expected '=' after the kernel name")
                .help(format!("write e.g. '{example}'")),
        );
    };
    off += 1;
    let v = t.trim_start();
    off += t.len() - v.len();
    let digits = v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len());
    let value_loc = at(off);
    let value: usize = v[..digits].parse().map_err(|_| {
        Diagnostic::new(value_loc.clone(), "expected a non-negative integer")
            .help(format!("write e.g. '{example}'"))
    })?;
    let tail = v[digits..].trim();
    let tail = tail.strip_prefix(';').unwrap_or(tail).trim();
    if !tail.is_empty() {
        let toff = off
            + digits
            + v[digits..]
                .find(|c: char| !c.is_whitespace() && c != ';')
                .unwrap_or(0);
        return Err(
            Diagnostic::new(at(toff), format!("unexpected '{tail}' after the value"))
                .help(format!("write e.g. '{example}'")),
        );
    }
    if !is_size && !(1..=3).contains(&value) {
        return Err(Diagnostic::new(
            value_loc,
            format!("a kernel's dimensionality is 1, 2 or 3, not {value}"),
        ));
    }
    Ok(Classic {
        kernel: kernel.to_string(),
        value,
        is_size,
        loc: start,
        value_loc,
    })
}

fn merge_classic(items: Vec<Classic>) -> Result<Vec<KernelAnnotation>, Diagnostics> {
    let mut out: Vec<KernelAnnotation> = Vec::new();
    let mut errors = Vec::new();
    let mut dims: Vec<&Classic> = Vec::new();
    for c in items.iter().filter(|c| c.is_size) {
        if out.iter().any(|a| a.kernel == c.kernel) {
            errors.push(
                Diagnostic::new(
                    c.loc.clone(),
                    format!("a second '{CLASSIC_SIZE}{}' pragma", c.kernel),
                )
                .help("give the data-size argument once per kernel"),
            );
            continue;
        }
        out.push(KernelAnnotation {
            kernel: c.kernel.clone(),
            data: vec![DataParam {
                label: "N".into(),
                arg: ArgRef::Index(c.value),
                loc: c.value_loc.clone(),
            }],
            dim: 1,
            grid: Vec::new(),
            constraints: Vec::new(),
            shmem: None,
            profile: None,
            loc: c.loc.clone(),
            style: Style::Classic,
        });
    }
    for c in items.iter().filter(|c| !c.is_size) {
        if dims.iter().any(|d| d.kernel == c.kernel) {
            errors.push(
                Diagnostic::new(
                    c.loc.clone(),
                    format!("a second '{CLASSIC_DIM}{}' pragma", c.kernel),
                )
                .help("give the dimensionality once per kernel"),
            );
            continue;
        }
        dims.push(c);
        match out.iter_mut().find(|a| a.kernel == c.kernel) {
            Some(a) => a.dim = c.value as u8,
            None => errors.push(
                Diagnostic::new(
                    c.loc.clone(),
                    format!(
                        "kernel '{}' has a dimensionality but no data-size argument",
                        c.kernel
                    ),
                )
                .help(format!(
                    "add '#pragma {CLASSIC_SIZE}{} = <argument index>;'",
                    c.kernel
                )),
            ),
        }
    }
    for a in &mut out {
        a.grid = default_grid(&a.data, a.dim);
    }
    if errors.is_empty() {
        Ok(out)
    } else {
        Err(Diagnostics(errors))
    }
}

/// The labels of the data parameters of a pragma without `data(…)` (the one-line form,
/// `#pragma klaraptor kernel(k)`): the threads the launch runs along x, y and z.
pub const LAUNCH_LABELS: [&str; 3] = ["NX", "NY", "NZ"];

/// The data parameters of a pragma without `data(…)`: for each of the `dim` block axes, the
/// threads a launch runs along it (`NX = gridDim.x * blockDim.x`, `NY`, `NZ`), computed at
/// each launch from its own grid and block. `loc` is the pragma's.
pub fn launch_data(dim: u8, loc: &Location) -> Vec<DataParam> {
    (0..dim)
        .map(|axis| DataParam {
            label: LAUNCH_LABELS[axis as usize].to_string(),
            arg: ArgRef::Launch(axis),
            loc: loc.clone(),
        })
        .collect()
}

/// The block constraints a pragma without `data(…)` and without `grid(…)` gets: every block
/// axis divides the threads the launch runs along it (`NX % bx == 0`, …), so that the chosen
/// launch, whose grid is `ceil(NX, bx)`, runs exactly the threads the program's launch ran
/// (a kernel that indexes by its global thread id without a bounds check stays correct).
pub fn exact_cover(dim: u8) -> Vec<BoolExpr> {
    let labels = &LAUNCH_LABELS[..dim as usize];
    labels
        .iter()
        .zip(expr::BLOCK_VARS)
        .map(|(n, b)| {
            expr::parse_bool(&format!("{n} % {b} == 0"), labels)
                .expect("the exact-cover constraint parses")
        })
        .collect()
}

/// `ceil(D_i, b_i)` per dimension, where D_i is the i-th data parameter (the last one when
/// there are fewer data parameters than dimensions).
pub fn default_grid(data: &[DataParam], dim: u8) -> Vec<IntExpr> {
    (0..dim as usize)
        .map(|i| {
            let d = &data[i.min(data.len() - 1)].label;
            IntExpr::Bin(
                expr::IntOp::CeilDiv,
                Box::new(IntExpr::Var(d.clone())),
                Box::new(IntExpr::Var(expr::BLOCK_VARS[i].into())),
            )
        })
        .collect()
}

// ---------------------------------------------------------------------------------------
// `#pragma klaraptor …`

const CLAUSES: &str = "kernel, data, dim, grid, block, shmem, profile";
const PRAGMA_EXAMPLE: &str =
    "#pragma klaraptor kernel(mm) data(N=3) dim(2) grid(ceil(N, bx), ceil(N, by))";

/// A clause `name(args)` with the offsets of its name and of its argument text.
struct Clause<'a> {
    name: &'a str,
    name_off: usize,
    args: &'a str,
    args_off: usize,
}

fn clauses<'a>(s: &'a str, at: &dyn Fn(usize) -> Location) -> Result<Vec<Clause<'a>>, Diagnostic> {
    let mut out = Vec::new();
    let b = s.as_bytes();
    let mut i = 0;
    loop {
        while i < b.len() && b[i].is_ascii_whitespace() {
            i += 1;
        }
        if i == b.len() {
            return Ok(out);
        }
        let name_off = i;
        while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
            i += 1;
        }
        let name = &s[name_off..i];
        if name.is_empty() {
            let ch = s[i..].chars().next().unwrap_or(' ');
            return Err(Diagnostic::new(
                at(i),
                format!("expected a clause ({CLAUSES}), found '{ch}'"),
            )
            .help(format!("write e.g. '{PRAGMA_EXAMPLE}'")));
        }
        while i < b.len() && b[i].is_ascii_whitespace() {
            i += 1;
        }
        if i == b.len() || b[i] != b'(' {
            return Err(Diagnostic::new(
                at(i.min(s.len())),
                format!("expected '(' after '{name}'"),
            )
            .help(format!(
                "clauses are written name(…), e.g. '{PRAGMA_EXAMPLE}'"
            )));
        }
        let open = i;
        let mut depth = 0usize;
        let mut in_str = false;
        let mut close = None;
        while i < b.len() {
            match b[i] {
                b'\\' if in_str => i += 1,
                b'"' => in_str = !in_str,
                b'(' | b'[' if !in_str => depth += 1,
                b')' | b']' if !in_str => {
                    depth -= 1;
                    if depth == 0 {
                        close = Some(i);
                        break;
                    }
                }
                _ => {}
            }
            i += 1;
        }
        let Some(close) = close else {
            return Err(Diagnostic::new(at(open), format!("the '(' of '{name}' is never closed"))
                .help("add the missing ')' (a pragma that spans lines needs a '\\' at the end of each line but the last)"));
        };
        out.push(Clause {
            name,
            name_off,
            args: &s[open + 1..close],
            args_off: open + 1,
        });
        i = close + 1;
    }
}

/// Splits at commas that are not inside parentheses, brackets or strings.
fn split_top(s: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let (mut depth, mut in_str, mut start) = (0i32, false, 0);
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'\\' if in_str => i += 1,
            b'"' => in_str = !in_str,
            b'(' | b'[' if !in_str => depth += 1,
            b')' | b']' if !in_str => depth -= 1,
            b',' if !in_str && depth == 0 => {
                out.push((start, &s[start..i]));
                start = i + 1;
            }
            _ => {}
        }
        i += 1;
    }
    out.push((start, &s[start..]));
    out
}

fn is_ident(s: &str) -> bool {
    let mut c = s.chars();
    c.next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && c.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Offset of the first non-blank character of `s`, and `s` trimmed.
fn trimmed(s: &str) -> (usize, &str) {
    let t = s.trim_start();
    (s.len() - t.len(), t.trim_end())
}

fn parse_klaraptor(
    rest: &str,
    at: &dyn Fn(usize) -> Location,
    pragma_loc: Location,
) -> Result<KernelAnnotation, Diagnostic> {
    let cls = clauses(rest, at)?;
    let seen = |name: &str| cls.iter().filter(|c| c.name == name).count();
    for c in &cls {
        if !["kernel", "data", "dim", "grid", "block", "shmem", "profile"].contains(&c.name) {
            return Err(
                Diagnostic::new(at(c.name_off), format!("unknown clause '{}'", c.name))
                    .help(format!("the clauses are {CLAUSES}")),
            );
        }
        if c.name != "block" && seen(c.name) > 1 {
            let second = cls.iter().filter(|d| d.name == c.name).nth(1).unwrap();
            return Err(Diagnostic::new(
                at(second.name_off),
                format!("'{}' is given twice", c.name),
            )
            .help(
                "give each clause once (only 'block' may repeat; its conditions must all hold)",
            ));
        }
    }
    let get = |name: &str| cls.iter().find(|c| c.name == name);
    let Some(k) = get("kernel") else {
        return Err(
            Diagnostic::new(pragma_loc, "this klaraptor pragma names no kernel").help(format!(
                "start it with kernel(<name>), e.g. '{PRAGMA_EXAMPLE}'"
            )),
        );
    };
    let (koff, kname) = trimmed(k.args);
    let plain = kname.replace("::", "");
    if !is_ident(&plain) || kname.starts_with(':') || kname.ends_with(':') {
        return Err(Diagnostic::new(
            at(k.args_off + koff),
            format!("'{kname}' is not a kernel name"),
        )
        .help("write the kernel's name as in its definition, e.g. kernel(mm) or kernel(ns::mm)"));
    }
    let dim = match get("dim") {
        None => 1,
        Some(c) => {
            let (off, t) = trimmed(c.args);
            match t.parse::<u8>() {
                Ok(v @ 1..=3) => v,
                _ => {
                    return Err(Diagnostic::new(
                        at(c.args_off + off),
                        format!("expected 1, 2 or 3, found '{t}'"),
                    )
                    .help("dim(…) is the number of block dimensions the kernel uses"))
                }
            }
        }
    };
    // Without data(…), the data are the threads the launch runs per block axis (the
    // one-line form); then, without grid(…), every axis of the block must divide them.
    let data = match get("data") {
        Some(d) => parse_data(d, at)?,
        None => launch_data(dim, &at(k.name_off)),
    };
    let labels: Vec<&str> = data.iter().map(|d| d.label.as_str()).collect();
    let expr_err = |base: usize, e: ExprError| Diagnostic::new(at(base + e.offset), e.message);
    let grid = match get("grid") {
        None => default_grid(&data, dim),
        Some(c) => {
            let parts = split_top(c.args);
            // dim is the block's: the grid may have more axes (a batch on gridDim.z), each a
            // formula of the data and the block's own dimensions.
            if parts.len() < dim as usize || parts.len() > 3 {
                return Err(Diagnostic::new(
                    at(c.name_off),
                    format!(
                        "grid(…) gives {} formula(s) but the kernel has {dim} block dimension(s)",
                        parts.len()
                    ),
                )
                .help(format!(
                    "give one formula per grid axis, separated by commas: at least {dim} (one \
                     per block dimension, or change dim({dim})) and at most 3"
                )));
            }
            parts
                .into_iter()
                .map(|(off, p)| {
                    expr::parse_int(p, &labels).map_err(|e| expr_err(c.args_off + off, e))
                })
                .collect::<Result<Vec<_>, _>>()?
        }
    };
    for (i, g) in grid.iter().enumerate() {
        let c = get("grid").map_or(k.name_off, |c| c.args_off);
        if let Some(v) = g
            .vars()
            .into_iter()
            .find(|v| expr::BLOCK_VARS[dim as usize..].contains(v))
        {
            return Err(Diagnostic::new(
                at(c),
                format!(
                    "grid formula {} uses '{v}', but the kernel has {dim} dimension(s)",
                    i + 1
                ),
            )
            .help(format!(
                "use only {} and the data parameters",
                expr::BLOCK_VARS[..dim as usize].join(", ")
            )));
        }
    }
    let mut constraints = if get("data").is_none() && get("grid").is_none() {
        exact_cover(dim)
    } else {
        Vec::new()
    };
    for c in cls.iter().filter(|c| c.name == "block") {
        constraints.push(expr::parse_bool(c.args, &labels).map_err(|e| expr_err(c.args_off, e))?);
    }
    let shmem = match get("shmem") {
        None => None,
        Some(c) => {
            let e = expr::parse_int(c.args, &labels)
                .map_err(|e| expr_err(c.args_off, e).help(SHMEM_HELP))?;
            check_shmem(&e, dim)
                .map_err(|m| Diagnostic::new(at(c.args_off), m).help(SHMEM_HELP))?;
            check_shmem_fits(&e, dim, &labels, &constraints)
                .map_err(|m| Diagnostic::new(at(c.args_off), m).help(SHMEM_FITS_HELP))?;
            Some(e)
        }
    };
    let profile = get("profile")
        .map(|c| parse_profile(c, &labels, at))
        .transpose()?;
    Ok(KernelAnnotation {
        kernel: kname.to_string(),
        data,
        dim,
        grid,
        constraints,
        shmem,
        profile,
        loc: at(k.name_off),
        style: Style::Pragma,
    })
}

/// What to write in `shmem(…)`.
pub const SHMEM_HELP: &str = "shmem(…) gives the bytes of dynamic shared memory a launch needs \
     for a block shape, as a formula of bx, by, bz and the data parameters, e.g. shmem(bx * 4) \
     for one float per thread of x";

/// Checks a `shmem(…)` formula beyond its syntax: it uses only the block dimensions the kernel
/// has, and it is not negative at the kernel's smallest block (its value at every candidate
/// shape is checked again when the runtime uses it).
pub fn check_shmem(e: &IntExpr, dim: u8) -> Result<(), String> {
    if let Some(v) = e
        .vars()
        .into_iter()
        .find(|v| expr::BLOCK_VARS[dim as usize..].contains(v))
    {
        return Err(format!(
            "shmem(…) uses '{v}', but the kernel has {dim} block dimension(s)"
        ));
    }
    if e.vars().iter().all(|v| expr::BLOCK_VARS.contains(v)) {
        // A formula of the block alone: its value at every candidate shape is known now.
        for b in crate::spec::candidate_blocks(dim) {
            let env = [
                ("bx", i64::from(b[0])),
                ("by", i64::from(b[1])),
                ("bz", i64::from(b[2])),
            ];
            match e.eval(env.as_slice()) {
                Ok(v) if v >= 0 => {}
                Ok(v) => {
                    return Err(format!(
                        "shmem({e}) is {v} bytes at block {}x{}x{}: an amount of shared memory \
                         is never negative",
                        b[0], b[1], b[2]
                    ))
                }
                Err(x) => {
                    return Err(format!(
                        "shmem({e}) cannot be evaluated at block {}x{}x{}: {x}",
                        b[0], b[1], b[2]
                    ))
                }
            }
        }
    }
    Ok(())
}

/// The most shared memory one block may have on any GPU klaraptor supports, in bytes: the
/// opt-in limit of sm_90 (227 KiB; `klaraptor-model`'s architecture table, which a test of
/// `klaraptor-program` keeps in step). Annotations are checked before the device is known.
pub const MAX_SHMEM_PER_BLOCK: i64 = 227 * 1024;

/// What to do about a `shmem(…)` that no block shape can have.
pub const SHMEM_FITS_HELP: &str = "shmem(…) gives the bytes of dynamic shared memory ONE block \
     needs for its shape (e.g. shmem(bx * 4) for one float per thread of x), not the whole \
     launch's; or allow with block(…) only the shapes whose amount fits";

/// Checks that a `shmem(…)` formula leaves some block shape a launch could have: at some
/// candidate shape the annotation's `block(…)` constraints allow, and some data size tried
/// (each data parameter 1, 7, 64, 1000, 4096, 2^20, 2^30 or 2^40), its value is at most
/// [`MAX_SHMEM_PER_BLOCK`]. Shapes and sizes at which the formula or a constraint cannot be
/// evaluated are passed over (the runtime checks each shape again, with the device's own
/// limit).
pub fn check_shmem_fits(
    e: &IntExpr,
    dim: u8,
    data: &[&str],
    constraints: &[BoolExpr],
) -> Result<(), String> {
    const VALUES: [i64; 8] = [1, 7, 64, 1000, 4096, 1 << 20, 1 << 30, 1 << 40];
    let blocks = crate::spec::candidate_blocks(dim);
    let values: &[i64] = if data.is_empty() {
        &VALUES[..1]
    } else {
        &VALUES
    };
    // The smallest amount met: (bytes, block, data value).
    let mut least: Option<(i64, [u32; 3], i64)> = None;
    for &v in values {
        for b in &blocks {
            let mut env: Vec<(&str, i64)> = data.iter().map(|d| (*d, v)).collect();
            env.extend([
                ("bx", i64::from(b[0])),
                ("by", i64::from(b[1])),
                ("bz", i64::from(b[2])),
            ]);
            if !constraints
                .iter()
                .all(|c| c.eval(env.as_slice()).unwrap_or(false))
            {
                continue;
            }
            let Ok(bytes) = e.eval(env.as_slice()) else {
                continue;
            };
            if bytes <= MAX_SHMEM_PER_BLOCK {
                return Ok(());
            }
            if least.is_none_or(|(l, _, _)| bytes < l) {
                least = Some((bytes, *b, v));
            }
        }
    }
    let Some((bytes, b, v)) = least else {
        return Ok(());
    };
    let shape: String = b[..dim as usize]
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join("x");
    let at_data = if e.vars().iter().any(|v| !expr::BLOCK_VARS.contains(v)) {
        format!(", data {v}")
    } else {
        String::new()
    };
    Err(format!(
        "shmem({e}) is more shared memory than a block may have at every block shape the \
         annotation allows (at least {bytes} bytes, at block {shape}{at_data}): the most any \
         supported GPU gives a block is {MAX_SHMEM_PER_BLOCK} bytes (227 KiB, sm_90 with \
         opt-in; the device is not known when annotations are checked), so no launch of the \
         kernel could be chosen"
    ))
}

fn parse_data(c: &Clause, at: &dyn Fn(usize) -> Location) -> Result<Vec<DataParam>, Diagnostic> {
    let mut out: Vec<DataParam> = Vec::new();
    for (off, item) in split_top(c.args) {
        let (lead, t) = trimmed(item);
        let base = c.args_off + off + lead;
        let bad = |m: String| {
            Diagnostic::new(at(base), m).help("write LABEL=INDEX (0-based argument position), LABEL=ARGUMENT, or ARGUMENT, e.g. data(NI=3, NJ=4) or data(n)")
        };
        let (label, arg, arg_off) = match t.split_once('=') {
            Some((l, a)) => {
                let (aoff, a) = trimmed(a);
                (l.trim(), a, l.len() + 1 + aoff)
            }
            None => (t, t, 0),
        };
        if !is_ident(label) {
            return Err(bad(if t.is_empty() {
                "empty entry in data(…)".into()
            } else {
                format!("'{label}' is not a name")
            }));
        }
        if expr::BLOCK_VARS.contains(&label) || expr::FUNCTIONS.contains(&label) {
            return Err(bad(format!(
                "'{label}' is reserved (block dimensions and functions); choose another label"
            )));
        }
        let arg = if let Ok(i) = arg.parse::<usize>() {
            ArgRef::Index(i)
        } else if is_ident(arg) {
            ArgRef::Name(arg.to_string())
        } else {
            return Err(Diagnostic::new(
                at(base + arg_off),
                format!("'{arg}' is neither an argument index nor an argument name"),
            )
            .help("write e.g. data(N=3) or data(N=n)"));
        };
        if out.iter().any(|d| d.label == label) {
            return Err(bad(format!("data parameter '{label}' is named twice")));
        }
        out.push(DataParam {
            label: label.to_string(),
            arg,
            loc: at(base + arg_off),
        });
    }
    Ok(out)
}

fn parse_profile(
    c: &Clause,
    labels: &[&str],
    at: &dyn Fn(usize) -> Location,
) -> Result<ProfileRecipe, Diagnostic> {
    let n_data = labels.len();
    let mut run = None;
    let mut sizes = None;
    let help = "write e.g. profile(run=\"./app {N}\", sizes=[64, 128, 256]) — one value per size, or a tuple (NI, NJ) per size when there are several data parameters";
    for (off, item) in split_top(c.args) {
        let (lead, t) = trimmed(item);
        let base = c.args_off + off + lead;
        let Some((key, value)) = t.split_once('=') else {
            return Err(Diagnostic::new(
                at(base),
                format!("expected key=value in profile(…), found '{t}'"),
            )
            .help(help));
        };
        let (voff, v) = trimmed(value);
        let vbase = base + key.len() + 1 + voff;
        match key.trim() {
            "run" => {
                let s = v.strip_prefix('"').and_then(|s| s.strip_suffix('"'));
                match s {
                    Some(s) if !s.is_empty() => run = Some((s.replace("\\\"", "\""), vbase)),
                    _ => {
                        return Err(Diagnostic::new(
                            at(vbase),
                            "run=… takes a non-empty string in double quotes",
                        )
                        .help(help))
                    }
                }
            }
            "sizes" => {
                sizes = Some(
                    parse_sizes(v, n_data)
                        .map_err(|(o, m)| Diagnostic::new(at(vbase + o), m).help(help))?,
                )
            }
            k => {
                return Err(Diagnostic::new(
                    at(base),
                    format!("unknown profile key '{k}'; the keys are run and sizes"),
                )
                .help(help))
            }
        }
    }
    match (run, sizes) {
        (Some((run, run_at)), Some(sizes)) => {
            // Every size would run the same command (the profile would hold one size only),
            // or the command mixes one run for all sizes with one run per size.
            if let Err((message, fix)) = check_recipe_placeholders(&run, labels) {
                let message = format!("profile(run=\"{run}\") {message}");
                return Err(match fix {
                    Some(fix) => Diagnostic::new(at(run_at), message).help(fix),
                    None => Diagnostic::new(at(c.name_off), message).help(help),
                });
            }
            Ok(ProfileRecipe { run, sizes })
        }
        (None, _) => Err(Diagnostic::new(at(c.name_off), "profile(…) needs run=\"…\"").help(help)),
        (_, None) => Err(Diagnostic::new(at(c.name_off), "profile(…) needs sizes=[…]").help(help)),
    }
}

/// `[64, 128]` or `[(64, 32), (128, 64)]`; errors carry an offset into `v`.
pub fn parse_sizes(v: &str, n_data: usize) -> Result<Vec<Vec<i64>>, (usize, String)> {
    let inner = v
        .strip_prefix('[')
        .and_then(|s| s.strip_suffix(']'))
        .ok_or((0, "sizes=… takes a list in brackets".to_string()))?;
    let mut out = Vec::new();
    if inner.trim().is_empty() {
        return Err((0, "the list of profile sizes is empty".into()));
    }
    for (off, item) in split_top(inner) {
        let (lead, t) = trimmed(item);
        let base = 1 + off + lead;
        let values: Vec<(usize, &str)> = match t.strip_prefix('(').and_then(|s| s.strip_suffix(')'))
        {
            Some(tuple) => split_top(tuple)
                .into_iter()
                .map(|(o, s)| (1 + o, s))
                .collect(),
            None => vec![(0, t)],
        };
        let mut row = Vec::new();
        for (o, s) in &values {
            let (l2, s2) = trimmed(s);
            match s2.parse::<i64>() {
                Ok(x) if x > 0 => row.push(x),
                _ => {
                    return Err((
                        base + o + l2,
                        format!("expected a positive integer size, found '{s2}'"),
                    ))
                }
            }
        }
        if row.len() == 1 {
            row = vec![row[0]; n_data];
        } else if row.len() != n_data {
            return Err((
                base,
                format!(
                    "this size gives {} values but the kernel has {n_data} data parameter(s)",
                    row.len()
                ),
            ));
        }
        out.push(row);
    }
    Ok(out)
}

/// The directory-level configuration file beside a source.
pub fn toml_path_for(source: &Path) -> PathBuf {
    source
        .parent()
        .unwrap_or(Path::new("."))
        .join("klaraptor.toml")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_pragma_lines_are_ours_and_others_are_not() {
        for l in [
            "#pragma klaraptor kernel(mm) data(N=n) dim(1) grid(ceil(N, bx))",
            "  #  pragma\tklaraptor(x)",
            "#pragma klaraptor",
            "#pragma kernel_info_size_param_idx_mm = 3;",
            "#pragma kernel_info_dim_mm = 2;",
        ] {
            assert!(is_own_pragma_line(l), "{l}");
        }
        for l in [
            "#pragma once",
            "#pragma klaraptr kernel(mm)",
            "#pragma klaraptors",
            "#pragma GCC diagnostic push",
            "#pragmaklaraptor",
            "x = 1; // #pragma klaraptor",
        ] {
            assert!(!is_own_pragma_line(l), "{l}");
        }
    }
}
