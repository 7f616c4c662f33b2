//! The chip catalog: the 18 chips of the original dispatcher and TPU v6e, with their memory,
//! case-insensitive aliases, "did you mean" suggestions and mapping of `nvidia-smi` GPU names to chips.

use std::fmt;

const GIB: u64 = 1 << 30;

/// What kind of accelerator a chip is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ChipKind {
    /// A CPU "chip" (CPU-only jobs).
    Cpu,
    /// An NVIDIA GPU.
    Gpu,
    /// A Google TPU.
    Tpu,
}

/// One entry of the catalog.
#[derive(Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub struct Chip {
    /// Canonical name, used in config files and on the command line (`h100`).
    pub name: &'static str,
    /// Human-readable name (`Nvidia H100`).
    pub display_name: &'static str,
    /// Memory per chip in bytes.
    pub memory_bytes: u64,
    /// Kind of accelerator.
    pub kind: ChipKind,
    /// Other accepted spellings (matched case-insensitively, like the name).
    pub aliases: &'static [&'static str],
}

impl fmt::Display for Chip {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name)
    }
}

macro_rules! chip {
    ($name:literal, $display:literal, $mem:expr, $kind:ident, [$($alias:literal),*]) => {
        Chip { name: $name, display_name: $display, memory_bytes: $mem, kind: ChipKind::$kind, aliases: &[$($alias),*] }
    };
}

/// Every chip theseus knows, in the original's order, then the chips it added.
pub static CATALOG: &[Chip] = &[
    chip!("cpu", "CPU", 32 * GIB, Cpu, []),
    chip!("gb10", "Nvidia GB10", 64 * GIB, Gpu, ["nvidia-gb10"]),
    chip!("b200", "Nvidia B200", 192 * GIB, Gpu, ["nvidia-b200", "b200-192gb"]),
    // The original stores int(143.8 * 2^30).
    chip!("h200", "Nvidia H200", 154_404_074_291, Gpu, ["nvidia-h200", "h200-141gb", "h200-sxm"]),
    chip!("h100", "Nvidia H100", 80 * GIB, Gpu, ["nvidia-h100", "h100-80gb", "h100-sxm", "h100-sxm5", "h100-pcie"]),
    chip!(
        "a100-sxm4-80gb",
        "Nvidia A100 SXM4 80GB",
        80 * GIB,
        Gpu,
        ["a100-80gb", "a100-sxm4", "a100_80gb", "nvidia-a100-sxm4-80gb"]
    ),
    chip!(
        "a100-pcie-40gb",
        "Nvidia A100 PCIe 40GB",
        40 * GIB,
        Gpu,
        ["a100-40gb", "a100-pcie", "a100_40gb", "nvidia-a100-pcie-40gb"]
    ),
    chip!("a6000", "Nvidia RTX A6000", 48 * GIB, Gpu, ["rtx-a6000", "rtxa6000"]),
    chip!("ada6000", "Nvidia RTX 6000 Ada", 48 * GIB, Gpu, ["rtx-6000-ada", "rtx6000-ada", "6000ada"]),
    chip!("l40", "Nvidia L40", 48 * GIB, Gpu, ["nvidia-l40"]),
    chip!("l40s", "Nvidia L40S", 48 * GIB, Gpu, ["nvidia-l40s"]),
    chip!("tpu-v2", "Google TPU v2", 8 * GIB, Tpu, ["v2"]),
    chip!("tpu-v3", "Google TPU v3", 16 * GIB, Tpu, ["v3"]),
    chip!("tpu-v4", "Google TPU v4", 32 * GIB, Tpu, ["v4"]),
    chip!("tpu-v5e", "Google TPU v5e", 16 * GIB, Tpu, ["v5e", "v5litepod"]),
    chip!("tpu-v5p", "Google TPU v5p", 95 * GIB, Tpu, ["v5p"]),
    chip!("drive-pg199", "Nvidia Drive PG199", 32 * GIB, Gpu, ["pg199"]),
    chip!("rtx5090", "Nvidia RTX 5090", 32 * GIB, Gpu, ["rtx-5090", "5090"]),
    // Trillium: 32 GiB of HBM per chip (Google's v6e system architecture page).
    chip!("tpu-v6e", "Google TPU v6e", 32 * GIB, Tpu, ["v6e", "trillium"]),
];

/// A chip name that is not in the catalog, with the closest known name if one is close.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown chip \"{name}\"{}", suggestion_text(.suggestion))]
pub struct UnknownChip {
    /// The name as written.
    pub name: String,
    /// The closest catalog name, if any is close enough.
    pub suggestion: Option<&'static str>,
}

fn suggestion_text(suggestion: &Option<&'static str>) -> String {
    match suggestion {
        Some(s) => format!(" (did you mean \"{s}\"?)"),
        None => format!(" (known chips: {})", CATALOG.iter().map(|c| c.name).collect::<Vec<_>>().join(", ")),
    }
}

/// Looks a chip up by name or alias, case-insensitively (`H100`, `h100-80gb` and `h100` are one chip).
pub fn lookup(name: &str) -> Option<&'static Chip> {
    let wanted = normalize(name);
    CATALOG.iter().find(|c| normalize(c.name) == wanted || c.aliases.iter().any(|a| normalize(a) == wanted))
}

