//! Dynamic shared memory that follows the block: what the IO-builder pass reads from the
//! real host IR of `fixtures/inject/shmem.cu` (nvcc's host translation, clang-19 at -O0 as
//! the driver gives it the pass), and how it rewrites the launches it reads.

mod inject_common;

use inject_common::*;
use inkwell::context::Context;
use inkwell::values::{BasicValue, BasicValueEnum, InstructionOpcode, InstructionValue};
use klaraptor_passes::inject::{InjectTarget, ShmemLaunch};

const BLOCK_SUM: &str = "_Z9block_sumPKfPfi";
const TILE_SUM: &str = "_Z8tile_sumPKfPfi";

fn targets(clause: bool) -> Vec<InjectTarget> {
    [BLOCK_SUM, TILE_SUM]
        .into_iter()
        .map(|k| InjectTarget {
            shmem_clause: clause,
            ..target(k, &[2])
        })
        .collect()
}

fn in_function<'a>(all: &'a [ShmemLaunch], function: &str) -> Vec<&'a ShmemLaunch> {
    all.iter().filter(|l| l.function == function).collect()
}

/// The runtime call before the push of `launch` and, for the `_shmem` forms, the value the
/// pass stored into the shared-memory slot it passes.
fn runtime_call<'c>(l: &Launch<'c>) -> (String, Option<BasicValueEnum<'c>>) {
    let mut i = l.push.get_previous_instruction();
    while let Some(x) = i {
        if let Some(name) = callee_name(x).filter(|n| n.starts_with("klaraptor_")) {
            if !name.ends_with("_shmem") {
                return (name, None);
            }
            // The slot is argument 7; the push's shared memory is loaded from it after the
            // call, and the program's own amount was stored to it before.
            let slot = op(x, 7);
            let load = op(l.push, 4)
                .as_instruction_value()
                .expect("the push's shared memory is an instruction");
            assert_eq!(load.get_opcode(), InstructionOpcode::Load);
            assert_eq!(
                op(load, 0),
                slot,
                "the push's shared memory is read from the slot"
            );
            let stored = before(x)
                .find(|s| s.get_opcode() == InstructionOpcode::Store && op(*s, 1) == slot)
                .map(|s| op(s, 0));
            return (name, stored);
        }
        i = x.get_previous_instruction();
    }
    panic!("no runtime call before the push in {}", l.function)
}

