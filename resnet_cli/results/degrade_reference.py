"""What `resnet degrade` compares its grid against: published figures keyed by (dataset, net,
depth), and the Residual Connection article's findings on digits with its 10-seed ranges. He
2016a's orderings are the grid's claims (results/degrade.py), decided by the paired test.
"""

from __future__ import annotations

from typing import Any

# Published figures shown beside ours, keyed (dataset, net, depth). Digits: the degradation
# experiment of the "Residual Connection" article (10 seeds; its 8-layer accuracies and gradient
# norms are its printed seed-6 run). CIFAR-10: He 2016a Table 6 test errors of ResNet-20/32/44/56
# (Fig. 6 gives no table for the plain nets).
ARTICLE = "the Residual Connection article"
REFERENCE: dict[tuple[str, str, int], dict[str, Any]] = {
    ("digits", "plain", 8): {"train_acc": 0.986, "grad_norm_first_layer": 0.21, "source": f"{ARTICLE}, seed 6"},
    ("digits", "residual", 8): {"train_acc": 0.992, "grad_norm_first_layer": 0.26, "source": f"{ARTICLE}, seed 6"},
    ("digits", "plain", 26): {"train_acc": 0.56, "train_acc_range": (0.395, 0.834),
                              "grad_norm_first_layer_range": (1.9, 3.2), "source": f"{ARTICLE}, 10 seeds"},
    ("digits", "residual", 26): {"train_acc": 0.98, "train_acc_range": (0.966, 0.988),
                                 "grad_norm_first_layer_range": (0.4, 0.7), "source": f"{ARTICLE}, 10 seeds"},
    ("cifar10", "residual", 20): {"test_acc": 0.9125, "source": "He 2016a Table 6"},
    ("cifar10", "residual", 32): {"test_acc": 0.9249, "source": "He 2016a Table 6"},
    ("cifar10", "residual", 44): {"test_acc": 0.9283, "source": "He 2016a Table 6"},
    ("cifar10", "residual", 56): {"test_acc": 0.9303, "source": "He 2016a Table 6"},
}

def findings(summaries: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    """The article's findings on 26-layer digits nets (None when the grid has no such pair), our
    median beside its figures: plain-26's and residual-26's training accuracy, and their first-conv
    gradient norms at step 1. Each says whether our median lies within the article's 10-seed range
    (`in_range`): a comparison with its published spread, not a test of an ordering (the grid's
    claims, results/degrade.py, decide those)."""
    by = {(s["net"], s["depth"]): s for s in summaries}
    plain, res = by.get(("plain", 26)), by.get(("residual", 26))
    if plain is None or res is None or (plain.get("reference") or {}).get("source") != f"{ARTICLE}, 10 seeds":
        return None
    out = []
    for finding, s, metric, measure in (
            ("plain-26 degrades", plain, "train_acc", "median training accuracy, plain"),
            ("residual-26 fits", res, "train_acc", "median training accuracy, residual"),
            ("plain-26's step-1 gradient is larger, not vanishing", plain, "grad_norm_first_layer",
             "median first-conv norm, plain"),
            ("residual-26's step-1 gradient", res, "grad_norm_first_layer", "median first-conv norm, residual")):
        ref, ours = s["reference"], s[f"{metric}_median"]
        lo, hi = ref[f"{metric}_range"]
        out.append({"finding": finding, "measure": measure, "ours": ours, "article": ref.get(metric),
                    "article_range": ref[f"{metric}_range"], "in_range": ours is not None and lo <= ours <= hi})
    return out
