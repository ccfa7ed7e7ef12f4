"""The variant axes are registries that register: a new shortcut kind and a new dataset are added
from this file alone (a table row and a registered class or reader each) and trained end to end by
`resnet train`; the schema's error list, the --dataset help and the gradient-norm variants read the
same tables; and every built-in row is consistent with the code that builds it."""

from __future__ import annotations

import importlib
import json
import typing

import pytest
import torch
from torch import nn
from typer.testing import CliRunner

from resnet_cli import spec as S
from resnet_cli.cli import app
from resnet_cli.data.dataset import READERS
from resnet_cli.data.splits import Raw, Split
from resnet_cli.errors import UserError
from resnet_cli.analysis.gradnorm.norms import variant_tree
from resnet_cli.model import COMBINERS, build_model, count_params
from resnet_cli.model.shortcuts import Combiner
from resnet_cli.spec.datasets import DATASETS, Dataset
from resnet_cli.spec.families import FAMILIES
from resnet_cli.spec.registry import Registry
from resnet_cli.spec.shortcut_kinds import SHORTCUT_KINDS, ShortcutKind

TOY_KIND, TOY_DATA = "toy_learned_scale", "toy_blobs"
CHANNELS, CLASSES, SIDE = 2, 3, 6


class LearnedScale(Combiner):
    """y = a * x + F(x), one learned scalar a per unit starting at `model.shortcut.shortcut_scale`."""

    def __init__(self, start: float):
        super().__init__()
        self.a = nn.Parameter(torch.tensor(float(start)))

    @classmethod
    def from_spec(cls, shortcut, in_channels, out_channels, stride):
        return cls(shortcut["shortcut_scale"])

    def forward(self, x, skip, fx):
        return self.a * skip + fx


def read_blobs(spec) -> Raw:
    """Tiny in-memory images: class c is a bright square in corner c, plus noise."""
    g = torch.Generator().manual_seed(0)

    def split(n: int) -> Split:
        y = torch.arange(n) % CLASSES
        x = 0.3 * torch.randn(n, CHANNELS, SIDE, SIDE, generator=g)
        for i, c in enumerate(y.tolist()):
            r, k = divmod(c, 2)
            x[i, :, 3 * r:3 * r + 3, 3 * k:3 * k + 3] += 1.0
        return Split(x, y)

    return Raw(split(48), split(24), CLASSES, normalise=True, source="made in memory by a test")


@pytest.fixture
def toys():
    """Register the toy kind and dataset (spec rows, combiner, reader); remove them after."""
    SHORTCUT_KINDS.register(TOY_KIND)(ShortcutKind("y = a x + F(x), a learned", fields=("shortcut_scale",),
                                                   value="shortcut_scale"))
    COMBINERS.register(TOY_KIND)(LearnedScale)
    DATASETS.register(TOY_DATA)(Dataset(TOY_DATA, CHANNELS, CLASSES, SIDE, "crop_flip", 1, "made in memory",
                                        "noise plus a bright corner square", reads_files=False))
    READERS.register(TOY_DATA)(read_blobs)
    yield
    for registry, name in ((SHORTCUT_KINDS, TOY_KIND), (COMBINERS, TOY_KIND), (DATASETS, TOY_DATA),
                           (READERS, TOY_DATA)):
        registry.unregister(name)


def test_a_toy_shortcut_and_a_toy_dataset_train_end_to_end(toys, in_tmp):
    sets = [f"model.shortcut.kind={TOY_KIND}", "model.shortcut.shortcut_scale=0.5", f"data.dataset={TOY_DATA}",
            "model.family=digits", "model.depth=4", "model.widths=[4]", "optim.batch_size=16", "optim.epochs=2"]
    r = CliRunner().invoke(app, ["train", "--out", "run", *[a for s in sets for a in ("--set", s)]])
    assert r.exit_code == 0, r.output
    summary = [json.loads(line) for line in r.stdout.splitlines() if line.strip()][-1]
    assert summary["status"] == "completed"
    spec = S.load(in_tmp / "run" / "spec.yaml")  # the run directory reads back, toy names and all
    assert (spec.model.shortcut.kind, spec.data.dataset, spec.data.augment, spec.data.pad) == \
        (TOY_KIND, TOY_DATA, "crop_flip", 1)  # augment and pad: the row's `auto`
    weights = torch.load(in_tmp / "run" / "checkpoint.pt", weights_only=True)["model"]
    # The row's shape reached the net: 2 input channels, 3 classes.
    assert weights["stem.0.weight"].shape[1] == CHANNELS and weights["fc.weight"].shape[0] == CLASSES
    # The toy combiner is in every unit and trained: its scalar left its start.
    scalars = [v.item() for k, v in weights.items() if k.endswith("combine.a")]
    assert len(scalars) == 1 and scalars[0] != 0.5
    # One parameter more than the same net with identity shortcuts: the scalar.
    same = S.load(None, (), [s for s in sets if "shortcut.kind" not in s])
    assert summary["params"] == count_params(build_model(same.model, CHANNELS, CLASSES)) + 1
    # The gradient-norm variant table reads the row's `value` field.
    tree = variant_tree({}, f"{TOY_KIND}:0.25")
    assert tree["model"]["shortcut"] == {"kind": TOY_KIND, "shortcut_scale": 0.25}


@pytest.mark.parametrize("key,registry", [("model.shortcut.kind", SHORTCUT_KINDS), ("data.dataset", DATASETS),
                                          ("model.family", FAMILIES)])
