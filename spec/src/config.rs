//! `klaraptor.toml`: the annotations of a directory's kernels, for users who will not touch
//! their sources. The same information as `#pragma klaraptor`, in the same expression
//! language:
//!
//! ```toml
//! [kernel.gemm]
//! source = "gemm.cu"                      # optional: the file that defines the kernel
//! data = ["NI=3", "NJ=4", "NK=5"]         # LABEL=INDEX, LABEL=ARGUMENT or ARGUMENT; default:
//!                                         # the launch's threads NX, NY, NZ (the one-line form)
//! dim = 2
//! grid = ["ceil(NJ, bx)", "ceil(NI, by)"] # default: ceil(<data i>, b<i>)
//! block = ["bx * by >= 32"]               # all must hold
//! shmem = "bx * by * 4"                   # dynamic shared memory for a block shape (optional)
//! profile = { run = "./gemm {NI} {NJ} {NK}", sizes = [64, 128, [256, 256, 128]] }
//! ```

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use toml::Spanned;

use crate::annotations::{default_grid, ArgRef, DataParam, KernelAnnotation, ProfileRecipe, Style};
use crate::diag::{Diagnostic, Diagnostics, Location};
use crate::expr;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    kernel: BTreeMap<String, Spanned<Entry>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    source: Option<Spanned<String>>,
    data: Option<Spanned<Vec<Spanned<String>>>>,
    dim: Option<Spanned<i64>>,
    grid: Option<Spanned<Vec<Spanned<String>>>>,
    #[serde(default)]
    block: Vec<Spanned<String>>,
    shmem: Option<Spanned<String>>,
    profile: Option<Spanned<Profile>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Profile {
    run: Spanned<String>,
    sizes: Spanned<Vec<Spanned<Size>>>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Size {
    One(i64),
    Tuple(Vec<i64>),
}

/// A kernel entry of a `klaraptor.toml`, with the source it is tied to (if it names one).
#[derive(Debug, Clone, PartialEq)]
pub struct TomlKernel {
    pub annotation: KernelAnnotation,
    pub source: Option<PathBuf>,
    /// Where the entry's `source = "…"` value is written.
    pub source_loc: Option<Location>,
}

/// Reads a `klaraptor.toml`.
pub fn load(path: &Path) -> Result<Vec<TomlKernel>, Diagnostics> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Diagnostic::new(Location::new(path, 1, 1), format!("cannot read: {e}")))?;
    parse(path, &text)
}

