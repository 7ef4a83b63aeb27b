//! Shared set-up of the `inject_*` integration tests: the host-IR fixtures (made by
//! `tests/fixtures/inject/regen.sh` from the `.cu` files next to them) and a reader of the
//! rewritten IR that finds every launch and what the pass put before it.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use inkwell::context::Context;
use inkwell::memory_buffer::MemoryBuffer;
use inkwell::module::Module;
use inkwell::values::{
    BasicValue, BasicValueEnum, CallSiteValue, FunctionValue, InstructionOpcode, InstructionValue,
    Operand,
};

use klaraptor_passes::inject::{
    instrument_file, instrument_file_with, InjectError, InjectOptions, InjectReport, InjectTarget,
};

/// The repository root (the parent of the `passes` crate).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("passes/ has a parent")
        .to_path_buf()
}

pub fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/inject")
        .join(name)
}

/// A fresh scratch directory for one test.
pub fn scratch(test: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("inject")
        .join(test);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

pub fn target(kernel: &str, data_args: &[usize]) -> InjectTarget {
    InjectTarget {
        kernel: kernel.into(),
        id: kernel.into(),
        data_args: data_args.to_vec(),
        launch_threads: 0,
        shmem_clause: false,
    }
}

/// Instruments fixture `name` into the test's scratch directory; returns the report and
/// the path of the rewritten `.ll`.
pub fn run(
    test: &str,
    name: &str,
    targets: &[InjectTarget],
) -> Result<(InjectReport, PathBuf), InjectError> {
    let out = scratch(test).join(name);
    let report = instrument_file(&fixture(name), &out, targets)?;
    Ok((report, out))
}

/// [`run`] with options.
pub fn run_with(
    test: &str,
    name: &str,
    targets: &[InjectTarget],
    options: InjectOptions,
) -> Result<(InjectReport, PathBuf), InjectError> {
    let out = scratch(test).join(name);
    let report = instrument_file_with(&fixture(name), &out, targets, options)?;
    Ok((report, out))
}

pub fn parse<'c>(context: &'c Context, path: &Path) -> Module<'c> {
    let buf = MemoryBuffer::create_from_file(path).expect("read IR");
    let module = context.create_module_from_ir(buf).expect("parse IR");
    module.verify().expect("rewritten module verifies");
    module
}

pub fn instructions(f: FunctionValue<'_>) -> Vec<InstructionValue<'_>> {
    let mut out = Vec::new();
    for b in f.get_basic_blocks() {
        let mut i = b.get_first_instruction();
        while let Some(x) = i {
            out.push(x);
            i = x.get_next_instruction();
        }
    }
    out
}

pub fn callee_name(i: InstructionValue<'_>) -> Option<String> {
    if i.get_opcode() != InstructionOpcode::Call {
        return None;
    }
    let f = CallSiteValue::try_from(i).ok()?.get_called_fn_value()?;
    Some(f.get_name().to_string_lossy().into_owned())
}

pub fn op<'c>(i: InstructionValue<'c>, n: u32) -> BasicValueEnum<'c> {
    match i.get_operand(n) {
        Some(Operand::Value(v)) => v,
        other => panic!("operand {n} of {i:?} is {other:?}"),
    }
}

/// `a` and `b` compute the same thing: the same value, or instructions with the same
/// opcode over operands that compute the same things (a load re-done before the push
/// from the same address, an add cloned over the same inputs).
pub fn same_value(a: BasicValueEnum<'_>, b: BasicValueEnum<'_>) -> bool {
    if a == b {
        return true;
    }
    let (Some(x), Some(y)) = (a.as_instruction_value(), b.as_instruction_value()) else {
        return false;
    };
    if x.get_opcode() != y.get_opcode()
        || x.get_num_operands() != y.get_num_operands()
        || x.get_type() != y.get_type()
        || matches!(
            x.get_opcode(),
            InstructionOpcode::Alloca | InstructionOpcode::Call | InstructionOpcode::Phi
        )
    {
        return false;
    }
    (0..x.get_num_operands()).all(|n| same_value(op(x, n), op(y, n)))
}

