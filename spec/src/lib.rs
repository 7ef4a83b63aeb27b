//! # klaraptor-spec
//!
//! What it is for: what klaraptor knows of an annotated kernel before anything is compiled
//! or measured. The readers of `#pragma klaraptor`, of the original KLARAPTOR pragmas and of
//! `klaraptor.toml` ([`annotations`], [`config`]); the typed expression language of grid
//! formulas, block constraints and shared-memory amounts ([`expr`]); diagnostics that name
//! the file and line ([`diag`]); the quoted includes of a translation unit ([`includes`]);
//! and the [`spec::KernelSpec`]: an annotation checked against what the front end found in
//! the source ([`source`]); the spec as an instrumented object carries it to the link
//! ([`link`]: one TOML document per kernel instance, in section `.klaraptor_spec`), the
//! instances' names ([`names`]) and the block shapes an annotation admits ([`shapes`]).
//!
//! What it is not: it parses no C++ (libclang does that, in `klaraptor-passes`, which fills
//! in a [`source::SourceInfo`]), links no LLVM, runs no compiler, and knows nothing of
//! profiles or models. Every reader of a spec (the driver, the profiler, the rational
//! programs, the study, the fuzz targets) depends on this crate alone for it.

pub mod annotations;
pub mod config;
pub mod diag;
pub mod expr;
pub mod includes;
pub mod link;
pub mod names;
pub mod shapes;
pub mod source;
pub mod spec;
