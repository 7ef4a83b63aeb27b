//! The front-end of one translation unit: annotations from its pragmas and from the
//! `klaraptor.toml` beside it, checked against the source with libclang.

use std::path::{Path, PathBuf};

use crate::annotations::{self, KernelAnnotation};
use crate::clang::{self, ClangConfig};
use crate::config;
use crate::diag::{Diagnostic, Diagnostics};
use crate::spec::{self, KernelSpec};

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
    /// Whether the source text itself holds our pragmas (else only `klaraptor.toml` applies).
    pub has_pragmas: bool,
    pub toml: Option<PathBuf>,
}

#[derive(Debug, thiserror::Error)]
pub enum FrontendError {
    #[error("{0}")]
    User(Diagnostics),
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
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

/// Reads `source`'s annotations without libclang: the pragmas, and the entries of the
/// `klaraptor.toml` beside it that may apply. Fast; used to decide whether a translation
/// unit needs klaraptor at all.
pub fn annotations_of(
    source: &Path,
    text: &str,
) -> Result<
    (
        annotations::Scanned,
        Vec<config::TomlKernel>,
        Option<PathBuf>,
    ),
    Diagnostics,
> {
    let scanned = if annotations::mentions_annotations(text) {
        annotations::scan(source, text)?
    } else {
        annotations::Scanned::default()
    };
    let toml_path = annotations::toml_path_for(source);
    let (toml, toml_path) = if toml_path.is_file() {
        let me = source.canonicalize().ok();
        let entries = config::load(&toml_path)?
            .into_iter()
            .filter(|k| match &k.source {
                Some(s) => s.canonicalize().ok() == me && me.is_some(),
                None => true,
            })
            .collect();
        (entries, Some(toml_path))
    } else {
        (Vec::new(), None)
    };
    Ok((scanned, toml, toml_path))
}

/// The whole front-end for one translation unit.
pub fn analyze(source: &Path, cfg: &ClangConfig) -> Result<Outcome, FrontendError> {
    let text = std::fs::read_to_string(source).map_err(|e| FrontendError::Read {
        path: source.to_path_buf(),
        source: e,
    })?;
    let (scanned, toml, toml_path) = annotations_of(source, &text)?;
    if scanned.annotations.is_empty() && toml.is_empty() {
        return Ok(Outcome::Unannotated);
    }
    let mut names: Vec<&str> = scanned
        .annotations
        .iter()
        .map(|a| a.kernel.as_str())
        .collect();
    names.extend(toml.iter().map(|t| t.annotation.kernel.as_str()));
    let short: Vec<&str> = names
        .iter()
        .map(|n| n.rsplit("::").next().unwrap_or(n))
        .collect();
    let info = clang::inspect(source, &short, cfg)?;
    if info.has_errors() {
        return Ok(Outcome::SourceErrors(info.diagnostics));
    }

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
        resolve(a, Some(&text), &mut errors);
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
        has_pragmas: !scanned.pragma_lines.is_empty(),
        toml: toml_path,
    }))
}
