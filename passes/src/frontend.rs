//! The front-end of one translation unit: annotations from its pragmas (in the source and in
//! the files it includes with quotes) and from the `klaraptor.toml` beside it, checked
//! against the source with libclang.

use std::path::{Path, PathBuf};

use crate::clang::{self, ClangConfig};
use klaraptor_spec::annotations::{self, FileScan, KernelAnnotation, Style};
use klaraptor_spec::config;
use klaraptor_spec::diag::{Diagnostic, Diagnostics};
use klaraptor_spec::includes::{self, UnitFile};
use klaraptor_spec::spec::{self, KernelSpec};

/// What the front-end made of a source.
#[derive(Debug)]
pub enum Outcome {
    /// No annotation applies: compile exactly as nvcc would.
    Unannotated,
    /// libclang found errors in the source itself (not in our annotations): let nvcc compile
    /// it, so that the user sees nvcc's own diagnostics and exit status.
    SourceErrors(Vec<String>),
    Annotated(Analysis),
}

#[derive(Debug)]
pub struct Analysis {
    pub specs: Vec<KernelSpec>,
    /// The source with our pragma lines blanked: what the compiler is given.
    pub stripped: String,
    /// Whether our pragmas annotate some kernel, in the source or in a file it includes (else
    /// only `klaraptor.toml` applies). Only the source's own pragma lines are blanked in
    /// `stripped`; an included file is compiled as it is.
    pub has_pragmas: bool,
    pub toml: Option<PathBuf>,
}

