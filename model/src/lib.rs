//! # klaraptor-model
//!
//! What it is for: the device description (per-architecture tables merged with what the
//! driver reports and with calibration), occupancy, and the MWP-CWP performance model, as a
//! Rust reference implementation and as C emitted into each kernel's rational program.
//!
//! - [`device`]: [`Device`], one TOML file per GPU (`model/devices/`).
//! - [`mod@occupancy`]: resident blocks per SM, equal to
//!   `cudaOccupancyMaxActiveBlocksPerMultiprocessor`, and the block size
//!   `cudaOccupancyMaxPotentialBlockSize` suggests.
//! - [`mwp_cwp`]: [`predict`], the model, every equation documented with its source.
//! - [`c_emit`]: the same occupancy and model in C99 ([`C_MODEL`]) and a device as a C
//!   initializer ([`device_to_c`]); `tests/differential.rs` holds the two equal.
//!
//! What it is not: measurement (see `klaraptor-profiler`) or fitting (see
//! `klaraptor-fitting`).

pub mod c_emit;
pub mod device;
pub mod mwp_cwp;
pub mod occupancy;

pub use c_emit::{device_to_c, C_MODEL};
pub use device::{Calibration, ComputeCapability, Device, DeviceError, Figure, Measured, Source};
pub use mwp_cwp::{predict, Launch, Limiter, Prediction, WarpMetrics};
pub use occupancy::{
    max_potential_block_size, occupancy, occupancy_with_carveout, Carveout, Occupancy,
    OccupancyLimiter, PotentialBlockSize,
};
