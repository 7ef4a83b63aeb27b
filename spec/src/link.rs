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

use crate::spec::KernelSpec;
use anyhow::{bail, Context, Result};

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
    /// The dynamic shared memory a launch needs for a block shape (`shmem(…)`, or the formula
    /// the pass read from the launches), in the annotation language; `None`: the launch's own
    /// amount, whatever the shape.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shmem: Option<String>,
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

/// The data sizes a kernel is profiled at: the annotation's sizes, and, for a kernel of two
/// or more data parameters, one more size per parameter that is the largest annotated value
/// of that parameter with every other parameter at its smallest.
///
/// Annotated sizes usually grow together (`64, 128, (256, 192), 256`), so from them alone the
/// fit cannot tell `M·N` from `N²` or from `N`: the launch totals of a kernel over an
/// `M × N` domain then extrapolate to a run at `3001 × 128` wrongly by the ratio of the two.
/// The added sizes vary one parameter at a time; they are small in every other parameter (their
/// sum of sizes stays below the largest annotated size's, so the fit trains on them instead
/// of holding them back as extrapolation points), which keeps the extra profiling cheap.
pub fn profile_design(sizes: &[Vec<i64>]) -> Vec<Vec<i64>> {
    let mut out: Vec<Vec<i64>> = sizes.to_vec();
    let d = sizes.first().map_or(0, Vec::len);
    if d < 2 || sizes.iter().any(|s| s.len() != d) {
        return out;
    }
    let lo: Vec<i64> = (0..d)
        .map(|i| sizes.iter().map(|s| s[i]).min().unwrap_or(0))
        .collect();
    let hi: Vec<i64> = (0..d)
        .map(|i| sizes.iter().map(|s| s[i]).max().unwrap_or(0))
        .collect();
    for i in 0..d {
        let mut p = lo.clone();
        p[i] = hi[i];
        if !out.contains(&p) {
            out.push(p);
        }
    }
    out
}