#[derive(Debug, thiserror::Error)]
pub enum FrontendError {
    #[error("{0}")]
    User(Diagnostics),
    /// The I/O error is part of the message, not its `source()`: a report that prints the
    /// chain (anyhow's `{:#}`) would say it twice.
    #[error("cannot read {}: {error}", path.display())]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error(transparent)]
    Clang(#[from] clang::ClangError),
}

impl From<Diagnostics> for FrontendError {
    fn from(d: Diagnostics) -> Self {
        FrontendError::User(d)
    }
}

impl From<Diagnostic> for FrontendError {
    fn from(d: Diagnostic) -> Self {
        FrontendError::User(d.into())
    }
}

/// What a translation unit's annotations are read into without libclang: its pragmas, the
/// `klaraptor.toml` entries that may apply, and that file's path when there is one.
pub type TuAnnotations = (
    annotations::Scanned,
    Vec<config::TomlKernel>,
    Option<PathBuf>,
);

/// Reads `source`'s annotations without libclang: the pragmas of the source and of the files
/// it includes with quotes (looked for beside the including file only; see
/// [`annotations_of_tu`]), and the entries of the `klaraptor.toml` beside it that may apply.
/// Fast; used to decide whether a translation unit needs klaraptor at all.
pub fn annotations_of(source: &Path, text: &str) -> Result<TuAnnotations, Diagnostics> {
    annotations_of_tu(source, text, &[])
}

/// Reads the annotations of the translation unit whose main file is `source` (with contents
/// `text`) without libclang: the pragmas of the source and of every file it includes with
/// quotes, recursively, found as the preprocessor finds them (beside the including file,
/// then in `include_dirs`, the `-iquote` and `-I` directories in search order: see
/// [`ClangConfig::quote_include_dirs`]); and the entries of the `klaraptor.toml` beside the
/// source that may apply (those naming no source, or naming one of these files). Each
/// annotation's location names the file that holds it. Fast: used to decide whether a
/// translation unit needs klaraptor at all. It follows every quoted include outside
/// comments, also one the preprocessor would skip (`#if 0`), so it may see more than
/// [`analyze`], never less (except through an include spelled with a macro).
pub fn annotations_of_tu(
    source: &Path,
    text: &str,
    include_dirs: &[PathBuf],
) -> Result<TuAnnotations, Diagnostics> {
    let files = includes::quoted_closure(source, text, include_dirs);
    let scans: Vec<FileScan> = files
        .iter()
        .map(|f| annotations::scan_file(&f.path, &f.text))
        .collect();
    let scanned = scan_files(&files, &scans)?;
    let canon: Vec<PathBuf> = files.iter().map(|f| f.canonical.clone()).collect();
    let (toml, toml_path) = toml_entries(source, &canon)?;
    Ok((scanned, toml, toml_path))
}

/// Annotations the compiler would ignore without a word, each a diagnostic for a warning:
/// `#pragma` lines one or two letters off `klaraptor` ([`annotations::misspelled_pragmas`])
/// in `source` and in every file it includes with quotes, found as [`annotations_of_tu`]
/// finds them (a misspelled pragma beside a kernel in a header is as silent as one in the
/// main file; each diagnostic names the file that holds the line, a header included twice
/// once); then the entries of the `klaraptor.toml` beside `source` that match nothing
/// ([`unmatched_toml_entries`]). klaraptor-cc says each as a warning for every CUDA source
/// it compiles.
pub fn misspelled_pragmas_of_tu(
    source: &Path,
    text: &str,
    include_dirs: &[PathBuf],
) -> Vec<klaraptor_spec::diag::Diagnostic> {
    let mut out: Vec<Diagnostic> = includes::quoted_closure(source, text, include_dirs)
        .iter()
        .flat_map(|f| annotations::misspelled_pragmas(&f.path, &f.text))
        .collect();
    out.extend(unmatched_toml_entries(source, text, include_dirs));
    out
}

/// The entries of the `klaraptor.toml` beside `source` (with contents `text`) that match
/// nothing, each a diagnostic for a warning at the entry (its `source = "…"` value when it
/// has one) saying what it did not match: a `source` that names no file; a `source` naming a
/// file outside this translation unit that defines no `__global__` function of the entry's
/// name (in it or the files it includes with quotes; one inside the translation unit is
/// checked by [`analyze`], where a missing kernel is an error); an entry without `source`
/// whose kernel no `.cu` file beside the toml defines (nor the files they include with
/// quotes). Kernels are found by the text ([`kernels_by_text`]), so a kernel whose name a
/// macro makes is not seen. A toml that does not read gives nothing here ([`analyze`]
/// reports it).
pub fn unmatched_toml_entries(
    source: &Path,
    text: &str,
    include_dirs: &[PathBuf],
) -> Vec<Diagnostic> {
    let toml_path = annotations::toml_path_for(source);
    if !toml_path.is_file() {
        return Vec::new();
    }
    let Ok(entries) = config::load(&toml_path) else {
        return Vec::new();
    };
    if entries.is_empty() {
        return Vec::new();
    }
    let dir = toml_path.parent().unwrap_or(Path::new("."));
    let unit: Vec<PathBuf> = includes::quoted_closure(source, text, include_dirs)
        .into_iter()
        .map(|f| f.canonical)
        .collect();
    let here = kernels_by_text(source, text, include_dirs);
    // The kernels of every .cu file beside the toml: read once, when an entry needs them.
    let mut beside: Option<Vec<String>> = None;
    let mut out = Vec::new();
    for t in &entries {
        let a = &t.annotation;
        let short = a.kernel.rsplit("::").next().unwrap_or(&a.kernel);
        let entry = format!("[kernel.{}]", a.kernel);
        match &t.source {
            Some(s) if !s.is_file() => {
                out.push(
                    Diagnostic::new(
                        t.source_loc.clone().unwrap_or_else(|| a.loc.clone()),
                        format!(
                            "the entry {entry} of {} matches nothing: its source, {}, does not \
                             exist, so kernel '{}' keeps the program's own launch",
                            toml_path.display(),
                            s.display(),
                            a.kernel
                        ),
                    )
                    .help(
                        "name the file that defines the kernel, relative to the directory of \
                         klaraptor.toml, or leave `source` out",
                    ),
                );
            }
            Some(s) => {
                if unit.contains(&includes::canonical(s)) {
                    continue;
                }
                let found = includes::read_text(s)
                    .map(|st| kernels_by_text(s, &st, include_dirs))
                    .unwrap_or_default();
                if found.iter().any(|k| k == short) {
                    continue;
                }
                out.push(
                    Diagnostic::new(
                        t.source_loc.clone().unwrap_or_else(|| a.loc.clone()),
                        format!(
                            "the entry {entry} of {} matches nothing: {} defines no kernel \
                             named '{}' (no __global__ function of that name in it or the \
                             files it includes with quotes)",
                            toml_path.display(),
                            s.display(),
                            a.kernel
                        ),
                    )
                    .help(suggest(short, &found, &s.display().to_string())),
                );
            }
            None => {
                if here.iter().any(|k| k == short) {
                    continue;
                }
                let all = beside.get_or_insert_with(|| kernels_beside(dir, include_dirs));
                if all.iter().any(|k| k == short) {
                    continue;
                }
                out.push(
                    Diagnostic::new(
                        a.loc.clone(),
                        format!(
                            "the entry {entry} of {} matches no kernel: no .cu file in {} (nor \
                             a file one includes with quotes) defines a __global__ function \
                             named '{}'",
                            toml_path.display(),
                            if dir.as_os_str().is_empty() {
                                ".".to_string()
                            } else {
                                dir.display().to_string()
                            },
                            a.kernel
                        ),
                    )
                    .help(suggest(short, all, "the directory")),
                );
            }
        }
    }
    out
}

/// The `__global__` functions of every `.cu` file in `dir` and of the files they include
/// with quotes, read from the text; each name once, in the files' order of name.
fn kernels_beside(dir: &Path, include_dirs: &[PathBuf]) -> Vec<String> {
    let listed = if dir.as_os_str().is_empty() {
        std::fs::read_dir(".")
    } else {
        std::fs::read_dir(dir)
    };
    let mut files: Vec<PathBuf> = listed
        .map(|rd| {
            rd.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "cu") && p.is_file())
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    let mut out: Vec<String> = Vec::new();
    for f in files {
        let Some(text) = includes::read_text(&f) else {
            continue;
        };
        for k in kernels_by_text(&f, &text, include_dirs) {
            if !out.contains(&k) {
                out.push(k);
            }
        }
    }
    out
}

/// What to tell the writer of an entry for kernel `name` that matches none of `found` (the
/// kernels of `place`): the names one or two letters off, else the kernels there.
fn suggest(name: &str, found: &[String], place: &str) -> String {
    let close: Vec<&str> = found
        .iter()
        .filter(|k| annotations::edit_distance(k, name) <= 2)
        .map(String::as_str)
        .collect();
    if !close.is_empty() {
        return format!("did you mean {}?", quoted(&close));
    }
    if found.is_empty() {
        return format!("{place} defines no __global__ function; check the kernel's name");
    }
    let shown: Vec<&str> = found.iter().take(8).map(String::as_str).collect();
    format!(
        "the kernels of {place} are {}{}; check the kernel's name",
        quoted(&shown),
        if found.len() > shown.len() {
            ", …"
        } else {
            ""
        }
    )
}

/// `'a'`, `'a' or 'b'`, `'a', 'b' or 'c'`.
fn quoted(names: &[&str]) -> String {
    let q: Vec<String> = names.iter().map(|n| format!("'{n}'")).collect();
    match q.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
        _ => q.join(""),
    }
}

