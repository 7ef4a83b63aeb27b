//! The documentation against the tree and the tools: every relative link of README.md,
//! docs/ and bench/results/ points at a file of the repository (and at a heading, where it
//! names one); the README stays short and opens with the set-up command and an annotated
//! kernel; the README's example compiles with klaraptor-cc as written and is instrumented;
//! what `klaraptor-cc --kl-help` and `klaraptor --help` list is documented in docs/usage.md.

mod common;
use common::*;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// The Markdown files whose links are checked, relative to the root.
fn documents() -> Vec<String> {
    let mut out = vec![
        "README.md".to_string(),
        "bench/results/README.md".to_string(),
        "bench/results/archive/README.md".to_string(),
    ];
    let mut docs: Vec<String> = std::fs::read_dir(root().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .map(|p| format!("docs/{}", p.file_name().unwrap().to_string_lossy()))
        .collect();
    docs.sort();
    out.extend(docs);
    out
}

/// The lines of a Markdown text outside fenced code blocks, with their numbers (from 1).
fn prose_lines(text: &str) -> Vec<(usize, &str)> {
    let mut fenced = false;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            out.push((i + 1, line));
        }
    }
    out
}

/// A line with its inline code spans blanked out (their text cannot hold links), except
/// inside a link's brackets, where the text does not matter either.
fn without_code_spans(line: &str) -> String {
    let mut out = String::new();
    let mut rest = line;
    while let Some(start) = rest.find('`') {
        out.push_str(&rest[..start]);
        let ticks = rest[start..].chars().take_while(|&c| c == '`').count();
        let after = &rest[start + ticks..];
        match after.find(&"`".repeat(ticks)) {
            Some(end) => {
                out.push('x');
                rest = &after[end + ticks..];
            }
            None => {
                out.push_str(&rest[start..]);
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out
}

/// The targets of the inline links `[text](target)` of a line.
fn link_targets(line: &str) -> Vec<String> {
    let re = regex::Regex::new(r"\[[^\]]*\]\(([^)\s]+)\)").unwrap();
    let line = without_code_spans(line);
    re.captures_iter(&line).map(|c| c[1].to_string()).collect()
}

/// The anchors GitHub gives the headings of a Markdown text: lower case, punctuation but
/// `-` and `_` dropped, blanks made `-`; a repeated one gets `-1`, `-2`, ….
fn anchors(text: &str) -> Vec<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = Vec::new();
    for (_, line) in prose_lines(text) {
        let Some(title) = line
            .strip_prefix('#')
            .map(|t| t.trim_start_matches('#'))
            .filter(|t| t.starts_with(' '))
        else {
            continue;
        };
        let slug: String = title
            .trim()
            .to_lowercase()
            .chars()
            .filter_map(|c| match c {
                ' ' => Some('-'),
                c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                _ => None,
            })
            .collect();
        let n = seen.entry(slug.clone()).or_insert(0);
        out.push(if *n == 0 {
            slug.clone()
        } else {
            format!("{slug}-{n}")
        });
        *n += 1;
    }
    out
}

#[test]
fn every_relative_link_points_at_a_file_of_the_repository() {
    let root = root().canonicalize().unwrap();
    let mut broken = Vec::new();
    let mut checked = 0;
    for doc in documents() {
        let text = read(&doc);
        let dir = root.join(&doc).parent().unwrap().to_path_buf();
        for (n, line) in prose_lines(&text) {
            for target in link_targets(line) {
                if target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                checked += 1;
                let (file, anchor) = match target.split_once('#') {
                    Some((f, a)) => (f, Some(a)),
                    None => (target.as_str(), None),
                };
                let path = if file.is_empty() {
                    root.join(&doc)
                } else {
                    dir.join(file)
                };
                let Ok(path) = path.canonicalize() else {
                    broken.push(format!("{doc}:{n}: {target}: no such file"));
                    continue;
                };
                if !path.starts_with(&root) {
                    broken.push(format!("{doc}:{n}: {target}: outside the repository"));
                    continue;
                }
                if let Some(anchor) = anchor {
                    if path.extension().is_some_and(|x| x == "md") {
                        let there = std::fs::read_to_string(&path).unwrap();
                        if !anchors(&there).iter().any(|a| a == anchor) {
                            broken.push(format!("{doc}:{n}: {target}: no heading #{anchor}"));
                        }
                    }
                }
            }
        }
    }
    assert!(
        checked > 100,
        "only {checked} links found: is the scan broken?"
    );
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn the_readme_is_short_and_opens_with_the_commands_and_an_example() {
    let readme = read("README.md");
    let lines: Vec<&str> = readme.lines().collect();
    assert!(
        lines.len() <= 250,
        "README.md has {} lines (at most 250: the rest belongs in docs/)",
        lines.len()
    );
    let head = lines[..40.min(lines.len())].join("\n");
    for needle in [
        "scripts/setup",
        "#pragma klaraptor",
        "make NVCC=klaraptor-cc",
    ] {
        assert!(
            head.contains(needle),
            "the first 40 lines of README.md lack `{needle}`"
        );
    }
}

/// The body of the first fenced block of `lang` in `text`.
fn fenced_block(text: &str, lang: &str) -> String {
    let mut lines = text
        .lines()
        .skip_while(|l| l.trim() != format!("```{lang}"));
    assert!(lines.next().is_some(), "no ```{lang} block in README.md");
    let body: Vec<&str> = lines.take_while(|l| l.trim() != "```").collect();
    body.join("\n") + "\n"
}

/// The body of the first ```text block after the line holding `marker`.
fn text_block_after(text: &str, marker: &str) -> Vec<String> {
    let after = &text[text
        .find(marker)
        .unwrap_or_else(|| panic!("README.md lacks {marker:?}"))..];
    fenced_block(after, "text")
        .lines()
        .map(str::to_string)
        .collect()
}

/// The README's example, as written: the ```cuda block compiles to an object through
/// klaraptor-cc and its launch is instrumented; the ```make block builds it with
/// `make NVCC=klaraptor-cc`, and beside the repository's committed profiles (as the README
/// says) the binary carries the rational programs whose `klaraptor inspect` and `explain`
/// lines the README quotes.
#[test]
fn the_readme_example_compiles_and_is_instrumented() {
    let readme = read("README.md");
    let source = fenced_block(&readme, "cuda");
    assert!(source.contains("#pragma klaraptor"), "{source}");
    let makefile = fenced_block(&readme, "make");

    // As in a new directory under samples/: the committed database one level up.
    let top = tempfile::tempdir().unwrap();
    copy_dir(
        &root().join("samples/klaraptor-profiles"),
        &top.path().join("klaraptor-profiles"),
    );
    let dir = top.path().join("example");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("saxpy.cu"), &source).unwrap();
    std::fs::write(dir.join("Makefile"), &makefile).unwrap();
    let tool = |prog: &Path, args: &[&str]| {
        Command::new(prog)
            .args(args)
            .current_dir(&dir)
            .env("KLARAPTOR_NVCC", nvcc())
            .env("KLARAPTOR_NO_GPU", "1")
            .env_remove("KLARAPTOR_PROFILE_DB")
            .env_remove("KLARAPTOR_CACHE")
            .env_remove("NVCC_PREPEND_FLAGS")
            .env_remove("NVCC_APPEND_FLAGS")
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", prog.display()))
    };

    // The kernel compiles to an object, and its launch in main is instrumented.
    let o = tool(
        &klaraptor_cc(),
        &[
            "-O2",
            "-std=c++17",
            "-gencode",
            "arch=compute_90,code=sm_90",
            "-c",
            "saxpy.cu",
            "-o",
            "saxpy.o",
            "--kl-verbose",
        ],
    );
    let err = ok(&o);
    assert!(
        err.contains("klaraptor-cc: instrumented a launch of _Z5saxpyfPKfPfi in main"),
        "the README's example was not instrumented:\n{err}"
    );
    let specs =
        klaraptor_spec::link::scan_bytes(&std::fs::read(dir.join("saxpy.o")).unwrap(), &dir)
            .unwrap();
    assert!(
        specs.iter().any(|s| s.mangled == "_Z5saxpyfPKfPfi"),
        "the object carries no spec of saxpy"
    );

    // `make NVCC=klaraptor-cc` with the README's Makefile.
    let make = Command::new("make")
        .arg(format!("NVCC={}", klaraptor_cc().display()))
        .current_dir(&dir)
        .env("KLARAPTOR_NVCC", nvcc())
        .env("KLARAPTOR_NO_GPU", "1")
        .env_remove("KLARAPTOR_PROFILE_DB")
        .env_remove("KLARAPTOR_CACHE")
        .env_remove("NVCC_PREPEND_FLAGS")
        .env_remove("NVCC_APPEND_FLAGS")
        .output()
        .expect("cannot run make");
    ok(&make);
    assert!(dir.join("app").is_file(), "make built no ./app");

    // What the README quotes of `klaraptor inspect` and `explain` (the lines that do not
    // depend on the model's numbers).
    let inspect = tool(&klaraptor(), &["inspect", "./app"]);
    ok(&inspect);
    let inspect = String::from_utf8_lossy(&inspect.stdout).into_owned();
    let quoted = text_block_after(&readme, "`klaraptor inspect ./app` shows");
    assert!(quoted.len() >= 4, "{quoted:?}");
    for line in &quoted {
        assert!(
            inspect.lines().any(|l| l == line),
            "README.md quotes a line `klaraptor inspect` does not print: {line:?}\n{inspect}"
        );
    }
    let explain = tool(
        &klaraptor(),
        &[
            "explain", "./app", "saxpy", "--size", "1000000", "--device", "H200",
        ],
    );
    ok(&explain);
    let explain = String::from_utf8_lossy(&explain.stdout).into_owned();
    let quoted = text_block_after(&readme, "`klaraptor explain ./app saxpy --size 1000000");
    for line in &quoted[..2] {
        assert!(
            explain.lines().any(|l| l == line),
            "README.md quotes a line `klaraptor explain` does not print: {line:?}\n{explain}"
        );
    }
    // The ranked rows: a choice is marked, each row names a block and a limiting factor.
    assert!(
        explain.lines().any(|l| l.starts_with("*    1 ")),
        "{explain}"
    );
}

/// klaraptor-cc's own options and variables, as `--kl-help` lists them, are documented in
/// docs/usage.md; so is every `klaraptor` command, and each command's help says first what
/// it is for.
#[test]
fn the_options_the_tools_list_are_documented() {
    let usage = read("docs/usage.md");
    let o = Command::new(klaraptor_cc())
        .arg("--kl-help")
        .output()
        .unwrap();
    assert!(o.status.success());
    let help = String::from_utf8_lossy(&o.stdout).into_owned();
    let words = regex::Regex::new(r"--kl-[a-z-]+|KLARAPTOR_[A-Z_]+").unwrap();
    let listed: std::collections::BTreeSet<&str> =
        words.find_iter(&help).map(|m| m.as_str()).collect();
    assert!(listed.contains("--kl-help") && listed.contains("KLARAPTOR_NVCC"));
    for w in &listed {
        assert!(
            usage.contains(w),
            "klaraptor-cc --kl-help lists {w}, which docs/usage.md does not document"
        );
    }

    let o = Command::new(klaraptor()).arg("--help").output().unwrap();
    assert!(o.status.success());
    let help = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        !help.lines().next().unwrap_or("").starts_with("Usage"),
        "`klaraptor --help` should say first what klaraptor is for:\n{help}"
    );
    let commands: Vec<String> = help
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .filter(|c| c != "help")
        .collect();
    assert!(commands.len() >= 10, "{help}");
    for c in &commands {
        assert!(
            usage.contains(&format!("`klaraptor {c}")),
            "`klaraptor {c}` is not documented in docs/usage.md"
        );
        let o = Command::new(klaraptor())
            .args([c.as_str(), "--help"])
            .output()
            .unwrap();
        let first = String::from_utf8_lossy(&o.stdout)
            .lines()
            .next()
            .unwrap_or("")
            .to_string();
        assert!(
            !first.is_empty() && !first.starts_with("Usage"),
            "`klaraptor {c} --help` should say first what it is for, not {first:?}"
        );
    }
}
