//! The study's tools for model work without a GPU: `replay` ranks recorded exhaustive sweeps
//! with a study's rational programs, `remodel` rebuilds those programs from the profile
//! database with the current model, `diag` prints one kernel's ranking beside what a sweep
//! measured at one size, `reduce-db` writes a profile database cut to a reduced plan and
//! `reduce-compare` sets a reduced replay beside the full one (issue 39).

pub mod diag;
pub mod reduce;
pub mod remodel;
pub mod replay;
