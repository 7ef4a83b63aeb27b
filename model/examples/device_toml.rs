//! Writes a klaraptor device description (TOML) on stdout.
//!
//! ```text
//! cargo run -p klaraptor-model --example device_toml -- QUERY.toml [CALIBRATION.toml]
//! cargo run -p klaraptor-model --example device_toml -- --arch 9.0
//! ```
//!
//! QUERY.toml is what `bench/gpu/occupancy/device_query` (or the calibration tool) prints:
//! a `[device]` table with `name` and `uuid` and an `[attributes]` table of
//! `cudaDeviceAttr` names (without the prefix) and values. A second file's `[calibration]`
//! table (the calibration tool's) replaces the calibration figures it has. `--arch`
//! prints the architecture table's description instead.

use std::collections::BTreeMap;
use std::process::ExitCode;

use klaraptor_model::{Device, Measured};

fn table<'a>(doc: &'a toml::Table, key: &str, path: &str) -> Result<&'a toml::Table, String> {
    doc.get(key)
        .and_then(|v| v.as_table())
        .ok_or_else(|| format!("{path}: no [{key}] table"))
}

fn read(path: &str) -> Result<toml::Table, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
    text.parse::<toml::Table>()
        .map_err(|e| format!("{path}: not TOML: {e}"))
}

fn from_query(path: &str, calibration: Option<&str>) -> Result<Device, String> {
    let doc = read(path)?;
    let device = table(&doc, "device", path)?;
    let mut attrs = BTreeMap::new();
    for (k, v) in table(&doc, "attributes", path)? {
        let value = v
            .as_integer()
            .ok_or_else(|| format!("{path}: [attributes] {k} is not an integer"))?;
        attrs.insert(k.clone(), value);
    }
    let text = |k: &str| device.get(k).and_then(|v| v.as_str()).unwrap_or("");
    let mut dev = Device::from_attributes(&attrs)
        .map_err(|e| format!("{path}: {e}"))?
        .with_identity(text("name"), text("uuid"));
    dev.note = format!(
        "driver attributes of {} (driver {}, runtime {}, queried {}) over the sm_{}{} table",
        text("name"),
        text("driver_version"),
        text("runtime_version"),
        text("date"),
        dev.compute_capability.major,
        dev.compute_capability.minor
    );
    if let Some(cal) = calibration {
        let doc = read(cal)?;
        let measured: Measured = table(&doc, "calibration", cal)?
            .clone()
            .try_into()
            .map_err(|e| format!("{cal}: [calibration]: {e}"))?;
        dev = dev
            .with_calibration(&measured)
            .map_err(|e| format!("{cal}: {e}"))?;
        dev.note.push_str(&format!("; calibration from {cal}"));
    } else {
        dev.note
            .push_str("; calibration figures are table estimates until calibrated");
    }
    Ok(dev)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.as_slice() {
        [flag, cc] if flag == "--arch" => {
            let parts: Vec<u32> = cc.split('.').filter_map(|p| p.parse().ok()).collect();
            match parts.as_slice() {
                [major, minor] => Device::for_arch(*major, *minor).map_err(|e| e.to_string()),
                _ => Err(format!("--arch {cc}: expected MAJOR.MINOR, e.g. 9.0")),
            }
        }
        [query] => from_query(query, None),
        [query, cal] => from_query(query, Some(cal)),
        _ => Err("usage: device_toml QUERY.toml [CALIBRATION.toml] | --arch MAJOR.MINOR".into()),
    };
    match result {
        Ok(dev) => {
            print!("{}", dev.to_toml_string());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("device_toml: {e}");
            ExitCode::FAILURE
        }
    }
}
