//! `shell::quote` and `shell::split`: any word quoted and split again is that one word; any
//! line splits or is refused without a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use theseus_core::shell::{join, quote, split};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let _ = split(text);
    if !text.contains('\0') {
        let quoted = quote(text);
        assert_eq!(split(&quoted).as_deref(), Ok(&[text.to_owned()][..]), "split(quote({text:?})) = {quoted}");
        let words: Vec<&str> = text.split('\u{1}').collect();
        assert_eq!(split(&join(&words)).unwrap(), words, "split(join(words))");
    }
});
