//! The safe CUDA driver API the collector uses: the current context, device facts, events
//! for timing, kernel attributes, and a small module for the L2 flush.

use crate::debug::debug;
use crate::error::{Error, Result};
use crate::load::{self, Candidate};
use crate::sys::cuda::*;
use std::ffi::{c_char, c_void, CStr};
use std::path::PathBuf;
use std::sync::Arc;

/// A CUDA context handle obtained from the driver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Context(CUcontext);

impl Context {
    pub fn raw(self) -> CUcontext {
        self.0
    }
}

/// A stream handle (NULL is the legacy default stream, `CU_STREAM_PER_THREAD` the per-thread
/// one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stream(CUstream);

impl Stream {
    /// # Safety
    /// `s` is NULL, a special stream handle, or a stream of the current context that stays
    /// alive while this value is used.
    pub unsafe fn from_raw(s: CUstream) -> Self {
        Stream(s)
    }
    pub fn raw(self) -> CUstream {
        self.0
    }
}

/// A kernel handle (`CUkernel`, what the runtime's `cudaGetKernel` gives).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Kernel(CUkernel);

impl Kernel {
    /// # Safety
    /// `k` is a kernel handle of a loaded library that stays loaded while this value is used.
    pub unsafe fn from_raw(k: CUkernel) -> Self {
        Kernel(k)
    }
    pub fn raw(self) -> CUkernel {
        self.0
    }
}

/// The loaded libcuda.
pub struct Driver {
    raw: CudaDriver,
    path: PathBuf,
}

/// Calls a driver function and checks its result.
macro_rules! cu_call {
    ($drv:expr, $f:ident($($arg:expr),* $(,)?)) => {{
        let drv: &Driver = $drv;
        let r = {
            // SAFETY: each argument is a live pointer or a handle obtained from this driver,
            // as the function's documentation requires; see the call sites.
            #[allow(clippy::macro_metavars_in_unsafe)]
            unsafe { drv.raw.$f($($arg),*) }
        };
        drv.check(stringify!($f), r)
    }};
}

impl Driver {
    /// Opens libcuda from the first of `candidates` that has every symbol the collector
    /// uses, and initialises it (`cuInit`, a no-op when the CUDA runtime already did).
    pub fn open(candidates: &[Candidate]) -> Result<Arc<Self>> {
        let (raw, path) = load::open_first(
            "libcuda (the CUDA driver)",
            "is an NVIDIA driver of CUDA 13 (580 or newer) installed? KLARAPTOR_LIBCUDA names \
             the library explicitly",
            candidates,
            // SAFETY: from_library only resolves symbols; their signatures are bindgen's, from
            // the CUDA 13 headers.
            |lib| unsafe { CudaDriver::from_library(lib) },
        )?;
        let drv = Arc::new(Driver { raw, path });
        debug!("libcuda from {}", drv.path.display());
        cu_call!(&drv, cuInit(0))?;
        Ok(drv)
    }

    fn check(&self, call: &'static str, r: CUresult) -> Result<()> {
        if r == cudaError_enum_CUDA_SUCCESS {
            return Ok(());
        }
        let name = self.error_text(r, true);
        let text = self.error_text(r, false);
        debug!("{call}: FAILED {name} ({r}): {text}");
        Err(Error::Cuda {
            call,
            code: r,
            name,
            text,
        })
    }

    fn error_text(&self, r: CUresult, name: bool) -> String {
        let mut s: *const c_char = std::ptr::null();
        // SAFETY: both calls write a pointer to a static string (or fail for unknown codes).
        let ok = unsafe {
            if name {
                self.raw.cuGetErrorName(r, &mut s)
            } else {
                self.raw.cuGetErrorString(r, &mut s)
            }
        };
        if ok == cudaError_enum_CUDA_SUCCESS && !s.is_null() {
            // SAFETY: static NUL-terminated string.
            unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned()
        } else {
            format!("CUresult {r}")
        }
    }

    /// The driver's CUDA version as "major.minor" (e.g. "13.0").
    pub fn version(&self) -> Result<String> {
        let mut v = 0;
        cu_call!(self, cuDriverGetVersion(&mut v))?;
        Ok(format!("{}.{}", v / 1000, (v % 1000) / 10))
    }

    /// The context current on this thread, if any.
    pub fn current_context(&self) -> Result<Option<Context>> {
        let mut ctx: CUcontext = std::ptr::null_mut();
        cu_call!(self, cuCtxGetCurrent(&mut ctx))?;
        Ok((!ctx.is_null()).then_some(Context(ctx)))
    }

    /// The device of the current context.
    pub fn current_device(&self) -> Result<CUdevice> {
        let mut d: CUdevice = 0;
        cu_call!(self, cuCtxGetDevice(&mut d))?;
        Ok(d)
    }

    pub fn device_name(&self, dev: CUdevice) -> Result<String> {
        let mut buf = [0 as c_char; 256];
        cu_call!(
            self,
            cuDeviceGetName(buf.as_mut_ptr(), buf.len() as i32, dev)
        )?;
        // SAFETY: the driver NUL-terminates within the buffer.
        Ok(unsafe { CStr::from_ptr(buf.as_ptr()) }
            .to_string_lossy()
            .into_owned())
    }

    pub fn device_attribute(&self, attr: CUdevice_attribute, dev: CUdevice) -> Result<i32> {
        let mut v = 0;
        cu_call!(self, cuDeviceGetAttribute(&mut v, attr, dev))?;
        Ok(v)
    }

