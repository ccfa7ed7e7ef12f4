"""Measurements taken from gradients, each against the same quantity computed here by hand on the
same net and batch: `resnet gradnorm`'s per-layer norms and unit-input norms (He 2016b sec. 3), the
training probe `train.grad_norm_every`, the trainer's SGD step and logged loss, and the path
sampler of `resnet paths` (Veit et al. 2016 sec. 5).

The hand side rebuilds the net with the project's `build_model` under the run's seed (the trainer
seeds right before it builds), feeds it the batch the code saw (captured by a forward pre-hook),
and calls autograd, `torch.optim.SGD` and `F.cross_entropy` directly."""

import copy
import json

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.testing import assert_close

from resnet_cli import spec as S
from resnet_cli.training.callbacks import Callback
from resnet_cli.analysis import gradnorm as G
from resnet_cli.analysis import paths as P
from resnet_cli.model import build_model

# The bundled 8-layer digits net at width 4 (stem, 3 units of two 3x3 convs, fc).
NET = {"family": "digits", "depth": 8, "unit": "original", "widths": [4], "shortcut": {"kind": "identity"}}
WEIGHT_LAYERS = ["stem.0"] + [f"units.{u}.branch.{c}" for u in range(3) for c in (1, 3)] + ["fc"]


def spec_of(optim: dict, train: dict | None = None, seed: int = 3):
    tree = {"model": dict(NET), "data": {"dataset": "digits", "train_subset": 96},
            "optim": {"batch_size": 32, "warmup_iters": 0, "milestones": [], **optim},
            "train": {"channels_last": "off", **(train or {})}, "run": {"device": "cpu", "seed": seed}}
    return S.resolve(S.validate(tree))


def fresh_net(spec) -> nn.Module:
    """The net the trainer starts from: same builder, same seed right before building."""
    torch.manual_seed(spec.run.seed)
    return build_model(spec.model, 1, 10).train()


def hand_grads(model: nn.Module, x: torch.Tensor, y: torch.Tensor):
    """Loss, {layer: ||weight.grad||} and [||dE/dx_l||, l = 0..L] from one plain forward/backward."""
    taken: list[torch.Tensor] = []

    def keep(_m, args):
        args[0].retain_grad()
        taken.append(args[0])

    handles = [u.register_forward_pre_hook(keep) for u in model.units]
    handles.append(model.head_act.register_forward_pre_hook(keep))
    model.zero_grad(set_to_none=True)
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    for h in handles:
        h.remove()
    mods = dict(model.named_modules())
    weights = {name: mods[name].weight.grad.norm().item() for name in WEIGHT_LAYERS}
    return loss.item(), weights, [t.grad.norm().item() for t in taken]


class CaptureBatches(Callback):
    """The (x, y) of every training step, as the model received them."""

    def __init__(self):
        self.batches: list[tuple[torch.Tensor, torch.Tensor]] = []
        self._x = None

    def on_start(self, t) -> None:
        def grab(module, args):
            if module.training and torch.is_grad_enabled():
                self._x = args[0].detach().clone()

        self._handle = t.model.register_forward_pre_hook(grab)

    def after_backward(self, t) -> None:
        self.batches.append((self._x, t.last_target.detach().clone()))

    def on_end(self, t, summary) -> None:
        self._handle.remove()


# ---------------------------------------------------------------------------------------------
# resnet gradnorm: the per-layer norms and the unit-input norms at step 1


