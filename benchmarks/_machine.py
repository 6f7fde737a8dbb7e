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


#: How long a contender runs untimed before it is timed, when sessions use several
#: threads. onnxruntime's intra-op workers spin-wait for ~20-25 ms after each run and keep
#: a core from whatever runs next: on 2 cores, OpenVINO right after onnxruntime took
#: 4.6-5.4 ms per call of squeezenet1.1 instead of 2.7 ms for its first ~25 ms, so timing
#: rounds back to back halved its 2-thread ratios. One thread has no workers to spin.
SETTLE_SECONDS = 0.05


def settle_seconds(threads: int) -> float:
    """The untimed run-in before each timed call, for sessions with ``threads`` threads."""
    return SETTLE_SECONDS if threads > 1 else 0.0


def settle(run: Callable[[], object], seconds: float) -> None:
    """Calls ``run`` untimed until ``seconds`` have passed (at least once when positive),
    so that what ran before has let go of the cores."""
    if seconds <= 0:
        return
    end = time.perf_counter() + seconds
    run()
    while time.perf_counter() < end:
        run()


def interleaved_medians(
    contenders: Mapping[str, Callable[[], object]],
    repeats: int,
    warmup: int = 2,
    settle_for: float = 0.0,
) -> dict[str, float]:
    """Median seconds per call of each contender, timed round by round in turn so that
    machine noise hits all of them alike; each timed call after ``settle_for`` seconds of
    untimed ones (see ``settle_seconds``)."""
    for run in contenders.values():
        for _ in range(warmup):
            run()
    samples: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(repeats):
        for name, run in contenders.items():
            settle(run, settle_for)
            start = time.perf_counter()
            run()
            samples[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in samples.items()}