/// The names of the `__global__` functions defined or declared in `source` (with contents
/// `text`) and in the files it includes with quotes, read from the text without libclang
/// (the reading of [`annotations_of_tu`]): what a translation unit libclang cannot parse
/// can still be checked against. Comments are skipped; `__launch_bounds__(…)` and
/// `__attribute__((…))` between `__global__` and the name are passed over.
pub fn kernels_by_text(source: &Path, text: &str, include_dirs: &[PathBuf]) -> Vec<String> {
    let mut out = Vec::new();
    for f in includes::quoted_closure(source, text, include_dirs) {
        let code = without_comments(&f.text);
        let mut rest = code.as_str();
        while let Some(at) = rest.find("__global__") {
            rest = &rest[at + "__global__".len()..];
            if let Some(name) = declared_name(rest) {
                if !out.contains(&name) {
                    out.push(name);
                }
            }
        }
    }
    out
}

/// `text` with its comments replaced by blanks (string literals kept as they are).
fn without_comments(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
            out.push(' ');
        } else if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
            i += 2;
            while i < b.len() && !(b[i] == b'*' && b.get(i + 1) == Some(&b'/')) {
                i += 1;
            }
            i += 2;
            out.push(' ');
        } else {
            let c = text[i..].chars().next().unwrap_or(' ');
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

/// The identifier a declaration's text after `__global__` declares: the last one before the
/// first `(` that is not an attribute's.
fn declared_name(text: &str) -> Option<String> {
    let mut name: Option<String> = None;
    let mut chars = text.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        if c.is_ascii_alphabetic() || c == '_' {
            let mut end = i + c.len_utf8();
            while let Some(&(j, d)) = chars.peek() {
                if d.is_ascii_alphanumeric() || d == '_' {
                    end = j + d.len_utf8();
                    chars.next();
                } else {
                    break;
                }
            }
            name = Some(text[i..end].to_string());
        } else if c == '(' {
            if matches!(name.as_deref(), Some("__launch_bounds__" | "__attribute__")) {
                // Skip the attribute's parenthesised arguments.
                let mut depth = 1;
                for (_, d) in chars.by_ref() {
                    match d {
                        '(' => depth += 1,
                        ')' => depth -= 1,
                        _ => {}
                    }
                    if depth == 0 {
                        break;
                    }
                }
                name = None;
                continue;
            }
            return name;
        } else if c == ';' || c == '{' || c == '}' {
            return None;
        }
    }
    None
}

