//! # klaraptor-program
//!
//! What it is for: the rational program of a kernel, from its profile to what a binary
//! carries. The metrics of the MWP-CWP model fitted as rational functions of the data and the
//! launched shape ([`metrics`]); the program built from them and the profile, ranked by the
//! model (whose equations are `klaraptor-model`'s C, the same code the generated programs
//! include) and emitted as C ([`rational`], [`codegen`]); the link's decision, from the
//! profile alone, whether the model or the profile's fastest shape chooses ([`decide`]); a
//! program transferred to a GPU that has no profile of the kernel ([`transfer`]); the
//! manifests carried in objects and binaries ([`manifests`]) and compiled with the host C
//! compiler ([`host_cc`]); `klaraptor inspect`/`explain` ([`inspect_cmd`]); the check of
//! the choice against an exhaustive sweep, `klaraptor validate` ([`validate`],
//! [`validate_cmd`]); and the property that keeps a profile entry's text out of the code
//! ([`untrusted`]).
//!
//! What it is not: the measurement (`klaraptor-profiler`), the equations
//! (`klaraptor-model`), the least-squares fit (`klaraptor-fitting`), or the compile and link
//! that put the programs into a binary (the `klaraptor` driver).

pub mod codegen;
pub mod decide;
pub mod host_cc;
pub mod inspect_cmd;
pub mod manifests;
pub mod metrics;
pub mod rational;
pub mod transfer;
pub mod untrusted;
pub mod validate;
pub mod validate_cmd;

#[cfg(test)]
mod tests {
    /// The annotation check's shared-memory limit (`klaraptor-spec` cannot see the model's
    /// architecture table) is the largest opt-in limit of any GPU the table knows.
    #[test]
    fn the_annotations_shared_memory_limit_is_the_largest_gpus() {
        let most = klaraptor_model::device::known_archs()
            .iter()
            .map(|cc| {
                let d = klaraptor_model::device::Device::for_arch(cc.major, cc.minor).unwrap();
                i64::from(d.shared_memory.per_block_optin)
            })
            .max();
        assert_eq!(most, Some(klaraptor_spec::annotations::MAX_SHMEM_PER_BLOCK));
    }
}
