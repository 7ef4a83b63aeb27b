//! Profiling at link time: the sampling plan, the profiling variant's runs, and turning
//! what they leave (the collector's JSON lines, or an ncu report joined with the launch log)
//! into profile records (`crate::record`).
//!
//! The profiling variant is the user's program linked with `--wrap=__cudaLaunchKernel` and
//! the profiling runtime (runtime-shim/src/klaraptor_prof.c): every launch of an annotated
//! kernel at a new data size is swept over the plan's block shapes before the program's own
//! launch. The recipe of the annotation (`profile(run="./app {N}", sizes=[…])`) says how to
//! run the program at each profiling size.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::metrics::{self, Field};
use crate::record::{add_program_block, Plan, ProgramBlock, Sample};
use anyhow::{bail, Context, Result};
use serde::Deserialize;

use klaraptor_spec::link::LinkSpec;

/// The generic sample of block shapes for a kernel of dimensionality `dim`: the plan of a
/// kernel whose constraints allow all of it ([`kernel_plan`], where every plan comes from,
/// says what a kernel that does not gets). The fit works on launch totals scaled by lane
/// occupancy (metrics.rs), which depend on the shape far less than per-warp figures, so the
/// plan samples the shapes rather than taking all of them:
/// - 1-D: every power of two 1 … 1024 and the multiples of 32 between 64 and 384 that are
///   not (19 shapes): occupancy steps most there;
/// - 2-D: 1×1 and every power-of-two shape of 8, 64, 256 or 1024 threads (32 of the 66
///   candidates): every bx and by from 1 to 1024 appears, with tiny, medium and full blocks;
/// - 3-D: the same thread counts with bz ≤ 8.
///
/// Tiny blocks stay: they are legal and the fit must see them. Shapes the device rejects at
/// run time, or the kernel's constraints at some profile size, are recorded as failed by the
/// runtime, not dropped.
pub fn plan_shapes(dim: u8) -> Vec<[u32; 3]> {
    let p2 = |e: u32| 1u32 << e;
    let mut out = Vec::new();
    match dim {
        1 => {
            for e in 0..=10 {
                out.push([p2(e), 1, 1]);
            }
            for m in [96, 160, 192, 224, 288, 320, 352, 384] {
                out.push([m, 1, 1]);
            }
            out.sort();
        }
        2 => {
            out.push([1, 1, 1]);
            for total in [3u32, 6, 8, 10] {
                for ey in 0..=total {
                    out.push([p2(total - ey), p2(ey), 1]);
                }
            }
        }
        _ => {
            out.push([1, 1, 1]);
            for total in [3u32, 6, 8, 10] {
                for ez in 0..=3.min(total) {
                    for ey in 0..=(total - ez) {
                        out.push([p2(total - ez - ey), p2(ey), p2(ez)]);
                    }
                }
            }
        }
    }
    out
}

/// Below this many allowed shapes of the generic plan ([`plan_shapes`]), its spread is lost:
/// a kernel's plan is then every shape it allows ([`kernel_plan`]).
pub const MIN_GENERIC_ALLOWED: usize = 8;

/// How a kernel's sampling plan was drawn ([`kernel_plan`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlanRule {
    /// The kernel allows every shape of the generic plan: the plan is the generic one.
    Generic,
    /// The generic plan's allowed shapes, topped up with other allowed shapes (spread over
    /// thread counts) to as many shapes as the generic plan has.
    ToppedUp,
    /// Every allowed shape: fewer are allowed than the generic plan has, or fewer than
    /// [`MIN_GENERIC_ALLOWED`] of the generic plan's.
    EveryAllowed,
    /// No candidate shape is allowed at any profile size: the generic plan, whose shapes
    /// the profiling runtime records as rejected (the records say why).
    NoneAllowed,
    /// The constraints do not parse: the generic plan (the build reports the constraint).
    Unreadable,
}

/// The sampling plan of one kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelPlan {
    pub shapes: Vec<[u32; 3]>,
    pub rule: PlanRule,
    /// How many candidate shapes (`rational::candidates` within the generic device limits)
    /// the kernel allows at some profile size, of how many.
    pub allowed: usize,
    pub candidates: usize,
}

/// The sampling plan of `spec`: the block shapes the profiling runtime sweeps at each of its
/// profile sizes. Every user of a kernel's plan (the plan file of the profiling variant,
/// the plan record of its profile, the progress messages, `klaraptor plan`) takes it from
/// here.
///
/// The shapes are drawn from those the model may choose: the candidates of the kernel's
/// dimensionality ([`klaraptor_spec::spec::candidate_blocks`], what the rational program searches)
/// within the generic device limits (the sm_90 table: 1024 threads, 1024 × 1024 × 64),
/// allowed by the kernel's block constraints. A constraint that names a data label is
/// evaluated at each profile size: a shape is allowed when at some profile size every
/// constraint holds (the runtime still rejects it at the sizes where it does not); without
/// profile sizes only the constraints that need no data count. Then:
/// - when every shape of the generic plan ([`plan_shapes`]) is allowed, the plan is the
///   generic one, unchanged;
/// - when fewer shapes are allowed than the generic plan has, or fewer than
///   [`MIN_GENERIC_ALLOWED`] of the generic plan's shapes are, the plan is every allowed
///   shape (in candidate order);
/// - otherwise it is the generic plan's allowed shapes (in its order), topped up with other
///   allowed shapes (in candidate order) until it has as many as the generic plan. Each
///   added shape is, of the allowed ones left, one of a thread count the plan has fewest
///   shapes of; of those, the farthest (in log2 of the threads) from the plan's thread
///   counts; then the farthest (in log2 of each dimension) from the plan's shapes of its
///   thread count; then the first candidate.
///
/// When no candidate is allowed, or the constraints do not parse, the plan is the generic
/// one (the runtime rejects its shapes and says why; the build reports the constraint).
pub fn kernel_plan(spec: &LinkSpec) -> KernelPlan {
    let generic = plan_shapes(spec.dim);
    let limits = klaraptor_model::Device::for_arch(9, 0).ok();
    let candidates: Vec<[u32; 3]> = klaraptor_spec::spec::candidate_blocks(spec.dim)
        .into_iter()
        .filter(|b| limits.as_ref().is_none_or(|d| d.within_limits(*b)))
        .collect();
    let n_candidates = candidates.len();
    let unfiltered = |rule| KernelPlan {
        shapes: generic.clone(),
        rule,
        allowed: 0,
        candidates: n_candidates,
    };
    let Ok(klaraptor_spec::shapes::LaunchShape { constraints, .. }) = spec.shape() else {
        return unfiltered(PlanRule::Unreadable);
    };
    let allowed: Vec<[u32; 3]> = candidates
        .into_iter()
        .filter(|&b| {
            klaraptor_spec::shapes::allowed_for_some_data(&constraints, b)
                && (spec.profile_sizes.is_empty()
                    || spec.profile_sizes.iter().any(|size| {
                        klaraptor_spec::shapes::allowed_at(&constraints, &spec.data, size, b)
                    }))
        })
        .collect();
    if allowed.is_empty() {
        return unfiltered(PlanRule::NoneAllowed);
    }
    let mut shapes: Vec<[u32; 3]> = generic
        .iter()
        .filter(|b| allowed.contains(b))
        .copied()
        .collect();
    let rule = if shapes.len() == generic.len() {
        PlanRule::Generic
    } else if allowed.len() < generic.len() || shapes.len() < MIN_GENERIC_ALLOWED {
        shapes = allowed.clone();
        PlanRule::EveryAllowed
    } else {
        let added = top_up(&shapes, &allowed, generic.len());
        shapes.extend(added);
        PlanRule::ToppedUp
    };
    KernelPlan {
        shapes,
        rule,
        allowed: allowed.len(),
        candidates: n_candidates,
    }
}

/// The shapes of `pool` (in its order) that top `plan` up to `target` shapes, chosen as
/// [`kernel_plan`] says.
fn top_up(plan: &[[u32; 3]], pool: &[[u32; 3]], target: usize) -> Vec<[u32; 3]> {
    let threads = |b: &[u32; 3]| u64::from(b[0]) * u64::from(b[1]) * u64::from(b[2]);
    let lg = |v: u64| (v.max(1) as f64).log2();
    let mut chosen: Vec<[u32; 3]> = plan.to_vec();
    let mut rest: Vec<usize> = (0..pool.len())
        .filter(|&i| !plan.contains(&pool[i]))
        .collect();
    let mut added: Vec<usize> = Vec::new();
    while chosen.len() < target && !rest.is_empty() {
        // (shapes of its thread count, distance to the plan's thread counts, distance to
        // the plan's shapes of its thread count): the least first, then the farthest.
        let key = |b: &[u32; 3]| {
            let t = threads(b);
            let same: Vec<&[u32; 3]> = chosen.iter().filter(|c| threads(c) == t).collect();
            let gap = chosen
                .iter()
                .map(|c| (lg(t) - lg(threads(c))).abs())
                .fold(f64::INFINITY, f64::min);
            let shape_gap = same
                .iter()
                .map(|c| {
                    (0..3)
                        .map(|i| (lg(u64::from(b[i])) - lg(u64::from(c[i]))).abs())
                        .sum::<f64>()
                })
                .fold(f64::INFINITY, f64::min);
            (same.len(), gap, shape_gap)
        };
        let mut best = 0;
        let mut best_key = key(&pool[rest[0]]);
        for (k, &i) in rest.iter().enumerate().skip(1) {
            let kk = key(&pool[i]);
            let better =
                kk.0.cmp(&best_key.0)
                    .then(best_key.1.total_cmp(&kk.1))
                    .then(best_key.2.total_cmp(&kk.2))
                    == std::cmp::Ordering::Less;
            if better {
                best = k;
                best_key = kk;
            }
        }
        let i = rest.remove(best);
        chosen.push(pool[i]);
        added.push(i);
    }
    added.sort_unstable();
    added.into_iter().map(|i| pool[i]).collect()
}

/// The shapes of [`kernel_plan`]`(spec)`.
pub fn plan_shapes_for(spec: &LinkSpec) -> Vec<[u32; 3]> {
    kernel_plan(spec).shapes
}

/// The plan file the profiling runtime reads: one line per kernel, its id then its shapes
/// ([`kernel_plan`]).
pub fn plan_file(specs: &[LinkSpec]) -> String {
    let mut s = String::from("# klaraptor sampling plan: <kernel id> <bx>x<by>x<bz> ...\n");
    for spec in specs {
        s.push_str(&spec.mangled);
        for b in plan_shapes_for(spec) {
            s.push_str(&format!(" {}x{}x{}", b[0], b[1], b[2]));
        }
        s.push('\n');
    }
    s
}

