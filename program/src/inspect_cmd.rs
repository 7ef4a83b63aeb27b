//! `klaraptor inspect` and `klaraptor explain`: what rational programs a binary (or a build
//! directory) carries, and how one of them ranks the candidate shapes at a data size. Both
//! read the manifests embedded in the binary ([`crate::manifests`]: every object compiled with a
//! profile, and every klaraptor link that adds programs, embeds them, so a binary linked by
//! g++ or CMake has them) and those klaraptor-cc keeps next to it
//! (`<binary>.klaraptor/*.json`), and evaluate the model through the same C the generated
//! programs include: no GPU is needed.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use crate::rational::{self, RationalProgram};

/// `println!` that stops quietly when stdout is closed (`klaraptor explain … | head`).
macro_rules! outln {
    ($($t:tt)*) => {{
        use std::io::Write;
        let _ = writeln!(std::io::stdout().lock(), $($t)*);
    }};
}

/// The models directories of a binary (`<binary>.klaraptor`) or of a build directory (every
/// `*.klaraptor` directory in it, not recursively), or the directory itself.
pub fn models_dirs(target: &Path) -> Result<Vec<PathBuf>> {
    if target.is_file() {
        let d = rational::models_dir(target);
        if !d.is_dir() {
            bail!(
                "{} has no rational programs beside it ({} does not exist): was it linked by \
                 klaraptor-cc with a profile for its kernels?",
                target.display(),
                d.display()
            );
        }
        return Ok(vec![d]);
    }
    if target.extension().is_some_and(|e| e == "klaraptor") && target.is_dir() {
        return Ok(vec![target.to_path_buf()]);
    }
    let mut out = Vec::new();
    for e in std::fs::read_dir(target).with_context(|| format!("reading {}", target.display()))? {
        let p = e?.path();
        if p.is_dir() && p.extension().is_some_and(|e| e == "klaraptor") {
            out.push(p);
        }
    }
    out.sort();
    if out.is_empty() {
        bail!(
            "no rational programs in {} (no *.klaraptor directory): build with \
             `make NVCC=klaraptor-cc` first",
            target.display()
        );
    }
    Ok(out)
}

fn programs(target: &Path) -> Result<Vec<(PathBuf, RationalProgram)>> {
    let mut out: Vec<(PathBuf, RationalProgram)> = Vec::new();
    if target.is_file() {
        // The manifests the binary carries; each named by the C file it was generated as
        // (it is not kept beside the binary), unless the models directory has it.
        let bytes =
            std::fs::read(target).with_context(|| format!("reading {}", target.display()))?;
        let dir = rational::models_dir(target);
        let kept = if dir.is_dir() {
            rational::load_dir(&dir)?
        } else {
            Vec::new()
        };
        for p in crate::manifests::scan_models(&bytes, target)? {
            let same = |q: &RationalProgram| {
                q.mangled == p.mangled
                    && q.device.name == p.device.name
                    && q.provenance.code_hash == p.provenance.code_hash
            };
            if kept.iter().any(|(_, q)| same(q)) {
                continue;
            }
            let name = format!("{} (embedded) {}", target.display(), p.files().json_name);
            out.push((PathBuf::from(name), p));
        }
        out.extend(kept);
        if out.is_empty() {
            bail!(
                "{} carries no rational program and has none beside it ({} does not exist): \
                 was it built by klaraptor-cc with a profile for its kernels? (the compile \
                 puts a kernel's program into its object when the profile database has the \
                 kernel; `klaraptor profile {}` on a GPU machine, then a rebuild, gives it one)",
                target.display(),
                dir.display(),
                target.display()
            );
        }
        return Ok(out);
    }
    for d in models_dirs(target)? {
        out.extend(rational::load_dir(&d)?);
    }
    Ok(out)
}

fn pct(x: Option<f64>) -> String {
    x.map_or("-".into(), |v| format!("{:.1}%", 100.0 * v))
}

/// The name a rational program's kernel goes by at run time (in the logs, the choices
/// cache): `stencil1d<3>` for an instance of a template ([`klaraptor_spec::names`]).
fn run_name(p: &RationalProgram) -> String {
    klaraptor_spec::names::instance_name(&p.kernel, &p.mangled)
}

