//! The bookkeeping of a sweep's profiler sessions, apart from CUDA and CUPTI so that it is
//! tested without a GPU: which shapes go into which session, how the ranges of a decoded
//! counter-data image map back to shapes, and the timing summary of a sweep.
//!
//! One session profiles several shapes: the range profiler is enabled once, configured once
//! with one counter-data image that has one range per shape, and each pass launches every
//! shape of the session inside its own named range ([`range_name`]). After the decode, the
//! name of each range says which shape it measured ([`map_ranges`]), so a range CUPTI did not
//! return costs that shape only.

use std::collections::VecDeque;
use std::ffi::CString;
use std::fmt;

/// The prefix of every range name; the shape's index in the request follows.
const RANGE_PREFIX: &str = "klaraptor shape ";

/// The name of the range that measures shape `shape` (its index in the request).
pub fn range_name(shape: usize) -> CString {
    CString::new(format!("{RANGE_PREFIX}{shape}")).expect("no NUL in a formatted number")
}

/// The shape a range measured, from its name as the counter-data image gives it (nested
/// names joined with "/": the innermost one counts). `None` for a name this collector did
/// not give.
pub fn shape_of_range(name: &str) -> Option<usize> {
    let last = name.rsplit('/').next()?;
    let digits = last.strip_prefix(RANGE_PREFIX)?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Which range of a decoded image holds which shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RangeMap {
    /// (range index, shape index), in shape order.
    pub pairs: Vec<(usize, usize)>,
    /// Shapes of the session no range measured.
    pub missing: Vec<usize>,
}

/// Maps the ranges of a decoded image (`names[r]`: the name of range `r`, `None` where CUPTI
/// could not say) to the shapes of the session `chunk`.
///
/// By name where every range has one of this collector's names; by position where no range
/// has (a CUPTI that returns no names) and the counts agree. Anything else (a range of a
/// shape outside the session, two ranges of one shape, names for some ranges only, or no
/// names and a count that differs) is an error: the image cannot be trusted.
pub fn map_ranges(names: &[Option<String>], chunk: &[usize]) -> Result<RangeMap, String> {
    let parsed: Vec<Option<usize>> = names
        .iter()
        .map(|n| n.as_deref().and_then(shape_of_range))
        .collect();
    let named = parsed.iter().filter(|p| p.is_some()).count();
    let mut pairs = Vec::with_capacity(names.len());
    if named == 0 {
        if names.len() != chunk.len() {
            return Err(format!(
                "CUPTI decoded {} range(s) for a session of {} shape(s), with no range name \
                 to tell which is which",
                names.len(),
                chunk.len()
            ));
        }
        pairs.extend(chunk.iter().copied().enumerate());
    } else if named != names.len() {
        let (r, name) = names
            .iter()
            .enumerate()
            .find(|(r, _)| parsed[*r].is_none())
            .expect("some range is unnamed");
        return Err(format!(
            "range {r} of the counter data is {name:?}, not a range this collector pushed"
        ));
    } else {
        for (r, shape) in parsed.iter().enumerate() {
            let shape = shape.expect("every range is named");
            if !chunk.contains(&shape) {
                return Err(format!(
                    "range {r} measured shape {shape}, which is not in this session ({chunk:?})"
                ));
            }
            if pairs.iter().any(|&(_, s)| s == shape) {
                return Err(format!("two ranges measured shape {shape}"));
            }
            pairs.push((r, shape));
        }
    }
    pairs.sort_by_key(|&(_, s)| s);
    let missing = chunk
        .iter()
        .copied()
        .filter(|s| !pairs.iter().any(|&(_, p)| p == *s))
        .collect();
    Ok(RangeMap { pairs, missing })
}

/// The sessions that profile `todo` (shape indices, in order) with at most `max` ranges
/// each (at least one), in order.
pub fn sessions(todo: &[usize], max: usize) -> VecDeque<Vec<usize>> {
    todo.chunks(max.max(1)).map(<[usize]>::to_vec).collect()
}

/// A session that failed as a whole is tried again as two sessions of half its size (the
/// first one the larger); returns them and the new limit. `None` for a session of one shape.
pub fn halve(chunk: &[usize]) -> Option<(Vec<usize>, Vec<usize>, usize)> {
    if chunk.len() < 2 {
        return None;
    }
    let half = chunk.len().div_ceil(2);
    let (a, b) = chunk.split_at(half);
    Some((a.to_vec(), b.to_vec(), half))
}

/// Where one request's wall time went, in milliseconds.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SweepStats {
    /// Shapes of the request.
    pub shapes: usize,
    /// The collector's own start (libcuda and libcupti loaded, the profiler initialised), on
    /// the process's first request; 0 on later requests.
    pub collector_init_ms: f64,
    /// Set-up of the CUDA context on its first request (device check, metric table, config
    /// image, L2 flush buffer); 0 on later requests.
    pub context_setup_ms: f64,
    /// Of `context_setup_ms`: the device check and counter availability, the metric table
    /// resolved, the config image (with its pass count), the L2 flush and the gate.
    pub ctx_device_ms: f64,
    pub ctx_resolve_ms: f64,
    pub ctx_config_ms: f64,
    pub ctx_flush_ms: f64,
    pub ctx_gate_ms: f64,
    /// Warm-up and timed launches of every shape.
    pub timing_ms: f64,
    /// Range-profiler sessions run (a session that failed and was split counts too).
    pub sessions: usize,
    /// Profiler passes over all sessions.
    pub passes: usize,
    /// Enable, counter-data image and config of the sessions.
    pub session_setup_ms: f64,
    /// The passes: flushes, launches, ranges.
    pub passes_ms: f64,
    /// Of `passes_ms`: CUPTI's start and stop of each pass.
    pub pass_start_ms: f64,
    pub pass_stop_ms: f64,
    /// Of `passes_ms`: the synchronisations before each range and the L2 flushes.
    pub pass_sync_ms: f64,
    pub pass_flush_ms: f64,
    /// Of `passes_ms`: push, launch and pop of the ranges.
    pub pass_ranges_ms: f64,
    /// Decode and disable.
    pub decode_ms: f64,
    /// Evaluation of the ranges into counters.
    pub evaluate_ms: f64,
    /// Writing the samples and reporting progress.
    pub write_ms: f64,
    /// The whole request.
    pub total_ms: f64,
}