/// What the pass put before one launch.
#[derive(Debug)]
pub struct Select<'c> {
    pub call: InstructionValue<'c>,
    pub id: String,
    pub n_data: u64,
    /// The value stored into each data slot, and how it was widened (`"sext"`, `"zext"`
    /// or `"none"`); the value is the one before widening.
    pub data: Vec<(BasicValueEnum<'c>, &'static str)>,
    /// The values stored into the four dim slots before the call.
    pub dims_in: Vec<BasicValueEnum<'c>>,
}

/// One `__cudaPushCallConfiguration` in the rewritten module.
#[derive(Debug)]
pub struct Launch<'c> {
    pub function: String,
    pub push: InstructionValue<'c>,
    /// The stub called in the success block, and that call.
    pub stub: String,
    pub stub_call: InstructionValue<'c>,
    /// `klaraptor_select` calls between the previous push (or the block start) and this
    /// push.
    pub selects: Vec<Select<'c>>,
}

impl<'c> Launch<'c> {
    pub fn select(&self) -> &Select<'c> {
        assert_eq!(self.selects.len(), 1, "one select before {:?}", self.push);
        &self.selects[0]
    }

    pub fn stub_arg(&self, n: u32) -> BasicValueEnum<'c> {
        op(self.stub_call, n)
    }
}

fn string_of_global(m: &Module<'_>, v: BasicValueEnum<'_>) -> String {
    let BasicValueEnum::PointerValue(p) = v else {
        panic!("kernel id is not a pointer: {v:?}")
    };
    let g = m
        .get_global(p.get_name().to_str().unwrap())
        .expect("kernel id global");
    assert!(g.is_constant(), "kernel id is constant");
    assert_eq!(g.get_linkage(), inkwell::module::Linkage::Private);
    assert!(g.has_unnamed_addr(), "kernel id is unnamed_addr");
    let BasicValueEnum::ArrayValue(a) = g.get_initializer().unwrap() else {
        panic!("kernel id is not an array")
    };
    let bytes = a.as_const_string().unwrap();
    String::from_utf8(bytes.strip_suffix(&[0]).expect("NUL-terminated").to_vec()).unwrap()
}

/// The value stored to `ptr` by the last store before `before` in its block.
fn stored_to<'c>(
    ptr: BasicValueEnum<'c>,
    before: InstructionValue<'c>,
) -> Option<BasicValueEnum<'c>> {
    let mut i = before.get_previous_instruction();
    while let Some(x) = i {
        if x.get_opcode() == InstructionOpcode::Store && op(x, 1) == ptr {
            return Some(op(x, 0));
        }
        i = x.get_previous_instruction();
    }
    None
}

fn read_select<'c>(m: &Module<'c>, call: InstructionValue<'c>) -> Select<'c> {
    let id = string_of_global(m, op(call, 0));
    let BasicValueEnum::IntValue(n) = op(call, 1) else {
        panic!("n_data not an int")
    };
    let n_data = n.get_zero_extended_constant().expect("constant n_data");
    let data_ptr = op(call, 2);
    let mut data = Vec::new();
    if n_data == 0 {
        assert!(
            matches!(data_ptr, BasicValueEnum::PointerValue(p) if p.is_null()),
            "no data: null pointer"
        );
    }
    // The stores into the data array: `store v, gep [n x i64], %data, 0, k`.
    let mut slots: Vec<Option<(BasicValueEnum<'c>, &'static str)>> = vec![None; n_data as usize];
    let mut i = call.get_previous_instruction();
    while let Some(x) = i {
        if x.get_opcode() == InstructionOpcode::Store {
            if let Some(gep) = op(x, 1).as_instruction_value() {
                if gep.get_opcode() == InstructionOpcode::GetElementPtr && op(gep, 0) == data_ptr {
                    let BasicValueEnum::IntValue(k) = op(gep, 2) else {
                        panic!("index")
                    };
                    let k = k.get_zero_extended_constant().unwrap() as usize;
                    let v = op(x, 0);
                    let entry = match v.as_instruction_value().map(|e| e.get_opcode()) {
                        Some(InstructionOpcode::SExt) => {
                            (op(v.as_instruction_value().unwrap(), 0), "sext")
                        }
                        Some(InstructionOpcode::ZExt) => {
                            (op(v.as_instruction_value().unwrap(), 0), "zext")
                        }
                        _ => (v, "none"),
                    };
                    if slots[k].is_none() {
                        slots[k] = Some(entry);
                    }
                }
            }
        }
        i = x.get_previous_instruction();
    }
    for s in slots {
        data.push(s.expect("every data slot stored"));
    }
    let dims_in = (3..7)
        .map(|n| stored_to(op(call, n), call).expect("dim slot stored before the call"))
        .collect();
    Select {
        call,
        id,
        n_data,
        data,
        dims_in,
    }
}