    /// Blocks until all work of the current context is done; reports a sticky error of an
    /// earlier launch.
    pub fn ctx_synchronize(&self) -> Result<()> {
        cu_call!(self, cuCtxSynchronize())
    }

    /// Blocks until the work queued on `stream` is done.
    pub fn stream_synchronize(&self, stream: Stream) -> Result<()> {
        cu_call!(self, cuStreamSynchronize(stream.raw()))
    }

    /// An attribute of a kernel (a `CUkernel`, what `cudaGetKernel` gives) on `dev`.
    pub fn kernel_attribute(
        &self,
        kernel: Kernel,
        attr: CUfunction_attribute,
        dev: CUdevice,
    ) -> Result<i32> {
        let mut v = 0;
        cu_call!(self, cuKernelGetAttribute(&mut v, attr, kernel.raw(), dev))?;
        Ok(v)
    }

    /// The same attribute through the kernel's function in the current context (the path
    /// for drivers that refuse `cuKernelGetAttribute` on a handle).
    pub fn kernel_function_attribute(
        &self,
        kernel: Kernel,
        attr: CUfunction_attribute,
    ) -> Result<i32> {
        let mut f: CUfunction = std::ptr::null_mut();
        cu_call!(self, cuKernelGetFunction(&mut f, kernel.raw()))?;
        let mut v = 0;
        cu_call!(self, cuFuncGetAttribute(&mut v, attr, f))?;
        Ok(v)
    }
}

/// A CUDA event (timing enabled).
pub struct Event {
    drv: Arc<Driver>,
    ev: CUevent,
}

// SAFETY: events are context objects usable from any thread; used under the collector's mutex.
unsafe impl Send for Event {}

impl Event {
    pub fn new(drv: &Arc<Driver>) -> Result<Self> {
        let mut ev: CUevent = std::ptr::null_mut();
        cu_call!(
            drv,
            cuEventCreate(&mut ev, CUevent_flags_enum_CU_EVENT_DEFAULT)
        )?;
        Ok(Event {
            drv: drv.clone(),
            ev,
        })
    }

    pub fn record(&self, stream: Stream) -> Result<()> {
        cu_call!(&self.drv, cuEventRecord(self.ev, stream.raw()))
    }

    pub fn synchronize(&self) -> Result<()> {
        cu_call!(&self.drv, cuEventSynchronize(self.ev))
    }

    /// Milliseconds from `start` to `self` (both recorded and complete).
    pub fn elapsed_since(&self, start: &Event) -> Result<f64> {
        let mut ms = 0f32;
        cu_call!(&self.drv, cuEventElapsedTime_v2(&mut ms, start.ev, self.ev))?;
        Ok(f64::from(ms))
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        let _ = cu_call!(&self.drv, cuEventDestroy_v2(self.ev));
    }
}

/// Device memory.
pub struct DeviceBuffer {
    drv: Arc<Driver>,
    ptr: CUdeviceptr,
    bytes: usize,
}

// SAFETY: a device address; used under the collector's mutex.
unsafe impl Send for DeviceBuffer {}

impl DeviceBuffer {
    pub fn new(drv: &Arc<Driver>, bytes: usize) -> Result<Self> {
        let mut ptr: CUdeviceptr = 0;
        cu_call!(drv, cuMemAlloc_v2(&mut ptr, bytes))?;
        Ok(DeviceBuffer {
            drv: drv.clone(),
            ptr,
            bytes,
        })
    }
    pub fn ptr(&self) -> CUdeviceptr {
        self.ptr
    }
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        let _ = cu_call!(&self.drv, cuMemFree_v2(self.ptr));
    }
}

/// A module loaded from PTX (JIT-compiled by the driver for the current device).
pub struct Module {
    drv: Arc<Driver>,
    module: CUmodule,
}

// SAFETY: a context object; used under the collector's mutex.
unsafe impl Send for Module {}

impl Module {
    pub fn from_ptx(drv: &Arc<Driver>, ptx: &CStr) -> Result<Self> {
        let mut module: CUmodule = std::ptr::null_mut();
        cu_call!(drv, cuModuleLoadData(&mut module, ptx.as_ptr().cast()))?;
        Ok(Module {
            drv: drv.clone(),
            module,
        })
    }

    pub fn function(&self, name: &CStr) -> Result<CUfunction> {
        let mut f: CUfunction = std::ptr::null_mut();
        cu_call!(
            &self.drv,
            cuModuleGetFunction(&mut f, self.module, name.as_ptr())
        )?;
        Ok(f)
    }

    /// Launches `f` (a function of this module) on `stream` with 1-D grid and block.
    ///
    /// # Safety
    /// `args` must point to one value of each parameter type of `f`, in order.
    pub unsafe fn launch(
        &self,
        f: CUfunction,
        grid: u32,
        block: u32,
        stream: Stream,
        args: &mut [*mut c_void],
    ) -> Result<()> {
        cu_call!(
            &self.drv,
            cuLaunchKernel(
                f,
                grid,
                1,
                1,
                block,
                1,
                1,
                0,
                stream.raw(),
                args.as_mut_ptr(),
                std::ptr::null_mut()
            )
        )
    }
}

impl Drop for Module {
    fn drop(&mut self) {
        let _ = cu_call!(&self.drv, cuModuleUnload(self.module));
    }
}
