"""What this machine computes with: its CPU's vendor and generation, its bf16 matrix unit, and whether bf16 autocast
makes training faster here (what ``runtime.bf16: auto`` resolves to, forge/config.py).

Having bf16 instructions is not the same as gaining from them (docs/scale.md, "bf16 on a CPU"; bench/bf16_cpu.py,
the tiny model's training step fp32 against bf16 autocast):

- AMX tiles (Intel 6/207 with AMX): 1.57-1.75x faster;
- AVX-512-BF16 on AMD Zen 4 (25/17): 1.46-1.51x faster (its fp32 units are half as wide as its AVX-512 registers,
  and a bf16 dot product does twice the work of an fp32 FMA);
- AVX-512-BF16 on an Intel 6/207 that does not expose AMX: **1.7x slower** (a pre-training step 625 -> 1,038 ms,
  one at the last SFT stage's shape 765 -> 1,300 ms; sampling 1.25x slower under autocast): its two full-width
  fp32 FMA units leave the bf16 dot product nothing to win back the casts autocast adds.

    bf16_pays_off()      # True with AMX or on an AMD CPU with AVX-512-BF16; False elsewhere on a CPU
    cpu_generation()     # "GenuineIntel 6/207"
    keep_freed_memory()  # glibc's malloc reuses freed tensors' memory instead of faulting fresh pages in
"""

from __future__ import annotations

import ctypes
from pathlib import Path

CPUINFO = Path("/proc/cpuinfo")
# mallopt(3) parameters (glibc's malloc.h) and the size below which freed memory stays in the process.
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
KEEP_FREED_BYTES = 1 << 30


def cpu_fields() -> dict[str, str]:
    """The first processor's block of /proc/cpuinfo as ``{field: value}`` (empty where there is none: not Linux)."""
    try:
        text = CPUINFO.read_text(errors="replace")
    except OSError:
        return {}
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            break  # the first processor's block is enough
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    return fields


def cpu_generation() -> str | None:
    """``"<vendor> <family>/<model>"`` (``GenuineIntel 6/207``, ``AuthenticAMD 25/17``), None where unknown."""
    fields = cpu_fields()
    if not {"vendor_id", "cpu family", "model"} <= set(fields):
        return None
    return f"{fields['vendor_id']} {fields['cpu family']}/{fields['model']}"


def cpu_bf16_unit() -> str | None:
    """The CPU's bf16 matrix instructions oneDNN uses, ``"AMX"`` or ``"AVX512-BF16"``; None where it has neither."""
    import torch

    for name, label in (("_is_amx_tile_supported", "AMX"), ("_is_avx512_bf16_supported", "AVX512-BF16")):
        probe = getattr(torch.cpu, name, None)
        if probe is not None and probe():
            return label
    return None


def bf16_pays_off() -> bool:
    """Whether bf16 autocast trains faster than fp32 here: a CUDA GPU that supports bf16, a CPU with AMX tiles, or an
    AMD CPU with AVX-512-BF16 (Zen 4 and later). Not an Intel CPU with AVX-512-BF16 but no AMX (measured 1.7x
    slower, above), nor a CPU without bf16 instructions, where bf16 is emulated."""
    import torch

    if torch.cuda.is_available():
        return torch.cuda.is_bf16_supported()
    unit = cpu_bf16_unit()
    return unit == "AMX" or (unit == "AVX512-BF16" and cpu_fields().get("vendor_id") == "AuthenticAMD")


def keep_freed_memory() -> bool:
    """Have glibc's malloc keep freed memory in the process for the next allocation, for blocks under 1 GiB.

    By default glibc serves a large block (from 128 KiB, a threshold it raises up to 32 MiB as such blocks are
    freed) with its own ``mmap`` and unmaps it on ``free``, and returns the heap's free top to the kernel: a
    training step's activations and gradients, freed and allocated again every step, then come back as fresh pages
    the kernel must fault in and zero. On the tiny model's pre-training step (2 cores, fp32) that was ~87,000 page
    faults and ~0.18 s of system time a step; kept, ~4,500 and ~0.02 s, and the step 1.13x faster
    (bench/malloc_cpu.py, docs/scale.md). The process holds on to what it freed (peak RSS ~9% higher in that bench)
    instead of shrinking between stages. Returns whether both settings took (False where the C library has no
    ``mallopt``: not glibc); both are always attempted."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, KEEP_FREED_BYTES)) & bool(mallopt(M_TRIM_THRESHOLD, KEEP_FREED_BYTES))
