"""Entry point of ``b2s-onnx``.

Exit codes: 0 success, 1 parity mismatch, 2 bad input or usage, 3 internal error.
"""

from __future__ import annotations

import click

from b2s_onnx import __version__
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
    cli()
