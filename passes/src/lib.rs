//! # klaraptor-passes
pub mod clang;