/// Parses the text of a `klaraptor.toml` found at `path`.
pub fn parse(path: &Path, text: &str) -> Result<Vec<TomlKernel>, Diagnostics> {
    let at = |off: usize| {
        let before = &text[..off.min(text.len())];
        let line = before.matches('\n').count() as u32 + 1;
        let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) as u32 + 1;
        Location::new(path, line, col)
    };
    let err = |span: Range<usize>, m: String, help: &str| {
        Diagnostics(vec![Diagnostic::new(at(span.start), m)
            .help(help)
            .with_source(text)])
    };
    let file: File = toml::from_str(text).map_err(|e| {
        let span = e.span().unwrap_or(0..0);
        err(
            span,
            e.message().trim().to_string(),
            "see the klaraptor.toml reference in docs/annotations.md",
        )
    })?;
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut out = Vec::new();
    for (name, entry) in file.kernel {
        let entry_span = entry.span();
        let e = entry.into_inner();
        // Strings are basic TOML strings: the text starts one byte after the quote.
        let inside = |s: &Spanned<String>, off: usize| s.span().start + 1 + off;
        let mut data = Vec::new();
        for d in e.data.iter().flat_map(|d| d.get_ref()) {
            let t = d.get_ref();
            let (label, arg) = match t.split_once('=') {
                Some((l, a)) => (l.trim(), a.trim()),
                None => (t.trim(), t.trim()),
            };
            let arg = match arg.parse::<usize>() {
                Ok(i) => ArgRef::Index(i),
                Err(_) => ArgRef::Name(arg.to_string()),
            };
            let ok_label = label
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !expr::BLOCK_VARS.contains(&label)
                && !expr::FUNCTIONS.contains(&label);
            if !ok_label || matches!(&arg, ArgRef::Name(a) if a.is_empty()) {
                return Err(err(d.span(), format!("'{t}' is not a data parameter"), "write \"LABEL=INDEX\", \"LABEL=ARGUMENT\" or \"ARGUMENT\", e.g. data = [\"N=3\"]"));
            }
            data.push(DataParam {
                label: label.into(),
                arg,
                loc: at(inside(d, 0)),
            });
        }
        if let Some(d) = e.data.as_ref().filter(|_| data.is_empty()) {
            return Err(err(
                d.span(),
                format!("kernel '{name}' has an empty data list"),
                "name at least one data-size argument, e.g. data = [\"N=3\"]",
            ));
        }
        let dim = match &e.dim {
            None => 1,
            Some(d) => match *d.get_ref() {
                v @ 1..=3 => v as u8,
                v => {
                    return Err(err(
                        d.span(),
                        format!("expected 1, 2 or 3, found {v}"),
                        "dim is the number of block dimensions the kernel uses",
                    ))
                }
            },
        };
        // Without data, the one-line form: the threads the launch runs per block axis.
        if e.data.is_none() {
            data = crate::annotations::launch_data(dim, &at(entry_span.start));
        }
        let labels: Vec<&str> = data.iter().map(|d| d.label.as_str()).collect();
        let grid = match &e.grid {
            None => default_grid(&data, dim),
            Some(g) => {
                if g.get_ref().len() < dim as usize || g.get_ref().len() > 3 {
                    return Err(err(
                        g.span(),
                        format!(
                            "grid gives {} formula(s) but the kernel has {dim} block dimension(s)",
                            g.get_ref().len()
                        ),
                        "give one formula per grid axis: at least one per block dimension, at most 3",
                    ));
                }
                let mut out = Vec::new();
                for f in g.get_ref() {
                    let parsed = expr::parse_int(f.get_ref(), &labels).map_err(|x| {
                        Diagnostics(vec![
                            Diagnostic::new(at(inside(f, x.offset)), x.message).with_source(text)
                        ])
                    })?;
                    if let Some(v) = parsed
                        .vars()
                        .into_iter()
                        .find(|v| expr::BLOCK_VARS[dim as usize..].contains(v))
                    {
                        return Err(err(
                            f.span(),
                            format!(
                                "grid formula uses '{v}', but the kernel has {dim} dimension(s)"
                            ),
                            "use only the block dimensions the kernel has",
                        ));
                    }
                    out.push(parsed);
                }
                out
            }
        };
        let mut constraints = if e.data.is_none() && e.grid.is_none() {
            crate::annotations::exact_cover(dim)
        } else {
            Vec::new()
        };
        for b in &e.block {
            constraints.push(expr::parse_bool(b.get_ref(), &labels).map_err(|x| {
                Diagnostics(vec![
                    Diagnostic::new(at(inside(b, x.offset)), x.message).with_source(text)
                ])
            })?);
        }
        let shmem = match &e.shmem {
            None => None,
            Some(f) => {
                let parsed = expr::parse_int(f.get_ref(), &labels).map_err(|x| {
                    Diagnostics(vec![Diagnostic::new(at(inside(f, x.offset)), x.message)
                        .help(crate::annotations::SHMEM_HELP)
                        .with_source(text)])
                })?;
                crate::annotations::check_shmem(&parsed, dim)
                    .map_err(|m| err(f.span(), m, crate::annotations::SHMEM_HELP))?;
                crate::annotations::check_shmem_fits(&parsed, dim, &labels, &constraints)
                    .map_err(|m| err(f.span(), m, crate::annotations::SHMEM_FITS_HELP))?;
                Some(parsed)
            }
        };
        let profile = match e.profile {
            None => None,
            Some(p) => {
                let p = p.into_inner();
                if p.run.get_ref().trim().is_empty() {
                    return Err(err(p.run.span(), "profile.run is empty".into(), "give the command that runs the program, with {LABEL} for each data parameter"));
                }
                if let Err((message, fix)) =
                    crate::annotations::check_recipe_placeholders(p.run.get_ref(), &labels)
                {
                    let fix = fix.unwrap_or_else(|| {
                        "give the command that runs the program, with {LABEL} for each data \
                         parameter (or {SIZES} for all the sizes at once)"
                            .to_string()
                    });
                    return Err(err(p.run.span(), format!("profile.run {message}"), &fix));
                }
                let mut sizes = Vec::new();
                for s in p.sizes.get_ref() {
                    let row = match s.get_ref() {
                        Size::One(v) => vec![*v; data.len()],
                        Size::Tuple(v) => v.clone(),
                    };
                    if row.len() != data.len() || row.iter().any(|&v| v <= 0) {
                        return Err(err(s.span(), format!("each profile size is a positive integer, or a list of {} positive integers (one per data parameter)", data.len()), "e.g. sizes = [64, 128, 256]"));
                    }
                    sizes.push(row);
                }
                if sizes.is_empty() {
                    return Err(err(
                        p.sizes.span(),
                        "the list of profile sizes is empty".into(),
                        "e.g. sizes = [64, 128, 256]",
                    ));
                }
                Some(ProfileRecipe {
                    run: p.run.into_inner(),
                    sizes,
                })
            }
        };
        out.push(TomlKernel {
            annotation: KernelAnnotation {
                kernel: name,
                data,
                dim,
                grid,
                constraints,
                shmem,
                profile,
                loc: at(entry_span.start),
                style: Style::Toml,
            },
            source_loc: e.source.as_ref().map(|s| at(inside(s, 0))),
            source: e.source.map(|s| dir.join(s.into_inner())),
        });
    }
    Ok(out)
}
