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
    no_fuse_option,
    parse_named_values,
    tolerance_options,
    warn,
)
from b2s_onnx.cli._model_output import output_options
from b2s_onnx.cli._output import (
    Reporter,
    before_after_table,
    op_counts,
    print_rewrites,
    quiet_option,
    verbose_option,
)
from b2s_onnx.cli._paths import model_file, output_file, writable_file
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
    type=click.Path(),  # a string: a trailing slash means "this folder"
    default=None,
    help="Where to write the ONNX model (default: MODEL with .onnx; a folder: "
    "FOLDER/<MODEL stem>.onnx).",
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
@no_fuse_option
@click.option(
    "--int8",
    type=click.Choice(["qdq", "float"]),
    default="qdq",
    show_default=True,
    help="Quantized layers as QuantizeLinear/DequantizeLinear (onnxruntime's integer "
    "kernels, where exact) or as float arithmetic.",
)
@tolerance_options
@output_options
@quiet_option
@verbose_option
@debug_option
@handle_errors
def convert_command(
    model: Path,
    output: str | None,
    bin_path: Path | None,
    opset: int,
    keep_unsupported: bool,
    run_check: bool,
    no_fuse: bool,
    int8: str,
    atol: tuple[str, ...],
    rtol: tuple[str, ...],
    save_external_data: bool,
    external_data_threshold: int,
    threads: int | None,
    quiet: bool,
    verbose: bool,
) -> int:
    """Convert the OpenVINO IR MODEL (.xml, or a folder holding one) to ONNX."""
    from b2s_onnx.ir.convert import convert_ir_model
    from b2s_onnx.ir.reader import read_ir_xml

    report = Reporter(quiet, verbose)
    model = model_file(model, ".xml", "convert")
    target = (
        output_file(output, model)
        if output is not None
        else writable_file(model.with_suffix(".onnx"))
    )
    if (atol or rtol) and not run_check:
        warn("--atol/--rtol do nothing without --check")
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
            fuse=not no_fuse,
            int8=int8,
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
    print_rewrites(report, result.rewrites)
    for note in result.notes:
        report.detail(f"  {note}")
    if result.notes:
        report.print(f"  {len(result.notes)} layer(s) kept in another form (-v lists them)")
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
