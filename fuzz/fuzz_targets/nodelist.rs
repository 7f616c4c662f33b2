//! Slurm host lists (`node[1-3,7],gpu-[01-02]`): expanded within the host cap, or refused.
#![no_main]

use libfuzzer_sys::fuzz_target;
use theseus_backend_slurm::nodelist::expand;

fuzz_target!(|data: &[u8]| {
    let Ok(list) = std::str::from_utf8(data) else { return };
    if let Ok(hosts) = expand(list) {
        assert!(hosts.len() <= 100_000, "{} hosts", hosts.len());
        for host in &hosts {
            assert!(!host.contains(',') && !host.contains('['), "{list:?} gave {host:?}");
        }
    }
});
