"""Output-file options shared by the commands that write models."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import click
import onnx

from b2s_onnx.io import DEFAULT_EXTERNAL_THRESHOLD, save_model


def output_options(command: Callable) -> Callable:
    command = click.option(
        "--threads",
        type=click.IntRange(1),
        default=None,
        metavar="N",
        help="Plan for onnxruntime sessions with N intra-op threads (default: several). "
        "Changes speed, never results.",
    )(command)
    command = click.option(
        "--external-data-threshold",
        type=click.IntRange(0),
        default=DEFAULT_EXTERNAL_THRESHOLD,
        show_default=True,
        metavar="BYTES",
        help="With external data: tensors at least this large go to the .data file.",
    )(command)
    return click.option(
        "--save-external-data",
        is_flag=True,
        help="Write tensors to OUTPUT.data beside the model (automatic above 2 GiB, and when "
        "the input used external data).",
    )(command)


def write_model(
    model: onnx.ModelProto,
    target: Path,
    *,
    external: bool,
    threshold: int,
    input_was_external: bool = False,
) -> list[Path]:
    use_external = True if (external or input_was_external) else None
    return save_model(model, target, external_data=use_external, size_threshold=threshold)
