//! Where libcupti and libcuda are looked for, and opening them.
//!
//! The order is a pure function of the environment ([`cupti_candidates`]), so it is tested
//! without touching the process environment; [`open_first`] tries the candidates and keeps
//! the reason each one failed, so that the error says where it looked.

use crate::error::{Error, Result};
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// One place to look for a library.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Candidate {
    /// A file; skipped (with "not found") when it does not exist.
    File(PathBuf),
    /// A bare name for the dynamic loader's own search (`LD_LIBRARY_PATH`, ld.so.cache).
    Name(&'static str),
}

impl Candidate {
    fn describe(&self) -> String {
        match self {
            Candidate::File(p) => p.display().to_string(),
            Candidate::Name(n) => format!("{n} (default search)"),
        }
    }
}

const CUPTI_NAMES: [&str; 2] = ["libcupti.so.13", "libcupti.so"];

/// The places libcupti is looked for, in order. `env` reads an environment variable.
///
/// `KLARAPTOR_CUPTI` (a file, or a directory holding `libcupti.so.13` / `libcupti.so`) is
/// the only place looked at when it is set: a user who names a library means that one.
/// Otherwise: `$CUDA_HOME/extras/CUPTI/lib64`, `$CUDA_HOME/lib64`, `$CUDA_HOME/lib` (the
/// layout of the PyPI wheels), `/usr/local/cuda/extras/CUPTI/lib64`, `/usr/local/cuda/lib64`,
/// then the loader's default search.
pub fn cupti_candidates(env: &dyn Fn(&str) -> Option<OsString>) -> Vec<Candidate> {
    let in_dir = |dir: PathBuf| {
        CUPTI_NAMES
            .iter()
            .map(move |n| Candidate::File(dir.join(n)))
    };
    if let Some(v) = env("KLARAPTOR_CUPTI").filter(|v| !v.is_empty()) {
        let p = PathBuf::from(v);
        return if p.is_dir() {
            in_dir(p).collect()
        } else {
            vec![Candidate::File(p)]
        };
    }
    let mut dirs = Vec::new();
    if let Some(home) = env("CUDA_HOME").filter(|v| !v.is_empty()) {
        let home = PathBuf::from(home);
        dirs.push(home.join("extras/CUPTI/lib64"));
        dirs.push(home.join("lib64"));
        dirs.push(home.join("lib"));
    }
    dirs.push(PathBuf::from("/usr/local/cuda/extras/CUPTI/lib64"));
    dirs.push(PathBuf::from("/usr/local/cuda/lib64"));
    let mut out: Vec<Candidate> = dirs.into_iter().flat_map(in_dir).collect();
    out.extend(CUPTI_NAMES.iter().map(|n| Candidate::Name(n)));
    out
}

/// The places libcuda (the driver) is looked for: `KLARAPTOR_LIBCUDA` if set, else the
/// loader's search, which finds the copy the CUDA runtime of the process already loaded.
pub fn cuda_candidates(env: &dyn Fn(&str) -> Option<OsString>) -> Vec<Candidate> {
    match env("KLARAPTOR_LIBCUDA").filter(|v| !v.is_empty()) {
        Some(v) => vec![Candidate::File(PathBuf::from(v))],
        None => vec![
            Candidate::Name("libcuda.so.1"),
            Candidate::Name("libcuda.so"),
        ],
    }
}

/// Reads the process environment (the `env` argument of the candidate functions).
pub fn process_env(name: &str) -> Option<OsString> {
    std::env::var_os(name)
}

/// Opens the first candidate that loads and that `wrap` accepts (the bindgen wrappers check
/// that every symbol they need is present). Returns the wrapped library and where it came
/// from.
pub fn open_first<T>(
    library: &'static str,
    hint: &'static str,
    candidates: &[Candidate],
    wrap: impl Fn(libloading::Library) -> std::result::Result<T, libloading::Error>,
) -> Result<(T, PathBuf)> {
    let mut tried = Vec::new();
    for c in candidates {
        let target: &std::ffi::OsStr = match c {
            Candidate::File(p) if !p.exists() => {
                tried.push((c.describe(), "not found".to_string()));
                continue;
            }
            Candidate::File(p) => p.as_os_str(),
            Candidate::Name(n) => n.as_ref(),
        };
        // SAFETY: loading a library runs its initialisers; libcupti and libcuda are the
        // vendor's libraries, whose initialisers are safe to run in any process.
        let lib = match unsafe { libloading::Library::new(target) } {
            Ok(lib) => lib,
            Err(e) => {
                tried.push((c.describe(), e.to_string()));
                continue;
            }
        };
        match wrap(lib) {
            Ok(t) => return Ok((t, PathBuf::from(target))),
            Err(e) => tried.push((c.describe(), format!("loaded, but {e}"))),
        }
    }
    Err(Error::Load {
        library,
        tried,
        hint,
    })
}

