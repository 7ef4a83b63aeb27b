//! A profile entry's strings never become code (docs/security.md): the fuzzer's bytes pick a
//! string field of a committed entry and text to append to it; the entry must then be refused
//! naming that field, or left unused, or give a rational program with the same code as the
//! committed entry (klaraptor_program::untrusted).
#![no_main]

use std::sync::OnceLock;

use klaraptor_program::untrusted::Baseline;
use libfuzzer_sys::fuzz_target;

/// samples/matmul's saxpy, profiled on an H200, and its annotation.
const ENTRY: &str = include_str!(
    "../../samples/klaraptor-profiles/v1/nvidia-h200-2803d38c/_Z5saxpyfPKfPfi-303aeacbd19721f5.toml"
);

fn baseline() -> &'static Baseline {
    static BASE: OnceLock<Baseline> = OnceLock::new();
    BASE.get_or_init(|| {
        let mut entry = klaraptor_profiler::record::Entry::from_toml(ENTRY).expect("a valid entry");
        entry.plan.note = "sizes of the recipe".into();
        let mut failed = entry.samples[0].clone();
        failed.block = [2048, 1, 1];
        failed.counters = None;
        failed.error = Some("block 2048x1x1 exceeds the device's 1024 threads per block".into());
        entry.samples.push(failed);
        let spec = klaraptor_spec::link::LinkSpec {
            shmem: None,
            name: entry.kernel.name.clone(),
            mangled: entry.kernel.mangled.clone(),
            data: entry.kernel.data.clone(),
            dim: entry.kernel.dim,
            grid: vec!["ceil(N, bx)".into()],
            block: vec!["bx >= 32".into()],
            profile_run: None,
            profile_sizes: vec![],
            code_hash: entry.kernel.code_hash.clone(),
            annotated_at: String::new(),
            build_dir: Default::default(),
        };
        Baseline::new(spec, &entry).expect("the committed entry makes a program")
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, text)) = data.split_first() else {
        return;
    };
    let base = baseline();
    let field = &base.fields()[usize::from(pick) % base.fields().len()];
    let text = String::from_utf8_lossy(text);
    if let Err(e) = base.check(field, &base.with(field, &text)) {
        panic!("{field} += {text:?}: {e}");
    }
});
