//! A [`KernelSpec`]: an annotation checked against the kernel libclang found in the source.
//! This is what the later stages (launch injection, profiling, code generation) work from.

use std::path::PathBuf;

use crate::annotations::{ArgRef, KernelAnnotation, ProfileRecipe, Style};
use crate::clang::{FunctionInfo, KernelParam, SourceInfo};
use crate::diag::Diagnostic;
use crate::expr::{BoolExpr, IntExpr};

/// A data parameter bound to a kernel argument.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct DataArg {
    /// The name formulas use.
    pub label: String,
    /// 0-based position in the kernel's parameter list.
    pub index: usize,
    /// The parameter's name and type in the source.
    pub param: String,
    pub ty: String,
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
            index,
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
        profile: ann.profile.clone(),
        annotated_at: ann.loc.clone(),
        style: ann.style,
        defined_in: f.file.clone(),
        defined_line: f.line,
    })
}

impl KernelSpec {
    /// A human-readable TOML rendering (what `--kl-keep` leaves and `klaraptor specs` prints).
    pub fn to_toml(&self) -> String {
        let q = |s: &str| format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""));
        let list = |v: Vec<String>| format!("[{}]", v.join(", "));
        let mut s = format!("[kernel.{}]\n", q(&self.name));
        s += &format!(
            "mangled = {}\n",
            list(self.mangled.iter().map(|m| q(m)).collect())
        );
        s += &format!(
            "defined_at = {}\n",
            q(&format!(
                "{}:{}",
                self.defined_in.display(),
                self.defined_line
            ))
        );
        s += &format!("annotated_at = {}\n", q(&self.annotated_at.to_string()));
        s += &format!(
            "data = {}\n",
            list(
                self.data
                    .iter()
                    .map(|d| q(&format!("{}={} ({} {})", d.label, d.index, d.ty, d.param)))
                    .collect()
            )
        );
        s += &format!("dim = {}\n", self.dim);
        s += &format!(
            "grid = {}\n",
            list(self.grid.iter().map(|g| q(&g.to_string())).collect())
        );
        s += &format!(
            "block = {}\n",
            list(self.constraints.iter().map(|c| q(&c.to_string())).collect())
        );
        if let Some(p) = &self.profile {
            let sizes = p
                .sizes
                .iter()
                .map(|r| list(r.iter().map(|v| v.to_string()).collect()))
                .collect();
            s += &format!(
                "profile = {{ run = {}, sizes = {} }}\n",
                q(&p.run),
                list(sizes)
            );
        }
        s
    }
}
