"""``b2s-onnx convert``: an OpenVINO IR (.xml + .bin) to an ONNX model."""

from __future__ import annotations

from pathlib import Path

import click

from b2s_onnx.cli._common import (
    EXIT_MISMATCH,
    EXIT_OK,
    debug_option,
    handle_errors,
    parse_named_values,
    tolerance_options,
)
from b2s_onnx.cli.check_cmd import print_result
from b2s_onnx.io import save_model


def _tolerance_kwargs(tolerances: tuple) -> dict:
    """IR checks compare float math: given tolerances, else 1e-4 absolute / 1e-3 relative."""
    atol, rtol = tolerances
    return {"atol": atol or 1e-4, "rtol": rtol or 1e-3}


@click.command(
    "convert",
    epilog="Example:\n\n\b\n  b2s-onnx convert model.xml -o model.onnx --check",
)
@click.argument("model", type=click.Path(path_type=Path))
@click.option(
    "-o",
    "--output",
    type=click.Path(path_type=Path),
    default=None,
    help="Where to write the ONNX model (default: MODEL with .onnx).",
)
@click.option(
    "--bin",
    "bin_path",
    type=click.Path(path_type=Path),
    default=None,
    help="The weights file (default: MODEL with .bin).",
)
@click.option(
    "--opset", type=click.IntRange(13, 21), default=18, show_default=True, help="Target ONNX opset."
)
@click.option(
    "--keep-unsupported",
    is_flag=True,
    help="Write unsupported layers as custom-domain nodes instead of failing.",
)
@click.option(
    "--check",
    "run_check",
    is_flag=True,
    help="Compare with OpenVINO (if installed) on random inputs; exit 1 on mismatch.",
)
@tolerance_options
@click.option("-q", "--quiet", is_flag=True, help="Print nothing on success.")
@debug_option
@handle_errors
def convert_command(
    model: Path,
    output: Path | None,
    bin_path: Path | None,
    opset: int,
    keep_unsupported: bool,
    run_check: bool,
    atol: tuple[str, ...],
    rtol: tuple[str, ...],
    quiet: bool,
) -> int:
    """Convert the OpenVINO IR MODEL (.xml) to ONNX."""
    from b2s_onnx.ir.convert import convert_ir_model

    target = output if output is not None else model.with_suffix(".onnx")
    tolerances = (parse_named_values(atol, "--atol"), parse_named_values(rtol, "--rtol"))
    result = convert_ir_model(model, bin_path, opset=opset, keep_unsupported=keep_unsupported)
    save_model(result.model, target)
    if not quiet:
        click.echo(
            f"converted {model} -> {target} ({len(result.model.graph.node)} nodes, opset {opset})"
        )
        for node in result.lowered:
            click.echo(f"  lowered {node.op_type} '{node.name}': {' -> '.join(node.replacement)}")
        for kept in result.kept_unsupported:
            click.echo(f"  kept unsupported {kept}")
    if run_check:
        from b2s_onnx.parity.ir_check import check_ir

        outcome = check_ir(
            model,
            result.model,
            bin_path=bin_path,
            unlowered=result.unlowered,
            **_tolerance_kwargs(tolerances),
        )
        if not quiet or not outcome.passed:
            print_result(outcome)
        return EXIT_OK if outcome.passed else EXIT_MISMATCH
    return EXIT_OK
