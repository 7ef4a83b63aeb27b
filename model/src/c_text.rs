//! Text from outside the program in generated C: the one place that turns a string into a C
//! string literal or into the text of a block comment, so that no input can end either one.
//!
//! Generated C (rational programs, kernel descriptors, device initializers) carries names and
//! provenance that come from files klaraptor does not trust: profile entries, device
//! descriptions, calibration reports. A string literal is escaped completely; comment text is
//! reduced to one line of printable ASCII with every sequence that could close the comment or
//! splice a line taken apart. Neither depends on the C dialect: `?` is escaped in literals and
//! `??` broken in comments, so a compiler that reads trigraphs sees no `??/`.
//!
//! [`code_tokens`] is the check: the tokens of C outside its comments and literals, after the
//! translation phases that could let text escape (trigraphs, line splices).

/// A C string literal of `s`: quotes, backslashes and question marks escaped, every byte that
/// is not printable ASCII written as a three-digit octal escape (so nothing after it can extend
/// it). Nothing in `s` can end the literal.
pub fn string_literal(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for b in s.bytes() {
        match b {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            b'?' => out.push_str("\\?"),
            b' '..=b'~' => out.push(char::from(b)),
            _ => out.push_str(&format!("\\{b:03o}")),
        }
    }
    out.push('"');
    out
}

/// `s` as the text of a C block comment: one line of printable ASCII. Line breaks and tabs
/// become spaces, a backslash `|`, any other byte outside printable ASCII `?`; a space is put
/// between `*` and `/` (either order) and between two `?`, so the text can neither close the
/// comment nor open a nested one nor form a trigraph.
pub fn comment_text(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut prev = ' ';
    for ch in s.chars() {
        let c = match ch {
            '\n' | '\r' | '\t' => ' ',
            '\\' => '|',
            ' '..='~' => ch,
            _ => '?',
        };
        if matches!((prev, c), ('*', '/') | ('/', '*') | ('?', '?')) {
            out.push(' ');
        }
        out.push(c);
        prev = c;
    }
    out
}

/// Whether `s` is a C identifier (ASCII letters, digits and `_`, not starting with a digit).
pub fn is_identifier(s: &str) -> bool {
    !s.is_empty()
        && !s.starts_with(|c: char| c.is_ascii_digit())
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The tokens of the C source `c` outside its comments, string and character literals, as a
/// compiler reads them: trigraphs replaced and line splices removed first (translation phases
/// 1 and 2, taking trigraphs as enabled, the stricter reading), then comments dropped, each
/// literal replaced by the placeholder `"…"` (or `'…'`), preprocessor line ends kept as `\n`
/// tokens and other whitespace dropped. Two sources with the same tokens are the same code; an
/// input that escaped a comment or a literal changes them.
pub fn code_tokens(c: &str) -> Vec<String> {
    let text = splice_lines(&replace_trigraphs(c));
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut Vec<String>| {
        if !word.is_empty() {
            out.push(std::mem::take(word));
        }
    };
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'/' if b.get(i + 1) == Some(&b'*') => {
                flush(&mut word, &mut out);
                i = match text[i + 2..].find("*/") {
                    Some(end) => i + 2 + end + 2,
                    None => {
                        out.push("<unterminated comment>".into());
                        b.len()
                    }
                };
                // A comment is one space.
                continue;
            }
            b'/' if b.get(i + 1) == Some(&b'/') => {
                flush(&mut word, &mut out);
                i = text[i..].find('\n').map_or(b.len(), |e| i + e);
                continue;
            }
            q @ (b'"' | b'\'') => {
                flush(&mut word, &mut out);
                let mut j = i + 1;
                while j < b.len() && b[j] != q && b[j] != b'\n' {
                    j += if b[j] == b'\\' { 2 } else { 1 };
                }
                if j >= b.len() || b[j] != q {
                    out.push("<unterminated literal>".into());
                }
                out.push(if q == b'"' { "\"…\"" } else { "'…'" }.into());
                i = j + 1;
                continue;
            }
            b'\n' => {
                flush(&mut word, &mut out);
                out.push("\n".into());
            }
            c if c.is_ascii_whitespace() => flush(&mut word, &mut out),
            c if c.is_ascii_alphanumeric() || c == b'_' || c == b'.' => word.push(char::from(c)),
            _ => {
                flush(&mut word, &mut out);
                // Multi-byte UTF-8 outside literals is code too; keep each char whole.
                let ch = text[i..].chars().next().expect("in bounds");
                out.push(ch.to_string());
                i += ch.len_utf8();
                continue;
            }
        }
        i += 1;
    }
    flush(&mut word, &mut out);
    out
}

