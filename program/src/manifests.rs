//! The manifests of rational programs carried inside objects and binaries: section
//! `.klaraptor_model`, one JSON manifest per program between two marker lines, written by a
//! klaraptor link and read back by `klaraptor inspect` and by later links.

use std::path::Path;

use anyhow::{Context, Result};
use klaraptor_spec::link::{c_literal, find};

use crate::rational::RationalProgram;

const MODEL_BEGIN: &str = "KLARAPTOR-MODEL-BEGIN v1\n";

const MODEL_END: &str = "\nKLARAPTOR-MODEL-END\n";

/// The C that embeds the manifests of `programs` (the rational programs the object or
/// binary carries) in section `.klaraptor_model`: what `klaraptor inspect` reads from a
/// binary that no klaraptor link wrote a models directory for, and what tells a klaraptor
/// link which programs its inputs carry already.
pub fn c_models_section(programs: &[RationalProgram]) -> Result<String> {
    let mut c = String::from(
        "/* Manifests of the rational programs this object carries (klaraptor-program, manifests.rs). */\n",
    );
    for (i, p) in programs.iter().enumerate() {
        let json = serde_json::to_string(p).context("serialising a rational program")?;
        let lit = c_literal(&format!("{MODEL_BEGIN}{json}{MODEL_END}"));
        c.push_str(&format!(
            "__attribute__((section(\".klaraptor_model\"), used, aligned(1)))\nstatic const char kl_model_manifest_{i}[] =\n  {lit};\n"
        ));
    }
    Ok(c)
}

/// The manifests of the rational programs embedded in `bytes` (an object, archive or
/// binary), one per (kernel, device, code hash), in order of appearance.
pub fn scan_models(bytes: &[u8], origin: &Path) -> Result<Vec<RationalProgram>> {
    let mut out: Vec<RationalProgram> = Vec::new();
    let b = MODEL_BEGIN.as_bytes();
    let mut i = 0;
    while let Some(at) = find(&bytes[i..], b) {
        let start = i + at + b.len();
        let Some(len) = find(&bytes[start..], MODEL_END.as_bytes()) else {
            break;
        };
        let p: RationalProgram =
            serde_json::from_slice(&bytes[start..start + len]).with_context(|| {
                format!(
                    "{}: cannot read an embedded rational program manifest (built by another \
                     klaraptor-cc version? rebuild it)",
                    origin.display()
                )
            })?;
        let same = |q: &RationalProgram| {
            q.mangled == p.mangled
                && q.device.name == p.device.name
                && q.provenance.code_hash == p.provenance.code_hash
        };
        if !out.iter().any(same) {
            out.push(p);
        }
        i = start + len + MODEL_END.len();
    }
    Ok(out)
}
