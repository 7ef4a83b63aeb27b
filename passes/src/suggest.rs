//! `klaraptor suggest`: the annotation klaraptor would infer for each `<<<…>>>` launch of a
//! `__global__` kernel in a source, read with the same libclang front end as the compile
//! ([`crate::clang::launch_sites`]).
//!
//! For every launch it proposes the one-line form, `#pragma klaraptor kernel(k)` with
//! `dim(d)` when the block is built with d > 1 values: the data are then the threads the
//! launch runs per block axis and the blocks must divide them exactly (docs/annotations.md),
//! which is right for any kernel that indexes by its global thread id, bounds check or not.
//! Where the kernel has integer parameters that look like sizes (the launch passes them a
//! value its grid is computed from, or they are named like one: `n`, `size`, `rows`, …), it
//! adds a commented fuller form naming them with `data(…)` and `grid(…)`, for a kernel that
//! checks its bounds against them. A launch whose block it cannot read is a warning: the
//! pragma then needs `dim(…)` from its author.

use std::fmt::Write as _;
use std::path::Path;

use crate::clang::{launch_sites, ClangConfig, ClangError, LaunchSite};

/// What `klaraptor suggest` says of one launch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Suggestion {
    pub site: LaunchSite,
    /// The block dimensions the pragma gets (1 when the block cannot be read).
    pub dim: u8,
    /// The one-line pragma.
    pub pragma: String,
    /// The fuller form for a kernel that checks its bounds against its size arguments
    /// ([`Self::sizes`]).
    pub fuller: Option<String>,
    /// The kernel's parameters that look like sizes.
    pub sizes: Vec<String>,
    /// Why the suggestion may be wrong (a block or grid klaraptor cannot read, a grid with
    /// more axes than the block).
    pub warnings: Vec<String>,
}

/// The suggestions for every launch in `source`, and libclang's errors.
pub fn suggest(
    source: &Path,
    cfg: &ClangConfig,
) -> Result<(Vec<Suggestion>, Vec<String>), ClangError> {
    let (sites, errors) = launch_sites(source, cfg)?;
    Ok((sites.into_iter().map(suggestion).collect(), errors))
}

/// Names that a size argument is often given.
const SIZE_NAMES: &[&str] = &[
    "n", "len", "length", "size", "count", "num", "rows", "cols", "width", "height", "depth", "w",
    "h", "d", "nx", "ny", "nz", "m", "k", "elems", "elements", "total",
];

fn looks_like_size(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    SIZE_NAMES.contains(&lower.as_str())
        || ["num_", "n_", "size_", "len_"]
            .iter()
            .any(|p| lower.starts_with(p))
        || ["_size", "_len", "_count", "_num"]
            .iter()
            .any(|p| lower.ends_with(p))
}

/// Whether `word` occurs in `text` as a whole identifier.
fn mentions(text: &str, word: &str) -> bool {
    if word.is_empty() {
        return false;
    }
    let is_id = |c: char| c.is_ascii_alphanumeric() || c == '_';
    text.match_indices(word).any(|(i, _)| {
        !text[..i].chars().next_back().is_some_and(is_id)
            && !text[i + word.len()..].chars().next().is_some_and(is_id)
    })
}

