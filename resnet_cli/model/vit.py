"""Vision Transformers whose residual units are specs (Dosovitskiy et al. 2020, `model.family: vit`).

The net is the same `ResNet` shape as the conv families: a stem (patch embedding, class token,
position embeddings), a flat list of `ResidualUnit`s (block b is units 2b-2 and 2b-1: self-attention,
then MLP), a head activation (the final LayerNorm or nothing), a pool (the class token or the mean
of the tokens) and a linear classifier.

The residual stream is kept channels-first, (N, D, T, 1): a feature map with the T tokens as its
positions. So every shortcut of He 2016b Table 1 applies unchanged: a 1x1-conv gate or projection
is one linear map per token, a channel gate pools over the tokens, a dropout mask drops stream
entries, a lesion's zero branch has the stream's shape. The branches turn the stream into
(N, T, D) tokens and back; where the LayerNorms sit is data (`vit_layout.TOKEN_ORDERINGS`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..spec import ModelSpec
from ..spec.vit_layout import TOKEN_ORDERINGS, mlp_width
from .nets import ResNet
from ..spec.shortcut_kinds import after_addition
from .shortcuts import combiner_for, init_own, make_skip
from .units import ResidualUnit

TRUNC_STD = 0.02  # ViT / BERT: weights ~ N(0, 0.02^2) cut at 2 std (Dosovitskiy et al. 2020, timm)


def to_tokens(x: torch.Tensor) -> torch.Tensor:
    return x.squeeze(-1).transpose(1, 2)  # (N, D, T, 1) -> (N, T, D)


def to_stream(t: torch.Tensor) -> torch.Tensor:
    return t.transpose(1, 2).unsqueeze(-1)  # (N, T, D) -> (N, D, T, 1)


class StreamNorm(nn.LayerNorm):
    """LayerNorm over the width D of the channels-first stream (N, D, T, 1): post-LN's LayerNorm
    after the addition, and the final LayerNorm of a pre-LN net."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x.movedim(1, -1)).movedim(-1, 1)


