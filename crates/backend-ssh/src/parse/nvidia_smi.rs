//! `nvidia-smi` GPU and process listings → free GPUs per chip on a plain host.
//!
//! A GPU is busy when its processes use at least 10 % of its memory, or at least 1024 MiB when
//! its memory size is unknown (the original's rule). GPU names are mapped to chips with
//! [`chips::from_nvidia_smi`], so a request for one chip is never served by another.

use std::collections::BTreeMap;

use theseus_core::availability::Availability;
use theseus_core::chips::{self, Chip};

use super::ParseError;

/// GPUs of the host: uuid, name and memory in MiB.
pub const GPU_QUERY_COMMAND: &str = "nvidia-smi --query-gpu=uuid,name,memory.total --format=csv,noheader,nounits";

/// Processes on the GPUs: GPU uuid and memory used in MiB.
pub const APPS_QUERY_COMMAND: &str =
    "nvidia-smi --query-compute-apps=gpu_uuid,used_memory --format=csv,noheader,nounits";

/// Memory a process may use on a GPU of unknown size before the GPU counts as busy.
const UNKNOWN_TOTAL_BUSY_MIB: u64 = 1024;

/// One GPU of a host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gpu {
    /// `GPU-…` uuid.
    pub uuid: String,
    /// Name as nvidia-smi prints it (`NVIDIA H100 80GB HBM3`).
    pub name: String,
    /// The chip it is, if theseus knows it.
    pub chip: Option<&'static Chip>,
    /// Memory in MiB, `None` when nvidia-smi prints `[N/A]`.
    pub total_mib: Option<u64>,
    /// Memory its processes use, in MiB.
    pub used_mib: u64,
}

impl Gpu {
    /// Whether a job is already using the GPU.
    pub fn is_busy(&self) -> bool {
        match self.total_mib {
            Some(total) if total > 0 => self.used_mib.saturating_mul(10) >= total,
            _ => self.used_mib >= UNKNOWN_TOTAL_BUSY_MIB,
        }
    }

    /// Chip name, or the nvidia-smi name for GPUs theseus does not know.
    pub fn key(&self) -> &str {
        self.chip.map_or(self.name.as_str(), |c| c.name)
    }
}

/// The GPUs of one host and their use.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GpuInventory {
    /// GPUs in nvidia-smi order.
    pub gpus: Vec<Gpu>,
}

impl GpuInventory {
    /// `(total, free)` per chip name (unknown GPUs under their nvidia-smi name).
    pub fn by_chip(&self) -> BTreeMap<String, (u32, u32)> {
        let mut map = BTreeMap::new();
        for gpu in &self.gpus {
            let entry: &mut (u32, u32) = map.entry(gpu.key().to_owned()).or_default();
            entry.0 += 1;
            entry.1 += u32::from(!gpu.is_busy());
        }
        map
    }

    /// Free GPUs of `chip`, or of any kind when `chip` is `None`.
    pub fn free(&self, chip: Option<&Chip>) -> u32 {
        let matches = |g: &&Gpu| chip.is_none_or(|c| g.chip.is_some_and(|gc| gc.name == c.name));
        self.gpus.iter().filter(matches).filter(|g| !g.is_busy()).count() as u32
    }

    /// [`GpuInventory::free`] as an [`Availability`].
    pub fn availability(&self, chip: Option<&Chip>) -> Availability {
        Availability::Free { chips: self.free(chip), source: "nvidia-smi".into() }
    }
}

/// Parses the output of [`GPU_QUERY_COMMAND`] and [`APPS_QUERY_COMMAND`]. "No devices were
/// found" and empty output give no GPUs; unparseable memory values count as unknown (GPU
/// size) or are skipped (process use), as in the original.
pub fn parse(gpus_output: &str, apps_output: &str) -> Result<GpuInventory, ParseError> {
    let mut inv = GpuInventory::default();
    for (idx, raw) in data_lines(gpus_output) {
        let fields: Vec<&str> = raw.split(',').map(str::trim).collect();
        if fields.len() < 3 || fields[0].is_empty() {
            return Err(ParseError::line("nvidia-smi", idx + 1, raw, "expected `uuid, name, memory.total`"));
        }
        let total_mib = fields[fields.len() - 1].parse::<u64>().ok().filter(|t| *t > 0);
        let name = fields[1..fields.len() - 1].join(", ");
        inv.gpus.push(Gpu {
            uuid: fields[0].to_owned(),
            chip: chips::from_nvidia_smi(&name, total_mib),
            name,
            total_mib,
            used_mib: 0,
        });
    }
    for (_, raw) in data_lines(apps_output) {
        let Some((uuid, used)) = raw.split_once(',') else { continue };
        let Ok(used) = used.trim().parse::<u64>() else { continue };
        if let Some(gpu) = inv.gpus.iter_mut().find(|g| g.uuid == uuid.trim()) {
            gpu.used_mib = gpu.used_mib.saturating_add(used);
        }
    }
    Ok(inv)
}

