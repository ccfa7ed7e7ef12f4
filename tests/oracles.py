"""Reference formulas for the shortcuts of He 2016a/2016b, written with functional ops and the
module's own weights but none of its forward code. Shared by the model and lesion tests."""

import torch
import torch.nn.functional as F


def option_a(x, out_channels, stride):
    """fb.resnet.torch shortcutType 'A': subsample by a strided 1x1 pooling, then concatenate zeros
    for the new channels *after* the input's own (nn.Concat of the identity and MulConstant(0))."""
    sub = x[:, :, ::stride, ::stride]
    zeros = torch.zeros(sub.shape[0], out_channels - sub.shape[1], *sub.shape[2:], dtype=x.dtype)
    return torch.cat([sub, zeros], dim=1)


def bn_eval(x, m):
    """BatchNorm in eval mode, from its definition (Ioffe & Szegedy 2015)."""
    shape = (1, -1, 1, 1)
    return (x - m.running_mean.view(shape)) / torch.sqrt(m.running_var.view(shape) + m.eps) * \
        m.weight.view(shape) + m.bias.view(shape)


def gate_of(u):
    """g(x) = sigmoid(W_g x + b_g) with the gate's own weights: a 1x1 conv (He 2016b) or, for the
    channel design, a linear map of the globally pooled input."""
    layers = [m for m in u.combine.modules() if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear))]
    assert len(layers) == 1
    layer = layers[0]
    if isinstance(layer, torch.nn.Conv2d):
        return lambda x: torch.sigmoid(F.conv2d(x, layer.weight, layer.bias, stride=u.stride))
    return lambda x: torch.sigmoid(F.linear(x.mean(dim=(2, 3)), layer.weight, layer.bias))[:, :, None, None]


def projection_of(u):
    """W_s x, a 1x1 conv of the unit's stride, followed by BN where the unit has one on it."""
    convs = [m for m in u.skip.modules() if isinstance(m, torch.nn.Conv2d)]
    bns = [m for m in u.skip.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    assert len(convs) == 1 and convs[0].kernel_size == (1, 1) and len(bns) <= 1

    def project(x):
        y = F.conv2d(x, convs[0].weight, stride=u.stride)
        return bn_eval(y, bns[0]) if bns else y
    return project


def identity_a(u):
    return (lambda x: x) if u.stride == 1 and u.in_channels == u.out_channels else \
        (lambda x: option_a(x, u.out_channels, u.stride))


def skip_formula(u, option):
    """h(x) of He 2016a sec. 3.3: a projection where option B changes the shape or on every unit with
    option C (or the 1x1-conv shortcut of He 2016b Table 1), option A's zero padding otherwise."""
    changes = u.stride != 1 or u.in_channels != u.out_channels
    if option == "C" or (option == "B" and changes):
        return projection_of(u)
    return identity_a(u)


def shortcut_path(kind, u, option, x, shortcut_scale=1.0, dropout=0.5):
    """What a unit computes with its branch deleted (F = 0), before the after-addition function:
    the shortcut's own term of each row of He 2016b Table 1, at test time."""
    h = projection_of(u) if kind == "conv1x1" else skip_formula(u, option)
    if kind in ("exclusive_gate", "highway", "shortcut_gate"):
        return (1 - gate_of(u)(x)) * h(x)
    if kind == "scale":
        return shortcut_scale * h(x)
    if kind == "dropout":  # the paper's reading: a Bernoulli mask in training, x (1-p) at test time
        return (1 - dropout) * h(x)
    if kind == "none":
        return torch.zeros_like(h(x))
    return h(x)


def finite_difference_jacobian(f, x, eps=1e-6):
    """d f(x) / dx by central differences, one input entry at a time: (outputs, inputs), float64."""
    n = x.numel()
    with torch.no_grad():
        out = f(x)
        jac = torch.empty(out.numel(), n, dtype=torch.double)
        for i in range(n):
            d = torch.zeros(n, dtype=x.dtype)
            d[i] = eps
            d = d.view_as(x)
            jac[:, i] = ((f(x + d) - f(x - d)) / (2 * eps)).reshape(-1)
    return jac
