//! The IO-builder pass: before every launch of an annotated kernel in a host-IR module, a
//! call into the runtime (`klaraptor_select`) that may change the launch's grid and block.
//!
//! # What a launch looks like
//!
//! nvcc's host translation compiled by clang (`nvcc -cuda … -o x.cu.cpp.ii`, then
//! `clang++-19 -S -emit-llvm`) turns `k<<<grid, block, shmem, stream>>>(args…)` into
//!
//! ```llvm
//! %r = call i32 @__cudaPushCallConfiguration(i64 %gridXY, i32 %gridZ, i64 %blockXY, i32 %blockZ, i64 %shmem, ptr %stream)
//! %c = icmp eq i32 %r, 0              ; or `icmp ne` with the branch targets swapped
//! br i1 %c, label %launch, label %skip
//! launch:                             ; only predecessor: the block of the push
//!   …                                 ; computes the arguments (loads at -O0)
//!   call void @stub(args…)            ; host stub of the kernel
//! ```
//!
//! where a dim3 is packed as `x | y << 32`. The stub is the host function registered for
//! the kernel by `__cudaRegisterFunction(handle, @host_fn, "device_name", …)`; at -O0 the
//! launch calls that registered function (which, for nvcc's output, forwards to nvcc's
//! `__device_stub__…`), at -O2 often the forwarded-to stub itself.
//!
//! # What the pass inserts
//!
//! Before the push: four allocas (in the function's entry block) for gridXY, gridZ,
//! blockXY, blockZ holding the push's operands, an `[n x i64]` alloca with the kernel
//! arguments named by [`InjectTarget::data_args`], the call
//!
//! ```llvm
//! call void @klaraptor_select(ptr @kernel_id, i32 n, ptr %data, ptr %gxy, ptr %gz, ptr %bxy, ptr %bz)
//! ```
//!
//! then loads of the four (possibly rewritten) values, which become the push's first four
//! operands. For a kernel annotated without `data(…)` (the one-line form,
//! [`InjectTarget::launch_threads`]) the data array also holds, after the data arguments,
//! the threads the launch runs along each block axis of the annotation, computed from the
//! push's own operands before the call (`(gridXY & 0xffffffff) * (blockXY & 0xffffffff)`
//! for x, the high halves for y, the z operands for z), or 0 where the grid or the block is
//! not 1 on an axis beyond the annotation's (the runtime's grid formula then gives 0 blocks,
//! and the launch keeps its own shape). Shared memory and stream are left as they are, unless the launch's dynamic
//! shared memory follows its block (below).
//!
//! Where the pass can also place a call right after the launch (after the stub `call`, or
//! at the top of an `invoke`'s normal destination when only the stub's block reaches it),
//! it calls the timing form instead, which also takes the push's shared memory and stream
//! and returns a ticket for the call after the launch (the runtime times the launches it
//! tries while it refines its choice):
//!
//! ```llvm
//! %t = call i64 @klaraptor_launch_begin(ptr @kernel_id, i32 n, ptr %data, ptr %gxy, ptr %gz, ptr %bxy, ptr %bz, i64 %shmem, ptr %stream)
//! …                                   ; the push, the test, the stub call
//! call void @klaraptor_launch_end(i64 %t)
//! ```
//!
//! # Dynamic shared memory that follows the block
//!
//! A launch whose dynamic shared memory is sized from its block (`k<<<g, b, b * 4>>>`) needs
//! another amount for another block. For a kernel whose annotation has `shmem(…)`
//! ([`InjectTarget::shmem_clause`]), and for a launch whose amount the pass reads as a formula
//! of the block ([`ShmemUse::Follows`]), the pass stores the amount in a fifth slot and calls
//! `klaraptor_select_shmem` / `klaraptor_launch_begin_shmem` instead, which take a pointer to
//! it and write the amount for the shape they choose; its load becomes the push's shared
//! memory operand. Which amount a launch passes, read from the unoptimised IR the driver
//! gives the pass ([`shmem_use`]):
//! - a constant, or a value computed from nothing the block is made of (the data): it stays
//!   as written ([`ShmemUse::Fixed`]);
//! - sums, differences, products and divisions by constants of the block's own dimensions
//!   (the values its `dim3` was constructed from, read back from local variables written
//!   once, or its fields: `block.x * block.y`) and constants: a formula in the annotation language (`(bx + 1) * by * 4`), which
//!   the driver gives the kernel as if its annotation had said `shmem(…)`;
//! - anything else computed from a value the block is made of (a call, a variable written
//!   twice, a block the pass cannot trace): [`ShmemUse::Unreadable`]; the launch is left as
//!   it was (the program's own shape and amount) and reported in
//!   [`InjectReport::shmem_unreadable`], for a warning that asks for the clause.
//!
//! # Which kernel a launch is for
//!
//! The callee of the first call in the launch block that names a kernel decides: through
//! `__cudaRegisterFunction` (host function → device name), through a registered host
//! function that only forwards to a stub (stub → device name), and else by name: the callee
//! itself (templates), [`kernel_symbol`] of it (clang's `__device_stub__` naming), nvcc's
//! stub naming (`_Z<n>__device_stub__Z2mmPKfS0_Pfi<params>` → `_Z2mmPKfS0_Pfi`), and
//! `_ZL…` (internal linkage) read as `_Z…`.
//!
//! clang's own CUDA compile (`--kl-backend=clang`) launches the same way (push, test,
//! branch, stub call). Its stub is `__device_stub__<kernel>` (`_Z17__device_stub__mmPKfS0_Pfi`),
//! registered itself by `__cuda_register_globals` with
//! `__cudaRegisterFunction(h, @stub, @0, @0, -1, …)`, where the device name is an unnamed
//! global (`@0`); the stub launches with `cudaLaunchKernel(@stub, grid, block, args, shmem,
//! stream)` ([`InjectOptions::clang_stubs_via_launch_entry`] changes that).
//!
//! # Data arguments that are computed after the push
//!
//! The data values must be available before the push. A stub argument that is a constant,
//! a function argument or an instruction that dominates the push is used as it is. An
//! instruction between the push and the stub call (in the launch block, or after the push
//! in its block) is re-computed before the push:
//! - side-effect-free instructions (integer and floating arithmetic, casts, compares,
//!   `select`, `getelementptr`, `freeze`, `extractvalue`) are cloned with their operands
//!   re-computed the same way;
//! - a non-volatile, non-atomic `load` (the -O0 pattern: the kernel argument is stored to
//!   an alloca before the push and re-loaded in the launch block) is cloned before the push
//!   when nothing between the push and the load may write the loaded memory (addresses are
//!   traced through `getelementptr`):
//!   - when the load reads an alloca whose address never escapes (its only uses are loads,
//!     stores *to* it, `getelementptr`s of it with the same uses, and arguments the callee
//!     marks `nocapture`, such as `llvm.lifetime.*`'s), nothing but the function itself can
//!     write it: calls are harmless unless they are given its address, and only stores and
//!     atomics to that same alloca count. This is `k<<<g, b>>>(buf.get(), n)` with a local
//!     `n`: the call to `get()` lies between the push and the reload of `n`.
//!   - otherwise (the alloca escapes: its address was passed to a call, stored, converted
//!     to an integer, …; or the load reads through a pointer), every call between must write
//!     no memory (`memory(none)`, `memory(read)`, or writes only to memory inaccessible to
//!     the module, on the callee or the call site; `llvm.lifetime.*`, `llvm.dbg.*`), there
//!     is no atomic, and every store goes to an alloca distinct from the load's.
//!
//! Anything else (a phi, a call's result, a store that may alias, a launch block with several
//! predecessors, a push whose result is not compared with zero, a device stub that was
//! inlined into the caller) leaves the launch untouched and is reported in
//! [`InjectReport::refused`] with the reason; the pass never guesses.
//!
//! # Arguments evaluated in several blocks
//!
//! A conditional in the launch's arguments (`c ? a : b`, `MIN(a, b)`, `&&`, `||`), or a call
//! that may throw (an `invoke`), splits their evaluation into blocks between the success
//! block and the stub call. The stub call is the first call naming a kernel in the blocks
//! the success block leads to (breadth first, at most 64 blocks); the blocks on the paths
//! to it must form a region entered from the success block only, without a loop. A data
//! argument that is a `phi` of that region is computed before the push as selects on the
//! conditions under which each edge into its block is taken (conjunctions as selects too, so
//! a value of a path not taken cannot poison the result); an instruction of an arm that some
//! path skips runs on every path then, so it must be a load from a local variable at a
//! constant offset, or not fault (no division by a non-constant). When a path leaves the
//! region without reaching the stub (an exception), the launch is not timed
//! (`klaraptor_select`).
//!
//! # Widening to i64
//!
//! LLVM integers carry no sign. A data argument narrower than 64 bits is zero-extended
//! when the call or the callee marks the parameter `zeroext` (clang does so for
//! `unsigned char`/`unsigned short`/`bool` on x86-64) or when it is an `i1`, and
//! sign-extended otherwise (`signext`, or no attribute: `int`, `unsigned` and `long` carry
//! none). An `unsigned int` size of 2³¹ or more therefore reaches the runtime negative; the
//! runtime reads data sizes as signed 64-bit values.
//!
//! The ABI assumed is the one of x86-64 and aarch64 Linux, where a dim3 is passed as
//! `{i64, i32}`; a push call of another shape is refused.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use inkwell::attributes::{Attribute, AttributeLoc};
use inkwell::basic_block::BasicBlock;
use inkwell::builder::Builder;
use inkwell::context::{Context, ContextRef};
use inkwell::memory_buffer::MemoryBuffer;
use inkwell::module::{Linkage, Module};
use inkwell::types::BasicTypeEnum;
use inkwell::values::AnyValue as _;
use inkwell::values::AsValueRef as _;
use inkwell::values::{
    AnyValueEnum, BasicValue, BasicValueEnum, CallSiteValue, FunctionValue, GlobalValue,
    InstructionOpcode, InstructionValue, Operand, PointerValue,
};
use inkwell::{AddressSpace, IntPredicate};

use crate::clang::kernel_symbol;

/// The runtime entry point the pass calls before an instrumented launch whose end it cannot
/// place.
pub const SELECT_FN: &str = "klaraptor_select";
/// The runtime entry point the pass calls before an instrumented launch, with its stream.
pub const BEGIN_FN: &str = "klaraptor_launch_begin";
/// The runtime entry point the pass calls right after that launch.
pub const END_FN: &str = "klaraptor_launch_end";
/// Every runtime entry point an instrumented launch calls first (an object that calls one
/// needs the runtime).
pub const ENTRY_FNS: [&str; 4] = [SELECT_FN, BEGIN_FN, SELECT_SHMEM_FN, BEGIN_SHMEM_FN];
/// [`SELECT_FN`] that also writes the dynamic shared memory for the shape it chooses.
pub const SELECT_SHMEM_FN: &str = "klaraptor_select_shmem";
/// [`BEGIN_FN`] that also writes the dynamic shared memory for the shape it chooses.
pub const BEGIN_SHMEM_FN: &str = "klaraptor_launch_begin_shmem";
const PUSH_FN: &str = "__cudaPushCallConfiguration";
/// How many blocks after a push the pass searches for the launch's stub call.
const MAX_LAUNCH_BLOCKS: usize = 64;
const REGISTER_FN: &str = "__cudaRegisterFunction";

/// An annotated kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InjectTarget {
    /// The kernel's device mangled name (`_Z2mmPKfS0_Pfi`, `_Z4axpyIfEvT_PKS0_PS0_i`).
    pub kernel: String,
    /// The name passed to the runtime (the mangled name).
    pub id: String,
    /// 0-based indices of the kernel arguments that are data sizes.
    pub data_args: Vec<usize>,
    /// After those, the data values are the threads the launch runs along each of this many
    /// block axes (`gridDim.x * blockDim.x`, …; 0: none), computed from the push's own grid
    /// and block: the one-line form of the annotation. A launch whose grid or block is not 1
    /// on an axis beyond these passes 0 for each (the runtime then keeps its own shape).
    pub launch_threads: u8,
    /// The annotation says `shmem(…)`: every launch passes the amount the runtime computes
    /// for the shape it chooses.
    pub shmem_clause: bool,
}

/// How a launch's dynamic shared memory relates to its block ([`shmem_use`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShmemUse {
    /// A constant, or computed from values the block is not made of: it stays as written.
    Fixed,
    /// A formula of the block's dimensions, in the annotation language (`bx * 4`).
    Follows(String),
    /// Computed from a value the block is made of, in a way the pass cannot write as a
    /// formula (the reason).
    Unreadable(String),
}

/// A launch whose dynamic shared memory follows its block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShmemLaunch {
    pub kernel: String,
    /// The function containing the launch.
    pub function: String,
    /// `file:line` of the launch, when the IR has debug information.
    pub at: Option<String>,
    /// [`ShmemUse::Follows`]'s formula; for [`InjectReport::shmem_unreadable`], why the
    /// pass could not read it.
    pub detail: String,
}

/// A launch of an annotated kernel the pass left as it was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusedLaunch {
    pub kernel: String,
    /// The function containing the launch.
    pub function: String,
    pub reason: String,
    /// `file:line` of the launch, when the IR has debug information.
    pub at: Option<String>,
}

