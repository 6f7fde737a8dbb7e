"""What every benchmark prints beside its ratios, and how it times contenders fairly."""

from __future__ import annotations

import platform
import statistics
import time
from collections.abc import Callable, Mapping
from pathlib import Path

#: ISA extensions that move onnxruntime's and OpenVINO's kernels (and so the ratios).
_ISA = (
    "sse4_2",
    "avx",
    "avx2",
    "fma",
    "avx512f",
    "avx512_vnni",
    "avx512_bf16",
    "avx_vnni",
    "amx_tile",
    "amx_int8",
    "amx_bf16",
)


def _cpuinfo() -> tuple[str, set[str]]:
    """The CPU's model name and flags (Linux), or empty ones elsewhere."""
    cpuinfo = Path("/proc/cpuinfo")
    if not cpuinfo.is_file():
        return "", set()
    model, flags = "", set()
    for line in cpuinfo.read_text().splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name" and not model:
            model = value.strip()
        elif key.strip() == "flags" and not flags:
            flags = set(value.split())
    return model, flags


def isa_flag_list() -> list[str]:
    """The ISA extensions above that this CPU has."""
    return [flag for flag in _ISA if flag in _cpuinfo()[1]]


def isa_flags() -> str:
    """The CPU's model name and the ISA flags above that it has, for a report line."""
    model, _ = _cpuinfo()
    model = model or platform.processor() or platform.machine()
    return f"{model}; ISA: {' '.join(isa_flag_list()) or 'none of note'}"


def interleaved_medians(
    contenders: Mapping[str, Callable[[], object]], repeats: int, warmup: int = 2
) -> dict[str, float]:
    """Median seconds per call of each contender, timed round by round in turn so that
    machine noise hits all of them alike."""
    for run in contenders.values():
        for _ in range(warmup):
            run()
    samples: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(repeats):
        for name, run in contenders.items():
            start = time.perf_counter()
            run()
            samples[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in samples.items()}
