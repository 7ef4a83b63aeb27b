//! What `prune` selects, and the small parsers it needs: calendar dates, ISO 8601
//! time stamps (the `captured_at` of an entry) and `*`/`?` name patterns.

use std::fmt;
use std::str::FromStr;

/// A calendar date (proleptic Gregorian, UTC), as given to `--older-than YYYY-MM-DD`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Date {
    pub year: i32,
    pub month: u8,
    pub day: u8,
}

impl Date {
    /// Days since 1970-01-01 (negative before).
    pub fn days_since_epoch(self) -> i64 {
        // Count whole years, then the leap days in them, then the days of this year.
        let y = i64::from(self.year);
        let leaps_before = |y: i64| {
            // Leap years in [1, y): multiples of 4, minus of 100, plus of 400.
            let p = y - 1;
            p.div_euclid(4) - p.div_euclid(100) + p.div_euclid(400)
        };
        let mut days = 365 * (y - 1970) + leaps_before(y) - leaps_before(1970);
        for m in 1..self.month {
            days += i64::from(days_in_month(self.year, m));
        }
        days + i64::from(self.day) - 1
    }

    /// Midnight (UTC) at the start of this date.
    pub fn start(self) -> Timestamp {
        Timestamp {
            seconds: self.days_since_epoch() * 86_400,
            nanos: 0,
        }
    }
}

fn is_leap(year: i32) -> bool {
    (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
}

fn days_in_month(year: i32, month: u8) -> u8 {
    match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if is_leap(year) => 29,
        _ => 28,
    }
}

impl FromStr for Date {
    type Err = String;

    /// `YYYY-MM-DD`, a real date.
    fn from_str(s: &str) -> Result<Date, String> {
        let bad = || format!("`{s}` is not a date of the form YYYY-MM-DD (e.g. 2026-01-31)");
        let b = s.as_bytes();
        if b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
            return Err(bad());
        }
        let num = |r: std::ops::Range<usize>| -> Result<u32, String> {
            let part = &s[r];
            if part.bytes().all(|c| c.is_ascii_digit()) {
                part.parse().map_err(|_| bad())
            } else {
                Err(bad())
            }
        };
        let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
        let year = year as i32;
        if !(1..=12).contains(&month) {
            return Err(format!("`{s}`: month {month} is not 01 to 12"));
        }
        let month = month as u8;
        if day == 0 || day > u32::from(days_in_month(year, month)) {
            return Err(format!("`{s}`: day {day} is not in that month"));
        }
        Ok(Date {
            year,
            month,
            day: day as u8,
        })
    }
}

impl fmt::Display for Date {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:04}-{:02}-{:02}", self.year, self.month, self.day)
    }
}

/// A point in time (UTC), seconds and nanoseconds since 1970-01-01T00:00:00Z.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp {
    pub seconds: i64,
    pub nanos: u32,
}

