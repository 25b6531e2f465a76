"""The anchor of the whole-model timing table: ``torch.autograd.gradcheck(fast_mode=True)`` on torchvision's
ResNet-18 (``weights=None``, seeded), float64, train-mode BatchNorm, batch 1 at 224 x 224, every parameter and
the input checked (the same arguments ``symgrad check`` checks). Runs in PyTorch's own environment:

    ../torchvenv/bin/python benchmarks/peers/torch_gradcheck_resnet18.py [--size 224] [--threads 2]

Prints one JSON line: seconds, whether gradcheck passed, and the number of checked tensors.
"""

import argparse
import json
import time

import torch
import torchvision
from torch.func import functional_call


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    net = torchvision.models.resnet18(weights=None).double().train()
    names = [n for n, _ in net.named_parameters()]
    params = tuple(p.detach().clone().requires_grad_(True) for _, p in net.named_parameters())
    buffers = {n: b for n, b in net.named_buffers()}
    x = torch.randn(1, 3, args.size, args.size, dtype=torch.float64, requires_grad=True)

    def func(x, *ps):  # running statistics move each call; the outputs use the batch's own
        return functional_call(net, ({**dict(zip(names, ps)), **{k: v.clone() for k, v in buffers.items()}},), (x,))

    t0 = time.perf_counter()
    ok = torch.autograd.gradcheck(func, (x, *params), fast_mode=True, raise_exception=False)
    seconds = time.perf_counter() - t0
    print(
        json.dumps(
            {
                "key": f"time/torch_gradcheck_fast/resnet18/{args.size}",
                "net": "torchvision resnet18",
                "size": args.size,
                "dtype": "float64",
                "ok": bool(ok),
                "tensors": 1 + len(params),
                "seconds": round(seconds, 1),
                "threads": args.threads,
                "torch": torch.__version__,
            }
        )
    )


if __name__ == "__main__":
    main()
