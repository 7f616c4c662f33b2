//! Pure: no IO (checked by `cargo xtask tidy`).
//!
//! The accelerator types and runtime versions the simulator accepts, and how many workers
//! (TPU VM hosts) a slice has (contract §4): `v2-N`, `v3-N`, `v4-N`, `v5p-N` count TensorCores,
//! two per chip, four chips per worker; `v5litepod-N` and `v6e-N` count chips, with 1, 4 and 8
//! chips on one worker and four chips per worker from 16 up. The sizes are those Google's docs
//! list per generation (cloud.google.com/tpu/docs/system-architecture-tpu-vm, read, not run);
//! every zone the simulator serves offers every type (a divergence: Google offers each
//! generation in a few zones only).

/// A parsed accelerator type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AcceleratorType {
    /// The generation prefix (`v4`, `v5litepod`, ...).
    pub(crate) generation: &'static str,
    /// The number after the dash (TensorCores for v2-v5p, chips for v5e/v6e).
    pub(crate) size: u32,
    /// TPU chips in the slice.
    pub(crate) chips: u32,
    /// Workers (VM hosts) of the slice.
    pub(crate) workers: u32,
}

/// `(generation, counts cores (2 per chip), allowed sizes)`; an empty size list means every
/// multiple of 8 from 8 to 12288 (the v4/v5p topologies).
const GENERATIONS: &[(&str, bool, &[u32])] = &[
    ("v2", true, &[8, 32, 128, 256, 512]),
    ("v3", true, &[8, 32, 64, 128, 256, 512, 1024, 2048]),
    ("v4", true, &[]),
    ("v5p", true, &[]),
    ("v5litepod", false, &[1, 4, 8, 16, 32, 64, 128, 256]),
    ("v6e", false, &[1, 4, 8, 16, 32, 64, 128, 256]),
];

/// Parses `v4-32` and the like; `None` for a type Google does not offer.
pub(crate) fn parse(text: &str) -> Option<AcceleratorType> {
    let (prefix, number) = text.split_once('-')?;
    let size: u32 = number.parse().ok().filter(|n: &u32| n.to_string() == number)?;
    let &(generation, counts_cores, sizes) = GENERATIONS.iter().find(|(g, _, _)| *g == prefix)?;
    let allowed =
        if sizes.is_empty() { (8..=12288).contains(&size) && size.is_multiple_of(8) } else { sizes.contains(&size) };
    if !allowed {
        return None;
    }
    let chips = if counts_cores { size / 2 } else { size };
    let workers = if counts_cores || chips >= 16 { chips.div_ceil(4) } else { 1 };
    Some(AcceleratorType { generation, size, chips, workers })
}

/// Every accelerator type a zone lists (`acceleratorTypes.list`), smallest first per generation.
pub(crate) fn all() -> Vec<String> {
    let mut out = Vec::new();
    for (generation, _, sizes) in GENERATIONS {
        let sizes: Vec<u32> = if sizes.is_empty() { vec![8, 16, 32, 64, 128, 256, 512] } else { sizes.to_vec() };
        out.extend(sizes.iter().map(|s| format!("{generation}-{s}")));
    }
    out
}

/// The runtime versions (software images) the simulator knows, as `gcloud compute tpus
/// versions list` prints them for the current generations.
pub(crate) const RUNTIME_VERSIONS: &[&str] = &[
    "tpu-ubuntu2204-base",
    "tpu-vm-base",
    "tpu-vm-tf-2.16.1-pjrt",
    "tpu-vm-pt-2.0",
    "tpu-vm-v4-base",
    "tpu-vm-v4-pt-2.0",
    "v2-alpha-tpuv5",
    "v2-alpha-tpuv5-lite",
    "v2-alpha-tpuv6e",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workers_follow_the_contract_table() {
        let w = |t: &str| parse(t).map(|a| (a.chips, a.workers));
        assert_eq!(w("v4-8"), Some((4, 1)));
        assert_eq!(w("v4-16"), Some((8, 2)));
        assert_eq!(w("v4-32"), Some((16, 4)));
        assert_eq!(w("v2-8"), Some((4, 1)));
        assert_eq!(w("v3-32"), Some((16, 4)));
        assert_eq!(w("v5p-8"), Some((4, 1)));
        assert_eq!(w("v5litepod-1"), Some((1, 1)));
        assert_eq!(w("v5litepod-8"), Some((8, 1)));
        assert_eq!(w("v5litepod-16"), Some((16, 4)));
        assert_eq!(w("v6e-8"), Some((8, 1)));
        assert_eq!(w("v6e-32"), Some((32, 8)));
    }

    #[test]
    fn unknown_types_and_sizes_are_refused() {
        for bad in ["v4-7", "v4-12", "v9-8", "v4", "v4-08", "v5litepod-2", "v2-16", "v4--8", "", "v6e-"] {
            assert_eq!(parse(bad), None, "{bad}");
        }
        assert!(all().iter().all(|t| parse(t).is_some()));
    }
}
