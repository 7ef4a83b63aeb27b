//! The emitted C compiles cleanly with strict flags, at -O0 and -O2, links several times
//! into one program, and its devices read back exactly.

mod common;

use common::compile;
use klaraptor_model::device::known_archs;
use klaraptor_model::{device_to_c, Device, C_MODEL};
use std::path::Path;
use std::process::Command;

/// A translation unit as a rational program would be: the model, a device, one function
/// that uses them. `tag` keeps the exported function names apart.
fn rational_program(tag: &str, dev: &Device) -> String {
    format!(
        "{C_MODEL}{C_MODEL}\n{}\n\
         double pick_{tag}(unsigned n);\n\
         double pick_{tag}(unsigned n)\n{{\n\
         \x20   kl_launch l = {{{{256, 1, 1}}, {{1, 1, 1}}, 32, 0}};\n\
         \x20   kl_metrics m = {{100.0, 2.0, 1.0, 0.0, 0.0, 4.0, 4.0, 384.0, 0.0, 1.0, 0.0}};\n\
         \x20   kl_prediction p;\n\
         \x20   l.grid[0] = (n + 255u) / 256u;\n\
         \x20   if (kl_predict(&dev_{tag}, &l, &m, &p) != 0) {{\n\
         \x20       return -1.0;\n\
         \x20   }}\n\
         \x20   return p.time_us;\n}}\n",
        device_to_c(dev, &format!("dev_{tag}"))
    )
}

const MAIN: &str = "#include <stdio.h>\n\
    double pick_a(unsigned n);\n\
    double pick_b(unsigned n);\n\
    int main(void)\n{\n\
    \x20   double a = pick_a(1u << 24), b = pick_b(1u << 24);\n\
    \x20   printf(\"%.6f %.6f\\n\", a, b);\n\
    \x20   return a > 0.0 && b > 0.0 ? 0 : 1;\n}\n";

