//! The inject pass on real host IR: nvcc 13's host translation of the `.cu` programs in
//! `tests/fixtures/inject/`, compiled by clang-19 at -O0 and -O2 (and with -g), and for
//! some of them clang-19's own CUDA compile (`<name>.clang.O0.ll`, `<name>.clang.O2.ll`: the
//! IR `klaraptor-cc --kl-backend=clang` hands the pass), see `regen.sh` there.

mod inject_common;

use inject_common::*;
use inkwell::context::Context;
use inkwell::values::{BasicValueEnum, InstructionOpcode};
use klaraptor_passes::inject::InjectTarget;

const AXPY_F: &str = "_Z4axpyIfEvT_PKS0_PS0_i";
const TILE4: &str = "_Z4tileILi4EEvPfl";
const SCALE: &str = "_Z5scalePfii";
const NARROW: &str = "_Z6narrowPftsm";
const STENCIL: &str = "_Z7stencilPKfPfii";
const RELAX: &str = "_Z5relaxPfi";
const UNUSED: &str = "_Z6unusedPfi";
const LIN_SCALE: &str = "_ZN3lin6detail5scaleEPffm";
const PLAIN_C: &str = "plain_c";

/// Checks that every data value the select receives is the stub's argument, or
/// re-computes it before the push, and was widened as expected.
fn check_data(l: &Launch<'_>, args: &[(u32, &str)]) {
    let s = l.select();
    assert_eq!(s.data.len(), args.len());
    for (k, &(arg, ext)) in args.iter().enumerate() {
        let (v, how) = s.data[k];
        let orig = l.stub_arg(arg);
        if let (BasicValueEnum::IntValue(c), BasicValueEnum::IntValue(o)) = (v, orig) {
            if o.is_const() {
                // A constant argument is widened by constant folding.
                let want = match ext {
                    "zext" => o.get_zero_extended_constant(),
                    _ => o.get_sign_extended_constant().map(|x| x as u64),
                };
                assert_eq!(c.get_zero_extended_constant(), want, "constant data {k}");
                continue;
            }
        }
        assert_eq!(
            how, ext,
            "widening of data {k} (argument {arg}) in {}",
            l.function
        );
        assert!(
            same_value(v, orig),
            "data {k} of {} in {}: {v:?} is not argument {arg} {orig:?}",
            l.stub,
            l.function
        );
        // What is used before the push is available there: not defined after it.
        if let Some(i) = v.as_instruction_value() {
            assert_ne!(i, l.stub_call);
            if i.get_parent() == l.push.get_parent() {
                let mut x = Some(i);
                let mut before_push = false;
                while let Some(y) = x {
                    if y == l.push {
                        before_push = true;
                        break;
                    }
                    x = y.get_next_instruction();
                }
                assert!(before_push, "data {k} defined before the push");
            } else {
                assert_ne!(
                    i.get_parent(),
                    l.stub_call.get_parent(),
                    "data {k} not in the launch block"
                );
            }
        }
    }
}

use inkwell::values::BasicValue;

fn int_const(v: BasicValueEnum<'_>) -> Option<u64> {
    match v {
        BasicValueEnum::IntValue(i) => i.get_zero_extended_constant(),
        _ => None,
    }
}

fn templates_targets() -> Vec<InjectTarget> {
    vec![target(AXPY_F, &[3]), target(TILE4, &[1])]
}

