"""``check --per-layer`` for people: one summary line and a short table of the first layers
that leave tolerance. Piped output is printed at the table's natural width, so long layer
names never wrap into unreadable cells."""

from __future__ import annotations

from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

from b2s_onnx.cli._output import Reporter


def _shape(shape: list[int] | None) -> str:
    return "?" if shape is None else "[" + ",".join(str(d) for d in shape) + "]"


def _agree(value: bool | None) -> str:
    return {True: "agree", False: "differ", None: "-"}[value]


def _error(row: dict) -> str:
    if row.get("max_steps") is not None:
        return f"{row['max_steps']:.3g} steps"
    return f"{row['max_abs_error']:.3g}"


def per_layer_table(per_layer: dict) -> Table:
    table = Table()
    for column, justify in (
        ("id", "right"),
        ("layer", "left"),
        ("type", "left"),
        ("port", "right"),
        ("shape", "left"),
        ("max abs", "right"),
        ("max rel", "right"),
        ("outside", "right"),
        ("inputs", "left"),
    ):
        table.add_column(column, justify=justify, no_wrap=True)
    for row in per_layer["first"]:
        shape = _shape(row["expected_shape"])
        if row["actual_shape"] != row["expected_shape"]:
            shape += f" vs {_shape(row['actual_shape'])}"
        table.add_row(
            row["layer_id"],
            row["name"],
            row["type"],
            str(row["port"]),
            shape,
            _error(row),
            f"{row['max_rel_error']:.3g}",
            f"{100 * row['fraction_outside']:.1f}%",
            _agree(row["inputs_agree"]),
        )
    return table


def print_per_layer(report: Reporter, per_layer: dict) -> None:
    culprits = [r for r in per_layer["first"] if r["layer_id"] in per_layer["culprits"]]
    runs = f"{per_layer['runs']} run{'s' if per_layer['runs'] != 1 else ''}"
    line = (
        f"  per-layer: {per_layer['compared']} port(s) compared ({per_layer['strategy']}, "
        f"{runs}), {per_layer['diverged']} outside tolerance, "
        f"{len(per_layer['not_compared'])} without counterpart"
    )
    if per_layer.get("stopped_early"):
        line += ", stopped after the first divergence"
    report.out.print(line, markup=False)
    if per_layer.get("reference_drift"):
        report.out.print(
            f"  exposing layers changed OpenVINO's own outputs by up to "
            f"{per_layer['reference_drift']:.3g}",
            markup=False,
        )
    if culprits:
        first = culprits[0]
        report.out.print(
            f"  first culprit: layer {first['layer_id']} '{first['name']}' ({first['type']}) "
            f"port {first['port']}: its inputs agree, its output does not",
            markup=False,
        )
        quantizers = first.get("unmatched_quantizers") or []
        if quantizers:
            shown = ", ".join(f"'{name}'" for name in quantizers[:3])
            more = f" and {len(quantizers) - 3} more" if len(quantizers) > 3 else ""
            report.out.print(
                f"    it reads FakeQuantize {shown}{more} through tensors with no counterpart "
                "to compare: a value one quantization level apart there (OpenVINO's "
                "FakeQuantize and QuantizeLinear can round a near-tie apart, by CPU) shows "
                "first here",
                markup=False,
            )
    if not per_layer["first"]:
        grown = per_layer.get("largest_own_error")
        if grown and grown["max_rel_error"] > 0:
            report.out.print(
                f"  no layer leaves its own tolerance; the largest error of its own comes from "
                f"layer {grown['layer_id']} '{grown['name']}' ({grown['type']}): relative "
                f"{grown['max_rel_error']:.3g} from inputs at {grown['input_rel_error']:.3g}",
                markup=False,
            )
        return
    report.out.print("  first layers outside tolerance:", markup=False)
    table = per_layer_table(per_layer)
    if report.out.is_terminal:
        report.out.print(table)
        return
    wide = report.out.options.update_width(1 << 16)
    width = Measurement.get(report.out, wide, table).maximum
    Console(file=report.out.file, width=width, highlight=False).print(table)