impl Timestamp {
    /// Reads the ISO 8601 forms a capture time takes: `YYYY-MM-DD`, optionally followed by
    /// `T` (or a space) and `HH:MM`, `HH:MM:SS` or `HH:MM:SS.fraction`, optionally followed
    /// by `Z` or an offset `±HH:MM` / `±HHMM` (no offset means UTC). `None` for anything else.
    pub fn parse_iso8601(s: &str) -> Option<Timestamp> {
        let s = s.trim();
        let date: Date = s.get(..10)?.parse().ok()?;
        let mut seconds = date.days_since_epoch() * 86_400;
        let rest = &s[10..];
        if rest.is_empty() {
            return Some(Timestamp { seconds, nanos: 0 });
        }
        let rest = rest
            .strip_prefix('T')
            .or_else(|| rest.strip_prefix('t'))
            .or_else(|| rest.strip_prefix(' '))?;
        let two = |t: &str| -> Option<i64> {
            let p = t.get(..2)?;
            p.bytes()
                .all(|c| c.is_ascii_digit())
                .then(|| p.parse().ok())?
        };
        let hour = two(rest)?;
        let rest = rest.get(2..)?.strip_prefix(':')?;
        let minute = two(rest)?;
        let mut rest = rest.get(2..)?;
        let mut second = 0;
        let mut nanos = 0u32;
        if let Some(r) = rest.strip_prefix(':') {
            second = two(r)?;
            rest = r.get(2..)?;
            if let Some(r) = rest.strip_prefix('.').or_else(|| rest.strip_prefix(',')) {
                let digits = r.bytes().take_while(u8::is_ascii_digit).count();
                if digits == 0 {
                    return None;
                }
                let frac = &r[..digits];
                let mut n = 0u32;
                for (i, c) in frac.bytes().take(9).enumerate() {
                    n += u32::from(c - b'0') * 10u32.pow(8 - i as u32);
                }
                nanos = n;
                rest = &r[digits..];
            }
        }
        if hour > 23 || minute > 59 || second > 60 {
            return None;
        }
        seconds += hour * 3600 + minute * 60 + second;
        match rest {
            "" | "Z" | "z" => {}
            _ => {
                let sign = match rest.as_bytes()[0] {
                    b'+' => 1,
                    b'-' => -1,
                    _ => return None,
                };
                let r = &rest[1..];
                let oh = two(r)?;
                let r = &r[2..];
                let r = r.strip_prefix(':').unwrap_or(r);
                let om = two(r)?;
                if r.len() != 2 || oh > 23 || om > 59 {
                    return None;
                }
                // Local time = UTC + offset.
                seconds -= sign * (oh * 3600 + om * 60);
            }
        }
        Some(Timestamp { seconds, nanos })
    }
}

/// A name pattern: `*` matches any run of characters, `?` any one character, everything
/// else itself. A pattern without `*`/`?` is an exact match.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern {
    text: String,
    ignore_case: bool,
}

impl Pattern {
    /// Case-sensitive pattern (kernel names).
    pub fn new(text: &str) -> Pattern {
        Pattern {
            text: text.to_string(),
            ignore_case: false,
        }
    }

    /// Pattern that ignores ASCII case (device names).
    pub fn ignoring_case(text: &str) -> Pattern {
        Pattern {
            text: text.to_string(),
            ignore_case: true,
        }
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }

    pub fn matches(&self, s: &str) -> bool {
        let p: Vec<char> = self.text.chars().collect();
        let t: Vec<char> = s.chars().collect();
        let eq = |a: char, b: char| {
            if self.ignore_case {
                a.eq_ignore_ascii_case(&b)
            } else {
                a == b
            }
        };
        // Greedy matching with one backtrack point: the last `*` seen.
        let (mut pi, mut ti) = (0, 0);
        let mut star: Option<(usize, usize)> = None;
        while ti < t.len() {
            if pi < p.len() && (p[pi] == '?' || (p[pi] != '*' && eq(p[pi], t[ti]))) {
                pi += 1;
                ti += 1;
            } else if pi < p.len() && p[pi] == '*' {
                star = Some((pi, ti));
                pi += 1;
            } else if let Some((sp, st)) = star {
                pi = sp + 1;
                ti = st + 1;
                star = Some((sp, st + 1));
            } else {
                return false;
            }
        }
        p[pi..].iter().all(|&c| c == '*')
    }
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// What `prune` removes.
///
/// The *kinds* (`invalid`, `old_format`, `superseded`, `all`) say which files qualify; when
/// none is set, every valid entry qualifies. The *scope* (`device`, `kernel`, `older_than`)
/// narrows that down: a file is removed only if it satisfies every scope given, and a file
/// whose device, kernel or date cannot be read does not satisfy a scope that asks about it.
/// A filter with neither a kind nor a scope selects nothing and is refused.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PruneFilter {
    /// Files `get` cannot use: unparsable, stored under a path that does not match their
    /// contents, and temporary files a killed writer left behind.
    pub invalid: bool,
    /// Entries of a format version older than [`crate::record::FORMAT_VERSION`]. (Newer
    /// versions are left alone: a newer klaraptor wrote them.)
    pub old_format: bool,
    /// Entries of a kernel and device for which a newer entry (another code hash,
    /// captured later) exists.
    pub superseded: bool,
    /// Entries whose samples are not all there (the collector or the GPU failed).
    pub incomplete: bool,
    /// Every file in scope, of any kind.
    pub all: bool,
    /// Device name (or UUID) pattern, case-insensitive.
    pub device: Option<Pattern>,
    /// Kernel name or mangled-name pattern.
    pub kernel: Option<Pattern>,
    /// Captured before this date (UTC).
    pub older_than: Option<Date>,
}

