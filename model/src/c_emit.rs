//! The occupancy calculation and the MWP-CWP model in C99: the model itself, and what the
//! rational programs include.
//!
//! [`C_MODEL`] is one self-contained C99 source: the structures `kl_device`, `kl_launch`,
//! `kl_metrics`, `kl_occupancy_result`, `kl_prediction` and the functions
//! `kl_occupancy(...)` and `kl_predict(...)`. Every function is `static` and every name
//! starts with `kl_`/`KL_`, so each generated rational program includes its own copy and
//! any number of them link together; an include guard (`KL_MODEL_C_INCLUDED`) makes a
//! second inclusion in one translation unit harmless. It needs only `<stddef.h>`, `<stdint.h>` and
//! `<math.h>` (for `HUGE_VAL`; nothing from libm is called, no `-lm` needed), and compiles
//! cleanly with `cc -std=c99 -Wall -Wextra -Werror -pedantic` (tested).
//!
//! It is the crate's one implementation of both: `build.rs` compiles it into the crate,
//! whose [`crate::occupancy()`] and [`crate::predict`] call it, and the documentation of
//! [`mod@crate::occupancy`] and [`crate::mwp_cwp`] gives every equation. `tests/differential.rs`
//! checks 100 000 random cases of a C program built from [`C_MODEL`] and [`device_to_c`]
//! against the crate (the same code, so the same bits: it checks how a device is handed to
//! the C both ways).

//! [`device_to_c`] writes a device as `static const kl_device <ident> = {...};`.
//! Both public functions and the devices are marked `KL_UNUSED` (GCC/Clang's `unused`
//! attribute, nothing elsewhere), so a program that uses only part of them still compiles
//! with `-Werror`.

use crate::c_text::{comment_text, string_literal};
use crate::device::Device;

/// The C99 model (see the module doc for the interface).
pub const C_MODEL: &str = include_str!("../c/kl_model.c");

/// A C double literal that reads back as exactly `v` (Rust's shortest round-trip form).
fn c_double(v: f64) -> String {
    let s = format!("{v:?}");
    if s.contains(['.', 'e', 'E']) {
        s
    } else {
        format!("{s}.0")
    }
}

