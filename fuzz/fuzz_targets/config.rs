//! The dispatch config: a `.theseus.yaml` (the input up to the first NUL byte) and `--set
//! KEY=VALUE` settings (the lines after it) loaded and validated as `theseus` does. Any input
//! loads or is refused with an error; none panics. A config that loads, written out as `config
//! show --output yaml` writes it, loads again to the same config (users save that output as
//! their `.theseus.yaml`).
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use theseus_core::config::{ConfigSources, load::load};

fn file() -> &'static PathBuf {
    static FILE: OnceLock<PathBuf> = OnceLock::new();
    FILE.get_or_init(|| std::env::temp_dir().join(format!("theseus-fuzz-config-{}.yaml", std::process::id())))
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let (yaml, sets) = text.split_once('\0').unwrap_or((text, ""));
    std::fs::write(file(), yaml).expect("the temp file is writable");
    let cli = sets
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    let sources = ConfigSources { explicit_file: Some(file().clone()), cli, ..ConfigSources::default() };
    match load(&sources) {
        Err(e) => assert!(!e.to_string().is_empty()),
        Ok(loaded) => {
            let shown = serde_saphyr::to_string(&loaded.config).expect("a loaded config serializes");
            std::fs::write(file(), &shown).expect("the temp file is writable");
            let again = ConfigSources { explicit_file: Some(file().clone()), ..ConfigSources::default() };
            match load(&again) {
                Ok(reloaded) => assert_eq!(reloaded.config, loaded.config, "config show gave:\n{shown}"),
                Err(e) => panic!("config show's output does not load: {e}\n{shown}"),
            }
        }
    }
});
