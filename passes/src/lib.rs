//! # klaraptor-passes
//!
//! What it is for: the compile-time analyses of a CUDA translation unit. Today that is the
//! annotation front-end: reading `#pragma klaraptor`, the original KLARAPTOR pragmas and
//! `klaraptor.toml` ([`annotations`], [`config`]), the typed expression language of grid
//! formulas and block constraints ([`expr`]), and checking the annotations against the real
//! source with libclang ([`clang`], [`spec`]). The IO-builder LLVM pass that rewrites
//! launches will live here too.
//!
//! What it is not: it runs no compiler and decides nothing about command lines (that is
//! the driver), and it knows nothing of profiling or models.

pub mod annotations;
pub mod clang;
pub mod config;
pub mod diag;
pub mod expr;
pub mod frontend;
pub mod includes;
pub mod inject;
pub mod spec;