/// `KL_UNUSED static const kl_device <ident> = {...};` for `dev` (include [`C_MODEL`]
/// first: it defines `kl_device` and `KL_UNUSED`). `ident` must be a C identifier.
pub fn device_to_c(dev: &Device, ident: &str) -> String {
    assert!(
        crate::c_text::is_identifier(ident),
        "device_to_c: `{ident}` is not a C identifier"
    );
    let r = &dev.registers;
    let s = &dev.shared_memory;
    let c = &dev.calibration;
    let carveouts = s
        .carveout_kib
        .iter()
        .map(|k| (u64::from(*k) * 1024).to_string())
        .collect::<Vec<_>>()
        .join(", ");
    let fig = |name: &str, f: &crate::device::Figure| {
        format!(
            "    .{name} = {}, /* {} */\n",
            c_double(f.value),
            comment_text(&f.source.to_string())
        )
    };
    let mut o = String::new();
    o.push_str(&format!(
        "/* {} (compute capability {}); limits from {}. {} */\n",
        comment_text(&dev.name),
        dev.compute_capability,
        comment_text(&dev.limits_source.to_string()),
        comment_text(&dev.note)
    ));
    o.push_str(&format!("KL_UNUSED static const kl_device {ident} = {{\n"));
    o.push_str(&format!("    .name = {},\n", string_literal(&dev.name)));
    o.push_str(&format!("    .uuid = {},\n", string_literal(&dev.uuid)));
    o.push_str(&format!(
        "    .cc_major = {},\n    .cc_minor = {},\n",
        dev.compute_capability.major, dev.compute_capability.minor
    ));
    o.push_str(&format!("    .sm_count = {},\n", dev.sm_count));
    o.push_str(&format!(
        "    .sm_clock_mhz = {},\n",
        c_double(dev.sm_clock_mhz)
    ));
    o.push_str(&format!("    .warp_size = {},\n", dev.warp_size));
    o.push_str(&format!("    .sub_partitions = {},\n", dev.sub_partitions));
    o.push_str(&format!(
        "    .max_threads_per_block = {},\n    .max_threads_per_sm = {},\n    .max_blocks_per_sm = {},\n",
        dev.max_threads_per_block, dev.max_threads_per_sm, dev.max_blocks_per_sm
    ));
    let [bx, by, bz] = dev.max_block_dim;
    let [gx, gy, gz] = dev.max_grid_dim;
    o.push_str(&format!("    .max_block_dim = {{{bx}, {by}, {bz}}},\n"));
    o.push_str(&format!("    .max_grid_dim = {{{gx}u, {gy}u, {gz}u}},\n"));
    o.push_str(&format!(
        "    .regs_per_sm = {},\n    .regs_per_block = {},\n    .max_regs_per_thread = {},\n    .reg_alloc_unit = {},\n",
        r.per_sm, r.per_block, r.max_per_thread, r.alloc_unit
    ));
    o.push_str(&format!(
        "    .smem_per_sm = {},\n    .smem_per_block = {},\n    .smem_per_block_optin = {},\n",
        s.per_sm, s.per_block, s.per_block_optin
    ));
    o.push_str(&format!(
        "    .smem_reserved_per_block = {},\n    .smem_alloc_unit = {},\n",
        s.reserved_per_block, s.alloc_unit
    ));
    o.push_str(&format!("    .n_carveouts = {},\n", s.carveout_kib.len()));
    o.push_str(&format!("    .carveout_bytes = {{{carveouts}}},\n"));
    o.push_str(&format!(
        "    .l1_unified_per_sm = {},\n",
        dev.l1_unified_per_sm()
    ));
    o.push_str(&fig("mem_latency_cycles", &c.mem_latency_cycles));
    o.push_str(&fig("l2_latency_cycles", &c.l2_latency_cycles));
    o.push_str(&fig("l1_latency_cycles", &c.l1_latency_cycles));
    o.push_str(&fig(
        "departure_delay_coalesced_cycles",
        &c.departure_delay_coalesced_cycles,
    ));
    o.push_str(&fig(
        "departure_delay_coalesced_dram_cycles",
        &c.departure_delay_coalesced_dram_cycles,
    ));
    o.push_str(&fig(
        "departure_delay_uncoalesced_cycles",
        &c.departure_delay_uncoalesced_cycles,
    ));
    o.push_str(&fig("dram_bandwidth_gbs", &c.dram_bandwidth_gbs));
    o.push_str(&fig("issue_cycles", &c.issue_cycles));
    o.push_str(&fig("shared_issue_cycles", &c.shared_issue_cycles));
    o.push_str(&fig("block_dispatch_cycles", &c.block_dispatch_cycles));
    o.push_str(&fig("warp_drain_cycles", &c.warp_drain_cycles));
    o.push_str(&fig("dram_queue_exponent", &c.dram_queue_exponent));
    o.push_str("};\n");
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_are_valid_c() {
        assert_eq!(c_double(1980.0), "1980.0");
        assert_eq!(c_double(0.1), "0.1");
        assert_eq!(c_double(1e30), "1e30");
    }

    #[test]
    fn a_device_s_text_stays_in_its_comments_and_literals() {
        let plain = Device::for_arch(9, 0).unwrap();
        let mut nasty = plain.clone();
        nasty.name = "X */ int pwned = 1; /* \"; x \\".into();
        nasty.uuid = "GPU-\\\n*/ int pwned;".into();
        nasty.note = "*??/\n/ int pwned = 1;\n#error injected".into();
        assert_eq!(
            crate::c_text::code_tokens(&device_to_c(&nasty, "kl_dev")),
            crate::c_text::code_tokens(&device_to_c(&plain, "kl_dev"))
        );
    }

    #[test]
    #[should_panic(expected = "not a C identifier")]
    fn identifiers_are_checked() {
        device_to_c(&Device::for_arch(9, 0).unwrap(), "9lives");
    }
}
