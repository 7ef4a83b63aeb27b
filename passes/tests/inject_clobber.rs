//! The clobber check on real host IR (`fixtures/inject/clobber.cu`): a data argument
//! loaded again after a host call that lies between `__cudaPushCallConfiguration` and the
//! stub call. The load is re-done before the push when the call cannot change what it
//! reads (a local whose address never escapes, or a callee that writes no memory), and
//! the launch is refused otherwise. The same answers on nvcc's host translation and on
//! clang's own CUDA compile, at -O0 and -O2.

mod inject_common;

use inject_common::*;
use inkwell::context::Context;
use inkwell::values::{BasicValue, InstructionOpcode};

const FILL: &str = "_Z4fillPfi";

fn check(fixture_name: &str) {
    let test = fixture_name.replace('.', "_");
    let (report, out) = run(&test, fixture_name, &[target(FILL, &[1])]).unwrap();
    let mut got: Vec<&str> = report
        .instrumented
        .iter()
        .map(|(_, f)| f.as_str())
        .collect();
    got.sort();
    assert_eq!(
        got,
        [
            "_Z16local_after_callR6Bufferi",
            "_Z19compute_then_launchPfi",
            "_Z22through_reference_pureRK6BufferRKi",
        ],
        "{report:#?}"
    );
    let reason = |f: &str| {
        report
            .refused
            .iter()
            .find(|r| r.function == f)
            .unwrap_or_else(|| panic!("{f} refused: {report:#?}"))
            .reason
            .clone()
    };
    assert_eq!(report.refused.len(), 3, "{report:#?}");
    assert!(
        reason("_Z14escaped_beforeR6Bufferi").contains(
            "loaded after a call (_ZNK6Buffer3getEv) between the push and the launch, and the \
             variable's address escapes"
        ),
        "{report:#?}"
    );
    assert!(
        reason("_Z21escapes_in_the_launchR6Bufferi").contains(
            "loaded after a call (_Z2atR6BufferPi) between the push and the launch, and the \
             variable's address escapes"
        ),
        "{report:#?}"
    );
    assert!(
        reason("_Z17through_referenceR6BufferRKi")
            .contains("loaded through a pointer after a call (_ZNK6Buffer3getEv)"),
        "{report:#?}"
    );

    let ctx = Context::create();
    let m = parse(&ctx, &out);
    let ls = launches(&m);
    assert_eq!(ls.len(), 6);
    for l in &ls {
        if report.instrumented.iter().any(|(_, f)| *f == l.function) {
            check_instrumented(l, FILL, 1);
            let (v, how) = l.select().data[0];
            assert_eq!(how, "sext");
            assert!(
                same_value(v, l.stub_arg(1)),
                "{}: {v:?} computes the stub's n",
                l.function
            );
            // What the select gets is available before the push.
            if let Some(i) = v.as_instruction_value() {
                assert_ne!(i.get_parent(), l.stub_call.get_parent(), "{}", l.function);
            }
        } else {
            check_untouched(l);
        }
    }
    // Where a call lies between the push and the stub, it is still there, after the
    // push, and n's load before the push is a copy of the one after the call.
    let l = ls
        .iter()
        .find(|l| l.function == "_Z16local_after_callR6Bufferi")
        .unwrap();
    let get = l.stub_arg(0).as_instruction_value().unwrap();
    assert_eq!(get.get_opcode(), InstructionOpcode::Call);
    let n = l.stub_arg(1).as_instruction_value().unwrap();
    if n.get_opcode() == InstructionOpcode::Load {
        // -O0 (and clang's unoptimised -O2): n lives in an alloca, reloaded after get().
        assert_eq!(n.get_parent(), l.stub_call.get_parent());
        let (v, _) = l.select().data[0];
        let copy = v.as_instruction_value().unwrap();
        assert_eq!(copy.get_opcode(), InstructionOpcode::Load);
        assert_eq!(copy.get_parent(), l.push.get_parent());
        assert_eq!(op(copy, 0), op(n, 0), "the same alloca");
    }
}

#[test]
fn clobber_nvcc_o0() {
    check("clobber.O0.ll");
}

#[test]
fn clobber_nvcc_o2() {
    check("clobber.O2.ll");
}

#[test]
fn clobber_clang_o0() {
    check("clobber.clang.O0.ll");
}

#[test]
fn clobber_clang_o2() {
    check("clobber.clang.O2.ll");
}
