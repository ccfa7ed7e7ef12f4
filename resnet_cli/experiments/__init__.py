"""Experiments built on the trainer: degradation, gradient norms, ablation studies, lesions, landscapes.
Each module returns plain data; commands/ renders it."""
