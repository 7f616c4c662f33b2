//! The accelerator table: an accelerator type such as `v4-32` read as its chip, chip count
//! and worker count ([`shape`], and [`accelerator`] with the chip from theseus's catalog).
//! Pure: no IO (checked by `cargo xtask tidy`).

use theseus_core::chips::{self, Chip};

/// What an accelerator type such as `v4-32` means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Accelerator {
    /// The chip (`tpu-v4`).
    pub chip: &'static Chip,
    /// Chips in the whole slice.
    pub chips: u32,
    /// Worker VMs (hosts) of the slice.
    pub workers: u32,
    /// Chips on each worker (the last one may have fewer only in types Google does not sell).
    pub chips_per_worker: u32,
}

/// The chip and size of an accelerator type, without the chip catalog (see [`accelerator`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// The catalog name of the chip, e.g. `tpu-v4`, `tpu-v5e`, `tpu-v6e`.
    pub chip: &'static str,
    /// Chips in the whole slice.
    pub chips: u32,
    /// Worker VMs of the slice.
    pub workers: u32,
    /// Chips on each worker.
    pub chips_per_worker: u32,
}

/// One TPU generation: the prefix of its accelerator types, its chip, and whether the suffix
/// counts TensorCores (two per chip) or chips.
struct Generation {
    prefix: &'static str,
    chip: &'static str,
    counts_cores: bool,
}

/// The generations Google sells as TPU VMs. `v2`..`v5p` types count TensorCores (`v4-8` is 4
/// chips); `v5litepod` and `v6e` count chips (`v6e-8` is 8 chips). Source: Google's TPU
/// documentation of each version ("TPU versions", cloud.google.com/tpu/docs/system-architecture-tpu-vm).
const GENERATIONS: &[Generation] = &[
    Generation { prefix: "v2", chip: "tpu-v2", counts_cores: true },
    Generation { prefix: "v3", chip: "tpu-v3", counts_cores: true },
    Generation { prefix: "v4", chip: "tpu-v4", counts_cores: true },
    Generation { prefix: "v5p", chip: "tpu-v5p", counts_cores: true },
    Generation { prefix: "v5litepod", chip: "tpu-v5e", counts_cores: false },
    Generation { prefix: "v6e", chip: "tpu-v6e", counts_cores: false },
];

/// Chips on one worker of the core-counted generations (and of chip-counted slices of 16 chips
/// or more).
const CHIPS_PER_HOST: u32 = 4;

/// The chip, chip count and worker count of an accelerator type (`v4-32`: 16 chips on 4
/// workers; `v5litepod-8`: 8 chips on 1 worker; `v6e-16`: 16 chips on 4 workers).
///
/// # Errors
/// A message saying what is wrong and which types exist.
pub fn shape(accelerator_type: &str) -> Result<Shape, String> {
    let text = accelerator_type.trim();
    let known = || GENERATIONS.iter().map(|g| format!("{}-N", g.prefix)).collect::<Vec<_>>().join(", ");
    if text.is_empty() {
        return Err(format!("no accelerator type is set (write one such as v4-8 or v6e-8; known: {})", known()));
    }
    let Some((prefix, size)) = text.rsplit_once('-') else {
        return Err(format!(
            "{text:?} is not an accelerator type (expected GENERATION-SIZE such as v4-8; known: {})",
            known()
        ));
    };
    let Some(generation) = GENERATIONS.iter().find(|g| g.prefix == prefix) else {
        return Err(format!("unknown TPU generation {prefix:?} in {text:?} (known: {})", known()));
    };
    let size: u32 = match size.parse() {
        Ok(n) if n > 0 => n,
        _ => return Err(format!("{text:?}: the size after `-` must be a positive whole number, e.g. {prefix}-8")),
    };
    let (chips, chips_per_worker) = if generation.counts_cores {
        // Two TensorCores per chip, four chips per host: sizes are whole hosts (8, 16, 32, ...).
        if !size.is_multiple_of(2 * CHIPS_PER_HOST) {
            return Err(format!(
                "{text:?}: {prefix} sizes count TensorCores (2 per chip, 8 per worker) and are multiples of 8, e.g. {prefix}-8 or {prefix}-32"
            ));
        }
        (size / 2, CHIPS_PER_HOST)
    } else {
        match size {
            1 | 4 | 8 => (size, size),
            n if n.is_multiple_of(16) => (n, CHIPS_PER_HOST),
            _ => {
                return Err(format!(
                    "{text:?}: {prefix} sizes count chips: 1, 4 or 8 on one worker, or a multiple of 16 on workers of 4 chips"
                ));
            }
        }
    };
    Ok(Shape { chip: generation.chip, chips, workers: chips.div_ceil(chips_per_worker), chips_per_worker })
}

