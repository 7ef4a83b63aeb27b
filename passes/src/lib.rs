//! # klaraptor-passes
//!
//! What it is for: the compile-time analyses of a CUDA translation unit that need LLVM:
//! reading the source with libclang ([`clang`]: its kernels, parameters, mangled names and
//! includes), checking annotations against it ([`frontend`], which yields the
//! `klaraptor_spec::spec::KernelSpec`s), and the IO-builder pass over the host IR that routes
//! every launch of an annotated kernel through the runtime ([`inject`]); and the annotation it
//! would infer for each launch of a source ([`suggest`]).
//!
//! What it is not: the annotation language and the spec (`klaraptor-spec`, free of LLVM); it
//! runs no compiler and decides nothing about command lines (that is the driver), and it
//! knows nothing of profiling or models.

pub mod clang;
pub mod frontend;
pub mod inject;
pub mod suggest;
