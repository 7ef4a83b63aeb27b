//! The request the runtime shim passes to `klaraptor_collect`, checked and copied into Rust
//! values (see `runtime-shim/include/klaraptor_collect.h`).

use crate::driver::{Kernel, Stream};
use crate::error::{Error, Result};
use crate::sys::request::{klaraptor_collect_request, KLARAPTOR_COLLECT_ABI};
use std::ffi::{c_char, c_int, c_void, CStr};
use std::path::PathBuf;

/// One launch shape: the block and the grid the kernel's grid formula gives for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    pub block: [u32; 3],
    pub grid: [u32; 3],
}

type LaunchFn = unsafe extern "C" fn(*mut c_void, c_int) -> c_int;
type ProgressFn = unsafe extern "C" fn(*mut c_void, c_int, c_int);

/// A checked collect request.
#[derive(Debug)]
pub struct Request {
    pub kernel_id: String,
    pub kernel_name: String,
    /// The launch's data-parameter values.
    pub data: Vec<i64>,
    pub shapes: Vec<Shape>,
    pub kernel: Kernel,
    pub stream: Stream,
    pub dynamic_smem: u64,
    pub runs: u32,
    pub warmup: u32,
    pub out_path: PathBuf,
    launch: LaunchFn,
    /// ABI 2: the shim's progress report (None: none, or an ABI 1 request).
    progress: Option<ProgressFn>,
    launch_ctx: *mut c_void,
}

impl Request {
    /// Checks and copies a request.
    ///
    /// # Safety
    /// `req` is null or points to a request laid out as in `klaraptor_collect.h` whose
    /// non-null pointers are valid for the counts it gives (strings NUL-terminated).
    pub unsafe fn from_raw(req: *const klaraptor_collect_request) -> Result<Self> {
        let bad = |what: String| Error::Unusable(format!("invalid collect request: {what}"));
        if req.is_null() {
            return Err(bad("the request pointer is NULL".into()));
        }
        // SAFETY: the caller's contract; `abi_version` is the first field in every ABI.
        let abi = unsafe { std::ptr::addr_of!((*req).abi_version).read() };
        if !(1..=KLARAPTOR_COLLECT_ABI as c_int).contains(&abi) {
            return Err(bad(format!(
                "abi_version is {abi}, this collector implements 1 to {KLARAPTOR_COLLECT_ABI}; \
                 rebuild the profiling variant and the collector from the same klaraptor"
            )));
        }
        // An ABI 1 request ends before `progress`: copy the fields it has, field by field
        // through the raw pointer, so that nothing past its end is read.
        let mut copy = klaraptor_collect_request {
            abi_version: abi,
            kernel_id: std::ptr::null(),
            kernel_name: std::ptr::null(),
            n_data: 0,
            data: std::ptr::null(),
            n_shapes: 0,
            blocks: std::ptr::null(),
            grids: std::ptr::null(),
            kernel: std::ptr::null_mut(),
            stream: std::ptr::null_mut(),
            dynamic_smem: 0,
            runs: 0,
            warmup: 0,
            out_path: std::ptr::null(),
            ctx: std::ptr::null_mut(),
            launch: None,
            progress: None,
        };
        // SAFETY: every field read here exists in a request of ABI `abi` (the caller's
        // contract); `addr_of!` makes no reference to the whole struct.
        unsafe {
            macro_rules! take {
                ($($f:ident),*) => { $(copy.$f = std::ptr::addr_of!((*req).$f).read();)* };
            }
            take!(
                kernel_id,
                kernel_name,
                n_data,
                data,
                n_shapes,
                blocks,
                grids,
                kernel,
                stream,
                dynamic_smem,
                runs,
                warmup,
                out_path,
                ctx,
                launch
            );
            if abi >= 2 {
                take!(progress);
            }
        }
        let r = &copy;
        let n_shapes = count(r.n_shapes, "n_shapes").map_err(bad)?;
        let n_data = count(r.n_data, "n_data").map_err(bad)?;
        // SAFETY (the three slices): the caller's contract, checked for NULL by `slice`.
        let data = unsafe { slice(r.data, n_data, "data") }
            .map_err(bad)?
            .to_vec();
        let blocks = unsafe { slice(r.blocks, 3 * n_shapes, "blocks") }.map_err(bad)?;
        let grids = unsafe { slice(r.grids, 3 * n_shapes, "grids") }.map_err(bad)?;
        let shapes = (0..n_shapes)
            .map(|i| Shape {
                block: [blocks[3 * i], blocks[3 * i + 1], blocks[3 * i + 2]],
                grid: [grids[3 * i], grids[3 * i + 1], grids[3 * i + 2]],
            })
            .collect();
        let runs = u32::try_from(r.runs)
            .ok()
            .filter(|&n| n >= 1)
            .ok_or_else(|| bad(format!("runs is {}, at least 1 is needed", r.runs)))?;
        let warmup = u32::try_from(r.warmup)
            .map_err(|_| bad(format!("warmup is {}, it cannot be negative", r.warmup)))?;
        let launch = r.launch.ok_or_else(|| bad("launch is NULL".into()))?;
        if r.kernel.is_null() {
            return Err(bad("kernel (the CUkernel handle) is NULL".into()));
        }
        // SAFETY (strings): the caller's contract.
        let out_path = unsafe { string(r.out_path, "out_path") }.map_err(bad)?;
        if out_path.is_empty() {
            return Err(bad("out_path is empty".into()));
        }
        Ok(Request {
            kernel_id: unsafe { string(r.kernel_id, "kernel_id") }.map_err(bad)?,
            kernel_name: unsafe { string(r.kernel_name, "kernel_name") }.map_err(bad)?,
            data,
            shapes,
            // SAFETY (handles): the shim passes the kernel's CUkernel and the program's
            // stream, both alive during the call.
            kernel: unsafe { Kernel::from_raw(r.kernel.cast()) },
            stream: unsafe { Stream::from_raw(r.stream.cast()) },
            dynamic_smem: r.dynamic_smem,
            runs,
            warmup,
            out_path: PathBuf::from(out_path),
            launch,
            progress: r.progress,
            launch_ctx: r.ctx,
        })
    }

