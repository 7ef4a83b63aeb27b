//! The name a kernel instance goes by at run time: what its descriptor gives the runtime
//! (`klaraptor_kernel.name`), and so what every `klaraptor: <name> …` log line, the choices
//! cache's `name` field and file name, the profiling runtime's `kernels.tsv`, and the tools
//! that read them (`klaraptor validate`, `inspect`, `explain`, `choices`) show.
//!
//! A plain kernel goes by its name in the source (`saxpy`). An instance of a kernel
//! template always goes by its name with its template arguments, read from its mangled name
//! (`stencil1d<3>`, `stencil1d<16>`, `scale<float,-2>`, `apply<ns::Plus>`), whether or not
//! the program instantiates the template more than once: a translation unit cannot know what
//! the others instantiate, and the name must not change with the link. The arguments are
//! written without blanks (`,` between them; `unsigned_int`, `long_long`… for the fundamental
//! types whose C++ spelling has a blank), so that the name is one word of a log line. Where
//! an argument cannot be read back here (a qualified type, a substitution, an expression),
//! the instance goes by its mangled name, which is unique and one word too.
//!
//! The names never reach a file name unsanitised: the runtime's choices cache keeps letters
//! and digits only (`stencil1d_3_-<hash>.choice`), and the rational programs' files are
//! named by `klaraptor_program::rational::program_stem`.

/// The run-time name of the kernel `name` (its name in the source, perhaps qualified) whose
/// mangled name is `mangled` ([module docs](self)).
pub fn instance_name(name: &str, mangled: &str) -> String {
    match template_args(name, mangled) {
        None => name.to_string(),
        Some(Some(a)) => format!("{name}<{}>", a.join(",")),
        Some(None) => mangled.to_string(),
    }
}

/// The run-time names of several instances of one annotated kernel (the mangled names of a
/// spec): [`instance_name`], except that instances whose readable names would coincide go
/// by their mangled names.
pub fn instance_names(name: &str, mangled: &[String]) -> Vec<String> {
    let names: Vec<String> = mangled.iter().map(|m| instance_name(name, m)).collect();
    names
        .iter()
        .zip(mangled)
        .map(|(n, m)| {
            if names.iter().filter(|o| *o == n).count() > 1 {
                m.clone()
            } else {
                n.clone()
            }
        })
        .collect()
}

/// Whether the kernel whose mangled name is `mangled` is an instance of a template named
/// `name`.
pub fn is_template_instance(name: &str, mangled: &str) -> bool {
    template_args(name, mangled).is_some()
}

/// The template arguments that follow the kernel's (unqualified) name in its mangled name
/// (`I…E` right after `<len><name>`), each as C++ without blanks (`3`, `-2`, `16u`, `float`,
/// `unsigned_int`, `ns::Plus`, `float*`): `None` for no template instance, `Some(None)` for
/// one whose arguments this does not read.
pub fn template_args(name: &str, mangled: &str) -> Option<Option<Vec<String>>> {
    let short = name.rsplit("::").next().unwrap_or(name);
    if !mangled.starts_with("_Z") || short.is_empty() {
        return None;
    }
    let key = format!("{}{short}I", short.len());
    let at = mangled.find(&key)? + key.len();
    Some(read_args(&mangled[at..]).map(|(a, _)| a))
}

/// The arguments of an `I…E` list (`s` starts after the `I`), each as C++ without blanks,
/// and what follows the `E`; `None` when one of them is of a kind this does not read.
fn read_args(s: &str) -> Option<(Vec<String>, &str)> {
    let mut out = Vec::new();
    let mut s = s;
    while !s.starts_with('E') {
        let (a, rest) = read_arg(s)?;
        out.push(a);
        s = rest;
    }
    Some((out, &s[1..]))
}

/// One template argument at the start of `s`, and what follows it.
fn read_arg(s: &str) -> Option<(String, &str)> {
    if let Some(lit) = s.strip_prefix('L') {
        return read_literal(lit);
    }
    read_type(s)
}

/// `<type><value>E` of a literal (after its `L`): an integer (`3`, `-2`, `16u`, `3l`, `7ull`)
/// or a bool.
fn read_literal(s: &str) -> Option<(String, &str)> {
    let end = s.find('E')?;
    let (ty, value) = (s.get(..1)?, &s[1..end]);
    let (neg, digits) = match value.strip_prefix('n') {
        Some(d) => (true, d),
        None => (false, value),
    };
    if digits.is_empty() || !digits.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let v = format!("{}{digits}", if neg { "-" } else { "" });
    let text = match ty {
        "b" => match digits {
            "0" => "false".to_string(),
            "1" => "true".to_string(),
            _ => return None,
        },
        "i" => v,
        "j" => format!("{v}u"),
        "l" => format!("{v}l"),
        "m" => format!("{v}ul"),
        "x" => format!("{v}ll"),
        "y" => format!("{v}ull"),
        t => format!("({}){v}", builtin(t.as_bytes()[0])?),
    };
    Some((text, &s[end + 1..]))
}

