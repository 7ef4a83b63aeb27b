//! Finding the tools klaraptor drives: nvcc (and the CUDA installation around it).
//!
//! nvcc is looked for, in order, in `KLARAPTOR_NVCC`, `$CUDA_HOME/bin`, `$CUDA_PATH/bin`,
//! `PATH`, and the project prefix that `scripts/setup` fills (`.toolchain/cuda`). In the
//! launcher form (`klaraptor-cc /usr/local/cuda/bin/nvcc …`, as CMake's
//! `CMAKE_CUDA_COMPILER_LAUNCHER` runs it) the nvcc named on the command line is used.

use std::fmt;
use std::path::{Path, PathBuf};

/// Where the nvcc in use was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    Launcher,
    KlaraptorNvcc,
    CudaHome,
    CudaPath,
    Path,
    ProjectPrefix,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Origin::Launcher => "named on the command line (launcher form)",
            Origin::KlaraptorNvcc => "from KLARAPTOR_NVCC",
            Origin::CudaHome => "from CUDA_HOME",
            Origin::CudaPath => "from CUDA_PATH",
            Origin::Path => "from PATH",
            Origin::ProjectPrefix => "from the project prefix (scripts/setup)",
        })
    }
}

#[derive(Debug, Clone)]
pub struct Toolchain {
    pub nvcc: PathBuf,
    pub origin: Origin,
}

#[derive(Debug, thiserror::Error)]
pub enum NotFound {
    #[error(
        "cannot find nvcc: looked in KLARAPTOR_NVCC, $CUDA_HOME/bin, $CUDA_PATH/bin, PATH and {prefix}\n  \
         = help: run scripts/setup (it installs CUDA 13.0 into the project prefix), or set KLARAPTOR_NVCC=/path/to/nvcc"
    )]
    Nowhere { prefix: String },
    /// `KLARAPTOR_NVCC` names something that is not an executable file: an error, never a
    /// silent fall back to another nvcc.
    #[error(
        "KLARAPTOR_NVCC={} is not an executable file ({why})\n  \
         = help: point KLARAPTOR_NVCC at an nvcc, or unset it to use $CUDA_HOME/bin, $CUDA_PATH/bin, \
         PATH or the project prefix",
        path.display()
    )]
    Variable { path: PathBuf, why: String },
}

/// A CUDA tool that is not beside nvcc.
#[derive(Debug, thiserror::Error)]
#[error(
    "the clang backend needs {tool} from the CUDA toolkit of {}, and there is none at {}\n  \
     = help: install the whole toolkit (scripts/setup does), or point KLARAPTOR_NVCC at an nvcc \
     whose bin/ holds ptxas and fatbinary",
    nvcc.display(), path.display()
)]
pub struct MissingTool {
    tool: String,
    path: PathBuf,
    nvcc: PathBuf,
}

/// The project prefix: `.toolchain/` of the checkout this binary was built from, or of the
/// checkout around the executable (`target/<profile>/klaraptor-cc`).
pub fn project_prefixes() -> Vec<PathBuf> {
    let mut out = vec![Path::new(env!("CARGO_MANIFEST_DIR")).join(".toolchain")];
    if let Ok(exe) = std::env::current_exe() {
        if let Some(root) = exe.parent().and_then(Path::parent).and_then(Path::parent) {
            let p = root.join(".toolchain");
            if !out.contains(&p) {
                out.push(p);
            }
        }
    }
    out
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    p.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Whether `p` is this very program (an `nvcc` symlink to klaraptor-cc would loop).
fn is_self(p: &Path) -> bool {
    let me = std::env::current_exe().and_then(|e| e.canonicalize()).ok();
    me.is_some() && p.canonicalize().ok() == me
}

impl Toolchain {
    /// Finds nvcc. `launcher` is the nvcc named in the launcher form, if any.
    pub fn discover(launcher: Option<&str>) -> Result<Toolchain, NotFound> {
        let found = |p: PathBuf, origin| {
            (is_executable(&p) && !is_self(&p)).then_some(Toolchain { nvcc: p, origin })
        };
        if let Some(l) = launcher.filter(|l| l.contains('/')) {
            return Ok(Toolchain {
                nvcc: PathBuf::from(l),
                origin: Origin::Launcher,
            });
        }
        let env = |v: &str| {
            std::env::var_os(v)
                .filter(|s| !s.is_empty())
                .map(PathBuf::from)
        };
        let mut tries: Vec<(PathBuf, Origin)> = Vec::new();
        if let Some(p) = env("KLARAPTOR_NVCC") {
            if !is_executable(&p) {
                let why = match p.metadata() {
                    Err(e) => e.to_string(),
                    Ok(m) if m.is_dir() => "a directory".to_string(),
                    Ok(_) => "not executable".to_string(),
                };
                return Err(NotFound::Variable { path: p, why });
            }
            tries.push((p, Origin::KlaraptorNvcc));
        }
        if let Some(p) = env("CUDA_HOME") {
            tries.push((p.join("bin/nvcc"), Origin::CudaHome));
        }
        if let Some(p) = env("CUDA_PATH") {
            tries.push((p.join("bin/nvcc"), Origin::CudaPath));
        }
        if let Some(path) = std::env::var_os("PATH") {
            tries.extend(std::env::split_paths(&path).map(|d| (d.join("nvcc"), Origin::Path)));
        }
        let prefixes = project_prefixes();
        tries.extend(
            prefixes
                .iter()
                .map(|p| (p.join("cuda/bin/nvcc"), Origin::ProjectPrefix)),
        );
        tries
            .into_iter()
            .find_map(|(p, o)| found(p, o))
            .ok_or_else(|| NotFound::Nowhere {
                prefix: prefixes[0].join("cuda/bin").display().to_string(),
            })
    }

    /// A tool of the CUDA installation nvcc belongs to (`<root>/bin/<name>`): ptxas and
    /// fatbinary for the clang backend.
    pub fn cuda_tool(&self, name: &str) -> Result<PathBuf, MissingTool> {
        let p = self.cuda_root().join("bin").join(name);
        if is_executable(&p) {
            Ok(p)
        } else {
            Err(MissingTool {
                tool: name.to_string(),
                path: p,
                nvcc: self.nvcc.clone(),
            })
        }
    }

    /// The CUDA installation nvcc belongs to (`<root>/bin/nvcc`).
    pub fn cuda_root(&self) -> PathBuf {
        let nvcc = self
            .nvcc
            .canonicalize()
            .unwrap_or_else(|_| self.nvcc.clone());
        nvcc.parent()
            .and_then(Path::parent)
            .map(Path::to_path_buf)
            .unwrap_or_default()
    }
}
