//! The files of a translation unit that may hold annotations, found without a compiler: the
//! main file and, recursively, every file it includes with quotes (`#include "…"`).
//!
//! Quoted includes are resolved as the preprocessor resolves them: in the directory of the
//! including file first, then in the `-iquote` directories, then in the `-I` directories,
//! in command-line order. A name found nowhere there is left alone: it is a system header
//! (found in an `-isystem` or built-in directory), or missing, which is the compiler's to
//! report. Angle-bracket includes (`#include <…>`) are not followed.
//!
//! This is a textual reading: every quoted include outside comments is followed, including
//! those inside `#if 0` or a branch the preprocessor would not take, and an include spelled
//! through a macro (`#include KERNELS`) is not. The full front-end asks libclang which files
//! the translation unit really includes ([`crate::source::SourceInfo::inclusions`]).

use std::collections::HashSet;
use std::path::{Component, Path, PathBuf};

/// One file of a translation unit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnitFile {
    /// The file as the preprocessor names it: the main file as given; an included file
    /// as the including file's directory (or the search directory it was found in) joined
    /// with the name the directive spells.
    pub path: PathBuf,
    /// Its canonical path (absolute, symlinks resolved), which identifies it.
    pub canonical: PathBuf,
    pub text: String,
}

/// The directories in which `#include "…"` looks after the including file's own, in
/// order, from clang-style arguments: `-iquote DIR` / `-iquoteDIR` first, then
/// `-I DIR` / `-IDIR` / `--include-directory=DIR` / `--include-directory DIR`.
pub fn quote_search_dirs(args: &[String]) -> Vec<PathBuf> {
    let mut quote = Vec::new();
    let mut angled = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let (list, value) = if let Some(v) = a.strip_prefix("-iquote") {
            (&mut quote, v)
        } else if let Some(v) = a.strip_prefix("--include-directory=") {
            (&mut angled, v)
        } else if a == "--include-directory" {
            (&mut angled, "")
        } else if let Some(v) = a.strip_prefix("-I") {
            (&mut angled, v)
        } else {
            continue;
        };
        // `-I-` is an old GCC spelling that changes how the search works, not a directory.
        if value == "-" {
            continue;
        }
        let value = if value.is_empty() {
            match it.next() {
                Some(v) => v.as_str(),
                None => break,
            }
        } else {
            value
        };
        list.push(PathBuf::from(value));
    }
    quote.extend(angled);
    quote
}

/// The names of the quoted `#include` directives of `text`, in order, with their 1-based
/// lines. Directives inside block or line comments are skipped.
pub fn quoted_includes(text: &str) -> Vec<(u32, String)> {
    let mut out = Vec::new();
    let mut in_comment = false;
    for (i, line) in text.lines().enumerate() {
        let mut rest = line;
        if in_comment {
            match rest.find("*/") {
                Some(end) => {
                    rest = &rest[end + 2..];
                    in_comment = false;
                }
                None => continue,
            }
        }
        // A directive may follow a comment that closes on its line (`/* … */ #include`).
        let mut code = rest.trim_start();
        while let Some(after) = code.strip_prefix("/*") {
            match after.find("*/") {
                Some(end) => code = after[end + 2..].trim_start(),
                None => {
                    in_comment = true;
                    code = "";
                }
            }
        }
        if let Some(name) = include_name(code) {
            out.push((i as u32 + 1, name.to_string()));
        }
        // Whether a block comment opens on this line and stays open.
        let mut s = code;
        while let Some(open) = crate::annotations::find_outside_strings(s, "/*") {
            match s[open + 2..].find("*/") {
                Some(close) => s = &s[open + 2 + close + 2..],
                None => {
                    in_comment = true;
                    break;
                }
            }
        }
    }
    out
}

/// `name` for a line `# include "name"` (any spacing), else `None`.
fn include_name(line: &str) -> Option<&str> {
    let d = line.strip_prefix('#')?.trim_start();
    let d = d.strip_prefix("include")?;
    let d = d.trim_start().strip_prefix('"')?;
    let end = d.find('"')?;
    (end > 0).then(|| &d[..end])
}