impl LinkSpec {
    /// Its grid, constraints and shared-memory formula, parsed.
    pub fn shape(&self) -> Result<crate::shapes::LaunchShape, String> {
        crate::shapes::LaunchShape::parse(
            &self.data,
            &self.grid,
            &self.block,
            self.shmem.as_deref(),
        )
    }

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
                shmem: spec.shmem.as_ref().map(|e| e.to_string()),
                profile_run: spec.profile.as_ref().map(|p| p.run.clone()),
                profile_sizes: spec
                    .profile
                    .as_ref()
                    .map(|p| profile_design(&p.sizes))
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

/// `text` as a C string literal (split at its newlines), for `cc -std=c99`.
pub fn c_literal(text: &str) -> String {
    let mut lit = String::from("\"");
    for b in text.bytes() {
        match b {
            b'"' => lit.push_str("\\\""),
            b'\\' => lit.push_str("\\\\"),
            // `cc -std=c99` reads trigraphs: `??/` in a recipe would become a backslash.
            b'?' => lit.push_str("\\?"),
            b'\n' => lit.push_str("\\n\"\n  \""),
            0x20..=0x7e => lit.push(b as char),
            _ => lit.push_str(&format!("\\{b:03o}")),
        }
    }
    lit.push('"');
    lit
}

/// The C that embeds `specs` in an object: string constants in section `.klaraptor_spec`.
pub fn c_section(specs: &[LinkSpec]) -> Result<String> {
    let mut c = String::from("/* Kernel specs for the link (klaraptor-spec, link.rs). */\n");
    for (i, s) in specs.iter().enumerate() {
        let lit = c_literal(&s.embedded()?);
        c.push_str(&format!(
            "__attribute__((section(\".klaraptor_spec\"), used, aligned(1)))\nstatic const char kl_spec_{i}[] =\n  {lit};\n"
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

/// Where `needle` first occurs in `hay`.
pub fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
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
            match by_id.get(&s.mangled) {
                None => {
                    order.push(s.mangled.clone());
                    by_id.insert(s.mangled.clone(), s);
                }
                // The same kernel from a header compiled into several translation units: one
                // annotation, read several times. (Kernels of internal linkage are distinct
                // kernels of one name; the first is kept, as the runtime registers it.)
                Some(first) if same_annotation(first, &s) || internal_linkage(&s.mangled) => {}
                Some(first) => bail!(
                    "kernel {} is annotated differently in two translation units: {} ({}) \
                     and {} ({}, in {}); a kernel has one annotation: make them agree, or \
                     annotate the kernel once, beside its definition",
                    first.name,
                    first.annotated_at,
                    annotation_text(first),
                    s.annotated_at,
                    annotation_text(&s),
                    p.display()
                ),
            }
        }
    }
    Ok(order.into_iter().filter_map(|m| by_id.remove(&m)).collect())
}

/// Whether two specs of one kernel carry the same annotation (what the model and the
/// runtime use of it: data parameters, dimensionality, grid formula, block constraints).
fn same_annotation(a: &LinkSpec, b: &LinkSpec) -> bool {
    a.data == b.data && a.dim == b.dim && a.grid == b.grid && a.block == b.block
}

/// Whether a mangled name is of internal linkage (`static`, an anonymous namespace): each
/// translation unit's kernel of that name is its own.
fn internal_linkage(mangled: &str) -> bool {
    mangled.starts_with("_ZL") || mangled.contains("_GLOBAL__N_")
}

/// A spec's annotation, as a user wrote its clauses.
fn annotation_text(s: &LinkSpec) -> String {
    let mut t = format!(
        "data({}) dim({}) grid({})",
        s.data.join(", "),
        s.dim,
        s.grid.join(", ")
    );
    if !s.block.is_empty() {
        let parts: Vec<&str> = s.block.iter().map(|b| unwrap_parens(b)).collect();
        t.push_str(&format!(" block({})", parts.join(" && ")));
    }
    t
}

/// `e` without one pair of parentheses around the whole of it, as the spec prints each
/// constraint (`(bx >= 64)`).
fn unwrap_parens(e: &str) -> &str {
    let Some(inner) = e.strip_prefix('(').and_then(|r| r.strip_suffix(')')) else {
        return e;
    };
    let mut depth = 0i32;
    for c in inner.chars() {
        depth += match c {
            '(' => 1,
            ')' => -1,
            _ => 0,
        };
        if depth < 0 {
            return e; // `(a) && (b)`: the first and last parentheses are not a pair
        }
    }
    inner
}

/// The hash that keys a kernel's profile: FNV-1a (64-bit) of the device code nvcc embedded in
/// the host translation (the `.nv_fatbin` section's data lines), which changes whenever the
/// kernel's code or the flags that change it (architectures, `-O`, `-D`, `-G`, …) change. It
/// covers the whole translation unit's device code, so editing one kernel invalidates the
/// profiles of the others in the same file.
///
/// Device code that holds names nvcc makes per compile ([`normalise_per_compile_names`]:
/// `_INTERNAL_<hash>_…` and `_GLOBAL__N__<hash>_…` of internal-linkage entities, whose hash
/// nvcc derives from the source's absolute path; `tmpxft_<pid>_<n>` temporary names, which
/// `-G` embeds) is hashed with those names made equal, from the fatbinary's entries
/// decompressed: the hash is the same for every compile of the same code, wherever it is
/// compiled. Device code without such names hashes exactly as before (the data lines).
pub fn code_hash(host_translation: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut feed = |bytes: &[u8]| {
        for &b in bytes {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    };
    let lines: Vec<&str> = host_translation
        .lines()
        .map(str::trim_start)
        .filter(|t| {
            t.starts_with("\".quad ") || t.starts_with("\".long ") || t.starts_with("\".byte ")
        })
        .collect();
    if lines.is_empty() {
        // No embedded fatbinary in the expected form: fall back to the whole translation,
        // which invalidates more often but never wrongly keeps a profile.
        let mut text = host_translation.as_bytes().to_vec();
        normalise_per_compile_names(&mut text);
        feed(&text);
    } else if let Some(code) = normalised_device_code(&lines) {
        feed(b"device code with per-compile names normalised\n");
        feed(&code);
    } else {
        for t in lines {
            feed(t.as_bytes());
        }
    }
    format!("{h:016x}")
}

/// The fatbinary of the data lines `lines` (`.quad` only), each entry's header and payload
/// (decompressed where it is a zstd frame) with [`normalise_per_compile_names`] applied:
/// `None` when no such name occurs, or the data do not read as a fatbinary.
fn normalised_device_code(lines: &[&str]) -> Option<Vec<u8>> {
    let mut bytes = Vec::new();
    for l in lines {
        let body = l.strip_prefix("\".quad ")?;
        let body = body.split('\\').next()?.trim_end_matches('"');
        for v in body.split(',') {
            let v = v.trim().strip_prefix("0x")?;
            bytes.extend_from_slice(&u64::from_str_radix(v, 16).ok()?.to_le_bytes());
        }
    }
    let u32_at = |b: &[u8], at: usize| -> Option<u32> {
        Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
    };
    let u64_at = |b: &[u8], at: usize| -> Option<u64> {
        Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
    };
    let mut out = Vec::new();
    let mut changed = false;
    let mut at = 0usize;
    // Fatbinaries one after another: a 16-byte header (magic, version, header size, size of
    // the entries), then entries, each a header (kind, version, header size, payload size,
    // …) and its payload.
    while at + 16 <= bytes.len() {
        if u32_at(&bytes, at)? != 0xba55_ed50 {
            break;
        }
        let header = usize::from(u16::from_le_bytes(
            bytes.get(at + 6..at + 8)?.try_into().ok()?,
        ));
        let size = usize::try_from(u64_at(&bytes, at + 8)?).ok()?;
        let end = at.checked_add(header)?.checked_add(size)?;
        let mut e = at + header;
        while e + 16 <= end.min(bytes.len()) {
            let hs = usize::try_from(u32_at(&bytes, e + 4)?).ok()?;
            let ps = usize::try_from(u64_at(&bytes, e + 8)?).ok()?;
            let mut head = bytes.get(e..e.checked_add(hs)?)?.to_vec();
            let payload = bytes.get(e + hs..e.checked_add(hs)?.checked_add(ps)?)?;
            let mut plain = if payload.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
                use std::io::Read;
                let mut d = ruzstd::decoding::StreamingDecoder::new(payload).ok()?;
                let mut v = Vec::new();
                d.read_to_end(&mut v).ok()?;
                // The sizes of the compressed payload are not the code's.
                for b in head.iter_mut().take(24).skip(8) {
                    *b = 0;
                }
                v
            } else {
                payload.to_vec()
            };
            changed |= normalise_per_compile_names(&mut head);
            changed |= normalise_per_compile_names(&mut plain);
            out.extend_from_slice(&head);
            out.extend_from_slice(&plain);
            e += hs + ps;
        }
        at = end;
    }
    changed.then_some(out)
}

/// Makes equal, in place, the parts of names that nvcc derives from the compile rather than
/// the code: the hash after `_INTERNAL_`, `_GLOBAL__N__` and `__nv_static_<n>__` (of the
/// source's absolute path), and the file-name hash that may follow the file's name there
/// (`_GLOBAL__N__c0cfb401_5_r2_cu_7d5b8a25…`); the process id and counter of
/// `tmpxft_<8 hex>_<8 hex>`. Each becomes as many `X`s. Whether anything was changed.
pub fn normalise_per_compile_names(b: &mut [u8]) -> bool {
    fn hex8(b: &[u8], at: usize) -> bool {
        b.get(at..at + 8)
            .is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit))
    }
    fn blank(b: &mut [u8], at: usize) {
        for c in &mut b[at..at + 8] {
            *c = b'X';
        }
    }
    let mut changed = false;
    let mut i = 0;
    while i < b.len() {
        let rest = &b[i..];
        if rest.starts_with(b"tmpxft_")
            && hex8(b, i + 7)
            && b.get(i + 15) == Some(&b'_')
            && hex8(b, i + 16)
        {
            blank(b, i + 7);
            blank(b, i + 16);
            changed = true;
            i += 24;
            continue;
        }
        let marker = if rest.starts_with(b"_INTERNAL_") {
            Some(10)
        } else if rest.starts_with(b"_GLOBAL__N__") {
            Some(12)
        } else if rest.starts_with(b"__nv_static_") {
            // `__nv_static_<n>__<hash>_…`
            let digits = rest[12..].iter().take_while(|c| c.is_ascii_digit()).count();
            (digits > 0 && rest[12 + digits..].starts_with(b"__")).then_some(12 + digits + 2)
        } else {
            None
        };
        let Some(m) = marker else {
            i += 1;
            continue;
        };
        let h = i + m;
        if !(hex8(b, h) && b.get(h + 8) == Some(&b'_')) {
            i += 1;
            continue;
        }
        blank(b, h);
        changed = true;
        // `<len>_<file name>`, then maybe `_<hash>`.
        let d = h + 9;
        let digits = b[d.min(b.len())..]
            .iter()
            .take_while(|c| c.is_ascii_digit())
            .count();
        let len: Option<usize> = std::str::from_utf8(&b[d..d + digits])
            .ok()
            .and_then(|s| s.parse().ok());
        i = h + 8;
        if let Some(len) = len {
            let after = d + digits + 1 + len;
            if digits > 0
                && b.get(d + digits) == Some(&b'_')
                && b.get(after) == Some(&b'_')
                && hex8(b, after + 1)
            {
                blank(b, after + 1);
                i = after + 9;
            }
        }
    }
    changed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_compile_names_are_made_equal() {
        let mut b = b"_ZN33_INTERNAL_de8d0221_4_r_cu__Z1kPfi5twiceEf _GLOBAL__N__c0cfb401_5_r2_cu_7d5b8a252akEPfi \
                      __nv_static_24__de8d0221_4_r_cu__Z1kPfi_counter tmpxft_00006d07_00000000-6_r.ptx \
                      _INTERNAL_nothex_ plain_de8d0221_"
            .to_vec();
        assert!(normalise_per_compile_names(&mut b));
        assert_eq!(
            String::from_utf8(b).unwrap(),
            "_ZN33_INTERNAL_XXXXXXXX_4_r_cu__Z1kPfi5twiceEf _GLOBAL__N__XXXXXXXX_5_r2_cu_XXXXXXXX2akEPfi \
             __nv_static_24__XXXXXXXX_4_r_cu__Z1kPfi_counter tmpxft_XXXXXXXX_XXXXXXXX-6_r.ptx \
             _INTERNAL_nothex_ plain_de8d0221_"
        );
        let mut none = b"_Z1kPfi counter".to_vec();
        assert!(!normalise_per_compile_names(&mut none));
    }
    use std::process::Command;

