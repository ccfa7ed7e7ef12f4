"""The spec language: one strict, frozen schema for every run.

A spec has five sections (model, data, optim, train, run). Defaults live here and only here; a YAML
file, the command-line flags and `--set dotted.key=value` are all merged into one plain dict and
validated once, so every route in has the same checks and the same one-line errors.

`resolve()` then fills the fields whose default depends on others (block kind from depth, widths
from family, augmentation from dataset, milestones from the schedule length); the resolved spec is
what a run directory records, so a run can always be repeated from its own `spec.yaml`.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError, model_validator

from . import yamlio
from .bundled import EXPERIMENT_DIRS, configs_dir, find_spec_file  # noqa: F401  (re-exported)
from .datasets import AUTO_AUGMENT, DATASETS, shape_of  # noqa: F401  (re-exported)
from .families import FAMILIES, family_widths, unit_from_family  # noqa: F401  (FAMILIES re-exported)
from ..errors import UserError
from .layouts import (  # noqa: F401  (re-exported: spec.resolve_block and friends)
    CIFAR_BOTTLENECK_DEPTHS, IMAGENET_LAYOUTS, check_depth, check_norm, resolve_block, resolve_downsample, resolve_warmup,
    units_per_stage,
)
from .orderings import UNITS, check_zero_init  # noqa: F401  (UNITS re-exported: He 2016b Table 2)
from .messages import one_line, unknown_key  # noqa: F401  (unknown_key re-exported)
from .registry import Column, one_of
from .shortcut_kinds import SHORTCUT_KINDS, after_addition, is_plain  # noqa: F401  (re-exported)
from .yamlio import merge, parse_set, set_dotted  # noqa: F401  (re-exported: spec trees)
from .vit_layout import VIT_UNITS, check_model, resolve_vit  # model.family vit
from .section import _Section
from .optim_spec import LrGroup, OptimSpec, check_length  # noqa: F401  (re-exported)

# ---------------------------------------------------------------------------------------------
# Names. `model.shortcut.kind`, `model.family` and `data.dataset` name rows of live tables
# (shortcut_kinds.py, families.py, datasets.py), checked when a spec is validated; these tuples are
# the rows this package registers itself.
SHORTCUTS = SHORTCUT_KINDS.names()  # He 2016b Table 1, Srivastava et al. 2015 and Bachlechner et al. 2020
DEFAULT_WIDTHS = Column(FAMILIES, lambda f: f.widths)


class ShortcutSpec(_Section):
    """What sits on the shortcut: y = s_h * h(x) + s_F * F(x) (He 2016b eq. 1-2, Table 1)."""

    kind: one_of(SHORTCUT_KINDS) = "identity"  # shortcut_kinds.py: the fields each kind reads
    # `scale`: constant factors on the shortcut and on the branch (Table 1 rows 2-4).
    shortcut_scale: float = 1.0
    branch_scale: float = 1.0
    # Gates g(x) = sigmoid(W_g x + b_g). He 2016b reports that b_g decides success (fails for
    # 0..-5 with exclusive gating, 8.70% at -6); highway nets use -1..-3 (Srivastava 2015).
    gate_bias: float = -6.0
    # conv: a 1x1 conv, one gate per position and channel (He 2016b); channel: global pool + linear,
    # one gate per channel, a lighter design for studies of gate design.
    gate: Literal["conv", "channel"] = "conv"
    dropout: Annotated[float, Field(ge=0.0, lt=1.0)] = 0.5
    # He 2016b sec. 3.1: the dropout shortcut "imposes a scale of lambda with an expectation of 0.5":
    # a Bernoulli mask with no 1/(1-p) rescaling in training, x * (1-p) at test time (the original
    # dropout). true: inverted dropout (nn.Dropout), whose expectation is x.
    dropout_rescale: bool = False
    # A 1x1 projection W_s (options B/C, the `conv1x1` shortcut) in an original-ordering unit is followed
    # by BN, as in the Torch code of He 2016a (fb.resnet.torch) and here for He 2016b Table 1's 1x1-conv
    # shortcut, whose Fig. 2(e) draws the bare conv. false: the bare conv (without BN the digits
    # ResNet-26 with conv1x1 shortcuts is NaN by iteration 40). Pre-activation projections never carry
    # one (their input is already batch-normalised by the shared pre-activation).
    bn: bool = True
    # What follows the addition. auto: what the kind's paper puts there (shortcut_kinds.py): the
    # ordering's (the original unit's ReLU, He 2016a eq. 2) for every kind but `rezero`, whose unit
    # is x + alpha F(x) with nothing after it (Bachlechner et al. 2020). ordering / none: say so.
    after_addition: Literal["auto", "ordering", "none"] = "auto"


class ModelSpec(_Section):
    family: one_of(FAMILIES) = "cifar"
    depth: Annotated[int, Field(ge=1)] = 20
    # None: the papers' choice for that depth (see resolve_block).
    block: Literal["basic", "bottleneck"] | None = None
    unit: Literal[UNITS + VIT_UNITS] = "original"
    shortcut: ShortcutSpec = ShortcutSpec()
    # Where shapes change (He 2016a sec. 3.3): A zero-pads an identity (no parameters, the CIFAR
    # default), B projects only there, C projects on every shortcut.
    downsample: Literal["A", "B", "C"] | None = None
    # Base (inner) width of each stage; bottleneck units output 4x this. None: the family's.
    widths: list[Annotated[int, Field(ge=1)]] | None = None
    # Each branch starts at F(x) = 0, so each unit starts as its shortcut: the last BN's gamma = 0
    # where the branch ends in BN (Goyal et al. 2017), the last conv's weight = 0 where it ends in a
    # conv (pre-activation; timm's zero_init_last); refused where it ends in ReLU (orderings.py).
    zero_init_last_bn: bool = False
    # He 2016a puts a bottleneck's stride in its first 1x1; torchvision ("v1.5") in the 3x3.
    bottleneck_stride: Literal["1x1", "3x3"] = "1x1"
    # he: He et al. 2015 for every conv (fan_out, as the authors' Torch code), BN gamma 1 / beta 0,
    # fc bias 0. torch_default: PyTorch's own layer init, as the "Residual Connection" article's
    # digits experiment builds its nets.
    init: Literal["he", "torch_default", "trunc_normal"] = "he"
    # None: the dataset's number of classes.
    num_classes: Annotated[int, Field(ge=2)] | None = None
    # family vit only (vit_layout.py; docs/vit.md): patch side, heads, MLP width / d, the class token or
    # the mean of the tokens into the head, a LayerNorm after the last unit (None: the ordering's).
    patch: Annotated[int, Field(ge=1)] | None = None
    heads: Annotated[int, Field(ge=1)] | None = None
    mlp_ratio: Annotated[float, Field(gt=0.0)] = 4.0
    pool: Literal["cls", "mean"] = "cls"
    final_norm: bool | None = None
    image_size: Annotated[int, Field(ge=1)] | None = None  # None: the dataset's image side
    # What fills the BN slots of the conv families (docs/normfree.md): batch (He 2016a); none (identities,
    # the orderings keep their shape); fixup (Zhang, Dauphin and Ma 2019: scalar biases and a branch
    # multiplier in their place, and Fixup's init).
    norm: Literal["batch", "none", "fixup"] = "batch"
    # Stochastic depth (Huang et al. 2016): p_L, the last unit's probability of running its branch in
    # a training step; unit l of L survives with 1 - (l / L)(1 - p_L). 1: off. The paper: 0.5.
    stochastic_depth: Annotated[float, Field(gt=0.0, le=1.0)] = 1.0
    # Dropout between the convs of each branch (Zagoruyko and Komodakis 2016: 0.3 in WRN). 0: none.
    dropout: Annotated[float, Field(ge=0.0, lt=1.0)] = 0.0
    # family wrn only: the widening factor k of WRN-d-k (widths 16k, 32k, 64k).
    widen: Annotated[int, Field(ge=1)] | None = None


class SyntheticSpec(_Section):
    """A learnable synthetic task: one smooth random template per class, plus noise."""

    image_size: Annotated[int, Field(ge=4, le=512)] = 32
    channels: Annotated[int, Field(ge=1, le=16)] = 3
    classes: Annotated[int, Field(ge=2, le=1000)] = 10
    train_size: Annotated[int, Field(ge=2)] = 2048
    test_size: Annotated[int, Field(ge=1)] = 512
    noise: Annotated[float, Field(ge=0.0)] = 1.0


class DataSpec(_Section):
    dataset: one_of(DATASETS) = "cifar10"
    # Where datasets live (CIFAR python batches, MNIST-family IDX files, ImageNet train/ and val/
    # folders). None: the cache directory, $RESNET_DATA or ~/.cache/resnet-cli.
    dir: str | None = None
    download: bool = True
    # auto (both): the dataset's, from datasets.AUTO_AUGMENT: pad-4 crop + flip for CIFAR and
    # ImageNet (He 2016a sec. 4.2), pad-2 crop (+ flip for Fashion-MNIST) for the MNIST family,
    # none for digits (a flipped digit is another digit) and synthetic.
    augment: Literal["auto", "none", "flip", "crop", "crop_flip"] = "auto"
    pad: Annotated[int, Field(ge=0, le=16)] | Literal["auto"] = "auto"
    # Training images held out for validation (He 2016a tuned on 45k/5k: val_split 5000). The
    # split is fixed, independent of the run seed.
    val_split: Annotated[int, Field(ge=0)] = 0
    # Use only the first N training / test images of a fixed shuffle: quick studies.
    train_subset: Annotated[int, Field(ge=2)] | None = None
    test_subset: Annotated[int, Field(ge=1)] | None = None
    synthetic: SyntheticSpec = SyntheticSpec()
    # keyed: each epoch's order is a pure function of (run.seed, epoch), its own stream. global: one
    # torch.randperm per epoch from the global generator that run.seed also initialised the weights
    # from, as the "Residual Connection" article's digits code draws it (to rerun its runs exactly).
    # Both resume exactly.
    shuffle: Literal["keyed", "global"] = "keyed"
    # DeVries & Taylor 2017: one size x size square per training image zeroed after crop/flip; 0: off.
    cutout: Annotated[int, Field(ge=0, le=512)] = 0
    image_size: Annotated[int, Field(ge=32)] = 224  # ImageNet folders only
    workers: Annotated[int, Field(ge=0)] = 4  # ImageNet folders only


class TrainSpec(_Section):
    """How the loop runs: evaluation, checkpoints, logging, memory and speed settings."""

    eval_every: Literal["epoch", "end"] = "epoch"
    checkpoint_every: Annotated[int, Field(ge=0)] = 1000  # iterations; 0: only at epoch ends
    # Log per-layer gradient norms into metrics every N iterations (0: never).
    grad_norm_every: Annotated[int, Field(ge=0)] = 0
    # Precise BN (Wu & Johnson 2021): before each logged evaluation, also evaluate with BN statistics
    # re-estimated over this many training batches, on the side (the weights, the running statistics
    # the run carries on with and its checkpoints are untouched). 0: off, as the papers evaluate.
    precise_bn: Annotated[int, Field(ge=0)] = 0
    # Recompute activations in K segments of units in the backward pass (0: off).
    checkpoint_segments: Annotated[int, Field(ge=0)] = 0
    channels_last: Literal["auto", "on", "off"] = "auto"
    # Under torchrun: normalise over the global batch instead of each rank's part (CUDA only).
    sync_bn: bool = False
    compile: bool = False
    # A loss above this multiple of the first logged loss counts as diverged (He 2016b's "fail").
    diverge_factor: Annotated[float, Field(gt=1.0)] = 20.0
    tensorboard: bool = False  # scalars into RUN_DIR/tensorboard/ too (pip install 'resnet-cli[tensorboard]')
    # Extra measurements written beside summary.json (training/curve.py). degrade: the first weight
    # layer's gradient norm at step 1 and the training-error curve of He 2016a Fig. 6 (probe.json).
    probes: list[Literal["degrade"]] = []


class RunSpec(_Section):
    seed: Annotated[int, Field(ge=0)] = 0
    device: str = "auto"  # auto, cpu, cuda, cuda:N
    # auto: fp32 on the CPU, bf16 on GPUs with native bf16, fp16 + GradScaler on older GPUs
    # (resolved when a run starts and recorded in its spec.yaml).
    precision: Literal["auto", "fp32", "bf16", "fp16"] = "auto"
    # Bitwise-repeatable CUDA runs: deterministic cuDNN/cuBLAS algorithms, no autotuning (slower).
    deterministic: bool = False
    # The run directory. None: runs/<time>-<net>-<dataset>-s<seed> under the current directory.
    out: str | None = None
    # CPU threads. auto: chosen for the machine as it is at start and at each epoch (fewer where other
    # processes hold cores; training/cpu_threads.py); N: exactly N; 0: torch's default, every core.
    threads: Literal["auto"] | Annotated[int, Field(ge=0)] = "auto"

    @model_validator(mode="after")
    def _device(self) -> RunSpec:
        d = self.device
        if not (d in ("auto", "cpu", "cuda") or (d.startswith("cuda:") and d[5:].isdigit())):
            raise ValueError(f"run.device must be auto, cpu, cuda or cuda:N, got '{d}'")
        return self


class Spec(_Section):
    model: ModelSpec = ModelSpec()
    data: DataSpec = DataSpec()
    optim: OptimSpec = OptimSpec()
    train: TrainSpec = TrainSpec()
    run: RunSpec = RunSpec()

    @model_validator(mode="after")
    def _depth(self) -> Spec:
        check_model(self.model, self.data, UNITS)
        check_norm(self.model)
        check_zero_init(self.model)
        return self


# ---------------------------------------------------------------------------------------------
# Building a spec from a file, flags and overrides


def validate(tree: Any, source: str = "spec") -> Spec:
    if tree is None:
        tree = {}
    if not isinstance(tree, dict):
        raise UserError(f"{source}: a spec is a mapping of sections (model, data, optim, train, run), got {type(tree).__name__}")
    tree = copy.deepcopy(tree)
    _family_from_dataset(tree)
    unit_from_family(tree)
    try:
        return Spec.model_validate(tree)
    except ValidationError as err:
        raise UserError(one_line(err, source, Spec)) from None


def load_tree(spec_file: str | None) -> dict:
    if spec_file is None:
        return {}
    path = find_spec_file(spec_file)
    tree = yamlio.load_file(path)
    if tree is None:  # an empty file would silently train the defaults, which nobody means by writing one
        raise UserError(f"{path}: the spec file is empty; write at least one section (e.g. 'model: {{depth: 56}}'), "
                        "or leave the spec out to train the defaults")
    if not isinstance(tree, dict):
        raise UserError(f"{path}: a spec is a mapping of sections (model, data, optim, train, run)")
    return tree


def tree_of(source: str | Path | dict | None = None, overrides: Iterable[tuple[str, Any]] = (),
            sets: Iterable[str] = ()) -> dict:
    """The one merge: a file (a path or a bundled config's name), a tree or nothing, then flag
    overrides (dotted key, value), then `--set` items, as a plain tree not yet validated."""
    if isinstance(source, dict):
        tree = copy.deepcopy(source)
    else:
        tree = copy.deepcopy(load_tree(None if source is None else str(source)))
    for key, value in overrides:
        set_dotted(tree, key, value)
    for item in sets:
        set_dotted(tree, *parse_set(item))
    return tree


def load(source: str | Path | dict | None = None, overrides: Iterable[tuple[str, Any]] = (), sets: Iterable[str] = (),
         *, name: str | None = None) -> Spec:
    """The one way to make a spec: a file (a path or a bundled config's name), a tree already read
    (a study row, a checkpoint's spec, a bench job) or None (the defaults); then flag overrides,
    then `--set` items; merged (tree_of), validated once and resolved. `name` says where a bad
    value came from in the one-line error (default: the file, or "spec")."""
    where = name or (str(source) if source is not None and not isinstance(source, dict) else "spec")
    return resolve(validate(tree_of(source, overrides, sets), where))


def _family_from_dataset(tree: dict) -> None:
    """ImageNet data means the ImageNet net (He 2016a sec. 4.2: 224-px input, four stages,
    depths 18..200) unless the spec names a family: `--dataset imagenet` picks it, as `--dataset
    cifar10` gets the default CIFAR net. Every other dataset keeps the default family."""
    data, model = tree.get("data"), tree.get("model")
    if isinstance(data, dict) and data.get("dataset") == "imagenet" and not (isinstance(model, dict) and "family" in model):
        if model is None or isinstance(model, dict):
            tree.setdefault("model", {})["family"] = "imagenet"


# ---------------------------------------------------------------------------------------------
# Resolution of the open (None / auto) fields


def resolve(spec: Spec) -> Spec:
    m, d, o = spec.model, spec.data, spec.optim
    model = m.model_copy(update={
        "block": resolve_block(m), "shortcut": m.shortcut.model_copy(update={"after_addition": after_addition(m.shortcut)}),
        "widths": list(m.widths) if m.widths is not None else family_widths(m.family, m.widen),
        "downsample": resolve_downsample(m), **resolve_vit(m, d),
    })
    n_stages = len(units_per_stage(model))
    if len(model.widths) != n_stages:
        raise UserError(f"model.widths has {len(model.widths)} entries; the {m.family} family has {n_stages} stages")
    auto_mode, auto_pad = AUTO_AUGMENT[d.dataset]
    data = d.model_copy(update={"augment": auto_mode if d.augment == "auto" else d.augment,
                                "pad": auto_pad if d.pad == "auto" else d.pad})
    milestones = o.milestones
    if milestones is None and o.schedule == "step":
        length = o.iters if o.iters is not None else o.epochs
        milestones = sorted({length // 2, length * 3 // 4} - {0})
    optim = o.model_copy(update={"milestones": None if milestones is None else list(milestones),
                                 "warmup_iters": resolve_warmup(model, o.warmup_iters)})
    return spec.model_copy(update={"model": model, "data": data, "optim": optim})


def to_tree(spec: Spec) -> dict:
    return spec.model_dump(mode="json")


def to_yaml(spec: Spec) -> str:
    # Our own dumper: it quotes strings our YAML 1.2 reader would take for numbers ('1e5').
    return yamlio.dumps(to_tree(spec), sort_keys=False, default_flow_style=None)


# Keys that may change between a run and its resume: where it runs and what it shows, not what it computes.
RESUME_FREE = ("run.device", "run.threads", "run.out", "train.tensorboard", "train.precise_bn", "train.probes")


def diff(a: Spec, b: Spec) -> list[str]:
    """Dotted keys whose values differ between two specs (resume refuses on a changed spec)."""
    out: list[str] = []

    def walk(x: Any, y: Any, path: str) -> None:
        if isinstance(x, dict) and isinstance(y, dict):
            for k in sorted(set(x) | set(y)):
                walk(x.get(k), y.get(k), f"{path}.{k}" if path else k)
        elif x != y:
            out.append(path)

    walk(to_tree(a), to_tree(b), "")
    return out
