//! Models for a GPU without its own profile: a profile of another GPU of the same
//! architecture, with the target GPU's description.
//!
//! The model's fitted metrics are counts per warp (instructions, requests, sectors, L1
//! hits), which the kernel's code and the architecture decide; what differs between two GPUs
//! of one architecture (SM count, clocks, latencies, bandwidth) comes from the device
//! description. So a kernel profiled on one GPU gets a rational program for every other
//! known GPU (a description shipped with klaraptor, or one this machine calibrated:
//! `klaraptor device calibrate`) of the same compute capability that has no profile of its
//! own: the program is fitted on the source GPU's samples and generated for the target's
//! description, and says so (`transferred_from` in its manifest, `klaraptor inspect`, the
//! runtime's log). Measured on PolyBench between an H100 and an H200:
//! bench/results/transfer-polybench-2026-11-26.md.

use klaraptor_model::Device;
use klaraptor_profiler::record::{DeviceId, Entry};

/// Every device description klaraptor knows here: those of this machine's calibration cache,
/// then those shipped with it, one per device name.
pub fn known_devices() -> Vec<Device> {
    let mut out: Vec<Device> = Vec::new();
    if let Ok(cache) = klaraptor_profiler::calibration::Cache::from_env() {
        for c in cache.list().unwrap_or_default() {
            if let Ok(r) = c.report {
                if let Ok(d) = klaraptor_profiler::devices::from_report(&r) {
                    out.push(d);
                }
            }
        }
    }
    for (file, text) in klaraptor_profiler::devices::SHIPPED {
        if let Ok(d) = Device::from_toml_str(text, file) {
            out.push(d);
        }
    }
    let mut seen = std::collections::BTreeSet::new();
    out.retain(|d| seen.insert(d.name.clone()));
    out
}

/// The compute capability of a description as a profile writes it ("9.0").
fn cc_of(d: &Device) -> String {
    format!(
        "{}.{}",
        d.compute_capability.major, d.compute_capability.minor
    )
}

/// For the entries of one kernel (one per profiled device), the entries to build transferred
/// programs from: for each device of `known` with no entry of its own, the entry of a device
/// of the same compute capability (the one with the most usable samples), relabelled with the
/// target's identity; with the source device's name.
pub fn transfers(entries: &[Entry], known: &[Device]) -> Vec<(Entry, String)> {
    let mut out = Vec::new();
    for d in known {
        if entries.iter().any(|e| e.device.name == d.name) {
            continue;
        }
        let cc = cc_of(d);
        let usable = |e: &Entry| e.samples.iter().filter(|s| s.error.is_none()).count();
        let Some(src) = entries
            .iter()
            .filter(|e| e.device.cc == cc && e.incomplete.is_none())
            .max_by_key(|e| usable(e))
        else {
            continue;
        };
        let mut e = src.clone();
        e.device = DeviceId {
            name: d.name.clone(),
            uuid: d.uuid.clone(),
            cc,
            sm_count: d.sm_count,
        };
        out.push((e, src.device.name.clone()));
    }
    out
}

/// Which programs of a link or compile are transferred: (mangled name, target device name)
/// to the source device's name.
pub type Transferred = std::collections::BTreeMap<(String, String), String>;

/// Adds to each kernel's entries the transferred ones ([`transfers`]) for every known device
/// ([`known_devices`]); returns which they are. `KLARAPTOR_TRANSFER=off` adds none.
pub fn expand(entries: &mut [(klaraptor_spec::link::LinkSpec, Vec<Entry>)]) -> Transferred {
    let mut out = Transferred::new();
    if std::env::var("KLARAPTOR_TRANSFER").is_ok_and(|v| v == "off" || v == "0") {
        return out;
    }
    if entries.iter().all(|(_, es)| es.is_empty()) {
        return out;
    }
    let known = known_devices();
    for (s, es) in entries.iter_mut() {
        for (e, from) in transfers(es, &known) {
            out.insert((s.mangled.clone(), e.device.name.clone()), from);
            es.push(e);
        }
    }
    out
}
