"""Where the PyTorch twin's training step goes, for comparison with
``profile_train.py``: ``torch.profiler`` over ``--steps`` steps of the twin
of gresnet_cifar(n=5) (``torch_reference.py``; channels_last, SGD with
Nesterov momentum and weight decay, batch 128 of random pictures), each
aten op's self time per step.

    python scripts/benchmarks/profile_torch.py [--steps 10] [--bf16] [--top 15]

Prints the step's median without the profiler, then the table.
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--bf16", action="store_true", help="torch.autocast to bfloat16")
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--threads", type=int, default=0, help="default: the cores")
    args = parser.parse_args(argv)

    import os

    import torch
    import torch.nn.functional as F
    from torch.profiler import ProfilerActivity, profile

    import torch_reference as ref

    torch.set_num_threads(args.threads or len(os.sched_getaffinity(0)))
    torch.manual_seed(0)
    net = ref.build("gresnet_cifar").to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9, nesterov=True,
                          weight_decay=1e-4)
    x = torch.randn(128, 3, 32, 32).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 10, (128,))

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
            out = net(x)
        F.cross_entropy(out.float(), y).backward()
        opt.step()

    for _ in range(3):
        step()
    times = []
    for _ in range(args.steps):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(args.steps):
            step()
    events = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)
    total = sum(e.self_cpu_time_total for e in events)
    print(f"gresnet_cifar twin, {'bf16 autocast' if args.bf16 else 'float32'}, batch 128: "
          f"step {statistics.median(times) * 1e3:.1f} ms (median of {args.steps}, no profiler); "
          f"ops' self time {total / 1e3 / args.steps:.1f} ms per step under the profiler\n")
    print("| aten op | ms per step | share |")
    print("|---|---:|---:|")
    for e in events[:args.top]:
        print(f"| {e.key} | {e.self_cpu_time_total / 1e3 / args.steps:.2f} | "
              f"{e.self_cpu_time_total / total:.1%} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