/// `opt` names the fixture: `O0`, `O2` (nvcc's host translation), `clang.O0`, `clang.O2`.
fn check_templates(opt: &str) {
    let name = format!("templates.{opt}.ll");
    let (report, out) = run(
        &format!("templates_{}", opt.replace('.', "_")),
        &name,
        &templates_targets(),
    )
    .unwrap();
    assert_eq!(
        report.instrumented,
        vec![
            (AXPY_F.into(), "main".into()),
            (TILE4.into(), "main".into())
        ]
    );
    assert_eq!(
        report.untouched_launches, 1,
        "axpy<double> is not annotated"
    );
    assert!(report.missing.is_empty());
    assert!(report.refused.is_empty());

    let ctx = Context::create();
    let m = parse(&ctx, &out);
    let ls = launches(&m);
    assert_eq!(ls.len(), 3);
    assert!(ls.iter().all(|l| l.function == "main"));
    // Source order: axpy<float>, axpy<double>, tile<4>.
    assert!(ls[0].stub.contains("axpyIf"), "{}", ls[0].stub);
    assert!(ls[1].stub.contains("axpyId"), "{}", ls[1].stub);
    assert!(ls[2].stub.contains("tileILi4"), "{}", ls[2].stub);
    check_instrumented(&ls[0], AXPY_F, 1);
    check_data(&ls[0], &[(3, "sext")]);
    check_untouched(&ls[1]);
    check_instrumented(&ls[2], TILE4, 1);
    check_data(&ls[2], &[(1, "none")]);
    if opt == "O2" {
        // Constant block shapes reach the runtime as they were: 256 | 1 << 32 and
        // 64 | 1 << 32, z = 1.
        let s = ls[0].select();
        assert_eq!(int_const(s.dims_in[2]), Some(256 | 1 << 32));
        assert_eq!(int_const(s.dims_in[3]), Some(1));
        assert_eq!(int_const(ls[2].select().dims_in[2]), Some(64 | 1 << 32));
        // The sizes are SSA values of main, not re-computed.
        assert_eq!(s.data[0].0, ls[0].stub_arg(3));
    }
    // One select per instrumented launch in the whole module.
    let selects = m
        .get_functions()
        .flat_map(instructions)
        .filter(|&i| callee_name(i).as_deref() == Some("klaraptor_launch_begin"))
        .count();
    assert_eq!(selects, 2);
}

#[test]
fn templates_o0() {
    check_templates("O0");
}

#[test]
fn templates_o2() {
    check_templates("O2");
}

fn check_loops(opt: &str) {
    let name = format!("loops.{opt}.ll");
    let targets = [target(SCALE, &[1, 2]), target(NARROW, &[1, 2, 3])];
    let (report, out) = run(&format!("loops_{opt}"), &name, &targets).unwrap();
    let scales = report
        .instrumented
        .iter()
        .filter(|(k, _)| k == SCALE)
        .count();
    let narrows = report
        .instrumented
        .iter()
        .filter(|(k, _)| k == NARROW)
        .count();
    // At -O2 the inner loop (k = 1, 2) is unrolled into two launches.
    assert_eq!(scales, if opt == "O0" { 2 } else { 3 });
    assert_eq!(narrows, 1);
    assert!(report.instrumented.iter().all(|(_, f)| f == "main"));
    assert_eq!(report.untouched_launches, 0);
    assert!(report.missing.is_empty());

    let ctx = Context::create();
    let m = parse(&ctx, &out);
    let ls = launches(&m);
    assert_eq!(ls.len(), scales + narrows);
    for l in &ls {
        if l.stub.contains("scale") {
            check_instrumented(l, SCALE, 2);
            check_data(l, &[(1, "sext"), (2, "sext")]);
        } else {
            assert!(l.stub.contains("narrow"), "{}", l.stub);
            check_instrumented(l, NARROW, 3);
            // unsigned short is zeroext, short signext, size_t already i64.
            check_data(l, &[(1, "zext"), (2, "sext"), (3, "none")]);
        }
    }
    // The launches inside the loops stay inside them: their blocks are not the entry.
    let main = m.get_function("main").unwrap();
    let entry = main.get_first_basic_block().unwrap();
    assert!(ls
        .iter()
        .filter(|l| l.stub.contains("scale"))
        .all(|l| l.push.get_parent() != Some(entry)));
}

#[test]
fn loops_o0() {
    check_loops("O0");
}

#[test]
fn loops_o2() {
    check_loops("O2");
}

/// At -O2, `-2 - argc` (the `short h` of `narrow`) is computed in the launch block, after
/// the push; the pass computes it again before the push, from the same inputs.
#[test]
fn loops_o2_recomputes_a_value_defined_after_the_push() {
    let targets = [target(NARROW, &[2])];
    let (report, out) = run("loops_o2_recompute", "loops.O2.ll", &targets).unwrap();
    assert_eq!(report.instrumented.len(), 1);
    let ctx = Context::create();
    let m = parse(&ctx, &out);
    let ls = launches(&m);
    let l = ls.iter().find(|l| l.stub.contains("narrow")).unwrap();
    let (v, how) = l.select().data[0];
    assert_eq!(how, "sext");
    let orig = l.stub_arg(2).as_instruction_value().unwrap();
    assert_eq!(orig.get_opcode(), InstructionOpcode::Sub);
    assert_eq!(
        orig.get_parent(),
        l.stub_call.get_parent(),
        "defined in the launch block"
    );
    let copy = v.as_instruction_value().unwrap();
    assert_ne!(copy, orig);
    assert_eq!(copy.get_opcode(), InstructionOpcode::Sub);
    assert_eq!(copy.get_parent(), l.push.get_parent());
    assert!(same_value(v, orig.as_any_value_enum().try_into().unwrap()));
}

