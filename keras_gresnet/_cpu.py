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
    """``(model name, set of flags, id)`` from ``path``; ``("", set(),
    None)`` where it cannot be read. ``id``: ``"VENDOR family F model M"``
    (x86's ``vendor_id``, ``cpu family`` and ``model``; ``None`` where they
    are not given): the generation, where a model name alone does not say
    it (a VM's "AMD EPYC" is family 25 on Zen 4 and 26 on Zen 5, whose
    AVX-512 units are twice as wide)."""
    model, flags, fields = "", set(), {}
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "model name" and not model:
                    model = value.strip()
                elif key in ("flags", "Features") and not flags:
                    flags = set(value.split())
                elif key in ("vendor_id", "cpu family", "model"):
                    fields.setdefault(key, value.strip())
    except OSError:
        pass
    ident = (f"{fields.get('vendor_id', '?')} family {fields['cpu family']} model "
             f"{fields.get('model', '?')}" if "cpu family" in fields else None)
    return model, flags, ident


def cores():
    """The cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def cpu_info(path="/proc/cpuinfo"):
    """``{"model", "id", "machine", "cores", "bf16"}``: the CPU's model name
    (``platform.processor()`` where ``/proc/cpuinfo`` does not exist), its
    vendor, family and model numbers (:func:`_cpuinfo`; ``None`` off x86
    Linux), its architecture, this process's cores, and whether it has
    bfloat16 units (``None`` where its flags cannot be read)."""
    model, flags, ident = _cpuinfo(path)
    return dict(model=model or platform.processor() or "unknown", id=ident,
                machine=platform.machine(), cores=cores(),
                bf16=any(flag in flags for flag in BF16_FLAGS) if flags else None)


def memory_available(meminfo="/proc/meminfo", cgroup="/sys/fs/cgroup"):
    """The bytes of memory this process may still take: Linux's
    ``MemAvailable``, or the cgroup's limit less its use where that is
    lower; ``None`` where neither can be read (another system)."""
    found = []
    try:
        with open(meminfo, encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    found.append(int(line.split()[1]) * 1024)
                    break
    except (OSError, ValueError, IndexError):
        pass
    try:
        with open(os.path.join(cgroup, "memory.max"), encoding="ascii") as f:
            limit = f.read().strip()
        with open(os.path.join(cgroup, "memory.current"), encoding="ascii") as f:
            used = int(f.read().strip())
        if limit.isdigit():
            found.append(max(int(limit) - used, 0))
    except (OSError, ValueError):
        pass
    return min(found) if found else None


# Split the CPU into N logical devices, so that `--strategy mirrored`
# (TensorFlow) or data-parallel training (JAX) can be tried without a GPU.
CPU_DEVICES = "KERAS_GRESNET_CPU_DEVICES"
MAX_CPU_DEVICES = 64


def cpu_devices(environ=os.environ):
    """The count :data:`CPU_DEVICES` asks for (``None`` when unset); one
    ``ValueError`` naming the variable when it is not an integer in [1, 64]."""
    text = environ.get(CPU_DEVICES, "").strip()
    if not text:
        return None
    if not text.isdigit() or not 1 <= int(text) <= MAX_CPU_DEVICES:
        raise ValueError(f"{CPU_DEVICES}={text[:20]!r}: expected the number of CPU devices, "
                         f"an integer in [1, {MAX_CPU_DEVICES}]")
    return int(text)


def split_cpu_for_jax(environ=os.environ):
    """Where :data:`CPU_DEVICES` is set, ask XLA (JAX) for that many host
    devices (``--xla_force_host_platform_device_count``); call before JAX is
    imported. TensorFlow's split is made with its strategy."""
    count = cpu_devices(environ)
    if count is not None and "xla_force_host_platform_device_count" not in environ.get(
            "XLA_FLAGS", ""):
        environ["XLA_FLAGS"] = (environ.get("XLA_FLAGS", "") +
                                f" --xla_force_host_platform_device_count={count}").strip()
