//! `klaraptor profile list|show|prune`: look into the profile database and clean it; and
//! `klaraptor profile <binary>`: profile a program's annotated kernels into it, where the
//! link was not klaraptor's (CMake, g++).
//!
//! The database itself (layout, locking, validity) is `crate::db`; this module
//! parses the subcommand, renders tables and says which database it used.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::db::{Date, Listed, Pattern, ProfileDb, PruneFilter, Status};
use crate::record::{Counters, Entry, Plan, Sample};
use anyhow::{bail, Result};
use clap::{Args, Subcommand};

use klaraptor_spec::link::LinkSpec;

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true, arg_required_else_help = true)]
pub struct ProfileArgs {
    /// The profile database directory (default: $KLARAPTOR_PROFILE_DB, else the nearest
    /// klaraptor-profiles/ at or above the current directory, else the user cache).
    #[arg(long, global = true, value_name = "DIR")]
    pub db: Option<PathBuf>,
    /// A program built by klaraptor-cc (linked by anything: g++, CMake, klaraptor-cc): run
    /// the profile recipes of its annotated kernels that the database has no profile of on
    /// this machine's GPU, and store the profiles; the next build puts their rational
    /// programs into the objects. Kernels without a recipe are profiled by running the
    /// program once as given (BINARY ARGS…, in the current directory), at the data sizes its
    /// launches reach. Needs an NVIDIA GPU and the collector.
    #[arg(value_name = "BINARY")]
    pub binary: Option<PathBuf>,
    /// The program's arguments for the run that profiles the kernels without a recipe
    /// (everything after BINARY, options included).
    #[arg(
        value_name = "ARGS",
        trailing_var_arg = true,
        allow_hyphen_values = true,
        requires = "binary"
    )]
    pub args: Vec<String>,
    #[command(subcommand)]
    pub command: Option<ProfileCommand>,
}

#[derive(Debug, Subcommand)]
pub enum ProfileCommand {
    /// Table of every entry: kernel, device, samples, sizes, shapes, collector, date,
    /// status (ok, superseded, incomplete, old format, corrupt, …) and file.
    List {
        /// Only the incomplete entries: samples missing because the collector or the GPU
        /// failed (never used for a model; the next link on a GPU profiles them again).
        #[arg(long)]
        incomplete: bool,
    },
    /// One kernel's entries (or one entry file): header, plan, and the time and key
    /// counters of every size × block shape.
    Show {
        /// A kernel (name in the source or mangled name; `*` and `?` match any text / one
        /// character), or the path of an entry file.
        target: String,
        /// Only entries of this device (a part of its name or its UUID, any case; or a
        /// pattern with `*`/`?`).
        #[arg(long)]
        device: Option<String>,
        /// Also print every sample in full: all counters and every timed run.
        #[arg(long)]
        samples: bool,
    },
    /// Remove entries. Kinds (--invalid, --old-format, --superseded, --all) say which
    /// files; --device, --kernel and --older-than narrow it down. Without a kind, every
    /// valid entry in that scope goes.
    Prune {
        /// Say what would be removed, remove nothing.
        #[arg(long)]
        dry_run: bool,
        /// Files that cannot be used: unparsable, stored under the wrong path, left half
        /// written by a killed writer, or of an older format version.
        #[arg(long)]
        invalid: bool,
        /// Entries of an older format version only.
        #[arg(long)]
        old_format: bool,
        /// Entries of a kernel and device for which a newer entry (other code) exists.
        #[arg(long)]
        superseded: bool,
        /// Incomplete entries: samples missing because the collector or the GPU failed.
        #[arg(long)]
        incomplete: bool,
        /// Every file in scope, whatever its state.
        #[arg(long)]
        all: bool,
        /// Only entries of this device (a part of its name or its UUID, any case; or a
        /// pattern with `*`/`?`).
        #[arg(long)]
        device: Option<String>,
        /// Only entries of this kernel (name in the source or mangled name; `*` and `?`
        /// allowed).
        #[arg(long)]
        kernel: Option<String>,
        /// Only entries captured before this date (UTC).
        #[arg(long, value_name = "YYYY-MM-DD")]
        older_than: Option<Date>,
    },
}

/// Runs a `klaraptor profile` command and prints its output; `find_nvcc` finds the nvcc that calibrates the GPU (asked
/// only when something is profiled).
pub fn run(args: ProfileArgs, find_nvcc: &dyn Fn() -> Result<PathBuf>) -> Result<ExitCode> {
    let db = match &args.db {
        Some(p) => ProfileDb::open(p)?,
        None => ProfileDb::locate()?,
    };
    let command = match (&args.command, &args.binary) {
        (Some(c), _) => c,
        (None, Some(binary)) => return profile_binary(&db, binary, &args.args, find_nvcc),
        (None, None) => bail!("say what to do: klaraptor profile <binary> | list | show | prune"),
    };
    let mut out = String::new();
    let code = execute(&db, command, &mut out)?;
    emit(&out)?;
    Ok(code)
}

