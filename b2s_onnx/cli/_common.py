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
    "fast forms): lower and convert node by node.",
)


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
            click.echo(f"error: {exc}", err=True)
            sys.exit(EXIT_BAD_INPUT)
        except (click.exceptions.Exit, click.ClickException, KeyboardInterrupt):
            raise
        except Exception as exc:
            if debug:
                traceback.print_exc()
            click.echo(
                f"internal error: {type(exc).__name__}: {exc} (rerun with --debug and report it)",
                err=True,
            )
            sys.exit(EXIT_INTERNAL)
        sys.exit(code)

    return wrapper


def tolerance_options(command: Callable) -> Callable:
    """--atol/--rtol, shared by every command that compares outputs."""
    command = click.option(
        "--rtol",
        multiple=True,
        metavar="[NAME:]VALUE",
        help="Relative tolerance, for all outputs or one (default 0).",
    )(command)
    return click.option(
        "--atol",
        multiple=True,
        metavar="[NAME:]VALUE",
        help="Absolute tolerance, for all outputs or one (default 0: bit-exact).",
    )(command)


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