def test_gradnorm_layer_norms_equal_weight_grad_norm_by_hand():
    spec = spec_of({"iters": 1})
    seen: list[torch.Tensor] = []

    def grab(module, args):  # the batch measure_spec's own trainer feeds its net
        if hasattr(module, "units") and module.training and not seen:
            seen.append(args[0].detach().clone())

    handle = nn.modules.module.register_module_forward_pre_hook(grab)
    try:
        r = G.measure_spec("residual8", spec, steps=1)
    finally:
        handle.remove()
    assert r.steps == 1 and len(seen) == 1
    x = seen[0]
    # the labels of that batch: the trainer's first batch of the same seeded order
    cap = CaptureBatches()
    from resnet_cli.training.trainer import Trainer

    Trainer(spec_of({"iters": 1}), callbacks=[cap]).run()
    assert torch.equal(cap.batches[0][0], x)
    loss, weights, inputs = hand_grads(fresh_net(spec), x, cap.batches[0][1])

    got = {row["layer"]: row["grad_norm"] for row in r.layers}
    assert list(got) == WEIGHT_LAYERS
    assert_close(list(got.values()), [weights[n] for n in WEIGHT_LAYERS], rtol=1e-4, atol=0)
    assert_close(r.inputs, inputs, rtol=1e-4, atol=0)
    assert r.loss == pytest.approx(loss, rel=1e-5)
    # what the rows and the summary report is the same number
    rows = {o["layer"]: o for o in G.rows([r])}
    assert_close([rows[n]["grad_norm"] for n in WEIGHT_LAYERS], [weights[n] for n in WEIGHT_LAYERS], rtol=1e-4, atol=0)
    assert_close([rows[f"x_{l}"]["grad_norm"] for l in range(4)], inputs, rtol=1e-4, atol=0)
    top = G.summary_row(r)
    assert top["first_layer"] == pytest.approx(weights["stem.0"], rel=1e-4)
    assert top["last_layer"] == pytest.approx(weights["fc"], rel=1e-4)
    assert top["input_ratio"] == pytest.approx(inputs[0] / inputs[-1], rel=1e-4)


# ---------------------------------------------------------------------------------------------
# The trainer over three SGD steps with momentum and weight decay, and its gradient-norm probe


OPTIM = {"iters": 3, "lr": 0.1, "momentum": 0.9, "weight_decay": 0.05}  # decay large enough to matter in 3 steps


@pytest.fixture(scope="module")
def trained_three_steps(tmp_path_factory):
    """Three trainer steps with train.grad_norm_every 1 into a run directory, and the same three
    steps by hand: fresh net, the captured batches, F.cross_entropy, torch.optim.SGD."""
    from resnet_cli.runs.writer import RunDir
    from resnet_cli.training.session import spec_callbacks
    from resnet_cli.training.trainer import Trainer

    spec = spec_of(OPTIM, {"grad_norm_every": 1})
    out = tmp_path_factory.mktemp("three")
    cap = CaptureBatches()
    trainer = Trainer(spec, run_dir=RunDir(out), callbacks=[cap, *spec_callbacks(spec, RunDir(out), True)])
    trainer.run()
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]

    model = fresh_net(spec)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=0.05)
    hand = []
    for x, y in cap.batches:
        loss, weights, inputs = hand_grads(model, x, y)
        hand.append({"loss": loss, "weights": weights, "inputs": inputs})
        opt.step()
    return {"trainer": trainer, "records": records, "hand": hand, "model": model, "batches": cap.batches}


def test_trainer_steps_equal_torch_sgd_with_the_specs_momentum_and_weight_decay(trained_three_steps):
    run = trained_three_steps
    assert len(run["batches"]) == 3
    mine = dict(run["model"].named_parameters())
    theirs = dict(run["trainer"].model.named_parameters())
    assert list(mine) == list(theirs)
    for name, p in theirs.items():
        assert_close(p.detach(), mine[name].detach(), rtol=1e-4, atol=1e-6, msg=name)
    # The step is not trivially matched: without decay or without momentum the weights differ.
    for other in ({"momentum": 0.0, "weight_decay": 0.05}, {"momentum": 0.9, "weight_decay": 0.0}):
        m = fresh_net(spec_of(OPTIM))
        opt = torch.optim.SGD(m.parameters(), lr=0.1, **other)
        for x, y in run["batches"]:
            m.zero_grad()
            F.cross_entropy(m(x), y).backward()
            opt.step()
        w = dict(m.named_parameters())["stem.0.weight"]
        assert (w - theirs["stem.0.weight"]).abs().max() > 1e-4, other