def test_the_schema_checks_names_against_the_live_table(key, registry):
    tree = {}
    S.set_dotted(tree, key, "no_such_name")
    with pytest.raises(UserError) as before:
        S.validate(tree)
    registry.register("late_row")(object())
    try:
        with pytest.raises(UserError) as after:
            S.validate(tree)
        assert "'late_row'" in after.value.message and "'late_row'" not in before.value.message
        S.set_dotted(tree, key, "late_row")
        if key != "model.family":  # (a family's depth rules live in layouts.py)
            assert S.validate(tree)
    finally:
        registry.unregister("late_row")
    # Today's one-line wording: every name, quoted, in the table's order.
    names = registry.names()
    expected = f"{key}: Input should be {', '.join(map(repr, names[:-1]))} or {names[-1]!r} (got 'no_such_name')"
    assert before.value.message == f"spec: {expected}"


def _dataset_help() -> str:
    from resnet_cli.commands import common

    return typing.get_args(importlib.reload(common).Dataset)[1].help


def test_the_dataset_help_lists_the_table():
    listed = _dataset_help().split(": ", 1)[1].split(" (", 1)[0]
    assert listed.split(", ") == list(DATASETS.names())
    DATASETS.register("late_data")(object())
    try:
        assert "late_data" in _dataset_help()
    finally:
        DATASETS.unregister("late_data")
        assert "late_data" not in _dataset_help()


# ------------------------------------------------------------------------------------------
# Every built-in row agrees with the code that builds it


def test_every_shortcut_kind_has_a_combiner_and_every_dataset_a_reader():
    assert set(COMBINERS.names()) == set(SHORTCUT_KINDS.names())
    assert {d.reader for _, d in DATASETS.items()} == set(READERS.names())


@pytest.mark.parametrize("kind", SHORTCUT_KINDS.names())
def test_a_combiner_reads_only_the_fields_its_row_names(kind):
    row = SHORTCUT_KINDS[kind]
    assert set(row.fields) <= set(S.ShortcutSpec.model_fields)
    assert row.value is None or row.value in row.fields
    given = {"kind": kind, "bn": True, **{f: S.ShortcutSpec.model_fields[f].default for f in row.fields}}
    combine = COMBINERS[kind].from_spec(given, 4, 4, 1)  # a KeyError if it reads another field
    assert bool(getattr(combine, "gate", None) is not None) == row.gated
    assert (not getattr(combine, "uses_skip", True)) == row.plain


@pytest.mark.parametrize("name", DATASETS.names())
def test_a_dataset_row_is_complete(name):
    row = DATASETS[name]
    data = S.DataSpec(dataset=name)
    channels, classes = S.shape_of(data)
    assert channels >= 1 and classes >= 2 and row.value("side", data) >= 4
    assert row.augment in ("none", "flip", "crop", "crop_flip") and row.pixels and row.files
    assert not row.class_names or len(row.class_names) == classes


def test_a_registry_refuses_a_second_row_and_names_the_valid_ones():
    r: Registry[int] = Registry("toy axis")
    r.register("a")(1)
    with pytest.raises(ValueError, match="toy axis 'a' is registered twice"):
        r.register("a")(2)
    with pytest.raises(KeyError, match="unknown toy axis 'b'; valid: a"):
        r["b"]


# ------------------------------------------------------------------------------------------
# Gates say how they are initialised (`own_init`); the nets' inits have no gate case


def _gated_net(family: str, gate: str, init: str, depth: int = 8):
    sets = ["model.shortcut.kind=exclusive_gate", f"model.shortcut.gate={gate}", "model.shortcut.gate_bias=-2.5",
            f"model.init={init}"]
    if family == "vit":
        sets += ["model.family=vit", "data.dataset=synthetic", "model.patch=8", "model.heads=2", "model.unit=pre_ln",
                 "model.depth=2", "model.widths=[32]"]
    else:
        sets += [f"model.depth={depth}"]
    s = S.load(None, (), sets)
    torch.manual_seed(0)
    return build_model(s.model, *S.shape_of(s.data))


@pytest.mark.parametrize("family,gate,init", [(f, g, i) for f in ("cifar", "vit") for g in ("conv", "channel")
                                              for i in ("he", "torch_default", "trunc_normal")
                                              if f == "vit" or i != "trunc_normal"])
def test_every_gate_starts_at_its_bias_whatever_the_init(family, gate, init):
    """He 2016b sec. 3.1: b_g decides whether gating trains, so no init scheme may reset it."""
    gates = [u.combine.gate for u in _gated_net(family, gate, init).units]
    biases = torch.cat([(g.conv if gate == "conv" else g.fc).bias.detach() for g in gates])
    assert len(gates) > 0 and torch.all(biases == -2.5)


def test_a_channel_gate_in_a_conv_net_is_he_initialised_as_a_1x1_conv():
    """The pooled-linear gate is a 1x1 conv on the pooled input: He et al. 2015 with fan_out, std
    sqrt(2 / C_out), as the conv nets' convs (torch's Linear default would give 1 / sqrt(3 C_in))."""
    gates = [u.combine.gate.fc.weight.detach() for u in _gated_net("cifar", "channel", "he", depth=20).units]
    z = torch.cat([(w / (2 / w.shape[0]) ** 0.5).flatten() for w in gates])  # each over its He std
    assert abs(z.std().item() - 1) < 0.05 and len(z) > 10_000
