//! Shared set-up of the `clang_*` integration tests: where the CUDA toolkit and
//! the fixtures are.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use klaraptor_passes::clang::ClangConfig;

/// The repository root (the parent of the `passes` crate).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("passes/ has a parent")
        .to_path_buf()
}

/// A fixture under `tests/fixtures/clang`, as an absolute path.
pub fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/clang")
        .join(name)
}

/// The CUDA toolkit: `$KLARAPTOR_CUDA_PATH`, else `.toolchain/cuda` in the
/// repository (made by `scripts/setup`). Panics, saying so, when missing.
pub fn cuda_path() -> PathBuf {
    let path = match std::env::var_os("KLARAPTOR_CUDA_PATH") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => repo_root().join(".toolchain/cuda"),
    };
    assert!(
        path.join("include/cuda_runtime.h").is_file(),
        "no CUDA toolkit at {} (no include/cuda_runtime.h): run scripts/setup, \
         or set KLARAPTOR_CUDA_PATH to a CUDA 13 toolkit",
        path.display()
    );
    path
}

/// The stub headers clang-19 needs with CUDA 13 (made by `scripts/setup`).
pub fn stub_include() -> PathBuf {
    let path = repo_root().join(".toolchain/clang-cuda-stubs");
    assert!(
        path.join("texture_fetch_functions.h").is_file(),
        "no clang CUDA stub headers in {}: run scripts/setup",
        path.display()
    );
    path
}

/// The configuration the tests use, with the user flags `args`.
pub fn config(args: &[&str]) -> ClangConfig {
    ClangConfig {
        cuda_path: cuda_path(),
        stub_include: Some(stub_include()),
        args: args.iter().map(|a| a.to_string()).collect(),
        libclang_path: None,
    }
}
