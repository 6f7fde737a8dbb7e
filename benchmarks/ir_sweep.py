"""Sweep of IRs written by OpenVINO's own ONNX frontend: convert each back with b2s_onnx and
compare onnxruntime on our model with OpenVINO's CPU plugin (f32) on the same inputs.

The sources are the ONNX models that ship with the ``onnx`` package: its backend test data
(real architectures in ``light``, PyTorch exports, simple models) and the single-op node test
cases that ``onnx.backend.test.case`` builds in memory. Each model goes through
``openvino.convert_model`` and ``openvino.save_model`` (f32 weights, and with ``--fp16`` also
FP16-compressed weights), so the IRs are what users get from OpenVINO's converter, not IRs we
wrote ourselves. Models that OpenVINO refuses, or cannot compile, are skipped: they say
nothing about us.

Every case ends in one outcome, and the triage table groups them by the IR's layer types:

- ``matched``: converted, every output within tolerance of OpenVINO;
- ``mismatched``: converted, some output differs (largest error shown);
- ``refused``: b2s_onnx raised B2SError (its message is shown);
- ``crashed``: any other exception from b2s_onnx (its type is shown);
- ``ort_refused``: onnxruntime would not load or run the model we wrote.

When OpenVINO and we disagree, the original ONNX model is also run in onnxruntime: if our
output matches it, the disagreement is OpenVINO's (``ov_wrong`` in the detail column).

    python -m benchmarks.ir_sweep                      # everything, f32 weights
    python -m benchmarks.ir_sweep --source node --filter conv --fp16
    python -m benchmarks.ir_sweep --json sweep.json --details
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import dataclasses
import io
import json
import os
import sys
import tempfile
import traceback
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from b2s_onnx.errors import B2SError

SOURCES = ("node", "light", "pytorch-converted", "pytorch-operator", "simple")
OUTCOMES = ("matched", "mismatched", "refused", "crashed", "ort_refused")
#: Layers every IR has; they do not name what a case is about.
PLUMBING = frozenset({"Parameter", "Result", "Const", "Constant"})
ATOL = 1e-4
RTOL = 1e-3


@dataclasses.dataclass
class Case:
    """One ONNX model and the inputs to feed it (by input name)."""

    source: str
    name: str
    load: Callable[[], tuple[onnx.ModelProto, dict[str, np.ndarray] | None]]


@dataclasses.dataclass
class Outcome:
    source: str
    name: str
    weights: str
    outcome: str
    layers: str
    detail: str = ""
    max_error: float = 0.0


def _data_dir() -> Path:
    return Path(onnx.__file__).parent / "backend" / "test" / "data"


def _read_inputs(model: onnx.ModelProto, folder: Path) -> dict[str, np.ndarray] | None:
    files = sorted(folder.glob("input_*.pb"), key=lambda p: int(p.stem.split("_")[1]))
    if not files:
        return None
    names = _real_inputs(model)
    feeds = {}
    for name, file in zip(names, files, strict=False):
        tensor = onnx.TensorProto()
        tensor.ParseFromString(file.read_bytes())
        feeds[name] = numpy_helper.to_array(tensor)
    return feeds


def _real_inputs(model: onnx.ModelProto) -> list[str]:
    """Graph inputs that are not initializers (old models list weights as inputs too)."""
    weights = {t.name for t in model.graph.initializer}
    return [i.name for i in model.graph.input if i.name not in weights]


def file_cases(source: str) -> Iterator[Case]:
    root = _data_dir() / source
    if source == "light":
        for path in sorted(root.glob("*.onnx")):
            yield Case(source, path.stem, lambda p=path: (onnx.load(p), None))
        return
    for folder in sorted(p for p in root.iterdir() if (p / "model.onnx").exists()):

        def load(folder=folder):
            model = onnx.load(folder / "model.onnx")
            return model, _read_inputs(model, folder / "test_data_set_0")

        yield Case(source, folder.name, load)


def node_cases() -> Iterator[Case]:
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        cases = collect_testcases(None)
    for case in cases:
        if not case.data_sets:
            continue
        inputs = case.data_sets[0][0]

        def load(case=case, inputs=inputs):
            names = _real_inputs(case.model)
            return case.model, {n: np.asarray(v) for n, v in zip(names, inputs, strict=False)}

        yield Case("node", case.name, load)


def collect(sources: tuple[str, ...]) -> Iterator[Case]:
    for source in sources:
        yield from node_cases() if source == "node" else file_cases(source)


def _seeded_feeds(compiled, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    feeds = {}
    for port in compiled.inputs:
        shape = [d if d > 0 else 1 for d in port.get_partial_shape().get_min_shape()]
        shape = [d if d > 0 else 2 for d in shape]
        dtype = port.get_element_type().to_dtype()
        if np.issubdtype(dtype, np.floating):
            feeds[port.get_any_name()] = rng.standard_normal(shape).astype(dtype)
        elif dtype == np.bool_:
            feeds[port.get_any_name()] = rng.integers(0, 2, shape).astype(bool)
        else:
            feeds[port.get_any_name()] = rng.integers(0, 4, shape).astype(dtype)
    return feeds


def _layer_types(xml: Path) -> str:
    import xml.etree.ElementTree as ET

    types = set()
    for layer in ET.parse(xml).getroot().iter("layer"):
        if layer.get("type") not in PLUMBING:
            types.add(f"{layer.get('type')}-{layer.get('version', '')}")
    return ",".join(sorted(types)) or "(none)"


def _errors(ours: np.ndarray, theirs: np.ndarray) -> float | None:
    """Largest error beyond tolerance, 0.0 when close, None when shapes or kinds differ."""
    if ours.shape != theirs.shape:
        return None
    if ours.dtype.kind in "OUS" or theirs.dtype.kind in "OUS":
        return 0.0 if np.array_equal(ours, theirs) else None
    a = ours.astype(np.float64)
    b = theirs.astype(np.float64)
    same = (a == b) | (np.isnan(a) & np.isnan(b))
    if same.all():
        return 0.0
    close = np.isclose(a, b, atol=ATOL, rtol=RTOL) | same
    if close.all():
        return 0.0
    diff = np.abs(a - b)[~close]
    diff = diff[np.isfinite(diff)]
    return float(diff.max()) if diff.size else float("inf")


def _compare(ours: dict, theirs: list[tuple[set, np.ndarray]]) -> tuple[float | None, str]:
    worst = 0.0
    for names, value in theirs:
        name = next((n for n in ours if n in names), None)
        if name is None:
            return None, f"output {sorted(names)} missing"
        error = _errors(np.asarray(ours[name]), value)
        if error is None:
            return None, f"output {name}: shape/dtype {ours[name].shape} vs {value.shape}"
        worst = max(worst, error)
    return worst, ""


def run_case(case: Case, folder: Path, compress: bool, opset: int = 18) -> Outcome | None:
    """Converts and compares one case; None when OpenVINO itself cannot handle it."""
    import openvino as ov

    from b2s_onnx.ir.convert import convert_ir_model

    weights = "fp16" if compress else "f32"
    try:
        model, feeds = case.load()
        path = folder / "model.onnx"
        onnx.save(model, path)
        with contextlib.redirect_stderr(io.StringIO()):
            ov_model = ov.convert_model(str(path))
        xml = folder / "model.xml"
        ov.save_model(ov_model, xml, compress_to_fp16=compress)
        core = ov.Core()
        compiled = core.compile_model(
            core.read_model(xml), "CPU", {"INFERENCE_PRECISION_HINT": "f32"}
        )
        if feeds is None:
            feeds = _seeded_feeds(compiled)
        # Every name of a port reaches the same data: our model may use any one of them.
        feeds = {
            alias: feeds[name]
            for port in compiled.inputs
            for name in port.get_names()
            if name in feeds
            for alias in port.get_names()
        }
        if not all(port.get_any_name() in feeds for port in compiled.inputs):
            return None
        # onnxruntime's Python API takes no ml_dtypes arrays (bfloat16, float8, int4).
        if any(value.dtype.kind == "V" for value in feeds.values()):
            return None
        result = compiled({p.get_any_name(): feeds[p.get_any_name()] for p in compiled.inputs})
        theirs = [(set(p.get_names()), np.asarray(result[p])) for p in compiled.outputs]
    except Exception:
        return None
    layers = _layer_types(xml)
    out = Outcome(case.source, case.name, weights, "matched", layers)
    try:
        converted = convert_ir_model(xml, opset=opset).model
    except B2SError as error:
        out.outcome, out.detail = "refused", str(error).splitlines()[0][:160]
        return out
    except Exception as error:
        frame = traceback.extract_tb(error.__traceback__)[-1]
        where = f"{Path(frame.filename).name}:{frame.lineno}"
        out.outcome, out.detail = "crashed", f"{type(error).__name__} at {where}: {error}"[:200]
        return out
    try:
        session = _session(converted)
        names = {i.name for i in session.get_inputs()}
        ours_raw = session.run(None, {k: v for k, v in feeds.items() if k in names})
        ours = {o.name: v for o, v in zip(session.get_outputs(), ours_raw, strict=True)}
    except Exception as error:
        out.outcome, out.detail = "ort_refused", str(error).splitlines()[0][:200]
        return out
    worst, why = _compare(ours, theirs)
    if worst == 0.0:
        return out
    out.outcome = "mismatched"
    out.max_error = float("inf") if worst is None else worst
    out.detail = why or f"max error {worst:.3g}"
    if _original_agrees(model, feeds, ours):
        out.detail += " (ov_wrong: ours matches onnxruntime on the original)"
    return out


def _session(model: onnx.ModelProto):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    return ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )


def _original_agrees(model: onnx.ModelProto, feeds: dict, ours: dict) -> bool:

    try:
        session = _session(model)
        names = {i.name for i in session.get_inputs()}
        values = session.run(None, {k: v for k, v in feeds.items() if k in names})
    except Exception:
        return False
    reference = [
        ({o.name}, np.asarray(v)) for o, v in zip(session.get_outputs(), values, strict=True)
    ]
    worst, _ = _compare(ours, reference)
    return worst == 0.0


def sweep(
    cases: list[Case],
    *,
    fp16: bool = False,
    opset: int = 18,
    echo: Callable[[str], object] | None = None,
) -> list[Outcome]:
    results = []
    for case in cases:
        for compress in (False, True) if fp16 else (False,):
            with tempfile.TemporaryDirectory() as tmp:
                outcome = run_case(case, Path(tmp), compress, opset)
            if outcome is not None:
                results.append(outcome)
                if echo and outcome.outcome != "matched":
                    echo(
                        f"{outcome.source}/{outcome.name}[{outcome.weights}] "
                        f"{outcome.outcome}: {outcome.detail}"
                    )
    return results


def triage(results: list[Outcome]) -> str:
    """The per-source totals, then one row per layer-type group that has a failure."""
    lines = []
    by_source = collections.defaultdict(collections.Counter)
    for r in results:
        by_source[f"{r.source}[{r.weights}]"][r.outcome] += 1
    header = f"{'source':<28}" + "".join(f"{o:>12}" for o in OUTCOMES) + f"{'total':>8}"
    lines += [header, "-" * len(header)]
    for source, counts in sorted(by_source.items()):
        row = f"{source:<28}" + "".join(f"{counts[o]:>12}" for o in OUTCOMES)
        lines.append(row + f"{sum(counts.values()):>8}")
    groups = collections.defaultdict(list)
    for r in results:
        if r.outcome != "matched":
            groups[(r.outcome, r.layers)].append(r)
    lines.append("")
    for (outcome, layers), rows in sorted(groups.items(), key=lambda kv: (kv[0][0], -len(kv[1]))):
        example = rows[0]
        lines.append(f"{outcome:<12} {len(rows):>4}  {layers}")
        lines.append(f"{'':<18}e.g. {example.source}/{example.name}: {example.detail}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    parser.add_argument("--source", nargs="+", choices=SOURCES, default=list(SOURCES))
    parser.add_argument("--filter", default="", help="only cases whose name contains this")
    parser.add_argument("--fp16", action="store_true", help="also FP16-compressed weights")
    parser.add_argument("--opset", type=int, default=18, help="target ONNX opset")
    parser.add_argument("--json", type=Path, help="write every outcome here")
    parser.add_argument("--details", action="store_true", help="print each failure as it happens")
    parser.add_argument(
        "--shard", default="0/1", help="k/n: only every n-th case from the k-th (parallel runs)"
    )
    args = parser.parse_args(argv)
    os.environ.setdefault("OV_LOG_LEVEL", "0")
    k, n = (int(part) for part in args.shard.split("/"))
    cases = [c for c in collect(tuple(args.source)) if args.filter in c.name][k::n]
    echo = (lambda line: print(line, flush=True)) if args.details else None
    results = sweep(cases, fp16=args.fp16, opset=args.opset, echo=echo)
    print(triage(results))
    if args.json:
        args.json.write_text(json.dumps([dataclasses.asdict(r) for r in results], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
