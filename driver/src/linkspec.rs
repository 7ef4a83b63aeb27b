//! What an instrumented object tells the link about its kernels.
//!
//! The compile of an annotated translation unit (`klaraptor-cc -c`) knows the kernels'
//! annotations and their device code; the link, maybe a separate `klaraptor-cc` call, needs
//! them to find the kernels' profiles, fit and generate their rational programs, and profile
//! the program when no profile exists. So each instrumented object carries, as a string
//! constant in a section of its own (`.klaraptor_spec`, kept by `ld -r` and by archives), one
//! TOML document per kernel instantiation between two marker lines. The link reads them back
//! by scanning its input files' bytes, which works on objects and archives alike.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use klaraptor_passes::spec::KernelSpec;
use serde::{Deserialize, Serialize};

const BEGIN: &str = "KLARAPTOR-SPEC-BEGIN v1\n";
const END: &str = "KLARAPTOR-SPEC-END\n";

/// One annotated kernel instantiation, as the link sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkSpec {
    /// The name in the source.
    pub name: String,
    /// The mangled name of this instantiation: the id the runtime knows it by.
    pub mangled: String,
    /// The data-parameter labels, in annotation order.
    pub data: Vec<String>,
    pub dim: u8,
    /// Grid formulas (x, y, z as given), in the annotation language.
    pub grid: Vec<String>,
    /// Block constraints, in the annotation language.
    pub block: Vec<String>,
    /// The profile recipe: a command line with `{LABEL}` placeholders, and the sizes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile_run: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub profile_sizes: Vec<Vec<i64>>,
    /// Hash of the translation unit's device code as nvcc built it (see [`code_hash`]).
    pub code_hash: String,
    /// Where the kernel was annotated, and the directory the compile ran in (the recipe's
    /// command runs there).
    pub annotated_at: String,
    pub build_dir: PathBuf,
}

impl LinkSpec {
    /// The link specs of `spec` (one per instantiation).
    pub fn from_spec(spec: &KernelSpec, code_hash: &str, build_dir: &Path) -> Vec<LinkSpec> {
        spec.mangled
            .iter()
            .map(|m| LinkSpec {
                name: spec.name.clone(),
                mangled: m.clone(),
                data: spec.data.iter().map(|d| d.label.clone()).collect(),
                dim: spec.dim,
                grid: spec.grid.iter().map(|g| g.to_string()).collect(),
                block: spec.constraints.iter().map(|c| c.to_string()).collect(),
                profile_run: spec.profile.as_ref().map(|p| p.run.clone()),
                profile_sizes: spec
                    .profile
                    .as_ref()
                    .map(|p| p.sizes.clone())
                    .unwrap_or_default(),
                code_hash: code_hash.to_string(),
                annotated_at: spec.annotated_at.to_string(),
                build_dir: build_dir.to_path_buf(),
            })
            .collect()
    }

    /// The text embedded in the object.
    pub fn embedded(&self) -> Result<String> {
        Ok(format!(
            "{BEGIN}{}{END}",
            toml::to_string(self).context("serialising a kernel spec")?
        ))
    }
}

/// The C that embeds `specs` in an object: string constants in section `.klaraptor_spec`.
pub fn c_section(specs: &[LinkSpec]) -> Result<String> {
    let mut c = String::from("/* Kernel specs for the link (driver/src/linkspec.rs). */\n");
    for (i, s) in specs.iter().enumerate() {
        let text = s.embedded()?;
        let mut lit = String::new();
        for b in text.bytes() {
            match b {
                b'"' => lit.push_str("\\\""),
                b'\\' => lit.push_str("\\\\"),
                b'\n' => lit.push_str("\\n\"\n  \""),
                0x20..=0x7e => lit.push(b as char),
                _ => lit.push_str(&format!("\\{b:03o}")),
            }
        }
        c.push_str(&format!(
            "__attribute__((section(\".klaraptor_spec\"), used, aligned(1)))\nstatic const char kl_spec_{i}[] =\n  \"{lit}\";\n"
        ));
    }
    Ok(c)
}

/// The specs embedded in `bytes` (an object or an archive), in order of appearance.
pub fn scan_bytes(bytes: &[u8], origin: &Path) -> Result<Vec<LinkSpec>> {
    let mut out = Vec::new();
    let b = BEGIN.as_bytes();
    let mut i = 0;
    while let Some(at) = find(&bytes[i..], b) {
        let start = i + at + b.len();
        let Some(len) = find(&bytes[start..], END.as_bytes()) else {
            break;
        };
        let text = std::str::from_utf8(&bytes[start..start + len]).with_context(|| {
            format!("{}: a klaraptor kernel spec is not UTF-8", origin.display())
        })?;
        let spec: LinkSpec = toml::from_str(text).with_context(|| {
            format!(
                "{}: cannot read a klaraptor kernel spec (was the object built by another \
                 klaraptor-cc version? rebuild it)",
                origin.display()
            )
        })?;
        out.push(spec);
        i = start + len + END.len();
    }
    Ok(out)
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// The specs of every input file, one per mangled name (the first occurrence wins: the same
/// kernel in two objects is one kernel, as the linker will see it).
pub fn scan_inputs<'a>(inputs: impl IntoIterator<Item = &'a Path>) -> Result<Vec<LinkSpec>> {
    let mut by_id: BTreeMap<String, LinkSpec> = BTreeMap::new();
    let mut order = Vec::new();
    for p in inputs {
        let Ok(bytes) = std::fs::read(p) else {
            continue; // nvcc reports missing inputs
        };
        for s in scan_bytes(&bytes, p)? {
            if !by_id.contains_key(&s.mangled) {
                order.push(s.mangled.clone());
                by_id.insert(s.mangled.clone(), s);
            }
        }
    }
    Ok(order.into_iter().filter_map(|m| by_id.remove(&m)).collect())
}

/// The hash that keys a kernel's profile: FNV-1a (64-bit) of the device code nvcc embedded in
/// the host translation (the `.nv_fatbin` section's data lines), which changes whenever the
/// kernel's code or the flags that change it (architectures, `-O`, `-D`, `-G`, …) change. It
/// covers the whole translation unit's device code, so editing one kernel invalidates the
/// profiles of the others in the same file.
pub fn code_hash(host_translation: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut feed = |bytes: &[u8]| {
        for &b in bytes {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    };
    let mut any = false;
    for line in host_translation.lines() {
        let t = line.trim_start();
        if t.starts_with("\".quad ") || t.starts_with("\".long ") || t.starts_with("\".byte ") {
            feed(t.as_bytes());
            any = true;
        }
    }
    if !any {
        // No embedded fatbinary in the expected form: fall back to the whole translation,
        // which invalidates more often but never wrongly keeps a profile.
        feed(host_translation.as_bytes());
    }
    format!("{h:016x}")
}
