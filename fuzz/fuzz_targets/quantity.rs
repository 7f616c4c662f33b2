//! Kubernetes quantities (`500m`, `16Gi`, `1e3`) as the Volcano backend reads queue and node
//! capacity: parsed to a number that is not NaN and keeps its text, or refused.
#![no_main]

use libfuzzer_sys::fuzz_target;
use theseus_backend_volcano::Quantity;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(q) = Quantity::parse(text) {
        assert!(!q.value().is_nan(), "{text:?} is NaN");
        assert_eq!(q.as_str(), text.trim());
    }
});
