"""``b2s-onnx lower``: replace the custom data-movement nodes with standard ONNX ops."""

from __future__ import annotations

from pathlib import Path

import click

from b2s_onnx.cli._common import (
    EXIT_MISMATCH,
    EXIT_OK,
    debug_option,
    handle_errors,
    parse_named_values,
    refuse_overwriting_input,
    tolerance_options,
)
from b2s_onnx.cli.check_cmd import print_result
from b2s_onnx.io import load_model, save_model
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
    type=click.Path(path_type=Path),
    required=True,
    help="Where to write the lowered model.",
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
@tolerance_options
@click.option("--inplace", is_flag=True, help="Allow OUTPUT to be the input file.")
@click.option("-q", "--quiet", is_flag=True, help="Print nothing on success.")
@debug_option
@handle_errors
def lower_command(
    model: Path,
    output: Path,
    opset: int | None,
    domains: tuple[str, ...],
    run_check: bool,
    atol: tuple[str, ...],
    rtol: tuple[str, ...],
    inplace: bool,
    quiet: bool,
) -> int:
    """Lower BatchToSpace/SpaceToBatch/DepthToSpace/SpaceToDepth nodes in MODEL."""
    refuse_overwriting_input(model, output, inplace)
    parse_named_values(atol, "--atol")
    parse_named_values(rtol, "--rtol")
    original = load_model(model)
    all_domains = (*DEFAULT_DOMAINS, *domains)
    result = lower_model(original, opset=opset, domains=all_domains, options=LoweringOptions())
    save_model(result.model, output)
    if not quiet:
        click.echo(f"lowered {len(result.lowered)} node(s) -> {output}")
        for node in result.lowered:
            kind = "static" if node.static else "dynamic"
            click.echo(f"  {node.op_type} '{node.name}' ({kind}): {' -> '.join(node.replacement)}")
    if run_check:
        outcome = check(
            original,
            lowered=result.model,
            domains=all_domains,
            atol=parse_named_values(atol, "--atol"),
            rtol=parse_named_values(rtol, "--rtol"),
        )
        if not quiet or not outcome.passed:
            print_result(outcome)
        return EXIT_OK if outcome.passed else EXIT_MISMATCH
    return EXIT_OK
