//! Names in the database: the code hash that keys an entry, and the filesystem-safe slugs
//! that name its directory and file.

use std::fmt::Write as _;

/// FNV-1a, 128-bit: offset basis and prime as the FNV specification gives them.
const FNV128_OFFSET: u128 = 0x6c62_272e_07bb_0142_62b8_2175_6295_c58d;
const FNV128_PRIME: u128 = 0x0000_0000_0100_0000_0000_0000_0000_013b;
/// FNV-1a, 64-bit.
const FNV64_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV64_PRIME: u64 = 0x0000_0100_0000_01b3;

/// The longest code hash the database accepts (it becomes part of a file name).
pub const CODE_HASH_MAX_LEN: usize = 64;

/// Longest kernel slug kept verbatim; a longer or non-portable mangled name is cut to
/// [`KERNEL_SLUG_PREFIX`] characters and followed by a hash of the whole name.
const KERNEL_SLUG_VERBATIM_MAX: usize = 96;
const KERNEL_SLUG_PREFIX: usize = 64;
/// The readable part of a device slug.
const DEVICE_SLUG_PREFIX: usize = 40;

/// The digest that keys an entry to the device code it was measured with.
///
/// Definition (stable; entries on disk depend on it): FNV-1a with 128-bit state over, for
/// each part in order, the part's length as an 8-byte little-endian integer followed by the
/// part's bytes; written as 32 lowercase hexadecimal digits. The length prefix makes the
/// split between parts significant (`["ab", "c"]` and `["a", "bc"]` differ). It detects
/// changes; it is not meant to resist someone forging a collision.
///
/// The driver feeds the kernel's device code and the flags that change that code.
pub fn code_hash(parts: &[&[u8]]) -> String {
    let mut h = FNV128_OFFSET;
    let mut feed = |bytes: &[u8]| {
        for &b in bytes {
            h ^= u128::from(b);
            h = h.wrapping_mul(FNV128_PRIME);
        }
    };
    for part in parts {
        feed(&(part.len() as u64).to_le_bytes());
        feed(part);
    }
    format!("{h:032x}")
}

/// FNV-1a, 64-bit, of one byte string (used to disambiguate shortened slugs).
pub(crate) fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(FNV64_OFFSET, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(FNV64_PRIME)
    })
}

/// Why a key cannot name a file, or `None` when it can.
pub fn check_code_hash(code_hash: &str) -> Option<String> {
    if code_hash.is_empty() {
        Some("it is empty".into())
    } else if code_hash.len() > CODE_HASH_MAX_LEN {
        Some(format!(
            "it has {} characters (at most {CODE_HASH_MAX_LEN})",
            code_hash.len()
        ))
    } else {
        code_hash
            .chars()
            .find(|c| !c.is_ascii_alphanumeric())
            .map(|c| format!("it contains {c:?} (only ASCII letters and digits are allowed)"))
    }
}

/// The file-name part for a kernel: its mangled name when that is short and made of
/// `[A-Za-z0-9_]` only (what Itanium mangling produces), otherwise a readable prefix with
/// other characters replaced by `_`, then `~` and 16 hex digits of the whole name's
/// FNV-1a 64 hash, so distinct names keep distinct files.
pub fn kernel_slug(mangled: &str) -> String {
    let portable = mangled
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '_');
    if portable && !mangled.is_empty() && mangled.len() <= KERNEL_SLUG_VERBATIM_MAX {
        return mangled.to_string();
    }
    let mut out: String = mangled
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(KERNEL_SLUG_PREFIX)
        .collect();
    if out.is_empty() {
        out.push_str("kernel");
    }
    let _ = write!(out, "~{:016x}", fnv1a64(mangled.as_bytes()));
    out
}

/// The directory name for a device: its name in lower case with every run of other
/// characters turned into one `-` (at most 40 characters), then `-` and 8 hex digits of
/// the exact name's FNV-1a 64 hash, e.g. `nvidia-h200-1c0e5a3b`. The hash keeps two names
/// that differ only in case or punctuation apart (and apart on case-insensitive disks).
pub fn device_slug(device_name: &str) -> String {
    let mut out = String::new();
    for c in device_name.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.is_empty() && !out.ends_with('-') {
            out.push('-');
        }
        if out.len() >= DEVICE_SLUG_PREFIX {
            break;
        }
    }
    while out.ends_with('-') {
        out.pop();
    }
    if out.is_empty() {
        out.push_str("device");
    }
    let _ = write!(
        out,
        "-{:08x}",
        fnv1a64(device_name.as_bytes()) & 0xffff_ffff
    );
    out
}

/// The file name of an entry inside its device directory.
pub fn entry_file_name(mangled: &str, code_hash: &str) -> String {
    format!("{}-{}.toml", kernel_slug(mangled), code_hash)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv_reference_values() {
        // Published FNV-1a test vectors: the empty string gives the offset basis, "a" and
        // "foobar" as in the FNV reference tables.
        assert_eq!(fnv1a64(b""), 0xcbf29ce484222325);
        assert_eq!(fnv1a64(b"a"), 0xaf63dc4c8601ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x85944171f73967e8);
    }

    #[test]
    fn code_hash_is_stable_and_part_sensitive() {
        // Pinned: entries on disk are keyed by this value; a change here orphans them.
        assert_eq!(code_hash(&[]), format!("{FNV128_OFFSET:032x}"));
        // Computed independently (Python, big integers) from the definition above.
        let h = code_hash(&[b"ab", b"c"]);
        assert_eq!(h, "b6ce7db35a06e7457857fa227a8bde4e");
        assert_eq!(code_hash(&[b"a"]), "426d56754e03ad9adb79f299c730f21f");
        assert_ne!(h, code_hash(&[b"a", b"bc"]));
        assert_ne!(h, code_hash(&[b"abc"]));
        assert_eq!(h, code_hash(&[b"ab", b"c"]));
        assert!(check_code_hash(&h).is_none());
    }

    #[test]
    fn slugs() {
        assert_eq!(kernel_slug("_Z2mmPKfS0_Pfi"), "_Z2mmPKfS0_Pfi");
        let long = format!("_Z{}", "x".repeat(300));
        let s = kernel_slug(&long);
        assert!(s.len() < 90, "{s}");
        assert_ne!(s, kernel_slug(&format!("{long}y")));
        let odd = kernel_slug("_Z3foo.clone/1");
        assert!(odd.starts_with("_Z3foo_clone_1~"), "{odd}");
        assert!(device_slug("NVIDIA H200").starts_with("nvidia-h200-"));
        assert_ne!(device_slug("NVIDIA H200"), device_slug("nvidia h200"));
        assert!(device_slug("///").starts_with("device-"));
        assert!(check_code_hash("../x").is_some());
        assert!(check_code_hash("").is_some());
    }
}
