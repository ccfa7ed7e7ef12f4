"""The spec language: strict, one-line errors, YAML traps closed, flags and --set equal to YAML."""

import pytest

from resnet_cli import spec as S
from resnet_cli.spec import yamlio
from resnet_cli.errors import UserError


def build_from_text(tmp_path, text, sets=()):
    p = tmp_path / "s.yaml"
    p.write_text(text)
    return S.load(str(p), sets=list(sets))


def one_line_error(fn, *a, **kw):
    with pytest.raises(UserError) as e:
        fn(*a, **kw)
    msg = e.value.message
    assert "\n" not in msg and "Traceback" not in msg
    return msg


def test_defaults_are_the_papers_cifar_recipe():
    s = S.load()
    o = s.optim
    assert (o.lr, o.momentum, o.weight_decay, o.batch_size, o.iters) == (0.1, 0.9, 1e-4, 128, 64000)
    assert o.milestones == [32000, 48000]  # He 2016a: /10 at 32k and 48k
    assert (o.warmup_iters, o.warmup_lr) == (0, 0.01)  # He 2016a warms up ResNet-110 only; the default is ResNet-20
    assert s.model.downsample == "A" and s.model.block == "basic" and s.data.augment == "crop_flip"


@pytest.mark.parametrize("sets,warmup", [
    # The papers' text, row by row: He 2016a sec. 4.2 ("for the 110-layer net ... 0.01 to warm up",
    # also its 1202-layer net), none for ResNet-20..56; He 2016b warms up every CIFAR run; neither
    # warms up ImageNet nets (He 2016a sec. 3.4). An explicit value always wins.
    ([("model.depth", 20)], 0), ([("model.depth", 56)], 0), ([("model.depth", 110)], 400),
    ([("model.depth", 1202)], 400), ([("model.depth", 164), ("model.block", "bottleneck")], 400),
    ([("model.depth", 20), ("model.unit", "full_preact")], 400),
    ([("model.depth", 110), ("model.unit", "bn_after_add")], 400),
    ([("model.family", "imagenet"), ("model.depth", 50)], 0), ([("model.family", "digits"), ("model.depth", 8)], 0),
    ([("model.depth", 20), ("optim.warmup_iters", 7)], 7), ([("model.depth", 110), ("optim.warmup_iters", 0)], 0),
])
def test_warmup_follows_the_papers_rule_for_the_net(sets, warmup):
    assert S.load(None, sets).optim.warmup_iters == warmup


def test_yaml_12_floats_and_booleans():
    assert yamlio.loads("a: 1e-4")["a"] == 1e-4  # PyYAML alone reads this as a string
    assert yamlio.loads("a: 5E3")["a"] == 5000.0
    assert yamlio.loads("a: no")["a"] == "no"  # not False
    assert yamlio.loads("a: true")["a"] is True
    assert yamlio.loads("a: 20")["a"] == 20 and isinstance(yamlio.loads("a: 20")["a"], int)


def test_duplicate_keys_are_refused_with_both_lines(tmp_path):
    msg = one_line_error(build_from_text, tmp_path, "optim:\n  lr: 0.1\n  lr: 0.2\n")
    assert "duplicate key 'lr'" in msg and "lines 2 and 3" in msg


def test_unknown_key_names_dotted_path_and_valid_keys(tmp_path):
    msg = one_line_error(build_from_text, tmp_path, "model:\n  depht: 20\n")
    assert "model.depht" in msg and "depth" in msg


