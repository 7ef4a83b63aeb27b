//! The klaraptor runtime (runtime-shim/, compiled by build.rs) travels inside the
//! `klaraptor-cc` binary, so an installed `klaraptor-cc` is self-contained.
//!
//! Every object klaraptor-cc instruments carries the runtime (the shim and the profiling
//! runtime, [`EMBEDDED`]): its symbols are weak and hidden, so that any number of such
//! objects link with any linker (g++, clang++, nvcc; directly, from a static library, into
//! a shared library) and the linker keeps one copy per executable or shared library
//! (runtime-shim/src/klaraptor_embed.c says how).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

/// The runtime every instrumented object carries, as build.rs made it.
pub const EMBEDDED: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/klaraptor_rt_embedded.o"));

/// The launch entry point of the carried runtime: an instrumented object's calls of the CUDA
/// runtime's `__cudaLaunchKernel` are renamed to it, so that the carried profiling runtime
/// sees them when asked to profile (it passes every launch on otherwise).
pub const LAUNCH_ENTRY: &str = "klaraptor__launch_kernel";

/// Writes the carried runtime object into `dir` and returns its path.
pub fn embedded(dir: &Path) -> Result<PathBuf> {
    let p = dir.join("klaraptor_rt_embedded.o");
    std::fs::write(&p, EMBEDDED).with_context(|| format!("writing {}", p.display()))?;
    Ok(p)
}

/// `objcopy`: `KLARAPTOR_OBJCOPY`, else `objcopy` on the PATH.
pub fn objcopy() -> PathBuf {
    std::env::var_os("KLARAPTOR_OBJCOPY")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("objcopy"))
}

/// Copies the instrumented object `from` to `to` with its launches through the carried
/// runtime's entry point ([`LAUNCH_ENTRY`]), and its file symbol named `source_name` instead
/// of nvcc's temporary file (`tmpxft_<pid>_…`), so that two compiles of the same source
/// give the same bytes.
pub fn route_launches(from: &Path, to: &Path, source_name: &str, verbose: bool) -> Result<()> {
    let bytes = std::fs::read(from).with_context(|| format!("reading {}", from.display()))?;
    let mut cmd = Command::new(objcopy());
    cmd.arg(format!("--redefine-sym=__cudaLaunchKernel={LAUNCH_ENTRY}"));
    for (t, stable) in temp_name_targets(&nvcc_temp_names(&bytes), source_name) {
        cmd.arg(format!("--redefine-sym={t}={stable}"));
    }
    cmd.arg(from).arg(to);
    if verbose {
        crate::kl_eprintln!("klaraptor-cc: running {cmd:?}");
    }
    let out = cmd.output().with_context(|| {
        format!(
            "cannot run {} (binutils; KLARAPTOR_OBJCOPY names another)",
            objcopy().display()
        )
    })?;
    if !out.status.success() {
        bail!(
            "objcopy failed on {}:\n{}",
            from.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// What each of nvcc's temporary file names becomes: the host translation unit
/// (`….cudafe1.cpp`, the object's file symbol) the source's name, any other (with `-g` the
/// object also names the stub and the fatbin file) its name without the per-compile
/// `tmpxft_<pid>_<n>-<k>_` prefix. objcopy refuses two renames to one name, and each target
/// is the same at every compile.
fn temp_name_targets(names: &[String], source_name: &str) -> Vec<(String, String)> {
    let stable = |t: &str| -> String {
        let rest = t.strip_prefix("tmpxft_").unwrap_or(t);
        // <pid>_<n>-<k>_<rest>: the rest after the second `_`
        rest.splitn(3, '_').nth(2).unwrap_or(rest).to_string()
    };
    let mut out: Vec<(String, String)> = Vec::new();
    for t in names {
        let target = if names.len() == 1 || stable(t).ends_with(".cudafe1.cpp") {
            source_name.to_string()
        } else {
            stable(t)
        };
        if !out.iter().any(|(_, x)| *x == target) {
            out.push((t.clone(), target));
        }
    }
    out
}

/// The names of nvcc's temporary files in an object's string table (`tmpxft_` up to the
/// terminating NUL, preceded by a NUL: whole strings only).
fn nvcc_temp_names(bytes: &[u8]) -> Vec<String> {
    const PREFIX: &[u8] = b"\0tmpxft_";
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while let Some(at) = bytes[i..].windows(PREFIX.len()).position(|w| w == PREFIX) {
        let start = i + at + 1;
        let len = bytes[start..]
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(bytes.len() - start);
        let name = &bytes[start..start + len];
        let plain = name
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || b"._-+".contains(&b));
        if plain && len < 256 {
            let s = String::from_utf8_lossy(name).into_owned();
            if !out.contains(&s) {
                out.push(s);
            }
        }
        i = start + len;
    }
    out
}

/// Whether `bytes` (an object, archive or binary) calls the runtime (as
/// [`crate::instrument::needs_runtime`] reads a file).
pub fn calls_runtime(bytes: &[u8]) -> bool {
    klaraptor_passes::inject::ENTRY_FNS.iter().any(|f| {
        let needle = f.as_bytes();
        bytes.windows(needle.len()).any(|w| w == needle)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With `-g` an object names three of nvcc's temporary files: each gets its own target
    /// (objcopy refuses two renames to one name), the host unit the source's name, and the
    /// targets do not change from compile to compile.
    #[test]
    fn temporary_names_get_distinct_stable_targets() {
        let names: Vec<String> = [
            "tmpxft_000028b7_00000000-6_x.cudafe1.stub.c",
            "tmpxft_000028b7_00000000-3_x.fatbin.c",
            "tmpxft_000028b7_00000000-6_x.cudafe1.cpp",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let t = temp_name_targets(&names, "x.cu");
        let targets: Vec<&str> = t.iter().map(|(_, x)| x.as_str()).collect();
        assert_eq!(targets, ["x.cudafe1.stub.c", "x.fatbin.c", "x.cu"]);
        let other: Vec<String> = names.iter().map(|n| n.replace("28b7", "9f01")).collect();
        let t2 = temp_name_targets(&other, "x.cu");
        assert_eq!(
            t2.iter().map(|(_, x)| x.as_str()).collect::<Vec<_>>(),
            targets
        );
        // without -g: the one name is the source's
        let one = vec!["tmpxft_00001234_00000000-6_x.cudafe1.cpp".to_string()];
        assert_eq!(temp_name_targets(&one, "x.cu")[0].1, "x.cu");
    }
}