/// What the pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InjectReport {
    /// (kernel, function containing the launch) for every instrumented launch, in module
    /// order.
    pub instrumented: Vec<(String, String)>,
    /// Pushes of a launch configuration left as they were: launches of kernels that are not
    /// targets, launches whose kernel could not be identified, and [`Self::refused`] ones.
    pub untouched_launches: usize,
    /// Annotated kernels with no instrumented launch (sorted).
    pub missing: Vec<String>,
    /// Launches of annotated kernels that could not be instrumented, with the reason.
    pub refused: Vec<RefusedLaunch>,
    /// Launches whose kernel the pass cannot name, with the reason (a launch through a
    /// function pointer), as (function containing the launch, reason).
    pub unidentified: Vec<(String, String)>,
    /// Host stubs whose `cudaLaunchKernel` call now goes through the runtime's
    /// `__cudaLaunchKernel` (with [`InjectOptions::clang_stubs_via_launch_entry`]), as
    /// (kernel, stub).
    pub rerouted: Vec<(String, String)>,
    /// Instrumented launches, of kernels without `shmem(…)`, whose dynamic shared memory the
    /// pass read as a formula of the block: the runtime passes the amount for its shape. The
    /// first formula of a kernel is the kernel's ([`Self::shmem_formula`]).
    pub shmem_follows: Vec<ShmemLaunch>,
    /// Launches of kernels without `shmem(…)` left as they were because their dynamic shared
    /// memory depends on the block in a way the pass cannot read (or in another way than the
    /// kernel's formula): they keep the program's own shape. Not in [`Self::refused`].
    pub shmem_unreadable: Vec<ShmemLaunch>,
}

impl InjectReport {
    /// The formula the pass found for `kernel`'s dynamic shared memory, if any.
    pub fn shmem_formula(&self, kernel: &str) -> Option<&str> {
        self.shmem_follows
            .iter()
            .find(|l| l.kernel == kernel)
            .map(|l| l.detail.as_str())
    }
}

/// What the pass does besides inserting the selects.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct InjectOptions {
    /// clang's host stub of a kernel launches with `cudaLaunchKernel(stub, grid, block,
    /// args, shmem, stream)`; nvcc 13's stubs with `__cudaLaunchKernel(handle, …)`, the
    /// handle from `__cudaGetKernel(&handle, stub)`, which is the entry point the profiling
    /// variant intercepts (`--wrap=__cudaLaunchKernel`). With this option, the stubs of the
    /// annotated kernels launch as nvcc's do: the handle is looked up once per stub (kept
    /// in a private global, written and read atomically), and if the lookup fails the stub
    /// launches with `cudaLaunchKernel` as before. `cudaLaunchKernel_ptsz` (per-thread
    /// default stream) maps to `__cudaLaunchKernel_ptsz`.
    pub clang_stubs_via_launch_entry: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum InjectError {
    #[error("cannot read {}: {msg}", path.display())]
    Read { path: PathBuf, msg: String },
    #[error("cannot write {}: {msg}", path.display())]
    Write { path: PathBuf, msg: String },
    #[error("the module is not valid LLVM IR after instrumentation: {0}")]
    Verify(String),
    #[error(
        "kernel {kernel}: data argument {index} does not exist (the launch in {function} \
         passes {arity} arguments)"
    )]
    DataArgOutOfRange {
        kernel: String,
        function: String,
        index: usize,
        arity: usize,
    },
    #[error(
        "kernel {kernel}: data argument {index} is not an integer (type {ty}) in the launch \
         in {function}"
    )]
    DataArgNotInteger {
        kernel: String,
        function: String,
        index: usize,
        ty: String,
    },
    #[error("the module already declares @{0} with another type: {1}")]
    SelectConflict(String, String),
    #[error(
        "the module already declares @{name} with another type ({ty}) than the CUDA runtime's"
    )]
    RuntimeDeclConflict { name: String, ty: String },
    #[error("two targets name kernel {0}")]
    DuplicateTarget(String),
    #[error("LLVM builder: {0}")]
    Builder(String),
}

impl From<inkwell::builder::BuilderError> for InjectError {
    fn from(e: inkwell::builder::BuilderError) -> Self {
        InjectError::Builder(e.to_string())
    }
}

/// Reads `input` (textual `.ll` or bitcode), instruments it, verifies it and writes it to
/// `output`: bitcode when `output` ends in `.bc`, text otherwise.
pub fn instrument_file(
    input: &Path,
    output: &Path,
    targets: &[InjectTarget],
) -> Result<InjectReport, InjectError> {
    instrument_file_with(input, output, targets, InjectOptions::default())
}

/// [`instrument_file`] with options.
pub fn instrument_file_with(
    input: &Path,
    output: &Path,
    targets: &[InjectTarget],
    options: InjectOptions,
) -> Result<InjectReport, InjectError> {
    let read_err = |msg: String| InjectError::Read {
        path: input.to_path_buf(),
        msg,
    };
    let context = Context::create();
    let buffer = MemoryBuffer::create_from_file(input).map_err(|e| read_err(e.to_string()))?;
    let module = context
        .create_module_from_ir(buffer)
        .map_err(|e| read_err(e.to_string()))?;
    let report = instrument_module_with(&module, targets, options)?;
    let write_err = |msg: String| InjectError::Write {
        path: output.to_path_buf(),
        msg,
    };
    if output.extension().is_some_and(|e| e == "bc") {
        if !module.write_bitcode_to_path(output) {
            return Err(write_err("LLVM could not write the bitcode".into()));
        }
    } else {
        module
            .print_to_file(output)
            .map_err(|e| write_err(e.to_string()))?;
    }
    Ok(report)
}

/// Instruments `module` in place and verifies it.
pub fn instrument_module(
    module: &Module<'_>,
    targets: &[InjectTarget],
) -> Result<InjectReport, InjectError> {
    instrument_module_with(module, targets, InjectOptions::default())
}

/// [`instrument_module`] with options.
pub fn instrument_module_with(
    module: &Module<'_>,
    targets: &[InjectTarget],
    options: InjectOptions,
) -> Result<InjectReport, InjectError> {
    let mut by_kernel: HashMap<&str, &InjectTarget> = HashMap::new();
    for t in targets {
        if by_kernel.insert(t.kernel.as_str(), t).is_some() {
            return Err(InjectError::DuplicateTarget(t.kernel.clone()));
        }
    }
    let mut pass = Pass::new(module, by_kernel)?;
    let mut report = InjectReport::default();
    for push in pass.push_calls() {
        match pass.launch_of(push) {
            Ok(Some(launch)) => {
                let Some(target) = pass.targets.get(launch.kernel.as_str()).copied() else {
                    report.untouched_launches += 1;
                    continue;
                };
                let function = fn_name(push_function(push));
                let shmem = if target.shmem_clause {
                    ShmemUse::Fixed
                } else {
                    shmem_use(push)
                };
                let at = debug_location(push);
                let shmem = match shmem {
                    ShmemUse::Follows(f) => match report.shmem_formula(&target.kernel) {
                        Some(g) if g != f => ShmemUse::Unreadable(format!(
                            "its dynamic shared memory follows the block as {f}, and another \
                             launch's as {g}"
                        )),
                        _ => ShmemUse::Follows(f),
                    },
                    other => other,
                };
                if let ShmemUse::Unreadable(why) = &shmem {
                    report.untouched_launches += 1;
                    report.shmem_unreadable.push(ShmemLaunch {
                        kernel: target.kernel.clone(),
                        function,
                        at,
                        detail: why.clone(),
                    });
                    continue;
                }
                let from_runtime = target.shmem_clause || matches!(shmem, ShmemUse::Follows(_));
                match pass.instrument(&launch, target, from_runtime)? {
                    Ok(()) => {
                        if let ShmemUse::Follows(f) = shmem {
                            report.shmem_follows.push(ShmemLaunch {
                                kernel: target.kernel.clone(),
                                function: function.clone(),
                                at,
                                detail: f,
                            });
                        }
                        report.instrumented.push((target.kernel.clone(), function))
                    }
                    Err(reason) => {
                        report.untouched_launches += 1;
                        report.refused.push(RefusedLaunch {
                            kernel: target.kernel.clone(),
                            function,
                            reason,
                            at: debug_location(push),
                        });
                    }
                }
            }
            // Not a launch of a kernel we can name: nothing to do with it.
            Ok(None) => report.untouched_launches += 1,
            Err((kernel, reason)) => {
                report.untouched_launches += 1;
                match kernel {
                    Some(kernel) if pass.targets.contains_key(kernel.as_str()) => {
                        report.refused.push(RefusedLaunch {
                            kernel,
                            function: fn_name(push_function(push)),
                            reason,
                            at: debug_location(push),
                        })
                    }
                    Some(_) => {}
                    None => report
                        .unidentified
                        .push((fn_name(push_function(push)), reason)),
                }
            }
        }
    }
    let done: BTreeSet<&str> = report
        .instrumented
        .iter()
        .map(|(k, _)| k.as_str())
        .collect();
    report.missing = targets
        .iter()
        .map(|t| t.kernel.clone())
        .filter(|k| !done.contains(k.as_str()))
        .collect();
    report.missing.sort();
    if options.clang_stubs_via_launch_entry {
        report.rerouted = pass.reroute_clang_stubs()?;
    }
    module
        .verify()
        .map_err(|e| InjectError::Verify(e.to_string()))?;
    Ok(report)
}

/// A launch found after a push: the push, the stub call and its kernel.
struct Launch<'ctx> {
    push: InstructionValue<'ctx>,
    /// The block holding the test of the push's result: the push's own block for a `call`,
    /// its normal destination for an `invoke` (a launch in a function with cleanups).
    test_block: BasicBlock<'ctx>,
    stub_call: InstructionValue<'ctx>,
    kernel: String,
    /// The blocks from the success block to the stub's block, in an order where each comes
    /// after its predecessors: the arguments' evaluation (one block, or several when an
    /// argument holds a conditional, `&&`/`||`, or a call that may throw).
    region: Vec<BasicBlock<'ctx>>,
    /// The blocks of `region` that some path to the stub call skips (a conditional's arms).
    arms: Vec<BasicBlock<'ctx>>,
    /// Whether every path from the success block reaches the stub call (no exception edge
    /// leaves the arguments' evaluation): only then does the pass place a call after it.
    closed: bool,
}

struct Pass<'m, 'ctx> {
    module: &'m Module<'ctx>,
    ctx: ContextRef<'ctx>,
    builder: Builder<'ctx>,
    targets: HashMap<&'m str, &'m InjectTarget>,
    /// host function or stub name → device name, from `__cudaRegisterFunction`.
    registered: HashMap<String, String>,
    /// kernel id → its C string global.
    ids: HashMap<String, GlobalValue<'ctx>>,
    select: Option<FunctionValue<'ctx>>,
    begin: Option<FunctionValue<'ctx>>,
    select_shmem: Option<FunctionValue<'ctx>>,
    begin_shmem: Option<FunctionValue<'ctx>>,
    end: Option<FunctionValue<'ctx>>,
}

fn fn_name(f: Option<FunctionValue<'_>>) -> String {
    f.map(|f| f.get_name().to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn push_function<'ctx>(i: InstructionValue<'ctx>) -> Option<FunctionValue<'ctx>> {
    i.get_parent().and_then(|b| b.get_parent())
}

fn callee<'ctx>(i: InstructionValue<'ctx>) -> Option<FunctionValue<'ctx>> {
    if !matches!(
        i.get_opcode(),
        InstructionOpcode::Call | InstructionOpcode::Invoke
    ) {
        return None;
    }
    call_site(i)?.get_called_fn_value()
}

/// A `call` or an `invoke` as a call site. inkwell converts only `call`; LLVM's call-site
/// functions (callee, attributes) take any `CallBase`, `invoke` included, which is what a
/// launch in a function with cleanups (C++ objects with destructors) is.
fn call_site<'ctx>(i: InstructionValue<'ctx>) -> Option<CallSiteValue<'ctx>> {
    match i.get_opcode() {
        // SAFETY: `i` is an LLVM CallBase (call or invoke), which is what a CallSiteValue wraps.
        InstructionOpcode::Call | InstructionOpcode::Invoke => {
            Some(unsafe { CallSiteValue::new(i.as_value_ref()) })
        }
        _ => None,
    }
}

fn callee_name(i: InstructionValue<'_>) -> Option<String> {
    callee(i).map(|f| f.get_name().to_string_lossy().into_owned())
}

fn operand_value<'ctx>(i: InstructionValue<'ctx>, n: u32) -> Option<BasicValueEnum<'ctx>> {
    match i.get_operand(n)? {
        Operand::Value(v) => Some(v),
        Operand::Block(_) => None,
    }
}

