//! `bench/accuracy/split.toml`: each suite's programs fall into a tuning half and a test half
//! by the rule its header states, and the halves cover the suite's Makefile exactly.

use std::collections::BTreeMap;
use std::path::Path;

#[derive(serde::Deserialize)]
struct Half {
    tuning: Vec<String>,
    test: Vec<String>,
    #[serde(default)]
    family: BTreeMap<String, String>,
    /// Programs added after the first split, placed by the second batch's rule.
    #[serde(default)]
    second_batch: Vec<String>,
    /// Programs added for issue 41, each a family of its own, all placed in the test half
    /// before any profiling or model work.
    #[serde(default)]
    third_batch: Vec<String>,
    /// Programs added for issue 38: sorted by name, they alternate starting with test,
    /// whatever their family.
    #[serde(default)]
    fourth_batch: Vec<String>,
}

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .parent()
        .unwrap()
}

fn split() -> BTreeMap<String, Half> {
    let text = std::fs::read_to_string(root().join("bench/accuracy/split.toml")).unwrap();
    toml::from_str(&text).unwrap()
}

/// The programs of samples/<suite>/Makefile, sorted by name.
fn programs(suite: &str) -> Vec<String> {
    let mk = std::fs::read_to_string(root().join(format!("samples/{suite}/Makefile"))).unwrap();
    let line = mk
        .lines()
        .find_map(|l| l.strip_prefix("PROGRAMS := "))
        .expect("a PROGRAMS := line");
    let mut p: Vec<String> = line.split_whitespace().map(String::from).collect();
    p.sort();
    p
}

fn alternate<T: Clone>(items: &[T], parity: usize) -> Vec<T> {
    items
        .iter()
        .enumerate()
        .filter(|(i, _)| i % 2 == parity)
        .map(|(_, x)| x.clone())
        .collect()
}

#[test]
fn polybench_alternates_by_name() {
    let s = split();
    let h = &s["polybench"];
    let all = programs("polybench");
    assert_eq!(all.len(), 21);
    assert_eq!(h.tuning, alternate(&all, 0));
    assert_eq!(h.test, alternate(&all, 1));
}

#[test]
fn idioms_alternate_by_family() {
    let s = split();
    let h = &s["idioms"];
    let all = programs("idioms");
    let mut named: Vec<String> = h.family.keys().cloned().collect();
    named.sort();
    assert_eq!(named, all, "every idioms program has one family");
    let first: Vec<&String> = all
        .iter()
        .filter(|p| {
            !h.second_batch.contains(p) && !h.third_batch.contains(p) && !h.fourth_batch.contains(p)
        })
        .collect();
    assert_eq!(first.len(), 11, "the first batch is fixed");
    // First batch: its families sorted by name, the 1st, 3rd, ... tuning.
    let mut families: Vec<&String> = first.iter().map(|p| &h.family[*p]).collect();
    families.sort();
    families.dedup();
    // Second batch: a program of an existing family joins its half; the new families sorted
    // by name alternate starting with test.
    let mut new: Vec<&String> = h
        .second_batch
        .iter()
        .map(|p| &h.family[p])
        .filter(|f| !families.contains(f))
        .collect();
    new.sort();
    new.dedup();
    // Third batch: each program a new family of its own, in the test half.
    let mut third: Vec<&String> = h.third_batch.iter().map(|p| &h.family[p]).collect();
    third.sort();
    third.dedup();
    assert_eq!(third.len(), h.third_batch.len(), "one family per program");
    for f in &third {
        assert!(
            !families.contains(f) && !new.contains(f),
            "{f}: a third-batch family must be new"
        );
    }
    // Fourth batch: sorted by name, the 1st, 3rd, ... test, whatever the family.
    let mut fourth = h.fourth_batch.clone();
    fourth.sort();
    assert_eq!(
        fourth, h.fourth_batch,
        "the fourth batch is listed sorted by name"
    );
    assert_eq!(fourth.len(), 8, "the fourth batch is fixed");
    let side = |p: &String| match families.iter().position(|f| *f == &h.family[p]) {
        _ if fourth.contains(p) => (fourth.iter().position(|q| q == p).unwrap() + 1) % 2,
        Some(i) => i % 2,
        None if h.third_batch.contains(p) => 1,
        None => (new.iter().position(|f| *f == &h.family[p]).unwrap() + 1) % 2,
    };
    let mut tuning: Vec<String> = all.iter().filter(|p| side(p) == 0).cloned().collect();
    let mut test: Vec<String> = all.iter().filter(|p| side(p) == 1).cloned().collect();
    let (mut want_tuning, mut want_test) = (h.tuning.clone(), h.test.clone());
    for v in [&mut tuning, &mut test, &mut want_tuning, &mut want_test] {
        v.sort();
    }
    assert_eq!(want_tuning, tuning);
    assert_eq!(want_test, test);
}
