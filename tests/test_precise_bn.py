"""Precise BN (Wu & Johnson 2021): the re-estimated statistics against a hand computation from BN's
definition, the weights and every other RNG stream untouched, and `train.precise_bn` leaving the
training trajectory bitwise as it was while it records the second figure."""

import copy
import json

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from typer.testing import CliRunner

from resnet_cli import spec as S
from resnet_cli.cli import app
from resnet_cli.training.precise_bn import recalibrated
from resnet_cli.training.trainer import Trainer


class Fixed:
    """`.epoch(e)` over a fixed list of batches, the same every epoch."""

    def __init__(self, xs):
        self.xs = xs

    def epoch(self, e):
        return iter([(x, None) for x in self.xs])


def tiny_net():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(1, 3, 3), nn.BatchNorm2d(3), nn.ReLU(), nn.Dropout(0.5), nn.Conv2d(3, 2, 1),
                        nn.BatchNorm2d(2))
    for bn in (net[1], net[5]):  # running statistics and affine parameters far from the defaults
        bn.running_mean.fill_(5.0)
        bn.running_var.fill_(9.0)
        nn.init.uniform_(bn.weight, 0.5, 2.0)
        nn.init.uniform_(bn.bias, -1.0, 1.0)
    return net


def batches(k=3, n=8):
    g = torch.Generator().manual_seed(1)
    return [torch.randn(n, 1, 6, 6, generator=g) * 2 + 1 for _ in range(k)]


def hand_stats(net, xs):
    """Per BN layer: the mean over batches of the batch mean and of the unbiased batch variance (the
    cumulative average BN keeps with momentum None), each batch normalised by its own biased
    statistics in train mode (Ioffe & Szegedy 2015 Alg. 1), without nn.BatchNorm's code. Dropout
    is left out: in the tiny net it follows the first BN and the test net runs it in eval mode."""
    conv1, bn1, conv2, bn2 = net[0], net[1], net[4], net[5]
    means, variances = [[], []], [[], []]
    for x in xs:
        h = F.conv2d(x, conv1.weight, conv1.bias)
        for i, (bn, nxt) in enumerate(((bn1, conv2), (bn2, None))):
            flat = h.transpose(0, 1).reshape(h.shape[1], -1).double()  # (C, N*H*W)
            m = flat.sum(1) / flat.shape[1]
            sq = ((flat - m[:, None]) ** 2).sum(1)
            means[i].append(m)
            variances[i].append(sq / (flat.shape[1] - 1))  # unbiased: what running_var stores
            biased = (sq / flat.shape[1]).float()
            h = (h - m.float().view(1, -1, 1, 1)) / torch.sqrt(biased.view(1, -1, 1, 1) + bn.eps)
            h = h * bn.weight.view(1, -1, 1, 1) + bn.bias.view(1, -1, 1, 1)
            if nxt is not None:
                h = F.conv2d(torch.relu(h), nxt.weight, nxt.bias)
    return [(torch.stack(means[i]).mean(0), torch.stack(variances[i]).mean(0)) for i in range(2)]


def no_dropout(net):
    net[3].p = 0.0  # the hand computation has no mask to draw
    return net