/// Every push in the module that is tested and branched on as clang does, with its stub
/// and the selects before it.
pub fn launches<'c>(m: &Module<'c>) -> Vec<Launch<'c>> {
    // Host functions registered for kernels (`__cudaRegisterFunction(h, @fn, …)`).
    let mut registered = std::collections::HashSet::new();
    for f in m.get_functions() {
        for i in instructions(f) {
            if callee_name(i).as_deref() == Some("__cudaRegisterFunction") {
                if let BasicValueEnum::PointerValue(p) = op(i, 1) {
                    registered.insert(p.get_name().to_string_lossy().into_owned());
                }
            }
        }
    }
    let is_stub = |n: &str| n.contains("__device_stub__") || registered.contains(n);
    let mut out = Vec::new();
    for f in m.get_functions() {
        let insts = instructions(f);
        for (k, &push) in insts.iter().enumerate() {
            if callee_name(push).as_deref() != Some("__cudaPushCallConfiguration") {
                continue;
            }
            let mut selects = Vec::new();
            let mut i = push.get_previous_instruction();
            while let Some(x) = i {
                match callee_name(x).as_deref() {
                    Some("__cudaPushCallConfiguration") => break,
                    Some(
                        "klaraptor_select"
                        | "klaraptor_launch_begin"
                        | "klaraptor_select_shmem"
                        | "klaraptor_launch_begin_shmem",
                    ) => selects.push(read_select(m, x)),
                    _ => {}
                }
                i = x.get_previous_instruction();
            }
            // The stub: the first call in the block the push's `icmp`/`br` goes to on
            // success that is a registered host function or a `__device_stub__`, else the
            // first that is not a runtime or LLVM call.
            // A push not followed by that test is not a launch clang emits: skipped.
            let cmp = insts[k + 1];
            if cmp.get_opcode() != InstructionOpcode::ICmp
                || op(cmp, 0).as_instruction_value() != Some(push)
            {
                continue;
            }
            let br = insts[k + 2];
            assert_eq!(br.get_opcode(), InstructionOpcode::Br, "br after the icmp");
            let dest = |n| match br.get_operand(n) {
                Some(Operand::Block(b)) => b,
                other => panic!("br operand {other:?}"),
            };
            let success = match cmp.get_icmp_predicate().unwrap() {
                inkwell::IntPredicate::EQ => dest(2),
                inkwell::IntPredicate::NE => dest(1),
                p => panic!("predicate {p:?}"),
            };
            let mut stub_call = None;
            let mut i = success.get_first_instruction();
            while let Some(x) = i {
                if callee_name(x).is_some_and(|n| is_stub(&n)) {
                    stub_call = Some(x);
                    break;
                }
                i = x.get_next_instruction();
            }
            let mut i = success
                .get_first_instruction()
                .filter(|_| stub_call.is_none());
            while let Some(x) = i {
                if callee_name(x).is_some_and(|n| {
                    !n.starts_with("llvm.")
                        && !n.starts_with("__cuda")
                        && !n.starts_with("klaraptor_")
                }) {
                    stub_call = Some(x);
                    break;
                }
                i = x.get_next_instruction();
            }
            let stub_call = stub_call.expect("a stub call in the success block");
            // The timing form: the ticket the begin call returned goes to the end call
            // right after the stub call (or at the top of an invoke's normal destination),
            // and the begin call passes the push's shared memory and stream.
            for sel in &selects {
                let name = callee_name(sel.call);
                if name.as_deref() == Some("klaraptor_launch_begin_shmem") {
                    // The shared memory goes through a slot the runtime may rewrite, which
                    // the push then reads.
                    let load = op(push, 4).as_instruction_value().expect("a load");
                    assert_eq!(load.get_opcode(), InstructionOpcode::Load);
                    assert_eq!(op(load, 0), op(sel.call, 7), "the push reads the slot");
                    assert!(
                        same_value(op(sel.call, 8), op(push, 5)),
                        "begin passes the stream"
                    );
                } else if name.as_deref() != Some("klaraptor_launch_begin") {
                    continue;
                } else {
                    assert!(
                        same_value(op(sel.call, 7), op(push, 4)),
                        "begin passes the shmem"
                    );
                    assert!(
                        same_value(op(sel.call, 8), op(push, 5)),
                        "begin passes the stream"
                    );
                }
                let mut after = match stub_call.get_opcode() {
                    InstructionOpcode::Invoke => {
                        let normal = match stub_call.get_operand(stub_call.get_num_operands() - 3) {
                            Some(Operand::Block(b)) => b,
                            other => panic!("invoke operand {other:?}"),
                        };
                        normal.get_first_instruction()
                    }
                    _ => stub_call.get_next_instruction(),
                };
                while let Some(x) = after.filter(|x| x.get_opcode() == InstructionOpcode::Phi) {
                    after = x.get_next_instruction();
                }
                let end = after.expect("an instruction after the launch");
                assert_eq!(
                    callee_name(end).as_deref(),
                    Some("klaraptor_launch_end"),
                    "the end call right after the launch: {end:?}"
                );
                assert_eq!(
                    op(end, 0).as_instruction_value(),
                    Some(sel.call),
                    "the end call takes the begin call's ticket"
                );
            }
            out.push(Launch {
                function: f.get_name().to_string_lossy().into_owned(),
                push,
                stub: callee_name(stub_call).unwrap(),
                stub_call,
                selects,
            });
        }
    }
    out
}

