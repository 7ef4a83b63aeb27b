//! Device descriptions for code generation: the description of the device a profile was
//! measured on. A report of this machine's calibration cache (`klaraptor device calibrate`)
//! wins, then a description shipped with klaraptor (model/devices/, made on that GPU from
//! the driver's attributes and a calibration run), else the caller falls back to the
//! architecture's table.

use crate::calibration::{Cache, DeviceReport};
use anyhow::{Context, Result};
use klaraptor_model::{Device, Measured};

/// Descriptions shipped with klaraptor: (file, TOML).
pub const SHIPPED: &[(&str, &str)] = &[
    (
        "model/devices/nvidia-h200.toml",
        include_str!("../../model/devices/nvidia-h200.toml"),
    ),
    (
        "model/devices/nvidia-h100-80gb-hbm3.toml",
        include_str!("../../model/devices/nvidia-h100-80gb-hbm3.toml"),
    ),
];

/// A device description from a calibration report.
pub fn from_report(r: &DeviceReport) -> Result<Device> {
    let measured: Measured = toml::from_str(
        &toml::to_string(&r.calibration).context("re-reading the calibration figures")?,
    )
    .context("the calibration figures")?;
    Ok(Device::from_attributes(&r.attributes)?
        .with_identity(&r.device.name, &r.device.uuid)
        .with_calibration(&measured)?)
}

/// The description of the device named `name` (UUID `uuid`), if one is known.
pub fn find(name: &str, uuid: &str) -> Result<Option<Device>> {
    if let Ok(cache) = Cache::from_env() {
        for key in [uuid, name] {
            if key.is_empty() {
                continue;
            }
            if let Ok(Some(r)) = cache.load(key) {
                if r.device.name == name {
                    return from_report(&r).map(Some);
                }
            }
        }
    }
    for (file, text) in SHIPPED {
        let d = Device::from_toml_str(text, file)?;
        if d.name == name {
            return Ok(Some(d));
        }
    }
    Ok(None)
}