fn instructions(b: BasicBlock<'_>) -> impl Iterator<Item = InstructionValue<'_>> {
    std::iter::successors(b.get_first_instruction(), |i| i.get_next_instruction())
}

fn successors(b: BasicBlock<'_>) -> Vec<BasicBlock<'_>> {
    let Some(t) = b.get_terminator() else {
        return Vec::new();
    };
    t.get_operands()
        .filter_map(|o| o.and_then(|o| o.block()))
        .collect()
}

/// A call or invoke through a pointer (no function as its callee).
fn is_indirect_call(i: InstructionValue<'_>) -> bool {
    matches!(
        i.get_opcode(),
        InstructionOpcode::Call | InstructionOpcode::Invoke
    ) && call_site(i).is_some_and(|c| c.get_called_fn_value().is_none())
}

fn is_harmless_intrinsic(name: &str) -> bool {
    name.starts_with("llvm.lifetime.") || name.starts_with("llvm.dbg.")
}

/// The kernel a launch stub named `name` is for, by name only (see the module docs).
fn kernels_by_name(name: &str) -> Vec<String> {
    let mut out = vec![name.to_string(), kernel_symbol(name)];
    if let Some(k) = nvcc_stub_kernel(name) {
        out.push(k);
    }
    if let Some(rest) = name.strip_prefix("_ZL") {
        out.push(format!("_Z{rest}"));
    }
    out
}

/// nvcc names a kernel's stub `__device_stub__` followed by the kernel's mangled name
/// without its leading `_`, mangled again with the parameters:
/// `_Z28__device_stub__Z2mmPKfS0_PfiPKfS0_Pfi` is the stub of `_Z2mmPKfS0_Pfi`.
fn nvcc_stub_kernel(name: &str) -> Option<String> {
    let rest = name.strip_prefix("_Z")?;
    let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
    let len: usize = rest[..digits].parse().ok()?;
    let ident = rest.get(digits..digits + len)?;
    let inner = ident.strip_prefix("__device_stub__")?;
    inner.starts_with('Z').then(|| format!("_{inner}"))
}

/// Where an address comes from, through `getelementptr`s.
fn address_root(v: BasicValueEnum<'_>) -> BasicValueEnum<'_> {
    let mut v = v;
    while let Some(i) = v.as_instruction_value() {
        if i.get_opcode() != InstructionOpcode::GetElementPtr {
            break;
        }
        match operand_value(i, 0) {
            Some(base) => v = base,
            None => break,
        }
    }
    v
}

fn is_alloca(v: BasicValueEnum<'_>) -> bool {
    v.as_instruction_value()
        .is_some_and(|i| i.get_opcode() == InstructionOpcode::Alloca)
}

/// The instruction `v` is, if it is one (a use's user).
fn as_instruction<'ctx>(v: AnyValueEnum<'ctx>) -> Option<InstructionValue<'ctx>> {
    use inkwell::llvm_sys::core::LLVMIsAInstruction;
    let r = v.as_value_ref();
    // SAFETY: `r` is a live value; LLVMIsAInstruction only inspects its kind, and a
    // non-null answer is that same value as an instruction.
    unsafe { (!LLVMIsAInstruction(r).is_null()).then(|| InstructionValue::new(r)) }
}

/// Whether the address of the alloca `root` may be known outside the instructions that
/// load from it and store to it. Its uses (and those of every `getelementptr` of it) must
/// be the address of a `load` or a `store`, the base of a `getelementptr`, or an argument
/// of a call whose callee marks that parameter `nocapture` (`llvm.lifetime.*`,
/// `llvm.memcpy`, …); anything else (passed to a call that may keep it, stored as a value,
/// `ptrtoint`, a `phi` or `select`, a comparison) counts as an escape. Debug intrinsics
/// refer to the alloca through metadata, which is not a use.
fn address_escapes(root: BasicValueEnum<'_>) -> bool {
    let mut stack = vec![root];
    let mut seen = BTreeSet::new();
    while let Some(p) = stack.pop() {
        if !seen.insert(p.as_value_ref() as usize) {
            continue;
        }
        let mut u = p.get_first_use();
        while let Some(use_) = u {
            u = use_.get_next_use();
            let Some(user) = as_instruction(use_.get_user()) else {
                return true;
            };
            let is_p = |n: u32| operand_value(user, n) == Some(p);
            match user.get_opcode() {
                InstructionOpcode::Load => {}
                // The address, not the value stored.
                InstructionOpcode::Store if !is_p(0) => {}
                InstructionOpcode::GetElementPtr if is_p(0) => {
                    match BasicValueEnum::try_from(user.as_any_value_enum()) {
                        Ok(g) => stack.push(g),
                        Err(()) => return true,
                    }
                }
                InstructionOpcode::Call | InstructionOpcode::Invoke => {
                    let Some(site) = call_site(user) else {
                        return true;
                    };
                    let Some(f) = site.get_called_fn_value() else {
                        return true;
                    };
                    let nocapture = Attribute::get_named_enum_kind_id("nocapture");
                    let args = site.count_arguments();
                    let captured = (0..args).filter(|&n| is_p(n)).any(|n| {
                        let loc = AttributeLoc::Param(n);
                        f.get_enum_attribute(loc, nocapture).is_none()
                            && site.get_enum_attribute(loc, nocapture).is_none()
                    });
                    // Used as the callee, or after the arguments (an invoke's blocks are not
                    // values): an escape either way.
                    let elsewhere = (args..user.get_num_operands()).any(is_p);
                    if captured || elsewhere {
                        return true;
                    }
                }
                _ => return true,
            }
        }
    }
    false
}

/// Whether a call writes no memory the program can see: its callee or the call site says
/// `memory(none)`, `memory(read)`, or allows writes only to memory inaccessible to the
/// module (`memory(inaccessiblemem: write)`, as for `llvm.assume`).
fn call_writes_no_memory(call: InstructionValue<'_>) -> bool {
    let Some(site) = call_site(call) else {
        return false;
    };
    let kind = Attribute::get_named_enum_kind_id("memory");
    // LLVM's MemoryEffects: two bits (ref = 1, mod = 2) per location, argument memory in
    // bits 0-1, inaccessible memory in 2-3, other memory in 4-5. The call's effects are
    // within both the call site's and the callee's.
    let no_write = |a: Option<Attribute>| a.is_some_and(|a| a.get_enum_value() & 0b10_00_10 == 0);
    no_write(site.get_enum_attribute(AttributeLoc::Function, kind))
        || no_write(
            site.get_called_fn_value()
                .and_then(|f| f.get_enum_attribute(AttributeLoc::Function, kind)),
        )
}

/// Whether `i`, an instruction of a conditional's arm, may run on every path: a load from a
/// local variable (an alloca, or a constant offset into one), or a computation that cannot
/// fault (no division by a value that may be zero or -1).
fn speculable(i: InstructionValue<'_>) -> Result<(), String> {
    use InstructionOpcode::*;
    match i.get_opcode() {
        Load => {
            let addr = operand_value(i, 0).ok_or("load without address")?;
            let mut a = addr;
            while let Some(g) = a.as_instruction_value() {
                if g.get_opcode() != GetElementPtr {
                    break;
                }
                if (1..g.get_num_operands())
                    .any(|n| operand_value(g, n).is_none_or(|v| int_constant(v).is_none()))
                {
                    return Err("is read in a conditional's arm through a variable index, \
                                which the pass does not move"
                        .into());
                }
                a = operand_value(g, 0).ok_or("getelementptr without base")?;
            }
            if is_alloca(a) {
                Ok(())
            } else {
                Err(
                    "is read through a pointer in a conditional's arm, which the pass does not \
                     move; compute it into a variable before the launch"
                        .into(),
                )
            }
        }
        UDiv | SDiv | URem | SRem => {
            let ok = operand_value(i, 1)
                .and_then(int_constant)
                .is_some_and(|d| d != 0 && d != -1);
            if ok {
                Ok(())
            } else {
                Err("is a division in a conditional's arm, which the pass does not move".into())
            }
        }
        _ => Ok(()),
    }
}

/// Instructions that compute a value from their operands only.
fn is_pure(op: InstructionOpcode) -> bool {
    use InstructionOpcode::*;
    matches!(
        op,
        Add | Sub
            | Mul
            | UDiv
            | SDiv
            | URem
            | SRem
            | Shl
            | LShr
            | AShr
            | And
            | Or
            | Xor
            | FAdd
            | FSub
            | FMul
            | FDiv
            | FRem
            | FNeg
            | Trunc
            | ZExt
            | SExt
            | FPToUI
            | FPToSI
            | UIToFP
            | SIToFP
            | FPTrunc
            | FPExt
            | PtrToInt
            | IntToPtr
            | BitCast
            | AddrSpaceCast
            | ICmp
            | FCmp
            | Select
            | GetElementPtr
            | Freeze
            | ExtractValue
    )
}

impl<'m, 'ctx> Pass<'m, 'ctx> {
    fn new(
        module: &'m Module<'ctx>,
        targets: HashMap<&'m str, &'m InjectTarget>,
    ) -> Result<Self, InjectError> {
        let ctx = module.get_context();
        let builder = ctx.create_builder();
        let mut pass = Pass {
            module,
            ctx,
            builder,
            targets,
            registered: HashMap::new(),
            ids: HashMap::new(),
            select: None,
            begin: None,
            select_shmem: None,
            begin_shmem: None,
            end: None,
        };
        pass.read_registrations();
        Ok(pass)
    }

    /// Every call of `__cudaPushCallConfiguration`, in module order.
    fn push_calls(&self) -> Vec<InstructionValue<'ctx>> {
        let mut out = Vec::new();
        for f in self.module.get_functions() {
            for b in f.get_basic_blocks() {
                for i in instructions(b) {
                    if callee_name(i).as_deref() == Some(PUSH_FN) {
                        out.push(i);
                    }
                }
            }
        }
        out
    }

    /// `__cudaRegisterFunction(handle, @host_fn, "device_name", …)`: host function →
    /// device name; a registered host function whose only call is to another function
    /// (nvcc's forwarding wrapper) maps that function too.
    fn read_registrations(&mut self) {
        let mut direct = Vec::new();
        for f in self.module.get_functions() {
            for b in f.get_basic_blocks() {
                for i in instructions(b) {
                    if callee_name(i).as_deref() != Some(REGISTER_FN) {
                        continue;
                    }
                    let (Some(host), Some(name)) = (operand_value(i, 1), operand_value(i, 2))
                    else {
                        continue;
                    };
                    let host = host_fn_name(host);
                    let device = self.c_string_of(name);
                    if let (Some(host), Some(device)) = (host, device) {
                        direct.push((host, device));
                    }
                }
            }
        }
        for (host, device) in direct {
            if let Some(f) = self.module.get_function(&host) {
                let called: BTreeSet<String> = f
                    .get_basic_blocks()
                    .into_iter()
                    .flat_map(instructions)
                    .filter_map(callee_name)
                    .filter(|n| !n.starts_with("llvm."))
                    .collect();
                if called.len() == 1 {
                    let stub = called.into_iter().next().unwrap_or_default();
                    self.registered
                        .entry(stub)
                        .or_insert_with(|| device.clone());
                }
            }
            self.registered.insert(host, device);
        }
    }

    fn c_string_of(&self, v: BasicValueEnum<'ctx>) -> Option<String> {
        let BasicValueEnum::PointerValue(p) = v else {
            return None;
        };
        let name = p.get_name().to_str().ok()?.to_string();
        // clang names the device-name strings of its registrations `@0`, `@1`, …: unnamed
        // globals, found by identity.
        let g = if name.is_empty() {
            self.module
                .get_globals()
                .find(|g| g.as_pointer_value() == p)?
        } else {
            self.module.get_global(&name)?
        };
        let BasicValueEnum::ArrayValue(a) = g.get_initializer()? else {
            return None;
        };
        let bytes = a.as_const_string()?;
        let bytes = bytes.strip_suffix(&[0]).unwrap_or(bytes);
        Some(String::from_utf8_lossy(bytes).into_owned())
    }

    /// Which kernel a call is a launch stub of, if it names one.
    fn kernel_of_call(&self, call: InstructionValue<'ctx>) -> Option<String> {
        let name = callee_name(call)?;
        if name.starts_with("llvm.") {
            return None;
        }
        if let Some(device) = self.registered.get(&name) {
            if !self.targets.contains_key(device.as_str()) {
                // A kernel of internal linkage: nvcc registers it under a name libclang
                // mangles otherwise (`static`: `_Z1kPfi` for `_ZL1kPfi`; an anonymous
                // namespace gets a name of its own). The target's id is what the rest of
                // klaraptor knows it by.
                let want = linkage_neutral(device);
                if let Some(t) = self.targets.keys().find(|t| linkage_neutral(t) == want) {
                    return Some(t.to_string());
                }
            }
            return Some(device.clone());
        }
        let names = kernels_by_name(&name);
        if let Some(t) = names.iter().find(|k| self.targets.contains_key(k.as_str())) {
            return Some(t.clone());
        }
        name.contains("__device_stub__").then(|| names[1].clone())
    }

    /// The launch after `push`: `Ok(None)` when no launch stub can be found (nothing to
    /// report), `Err((kernel, reason))` when the shape is not the one the pass handles.
    #[allow(clippy::type_complexity)]
    fn launch_of(
        &self,
        push: InstructionValue<'ctx>,
    ) -> Result<Option<Launch<'ctx>>, (Option<String>, String)> {
        if push.get_parent().is_none() {
            return Ok(None);
        }
        // The success block: the push's result compared with 0 and branched on.
        let mut success = None;
        let mut use_ = push.get_first_use();
        while let Some(u) = use_ {
            if let AnyValueEnum::IntValue(c) = u.get_user() {
                if let Some(cmp) = c.as_instruction() {
                    if let Some(s) = self.success_block(push, cmp) {
                        success = cmp.get_parent().map(|t| (t, s));
                        break;
                    }
                }
            }
            use_ = u.get_next_use();
        }
        let Some((test_block, success)) = success else {
            return Ok(None);
        };
        let push_block = push.get_parent().expect("checked above");
        // The stub call: the first call naming a kernel in the blocks the success block
        // leads to, searched breadth first and not beyond a block that holds one (the
        // arguments' evaluation may branch: `c ? a : b`, `MIN(a, b)`, `&&`, an `invoke`).
        let mut stub = None;
        let mut reach = vec![success];
        let mut k = 0;
        'search: while k < reach.len() && reach.len() <= MAX_LAUNCH_BLOCKS {
            let b = reach[k];
            k += 1;
            for i in instructions(b) {
                if let Some(name) = self.kernel_of_call(i) {
                    stub = Some((i, name));
                    break 'search;
                }
            }
            for s in successors(b) {
                if s != push_block && s != test_block && !reach.contains(&s) {
                    reach.push(s);
                }
            }
        }
        let Some((stub_call, kernel)) = stub else {
            if reach
                .iter()
                .flat_map(|b| instructions(*b))
                .any(is_indirect_call)
            {
                return Err((
                    None,
                    "it calls the kernel through a function pointer, which klaraptor cannot \
                     follow to a kernel; launch the kernel by its name (k<<<…>>>(…)) for \
                     klaraptor to choose its shape"
                        .into(),
                ));
            }
            return Ok(None);
        };
        let preds = self.predecessors(success);
        if preds.len() != 1 || preds[0] != test_block {
            return Err((
                Some(kernel),
                "the block calling the kernel stub has other predecessors than the push".into(),
            ));
        }
        let stub_block = stub_call.get_parent().expect("an instruction of a block");
        let (region, arms, closed) = match self.launch_region(success, stub_block, &reach) {
            Ok(r) => r,
            Err(why) => return Err((Some(kernel), why)),
        };
        if !self.push_shape_ok(push) {
            return Err((
                Some(kernel),
                "__cudaPushCallConfiguration does not take (i64, i32, i64, i32, …)".into(),
            ));
        }
        Ok(Some(Launch {
            push,
            test_block,
            stub_call,
            kernel,
            region,
            arms,
            closed,
        }))
    }

    /// The blocks on the paths from `success` to `stub_block` among `reach` (ordered so that
    /// each follows its predecessors), those of them some path skips, and whether every path
    /// from `success` reaches `stub_block`. Refused: a loop, or a block entered from outside.
    #[allow(clippy::type_complexity)]
    fn launch_region(
        &self,
        success: BasicBlock<'ctx>,
        stub_block: BasicBlock<'ctx>,
        reach: &[BasicBlock<'ctx>],
    ) -> Result<(Vec<BasicBlock<'ctx>>, Vec<BasicBlock<'ctx>>, bool), String> {
        if success == stub_block {
            return Ok((vec![success], Vec::new(), true));
        }
        // Backwards from the stub's block, within `reach`.
        let mut region = vec![stub_block];
        let mut k = 0;
        while k < region.len() {
            let b = region[k];
            k += 1;
            if b == success {
                continue;
            }
            for p in self.predecessors(b) {
                if !reach.contains(&p) {
                    return Err(
                        "a block evaluating the kernel's arguments is also entered from                          elsewhere than the push"
                            .into(),
                    );
                }
                if !region.contains(&p) {
                    region.push(p);
                }
            }
        }
        // Each block after its predecessors (Kahn's order); a cycle leaves blocks over.
        let mut order: Vec<BasicBlock<'ctx>> = Vec::new();
        while order.len() < region.len() {
            let next = region.iter().copied().find(|b| {
                !order.contains(b)
                    && (*b == success || self.predecessors(*b).iter().all(|p| order.contains(p)))
            });
            match next {
                Some(b) => order.push(b),
                None => {
                    return Err("the kernel's arguments are evaluated in a loop".into());
                }
            }
        }
        let closed = order
            .iter()
            .filter(|b| **b != stub_block)
            .all(|b| successors(*b).iter().all(|s| order.contains(s)));
        // A block every path to the stub passes through: without it the stub's block
        // cannot be reached from `success`.
        let reaches_without = |skip: BasicBlock<'ctx>| {
            let mut seen = vec![success];
            let mut k = 0;
            while k < seen.len() {
                let b = seen[k];
                k += 1;
                if b == stub_block {
                    return true;
                }
                for s in successors(b) {
                    if s != skip && order.contains(&s) && !seen.contains(&s) {
                        seen.push(s);
                    }
                }
            }
            false
        };
        let arms = order
            .iter()
            .copied()
            .filter(|b| *b != success && *b != stub_block && reaches_without(*b))
            .collect();
        Ok((order, arms, closed))
    }

    fn push_shape_ok(&self, push: InstructionValue<'ctx>) -> bool {
        let widths = [64, 32, 64, 32];
        push.get_num_operands() >= 5
            && widths.iter().enumerate().all(|(n, w)| {
                matches!(operand_value(push, n as u32),
                    Some(BasicValueEnum::IntValue(v)) if v.get_type().get_bit_width() == *w)
            })
    }

    /// `cmp` is `icmp eq/ne push, 0` in the push's block and a `br` on it: the block
    /// taken when the push succeeded.
    fn success_block(
        &self,
        push: InstructionValue<'ctx>,
        cmp: InstructionValue<'ctx>,
    ) -> Option<BasicBlock<'ctx>> {
        if cmp.get_opcode() != InstructionOpcode::ICmp {
            return None;
        }
        let push_block = push.get_parent()?;
        let cmp_block = cmp.get_parent()?;
        // After an `invoke`, the test sits in the normal destination, which only the invoke
        // reaches.
        let follows_invoke = push.get_opcode() == InstructionOpcode::Invoke
            && push
                .get_operand(push.get_num_operands() - 3)
                .and_then(|o| o.block())
                == Some(cmp_block)
            && self.predecessors(cmp_block) == [push_block];
        if cmp_block != push_block && !follows_invoke {
            return None;
        }
        let pred = cmp.get_icmp_predicate()?;
        let (a, b) = (operand_value(cmp, 0)?, operand_value(cmp, 1)?);
        let other = if a.as_instruction_value() == Some(push) {
            b
        } else if b.as_instruction_value() == Some(push) {
            a
        } else {
            return None;
        };
        let BasicValueEnum::IntValue(zero) = other else {
            return None;
        };
        if zero.get_zero_extended_constant() != Some(0) {
            return None;
        }
        let br = cmp.get_parent()?.get_terminator()?;
        if br.get_opcode() != InstructionOpcode::Br || br.get_num_operands() != 3 {
            return None;
        }
        if operand_value(br, 0)?.as_instruction_value() != Some(cmp) {
            return None;
        }
        // A conditional br's operands are (cond, false dest, true dest).
        let on_false = br.get_operand(1)?.block()?;
        let on_true = br.get_operand(2)?.block()?;
        match pred {
            IntPredicate::EQ => Some(on_true),
            IntPredicate::NE => Some(on_false),
            _ => None,
        }
    }

    fn predecessors(&self, b: BasicBlock<'ctx>) -> Vec<BasicBlock<'ctx>> {
        let Some(f) = b.get_parent() else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for p in f.get_basic_blocks() {
            if successors(p).contains(&b) && !out.contains(&p) {
                out.push(p);
            }
        }
        out
    }

    /// Inserts the select call before the push; with `shmem_from_runtime`, the form that
    /// also rewrites the push's dynamic shared memory. The outer error is fatal (bad
    /// annotations, LLVM failures), the inner one a launch left untouched.
    fn instrument(
        &mut self,
        launch: &Launch<'ctx>,
        target: &InjectTarget,
        shmem_from_runtime: bool,
    ) -> Result<Result<(), String>, InjectError> {
        let push = launch.push;
        let function = push_function(push).expect("push call in a function");
        let stub = call_site(launch.stub_call).expect("a call or an invoke");
        let arity = stub.count_arguments() as usize;

        // Check every data argument and find its value before the push, before changing
        // anything: a refusal must leave the IR as it was.
        let mut plan = Vec::new();
        for &index in &target.data_args {
            if index >= arity {
                return Err(InjectError::DataArgOutOfRange {
                    kernel: target.kernel.clone(),
                    function: fn_name(Some(function)),
                    index,
                    arity,
                });
            }
            let v = operand_value(launch.stub_call, index as u32).expect("argument operand");
            let BasicValueEnum::IntValue(iv) = v else {
                return Err(InjectError::DataArgNotInteger {
                    kernel: target.kernel.clone(),
                    function: fn_name(Some(function)),
                    index,
                    ty: v.get_type().print_to_string().to_string(),
                });
            };
            let width = iv.get_type().get_bit_width();
            if width > 64 {
                return Ok(Err(format!(
                    "data argument {index} is i{width}, wider than the runtime's i64"
                )));
            }
            if let Err(reason) = self.check_available(launch, v) {
                return Ok(Err(format!("data argument {index}: {reason}")));
            }
            plan.push((index, v, width));
        }

        let shmem_operand = match operand_value(push, 4) {
            Some(BasicValueEnum::IntValue(v)) if v.get_type().get_bit_width() == 64 => Some(v),
            _ => None,
        };
        if shmem_from_runtime && shmem_operand.is_none() {
            return Ok(Err(
                "its dynamic shared memory follows the block, but the push's shared-memory \
                 operand is not an i64"
                    .into(),
            ));
        }
        let timed = self.timing_point(launch);
        let id = self.kernel_id(&target.id);
        let i32t = self.ctx.i32_type();
        let i64t = self.ctx.i64_type();
        let ptr = self.ctx.ptr_type(AddressSpace::default());

        // Allocas at the top of the entry block.
        let entry = function.get_first_basic_block().expect("entry block");
        let first = entry.get_first_instruction().expect("entry instruction");
        self.builder.position_before(&first);
        self.builder.unset_current_debug_location();
        let gxy = self.builder.build_alloca(i64t, "klaraptor.grid_xy")?;
        let gz = self.builder.build_alloca(i32t, "klaraptor.grid_z")?;
        let bxy = self.builder.build_alloca(i64t, "klaraptor.block_xy")?;
        let bz = self.builder.build_alloca(i32t, "klaraptor.block_z")?;
        let launch_axes = u32::from(target.launch_threads.min(3));
        let n_data = plan.len() as u32 + launch_axes;
        let data_ty = i64t.array_type(n_data);
        let data = if n_data == 0 {
            ptr.const_null()
        } else {
            self.builder.build_alloca(data_ty, "klaraptor.data")?
        };
        let shmem_slot = if shmem_from_runtime {
            Some(self.builder.build_alloca(i64t, "klaraptor.shmem")?)
        } else {
            None
        };

        // Before the push: stores, the data array, the call, the loads.
        self.builder.position_before(&push);
        if let Some(loc) = push.get_debug_location() {
            self.builder.set_current_debug_location(loc);
        }
        let slots: [(PointerValue<'ctx>, BasicTypeEnum<'ctx>, u32); 4] = [
            (gxy, i64t.into(), 8),
            (gz, i32t.into(), 4),
            (bxy, i64t.into(), 8),
            (bz, i32t.into(), 4),
        ];
        for (n, (slot, _, align)) in slots.iter().enumerate() {
            let v = operand_value(push, n as u32).expect("push operand");
            let st = self.builder.build_store(*slot, v)?;
            let _ = st.set_alignment(*align);
        }
        if let (Some(slot), Some(v)) = (shmem_slot, shmem_operand) {
            let st = self.builder.build_store(slot, v)?;
            let _ = st.set_alignment(8);
        }
        let mut memo = HashMap::new();
        for (slot, (index, v, width)) in plan.iter().enumerate() {
            let v = self.materialize(launch, *v, &mut memo)?;
            let BasicValueEnum::IntValue(iv) = v else {
                unreachable!("checked above")
            };
            let wide = if *width == 64 {
                iv
            } else if *width == 1 || self.zero_extends(stub, *index) {
                self.builder
                    .build_int_z_extend(iv, i64t, &format!("klaraptor.data{slot}"))?
            } else {
                self.builder
                    .build_int_s_extend(iv, i64t, &format!("klaraptor.data{slot}"))?
            };
            self.store_datum(data_ty, data, slot, wide)?;
        }
        for (k, v) in self
            .launch_threads(push, launch_axes)?
            .into_iter()
            .enumerate()
        {
            let slot = plan.len() + k;
            self.store_datum(data_ty, data, slot, v)?;
        }
        let mut args: Vec<inkwell::values::BasicMetadataValueEnum<'ctx>> = vec![
            id.as_pointer_value().into(),
            i32t.const_int(u64::from(n_data), false).into(),
            data.into(),
            gxy.into(),
            gz.into(),
            bxy.into(),
            bz.into(),
        ];
        let ticket = match (timed, shmem_slot) {
            (Some((shmem, stream, _)), None) => {
                args.push(shmem.into());
                args.push(stream.into());
                let begin = self.begin_fn()?;
                let call = self.builder.build_call(begin, &args, "klaraptor.ticket")?;
                call.try_as_basic_value().basic()
            }
            (Some((_, stream, _)), Some(slot)) => {
                args.push(slot.into());
                args.push(stream.into());
                let begin = self.begin_shmem_fn()?;
                let call = self.builder.build_call(begin, &args, "klaraptor.ticket")?;
                call.try_as_basic_value().basic()
            }
            (None, None) => {
                let select = self.select_fn()?;
                self.builder.build_call(select, &args, "")?;
                None
            }
            (None, Some(slot)) => {
                args.push(slot.into());
                let select = self.select_shmem_fn()?;
                self.builder.build_call(select, &args, "")?;
                None
            }
        };
        let names = [
            "klaraptor.grid_xy.v",
            "klaraptor.grid_z.v",
            "klaraptor.block_xy.v",
            "klaraptor.block_z.v",
        ];
        for (n, (slot, ty, align)) in slots.iter().enumerate() {
            let v = self.builder.build_load(*ty, *slot, names[n])?;
            if let Some(i) = v.as_instruction_value() {
                let _ = i.set_alignment(*align);
            }
            push.set_operand(n as u32, v);
        }
        if let Some(slot) = shmem_slot {
            let v = self.builder.build_load(i64t, slot, "klaraptor.shmem.v")?;
            if let Some(i) = v.as_instruction_value() {
                let _ = i.set_alignment(8);
            }
            push.set_operand(4, v);
        }
        if let (Some((_, _, at)), Some(ticket)) = (timed, ticket) {
            let end = self.end_fn()?;
            self.builder.position_before(&at);
            if let Some(loc) = launch.stub_call.get_debug_location() {
                self.builder.set_current_debug_location(loc);
            }
            self.builder.build_call(end, &[ticket.into()], "")?;
        }
        self.builder.unset_current_debug_location();
        Ok(Ok(()))
    }

    /// Stores the i64 `v` at index `slot` of the data array `data` (of type `data_ty`) at the
    /// builder's position.
    fn store_datum(
        &self,
        data_ty: inkwell::types::ArrayType<'ctx>,
        data: PointerValue<'ctx>,
        slot: usize,
        v: inkwell::values::IntValue<'ctx>,
    ) -> Result<(), InjectError> {
        let i64t = self.ctx.i64_type();
        let at = unsafe {
            self.builder.build_in_bounds_gep(
                data_ty,
                data,
                &[i64t.const_zero(), i64t.const_int(slot as u64, false)],
                &format!("klaraptor.data{slot}.at"),
            )?
        };
        let st = self.builder.build_store(at, v)?;
        let _ = st.set_alignment(8);
        Ok(())
    }

    /// The threads the launch of `push` runs along each of its first `axes` axes, as i64
    /// values built at the builder's position: `gridDim * blockDim` from the push's grid and
    /// block operands (a dim3 packed as `x | y << 32`, and z), each 0 unless the grid and the
    /// block are 1 on every axis beyond `axes` (a 1-D annotation of a launch that also
    /// spreads over y: its threads are not `NX` alone, so it keeps its own shape).
    fn launch_threads(
        &self,
        push: InstructionValue<'ctx>,
        axes: u32,
    ) -> Result<Vec<inkwell::values::IntValue<'ctx>>, InjectError> {
        if axes == 0 {
            return Ok(Vec::new());
        }
        let i64t = self.ctx.i64_type();
        let operand = |n: u32| -> inkwell::values::IntValue<'ctx> {
            match operand_value(push, n) {
                Some(BasicValueEnum::IntValue(v)) => v,
                _ => unreachable!("push_shape_ok checked the push's operands"),
            }
        };
        let b = &self.builder;
        let wide = |v: inkwell::values::IntValue<'ctx>, name: &str| {
            if v.get_type().get_bit_width() == 64 {
                Ok(v)
            } else {
                b.build_int_z_extend(v, i64t, name)
            }
        };
        let low = i64t.const_int(0xffff_ffff, false);
        let shift = i64t.const_int(32, false);
        // [x, y, z] of the grid and of the block, widened to i64.
        let dims = |xy: u32,
                    z: u32,
                    what: &str|
         -> Result<[inkwell::values::IntValue<'ctx>; 3], InjectError> {
            let xy = wide(operand(xy), &format!("klaraptor.{what}_xy.w"))?;
            Ok([
                b.build_and(xy, low, &format!("klaraptor.{what}.x"))?,
                b.build_right_shift(xy, shift, false, &format!("klaraptor.{what}.y"))?,
                wide(operand(z), &format!("klaraptor.{what}.z"))?,
            ])
        };
        let grid = dims(0, 1, "grid")?;
        let block = dims(2, 3, "block")?;
        let one = i64t.const_int(1, false);
        let mut flat = self.ctx.bool_type().const_int(1, false);
        for axis in axes as usize..3 {
            for (v, what) in [(grid[axis], "grid"), (block[axis], "block")] {
                let is_one = b.build_int_compare(
                    IntPredicate::EQ,
                    v,
                    one,
                    &format!("klaraptor.{what}{axis}.one"),
                )?;
                flat = b.build_and(flat, is_one, "klaraptor.flat")?;
            }
        }
        let mut out = Vec::new();
        for axis in 0..axes as usize {
            let n =
                b.build_int_mul(grid[axis], block[axis], &format!("klaraptor.threads{axis}"))?;
            let v = b.build_select(
                flat,
                n,
                i64t.const_zero(),
                &format!("klaraptor.threads{axis}.v"),
            )?;
            out.push(v.into_int_value());
        }
        Ok(out)
    }

    /// The push's shared memory and stream operands and the instruction before which the
    /// call after the launch goes, when there is such a place: after the stub's `call`, or
    /// at the top of an `invoke`'s normal destination that only the stub's block reaches.
    #[allow(clippy::type_complexity)]
    fn timing_point(
        &self,
        launch: &Launch<'ctx>,
    ) -> Option<(
        inkwell::values::IntValue<'ctx>,
        PointerValue<'ctx>,
        InstructionValue<'ctx>,
    )> {
        let push = launch.push;
        let Some(BasicValueEnum::IntValue(shmem)) = operand_value(push, 4) else {
            return None;
        };
        let Some(BasicValueEnum::PointerValue(stream)) = operand_value(push, 5) else {
            return None;
        };
        if shmem.get_type().get_bit_width() != 64 {
            return None;
        }
        if !launch.closed {
            // A path (an exception thrown while the arguments are evaluated) leaves without
            // launching: a call after the launch would not be reached on it.
            return None;
        }
        let stub = launch.stub_call;
        let at = match stub.get_opcode() {
            InstructionOpcode::Call => stub.get_next_instruction()?,
            InstructionOpcode::Invoke => {
                let normal = stub.get_operand(stub.get_num_operands() - 3)?.block()?;
                if self.predecessors(normal) != [stub.get_parent()?] {
                    return None;
                }
                let mut i = normal.get_first_instruction()?;
                while i.get_opcode() == InstructionOpcode::Phi {
                    i = i.get_next_instruction()?;
                }
                i
            }
            _ => return None,
        };
        Some((shmem, stream, at))
    }

    fn zero_extends(&self, stub: CallSiteValue<'ctx>, index: usize) -> bool {
        let kind = Attribute::get_named_enum_kind_id("zeroext");
        let loc = AttributeLoc::Param(index as u32);
        stub.get_enum_attribute(loc, kind).is_some()
            || stub
                .get_called_fn_value()
                .is_some_and(|f| f.get_enum_attribute(loc, kind).is_some())
    }

    /// Where `i` sits relative to the launch: `Some(k)` for an instruction between the push
    /// and the stub call (k orders them), `None` for one that dominates the push.
    fn after_push(&self, launch: &Launch<'ctx>, i: InstructionValue<'ctx>) -> Option<usize> {
        let push_block = launch.push.get_parent()?;
        let ib = i.get_parent()?;
        if ib == push_block {
            let mut seen_push = false;
            for (k, x) in instructions(push_block).enumerate() {
                if x == launch.push {
                    seen_push = true;
                }
                if x == i {
                    return seen_push.then_some(k);
                }
            }
            None
        } else {
            // The test block and the arguments' blocks, in order; anything else the stub
            // call uses dominates the push block (the region is entered from it only).
            let mut base = instructions(push_block).count();
            for b in std::iter::once(launch.test_block).chain(launch.region.iter().copied()) {
                if b == push_block {
                    continue;
                }
                if b == ib {
                    return instructions(b).position(|x| x == i).map(|k| base + k);
                }
                base += instructions(b).count();
            }
            None
        }
    }

    /// The instructions strictly between the push and `until`, in order: the rest of the
    /// push's block, then the test block (when the push is an `invoke`), then the stub's
    /// block.
    fn between(
        &self,
        launch: &Launch<'ctx>,
        until: InstructionValue<'ctx>,
    ) -> Vec<InstructionValue<'ctx>> {
        let mut blocks = Vec::new();
        // Every block of the arguments' evaluation before `until`'s counts, also an arm a
        // path skips: an over-approximation of what runs in between.
        for b in std::iter::once(launch.test_block).chain(launch.region.iter().copied()) {
            if Some(b) != launch.push.get_parent() && !blocks.contains(&b) {
                blocks.push(b);
            }
        }
        let mut out = Vec::new();
        let mut cur = launch.push.get_next_instruction();
        let mut next_block = blocks.into_iter();
        loop {
            match cur {
                Some(i) if i == until => break,
                Some(i) => {
                    out.push(i);
                    cur = i.get_next_instruction();
                }
                None => match next_block.next() {
                    Some(b) => cur = b.get_first_instruction(),
                    None => break,
                },
            }
        }
        out
    }

    /// Whether `v` can be made available before the push (see the module docs).
    fn check_available(
        &self,
        launch: &Launch<'ctx>,
        v: BasicValueEnum<'ctx>,
    ) -> Result<(), String> {
        let Some(i) = v.as_instruction_value() else {
            return Ok(());
        };
        if self.after_push(launch, i).is_none() {
            return Ok(());
        }
        let op = i.get_opcode();
        if i == launch.push {
            return Err("is the push's own result".into());
        }
        // An instruction of a conditional's arm runs before the push on every path, so it
        // must not fault nor have effects there.
        if i.get_parent().is_some_and(|b| launch.arms.contains(&b)) {
            speculable(i)?;
        }
        if op == InstructionOpcode::Phi {
            let (incoming, conds) = self.phi_parts(launch, i)?;
            for v in incoming.into_iter().map(|(v, _)| v).chain(conds) {
                self.check_available(launch, v)?;
            }
            return Ok(());
        }
        if op == InstructionOpcode::Load {
            if i.get_volatile().unwrap_or(true) {
                return Err("is a volatile load after the push".into());
            }
            if i.get_atomic_ordering()
                .is_ok_and(|o| o != inkwell::AtomicOrdering::NotAtomic)
            {
                return Err("is an atomic load after the push".into());
            }
            let addr = operand_value(i, 0).ok_or("load without address")?;
            self.check_available(launch, addr)?;
            return self.check_no_clobber(launch, i, addr);
        }
        if matches!(
            op,
            InstructionOpcode::Call | InstructionOpcode::Invoke | InstructionOpcode::CallBr
        ) {
            let name = callee_name(i).unwrap_or_else(|| "an indirect callee".into());
            return Err(format!(
                "is computed after the push by a call ({name}), which the pass does not move"
            ));
        }
        if !is_pure(op) {
            return Err(format!(
                "is computed after the push by a {op:?} instruction, which the pass does not move"
            ));
        }
        for n in 0..i.get_num_operands() {
            if let Some(v) = operand_value(i, n) {
                self.check_available(launch, v)?;
            }
        }
        Ok(())
    }

    /// Nothing between the push and `load` may write what `load` reads from `addr`.
    ///
    /// When `addr` points into an alloca whose address never escapes ([`address_escapes`]),
    /// only the function itself can write it, through that alloca: calls, and stores or
    /// atomics through other addresses, cannot change it. Otherwise every call must be one
    /// that writes no memory ([`call_writes_no_memory`]) and every store must go to another
    /// alloca.
    fn check_no_clobber(
        &self,
        launch: &Launch<'ctx>,
        load: InstructionValue<'ctx>,
        addr: BasicValueEnum<'ctx>,
    ) -> Result<(), String> {
        let root = address_root(addr);
        let private = is_alloca(root) && !address_escapes(root);
        let touches_root = |x: InstructionValue<'ctx>| {
            (0..x.get_num_operands())
                .filter_map(|n| operand_value(x, n))
                .any(|v| v.is_pointer_value() && address_root(v) == root)
        };
        for x in self.between(launch, load) {
            match x.get_opcode() {
                InstructionOpcode::Store => {
                    let target = operand_value(x, 1).map(address_root);
                    let distinct = is_alloca(root)
                        && target.is_some_and(|t| t != root && (private || is_alloca(t)));
                    if !distinct {
                        return Err(
                            "is loaded after a store between the push and the launch that may \
                             change it"
                                .into(),
                        );
                    }
                }
                InstructionOpcode::Call | InstructionOpcode::Invoke | InstructionOpcode::CallBr => {
                    let name = callee_name(x).unwrap_or_default();
                    if is_harmless_intrinsic(&name) || call_writes_no_memory(x) {
                        continue;
                    }
                    // A private alloca reaches a call only as an argument the callee does not
                    // capture (escape analysis): a call that is not given it cannot write it.
                    if private && !touches_root(x) {
                        continue;
                    }
                    let callee = if name.is_empty() { "indirect" } else { &name };
                    return Err(if is_alloca(root) && !private {
                        format!(
                            "is loaded after a call ({callee}) between the push and the launch, \
                             and the variable's address escapes (it is passed to a call, stored \
                             or converted), so the call may change it; copy the value into a \
                             local variable whose address is not taken before the launch"
                        )
                    } else if private {
                        format!(
                            "is loaded after a call ({callee}) between the push and the launch \
                             that is given the variable's address"
                        )
                    } else {
                        format!(
                            "is loaded through a pointer after a call ({callee}) between the push \
                             and the launch, which may change it; copy the value into a local \
                             variable before the launch"
                        )
                    });
                }
                InstructionOpcode::AtomicRMW | InstructionOpcode::AtomicCmpXchg
                    if private && !touches_root(x) => {}
                InstructionOpcode::Fence if private => {}
                InstructionOpcode::AtomicRMW
                | InstructionOpcode::AtomicCmpXchg
                | InstructionOpcode::Fence
                | InstructionOpcode::VAArg => {
                    return Err(
                        "is loaded after an atomic operation between the push and the launch"
                            .into(),
                    );
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// The incoming values of a `phi` of the arguments' evaluation (a conditional's join:
    /// `c ? a : b`, `MIN(a, b)`, `&&`, `||`), each with the block it comes from; and every
    /// branch condition that decides which (those of the blocks before the join). The pass
    /// computes the `phi` before the push as selects on the conditions under which each edge
    /// into the join is taken ([`Self::edge_condition`]).
    #[allow(clippy::type_complexity)]
    fn phi_parts(
        &self,
        launch: &Launch<'ctx>,
        i: InstructionValue<'ctx>,
    ) -> Result<
        (
            Vec<(BasicValueEnum<'ctx>, BasicBlock<'ctx>)>,
            Vec<BasicValueEnum<'ctx>>,
        ),
        String,
    > {
        let phi = inkwell::values::PhiValue::try_from(i).map_err(|_| "not a phi".to_string())?;
        let join = i.get_parent().ok_or("a phi outside a block")?;
        let pos = launch
            .region
            .iter()
            .position(|b| *b == join)
            .ok_or("is a value joined from several paths outside the launch")?;
        let incoming: Vec<_> = (0..phi.count_incoming())
            .filter_map(|k| phi.get_incoming(k))
            .collect();
        let mut conds = Vec::new();
        for b in &launch.region[..pos] {
            let Some(t) = b.get_terminator() else {
                continue;
            };
            match t.get_opcode() {
                InstructionOpcode::Br if t.get_num_operands() == 3 => {
                    conds.extend(operand_value(t, 0));
                }
                InstructionOpcode::Br => {}
                _ => {
                    return Err(format!(
                        "is a value joined after a {:?}, which the pass does not move",
                        t.get_opcode()
                    ))
                }
            }
        }
        Ok((incoming, conds))
    }

    /// The condition (an `i1` computed before the push) under which the arguments'
    /// evaluation takes the edge `from` → `to`; `memo` keeps each block's condition.
    /// Conjunctions and disjunctions are selects, so that a value computed on a path not
    /// taken cannot make the result poison.
    fn edge_condition(
        &self,
        launch: &Launch<'ctx>,
        from: BasicBlock<'ctx>,
        to: BasicBlock<'ctx>,
        memo: &mut HashMap<InstructionValue<'ctx>, BasicValueEnum<'ctx>>,
        blocks: &mut HashMap<BasicBlock<'ctx>, inkwell::values::IntValue<'ctx>>,
    ) -> Result<inkwell::values::IntValue<'ctx>, InjectError> {
        let i1 = self.ctx.bool_type();
        let at_from = self.block_condition(launch, from, memo, blocks)?;
        let Some(t) = from.get_terminator() else {
            return Ok(at_from);
        };
        if t.get_num_operands() != 3 {
            return Ok(at_from);
        }
        let (Some(c), Some(f), Some(tt)) = (
            operand_value(t, 0),
            t.get_operand(1).and_then(|o| o.block()),
            t.get_operand(2).and_then(|o| o.block()),
        ) else {
            return Ok(at_from);
        };
        if f == tt {
            return Ok(at_from);
        }
        let c = self.materialize(launch, c, memo)?.into_int_value();
        let c = if to == tt {
            c
        } else {
            self.builder.build_not(c, "klaraptor.cond")?
        };
        if at_from.get_zero_extended_constant() == Some(1) {
            return Ok(c);
        }
        Ok(self
            .builder
            .build_select(at_from, c, i1.const_zero(), "klaraptor.cond")?
            .into_int_value())
    }

    /// The condition under which the arguments' evaluation reaches `b`.
    fn block_condition(
        &self,
        launch: &Launch<'ctx>,
        b: BasicBlock<'ctx>,
        memo: &mut HashMap<InstructionValue<'ctx>, BasicValueEnum<'ctx>>,
        blocks: &mut HashMap<BasicBlock<'ctx>, inkwell::values::IntValue<'ctx>>,
    ) -> Result<inkwell::values::IntValue<'ctx>, InjectError> {
        let i1 = self.ctx.bool_type();
        if let Some(c) = blocks.get(&b) {
            return Ok(*c);
        }
        if launch.region.first() == Some(&b) {
            return Ok(i1.const_all_ones());
        }
        let mut acc: Option<inkwell::values::IntValue<'ctx>> = None;
        for p in self.predecessors(b) {
            let e = self.edge_condition(launch, p, b, memo, blocks)?;
            acc = Some(match acc {
                None => e,
                Some(a) => self
                    .builder
                    .build_select(a, i1.const_all_ones(), e, "klaraptor.cond")?
                    .into_int_value(),
            });
        }
        let c = acc.unwrap_or_else(|| i1.const_zero());
        blocks.insert(b, c);
        Ok(c)
    }

    /// `v`, computed before the push (the builder is positioned there). Only called after
    /// [`Self::check_available`] accepted `v`.
    fn materialize(
        &self,
        launch: &Launch<'ctx>,
        v: BasicValueEnum<'ctx>,
        memo: &mut HashMap<InstructionValue<'ctx>, BasicValueEnum<'ctx>>,
    ) -> Result<BasicValueEnum<'ctx>, InjectError> {
        let Some(i) = v.as_instruction_value() else {
            return Ok(v);
        };
        if self.after_push(launch, i).is_none() {
            return Ok(v);
        }
        if let Some(done) = memo.get(&i) {
            return Ok(*done);
        }
        if i.get_opcode() == InstructionOpcode::Phi {
            let (incoming, _) = self
                .phi_parts(launch, i)
                .expect("checked by check_available");
            let join = i.get_parent().expect("checked by check_available");
            let mut blocks = HashMap::new();
            let mut value: Option<BasicValueEnum<'ctx>> = None;
            for (v, from) in incoming {
                let v = self.materialize(launch, v, memo)?;
                value = Some(match value {
                    None => v,
                    Some(other) => {
                        let c = self.edge_condition(launch, from, join, memo, &mut blocks)?;
                        self.builder.build_select(c, v, other, "klaraptor.arg")?
                    }
                });
            }
            let value = value.expect("a phi has incoming values");
            memo.insert(i, value);
            return Ok(value);
        }
        let mut ops = Vec::new();
        for n in 0..i.get_num_operands() {
            ops.push(match operand_value(i, n) {
                Some(o) => Some(self.materialize(launch, o, memo)?),
                None => None,
            });
        }
        let copy = i.explicit_clone();
        for (n, o) in ops.into_iter().enumerate() {
            if let Some(o) = o {
                copy.set_operand(n as u32, o);
            }
        }
        self.builder
            .insert_instruction(&copy, Some("klaraptor.arg"));
        if let Some(loc) = launch.push.get_debug_location() {
            copy.set_debug_location(Some(loc));
        }
        let value = basic_value_of(copy, v);
        memo.insert(i, value);
        Ok(value)
    }

    /// See [`InjectOptions::clang_stubs_via_launch_entry`]. Returns (kernel, stub) for every
    /// stub changed.
    fn reroute_clang_stubs(&mut self) -> Result<Vec<(String, String)>, InjectError> {
        let mut stubs: Vec<(String, String)> = self
            .registered
            .iter()
            .filter(|(_, device)| self.targets.contains_key(device.as_str()))
            .map(|(host, device)| (device.clone(), host.clone()))
            .collect();
        stubs.sort();
        let mut out = Vec::new();
        for (kernel, host) in stubs {
            let Some(stub) = self.module.get_function(&host) else {
                continue;
            };
            let stub_ptr = stub.as_global_value().as_pointer_value();
            let calls: Vec<(InstructionValue<'ctx>, bool)> = stub
                .get_basic_blocks()
                .into_iter()
                .flat_map(instructions)
                .filter_map(|i| {
                    let ptsz = match callee_name(i)?.as_str() {
                        "cudaLaunchKernel" => false,
                        "cudaLaunchKernel_ptsz" => true,
                        _ => return None,
                    };
                    let first = operand_value(i, 0)?;
                    (i.get_opcode() == InstructionOpcode::Call
                        && i.get_num_operands() == 9
                        && first == BasicValueEnum::PointerValue(stub_ptr))
                    .then_some((i, ptsz))
                })
                .collect();
            if calls.is_empty() {
                continue;
            }
            let slot = self.module.add_global(
                self.ctx.ptr_type(AddressSpace::default()),
                None,
                &format!("klaraptor.handle.{}", out.len()),
            );
            slot.set_initializer(&self.ctx.ptr_type(AddressSpace::default()).const_null());
            slot.set_linkage(Linkage::Private);
            slot.set_alignment(8);
            for (call, ptsz) in calls {
                let helper = self.launch_helper(ptsz)?;
                let mut args: Vec<inkwell::values::BasicMetadataValueEnum<'ctx>> = Vec::new();
                args.push(slot.as_pointer_value().into());
                for n in 0..8 {
                    args.push(operand_value(call, n).expect("call argument").into());
                }
                self.builder.position_before(&call);
                if let Some(loc) = call.get_debug_location() {
                    self.builder.set_current_debug_location(loc);
                }
                let new = self.builder.build_call(helper, &args, "klaraptor.launch")?;
                self.builder.unset_current_debug_location();
                let new_value = new
                    .try_as_basic_value()
                    .basic()
                    .expect("the helper returns i32");
                call.replace_all_uses_with(
                    &new_value
                        .as_instruction_value()
                        .expect("a call instruction"),
                );
                call.erase_from_basic_block();
            }
            out.push((kernel, host));
        }
        Ok(out)
    }

    /// A declaration of the CUDA runtime function `name` of type `ty`.
    fn runtime_fn(
        &self,
        name: &str,
        ty: inkwell::types::FunctionType<'ctx>,
    ) -> Result<FunctionValue<'ctx>, InjectError> {
        self.declared(name, ty)
            .map_err(|ty| InjectError::RuntimeDeclConflict {
                name: name.into(),
                ty,
            })
    }

    /// `i32 @klaraptor.launch(ptr slot, ptr fn, i64 gxy, i32 gz, i64 bxy, i32 bz, ptr args,
    /// i64 shmem, ptr stream)` (or `klaraptor.launch_ptsz`), defined once per module:
    ///
    /// ```text
    /// h = atomic load *slot
    /// if h == null: if __cudaGetKernel(&h, fn) != 0: return cudaLaunchKernel(fn, …)
    ///               atomic store h -> *slot
    /// return __cudaLaunchKernel(h, …)
    /// ```
    fn launch_helper(&mut self, ptsz: bool) -> Result<FunctionValue<'ctx>, InjectError> {
        let name = if ptsz {
            "klaraptor.launch_ptsz"
        } else {
            "klaraptor.launch"
        };
        if let Some(f) = self.module.get_function(name) {
            return Ok(f);
        }
        let ctx = self.ctx;
        let (ptr, i32t, i64t) = (
            ctx.ptr_type(AddressSpace::default()),
            ctx.i32_type(),
            ctx.i64_type(),
        );
        let launch_params = [
            ptr.into(),
            i64t.into(),
            i32t.into(),
            i64t.into(),
            i32t.into(),
            ptr.into(),
            i64t.into(),
            ptr.into(),
        ];
        let launch_ty = i32t.fn_type(&launch_params, false);
        let (public, entry_name) = if ptsz {
            ("cudaLaunchKernel_ptsz", "__cudaLaunchKernel_ptsz")
        } else {
            ("cudaLaunchKernel", "__cudaLaunchKernel")
        };
        let public = self.runtime_fn(public, launch_ty)?;
        let entry_fn = self.runtime_fn(entry_name, launch_ty)?;
        let get_kernel = self.runtime_fn(
            "__cudaGetKernel",
            i32t.fn_type(&[ptr.into(), ptr.into()], false),
        )?;
        let mut params = vec![ptr.into()];
        params.extend(launch_params);
        let f =
            self.module
                .add_function(name, i32t.fn_type(&params, false), Some(Linkage::Internal));
        let b = &self.builder;
        b.unset_current_debug_location();
        let entry = ctx.append_basic_block(f, "entry");
        let get = ctx.append_basic_block(f, "get");
        let keep = ctx.append_basic_block(f, "keep");
        let launch = ctx.append_basic_block(f, "launch");
        let legacy = ctx.append_basic_block(f, "legacy");
        let p = |n: u32| f.get_nth_param(n).expect("helper parameter");
        let rest: Vec<inkwell::values::BasicMetadataValueEnum<'ctx>> =
            (2..9).map(|n| p(n).into()).collect();

        b.position_at_end(entry);
        let tmp = b.build_alloca(ptr, "handle")?;
        let slot = p(0).into_pointer_value();
        let h = b.build_load(ptr, slot, "h")?;
        let hi = h.as_instruction_value().expect("load");
        hi.set_alignment(8)
            .map_err(|e| InjectError::Builder(e.to_string()))?;
        hi.set_atomic_ordering(inkwell::AtomicOrdering::Monotonic)
            .map_err(|e| InjectError::Builder(e.to_string()))?;
        let none = b.build_is_null(h.into_pointer_value(), "none")?;
        b.build_conditional_branch(none, get, launch)?;

        b.position_at_end(get);
        let rc = b
            .build_call(get_kernel, &[tmp.into(), p(1).into()], "rc")?
            .try_as_basic_value()
            .basic()
            .expect("i32");
        let ok = b.build_int_compare(
            IntPredicate::EQ,
            rc.into_int_value(),
            i32t.const_zero(),
            "ok",
        )?;
        b.build_conditional_branch(ok, keep, legacy)?;

        b.position_at_end(keep);
        let got = b.build_load(ptr, tmp, "got")?;
        let st = b.build_store(slot, got)?;
        st.set_alignment(8)
            .map_err(|e| InjectError::Builder(e.to_string()))?;
        st.set_atomic_ordering(inkwell::AtomicOrdering::Monotonic)
            .map_err(|e| InjectError::Builder(e.to_string()))?;
        b.build_unconditional_branch(launch)?;

        b.position_at_end(launch);
        let handle = b.build_phi(ptr, "kernel")?;
        handle.add_incoming(&[(&h, entry), (&got, keep)]);
        let mut args = vec![handle.as_basic_value().into()];
        args.extend(rest.iter().copied());
        let r = b
            .build_call(entry_fn, &args, "r")?
            .try_as_basic_value()
            .basic()
            .expect("i32");
        b.build_return(Some(&r))?;

        b.position_at_end(legacy);
        let mut args = vec![p(1).into()];
        args.extend(rest.iter().copied());
        let r = b
            .build_call(public, &args, "r")?
            .try_as_basic_value()
            .basic()
            .expect("i32");
        b.build_return(Some(&r))?;
        Ok(f)
    }

    /// The parameters the two entry points before a launch share: the kernel id, the
    /// number of data values, the data array and the four dim slots.
    fn select_params(&self) -> Vec<inkwell::types::BasicMetadataTypeEnum<'ctx>> {
        let ptr: inkwell::types::BasicMetadataTypeEnum<'ctx> =
            self.ctx.ptr_type(AddressSpace::default()).into();
        vec![ptr, self.ctx.i32_type().into(), ptr, ptr, ptr, ptr, ptr]
    }

    /// `void @klaraptor_select(ptr, i32, ptr, ptr, ptr, ptr, ptr)`.
    fn select_fn(&mut self) -> Result<FunctionValue<'ctx>, InjectError> {
        if let Some(f) = self.select {
            return Ok(f);
        }
        let ty = self.ctx.void_type().fn_type(&self.select_params(), false);
        let f = self.declare(SELECT_FN, ty)?;
        self.select = Some(f);
        Ok(f)
    }

    /// `i64 @klaraptor_launch_begin(ptr, i32, ptr, ptr, ptr, ptr, ptr, i64, ptr)`.
    fn begin_fn(&mut self) -> Result<FunctionValue<'ctx>, InjectError> {
        if let Some(f) = self.begin {
            return Ok(f);
        }
        let i64t = self.ctx.i64_type();
        let mut params = self.select_params();
        params.push(i64t.into());
        params.push(self.ctx.ptr_type(AddressSpace::default()).into());
        let f = self.declare(BEGIN_FN, i64t.fn_type(&params, false))?;
        self.begin = Some(f);
        Ok(f)
    }

    /// `void @klaraptor_select_shmem(ptr, i32, ptr, ptr, ptr, ptr, ptr, ptr)`.
    fn select_shmem_fn(&mut self) -> Result<FunctionValue<'ctx>, InjectError> {
        if let Some(f) = self.select_shmem {
            return Ok(f);
        }
        let mut params = self.select_params();
        params.push(self.ctx.ptr_type(AddressSpace::default()).into());
        let ty = self.ctx.void_type().fn_type(&params, false);
        let f = self.declare(SELECT_SHMEM_FN, ty)?;
        self.select_shmem = Some(f);
        Ok(f)
    }

    /// `i64 @klaraptor_launch_begin_shmem(ptr, i32, ptr, ptr, ptr, ptr, ptr, ptr, ptr)`.
    fn begin_shmem_fn(&mut self) -> Result<FunctionValue<'ctx>, InjectError> {
        if let Some(f) = self.begin_shmem {
            return Ok(f);
        }
        let ptr = self.ctx.ptr_type(AddressSpace::default());
        let mut params = self.select_params();
        params.push(ptr.into());
        params.push(ptr.into());
        let f = self.declare(BEGIN_SHMEM_FN, self.ctx.i64_type().fn_type(&params, false))?;
        self.begin_shmem = Some(f);
        Ok(f)
    }

    /// `void @klaraptor_launch_end(i64)`.
    fn end_fn(&mut self) -> Result<FunctionValue<'ctx>, InjectError> {
        if let Some(f) = self.end {
            return Ok(f);
        }
        let ty = self
            .ctx
            .void_type()
            .fn_type(&[self.ctx.i64_type().into()], false);
        let f = self.declare(END_FN, ty)?;
        self.end = Some(f);
        Ok(f)
    }

    /// A declaration of the runtime's entry point `name` of type `ty` (the module's own, or a
    /// new one).
    fn declare(
        &self,
        name: &str,
        ty: inkwell::types::FunctionType<'ctx>,
    ) -> Result<FunctionValue<'ctx>, InjectError> {
        self.declared(name, ty)
            .map_err(|other| InjectError::SelectConflict(name.into(), other))
    }

    /// `name` declared with type `ty`: the module's declaration, or a new one; `Err` with the
    /// other type the module declares it with.
    fn declared(
        &self,
        name: &str,
        ty: inkwell::types::FunctionType<'ctx>,
    ) -> Result<FunctionValue<'ctx>, String> {
        match self.module.get_function(name) {
            Some(f) if f.get_type() == ty => Ok(f),
            Some(f) => Err(f.get_type().print_to_string().to_string()),
            None => Ok(self.module.add_function(name, ty, Some(Linkage::External))),
        }
    }

    /// A private unnamed_addr constant C string holding `id`, one per id.
    fn kernel_id(&mut self, id: &str) -> GlobalValue<'ctx> {
        if let Some(g) = self.ids.get(id) {
            return *g;
        }
        let init = self.ctx.const_string(id.as_bytes(), true);
        let g = self.module.add_global(
            init.get_type(),
            None,
            &format!("klaraptor.id.{}", self.ids.len()),
        );
        g.set_initializer(&init);
        g.set_linkage(Linkage::Private);
        g.set_unnamed_addr(true);
        g.set_constant(true);
        g.set_alignment(1);
        self.ids.insert(id.to_string(), g);
        g
    }
}