use inkwell::values::AnyValue;

fn check_streams(opt: &str) {
    let name = format!("streams.{opt}.ll");
    let (report, out) = run(
        &format!("streams_{opt}"),
        &name,
        &[target(STENCIL, &[2, 3])],
    )
    .unwrap();
    assert_eq!(
        report.instrumented,
        vec![
            (STENCIL.into(), "main".into()),
            (STENCIL.into(), "main".into())
        ]
    );
    let ctx = Context::create();
    let m = parse(&ctx, &out);
    let ls = launches(&m);
    assert_eq!(ls.len(), 2);
    // `block.x * block.y * sizeof(float)` follows the block at -O0; at -O2 it is the
    // constant 1024 and stays as it is (streams.cu).
    let follows = !opt.starts_with("O2");
    let formulas: Vec<&str> = report
        .shmem_follows
        .iter()
        .map(|l| l.detail.as_str())
        .collect();
    if follows {
        assert_eq!(formulas, ["((bx * by) * 4)", "((bx * by) * 4)"]);
    } else {
        assert!(formulas.is_empty(), "{formulas:?}");
    }
    for l in &ls {
        check_instrumented(l, STENCIL, 2);
        check_data(l, &[(2, "sext"), (3, "sext")]);
        // The stream is left as it is; the dynamic shared memory too unless it follows
        // the block (the runtime's amount, checked by `launches`).
        let kept: &[u32] = if follows { &[5] } else { &[4, 5] };
        for &n in kept {
            if let Some(i) = op(l.push, n).as_instruction_value() {
                assert!(
                    !i.get_name()
                        .is_some_and(|s| s.to_string_lossy().starts_with("klaraptor")),
                    "operand {n}"
                );
            }
        }
    }
    // The first launch passes the stream, the second the default stream.
    let stream = |l: &Launch<'_>| match op(l.push, 5) {
        BasicValueEnum::PointerValue(p) => p.is_null(),
        other => panic!("stream operand {other:?}"),
    };
    assert!(!stream(&ls[0]));
    assert!(stream(&ls[1]));
    if opt.starts_with("O2") {
        // 16 x 16 x 4 bytes of dynamic shared memory, a constant after optimization.
        assert_eq!(int_const(op(ls[0].push, 4)), Some(1024));
        assert_eq!(int_const(ls[0].select().dims_in[2]), Some(16 | 16 << 32));
    } else {
        assert!(int_const(op(ls[0].push, 4)).is_none());
        assert_eq!(
            callee_name(ls[0].select().call).as_deref(),
            Some("klaraptor_launch_begin_shmem")
        );
    }
    if opt.ends_with('g') {
        // The inserted call carries the launch's source location.
        let s = ls[0].select();
        assert!(
            s.call.get_debug_location().is_some(),
            "debug location on the select call"
        );
    }
}

#[test]
fn streams_o0() {
    check_streams("O0");
}

#[test]
fn streams_o2() {
    check_streams("O2");
}

#[test]
fn streams_o0_debug_info() {
    check_streams("O0g");
}

#[test]
fn streams_o2_debug_info() {
    check_streams("O2g");
}

fn multi_targets() -> Vec<InjectTarget> {
    vec![
        target(RELAX, &[1]),
        target(UNUSED, &[1]),
        target(LIN_SCALE, &[2]),
        target(PLAIN_C, &[1]),
        target("_Z7nowherev", &[]),
    ]
}

