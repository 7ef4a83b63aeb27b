//! Reading an occupancy sweep CSV (bench/gpu/occupancy/sweep.cu) and replaying it through
//! klaraptor's occupancy. Shared by `tests/occupancy_replay.rs` and the
//! `occupancy_replay` example (which runs on the GPU machine right after the sweep).

use std::collections::BTreeMap;

use klaraptor_model::occupancy::{occupancy_with_carveout, Carveout};
use klaraptor_model::Device;

/// One row: a kernel's attributes, the query and the API's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    pub line: usize,
    pub kernel: String,
    pub num_regs: u32,
    pub static_smem: u32,
    pub max_dyn_smem: u32,
    pub carveout: i32,
    pub block_size: u32,
    pub dyn_smem: u64,
    /// The `cudaError_t` of the call; a refused query counts as 0 blocks.
    pub rc: i32,
    pub blocks: u32,
}

/// A parsed sweep: the comment header, the device attributes, the rows.
pub struct Sweep {
    pub header: Vec<String>,
    pub attrs: BTreeMap<String, i64>,
    pub rows: Vec<Row>,
}

pub const COLUMNS: &str =
    "kernel,num_regs,static_smem,max_dyn_smem,carveout,block_size,dyn_smem,rc,blocks";

pub fn parse(text: &str, origin: &str) -> Result<Sweep, String> {
    let mut header = Vec::new();
    let mut attrs = BTreeMap::new();
    let mut rows = Vec::new();
    let mut seen_columns = false;
    for (i, line) in text.lines().enumerate() {
        let line_no = i + 1;
        let at = |what: String| format!("{origin}:{line_no}: {what}");
        if let Some(comment) = line.strip_prefix('#') {
            let comment = comment.trim();
            if let Some(rest) = comment.strip_prefix("attr ") {
                let mut it = rest.split_whitespace();
                let (name, value) = (it.next(), it.next().and_then(|v| v.parse::<i64>().ok()));
                match (name, value) {
                    (Some(n), Some(v)) => {
                        attrs.insert(n.to_string(), v);
                    }
                    _ => return Err(at(format!("expected `# attr NAME VALUE`, found `{line}`"))),
                }
            } else {
                header.push(comment.to_string());
            }
            continue;
        }
        if line.trim().is_empty() {
            continue;
        }
        if !seen_columns {
            if line.trim() != COLUMNS {
                return Err(at(format!(
                    "expected the column line `{COLUMNS}`, found `{line}`"
                )));
            }
            seen_columns = true;
            continue;
        }
        let f: Vec<&str> = line.split(',').collect();
        if f.len() != 9 {
            return Err(at(format!(
                "expected 9 fields, found {}: `{line}`",
                f.len()
            )));
        }
        let num = |k: usize| -> Result<i64, String> {
            f[k].trim()
                .parse::<i64>()
                .map_err(|_| at(format!("field {} `{}` is not an integer", k + 1, f[k])))
        };
        let u = |k: usize| -> Result<u32, String> {
            u32::try_from(num(k)?).map_err(|_| at(format!("field {} out of range", k + 1)))
        };
        rows.push(Row {
            line: line_no,
            kernel: f[0].to_string(),
            num_regs: u(1)?,
            static_smem: u(2)?,
            max_dyn_smem: u(3)?,
            carveout: num(4)? as i32,
            block_size: u(5)?,
            dyn_smem: u64::try_from(num(6)?).map_err(|_| at("negative dyn_smem".into()))?,
            rc: num(7)? as i32,
            blocks: u(8)?,
        });
    }
    if !seen_columns {
        return Err(format!("{origin}: no column line `{COLUMNS}`"));
    }
    Ok(Sweep {
        header,
        attrs,
        rows,
    })
}

/// The API's answer, with a refused query as 0 blocks.
pub fn expected(row: &Row) -> u32 {
    if row.rc != 0 {
        0
    } else {
        row.blocks
    }
}

/// klaraptor's answer for a row.
pub fn ours(dev: &Device, row: &Row) -> u32 {
    let smem = u64::from(row.static_smem) + row.dyn_smem;
    let smem = u32::try_from(smem).unwrap_or(u32::MAX);
    let carveout = if row.carveout < 0 {
        Carveout::Default
    } else {
        Carveout::Percent(row.carveout as u32)
    };
    occupancy_with_carveout(dev, row.block_size, row.num_regs, smem, carveout).blocks_per_sm
}

/// The rows where klaraptor and the API disagree, with klaraptor's answer.
pub fn mismatches<'a>(dev: &Device, sweep: &'a Sweep) -> Vec<(&'a Row, u32)> {
    sweep
        .rows
        .iter()
        .map(|r| (r, ours(dev, r)))
        .filter(|(r, o)| *o != expected(r))
        .collect()
}

pub fn describe(row: &Row, ours: u32) -> String {
    format!(
        "line {}: {} ({} regs, {} B static, max dynamic {}), carveout {}, block {}, dynamic {} B: \
         API {} (rc {}), klaraptor {}",
        row.line,
        row.kernel,
        row.num_regs,
        row.static_smem,
        row.max_dyn_smem,
        row.carveout,
        row.block_size,
        row.dyn_smem,
        row.blocks,
        row.rc,
        ours
    )
}
