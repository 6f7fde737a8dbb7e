"""``b2s-onnx lower``: replace the custom data-movement nodes with standard ONNX ops."""

from __future__ import annotations

import time
from pathlib import Path

import click

from b2s_onnx.cli._common import (
    EXIT_MISMATCH,
    EXIT_OK,
    debug_option,
    handle_errors,
    no_fuse_option,
    parse_named_values,
    refuse_overwriting_input,
    tolerance_options,
    warn,
)
from b2s_onnx.cli._model_output import output_options, write_model
from b2s_onnx.cli._output import (
    Reporter,
    before_after_table,
    op_counts,
    print_rewrites,
    quiet_option,
    verbose_option,
)
from b2s_onnx.cli._paths import model_file, output_file
from b2s_onnx.cli.check_cmd import print_result
from b2s_onnx.io import estimated_size, load_model_with_info
from b2s_onnx.lowering import DEFAULT_DOMAINS, LoweringOptions, lower_model
from b2s_onnx.parity import check


@click.command(
    "lower",
    epilog="Example:\n\n\b\n  b2s-onnx lower models/batch_to_space.onnx -o /tmp/out.onnx --check",
)
@click.argument("model", type=click.Path(path_type=Path))
@click.option(
    "-o",
    "--output",
    type=click.Path(),  # a string: a trailing slash means "this folder"
    required=True,
    help="Where to write the lowered model (a folder: FOLDER/<MODEL stem>.onnx).",
)
@click.option(
    "--opset",
    type=int,
    default=None,
    help="Target default-domain opset (13..21). Default: the model's, at least 13.",
)
@click.option(
    "--domain",
    "domains",
    multiple=True,
    metavar="DOMAIN",
    help=f"Also lower nodes of this domain (always: {', '.join(DEFAULT_DOMAINS)}).",
)
@click.option(
    "--check",
    "run_check",
    is_flag=True,
    help="Then compare the lowered model with the original (exit 1 on mismatch).",
)
@no_fuse_option
@tolerance_options
@output_options
@click.option("--inplace", is_flag=True, help="Allow OUTPUT to be the input file.")
@quiet_option
@verbose_option
@debug_option
@handle_errors
def lower_command(
    model: Path,
    output: str,
    opset: int | None,
    domains: tuple[str, ...],
    run_check: bool,
    no_fuse: bool,
    atol: tuple[str, ...],
    rtol: tuple[str, ...],
    save_external_data: bool,
    external_data_threshold: int,
    threads: int | None,
    inplace: bool,
    quiet: bool,
    verbose: bool,
) -> int:
    """Lower BatchToSpace/SpaceToBatch/DepthToSpace/SpaceToDepth nodes in MODEL."""
    report = Reporter(quiet, verbose)
    model = model_file(model, ".onnx", "lower")
    target = output_file(output, model)
    refuse_overwriting_input(model, target, inplace)
    tolerances = parse_named_values(atol, "--atol"), parse_named_values(rtol, "--rtol")
    if (atol or rtol) and not run_check:
        warn("--atol/--rtol do nothing without --check")
    start = time.perf_counter()
    original, external = load_model_with_info(model)
    before, before_bytes = op_counts(original), estimated_size(original)
    all_domains = (*DEFAULT_DOMAINS, *domains)
    reference = None
    if run_check:  # keep the original only when it is needed, so memory stays ~1x otherwise
        reference = type(original)()
        reference.CopyFrom(original)
    result = lower_model(
        original,
        opset=opset,
        domains=all_domains,
        options=LoweringOptions(threads=threads, fuse=not no_fuse),
        in_place=True,
    )
    after, after_bytes = op_counts(result.model), estimated_size(result.model)
    elapsed = time.perf_counter() - start
    for node in result.lowered:
        kind = "static" if node.static else "dynamic"
        report.detail(f"  {node.op_type} '{node.name}' ({kind}): {' -> '.join(node.replacement)}")
    if run_check:
        outcome = check(
            reference,
            lowered=result.model,
            domains=all_domains,
            atol=tolerances[0],
            rtol=tolerances[1],
            rewrites=result.rewrites,
        )
    written = write_model(
        result.model,
        target,
        external=save_external_data,
        threshold=external_data_threshold,
        input_was_external=external,
    )
    report.print(
        before_after_table(
            f"lowered {len(result.lowered)} node(s) -> {target}",
            before,
            after,
            before_bytes,
            after_bytes,
            elapsed,
        )
    )
    if len(written) > 1:
        report.print(f"external data: {written[0]}")
    print_rewrites(report, result.rewrites)
    if run_check:
        if not quiet or not outcome.passed:
            print_result(outcome)
        return EXIT_OK if outcome.passed else EXIT_MISMATCH
    return EXIT_OK
