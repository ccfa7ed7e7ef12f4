"""The CUDA-path decisions whose logic runs on the CPU: compile with activation checkpointing,
RNG state per device and rank, precision resolution, TF32, device choice under torchrun."""

import copy

import torch
import torch.nn.functional as F

from resnet_cli import spec as S
from resnet_cli.model import build_model


def _tiny(segments: int = 0):
    spec = S.build(None, [("data.dataset", "synthetic"), ("model.depth", 8), ("model.widths", [4, 8, 16])])
    torch.manual_seed(0)
    model = build_model(spec.model, 3, 10)
    model.checkpoint_segments = segments
    return model


def test_compile_with_activation_checkpointing_matches_eager():
    """Dynamo refuses a lambda built inside forward as checkpoint's context_fn (issue 14, item 1);
    the compiled, checkpointed step must give the eager, plain step's gradients and BN statistics
    (the recomputation must not update the running statistics a second time)."""
    eager = _tiny(0)
    compiled_net = copy.deepcopy(eager)
    compiled_net.checkpoint_segments = 2
    x, y = torch.randn(6, 3, 16, 16), torch.randint(0, 10, (6,))
    F.cross_entropy(eager(x), y).backward()
    F.cross_entropy(torch.compile(compiled_net)(x), y).backward()
    for (name, p), q in zip(eager.named_parameters(), compiled_net.parameters()):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-5, msg=name)
    for (name, b), c in zip(eager.named_buffers(), compiled_net.buffers()):
        torch.testing.assert_close(c, b, rtol=1e-5, atol=1e-6, msg=name)