class PatchEmbedding(nn.Module):
    """Dosovitskiy et al. 2020 eq. 1: z_0 = [x_class; x_p^1 E; ...; x_p^T E] + E_pos. The linear
    map E of each flattened p x p patch is a conv of kernel and stride p (as torchvision's conv_proj)."""

    def __init__(self, in_channels: int, width: int, patch: int, image_size: int, class_token: bool):
        super().__init__()
        self.proj = nn.Conv2d(in_channels, width, patch, stride=patch)
        tokens = (image_size // patch) ** 2 + (1 if class_token else 0)
        self.class_token = nn.Parameter(torch.zeros(1, width, 1, 1)) if class_token else None
        self.position = nn.Parameter(torch.zeros(1, width, tokens, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = self.proj(x).flatten(2).unsqueeze(-1)  # (N, D, T, 1), T = (H/p)(W/p) in row-major order
        if self.class_token is not None:
            z = torch.cat([self.class_token.expand(len(z), -1, -1, -1), z], dim=2)  # (N, D, 1+T, 1)
        return z + self.position


class ClassTokenPool(nn.Module):
    """The head reads the class token alone (ViT): the first position of the stream."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[:, :, :1, :]  # (N, D, 1, 1)


class SelfAttention(nn.Module):
    """Multi-head scaled dot-product self-attention over the tokens (Vaswani et al. 2017): one
    linear map to queries, keys and values (as torchvision's in_proj), one output projection."""

    def __init__(self, width: int, heads: int, norm_first: bool):
        super().__init__()
        self.norm = nn.LayerNorm(width) if norm_first else nn.Identity()
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)  # the branch's output projection (zero_init_last_bn zeroes it)
        self.heads = heads

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = self.norm(to_tokens(x))  # (N, T, D)
        n, length, d = t.shape
        qkv = self.qkv(t).view(n, length, 3, self.heads, d // self.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)  # each (N, heads, T, D/heads)
        a = F.scaled_dot_product_attention(q, k, v)  # softmax(q k^T / sqrt(D/heads)) v
        a = a.transpose(1, 2).reshape(n, length, d)  # (N, T, D): the heads side by side
        return to_stream(self.proj(a))  # (N, D, T, 1)


class MLP(nn.Module):
    """The position-wise feed-forward sub-layer: linear, GELU, linear (ViT eq. 3)."""

    def __init__(self, width: int, hidden: int, norm_first: bool):
        super().__init__()
        self.norm = nn.LayerNorm(width) if norm_first else nn.Identity()
        self.fc1 = nn.Linear(width, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, width)  # the branch's output projection

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = self.norm(to_tokens(x))  # (N, T, D)
        return to_stream(self.fc2(self.act(self.fc1(t))))  # (N, D, T, 1)


def make_token_unit(branch: nn.Module, width: int, ordering: str, shortcut: dict, label: str) -> ResidualUnit:
    """One residual unit of the stream: y = combine(x, skip(x), F(x)), x_next = post(y), with the
    shortcut registry's combiner (He 2016b Table 1) and the ordering's LayerNorm after the addition
    (none where `model.shortcut.after_addition` resolves to none: ReZero's)."""
    order = TOKEN_ORDERINGS[ordering]
    combine = combiner_for(shortcut, width, width, 1)
    if not getattr(combine, "uses_skip", True):
        skip: nn.Module = nn.Identity()  # a plain net: no shortcut parameters at all
    else:  # identity; a 1x1 projection (one linear map per token) for the conv1x1 shortcut, no BN
        skip = make_skip("A", width, width, 1, with_bn=False, always_project=getattr(combine, "always_project", False))
    unit = ResidualUnit(shared_pre=nn.Identity(), skip=skip, branch=branch, combine=combine,
                        post=(StreamNorm(width) if order.norm_after_add and after_addition(shortcut) == "ordering"
                              else nn.Identity()),
                        in_channels=width, out_channels=width, stride=1)
    unit.label = label  # "block3.attn": how tables and figures name the unit
    return unit


def token_units(width: int, heads: int, hidden: int, depth: int, ordering: str, shortcut: dict) -> list[ResidualUnit]:
    norm_first = TOKEN_ORDERINGS[ordering].norm_in_branch
    units = []
    for b in range(1, depth + 1):
        units.append(make_token_unit(SelfAttention(width, heads, norm_first), width, ordering, shortcut, f"block{b}.attn"))
        units.append(make_token_unit(MLP(width, hidden, norm_first), width, ordering, shortcut, f"block{b}.mlp"))
    return units


def init_weights(model: ResNet, scheme: str) -> None:
    """he: every linear map and the patch embedding N(0, 2 / fan_in) (He et al. 2015), biases 0.
    trunc_normal: the same layers N(0, 0.02^2) cut at 2 std, biases 0 (ViT's, as in timm and BERT).
    torch_default: PyTorch's own layer init. In every scheme LayerNorms start at 1 / 0, the class
    token and position embeddings ~ N(0, 0.02^2) cut at 2 std, the classifier's bias at 0, and gate
    biases keep the b_g their constructors set (He 2016b: their `own_init`, applied after this pass)."""
    for m in model.modules():
        if not isinstance(m, (nn.Linear, nn.Conv2d)) or m is model.fc:
            continue
        if scheme == "he":
            nn.init.kaiming_normal_(m.weight, mode="fan_in", nonlinearity="relu")
        elif scheme == "trunc_normal":
            nn.init.trunc_normal_(m.weight, std=TRUNC_STD, a=-2 * TRUNC_STD, b=2 * TRUNC_STD)
        if m.bias is not None and scheme != "torch_default":
            nn.init.zeros_(m.bias)
    init_own(model, scheme, "fan_in", (nn.Linear, nn.Conv2d))
    if scheme == "trunc_normal":
        nn.init.trunc_normal_(model.fc.weight, std=TRUNC_STD, a=-2 * TRUNC_STD, b=2 * TRUNC_STD)
    for p in (model.stem.class_token, model.stem.position):
        if p is not None:
            nn.init.trunc_normal_(p, std=TRUNC_STD, a=-2 * TRUNC_STD, b=2 * TRUNC_STD)
    nn.init.zeros_(model.fc.bias)


def zero_init_branches(model: ResNet) -> None:
    """The Transformer form of Goyal et al. 2017: each branch's output projection (weight and bias)
    starts at 0, so F(x) = 0 and every unit starts as its shortcut (the identity under pre_ln and
    no_ln; LN(x) under post_ln, whose LayerNorm follows the addition)."""
    for unit in model.units:
        last = [m for m in unit.branch.modules() if isinstance(m, nn.Linear)][-1]
        nn.init.zeros_(last.weight)
        nn.init.zeros_(last.bias)


def build_vit(m: ModelSpec, in_channels: int, num_classes: int) -> ResNet:
    """A resolved vit ModelSpec -> modules (spec.resolve fills image_size and final_norm)."""
    width = m.widths[0]
    stem = PatchEmbedding(in_channels, width, m.patch, m.image_size, class_token=m.pool == "cls")
    units = token_units(width, m.heads, mlp_width(width, m.mlp_ratio), m.depth, m.unit, m.shortcut.model_dump())
    head_act = StreamNorm(width) if m.final_norm else nn.Identity()
    pool = ClassTokenPool() if m.pool == "cls" else nn.AdaptiveAvgPool2d(1)  # mean over the T tokens
    model = ResNet(stem, units, head_act, num_classes, pool=pool)
    init_weights(model, m.init)
    if m.zero_init_last_bn:
        zero_init_branches(model)
    return model