/// Opens the NVIDIA Perfworks libraries that sit beside a libcupti file, so that CUPTI's own
/// `dlopen("libnvperf_host.so")` finds them without `LD_LIBRARY_PATH`. Missing ones are
/// skipped: CUPTI then searches as usual.
pub fn preload_nvperf_beside(cupti: &Path) -> Vec<libloading::Library> {
    let Some(dir) = cupti.parent().filter(|d| !d.as_os_str().is_empty()) else {
        return Vec::new();
    };
    ["libnvperf_host.so", "libnvperf_target.so"]
        .iter()
        .map(|n| dir.join(n))
        .filter(|p| p.exists())
        // SAFETY: as in open_first; these are CUPTI's companion libraries.
        .filter_map(|p| unsafe { libloading::Library::new(&p) }.ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<OsString> {
        let m: HashMap<String, OsString> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), OsString::from(v)))
            .collect();
        move |k| m.get(k).cloned()
    }

    fn files(c: &[Candidate]) -> Vec<String> {
        c.iter()
            .map(|c| match c {
                Candidate::File(p) => p.display().to_string(),
                Candidate::Name(n) => format!("name:{n}"),
            })
            .collect()
    }

    #[test]
    fn cupti_search_order_without_overrides() {
        let c = cupti_candidates(&env_of(&[("CUDA_HOME", "/opt/cuda")]));
        assert_eq!(
            files(&c),
            [
                "/opt/cuda/extras/CUPTI/lib64/libcupti.so.13",
                "/opt/cuda/extras/CUPTI/lib64/libcupti.so",
                "/opt/cuda/lib64/libcupti.so.13",
                "/opt/cuda/lib64/libcupti.so",
                "/opt/cuda/lib/libcupti.so.13",
                "/opt/cuda/lib/libcupti.so",
                "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so.13",
                "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so",
                "/usr/local/cuda/lib64/libcupti.so.13",
                "/usr/local/cuda/lib64/libcupti.so",
                "name:libcupti.so.13",
                "name:libcupti.so",
            ]
        );
        let no_home = cupti_candidates(&env_of(&[]));
        assert_eq!(no_home.len(), 6);
        assert_eq!(
            files(&no_home)[0],
            "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so.13"
        );
    }

    #[test]
    fn klaraptor_cupti_is_the_only_place_when_set() {
        let c = cupti_candidates(&env_of(&[
            ("KLARAPTOR_CUPTI", "/x/libcupti.so.13.0"),
            ("CUDA_HOME", "/opt/cuda"),
        ]));
        assert_eq!(files(&c), ["/x/libcupti.so.13.0"]);
        let dir = std::env::temp_dir();
        let c = cupti_candidates(&env_of(&[("KLARAPTOR_CUPTI", dir.to_str().unwrap())]));
        assert_eq!(
            c,
            vec![
                Candidate::File(dir.join("libcupti.so.13")),
                Candidate::File(dir.join("libcupti.so"))
            ]
        );
    }

    #[test]
    fn no_library_anywhere_is_a_clear_error_not_a_panic() {
        let c = [
            Candidate::File(PathBuf::from("/nonexistent/klaraptor/libcupti.so.13")),
            Candidate::Name("libklaraptor-no-such-library.so.13"),
        ];
        let err = open_first("libcupti", "set KLARAPTOR_CUPTI", &c, |lib| {
            // SAFETY: never reached: neither candidate loads.
            unsafe { crate::sys::cupti::Cupti::from_library(lib) }
        })
        .err()
        .expect("nothing can load");
        let s = err.to_string();
        assert!(s.starts_with("could not load libcupti: "), "{s}");
        assert!(
            s.contains("/nonexistent/klaraptor/libcupti.so.13: not found"),
            "{s}"
        );
        assert!(
            s.contains("libklaraptor-no-such-library.so.13 (default search): "),
            "{s}"
        );
        assert!(s.ends_with("; set KLARAPTOR_CUPTI"), "{s}");
    }

    #[test]
    fn a_library_without_the_symbols_is_refused_with_the_missing_symbol() {
        // libm loads everywhere and has none of CUPTI's symbols.
        let c = [Candidate::Name("libm.so.6")];
        let err = open_first("libcupti", "hint", &c, |lib| {
            // SAFETY: the wrapper only looks symbols up; it fails on the first missing one.
            unsafe { crate::sys::cupti::Cupti::from_library(lib) }
        })
        .err()
        .expect("libm is not CUPTI");
        let s = err.to_string();
        assert!(
            s.contains("libm.so.6 (default search): loaded, but "),
            "{s}"
        );
        assert!(s.contains("cupti"), "{s}");
    }
}