def test_trainer_logged_loss_is_the_cross_entropy_of_its_batches(trained_three_steps):
    run = trained_three_steps
    epoch = [r for r in run["records"] if r.get("event") == "epoch"]
    assert len(epoch) == 1 and epoch[0]["iter"] == 3
    hand_losses = [h["loss"] for h in run["hand"]]
    assert epoch[0]["train_loss"] == pytest.approx(sum(hand_losses) / 3, rel=1e-5)  # three batches of 32
    steps = [r for r in run["records"] if r.get("event") == "grad_norm"]
    assert_close([r["loss"] for r in steps], hand_losses, rtol=1e-5, atol=0)


def test_training_probe_norms_equal_weight_grad_norm_by_hand(trained_three_steps):
    run = trained_three_steps
    steps = [r for r in run["records"] if r.get("event") == "grad_norm"]
    assert [r["iter"] for r in steps] == [1, 2, 3]
    for rec, hand in zip(steps, run["hand"]):  # steps 2 and 3: after the hand SGD steps as well
        assert list(rec["weights"]) == WEIGHT_LAYERS
        assert_close([rec["weights"][n] for n in WEIGHT_LAYERS], [hand["weights"][n] for n in WEIGHT_LAYERS],
                     rtol=1e-4, atol=0, msg=f"iter {rec['iter']}")
        assert_close(rec["inputs"], hand["inputs"], rtol=1e-4, atol=0, msg=f"iter {rec['iter']}")


def test_gradnorm_over_three_steps_is_the_mean_of_the_hand_steps(trained_three_steps):
    """`--steps 3`: each norm and the loss averaged over the same three steps taken by hand, the
    weights' own norms read after them, each layer's kind, depth 8 by hand count (stem, six branch
    convs, fc)."""
    run = trained_three_steps
    r = G.measure_spec("residual8", spec_of(OPTIM), steps=3)
    hand = run["hand"]
    assert (r.steps, r.depth, r.units, r.status) == (3, 8, 3, "completed")
    assert_close([layer["grad_norm"] for layer in r.layers],
                 [sum(h["weights"][n] for h in hand) / 3 for n in WEIGHT_LAYERS], rtol=1e-4, atol=0)
    assert_close(r.inputs, [sum(h["inputs"][l] for h in hand) / 3 for l in range(4)], rtol=1e-4, atol=0)
    assert r.loss == pytest.approx(sum(h["loss"] for h in hand) / 3, rel=1e-5)
    assert [layer["kind"] for layer in r.layers] == ["Conv2d"] * 7 + ["Linear"]
    mods = dict(run["model"].named_modules())
    assert_close([layer["weight_norm"] for layer in r.layers],
                 [mods[n].weight.detach().norm().item() for n in WEIGHT_LAYERS], rtol=1e-4, atol=0)


def test_gradnorm_loads_each_data_set_once_and_measures_in_fp32_unless_told(monkeypatch):
    """Nets on the same data share one load; `precision: auto` (bf16 on a GPU) is measured in fp32,
    a precision the spec names is kept."""
    from resnet_cli import data as data_mod
    from resnet_cli.training import trainer as trainer_mod

    loads, seen, real_load = [], [], data_mod.load
    monkeypatch.setattr(data_mod, "load", lambda d: loads.append(d) or real_load(d))

    class Seen(trainer_mod.Trainer):
        def __init__(self, spec, **kw):
            seen.append((spec.run.precision, kw["data"]))
            # what measure asked for is seen; this CPU may lack native bf16, so the step runs in fp32
            super().__init__(spec.model_copy(update={"run": spec.run.model_copy(update={"precision": "fp32"})}), **kw)

    monkeypatch.setattr(trainer_mod, "Trainer", Seen)
    told = S.resolve(S.validate({**S.to_tree(spec_of({"iters": 1})), "run": {"device": "cpu", "seed": 3,
                                                                             "precision": "bf16"}}))
    names = []
    out = G.measure([("a", spec_of({"iters": 1})), ("b", told)], steps=1, progress=names.append)
    assert [r.name for r in out] == names == ["a", "b"]
    assert len(loads) == 1 and [p for p, _ in seen] == ["fp32", "bf16"]
    assert seen[0][1] is seen[1][1] is not None


