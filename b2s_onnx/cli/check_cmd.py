"""``b2s-onnx check``: does the lowering (or conversion) of each model compute what it means?

Several models (or folders of them) are checked in one run, in parallel with ``--jobs``;
each model's line is printed as soon as it finishes (in order of completion with ``--jobs``;
the JSON report keeps the input order); the exit code is the most severe outcome:
3 internal error > 2 bad input > 1 mismatch > 0.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import sys
from concurrent.futures import ProcessPoolExecutor, as_completed
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
    fail,
    fail_internal,
    handle_errors,
    parse_comparisons,
    parse_dim_sizes,
    parse_input_shapes,
    parse_named_values,
    parse_value_ranges,
    tolerance_options,
    warn,
)
from b2s_onnx.cli._output import Reporter, quiet_option, verbose_option
from b2s_onnx.cli._paths import writable_file
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
    for message in result.warnings:
        warn(message)
    for out in result.outputs:
        mark = "ok" if out.passed else "MISMATCH"
        detail = f" ({out.reason}, {out.mismatches} element(s))" if not out.passed else ""
        if out.comparison is not None:
            detail = f" ({out.reason})"
        click.echo(
            f"  {out.name} {out.dtype}{out.shape}: {mark}{detail} max_abs={out.max_abs_error:.3g} "
            f"max_rel={out.max_rel_error:.3g} atol={out.atol:g} rtol={out.rtol:g}"
        )
        if out.tolerance_reason:
            click.echo(f"    tolerance: {out.tolerance_reason}")


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
    """One model's outcome, flushed at once so that piped output streams too."""
    try:
        _print_outcome(report, record)
    finally:
        sys.stdout.flush()


def _print_outcome(report: Reporter, record: dict) -> None:
    for message in record.get("warnings", []):
        warn(f"{record['model']}: {message}")
    if record["exit_code"] >= EXIT_BAD_INPUT:
        error, model = record["error"], record["model"]
        message = error if error.startswith(f"{model}:") else f"{model}: {error}"
        if record.get("traceback"):
            click.echo(record["traceback"], err=True)
        (fail if record["exit_code"] == EXIT_BAD_INPUT else fail_internal)(message)
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
    if report.verbose and record.get("reference_detail"):
        report.out.print(f"  reference: {record['reference_detail']}", markup=False)
    for out in record["outputs"]:
        if out.get("comparison") and (not out["passed"] or report.verbose):
            report.out.print(f"  {out['name']}: {out['reason']}", markup=False)
            continue
        if not out["passed"] or report.verbose:
            report.out.print(
                f"  {out['name']} {out['dtype']}{out['shape']}: "
                f"{'ok' if out['passed'] else 'MISMATCH'}"
                f"{' ' + out['reason'] if out['reason'] else ''} "
                f"mismatches={out['mismatches']} max_abs={out['max_abs_error']:.3g} "
                f"max_rel={out['max_rel_error']:.3g} atol={out['atol']:g} "
                f"rtol={out['rtol']:g}",
                markup=False,
            )
            if out.get("tolerance_reason"):
                report.out.print(f"    tolerance: {out['tolerance_reason']}", markup=False)
    if record.get("per_layer"):
        print_per_layer(report, record["per_layer"])


@contextlib.contextmanager
def _stages(report: Reporter, path: Path):
    """A status line naming the current stage of a single check, on a terminal only."""
    if report.quiet or not report.err.is_terminal:
        yield None
        return
    with report.err.status(f"{path}: starting") as status:
        yield lambda stage: status.update(f"{path}: {stage}")


def _summary(records: list[dict]) -> dict:
    counts = dict.fromkeys(("pass", "mismatch", "bad-input", "internal-error"), 0)
    for record in records:
        counts[record["status"]] += 1
    return {"models": len(records), **counts}


@click.command(
    "check",
    epilog="Example:\n\n\b\n  b2s-onnx check models/batch_to_space.onnx --json report.json\n"
    "  b2s-onnx check models/ --jobs 4 --json report.json\n"
    "  b2s-onnx check model.xml --val-range '*:[0,255]' --compare detections\n\n"
    "Lines are printed as each model finishes (in order of completion with --jobs).",
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
    "--val-range",
    "val_ranges",
    multiple=True,
    metavar="NAME:[LO,HI]",
    help="Range of an input's random values (*:[LO,HI] for all inputs): uniform floats, or "
    "integers LO..HI for integer inputs. Default: standard normal (integers -1000..1000). "
    "Image models: *:[0,255].",
)
@click.option(
    "--compare",
    "comparisons",
    multiple=True,
    metavar="[NAME:]detections|topk:K",
    help="Judge an output at the task level: detections ([1,1,N,7] DetectionOutput rows, "
    "matched by image, label and IoU >= 0.5; scores within tolerance) or topk:K (same "
    "top-K classes). Default: element by element.",
)
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
    type=click.Choice(["auto", "onnxruntime", "openvino", "onnx"]),
    default="auto",
    show_default=True,
    help="What computes the expected outputs. ONNX models: onnxruntime (auto; the original's "
    "standard ops in onnxruntime, custom nodes in numpy) or onnx (onnx's reference "
    "evaluator). IR (.xml): openvino (auto when installed; its CPU plugin) or onnx.",
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
    val_ranges: tuple[str, ...],
    comparisons: tuple[str, ...],
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
    if json_path is not None:
        writable_file(json_path, "--json")
    paths = _expand(models)
    if len(paths) > 1 and (lowered or bin_path or inputs_file):
        raise click.UsageError("--lowered, --bin and --inputs apply to a single MODEL")
    for given, what in ((lowered, "--lowered"), (inputs_file, "--inputs"), (bin_path, "--bin")):
        if given is not None and not given.is_file():
            state = "is a folder" if given.is_dir() else "no such file"
            raise B2SError(f"{what} {given}: {state}")
    if bin_path is not None and all(p.suffix.lower() != ".xml" for p in paths):
        warn("--bin does nothing for ONNX models (it names an IR's weights)")
    options = {
        "lowered": str(lowered) if lowered else None,
        "inputs": str(inputs_file) if inputs_file else None,
        "seed": seed,
        "val_range": parse_value_ranges(val_ranges),
        "compare": parse_comparisons(comparisons),
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
    records: list[dict] = [{} for _ in paths]
    if len(paths) == 1:
        with _stages(report, paths[0]) as stage:
            records[0] = check_one(str(paths[0]), options, stage)
        _print_record(report, records[0])
    else:
        with report.progress("checking", len(paths)) as advance:
            if jobs == 1:
                for index, path in enumerate(paths):
                    records[index] = check_one(str(path), options)
                    _print_record(report, records[index])
                    advance()
            else:
                context = multiprocessing.get_context("spawn")
                with ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
                    futures = {
                        pool.submit(check_one, str(path), options): index
                        for index, path in enumerate(paths)
                    }
                    for future in as_completed(futures):
                        records[futures[future]] = future.result()
                        _print_record(report, records[futures[future]])
                        advance()
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