/// [`shape`] with the chip from theseus's catalog.
///
/// # Errors
/// [`shape`]'s message, or that the catalog lacks the chip.
pub fn accelerator(accelerator_type: &str) -> Result<Accelerator, String> {
    let shape = shape(accelerator_type)?;
    let chip = chips::lookup(shape.chip).ok_or_else(|| {
        format!("{accelerator_type:?}: chip {} is not in theseus's chip catalog (a newer theseus knows it)", shape.chip)
    })?;
    Ok(Accelerator { chip, chips: shape.chips, workers: shape.workers, chips_per_worker: shape.chips_per_worker })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape_of(t: &str) -> (&'static str, u32, u32, u32) {
        let s = shape(t).unwrap();
        (s.chip, s.chips, s.workers, s.chips_per_worker)
    }

    #[test]
    fn accelerator_types_give_chips_and_workers() {
        assert_eq!(shape_of("v2-8"), ("tpu-v2", 4, 1, 4));
        assert_eq!(shape_of("v3-32"), ("tpu-v3", 16, 4, 4));
        assert_eq!(shape_of("v4-8"), ("tpu-v4", 4, 1, 4));
        assert_eq!(shape_of("v4-32"), ("tpu-v4", 16, 4, 4));
        assert_eq!(shape_of("v5p-8"), ("tpu-v5p", 4, 1, 4));
        assert_eq!(shape_of("v5litepod-1"), ("tpu-v5e", 1, 1, 1));
        assert_eq!(shape_of("v5litepod-8"), ("tpu-v5e", 8, 1, 8));
        assert_eq!(shape_of("v5litepod-16"), ("tpu-v5e", 16, 4, 4));
        assert_eq!(shape_of("v6e-8"), ("tpu-v6e", 8, 1, 8));
        assert_eq!(shape_of("v6e-16"), ("tpu-v6e", 16, 4, 4));
        assert_eq!(shape_of("v6e-256"), ("tpu-v6e", 256, 64, 4));
    }

    #[test]
    fn accelerator_takes_the_chip_from_the_catalog() {
        let a = accelerator("v4-32").unwrap();
        assert_eq!((a.chip.name, a.chips, a.workers), ("tpu-v4", 16, 4));
        assert_eq!(accelerator("v5litepod-16").unwrap().chip.name, "tpu-v5e");
        assert_eq!(accelerator("v5p-8").unwrap().chip.name, "tpu-v5p");
        for (t, chip, chips, workers) in [
            ("v2-8", "tpu-v2", 4, 1),
            ("v3-32", "tpu-v3", 16, 4),
            ("v4-8", "tpu-v4", 4, 1),
            ("v5litepod-1", "tpu-v5e", 1, 1),
            ("v5litepod-8", "tpu-v5e", 8, 1),
            ("v6e-8", "tpu-v6e", 8, 1),
            ("v6e-16", "tpu-v6e", 16, 4),
            ("v6e-256", "tpu-v6e", 256, 64),
        ] {
            let a = accelerator(t).unwrap();
            assert_eq!((a.chip.name, a.chips, a.workers), (chip, chips, workers), "{t}");
        }
    }

    #[test]
    fn bad_accelerator_types_say_why() {
        for (bad, says) in [
            ("", "no accelerator type"),
            ("v4", "not an accelerator type"),
            ("v9-8", "unknown TPU generation \"v9\""),
            ("v4-0", "positive whole number"),
            ("v4-x", "positive whole number"),
            ("v4-12", "multiples of 8"),
            ("v5litepod-2", "1, 4 or 8"),
            ("v6e-24", "multiple of 16"),
            ("tpu-v4-8", "unknown TPU generation"),
            ("V4-8", "unknown TPU generation"),
        ] {
            let e = shape(bad).unwrap_err();
            assert!(e.contains(says), "{bad:?}: {e}");
        }
    }
}
