//! The C compiler that builds the C klaraptor generates (rational programs, kernel
//! descriptors, embedded manifests): which one (`KLARAPTOR_HOST_CC`, `$CC` or `cc`) and how
//! it is run.

use std::path::{Path, PathBuf};

use anyhow::bail;
use anyhow::Result;

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
    /// ([`split_args`]): the program, then its arguments.
    pub fn parse(s: &str) -> Result<HostCc, String> {
        let mut words = split_args(s).map_err(|e| e.to_string())?.into_iter();
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
            klaraptor_profiler::kl_eprintln!("klaraptor-cc: running {cmd:?}");
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

/// Splits an argument string as a shell would for plain words: blanks separate, single and
/// double quotes group, a backslash escapes the next character (outside single quotes).
pub fn split_args(s: &str) -> Result<Vec<String>> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => {
                if in_word {
                    out.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(x) => cur.push(x),
                        None => bail!("unbalanced ' in {s:?}"),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(x) => cur.push(x),
                            None => bail!("a \\ ends {s:?}"),
                        },
                        Some(x) => cur.push(x),
                        None => bail!("unbalanced \" in {s:?}"),
                    }
                }
            }
            '\\' => {
                in_word = true;
                match chars.next() {
                    Some(x) => cur.push(x),
                    None => bail!("a \\ ends {s:?}"),
                }
            }
            c => {
                in_word = true;
                cur.push(c);
            }
        }
    }
    if in_word {
        out.push(cur);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argument_splitting() {
        assert_eq!(split_args("1000 1000").unwrap(), ["1000", "1000"]);
        assert_eq!(split_args("  -n 5\t--x ").unwrap(), ["-n", "5", "--x"]);
        assert_eq!(
            split_args(r#"a 'b c' "d \"e\"" f\ g"#).unwrap(),
            ["a", "b c", "d \"e\"", "f g"]
        );
        assert_eq!(split_args("''").unwrap(), [""]);
        assert!(split_args("").unwrap().is_empty());
        assert!(split_args("'a").is_err());
        assert!(split_args("\"a").is_err());
        assert!(split_args("a\\").is_err());
    }

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