@pytest.mark.parametrize("text,needle", [
    ("model:\n  depth: 21\n", "nearest: 20 or 26"),
    ("model:\n  depth: 1001\n  block: basic\n", "6n+2"),
    ("model:\n  depth: 12\n  block: bottleneck\n", "9n+2"),
    ("model:\n  family: imagenet\n  depth: 19\n", "18, 34, 50, 101, 152, 200"),
    ("model:\n  unit: preact\n", "full_preact"),
    ("model:\n  shortcut: {kind: gated}\n", "exclusive_gate"),
    ("model:\n  depth: '20'\n", "model.depth"),
    ("optim:\n  lr: -1\n", "optim.lr"),
    ("optim:\n  lr: 1e-4x\n", "optim.lr"),
    ("optim:\n  iters: 100\n  milestones: [50, 200]\n", "below optim.iters"),
    ("run:\n  device: gpu\n", "cuda:N"),
    ("- a\n- b\n", "mapping"),
    ("model: [\n", "malformed YAML"),
])
def test_bad_specs_give_one_line(tmp_path, text, needle):
    assert needle in one_line_error(build_from_text, tmp_path, text)


def test_flags_and_set_go_through_the_same_validation(tmp_path):
    s = S.load(None, [("model.depth", 56)], ["optim.weight_decay=5e-4", "model.shortcut.kind=scale"])
    assert s.model.depth == 56 and s.optim.weight_decay == 5e-4 and s.model.shortcut.kind == "scale"
    assert "model.depht" in one_line_error(S.load, None, [], ["model.depht=3"])
    assert "dotted.key=value" in one_line_error(S.load, None, [], ["model.depth"])


def test_resolution_picks_the_papers_block():
    assert S.load(None, [("model.depth", 164)]).model.block == "bottleneck"
    assert S.load(None, [("model.depth", 110)]).model.block == "basic"
    assert S.load(None, [("model.depth", 29)]).model.block == "bottleneck"  # only 9n+2 fits
    assert S.load(None, [("model.family", "imagenet"), ("model.depth", 50)]).model.block == "bottleneck"


def test_epochs_replace_default_iterations_and_milestones_follow():
    s = S.load(None, [], ["optim.epochs=8"])
    assert s.optim.iters is None and s.optim.milestones == [4, 6]


def test_every_bundled_config_validates():
    specs = [p for d in ("cifar", "preact", "imagenet", "digits") for p in sorted((S.configs_dir() / d).glob("*.yaml"))]
    assert len(specs) == 24  # imagenet gains preact-resnet200, cifar resnet110-fixup
    for p in specs:
        S.load(str(p))


def test_resolved_spec_round_trips(tmp_path):
    s = S.load("preact/resnet1001-cifar10")
    p = tmp_path / "r.yaml"
    p.write_text(S.to_yaml(s))
    assert S.load(str(p)) == s
    assert S.diff(s, S.load(str(p), sets=["optim.lr=0.05"])) == ["optim.lr"]


@pytest.mark.parametrize("text,suggested", [
    ("model:\n  dept: 20\n", "did you mean 'model.depth'?"),
    ("modle:\n  depth: 20\n", "did you mean 'model'?"),
    ("optim:\n  weight_decy: 0.1\n", "did you mean 'optim.weight_decay'?"),
])
def test_a_misspelt_key_gets_the_nearest_valid_one(tmp_path, text, suggested):
    assert suggested in one_line_error(build_from_text, tmp_path, text)


def test_a_key_like_none_gets_no_suggestion(tmp_path):
    assert "did you mean" not in one_line_error(build_from_text, tmp_path, "model:\n  zzzzqqq: 1\n")


def test_dataset_imagenet_selects_the_imagenet_net_unless_a_family_is_named():
    import torchvision

    from resnet_cli.model import build_model, count_params

    spec = S.load(None, [("data.dataset", "imagenet"), ("model.depth", 18)])
    assert spec.model.family == "imagenet"
    ours = count_params(build_model(spec.model, 3, 1000))
    assert ours == sum(p.numel() for p in torchvision.models.resnet18().parameters())  # 11,689,512
    assert S.load(None, [("data.dataset", "cifar10")]).model.family == "cifar"
    named = S.load(None, [("data.dataset", "imagenet"), ("model.family", "digits")], ["model.depth=8"])
    assert named.model.family == "digits"