impl PruneFilter {
    pub fn has_kind(&self) -> bool {
        self.invalid || self.old_format || self.superseded || self.incomplete || self.all
    }

    pub fn has_scope(&self) -> bool {
        self.device.is_some() || self.kernel.is_some() || self.older_than.is_some()
    }

    /// True when it selects nothing (and `prune` refuses it).
    pub fn is_empty(&self) -> bool {
        !self.has_kind() && !self.has_scope()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates() {
        let d: Date = "1970-01-01".parse().unwrap();
        assert_eq!(d.days_since_epoch(), 0);
        let d: Date = "2000-03-01".parse().unwrap();
        assert_eq!(d.days_since_epoch(), 11_017);
        let d: Date = "2024-02-29".parse().unwrap();
        assert_eq!(d.days_since_epoch(), 19_782);
        let d: Date = "1969-12-31".parse().unwrap();
        assert_eq!(d.days_since_epoch(), -1);
        assert!("2023-02-29".parse::<Date>().is_err());
        assert!("2023-13-01".parse::<Date>().is_err());
        assert!("2023-1-01".parse::<Date>().is_err());
        assert!("2023-01-0x".parse::<Date>().is_err());
        assert_eq!(d.to_string(), "1969-12-31");
    }

    #[test]
    fn timestamps() {
        let p = |s| Timestamp::parse_iso8601(s);
        // 2026-11-03T10:20:30Z: 20_760 days after the epoch.
        let base = 20_760 * 86_400 + 10 * 3600 + 20 * 60 + 30;
        assert_eq!(p("2026-11-03T10:20:30Z").unwrap().seconds, base);
        assert_eq!(p("2026-11-03T10:20:30").unwrap().seconds, base);
        assert_eq!(p("2026-11-03 10:20:30+02:00").unwrap().seconds, base - 7200);
        assert_eq!(p("2026-11-03T10:20:30-0130").unwrap().seconds, base + 5400);
        let f = p("2026-11-03T10:20:30.25Z").unwrap();
        assert_eq!((f.seconds, f.nanos), (base, 250_000_000));
        assert_eq!(p("2026-11-03T10:20Z").unwrap().seconds, base - 30);
        assert_eq!(p("2026-11-03").unwrap().seconds, 20_760 * 86_400);
        for bad in [
            "",
            "yesterday",
            "2026-11-03T",
            "2026-11-03T25:00Z",
            "2026-11-03T10:20:30Q",
        ] {
            assert!(p(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn patterns() {
        let k = Pattern::new("gemm*");
        assert!(k.matches("gemm") && k.matches("gemm_kernel") && !k.matches("Gemm"));
        assert!(Pattern::new("*mm*").matches("_Z2mmPKfS0_Pfi"));
        assert!(Pattern::new("a?c").matches("abc") && !Pattern::new("a?c").matches("ac"));
        assert!(Pattern::new("*a*b").matches("xaxxab") && !Pattern::new("*a*b").matches("xaxxa"));
        assert!(Pattern::new("mm").matches("mm") && !Pattern::new("mm").matches("mmm"));
        assert!(Pattern::ignoring_case("nvidia h200").matches("NVIDIA H200"));
        assert!(Pattern::new("*").matches(""));
    }
}
