//! A [`KernelSpec`]: an annotation checked against the kernel libclang found in the source.
//! This is what the later stages (launch injection, profiling, code generation) work from.

use std::path::PathBuf;

use crate::annotations::{ArgRef, KernelAnnotation, ProfileRecipe, Style};
use crate::diag::Diagnostic;
use crate::expr::{BoolExpr, IntExpr};
use crate::source::{FunctionInfo, KernelParam, SourceInfo};

/// Where a data parameter's value comes from at each launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum DataSource {
    /// The kernel argument at this 0-based position in the parameter list.
    Argument(usize),
    /// The threads the launch runs along block axis `axis` (0 = x): `gridDim * blockDim` on
    /// that axis, computed from the launch's own grid and block (the one-line form,
    /// [`crate::annotations::launch_data`]).
    LaunchThreads(u8),
}

/// A data parameter bound to a kernel argument, or to the threads of the launch.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct DataArg {
    /// The name formulas use.
    pub label: String,
    pub source: DataSource,
    /// The parameter's name and type in the source; for the threads of the launch, the
    /// expression (`gridDim.x * blockDim.x`) and `launch`.
    pub param: String,
    pub ty: String,
}

impl DataArg {
    /// Where the value comes from, in words: `argument 3 (int n)`, or `gridDim.x * blockDim.x
    /// of the launch`.
    pub fn describe(&self) -> String {
        match self.source {
            DataSource::Argument(i) => format!("argument {i} ({} {})", self.ty, self.param),
            DataSource::LaunchThreads(_) => format!("{} of the launch", self.param),
        }
    }

    /// The 0-based argument position, for a data parameter that is a kernel argument.
    pub fn index(&self) -> Option<usize> {
        match self.source {
            DataSource::Argument(i) => Some(i),
            DataSource::LaunchThreads(_) => None,
        }
    }
}

/// `gridDim.x * blockDim.x` for axis 0, and so on.
pub fn launch_threads_expr(axis: u8) -> String {
    let a = ["x", "y", "z"][usize::from(axis.min(2))];
    format!("gridDim.{a} * blockDim.{a}")
}

/// Everything klaraptor knows about one annotated kernel of a translation unit.
#[derive(Debug, Clone, PartialEq)]
pub struct KernelSpec {
    /// The kernel's name as written in the source.
    pub name: String,
    /// Its mangled name(s): one for a plain kernel, one per instantiation for a template.
    pub mangled: Vec<String>,
    pub params: Vec<KernelParam>,
    pub data: Vec<DataArg>,
    pub dim: u8,
    pub grid: Vec<IntExpr>,
    pub constraints: Vec<BoolExpr>,
    /// `shmem(…)`: the dynamic shared memory a launch needs for a block shape, in bytes.
    pub shmem: Option<IntExpr>,
    pub profile: Option<ProfileRecipe>,
    /// The annotation (pragma or TOML entry) this came from.
    pub annotated_at: crate::diag::Location,
    pub style: Style,
    /// Where the kernel is defined.
    pub defined_in: PathBuf,
    pub defined_line: u32,
}

