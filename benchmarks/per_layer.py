"""What ``check --per-layer`` costs over a plain ``check``, on the real IRs of the corpus.

For every model, in this one process and interleaved round by round (so machine noise hits
both alike), medians of: convert + check (the plain check), and convert + check with
per-layer comparison. With ``--memory``, each is also run once as the ``b2s-onnx`` command
in a fresh process, for its wall time (imports included) and peak RSS. Reported as
ratios: this machine is shared and noisy.

    python -m benchmarks.per_layer                    # every corpus model that converts
    python -m benchmarks.per_layer --models squeezenet1.1 lenet5-tf-user --repeats 5
    python -m benchmarks.per_layer --memory --json per_layer.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from b2s_onnx.errors import B2SError
from b2s_onnx.ir.convert import convert_ir_model
from b2s_onnx.parity.ir_check import check_ir
from benchmarks._machine import isa_flags

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "ir-corpus"


def _check(xml: Path, per_layer: bool) -> dict:
    conversion = convert_ir_model(xml)
    result = check_ir(
        xml, conversion.model, reference="openvino", per_layer=per_layer, ports=conversion.ports
    )
    return result.per_layer or {}


def _command(xml: Path, per_layer: bool) -> tuple[float, int]:
    """Wall time and peak RSS of ``b2s-onnx check`` in a fresh process (imports included),
    measured from a small wrapper so that this process's own memory is not counted."""
    exe = Path(sys.executable).with_name("b2s-onnx")
    command = [str(exe), "check", str(xml), "-q", *(["--per-layer"] if per_layer else [])]
    probe = (
        "import resource, subprocess, sys, time; t = time.perf_counter(); "
        "subprocess.run(sys.argv[1:]); "
        "print(time.perf_counter() - t, "
        "resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024)"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe, *command], check=True, capture_output=True, text=True
    )
    seconds, peak = out.stdout.split()[-2:]
    return float(seconds), int(peak)


def measure(xml: Path, repeats: int, memory: bool) -> dict:
    details = _check(xml, True)  # warm-up, and what the per-layer run did
    _check(xml, False)
    samples: dict[str, list[float]] = {"check": [], "per_layer": []}
    for _ in range(repeats):
        for name, flag in (("check", False), ("per_layer", True)):
            start = time.perf_counter()
            _check(xml, flag)
            samples[name].append(time.perf_counter() - start)
    seconds = {name: statistics.median(v) for name, v in samples.items()}
    row = {
        "model": xml.parent.name,
        "check_s": seconds["check"],
        "per_layer_s": seconds["per_layer"],
        "ratio": seconds["per_layer"] / seconds["check"],
        "strategy": details.get("strategy"),
        "runs": details.get("runs"),
        "compared": details.get("compared"),
        "estimated_mib": details.get("estimated_bytes", 0) / 2**20,
    }
    if memory:
        plain_s, plain_peak = _command(xml, False)
        layers_s, layers_peak = _command(xml, True)
        row["command_ratio"] = layers_s / plain_s
        row["check_peak_mib"] = plain_peak / 2**20
        row["per_layer_peak_mib"] = layers_peak / 2**20
        row["memory_ratio"] = layers_peak / plain_peak
    return row


def _models(names: list[str] | None) -> list[Path]:
    if names:
        return [CORPUS / name / "model.xml" for name in names]
    manifest = json.loads((CORPUS / "MANIFEST.json").read_text())
    return [CORPUS / entry["name"] / "model.xml" for entry in manifest]


def main() -> None:
    parser = argparse.ArgumentParser(description="check --per-layer vs a plain check")
    parser.add_argument("--models", nargs="+", default=None, help="corpus model names")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--memory", action="store_true", help="also peak RSS, in subprocesses")
    parser.add_argument("--json", default=None, help="also write the results here")
    args = parser.parse_args()
    print(f"CPU: {isa_flags()}")
    header = f"{'model':<46}{'check s':>9}{'per-layer s':>12}{'ratio':>7}  strategy"
    print(header + ("   command ratio, peak MiB check/per-layer (ratio)" if args.memory else ""))
    results = []
    for xml in _models(args.models):
        try:
            row = measure(xml, args.repeats, args.memory)
        except B2SError as exc:
            print(f"{xml.parent.name:<46}skipped: {str(exc)[:60]}")
            continue
        results.append(row)
        line = (
            f"{row['model']:<46}{row['check_s']:>9.2f}{row['per_layer_s']:>12.2f}"
            f"{row['ratio']:>7.2f}  {row['strategy']} ({row['runs']} run(s), "
            f"{row['compared']} ports, {row['estimated_mib']:.0f} MiB exposed in all)"
        )
        if args.memory:
            line += (
                f"   {row['command_ratio']:.2f}, {row['check_peak_mib']:.0f}/"
                f"{row['per_layer_peak_mib']:.0f} ({row['memory_ratio']:.2f})"
            )
        print(line, flush=True)
    if results:
        worst = max(results, key=lambda r: r["ratio"])
        print(f"largest time ratio: {worst['ratio']:.2f} ({worst['model']})")
    if args.json:
        Path(args.json).write_text(json.dumps({"cpu": isa_flags(), "models": results}, indent=2))


if __name__ == "__main__":
    main()