/// The annotations of `files` (each scanned into the matching entry of `scans`): those of
/// the main file (the first) always, of the others only where they hold pragmas.
fn scan_files(files: &[UnitFile], scans: &[FileScan]) -> Result<annotations::Scanned, Diagnostics> {
    let unit: Vec<(&FileScan, &str)> = scans
        .iter()
        .zip(files)
        .enumerate()
        .filter(|(i, (s, _))| *i == 0 || s.has_pragmas())
        .map(|(_, (s, f))| (s, f.text.as_str()))
        .collect();
    annotations::scan_unit(&unit)
}

/// The entries of the `klaraptor.toml` beside `source` that may apply to the translation
/// unit made of `files` (canonical paths, the main file first): those that name no source,
/// and those that name one of the files.
fn toml_entries(
    source: &Path,
    files: &[PathBuf],
) -> Result<(Vec<config::TomlKernel>, Option<PathBuf>), Diagnostics> {
    let toml_path = annotations::toml_path_for(source);
    if !toml_path.is_file() {
        return Ok((Vec::new(), None));
    }
    let entries = config::load(&toml_path)?
        .into_iter()
        .filter(|k| match &k.source {
            Some(s) => s.canonicalize().ok().is_some_and(|s| files.contains(&s)),
            None => true,
        })
        .collect();
    Ok((entries, Some(toml_path)))
}

/// Whether `text` holds a conditional preprocessor directive (`#if`, `#ifdef`, `#ifndef`,
/// `#elif`, `#else`), outside comments or not: a cheap test with no false negatives.
fn has_conditionals(text: &str) -> bool {
    text.lines().any(|l| {
        l.trim_start()
            .strip_prefix('#')
            .map(str::trim_start)
            .is_some_and(|d| d.starts_with("if") || d.starts_with("el"))
    })
}

/// Adds the unqualified names of `kernels` to `names`; whether any was new.
fn add_names(names: &mut Vec<String>, kernels: Vec<&str>) -> bool {
    let mut added = false;
    for n in kernels {
        let short = n.rsplit("::").next().unwrap_or(n).to_string();
        if !names.contains(&short) {
            names.push(short);
            added = true;
        }
    }
    added
}