/// Checks `ann` against what libclang found: the kernel exists and is `__global__`, each
/// data argument exists and has an integer type.
pub fn resolve(ann: &KernelAnnotation, src: &SourceInfo) -> Result<KernelSpec, Diagnostic> {
    check_launchable(ann).map_err(|why| {
        Diagnostic::new(ann.loc.clone(), format!("kernel '{}': {why}", ann.kernel)).help(
            "fix the grid(…) and block(…) clauses; klaraptor tries every candidate block shape",
        )
    })?;
    let short = ann.kernel.rsplit("::").next().unwrap_or(&ann.kernel);
    let candidates: Vec<&FunctionInfo> = src
        .functions
        .iter()
        .filter(|f| {
            f.name == short
                && (!ann.kernel.contains("::")
                    || f.qualified_name.trim_start_matches("::")
                        == ann.kernel.trim_start_matches("::"))
        })
        .collect();
    let Some(f) = candidates
        .iter()
        .copied()
        .find(|f| f.is_global && f.is_definition)
        .or_else(|| candidates.iter().copied().find(|f| f.is_global))
    else {
        if let Some(f) = candidates.first() {
            return Err(Diagnostic::new(
                ann.loc.clone(),
                format!("'{}' (declared at {}:{}:{}) is not a __global__ kernel", ann.kernel, f.file.display(), f.line, f.col),
            )
            .help("annotate a function declared __global__; device and host functions are not launched with <<<…>>>"));
        }
        let kernels: Vec<&str> = src
            .functions
            .iter()
            .filter(|f| f.is_global)
            .map(|f| f.name.as_str())
            .collect();
        let help = if kernels.is_empty() {
            "check the kernel's name and that this pragma is in the file that defines it"
                .to_string()
        } else {
            format!(
                "the kernels in this translation unit are: {}",
                kernels.join(", ")
            )
        };
        return Err(Diagnostic::new(
            ann.loc.clone(),
            format!("no kernel named '{}' in this translation unit", ann.kernel),
        )
        .help(help));
    };
    let describe_params = || {
        f.params
            .iter()
            .enumerate()
            .map(|(i, p)| format!("{i}: {} {}", p.ty, p.name))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut data = Vec::new();
    for d in &ann.data {
        let index = match &d.arg {
            ArgRef::Launch(axis) => {
                data.push(DataArg {
                    label: d.label.clone(),
                    source: DataSource::LaunchThreads(*axis),
                    param: launch_threads_expr(*axis),
                    ty: "launch".into(),
                });
                continue;
            }
            ArgRef::Index(i) if *i < f.params.len() => *i,
            ArgRef::Index(i) => {
                return Err(Diagnostic::new(
                    d.loc.clone(),
                    format!(
                        "argument index {i} is out of range: kernel '{}' has {} parameter(s)",
                        ann.kernel,
                        f.params.len()
                    ),
                )
                .help(format!(
                    "indices are 0-based; the parameters are ({})",
                    describe_params()
                )))
            }
            ArgRef::Name(n) => match f.params.iter().position(|p| &p.name == n) {
                Some(i) => i,
                None => {
                    return Err(Diagnostic::new(
                        d.loc.clone(),
                        format!("kernel '{}' has no parameter named '{n}'", ann.kernel),
                    )
                    .help(format!("the parameters are ({})", describe_params())))
                }
            },
        };
        let p = &f.params[index];
        if !p.is_integer {
            return Err(Diagnostic::new(
                d.loc.clone(),
                format!("argument {index} ('{}', of type '{}') is not an integer, so it cannot be a data size", p.name, p.ty),
            )
            .help(format!("name an integer argument; the parameters are ({})", describe_params())));
        }
        data.push(DataArg {
            label: d.label.clone(),
            source: DataSource::Argument(index),
            param: p.name.clone(),
            ty: p.ty.clone(),
        });
    }
    Ok(KernelSpec {
        name: ann.kernel.clone(),
        mangled: f.mangled.clone(),
        params: f.params.clone(),
        data,
        dim: ann.dim,
        grid: ann.grid.clone(),
        constraints: ann.constraints.clone(),
        shmem: ann.shmem.clone(),
        profile: ann.profile.clone(),
        annotated_at: ann.loc.clone(),
        style: ann.style,
        defined_in: f.file.clone(),
        defined_line: f.line,
    })
}

impl KernelSpec {
    /// The spec as TOML (what `klaraptor specs` prints): a `[kernel."<name>"]` table, the
    /// expressions in the annotation language, through the same serialiser as the spec an
    /// object carries to the link ([`crate::link::LinkSpec`]).
    pub fn to_toml(&self) -> String {
        #[derive(serde::Serialize)]
        struct Profile<'a> {
            run: &'a str,
            sizes: &'a [Vec<i64>],
        }
        #[derive(serde::Serialize)]
        struct View<'a> {
            mangled: &'a [String],
            defined_at: String,
            annotated_at: String,
            data: Vec<String>,
            dim: u8,
            grid: Vec<String>,
            block: Vec<String>,
            #[serde(skip_serializing_if = "Option::is_none")]
            shmem: Option<String>,
            #[serde(skip_serializing_if = "Option::is_none")]
            profile: Option<Profile<'a>>,
        }
        let view = View {
            mangled: &self.mangled,
            defined_at: format!("{}:{}", self.defined_in.display(), self.defined_line),
            annotated_at: self.annotated_at.to_string(),
            data: self
                .data
                .iter()
                .map(|d| match d.source {
                    DataSource::Argument(i) => format!("{}={i} ({} {})", d.label, d.ty, d.param),
                    DataSource::LaunchThreads(_) => format!("{} = {} (launch)", d.label, d.param),
                })
                .collect(),
            dim: self.dim,
            grid: self.grid.iter().map(ToString::to_string).collect(),
            block: self.constraints.iter().map(ToString::to_string).collect(),
            shmem: self.shmem.as_ref().map(ToString::to_string),
            profile: self.profile.as_ref().map(|p| Profile {
                run: &p.run,
                sizes: &p.sizes,
            }),
        };
        let doc = std::collections::BTreeMap::from([(
            "kernel",
            std::collections::BTreeMap::from([(self.name.as_str(), view)]),
        )]);
        toml::to_string(&doc).unwrap_or_else(|e| format!("# cannot render {}: {e}\n", self.name))
    }
}

