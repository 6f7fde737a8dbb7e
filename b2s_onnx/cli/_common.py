"""What every command shares: exit codes, error reporting, option parsing."""

from __future__ import annotations

import json
import sys
import traceback
from collections.abc import Callable
from functools import wraps
from pathlib import Path

import click

from b2s_onnx.errors import B2SError

EXIT_OK = 0
EXIT_MISMATCH = 1
EXIT_BAD_INPUT = 2
EXIT_INTERNAL = 3

debug_option = click.option("--debug", is_flag=True, help="Show the Python traceback of an error.")
no_fuse_option = click.option(
    "--no-fuse",
    is_flag=True,
    help="Skip the graph rewrites (atrous-convolution fusion, Transpose cleanup, onnxruntime's "
    "fast forms, a recurrent cell's TensorIterator as one sequence op): lower and convert "
    "node by node.",
)


def one_line(text: str) -> str:
    """Messages go to logs and CI annotations: one line, whatever the exception held."""
    return " ".join(part.strip() for part in str(text).splitlines() if part.strip())


def fail(message: str) -> None:
    """The one line of an exit-2 error."""
    click.echo(f"error: {one_line(message)}", err=True)


def fail_internal(message: str) -> None:
    """The one line of an exit-3 error: a bug of ours."""
    click.echo(f"internal error: {one_line(message)} (rerun with --debug and report it)", err=True)


def warn(message: str) -> None:
    """One line for an option that does nothing here: accepted, but said so."""
    click.echo(f"warning: {one_line(message)}", err=True)


def handle_errors(command: Callable[..., int]) -> Callable[..., None]:
    """Maps outcomes to exit codes: B2SError -> 2, anything unexpected -> 3."""

    accepts_debug = (
        "debug"
        in command.__code__.co_varnames[
            : command.__code__.co_argcount + command.__code__.co_kwonlyargcount
        ]
    )

    @wraps(command)
    def wrapper(*args, debug: bool = False, **kwargs) -> None:
        try:
            code = (
                command(*args, debug=debug, **kwargs) if accepts_debug else command(*args, **kwargs)
            )
        except B2SError as exc:
            if debug:
                traceback.print_exc()
            fail(str(exc))
            sys.exit(EXIT_BAD_INPUT)
        except (click.exceptions.Exit, click.ClickException, KeyboardInterrupt):
            raise
        except Exception as exc:
            if debug:
                traceback.print_exc()
            fail_internal(f"{type(exc).__name__}: {exc}")
            sys.exit(EXIT_INTERNAL)
        sys.exit(code)

    return wrapper


#: The tolerance policy, stated once for every command's --help.
TOLERANCE_DEFAULTS = (
    "Default: bit-exact for ONNX lowering checks; for IR (.xml) checks 1e-4 "
    "(1e-1 for IRs with FakeQuantize, widened where an output misses it by how far "
    "OpenVINO's own float simulation is from its INT8 run), and --rtol 1e-3. An element "
    "passes when "
    "|actual - expected| <= atol + rtol * |expected|. Outputs that a rewrite changing "
    "float rounding reaches (an atrous fusion) get atol 1e-5, rtol 1e-4 unless given, "
    "with the reason in the report; --atol 0 insists on bit-exact."
)


def tolerance_options(command: Callable) -> Callable:
    """--atol/--rtol, shared by every command that compares outputs."""
    command = click.option(
        "--rtol",
        multiple=True,
        metavar="[NAME:]VALUE",
        help="Relative tolerance, for all outputs or one. See --atol for defaults.",
    )(command)
    return click.option(
        "--atol",
        multiple=True,
        metavar="[NAME:]VALUE",
        help=f"Absolute tolerance, for all outputs or one. {TOLERANCE_DEFAULTS}",
    )(command)


def parse_value_ranges(items: tuple[str, ...]) -> dict[str, tuple[float, float]]:
    """``name:[0,255]`` or ``*:[0,255]`` -> {"name": (0.0, 255.0)}, as given to --val-range."""
    ranges: dict[str, tuple[float, float]] = {}
    for item in items:
        name, sep, bounds = item.rpartition(":")
        try:
            low, high = json.loads(bounds)
            if not sep or not name or not float(low) <= float(high):
                raise ValueError
        except (ValueError, TypeError):
            raise click.BadParameter(
                f"'{item}' is not NAME:[LOW,HIGH] (or *:[LOW,HIGH]) with LOW <= HIGH",
                param_hint="--val-range",
            ) from None
        ranges[name] = (float(low), float(high))
    return ranges


def parse_comparisons(items: tuple[str, ...]) -> str | dict[str, str] | None:
    """``detections``, ``topk:5`` or ``NAME:detections`` / ``NAME:topk:5``, for --compare."""
    from b2s_onnx.parity.task_compare import parse_task

    tasks: dict[str, str] = {}
    for item in items:
        head, _, tail = item.partition(":")
        name, task = ("*", item) if head in ("detections", "topk") else (head, tail)
        try:
            parse_task(task)
        except B2SError as exc:
            raise click.BadParameter(str(exc), param_hint="--compare") from None
        tasks[name] = task
    return tasks or None


def parse_named_values(items: tuple[str, ...], what: str) -> float | dict[str, float]:
    """``0.01`` (all outputs) or ``name:0.01`` (one output), as given to --atol/--rtol."""
    values: dict[str, float] = {}
    for item in items:
        name, sep, number = item.rpartition(":")
        try:
            value = float(number)
        except ValueError:
            raise click.BadParameter(
                f"'{item}' is not NAME:NUMBER or NUMBER", param_hint=what
            ) from None
        values[name if sep else "*"] = value
    return values


def parse_input_shapes(items: tuple[str, ...]) -> dict[str, list[int]]:
    """``name:[1,3,224,224]`` -> {"name": [1, 3, 224, 224]}."""
    shapes: dict[str, list[int]] = {}
    for item in items:
        name, sep, shape = item.rpartition(":")
        try:
            dims = json.loads(shape)
            if (
                not sep
                or not isinstance(dims, list)
                or not all(isinstance(d, int) and d >= 0 for d in dims)
            ):
                raise ValueError
        except ValueError:
            raise click.BadParameter(
                f"'{item}' is not NAME:[d0,d1,...]", param_hint="--input-shapes"
            ) from None
        shapes[name] = dims
    return shapes


def parse_dim_sizes(items: tuple[str, ...]) -> dict[str, int]:
    sizes: dict[str, int] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not value.isdigit():
            raise click.BadParameter(f"'{item}' is not NAME=SIZE", param_hint="--dim")
        sizes[name] = int(value)
    return sizes


def refuse_overwriting_input(source: Path, target: Path, inplace: bool) -> None:
    if source.exists() and target.exists() and source.resolve() == target.resolve() and not inplace:
        raise B2SError(f"{target}: refusing to overwrite the input model (pass --inplace)")
