//! # klaraptor-model
//!
//! What it is for: the device description (per-architecture tables merged with what the
//! driver reports and with calibration), occupancy, and the MWP-CWP performance model. The
//! model is written once, in C (`c/kl_model.c`): compiled into this crate, which calls it
//! (`ffi`), and emitted into each kernel's rational program.
//!
//! - [`device`]: [`Device`], one TOML file per GPU (`model/devices/`).
//! - [`mod@occupancy`]: resident blocks per SM, equal to
//!   `cudaOccupancyMaxActiveBlocksPerMultiprocessor`, and the block size
//!   `cudaOccupancyMaxPotentialBlockSize` suggests.
//! - [`mwp_cwp`]: [`predict`], the model, every equation documented with its source (the
//!   computation is the C's).
//! - [`c_emit`]: the C99 source ([`C_MODEL`]) and a device as a C initializer
//!   ([`device_to_c`]); `tests/differential.rs` checks that a program built from them
//!   predicts what this crate does.
//! - [`c_text`]: text from untrusted files as C string literals and comment text.
//!
//! What it is not: measurement (see `klaraptor-profiler`) or fitting (see
//! `klaraptor-fitting`).

pub mod c_emit;
pub mod c_text;
pub mod device;
mod ffi;
pub mod mwp_cwp;
pub mod occupancy;

pub use c_emit::{device_to_c, C_MODEL};
pub use device::{Calibration, ComputeCapability, Device, DeviceError, Figure, Measured, Source};
pub use mwp_cwp::{choose, predict, Launch, Limiter, Prediction, WarpMetrics};
pub use occupancy::{
    max_potential_block_size, occupancy, occupancy_with_carveout, Carveout, Occupancy,
    OccupancyLimiter, PotentialBlockSize,
};