/// A fundamental type's code, spelled without blanks.
fn builtin(c: u8) -> Option<&'static str> {
    Some(match c {
        b'v' => "void",
        b'b' => "bool",
        b'c' => "char",
        b'a' => "signed_char",
        b'h' => "unsigned_char",
        b's' => "short",
        b't' => "unsigned_short",
        b'i' => "int",
        b'j' => "unsigned_int",
        b'l' => "long",
        b'm' => "unsigned_long",
        b'x' => "long_long",
        b'y' => "unsigned_long_long",
        b'n' => "__int128",
        b'o' => "unsigned___int128",
        b'f' => "float",
        b'd' => "double",
        b'e' => "long_double",
        _ => return None,
    })
}

/// A type at the start of `s`: a fundamental type, a pointer to a type this reads, or a class
/// named by source names (`4Plus`, `N2ns4PlusE`, with template arguments of its own).
fn read_type(s: &str) -> Option<(String, &str)> {
    let c = *s.as_bytes().first()?;
    if let Some(t) = builtin(c) {
        return Some((t.to_string(), &s[1..]));
    }
    match c {
        b'P' => {
            let (t, rest) = read_type(&s[1..])?;
            Some((format!("{t}*"), rest))
        }
        b'N' => {
            let mut parts = Vec::new();
            let mut rest = &s[1..];
            while !rest.starts_with('E') {
                let (p, r) = read_class_part(rest)?;
                parts.push(p);
                rest = r;
            }
            (!parts.is_empty()).then(|| (parts.join("::"), &rest[1..]))
        }
        b'0'..=b'9' => read_class_part(s),
        _ => None,
    }
}

/// `<len><identifier>`, perhaps followed by template arguments `I…E`.
fn read_class_part(s: &str) -> Option<(String, &str)> {
    let digits = s.bytes().take_while(u8::is_ascii_digit).count();
    let len: usize = s.get(..digits)?.parse().ok()?;
    let id = s.get(digits..digits + len)?;
    if id.is_empty() || !id.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_') {
        return None;
    }
    let rest = &s[digits + len..];
    let Some(inner) = rest.strip_prefix('I') else {
        return Some((id.to_string(), rest));
    };
    let (args, after) = read_args(inner)?;
    Some((format!("{id}<{}>", args.join(",")), after))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_kernels_keep_their_name() {
        assert_eq!(instance_name("saxpy", "_Z5saxpyfPKfPfi"), "saxpy");
        assert_eq!(instance_name("k", "k"), "k");
        // A name with digits, and parameters after it, are no template.
        assert_eq!(instance_name("k2", "_Z2k2PKfi"), "k2");
        assert!(!is_template_instance("saxpy", "_Z5saxpyfPKfPfi"));
    }

    #[test]
    fn template_instances_get_their_arguments() {
        assert_eq!(
            instance_name("stencil1d", "_Z9stencil1dILi3EEvPKfPfi"),
            "stencil1d<3>"
        );
        assert_eq!(
            instance_name("stencil1d", "_Z9stencil1dILi16EEvPKfPfi"),
            "stencil1d<16>"
        );
        assert!(is_template_instance(
            "stencil1d",
            "_Z9stencil1dILi16EEvPKfPfi"
        ));
        assert_eq!(
            instance_name("scale", "_Z5scaleIfLin2EEvPT_i"),
            "scale<float,-2>"
        );
        assert_eq!(
            instance_name("ns::scale", "_ZN2ns5scaleIdEEvPT_i"),
            "ns::scale<double>"
        );
        assert_eq!(
            instance_name("k", "_Z1kIjLj16ELb1ELm7EEvPT_"),
            "k<unsigned_int,16u,true,7ul>"
        );
        assert_eq!(instance_name("k", "_Z1kIPfEvT_"), "k<float*>");
        assert_eq!(instance_name("apply", "_Z5applyI4PlusEvPfi"), "apply<Plus>");
        assert_eq!(
            instance_name("apply", "_Z5applyIN2op4PlusIfEEEvPfi"),
            "apply<op::Plus<float>>"
        );
        // What this does not read: the mangled name, unique and one word.
        assert_eq!(
            instance_name("apply", "_Z5applyIPKfEvPfi"),
            "_Z5applyIPKfEvPfi"
        );
        assert_eq!(
            instance_name("apply", "_Z5applyIXadL_Z3fooiEEEvPfi"),
            "_Z5applyIXadL_Z3fooiEEEvPfi"
        );
    }

    #[test]
    fn names_are_one_word_and_distinct() {
        let m: Vec<String> = [
            "_Z9stencil1dILi3EEvPKfPfi",
            "_Z9stencil1dILi16EEvPKfPfi",
            "_Z9stencil1dILj3EEvPKfPfi",
        ]
        .map(String::from)
        .to_vec();
        let n = instance_names("stencil1d", &m);
        assert_eq!(n, ["stencil1d<3>", "stencil1d<16>", "stencil1d<3u>"]);
        for x in &n {
            assert!(!x.contains(char::is_whitespace), "{x}");
        }
        // Readable names that would coincide: the mangled ones instead.
        let same: Vec<String> = ["_Z1kILi3EEvv", "_Z1kILi3EEvi"].map(String::from).to_vec();
        assert_eq!(instance_names("k", &same), same);
    }
}
