//! The expression language on arbitrary text: parsing never panics; what parses prints to
//! text that parses back to the same tree; evaluation never panics (overflow and division
//! by zero are errors).
#![no_main]

use klaraptor_spec::expr;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let names = ["N", "M"];
    let env = [("bx", 32), ("by", 4), ("bz", 1), ("N", 1000), ("M", -7)];
    match expr::parse_int(text, &names) {
        Ok(e) => {
            assert_eq!(expr::parse_int(&e.to_string(), &names).as_ref(), Ok(&e));
            let _ = e.eval(&env);
        }
        Err(err) => assert!(err.offset <= text.len()),
    }
    if let Ok(b) = expr::parse_bool(text, &names) {
        assert_eq!(expr::parse_bool(&b.to_string(), &names).as_ref(), Ok(&b));
        let _ = b.eval(&env);
    }
});