# ---------------------------------------------------------------------------------------------
# resnet paths: the sampled routes and the per-image gradient norm of each


def hand_route(model: nn.Module, x: torch.Tensor, chosen: set[int]):
    """The full net's forward, with each unit's shortcut detached where its branch is chosen and
    its branch detached elsewhere: autograd then follows exactly one path (identity shortcuts)."""
    h = model.stem(x)
    first = h
    for i, u in enumerate(model.units):
        z = u.shared_pre(h)
        f, s = u.branch(z), u.skip(z)
        h = u.post(s.detach() + f if i in chosen else s + f.detach())
    return model.head(h), first


def per_image(g: torch.Tensor) -> float:
    return torch.stack([gi.norm() for gi in g]).mean().item()


def test_path_sampler_opens_k_distinct_branches_and_its_norm_matches_a_hand_route(monkeypatch):
    spec = spec_of({"iters": 1})
    model = fresh_net(spec)
    with torch.no_grad():  # BN away from (1, 0), so a branch's scale matters
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.weight.uniform_(0.5, 1.5, generator=torch.Generator().manual_seed(1))
    gen = torch.Generator().manual_seed(5)
    batches = [(torch.randn(6, 1, 8, 8, generator=gen), torch.randint(0, 10, (6,), generator=gen)) for _ in range(2)]
    reference = copy.deepcopy(model)

    routes = []
    real = P.Router.path

    def spy(self, through_branch):
        real(self, through_branch)
        routes.append((list(through_branch), [s.open for s in self.branch], [s.open for s in self.skip]))

    monkeypatch.setattr(P.Router, "path", spy)
    samples = 2
    sampled = P.sample_gradients(model, batches, samples, seed=4)
    n = 3
    assert sampled["n"] == n and len(routes) == samples * (n + 1)
    for j, (chosen, branch_open, skip_open) in enumerate(routes):
        k = j % (n + 1)
        assert len(chosen) == k and len(set(chosen)) == k and set(chosen) <= set(range(n))
        assert branch_open == [i in chosen for i in range(n)]
        assert skip_open == [i not in chosen for i in range(n)]
    assert {tuple(sorted(c)) for c, _, _ in routes if len(c) == 1} != {(0,)}  # the draw varies

    for j, (chosen, _, _) in enumerate(routes):
        s, k = divmod(j, n + 1)
        x, y = batches[s % len(batches)]
        x = x.clone().requires_grad_(True)
        out, first = hand_route(reference, x, set(chosen))
        gx, gu = torch.autograd.grad(F.cross_entropy(out, y, reduction="sum"), [x, first])
        assert sampled["input"][k][s] == pytest.approx(per_image(gx), rel=1e-4), (s, chosen)
        assert sampled["unit"][k][s] == pytest.approx(per_image(gu), rel=1e-4), (s, chosen)
    # the full backward: every route open
    x, y = batches[0]
    x = x.clone().requires_grad_(True)
    gx, = torch.autograd.grad(F.cross_entropy(reference(x), y, reduction="sum"), [x])
    assert sampled["full_input"][0] == pytest.approx(per_image(gx), rel=1e-4)
    # summarise reports the mean over samples of these norms
    rows = P.summarise(sampled)["rows"]
    for k in range(n + 1):
        assert rows[k]["grad_mean"] == pytest.approx(sum(sampled["input"][k]) / samples, rel=1e-12)