/// The plan record of `spec` ([`kernel_plan`]; its note says which rule drew the shapes).
pub fn plan_record(spec: &LinkSpec, runs: u32, warmup: u32) -> Plan {
    let plan = kernel_plan(spec);
    let n = plan.shapes.len();
    let how = match plan.rule {
        PlanRule::Generic => format!(
            "the generic sample of the block shapes of a {}-D kernel (plan_shapes), all of \
             which its constraints allow",
            spec.dim
        ),
        PlanRule::ToppedUp => format!(
            "the shapes of the generic sample of a {}-D kernel (plan_shapes) that its \
             constraints allow at some profile size, topped up with other allowed candidates \
             spread over thread counts to {n} shapes ({} of {} candidates allowed)",
            spec.dim, plan.allowed, plan.candidates
        ),
        PlanRule::EveryAllowed => format!(
            "every candidate block shape of a {}-D kernel that its constraints allow at some \
             profile size ({n} of {} candidates; too few of the generic sample's are allowed)",
            spec.dim, plan.candidates
        ),
        PlanRule::NoneAllowed => format!(
            "the generic sample of the block shapes of a {}-D kernel (plan_shapes): its \
             constraints allow no candidate at any profile size, so the runtime rejects them",
            spec.dim
        ),
        PlanRule::Unreadable => format!(
            "the generic sample of the block shapes of a {}-D kernel (plan_shapes): its \
             constraints do not parse",
            spec.dim
        ),
    };
    let whence = match &spec.profile_run {
        Some(run) if runs_as_given(spec) => format!(
            "at the data sizes the program's own run reached (`{run}`; the annotation has no \
             recipe); the fit extrapolates in data size from these"
        ),
        _ => "at the annotation's profile sizes; the fit extrapolates in data size from these"
            .to_string(),
    };
    Plan {
        sizes: spec.profile_sizes.clone(),
        shapes: plan.shapes,
        runs,
        warmup,
        note: format!(
            "{how} (kernel_plan in profiler/src/plan.rs: the shapes the model may choose, \
             within 1024 threads, filtered by the block constraints at the profile sizes; the \
             generic sample when all of it is allowed, every allowed shape when fewer than the \
             generic sample's count or fewer than {MIN_GENERIC_ALLOWED} of its shapes are, \
             else its allowed shapes topped up to its count), {whence}"
        ),
    }
}

/// Whether `spec` is profiled by running the program as given, at the sizes that run
/// reaches: a command without profile sizes, which `klaraptor profile <binary> <arguments>`
/// gives a kernel whose annotation has no recipe ([`as_given`]).
pub fn runs_as_given(spec: &LinkSpec) -> bool {
    spec.profile_run.is_some() && spec.profile_sizes.is_empty()
}

/// `spec` (a kernel without a profile recipe) to be profiled by `command`, run as given in
/// `dir`: the sizes are those its launches reach ([`runs_as_given`]).
pub fn as_given(spec: &LinkSpec, command: &str, dir: &Path) -> LinkSpec {
    LinkSpec {
        profile_run: Some(command.to_string()),
        profile_sizes: Vec::new(),
        build_dir: dir.to_path_buf(),
        ..spec.clone()
    }
}

/// One process of a kernel's profiling: a command of its recipe, and the profile sizes it
/// runs ([`recipe_runs`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecipeRun {
    pub command: String,
    /// The profile sizes the command runs, as indices into the spec's `profile_sizes`, in
    /// order: one for a recipe with `{LABEL}` placeholders, every one for a recipe with
    /// `{SIZES}` ([`runs_all_sizes`]), none for a kernel profiled as its program runs
    /// ([`runs_as_given`]).
    pub covers: Vec<usize>,
}

impl RecipeRun {
    /// The profile sizes the run covers (their values).
    pub fn sizes<'a>(&self, spec: &'a LinkSpec) -> Vec<&'a [i64]> {
        self.covers
            .iter()
            .filter_map(|&i| spec.profile_sizes.get(i).map(Vec::as_slice))
            .collect()
    }
}

/// Whether `spec`'s recipe runs once for all its profile sizes: its command holds
/// `{SIZES}` ([`klaraptor_spec::annotations::ALL_SIZES`]).
pub fn runs_all_sizes(spec: &LinkSpec) -> bool {
    !runs_as_given(spec)
        && spec
            .profile_run
            .as_deref()
            .is_some_and(|run| klaraptor_spec::annotations::runs_all_sizes(run, &spec.data))
}

/// The command runs that profile `spec`: per profile size, the recipe's command for that
/// size ([`recipe_command`]); for a recipe with `{SIZES}`, one run of every size
/// ([`recipe_command_all`]); for a kernel profiled as its program runs ([`runs_as_given`]),
/// the command alone, without a size.
pub fn recipe_runs(spec: &LinkSpec) -> Result<Vec<RecipeRun>> {
    if runs_as_given(spec) {
        return Ok(vec![RecipeRun {
            command: spec.profile_run.clone().unwrap_or_default(),
            covers: Vec::new(),
        }]);
    }
    if runs_all_sizes(spec) {
        return Ok(vec![RecipeRun {
            command: recipe_command_all(spec)?,
            covers: (0..spec.profile_sizes.len()).collect(),
        }]);
    }
    spec.profile_sizes
        .iter()
        .enumerate()
        .map(|(i, size)| {
            Ok(RecipeRun {
                command: recipe_command(spec, size)?,
                covers: vec![i],
            })
        })
        .collect()
}

/// What `{SIZES}` stands for: each size's values joined by `,`, the sizes separated by
/// single spaces (`64,64,64 128,128,128`).
pub fn sizes_text(sizes: &[&[i64]]) -> String {
    sizes
        .iter()
        .map(|s| s.iter().map(i64::to_string).collect::<Vec<_>>().join(","))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The command of a `{SIZES}` recipe ([`runs_all_sizes`]) for all of `spec`'s profile
/// sizes, in order.
pub fn recipe_command_all(spec: &LinkSpec) -> Result<String> {
    let run = recipe_text(spec)?;
    let sizes: Vec<&[i64]> = spec.profile_sizes.iter().map(Vec::as_slice).collect();
    Ok(run.replace(klaraptor_spec::annotations::ALL_SIZES, &sizes_text(&sizes)))
}

/// The environment variable that bounds how many distinct data sizes of a kernel one run
/// of the profiling runtime sweeps (runtime-shim/src/klaraptor_prof.c), and its default.
pub const MAX_SIZES_ENV: &str = "KLARAPTOR_PROFILE_MAX_SIZES";
pub const DEFAULT_MAX_SIZES: usize = 4;

/// The `KLARAPTOR_PROFILE_MAX_SIZES` a run needs, if it needs one: a run of several profile
/// sizes sweeps each of them, so at least as many as it covers; `inherited`: the value in
/// the environment (the default when unset or not a number).
pub fn max_sizes_for(run: &RecipeRun, inherited: Option<&str>) -> Option<usize> {
    if run.covers.len() <= 1 {
        return None;
    }
    let had = inherited
        .and_then(|v| v.trim().parse::<usize>().ok())
        .unwrap_or(DEFAULT_MAX_SIZES);
    Some(had.max(run.covers.len()))
}

/// `sh -c` text that runs `program` with `args`, each word quoted as needed.
pub fn shell_command(program: &Path, args: &[String]) -> String {
    let quote = |w: &str| {
        if !w.is_empty()
            && w.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c))
        {
            w.to_string()
        } else {
            format!("'{}'", w.replace('\'', "'\\''"))
        }
    };
    let prog = program.display().to_string();
    // A bare name would be looked up on PATH: run the file named.
    let prog = if prog.contains('/') {
        prog
    } else {
        format!("./{prog}")
    };
    std::iter::once(quote(&prog))
        .chain(args.iter().map(|a| quote(a)))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The recipe's text, or an error that says how to give the kernel one.
fn recipe_text(spec: &LinkSpec) -> Result<&str> {
    match &spec.profile_run {
        Some(run) => Ok(run),
        None => bail!(
            "kernel {} (annotated at {}) has no profile recipe: add \
             profile(run=\"./app {{N}}\", sizes=[…]) to its annotation",
            spec.name,
            spec.annotated_at
        ),
    }
}

/// The recipe's command for one size: `{LABEL}` replaced by the value (for a `{SIZES}`
/// recipe, [`runs_all_sizes`], `{SIZES}` replaced by that size alone).
pub fn recipe_command(spec: &LinkSpec, size: &[i64]) -> Result<String> {
    let run = recipe_text(spec)?;
    if runs_all_sizes(spec) {
        return Ok(run.replace(klaraptor_spec::annotations::ALL_SIZES, &sizes_text(&[size])));
    }
    let mut cmd = run.to_string();
    for (label, v) in spec.data.iter().zip(size) {
        cmd = cmd.replace(&format!("{{{label}}}"), &v.to_string());
    }
    Ok(cmd)
}

/// The file name stem the profiling runtime uses for a kernel (FNV-1a 64 of its id, as in
/// klaraptor_prof.c).
pub fn kernel_stem(id: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in id.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// The file stem the runtime used for kernel `id` in `dir`: what its `kernels.tsv` says
/// (`<stem> TAB <id> TAB <name>` lines), else [`kernel_stem`].
pub fn stem_in(dir: &Path, id: &str) -> String {
    std::fs::read_to_string(dir.join("kernels.tsv"))
        .ok()
        .and_then(|t| {
            t.lines().find_map(|l| {
                let mut f = l.split('\t');
                let stem = f.next()?;
                (f.next()? == id).then(|| stem.to_string())
            })
        })
        .unwrap_or_else(|| kernel_stem(id))
}

/// The plan file's kernels and their shapes ([`plan_file`]), in order.
pub fn read_plan(path: &Path) -> Result<Vec<(String, Vec<[u32; 3]>)>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the plan {}", path.display()))?;
    Ok(text
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let id = f.next().filter(|id| !id.starts_with('#'))?;
            let shapes = f.filter_map(parse_shape).collect();
            Some((id.to_string(), shapes))
        })
        .collect())
}

/// `32x2x1` as a block shape.
fn parse_shape(s: &str) -> Option<[u32; 3]> {
    let v: Vec<u32> = s
        .split('x')
        .map(|d| d.parse().ok())
        .collect::<Option<_>>()?;
    <[u32; 3]>::try_from(v).ok()
}

/// The file a run's profiling runtime writes when it stops the program at a fault (in the
/// run's records directory; runtime-shim/src/klaraptor_prof.c).
pub const STOPPED_FILE: &str = "stopped.tsv";

/// The fault a profiling run stopped at ([`STOPPED_FILE`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Stopped {
    /// The kernel (mangled) and the data values of the sweep.
    pub id: String,
    pub sizes: Vec<i64>,
    /// The shape that faulted, when a sample names it.
    pub block: Option<[u32; 3]>,
    /// Its sample's error.
    pub error: String,
}

/// The faults the runs that wrote into `dir` stopped at (none when no run stopped). A line
/// that does not parse, or a file without a line, is a stop still, of an unknown kernel.
pub fn read_stopped(dir: &Path) -> Result<Vec<Stopped>> {
    let path = dir.join(STOPPED_FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    if text.trim().is_empty() {
        return Ok(vec![Stopped {
            id: String::new(),
            sizes: Vec::new(),
            block: None,
            error: "the profiling runtime did not say which".into(),
        }]);
    }
    Ok(text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.splitn(5, '\t').collect();
            let sizes = |s: &str| -> Option<Vec<i64>> {
                if s == "-" || s.is_empty() {
                    return Some(Vec::new());
                }
                s.split(',').map(|v| v.parse().ok()).collect()
            };
            match f.as_slice() {
                ["fault", id, s, block, error] if sizes(s).is_some() => Stopped {
                    id: id.to_string(),
                    sizes: sizes(s).unwrap_or_default(),
                    block: parse_shape(block).filter(|b| !b.contains(&0)),
                    // The runtime copies the JSON string of the sample as it is.
                    error: serde_json::from_str(&format!("\"{error}\""))
                        .unwrap_or_else(|_| error.to_string()),
                },
                _ => Stopped {
                    id: String::new(),
                    sizes: Vec::new(),
                    block: None,
                    error: l.to_string(),
                },
            }
        })
        .collect())
}

/// The kernels (mangled) a run wrote records of in `dir` (its `kernels.tsv`).
pub fn kernels_in(dir: &Path) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for l in std::fs::read_to_string(dir.join("kernels.tsv"))
        .unwrap_or_default()
        .lines()
    {
        if let Some(id) = l.split('\t').nth(1) {
            if !out.iter().any(|o| o == id) {
                out.push(id.to_string());
            }
        }
    }
    out
}

