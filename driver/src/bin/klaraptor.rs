//! `klaraptor`: inspection and tooling around `klaraptor-cc`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use klaraptor::toolchain::Toolchain;
use klaraptor_passes::clang::ClangConfig;
use klaraptor_passes::frontend::{self, FrontendError, Outcome};

#[derive(Parser)]
#[command(
    name = "klaraptor",
    version,
    about = "Inspect what klaraptor-cc makes of CUDA sources"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Check the annotations of CUDA sources against their kernels and print the kernel
    /// specs klaraptor-cc would build from (as TOML).
    Specs {
        /// CUDA sources.
        #[arg(required = true)]
        sources: Vec<PathBuf>,
        /// Include directories, as for nvcc.
        #[arg(short = 'I', value_name = "DIR")]
        include: Vec<String>,
        /// Macro definitions, as for nvcc.
        #[arg(short = 'D', value_name = "NAME[=VALUE]")]
        define: Vec<String>,
    },
    /// Show which nvcc and CUDA installation klaraptor-cc uses.
    Toolchain,
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("klaraptor: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let tc = Toolchain::discover(None)?;
    match cli.command {
        Cmd::Toolchain => {
            println!("nvcc: {} ({})", tc.nvcc.display(), tc.origin);
            println!("CUDA root: {}", tc.cuda_root().display());
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Specs {
            sources,
            include,
            define,
        } => {
            let mut cfg = ClangConfig::new(tc.cuda_root());
            cfg.stub_include = klaraptor::toolchain::project_prefixes()
                .into_iter()
                .map(|p| p.join("clang-cuda-stubs"))
                .find(|p| p.is_dir());
            cfg.args.extend(include.iter().map(|i| format!("-I{i}")));
            cfg.args.extend(define.iter().map(|d| format!("-D{d}")));
            let mut failed = false;
            for src in &sources {
                match frontend::analyze(src, &cfg) {
                    Ok(Outcome::Unannotated) => {
                        println!("# {}: no annotated kernels", src.display())
                    }
                    Ok(Outcome::SourceErrors(errs)) => {
                        failed = true;
                        eprintln!("{}: the source does not compile:", src.display());
                        for e in errs {
                            eprintln!("  {e}");
                        }
                    }
                    Ok(Outcome::Annotated(a)) => {
                        println!("# {}", src.display());
                        for s in &a.specs {
                            println!("{}", s.to_toml());
                        }
                    }
                    Err(FrontendError::User(d)) => {
                        failed = true;
                        eprintln!("{d}");
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            Ok(if failed {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            })
        }
    }
}
