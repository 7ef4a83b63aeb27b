//! User-facing diagnostics: every error a user can cause names the file, line and column,
//! says what was expected, and how to fix it.

use std::fmt;
use std::path::{Path, PathBuf};

/// A place in a source or configuration file (1-based line and column).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub struct Location {
    pub file: PathBuf,
    pub line: u32,
    pub col: u32,
}

impl Location {
    pub fn new(file: &Path, line: u32, col: u32) -> Self {
        Location {
            file: file.to_path_buf(),
            line,
            col,
        }
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.file.display(), self.line, self.col)
    }
}

/// An error in the user's annotations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    pub loc: Location,
    pub message: String,
    /// How to fix it.
    pub help: Option<String>,
    /// The source line, shown under the message with a caret at the column.
    pub snippet: Option<String>,
}

impl Diagnostic {
    pub fn new(loc: Location, message: impl Into<String>) -> Self {
        Diagnostic {
            loc,
            message: message.into(),
            help: None,
            snippet: None,
        }
    }
    pub fn help(mut self, help: impl Into<String>) -> Self {
        self.help = Some(help.into());
        self
    }
    /// Attaches the line of `text` that the location points at.
    pub fn with_source(mut self, text: &str) -> Self {
        self.snippet = text
            .lines()
            .nth(self.loc.line.saturating_sub(1) as usize)
            .map(str::to_string);
        self
    }
}

impl Diagnostic {
    /// The diagnostic as a warning: as its `Display` (an error) but for the word.
    pub fn as_warning(&self) -> String {
        let text = self.to_string();
        let error = format!("{}: error: ", self.loc);
        match text.strip_prefix(&error) {
            Some(rest) => format!("{}: warning: {rest}", self.loc),
            None => text,
        }
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: error: {}", self.loc, self.message)?;
        if let Some(line) = &self.snippet {
            let pad: String = line
                .chars()
                .take(self.loc.col.saturating_sub(1) as usize)
                .map(|c| if c == '\t' { '\t' } else { ' ' })
                .collect();
            write!(f, "\n    | {line}\n    | {pad}^")?;
        }
        if let Some(h) = &self.help {
            write!(f, "\n    = help: {h}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Diagnostic {}

/// Several diagnostics, reported together.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostics(pub Vec<Diagnostic>);

impl fmt::Display for Diagnostics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{d}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Diagnostics {}

impl From<Diagnostic> for Diagnostics {
    fn from(d: Diagnostic) -> Self {
        Diagnostics(vec![d])
    }
}
