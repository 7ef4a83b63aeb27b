//! clang's host stubs launching through `__cudaLaunchKernel` (the clang backend's
//! `InjectOptions::clang_stubs_via_launch_entry`), on clang-19's own CUDA compile of
//! `fixtures/inject/templates.cu` and `multi.cu`: the stubs of annotated kernels call the
//! module's `klaraptor.launch` helper with their own handle slot; the others are as clang
//! made them; the helper looks the handle up once and falls back to `cudaLaunchKernel`.

mod inject_common;

use inject_common::*;
use inkwell::context::Context;
use inkwell::module::{Linkage, Module};
use inkwell::values::{BasicValueEnum, FunctionValue, InstructionOpcode, InstructionValue};
use klaraptor_passes::inject::InjectOptions;

const AXPY_F: &str = "_Z4axpyIfEvT_PKS0_PS0_i";
const TILE4: &str = "_Z4tileILi4EEvPfl";
const VIA_ENTRY: InjectOptions = InjectOptions {
    clang_stubs_via_launch_entry: true,
};

fn calls<'c>(f: FunctionValue<'c>, callee: &str) -> Vec<InstructionValue<'c>> {
    instructions(f)
        .into_iter()
        .filter(|&i| callee_name(i).as_deref() == Some(callee))
        .collect()
}

fn global_name(v: BasicValueEnum<'_>) -> String {
    match v {
        BasicValueEnum::PointerValue(p) => p.get_name().to_string_lossy().into_owned(),
        other => panic!("not a pointer: {other:?}"),
    }
}

/// The stub `name` launches through the helper with its own slot; returns the slot's name.
fn check_rerouted(m: &Module<'_>, name: &str) -> String {
    let stub = m
        .get_function(name)
        .unwrap_or_else(|| panic!("stub {name}"));
    assert!(calls(stub, "cudaLaunchKernel").is_empty(), "{name}");
    let via = calls(stub, "klaraptor.launch");
    assert_eq!(via.len(), 1, "{name}");
    let call = via[0];
    assert_eq!(
        call.get_num_operands(),
        10,
        "slot, 8 launch arguments, callee"
    );
    assert_eq!(global_name(op(call, 1)), name, "the stub passes itself");
    let slot = global_name(op(call, 0));
    let g = m.get_global(&slot).unwrap();
    assert_eq!(g.get_linkage(), Linkage::Private);
    assert!(!g.is_constant());
    // Its result replaces cudaLaunchKernel's (clang ignores it, but it is an i32).
    assert_eq!(
        call.get_type().print_to_string().to_string(),
        "i32",
        "{name}"
    );
    slot
}

fn check_helper(m: &Module<'_>) {
    let h = m.get_function("klaraptor.launch").expect("the helper");
    assert_eq!(h.get_linkage(), Linkage::Internal);
    assert_eq!(h.count_params(), 9);
    assert_eq!(calls(h, "__cudaGetKernel").len(), 1);
    assert_eq!(calls(h, "__cudaLaunchKernel").len(), 1);
    assert_eq!(calls(h, "cudaLaunchKernel").len(), 1, "the fallback");
    // The slot is read and written atomically (several host threads may launch).
    let slot = h.get_nth_param(0).unwrap();
    let atomics: Vec<_> = instructions(h)
        .into_iter()
        .filter(|i| {
            matches!(
                i.get_opcode(),
                InstructionOpcode::Load | InstructionOpcode::Store
            ) && i
                .get_atomic_ordering()
                .is_ok_and(|o| o == inkwell::AtomicOrdering::Monotonic)
        })
        .collect();
    assert_eq!(atomics.len(), 2);
    let load = atomics
        .iter()
        .find(|i| i.get_opcode() == InstructionOpcode::Load)
        .unwrap();
    assert_eq!(op(*load, 0), slot);
    // The launch entry gets the handle and the eight launch arguments' seven last ones.
    let launch = calls(h, "__cudaLaunchKernel")[0];
    for n in 1..8 {
        assert_eq!(op(launch, n), h.get_nth_param(n + 1).unwrap());
    }
    let fallback = calls(h, "cudaLaunchKernel")[0];
    for n in 0..8 {
        assert_eq!(op(fallback, n), h.get_nth_param(n + 1).unwrap());
    }
}

fn check_templates(opt: &str) {
    let name = format!("templates.clang.{opt}.ll");
    let targets = [target(AXPY_F, &[3]), target(TILE4, &[1])];
    let (report, out) = run_with(
        &format!("stubs_templates_{opt}"),
        &name,
        &targets,
        VIA_ENTRY,
    )
    .unwrap();
    assert_eq!(report.instrumented.len(), 2);
    let stub_f = "_Z19__device_stub__axpyIfEvT_PKS0_PS0_i";
    let stub_t = "_Z19__device_stub__tileILi4EEvPfl";
    assert_eq!(
        report.rerouted,
        [
            (AXPY_F.to_string(), stub_f.to_string()),
            (TILE4.to_string(), stub_t.to_string())
        ]
    );
    let ctx = Context::create();
    let m = parse(&ctx, &out);
    let a = check_rerouted(&m, stub_f);
    let b = check_rerouted(&m, stub_t);
    assert_ne!(a, b, "one handle slot per stub");
    check_helper(&m);
    // axpy<double> is not annotated: its stub is as clang made it.
    let d = m
        .get_function("_Z19__device_stub__axpyIdEvT_PKS0_PS0_i")
        .unwrap();
    assert_eq!(calls(d, "cudaLaunchKernel").len(), 1);
    assert!(calls(d, "klaraptor.launch").is_empty());
}

#[test]
fn templates_o0() {
    check_templates("O0");
}

#[test]
fn templates_o2() {
    check_templates("O2");
}

/// Registration through clang's unnamed device-name strings (`@0`, `@1`, …) maps every
/// stub, the namespaced and the `extern "C"` kernels' included.
#[test]
fn multi_all_annotated_stubs() {
    let targets = [
        target("_Z5relaxPfi", &[1]),
        target("_ZN3lin6detail5scaleEPffm", &[2]),
        target("plain_c", &[1]),
    ];
    let (report, out) = run_with("stubs_multi", "multi.clang.O0.ll", &targets, VIA_ENTRY).unwrap();
    let mut kernels: Vec<&str> = report.rerouted.iter().map(|(k, _)| k.as_str()).collect();
    kernels.sort();
    assert_eq!(
        kernels,
        ["_Z5relaxPfi", "_ZN3lin6detail5scaleEPffm", "plain_c"]
    );
    let ctx = Context::create();
    let m = parse(&ctx, &out);
    for (_, stub) in &report.rerouted {
        check_rerouted(&m, stub);
    }
    check_helper(&m);
}

/// Without the option nothing but the selects changes; nvcc's stubs (which launch through
/// `__cudaLaunchKernel` already) are never touched.
#[test]
fn off_by_default_and_nothing_to_do_for_nvcc() {
    let targets = [target(AXPY_F, &[3])];
    let (report, out) = run("stubs_off", "templates.clang.O0.ll", &targets).unwrap();
    assert!(report.rerouted.is_empty());
    let ctx = Context::create();
    let m = parse(&ctx, &out);
    assert!(m.get_function("klaraptor.launch").is_none());
    let (report, out) = run_with("stubs_nvcc", "templates.O0.ll", &targets, VIA_ENTRY).unwrap();
    assert_eq!(report.instrumented.len(), 1);
    assert!(report.rerouted.is_empty());
    let m = parse(&ctx, &out);
    assert!(m.get_function("klaraptor.launch").is_none());
}
