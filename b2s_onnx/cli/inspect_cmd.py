"""``b2s-onnx inspect``: what a model holds, and what lowering would do to it."""

from __future__ import annotations

import json
from pathlib import Path

import click
from rich.table import Table

from b2s_onnx.cli._common import EXIT_OK, debug_option, handle_errors
from b2s_onnx.cli._output import Reporter
from b2s_onnx.errors import B2SError
from b2s_onnx.inspection import inspect
from b2s_onnx.lowering import DEFAULT_DOMAINS


@click.command(
    "inspect",
    epilog="Example:\n\n\b\n  b2s-onnx inspect models/dilated_block.onnx",
)
@click.argument("model", type=click.Path(path_type=Path))
@click.option(
    "--domain",
    "domains",
    multiple=True,
    metavar="DOMAIN",
    help="Also treat nodes of this domain as custom ops.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@debug_option
@handle_errors
def inspect_command(model: Path, domains: tuple[str, ...], as_json: bool) -> int:
    """Op counts, opsets, inputs/outputs and the custom nodes of MODEL (.onnx or IR .xml)."""
    if model.is_dir():
        raise B2SError(f"{model}: is a folder; inspect expects a .onnx or .xml file")
    report = inspect(model, (*DEFAULT_DOMAINS, *domains))
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=2))
        return EXIT_OK
    out = Reporter()
    opsets = ", ".join(f"{d} {v}" for d, v in report.opsets.items()) or "-"
    out.print(f"{report.path}: {report.kind}, IR version {report.ir_version}, opsets: {opsets}")
    io_table = Table(title="inputs and outputs", title_justify="left")
    for column in ("", "name", "dtype", "shape"):
        io_table.add_column(column)
    for kind, tensors in (("input", report.inputs), ("output", report.outputs)):
        for t in tensors:
            io_table.add_row(kind, t.name, t.dtype, "?" if t.shape is None else str(t.shape))
    out.print(io_table)
    ops = Table(title="operators", title_justify="left")
    ops.add_column("op")
    ops.add_column("count", justify="right")
    for op, count in report.op_counts.items():
        ops.add_row(op, str(count))
    out.print(ops)
    if report.custom_nodes:
        custom = Table(title="custom nodes", title_justify="left")
        for column in ("name", "op", "kind", "lowering"):
            custom.add_column(column)
        for node in report.custom_nodes:
            kind = "?" if node.static is None else ("static" if node.static else "dynamic")
            plan = node.error or (" -> ".join(node.lowering) or "(at conversion)")
            custom.add_row(node.name, node.op_type, kind, plan)
        out.print(custom)
    if report.unsupported:
        out.print(f"unsupported layers: {'; '.join(report.unsupported)}")
    return EXIT_OK
