//! The inject pass on hand-written launch shapes (`fixtures/inject/handmade.ll`): what it
//! re-computes before the push, what it refuses and why; its errors; bitcode in and out.

mod inject_common;

use inject_common::*;
use inkwell::context::Context;
use inkwell::values::{BasicValue, BasicValueEnum, InstructionOpcode};
use klaraptor_passes::inject::{instrument_file, instrument_module, InjectError, RefusedLaunch};

const K: &str = "_Z1kPfi";
const B: &str = "_Z1bPbi";

fn refused(function: &str, reason_part: &str, all: &[RefusedLaunch]) {
    let r = all
        .iter()
        .find(|r| r.function == function)
        .unwrap_or_else(|| panic!("{function} refused; got {all:#?}"));
    assert_eq!(r.kernel, K);
    assert!(
        r.reason.contains(reason_part),
        "{function}: reason {:?} should mention {reason_part:?}",
        r.reason
    );
}

#[test]
fn handmade_shapes() {
    let (report, out) = run(
        "handmade",
        "handmade.ll",
        &[target(K, &[1]), target(B, &[0, 1])],
    )
    .unwrap();
    let mut got: Vec<_> = report
        .instrumented
        .iter()
        .map(|(_, f)| f.as_str())
        .collect();
    got.sort();
    assert_eq!(
        got,
        [
            "bool_arg",
            "call_between_private",
            "calls_that_write_nothing",
            "load_from_argument",
            "store_elsewhere",
            "store_through_pointer"
        ],
        "{report:#?}"
    );
    refused("call_after_push", "call (get_n)", &report.refused);
    refused("store_between", "store", &report.refused);
    refused("store_through_pointer_escaped", "store", &report.refused);
    refused("shared_launch_block", "other predecessors", &report.refused);
    refused("volatile_load", "volatile", &report.refused);
    let escaped = "call (get_ptr) between the push and the launch, and the variable's address \
                   escapes";
    refused("call_between_escaped", escaped, &report.refused);
    refused("address_stored", escaped, &report.refused);
    refused("address_as_integer", escaped, &report.refused);
    refused(
        "call_given_the_address",
        "call (fill) between the push and the launch that is given the variable's address",
        &report.refused,
    );
    refused(
        "call_then_load_through_pointer",
        "loaded through a pointer after a call (get_ptr)",
        &report.refused,
    );
    assert_eq!(report.refused.len(), 10);
    // The ten refused and the push whose result is never tested.
    assert_eq!(report.untouched_launches, 11);
    assert!(report.missing.is_empty());

    let ctx = Context::create();
    let m = parse(&ctx, &out);
    let ls = launches(&m);
    assert_eq!(ls.len(), 16, "every launch but push_unused");
    for l in &ls {
        match l.function.as_str() {
            "store_elsewhere" => {
                check_instrumented(l, K, 1);
                // add (load (gep %n.addr 0 1)) 1, cloned before the push.
                let (v, how) = l.select().data[0];
                assert_eq!(how, "sext");
                let add = v.as_instruction_value().unwrap();
                assert_eq!(add.get_opcode(), InstructionOpcode::Add);
                assert_eq!(add.get_parent(), l.push.get_parent());
                assert!(same_value(v, l.stub_arg(1)));
                let load = op(add, 0).as_instruction_value().unwrap();
                assert_eq!(load.get_opcode(), InstructionOpcode::Load);
                assert_eq!(load.get_parent(), l.push.get_parent());
            }
            "load_from_argument" => {
                check_instrumented(l, K, 1);
                let (v, _) = l.select().data[0];
                let load = v.as_instruction_value().unwrap();
                assert_eq!(load.get_opcode(), InstructionOpcode::Load);
                assert_eq!(
                    op(load, 0),
                    m.get_function("load_from_argument")
                        .unwrap()
                        .get_nth_param(1)
                        .unwrap()
                );
            }
            "store_through_pointer" => {
                check_instrumented(l, K, 1);
                let (v, _) = l.select().data[0];
                assert!(same_value(v, l.stub_arg(1)));
                assert_eq!(
                    v.as_instruction_value().unwrap().get_parent(),
                    l.push.get_parent()
                );
            }
            "call_between_private" | "calls_that_write_nothing" => {
                check_instrumented(l, K, 1);
                // The reload of n is re-done before the push (from the same address); the
                // calls stay where they were, after it.
                let (v, how) = l.select().data[0];
                assert_eq!(how, "sext");
                let load = v.as_instruction_value().unwrap();
                assert_eq!(load.get_opcode(), InstructionOpcode::Load);
                assert_eq!(load.get_parent(), l.push.get_parent());
                assert!(same_value(v, l.stub_arg(1)));
                let q = l.stub_arg(0).as_instruction_value().unwrap();
                assert_eq!(q.get_opcode(), InstructionOpcode::Call);
                assert_eq!(q.get_parent(), l.stub_call.get_parent());
            }
            "bool_arg" => {
                check_instrumented(l, B, 2);
                let f = m.get_function("bool_arg").unwrap();
                let s = l.select();
                assert_eq!(s.data[0], (f.get_nth_param(0).unwrap(), "zext"));
                assert_eq!(s.data[1], (f.get_nth_param(1).unwrap(), "sext"));
            }
            _ => check_untouched(l),
        }
    }
}

