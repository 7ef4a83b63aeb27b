//! Which block shapes a kernel's annotation admits: its block constraints parsed and
//! evaluated for a shape alone (before the data is known) or at given data values. The
//! profiler's plans and the rational programs' candidate sets both ask here.

use crate::expr::{self, BoolExpr, IntExpr};

/// A kernel's launch in the annotation language, parsed: its grid formulas, block
/// constraints and shared-memory formula, over its data labels and the block variables.
/// Every stage that evaluates them (the profiler's plans, the rational programs, their C)
/// parses the spec's text here, once per spec or program.
#[derive(Debug, Clone, PartialEq)]
pub struct LaunchShape {
    pub grid: Vec<IntExpr>,
    pub constraints: Vec<BoolExpr>,
    pub shmem: Option<IntExpr>,
}

impl LaunchShape {
    /// Parses the texts of a kernel whose data labels are `data`; the error names the
    /// clause that does not parse.
    pub fn parse(
        data: &[String],
        grid: &[String],
        block: &[String],
        shmem: Option<&str>,
    ) -> Result<LaunchShape, String> {
        let mut labels: Vec<&str> = data.iter().map(String::as_str).collect();
        labels.extend(expr::BLOCK_VARS);
        let grid = grid
            .iter()
            .map(|g| expr::parse_int(g, &labels).map_err(|e| format!("grid {g:?}: {e}")))
            .collect::<Result<_, _>>()?;
        let constraints = parse_constraints(block, &labels)?;
        let shmem = shmem
            .map(|f| expr::parse_int(f, &labels).map_err(|e| format!("shmem({f}): {e}")))
            .transpose()?;
        Ok(LaunchShape {
            grid,
            constraints,
            shmem,
        })
    }
}

/// Parses the block constraints of a kernel; `labels` are the names they may use (the data
/// labels and [`expr::BLOCK_VARS`]).
pub fn parse_constraints(block: &[String], labels: &[&str]) -> Result<Vec<BoolExpr>, String> {
    block
        .iter()
        .map(|b| expr::parse_bool(b, labels).map_err(|e| format!("block {b:?}: {e}")))
        .collect()
}

/// Whether no constraint rules block `b` out for every data size: a constraint that names a
/// data label cannot be evaluated without the data (nor can one whose evaluation fails) and
/// is left for the launch.
pub fn allowed_for_some_data(constraints: &[BoolExpr], b: [u32; 3]) -> bool {
    constraints
        .iter()
        .all(|c| c.eval(&BlockEnv(b)).unwrap_or(true))
}

/// Whether every constraint holds for block `b` at the data values `data` (of the labels
/// `labels`); one that cannot be evaluated there (division by zero, overflow, a missing
/// value) does not.
pub fn allowed_at(constraints: &[BoolExpr], labels: &[String], data: &[i64], b: [u32; 3]) -> bool {
    let env = FullEnv {
        labels,
        data,
        block: b,
    };
    constraints.iter().all(|c| c.eval(&env).unwrap_or(false))
}

/// The block variables (`bx`, `by`, `bz`) of one shape, for evaluating expressions.
pub struct BlockEnv(pub [u32; 3]);

impl expr::Env for BlockEnv {
    fn get(&self, name: &str) -> Option<i64> {
        expr::BLOCK_VARS
            .iter()
            .position(|b| *b == name)
            .map(|i| i64::from(self.0[i]))
    }
}

/// A kernel's data labels bound to values, and one block shape.
pub struct FullEnv<'a> {
    pub labels: &'a [String],
    pub data: &'a [i64],
    pub block: [u32; 3],
}

impl expr::Env for FullEnv<'_> {
    fn get(&self, name: &str) -> Option<i64> {
        if let Some(i) = self.labels.iter().position(|l| l == name) {
            return self.data.get(i).copied();
        }
        BlockEnv(self.block).get(name)
    }
}
