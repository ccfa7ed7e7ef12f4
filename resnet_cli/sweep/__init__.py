"""Running many runs: plan (a study file into planned runs), engine (the one sweep engine: in this
process or on workers), workers, slurm (a SLURM job array), budgets (a study at several lengths)."""
