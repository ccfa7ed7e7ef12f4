"""Measurements of a trained run, each against the same quantity computed here by hand from the
run's weights: the layer responses of `resnet gradnorm --responses` (He 2016a Fig. 7), the k-random-
deletion statistic of `resnet lesion` (Veit et al. 2016 Fig. 3b) and the centre point of
`resnet landscape` (Li et al. 2018). The run is conftest's `residual8_run`: the bundled 8-layer
digits net at width 4 (original units: conv-BN-ReLU-conv-BN, addition, ReLU), one epoch."""

import copy
import itertools
import statistics

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from resnet_cli.analysis import gradnorm as G
from resnet_cli.analysis import landscape as Ls
from resnet_cli.analysis import lesion as Le
from resnet_cli.analysis.trained import load_run

# Where He 2016a Fig. 7 reads each 3x3 layer's response in an original unit: after its BN, before
# the ReLU or the addition. Named by hand from the net's layout, not from `response_points`.
RESPONSE_AT = ["stem.1.0"] + [f"units.{u}.branch.{b}" for u in range(3) for b in ("2.0", "4")]


def test_layer_response_std_is_the_population_std_of_each_bn_output(residual8_run):
    """The reported std is one number per layer over every element of its output (images, channels,
    positions) on the test split in eval mode, with divisor n (torch.std(correction=0)); the mean
    is not reported. The test split (360 images) is one batch on both sides, so both see the same
    float32 activations."""
    r = G.responses(residual8_run, split="test", batch_size=1000)
    assert r["split"] == "test"
    assert (r["run"], r["depth"], r["unit"], r["shortcut"]) == (str(residual8_run), 8, "original", "identity")
    trained = load_run(residual8_run)
    model = trained.model.eval()
    mods = dict(model.named_modules())
    outs: dict[str, torch.Tensor] = {}
    handles = [mods[name].register_forward_hook(lambda _m, _a, o, name=name: outs.__setitem__(name, o.double()))
               for name in RESPONSE_AT]
    with torch.no_grad():
        model(trained.data.test.x)
    for h in handles:
        h.remove()
    assert [layer["index"] for layer in r["layers"]] == list(range(1, 8))
    for layer, name in zip(r["layers"], RESPONSE_AT):
        o = outs[name]
        assert o.numel() == 360 * 4 * 8 * 8
        std = torch.std(o, correction=0).item()
        assert layer["std"] == pytest.approx(std, rel=1e-10), name  # summed in float64 on both sides
        # 1e-7 tells the divisors apart: n / (n - 1) moves the std by 5e-6 here
        assert layer["std"] != pytest.approx(torch.std(o, correction=1).item(), rel=1e-7), name
    # He 2016a Fig. 7 reads the std, not the spread of the means: one std per layer over all elements
    # differs from the mean of the per-channel stds.
    o = outs[RESPONSE_AT[3]]
    per_channel = torch.std(o.transpose(0, 1).flatten(1), dim=1, correction=0).mean().item()
    assert r["layers"][3]["std"] != pytest.approx(per_channel, rel=1e-3)
    # by default over the test split; in batches of 100 every batch's sums count, in float64
    batched = G.responses(residual8_run, batch_size=100)
    assert batched["split"] == "test"
    assert [b["std"] for b in batched["layers"]] == pytest.approx([a["std"] for a in r["layers"]], rel=1e-10)


# ---------------------------------------------------------------------------------------------
# resnet lesion: the median over k random deletions


def hand_error(model: nn.Module, x: torch.Tensor, y: torch.Tensor, deleted: set[int]) -> float:
    """Test error (%) with the branches of these units set to zero: an original unit then computes
    ReLU(x) (Veit et al. 2016: the skip connection stays)."""
    with torch.no_grad():
        h = model.stem(x)
        for i, u in enumerate(model.units):
            h = u.post(u.skip(u.shared_pre(h))) if i in deleted else u(h)
        wrong = (model.head(h).argmax(1) != y).sum().item()
    return 100.0 * wrong / len(y)


