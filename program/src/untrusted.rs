//! The property that keeps a profile entry data and never code (docs/security.md), as one
//! check the tests and the fuzz target share: any text in any string field of an entry either
//! makes a reader refuse the entry as damaged, naming the field, or leaves the kernel
//! unprofiled, or gives a rational program whose C is the same code (the same tokens outside
//! comments and literals, [`klaraptor_model::c_text::code_tokens`]) as the entry without it.

use klaraptor_model::c_text::code_tokens;
use klaraptor_profiler::record::Entry;
use klaraptor_spec::link::LinkSpec;

/// What a reader did with an entry whose string field was changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Refused as damaged; the message names the field.
    Refused(String),
    /// Read, but never used for a model (an incomplete entry).
    Unused,
    /// Used: the program's code is the baseline's.
    Unchanged,
}

/// An entry and the code of the program it gives: the baseline of [`Baseline::check`].
pub struct Baseline {
    spec: LinkSpec,
    entry: toml::Value,
    code: Vec<String>,
    fields: Vec<String>,
}

impl Baseline {
    /// The baseline of `entry` (which must be valid and complete) linked for `spec`.
    pub fn new(spec: LinkSpec, entry: &Entry) -> Result<Baseline, String> {
        let value = toml::Value::try_from(entry).map_err(|e| e.to_string())?;
        let code = code_tokens(&program_c(&spec, entry)?);
        let mut fields = Vec::new();
        string_fields(&value, String::new(), &mut fields);
        fields.push("incomplete".into());
        Ok(Baseline {
            spec,
            entry: value,
            code,
            fields,
        })
    }

    /// Every string field of the entry (`kernel.mangled`, `samples[3].error`, …), and
    /// `incomplete`, which complete entries leave out.
    pub fn fields(&self) -> &[String] {
        &self.fields
    }

    /// The entry's TOML with `text` appended to `field`.
    pub fn with(&self, field: &str, text: &str) -> String {
        let mut v = self.entry.clone();
        if field == "incomplete" {
            if let Some(t) = v.as_table_mut() {
                t.insert(field.into(), toml::Value::String(String::new()));
            }
        }
        field_mut(&mut v, field)
            .unwrap_or_else(|| panic!("no string field {field}"))
            .push_str(text);
        toml::to_string(&v).expect("an entry renders")
    }

    /// Reads `entry_toml` as a link does and checks the property; `Err` says how it broke.
    /// `field` is the field that was changed, which a refusal must name.
    pub fn check(&self, field: &str, entry_toml: &str) -> Result<Verdict, String> {
        let entry = match Entry::from_toml(entry_toml) {
            Err(why) if why.contains(&format!("field `{field}`")) => {
                return Ok(Verdict::Refused(why))
            }
            Err(why) => return Err(format!("refused without naming `{field}`: {why}")),
            Ok(e) => e,
        };
        // The database keeps an entry where its key says (kernel, code hash, device): an entry
        // that names another key is set aside as misplaced, never read for this one.
        let key = |v: &toml::Value| {
            ["kernel.mangled", "kernel.code_hash", "device.name"]
                .map(|f| field_mut(&mut v.clone(), f).cloned())
        };
        let read = toml::Value::try_from(&entry).map_err(|e| e.to_string())?;
        if key(&read) != key(&self.entry) {
            return Ok(Verdict::Refused(format!(
                "field `{field}` names another key than the entry's place in the database"
            )));
        }
        if entry.incompleteness().is_some() {
            return Ok(Verdict::Unused);
        }
        let c = program_c(&self.spec, &entry)?;
        if code_tokens(&c) != self.code {
            return Err(format!("the generated code changed:\n{c}"));
        }
        Ok(Verdict::Unchanged)
    }
}

fn program_c(spec: &LinkSpec, entry: &Entry) -> Result<String, String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    crate::rational::build(spec, entry, dir.path())
        .and_then(|p| p.to_c())
        .map_err(|e| format!("{e:#}"))
}

/// Every string leaf of a TOML value, named as the entry's checks name it.
fn string_fields(v: &toml::Value, path: String, out: &mut Vec<String>) {
    match v {
        toml::Value::String(_) => out.push(path),
        toml::Value::Table(t) => {
            for (k, v) in t {
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                string_fields(v, p, out);
            }
        }
        toml::Value::Array(a) => {
            for (i, v) in a.iter().enumerate() {
                string_fields(v, format!("{path}[{i}]"), out);
            }
        }
        _ => {}
    }
}

/// The string at `path` (as [`string_fields`] names it) in `v`.
pub fn field_mut<'a>(v: &'a mut toml::Value, path: &str) -> Option<&'a mut String> {
    let mut cur = v;
    for part in path.split('.') {
        let (name, index) = match part.split_once('[') {
            Some((n, i)) => (n, Some(i.strip_suffix(']')?.parse::<usize>().ok()?)),
            None => (part, None),
        };
        cur = cur.get_mut(name)?;
        if let Some(i) = index {
            cur = cur.get_mut(i)?;
        }
    }
    match cur {
        toml::Value::String(s) => Some(s),
        _ => None,
    }
}