/// The whole front-end for one translation unit.
///
/// Its pragmas are read from the source and from the files it includes with quotes. Which
/// included files belong to the translation unit is libclang's answer (the files the
/// preprocessor really entered, through quoted includes of non-system headers, with
/// `cfg`'s include directories and macros), not the textual reading of
/// [`annotations_of_tu`]; the textual reading only supplies the kernel names to ask
/// libclang about, and lets a source with no annotation anywhere skip libclang. Likewise a
/// pragma in a branch the preprocessor skipped (libclang's skipped ranges) is ignored.
pub fn analyze(source: &Path, cfg: &ClangConfig) -> Result<Outcome, FrontendError> {
    let text = std::fs::read_to_string(source).map_err(|e| FrontendError::Read {
        path: source.to_path_buf(),
        error: e,
    })?;
    // Errors in the source's own pragmas are reported before libclang runs, unless the
    // source has conditional directives: a pragma in a branch the preprocessor skips is
    // ignored, and only libclang knows which branches those are.
    if !has_conditionals(&text) {
        annotations::scan(source, &text)?;
    }
    let seen = includes::quoted_closure(source, &text, &cfg.quote_include_dirs());
    let seen_scans: Vec<FileScan> = seen
        .iter()
        .map(|f| annotations::scan_file(&f.path, &f.text))
        .collect();
    let all_canon: Vec<PathBuf> = seen.iter().map(|f| f.canonical.clone()).collect();
    let (toml_maybe, _) = toml_entries(source, &all_canon)?;
    let included_pragmas = seen_scans.iter().skip(1).any(FileScan::has_pragmas);
    if !seen_scans[0].has_pragmas() && !included_pragmas && toml_maybe.is_empty() {
        return Ok(Outcome::Unannotated);
    }

    let mut names: Vec<String> = Vec::new();
    for s in &seen_scans {
        add_names(&mut names, s.kernels());
    }
    add_names(
        &mut names,
        toml_maybe
            .iter()
            .map(|t| t.annotation.kernel.as_str())
            .collect(),
    );
    let ask = |names: &[String]| {
        let short: Vec<&str> = names.iter().map(String::as_str).collect();
        clang::inspect(source, &short, cfg)
    };
    let mut info = ask(&names)?;
    if info.has_errors() {
        return Ok(Outcome::SourceErrors(info.diagnostics));
    }

    // The translation unit's files, as libclang saw them: those the textual reading found
    // too keep its names and texts, the others (an include through a macro, say) are read.
    let main_canon = includes::canonical(source);
    let mut files: Vec<UnitFile> = vec![seen[0].clone()];
    let mut scans: Vec<FileScan> = vec![seen_scans[0].clone()];
    let mut unseen_names = false;
    for inc in info.quoted_includes(&main_canon) {
        let c = includes::canonical(&inc.file);
        if files.iter().any(|f| f.canonical == c) {
            continue;
        }
        if let Some(i) = seen.iter().position(|f| f.canonical == c) {
            files.push(seen[i].clone());
            scans.push(seen_scans[i].clone());
        } else if let Some(text) = includes::read_text(&inc.file) {
            let path = includes::tidy(&inc.name);
            let scan = annotations::scan_file(&path, &text);
            unseen_names |= add_names(&mut names, scan.kernels());
            files.push(UnitFile {
                path,
                canonical: c,
                text,
            });
            scans.push(scan);
        }
    }
    if unseen_names {
        info = ask(&names)?;
        if info.has_errors() {
            return Ok(Outcome::SourceErrors(info.diagnostics));
        }
    }
    // A pragma in a branch the preprocessor skipped (`#ifdef` alternatives) is ignored, as
    // the code beside it is.
    let scans: Vec<FileScan> = scans
        .iter()
        .zip(&files)
        .map(|(s, f)| s.active(|line| info.is_skipped(&f.canonical, line)))
        .collect();
    let scanned = scan_files(&files, &scans)?;
    let canon: Vec<PathBuf> = files.iter().map(|f| f.canonical.clone()).collect();
    let (toml, toml_path) = toml_entries(source, &canon)?;
    if scanned.annotations.is_empty() && toml.is_empty() {
        return Ok(Outcome::Unannotated);
    }
    // The text of the file a diagnostic points at, for its snippet.
    let text_of = |file: &Path| {
        files
            .iter()
            .find(|f| f.path == file)
            .map(|f| f.text.as_str())
    };

    let mut specs = Vec::new();
    let mut errors = Vec::new();
    let mut resolve = |a: &KernelAnnotation, text: Option<&str>, errors: &mut Vec<Diagnostic>| {
        match spec::resolve(a, &info) {
            Ok(s) => specs.push(s),
            Err(d) => errors.push(match text {
                Some(t) => d.with_source(t),
                None => d,
            }),
        }
    };
    for a in &scanned.annotations {
        resolve(a, text_of(&a.loc.file), &mut errors);
    }
    let toml_text = toml_path
        .as_ref()
        .and_then(|p| std::fs::read_to_string(p).ok());
    for t in &toml {
        if let Some(prev) = scanned
            .annotations
            .iter()
            .find(|a| a.kernel == t.annotation.kernel)
        {
            errors.push(
                Diagnostic::new(
                    t.annotation.loc.clone(),
                    format!(
                        "kernel '{}' is annotated here and in its source",
                        t.annotation.kernel
                    ),
                )
                .help(format!(
                    "the pragma at {} already annotates it; keep one",
                    prev.loc
                )),
            );
            continue;
        }
        // An entry that names no source applies to whichever translation unit defines the
        // kernel; one that names this source must match a kernel in it.
        let defined_here = info.functions.iter().any(|f| {
            f.is_global && f.name == t.annotation.kernel.rsplit("::").next().unwrap_or("")
        });
        if t.source.is_some() || defined_here {
            resolve(&t.annotation, toml_text.as_deref(), &mut errors);
        }
    }
    if !errors.is_empty() {
        errors.sort_by(|a, b| a.loc.cmp(&b.loc));
        return Err(Diagnostics(errors).into());
    }
    if specs.is_empty() {
        return Ok(Outcome::Unannotated);
    }
    Ok(Outcome::Annotated(Analysis {
        specs,
        stripped: annotations::strip(&text, &scanned.pragma_lines),
        has_pragmas: scanned.annotations.iter().any(|a| a.style != Style::Toml),
        toml: toml_path,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernels_are_read_from_the_text() {
        let text = "// __global__ void commented(int n)\n\
                    template <int R> __global__ void __launch_bounds__(256, 2) scale(float *x) {}\n\
                    static __global__ void plain(int n);\n\
                    __global__ __attribute__((noinline)) void attr(int) {}\n\
                    /* __global__ void c2() */ __device__ void dev(int) {}\n";
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("t.cu");
        assert_eq!(kernels_by_text(&src, text, &[]), ["scale", "plain", "attr"]);
    }
}
