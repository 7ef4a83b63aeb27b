//! Rebuilds the rational programs of a built study from its profile database with the
//! current model code, in place: for every `<study>/<program>/models/*.json` manifest, the
//! entry of the same kernel, device-code hash and device is read from the database and the
//! program rebuilt and rewritten (C and manifest). The accuracy report then ranks with the
//! new programs (`accuracy-report report` without a choice phase uses the manifests), which
//! replays a recorded exhaustive sweep against a changed model without a GPU.
//!
//! With `KL_REMODEL_FROM=<device name>`, each program is rebuilt instead from the entry of
//! the same kernel on that other device, relabelled as the manifest's device (its name, UUID,
//! compute capability and SM count, from the manifest's own entry): the counters and times of
//! one GPU with the description and calibration of another, a transferred model (issue 22).
//! The programs are written beside the others with the manifest's device, so `replay
//! --device` measures them against that device's sweep.
//!
//! accuracy-report remodel <study dir> <profile db>

use std::path::PathBuf;

use anyhow::{Context, Result};
use klaraptor_profiler::db::ProfileDb;
use klaraptor_profiler::record::DeviceId;
use klaraptor_program::rational::{self, RationalProgram};
use klaraptor_spec::link::LinkSpec;

pub fn run(args: &[String]) -> Result<()> {
    let (study, db) = match args {
        [s, d] => (PathBuf::from(s), PathBuf::from(d)),
        _ => anyhow::bail!("usage: accuracy-report remodel <study dir> <profile db>"),
    };
    let db = ProfileDb::open(&db)?;
    let from = std::env::var("KL_REMODEL_FROM").ok();
    let mut n = 0;
    for prog_dir in std::fs::read_dir(&study)? {
        let models = prog_dir?.path().join("models");
        if !models.is_dir() {
            continue;
        }
        for (path, old) in rational::load_dir(&models)? {
            let spec = spec_of(&old);
            // A transferred program (issue 22) has no entry of its own device: it is rebuilt
            // from its source device's entry, relabelled, as the link builds it.
            let own_entry = db.get(&old.mangled, &old.provenance.code_hash, &old.device.name)?;
            let transferred = if own_entry.is_some() {
                None
            } else {
                old.transferred_from.clone()
            };
            let own = match (own_entry, &old.transferred_from) {
                (Some(e), _) => e,
                (None, Some(src)) => {
                    let mut e = db
                        .get(&old.mangled, &old.provenance.code_hash, src)?
                        .with_context(|| {
                            format!("{}: no profile entry on {src}", path.display())
                        })?;
                    e.device = DeviceId {
                        name: old.device.name.clone(),
                        uuid: old.device.uuid.clone(),
                        cc: format!(
                            "{}.{}",
                            old.device.compute_capability.major,
                            old.device.compute_capability.minor
                        ),
                        sm_count: old.device.sm_count,
                    };
                    e
                }
                (None, None) => anyhow::bail!("{}: no profile entry", path.display()),
            };
            let entry = match &from {
                Some(f) if f != &old.device.name => {
                    let mut e = db
                        .get(&old.mangled, &old.provenance.code_hash, f)?
                        .with_context(|| format!("{}: no profile entry on {f}", path.display()))?;
                    e.device = own.device.clone();
                    e
                }
                _ => own,
            };
            let mut new = rational::build(&spec, &entry, &models)
                .with_context(|| format!("rebuilding {}", path.display()))?;
            new.transferred_from = transferred;
            new.write(&models)?;
            println!(
                "{}\t{}\tscale {:.3} overhead {:.3} µs\tmedian rel err {:.3} (model {:.3})",
                path.display(),
                new.kernel,
                new.time_fit.scale,
                new.time_fit.overhead_us,
                new.time_fit.median_rel_error,
                new.time_fit.model_median_rel_error
            );
            n += 1;
        }
    }
    eprintln!("rebuilt {n} programs");
    Ok(())
}

/// The launch specification a manifest was built from (what the link's spec holds that the
/// fit and the decision read).
pub(crate) fn spec_of(p: &RationalProgram) -> LinkSpec {
    LinkSpec {
        shmem: p.shmem.clone(),
        name: p.kernel.clone(),
        mangled: p.mangled.clone(),
        data: p.data.clone(),
        dim: p.dim,
        grid: p.grid.clone(),
        block: p.block.clone(),
        profile_run: None,
        profile_sizes: Vec::new(),
        code_hash: p.provenance.code_hash.clone(),
        annotated_at: String::new(),
        build_dir: PathBuf::new(),
    }
}