/// The block shapes a kernel of `dim` block dimensions may be launched with, before its
/// constraints and the device's limits: in 1-D 1, 2, 4, 8, 16 and every multiple of 32 up
/// to 1024 threads; in 2-D and 3-D every power of two per axis up to 1024 threads (z up to
/// 64). The performance model searches these, and the annotation check below tries them.
pub fn candidate_blocks(dim: u8) -> Vec<[u32; 3]> {
    let mut out = Vec::new();
    match dim {
        1 => {
            out.extend([1, 2, 4, 8, 16].map(|x| [x, 1, 1]));
            out.extend((1..=32).map(|k| [32 * k, 1, 1]));
        }
        2 => {
            for ey in 0..=10u32 {
                for ex in 0..=(10 - ey) {
                    out.push([1 << ex, 1 << ey, 1]);
                }
            }
        }
        _ => {
            for ez in 0..=6u32 {
                for ey in 0..=(10 - ez) {
                    for ex in 0..=(10 - ez - ey) {
                        out.push([1 << ex, 1 << ey, 1 << ez]);
                    }
                }
            }
        }
    }
    out
}

/// Whether an annotation leaves any launch to choose: at some data values (every data
/// parameter 1, 7, 64, 1000, 4096, 2^20, 2^30 or 2^40) some candidate block shape satisfies every
/// constraint and gives every grid formula a value of at least 1. When none does, why, for
/// the first cause found: a grid formula that fails everywhere (a division by zero, an
/// overflow), one that is below 1 everywhere, or constraints that refuse every shape.
pub fn check_launchable(ann: &KernelAnnotation) -> Result<(), String> {
    const VALUES: [i64; 8] = [1, 7, 64, 1000, 4096, 1 << 20, 1 << 30, 1 << 40];
    let blocks = candidate_blocks(ann.dim);
    let mut grid_failed: Vec<Option<String>> = vec![None; ann.grid.len()];
    let mut grid_ok = vec![false; ann.grid.len()];
    let mut some_allowed = false;
    for v in VALUES {
        for b in &blocks {
            let mut env: Vec<(&str, i64)> =
                ann.data.iter().map(|d| (d.label.as_str(), v)).collect();
            env.extend([
                ("bx", i64::from(b[0])),
                ("by", i64::from(b[1])),
                ("bz", i64::from(b[2])),
            ]);
            if !ann
                .constraints
                .iter()
                .all(|c| c.eval(env.as_slice()).unwrap_or(false))
            {
                continue;
            }
            some_allowed = true;
            let mut all = true;
            for (i, g) in ann.grid.iter().enumerate() {
                match g.eval(env.as_slice()) {
                    Ok(x) if x >= 1 => grid_ok[i] = true,
                    Ok(_) => all = false,
                    Err(e) => {
                        all = false;
                        grid_failed[i].get_or_insert_with(|| {
                            format!("{e} at bx={} by={} bz={}, data {v}", b[0], b[1], b[2])
                        });
                    }
                }
            }
            if all {
                return Ok(());
            }
        }
    }
    if !some_allowed {
        return Err(
            "no block shape satisfies its block(…) constraints at any data size tried \
             (1 to 2^40): the kernel could never be launched by klaraptor"
                .into(),
        );
    }
    for (i, g) in ann.grid.iter().enumerate() {
        if !grid_ok[i] {
            return Err(match &grid_failed[i] {
                Some(e) => format!(
                    "grid formula {} ({g}) cannot be evaluated at any block shape and data \
                     size tried: {e}",
                    i + 1
                ),
                None => format!(
                    "grid formula {} ({g}) is below 1 at every block shape and data size tried",
                    i + 1
                ),
            });
        }
    }
    Err(
        "the grid formulas have no block shape and data size tried at which all of them are \
         at least 1"
            .into(),
    )
}
