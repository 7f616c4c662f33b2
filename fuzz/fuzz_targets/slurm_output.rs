//! What Slurm's clients print, as the Slurm backend reads it: `sinfo`, `squeue` (JSON and
//! text), `sacct`. The first byte picks the parser; the rest is the output. Errors are fine;
//! panics are not.
#![no_main]

use libfuzzer_sys::fuzz_target;
use theseus_backend_slurm::parse::{sacct, sinfo, squeue};

fuzz_target!(|data: &[u8]| {
    let Some((&which, rest)) = data.split_first() else { return };
    let Ok(output) = std::str::from_utf8(rest) else { return };
    match which % 4 {
        0 => drop(sinfo::parse(output)),
        1 => drop(squeue::parse_json(output, "37")),
        2 => drop(squeue::parse_text(output, "37")),
        _ => drop(sacct::parse(output, "37")),
    }
});