/// Non-empty lines with their index, or none at all when nvidia-smi says it found no devices.
fn data_lines(output: &str) -> Vec<(usize, &str)> {
    if output.contains("No devices were found") || output.contains("No running processes found") {
        return Vec::new();
    }
    output.lines().enumerate().map(|(i, l)| (i, l.trim())).filter(|(_, l)| !l.is_empty()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const H100X2: &str = "GPU-aaaa, NVIDIA H100 80GB HBM3, 81559\nGPU-bbbb, NVIDIA H100 80GB HBM3, 81559\n";

    /// The original's ten cases (tests/test_gpu_availability.py), ported from its whole-host
    /// 100 MiB rule to the per-GPU 10 % rule, on two 80 GB H100s: `(name, apps output, free)`.
    #[test]
    fn original_cases_with_ten_percent_rule() {
        let cases = [
            ("no_processes", "", 2),
            ("xorg_only", "GPU-aaaa, 4\n", 2),
            ("zero_memory", "GPU-aaaa, 0\n", 2),
            ("na_memory", "GPU-aaaa, [N/A]\n", 2),
            ("missing_memory_field", "GPU-aaaa\n", 2),
            ("just_below_threshold", "GPU-aaaa, 8155\n", 2),
            ("at_threshold", "GPU-aaaa, 8156\n", 1),
            ("one_training_job", "GPU-bbbb, 70000\n", 1),
            ("many_small_processes_add_up", "GPU-aaaa, 5000\nGPU-aaaa, 5000\n", 1),
            ("both_busy", "GPU-aaaa, 30000\nGPU-bbbb, 30000\n", 0),
        ];
        for (name, apps, want) in cases {
            let inv = parse(H100X2, apps).unwrap();
            assert_eq!(inv.free(None), want, "{name}");
            assert_eq!(inv.free(chips::lookup("h100")), want, "{name}");
        }
    }

    #[test]
    fn unknown_total_uses_one_gib() {
        let gpus = "GPU-x, NVIDIA GB10, [N/A]\nGPU-y, NVIDIA GB10, [N/A]\n";
        let inv = parse(gpus, "GPU-x, 1023\nGPU-y, 1024\n").unwrap();
        assert_eq!(inv.gpus[0].total_mib, None);
        assert_eq!(inv.by_chip(), BTreeMap::from([("gb10".to_owned(), (2, 1))]));
    }

    #[test]
    fn chips_are_not_mixed_up() {
        let gpus = "GPU-1, NVIDIA A100-SXM4-80GB, 81920\nGPU-2, NVIDIA L40, 46068\nGPU-3, Tesla K80, 11441\n";
        let inv = parse(gpus, "").unwrap();
        let a100 = chips::lookup("a100-sxm4-80gb");
        assert_eq!(inv.free(a100), 1);
        assert_eq!(inv.free(chips::lookup("l40")), 1);
        assert_eq!(inv.free(chips::lookup("a100-pcie-40gb")), 0);
        assert_eq!(inv.free(None), 3);
        assert_eq!(inv.availability(a100), Availability::Free { chips: 1, source: "nvidia-smi".into() });
        let by_chip = inv.by_chip();
        assert_eq!(by_chip["l40"], (1, 1));
        assert_eq!(by_chip["Tesla K80"], (1, 1));
    }

    #[test]
    fn absurd_memory_figures_saturate_instead_of_overflowing() {
        // Found by the fuzzer: a use of 2^61 MiB overflowed the 10 % rule's product.
        let huge = format!("GPU-aaaa, {}\nGPU-aaaa, {}\n", u64::MAX / 4, u64::MAX / 4);
        let inv = parse(H100X2, &huge).unwrap();
        assert_eq!(inv.free(None), 1);
        assert_eq!(inv.gpus[0].used_mib, u64::MAX / 4 * 2);
        let more = format!("GPU-aaaa, {}\nGPU-aaaa, {}\n", u64::MAX, u64::MAX);
        assert_eq!(parse(H100X2, &more).unwrap().gpus[0].used_mib, u64::MAX);
    }

    #[test]
    fn no_devices_and_bad_lines() {
        assert_eq!(parse("No devices were found\n", "").unwrap(), GpuInventory::default());
        assert_eq!(parse("", "No running processes found\n").unwrap(), GpuInventory::default());
        assert_eq!(parse(H100X2, "No running processes found").unwrap().free(None), 2);
        assert!(parse("GPU-aaaa 81559\n", "").is_err());
        // Processes on a GPU nvidia-smi did not list are ignored.
        assert_eq!(parse(H100X2, "GPU-zzzz, 80000\n").unwrap().free(None), 2);
    }
}