impl SweepStats {
    /// Mean wall time per shape.
    pub fn per_shape_ms(&self) -> f64 {
        if self.shapes == 0 {
            0.0
        } else {
            self.total_ms / self.shapes as f64
        }
    }
}

impl fmt::Display for SweepStats {
    /// One line, `key=value` pairs (what `KLARAPTOR_COLLECT_TIMING=1` prints per request).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "shapes={} total_ms={:.1} per_shape_ms={:.2} context_setup_ms={:.1} timing_ms={:.1} \
             sessions={} passes={} session_setup_ms={:.1} passes_ms={:.1} decode_ms={:.1} \
             evaluate_ms={:.1} write_ms={:.1} collector_init_ms={:.1} ctx_device_ms={:.1} \
             ctx_resolve_ms={:.1} ctx_config_ms={:.1} ctx_flush_ms={:.1} ctx_gate_ms={:.1} \
             pass_start_ms={:.1} pass_stop_ms={:.1} pass_sync_ms={:.1} pass_flush_ms={:.1} \
             pass_ranges_ms={:.1}",
            self.shapes,
            self.total_ms,
            self.per_shape_ms(),
            self.context_setup_ms,
            self.timing_ms,
            self.sessions,
            self.passes,
            self.session_setup_ms,
            self.passes_ms,
            self.decode_ms,
            self.evaluate_ms,
            self.write_ms,
            self.collector_init_ms,
            self.ctx_device_ms,
            self.ctx_resolve_ms,
            self.ctx_config_ms,
            self.ctx_flush_ms,
            self.ctx_gate_ms,
            self.pass_start_ms,
            self.pass_stop_ms,
            self.pass_sync_ms,
            self.pass_flush_ms,
            self.pass_ranges_ms
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[&str]) -> Vec<Option<String>> {
        v.iter().map(|s| Some(s.to_string())).collect()
    }

    #[test]
    fn range_names_carry_the_shape_index_and_read_back() {
        for i in [0, 7, 31, 100, 4096] {
            let n = range_name(i);
            assert_eq!(shape_of_range(n.to_str().unwrap()), Some(i));
        }
        assert_eq!(range_name(3).to_str().unwrap(), "klaraptor shape 3");
        // Nested names: the innermost one.
        assert_eq!(shape_of_range("outer/klaraptor shape 12"), Some(12));
        for other in [
            "klaraptor",
            "klaraptor shape ",
            "klaraptor shape -1",
            "klaraptor shape 1x",
            "klaraptor shape 3/inner",
            "shape 3",
            "",
        ] {
            assert_eq!(shape_of_range(other), None, "{other:?}");
        }
    }

    #[test]
    fn ranges_map_to_shapes_by_name_in_any_order() {
        let chunk = [2, 5, 9];
        let m = map_ranges(
            &names(&[
                "klaraptor shape 9",
                "klaraptor shape 2",
                "klaraptor shape 5",
            ]),
            &chunk,
        )
        .unwrap();
        assert_eq!(m.pairs, [(1, 2), (2, 5), (0, 9)]);
        assert!(m.missing.is_empty());
    }

    #[test]
    fn a_range_cupti_did_not_return_costs_its_shape_only() {
        let chunk = [0, 1, 2, 3];
        let m = map_ranges(
            &names(&[
                "klaraptor shape 0",
                "klaraptor shape 1",
                "klaraptor shape 3",
            ]),
            &chunk,
        )
        .unwrap();
        assert_eq!(m.pairs, [(0, 0), (1, 1), (2, 3)]);
        assert_eq!(m.missing, [2]);
    }

    #[test]
    fn without_names_ranges_map_by_position_only_when_the_counts_agree() {
        let chunk = [4, 6];
        let m = map_ranges(&[None, None], &chunk).unwrap();
        assert_eq!(m.pairs, [(0, 4), (1, 6)]);
        let e = map_ranges(&[None], &chunk).unwrap_err();
        assert!(e.contains("1 range(s) for a session of 2"), "{e}");
        // Names CUPTI gave that are not ours count as no names at all.
        let m = map_ranges(&names(&["a", "b"]), &chunk).unwrap();
        assert_eq!(m.pairs, [(0, 4), (1, 6)]);
    }

    #[test]
    fn an_image_that_cannot_be_trusted_is_an_error() {
        let chunk = [0, 1];
        let e = map_ranges(&names(&["klaraptor shape 0", "klaraptor shape 7"]), &chunk);
        assert!(e
            .unwrap_err()
            .contains("shape 7, which is not in this session"));
        let e = map_ranges(&names(&["klaraptor shape 1", "klaraptor shape 1"]), &chunk);
        assert!(e.unwrap_err().contains("two ranges measured shape 1"));
        let e = map_ranges(
            &[Some("klaraptor shape 0".into()), Some("other".into())],
            &chunk,
        );
        assert!(e.unwrap_err().contains("range 1 of the counter data is"));
        let e = map_ranges(&[Some("klaraptor shape 0".into()), None], &chunk);
        assert!(e.unwrap_err().contains("range 1"));
    }

    #[test]
    fn sessions_take_the_shapes_in_order_and_halve_on_failure() {
        let todo: Vec<usize> = (0..101).collect();
        let s = sessions(&todo, 101);
        assert_eq!(s.len(), 1);
        assert_eq!(s[0], todo);
        let s = sessions(&todo, 40);
        assert_eq!(
            s.iter().map(Vec::len).collect::<Vec<_>>(),
            [40, 40, 21],
            "chunks of at most 40"
        );
        assert_eq!(s.iter().flatten().copied().collect::<Vec<_>>(), todo);
        // 0 means 1 (one range per session: the collector's first design).
        assert_eq!(sessions(&[3, 4], 0), [vec![3], vec![4]]);
        assert!(sessions(&[], 8).is_empty());

        let (a, b, half) = halve(&[1, 2, 3, 4, 5]).unwrap();
        assert_eq!((a, b, half), (vec![1, 2, 3], vec![4, 5], 3));
        let (a, b, half) = halve(&[8, 9]).unwrap();
        assert_eq!((a, b, half), (vec![8], vec![9], 1));
        assert_eq!(halve(&[8]), None);
    }

    #[test]
    fn stats_print_as_one_line_of_key_value_pairs() {
        let s = SweepStats {
            shapes: 32,
            context_setup_ms: 250.0,
            timing_ms: 12.5,
            sessions: 1,
            passes: 3,
            session_setup_ms: 40.0,
            passes_ms: 30.25,
            decode_ms: 5.0,
            evaluate_ms: 2.0,
            write_ms: 1.0,
            total_ms: 320.0,
            ..SweepStats::default()
        };
        assert_eq!(s.per_shape_ms(), 10.0);
        let line = s.to_string();
        assert!(!line.contains('\n'));
        assert!(
            line.starts_with("shapes=32 total_ms=320.0 per_shape_ms=10.00 "),
            "{line}"
        );
        assert!(line.contains(" sessions=1 passes=3 "), "{line}");
        assert_eq!(SweepStats::default().per_shape_ms(), 0.0);
    }
}
