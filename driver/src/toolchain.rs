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
#[error(
    "cannot find nvcc: looked in KLARAPTOR_NVCC, $CUDA_HOME/bin, $CUDA_PATH/bin, PATH and {prefix}\n  \
     = help: run scripts/setup (it installs CUDA 13.0 into the project prefix), or set KLARAPTOR_NVCC=/path/to/nvcc"
)]
pub struct NotFound {
    prefix: String,
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
            .ok_or_else(|| NotFound {
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

/// The C compiler that builds the C klaraptor-cc generates (kernel descriptors, rational
/// programs): a program and the arguments that come with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostCc {
    pub program: PathBuf,
    pub args: Vec<String>,
}

/// The environment variable that names the C compiler for klaraptor's generated C, with
/// arguments if needed (`KLARAPTOR_HOST_CC='gcc -m64'`), split as a shell splits words.
pub const HOST_CC_ENV: &str = "KLARAPTOR_HOST_CC";

impl HostCc {
    /// `KLARAPTOR_HOST_CC`, else `$CC` unless it names klaraptor-cc or nvcc (a Makefile that
    /// calls nvcc through `$(CC)`, built with `make CC=klaraptor-cc`, exports it), else `cc`.
    /// Each may carry arguments. `KLARAPTOR_HOST_CC` naming klaraptor-cc or nvcc is an error:
    /// klaraptor-cc would run itself.
    pub fn from_env() -> anyhow::Result<HostCc> {
        let get = |v: &str| std::env::var(v).ok().filter(|s| !s.trim().is_empty());
        if let Some(v) = get(HOST_CC_ENV) {
            let cc = HostCc::parse(&v).map_err(|e| anyhow::anyhow!("{HOST_CC_ENV}={v:?}: {e}"))?;
            if cc.is_cuda_driver() {
                anyhow::bail!(
                    "{HOST_CC_ENV}={v:?} names {}, which is not a C compiler (klaraptor-cc would \
                     run itself): name a C compiler, e.g. {HOST_CC_ENV}=gcc",
                    cc.program.display()
                );
            }
            return Ok(cc);
        }
        if let Some(v) = get("CC") {
            if let Ok(cc) = HostCc::parse(&v) {
                if !cc.is_cuda_driver() {
                    return Ok(cc);
                }
            }
        }
        Ok(HostCc {
            program: PathBuf::from("cc"),
            args: Vec::new(),
        })
    }

    /// A command line split as a shell splits plain words
    /// ([`crate::validate_cmd::split_args`]): the program, then its arguments.
    pub fn parse(s: &str) -> Result<HostCc, String> {
        let mut words = crate::validate_cmd::split_args(s)
            .map_err(|e| e.to_string())?
            .into_iter();
        let program = words.next().ok_or("it names no program")?;
        Ok(HostCc {
            program: PathBuf::from(program),
            args: words.collect(),
        })
    }

    /// Whether the program is klaraptor-cc or nvcc (by its file name).
    fn is_cuda_driver(&self) -> bool {
        let name = self
            .program
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        name.starts_with("klaraptor-cc") || name == "nvcc" || name.starts_with("nvcc.")
    }

    /// A command running this compiler with its own arguments first.
    pub fn command(&self) -> std::process::Command {
        let mut c = std::process::Command::new(&self.program);
        c.args(&self.args);
        c
    }

    /// Compiles the C file `src` to the object `obj` with `flags` (klaraptor's generated C:
    /// rational programs, embedded manifests); the error names the compiler and shows its
    /// diagnostics.
    pub fn compile(
        &self,
        flags: &[&str],
        src: &Path,
        obj: &Path,
        verbose: bool,
    ) -> anyhow::Result<()> {
        let mut cmd = self.command();
        cmd.args(flags).arg("-c").arg(src).arg("-o").arg(obj);
        if verbose {
            crate::kl_eprintln!("klaraptor-cc: running {cmd:?}");
        }
        let out = anyhow::Context::with_context(cmd.output(), || {
            format!(
                "cannot run the C compiler {} ({HOST_CC_ENV} or $CC chooses it)",
                self.display()
            )
        })?;
        if !out.status.success() {
            anyhow::bail!(
                "compiling {} failed:\n{}",
                src.display(),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(())
    }

    /// For messages: the program and its arguments.
    pub fn display(&self) -> String {
        std::iter::once(self.program.display().to_string())
            .chain(self.args.iter().cloned())
            .collect::<Vec<_>>()
            .join(" ")
    }
}

#[cfg(test)]
mod host_cc_tests {
    use super::HostCc;

    #[test]
    fn words_are_split_as_a_shell_splits_them() {
        let p = |s: &str| HostCc::parse(s).unwrap();
        assert_eq!(p("gcc -m64").program.to_str(), Some("gcc"));
        assert_eq!(p("gcc -m64").args, ["-m64"]);
        assert_eq!(
            p("  '/opt/my cc/bin/gcc'  -O1 \"-DX=a b\" c\\ d").args,
            ["-O1", "-DX=a b", "c d"]
        );
        assert_eq!(
            p("'/opt/my cc/bin/gcc'").program.to_str(),
            Some("/opt/my cc/bin/gcc")
        );
        assert!(HostCc::parse("gcc 'oops").is_err());
        assert!(HostCc::parse("   ").is_err());
        assert!(p("/x/klaraptor-cc").is_cuda_driver());
        assert!(p("nvcc -O2").is_cuda_driver());
        assert!(!p("clang-19").is_cuda_driver());
    }
}
