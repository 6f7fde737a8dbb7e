"""Checking one model, as a picklable function: batch mode runs it in worker processes."""

from __future__ import annotations

import time
import traceback
from pathlib import Path

import numpy as np

from b2s_onnx.errors import B2SError
from b2s_onnx.io import file_sha256

STATUS = {0: "pass", 1: "mismatch", 2: "bad-input", 3: "internal-error"}


def _load_npz(path: str | None) -> dict[str, np.ndarray] | None:
    if path is None:
        return None
    try:
        with np.load(path, allow_pickle=False) as archive:
            return {name: archive[name] for name in archive.files}
    except (OSError, ValueError) as exc:
        raise B2SError(f"{path}: not a readable .npz file ({exc})") from exc


def _check(model: Path, options: dict, progress=None):
    if model.is_dir():
        raise B2SError(f"{model}: is a folder, not a model file")
    if not model.exists():
        raise B2SError(f"{model}: no such file")
    common = {
        "inputs": _load_npz(options["inputs"]),
        "seed": options["seed"],
        "dim_sizes": options["dim_sizes"],
        "input_shapes": options["input_shapes"],
        "val_range": options["val_range"],
        "compare": options["compare"],
        "progress": progress,
    }
    lowered = Path(options["lowered"]) if options["lowered"] else None
    if model.suffix.lower() == ".xml":
        from b2s_onnx.parity.ir_check import check_ir_file

        return check_ir_file(
            model,
            bin_path=options["bin"],
            lowered=lowered,
            reference=options["reference"],
            atol=options["atol"],
            rtol=options["rtol"],
            per_layer=options.get("per_layer", False),
            **common,
        )
    from b2s_onnx.parity import check

    return check(
        model,
        lowered=lowered,
        atol=options["atol"],
        rtol=options["rtol"],
        domains=options["domains"],
        reference=options["reference"],
        per_layer=options.get("per_layer", False),
        **common,
    )


def check_one(path: str, options: dict, progress=None) -> dict:
    """A JSON-ready record for one model; never raises. ``progress(stage)`` hears each stage
    (single-model runs on a terminal only: it is not sent to worker processes)."""
    model = Path(path)
    record: dict = {"model": path, "sha256": None, "status": None, "exit_code": None, "error": None}
    start = time.perf_counter()
    try:
        if model.is_file():
            record["sha256"] = file_sha256(model)
        result = _check(model, options, progress)
        record.update(result.to_dict())
        record["exit_code"] = 0 if result.passed else 1
    except B2SError as exc:
        record["exit_code"], record["error"] = 2, str(exc)
    except Exception as exc:  # a bug of ours: reported, never hidden
        record["exit_code"] = 3
        record["error"] = f"{type(exc).__name__}: {exc}"
        if options.get("debug"):
            record["traceback"] = traceback.format_exc()
    if options["lowered"] and Path(options["lowered"]).is_file():
        record["lowered_sha256"] = file_sha256(options["lowered"])
    record["status"] = STATUS[record["exit_code"]]
    record["seconds"] = time.perf_counter() - start
    return record