def test_statistics_equal_the_hand_computed_cumulative_average_and_no_weight_moves():
    net, xs = no_dropout(tiny_net()), batches()
    params = {k: v.clone() for k, v in net.named_parameters()}
    with torch.no_grad():
        expected = hand_stats(net, xs)
    with recalibrated(net, Fixed(xs), len(xs)):
        for bn, (mean, var) in zip((net[1], net[5]), expected):
            torch.testing.assert_close(bn.running_mean.double(), mean, rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(bn.running_var.double(), var, rtol=1e-5, atol=1e-6)
            assert bn.num_batches_tracked.item() == len(xs)
        assert not net.training  # evaluated in eval mode inside the block
    for k, v in net.named_parameters():
        assert torch.equal(v, params[k]), k  # bitwise


def test_dropout_is_off_while_the_statistics_are_estimated():
    """The net is evaluated with dropout off, so its statistics are estimated so too: with p = 0.5
    left on, the hand computation (which has no dropout) still holds. In train mode (the earlier
    behaviour, planted by forcing train mode) the masks change the second BN's input and it fails."""
    net, xs = tiny_net(), batches()
    with torch.no_grad():
        expected = hand_stats(net, xs)
    with recalibrated(net, Fixed(xs), len(xs)):
        torch.testing.assert_close(net[5].running_mean.double(), expected[1][0], rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(net[5].running_var.double(), expected[1][1], rtol=1e-5, atol=1e-6)


class AtTestTime(nn.Module):
    """Stochastic depth's test-time form, whatever the mode: survival * F(x) (Huang et al. 2016)."""

    def __init__(self, survival):
        super().__init__()
        self.survival = survival

    def forward(self, branch, x, skip):
        return self.survival * branch(x)


def test_stochastic_depth_runs_in_its_test_time_form_while_the_statistics_are_estimated():
    """A unit dropped with probability 1.0 never runs its branch in training, so train-mode
    re-estimation (the earlier behaviour) leaves that branch's BN at its reset statistics (mean 0,
    variance 1), which describe no net. The evaluated net runs it scaled by its survival. Expected:
    a twin whose every unit is that test-time form, its BN accumulated in plain train mode."""
    from resnet_cli.model import build_model
    from resnet_cli.model.units import StochasticDepth

    spec = S.load(None, sets=["model.depth=8", "model.widths=[4, 8, 8]", "model.stochastic_depth=0.5",
                              "data.dataset=synthetic", "data.synthetic.image_size=8"])
    torch.manual_seed(0)
    net = build_model(spec.model, 3, 10)
    units = [m for m in net.modules() if isinstance(m, StochasticDepth)]
    units[0].survival = 0.0  # drop rate 1.0
    twin = copy.deepcopy(net)
    for unit in (u for u in twin.modules() if isinstance(getattr(u, "drop", None), StochasticDepth)):
        unit.drop = AtTestTime(unit.drop.survival)
    g = torch.Generator().manual_seed(2)
    xs = [torch.randn(16, 3, 8, 8, generator=g) for _ in range(3)]
    layers = [m for m in twin.modules() if isinstance(m, nn.BatchNorm2d)]
    for m in layers:
        m.reset_running_stats()
        m.momentum = None
    twin.train()
    with torch.no_grad():
        for x in xs:
            twin(x)
    with recalibrated(net, Fixed(xs), len(xs)):
        mine = [m for m in net.modules() if isinstance(m, nn.BatchNorm2d)]
        assert len(mine) == len(layers)
        for a, b in zip(mine, layers):
            torch.testing.assert_close(a.running_mean, b.running_mean, rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(a.running_var, b.running_var, rtol=1e-5, atol=1e-6)


def test_batches_beyond_one_epoch_come_from_the_next_epoch():
    net, xs = no_dropout(tiny_net()), batches(k=2)
    with torch.no_grad():
        expected = hand_stats(net, xs + xs[:1])  # 3 batches from 2-batch epochs: epoch 0, then 1's first
    with recalibrated(net, Fixed(xs), 3):
        torch.testing.assert_close(net[1].running_mean.double(), expected[0][0], rtol=1e-5, atol=1e-6)


def test_on_exit_the_running_statistics_the_mode_and_the_global_rng_are_as_they_were():
    net, xs = tiny_net(), batches()  # with dropout on: its masks must come from a forked stream
    net.train()
    before = {k: v.clone() for k, v in net.state_dict().items()}
    rng = torch.get_rng_state()
    with recalibrated(net, Fixed(xs), 2):
        assert not torch.equal(net[1].running_mean, before["1.running_mean"])
    assert torch.equal(torch.get_rng_state(), rng)
    assert net.training and net[1].momentum == 0.1
    for k, v in net.state_dict().items():
        assert torch.equal(v, before[k]), k


def test_statistics_that_are_already_exact_are_unchanged():
    """One full batch: the exact statistics are that batch's mean and unbiased variance; recalibrating
    a net that already holds them (kept from a first pass) gives them back bitwise."""
    net, xs = no_dropout(tiny_net()), batches(k=1, n=32)
    with recalibrated(net, Fixed(xs), 1, keep=True):
        pass
    exact = {k: v.clone() for k, v in net.state_dict().items()}
    h = F.conv2d(xs[0], net[0].weight, net[0].bias)
    torch.testing.assert_close(net[1].running_var, h.var(dim=(0, 2, 3), unbiased=True), rtol=1e-5, atol=1e-6)
    with recalibrated(net, Fixed(xs), 1, keep=True):
        pass
    for k, v in net.state_dict().items():
        assert torch.equal(v, exact[k]), k


def trained(*sets):
    spec = S.load("digits/residual8", sets=["model.widths=[4]", "optim.epochs=2", *sets])
    t = Trainer(spec)
    t.run()
    return t


def test_train_precise_bn_leaves_the_trajectory_bitwise_and_records_both_figures():
    plain, precise = trained(), trained("train.precise_bn=5")
    for (k, a), b in zip(plain.model.state_dict().items(), precise.model.state_dict().values()):
        assert torch.equal(a, b), k  # weights and running statistics: the run never saw the recalibration
    for a, b in zip(plain.p.history, precise.p.history):
        assert a["test_error"] == b["test_error"] and a["train_loss"] == b["train_loss"]
        assert "test_error_precise_bn" not in a and 0.0 <= b["test_error_precise_bn"] <= 100.0
        assert b["test_loss_precise_bn"] != b["test_loss"]  # another set of statistics
    summary = precise._finish()
    assert summary["test_error_precise_bn"] == precise.p.history[-1]["test_error_precise_bn"]


def test_eval_recalibrate_bn_reports_both_figures_and_keeps_the_runs_own(residual8_run):
    r = CliRunner().invoke(app, ["eval", str(residual8_run), "--recalibrate-bn", "--bn-batches", "3"])
    assert r.exit_code == 0, r.stderr
    row = json.loads(r.stdout.splitlines()[0])
    assert row["error"] == row["logged_error"]  # the running-statistics figure is unchanged
    assert row["bn_batches"] == 3 and 0.0 <= row["error_precise_bn"] <= 100.0
    assert row["loss_precise_bn"] != pytest.approx(row["loss"], abs=1e-9)
    default = json.loads(CliRunner().invoke(app, ["eval", str(residual8_run), "--recalibrate-bn"]).stdout.splitlines()[0])
    assert default["bn_batches"] == 23  # 1437 training images at batch 64: one epoch is fewer than 50


def test_bn_batches_without_recalibrate_bn_is_one_line(residual8_run):
    r = CliRunner().invoke(app, ["eval", str(residual8_run), "--bn-batches", "3"])
    assert r.exit_code == 2 and "only with --recalibrate-bn" in r.stderr and "Traceback" not in r.stderr


# -- the stream of batches it reads ------------------------------------------------------------

class Recorder:
    """Batches whose epochs hold two batches each, recording which epochs were asked for."""

    def __init__(self):
        self.asked = []

    def epoch(self, e):
        self.asked.append(e)
        return [(torch.full((1,), 10.0 * e + i), None) for i in range(2)]


def test_the_stream_reads_epochs_0_1_2_in_turn_and_stops_at_n():
    from resnet_cli.training.precise_bn import stream

    rec = Recorder()
    assert [x.item() for x, _ in stream(rec, 5)] == [0.0, 1.0, 10.0, 11.0, 20.0]
    assert rec.asked == [0, 1, 2]
    assert list(stream(Recorder(), 0)) == []


def test_its_batches_are_the_runs_augmentation_padding_cutout_and_shard_on_a_seed_of_their_own():
    """The recalibration draws as training draws (the spec's batch size, augmentation, padding,
    Cutout, this rank's shard) from the run's seed mixed with its own tag (4), so training's stream
    (tags 1-3) never moves; shared trainer batches keep their tensors and get that seed too."""
    from resnet_cli import data as data_mod
    from resnet_cli.data.order import mix
    from resnet_cli.training.precise_bn import train_batches

    spec = S.load(None, sets=["data.dataset=digits", "data.augment=crop_flip", "data.pad=3", "data.cutout=2",
                              "optim.batch_size=16", "run.seed=7"])
    data = data_mod.load(spec.data)
    got = train_batches(data, spec, "cpu", shard=(1, 2))
    assert (got.batch_size, got.augment, got.pad, got.cutout, got.shard) == (16, "crop_flip", 3, 2, (1, 2))
    assert got.seed == mix(7, 4) != mix(7)
    trainer_batches = data_mod.batches_for(data, "train", 16, "crop_flip", 3, "cpu", 123)
    twin = train_batches(data, spec, "cpu", batches=trainer_batches)
    assert twin is not trainer_batches and twin.x is trainer_batches.x and trainer_batches.seed == 123
    assert twin.seed == mix(7, 4)
