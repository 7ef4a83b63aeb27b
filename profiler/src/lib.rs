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
//! Nothing is implemented here yet: the collector, calibration and database arrive with
//! the Profiling issue. The crate exists so the layout is the architecture from day one.