/// A sweep of a run that a resumed run leaves shapes out of (a line of its
/// `KLARAPTOR_PROFILE_SKIP` file, [`skip_file`]).
#[derive(Debug, Clone, PartialEq)]
pub struct ResumedSweep {
    /// The kernel (mangled) and the data values of the sweep.
    pub id: String,
    pub sizes: Vec<i64>,
    /// The shapes the runs have a sample of that stands.
    pub done: Vec<[u32; 3]>,
}

/// The `KLARAPTOR_PROFILE_SKIP` file of `sweeps`: per sweep (kernel, data values), the
/// shapes a resumed run leaves out (klaraptor_prof.c: such a sweep sends the others one per
/// request; a sweep left with none is not made).
pub fn skip_file(sweeps: &[ResumedSweep]) -> String {
    let mut s = String::from("# klaraptor resumed run: <kernel id> <sizes> <shapes done>\n");
    for ResumedSweep {
        id,
        sizes,
        done: shapes,
    } in sweeps
    {
        s.push_str(id);
        s.push(' ');
        if sizes.is_empty() {
            s.push('-');
        } else {
            let v: Vec<String> = sizes.iter().map(i64::to_string).collect();
            s.push_str(&v.join(","));
        }
        for b in shapes {
            s.push_str(&format!(" {}x{}x{}", b[0], b[1], b[2]));
        }
        s.push('\n');
    }
    s
}

/// Where and how the profiling variant runs.
pub struct RunEnv<'a> {
    /// The directory the runtime writes into.
    pub out_dir: &'a Path,
    pub plan: &'a Path,
    /// The collector library, or "launch" (only launch each shape once: for ncu).
    pub collector: &'a str,
    pub runs: u32,
    pub warmup: u32,
    pub verbose: bool,
    /// A run that resumes one stopped at a fault: its `KLARAPTOR_PROFILE_SKIP` file
    /// ([`skip_file`]) and which restart of the command it is (1, 2, …).
    pub resume: Option<(&'a Path, u32)>,
}

/// Runs one recipe command of `spec` (`run`: the command and the profile sizes it covers)
/// under the profiling runtime (the program must already be linked where the recipe
/// expects it). Its records go to `env.out_dir`. A run of several sizes (a `{SIZES}`
/// recipe) has the runtime sweep each of them ([`max_sizes_for`]). Returns the command's
/// stderr (shown already when it failed or with `verbose`).
///
/// While the command runs, the profiling runtime reports each shape of its sweeps through
/// `KLARAPTOR_PROGRESS` (a temporary file this function reads as it grows): a progress bar
/// per sweep on a terminal, else a line per sweep and, at most every few seconds, a line
/// per shape (every shape with `--kl-verbose`); see [`Progress`]. In a run of several
/// sizes, the spec's sweeps say which of them they are (`size 2/7`).
pub fn run_command(spec: &LinkSpec, run: &RecipeRun, env: &RunEnv) -> Result<String> {
    let cmd = run.command.as_str();
    let at = match run.covers.as_slice() {
        [] => "at the sizes its program's run reaches".to_string(),
        [i] => match spec.profile_sizes.get(*i) {
            Some(size) => format!(
                "at {} ({}/{})",
                fmt_size(&spec.data, size),
                i + 1,
                spec.profile_sizes.len()
            ),
            None => "at the sizes its program's run reaches".to_string(),
        },
        many => format!("at {} profile sizes in one process", many.len()),
    };
    match env.resume {
        None => crate::kl_eprintln!(
            "klaraptor-cc: profiling {} {at}, {} shapes: {cmd}",
            spec.name,
            plan_shapes_for(spec).len()
        ),
        Some((_, k)) => crate::kl_eprintln!(
            "klaraptor-cc: profiling {} {at} in a new process (restart {k}), without the \
             shapes done: {cmd}",
            spec.name,
        ),
    }
    let t = std::time::Instant::now();
    let progress_file = tempfile::Builder::new()
        .prefix("klaraptor-progress-")
        .suffix(".tsv")
        .tempfile()
        .context("cannot create a temporary file for the profiling progress")?;
    let mut tail = ProgressFile::open(progress_file.path())?;
    let mut command = Command::new("sh");
    match env.resume {
        Some((skip, _)) => command.env("KLARAPTOR_PROFILE_SKIP", skip),
        None => command.env_remove("KLARAPTOR_PROFILE_SKIP"),
    };
    let inherited = std::env::var(MAX_SIZES_ENV).ok();
    if let Some(n) = max_sizes_for(run, inherited.as_deref()) {
        command.env(MAX_SIZES_ENV, n.to_string());
    }
    let child = command
        .arg("-c")
        .arg(cmd)
        .current_dir(&spec.build_dir)
        .env("KLARAPTOR_PROFILE_OUT", env.out_dir)
        .env("KLARAPTOR_PROFILE_PLAN", env.plan)
        .env("KLARAPTOR_COLLECTOR", env.collector)
        .env("KLARAPTOR_PROFILE_RUNS", env.runs.to_string())
        .env("KLARAPTOR_PROFILE_WARMUP", env.warmup.to_string())
        // The program's own block is swept too, and named in the records (issue 38).
        .env("KLARAPTOR_PROFILE_PROGRAM", "1")
        .env("KLARAPTOR_PROGRESS", progress_file.path())
        .env_remove("KLARAPTOR_FORCE")
        .env_remove("KLARAPTOR_DISABLE")
        // The binary carries the rational programs of kernels profiled before: they choose
        // their launches, but neither time candidates on the GPU the collector measures nor
        // write the user's choices cache.
        .env("KLARAPTOR_REFINE", "off")
        .env("KLARAPTOR_CHOICES", "off")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot run the profile recipe `{cmd}`"))?;
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let out = child.wait_with_output();
        let _ = done_tx.send(());
        out
    });
    let mut view = ProgressView::new(spec, run.sizes(spec), env.verbose);
    loop {
        let finished = !matches!(
            done_rx.recv_timeout(std::time::Duration::from_millis(100)),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout)
        );
        for ev in tail.poll() {
            view.show(&ev);
        }
        if finished {
            break;
        }
    }
    view.finish();
    let out = waiter
        .join()
        .map_err(|_| anyhow::anyhow!("the thread waiting for `{cmd}` panicked"))?
        .with_context(|| format!("cannot run the profile recipe `{cmd}`"))?;
    // A run the profiling runtime stopped at a fault (it exits with status 70): the caller
    // says what happened and goes on in a new process.
    let stopped = env.out_dir.join(STOPPED_FILE).exists();
    if env.verbose || (!out.status.success() && !stopped) {
        eprint!("{}", String::from_utf8_lossy(&out.stderr));
    }
    if !out.status.success() && !stopped {
        // A sweep launches each kernel once per shape: a program that checks the results
        // of kernels that accumulate (y += …) fails its own check under profiling. What
        // matters is what the runtime recorded, which the caller checks.
        crate::kl_eprintln!(
            "klaraptor-cc: note: the profile recipe of {} (annotated at {}) exited with {} \
                 under profiling (`{cmd}` in {}); its records are kept",
            spec.name,
            spec.annotated_at,
            out.status,
            spec.build_dir.display()
        );
    }
    crate::kl_eprintln!("klaraptor-cc:   done in {:.2} s", t.elapsed().as_secs_f64());
    Ok(String::from_utf8_lossy(&out.stderr).into_owned())
}

/// One event of the profiling runtime's progress channel (`KLARAPTOR_PROGRESS`; the
/// runtime-shim/src/klaraptor_prof.c header documents the lines).
#[derive(Debug, Clone, PartialEq)]
pub enum Progress {
    /// A sweep of `shapes` planned shapes begins.
    Sweep {
        kernel: String,
        sizes: Vec<i64>,
        shapes: usize,
    },
    /// The `index`-th shape (1-based) of the sweep is done, `ms` after the sweep began.
    Shape {
        kernel: String,
        sizes: Vec<i64>,
        index: usize,
        shapes: usize,
        block: [u32; 3],
        status: ShapeStatus,
        ms: f64,
    },
    /// The sweep is over: `ok` shapes measured (or launched, for ncu), `not_ok` not.
    End {
        kernel: String,
        sizes: Vec<i64>,
        ok: usize,
        not_ok: usize,
        ms: f64,
    },
}

/// How a shape of a sweep ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShapeStatus {
    /// Measured: its record has counters.
    Measured,
    /// Its record says why not.
    Failed,
    /// Not launchable at this size (device limits, the kernel's constraints, the grid).
    Rejected,
    /// Launched once and logged, for ncu to measure (`KLARAPTOR_COLLECTOR=launch`).
    Launched,
}

impl ShapeStatus {
    fn word(self) -> &'static str {
        match self {
            ShapeStatus::Measured => "ok",
            ShapeStatus::Failed => "failed",
            ShapeStatus::Rejected => "rejected",
            ShapeStatus::Launched => "launched",
        }
    }
}

/// Parses one progress line; `None` for a line that is not one (it is skipped).
pub fn parse_progress_line(line: &str) -> Option<Progress> {
    let f: Vec<&str> = line.trim_end_matches(['\n', '\r']).split('\t').collect();
    let sizes = |s: &str| -> Option<Vec<i64>> {
        if s.is_empty() {
            return Some(Vec::new());
        }
        s.split(',').map(|v| v.parse().ok()).collect()
    };
    let ms = |s: &str| s.parse::<f64>().ok().filter(|v| v.is_finite() && *v >= 0.0);
    match f.as_slice() {
        ["sweep", kernel, s, n] => Some(Progress::Sweep {
            kernel: kernel.to_string(),
            sizes: sizes(s)?,
            shapes: n.parse().ok()?,
        }),
        ["shape", kernel, s, i, n, block, status, t] => {
            let index: usize = i.parse().ok()?;
            let shapes: usize = n.parse().ok()?;
            if index == 0 || index > shapes {
                return None;
            }
            let b: Vec<u32> = block
                .split('x')
                .map(|v| v.parse().ok())
                .collect::<Option<_>>()?;
            let status = match *status {
                "ok" => ShapeStatus::Measured,
                "failed" => ShapeStatus::Failed,
                "rejected" => ShapeStatus::Rejected,
                "launched" => ShapeStatus::Launched,
                _ => return None,
            };
            Some(Progress::Shape {
                kernel: kernel.to_string(),
                sizes: sizes(s)?,
                index,
                shapes,
                block: <[u32; 3]>::try_from(b).ok()?,
                status,
                ms: ms(t)?,
            })
        }
        ["end", kernel, s, ok, not_ok, t] => Some(Progress::End {
            kernel: kernel.to_string(),
            sizes: sizes(s)?,
            ok: ok.parse().ok()?,
            not_ok: not_ok.parse().ok()?,
            ms: ms(t)?,
        }),
        _ => None,
    }
}

/// Cuts a byte stream that arrives in pieces (a file being appended to) into progress
/// events; a line is taken once its newline has arrived.
#[derive(Debug, Default)]
pub struct ProgressReader {
    pending: Vec<u8>,
}

impl ProgressReader {
    /// The events of the lines `bytes` completes.
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<Progress> {
        self.pending.extend_from_slice(bytes);
        let mut out = Vec::new();
        while let Some(nl) = self.pending.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.pending.drain(..=nl).collect();
            if let Some(ev) = parse_progress_line(&String::from_utf8_lossy(&line)) {
                out.push(ev);
            }
        }
        out
    }
}