/// `klaraptor inspect <binary or dir>`.
pub fn inspect(target: &Path) -> Result<()> {
    let progs = programs(target)?;
    for (path, p) in &progs {
        outln!("kernel {} ({})", run_name(p), p.mangled);
        outln!("  rational program: {}", path.with_extension("c").display());
        outln!(
            "  device: {} (sm_{}{}, {} SMs)",
            p.device.name,
            p.device.compute_capability.major,
            p.device.compute_capability.minor,
            p.device.sm_count
        );
        outln!(
            "  data: {}   dim: {}   grid: {}   constraints: {}",
            p.data.join(", "),
            p.dim,
            p.grid.join(", "),
            if p.block.is_empty() {
                "none".to_string()
            } else {
                p.block.join(" && ")
            }
        );
        outln!(
            "  {} candidate shapes; {} registers/thread, {} B shared memory/block",
            p.candidates.len(),
            p.regs_per_thread,
            p.smem_per_block
        );
        if let Some(f) = &p.shmem {
            outln!(
                "  dynamic shared memory follows the block: shmem({f}) bytes, computed for each \
                 candidate (occupancy, and no shape over the device's shared memory per block)"
            );
        }
        if !p.faulted.is_empty() {
            let shapes: Vec<String> = p
                .faulted
                .iter()
                .map(|b| format!("{}x{}x{}", b[0], b[1], b[2]))
                .collect();
            outln!(
                "  faulted in the profile, never chosen: {}; also left out: {} shapes not \
                 profiled with as many threads",
                shapes.join(", "),
                p.left_out_after_faults.len()
            );
        }
        if let Some(c) = &p.barrier_cap {
            let f = c.fastest;
            outln!(
                "  blocks wait at barriers: at most {} threads a block, those of {}x{}x{}, the \
                 fastest shape the profile measured at its largest size {:?}; {} larger \
                 candidates never chosen",
                c.threads,
                f[0],
                f[1],
                f[2],
                c.sizes,
                c.left_out.len()
            );
        }
        let pr = &p.provenance;
        outln!(
            "  profile: {} samples ({} failed) at sizes {:?}, {} on {}",
            pr.samples,
            pr.failed_samples,
            pr.profile_sizes,
            pr.collector,
            pr.captured_at
        );
        if let Some(from) = &p.transferred_from {
            outln!(
                "  transferred from {from}: this GPU has no profile of its own; the program is \
                 fitted on that GPU's profile (same architecture) and generated for this GPU's \
                 description"
            );
        }
        let tf = &p.time_fit;
        outln!(
            "  time calibration: {:.4} x model + {:.3} µs per launch (median error on {} profiled launches {} -> {})",
            tf.scale,
            tf.overhead_us,
            tf.samples,
            pct(Some(tf.model_median_rel_error)),
            pct(Some(tf.median_rel_error))
        );
        if tf.warp_us > 0.0 {
            outln!(
                "  warps in turn: each launched warp adds {:.2} ns (a loop kernel's work its warps \
                 do one after another, as atomics on one address)",
                tf.warp_us * 1000.0
            );
        }
        for line in crate::decide::lines(p.decision.as_ref()) {
            outln!("  {line}");
        }
        outln!("  fit quality (per-warp metrics; held-out relative error: median / max / extrapolation max):");
        for (name, f) in &p.metrics {
            let d = &f.diagnostics;
            let h = d.heldout.as_ref();
            outln!(
                "    {name:<20} degrees num {:?} den {:?}  {} / {} / {}  cond {:.1e}",
                d.num_degrees,
                d.den_degrees,
                pct(h.map(|h| h.median_rel_error)),
                pct(h.map(|h| h.max_rel_error)),
                pct(h.and_then(|h| h.extrapolation_max_rel_error)),
                d.condition_number
            );
        }
    }
    Ok(())
}

/// `klaraptor explain <binary or dir> <kernel> --size N[,M…]`: `kernel` is the source name
/// (every instance of a template), an instance's run-time name (`stencil1d<3>`) or a mangled
/// name.
pub fn explain(target: &Path, kernel: &str, sizes: &[i64], device: Option<&str>) -> Result<()> {
    let progs = programs(target)?;
    let matching: Vec<&(PathBuf, RationalProgram)> = progs
        .iter()
        .filter(|(_, p)| p.kernel == kernel || p.mangled == kernel || run_name(p) == kernel)
        .filter(|(_, p)| device.is_none_or(|d| p.device.name.contains(d)))
        .collect();
    if matching.is_empty() {
        let names: Vec<String> = progs
            .iter()
            .map(|(_, p)| format!("{} ({})", run_name(p), p.device.name))
            .collect();
        bail!(
            "no rational program for kernel {kernel}{}; there are: {}",
            device.map(|d| format!(" on {d}")).unwrap_or_default(),
            names.join(", ")
        );
    }
    for (path, p) in matching {
        let ranked = p.rank(sizes)?;
        outln!(
            "{} on {} at {} ({}):",
            run_name(p),
            p.device.name,
            p.data
                .iter()
                .zip(sizes)
                .map(|(l, v)| format!("{l}={v}"))
                .collect::<Vec<_>>()
                .join(" "),
            path.with_extension("c").display()
        );
        outln!(
            "  {:>4} {:>14} {:>16} {:>12} {:>7} {:>7} {:>6} {:>6} {:>6}  limiting factor",
            "rank",
            "block",
            "grid",
            "pred. µs",
            "MWP",
            "CWP",
            "warps",
            "blocks",
            "waves"
        );
        for (i, r) in ranked.iter().enumerate() {
            let q = &r.prediction;
            outln!(
                "{} {:>4} {:>14} {:>16} {:>12.3} {:>7.2} {:>7.2} {:>6} {:>6} {:>6}  {}",
                if i == 0 { "*" } else { " " },
                i + 1,
                format!("{}x{}x{}", r.block[0], r.block[1], r.block[2]),
                format!("{}x{}x{}", r.grid[0], r.grid[1], r.grid[2]),
                q.time_us,
                q.mwp,
                q.cwp,
                q.active_warps_per_sm,
                q.active_blocks_per_sm,
                q.waves,
                q.limiter.name()
            );
        }
        if ranked.is_empty() {
            outln!("  no candidate shape is allowed at this size: the launch keeps its own dims");
        } else {
            outln!("  * the choice (ties: more threads, then larger bx, then larger by)");
        }
        if let Some(line) = crate::decide::lines(p.decision.as_ref()).first() {
            outln!("  {line}");
        }
    }
    Ok(())
}
