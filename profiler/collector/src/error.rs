//! Checked results (the second layer): every `CUresult` and `CUptiResult` that is not a
//! success becomes an [`Error`] that names the call and carries the library's own text.

use std::fmt;

/// What went wrong in the collector.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A shared library could not be opened from any of the places it was looked for.
    #[error("could not load {library}: {}; {hint}", Attempts(.tried))]
    Load {
        library: &'static str,
        /// Each place tried and why it failed.
        tried: Vec<(String, String)>,
        hint: &'static str,
    },
    /// A CUDA driver API call failed.
    #[error("{call} failed: {name} ({code}): {text}")]
    Cuda {
        call: &'static str,
        code: u32,
        name: String,
        text: String,
    },
    /// A CUPTI call failed.
    #[error("{call} failed: {text} (CUptiResult {code}){}", hint_for_cupti(*.code))]
    Cupti {
        call: &'static str,
        code: u32,
        text: String,
    },
    /// A metric of the table is not available on this chip under any of its names.
    #[error("no name of these metrics is valid on chip {chip}: {}", .missing.join("; "))]
    MissingMetrics { chip: String, missing: Vec<String> },
    /// Something the collector cannot work with (a malformed request, no context, …).
    #[error("{0}")]
    Unusable(String),
}

pub type Result<T> = std::result::Result<T, Error>;

struct Attempts<'a>(&'a [(String, String)]);

impl fmt::Display for Attempts<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return write!(f, "nowhere to look");
        }
        for (i, (place, why)) in self.0.iter().enumerate() {
            if i > 0 {
                write!(f, "; ")?;
            }
            write!(f, "{place}: {why}")?;
        }
        Ok(())
    }
}

/// CUPTI's own text for some results says what, not what to do; these say what to do.
fn hint_for_cupti(code: u32) -> &'static str {
    use crate::sys::cupti as c;
    match code {
        c::CUptiResult_CUPTI_ERROR_INSUFFICIENT_PRIVILEGES => {
            "; GPU performance counters are restricted to administrators on this machine: run \
             as root, or load the nvidia module with NVreg_RestrictProfilingToAdminUsers=0"
        }
        c::CUptiResult_CUPTI_ERROR_NOT_INITIALIZED => {
            "; the CUDA driver is not initialised (no context was created before profiling)"
        }
        c::CUptiResult_CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED => {
            "; another profiler (ncu, nsys, a CUPTI client) is attached to this process"
        }
        _ => "",
    }
}

impl Error {
    /// The CUPTI result code, when this is a CUPTI failure.
    pub fn cupti_code(&self) -> Option<u32> {
        match self {
            Error::Cupti { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// The CUDA result code, when this is a CUDA driver failure.
    pub fn cuda_code(&self) -> Option<u32> {
        match self {
            Error::Cuda { code, .. } => Some(*code),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn load_error_lists_every_attempt_and_the_hint() {
        let e = Error::Load {
            library: "libcupti",
            tried: vec![
                ("/a/libcupti.so.13".into(), "no such file".into()),
                (
                    "libcupti.so".into(),
                    "cannot open shared object file".into(),
                ),
            ],
            hint: "set KLARAPTOR_CUPTI",
        };
        assert_eq!(
            e.to_string(),
            "could not load libcupti: /a/libcupti.so.13: no such file; libcupti.so: cannot open \
             shared object file; set KLARAPTOR_CUPTI"
        );
    }

    #[test]
    fn cupti_error_names_the_call_and_adds_a_hint_for_privileges() {
        let e = Error::Cupti {
            call: "cuptiRangeProfilerStart",
            code: crate::sys::cupti::CUptiResult_CUPTI_ERROR_INSUFFICIENT_PRIVILEGES,
            text: "CUPTI_ERROR_INSUFFICIENT_PRIVILEGES".into(),
        };
        let s = e.to_string();
        assert!(
            s.starts_with("cuptiRangeProfilerStart failed: CUPTI_ERROR_INSUFFICIENT_PRIVILEGES")
        );
        assert!(s.contains("NVreg_RestrictProfilingToAdminUsers=0"), "{s}");
        assert_eq!(e.cupti_code(), Some(35));
    }
}
