//! # klaraptor (the driver)
//!
//! What it is for: `klaraptor-cc`, the drop-in replacement for `nvcc`, and `klaraptor`, the
//! tool around it. The driver is glue: it reads the nvcc command line ([`nvcc_args`]), finds
//! the CUDA toolchain ([`toolchain`]), compiles and instruments a translation unit
//! ([`compile`], [`instrument`]: the front end and the launch pass of `klaraptor-passes`),
//! carries the runtime into every object ([`runtime`]), and links ([`link`]): profiling
//! through `klaraptor-profiler`, the rational programs through `klaraptor-program`. The two
//! binaries' command lines live in `src/bin/`.
//!
//! What it is not: no analysis, measurement, model or numerical code lives here
//! (`docs/architecture.md` says which crate owns which); the driver wires the stages
//! together and maps their errors to messages and exit codes.

pub mod compile;
pub mod instrument;
pub mod link;
pub mod nvcc_args;
pub mod runtime;
pub mod toolchain;

/// klaraptor's own messages, written so that a closed pipe never fails a build.
pub use klaraptor_profiler::{kl_eprintln, kl_println};
