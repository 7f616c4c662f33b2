//! Where a Slurm job goes ([`SlurmPlacement`]: its partition and GRES type), as the fit rule
//! writes it into the plan's placement keys and `sbatch` reads it back. Pure.

use theseus_core::fit::Layout;
use theseus_core::plan::Plan;

/// The plan's placement key of the partition.
const PARTITION: &str = "partition";
/// The plan's placement key of the GRES type token.
const GRES_TYPE: &str = "gres_type";

/// A Slurm job's placement.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SlurmPlacement {
    /// `#SBATCH --partition`.
    pub partition: Option<String>,
    /// The GRES type token (`h100` in `gpu:h100:4`), `None` for untyped or no GPUs.
    pub gres_type: Option<String>,
}

impl SlurmPlacement {
    /// The placement `plan` carries (none: a plan of another type).
    pub fn of(plan: &Plan) -> SlurmPlacement {
        let get = |key: &str| plan.placement.get(key).cloned().flatten();
        SlurmPlacement { partition: get(PARTITION), gres_type: get(GRES_TYPE) }
    }

    /// `layout` with this placement, as keys and as the plan line's text
    /// (`, partition gpu, gres gpu:h100:4`); the layout's chips per node are final.
    pub fn place(self, mut layout: Layout) -> Layout {
        let mut text = String::new();
        if let Some(partition) = &self.partition {
            text.push_str(&format!(", partition {partition}"));
            if layout.chips_per_node > 0 {
                match &self.gres_type {
                    Some(gres) => text.push_str(&format!(", gres gpu:{gres}:{}", layout.chips_per_node)),
                    None => text.push_str(&format!(", gres gpu:{}", layout.chips_per_node)),
                }
            }
        }
        layout.placement.insert(PARTITION.into(), self.partition);
        layout.placement.insert(GRES_TYPE.into(), self.gres_type);
        layout.placement_text = text;
        layout
    }
}
