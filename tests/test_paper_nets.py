"""The papers' nets, checked against sources that do not share our code.

Parameter counts are derived here by hand from the papers' architecture tables (He 2016a sec. 4.2
and Table 1, He 2016b sec. 4 and the authors' `resnet-pre-act.lua`), never by calling the builder,
and sit beside the papers' rounded figures and torchvision's exact ImageNet counts. Option A's
zero padding and each shortcut of He 2016b Table 1 are checked against their formulas, computed
with the module's own weights but without its forward code.
"""

import pytest
import torch
import torchvision

from resnet_cli import spec as S
from resnet_cli.model import build_model, count_params

from oracles import gate_of, identity_a, option_a, projection_of

# -- closed-form parameter counts -----------------------------------------------------------------


def conv(cin, cout, k):
    return k * k * cin * cout  # every conv of the papers is bias-free (BN follows or precedes it)


def bn(c):
    return 2 * c  # gamma and beta; running statistics are buffers


def fc(cin, classes):
    return cin * classes + classes


def cifar_basic_option_a(depth, classes=10):
    """He 2016a sec. 4.2: 3x3 conv(16) + BN, then 3 stages of n two-conv units (16/32/64), each conv
    followed by BN; option A shortcuts have no parameters; then pooling and FC."""
    n = (depth - 2) // 6
    total = conv(3, 16, 3) + bn(16)
    cin = 16
    for width in (16, 32, 64):
        for _ in range(n):
            total += conv(cin, width, 3) + bn(width) + conv(width, width, 3) + bn(width)
            cin = width
    return total + fc(64, classes)


def cifar_preact_bottleneck_b(depth, classes=10):
    """He 2016b, authors' resnet-pre-act.lua: stem 3x3 conv(16) with no BN of its own; units
    BN-ReLU-1x1(w)-BN-ReLU-3x3(w)-BN-ReLU-1x1(4w) with w = 16/32/64; where the shape changes a 1x1
    projection without BN; one BN (of the unit's input) per unit; a final BN-ReLU; FC."""
    n = (depth - 2) // 9
    total = conv(3, 16, 3)
    cin = 16
    for width in (16, 32, 64):
        for i in range(n):
            total += bn(cin) + conv(cin, width, 1) + bn(width) + conv(width, width, 3) + bn(width)
            total += conv(width, 4 * width, 1)
            if i == 0:  # 16 -> 64 in the first stage, stride 2 and double width in the others
                total += conv(cin, 4 * width, 1)
            cin = 4 * width
    return total + bn(cin) + fc(cin, classes)


IMAGENET_UNITS = {18: ("basic", (2, 2, 2, 2)), 34: ("basic", (3, 4, 6, 3)), 50: ("bottleneck", (3, 4, 6, 3)),
                  101: ("bottleneck", (3, 4, 23, 3)), 152: ("bottleneck", (3, 8, 36, 3)),
                  200: ("bottleneck", (3, 24, 36, 3))}


def imagenet_option_b(depth, classes=1000):
    """He 2016a Table 1: 7x7/2 conv(64) + BN, max-pool, four stages at 64/128/256/512, projection
    (1x1 conv + BN) only where the shape changes (option B), pooling, FC."""
    block, layout = IMAGENET_UNITS[depth]
    expansion = 4 if block == "bottleneck" else 1
    total = conv(3, 64, 7) + bn(64)
    cin = 64
    for width, n in zip((64, 128, 256, 512), layout):
        cout = expansion * width
        for i in range(n):
            if block == "basic":
                total += conv(cin, width, 3) + bn(width) + conv(width, width, 3) + bn(width)
            else:
                total += conv(cin, width, 1) + bn(width) + conv(width, width, 3) + bn(width)
                total += conv(width, cout, 1) + bn(cout)
            stride = 2 if (i == 0 and width != 64) else 1  # the first unit of stages 2-4
            if stride != 1 or cin != cout:
                total += conv(cin, cout, 1) + bn(cout)
            cin = cout
    return total + fc(cin, classes)


def built(tree, in_channels=3, classes=10):
    s = S.resolve(S.validate(tree))
    return build_model(s.model, in_channels, s.model.num_classes or classes)


def bundled(name, classes=10):
    s = S.load(name)
    return build_model(s.model, 3, classes)


