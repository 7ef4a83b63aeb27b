//! # klaraptor-model
//!
//! What it is for: the device description (per-architecture tables merged with what the
//! driver reports and with calibration), occupancy, and the MWP-CWP performance model, as a
//! Rust reference implementation and as C emitted into each kernel's rational program.
//!
//! What it is not: measurement (see `klaraptor-profiler`) or fitting (see
//! `klaraptor-fitting`).
