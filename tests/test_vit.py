"""model.family vit: the token nets against independent oracles.

Shapes and gradients over every ordering x shortcut; a pre-LN unit's Jacobian against I plus the
finite-difference Jacobian of its branch alone; zero-init and ReZero units against their input;
parameter counts against a hand count and torchvision's VisionTransformer; outputs against
torchvision's with copied weights; the spec's one-line errors.
"""

import itertools

import pytest
import torch
import torchvision
from torch import nn
from typer.testing import CliRunner

from oracles import finite_difference_jacobian
from resnet_cli import spec as S
from resnet_cli.cli import app
from resnet_cli.errors import UserError
from resnet_cli.model import build_model, count_params
from resnet_cli.spec.vit_layout import VIT_UNITS

TINY = {"family": "vit", "depth": 2, "widths": [8], "heads": 2, "patch": 2, "unit": "pre_ln"}


def vit_spec(data=None, **model):
    tree = {"model": {**TINY, **model}, "data": data or {"dataset": "digits"}}
    return S.resolve(S.validate(tree))


def vit(in_channels=1, classes=10, data=None, **model):
    s = vit_spec(data, **model)
    return build_model(s.model, in_channels, s.model.num_classes or classes)


AXES = list(itertools.product(VIT_UNITS, S.SHORTCUTS, ("conv", "channel")))


@pytest.mark.parametrize("unit,shortcut,gate", AXES, ids=["-".join(a) for a in AXES])
def test_every_ordering_and_shortcut_runs_forward_and_backward(unit, shortcut, gate):
    torch.manual_seed(0)
    model = vit(unit=unit, shortcut={"kind": shortcut, "gate": gate, "gate_bias": -1.0})
    assert len(model.units) == 4  # 2 blocks x (attention, MLP)
    x, y = torch.randn(3, 1, 8, 8), torch.randint(0, 10, (3,))
    out = model(x)
    assert out.shape == (3, 10)
    nn.functional.cross_entropy(out, y).backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
    if shortcut not in ("rezero", "skipinit"):  # their alpha = 0 holds every branch's gradient at 0 on step 1
        assert model.units[0].branch.qkv.weight.grad.abs().sum() > 0


def test_orderings_put_layernorm_where_their_rows_say():
    """post_ln: nothing in the branch, LN on the sum; pre_ln: LN first in the branch, nothing after,
    a final LN; no_ln: none anywhere (Vaswani 2017; Xiong 2020; Bachlechner 2020)."""
    norms = {u: [type(m).__name__ for m in vit(unit=u).modules() if isinstance(m, nn.LayerNorm)] for u in VIT_UNITS}
    assert norms["post_ln"] == ["StreamNorm"] * 4  # after each of the 4 additions; no final LN
    assert norms["pre_ln"] == ["LayerNorm"] * 4 + ["StreamNorm"]  # inside each branch, then the final one
    assert norms["no_ln"] == []


def _unit_and_input(unit, **model):
    torch.manual_seed(0)
    net = vit(unit=unit, **model).double()
    x = torch.randn(1, 8, 17, 1, dtype=torch.double)  # (N, D, T, 1): 16 patch tokens + the class token
    return net, x


@pytest.mark.parametrize("which", [0, 1], ids=["attention", "mlp"])
def test_pre_ln_unit_jacobian_is_identity_plus_branch_jacobian(which):
    """He 2016b eq. 4 on the token stream: x_{l+1} = x_l + F(x_l) gives dx_{l+1}/dx_l = I + dF/dx.
    The unit's Jacobian by autograd, the branch's alone by central differences."""
    net, x = _unit_and_input("pre_ln")
    unit = net.units[which]
    n = x.numel()
    j_unit = torch.autograd.functional.jacobian(unit, x).reshape(n, n)
    j_branch = finite_difference_jacobian(unit.branch, x)
    assert j_branch.abs().max() > 1e-2  # the branch is not trivially zero
    torch.testing.assert_close(j_unit - torch.eye(n, dtype=torch.double), j_branch, atol=1e-6, rtol=1e-5)


def test_post_ln_unit_jacobian_is_not_identity_plus_branch_jacobian():
    """The LayerNorm after the addition sits on the stream: the clean I is gone (the contrast)."""
    net, x = _unit_and_input("post_ln")
    unit = net.units[0]
    n = x.numel()
    j_unit = torch.autograd.functional.jacobian(unit, x).reshape(n, n)
    j_branch = torch.autograd.functional.jacobian(unit.branch, x).reshape(n, n)
    assert (j_unit - torch.eye(n, dtype=torch.double) - j_branch).abs().max() > 0.1


@pytest.mark.parametrize("unit", ["pre_ln", "no_ln"])
def test_zero_init_makes_every_unit_the_identity(unit):
    # PyTorch's default init: biases are not 0 already, so the output projection's bias must be zeroed too.
    net, x = _unit_and_input(unit, zero_init_last_bn=True, init="torch_default")
    for u in net.units:
        assert torch.equal(u(x), x)
    assert torch.equal(net.units[0].branch.proj.weight, torch.zeros(8, 8, dtype=torch.double))