fn run(exe: &Path) -> String {
    let out = Command::new(exe).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn two_rational_programs_link_into_one_binary_at_o0_and_o2() {
    let h100 = Device::for_arch(9, 0).unwrap();
    let a100 = Device::for_arch(8, 0).unwrap();
    let a = rational_program("a", &h100);
    let b = rational_program("b", &a100);
    for opt in ["-O0", "-O2"] {
        let dir = tempfile::tempdir().unwrap();
        let exe = compile(
            dir.path(),
            &[("a.c", &a), ("b.c", &b), ("main.c", MAIN)],
            &[opt],
            "prog",
        );
        let out = run(&exe);
        let times: Vec<f64> = out.split_whitespace().map(|t| t.parse().unwrap()).collect();
        // The same launch on the H100 and on the A100 (slower memory): 16M-element
        // streaming kernel of ~70 µs on the H100.
        let h = klaraptor_model::predict(
            &h100,
            &klaraptor_model::Launch {
                block: [256, 1, 1],
                grid: [65536, 1, 1],
                regs_per_thread: 32,
                smem_per_block: 0,
            },
            &klaraptor_model::WarpMetrics {
                inst: 100.0,
                gld_inst: 2.0,
                gst_inst: 1.0,
                gld_sectors_per_req: 4.0,
                gst_sectors_per_req: 4.0,
                dram_bytes: 384.0,
                mlp: 1.0,
                ..Default::default()
            },
        );
        assert!((times[0] - h.time_us).abs() < 1e-6, "{out} vs {h:?}");
        assert!(times[1] > times[0], "{out}");
    }
}

#[test]
fn devices_read_back_exactly() {
    let mut src = String::from(C_MODEL);
    src.push_str("#include <stdio.h>\n");
    let mut devs = Vec::new();
    for (i, cc) in known_archs().into_iter().enumerate() {
        let mut d = Device::for_arch(cc.major, cc.minor).unwrap();
        d.name = format!("{} \"quoted\" \\ é", d.name);
        d.calibration.mem_latency_cycles.value = 1.0 / 3.0 + i as f64;
        src.push_str(&device_to_c(&d, &format!("d{i}")));
        devs.push(d);
    }
    let shipped =
        Device::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("devices/nvidia-h200.toml"))
            .unwrap();
    src.push_str(&device_to_c(&shipped, &format!("d{}", devs.len())));
    devs.push(shipped);
    src.push_str("static void show(const kl_device *d)\n{\n    uint32_t i;\n");
    src.push_str(
        "    printf(\"%s|%s|%u.%u|%u|%.17g|%u|%u|%u|%u|%u|%u,%u,%u|%u,%u,%u|%u|%u|%u|%u|%u|%u|%u|%u|%u|%u|\",\n\
         \x20          d->name, d->uuid, (unsigned)d->cc_major, (unsigned)d->cc_minor,\n\
         \x20          (unsigned)d->sm_count, d->sm_clock_mhz, (unsigned)d->warp_size,\n\
         \x20          (unsigned)d->sub_partitions, (unsigned)d->max_threads_per_block,\n\
         \x20          (unsigned)d->max_threads_per_sm, (unsigned)d->max_blocks_per_sm,\n\
         \x20          (unsigned)d->max_block_dim[0], (unsigned)d->max_block_dim[1],\n\
         \x20          (unsigned)d->max_block_dim[2], (unsigned)d->max_grid_dim[0],\n\
         \x20          (unsigned)d->max_grid_dim[1], (unsigned)d->max_grid_dim[2],\n\
         \x20          (unsigned)d->regs_per_sm, (unsigned)d->regs_per_block,\n\
         \x20          (unsigned)d->max_regs_per_thread, (unsigned)d->reg_alloc_unit,\n\
         \x20          (unsigned)d->smem_per_sm, (unsigned)d->smem_per_block,\n\
         \x20          (unsigned)d->smem_per_block_optin, (unsigned)d->smem_reserved_per_block,\n\
         \x20          (unsigned)d->smem_alloc_unit, (unsigned)d->n_carveouts);\n\
         \x20   for (i = 0; i < d->n_carveouts; i++) {\n\
         \x20       printf(\"%u,\", (unsigned)d->carveout_bytes[i]);\n\
         \x20   }\n\
         \x20   printf(\"|%.17g|%.17g|%.17g|%.17g|%.17g|%.17g|%.17g\\n\",\n\
         \x20          d->mem_latency_cycles, d->l2_latency_cycles,\n\
         \x20          d->departure_delay_coalesced_cycles, d->departure_delay_uncoalesced_cycles,\n\
         \x20          d->dram_bandwidth_gbs, d->issue_cycles, d->shared_issue_cycles);\n}\n",
    );
    src.push_str("int main(void)\n{\n");
    for i in 0..devs.len() {
        src.push_str(&format!("    show(&d{i});\n"));
    }
    src.push_str("    return 0;\n}\n");
    let dir = tempfile::tempdir().unwrap();
    let exe = compile(dir.path(), &[("devs.c", &src)], &["-O2"], "devs");
    let out = run(&exe);
    for (d, line) in devs.iter().zip(out.lines()) {
        let r = &d.registers;
        let s = &d.shared_memory;
        let c = &d.calibration;
        let carve: String = s
            .carveout_kib
            .iter()
            .map(|k| format!("{},", k * 1024))
            .collect();
        let g = |v: f64| format!("{v:e}");
        let expected = format!(
            "{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{},{},{}|{},{},{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{carve}",
            d.name,
            d.uuid,
            d.compute_capability,
            d.sm_count,
            g(d.sm_clock_mhz),
            d.warp_size,
            d.sub_partitions,
            d.max_threads_per_block,
            d.max_threads_per_sm,
            d.max_blocks_per_sm,
            d.max_block_dim[0],
            d.max_block_dim[1],
            d.max_block_dim[2],
            d.max_grid_dim[0],
            d.max_grid_dim[1],
            d.max_grid_dim[2],
            r.per_sm,
            r.per_block,
            r.max_per_thread,
            r.alloc_unit,
            s.per_sm,
            s.per_block,
            s.per_block_optin,
            s.reserved_per_block,
            s.alloc_unit,
            s.carveout_kib.len()
        );
        // Doubles are compared as values parsed back from %.17g (exact round trip).
        let fields: Vec<&str> = line.split('|').collect();
        let rebuilt: Vec<String> = fields
            .iter()
            .enumerate()
            .map(|(i, f)| {
                if i == 4 {
                    g(f.parse().unwrap())
                } else {
                    f.to_string()
                }
            })
            .collect();
        assert_eq!(rebuilt[..23].join("|"), expected, "{line}");
        let floats: Vec<f64> = fields[23..].iter().map(|f| f.parse().unwrap()).collect();
        let want = [
            c.mem_latency_cycles.value,
            c.l2_latency_cycles.value,
            c.departure_delay_coalesced_cycles.value,
            c.departure_delay_uncoalesced_cycles.value,
            c.dram_bandwidth_gbs.value,
            c.issue_cycles.value,
            c.shared_issue_cycles.value,
        ];
        assert_eq!(floats, want, "{line}");
    }
}