def test_lesion_statistics_are_the_median_min_max_of_each_draws_error(residual8_run):
    trained = load_run(residual8_run)
    r = Le.study(trained, max_k=None, draws=20, seed=0)
    model = trained.model.eval()
    x, y = trained.data.test.x, trained.data.test.y
    assert r["baseline"]["test_error"] == pytest.approx(hand_error(model, x, y, set()), abs=1e-9)
    singles = [row["test_error"] for row in r["units"]]
    assert singles == pytest.approx([hand_error(model, x, y, {i}) for i in range(3)], abs=1e-9)
    ks = {row["k"]: row for row in r["k"]}
    assert sorted(ks) == [0, 1, 2, 3]
    differs = False
    for k in (1, 2, 3):  # C(3, k) <= 20: every k-subset is one draw
        errs = [hand_error(model, x, y, set(pick)) for pick in itertools.combinations(range(3), k)]
        row = ks[k]
        assert row["draws"] == len(errs)
        assert row["median"] == pytest.approx(statistics.median(errs), abs=1e-9), k
        assert (row["min"], row["max"]) == pytest.approx((min(errs), max(errs)), abs=1e-9), k
        differs |= statistics.median(errs) != pytest.approx(statistics.fmean(errs), abs=1e-6)
    assert differs  # the run's errors tell a median from a mean


def test_lesion_random_draws_are_distinct_k_subsets_evaluated_as_by_hand(residual8_run):
    """More subsets than draws: the picks are `draws` distinct k-subsets, and the error `errors`
    gives each (the numbers the median is taken over) is the hand evaluation of that lesioned net."""
    trained = load_run(residual8_run)
    model = trained.model.eval()
    x, y = trained.data.test.x, trained.data.test.y
    picks = Le._subsets(6, 3, 4, np.random.default_rng(0))
    assert len(picks) == 4 and len(set(picks)) == 4 and all(len(set(p)) == 3 for p in picks)
    # on the 3-unit net: two distinct 2-subsets out of 3
    two = Le._subsets(3, 2, 2, np.random.default_rng(1))
    got = [err for _, err in Le.errors(model, trained.data, Le.runtime_for(trained.device), two)]
    assert got == pytest.approx([hand_error(model, x, y, set(p)) for p in two], abs=1e-9)


# ---------------------------------------------------------------------------------------------
# resnet landscape: the centre point is the trained net's eval-mode training loss


def eval_loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    model.eval()
    with torch.no_grad():
        return F.cross_entropy(model(x), y).item()


def test_landscape_centre_is_the_eval_mode_loss_on_the_training_images(residual8_run):
    trained = load_run(residual8_run)
    train, test = trained.data.train, trained.data.test
    # all the training images: the subset is the whole split, whatever its order
    r = Ls.scan(trained, dims=1, lo=-1.0, hi=1.0, points=3, samples=10_000, seed=0)
    assert r["samples"] == len(train) == 1437
    hand = eval_loss(trained.model, train.x, train.y)
    assert r["center"]["loss"] == pytest.approx(hand, rel=1e-6)
    with torch.no_grad():
        right = (trained.model(train.x).argmax(1) == train.y).sum().item()
    assert r["center"]["accuracy"] == pytest.approx(100.0 * right / len(train), abs=1e-9)
    assert r["points"][1]["alpha"] == 0.0 and r["points"][1]["loss"] == pytest.approx(hand, rel=1e-6)
    # ... and not the test split's loss, nor BN in training mode. After one epoch both are near
    # ln 10; they differ by about 5e-4 relative, 500 times the tolerance above.
    assert hand != pytest.approx(eval_loss(trained.model, test.x, test.y), rel=1e-4)
    batch_norm_train = copy.deepcopy(trained.model).train()  # a copy: training mode moves the running statistics
    with torch.no_grad():
        batch_stats = F.cross_entropy(batch_norm_train(train.x), train.y).item()
    assert hand != pytest.approx(batch_stats, rel=1e-4)

    # a subset: the first 200 images of the fixed shuffle with seed 0 (the module's SUBSET_SEED)
    r = Ls.scan(load_run(residual8_run), dims=1, lo=-1.0, hi=1.0, points=3, samples=200, seed=0)
    order = torch.randperm(len(train), generator=torch.Generator().manual_seed(0))[:200]
    assert r["samples"] == 200
    assert r["center"]["loss"] == pytest.approx(eval_loss(trained.model, train.x[order], train.y[order]), rel=1e-6)