def test_zero_init_leaves_post_ln_units_their_layernorm():
    net, x = _unit_and_input("post_ln", zero_init_last_bn=True, init="torch_default")
    ln = nn.functional.layer_norm(x.movedim(1, -1), (8,)).movedim(-1, 1)  # affine 1 / 0 at init
    for u in net.units:
        torch.testing.assert_close(u(x), ln)


@pytest.mark.parametrize("unit", ["pre_ln", "no_ln"])
def test_rezero_units_start_as_the_identity_and_alpha_learns(unit):
    net, x = _unit_and_input(unit, shortcut={"kind": "rezero"})
    x.requires_grad_(True)
    for u in net.units:
        assert torch.equal(u(x), x)
    net(torch.randn(2, 1, 8, 8, dtype=torch.double)).sum().backward()
    assert all(u.combine.alpha.grad.abs() > 0 for u in net.units)


# ---------------------------------------------------------------------------------------------
# Parameter counts and torchvision


def hand_count(c, side, p, d, depth, hidden, classes, cls_token=True, lns_per_block=2, final_ln=True):
    tokens = (side // p) ** 2 + cls_token
    embed = c * p * p * d + d + cls_token * d + tokens * d  # patch map E with bias, class token, E_pos
    attention = (d * 3 * d + 3 * d) + (d * d + d)  # q, k, v in one map; output projection
    mlp = (d * hidden + hidden) + (hidden * d + d)
    return embed + depth * (attention + mlp + lns_per_block * 2 * d) + final_ln * 2 * d + d * classes + classes


@pytest.mark.parametrize("unit,pool", [("pre_ln", "cls"), ("post_ln", "cls"), ("no_ln", "mean"), ("pre_ln", "mean")])
def test_parameter_count_matches_a_hand_count(unit, pool):
    model = vit(unit=unit, pool=pool, mlp_ratio=3.0)
    lns = 0 if unit == "no_ln" else 2
    assert count_params(model) == hand_count(1, 8, 2, 8, 2, 24, 10, cls_token=pool == "cls",
                                             lns_per_block=lns, final_ln=unit == "pre_ln")


def test_conv1x1_and_gate_shortcuts_add_one_token_map_per_unit():
    base = count_params(vit())
    assert count_params(vit(shortcut={"kind": "conv1x1"})) == base + 4 * 8 * 8  # no bias, no BN
    assert count_params(vit(shortcut={"kind": "exclusive_gate"})) == base + 4 * (8 * 8 + 8)
    assert count_params(vit(shortcut={"kind": "rezero"})) == base + 4


def test_vit_b_16_has_torchvisions_parameter_count():
    """ViT-B/16 (Dosovitskiy et al. 2020 Table 1): patch 16 at 224, d 768, 12 heads, 12 blocks,
    MLP 3072, class token, pre-LN with a final LayerNorm, 1000 classes."""
    tv = sum(p.numel() for p in torchvision.models.vit_b_16(weights=None).parameters())
    ours = vit(in_channels=3, classes=1000, data={"dataset": "imagenet"}, patch=16, widths=[768], heads=12,
               depth=12, unit="pre_ln")
    assert count_params(ours) == tv == 86_567_656


def copy_from_torchvision(tv: nn.Module, ours: nn.Module) -> None:
    """torchvision's VisionTransformer weights into ours, layer by layer (nothing renamed by pattern)."""
    with torch.no_grad():
        ours.stem.proj.weight.copy_(tv.conv_proj.weight)
        ours.stem.proj.bias.copy_(tv.conv_proj.bias)
        ours.stem.class_token.copy_(tv.class_token.transpose(1, 2).unsqueeze(-1))  # (1,1,D) -> (1,D,1,1)
        ours.stem.position.copy_(tv.encoder.pos_embedding.transpose(1, 2).unsqueeze(-1))
        for b, layer in enumerate(tv.encoder.layers):
            attn, mlp = ours.units[2 * b].branch, ours.units[2 * b + 1].branch
            for src, dst in ((layer.ln_1, attn.norm), (layer.ln_2, mlp.norm)):
                dst.weight.copy_(src.weight)
                dst.bias.copy_(src.bias)
            attn.qkv.weight.copy_(layer.self_attention.in_proj_weight)
            attn.qkv.bias.copy_(layer.self_attention.in_proj_bias)
            attn.proj.weight.copy_(layer.self_attention.out_proj.weight)
            attn.proj.bias.copy_(layer.self_attention.out_proj.bias)
            for src, dst in ((layer.mlp[0], mlp.fc1), (layer.mlp[3], mlp.fc2)):
                dst.weight.copy_(src.weight)
                dst.bias.copy_(src.bias)
        ours.head_act.weight.copy_(tv.encoder.ln.weight)
        ours.head_act.bias.copy_(tv.encoder.ln.bias)
        ours.fc.weight.copy_(tv.heads.head.weight)
        ours.fc.bias.copy_(tv.heads.head.bias)


def test_pre_ln_vit_computes_torchvisions_vision_transformer():
    torch.manual_seed(0)
    tv = torchvision.models.VisionTransformer(image_size=8, patch_size=2, num_layers=2, num_heads=2,
                                              hidden_dim=8, mlp_dim=32, num_classes=10).eval()
    for p in tv.parameters():  # torchvision zero-initialises its head: randomise everything
        nn.init.normal_(p, std=0.3)
    ours = vit(in_channels=3, data={"dataset": "synthetic", "synthetic": {"image_size": 8}}).eval()
    assert count_params(ours) == sum(p.numel() for p in tv.parameters())
    copy_from_torchvision(tv, ours)
    x = torch.randn(4, 3, 8, 8)
    torch.testing.assert_close(ours(x), tv(x), atol=1e-5, rtol=1e-5)


# ---------------------------------------------------------------------------------------------
# Spec errors: one line, what is wrong and what would be valid


@pytest.mark.parametrize("model,needle", [
    ({"patchh": 2}, "unknown key 'model.patchh'"),
    ({"heads": 3}, "model.widths [8] is not divisible by model.heads 3; valid heads: 1, 2, 4, 8"),
    ({"patch": 3}, "model.patch 3 does not divide the 8-pixel images of digits; valid: 1, 2, 4, 8"),
    ({"unit": "original"}, "model.unit 'original' is not an ordering of the vit family; valid: post_ln, pre_ln, no_ln"),
    ({"unit": "sandwich"}, "model.unit"),
    ({"patch": None}, "model.family vit needs model.patch"),
    ({"heads": None}, "model.family vit needs model.heads"),
    ({"block": "basic"}, "model.block applies to the conv families"),
    ({"downsample": "B"}, "model.downsample applies to the conv families"),
    ({"widths": [8, 16]}, "model.widths for vit is one width [d]"),
    ({"mlp_ratio": 0.0}, "model.mlp_ratio"),
    ({"pool": "max"}, "model.pool"),
])
def test_bad_vit_specs_give_one_line(model, needle):
    with pytest.raises(UserError) as err:
        vit_spec(**model)
    assert needle in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("model,needle", [
    ({"unit": "pre_ln"}, "model.unit 'pre_ln' is an ordering of the vit family; valid for cifar: original"),
    ({"patch": 4}, "model.patch applies to model.family vit only"),
    ({"heads": 2}, "model.heads applies to model.family vit only"),
    ({"init": "trunc_normal"}, "model.init trunc_normal applies to model.family vit only"),
])
def test_conv_specs_refuse_vit_fields(model, needle):
    with pytest.raises(UserError) as err:
        S.validate({"model": {"family": "cifar", "depth": 20, **model}})
    assert needle in str(err.value)


def test_cli_refuses_a_bad_vit_spec_with_exit_2_and_no_traceback(tmp_path):
    spec = tmp_path / "bad.yaml"
    spec.write_text("model: {family: vit, depth: 2, widths: [10], heads: 4, patch: 2, unit: pre_ln}\n"
                    "data: {dataset: digits}\n")
    r = CliRunner().invoke(app, ["train", str(spec), "--dry-run"])
    assert r.exit_code == 2
    assert "not divisible by model.heads 4" in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_resolution_fills_image_size_and_final_norm():
    assert vit_spec(unit="pre_ln").model.final_norm is True
    assert vit_spec(unit="post_ln").model.final_norm is False
    assert vit_spec(unit="post_ln", final_norm=True).model.final_norm is True
    s = vit_spec(data={"dataset": "fashion_mnist"}, patch=4)
    assert s.model.image_size == 28
    assert count_params(build_model(s.model, 1, 10)) == hand_count(1, 28, 4, 8, 2, 32, 10)


def test_adamw_first_step_moves_every_weight_by_lr():
    """Kingma & Ba 2015: with bias correction, Adam's first step is lr * g / (|g| + eps), i.e. lr
    times the sign of the gradient for every entry whose gradient is well above eps."""
    from resnet_cli.training.trainer import Trainer

    tree = {"model": TINY, "data": {"dataset": "digits", "train_subset": 64, "test_subset": 10},
            "optim": {"optimizer": "adamw", "lr": 1e-3, "weight_decay": 0.0, "iters": 1, "milestones": [],
                      "batch_size": 64, "warmup_iters": 0},
            "train": {"checkpoint_every": 0, "eval_every": "end"}}
    t = Trainer(S.resolve(S.validate(tree)))
    before = t.model.units[0].branch.qkv.weight.detach().clone()
    grads = {}
    t.model.units[0].branch.qkv.weight.register_hook(lambda g: grads.setdefault("g", g.clone()))
    t.run()
    step = t.model.units[0].branch.qkv.weight.detach() - before
    big = grads["g"].abs() > 1e-5
    assert big.sum() > 100
    torch.testing.assert_close(step[big], -1e-3 * grads["g"][big].sign(), atol=2e-6, rtol=0)