    /// Launches shape `i` through the shim; returns its `cudaError_t` (0: success).
    pub fn launch(&self, i: usize) -> i32 {
        // SAFETY: `launch` and its context come from the shim, which promises that a shape
        // index below n_shapes may be launched any number of times.
        unsafe { (self.launch)(self.launch_ctx, i as c_int) }
    }

    /// Tells the shim that shape `i`'s sample was written: measured (`ok`) or failed.
    pub fn report(&self, i: usize, ok: bool) {
        if let Some(progress) = self.progress {
            // SAFETY: the shim's callback and context, valid during the call (header).
            unsafe { progress(self.launch_ctx, i as c_int, c_int::from(!ok)) }
        }
    }

    /// A name for messages: the source name, else the mangled one.
    pub fn display_name(&self) -> &str {
        if self.kernel_name.is_empty() {
            &self.kernel_id
        } else {
            &self.kernel_name
        }
    }
}

fn count(n: c_int, what: &str) -> std::result::Result<usize, String> {
    usize::try_from(n).map_err(|_| format!("{what} is {n}, it cannot be negative"))
}

/// # Safety
/// `p` is NULL or valid for `n` elements.
unsafe fn slice<'a, T>(p: *const T, n: usize, what: &str) -> std::result::Result<&'a [T], String> {
    if n == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(format!("{what} is NULL but {n} values are announced"));
    }
    // SAFETY: the function's contract.
    Ok(unsafe { std::slice::from_raw_parts(p, n) })
}