fn before(i: InstructionValue<'_>) -> impl Iterator<Item = InstructionValue<'_>> {
    std::iter::successors(i.get_previous_instruction(), |x| {
        x.get_previous_instruction()
    })
}

#[test]
fn the_pass_reads_how_the_shared_memory_follows_the_block() {
    let (report, out) = run("reads", "shmem.O0.ll", &targets(false)).unwrap();
    let follows = &report.shmem_follows;
    let formula = |f: &str| {
        let v = in_function(follows, f);
        assert_eq!(v.len(), 1, "one launch in {f}: {follows:?}");
        v[0].detail.clone()
    };
    // b * sizeof(float), with the block dim3(b): scaled.
    assert_eq!(formula("_Z7followsPKfPfii"), "(bx * 4)");
    // A local `int b = 128;` written once is the same value as the block's.
    assert_eq!(formula("_Z5localPKfPfi"), "(bx * 4)");
    // A padded tile through `dim3 block(bx, by)`, copied twice before the push.
    assert_eq!(formula("_Z9follows2dPKfPfiii"), "(((bx + 1) * by) * 4)");
    assert_eq!(report.shmem_formula(BLOCK_SUM), Some("(bx * 4)"));
    assert_eq!(
        report.shmem_formula(TILE_SUM),
        Some("(((bx + 1) * by) * 4)")
    );

    // pick(b) * sizeof(float): depends on the block, not readable: left as it was; and
    // 2 * b * sizeof(float), another formula than the kernel's first one.
    assert_eq!(
        report.shmem_unreadable.len(),
        2,
        "{:?}",
        report.shmem_unreadable
    );
    let u = &report.shmem_unreadable[0];
    assert_eq!(u.function, "_Z7unknownPKfPfii");
    assert_eq!(u.kernel, BLOCK_SUM);
    assert!(
        u.detail.contains("cannot write as a formula"),
        "{}",
        u.detail
    );
    assert!(u.at.is_none(), "no debug information at -O0 without -g");
    let t = &report.shmem_unreadable[1];
    assert_eq!(t.function, "_Z5twicePKfPfii");
    assert!(
        t.detail.contains("((2 * bx) * 4)") && t.detail.contains("another launch's as (bx * 4)"),
        "{}",
        t.detail
    );
    assert!(report.refused.is_empty(), "{:?}", report.refused);
    let instrumented: Vec<&str> = report
        .instrumented
        .iter()
        .map(|(_, f)| f.as_str())
        .collect();
    assert!(!instrumented.contains(&"_Z7unknownPKfPfii"));
    assert_eq!(instrumented.len(), 5, "{instrumented:?}");

    let context = Context::create();
    let m = parse(&context, &out);
    for l in launches(&m) {
        let (call, stored) =
            if ["_Z7unknownPKfPfii", "_Z5twicePKfPfii"].contains(&l.function.as_str()) {
                assert!(l.selects.is_empty(), "the unreadable launch is untouched");
                continue;
            } else {
                runtime_call(&l)
            };
        match l.function.as_str() {
            // A constant and an amount from the data only: the program's own amount.
            "_Z8constantPKfPfi" | "_Z9data_onlyPKfPfi" => {
                assert_eq!(call, "klaraptor_launch_begin", "{}", l.function)
            }
            f => {
                assert_eq!(call, "klaraptor_launch_begin_shmem", "{f}");
                let stored = stored.expect("the program's amount stored to the slot");
                let BasicValueEnum::IntValue(v) = stored else {
                    panic!("not an integer: {stored:?}")
                };
                assert_eq!(v.get_type().get_bit_width(), 64);
                // The program's own amount (`mul i64 …, 4`), as the runtime's fallback.
                let mul = v.as_instruction_value().expect("computed");
                assert_eq!(mul.get_opcode(), InstructionOpcode::Mul, "{f}");
            }
        }
    }
}

#[test]
fn a_kernel_with_the_clause_takes_the_runtime_amount_at_every_launch() {
    let (report, out) = run("clause", "shmem.O0.ll", &targets(true)).unwrap();
    // The clause decides: nothing is read, nothing is left alone.
    assert!(report.shmem_follows.is_empty());
    assert!(report.shmem_unreadable.is_empty());
    assert_eq!(report.instrumented.len(), 7);
    let context = Context::create();
    let m = parse(&context, &out);
    for l in launches(&m) {
        let (call, stored) = runtime_call(&l);
        assert_eq!(call, "klaraptor_launch_begin_shmem", "{}", l.function);
        let stored = stored.expect("the program's amount stored to the slot");
        if l.function == "_Z8constantPKfPfi" {
            let BasicValueEnum::IntValue(c) = stored else {
                panic!()
            };
            assert_eq!(c.get_zero_extended_constant(), Some(1024));
        }
    }
}

#[test]
fn the_warning_names_the_launch_where_the_ir_has_debug_information() {
    let (report, _) = run("debug", "shmem.O0g.ll", &targets(false)).unwrap();
    let u = &report.shmem_unreadable[0];
    let at = u.at.as_deref().expect("a location with -g");
    assert!(at.ends_with("shmem.cu:51"), "{at}");
    assert_eq!(report.shmem_formula(BLOCK_SUM), Some("(bx * 4)"));
}

#[test]
fn optimised_ir_is_never_read_as_fixed_where_the_amount_follows_the_block() {
    // The driver gives the pass -O0 IR; on -O2 IR the pass may read less, never wrongly.
    let (report, _) = run("optimised", "shmem.O2.ll", &targets(false)).unwrap();
    let instrumented: Vec<&str> = report
        .instrumented
        .iter()
        .map(|(_, f)| f.as_str())
        .collect();
    for f in [
        "_Z7followsPKfPfii",
        "_Z9follows2dPKfPfiii",
        "_Z7unknownPKfPfii",
    ] {
        let follows = in_function(&report.shmem_follows, f);
        let unreadable = in_function(&report.shmem_unreadable, f);
        assert!(
            !follows.is_empty() || !unreadable.is_empty(),
            "{f}: read as fixed ({instrumented:?})"
        );
    }
}

#[test]
fn clangs_own_cuda_compile_reads_the_same() {
    // --kl-backend=clang: clang-19 lowers the launches alike (dim3, copies, push).
    let (report, _) = run("clang", "shmem.clang.O0.ll", &targets(false)).unwrap();
    let formulas: Vec<(&str, &str)> = report
        .shmem_follows
        .iter()
        .map(|l| (l.function.as_str(), l.detail.as_str()))
        .collect();
    assert_eq!(
        formulas,
        [
            ("_Z7followsPKfPfii", "(bx * 4)"),
            ("_Z9follows2dPKfPfiii", "(((bx + 1) * by) * 4)"),
            ("_Z5localPKfPfi", "(bx * 4)"),
        ]
    );
    let unreadable: Vec<&str> = report
        .shmem_unreadable
        .iter()
        .map(|l| l.function.as_str())
        .collect();
    assert_eq!(unreadable, ["_Z7unknownPKfPfii", "_Z5twicePKfPfii"]);
}
