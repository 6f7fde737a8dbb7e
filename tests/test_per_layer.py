"""``check --per-layer``: a converter broken on purpose for one layer must be named, exactly
that layer, every time; a correct conversion must name none.

Converters are broken by wrapping their registry entry for a single layer id (a sign flip,
an H/W swap, a wrong broadcast, a changed rounding mode), over real models of the shared
corpus and over IRs built here with OpenVINO's Python API.
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper

import b2s_onnx
from b2s_onnx.builders import DEFAULT_DOMAIN, single_op_model
from b2s_onnx.cli.main import cli as cli_main
from b2s_onnx.ir.convert import convert_ir_model
from b2s_onnx.ir.converters.registry import CONVERTERS
from b2s_onnx.ir.port_map import CONSTANT, FUSED, REMOVED, TENSOR, PortMap, PortRecord
from b2s_onnx.ir.reader import Layer, read_ir_xml, topological_order
from b2s_onnx.parity.ir_check import check_ir
from b2s_onnx.parity.per_layer import compare_layers
from b2s_onnx.parity.runtime import run_onnxruntime

ov = pytest.importorskip("openvino")
import openvino.opset13 as ops  # noqa: E402

pytestmark = pytest.mark.openvino

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "ir-corpus"
needs_corpus = pytest.mark.skipif(
    not (CORPUS / "MANIFEST.json").is_file(), reason="shared/ir-corpus not present"
)
SMALL_MODELS = (
    "lenet5-tf-user",
    "open-closed-eye-0001",
    "squeezenet1.1",
    "gaze-estimation-adas-0002",
)


# -- breaking one layer's converter ------------------------------------------------------


def _redirect(ctx, layer: Layer, convert, inputs) -> tuple[str, str]:
    """Runs ``convert`` writing output 0 to a temporary tensor; returns (temporary, real)."""
    key = (layer.id, layer.outputs[0].id)
    real = ctx.tensors[key]
    temporary = ctx.tmp("unbroken")
    ctx.types[temporary] = ctx.type_of(real)
    ctx.shapes[temporary] = ctx.shape(real)
    ctx.tensors[key] = temporary
    try:
        convert(ctx, layer, inputs)
    finally:
        ctx.tensors[key] = real
    return temporary, real


def flip_sign(ctx, layer, inputs, convert):
    temporary, real = _redirect(ctx, layer, convert, inputs)
    ctx.one("Neg", [temporary], real)


def drop_negatives(ctx, layer, inputs, convert):
    """A Relu after the layer: channel by channel, so a padded region stays padded."""
    temporary, real = _redirect(ctx, layer, convert, inputs)
    ctx.one("Relu", [temporary], real)


def tanh_instead(ctx, layer, inputs, convert):
    """Tanh where the layer computes another activation (a Sigmoid)."""
    ctx.one("Tanh", [inputs[0]], ctx.tensors[(layer.id, layer.outputs[0].id)])


def swap_height_width(ctx, layer, inputs, convert):
    temporary, real = _redirect(ctx, layer, convert, inputs)
    ctx.one("Transpose", [temporary], real, perm=[0, 1, 3, 2])


def broadcast_first_channel(ctx, layer, inputs, convert):
    """The per-channel operand broadcast from its first channel only."""
    first = ctx.one(
        "Slice",
        [
            inputs[1],
            ctx.const("start", [0], np.int64),
            ctx.const("end", [1], np.int64),
            ctx.const("axis", [1], np.int64),
        ],
    )
    convert(ctx, layer, [inputs[0], first])


def round_down(ctx, layer, inputs, convert):
    """Round replaced by Floor in what the converter emits."""
    start = len(ctx.nodes)
    convert(ctx, layer, inputs)
    for i in range(start, len(ctx.nodes)):
        node = ctx.nodes[i]
        if node.op_type == "Round":
            ctx.nodes[i] = helper.make_node("Floor", node.input, node.output, name=node.name)


def round_half_to_even(ctx, layer, inputs, convert):
    """Round-5 rounding ties to even where the IR asks for ties away from zero."""
    changed = copy.copy(layer)
    changed.attrs = {**layer.attrs, "mode": "half_to_even"}
    convert(ctx, changed, inputs)


def break_layer(monkeypatch, layer: Layer, breaker) -> None:
    key = (layer.type, layer.version)
    original = CONVERTERS[key]

    def converter(ctx, current, inputs):
        if current.id == layer.id:
            breaker(ctx, current, inputs, original)
        else:
            original(ctx, current, inputs)

    monkeypatch.setitem(CONVERTERS, key, converter)


def _pick(xml: Path, layer_type: str, where: float, square: bool = False) -> Layer:
    """The layer of ``layer_type`` at fraction ``where`` of the model (in topological
    order) among those with a computed 4-D output (square in H/W if asked)."""
    candidates = []
    for layer in topological_order(read_ir_xml(xml)):
        dims = layer.outputs[0].dims if layer.outputs else None
        if layer.type != layer_type or dims is None or len(dims) != 4:
            continue
        if square and (dims[2] != dims[3] or dims[2] < 2):
            continue
        candidates.append(layer)
    assert candidates, f"no {layer_type} in {xml}"
    return candidates[min(int(where * len(candidates)), len(candidates) - 1)]


def _per_layer(xml: Path, seed: int = 0, fuse: bool = True, **kwargs) -> dict:
    conversion = convert_ir_model(xml, fuse=fuse)
    result = check_ir(
        xml, conversion.model, per_layer=True, ports=conversion.ports, seed=seed, **kwargs
    )
    return result.per_layer


def _assert_names_exactly(per_layer: dict, layer: Layer) -> None:
    assert per_layer["culprits"], "no layer left tolerance"
    first = per_layer["first"][0]
    assert (first["layer_id"], first["name"]) == (layer.id, layer.name)
    assert first["inputs_agree"] is True
    assert per_layer["culprits"] == [layer.id]


# -- real models ------------------------------------------------------------------------

CORPUS_BREAKS = [
    ("lenet5-tf-user", "Convolution", 0.6, False, flip_sign),
    ("open-closed-eye-0001", "Convolution", 0.5, True, swap_height_width),
    ("squeezenet1.1", "Add", 0.5, False, broadcast_first_channel),
    ("gaze-estimation-adas-0002", "Convolution", 0.5, True, swap_height_width),
    ("gaze-estimation-adas-0002", "ReLU", 0.3, False, flip_sign),
]


@needs_corpus
@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize(
    ("model", "layer_type", "where", "square", "breaker"),
    CORPUS_BREAKS,
    ids=[f"{m}-{b.__name__}" for m, _, _, _, b in CORPUS_BREAKS],
)
def test_a_broken_converter_is_named_on_a_real_model(
    monkeypatch, model, layer_type, where, square, breaker, seed
):
    xml = CORPUS / model / "model.xml"
    layer = _pick(xml, layer_type, where, square)
    break_layer(monkeypatch, layer, breaker)
    # Unfused: a rewrite may move the breaker's own op (Transpose sinking moves the swap past
    # the bias Add), and the layer would then rightly be reported as fused away.
    _assert_names_exactly(_per_layer(xml, seed=seed, fuse=False), layer)


@needs_corpus
@pytest.mark.parametrize("model", SMALL_MODELS)
def test_a_correct_conversion_names_no_layer(model):
    per_layer = _per_layer(CORPUS / model / "model.xml")
    assert per_layer["compared"] > 0
    assert per_layer["diverged"] == 0
    assert per_layer["culprits"] == []
    assert per_layer["strategy"] == "single-run"


@needs_corpus
@pytest.mark.parametrize("strategy", ["chunked", "bisect"])
@pytest.mark.parametrize("where", [0.15, 0.6])
def test_over_budget_strategies_still_name_the_culprit(monkeypatch, strategy, where):
    xml = CORPUS / "squeezenet1.1" / "model.xml"
    layer = _pick(xml, "Convolution", where)
    break_layer(monkeypatch, layer, flip_sign)
    conversion = convert_ir_model(xml)
    feeds = {"data": np.random.default_rng(0).uniform(0, 255, (1, 3, 227, 227)).astype("f4")}
    result = compare_layers(
        xml, conversion.model, conversion.ports, feeds, budget=8 << 20, strategy=strategy
    )
    assert result.strategy == strategy
    assert result.estimated_bytes > result.budget_bytes
    assert result.runs > 1
    assert result.culprits == [layer.id]
    assert result.first[0].layer_id == layer.id
    if strategy == "chunked":
        assert result.stopped_early
    else:  # only samples and the stretch before the first diverging one are compared
        assert result.compared < len([r for r in conversion.ports if r.status == TENSOR])


# -- generated models -------------------------------------------------------------------


def _save(tmp_path: Path, outputs, params) -> Path:
    xml = tmp_path / "model.xml"
    ov.save_model(ov.Model(outputs, params), xml, compress_to_fp16=False)
    return xml


def _weights(shape, seed):
    return ops.constant(np.random.default_rng(seed).standard_normal(shape).astype(np.float32))


def _quantized_net(tmp_path: Path) -> Path:
    x = ops.parameter([1, 3, 8, 8], np.float32, name="x")
    conv = ops.convolution(x, _weights([8, 3, 3, 3], 1), [1, 1], [1, 1], [1, 1], [1, 1])
    low, high = ops.constant(np.float32(-4.0)), ops.constant(np.float32(4.0))
    quantized = ops.fake_quantize(conv, low, high, low, high, 256)
    conv2 = ops.convolution(quantized, _weights([4, 8, 1, 1], 2), [1, 1], [0, 0], [0, 0], [1, 1])
    return _save(tmp_path, [ops.relu(conv2)], [x])


def _rounding_net(tmp_path: Path) -> Path:
    """Halves of integers: every other element is a tie for Round."""
    x = ops.parameter([2, 3, 4, 5], np.float32, name="x")
    halves = ops.multiply(
        ops.floor(ops.multiply(x, ops.constant(np.float32(4.0)))), ops.constant(np.float32(0.5))
    )
    rounded = ops.round(halves, "half_away_from_zero")
    return _save(tmp_path, [ops.add(rounded, ops.constant(np.float32(0.25)))], [x])


def _broadcast_net(tmp_path: Path, channels: int) -> Path:
    x = ops.parameter([2, channels, 5, 5], np.float32, name="x")
    scale = _weights([1, channels, 1, 1], 3)
    y = ops.multiply(ops.tanh(x), scale)
    return _save(tmp_path, [ops.sigmoid(ops.add(y, _weights([1, channels, 1, 1], 4)))], [x])


GENERATED = [
    ("quantized", _quantized_net, "FakeQuantize", round_down),
    ("rounding-mode", _rounding_net, "Round", round_half_to_even),
    ("broadcast", lambda p: _broadcast_net(p, 6), "Multiply", broadcast_first_channel),
    ("sign", lambda p: _broadcast_net(p, 3), "Tanh", flip_sign),
]


def _only(xml: Path, layer_type: str) -> Layer:
    (layer,) = [x for x in read_ir_xml(xml).layers.values() if x.type == layer_type]
    return layer


@pytest.mark.parametrize(
    ("build", "layer_type", "breaker"), [g[1:] for g in GENERATED], ids=[g[0] for g in GENERATED]
)
@pytest.mark.parametrize("seed", [0, 1])
def test_a_broken_converter_is_named_on_a_generated_model(
    tmp_path, monkeypatch, build, layer_type, breaker, seed
):
    xml = build(tmp_path)
    correct = _per_layer(xml, seed=seed)
    assert correct["diverged"] == 0
    layer = _only(xml, layer_type)
    break_layer(monkeypatch, layer, breaker)
    _assert_names_exactly(_per_layer(xml, seed=seed), layer)


def _grouped_region_net(tmp_path: Path) -> Path:
    """A RegNet block of 7 groups of 8 channels: `pad-channels-to-block` widens its 56
    channels to 64 (whole extra groups) and `grouped-conv-in-blocks` merges them."""
    x = ops.parameter([1, 24, 10, 10], np.float32, name="x")
    widen = ops.convolution(x, _weights([56, 24, 1, 1], 5), [1, 1], [0, 0], [0, 0], [1, 1])
    grouped = ops.group_convolution(
        ops.relu(widen), _weights([7, 8, 8, 3, 3], 6), [1, 1], [1, 1], [1, 1], [1, 1]
    )
    gate = ops.sigmoid(grouped)
    out = ops.convolution(gate, _weights([24, 56, 1, 1], 7), [1, 1], [0, 0], [0, 0], [1, 1])
    return _save(tmp_path, [out], [x])


@pytest.mark.parametrize(
    ("layer_type", "breaker"),
    [("GroupConvolution", drop_negatives), ("Sigmoid", tanh_instead)],
)
def test_layers_of_a_region_padded_to_whole_blocks_are_compared_on_their_channels(
    tmp_path, monkeypatch, layer_type, breaker
):
    """The padded tensors carry each layer's value in their leading channels: compared
    there, not skipped as having no counterpart, so a break inside is named."""
    xml = _grouped_region_net(tmp_path)

    def widened_types() -> set[str]:
        conversion = convert_ir_model(xml)
        assert conversion.rewrites.counts().get("pad-channels-to-block") == 1
        widened = [r for r in conversion.ports if r.channels is not None]
        assert all(r.channels == 56 for r in widened)
        return {r.type for r in widened}

    assert widened_types() >= {"ReLU", "GroupConvolution", "Sigmoid"}
    correct = _per_layer(xml)
    assert correct["diverged"] == 0
    compared = {row["type"] for row in correct["layers"]}
    assert {"GroupConvolution-1", "Sigmoid-1"} <= compared
    layer = _only(xml, layer_type)
    break_layer(monkeypatch, layer, breaker)
    assert layer_type in widened_types()  # the broken layer is still in the padded region
    _assert_names_exactly(_per_layer(xml), layer)


def test_a_real_disagreement_is_traced_to_the_layer_where_it_starts(tmp_path):
    """OpenVINO's CPU plugin truncates integer division where the spec (and the converter)
    floors: the final output differs after more layers, and the Divide is named."""
    x = ops.parameter([1, 4, 6, 6], np.float32, name="x")
    scaled = ops.convert(ops.multiply(x, ops.constant(np.float32(10.0))), "i32")
    quotient = ops.divide(scaled, ops.constant(np.int32(4)))
    scores = ops.softmax(ops.convert(quotient, "f32"), 1)
    xml = _save(tmp_path, [scores], [x])
    conversion = convert_ir_model(xml)
    result = check_ir(xml, conversion.model, per_layer=True, ports=conversion.ports)
    assert not result.passed
    (divide,) = [x for x in read_ir_xml(xml).layers.values() if x.type == "Divide"]
    assert result.per_layer["culprits"] == [divide.id]
    assert result.per_layer["first"][0]["inputs_agree"] is True


def test_int8_layers_are_judged_in_quantization_steps(tmp_path):
    per_layer = _per_layer(_quantized_net(tmp_path))
    (row,) = [r for r in per_layer["layers"] if r["type"] == "FakeQuantize-1"]
    assert row["max_steps"] is not None
    assert row["max_steps"] <= 1.0
    assert row["status"] == "ok"


# -- the port map ----------------------------------------------------------------------


@needs_corpus
def test_every_ir_output_port_is_recorded_and_computed_ones_exist_in_the_model():
    xml = CORPUS / "open-closed-eye-0001" / "model.xml"
    conversion = convert_ir_model(xml)
    ir = read_ir_xml(xml)
    expected = {
        (lid, port.id) for lid, x in ir.layers.items() if x.type != "Result" for port in x.outputs
    }
    assert {r.key for r in conversion.ports} == expected
    produced = {o for n in conversion.model.graph.node for o in n.output}
    for record in conversion.ports:
        if record.status == TENSOR:
            assert record.tensor in produced
    outputs = run_onnxruntime(conversion.model, {"input.1": np.ones((1, 3, 32, 32), "f4")})
    assert outputs


def test_rewrites_keep_the_port_map_true():
    records = [
        PortRecord("1", "conv", "Convolution", "opset1", 2, "conv", TENSOR),
        PortRecord("2", "bias", "Add", "opset1", 2, "bias", TENSOR),
        PortRecord("3", "shape", "ShapeOf", "opset3", 1, "shape", CONSTANT),
    ]
    ports = PortMap(records)
    ports.rename("bias", "bias_fused")
    ports.fuse("conv", into="conv_with_bias")
    assert ports[("2", 2)].tensor == "bias_fused"
    assert (ports[("1", 2)].status, ports[("1", 2)].into) == (FUSED, "conv_with_bias")
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["other"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("other", TensorProto.FLOAT, [1])],
    )
    ports.sync(helper.make_model(graph))
    assert ports[("2", 2)].status == REMOVED
    widened = PortMap([PortRecord("4", "relu", "ReLU", "opset1", 1, "relu", TENSOR)])
    widened.widen("relu", "relu/16ch", 12)
    assert (widened[("4", 1)].tensor, widened[("4", 1)].channels) == ("relu/16ch", 12)
    assert ports[("3", 1)].status == CONSTANT  # a folded value stays the layer's value


# -- ONNX models with lowered custom nodes -----------------------------------------------


def _custom(op_type: str, data: str, name: str, mode: str) -> onnx.NodeProto:
    output = "y" if name == "d2s" else name
    return helper.make_node(
        op_type, [data], [output], domain=DEFAULT_DOMAIN, name=name, block_size=2, mode=mode
    )


def _custom_model() -> onnx.ModelProto:
    nodes = [
        _custom("SpaceToDepth", "x", "s2d", "blocks_first"),
        helper.make_node("Relu", ["s2d"], ["r"]),
        _custom("DepthToSpace", "r", "d2s", "depth_first"),
    ]
    graph = helper.make_graph(
        nodes,
        "custom",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 4, 6])],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(DEFAULT_DOMAIN, 1)]
    )
    model.ir_version = 8
    return model


def _negate_output_of(model: onnx.ModelProto, prefix: str) -> onnx.ModelProto:
    """The lowered subgraph of node ``prefix`` with its result negated."""
    broken = copy.deepcopy(model)
    index = max(i for i, n in enumerate(broken.graph.node) if n.name.startswith(prefix))
    last = broken.graph.node[index]
    output = last.output[0]
    last.output[0] = f"{output}_unbroken"
    broken.graph.node.insert(index + 1, helper.make_node("Neg", [last.output[0]], [output]))
    return broken


INDEXED = {
    "BatchToSpace": {"block_shape": [1, 2, 2, 1], "crops_begin": [0, 1, 0, 0],
                     "crops_end": [0, 0, 1, 0]},
    "SpaceToBatch": {"block_shape": [1, 2, 2, 1], "pads_begin": [0, 1, 0, 0],
                     "pads_end": [0, 1, 2, 0]},
}  # fmt: skip


@pytest.mark.parametrize("op_type", sorted(INDEXED))
def test_subgraphs_whose_constant_indices_the_lowering_consumed_are_compared(op_type):
    model = single_op_model(op_type, [4, 4, 6, 2], index=INDEXED[op_type], node_name="node")
    lowered = b2s_onnx.lower(model)
    assert not {t.name for t in lowered.graph.initializer} >= set(INDEXED[op_type])
    assert b2s_onnx.check(model, per_layer=True).per_layer["diverged"] == 0
    broken = _negate_output_of(lowered, "node")
    result = b2s_onnx.check(model, lowered=broken, per_layer=True)
    assert result.per_layer["compared"] == 1
    assert result.per_layer["culprits"] == ["node"]


def test_lowered_subgraphs_match_their_ops():
    result = b2s_onnx.check(_custom_model(), per_layer=True)
    assert result.passed
    assert result.per_layer["compared"] == 2
    assert result.per_layer["diverged"] == 0


@pytest.mark.parametrize("node", ["s2d", "d2s"])
def test_a_wrong_lowered_subgraph_is_named(node):
    model = _custom_model()
    broken = _negate_output_of(b2s_onnx.lower(model), node)
    onnx.checker.check_model(broken)
    result = b2s_onnx.check(model, lowered=broken, per_layer=True)
    assert not result.passed
    assert result.per_layer["culprits"] == [node]


# -- command line ------------------------------------------------------------------------


def test_cli_per_layer_prints_the_culprit_and_writes_it_to_json(tmp_path, monkeypatch):
    xml = _broadcast_net(tmp_path, 3)
    layer = _only(xml, "Tanh")
    break_layer(monkeypatch, layer, flip_sign)
    report = tmp_path / "report.json"
    result = CliRunner().invoke(
        cli_main, ["check", str(xml), "--per-layer", "--json", str(report)], catch_exceptions=False
    )
    assert result.exit_code == 1, result.output
    assert f"first culprit: layer {layer.id} '{layer.name}' (Tanh-1)" in result.output
    # the table row is one line even though output is not a terminal
    assert any(
        layer.name in line and "Tanh-1" in line and "agree" in line
        for line in result.output.splitlines()
    )
    (record,) = json.loads(report.read_text())["models"]
    assert record["per_layer"]["culprits"] == [layer.id]
    assert {"outputs", "passed", "reference", "timings"} <= set(record)
    assert len(record["per_layer"]["layers"]) == record["per_layer"]["compared"]


def test_cli_per_layer_needs_openvino_as_reference(tmp_path):
    xml = _broadcast_net(tmp_path, 3)
    result = CliRunner().invoke(cli_main, ["check", str(xml), "--per-layer", "--reference", "onnx"])
    assert result.exit_code == 2
    assert "--per-layer" in result.output


def test_per_layer_report_loads_in_onnxruntime_untouched(tmp_path):
    """Exposing tensors must leave the converted model as it was."""
    xml = _broadcast_net(tmp_path, 3)
    conversion = convert_ir_model(xml)
    before = conversion.model.SerializeToString()
    feeds = {"x": np.random.default_rng(0).standard_normal((2, 3, 5, 5)).astype("f4")}
    compare_layers(xml, conversion.model, conversion.ports, feeds)
    assert conversion.model.SerializeToString() == before


# -- FakeQuantize layers without a counterpart ------------------------------------------

INT8 = Path(__file__).resolve().parents[1] / "models" / "int8"


def test_quantizers_between_a_layer_and_its_compared_inputs_are_named():
    """yolo_tiny's converted model quantizes after each MaxPool (the pool runs in float),
    so the FakeQuantize before a pool has no tensor to compare; a layer it feeds that
    diverges may only show a one-level move there, and the report names it."""
    from b2s_onnx.parity.layer_tolerance import PortError
    from b2s_onnx.parity.openvino_layers import OpenVINOLayers
    from b2s_onnx.parity.per_layer import _Comparison

    xml = INT8 / "yolo_tiny" / "int8.xml"
    conversion = convert_ir_model(xml)
    ir = read_ir_xml(xml)
    comparison = _Comparison(
        ir,
        topological_order(ir),
        conversion.ports,
        conversion.model,
        OpenVINOLayers(ir, xml),
        {"image": np.zeros([1, 3, 128, 128], np.float32)},
        {},
    )
    planned = comparison.plan()
    passed = PortError(True, 0.0, 0.0, 0.0, 1.0, 1.0, 0, 1)
    comparison.errors = {record.key: passed for _, record in planned}
    by_name = {layer.name: layer for layer in ir.layers.values()}
    assert all(record.name != "PRelu_10/fq_output_0" for _, record in planned)
    assert comparison._unmatched_quantizers(by_name["Add_17"]) == ["PRelu_10/fq_output_0"]
    # a layer whose inputs were all compared passes through no quantizer
    assert comparison._unmatched_quantizers(by_name["PRelu_10"]) == []


def test_the_culprit_line_names_unmatched_quantizers():
    from dataclasses import asdict

    from rich.console import Console

    from b2s_onnx.cli._per_layer_table import print_per_layer
    from b2s_onnx.parity.per_layer import LayerReport

    row = asdict(
        LayerReport(
            "27",
            "Add_17",
            "Add-1",
            2,
            "Add_17",
            "diverged",
            [1, 32, 64, 64],
            [1, 32, 64, 64],
            "float32",
            "float32",
            max_abs_error=0.0088,
            inputs_agree=True,
            unmatched_quantizers=["PRelu_10/fq_output_0"],
        )
    )
    per_layer = {
        "first": [row],
        "culprits": ["27"],
        "runs": 1,
        "compared": 25,
        "strategy": "single-run",
        "diverged": 1,
        "not_compared": [],
    }

    class Report:
        out = Console(record=True, width=300, file=open(os.devnull, "w"))  # noqa: SIM115

    print_per_layer(Report(), per_layer)
    text = Report.out.export_text()
    assert "first culprit: layer 27 'Add_17'" in text
    assert "reads FakeQuantize 'PRelu_10/fq_output_0'" in text
