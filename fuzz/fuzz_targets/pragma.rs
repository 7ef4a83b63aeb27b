//! The pragma scanner and the `klaraptor.toml` reader on arbitrary text: they must never
//! panic, every diagnostic must point inside the text, and blanking our pragmas must keep
//! the line count.
#![no_main]

use std::path::Path;

use klaraptor_spec::{annotations, config};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let lines = text.lines().count().max(1) as u32 + 1;
    match annotations::scan(Path::new("f.cu"), text) {
        Ok(s) => {
            let stripped = annotations::strip(text, &s.pragma_lines);
            assert_eq!(stripped.matches('\n').count(), text.matches('\n').count());
            let again =
                annotations::scan(Path::new("f.cu"), &stripped).expect("stripped text rescans");
            assert!(again.pragma_lines.is_empty());
        }
        Err(d) => assert!(d
            .0
            .iter()
            .all(|d| d.loc.line >= 1 && d.loc.line <= lines && d.loc.col >= 1)),
    }
    let _ = config::parse(Path::new("klaraptor.toml"), text);
});
