"""Entry point of ``b2s-onnx``.

Exit codes: 0 success, 1 parity mismatch, 2 bad input or usage, 3 internal error.
"""

from __future__ import annotations

import sys

import click

from b2s_onnx import __version__
from b2s_onnx.cli._common import EXIT_BAD_INPUT, fail
from b2s_onnx.cli.check_cmd import check_command
from b2s_onnx.cli.convert_cmd import convert_command
from b2s_onnx.cli.inspect_cmd import inspect_command
from b2s_onnx.cli.lower_cmd import lower_command


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="b2s-onnx")
def cli() -> None:
    """Lower OpenVINO data-movement ops to standard ONNX and check parity.

    Exit codes: 0 success, 1 parity mismatch, 2 bad input or usage, 3 internal error.
    """


cli.add_command(lower_command)
cli.add_command(check_command)
cli.add_command(convert_command)
cli.add_command(inspect_command)


def main() -> None:
    """Runs the command line; usage errors are one ``error:`` line too (exit 2)."""
    try:
        cli.main(standalone_mode=False)
    except click.UsageError as exc:
        command = exc.ctx.command_path if exc.ctx is not None else "b2s-onnx"
        fail(f"{exc.format_message().rstrip('.')} (see {command} --help)")
        sys.exit(EXIT_BAD_INPUT)
    except click.ClickException as exc:
        fail(exc.format_message())
        sys.exit(EXIT_BAD_INPUT)
    except click.Abort:
        fail("aborted")
        sys.exit(EXIT_BAD_INPUT)