    #[test]
    fn design_adds_one_size_per_parameter() {
        let given = vec![vec![64, 64], vec![128, 128], vec![256, 192], vec![256, 256]];
        let d = profile_design(&given);
        assert_eq!(&d[..4], &given[..]);
        assert_eq!(&d[4..], &[vec![256, 64], vec![64, 256]]);
        // One data parameter, or ragged input: the annotation's sizes as they are.
        let one = vec![vec![64], vec![128]];
        assert_eq!(profile_design(&one), one);
        let three = profile_design(&[vec![64, 64, 64], vec![256, 128, 192], vec![256, 256, 256]]);
        assert_eq!(
            &three[3..],
            &[vec![256, 64, 64], vec![64, 256, 64], vec![64, 64, 256]]
        );
        // Sizes already present are not repeated.
        assert_eq!(
            profile_design(&[vec![8, 1], vec![1, 8], vec![8, 8]]).len(),
            3
        );
    }

    fn spec(mangled: &str, run: Option<&str>) -> LinkSpec {
        LinkSpec {
            shmem: None,
            name: "gemm".into(),
            mangled: mangled.into(),
            data: vec!["NI".into(), "NJ".into()],
            dim: 2,
            grid: vec!["ceil(NJ, bx)".into(), "ceil(NI, by)".into()],
            block: vec!["bx % 32 == 0".into(), "bx * by <= 512".into()],
            profile_run: run.map(str::to_string),
            profile_sizes: vec![vec![64, 64], vec![128, 256]],
            code_hash: "0123456789abcdef".into(),
            annotated_at: "dir with spaces/gemm.cu:12:9".into(),
            build_dir: PathBuf::from("/tmp/build dir/ü"),
        }
    }

