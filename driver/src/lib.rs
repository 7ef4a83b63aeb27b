//! # klaraptor (the driver)
//!
//! What it is for: `klaraptor-cc`, the drop-in replacement for `nvcc`, and `klaraptor`, the
//! inspection tool. The driver reads the nvcc command line ([`nvcc_args`]), finds the CUDA
//! toolchain ([`toolchain`]), and orchestrates the stages: the front-end and (to come) the
//! launch-injection pass in `klaraptor-passes`, profiling in `klaraptor-profiler`, fitting
//! in `klaraptor-fitting`, code generation and the instrumented link ([`compile`]).
//!
//! What it is not: no analysis, model or numerical code lives here; the driver only wires
//! the stages together and maps their errors to messages and exit codes.

pub mod compile;
pub mod instrument;
pub mod link;
pub mod nvcc_args;
pub mod runtime;
pub mod toolchain;

/// klaraptor's own messages, written so that a closed pipe never fails a build.
pub use klaraptor_profiler::{kl_eprintln, kl_println};
