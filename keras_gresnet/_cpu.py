"""What CPU this is: its model name, the cores this process may use, and
whether it has bfloat16 arithmetic units (AVX512-BF16 or AMX-BF16). A run
folder records it beside its timings, and ``mixed_bfloat16`` on a CPU
without them is said to be slower (docs/benchmarks.md). Plain Python: reads
``/proc/cpuinfo`` on Linux, ``platform`` elsewhere."""

import os
import platform

# CPU flags (Linux /proc/cpuinfo names) of bfloat16 arithmetic units.
BF16_FLAGS = ("avx512_bf16", "amx_bf16")


def _cpuinfo(path="/proc/cpuinfo"):
    """``(model name, set of flags)`` from ``path``; ``("", set())`` where
    it cannot be read."""
    model, flags = "", set()
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "model name" and not model:
                    model = value.strip()
                elif key in ("flags", "Features") and not flags:
                    flags = set(value.split())
    except OSError:
        pass
    return model, flags


def cores():
    """The cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def cpu_info(path="/proc/cpuinfo"):
    """``{"model", "machine", "cores", "bf16"}``: the CPU's model name
    (``platform.processor()`` where ``/proc/cpuinfo`` does not exist), its
    architecture, this process's cores, and whether it has bfloat16 units
    (``None`` where its flags cannot be read)."""
    model, flags = _cpuinfo(path)
    return dict(model=model or platform.processor() or "unknown",
                machine=platform.machine(), cores=cores(),
                bf16=any(flag in flags for flag in BF16_FLAGS) if flags else None)
