"""``b2s-onnx convert``: an OpenVINO IR (.xml + .bin) to an ONNX model."""

from __future__ import annotations

import time
from collections import Counter
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
from b2s_onnx.cli._model_output import output_options
from b2s_onnx.cli._output import (
    Reporter,
    before_after_table,
    op_counts,
    quiet_option,
    verbose_option,
)
from b2s_onnx.cli.check_cmd import print_result
from b2s_onnx.lowering import LoweringOptions


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
@output_options
@quiet_option
@verbose_option
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
    save_external_data: bool,
    external_data_threshold: int,
    threads: int | None,
    quiet: bool,
    verbose: bool,
) -> int:
    """Convert the OpenVINO IR MODEL (.xml) to ONNX."""
    from b2s_onnx.ir.convert import convert_ir_model
    from b2s_onnx.ir.reader import read_ir_xml

    report = Reporter(quiet, verbose)
    target = output if output is not None else model.with_suffix(".onnx")
    tolerances = {
        "atol": parse_named_values(atol, "--atol"),
        "rtol": parse_named_values(rtol, "--rtol"),
    }
    start = time.perf_counter()
    ir = read_ir_xml(model)
    before = Counter(
        layer.type
        for layer in ir.layers.values()
        if layer.type not in ("Const", "Parameter", "Result")
    )
    weights = bin_path or model.with_suffix(".bin")
    before_bytes = model.stat().st_size + (weights.stat().st_size if weights.is_file() else 0)
    with report.progress("converting", len(ir.layers)) as advance:
        result = convert_ir_model(
            model,
            bin_path,
            opset=opset,
            keep_unsupported=keep_unsupported,
            progress=advance,
            options=LoweringOptions(threads=threads),
        )
    elapsed = time.perf_counter() - start
    # Saved by the result itself: it writes the weights without copying them into the model.
    written = result.save(
        target,
        external_data=True if save_external_data else None,
        size_threshold=external_data_threshold,
    )
    report.print(
        before_after_table(
            f"converted {model} -> {target} (opset {opset})",
            before,
            op_counts(result.model),
            before_bytes,
            sum(path.stat().st_size for path in written),
            elapsed,
        )
    )
    if len(written) > 1:
        report.print(f"external data: {written[0]}")
    for node in result.lowered:
        report.detail(f"  lowered {node.op_type} '{node.name}': {' -> '.join(node.replacement)}")
    for kept in result.kept_unsupported:
        report.print(f"  kept unsupported {kept}")
    if run_check:
        from b2s_onnx.parity.ir_check import check_ir

        outcome = check_ir(
            model, result.model, bin_path=bin_path, unlowered=result.unlowered, **tolerances
        )
        if not quiet or not outcome.passed:
            print_result(outcome)
        return EXIT_OK if outcome.passed else EXIT_MISMATCH
    return EXIT_OK
