//! # klaraptor-profiler
//!
//! What it is for: every measurement klaraptor makes on a GPU, and where it is kept. The
//! sampling plan of a kernel and the recipe runs of the profiling variant ([`plan`]); the
//! runs on this machine's GPU, one kernel at a time under the GPU's lock ([`gpu_profile`],
//! [`gpu_lock`]); the one table of hardware counters and how they are read ([`metrics`]);
//! the profile-record format shared by the in-process CUPTI collector
//! (`profiler/collector`), the ncu importer, the database and the fit ([`record`]); the
//! profile database that lets rebuilds and GPU-less build farms skip profiling ([`db`]);
//! device calibration by micro-benchmarks and the device descriptions built from it
//! ([`calibration`], [`devices`]); and the commands over them: `klaraptor profile`,
//! `klaraptor device`, `klaraptor choices` ([`profile_cmd`], [`device_cmd`],
//! [`choices_cmd`]).
//!
//! What it is not: the model or the fit (`klaraptor-model`, `klaraptor-fitting`), the
//! rational programs built from a profile (`klaraptor-program`), nor the driver that decides
//! when to profile (the `klaraptor` crate). It finds no CUDA toolchain itself: the commands
//! that need nvcc are handed a way to find it.

pub mod calibration;
pub mod choices_cmd;
pub mod console;
pub mod db;
pub mod device_cmd;
pub mod devices;
pub mod gpu_lock;
pub mod gpu_profile;
pub mod interrupt;
pub mod metrics;
pub mod plan;
pub mod profile_cmd;
pub mod record;