/// The annotated kernels of `binary` that have a profile recipe, as its `.klaraptor_spec`
/// data holds them (one per kernel), after checking that the binary can profile: it
/// carries klaraptor's runtime (runtime.rs), which acts as the profiling runtime when the
/// recipes run it with KLARAPTOR_PROFILE_PLAN set.
pub fn binary_recipes(binary: &Path) -> Result<(Vec<LinkSpec>, Vec<LinkSpec>)> {
    let bytes = std::fs::read(binary)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", binary.display()))?;
    let specs = klaraptor_spec::link::scan_inputs([binary])?;
    if specs.is_empty() {
        bail!(
            "{} holds no annotated kernel that klaraptor-cc instrumented (build it with \
             klaraptor-cc as the CUDA compiler: CMAKE_CUDA_COMPILER_LAUNCHER=klaraptor-cc, or \
             include(Klaraptor) from klaraptor's cmake/ directory)",
            binary.display()
        );
    }
    if !crate::gpu_profile::carries_runtime(&bytes) {
        bail!(
            "{} does not carry klaraptor's runtime (it was built by an older klaraptor-cc, or \
             linked with --kl-off): rebuild it with this klaraptor-cc ({})",
            binary.display(),
            env!("CARGO_PKG_VERSION")
        );
    }
    Ok(specs
        .into_iter()
        .partition(|s| s.profile_run.is_some() && !s.profile_sizes.is_empty()))
}

/// `klaraptor profile <binary> [args…]`: the kernels with a recipe by their recipes, the
/// others by one run of `binary args…` in the current directory, at the sizes it reaches.
fn profile_binary(
    db: &ProfileDb,
    binary: &Path,
    args: &[String],
    find_nvcc: &dyn Fn() -> Result<PathBuf>,
) -> Result<ExitCode> {
    let (mut runnable, without) = binary_recipes(binary)?;
    if !without.is_empty() {
        let here = std::env::current_dir()
            .map_err(|e| anyhow::anyhow!("cannot read the current directory: {e}"))?;
        let command = crate::plan::shell_command(binary, args);
        for s in &without {
            crate::kl_eprintln!(
                "klaraptor: kernel {} (annotated at {}) has no profile(run=…, sizes=…) \
                 recipe: it is profiled at the data sizes its launches reach in `{command}`",
                s.name,
                s.annotated_at
            );
        }
        runnable.extend(
            without
                .iter()
                .map(|s| crate::plan::as_given(s, &command, &here)),
        );
    }
    if !crate::gpu_profile::gpu_present() {
        let names: Vec<String> = runnable
            .iter()
            .map(|s| format!("{} (annotated at {})", s.name, s.annotated_at))
            .collect();
        bail!(
            "no NVIDIA GPU here (or KLARAPTOR_NO_GPU is set): klaraptor profile runs the \
             program to profile {} on this machine's GPU; run it on a machine with one, with \
             the database {} ({}), then rebuild",
            names.join(", "),
            db.root().display(),
            db.origin()
        );
    }
    let gpu = crate::gpu_profile::Gpu::here(&find_nvcc()?)?;
    let mut todo: Vec<&LinkSpec> = Vec::new();
    for s in &runnable {
        match db.get(&s.mangled, &s.code_hash, &gpu.device.name)? {
            Some(_) => crate::kl_println!(
                "{} on {}: profiled already ({})",
                s.name,
                gpu.device.name,
                db.entry_path(&s.mangled, &s.code_hash, &gpu.device.name)?
                    .display()
            ),
            None => todo.push(s),
        }
    }
    if todo.is_empty() {
        return Ok(ExitCode::SUCCESS);
    }
    let scratch = crate::interrupt::Scratch::new("klaraptor-profile-")?;
    let dir = crate::plan::scratch(scratch.path())?;
    let outcomes = crate::gpu_profile::run_recipes(&gpu, &todo, db, &dir, false)?;
    let mut code = ExitCode::SUCCESS;
    for (s, o) in todo.iter().zip(&outcomes) {
        if o.has_entry() {
            crate::kl_println!(
                "{} on {}: profiled -> {}",
                s.name,
                gpu.device.name,
                db.entry_path(&s.mangled, &s.code_hash, &gpu.device.name)?
                    .display()
            );
        } else {
            crate::kl_println!(
                "{} on {}: no complete profile (see the warnings above)",
                s.name,
                gpu.device.name
            );
            code = ExitCode::FAILURE;
        }
    }
    Ok(code)
}

/// Runs a command against `db`, writing what it prints to `out`.
pub fn execute(db: &ProfileDb, command: &ProfileCommand, out: &mut String) -> Result<ExitCode> {
    let _ = writeln!(
        out,
        "profile database: {} ({})",
        db.root().display(),
        db.origin()
    );
    match command {
        ProfileCommand::List { incomplete } => list(db, *incomplete, out),
        ProfileCommand::Show {
            target,
            device,
            samples,
        } => show(db, target, device.as_deref(), *samples, out),
        ProfileCommand::Prune {
            dry_run,
            invalid,
            old_format,
            superseded,
            incomplete,
            all,
            device,
            kernel,
            older_than,
        } => {
            let filter = PruneFilter {
                invalid: *invalid,
                old_format: *invalid || *old_format,
                superseded: *superseded,
                incomplete: *incomplete,
                all: *all,
                device: device.as_deref().map(device_pattern),
                kernel: kernel.as_deref().map(Pattern::new),
                older_than: *older_than,
            };
            prune(db, &filter, *dry_run, out)
        }
    }
}