/// Where the preprocessor finds `#include "name"` written in `includer`, searching `dirs`
/// after the includer's directory; `None` if not there (a system header, or missing).
pub fn resolve_quoted(name: &str, includer: &Path, dirs: &[PathBuf]) -> Option<PathBuf> {
    let name = Path::new(name);
    if name.is_absolute() {
        return name.is_file().then(|| name.to_path_buf());
    }
    let own = includer.parent().unwrap_or(Path::new(""));
    std::iter::once(own)
        .chain(dirs.iter().map(PathBuf::as_path))
        .map(|d| tidy(&d.join(name)))
        .find(|p| p.is_file())
}

/// `p` without `.` components (`./more.cu` is `more.cu`), as a reader would write it.
pub fn tidy(p: &Path) -> PathBuf {
    let out: PathBuf = p
        .components()
        .filter(|c| !matches!(c, Component::CurDir))
        .collect();
    if out.as_os_str().is_empty() {
        PathBuf::from(".")
    } else {
        out
    }
}

/// The canonical path of `p`, or `p` itself when it cannot be resolved.
pub fn canonical(p: &Path) -> PathBuf {
    std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf())
}

/// Reads a file as text (invalid UTF-8 replaced), or `None` when it cannot be read.
pub fn read_text(path: &Path) -> Option<String> {
    std::fs::read(path).ok().map(|b| {
        String::from_utf8(b).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
    })
}

/// The main file `source` (whose contents are `text`) and every file it includes with
/// quotes, recursively, each once (by canonical path), in the order the preprocessor
/// first meets them. Files that cannot be read are skipped.
pub fn quoted_closure(source: &Path, text: &str, dirs: &[PathBuf]) -> Vec<UnitFile> {
    let main = UnitFile {
        path: source.to_path_buf(),
        canonical: canonical(source),
        text: text.to_string(),
    };
    let mut seen: HashSet<PathBuf> = HashSet::from([main.canonical.clone()]);
    let mut out = Vec::new();
    // Depth first, each file's includes in order: the preprocessor's order.
    fn walk(
        file: UnitFile,
        dirs: &[PathBuf],
        seen: &mut HashSet<PathBuf>,
        out: &mut Vec<UnitFile>,
    ) {
        let includes = quoted_includes(&file.text);
        let path = file.path.clone();
        out.push(file);
        for (_, name) in includes {
            let Some(found) = resolve_quoted(&name, &path, dirs) else {
                continue;
            };
            let c = canonical(&found);
            if !seen.insert(c.clone()) {
                continue;
            }
            let Some(text) = read_text(&found) else {
                continue;
            };
            walk(
                UnitFile {
                    path: found,
                    canonical: c,
                    text,
                },
                dirs,
                seen,
                out,
            );
        }
    }
    walk(main, dirs, &mut seen, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn search_dirs_quote_first_then_include() {
        assert_eq!(
            quote_search_dirs(&args(&[
                "-Ia",
                "-DX=1",
                "-I",
                "b",
                "-iquote",
                "q",
                "--include-directory=c",
                "-isystem",
                "s",
                "-iquoteq2",
                "-I-",
                "--include-directory",
                "d",
            ])),
            ["q", "q2", "a", "b", "c", "d"].map(PathBuf::from)
        );
    }

    #[test]
    fn quoted_includes_outside_comments() {
        let text = "#include <cstdio>\n#include \"a.cuh\"\n  #  include   \"sub/b.cu\" // x\n\
                    // #include \"no1.h\"\n/* #include \"no2.h\"\n#include \"no3.h\"\n*/\n\
                    /* c */ #include \"c.h\"\nint x; /* open\n#include \"no4.h\" */\n\
                    #include_next \"no5.h\"\n#include MACRO\n";
        assert_eq!(
            quoted_includes(text),
            [
                (2, "a.cuh".to_string()),
                (3, "sub/b.cu".to_string()),
                (8, "c.h".to_string())
            ]
        );
    }

    #[test]
    fn tidy_drops_current_directory_components() {
        assert_eq!(tidy(Path::new("./a/./b.cu")), PathBuf::from("a/b.cu"));
        assert_eq!(tidy(Path::new("more.cu")), PathBuf::from("more.cu"));
        assert_eq!(tidy(Path::new("./")), PathBuf::from("."));
    }
}
