//! `bench/accuracy/split.toml`: which suite and which half (tuning or test) each program of
//! the study belongs to. The records carry both, and the report summarises each half.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result};

/// Program → (suite, half).
#[derive(Debug, Clone, Default)]
pub struct Split {
    of: BTreeMap<String, (String, String)>,
}

#[derive(serde::Deserialize)]
struct Halves {
    tuning: Vec<String>,
    test: Vec<String>,
}

impl Split {
    /// Reads a split file (a table per suite with `tuning` and `test` lists of programs).
    pub fn load(path: &Path) -> Result<Split> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        Split::parse(&text).with_context(|| format!("{}", path.display()))
    }

    /// Parses a split file's text.
    pub fn parse(text: &str) -> Result<Split> {
        let suites: BTreeMap<String, Halves> = toml::from_str(text)?;
        let mut of = BTreeMap::new();
        for (suite, h) in suites {
            for (half, programs) in [("tuning", h.tuning), ("test", h.test)] {
                for p in programs {
                    if let Some((s, x)) = of.insert(p.clone(), (suite.clone(), half.to_string())) {
                        anyhow::bail!("program {p} is in {s}/{x} and in {suite}/{half}");
                    }
                }
            }
        }
        Ok(Split { of })
    }

    /// The suite and half of `program` (`None`: not in the split).
    pub fn of(&self, program: &str) -> Option<(&str, &str)> {
        self.of.get(program).map(|(s, h)| (s.as_str(), h.as_str()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs_get_their_suite_and_half() {
        let s = Split::parse(
            "[a]\ntuning = [\"p\"]\ntest = [\"q\"]\n[b]\ntuning = [\"r\"]\ntest = []\n",
        )
        .unwrap();
        assert_eq!(s.of("p"), Some(("a", "tuning")));
        assert_eq!(s.of("q"), Some(("a", "test")));
        assert_eq!(s.of("r"), Some(("b", "tuning")));
        assert_eq!(s.of("x"), None);
        assert!(Split::parse("[a]\ntuning = [\"p\"]\ntest = [\"p\"]\n").is_err());
    }
}