fn suggestion(site: LaunchSite) -> Suggestion {
    let mut warnings = Vec::new();
    let dim = match site.block_dims {
        Some(d) => d,
        None => {
            warnings.push(format!(
                "klaraptor cannot read how many dimensions the block `{}` has (a dim3 from a \
                 parameter, a field or a call): the pragma below assumes 1; give dim(2) or \
                 dim(3) if the kernel uses blockDim.y or .z",
                site.config.get(1).map_or("", String::as_str)
            ));
            1
        }
    };
    if let Some(g) = site.grid_dims.filter(|g| *g > dim) {
        warnings.push(format!(
            "the grid `{}` has {g} dimensions and the block {dim}: in the one-line form a \
             launch whose grid spreads over an axis the block does not keeps its own shape; \
             annotate it with data(…) and a grid(…) formula per axis",
            site.config.first().map_or("", String::as_str)
        ));
    }
    if site.config.len() > 2 && !site.config[2].trim().chars().all(|c| c.is_ascii_digit()) {
        warnings.push(format!(
            "its dynamic shared memory `{}` may follow the block: if it does in a way \
             klaraptor cannot read, add shmem(…) (docs/annotations.md)",
            site.config[2]
        ));
    }
    let name = if site.qualified_name.is_empty() {
        site.kernel.clone()
    } else {
        site.qualified_name.clone()
    };
    let pragma = if dim > 1 {
        format!("#pragma klaraptor kernel({name}) dim({dim})")
    } else {
        format!("#pragma klaraptor kernel({name})")
    };
    // Size arguments: integer parameters the grid is computed from, else named like sizes.
    let grid = site.config.first().cloned().unwrap_or_default();
    let integer: Vec<(usize, &crate::clang::KernelParam)> = site
        .params
        .iter()
        .enumerate()
        .filter(|(_, p)| p.is_integer && !p.name.is_empty())
        .collect();
    let mut sizes: Vec<&crate::clang::KernelParam> = integer
        .iter()
        .filter(|(i, _)| {
            site.args.get(*i).is_some_and(|a| {
                let a = a.trim();
                !a.is_empty()
                    && a.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                    && mentions(&grid, a)
            })
        })
        .map(|(_, p)| *p)
        .collect();
    if sizes.is_empty() {
        sizes = integer
            .iter()
            .filter(|(_, p)| looks_like_size(&p.name))
            .map(|(_, p)| *p)
            .collect();
    }
    sizes.truncate(usize::from(dim).max(1));
    let fuller = (!sizes.is_empty()).then(|| {
        let labels: Vec<String> = if sizes.len() == 1 {
            vec!["N".to_string()]
        } else {
            (1..=sizes.len()).map(|i| format!("N{i}")).collect()
        };
        let data: Vec<String> = labels
            .iter()
            .zip(&sizes)
            .map(|(l, p)| format!("{l}={}", p.name))
            .collect();
        let grid: Vec<String> = (0..usize::from(dim))
            .map(|i| {
                format!(
                    "ceil({}, {})",
                    labels[i.min(labels.len() - 1)],
                    ["bx", "by", "bz"][i]
                )
            })
            .collect();
        let mut t = format!("#pragma klaraptor kernel({name}) data({})", data.join(", "));
        if dim > 1 {
            let _ = write!(t, " dim({dim})");
        }
        let _ = write!(t, " grid({})", grid.join(", "));
        t
    });
    let sizes = sizes.iter().map(|p| p.name.clone()).collect();
    Suggestion {
        site,
        dim,
        pragma,
        fuller,
        sizes,
        warnings,
    }
}

/// The text `klaraptor suggest` prints for `suggestions` of one source: per launch its
/// location and text, then the pragma to write above the kernel's definition.
pub fn render(suggestions: &[Suggestion], show: &dyn Fn(&Path) -> String) -> String {
    let mut out = String::new();
    for s in suggestions {
        let site = &s.site;
        let caller = if site.caller.is_empty() {
            String::new()
        } else {
            format!(" (in {})", site.caller)
        };
        let text: String = site.text.split_whitespace().collect::<Vec<_>>().join(" ");
        let _ = writeln!(
            out,
            "{}:{}:{}: launch of {}{caller}: {text}",
            show(&site.file),
            site.line,
            site.col,
            site.kernel
        );
        for w in &s.warnings {
            let _ = writeln!(
                out,
                "{}:{}:{}: warning: {w}",
                show(&site.file),
                site.line,
                site.col
            );
        }
        let _ = writeln!(
            out,
            "  above its definition ({}:{}):",
            show(&site.kernel_file),
            site.kernel_line
        );
        let _ = writeln!(out, "  {}", s.pragma);
        if let Some(f) = &s.fuller {
            let _ = writeln!(
                out,
                "  // or, if {} checks its bounds against {} (any block is then correct):",
                site.kernel,
                s.sizes.join(" and ")
            );
            let _ = writeln!(out, "  // {f}");
        }
        out.push('\n');
    }
    out
}
