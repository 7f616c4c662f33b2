//! `#SBATCH` directives and the batch script (in progress).
