//! The profile database's entry reader on arbitrary text: it must never panic; an entry it
//! accepts must pass its value checks or be refused by them with a message, and must render
//! and read back as the same entry.
#![no_main]

use klaraptor_profiler::record::Entry;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(entry) = toml::from_str::<Entry>(text) else {
        return;
    };
    if let Err(why) = entry.check_values() {
        assert!(!why.is_empty());
        return;
    }
    let _ = entry.incompleteness();
    let again = toml::to_string(&entry).expect("an accepted entry renders");
    let back: Entry = toml::from_str(&again).expect("a rendered entry reads back");
    assert_eq!(back, entry);
});
