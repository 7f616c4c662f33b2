//! The experiment file (the input up to the first NUL byte) and its `KEY=VALUE` overrides (the
//! lines after it): parsed, overridden and its entrypoint split, as `submit` does. Errors are
//! fine; panics are not.
#![no_main]

use libfuzzer_sys::fuzz_target;
use theseus_core::job::Experiment;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let (yaml, overrides) = text.split_once('\0').unwrap_or((text, ""));
    let Ok(mut experiment) = Experiment::from_yaml(yaml, "fuzz.yaml") else { return };
    let overrides: Vec<String> = overrides.lines().map(str::to_owned).collect();
    if experiment.apply_overrides(&overrides).is_ok() {
        let _ = experiment.entrypoint_words();
    }
});
