"""How commands talk to people: rich tables on stdout, errors on stderr, progress bars only
when stderr is a terminal, and nothing at all with ``-q``."""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator

import click
import onnx
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from b2s_onnx.graph.walk import all_nodes

quiet_option = click.option("-q", "--quiet", is_flag=True, help="Print nothing but errors.")
verbose_option = click.option("-v", "--verbose", is_flag=True, help="Print per-node details.")


class Reporter:
    def __init__(self, quiet: bool = False, verbose: bool = False) -> None:
        self.quiet = quiet
        self.verbose = verbose and not quiet
        self.out = Console(highlight=False, soft_wrap=True)
        self.err = Console(stderr=True, highlight=False)

    def print(self, *objects) -> None:
        if not self.quiet:
            self.out.print(*objects)

    def detail(self, *objects) -> None:
        if self.verbose:
            self.out.print(*objects)

    @contextlib.contextmanager
    def progress(self, description: str, total: int) -> Iterator:
        """Yields an ``advance()`` callable; draws a bar only on an interactive terminal."""
        if self.quiet or not self.err.is_terminal or total < 2:
            yield lambda *_: None
            return
        bar = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=self.err,
            transient=True,
        )
        with bar:
            task = bar.add_task(description, total=total)
            yield lambda step=1: bar.advance(task, step)


def print_rewrites(report: Reporter, rewrites) -> None:
    """One line per rewrite that fired (how often); with -v, each node and each decline."""
    for rewrite, count in rewrites.counts().items():
        report.print(f"  rewrote {count} x {rewrite}")
    for fired in rewrites.fired:
        report.detail(f"  {fired.rewrite} '{fired.node}': {fired.detail}")
    for declined in rewrites.declined:
        report.detail(f"  {declined.rewrite} declined '{declined.node}': {declined.reason}")


def op_counts(model: onnx.ModelProto) -> Counter:
    return Counter(
        f"{n.domain}::{n.op_type}" if n.domain not in ("", "ai.onnx") else n.op_type
        for n in all_nodes(model.graph)
    )


def before_after_table(
    title: str, before: Counter, after: Counter, before_bytes: int, after_bytes: int, seconds: float
) -> Table:
    table = Table(title=title, title_justify="left")
    table.add_column("op")
    table.add_column("before", justify="right")
    table.add_column("after", justify="right")
    for op in sorted(set(before) | set(after)):
        table.add_row(op, str(before.get(op, 0) or "-"), str(after.get(op, 0) or "-"))
    table.add_section()
    table.add_row("nodes", str(sum(before.values())), str(sum(after.values())))
    table.add_row("size", _size(before_bytes), _size(after_bytes))
    table.add_row("time", "", f"{seconds:.2f} s")
    return table


def _size(count: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if count < 1024 or unit == "GiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    return str(count)