/// A device argument as a pattern: a part of the name unless it has wildcards itself.
fn device_pattern(arg: &str) -> Pattern {
    if arg.contains(['*', '?']) {
        Pattern::ignoring_case(arg)
    } else {
        Pattern::ignoring_case(&format!("*{arg}*"))
    }
}

/// Writes `text` to stdout; a closed pipe (`… | head`) is not an error.
pub(crate) fn emit(text: &str) -> Result<()> {
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}

fn list(db: &ProfileDb, only_incomplete: bool, out: &mut String) -> Result<ExitCode> {
    let mut listed = db.list()?;
    if only_incomplete {
        listed.retain(|l| matches!(l.status, Status::Incomplete { .. }));
        if listed.is_empty() {
            out.push_str("no incomplete entries\n");
            return Ok(ExitCode::SUCCESS);
        }
    }
    if listed.is_empty() {
        out.push_str(if db.exists() {
            "no entries\n"
        } else {
            "no entries (the directory does not exist yet: the first profile creates it)\n"
        });
        return Ok(ExitCode::SUCCESS);
    }
    let header = [
        "KERNEL",
        "MANGLED",
        "DEVICE",
        "OK/FAILED",
        "SIZES",
        "SHAPES",
        "COLLECTOR",
        "CAPTURED",
        "STATUS",
        "FILE",
    ];
    let unknown = || "?".to_string();
    let rows: Vec<Vec<String>> = listed
        .iter()
        .map(|l| {
            let s = &l.summary;
            let (counts, sizes, shapes, collector) = match &l.entry {
                Some(e) => {
                    let failed = e.samples.iter().filter(|s| s.error.is_some()).count();
                    (
                        format!("{}/{}", e.samples.len() - failed, failed),
                        sizes_summary(&e.plan),
                        e.plan.shapes.len().to_string(),
                        e.collector.clone(),
                    )
                }
                None => (unknown(), unknown(), unknown(), unknown()),
            };
            vec![
                s.name.clone().unwrap_or_else(unknown),
                s.mangled
                    .as_deref()
                    .map_or_else(unknown, |m| shorten(m, 24)),
                s.device.clone().unwrap_or_else(unknown),
                counts,
                sizes,
                shapes,
                collector,
                s.captured_at
                    .as_deref()
                    .map_or_else(unknown, |c| c.get(..10).unwrap_or(c).to_string()),
                l.status.label(),
                relative(db.root(), &l.path),
            ]
        })
        .collect();
    table(out, &header, &rows);

    let valid = listed.iter().filter(|l| l.status.is_valid()).count();
    let superseded = listed
        .iter()
        .filter(|l| matches!(l.status, Status::Superseded { .. }))
        .count();
    let _ = writeln!(
        out,
        "\n{} file(s): {valid} valid entr{} ({superseded} superseded), {} other",
        listed.len(),
        if valid == 1 { "y" } else { "ies" },
        listed.len() - valid
    );
    let mut problems = false;
    let mut incomplete = false;
    for l in &listed {
        let what = match &l.status {
            Status::Incomplete { why } => {
                incomplete = true;
                let _ = writeln!(
                    out,
                    "  {}: incomplete: {}",
                    relative(db.root(), &l.path),
                    indent_rest(why, "    ")
                );
                continue;
            }
            Status::Corrupt { message } => format!("not a valid entry: {message}"),
            Status::Misplaced { expected, why } => {
                format!("{why}; it belongs at {}", relative(db.root(), expected))
            }
            Status::Partial => "left half-written by a writer that was stopped".into(),
            Status::SetAside { message } => format!(
                "moved aside by a link that found it damaged ({message}); never read (klaraptor \
                 profile prune --invalid removes it)"
            ),
            Status::OtherVersion { version } if *version < crate::record::FORMAT_VERSION => {
                format!("format version {version}: not used (re-profiled when needed)")
            }
            Status::OtherVersion { version } => {
                format!("format version {version}, written by a newer klaraptor: not used")
            }
            Status::Current | Status::Superseded { .. } => continue,
        };
        problems = true;
        let _ = writeln!(
            out,
            "  {}: {}",
            relative(db.root(), &l.path),
            indent_rest(&what, "    ")
        );
    }
    if incomplete {
        out.push_str(
            "  (incomplete entries are not used for models; the next link on a GPU profiles \
             them again, `klaraptor profile prune --incomplete` removes them)\n",
        );
    }
    if problems {
        out.push_str("  (`klaraptor profile prune --invalid` removes these)\n");
    }
    if superseded > 0 {
        out.push_str(
            "superseded entries are kept for their old code; `klaraptor profile prune \
             --superseded` removes them\n",
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn show(
    db: &ProfileDb,
    target: &str,
    device: Option<&str>,
    samples: bool,
    out: &mut String,
) -> Result<ExitCode> {
    let as_file = Path::new(target);
    if as_file.is_file() {
        let entry = ProfileDb::read_file(as_file)?;
        render_entry(&entry, as_file, None, samples, out);
        return Ok(ExitCode::SUCCESS);
    }
    let listed = db.list()?;
    let device_pat = device.map(device_pattern);
    let device_ok = |l: &Listed| {
        device_pat.as_ref().is_none_or(|p| {
            l.summary.device.as_deref().is_some_and(|d| p.matches(d))
                || l.summary
                    .device_uuid
                    .as_deref()
                    .is_some_and(|u| !u.is_empty() && p.matches(u))
        })
    };
    let kernel_pat = Pattern::new(target);
    let kernel_ok = |l: &Listed| {
        l.summary
            .name
            .as_deref()
            .is_some_and(|n| kernel_pat.matches(n))
            || l.summary
                .mangled
                .as_deref()
                .is_some_and(|m| kernel_pat.matches(m))
    };
    let chosen: Vec<&Listed> = listed
        .iter()
        .filter(|l| kernel_ok(l) && device_ok(l))
        .collect();
    let valid: Vec<&&Listed> = chosen.iter().filter(|l| l.status.is_valid()).collect();
    if valid.is_empty() {
        let mut msg = format!(
            "no valid entry for kernel `{target}`{} in {} ({})",
            device
                .map(|d| format!(" on a device matching `{d}`"))
                .unwrap_or_default(),
            db.root().display(),
            db.origin()
        );
        for l in &chosen {
            let _ = write!(
                msg,
                "\n  {} is there but is {}",
                l.path.display(),
                l.status.label()
            );
        }
        msg.push_str("\n  (`klaraptor profile list` shows what the database holds)");
        bail!(msg);
    }
    for (i, l) in valid.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let entry = l.entry.as_ref().expect("a valid entry is parsed");
        render_entry(entry, &l.path, Some(&l.status), samples, out);
    }
    Ok(ExitCode::SUCCESS)
}

fn render_entry(e: &Entry, path: &Path, status: Option<&Status>, all: bool, out: &mut String) {
    let k = &e.kernel;
    let d = &e.device;
    let _ = writeln!(out, "kernel      {} ({})", k.name, k.mangled);
    let _ = writeln!(out, "code hash   {}", k.code_hash);
    let _ = writeln!(
        out,
        "data        {}   block dim {}",
        k.data.join(", "),
        k.dim
    );
    let _ = writeln!(
        out,
        "device      {} (cc {}, {} SMs{})",
        d.name,
        d.cc,
        d.sm_count,
        if d.uuid.is_empty() {
            String::new()
        } else {
            format!(", {}", d.uuid)
        }
    );
    let _ = writeln!(
        out,
        "captured    {} by {} (CUDA {}, driver {})",
        e.captured_at, e.collector, e.cuda_version, e.driver_version
    );
    let _ = writeln!(out, "file        {}", path.display());
    match status {
        Some(Status::Superseded { by }) => {
            let _ = writeln!(
                out,
                "status      superseded by {} (newer code)",
                by.display()
            );
        }
        Some(s) => {
            let _ = writeln!(out, "status      {}", s.label());
        }
        None => {}
    }
    let p = &e.plan;
    let _ = writeln!(
        out,
        "plan        {} size(s) × {} shape(s), median of {} timed run(s) after {} warm-up",
        p.sizes.len(),
        p.shapes.len(),
        p.runs,
        p.warmup
    );
    let _ = writeln!(
        out,
        "  sizes     {}",
        p.sizes
            .iter()
            .map(|s| size_str(s))
            .collect::<Vec<_>>()
            .join("  ")
    );
    let _ = writeln!(
        out,
        "  shapes    {}",
        p.shapes.iter().map(shape_str).collect::<Vec<_>>().join(" ")
    );
    if !p.note.is_empty() {
        let _ = writeln!(out, "  note      {}", indent_rest(&p.note, "            "));
    }
    if !e.program.is_empty() {
        // The program's own block at each profiled size (issue 38: the link's decision weighs
        // it against the model and the profiled best).
        let _ = writeln!(
            out,
            "  program   {}",
            e.program
                .iter()
                .map(|b| format!("{} at {}", shape_str(&b.block), size_str(&b.sizes)))
                .collect::<Vec<_>>()
                .join("  ")
        );
    }
    let failed = e.samples.iter().filter(|s| s.error.is_some()).count();
    let _ = writeln!(
        out,
        "samples     {} ({} ok, {} failed)\n",
        e.samples.len(),
        e.samples.len() - failed,
        failed
    );

    // One row per size × shape, in the plan's order.
    let mut order: Vec<&Sample> = e.samples.iter().collect();
    let shape_rank = |b: &[u32; 3]| p.shapes.iter().position(|s| s == b).unwrap_or(usize::MAX);
    let size_rank = |s: &Vec<i64>| p.sizes.iter().position(|x| x == s).unwrap_or(usize::MAX);
    order.sort_by(|a, b| {
        (size_rank(&a.sizes), &a.sizes, shape_rank(&a.block), a.block).cmp(&(
            size_rank(&b.sizes),
            &b.sizes,
            shape_rank(&b.block),
            b.block,
        ))
    });
    let fastest = |s: &Sample| {
        let t = s.counters.as_ref().map(|c| c.time_ms);
        t.is_some()
            && e.samples
                .iter()
                .filter(|o| o.sizes == s.sizes)
                .filter_map(|o| o.counters.as_ref().map(|c| c.time_ms))
                .all(|o| Some(o) >= t)
    };
    let header = [
        "SIZE",
        "BLOCK",
        "GRID",
        "TIME ms",
        "INST",
        "LD SECT/REQ",
        "ST SECT/REQ",
        "DRAM RD",
        "DRAM WR",
        "WARPS/SM",
        "REGS",
        "SMEM",
        "NOTE",
    ];
    let rows: Vec<Vec<String>> = order
        .iter()
        .map(|s| {
            let mut row = vec![size_str(&s.sizes), shape_str(&s.block), shape_str(&s.grid)];
            match (&s.counters, &s.error) {
                (Some(c), _) => row.extend([
                    format!(
                        "{}{}",
                        time_str(c.time_ms),
                        if fastest(s) { " *" } else { "" }
                    ),
                    si(c.inst_executed as f64, ""),
                    ratio(c.gld_sectors, c.gld_requests),
                    ratio(c.gst_sectors, c.gst_requests),
                    si(c.dram_bytes_read as f64, "B"),
                    si(c.dram_bytes_write as f64, "B"),
                    format!("{:.1}", c.achieved_active_warps),
                    c.regs_per_thread.to_string(),
                    (c.smem_static + c.smem_dynamic).to_string(),
                ]),
                (None, err) => {
                    row.push("failed".into());
                    row.extend(std::iter::repeat_n("-".to_string(), 8));
                    row.push(err.as_deref().unwrap_or("no counters recorded").to_string());
                }
            }
            row
        })
        .collect();
    table(out, &header, &rows);
    out.push_str(
        "(* fastest at that size; INST warp instructions; SECT/REQ 32-byte sectors per global \
         request; WARPS/SM achieved; SMEM bytes per block)\n",
    );

    if all {
        out.push('\n');
        for s in &order {
            let _ = writeln!(
                out,
                "sample size {} block {} grid {}",
                size_str(&s.sizes),
                shape_str(&s.block),
                shape_str(&s.grid)
            );
            if let Some(err) = &s.error {
                let _ = writeln!(out, "  error: {err}");
            }
            if let Some(c) = &s.counters {
                counters_in_full(c, out);
            }
        }
    }
}

fn counters_in_full(c: &Counters, out: &mut String) {
    let fields: [(&str, String); 18] = [
        ("time_ms", c.time_ms.to_string()),
        (
            "time_runs_ms",
            c.time_runs_ms
                .iter()
                .map(|t| t.to_string())
                .collect::<Vec<_>>()
                .join(", "),
        ),
        ("inst_executed", c.inst_executed.to_string()),
        ("inst_global_ld", c.inst_global_ld.to_string()),
        ("inst_global_st", c.inst_global_st.to_string()),
        ("inst_shared_ld", c.inst_shared_ld.to_string()),
        ("inst_shared_st", c.inst_shared_st.to_string()),
        ("inst_barrier", c.inst_barrier.to_string()),
        ("gld_requests", c.gld_requests.to_string()),
        ("gld_sectors", c.gld_sectors.to_string()),
        ("gst_requests", c.gst_requests.to_string()),
        ("gst_sectors", c.gst_sectors.to_string()),
        ("dram_bytes_read", c.dram_bytes_read.to_string()),
        ("dram_bytes_write", c.dram_bytes_write.to_string()),
        ("achieved_active_warps", c.achieved_active_warps.to_string()),
        ("regs_per_thread", c.regs_per_thread.to_string()),
        ("smem_static", c.smem_static.to_string()),
        ("smem_dynamic", c.smem_dynamic.to_string()),
    ];
    for (name, value) in fields {
        let _ = writeln!(out, "  {name:<22} {value}");
    }
}

fn prune(
    db: &ProfileDb,
    filter: &PruneFilter,
    dry_run: bool,
    out: &mut String,
) -> Result<ExitCode> {
    let selected = db.prune(filter, dry_run)?;
    let verb = if dry_run { "would remove" } else { "removed" };
    if selected.is_empty() {
        let _ = writeln!(out, "nothing to remove");
        return Ok(ExitCode::SUCCESS);
    }
    let _ = writeln!(out, "{verb} {} file(s):", selected.len());
    let rows: Vec<Vec<String>> = selected
        .iter()
        .map(|l| {
            let s = &l.summary;
            vec![
                l.status.label(),
                s.name.clone().unwrap_or_else(|| "?".into()),
                s.device.clone().unwrap_or_else(|| "?".into()),
                s.captured_at
                    .as_deref()
                    .map_or("?".into(), |c| c.get(..10).unwrap_or(c).to_string()),
                relative(db.root(), &l.path),
            ]
        })
        .collect();
    table(
        out,
        &["STATUS", "KERNEL", "DEVICE", "CAPTURED", "FILE"],
        &rows,
    );
    if dry_run {
        out.push_str("(dry run: nothing was removed)\n");
    }
    Ok(ExitCode::SUCCESS)
}

/// Left-aligned columns separated by two spaces; the last column is not padded.
fn table(out: &mut String, header: &[&str], rows: &[Vec<String>]) {
    let cols = header.len();
    let mut width: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate().take(cols) {
            width[i] = width[i].max(c.chars().count());
        }
    }
    let mut line = |cells: Vec<&str>| {
        let n = cells.len();
        let mut l = String::new();
        for (i, c) in cells.into_iter().enumerate() {
            l.push_str(c);
            if i + 1 < n {
                let pad = width[i].saturating_sub(c.chars().count()) + 2;
                l.extend(std::iter::repeat_n(' ', pad));
            }
        }
        out.push_str(l.trim_end());
        out.push('\n');
    };
    line(header.to_vec());
    for r in rows {
        line(r.iter().map(String::as_str).collect());
    }
}

/// `s` cut to `max` characters with `…` in the middle.
fn shorten(s: &str, max: usize) -> String {
    let n = s.chars().count();
    if n <= max {
        return s.to_string();
    }
    let head = (max - 1) / 2 + (max - 1) % 2;
    let tail = max - 1 - head;
    let mut out: String = s.chars().take(head).collect();
    out.push('…');
    out.extend(s.chars().skip(n - tail));
    out
}

fn relative(root: &Path, path: &Path) -> String {
    path.strip_prefix(root)
        .unwrap_or(path)
        .display()
        .to_string()
}

fn indent_rest(text: &str, indent: &str) -> String {
    text.trim_end().replace('\n', &format!("\n{indent}"))
}

fn size_str(s: &[i64]) -> String {
    s.iter().map(i64::to_string).collect::<Vec<_>>().join("x")
}

fn shape_str(b: &[u32; 3]) -> String {
    format!("{}x{}x{}", b[0], b[1], b[2])
}

/// The plan's sizes in a few characters: all of them when short, else count and range.
fn sizes_summary(p: &Plan) -> String {
    let all = p
        .sizes
        .iter()
        .map(|s| size_str(s))
        .collect::<Vec<_>>()
        .join(",");
    if all.chars().count() <= 20 || p.sizes.len() < 2 {
        return shorten(&all, 20);
    }
    format!(
        "{}: {}…{}",
        p.sizes.len(),
        size_str(&p.sizes[0]),
        size_str(&p.sizes[p.sizes.len() - 1])
    )
}

/// Milliseconds with four significant digits.
fn time_str(ms: f64) -> String {
    if !ms.is_finite() || ms <= 0.0 {
        return format!("{ms}");
    }
    let decimals = (3 - ms.log10().floor() as i32).clamp(0, 6) as usize;
    format!("{ms:.decimals$}")
}

/// A count with a decimal SI prefix (k, M, G, T), three significant digits.
fn si(v: f64, unit: &str) -> String {
    let prefixes = ["", "k", "M", "G", "T", "P"];
    let mut x = v;
    let mut i = 0;
    while x.abs() >= 1000.0 && i + 1 < prefixes.len() {
        x /= 1000.0;
        i += 1;
    }
    if i == 0 {
        return format!("{v}{}{unit}", if unit.is_empty() { "" } else { " " });
    }
    let decimals = if x.abs() >= 100.0 {
        0
    } else if x.abs() >= 10.0 {
        1
    } else {
        2
    };
    format!(
        "{x:.decimals$}{}{}{unit}",
        if unit.is_empty() { "" } else { " " },
        prefixes[i]
    )
}

fn ratio(num: u64, den: u64) -> String {
    if den == 0 {
        "-".into()
    } else {
        format!("{:.2}", num as f64 / den as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::code_hash;
    use crate::record::{DeviceId, KernelId, FORMAT_VERSION};
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: ProfileArgs,
    }

    fn parse(args: &[&str]) -> ProfileArgs {
        Cli::try_parse_from(std::iter::once("profile").chain(args.iter().copied()))
            .map_err(|e| e.to_string())
            .unwrap()
            .args
    }

    fn entry(name: &str, mangled: &str, code: &str, dev: &str, at: &str) -> Entry {
        let shapes = vec![[32, 1, 1], [128, 1, 1], [2048, 1, 1]];
        let sizes = vec![vec![1024], vec![4096]];
        let mut samples = Vec::new();
        for s in &sizes {
            for b in &shapes {
                let n = s[0] as u32;
                let grid = [n.div_ceil(b[0]), 1, 1];
                if b[0] > 1024 {
                    samples.push(Sample {
                        sizes: s.clone(),
                        block: *b,
                        grid,
                        error: Some("invalid configuration argument".into()),
                        counters: None,
                    });
                    continue;
                }
                let warps = u64::from(n / 32);
                let t = f64::from(n) * 1e-6 * if b[0] == 128 { 1.0 } else { 1.5 };
                samples.push(Sample {
                    sizes: s.clone(),
                    block: *b,
                    grid,
                    error: None,
                    counters: Some(Counters {
                        inst_executed: warps * 40,
                        inst_global_ld: warps * 2,
                        inst_global_st: warps,
                        inst_shared_ld: 0,
                        inst_shared_st: 0,
                        inst_barrier: 0,
                        gld_requests: warps * 2,
                        gld_sectors: warps * 8,
                        gst_requests: warps,
                        gst_sectors: warps * 4,
                        gld_l1_hit_sectors: None,
                        dram_bytes_read: u64::from(n) * 8,
                        dram_bytes_write: u64::from(n) * 4,
                        achieved_active_warps: 48.25,
                        global_atomic_requests: None,
                        time_ms: t,
                        time_runs_ms: vec![t, t * 1.02, t * 0.99],
                        launches_per_run: None,
                        regs_per_thread: 16,
                        smem_static: 0,
                        smem_dynamic: 0,
                    }),
                });
            }
        }
        Entry {
            format_version: FORMAT_VERSION,
            kernel: KernelId {
                mangled: mangled.into(),
                name: name.into(),
                code_hash: code_hash(&[code.as_bytes()]),
                data: vec!["N".into()],
                dim: 1,
            },
            device: DeviceId {
                name: dev.into(),
                uuid: "GPU-0f0e0d0c-aaaa-bbbb-cccc-0123456789ab".into(),
                cc: "9.0".into(),
                sm_count: 132,
            },
            collector: "klaraptor-collector 0.1.0".into(),
            captured_at: at.into(),
            cuda_version: "13.0".into(),
            driver_version: "580.82".into(),
            plan: Plan {
                sizes,
                shapes,
                runs: 3,
                warmup: 1,
                note: "test plan".into(),
            },
            samples,
            incomplete: None,
            program: Vec::new(),
        }
    }

    fn db_with_entries() -> (tempfile::TempDir, ProfileDb) {
        let dir = tempfile::tempdir().unwrap();
        let db = ProfileDb::open(dir.path().join("db")).unwrap();
        db.put(&entry(
            "saxpy",
            "_Z5saxpyifPKfPf",
            "old",
            "NVIDIA H200",
            "2026-01-02T00:00:00Z",
        ))
        .unwrap();
        db.put(&entry(
            "saxpy",
            "_Z5saxpyifPKfPf",
            "new",
            "NVIDIA H200",
            "2026-02-03T00:00:00Z",
        ))
        .unwrap();
        db.put(&entry(
            "saxpy",
            "_Z5saxpyifPKfPf",
            "new",
            "NVIDIA A100 80GB PCIe",
            "2026-02-04T00:00:00Z",
        ))
        .unwrap();
        (dir, db)
    }

    fn exec(db: &ProfileDb, args: &[&str]) -> Result<String> {
        let a = parse(args);
        let mut out = String::new();
        execute(db, a.command.as_ref().expect("a subcommand"), &mut out)?;
        Ok(out)
    }

    #[test]
    fn db_option_anywhere() {
        assert_eq!(parse(&["--db", "x", "list"]).db, Some(PathBuf::from("x")));
        assert_eq!(parse(&["list", "--db", "y"]).db, Some(PathBuf::from("y")));
        let a = parse(&["prune", "--older-than", "2026-01-31", "--dry-run"]);
        assert!(matches!(
            a.command,
            Some(ProfileCommand::Prune { dry_run: true, older_than: Some(d), .. }) if d.to_string() == "2026-01-31"
        ));
        // A binary instead of a subcommand: `klaraptor profile ./app`.
        let b = parse(&["./app"]);
        assert_eq!(b.binary, Some(PathBuf::from("./app")));
        assert!(b.command.is_none());
        let err = Cli::try_parse_from(["profile", "prune", "--older-than", "2026-02-30"])
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("day 30 is not in that month"), "{err}");
    }

    #[test]
    fn list_shows_every_file_and_its_state() {
        let (_dir, db) = db_with_entries();
        std::fs::write(
            db.root().join(format!("v{FORMAT_VERSION}/broken.toml")),
            "x",
        )
        .unwrap();
        let bad_dir = db.root().join(format!("v{FORMAT_VERSION}/dev"));
        std::fs::create_dir_all(&bad_dir).unwrap();
        std::fs::write(
            bad_dir.join("_Z1kv-00.toml"),
            "format_version = 1\n[kernel\n",
        )
        .unwrap();
        let out = exec(&db, &["list"]).unwrap();
        assert!(out.starts_with(&format!(
            "profile database: {} (given on the command line)\n",
            db.root().display()
        )));
        assert!(out.contains("KERNEL  MANGLED"), "{out}");
        // Two current entries, one superseded, one corrupt file (the stray one at the
        // version level is not in a device directory and is not an entry).
        assert_eq!(out.matches("saxpy  ").count(), 3, "{out}");
        assert_eq!(out.matches(" ok ").count(), 2, "{out}");
        assert!(out.contains("4/2"), "{out}");
        assert!(out.contains("superseded"), "{out}");
        assert!(out.contains("corrupt"), "{out}");
        assert!(
            out.contains("v1/dev/_Z1kv-00.toml: not a valid entry: TOML parse error at line 2"),
            "{out}"
        );
        assert!(out.contains("prune --invalid"), "{out}");
        assert!(
            out.contains("4 file(s): 3 valid entries (1 superseded), 1 other"),
            "{out}"
        );
        assert!(out.contains("2026-02-03"), "{out}");

        let empty = ProfileDb::open(_dir.path().join("none")).unwrap();
        let out = exec(&empty, &["list"]).unwrap();
        assert!(out.contains("does not exist yet"), "{out}");
    }

    #[test]
    fn show_names_the_programs_own_blocks() {
        let dir = tempfile::tempdir().unwrap();
        let db = ProfileDb::open(dir.path().join("db")).unwrap();
        let mut e = entry(
            "saxpy",
            "_Z5saxpyifPKfPf",
            "new",
            "NVIDIA H200",
            "2026-02-03T00:00:00Z",
        );
        for (n, b) in [(1024, 128), (4096, 256)] {
            crate::record::add_program_block(
                &mut e.program,
                crate::record::ProgramBlock {
                    sizes: vec![n],
                    block: [b, 1, 1],
                },
            );
        }
        db.put(&e).unwrap();
        let out = exec(&db, &["show", "saxpy"]).unwrap();
        assert!(
            out.contains("  program   128x1x1 at 1024  256x1x1 at 4096\n"),
            "{out}"
        );
    }

    #[test]
    fn show_by_kernel_device_and_file() {
        let (_dir, db) = db_with_entries();
        let out = exec(&db, &["show", "saxpy", "--device", "a100"]).unwrap();
        // Columns are padded: compare with runs of spaces squeezed.
        let squeezed: String = out
            .lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" ") + "\n")
            .collect();
        assert!(out.contains("kernel      saxpy (_Z5saxpyifPKfPf)"), "{out}");
        assert!(
            out.contains("device      NVIDIA A100 80GB PCIe (cc 9.0, 132 SMs"),
            "{out}"
        );
        assert!(!out.contains("NVIDIA H200"), "{out}");
        assert!(out.contains("2 size(s) × 3 shape(s)"), "{out}");
        assert!(
            squeezed.contains(
                "1024 2048x1x1 1x1x1 failed - - - - - - - - invalid configuration argument"
            ),
            "{out}"
        );
        // 4096 elements at 128 threads is the fastest at that size: 4096e-6 ms.
        assert!(
            squeezed.contains("4096 128x1x1 32x1x1 0.004096 * 5.12k 4.00 4.00 32.8 kB 16.4 kB"),
            "{out}"
        );
        assert!(
            squeezed.contains("4096 32x1x1 128x1x1 0.006144 5.12k"),
            "{out}"
        );
        assert!(!out.contains("time_runs_ms"), "{out}");

        // Every entry of the kernel, the superseded one marked; --samples adds everything.
        let out = exec(&db, &["show", "_Z5saxpy*", "--samples"]).unwrap();
        assert_eq!(out.matches("kernel      saxpy").count(), 3, "{out}");
        assert!(out.contains("status      superseded by"), "{out}");
        assert!(out.contains("time_runs_ms"), "{out}");
        assert!(
            out.contains("error: invalid configuration argument"),
            "{out}"
        );

        // No line of the program's blocks in an entry without them.
        assert!(!out.contains("  program "), "{out}");

        let file = db.list().unwrap()[0].path.clone();
        let out = exec(&db, &["show", file.to_str().unwrap()]).unwrap();
        assert!(
            out.contains(&format!("file        {}", file.display())),
            "{out}"
        );

        let err = exec(&db, &["show", "gemm"]).unwrap_err().to_string();
        assert!(err.contains("no valid entry for kernel `gemm`"), "{err}");
        assert!(err.contains("klaraptor profile list"), "{err}");
        let err = exec(&db, &["show", "saxpy", "--device", "V100"])
            .unwrap_err()
            .to_string();
        assert!(err.contains("on a device matching `V100`"), "{err}");
    }

    #[test]
    fn prune_dry_run_then_for_real() {
        let (_dir, db) = db_with_entries();
        let err = exec(&db, &["prune"]).unwrap_err().to_string();
        assert!(err.contains("--invalid"), "{err}");
        let out = exec(&db, &["prune", "--superseded", "--dry-run"]).unwrap();
        assert!(out.contains("would remove 1 file(s):"), "{out}");
        assert!(out.contains("dry run"), "{out}");
        assert_eq!(db.list().unwrap().len(), 3);
        let out = exec(&db, &["prune", "--superseded"]).unwrap();
        assert!(out.contains("removed 1 file(s):"), "{out}");
        assert!(out.contains("2026-01-02"), "{out}");
        let out = exec(&db, &["prune", "--device", "H200", "--kernel", "saxpy"]).unwrap();
        assert!(
            out.contains("removed 1 file(s):") && out.contains("NVIDIA H200"),
            "{out}"
        );
        let out = exec(&db, &["prune", "--older-than", "2026-01-01"]).unwrap();
        assert!(out.contains("nothing to remove"), "{out}");
        assert_eq!(db.list().unwrap().len(), 1);
    }

    #[test]
    fn formatting_helpers() {
        assert_eq!(shorten("_Z5saxpyifPKfPf", 24), "_Z5saxpyifPKfPf");
        let s = shorten(&"a".repeat(10).replace('a', "ab"), 7);
        assert_eq!(s.chars().count(), 7);
        assert!(s.contains('…'));
        assert_eq!(time_str(2.45), "2.450");
        assert_eq!(time_str(34.2), "34.20");
        assert_eq!(time_str(0.01234), "0.01234");
        assert_eq!(si(999.0, ""), "999");
        assert_eq!(si(1234.0, ""), "1.23k");
        assert_eq!(si(33_554_432.0, "B"), "33.6 MB");
        assert_eq!(ratio(8, 2), "4.00");
        assert_eq!(ratio(8, 0), "-");
    }
}
