//! Helpers shared by the tests that compile the C model with the system C compiler.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The C compiler: `$CC`, else `cc`.
pub fn cc() -> String {
    std::env::var("CC").unwrap_or_else(|_| "cc".to_string())
}

/// The strict flags the C model must pass.
pub const STRICT: &[&str] = &["-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic"];

/// Compiles `sources` (written into `dir`) into `dir/out` with the strict flags plus
/// `extra`; panics with the compiler's diagnostics when it fails.
pub fn compile(dir: &Path, sources: &[(&str, &str)], extra: &[&str], out: &str) -> PathBuf {
    let mut cmd = Command::new(cc());
    cmd.args(STRICT).args(extra);
    for (name, text) in sources {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        if name.ends_with(".c") {
            cmd.arg(&path);
        }
    }
    let exe = dir.join(out);
    cmd.arg("-o").arg(&exe);
    let output = cmd.output().unwrap_or_else(|e| {
        panic!(
            "cannot run the C compiler `{}` ({e}); install a C compiler or set CC",
            cc()
        )
    });
    assert!(
        output.status.success(),
        "{:?} failed:\n{}",
        cmd,
        String::from_utf8_lossy(&output.stderr)
    );
    exe
}
