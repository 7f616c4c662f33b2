//! `nvidia-smi` output as the plain-SSH probe reads it: the GPU query (up to the first NUL
//! byte) and the compute-apps query (after it). A parsed inventory never has more busy GPUs
//! than GPUs.
#![no_main]

use libfuzzer_sys::fuzz_target;
use theseus_backend_ssh::parse::nvidia_smi;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let (gpus, apps) = text.split_once('\0').unwrap_or((text, ""));
    if let Ok(inventory) = nvidia_smi::parse(gpus, apps) {
        for (chip, (total, free)) in inventory.by_chip() {
            assert!(free <= total, "{chip}: {free} free of {total}");
        }
        let _ = inventory.free(None);
    }
});