/// Like [`lookup`], but an unknown name is an error with a "did you mean" suggestion.
pub fn parse(name: &str) -> Result<&'static Chip, UnknownChip> {
    lookup(name).ok_or_else(|| UnknownChip { name: name.to_owned(), suggestion: suggest(name) })
}

/// The catalog name closest to `name`, if it is close enough to be a plausible typo.
pub fn suggest(name: &str) -> Option<&'static str> {
    let wanted = normalize(name);
    let mut best: Option<(f64, &'static str)> = None;
    for chip in CATALOG {
        for candidate in std::iter::once(chip.name).chain(chip.aliases.iter().copied()) {
            let score = strsim::jaro_winkler(&wanted, &normalize(candidate));
            if best.is_none_or(|(b, _)| score > b) {
                best = Some((score, chip.name));
            }
        }
    }
    best.filter(|(score, _)| *score >= 0.8).map(|(_, n)| n)
}

/// Maps a GPU as `nvidia-smi --query-gpu=name,memory.total` reports it (name and MiB) to a chip.
///
/// The rules follow the original (first match wins on the lowercased name) and add the chips it
/// could never discover (B200, GB10, RTX 6000 Ada).
pub fn from_nvidia_smi(name: &str, memory_mib: Option<u64>) -> Option<&'static Chip> {
    let n = name.to_ascii_lowercase();
    let key = if n.contains("gb10") {
        "gb10"
    } else if n.contains("b200") {
        "b200"
    } else if n.contains("h200") {
        "h200"
    } else if n.contains("h100") {
        "h100"
    } else if n.contains("a100") {
        // 80 GB cards report about 81 920 MiB; 40 GB cards about 40 960 MiB.
        if memory_mib.unwrap_or(0) >= 79_000 { "a100-sxm4-80gb" } else { "a100-pcie-40gb" }
    } else if n.contains("6000 ada") || n.contains("6000ada") {
        "ada6000"
    } else if n.contains("a6000") {
        "a6000"
    } else if n.contains("l40s") {
        "l40s"
    } else if n.contains("l40") {
        "l40"
    } else if n.contains("drive-pg199") || n.contains("pg199") {
        "drive-pg199"
    } else if n.contains("5090") {
        "rtx5090"
    } else {
        return None;
    };
    lookup(key)
}

fn normalize(s: &str) -> String {
    s.trim().to_ascii_lowercase().replace('_', "-")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catalog_has_the_originals_eighteen_chips_and_v6e() {
        assert_eq!(CATALOG.len(), 19);
        let names: std::collections::HashSet<_> = CATALOG.iter().map(|c| c.name).collect();
        assert_eq!(names.len(), 19, "names are unique");
        let v6e = lookup("V6E").unwrap();
        assert_eq!((v6e.name, v6e.kind, v6e.memory_bytes), ("tpu-v6e", ChipKind::Tpu, 32 * GIB));
        assert_eq!(lookup("h200").unwrap().memory_bytes, (143.8 * (1u64 << 30) as f64) as u64);
    }

    #[test]
    fn aliases_are_case_insensitive() {
        for (input, expected) in [
            ("H100", "h100"),
            ("h100-80gb", "h100"),
            ("H100-80GB", "h100"),
            ("a100_80gb", "a100-sxm4-80gb"),
            ("RTX5090", "rtx5090"),
            ("tpu-V4", "tpu-v4"),
        ] {
            assert_eq!(lookup(input).map(|c| c.name), Some(expected), "{input}");
        }
        assert!(lookup("h10").is_none());
    }

    #[test]
    fn unknown_chip_suggests_the_closest_name() {
        let err = parse("h10").unwrap_err();
        assert_eq!(err.to_string(), "unknown chip \"h10\" (did you mean \"h100\"?)");
        assert_eq!(parse("a1000").unwrap_err().suggestion, Some("a100-sxm4-80gb"));
        let far = parse("zzzzzz").unwrap_err();
        assert_eq!(far.suggestion, None);
        assert!(far.to_string().contains("known chips: cpu, gb10"));
    }

    #[test]
    fn nvidia_smi_names_map_to_chips() {
        let cases = [
            ("NVIDIA H100 80GB HBM3", Some(81559), Some("h100")),
            ("NVIDIA A100-SXM4-80GB", Some(81920), Some("a100-sxm4-80gb")),
            ("NVIDIA A100-PCIE-40GB", Some(40960), Some("a100-pcie-40gb")),
            ("NVIDIA RTX A6000", Some(49140), Some("a6000")),
            ("NVIDIA RTX 6000 Ada Generation", Some(49140), Some("ada6000")),
            ("NVIDIA L40S", Some(46068), Some("l40s")),
            ("NVIDIA L40", Some(46068), Some("l40")),
            ("NVIDIA H200", None, Some("h200")),
            ("NVIDIA B200", None, Some("b200")),
            ("NVIDIA GeForce RTX 5090", Some(32607), Some("rtx5090")),
            ("Tesla V100-SXM2-16GB", Some(16160), None),
        ];
        for (name, mib, expected) in cases {
            assert_eq!(from_nvidia_smi(name, mib).map(|c| c.name), expected, "{name}");
        }
    }
}
