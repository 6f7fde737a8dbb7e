"""``b2s-onnx check``: does the lowering (or conversion) of each model compute what it means?

Several models (or folders of them) are checked in one run, in parallel with ``--jobs``;
the exit code is the most severe outcome: 3 internal error > 2 bad input > 1 mismatch > 0.
"""

from __future__ import annotations

import json
import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import click
from rich.table import Table

from b2s_onnx import __version__
from b2s_onnx.cli._check_worker import check_one
from b2s_onnx.cli._common import (
    EXIT_BAD_INPUT,
    EXIT_INTERNAL,
    EXIT_MISMATCH,
    EXIT_OK,
    debug_option,
    handle_errors,
    parse_dim_sizes,
    parse_input_shapes,
    parse_named_values,
    tolerance_options,
)
from b2s_onnx.cli._output import Reporter, quiet_option, verbose_option
from b2s_onnx.cli._per_layer_table import print_per_layer
from b2s_onnx.errors import B2SError
from b2s_onnx.lowering import DEFAULT_DOMAINS
from b2s_onnx.parity import CheckResult

SEVERITY = [EXIT_OK, EXIT_MISMATCH, EXIT_BAD_INPUT, EXIT_INTERNAL]


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


def _expand(models: tuple[Path, ...]) -> list[Path]:
    """Files as given; folders become the .onnx and .xml files below them, sorted."""
    expanded: list[Path] = []
    for path in models:
        if path.is_dir():
            found = sorted(p for p in path.rglob("*") if p.suffix.lower() in (".onnx", ".xml"))
            if not found:
                raise B2SError(f"{path}: no .onnx or .xml models in this folder")
            expanded.extend(found)
        else:
            expanded.append(path)
    return expanded


def _print_record(report: Reporter, record: dict) -> None:
    if record["exit_code"] >= EXIT_BAD_INPUT:
        label = "ERROR" if record["exit_code"] == EXIT_BAD_INPUT else "INTERNAL ERROR"
        report.err.print(f"{label} {record['model']}: {record['error']}", markup=False)
        if record.get("traceback"):
            report.err.print(record["traceback"], markup=False)
        return
    passed = record["exit_code"] == EXIT_OK
    if passed and report.quiet:
        return
    worst = max((o["max_abs_error"] for o in record["outputs"]), default=0.0)
    verdict = "PASS" if passed else "FAIL"
    report.out.print(
        f"{verdict} {record['model']} against {record['reference']} "
        f"(max abs error {worst:.3g}, {record['seconds']:.2f} s)",
        markup=False,
    )
    for out in record["outputs"]:
        if not out["passed"] or report.verbose:
            report.out.print(
                f"  {out['name']} {out['dtype']}{out['shape']}: "
                f"{'ok' if out['passed'] else 'MISMATCH'} {out['reason']} "
                f"mismatches={out['mismatches']} max_abs={out['max_abs_error']:.3g} "
                f"max_rel={out['max_rel_error']:.3g} atol={out['atol']:g} "
                f"rtol={out['rtol']:g}",
                markup=False,
            )
    if record.get("per_layer"):
        print_per_layer(report, record["per_layer"])


def _summary(records: list[dict]) -> dict:
    counts = dict.fromkeys(("pass", "mismatch", "bad-input", "internal-error"), 0)
    for record in records:
        counts[record["status"]] += 1
    return {"models": len(records), **counts}


@click.command(
    "check",
    epilog="Example:\n\n\b\n  b2s-onnx check models/batch_to_space.onnx --json report.json\n"
    "  b2s-onnx check models/ --jobs 4 --json report.json\n"
    "  b2s-onnx check model.xml --reference openvino",
)
@click.argument("models", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "--lowered",
    type=click.Path(path_type=Path),
    default=None,
    help="The lowered (or converted) model to check (default: make it now). One MODEL only.",
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
    help="For an IR (.xml): OpenVINO's CPU plugin or onnx's reference evaluator; "
    "auto uses OpenVINO when installed.",
)
@click.option(
    "--bin",
    "bin_path",
    type=click.Path(path_type=Path),
    default=None,
    help="For an IR: the weights file (default: MODEL with .bin). One MODEL only.",
)
@click.option(
    "--per-layer",
    is_flag=True,
    help="Also compare every layer's output (IR: against OpenVINO; ONNX: each lowered "
    "subgraph against its op) and name the first layers that leave tolerance.",
)
@click.option(
    "-j",
    "--jobs",
    type=click.IntRange(1),
    default=1,
    show_default=True,
    help="Check this many models in parallel.",
)
@click.option(
    "--json",
    "json_path",
    type=click.Path(path_type=Path),
    default=None,
    help="Write a machine-readable report here (schema in the README).",
)
@quiet_option
@verbose_option
@debug_option
@handle_errors
def check_command(
    models: tuple[Path, ...],
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
    per_layer: bool,
    jobs: int,
    json_path: Path | None,
    quiet: bool,
    verbose: bool,
    debug: bool = False,
) -> int:
    """Check MODELS (.onnx, IR .xml, or folders of them): exit 1 if any output differs."""
    report = Reporter(quiet, verbose)
    paths = _expand(models)
    if len(paths) > 1 and (lowered or bin_path or inputs_file):
        raise click.UsageError("--lowered, --bin and --inputs apply to a single MODEL")
    options = {
        "lowered": str(lowered) if lowered else None,
        "inputs": str(inputs_file) if inputs_file else None,
        "seed": seed,
        "dim_sizes": parse_dim_sizes(dims),
        "input_shapes": parse_input_shapes(input_shapes),
        "atol": parse_named_values(atol, "--atol"),
        "rtol": parse_named_values(rtol, "--rtol"),
        "domains": (*DEFAULT_DOMAINS, *domains),
        "reference": reference,
        "bin": str(bin_path) if bin_path else None,
        "debug": debug,
        "per_layer": per_layer,
    }
    records: list[dict] = []
    with report.progress("checking", len(paths)) as advance:
        if jobs == 1 or len(paths) == 1:
            for path in paths:
                records.append(check_one(str(path), options))
                advance()
        else:
            context = multiprocessing.get_context("spawn")
            with ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
                futures = [pool.submit(check_one, str(path), options) for path in paths]
                for future in futures:
                    records.append(future.result())
                    advance()
    for record in records:
        _print_record(report, record)
    exit_code = max((r["exit_code"] for r in records), key=SEVERITY.index)
    summary = _summary(records)
    if len(records) > 1:
        table = Table(title="summary", title_justify="left")
        for column in ("models", "pass", "mismatch", "bad input", "internal error"):
            table.add_column(column, justify="right")
        table.add_row(*(str(v) for v in summary.values()))
        report.print(table)
    if json_path is not None:
        body = {
            "tool": "b2s-onnx",
            "version": __version__,
            "passed": exit_code == EXIT_OK,
            "exit_code": exit_code,
            "summary": summary,
            "models": records,
        }
        json_path.write_text(json.dumps(body, indent=2, default=str) + "\n")
    return exit_code