# He 2016a Table 6 (rounded) and the exact count of the architecture it describes.
PAPER_CIFAR = {20: (0.27e6, 269_722), 32: (0.46e6, 464_154), 44: (0.66e6, 658_586), 56: (0.85e6, 853_018),
               110: (1.7e6, 1_727_962), 1202: (19.4e6, 19_421_274)}


@pytest.mark.parametrize("depth", PAPER_CIFAR)
def test_cifar_option_a_params_are_exact(depth):
    rounded, exact = PAPER_CIFAR[depth]
    assert cifar_basic_option_a(depth) == exact  # the hand count agrees with the table below
    assert abs(exact - rounded) / rounded < 0.02  # ...and with the paper's rounded figure
    assert count_params(bundled(f"cifar/resnet{depth}")) == exact
    assert count_params(built({"model": {"depth": depth, "downsample": "A"}})) == exact


def test_option_b_is_not_option_a():
    """ResNet-20 with projections (272,474) is within 2% of 0.27M: only an exact count tells them apart."""
    b = count_params(built({"model": {"depth": 20, "downsample": "B"}}))
    projections = conv(16, 32, 1) + bn(32) + conv(32, 64, 1) + bn(64)
    assert b == cifar_basic_option_a(20) + projections == 272_474


@pytest.mark.parametrize("name,depth,exact,rounded", [
    ("preact/resnet164-cifar10", 164, 1_703_258, 1.7e6),
    ("preact/resnet1001-cifar10", 1001, 10_327_706, 10.2e6),
])
def test_bundled_preact_bottleneck_params_are_exact(name, depth, exact, rounded):
    assert cifar_preact_bottleneck_b(depth) == exact
    assert abs(exact - rounded) / rounded < 0.02
    assert count_params(bundled(name)) == exact


def cifar_preact_basic_option_a(depth, classes=10):
    """He 2016b's basic pre-activation nets: BN-ReLU-3x3-BN-ReLU-3x3 units, no stem BN (the first
    unit's BN takes its place), option A, a final BN-ReLU before pooling (authors' code)."""
    n = (depth - 2) // 6
    total = conv(3, 16, 3)
    cin = 16
    for width in (16, 32, 64):
        for _ in range(n):
            total += bn(cin) + conv(cin, width, 3) + bn(width) + conv(width, width, 3)
            cin = width
    return total + bn(64) + fc(64, classes)


def test_bundled_preact_110_is_option_a():
    """The BN moved in front of each conv cancels against the stem BN and the final BN: the same
    1,727,962 parameters as He 2016a's ResNet-110 (He 2016b appendix, authors' code)."""
    assert cifar_preact_basic_option_a(110) == cifar_basic_option_a(110) == 1_727_962
    assert count_params(bundled("preact/resnet110-cifar10")) == 1_727_962


TORCHVISION = {18: (torchvision.models.resnet18, 11_689_512), 34: (torchvision.models.resnet34, 21_797_672),
               50: (torchvision.models.resnet50, 25_557_032), 101: (torchvision.models.resnet101, 44_549_160),
               152: (torchvision.models.resnet152, 60_192_808)}


@pytest.mark.parametrize("depth", [18, 34, 50, 101, 152, 200])
def test_imagenet_params_equal_torchvision_and_hand_count(depth):
    ours = count_params(bundled(f"imagenet/resnet{depth}", classes=1000))
    assert ours == imagenet_option_b(depth)
    if depth in TORCHVISION:
        make, published = TORCHVISION[depth]
        assert ours == published == count_params(make())


# -- option A and the shortcuts of He 2016b Table 1, from their formulas ---------------------------


def randomise_bn_statistics(model):
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5), m.running_var.uniform_(0.5, 2)
                m.weight.uniform_(0.5, 1.5), m.bias.uniform_(-0.5, 0.5)


def small_net(unit="original", downsample="A", **shortcut):
    torch.manual_seed(0)
    model = built({"model": {"depth": 8, "widths": [2, 4, 8], "unit": unit, "downsample": downsample,
                             "shortcut": shortcut}})
    randomise_bn_statistics(model)
    return model.eval()


def unit_inputs(model, x):
    """Each unit's input, recorded by forward pre-hooks during one forward pass of the whole net."""
    seen = []
    hooks = [u.register_forward_pre_hook(lambda mod, args: seen.append(args[0])) for u in model.units]
    with torch.no_grad():
        model(x)
    for h in hooks:
        h.remove()
    return seen