/// The progress file of one recipe run, read as it grows.
struct ProgressFile {
    file: std::fs::File,
    reader: ProgressReader,
}

impl ProgressFile {
    fn open(path: &Path) -> Result<Self> {
        let file = std::fs::File::open(path)
            .with_context(|| format!("cannot read the progress file {}", path.display()))?;
        Ok(ProgressFile {
            file,
            reader: ProgressReader::default(),
        })
    }

    /// The events written since the last call (none when the file cannot be read: progress
    /// is a display, never a reason to fail).
    fn poll(&mut self) -> Vec<Progress> {
        use std::io::Read;
        let mut bytes = Vec::new();
        match self.file.read_to_end(&mut bytes) {
            Ok(_) => self.reader.feed(&bytes),
            Err(_) => Vec::new(),
        }
    }
}

/// The lines progress events give when stderr is not a terminal (a build log): one per
/// sweep, at its end, and one per shape at most every `every` (every shape when verbose).
#[derive(Debug)]
pub struct PlainProgress {
    every: std::time::Duration,
    verbose: bool,
    last: Option<std::time::Instant>,
}

impl PlainProgress {
    pub fn new(every: std::time::Duration, verbose: bool) -> Self {
        PlainProgress {
            every,
            verbose,
            last: None,
        }
    }

    /// The line for `ev` arriving at `now`, if one is due; `sizes` formats a kernel's sizes.
    pub fn line(
        &mut self,
        ev: &Progress,
        now: std::time::Instant,
        sizes: &dyn Fn(&str, &[i64]) -> String,
    ) -> Option<String> {
        match ev {
            Progress::Sweep { .. } => {
                self.last = Some(now);
                None
            }
            Progress::Shape {
                kernel,
                sizes: s,
                index,
                shapes,
                block,
                status,
                ms,
            } => {
                let due = self.verbose
                    || (*index < *shapes
                        && self
                            .last
                            .is_none_or(|t| now.duration_since(t) >= self.every));
                if !due {
                    return None;
                }
                self.last = Some(now);
                Some(format!(
                    "klaraptor-cc:   {kernel} at {}: shape {index}/{shapes} ({}x{}x{} {}), {:.1} s",
                    sizes(kernel, s),
                    block[0],
                    block[1],
                    block[2],
                    status.word(),
                    ms / 1e3
                ))
            }
            Progress::End {
                kernel,
                sizes: s,
                ok,
                not_ok,
                ms,
            } => {
                self.last = Some(now);
                let n = ok + not_ok;
                let mut line = format!(
                    "klaraptor-cc:   {kernel} at {}: {ok}/{n} shapes in {:.2} s",
                    sizes(kernel, s),
                    ms / 1e3
                );
                if n > 0 {
                    line.push_str(&format!(" ({:.0} ms per shape)", ms / n as f64));
                }
                if *not_ok > 0 {
                    line.push_str(&format!(", {not_ok} failed or rejected (see the records)"));
                }
                Some(line)
            }
        }
    }
}

/// The sizes of `kernel` in a progress line: with the spec's labels when it is the spec's
/// kernel (a run may profile other kernels too; the runtime names a template instance
/// `stencil1d<3>`), else the values. `covers`: the profile sizes of a run of several (a
/// `{SIZES}` recipe); a sweep at one of them says which (`NI=64 NJ=64 (size 1/7)`).
fn progress_sizes(spec: &LinkSpec, covers: &[&[i64]], kernel: &str, sizes: &[i64]) -> String {
    let mine = kernel == spec.name
        || kernel == spec.mangled
        || kernel == klaraptor_spec::names::instance_name(&spec.name, &spec.mangled);
    if mine && sizes.len() == spec.data.len() {
        let mut s = fmt_size(&spec.data, sizes);
        if covers.len() > 1 {
            if let Some(k) = covers.iter().position(|c| *c == sizes) {
                s.push_str(&format!(" (size {}/{})", k + 1, covers.len()));
            }
        }
        s
    } else {
        sizes
            .iter()
            .map(i64::to_string)
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// Shows the progress of one recipe run on stderr: an indicatif bar per sweep when stderr
/// is a terminal, [`PlainProgress`] lines otherwise.
struct ProgressView<'a> {
    spec: &'a LinkSpec,
    /// The profile sizes the run covers.
    covers: Vec<&'a [i64]>,
    bar: Option<indicatif::ProgressBar>,
    terminal: bool,
    plain: PlainProgress,
}

impl<'a> ProgressView<'a> {
    fn new(spec: &'a LinkSpec, covers: Vec<&'a [i64]>, verbose: bool) -> Self {
        use std::io::IsTerminal;
        ProgressView {
            spec,
            covers,
            bar: None,
            terminal: std::io::stderr().is_terminal(),
            plain: PlainProgress::new(std::time::Duration::from_secs(5), verbose),
        }
    }

    fn show(&mut self, ev: &Progress) {
        let spec = self.spec;
        let covers = &self.covers;
        let fmt = |k: &str, s: &[i64]| progress_sizes(spec, covers, k, s);
        let line = self.plain.line(ev, std::time::Instant::now(), &fmt);
        if !self.terminal {
            if let Some(l) = line {
                crate::kl_eprintln!("{l}");
            }
            return;
        }
        match ev {
            Progress::Sweep {
                kernel,
                sizes,
                shapes,
            } => {
                if let Some(old) = self.bar.take() {
                    old.finish_and_clear();
                }
                let bar = indicatif::ProgressBar::new(*shapes as u64);
                bar.set_style(
                    indicatif::ProgressStyle::with_template(
                        "klaraptor-cc:   {msg} [{bar:24}] {pos}/{len} shapes, {elapsed}",
                    )
                    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
                    .progress_chars("=> "),
                );
                bar.set_message(format!("{kernel} at {}", fmt(kernel, sizes)));
                bar.enable_steady_tick(std::time::Duration::from_millis(200));
                self.bar = Some(bar);
            }
            Progress::Shape { index, .. } => {
                if let Some(bar) = &self.bar {
                    bar.set_position(*index as u64);
                }
            }
            Progress::End { .. } => {
                if let Some(bar) = self.bar.take() {
                    bar.finish_and_clear();
                }
                if let Some(l) = line {
                    crate::kl_eprintln!("{l}");
                }
            }
        }
    }

    fn finish(&mut self) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
    }
}

fn fmt_size(labels: &[String], size: &[i64]) -> String {
    labels
        .iter()
        .zip(size)
        .map(|(l, v)| format!("{l}={v}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The samples the collector wrote for kernel `id` into `out_dir`.
pub fn read_samples(out_dir: &Path, id: &str) -> Result<Vec<Sample>> {
    let path = out_dir.join(format!("{}.jsonl", stem_in(out_dir, id)));
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty() && program_line(l).is_none())
        .map(|(i, l)| {
            serde_json::from_str::<Sample>(l)
                .with_context(|| format!("{}:{}: not a profile sample", path.display(), i + 1))
        })
        .collect()
}

/// The line the profiling runtime writes beside a sweep's samples to name the program's own
/// block at its size (`{"program":true,"sizes":[…],"block":[…]}`, klaraptor_prof.c's
/// `KLARAPTOR_PROFILE_PROGRAM`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProgramLine {
    program: bool,
    sizes: Vec<i64>,
    block: [u32; 3],
}

fn program_line(line: &str) -> Option<ProgramBlock> {
    serde_json::from_str::<ProgramLine>(line)
        .ok()
        .filter(|p| p.program)
        .map(|p| ProgramBlock {
            sizes: p.sizes,
            block: p.block,
        })
}

/// The program's own blocks the records of kernel `id` in `out_dir` name, one per size (the
/// first line of a size; records made before, or without `KLARAPTOR_PROFILE_PROGRAM`, name
/// none).
pub fn read_program_blocks(out_dir: &Path, id: &str) -> Result<Vec<ProgramBlock>> {
    let path = out_dir.join(format!("{}.jsonl", stem_in(out_dir, id)));
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let mut out = Vec::new();
    for b in text.lines().filter_map(program_line) {
        add_program_block(&mut out, b);
    }
    Ok(out)
}

/// The program's own blocks of a launch log of the runtime's "launch" mode (its launches,
/// logged `"own": true`), at the sizes of `samples` only (the program's launches at sizes
/// past the profiled ones are logged too), one per size.
pub fn launch_log_program_blocks(launches: &str, samples: &[Sample]) -> Vec<ProgramBlock> {
    let mut out = Vec::new();
    for l in launches
        .lines()
        .filter_map(|l| serde_json::from_str::<LaunchLine>(l).ok())
        .filter(|l| l.own && samples.iter().any(|s| s.sizes == l.sizes))
    {
        add_program_block(
            &mut out,
            ProgramBlock {
                sizes: l.sizes,
                block: l.block,
            },
        );
    }
    out
}

/// One line of the launch log the runtime writes in "launch" mode.
#[derive(Debug, Deserialize)]
struct LaunchLine {
    #[serde(default)]
    own: bool,
    sizes: Vec<i64>,
    block: [u32; 3],
    grid: [u32; 3],
    #[serde(default)]
    error: Option<String>,
}

/// Splits one CSV record (RFC 4180 quoting).
fn csv_fields(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' if quoted && chars.peek() == Some(&'"') => {
                cur.push('"');
                chars.next();
            }
            '"' => quoted = !quoted,
            ',' if !quoted => out.push(std::mem::take(&mut cur)),
            c => cur.push(c),
        }
    }
    out.push(cur);
    out
}

/// The launch attributes an ncu raw page gives beside the counters ([`crate::metrics`] has
/// those): what a sample needs of the launch itself, by the ncu column it is read from.
const NCU_LAUNCH: &[(&str, &str)] = &[
    ("time_ns", "gpu__time_duration.sum"),
    ("regs_per_thread", "launch__registers_per_thread"),
    ("smem_static", "launch__shared_mem_per_block_static"),
    ("smem_dynamic", "launch__shared_mem_per_block_dynamic"),
    ("block_x", "launch__block_dim_x"),
    ("block_y", "launch__block_dim_y"),
    ("block_z", "launch__block_dim_z"),
];

/// The counters an ncu report may lack and still be imported, as 0 (the collector needs them
/// all, but an ncu run of an older or narrower metric set is still worth its other figures):
/// L1 hits, atomics, barrier instructions (read from the ADU pipe, as the collector does) and
/// the achieved occupancy.
const NCU_OPTIONAL: &[Field] = &[
    Field::GldL1HitSectors,
    Field::GlobalAtomicRequests,
    Field::InstBarrier,
    Field::AchievedActiveWarps,
];