/// A mangled name with the marks of internal linkage made equal: each anonymous namespace
/// (`12_GLOBAL__N_1` as libclang mangles it, `36_GLOBAL__N__b4f79eb6_4_s_cu_d1dbb2e0` as nvcc
/// renames it) becomes one token, and the `L` of an internal-linkage name (`_ZL1kPfi`) goes.
pub fn linkage_neutral(m: &str) -> String {
    const ANON: &str = "_GLOBAL__N_";
    let b = m.as_bytes();
    let mut out = String::with_capacity(m.len());
    let mut i = 0;
    // Whether a digit here may start a length (not in the middle of another number).
    let mut may_start = true;
    while i < b.len() {
        if b[i].is_ascii_digit() && may_start {
            let end = i + b[i..].iter().take_while(|c| c.is_ascii_digit()).count();
            let len: usize = m[i..end].parse().unwrap_or(0);
            if m[end..].starts_with(ANON) && end + len <= m.len() {
                out.push_str("(anonymous)");
                i = end + len;
                continue;
            }
            // A source name: copied whole, so that its own characters are not taken for
            // marks, its length without leading zeros (libclang writes the name after an
            // anonymous namespace's as `01j`).
            if len > 0 && end + len <= m.len() {
                out.push_str(&len.to_string());
                out.push_str(&m[end..end + len]);
                i = end + len;
                continue;
            }
        }
        if b[i] == b'L' && b.get(i + 1).is_some_and(u8::is_ascii_digit) {
            i += 1;
            may_start = true;
            continue;
        }
        may_start = !b[i].is_ascii_digit();
        out.push(b[i] as char);
        i += 1;
    }
    out
}