    /// Text that a C string literal must escape: quotes, backslashes, a tab, non-ASCII
    /// (octal escapes), and trigraphs (`cc -std=c99` would read `??=` as `#`, `??/` as `\`).
    const AWKWARD: &str = "./gemm \"{NI}\" '{NJ}' \\ \t x??=y data/??/in µs → ok";

    #[test]
    fn embedded_specs_survive_c_compilation_and_scanning() {
        let specs = vec![
            spec("_Z4gemmfPKfiiiPf", Some(AWKWARD)),
            spec("_Z4gemmIdEvPd", None),
        ];
        let c = c_section(&specs).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("specs.c");
        let obj = dir.path().join("specs.o");
        std::fs::write(&src, &c).unwrap();
        let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
        let out = Command::new(&cc)
            .args(["-std=c99", "-Wall", "-Wextra", "-Werror", "-O2", "-c"])
            .arg(&src)
            .arg("-o")
            .arg(&obj)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}\n{c}",
            String::from_utf8_lossy(&out.stderr)
        );
        let bytes = std::fs::read(&obj).unwrap();
        // (The compiler chooses the order of the constants in the section: GCC reverses it.)
        let mut back = scan_bytes(&bytes, &obj).unwrap();
        back.sort_by(|a, b| a.mangled.cmp(&b.mangled));
        let mut want = specs.clone();
        want.sort_by(|a, b| a.mangled.cmp(&b.mangled));
        assert_eq!(back, want);
        // In a section of its own, which `ld -r` and archives keep.
        let h = Command::new("objdump")
            .arg("-h")
            .arg(&obj)
            .output()
            .unwrap();
        assert!(String::from_utf8_lossy(&h.stdout).contains(".klaraptor_spec"));
        // Two objects: scan_inputs keeps one spec per kernel, the first it sees.
        let mut other = specs[0].clone();
        other.code_hash = "fedcba9876543210".into();
        let obj2 = dir.path().join("other.bin");
        let mut junk = b"\x7fELF junk before ".to_vec();
        junk.extend(other.embedded().unwrap().bytes());
        junk.extend(b" and after");
        std::fs::write(&obj2, &junk).unwrap();
        let all = scan_inputs([obj2.as_path(), obj.as_path()]).unwrap();
        assert_eq!(all.len(), 2);
        assert_eq!(all[0], other);
        assert_eq!(all[1], specs[1]);
        let all = scan_inputs([obj.as_path(), obj2.as_path()]).unwrap();
        assert_eq!(all.len(), 2);
        assert!(all.contains(&specs[0]) && all.contains(&specs[1]));
    }

    #[test]
    fn a_damaged_spec_names_the_file() {
        let text = format!("{BEGIN}name = \"k\"\nthis is not toml\n{END}");
        let err = scan_bytes(text.as_bytes(), Path::new("lib/old.o")).unwrap_err();
        let msg = format!("{err:#}");
        assert!(
            msg.contains("lib/old.o") && msg.contains("rebuild it"),
            "{msg}"
        );
        // A begin marker without an end is not a spec (truncated data), and no spec is none.
        let cut = format!("{BEGIN}name = \"k\"\n");
        assert!(scan_bytes(cut.as_bytes(), Path::new("x"))
            .unwrap()
            .is_empty());
        assert!(scan_bytes(b"", Path::new("x")).unwrap().is_empty());
    }

    /// A host translation as `nvcc -cuda` writes it (shortened): host code, then the
    /// fatbinary as assembler data lines.
    fn translation(host: &str, fatbin: &[&str]) -> String {
        let mut t = format!("static int host = {host};\nint main(void) {{ return host; }}\n");
        t.push_str("asm(\n\".section .nv_fatbin, \\\"a\\\"\\n\"\n\".align 8\\n\"\n");
        for l in fatbin {
            t.push_str(l);
            t.push('\n');
        }
        t.push_str("\".text\\n\");\n");
        t
    }

    const FATBIN: [&str; 3] = [
        r#"".quad 0x00100001ba55ed50,0x0000000000000f48\n""#,
        r#"".quad 0x0000004001010002,0x0000000000000df0\n""#,
        r#"".byte 0x7f,0x45\n""#,
    ];

    #[test]
    fn code_hash_is_fnv1a_of_the_fatbinary_lines_only() {
        let t = translation("1", &FATBIN);
        // FNV-1a 64 of the three data lines, concatenated, computed independently. Pinned:
        // the hash keys every profile database entry, committed ones included.
        assert_eq!(code_hash(&t), "d393ba936c75b02c");
        assert_eq!(code_hash(&t), code_hash(&t.clone()));
        // Host code and indentation do not matter; the device code does.
        assert_eq!(code_hash(&translation("2", &FATBIN)), code_hash(&t));
        let indented: Vec<String> = FATBIN.iter().map(|l| format!("    {l}")).collect();
        let indented: Vec<&str> = indented.iter().map(String::as_str).collect();
        assert_eq!(code_hash(&translation("1", &indented)), code_hash(&t));
        let mut changed = FATBIN;
        changed[1] = r#"".quad 0x0000004001010002,0x0000000000000df1\n""#;
        assert_ne!(code_hash(&translation("1", &changed)), code_hash(&t));
        let fewer = &FATBIN[..2];
        assert_ne!(code_hash(&translation("1", fewer)), code_hash(&t));
    }

    #[test]
    fn without_a_fatbinary_the_whole_translation_is_hashed() {
        let a = code_hash("int main(void) { return 0; }\n");
        let b = code_hash("int main(void) { return 1; }\n");
        assert_ne!(a, b);
        assert_eq!(a.len(), 16);
        assert!(a.chars().all(|c| c.is_ascii_hexdigit()));
    }
}
