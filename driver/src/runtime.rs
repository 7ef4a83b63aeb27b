//! The klaraptor runtime (runtime-shim/, compiled by build.rs) travels inside the
//! `klaraptor-cc` binary and is written out for each link that needs it, so an installed
//! `klaraptor-cc` is self-contained.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// `libklaraptor_rt.a`, as build.rs compiled it.
pub const ARCHIVE: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/libklaraptor_rt.a"));

/// Writes the runtime archive into `dir` and returns its path.
pub fn archive(dir: &Path) -> Result<PathBuf> {
    let p = dir.join("libklaraptor_rt.a");
    std::fs::write(&p, ARCHIVE).with_context(|| format!("writing {}", p.display()))?;
    Ok(p)
}