/// The name of the function a `__cudaRegisterFunction` operand points to.
fn host_fn_name(v: BasicValueEnum<'_>) -> Option<String> {
    let BasicValueEnum::PointerValue(p) = v else {
        return None;
    };
    let name = p.get_name().to_str().ok()?;
    (!name.is_empty()).then(|| name.to_string())
}

/// `copy` (a clone of the instruction behind `like`) as a value of `like`'s kind.
fn basic_value_of<'ctx>(
    copy: InstructionValue<'ctx>,
    like: BasicValueEnum<'ctx>,
) -> BasicValueEnum<'ctx> {
    use inkwell::values::AsValueRef;
    debug_assert_eq!(
        copy.get_type().print_to_string(),
        like.get_type().print_to_string()
    );
    // SAFETY: `copy` is a live instruction producing a first-class value of the same type
    // as `like`; `BasicValueEnum::new` classifies it by that type.
    unsafe { BasicValueEnum::new(copy.as_value_ref()) }
}

// ---------------------------------------------------------------------------------------
// Dynamic shared memory

/// `file:line` of `i`, when the module has debug information.
fn debug_location(i: InstructionValue<'_>) -> Option<String> {
    use inkwell::llvm_sys::debuginfo::{
        LLVMDIFileGetFilename, LLVMDILocationGetLine, LLVMDILocationGetScope, LLVMDIScopeGetFile,
        LLVMInstructionGetDebugLoc,
    };
    // SAFETY: `i` is a live instruction; each call takes the metadata the previous one
    // returned (checked for null), and the file name is `len` bytes owned by the context.
    unsafe {
        let loc = LLVMInstructionGetDebugLoc(i.as_value_ref());
        if loc.is_null() {
            return None;
        }
        let line = LLVMDILocationGetLine(loc);
        let scope = LLVMDILocationGetScope(loc);
        if scope.is_null() {
            return None;
        }
        let file = LLVMDIScopeGetFile(scope);
        if file.is_null() {
            return None;
        }
        let mut len = 0;
        let name = LLVMDIFileGetFilename(file, &mut len);
        if name.is_null() {
            return None;
        }
        let bytes = std::slice::from_raw_parts(name.cast::<u8>(), len as usize);
        Some(format!("{}:{line}", String::from_utf8_lossy(bytes)))
    }
}

