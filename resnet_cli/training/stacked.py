"""k seeds of one spec trained as one net in one process: the members' parameters and buffers
stacked along a leading axis, every layer's k copies computed at once.

How: torch.func's ensembling (`stack_module_state`, `functional_call`, `vmap`). vmap turns each
convolution over stacked weights into one grouped convolution and each linear layer into one batched
matmul, and it runs every module of the model zoo as it is written (gates, scalings, pre-activation
units), so there is no second copy of the nets to keep in step with the first. The other way,
rewriting the built net into grouped convolutions by hand, would need a stacked twin of every
module kind. Measured on the quick studies' digits ResNet-110 (widths 8/16/32, batch 64) on one
thread of this project's 2-core CPU, images per second per seed against the same nets stepped one
after another: 1.39x, 1.55x and 1.76x at k = 4, 8 and 16 (the hand-written grouped rewrite was
probed at 1.22x, 1.37x and 1.65x).

What stays each member's own, as in a separate run of its seed:
- initialisation: member i is built right after `torch.manual_seed(seed_i)`, as the trainer builds
  a run's net;
- data order and augmentation: `StackedBatches` stacks each member's own `Batches` (their order and
  augmentation depend on the seed, the epoch and the step alone, data/batches.py);
- BN statistics: each member's running mean and variance are its slice of the stacked buffers,
  updated in place under vmap;
- the update: the loss is the sum of the members' mean losses, so each member's gradient is its own
  run's; SGD's momentum and weight decay (and AdamW's moments) act elementwise, so one optimizer
  over the stacked tensors steps every member as its own optimizer would.

Not bitwise: a grouped kernel sums in another order than k separate ones, so members agree with
their separate runs to float tolerance (tests/test_stacked.py states it).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Sequence

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, stack_module_state, vmap


def _slot(name: str) -> str:
    return name.replace(".", "__")  # a registered name cannot hold dots


class StackedNet(nn.Module):
    """k members of one architecture as one module: forward takes x of shape (k, N, ...) and gives
    (k, N, classes), member i's images through member i's weights."""

    def __init__(self, members: Sequence[nn.Module]):
        super().__init__()
        if not members:
            raise ValueError("a stack needs at least one member")
        params, buffers = stack_module_state(list(members))
        self.k = len(members)
        self.param_names, self.buffer_names = list(params), list(buffers)
        for name, value in params.items():
            self.register_parameter(_slot(name), nn.Parameter(value.detach().clone(memory_format=torch.contiguous_format)))
        for name, value in buffers.items():
            self.register_buffer(_slot(name), value.clone(memory_format=torch.contiguous_format))
        # The architecture alone (no storage): functional_call runs it with each member's tensors.
        # Kept out of the module tree, so parameters() and state_dict() are the stacked tensors only.
        self._skeleton = (copy.deepcopy(members[0]).to("meta"),)
        for module in self._skeleton[0].modules():
            # Hooks a trainer put on its net for a memory format (onednn_guard.py) do not apply: the
            # stack computes in NCHW, one grouped convolution per layer.
            module._forward_pre_hooks.clear()
            module._forward_hooks.clear()
        self._skeleton[0].train(members[0].training)
        self.training = members[0].training

    def train(self, mode: bool = True) -> StackedNet:
        super().train(mode)
        self._skeleton[0].train(mode)  # BN batch statistics or running ones, for every member
        return self

    def _tensors(self) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        return ({n: getattr(self, _slot(n)) for n in self.param_names},
                {n: getattr(self, _slot(n)) for n in self.buffer_names})

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skeleton = self._skeleton[0]

        def one(p: dict, b: dict, xi: torch.Tensor) -> torch.Tensor:
            return functional_call(skeleton, (p, b), (xi,))

        params, buffers = self._tensors()
        # randomness="different": each member draws its own dropout masks.
        return vmap(one, randomness="different")(params, buffers, x)

    def member_state(self, i: int) -> dict[str, torch.Tensor]:
        """Member i's state dict, in the names and shapes of a net built alone (loads into one)."""
        params, buffers = self._tensors()
        return {name: t[i].detach().clone() for name, t in {**params, **buffers}.items()}


def build(make: Callable[[], nn.Module], seeds: Sequence[int]) -> StackedNet:
    """The members `make()` builds, each right after `torch.manual_seed(seed)`: the same weights a
    separate run of that seed starts from (training/trainer.py builds its net the same way)."""
    members = []
    for seed in seeds:
        torch.manual_seed(seed)
        members.append(make())
    return StackedNet(members)


class StackedBatches:
    """The members' own training batches, step by step, stacked: x (k, N, ...), y (k, N)."""

    def __init__(self, members: Sequence):
        self.members = list(members)
        sizes = {m.iters_per_epoch for m in self.members}
        if len(sizes) != 1:
            raise ValueError(f"members disagree on the steps per epoch: {sorted(sizes)}")
        self.iters_per_epoch = sizes.pop()

    def epoch(self, epoch: int, start: int = 0) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for pairs in zip(*(m.epoch(epoch, start=start) for m in self.members)):
            yield torch.stack([x for x, _ in pairs]), torch.stack([y for _, y in pairs])


def member_losses(out: torch.Tensor, y: torch.Tensor, **kwargs) -> torch.Tensor:
    """Each member's mean cross-entropy, shape (k,). Their sum is the loss to step on: member i's
    gradient is then exactly its own mean loss's, as in its separate run."""
    k, n = y.shape
    per_image = F.cross_entropy(out.reshape(k * n, -1).float(), y.reshape(k * n), reduction="none", **kwargs)
    return per_image.reshape(k, n).mean(dim=1)