/// Joins an ncu raw-page CSV with the runtime's launch log for kernel `id`: the n-th ncu row
/// of the kernel is the n-th logged launch. Rows of other kernels are skipped; the program's
/// own launches (logged with `"own": true`) are skipped after the join. Returns the samples
/// and the names of optional counters that were missing. The counters are read by the
/// metric table ([`crate::metrics`]), as the collector reads them. ncu must be run with
/// `--csv --page raw --print-units base --print-kernel-base mangled`.
pub fn import_ncu(csv: &str, launches: &str, id: &str) -> Result<(Vec<Sample>, Vec<String>)> {
    let mut lines = csv
        .lines()
        .skip_while(|l| !l.starts_with("\"ID\""))
        .map(csv_fields);
    let header = lines
        .next()
        .context("the ncu CSV has no header row (run ncu with --csv --page raw)")?;
    let col = |name: &str| header.iter().position(|h| h == name);
    let name_col = col("Kernel Name").context("the ncu CSV has no \"Kernel Name\" column")?;
    let resolved = metrics::resolve_with(metrics::TABLE, NCU_OPTIONAL, |m| col(m).is_some())
        .map_err(|missing| {
            anyhow::anyhow!(
                "the ncu CSV has no column for {} (run ncu with --csv --page raw and the \
                 counters of klaraptor's metric table)",
                missing.join("; ")
            )
        })?;
    let mut missing_optional: Vec<String> = NCU_OPTIONAL
        .iter()
        .filter(|f| resolved.source_of(**f).is_none())
        .map(|f| f.name().to_string())
        .collect();
    // Barriers read from the ADU pipe without the stall counter that gates them.
    if matches!(
        resolved.source_of(Field::InstBarrier),
        Some(metrics::Source::Difference(..))
    ) {
        missing_optional.push("stall_barrier".into());
    }
    let mut cols: BTreeMap<&str, usize> = BTreeMap::new();
    for m in resolved.metric_names() {
        cols.insert(m, col(m).expect("resolved against the header"));
    }
    for (field, name) in NCU_LAUNCH {
        let c =
            col(name).with_context(|| format!("the ncu CSV has no column for {field} ({name})"))?;
        cols.insert(name, c);
    }
    let rows: Vec<Vec<String>> = lines
        .filter(|r| r.get(name_col).is_some_and(|n| n == id))
        .collect();
    let logged: Vec<LaunchLine> = launches
        .lines()
        .filter(|l| !l.trim().is_empty())
        .enumerate()
        .map(|(i, l)| serde_json::from_str(l).with_context(|| format!("launch log line {}", i + 1)))
        .collect::<Result<_>>()?;
    let ok_launches: Vec<&LaunchLine> = logged.iter().filter(|l| l.error.is_none()).collect();
    if rows.len() != ok_launches.len() {
        bail!(
            "ncu profiled {} launches of {id} but the runtime logged {}: profile every launch \
             (no --launch-count / --launch-skip)",
            rows.len(),
            ok_launches.len()
        );
    }
    let num = |row: &[String], name: &str| -> Result<f64> {
        let c = cols[name];
        let raw = row.get(c).map(String::as_str).unwrap_or("");
        let clean: String = raw.chars().filter(|c| *c != ',').collect();
        clean
            .trim()
            .parse::<f64>()
            .with_context(|| format!("ncu value of {name} is not a number: {raw:?}"))
    };
    let launch = |row: &[String], field: &str| -> Result<f64> {
        let name = NCU_LAUNCH
            .iter()
            .find(|(f, _)| *f == field)
            .map(|(_, n)| *n)
            .expect("a launch attribute");
        num(row, name)
    };
    let mut samples = Vec::new();
    let mut it = rows.iter();
    for l in &logged {
        if let Some(err) = &l.error {
            if !l.own {
                samples.push(Sample {
                    sizes: l.sizes.clone(),
                    block: l.block,
                    grid: l.grid,
                    error: Some(err.clone()),
                    counters: None,
                });
            }
            continue;
        }
        let row = it.next().expect("counted above");
        let block = [
            launch(row, "block_x")? as u32,
            launch(row, "block_y")? as u32,
            launch(row, "block_z")? as u32,
        ];
        if block != l.block {
            bail!(
                "ncu row and launch log disagree: ncu saw block {:?}, the runtime launched {:?}",
                block,
                l.block
            );
        }
        if l.own {
            continue;
        }
        let values: HashMap<&str, f64> = resolved
            .metric_names()
            .into_iter()
            .map(|m| num(row, m).map(|v| (m, v)))
            .collect::<Result<_>>()?;
        let hw = metrics::decode(&resolved, &values)
            .map_err(|e| anyhow::anyhow!("ncu row of {id}: {e}"))?;
        let u = |f: &str| launch(row, f).map(|v| v.round().max(0.0) as u32);
        let time_ms = launch(row, "time_ns")? / 1e6;
        samples.push(Sample {
            sizes: l.sizes.clone(),
            block: l.block,
            grid: l.grid,
            error: None,
            counters: Some(hw.into_counters(metrics::LaunchFigures {
                time_ms,
                time_runs_ms: vec![time_ms],
                regs_per_thread: u("regs_per_thread")?,
                smem_static: u("smem_static")?,
                smem_dynamic: u("smem_dynamic")?,
            })),
        });
    }
    Ok((samples, missing_optional))
}

/// The ncu `--metrics` list: the metrics of each counter's first source in the table, and
/// the launch attributes.
pub fn ncu_metric_list() -> String {
    let mut out: Vec<&str> = Vec::new();
    for spec in metrics::TABLE {
        for m in spec.sources[0].metrics() {
            if !out.contains(&m) {
                out.push(m);
            }
        }
    }
    out.extend(NCU_LAUNCH.iter().map(|(_, n)| *n));
    out.push("device__attribute_multiprocessor_count");
    out.join(",")
}

/// A scratch directory for one profiling session.
pub fn scratch(work: &Path) -> Result<PathBuf> {
    let d = work.join("profile");
    std::fs::create_dir_all(&d).with_context(|| format!("creating {}", d.display()))?;
    Ok(d)
}

/// The SM count ncu reported (`device__attribute_multiprocessor_count`), if it did.
pub fn ncu_sm_count(csv: &str) -> Option<u32> {
    let mut lines = csv
        .lines()
        .skip_while(|l| !l.starts_with("\"ID\""))
        .map(csv_fields);
    let header = lines.next()?;
    let c = header
        .iter()
        .position(|h| h == "device__attribute_multiprocessor_count")?;
    lines
        .skip(1)
        .find_map(|r| r.get(c).and_then(|v| v.trim().parse::<f64>().ok()))
        .map(|v| v as u32)
}

/// `refused` and `launched` samples merged as the runtime's sweep produces them: for each
/// data size (in order of first appearance), the refused shapes, then the launched ones.
fn refused_first(refused: Vec<Sample>, launched: Vec<Sample>) -> Vec<Sample> {
    let mut sizes: Vec<Vec<i64>> = Vec::new();
    for s in refused.iter().chain(&launched) {
        if !sizes.contains(&s.sizes) {
            sizes.push(s.sizes.clone());
        }
    }
    let mut out = Vec::with_capacity(refused.len() + launched.len());
    for size in &sizes {
        out.extend(refused.iter().filter(|s| &s.sizes == size).cloned());
        out.extend(launched.iter().filter(|s| &s.sizes == size).cloned());
    }
    out
}

