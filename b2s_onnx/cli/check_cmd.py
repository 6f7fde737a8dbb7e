"""``b2s-onnx check``: the original model's meaning vs its lowering in onnxruntime."""

from __future__ import annotations

import json
from pathlib import Path

import click
import numpy as np

from b2s_onnx import __version__
from b2s_onnx.cli._common import (
    EXIT_MISMATCH,
    EXIT_OK,
    debug_option,
    handle_errors,
    parse_dim_sizes,
    parse_input_shapes,
    parse_named_values,
    tolerance_options,
)
from b2s_onnx.errors import B2SError
from b2s_onnx.lowering import DEFAULT_DOMAINS
from b2s_onnx.parity import CheckResult, check


def print_result(result: CheckResult) -> None:
    verdict = "PASS" if result.passed else "FAIL"
    click.echo(
        f"parity {verdict} against {result.reference} (seed {result.seed}, "
        f"inputs {result.input_shapes})"
    )
    for out in result.outputs:
        mark = "ok" if out.passed else "MISMATCH"
        detail = f" ({out.reason}, {out.mismatches} element(s))" if not out.passed else ""
        click.echo(
            f"  {out.name} {out.dtype}{out.shape}: {mark}{detail} max_abs={out.max_abs_error:.3g} "
            f"max_rel={out.max_rel_error:.3g} atol={out.atol:g} rtol={out.rtol:g}"
        )


def _check_ir(
    model: Path,
    converted_path: Path | None,
    bin_path: Path | None,
    reference: str,
    common: dict,
    atol,
    rtol,
) -> CheckResult:
    """An IR is converted now (or ``--lowered`` names its conversion) and compared."""
    from b2s_onnx.io import load_model
    from b2s_onnx.ir.convert import convert_ir_model
    from b2s_onnx.parity.ir_check import check_ir

    conversion = convert_ir_model(model, bin_path)
    converted = load_model(converted_path) if converted_path else conversion.model
    # Float math differs between runtimes in the last bits: default to small tolerances.
    return check_ir(
        model,
        converted,
        bin_path=bin_path,
        unlowered=conversion.unlowered,
        reference=reference,
        atol=atol or 1e-4,
        rtol=rtol or 1e-3,
        **common,
    )


def _load_npz(path: Path | None) -> dict[str, np.ndarray] | None:
    if path is None:
        return None
    try:
        with np.load(path, allow_pickle=False) as archive:
            return {name: archive[name] for name in archive.files}
    except (OSError, ValueError) as exc:
        raise B2SError(f"{path}: not a readable .npz file ({exc})") from exc


@click.command(
    "check",
    epilog="Example:\n\n\b\n  b2s-onnx check models/batch_to_space.onnx --json report.json",
)
@click.argument("model", type=click.Path(path_type=Path))
@click.option(
    "--lowered",
    type=click.Path(path_type=Path),
    default=None,
    help="A lowered model to check (default: lower MODEL now).",
)
@click.option(
    "--inputs",
    "inputs_file",
    type=click.Path(path_type=Path),
    default=None,
    help="Input values as an .npz archive keyed by input name.",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of random inputs.")
@click.option(
    "--input-shapes",
    multiple=True,
    metavar="NAME:[d0,...]",
    help="Shape of an input with symbolic dims.",
)
@click.option(
    "--dim",
    "dims",
    multiple=True,
    metavar="NAME=SIZE",
    help="Size of a symbolic dimension wherever it appears.",
)
@tolerance_options
@click.option(
    "--domain",
    "domains",
    multiple=True,
    metavar="DOMAIN",
    help="Also treat nodes of this domain as custom ops.",
)
@click.option(
    "--reference",
    type=click.Choice(["auto", "openvino", "onnx"]),
    default="auto",
    show_default=True,
    help="For an IR (.xml): OpenVINO's CPU plugin or onnx's reference evaluator; auto uses "
    "OpenVINO when installed.",
)
@click.option(
    "--bin",
    "bin_path",
    type=click.Path(path_type=Path),
    default=None,
    help="For an IR: the weights file (default: MODEL with .bin).",
)
@click.option(
    "--json",
    "json_path",
    type=click.Path(path_type=Path),
    default=None,
    help="Write a machine-readable report here.",
)
@click.option("-q", "--quiet", is_flag=True, help="Print only a mismatch.")
@debug_option
@handle_errors
def check_command(
    model: Path,
    lowered: Path | None,
    inputs_file: Path | None,
    seed: int,
    input_shapes: tuple[str, ...],
    dims: tuple[str, ...],
    atol: tuple[str, ...],
    rtol: tuple[str, ...],
    domains: tuple[str, ...],
    reference: str,
    bin_path: Path | None,
    json_path: Path | None,
    quiet: bool,
) -> int:
    """Check that the lowering (or, for an IR .xml, the conversion) of MODEL computes what
    MODEL means; exit 1 if not."""
    common = {
        "inputs": _load_npz(inputs_file),
        "seed": seed,
        "dim_sizes": parse_dim_sizes(dims),
        "input_shapes": parse_input_shapes(input_shapes),
    }
    atol_values = parse_named_values(atol, "--atol")
    rtol_values = parse_named_values(rtol, "--rtol")
    if model.suffix.lower() == ".xml":
        result = _check_ir(model, lowered, bin_path, reference, common, atol_values, rtol_values)
    else:
        result = check(
            model,
            lowered=lowered,
            atol=atol_values,
            rtol=rtol_values,
            domains=(*DEFAULT_DOMAINS, *domains),
            **common,
        )
    if json_path is not None:
        report = {
            "tool": "b2s-onnx",
            "version": __version__,
            "model": str(model),
            **result.to_dict(),
        }
        json_path.write_text(json.dumps(report, indent=2, default=str) + "\n")
    if not quiet or not result.passed:
        print_result(result)
    return EXIT_OK if result.passed else EXIT_MISMATCH
