//! # klaraptor-profiler
//!
//! What it is for: collecting the low-level metrics of annotated kernels on a GPU (an
//! in-process CUPTI range-profiler collector), calibrating a device with micro-benchmarks,
//! and keeping the profile database that lets rebuilds and GPU-less build farms skip
//! profiling.
//!
//! What it is not: the model or the fit (see `klaraptor-fitting`), nor the driver that
//! decides when to profile (see the `klaraptor` driver crate).
//!
//! Layout: [`record`] is the profile-record format shared by the collector, the ncu
//! importer, the database and the fit.

pub mod calibration;
pub mod db;
pub mod gpu_lock;
pub mod record;
