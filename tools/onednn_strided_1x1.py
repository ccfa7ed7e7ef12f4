"""Reproduce oneDNN's heap corruption in a strided 1x1 convolution with PyTorch alone (no project code).

Each case runs in a fresh child under glibc's heap checks (PYTHONMALLOC=malloc MALLOC_CHECK_=3
MALLOC_PERTURB_=165): 20 passes of one Conv2d(IC, 8, 1, stride) over a batch of 16 maps, in one
pass (forward, the input's gradient or the weight's gradient) and one memory format. The table
gives the oneDNN kernel that ran, how many of the trials the child died (and how), and, where it
lived, the largest relative difference of the weight gradient from the same computation with
oneDNN off (silent corruption would show there).

    python tools/onednn_strided_1x1.py                 # the cases in docs/maintainers.md (a few minutes)
    python tools/onednn_strided_1x1.py --trials 5 --isa AVX2 --ic 4 8 --threads 1

`--isa` caps oneDNN's instruction set (ONEDNN_MAX_CPU_ISA), so an AVX-512 machine runs the AVX2
kernels a smaller CPU gets; `native` leaves the cap off. See resnet_cli/training/onednn_guard.py.
"""

from __future__ import annotations

import argparse
import itertools
import os
import re
import subprocess
import sys

CHILD = r"""
import sys
import torch
from torch import nn

ic, stride, threads, side = (int(a) for a in sys.argv[1:5])
phase, fmt = sys.argv[5], sys.argv[6]
torch.set_num_threads(threads)
layout = torch.channels_last if fmt == "channels_last" else torch.contiguous_format
torch.manual_seed(0)
conv = nn.Conv2d(ic, 8, 1, stride=stride).to(memory_format=layout)
conv.weight.requires_grad_(phase != "input_grad")
conv.bias.requires_grad_(phase != "input_grad")
for _ in range(20):
    x = torch.randn(16, ic, side, side).to(memory_format=layout).requires_grad_(phase == "input_grad")
    conv.weight.grad = None
    if phase == "forward":
        with torch.no_grad():
            conv(x)
    else:
        conv(x).square().sum().backward()
if phase == "weight_grad":
    ours = conv.weight.grad.clone()
    conv.weight.grad = None
    with torch.backends.mkldnn.flags(enabled=False):
        conv(x.contiguous()).square().sum().backward()
    ref = conv.weight.grad
    print(f"diff {((ours - ref).abs().max() / ref.abs().max()).item():.1e}")
print("ok")
"""

HEAP_CHECKS = {"PYTHONMALLOC": "malloc", "MALLOC_CHECK_": "3", "MALLOC_PERTURB_": "165"}
PASS_NAME = {"forward": "forward_training", "input_grad": "backward_data", "weight_grad": "backward_weights"}


def run_case(isa: str, ic: int, stride: int, threads: int, side: int, phase: str, fmt: str) -> tuple[str, str, str]:
    """(how the child ended, the kernel that ran the pass, the weight gradient's difference)."""
    env = {**os.environ, **HEAP_CHECKS, "OMP_NUM_THREADS": str(threads), "ONEDNN_VERBOSE": "1"}
    env.pop("ONEDNN_MAX_CPU_ISA", None)
    if isa != "native":
        env["ONEDNN_MAX_CPU_ISA"] = isa
    p = subprocess.run([sys.executable, "-c", CHILD, str(ic), str(stride), str(threads), str(side), phase, fmt],
                       env=env, capture_output=True, text=True, timeout=300)
    kernels = {line.split(",")[6] for line in p.stdout.splitlines()
               if ",exec,cpu,convolution," in line and f",{PASS_NAME[phase]}," in line}
    diff = re.search(r"^diff (\S+)$", p.stdout, re.M)
    if p.returncode == 0:
        end = "ok"
    else:
        last = (p.stderr.strip().splitlines() or [""])[-1]
        end = f"signal {-p.returncode}" if p.returncode < 0 else last[:40] or f"exit {p.returncode}"
    return end, ",".join(sorted(kernels)) or "not oneDNN", diff.group(1) if diff else ""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--isa", nargs="+", default=["native", "AVX2"])
    ap.add_argument("--ic", type=int, nargs="+", default=[4, 8, 12, 16])
    ap.add_argument("--stride", type=int, nargs="+", default=[2])
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--side", type=int, nargs="+", default=[8])
    ap.add_argument("--phase", nargs="+", default=["weight_grad"], choices=list(PASS_NAME))
    ap.add_argument("--format", nargs="+", default=["channels_last", "contiguous"], dest="fmt")
    a = ap.parse_args()
    import torch  # only for its version lines

    onednn = re.search(r"MKL-DNN (v[\d.]+)", torch.__config__.show())
    print(f"torch {torch.__version__}, oneDNN {onednn.group(1) if onednn else 'unknown'}")
    print("| ISA cap | IC | stride | map | threads | format | pass | kernel | died | weight grad vs oneDNN off |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for isa, ic, stride, side, threads, fmt, phase in itertools.product(a.isa, a.ic, a.stride, a.side, a.threads,
                                                                        a.fmt, a.phase):
        ends = [run_case(isa, ic, stride, threads, side, phase, fmt) for _ in range(a.trials)]
        died = [e for e, _, _ in ends if e != "ok"]
        kernel = next((k for _, k, _ in ends if k != "not oneDNN"), "not oneDNN")
        diffs = sorted({d for _, _, d in ends if d})
        how = f" ({'; '.join(sorted(set(died)))})" if died else ""
        print(f"| {isa} | {ic} | {stride} | {side} | {threads} | {fmt} | {phase} | {kernel} | "
              f"{len(died)} of {a.trials}{how} | {' '.join(diffs)} |", flush=True)


if __name__ == "__main__":
    main()