/// An identity for a value.
fn value_id(v: BasicValueEnum<'_>) -> usize {
    v.as_value_ref() as usize
}

/// `v` without integer casts (`zext`, `sext`, `trunc`): the amount `b * sizeof(float)` is
/// `mul (sext b), 4`.
fn strip_int_casts(v: BasicValueEnum<'_>) -> BasicValueEnum<'_> {
    let mut v = v;
    while let Some(i) = v.as_instruction_value() {
        if !matches!(
            i.get_opcode(),
            InstructionOpcode::ZExt | InstructionOpcode::SExt | InstructionOpcode::Trunc
        ) {
            break;
        }
        match operand_value(i, 0) {
            Some(x) => v = x,
            None => break,
        }
    }
    v
}

fn int_constant(v: BasicValueEnum<'_>) -> Option<i64> {
    match v {
        BasicValueEnum::IntValue(c) if c.is_const() => c.get_sign_extended_constant(),
        _ => None,
    }
}

/// The instructions that use the address `root` or a `getelementptr` of it, with the
/// operand position of that address.
fn address_users(root: BasicValueEnum<'_>) -> Vec<(InstructionValue<'_>, u32)> {
    let mut out = Vec::new();
    let mut stack = vec![root];
    let mut seen = BTreeSet::new();
    while let Some(p) = stack.pop() {
        if !seen.insert(value_id(p)) {
            continue;
        }
        let mut u = p.get_first_use();
        while let Some(use_) = u {
            u = use_.get_next_use();
            let Some(user) = as_instruction(use_.get_user()) else {
                continue;
            };
            for n in 0..user.get_num_operands() {
                if operand_value(user, n) != Some(p) {
                    continue;
                }
                if user.get_opcode() == InstructionOpcode::GetElementPtr && n == 0 {
                    if let Ok(g) = BasicValueEnum::try_from(user.as_any_value_enum()) {
                        stack.push(g);
                    }
                } else {
                    out.push((user, n));
                }
            }
        }
    }
    out
}

/// Whether the call `i` only reads through its argument `n` (`readonly` or `readnone` on the
/// callee's parameter or the call site's: the source of `llvm.memcpy`).
fn param_read_only(i: InstructionValue<'_>, n: u32) -> bool {
    let Some(site) = call_site(i) else {
        return false;
    };
    if n >= site.count_arguments() {
        return false;
    }
    let loc = AttributeLoc::Param(n);
    ["readonly", "readnone"].into_iter().any(|a| {
        let kind = Attribute::get_named_enum_kind_id(a);
        site.get_enum_attribute(loc, kind).is_some()
            || site
                .get_called_fn_value()
                .is_some_and(|f| f.get_enum_attribute(loc, kind).is_some())
    })
}

/// The instructions that may write the memory of the alloca `root`: stores to it, and the
/// calls it is given to (`llvm.memcpy`, a constructor), but not `llvm.lifetime.*`.
fn writers(root: BasicValueEnum<'_>) -> Vec<InstructionValue<'_>> {
    address_users(root)
        .into_iter()
        .filter(|&(i, n)| match i.get_opcode() {
            InstructionOpcode::Store => n == 1,
            InstructionOpcode::Call | InstructionOpcode::Invoke => {
                !callee_name(i).is_some_and(|c| is_harmless_intrinsic(&c)) && !param_read_only(i, n)
            }
            _ => false,
        })
        .map(|(i, _)| i)
        .collect()
}

/// A local variable read by `load` that holds one value: the load reads an alloca (not
/// through a `getelementptr`) whose address does not escape and which is stored to once. Two
/// loads of such a variable read the same value (a parameter's spill at -O0, `int b = …;`).
fn written_once(load: InstructionValue<'_>) -> Option<BasicValueEnum<'_>> {
    if load.get_opcode() != InstructionOpcode::Load {
        return None;
    }
    let addr = operand_value(load, 0)?;
    if !is_alloca(addr) || address_escapes(addr) {
        return None;
    }
    let w = writers(addr);
    (w.len() == 1 && w[0].get_opcode() == InstructionOpcode::Store).then_some(addr)
}

/// What identifies the value of `v` for comparing a block dimension with a term of the
/// shared memory: its local variable when it is read from one written once, else itself.
fn value_key(v: BasicValueEnum<'_>) -> usize {
    let v = strip_int_casts(v);
    match v.as_instruction_value().and_then(written_once) {
        Some(var) => value_id(var),
        None => value_id(v),
    }
}

/// Whether `v` is a constant other than a global variable (constants are uniqued: an `i32 1`
/// of the block and one of the shared memory are the same value, and say nothing).
fn is_plain_constant(v: BasicValueEnum<'_>) -> bool {
    use inkwell::llvm_sys::core::{LLVMIsAConstant, LLVMIsAGlobalVariable};
    // SAFETY: `v` is a live value; the two only inspect its kind.
    unsafe {
        !LLVMIsAConstant(v.as_value_ref()).is_null()
            && LLVMIsAGlobalVariable(v.as_value_ref()).is_null()
    }
}

/// The operands of `i` that are values computed before it: a call's arguments (not its
/// callee), every operand of other instructions.
fn value_operands(i: InstructionValue<'_>) -> Vec<BasicValueEnum<'_>> {
    let n = match call_site(i) {
        Some(site) => site.count_arguments(),
        None => i.get_num_operands(),
    };
    (0..n).filter_map(|k| operand_value(i, k)).collect()
}

/// Everything `v` may be computed from, as identities (into `seen`): the function's
/// arguments, global variables, local variables (allocas), and the instructions between,
/// through operands, loads (to the memory they read) and what writes that memory (stores,
/// calls given it). Constants say nothing and are left out.
fn sources(v: BasicValueEnum<'_>, seen: &mut BTreeSet<usize>) {
    if is_plain_constant(v) || !seen.insert(value_id(v)) {
        return;
    }
    let Some(i) = v.as_instruction_value() else {
        return;
    };
    if i.get_opcode() != InstructionOpcode::Alloca {
        for x in value_operands(i) {
            sources(x, seen);
        }
        return;
    }
    for w in writers(v) {
        if w.get_opcode() == InstructionOpcode::Store {
            if let Some(x) = operand_value(w, 0) {
                sources(x, seen);
            }
            continue;
        }
        // A call given the variable (a constructor, a copy): what it is given.
        seen.insert(w.as_value_ref() as usize);
        for x in value_operands(w) {
            sources(x, seen);
        }
    }
}

/// What the block of a launch is made of ([`block_dims`]).
struct BlockDims<'ctx> {
    /// The values its `dim3` was constructed from (x, y, z).
    values: [BasicValueEnum<'ctx>; 3],
    /// The `dim3` variables holding it (the constructed one and its copies), each written
    /// once: a load of a field of one (`block.x`) is that dimension.
    dim3s: Vec<BasicValueEnum<'ctx>>,
}

/// The dimension of the block `v` reads when it loads a field of one of `dim3s`
/// (`block.x`: a load of the variable itself or of `getelementptr %struct.dim3, 0, k`).
fn dim3_field(v: BasicValueEnum<'_>, dim3s: &[BasicValueEnum<'_>]) -> Option<usize> {
    let load = v.as_instruction_value()?;
    if load.get_opcode() != InstructionOpcode::Load || !v.is_int_value() {
        return None;
    }
    let addr = operand_value(load, 0)?;
    if dim3s.contains(&addr) {
        return Some(0);
    }
    let gep = addr.as_instruction_value()?;
    if gep.get_opcode() != InstructionOpcode::GetElementPtr
        || !dim3s.contains(&operand_value(gep, 0)?)
        || gep.get_num_operands() != 3
        || int_constant(operand_value(gep, 1)?) != Some(0)
    {
        return None;
    }
    let k = int_constant(operand_value(gep, 2)?)?;
    usize::try_from(k).ok().filter(|k| *k < 3)
}

/// The values the block of the launch pushed by `push` was constructed from (x, y, z): at
/// -O0 the push's block operands are loaded from a temporary copied (`llvm.memcpy`, maybe
/// through other copies) from a `dim3` built by its constructor. `None` when the block is
/// made another way (a field written after the constructor, a `dim3` returned by a call).
fn block_dims(push: InstructionValue<'_>) -> Option<BlockDims<'_>> {
    let xy = operand_value(push, 2)?.as_instruction_value()?;
    let z = operand_value(push, 3)?.as_instruction_value()?;
    if xy.get_opcode() != InstructionOpcode::Load || z.get_opcode() != InstructionOpcode::Load {
        return None;
    }
    let mut root = address_root(operand_value(xy, 0)?);
    if address_root(operand_value(z, 0)?) != root || !is_alloca(root) {
        return None;
    }
    // The `dim3` variables the block is copied from (not the `{i64, i32}` the push reads).
    let mut dim3s = Vec::new();
    for _ in 0..8 {
        let w = writers(root);
        let [only] = w.as_slice() else {
            return None;
        };
        let name = callee_name(*only)?;
        let site = call_site(*only)?;
        let arg = |n: u32| operand_value(*only, n);
        if name.starts_with("llvm.memcpy") || name.starts_with("llvm.memmove") {
            if arg(0).map(address_root) != Some(root) {
                return None;
            }
            root = address_root(arg(1)?);
            if !is_alloca(root) {
                return None;
            }
            dim3s.push(root);
        } else if name.contains("4dim3C") && site.count_arguments() == 4 {
            if arg(0) != Some(root) {
                return None;
            }
            return Some(BlockDims {
                values: [arg(1)?, arg(2)?, arg(3)?],
                dim3s,
            });
        } else {
            return None;
        }
    }
    None
}

/// `v` as a formula of the block's dimensions, whose values are identified by `dims`
/// ([`value_key`]; `None` for a constant dimension or one equal to another) or read from the
/// fields of `dim3s` ([`dim3_field`]): constants, `+ - *`, shifts left and divisions by
/// positive constants.
fn shmem_formula(
    v: BasicValueEnum<'_>,
    dims: &[Option<usize>; 3],
    dim3s: &[BasicValueEnum<'_>],
    depth: usize,
) -> Option<klaraptor_spec::expr::IntExpr> {
    use klaraptor_spec::expr::{IntExpr, IntOp};
    if depth > 32 {
        return None;
    }
    let v = strip_int_casts(v);
    if let Some(c) = int_constant(v) {
        return Some(IntExpr::Lit(c));
    }
    let key = value_key(v);
    if let Some(d) = dims
        .iter()
        .position(|d| *d == Some(key))
        .or_else(|| dim3_field(v, dim3s))
    {
        return Some(IntExpr::Var(klaraptor_spec::expr::BLOCK_VARS[d].into()));
    }
    let i = v.as_instruction_value()?;
    if let Some(var) = written_once(i) {
        // `size_t shmem = b * sizeof(float); k<<<g, b, shmem>>>`: what the variable holds.
        let store = writers(var).into_iter().next()?;
        return shmem_formula(operand_value(store, 0)?, dims, dim3s, depth + 1);
    }
    let a = operand_value(i, 0)?;
    let b = operand_value(i, 1)?;
    let sub = |x| shmem_formula(x, dims, dim3s, depth + 1).map(Box::new);
    let op = match i.get_opcode() {
        InstructionOpcode::Add => IntOp::Add,
        InstructionOpcode::Sub => IntOp::Sub,
        InstructionOpcode::Mul => IntOp::Mul,
        InstructionOpcode::Shl => {
            let k = int_constant(b).filter(|k| (0..32).contains(k))?;
            return Some(IntExpr::Bin(
                IntOp::Mul,
                sub(a)?,
                Box::new(IntExpr::Lit(1 << k)),
            ));
        }
        InstructionOpcode::UDiv | InstructionOpcode::SDiv => {
            let k = int_constant(b).filter(|k| *k > 0)?;
            return Some(IntExpr::Bin(
                IntOp::FloorDiv,
                sub(a)?,
                Box::new(IntExpr::Lit(k)),
            ));
        }
        _ => return None,
    };
    Some(IntExpr::Bin(op, sub(a)?, sub(b)?))
}

/// How the dynamic shared memory of the launch pushed by `push` relates to its block (see the
/// module docs). Reads the unoptimised IR the driver gives the pass; on other IR it may
/// answer [`ShmemUse::Unreadable`] where -O0 would have read a formula, never the other way.
pub fn shmem_use(push: InstructionValue<'_>) -> ShmemUse {
    let Some(shmem) = operand_value(push, 4) else {
        return ShmemUse::Fixed;
    };
    if int_constant(shmem).is_some() {
        return ShmemUse::Fixed;
    }
    let mut of_block = BTreeSet::new();
    for n in [2, 3] {
        if let Some(v) = operand_value(push, n) {
            sources(v, &mut of_block);
        }
    }
    let mut of_shmem = BTreeSet::new();
    sources(shmem, &mut of_shmem);
    // The shared memory's own value is not a source of the block's, but every value it is
    // computed from counts.
    of_shmem.remove(&value_id(shmem));
    if of_shmem.is_disjoint(&of_block) {
        return ShmemUse::Fixed;
    }
    let Some(dims) = block_dims(push) else {
        return ShmemUse::Unreadable(
            "its dynamic shared memory is computed from values the block is made of, and the \
             pass cannot tell which of the block's dimensions they are"
                .into(),
        );
    };
    let mut keys: [Option<usize>; 3] = dims.values.map(|d| {
        int_constant(strip_int_casts(d))
            .is_none()
            .then(|| value_key(d))
    });
    for a in 0..3 {
        for b in 0..3 {
            if a != b && keys[a].is_some() && keys[a] == keys[b] {
                keys = [None; 3];
            }
        }
    }
    match shmem_formula(shmem, &keys, &dims.dim3s, 0) {
        // A formula negative (or overflowing) at a candidate shape is no amount to pass.
        Some(f) if !f.vars().is_empty() => match klaraptor_spec::annotations::check_shmem(&f, 3) {
            Ok(()) => ShmemUse::Follows(f.to_string()),
            Err(why) => ShmemUse::Unreadable(format!(
                "its dynamic shared memory reads as {f}, which klaraptor cannot use: {why}"
            )),
        },
        _ => ShmemUse::Unreadable(
            "its dynamic shared memory is computed from values the block is made of, in a way \
             the pass cannot write as a formula of the block's dimensions"
                .into(),
        ),
    }
}

#[cfg(test)]
mod linkage_tests {
    use super::linkage_neutral as n;

    #[test]
    fn internal_linkage_names_compare_equal_to_their_registrations() {
        // static: libclang's mangling against the device name nvcc registers.
        assert_eq!(n("_ZL1kPfi"), n("_Z1kPfi"));
        // An anonymous namespace: libclang's against nvcc's renamed one.
        assert_eq!(
            n("_ZN12_GLOBAL__N_11jEPfi"),
            n("_ZN36_GLOBAL__N__b4f79eb6_4_s_cu_d1dbb2e01jEPfi")
        );
        // As libclang mangles it here (a leading zero in the kernel's source name).
        assert_eq!(
            n("_ZN12_GLOBAL__N_101jEPfi"),
            n("_ZN36_GLOBAL__N__c152d276_4_s_cu_d1dbb2e01jEPfi")
        );
        // Different kernels stay different.
        assert_ne!(n("_ZL1kPfi"), n("_Z1jPfi"));
        assert_ne!(n("_ZN12_GLOBAL__N_11jEPfi"), n("_ZN12_GLOBAL__N_11kEPfi"));
        // A name that happens to hold an L before a digit inside a source name is copied.
        assert_eq!(n("_Z3L2kPfi"), "_Z3L2kPfi");
    }
}
