//! Loading libclang: a wrong explicit path is reported (and not remembered),
//! a library reached through Debian's multiarch directory still finds its
//! resource headers, and a process sticks to the first library it loads.
//!
//! One test function, because the library is loaded once per process and the
//! steps depend on their order.

mod clang_common;

use std::path::{Path, PathBuf};

use clang_common::{config, fixture};
use klaraptor_passes::clang::{inspect, ClangConfig, ClangError, DEBIAN_LIBCLANG};

fn with_lib(path: &Path) -> ClangConfig {
    ClangConfig {
        libclang_path: Some(path.to_path_buf()),
        ..config(&[])
    }
}

#[test]
fn loading() {
    // 1. Nothing there: an error that says where it looked and what to do.
    let bogus = PathBuf::from("/nonexistent/libclang.so.1");
    match inspect(&fixture("mm.cu"), &["mm"], &with_lib(&bogus)) {
        Err(e @ ClangError::LibclangNotFound { .. }) => {
            let text = e.to_string();
            assert!(text.contains("/nonexistent/libclang.so.1"), "{text}");
            assert!(
                text.contains("scripts/setup") && text.contains("LIBCLANG_PATH"),
                "{text}"
            );
        }
        other => panic!("expected LibclangNotFound, got {other:?}"),
    }

    // 2. libclang loaded from /usr/lib/x86_64-linux-gnu, from where its
    //    default guess of its resource directory (/usr/lib/lib/clang/19)
    //    does not exist; the module then passes LLVM 19's with -resource-dir
    //    (Debian's build finds it anyway, so this checks the result, a clean
    //    parse of CUDA code, rather than that the flag is needed).
    let multiarch = Path::new("/usr/lib/x86_64-linux-gnu/libclang-19.so.1");
    let chosen = if multiarch.exists() {
        multiarch.to_path_buf()
    } else {
        let found = DEBIAN_LIBCLANG.iter().map(Path::new).find(|p| p.exists());
        found
            .expect("no libclang-19: run scripts/setup")
            .to_path_buf()
    };
    let info =
        inspect(&fixture("mm.cu"), &["mm"], &with_lib(&chosen)).unwrap_or_else(|e| panic!("{e}"));
    assert!(info.diagnostics.is_empty(), "{:#?}", info.diagnostics);
    assert_eq!(info.functions[0].mangled, ["_Z2mmPKfS0_Pfi"]);

    // 3. The same library again, or no preference: fine.
    assert!(inspect(&fixture("mm.cu"), &["mm"], &with_lib(&chosen)).is_ok());
    assert!(inspect(&fixture("mm.cu"), &["mm"], &config(&[])).is_ok());

    // 4. A different one: refused, naming both.
    let other = PathBuf::from("/usr/lib/llvm-19/lib/libclang.so");
    match inspect(&fixture("mm.cu"), &["mm"], &with_lib(&other)) {
        Err(ClangError::LibclangConflict { loaded, requested }) => {
            assert_eq!(requested, other);
            assert_eq!(loaded, chosen);
        }
        r => panic!("expected LibclangConflict, got {r:?}"),
    }
}