/// Checks what every instrumented launch must satisfy: one select right before the push,
/// whose dim slots are loaded into the push's first four operands, with the push's other
/// operands as they were.
pub fn check_instrumented(l: &Launch<'_>, id: &str, n_data: u64) {
    let s = l.select();
    assert_eq!(s.id, id, "kernel id in {}", l.function);
    assert_eq!(s.n_data, n_data);
    for n in 0..4 {
        let v = op(l.push, n);
        let load = v
            .as_instruction_value()
            .expect("push operand is an instruction");
        assert_eq!(
            load.get_opcode(),
            InstructionOpcode::Load,
            "push operand {n} is a load"
        );
        assert_eq!(
            op(load, 0),
            op(s.call, 3 + n),
            "push operand {n} loads dim slot {n}"
        );
        let slot = op(s.call, 3 + n).as_instruction_value().unwrap();
        assert_eq!(slot.get_opcode(), InstructionOpcode::Alloca);
        let entry = l
            .push
            .get_parent()
            .unwrap()
            .get_parent()
            .unwrap()
            .get_first_basic_block();
        assert_eq!(
            slot.get_parent(),
            entry,
            "dim slot alloca in the entry block"
        );
    }
    // The call sits between the stores and the loads, all in the push's block.
    assert_eq!(s.call.get_parent(), l.push.get_parent());
}

/// Checks a launch the pass left alone.
pub fn check_untouched(l: &Launch<'_>) {
    assert!(
        l.selects.is_empty(),
        "no select before {} in {}",
        l.stub,
        l.function
    );
    for n in 0..4 {
        if let Some(i) = op(l.push, n).as_instruction_value() {
            assert!(
                !i.get_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("klaraptor")),
                "push operand {n} untouched"
            );
        }
    }
}
