//! Flushing the L2 cache before each profiler pass.
//!
//! Without it the DRAM counters of a small profiling size measure nothing: after the warm-up
//! and timed runs the kernel's whole footprint sits in the 50 MB L2 of an H100/H200, and
//! `dram__bytes_read` is near zero however the kernel accesses memory. With it they measure
//! the compulsory traffic, which is what grows with the data size, and they are comparable
//! with ncu's default (`--cache-control all`). Timed runs are not flushed: they measure the
//! kernel as a program that launches it repeatedly sees it.
//!
//! The flush is a hand-written PTX kernel (`ptx/l2_flush.ptx`) that reads a buffer three
//! times the L2 size through L2; reads, not a memset, so that the lines left in L2 are clean
//! and no write-back of the flush lands in the profiled range.

use crate::driver::{DeviceBuffer, Driver, Module, Stream};
use crate::error::Result;
use crate::sys::cuda::{
    CUdevice, CUdevice_attribute_enum_CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, CUfunction,
};
use std::ffi::{c_void, CStr};
use std::sync::Arc;

/// The flush kernel's PTX, NUL-terminated for `cuModuleLoadData`.
pub const PTX: &CStr =
    match CStr::from_bytes_with_nul(concat!(include_str!("ptx/l2_flush.ptx"), "\0").as_bytes()) {
        Ok(s) => s,
        Err(_) => panic!("l2_flush.ptx contains a NUL byte"),
    };

const ENTRY: &CStr = c"klaraptor_l2_flush";
const BYTES_PER_SECTOR: usize = 32;

/// A loaded flush kernel and its buffer, for one context.
pub struct L2Flush {
    module: Module,
    function: CUfunction,
    buffer: DeviceBuffer,
    sink: DeviceBuffer,
}

// SAFETY: CUfunction is a handle of `module`, used under the collector's mutex.
unsafe impl Send for L2Flush {}

impl L2Flush {
    /// Loads the kernel (JIT from PTX) and allocates three times the L2 size of `device`.
    pub fn new(drv: &Arc<Driver>, device: CUdevice) -> Result<Self> {
        let l2 = drv.device_attribute(
            CUdevice_attribute_enum_CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE,
            device,
        )?;
        let bytes = buffer_bytes(l2.max(0) as usize);
        let module = Module::from_ptx(drv, PTX)?;
        let function = module.function(ENTRY)?;
        let buffer = DeviceBuffer::new(drv, bytes)?;
        let sink = DeviceBuffer::new(drv, 4)?;
        Ok(L2Flush {
            module,
            function,
            buffer,
            sink,
        })
    }

    /// Bytes read by one flush.
    pub fn bytes(&self) -> usize {
        self.buffer.bytes()
    }

    /// Queues one flush on `stream`.
    pub fn run(&self, stream: Stream) -> Result<()> {
        let mut buf = self.buffer.ptr();
        let mut sectors = (self.buffer.bytes() / BYTES_PER_SECTOR) as u64;
        let mut sink = self.sink.ptr();
        let mut args: [*mut c_void; 3] = [
            std::ptr::addr_of_mut!(buf).cast(),
            std::ptr::addr_of_mut!(sectors).cast(),
            std::ptr::addr_of_mut!(sink).cast(),
        ];
        // SAFETY: the kernel takes (u64 buffer, u64 sector count, u64 sink), which `args`
        // points to, in order; the buffer holds `sectors` sectors and the sink 4 bytes.
        unsafe {
            self.module
                .launch(self.function, 1024, 256, stream, &mut args)
        }
    }
}

/// Three times the L2 size (at least 64 MiB when the driver reports none), in whole sectors.
fn buffer_bytes(l2: usize) -> usize {
    let bytes = if l2 == 0 { 64 << 20 } else { 3 * l2 };
    bytes.next_multiple_of(BYTES_PER_SECTOR)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffer_is_three_l2s_in_whole_sectors() {
        assert_eq!(buffer_bytes(50 * 1024 * 1024), 150 * 1024 * 1024);
        assert_eq!(buffer_bytes(1000), 3008);
        assert_eq!(buffer_bytes(0), 64 << 20);
    }

    #[test]
    fn flush_ptx_assembles_with_ptxas() {
        crate::ptx_check::assembles("l2_flush.ptx", ".entry klaraptor_l2_flush(");
    }
}
