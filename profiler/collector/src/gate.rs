//! Holding the stream while the timed launches are queued.
//!
//! A run timed as `record(start); launch × n; record(stop)` on an idle GPU measures the
//! CPU as well: the start event completes as soon as the GPU sees it, and the GPU then waits
//! for each launch while the CPU is still queueing it (a few microseconds per launch, as much
//! as a small kernel takes). So each timed run is queued behind a gate: a one-thread kernel
//! (`ptx/gate.ptx`) that spins on the GPU's global timer for a set time. When the CPU has
//! queued the start event, the launches and the stop event within that time, they run back
//! to back after it, and the events measure the GPU alone. [`Gate::hold`] says whether the
//! queueing fit; the collector lengthens the gate and times the run again when it did not.

use crate::driver::{Driver, Module, Stream};
use crate::error::Result;
use crate::sys::cuda::CUfunction;
use std::cell::Cell;
use std::ffi::{c_void, CStr};
use std::sync::Arc;
use std::time::Duration;

/// The gate kernel's PTX, NUL-terminated for `cuModuleLoadData`.
pub const PTX: &CStr =
    match CStr::from_bytes_with_nul(concat!(include_str!("ptx/gate.ptx"), "\0").as_bytes()) {
        Ok(s) => s,
        Err(_) => panic!("gate.ptx contains a NUL byte"),
    };

const ENTRY: &CStr = c"klaraptor_gate";

/// The first gate length: queueing an event pair and a few launches takes tens of µs.
pub const INITIAL: Duration = Duration::from_micros(200);
/// The longest gate: past it a run is kept however long the queueing took.
pub const LONGEST: Duration = Duration::from_millis(50);

/// The loaded gate kernel of one context, and the gate length that has sufficed so far.
pub struct Gate {
    module: Module,
    function: CUfunction,
    length: Length,
}

// SAFETY: CUfunction is a handle of `module`, used under the collector's mutex.
unsafe impl Send for Gate {}

impl Gate {
    /// Loads the kernel (JIT from PTX) into the current context.
    pub fn new(drv: &Arc<Driver>) -> Result<Self> {
        let module = Module::from_ptx(drv, PTX)?;
        let function = module.function(ENTRY)?;
        Ok(Gate {
            module,
            function,
            length: Length::default(),
        })
    }

    /// The current gate length.
    pub fn length(&self) -> Duration {
        self.length.get()
    }

    /// See [`Length::fitted`].
    pub fn fitted(&self, queued: Duration) -> bool {
        self.length.fitted(queued)
    }

    /// Queues one gate of the current length on `stream`.
    pub fn hold(&self, stream: Stream) -> Result<()> {
        let mut ns = u64::try_from(self.length.get().as_nanos()).unwrap_or(u64::MAX);
        let mut args: [*mut c_void; 1] = [std::ptr::addr_of_mut!(ns).cast()];
        // SAFETY: the kernel takes one u64, which `args` points to.
        unsafe { self.module.launch(self.function, 1, 1, stream, &mut args) }
    }
}

/// A gate length that grows when the queueing does not fit in it.
#[derive(Debug)]
pub struct Length(Cell<Duration>);

impl Default for Length {
    fn default() -> Self {
        Length(Cell::new(INITIAL))
    }
}

impl Length {
    pub fn get(&self) -> Duration {
        self.0.get()
    }

    /// Whether a run whose queueing (from just before [`Gate::hold`] to just after the stop
    /// event) took `queued` fitted inside the gate. When it did not, the gate doubles (up to
    /// [`LONGEST`]) and the run should be timed again; at the longest gate every run fits.
    pub fn fitted(&self, queued: Duration) -> bool {
        let length = self.0.get();
        if fits(queued, length) || length >= LONGEST {
            return true;
        }
        self.0.set((length * 2).min(LONGEST));
        false
    }
}

/// The queueing fits when it took under 80 % of the gate: the GPU starts the gate no sooner
/// than the CPU queued it, and the margin covers the delay before the GPU sees the last
/// command.
fn fits(queued: Duration, gate: Duration) -> bool {
    queued.as_nanos() * 5 < gate.as_nanos() * 4
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queueing_fits_under_four_fifths_of_the_gate() {
        let gate = Duration::from_micros(100);
        assert!(fits(Duration::from_micros(79), gate));
        assert!(!fits(Duration::from_micros(80), gate));
        assert!(!fits(Duration::from_micros(300), gate));
    }

    #[test]
    fn the_gate_doubles_until_the_queueing_fits_and_stops_at_the_longest() {
        let l = Length::default();
        assert!(l.fitted(INITIAL / 2));
        assert_eq!(l.get(), INITIAL);
        assert!(!l.fitted(INITIAL * 3));
        assert_eq!(l.get(), INITIAL * 2);
        assert!(!l.fitted(INITIAL * 3));
        assert_eq!(l.get(), INITIAL * 4);
        assert!(l.fitted(INITIAL * 3));
        assert_eq!(l.get(), INITIAL * 4);
        // A CPU that never keeps up: the gate stops growing and the run is kept.
        while !l.fitted(LONGEST * 2) {}
        assert_eq!(l.get(), LONGEST);
        assert!(l.fitted(LONGEST * 2));
    }

    #[test]
    fn gate_ptx_assembles_with_ptxas() {
        crate::ptx_check::assembles("gate.ptx", ".entry klaraptor_gate(");
    }
}