def test_option_a_pads_zeros_after_the_input_channels():
    model = small_net()
    x = torch.randn(3, 3, 8, 8)
    changing = [(u, xin) for u, xin in zip(model.units, unit_inputs(model, x)) if u.stride != 1]
    assert len(changing) == 2  # the first unit of stages 2 and 3
    for u, xin in changing:
        with torch.no_grad():
            ref = option_a(xin, u.out_channels, 2)
            torch.testing.assert_close(u.skip(xin), ref, rtol=0, atol=0)
            # the whole original unit: ReLU(F(x) + A(x)) (He 2016a eq. 1 with option A)
            torch.testing.assert_close(u(xin), torch.relu(u.branch(xin) + ref))
    assert sum(p.numel() for u, _ in changing for p in u.skip.parameters()) == 0


# y = s_h h(x) + s_F F(x) for each row of He 2016b Table 1 (and Srivastava et al. 2015's highway).
FORMULAS = {
    "identity": lambda u, x, fx: identity_a(u)(x) + fx,
    "none": lambda u, x, fx: fx,
    "scale": lambda u, x, fx: 0.5 * identity_a(u)(x) + 0.3 * fx,
    "exclusive_gate": lambda u, x, fx: (1 - gate_of(u)(x)) * identity_a(u)(x) + gate_of(u)(x) * fx,
    "highway": lambda u, x, fx: (1 - gate_of(u)(x)) * identity_a(u)(x) + gate_of(u)(x) * fx,
    "shortcut_gate": lambda u, x, fx: (1 - gate_of(u)(x)) * identity_a(u)(x) + fx,
    "conv1x1": lambda u, x, fx: projection_of(u)(x) + fx,
}
CASES = [(kind, unit, gate) for kind in FORMULAS for unit in ("original", "full_preact")
         for gate in (("conv", "channel") if "gate" in kind or kind == "highway" else ("conv",))]


@pytest.mark.parametrize("kind,unit,gate", CASES, ids=["-".join(c) for c in CASES])
def test_each_shortcut_computes_its_formula(kind, unit, gate):
    """Scale factors 0.5 / 0.3 and gate bias -1 are chosen so that no two formulas coincide."""
    model = small_net(unit, "A", kind=kind, shortcut_scale=0.5, branch_scale=0.3, gate=gate, gate_bias=-1.0)
    x = torch.randn(3, 3, 8, 8)
    for u, xin in zip(model.units, unit_inputs(model, x)):
        with torch.no_grad():
            xs = u.shared_pre(xin)  # the pre-activation both paths read (checked in the wiring test)
            fx = u.branch(xs)
            torch.testing.assert_close(u(xin), u.post(FORMULAS[kind](u, xs, fx)), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("rescale", [False, True])
def test_dropout_shortcut_reads_as_the_paper_or_inverted(rescale):
    """He 2016b sec. 3.1: dropout on the shortcut "imposes a scale of lambda with an expectation of
    0.5": a Bernoulli mask without 1/(1-p) in training and x (1-p) at test time, as the original
    dropout (Srivastava et al. 2014). `dropout_rescale: true` is inverted dropout (expectation x)."""
    p = 0.5
    torch.manual_seed(0)
    model = built({"model": {"depth": 14, "widths": [4, 4, 8], "unit": "full_preact",
                             "shortcut": {"kind": "dropout", "dropout": p, "dropout_rescale": rescale}}})
    u = model.units[1]  # the second unit of stage 1: identity shortcut, no post-activation: y = mask * x + F(x)
    x = torch.randn(64, 4, 8, 8) + 3.0  # away from 0, so a kept entry is never mistaken for a dropped one
    with torch.no_grad():
        u.train()
        kept = u(x) - u.branch(x)
        scale = 1 / (1 - p) if rescale else 1.0
        is_kept = torch.isclose(kept, scale * x, atol=1e-5)
        assert (is_kept | (kept.abs() < 1e-5)).all()  # every entry: dropped, or x (x / (1-p) if rescaled)
        assert abs(is_kept.float().mean().item() - (1 - p)) < 0.02  # 16,384 draws
        u.eval()
        torch.testing.assert_close(u(x) - u.branch(x), x if rescale else (1 - p) * x)