#[test]
fn data_argument_out_of_range_is_an_error() {
    let err = run(
        "out_of_range",
        "multi.O0.ll",
        &[target("_Z5relaxPfi", &[2])],
    )
    .unwrap_err();
    match err {
        InjectError::DataArgOutOfRange {
            kernel,
            index,
            arity,
            ..
        } => {
            assert_eq!(kernel, "_Z5relaxPfi");
            assert_eq!((index, arity), (2, 2));
        }
        e => panic!("{e}"),
    }
}

#[test]
fn data_argument_that_is_not_an_integer_is_an_error() {
    // axpy<float>(float a, const float* x, float* y, int n): a is a float.
    let err = run(
        "not_integer",
        "templates.O2.ll",
        &[target("_Z4axpyIfEvT_PKS0_PS0_i", &[0])],
    )
    .unwrap_err();
    let msg = err.to_string();
    assert!(
        matches!(err, InjectError::DataArgNotInteger { index: 0, .. }),
        "{msg}"
    );
    assert!(msg.contains("float"), "{msg}");
}

#[test]
fn duplicate_targets_are_an_error() {
    let t = target("_Z5relaxPfi", &[1]);
    let err = run("duplicate", "multi.O0.ll", &[t.clone(), t]).unwrap_err();
    assert!(matches!(err, InjectError::DuplicateTarget(k) if k == "_Z5relaxPfi"));
}

#[test]
fn unreadable_input_is_an_error() {
    let dir = scratch("unreadable");
    let err = instrument_file(&dir.join("nope.ll"), &dir.join("out.ll"), &[]).unwrap_err();
    assert!(matches!(err, InjectError::Read { .. }), "{err}");
    std::fs::write(dir.join("bad.ll"), "this is not IR\n").unwrap();
    let err = instrument_file(&dir.join("bad.ll"), &dir.join("out.ll"), &[]).unwrap_err();
    assert!(matches!(err, InjectError::Read { .. }), "{err}");
}

#[test]
fn bitcode_in_and_out() {
    let dir = scratch("bitcode");
    let targets = [target("_Z7stencilPKfPfii", &[2, 3])];
    // .ll → .bc, instrumented.
    let bc = dir.join("streams.bc");
    let report = instrument_file(&fixture("streams.O2.ll"), &bc, &targets).unwrap();
    assert_eq!(report.instrumented.len(), 2);
    assert_eq!(&std::fs::read(&bc).unwrap()[..4], b"BC\xC0\xDE");
    // .bc → .ll with no targets: nothing more is done, and the selects read back.
    let ll = dir.join("again.ll");
    let again = instrument_file(&bc, &ll, &[]).unwrap();
    assert!(again.instrumented.is_empty());
    let ctx = Context::create();
    let m = parse(&ctx, &ll);
    for l in launches(&m) {
        check_instrumented(&l, "_Z7stencilPKfPfii", 2);
    }
}

#[test]
fn instrument_module_in_memory() {
    let ctx = Context::create();
    let buf =
        inkwell::memory_buffer::MemoryBuffer::create_from_file(&fixture("loops.O0.ll")).unwrap();
    let m = ctx.create_module_from_ir(buf).unwrap();
    let report = instrument_module(&m, &[target("_Z6narrowPftsm", &[3])]).unwrap();
    assert_eq!(
        report.instrumented,
        [("_Z6narrowPftsm".into(), "main".into())]
    );
    assert_eq!(report.untouched_launches, 2);
    let ls = launches(&m);
    let l = ls.iter().find(|l| l.stub.contains("narrow")).unwrap();
    check_instrumented(l, "_Z6narrowPftsm", 1);
    // size_t total: an i64, stored as it is.
    let (v, how) = l.select().data[0];
    assert_eq!(how, "none");
    assert!(matches!(v, BasicValueEnum::IntValue(i) if i.get_type().get_bit_width() == 64));
    assert!(same_value(v, l.stub_arg(3)));
}

#[test]
fn select_declared_with_another_type_is_an_error() {
    let dir = scratch("conflict");
    let src = std::fs::read_to_string(fixture("handmade.ll")).unwrap()
        + "\ndeclare i32 @klaraptor_launch_begin(ptr)\n";
    std::fs::write(dir.join("in.ll"), src).unwrap();
    let err =
        instrument_file(&dir.join("in.ll"), &dir.join("out.ll"), &[target(K, &[1])]).unwrap_err();
    assert!(matches!(err, InjectError::SelectConflict(..)), "{err}");
}
