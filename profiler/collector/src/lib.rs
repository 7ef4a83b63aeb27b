//! # klaraptor-collector
//!
//! What it is for: the in-process CUPTI collector loaded by the profiling variant of a
//! user's program; CUPTI and CUDA driver bindings, loaded at run time.
//!
//! What it is not: the profile database (see `klaraptor-profiler`).