/// Builds profile entries from ncu captures (directories written by
/// bench/gpu/fixtures/ncu_capture.sh: `ncu.csv`, `launches/`, and `env.txt` one level up) of
/// the profiling variant `binary`, whose kernel specs say what was profiled.
pub fn import_captures(binary: &Path, jobs: &[PathBuf]) -> Result<Vec<crate::record::Entry>> {
    use crate::record::{DeviceId, Entry, KernelId, FORMAT_VERSION};
    let bytes = std::fs::read(binary).with_context(|| format!("reading {}", binary.display()))?;
    let specs = klaraptor_spec::link::scan_bytes(&bytes, binary)?;
    if specs.is_empty() {
        bail!(
            "{} holds no klaraptor kernel specs: give the profiling variant klaraptor-cc linked",
            binary.display()
        );
    }
    // A capture directory must be one: a missing or mistyped path, or a directory of
    // something else, would store nothing without a word.
    for job in jobs {
        if !job.is_dir() {
            let why = match job.metadata() {
                Err(e) => e.to_string(),
                Ok(_) => "not a directory".to_string(),
            };
            bail!(
                "capture directory {}: {why}; give the run directories of the profiling \
                 variant (each with records/, or ncu.csv and launches/)",
                job.display()
            );
        }
        if !job.join("records").is_dir() && !job.join("ncu.csv").is_file() {
            bail!(
                "{} is not a capture: it holds neither records/ (a collector run) nor ncu.csv \
                 (an ncu capture)",
                job.display()
            );
        }
    }
    let mut out = Vec::new();
    for spec in &specs {
        let mut samples = Vec::new();
        let mut program: Vec<ProgramBlock> = Vec::new();
        let mut device: Option<DeviceId> = None;
        let (mut driver, mut tool, mut cuda, mut date) =
            (String::new(), String::new(), String::new(), String::new());
        for job in jobs {
            let csv_path = job.join("ncu.csv");
            let (got, sm) = if csv_path.is_file() {
                // ncu capture: the launch log joined with ncu's rows.
                let dir = job.join("launches");
                let launches = dir.join(format!("{}.launches.jsonl", stem_in(&dir, &spec.mangled)));
                let Ok(log) = std::fs::read_to_string(&launches) else {
                    continue;
                };
                let csv = std::fs::read_to_string(&csv_path)
                    .with_context(|| format!("reading {}", csv_path.display()))?;
                let (s, missing) = import_ncu(&csv, &log, &spec.mangled).with_context(|| {
                    format!("joining {} with {}", csv_path.display(), launches.display())
                })?;
                // (No chip has a barrier metric: inst_barrier is derived, see import_ncu.)
                // L1 hits and atomics left out are recorded as unknown.
                let zeroed: Vec<&str> = missing
                    .iter()
                    .map(String::as_str)
                    .filter(|m| {
                        ![
                            "inst_barrier",
                            "stall_barrier",
                            "gld_l1_hit_sectors",
                            "global_atomic_requests",
                        ]
                        .contains(m)
                    })
                    .collect();
                if !zeroed.is_empty() {
                    crate::kl_eprintln!(
                        "klaraptor: note: {} has no column for {} (kernel {}): recorded as 0",
                        csv_path.display(),
                        zeroed.join(", "),
                        spec.name
                    );
                }
                if missing.iter().any(|m| m == "stall_barrier") {
                    crate::kl_eprintln!(
                        "klaraptor: note: {} has no barrier-stall column (kernel {}): barrier \
                         counts are pipe_adu - op_ldc, not gated by stalls",
                        csv_path.display(),
                        spec.name
                    );
                }
                // The shapes the runtime refused (constraints, device limits) were never
                // launched: it recorded them in <stem>.jsonl beside the launch log.
                let refused: Vec<Sample> = read_samples(&dir, &spec.mangled)?
                    .into_iter()
                    .filter(|r| r.error.is_some())
                    .collect();
                // The program's own launches are logged "own": its block at the swept sizes.
                for b in launch_log_program_blocks(&log, &s) {
                    add_program_block(&mut program, b);
                }
                (refused_first(refused, s), ncu_sm_count(&csv))
            } else {
                // Collector run: its samples as they are.
                let s = read_samples(&job.join("records"), &spec.mangled)?;
                if s.is_empty() {
                    continue;
                }
                for b in read_program_blocks(&job.join("records"), &spec.mangled)? {
                    add_program_block(&mut program, b);
                }
                (s, None)
            };
            samples.extend(got);
            let env_path = [
                job.join("env.txt"),
                job.parent().unwrap_or(job).join("env.txt"),
            ]
            .into_iter()
            .find(|p| p.is_file())
            .with_context(|| format!("no env.txt in {} or its parent", job.display()))?;
            let env = std::fs::read_to_string(&env_path)
                .with_context(|| format!("reading {}", env_path.display()))?;
            let mut lines = env.lines();
            let gpu: Vec<&str> = lines.next().unwrap_or("").split(", ").collect();
            if gpu.len() >= 4 {
                device = Some(DeviceId {
                    name: gpu[0].trim().into(),
                    uuid: gpu[1].trim().into(),
                    cc: gpu[2].trim().into(),
                    sm_count: sm.unwrap_or(0),
                });
                driver = gpu[3].trim().into();
            }
            for l in lines {
                if l.contains("NVIDIA (R) Nsight Compute") || l.starts_with("Version ") {
                    tool = l.trim().to_string();
                } else if let Some(v) = l.split("release ").nth(1) {
                    cuda = v.split(',').next().unwrap_or("").trim().to_string();
                } else if l.len() == 20 && l.ends_with('Z') {
                    date = l.to_string();
                }
            }
            if !csv_path.is_file() {
                tool.clear();
            }
        }
        let Some(mut device) = device else {
            continue; // this kernel was not launched in these captures
        };
        if device.sm_count == 0 {
            if let Ok(Some(d)) = crate::devices::find(&device.name, &device.uuid) {
                device.sm_count = d.sm_count;
            }
        }
        out.push(Entry {
            format_version: FORMAT_VERSION,
            kernel: KernelId {
                mangled: spec.mangled.clone(),
                name: spec.name.clone(),
                code_hash: spec.code_hash.clone(),
                data: spec.data.clone(),
                dim: spec.dim,
            },
            device,
            collector: if tool.is_empty() {
                format!("klaraptor-collector {}", env!("CARGO_PKG_VERSION"))
            } else {
                format!("ncu ({tool})")
            },
            captured_at: date,
            cuda_version: cuda,
            driver_version: driver,
            plan: plan_record(spec, 1, 0),
            samples,
            incomplete: None,
            program,
        });
    }
    if out.is_empty() {
        bail!(
            "the captures {} hold no record of a kernel of {} (its kernels: {}): nothing to \
             import; were they made by this binary's profiling variant?",
            jobs.iter()
                .map(|j| j.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
            binary.display(),
            specs
                .iter()
                .map(|s| s.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_name_the_programs_own_block_beside_the_samples() {
        let dir = tempfile::tempdir().unwrap();
        let id = "_Z4vaddPfi";
        let sample = |n: i64, b: u32| {
            format!(
                "{{\"sizes\":[{n}],\"block\":[{b},1,1],\"grid\":[{},1,1],\"error\":\"x\"}}",
                n / i64::from(b) + 1
            )
        };
        let text = [
            "{\"program\":true,\"sizes\":[1000],\"block\":[256,1,1]}".to_string(),
            sample(1000, 32),
            sample(1000, 256),
            // a second line for a size: the first stays
            "{\"program\":true,\"sizes\":[1000],\"block\":[128,1,1]}".to_string(),
            "{\"program\":true,\"sizes\":[5000],\"block\":[128,1,1]}".to_string(),
            sample(5000, 32),
        ]
        .join("\n");
        std::fs::write(dir.path().join(format!("{}.jsonl", kernel_stem(id))), text).unwrap();
        let samples = read_samples(dir.path(), id).unwrap();
        assert_eq!(
            samples.iter().map(|s| s.block[0]).collect::<Vec<_>>(),
            [32, 256, 32]
        );
        let own = read_program_blocks(dir.path(), id).unwrap();
        assert_eq!(
            own,
            [
                ProgramBlock {
                    sizes: vec![1000],
                    block: [256, 1, 1]
                },
                ProgramBlock {
                    sizes: vec![5000],
                    block: [128, 1, 1]
                }
            ]
        );
        // Records made before name none.
        let old = sample(64, 32);
        std::fs::write(dir.path().join(format!("{}.jsonl", kernel_stem(id))), old).unwrap();
        assert_eq!(read_samples(dir.path(), id).unwrap().len(), 1);
        assert!(read_program_blocks(dir.path(), id).unwrap().is_empty());
        // A launch log: the program's launches, at the sizes swept only.
        let log = "{\"sizes\":[64],\"block\":[32,1,1],\"grid\":[2,1,1]}\n\
                   {\"own\":true,\"sizes\":[64],\"block\":[256,1,1],\"grid\":[1,1,1]}\n\
                   {\"own\":true,\"sizes\":[99],\"block\":[256,1,1],\"grid\":[1,1,1]}\n";
        let swept = read_samples(dir.path(), id).unwrap();
        assert_eq!(
            launch_log_program_blocks(log, &swept),
            [ProgramBlock {
                sizes: vec![64],
                block: [256, 1, 1]
            }]
        );
    }

    fn spec(data: &[&str], dim: u8, run: Option<&str>) -> LinkSpec {
        LinkSpec {
            shmem: None,
            name: "k".into(),
            mangled: "_Z1kPfii".into(),
            data: data.iter().map(|s| s.to_string()).collect(),
            dim,
            grid: vec![],
            block: vec![],
            profile_run: run.map(str::to_string),
            profile_sizes: vec![vec![64; data.len()]],
            code_hash: "0000000000000000".into(),
            annotated_at: "k.cu:3:9".into(),
            build_dir: PathBuf::from("."),
        }
    }

    #[test]
    fn plan_shapes_per_dimensionality() {
        let threads = |b: &[u32; 3]| b[0] * b[1] * b[2];
        // 1-D: the eleven powers of two 1 … 1024 and eight multiples of 32 up to 384, sorted.
        let one = plan_shapes(1);
        assert_eq!(one.len(), 19);
        assert!(one.windows(2).all(|w| w[0][0] < w[1][0]));
        assert_eq!((one[0], one[18]), ([1, 1, 1], [1024, 1, 1]));
        assert!(one.iter().all(|b| b[1] == 1 && b[2] == 1));
        // 2-D: 1x1, then every power-of-two shape of 8, 64, 256 and 1024 threads (4 + 7 + 9
        // + 11 of them).
        let two = plan_shapes(2);
        assert_eq!(two.len(), 32);
        let mut per_total = BTreeMap::new();
        for b in &two {
            *per_total.entry(threads(b)).or_insert(0) += 1;
        }
        assert_eq!(
            per_total.into_iter().collect::<Vec<_>>(),
            [(1, 1), (8, 4), (64, 7), (256, 9), (1024, 11)]
        );
        assert!(two.iter().all(|b| b[2] == 1));
        // 3-D: the same thread counts with bz ≤ 8: 1 + 10 + 22 + 30 + 38.
        let three = plan_shapes(3);
        assert_eq!(three.len(), 101);
        assert!(three.iter().all(|b| b[2] <= 8));
        for (dim, shapes) in [(1, &one), (2, &two), (3, &three)] {
            let distinct: std::collections::BTreeSet<_> = shapes.iter().collect();
            assert_eq!(distinct.len(), shapes.len(), "{dim}-D: a shape twice");
            assert!(shapes.iter().all(|b| threads(b) <= 1024), "{dim}-D");
            if dim > 1 {
                assert!(
                    shapes.iter().flatten().all(|x| x.is_power_of_two()),
                    "{dim}-D"
                );
            }
        }
        // The plan file lists them per kernel.
        let s = spec(&["N"], 2, None);
        let file = plan_file(std::slice::from_ref(&s));
        let line = file.lines().nth(1).unwrap();
        assert!(line.starts_with("_Z1kPfii 1x1x1 8x1x1 4x2x1 "), "{line}");
        assert_eq!(line.split(' ').count(), 33);
    }

    /// The generic plans as `plan_shapes` gave them before plans were filtered by the
    /// kernels' constraints (the committed profiles and the accuracy study were planned so).
    const GENERIC_1D: &str =
        "1x1x1 2x1x1 4x1x1 8x1x1 16x1x1 32x1x1 64x1x1 96x1x1 128x1x1 160x1x1 192x1x1 \
         224x1x1 256x1x1 288x1x1 320x1x1 352x1x1 384x1x1 512x1x1 1024x1x1";
    const GENERIC_2D: &str =
        "1x1x1 8x1x1 4x2x1 2x4x1 1x8x1 64x1x1 32x2x1 16x4x1 8x8x1 4x16x1 2x32x1 1x64x1 \
         256x1x1 128x2x1 64x4x1 32x8x1 16x16x1 8x32x1 4x64x1 2x128x1 1x256x1 1024x1x1 \
         512x2x1 256x4x1 128x8x1 64x16x1 32x32x1 16x64x1 8x128x1 4x256x1 2x512x1 1x1024x1";
    const GENERIC_3D: &str =
        "1x1x1 8x1x1 4x2x1 2x4x1 1x8x1 4x1x2 2x2x2 1x4x2 2x1x4 1x2x4 1x1x8 64x1x1 32x2x1 \
         16x4x1 8x8x1 4x16x1 2x32x1 1x64x1 32x1x2 16x2x2 8x4x2 4x8x2 2x16x2 1x32x2 16x1x4 \
         8x2x4 4x4x4 2x8x4 1x16x4 8x1x8 4x2x8 2x4x8 1x8x8 256x1x1 128x2x1 64x4x1 32x8x1 \
         16x16x1 8x32x1 4x64x1 2x128x1 1x256x1 128x1x2 64x2x2 32x4x2 16x8x2 8x16x2 4x32x2 \
         2x64x2 1x128x2 64x1x4 32x2x4 16x4x4 8x8x4 4x16x4 2x32x4 1x64x4 32x1x8 16x2x8 \
         8x4x8 4x8x8 2x16x8 1x32x8 1024x1x1 512x2x1 256x4x1 128x8x1 64x16x1 32x32x1 \
         16x64x1 8x128x1 4x256x1 2x512x1 1x1024x1 512x1x2 256x2x2 128x4x2 64x8x2 32x16x2 \
         16x32x2 8x64x2 4x128x2 2x256x2 1x512x2 256x1x4 128x2x4 64x4x4 32x8x4 16x16x4 \
         8x32x4 4x64x4 2x128x4 1x256x4 128x1x8 64x2x8 32x4x8 16x8x8 8x16x8 4x32x8 2x64x8 \
         1x128x8";

    /// Shapes written `BXxBYxBZ`, separated by spaces.
    fn shapes(text: &str) -> Vec<[u32; 3]> {
        text.split_whitespace()
            .map(|w| {
                let v: Vec<u32> = w.split('x').map(|x| x.parse().unwrap()).collect();
                [v[0], v[1], v[2]]
            })
            .collect()
    }

    /// A kernel of `dim` with data labels `data`, block constraints `block` and profile sizes
    /// `sizes`.
    fn constrained(data: &[&str], dim: u8, block: &[&str], sizes: &[&[i64]]) -> LinkSpec {
        let mut s = spec(data, dim, Some("./app"));
        s.block = block.iter().map(|b| b.to_string()).collect();
        s.profile_sizes = sizes.iter().map(|v| v.to_vec()).collect();
        s
    }

    #[test]
    fn an_unconstrained_kernel_keeps_the_generic_plan() {
        for (dim, text, unused) in [
            (1, GENERIC_1D, "bx != 416"),
            (2, GENERIC_2D, "bx * by != 512"),
            (3, GENERIC_3D, "bx * by * bz != 512"),
        ] {
            let want = shapes(text);
            assert_eq!(plan_shapes(dim), want, "{dim}-D");
            let s = spec(&["N"], dim, None);
            let plan = kernel_plan(&s);
            assert_eq!(plan.shapes, want, "{dim}-D");
            assert_eq!(plan.rule, PlanRule::Generic, "{dim}-D");
            assert_eq!(plan_record(&s, 1, 0).shapes, want, "{dim}-D");
            let file = plan_file(std::slice::from_ref(&s));
            assert_eq!(
                file.lines().nth(1).unwrap(),
                format!("_Z1kPfii {text}"),
                "{dim}-D"
            );
            // A constraint that rules out only candidates outside the generic plan keeps it.
            let c = constrained(&["N"], dim, &[unused], &[&[64]]);
            let plan = kernel_plan(&c);
            assert_eq!((plan.shapes, plan.rule), (want.clone(), PlanRule::Generic));
            // One that rules out generic shapes does not: those are not planned.
            let c = constrained(&["N"], dim, &["bx >= 2"], &[&[64]]);
            let got = plan_shapes_for(&c);
            assert_ne!(got, want, "{dim}-D");
            assert!(got.iter().all(|b| b[0] >= 2), "{dim}-D: {got:?}");
        }
    }

    #[test]
    fn a_constrained_transpose_plans_exactly_its_allowed_shapes() {
        let t = LinkSpec {
            shmem: None,
            name: "transpose".into(),
            mangled: "_Z9transposePfPKfii".into(),
            grid: vec!["ceil(W, bx)".into(), "ceil(H, by)".into()],
            ..constrained(
                &["W", "H"],
                2,
                &["bx == 32 && 32 % by == 0"],
                &[&[64, 64], &[128, 128], &[256, 64], &[64, 256]],
            )
        };
        let want = shapes("32x1x1 32x2x1 32x4x1 32x8x1 32x16x1 32x32x1");
        let plan = kernel_plan(&t);
        assert_eq!(plan.shapes, want);
        assert_eq!(plan.rule, PlanRule::EveryAllowed);
        assert_eq!((plan.allowed, plan.candidates), (6, 66));
        // The plan file, the plan record and the count of the progress line agree.
        let file = plan_file(std::slice::from_ref(&t));
        assert_eq!(
            file.lines().nth(1).unwrap(),
            "_Z9transposePfPKfii 32x1x1 32x2x1 32x4x1 32x8x1 32x16x1 32x32x1"
        );
        let record = plan_record(&t, 3, 1);
        assert_eq!(record.shapes, want);
        assert_eq!(record.sizes, t.profile_sizes);
        assert!(
            record.note.starts_with(
                "every candidate block shape of a 2-D kernel that its constraints allow at some \
                 profile size (6 of 66 candidates"
            ),
            "{}",
            record.note
        );
        assert_eq!(plan_shapes_for(&t).len(), 6);
        // The constraint as the link spec carries it (printed by the annotation front-end)
        // plans the same.
        let printed = LinkSpec {
            block: vec!["((bx == 32) && ((32 % by) == 0))".into()],
            ..t.clone()
        };
        assert_eq!(plan_shapes_for(&printed), want);
    }

    #[test]
    fn a_data_dependent_constraint_plans_the_shapes_allowed_at_some_profile_size() {
        // bx <= N at N = 64 and N = 200: the shapes up to 192 threads, those above 64 only
        // at the larger size; 11 shapes, fewer than the generic 19: all of them.
        let k = constrained(&["N"], 1, &["bx <= N"], &[&[64], &[200]]);
        let plan = kernel_plan(&k);
        assert_eq!(
            plan.shapes,
            shapes("1x1x1 2x1x1 4x1x1 8x1x1 16x1x1 32x1x1 64x1x1 96x1x1 128x1x1 160x1x1 192x1x1")
        );
        assert_eq!(plan.rule, PlanRule::EveryAllowed);
        // At N = 64 alone: seven.
        let k = constrained(&["N"], 1, &["bx <= N"], &[&[64]]);
        assert_eq!(
            plan_shapes_for(&k),
            shapes("1x1x1 2x1x1 4x1x1 8x1x1 16x1x1 32x1x1 64x1x1")
        );
        // A constraint that cannot be evaluated at a size (a division by zero at N = 64)
        // allows nothing there.
        let k = constrained(&["N"], 1, &["bx <= 4096 / (N - 64)"], &[&[64], &[96]]);
        assert_eq!(
            plan_shapes_for(&k),
            shapes("1x1x1 2x1x1 4x1x1 8x1x1 16x1x1 32x1x1 64x1x1 96x1x1 128x1x1")
        );
        // 2-D, at most N threads: at N = 256, 21 of the generic shapes and 45 candidates are
        // allowed: the 21, topped up to 32 with shapes of the thread counts the generic
        // plan lacks.
        let k = constrained(&["N"], 2, &["bx * by <= N"], &[&[256]]);
        let plan = kernel_plan(&k);
        assert_eq!(plan.rule, PlanRule::ToppedUp);
        assert_eq!((plan.allowed, plan.shapes.len()), (45, 32));
        let threads = |b: &[u32; 3]| b[0] * b[1] * b[2];
        assert!(plan.shapes.iter().all(|b| threads(b) <= 256), "{plan:?}");
        let generic_allowed: Vec<[u32; 3]> = shapes(GENERIC_2D)
            .into_iter()
            .filter(|b| threads(b) <= 256)
            .collect();
        assert_eq!(generic_allowed.len(), 21);
        assert_eq!(plan.shapes[..21], generic_allowed[..]);
        let counts: std::collections::BTreeSet<u32> =
            plan.shapes[21..].iter().map(threads).collect();
        assert_eq!(counts.into_iter().collect::<Vec<_>>(), [2, 4, 16, 32, 128]);
        // At N = 256 or N = 1024 every generic shape is allowed at some size: generic.
        let k = constrained(&["N"], 2, &["bx * by <= N"], &[&[256], &[1024]]);
        let plan = kernel_plan(&k);
        assert_eq!(
            (plan.shapes, plan.rule),
            (shapes(GENERIC_2D), PlanRule::Generic)
        );
    }

    #[test]
    fn a_kernel_that_allows_most_shapes_gets_the_generic_ones_topped_up() {
        // bx >= 32 (saxpy's constraint): 14 of the generic 1-D shapes, 32 candidates; five
        // more, spread over the thread counts the generic plan leaves out (its gap between
        // 512 and 1024 first: 736, then 608 and 864, then 448 and 672).
        let k = constrained(&["N"], 1, &["bx >= 32"], &[&[4096]]);
        let plan = kernel_plan(&k);
        assert_eq!(plan.rule, PlanRule::ToppedUp);
        assert_eq!((plan.allowed, plan.candidates), (32, 37));
        assert_eq!(
            plan.shapes,
            shapes(
                "32x1x1 64x1x1 96x1x1 128x1x1 160x1x1 192x1x1 224x1x1 256x1x1 288x1x1 \
                 320x1x1 352x1x1 384x1x1 512x1x1 1024x1x1 448x1x1 608x1x1 672x1x1 736x1x1 \
                 864x1x1"
            )
        );
        assert!(plan_record(&k, 1, 0).note.starts_with(
            "the shapes of the generic sample of a 1-D kernel (plan_shapes) that its \
             constraints allow at some profile size, topped up"
        ));
    }

    #[test]
    fn a_kernel_that_allows_no_shape_or_cannot_be_read_gets_the_generic_plan() {
        for (block, rule) in [
            ("bx > 2048", PlanRule::NoneAllowed),
            ("bx > N", PlanRule::NoneAllowed),
            ("bx +", PlanRule::Unreadable),
        ] {
            let k = constrained(&["N"], 1, &[block], &[&[1024]]);
            let plan = kernel_plan(&k);
            assert_eq!(
                (plan.shapes, plan.rule),
                (shapes(GENERIC_1D), rule),
                "{block}"
            );
        }
        // Without profile sizes, only the constraints that need no data count.
        let k = constrained(&["N"], 2, &["bx == 32", "bx * by <= N"], &[]);
        assert_eq!(
            plan_shapes_for(&k),
            shapes("32x1x1 32x2x1 32x4x1 32x8x1 32x16x1 32x32x1")
        );
    }

    #[test]
    fn recipe_commands_substitute_every_label() {
        let s = spec(
            &["N", "NN", "K"],
            2,
            Some("./app {N} {NN} --k={K} {N}x{N} {M}"),
        );
        assert_eq!(
            recipe_command(&s, &[64, 128, 7]).unwrap(),
            "./app 64 128 --k=7 64x64 {M}"
        );
        assert_eq!(
            recipe_command(&s, &[-1, 0, 1 << 40]).unwrap(),
            "./app -1 0 --k=1099511627776 -1x-1 {M}"
        );
    }

    #[test]
    fn a_sizes_recipe_is_one_run_of_every_profile_size() {
        // gemm's design: the annotation's four sizes and one more per data parameter.
        let mut s = spec(&["NI", "NJ", "NK"], 2, Some("./gemm --sizes {SIZES} --x"));
        s.profile_sizes = klaraptor_spec::link::profile_design(&[
            vec![64; 3],
            vec![128; 3],
            vec![256, 128, 192],
            vec![256; 3],
        ]);
        assert_eq!(s.profile_sizes.len(), 7);
        assert!(runs_all_sizes(&s));
        let runs = recipe_runs(&s).unwrap();
        assert_eq!(
            runs,
            [RecipeRun {
                command: "./gemm --sizes 64,64,64 128,128,128 256,128,192 256,256,256 \
                          256,64,64 64,256,64 64,64,256 --x"
                    .into(),
                covers: (0..7).collect(),
            }]
        );
        assert_eq!(runs[0].sizes(&s)[2], [256, 128, 192]);
        // One size alone, as `klaraptor plan --recipes` or a user would run it.
        assert_eq!(
            recipe_command(&s, &[256, 128, 192]).unwrap(),
            "./gemm --sizes 256,128,192 --x"
        );
        // 1-D: the values alone; each occurrence is replaced.
        let mut one = spec(&["n"], 1, Some("./app {SIZES} && ./app {SIZES}"));
        one.profile_sizes = vec![vec![1000], vec![5000]];
        assert_eq!(
            recipe_runs(&one).unwrap()[0].command,
            "./app 1000 5000 && ./app 1000 5000"
        );
        // The runtime is told to sweep each of them, and never fewer than it would.
        assert_eq!(max_sizes_for(&runs[0], None), Some(7));
        assert_eq!(max_sizes_for(&runs[0], Some("2")), Some(7));
        assert_eq!(max_sizes_for(&runs[0], Some("12")), Some(12));
        assert_eq!(max_sizes_for(&runs[0], Some("many")), Some(7));
        assert_eq!(max_sizes_for(&recipe_runs(&one).unwrap()[0], None), Some(4));
    }

    #[test]
    fn per_size_recipes_are_one_run_per_size_as_before() {
        let mut s = spec(&["N", "M"], 2, Some("./app {N} {M}"));
        s.profile_sizes = vec![vec![64, 32], vec![128, 64]];
        assert!(!runs_all_sizes(&s));
        let runs = recipe_runs(&s).unwrap();
        assert_eq!(
            runs,
            [
                RecipeRun {
                    command: "./app 64 32".into(),
                    covers: vec![0]
                },
                RecipeRun {
                    command: "./app 128 64".into(),
                    covers: vec![1]
                },
            ]
        );
        assert_eq!(max_sizes_for(&runs[0], Some("1")), None);
        // A data parameter called SIZES: {SIZES} is its value.
        let mut named = spec(&["SIZES"], 1, Some("./app {SIZES}"));
        named.profile_sizes = vec![vec![8], vec![16]];
        assert!(!runs_all_sizes(&named));
        assert_eq!(recipe_runs(&named).unwrap().len(), 2);
        assert_eq!(recipe_runs(&named).unwrap()[1].command, "./app 16");
        // A kernel profiled as its program runs: the command as given, no size.
        let given = as_given(&s, "./app {SIZES}", Path::new("."));
        assert!(!runs_all_sizes(&given));
        assert_eq!(
            recipe_runs(&given).unwrap(),
            [RecipeRun {
                command: "./app {SIZES}".into(),
                covers: vec![]
            }]
        );
    }

    #[test]
    fn a_kernel_without_a_recipe_says_how_to_add_one() {
        let s = spec(&["N"], 1, None);
        let err = recipe_command(&s, &[64]).unwrap_err().to_string();
        assert!(err.contains("kernel k (annotated at k.cu:3:9) has no profile recipe"));
        assert!(
            err.contains(r#"profile(run="./app {N}", sizes=[…])"#),
            "{err}"
        );
    }

    #[test]
    fn csv_fields_follow_rfc_4180_quoting() {
        assert_eq!(csv_fields("a,b,,c"), ["a", "b", "", "c"]);
        assert_eq!(
            csv_fields(r#""ID","Kernel Name","1,388,544","(32, 8, 1)""#),
            ["ID", "Kernel Name", "1,388,544", "(32, 8, 1)"]
        );
        assert_eq!(
            csv_fields(r#""say ""hi""",plain,"",end"#),
            [r#"say "hi""#, "plain", "", "end"]
        );
        assert_eq!(csv_fields(""), [""]);
        assert_eq!(csv_fields(r#""trailing","#), ["trailing", ""]);
    }

    #[test]
    fn kernel_stems_are_fnv1a_of_the_id_unless_kernels_tsv_says() {
        // FNV-1a 64, computed independently.
        assert_eq!(kernel_stem("_Z2mmPKfS0_Pfi"), "b55911a393d4d39c");
        assert_eq!(kernel_stem("_Z5saxpyfPKfPfi"), "cc2b4160c996a6c6");
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(stem_in(dir.path(), "_Z2mmPKfS0_Pfi"), "b55911a393d4d39c");
        std::fs::write(
            dir.path().join("kernels.tsv"),
            "d7754040eeef94c2\t_Z2mmPKfS0_Pfi\tmm\n",
        )
        .unwrap();
        assert_eq!(stem_in(dir.path(), "_Z2mmPKfS0_Pfi"), "d7754040eeef94c2");
        assert_eq!(stem_in(dir.path(), "_Z5saxpyfPKfPfi"), "cc2b4160c996a6c6");
    }

    #[test]
    fn the_files_of_a_run_stopped_at_a_fault_and_of_its_resumption() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read_stopped(dir.path()).unwrap(), []);
        std::fs::write(dir.path().join(STOPPED_FILE), "").unwrap();
        assert_eq!(read_stopped(dir.path()).unwrap().len(), 1);
        // As the runtime writes it: the error as its JSON string has it; a kernel without
        // data values; a shape no sample named; a line that is not one.
        std::fs::write(
            dir.path().join(STOPPED_FILE),
            "fault\t_Z3sumPfi\t4096,2\t512x1x1\tan error in the kernel: \\\"x\\\" (700)\n\
             fault\t_Z1kv\t-\t0x0x0\tnot run: the CUDA context is unusable after y\n\
             garbage\n",
        )
        .unwrap();
        let stops = read_stopped(dir.path()).unwrap();
        assert_eq!(stops.len(), 3);
        assert_eq!(
            stops[0],
            Stopped {
                id: "_Z3sumPfi".into(),
                sizes: vec![4096, 2],
                block: Some([512, 1, 1]),
                error: "an error in the kernel: \"x\" (700)".into(),
            }
        );
        assert_eq!(stops[1].sizes, Vec::<i64>::new());
        assert_eq!(stops[1].block, None);
        assert_eq!(stops[2].id, "");
        assert_eq!(stops[2].error, "garbage");

        let skip = skip_file(&[
            ResumedSweep {
                id: "_Z3sumPfi".into(),
                sizes: vec![4096, 2],
                done: vec![[32, 1, 1], [512, 1, 1]],
            },
            ResumedSweep {
                id: "_Z1kv".into(),
                sizes: vec![],
                done: vec![],
            },
        ]);
        assert_eq!(
            skip,
            "# klaraptor resumed run: <kernel id> <sizes> <shapes done>\n\
             _Z3sumPfi 4096,2 32x1x1 512x1x1\n_Z1kv -\n"
        );
        let plan = dir.path().join("plan");
        std::fs::write(&plan, "# plan\n_Z3sumPfi 32x1x1 64x2x1\n_Z1kv 1x1x1\n").unwrap();
        assert_eq!(
            read_plan(&plan).unwrap(),
            [
                ("_Z3sumPfi".to_string(), vec![[32, 1, 1], [64, 2, 1]]),
                ("_Z1kv".to_string(), vec![[1, 1, 1]]),
            ]
        );
        std::fs::write(
            dir.path().join("kernels.tsv"),
            "00\t_Z3sumPfi\tsum\n01\t_Z1kv\tk\n00\t_Z3sumPfi\tsum\n",
        )
        .unwrap();
        assert_eq!(kernels_in(dir.path()), ["_Z3sumPfi", "_Z1kv"]);
    }

    #[test]
    fn progress_lines_of_the_runtime_parse_into_events() {
        assert_eq!(
            parse_progress_line("sweep\tmm2_t\t64,64,64\t32\n"),
            Some(Progress::Sweep {
                kernel: "mm2_t".into(),
                sizes: vec![64, 64, 64],
                shapes: 32
            })
        );
        assert_eq!(
            parse_progress_line("shape\tns::tmpl<float, 2>\t1000,-5\t3\t32\t16x4x1\tok\t12.5\n"),
            Some(Progress::Shape {
                kernel: "ns::tmpl<float, 2>".into(),
                sizes: vec![1000, -5],
                index: 3,
                shapes: 32,
                block: [16, 4, 1],
                status: ShapeStatus::Measured,
                ms: 12.5
            })
        );
        for (word, status) in [
            ("failed", ShapeStatus::Failed),
            ("rejected", ShapeStatus::Rejected),
            ("launched", ShapeStatus::Launched),
        ] {
            let line = format!("shape\tk\t7\t1\t1\t1x1x1\t{word}\t0.0\r\n");
            match parse_progress_line(&line) {
                Some(Progress::Shape { status: s, .. }) => assert_eq!(s, status),
                other => panic!("{line:?}: {other:?}"),
            }
        }
        assert_eq!(
            parse_progress_line("end\tk\t\t30\t2\t812.25"),
            Some(Progress::End {
                kernel: "k".into(),
                sizes: vec![],
                ok: 30,
                not_ok: 2,
                ms: 812.25
            })
        );
    }

    #[test]
    fn malformed_progress_lines_are_skipped() {
        for bad in [
            "",
            "\n",
            "sweep\tk\t64\n",
            "sweep\tk\t64\tmany\n",
            "sweep\tk\t6x4\t32\n",
            "shape\tk\t64\t0\t32\t1x1x1\tok\t1.0\n",
            "shape\tk\t64\t33\t32\t1x1x1\tok\t1.0\n",
            "shape\tk\t64\t1\t32\t1x1\tok\t1.0\n",
            "shape\tk\t64\t1\t32\t1x1x1x1\tok\t1.0\n",
            "shape\tk\t64\t1\t32\t1x1x1\tdone\t1.0\n",
            "shape\tk\t64\t1\t32\t1x1x1\tok\t-1.0\n",
            "shape\tk\t64\t1\t32\t1x1x1\tok\tNaN\n",
            "end\tk\t64\t1\t1\n",
            "begin\tk\t64\t1\n",
            "klaraptor-profile: the collector failed on k\n",
        ] {
            assert_eq!(parse_progress_line(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn the_progress_reader_takes_a_line_once_its_newline_has_arrived() {
        let mut r = ProgressReader::default();
        assert!(r.feed(b"sweep\tk\t64\t2\nshape\tk\t6").len() == 1);
        assert!(r.feed(b"4\t1\t2\t32x1x1\tok").is_empty());
        let evs = r.feed(b"\t1.5\ngarbage line\nshape\tk\t64\t2\t2\t64x1x1\tfailed\t3.0\nend\tk");
        assert_eq!(evs.len(), 2);
        assert!(matches!(evs[0], Progress::Shape { index: 1, .. }));
        assert!(matches!(
            evs[1],
            Progress::Shape {
                index: 2,
                status: ShapeStatus::Failed,
                ..
            }
        ));
        let evs = r.feed(b"\t64\t1\t1\t3.5\n");
        assert!(matches!(
            evs[..],
            [Progress::End {
                ok: 1,
                not_ok: 1,
                ..
            }]
        ));
        assert!(r.feed(b"").is_empty());
    }

    #[test]
    fn plain_progress_prints_each_sweep_and_a_shape_every_few_seconds() {
        use std::time::{Duration, Instant};
        let spec = spec(&["NI", "NJ"], 2, Some("./app {NI} {NJ}"));
        let fmt = |k: &str, s: &[i64]| progress_sizes(&spec, &[], k, s);
        let shape = |index, ms| Progress::Shape {
            kernel: "k".into(),
            sizes: vec![64, 128],
            index,
            shapes: 4,
            block: [32, 2, 1],
            status: ShapeStatus::Measured,
            ms,
        };
        let t0 = Instant::now();
        let mut p = PlainProgress::new(Duration::from_secs(5), false);
        let sweep = Progress::Sweep {
            kernel: "k".into(),
            sizes: vec![64, 128],
            shapes: 4,
        };
        assert_eq!(p.line(&sweep, t0, &fmt), None);
        assert_eq!(
            p.line(&shape(1, 100.0), t0 + Duration::from_secs(1), &fmt),
            None
        );
        assert_eq!(
            p.line(&shape(2, 6000.0), t0 + Duration::from_secs(6), &fmt)
                .as_deref(),
            Some("klaraptor-cc:   k at NI=64 NJ=128: shape 2/4 (32x2x1 ok), 6.0 s")
        );
        assert_eq!(
            p.line(&shape(3, 7000.0), t0 + Duration::from_secs(7), &fmt),
            None
        );
        // The last shape is said by the sweep's end line.
        assert_eq!(
            p.line(&shape(4, 20000.0), t0 + Duration::from_secs(20), &fmt),
            None
        );
        let end = Progress::End {
            kernel: "k".into(),
            sizes: vec![64, 128],
            ok: 3,
            not_ok: 1,
            ms: 20000.0,
        };
        assert_eq!(
            p.line(&end, t0 + Duration::from_secs(20), &fmt).as_deref(),
            Some(
                "klaraptor-cc:   k at NI=64 NJ=128: 3/4 shapes in 20.00 s (5000 ms per shape), \
                 1 failed or rejected (see the records)"
            )
        );
        // Another kernel of the same run: its values, not the spec's labels.
        let other = Progress::End {
            kernel: "other".into(),
            sizes: vec![7],
            ok: 19,
            not_ok: 0,
            ms: 190.0,
        };
        assert_eq!(
            p.line(&other, t0, &fmt).as_deref(),
            Some("klaraptor-cc:   other at 7: 19/19 shapes in 0.19 s (10 ms per shape)")
        );
        // Verbose: every shape.
        let mut v = PlainProgress::new(Duration::from_secs(5), true);
        for i in 1..=4 {
            assert!(v.line(&shape(i, 1.0), t0, &fmt).is_some(), "shape {i}");
        }
        // A run of several profile sizes (a {SIZES} recipe): the spec's sweeps say which.
        let covers: [&[i64]; 3] = [&[32, 64], &[64, 128], &[128, 256]];
        let several = |k: &str, s: &[i64]| progress_sizes(&spec, &covers, k, s);
        let mut m = PlainProgress::new(Duration::from_secs(5), false);
        assert_eq!(
            m.line(&end, t0, &several).as_deref(),
            Some(
                "klaraptor-cc:   k at NI=64 NJ=128 (size 2/3): 3/4 shapes in 20.00 s (5000 ms \
                 per shape), 1 failed or rejected (see the records)"
            )
        );
        assert_eq!(
            m.line(&other, t0, &several).as_deref(),
            Some("klaraptor-cc:   other at 7: 19/19 shapes in 0.19 s (10 ms per shape)")
        );
    }
}
