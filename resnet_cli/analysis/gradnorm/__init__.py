"""The gradient highway, measured (He 2016b sec. 3; He 2016a Fig. 7), one module per measurement:

    norms.py      `measure(specs)`: ||dE/dW|| of every weight layer and ||dE/dx_l|| of each unit's
                  input at step 1 (or over the first K steps), nets side by side; `variant_tree`
    jacobian.py   `toy_gains()` / `spectral_norm()`: largest gain of d(output)/d(input), plain vs
                  residual stacks, by power iteration
    layer_responses.py  `responses(run_dir)`: std of each layer's response after BN, for a trained run

The per-layer hooks they share are in `resnet_cli/training/probes.py`; `callbacks.GradNormCallback` logs the
same norms into a run's metrics.jsonl every N iterations (`train.grad_norm_every`).
"""

from .jacobian import SEED_GAINS, spectral_norm, toy_gains, toy_image, toy_stack
from .norms import NetNorms, direct_term, figure, measure, measure_spec, rows, summary_row, variant_tree
from .layer_responses import response_points, responses, responses_figure

__all__ = [
    "SEED_GAINS", "NetNorms", "direct_term", "figure", "measure", "measure_spec", "response_points", "responses",
    "responses_figure", "rows", "spectral_norm", "summary_row", "toy_gains", "toy_image", "toy_stack",
    "variant_tree",
]