/// Translation phase 1's trigraphs (`??/` is `\`, `??=` is `#`, …).
fn replace_trigraphs(c: &str) -> String {
    const TRIGRAPHS: [(&str, &str); 9] = [
        ("??=", "#"),
        ("??(", "["),
        ("??/", "\\"),
        ("??)", "]"),
        ("??'", "^"),
        ("??<", "{"),
        ("??!", "|"),
        ("??>", "}"),
        ("??-", "~"),
    ];
    let mut out = String::with_capacity(c.len());
    let mut rest = c;
    while let Some(at) = rest.find("??") {
        out.push_str(&rest[..at]);
        match TRIGRAPHS.iter().find(|(t, _)| rest[at..].starts_with(t)) {
            Some((t, r)) => {
                out.push_str(r);
                rest = &rest[at + t.len()..];
            }
            None => {
                out.push('?');
                rest = &rest[at + 1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// Translation phase 2: a backslash at the end of a line joins it to the next.
fn splice_lines(c: &str) -> String {
    c.replace("\\\r\n", "").replace("\\\n", "")
}

#[cfg(test)]
mod tests {
    use super::*;

    const NASTY: [&str; 10] = [
        "*/ int pwned = 1; /*",
        "x\n#error injected\n",
        "a\" ; int pwned; \"",
        "ends in a backslash \\",
        "*\\\n/ int pwned;",
        "*??/\n/ int pwned;",
        "??/\" int pwned; \"",
        "/* nested",
        "tab\tand\rcarriage",
        "non-ASCII é and NUL \0 and DEL \x7f",
    ];

    /// The code around an inserted text: a comment and a literal.
    fn around(comment: &str, literal: &str) -> String {
        format!(
            "/* header: {} */\nstatic const char *p = {};\nint f(void) {{ return 1; }}\n",
            comment_text(comment),
            string_literal(literal)
        )
    }

    #[test]
    fn no_text_leaves_a_comment_or_a_literal() {
        let plain = code_tokens(&around("collector 0.1.0", "NVIDIA H200"));
        for s in NASTY {
            assert_eq!(code_tokens(&around(s, s)), plain, "{s:?}");
            let c = comment_text(s);
            assert!(
                !c.contains("*/") && !c.contains("/*") && !c.contains("??"),
                "{c}"
            );
            assert!(
                c.bytes().all(|b| (b' '..=b'~').contains(&b) && b != b'\\'),
                "{c}"
            );
        }
    }

    #[test]
    fn the_check_sees_text_that_escaped() {
        let plain = code_tokens(&around("x", "x"));
        // What the emission used to do: the text as it is, quotes replaced.
        for s in ["*/ int pwned = 1; /*", "*??/\n/ int pwned;", "*\\\n/ x"] {
            let raw = format!(
                "/* header: {s} */\nstatic const char *p = \"x\";\nint f(void) {{ return 1; }}\n"
            );
            assert_ne!(code_tokens(&raw), plain, "{s:?}");
        }
        let raw = "/* header: x */\nstatic const char *p = \"x\\\";\nint f(void) { return 1; }\n";
        assert_ne!(code_tokens(raw), plain);
    }

    #[test]
    fn literals_keep_the_text_readable() {
        assert_eq!(string_literal("NVIDIA H200"), "\"NVIDIA H200\"");
        assert_eq!(string_literal("a\"b\\c?"), "\"a\\\"b\\\\c\\?\"");
        assert_eq!(string_literal("é"), "\"\\303\\251\"");
        assert_eq!(
            comment_text("klaraptor-cupti 0.1.0"),
            "klaraptor-cupti 0.1.0"
        );
        assert_eq!(comment_text("a*/b/*c??d"), "a* /b/ *c? ?d");
        assert!(is_identifier("N_1") && !is_identifier("1N") && !is_identifier("N; x"));
    }
}