/// # Safety
/// `p` is NULL or a NUL-terminated string.
unsafe fn string(p: *const c_char, what: &str) -> std::result::Result<String, String> {
    if p.is_null() {
        return Err(format!("{what} is NULL"));
    }
    // SAFETY: the function's contract.
    Ok(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

/// The name of a CUDA runtime error code a launch may return (`cudaError_t`).
pub fn runtime_error_name(code: i32) -> &'static str {
    match code {
        0 => "cudaSuccess",
        1 => "cudaErrorInvalidValue",
        2 => "cudaErrorMemoryAllocation",
        3 => "cudaErrorInitializationError",
        9 => "cudaErrorInvalidConfiguration",
        12 => "cudaErrorInvalidPitchValue",
        98 => "cudaErrorInvalidDeviceFunction",
        100 => "cudaErrorNoDevice",
        101 => "cudaErrorInvalidDevice",
        209 => "cudaErrorNoKernelImageForDevice",
        400 => "cudaErrorInvalidResourceHandle",
        700 => "cudaErrorIllegalAddress",
        701 => "cudaErrorLaunchOutOfResources",
        702 => "cudaErrorLaunchTimeout",
        710 => "cudaErrorAssert",
        714 => "cudaErrorHardwareStackError",
        715 => "cudaErrorIllegalInstruction",
        716 => "cudaErrorMisalignedAddress",
        718 => "cudaErrorInvalidPc",
        719 => "cudaErrorLaunchFailure",
        720 => "cudaErrorCooperativeLaunchTooLarge",
        800 => "cudaErrorNotPermitted",
        _ => "a cudaError_t this collector does not name",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicI32, Ordering};

    static LAST_SHAPE: AtomicI32 = AtomicI32::new(-1);

    unsafe extern "C" fn record_launch(ctx: *mut c_void, shape: c_int) -> c_int {
        LAST_SHAPE.store(shape, Ordering::SeqCst);
        // The test passes the error to return through ctx.
        ctx as usize as c_int
    }

    static PROGRESS: std::sync::Mutex<Vec<(usize, c_int, c_int)>> =
        std::sync::Mutex::new(Vec::new());

    unsafe extern "C" fn record_progress(ctx: *mut c_void, shape: c_int, status: c_int) {
        PROGRESS.lock().unwrap().push((ctx as usize, shape, status));
    }

    struct Owned {
        data: Vec<i64>,
        blocks: Vec<u32>,
        grids: Vec<u32>,
    }

    fn raw(o: &Owned) -> klaraptor_collect_request {
        klaraptor_collect_request {
            abi_version: 1,
            kernel_id: c"_Z2mmPKfS0_Pfi".as_ptr(),
            kernel_name: c"mm".as_ptr(),
            n_data: o.data.len() as c_int,
            data: o.data.as_ptr(),
            n_shapes: (o.blocks.len() / 3) as c_int,
            blocks: o.blocks.as_ptr(),
            grids: o.grids.as_ptr(),
            kernel: 0x1000 as *mut c_void,
            stream: std::ptr::null_mut(),
            dynamic_smem: 0,
            runs: 5,
            warmup: 2,
            out_path: c"/tmp/out.jsonl".as_ptr(),
            ctx: 701 as *mut c_void,
            launch: Some(record_launch),
            progress: Some(record_progress),
        }
    }

    fn owned() -> Owned {
        Owned {
            data: vec![2048],
            blocks: vec![32, 4, 1, 16, 16, 1],
            grids: vec![64, 512, 1, 128, 128, 1],
        }
    }

    #[test]
    fn a_well_formed_request_is_copied_shape_by_shape() {
        let o = owned();
        let r = raw(&o);
        // SAFETY: `r` points into `o`, alive for the call.
        let req = unsafe { Request::from_raw(&r) }.unwrap();
        assert_eq!(req.kernel_name, "mm");
        assert_eq!(req.display_name(), "mm");
        assert_eq!(req.data, vec![2048]);
        assert_eq!(
            req.shapes,
            vec![
                Shape {
                    block: [32, 4, 1],
                    grid: [64, 512, 1]
                },
                Shape {
                    block: [16, 16, 1],
                    grid: [128, 128, 1]
                }
            ]
        );
        assert_eq!((req.runs, req.warmup), (5, 2));
        assert_eq!(req.out_path, PathBuf::from("/tmp/out.jsonl"));
        assert_eq!(req.launch(1), 701);
        assert_eq!(LAST_SHAPE.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn progress_is_reported_for_abi_2_and_never_read_from_an_abi_1_request() {
        let o = owned();
        let mut r = raw(&o);
        r.abi_version = 2;
        r.ctx = 4242 as *mut c_void;
        // SAFETY: `r` points into `o`, alive for the call.
        let req = unsafe { Request::from_raw(&r) }.unwrap();
        req.report(1, true);
        req.report(0, false);
        let mine: Vec<_> = PROGRESS
            .lock()
            .unwrap()
            .iter()
            .copied()
            .filter(|p| p.0 == 4242)
            .collect();
        assert_eq!(mine, [(4242, 1, 0), (4242, 0, 1)]);

        // An ABI 1 shim's request ends before `progress`: the collector must not read it,
        // so a request of exactly the ABI 1 size, followed by nothing, is enough.
        #[repr(C, align(8))]
        struct V1 {
            head: [u8; std::mem::offset_of!(klaraptor_collect_request, progress)],
        }
        let mut v1 = raw(&o);
        v1.ctx = 4343 as *mut c_void;
        // SAFETY: plain bytes of a repr(C) struct; the head is the ABI 1 layout.
        let bytes: V1 = unsafe { std::ptr::read((&v1 as *const klaraptor_collect_request).cast()) };
        let boxed = Box::new(bytes);
        // SAFETY: the box holds exactly the ABI 1 fields, which is all an ABI 1 request has.
        let req = unsafe { Request::from_raw((&*boxed as *const V1).cast()) }.unwrap();
        assert_eq!(req.kernel_name, "mm");
        assert_eq!(req.shapes.len(), 2);
        req.report(0, true);
        assert!(
            !PROGRESS.lock().unwrap().iter().any(|p| p.0 == 4343),
            "an ABI 1 request has no progress callback"
        );
    }

    fn error_of(r: &klaraptor_collect_request) -> String {
        // SAFETY: every pointer in `r` is NULL or points into live test data.
        unsafe { Request::from_raw(r) }.unwrap_err().to_string()
    }

    #[test]
    fn malformed_requests_say_which_field_is_wrong() {
        let o = owned();
        let mut r = raw(&o);
        r.abi_version = 3;
        assert!(error_of(&r).contains("abi_version is 3, this collector implements 1 to 2"));
        r.abi_version = 0;
        assert!(error_of(&r).contains("abi_version is 0"));
        let mut r = raw(&o);
        r.blocks = std::ptr::null();
        assert_eq!(
            error_of(&r),
            "invalid collect request: blocks is NULL but 6 values are announced"
        );
        let mut r = raw(&o);
        r.runs = 0;
        assert!(error_of(&r).contains("runs is 0, at least 1 is needed"));
        let mut r = raw(&o);
        r.launch = None;
        assert!(error_of(&r).contains("launch is NULL"));
        let mut r = raw(&o);
        r.n_shapes = -1;
        assert!(error_of(&r).contains("n_shapes is -1"));
        let mut r = raw(&o);
        r.out_path = std::ptr::null();
        assert!(error_of(&r).contains("out_path is NULL"));
        // SAFETY: NULL is allowed and refused.
        let e = unsafe { Request::from_raw(std::ptr::null()) }.unwrap_err();
        assert!(e.to_string().contains("the request pointer is NULL"));
    }

    #[test]
    fn zero_shapes_need_no_arrays() {
        let o = owned();
        let mut r = raw(&o);
        r.n_shapes = 0;
        r.blocks = std::ptr::null();
        r.grids = std::ptr::null();
        // SAFETY: as above.
        let req = unsafe { Request::from_raw(&r) }.unwrap();
        assert!(req.shapes.is_empty());
    }

    #[test]
    fn the_generated_request_matches_the_shim_header() {
        let header = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../runtime-shim/include/klaraptor_collect.h");
        let bytes = std::fs::read(&header).expect("read the shim header");
        let mut h: u64 = 0xcbf29ce484222325;
        for b in bytes {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x100000001b3);
        }
        assert_eq!(
            h,
            crate::sys::request::HEADER_FNV1A64,
            "{} changed since src/sys/request.rs was generated: run profiler/collector/regen.sh",
            header.display()
        );
    }

    #[test]
    fn runtime_errors_have_names() {
        assert_eq!(runtime_error_name(9), "cudaErrorInvalidConfiguration");
        assert_eq!(runtime_error_name(701), "cudaErrorLaunchOutOfResources");
        assert_eq!(
            runtime_error_name(12345),
            "a cudaError_t this collector does not name"
        );
    }
}