/// `opt` as for [`check_templates`].
fn check_multi(opt: &str) {
    let name = format!("multi.{opt}.ll");
    let (report, out) = run(
        &format!("multi_{}", opt.replace('.', "_")),
        &name,
        &multi_targets(),
    )
    .unwrap();
    let helper = "_Z10run_helperPfi";
    let step = "_ZN6Solver4stepEm";
    let mut got = report.instrumented.clone();
    got.sort();
    let mut want: Vec<(String, String)> = vec![
        (RELAX.into(), helper.into()),
        (RELAX.into(), step.into()),
        (LIN_SCALE.into(), step.into()),
        (PLAIN_C.into(), "main".into()),
    ];
    want.sort();
    assert_eq!(got, want);
    assert_eq!(report.untouched_launches, 1, "clear is not annotated");
    assert_eq!(
        report.missing,
        vec!["_Z6unusedPfi".to_string(), "_Z7nowherev".to_string()]
    );
    assert!(report.refused.is_empty());

    let ctx = Context::create();
    let m = parse(&ctx, &out);
    let ls = launches(&m);
    assert_eq!(ls.len(), 5);
    for l in &ls {
        let s = &l.stub;
        if s.contains("clear") {
            assert_eq!(l.function, helper);
            check_untouched(l);
        } else if s.contains("relax") {
            assert!(l.function == helper || l.function == step, "{}", l.function);
            check_instrumented(l, RELAX, 1);
            check_data(l, &[(1, "sext")]);
        } else if s.contains("lin6detail") && s.contains("scale") {
            assert_eq!(l.function, step);
            check_instrumented(l, LIN_SCALE, 1);
            check_data(l, &[(2, "none")]);
        } else {
            assert!(s.contains("plain_c"), "{s}");
            assert_eq!(l.function, "main");
            check_instrumented(l, PLAIN_C, 1);
            check_data(l, &[(1, "sext")]);
        }
    }
    // The helper: clear's push untouched, relax's instrumented, in that order.
    let in_helper: Vec<_> = ls.iter().filter(|l| l.function == helper).collect();
    assert_eq!(in_helper.len(), 2);
    assert!(in_helper[0].stub.contains("clear"));
    assert!(in_helper[1].stub.contains("relax"));
    // The kernel ids are shared between launches of the same kernel.
    let relax_ids: Vec<_> = ls
        .iter()
        .filter(|l| l.stub.contains("relax"))
        .map(|l| op(l.select().call, 0))
        .collect();
    assert_eq!(relax_ids[0], relax_ids[1]);
    assert!(
        m.get_function("klaraptor_launch_begin")
            .unwrap()
            .count_basic_blocks()
            == 0
    );
}

#[test]
fn multi_o0() {
    check_multi("O0");
}

#[test]
fn multi_o2() {
    check_multi("O2");
}

#[test]
fn clang_backend_templates_o0() {
    check_templates("clang.O0");
}

#[test]
fn clang_backend_templates_o2() {
    check_templates("clang.O2");
}

#[test]
fn clang_backend_multi_o0() {
    check_multi("clang.O0");
}

#[test]
fn clang_backend_multi_o2() {
    check_multi("clang.O2");
}

/// At -O0 the kernel arguments are loaded from allocas in the launch block, after the
/// push; the pass loads them again before the push, from the same allocas.
#[test]
fn multi_o0_reloads_arguments_before_the_push() {
    let (_, out) = run("multi_o0_reload", "multi.O0.ll", &multi_targets()).unwrap();
    let ctx = Context::create();
    let m = parse(&ctx, &out);
    for l in launches(&m).iter().filter(|l| !l.selects.is_empty()) {
        let (v, _) = l.select().data[0];
        let load = v.as_instruction_value().unwrap();
        assert_eq!(load.get_opcode(), InstructionOpcode::Load, "{}", l.stub);
        assert_eq!(load.get_parent(), l.push.get_parent());
        let arg = l.stub_arg(if l.stub.contains("lin6detail") { 2 } else { 1 });
        let orig = arg.as_instruction_value().unwrap();
        assert_eq!(orig.get_opcode(), InstructionOpcode::Load);
        assert_eq!(orig.get_parent(), l.stub_call.get_parent());
        // Same address (for Solver::step's `n`, the same `this->n` GEP re-done).
        assert!(same_value(op(load, 0), op(orig, 0)));
    }
}

/// No targets: nothing changes, every launch is counted as untouched.
#[test]
fn no_targets_changes_nothing() {
    let (report, out) = run("no_targets", "multi.O2.ll", &[]).unwrap();
    assert!(report.instrumented.is_empty());
    assert_eq!(report.untouched_launches, 5);
    assert!(report.missing.is_empty());
    let ctx = Context::create();
    let m = parse(&ctx, &out);
    assert!(m.get_function("klaraptor_select").is_none());
    assert!(m.get_function("klaraptor_launch_begin").is_none());
    for l in launches(&m) {
        check_untouched(&l);
    }
}
