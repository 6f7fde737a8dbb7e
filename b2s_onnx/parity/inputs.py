"""Seeded random inputs of the right element types and shapes.

Values are standard normal floats (integers in [-1000, 1000]) unless ``val_range`` gives an
input (or ``"*"``, every input) a range ``(lo, hi)``: uniform floats in [lo, hi), or
integers lo..hi inclusive for integer inputs. Image models want ``{"*": (0, 255)}``.

Symbolic dimensions take a size from ``dim_sizes``; when a symbolic batch feeds a
BatchToSpace with constant blocks, its default is the block product (the smallest valid
batch), so a dynamic-batch model checks without any option.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import ml_dtypes
import numpy as np
import onnx
from onnx import helper

from b2s_onnx.errors import B2SError
from b2s_onnx.graph.types import constant_values

DEFAULT_DIM = 1
#: Random inputs larger than this are refused instead of allocated.
MAX_INPUT_BYTES = 1 << 31


def graph_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    """Inputs that must be fed: not those that merely expose an initializer's default."""
    initialized = {t.name for t in model.graph.initializer}
    return [v for v in model.graph.input if v.name not in initialized]


def _default_dim_sizes(model: onnx.ModelProto, domains: Sequence[str]) -> dict[str, int]:
    constants = constant_values(model)
    params: dict[str, str] = {}
    for value in model.graph.input:
        dims = value.type.tensor_type.shape.dim
        if dims and dims[0].dim_param:
            params[value.name] = dims[0].dim_param
    sizes: dict[str, int] = {}
    for node in model.graph.node:
        if node.domain not in domains or node.op_type != "BatchToSpace" or len(node.input) < 2:
            continue
        blocks = constants.get(node.input[1])
        if node.input[0] in params and blocks is not None and blocks.size:
            sizes.setdefault(params[node.input[0]], int(np.prod(blocks.astype(np.int64))))
    return sizes


def _index_consumers(model: onnx.ModelProto, domains: Sequence[str]) -> dict[str, str]:
    """Graph inputs read as index inputs of custom nodes: random values would be invalid."""
    consumers: dict[str, str] = {}
    for node in model.graph.node:
        if node.domain in domains and node.op_type in ("BatchToSpace", "SpaceToBatch"):
            for name in node.input[1:]:
                consumers[name] = f"{node.op_type} '{node.name}'"
    return consumers


ValueRange = tuple[float, float]


def random_array(
    rng: np.random.Generator,
    elem_type: int,
    shape: Sequence[int],
    value_range: ValueRange | None = None,
) -> np.ndarray:
    if elem_type == onnx.TensorProto.BFLOAT16:
        return random_array(rng, onnx.TensorProto.FLOAT, shape, value_range).astype(
            ml_dtypes.bfloat16
        )
    dtype = helper.tensor_dtype_to_np_dtype(elem_type)
    if dtype == np.bool_:
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if np.issubdtype(dtype, np.floating):
        if value_range is None:
            return rng.standard_normal(shape).astype(dtype)
        return rng.uniform(value_range[0], value_range[1], size=shape).astype(dtype)
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        low, high = (-1000, 1000) if value_range is None else value_range
        low, high = max(int(info.min), int(np.ceil(low))), min(int(info.max), int(np.floor(high)))
        if low > high:
            raise B2SError(f"no {dtype} value lies in [{value_range[0]:g}, {value_range[1]:g}]")
        return rng.integers(low, high, size=shape, endpoint=True).astype(dtype)
    raise B2SError(f"cannot make random inputs of element type {elem_type}")


def _range_for(name: str, val_range: Mapping[str, ValueRange]) -> ValueRange | None:
    value = val_range.get(name, val_range.get("*"))
    if value is None:
        return None
    low, high = (float(v) for v in value)
    if not low <= high:
        raise B2SError(f"value range of '{name}': low {low:g} is above high {high:g}")
    return low, high


def make_inputs(
    model: onnx.ModelProto,
    *,
    seed: int = 0,
    given: Mapping[str, np.ndarray] | None = None,
    dim_sizes: Mapping[str, int] | None = None,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    domains: Sequence[str] = (),
    val_range: Mapping[str, ValueRange] | None = None,
) -> dict[str, np.ndarray]:
    given = dict(given or {})
    ranges = dict(val_range or {})
    sizes = {**_default_dim_sizes(model, domains), **dict(dim_sizes or {})}
    shapes = dict(input_shapes or {})
    consumers = _index_consumers(model, domains)
    rng = np.random.default_rng(seed)
    feeds: dict[str, np.ndarray] = {}
    expected = {v.name for v in graph_inputs(model)}
    for name in set(given) | set(shapes) | (set(ranges) - {"*"}):
        if name not in expected:
            raise B2SError(
                f"'{name}' is not an input of the model (inputs: {', '.join(sorted(expected))})"
            )
    for value in graph_inputs(model):
        if value.name in given:
            feeds[value.name] = np.asarray(given[value.name])
            continue
        if value.name in consumers:
            raise B2SError(
                f"input '{value.name}' is an index input of {consumers[value.name]}; random "
                "values would break its rules, so give its value (--inputs FILE.npz)"
            )
        tensor = value.type.tensor_type
        if value.name in shapes:
            shape = [int(d) for d in shapes[value.name]]
        else:
            shape = [
                d.dim_value if d.HasField("dim_value") else sizes.get(d.dim_param, DEFAULT_DIM)
                for d in tensor.shape.dim
            ]
        count = 1
        for dim in shape:
            count *= max(int(dim), 0)
        itemsize = (
            2
            if tensor.elem_type == onnx.TensorProto.BFLOAT16
            else (
                helper.tensor_dtype_to_np_dtype(tensor.elem_type).itemsize
                if tensor.elem_type
                else 4
            )
        )
        if count * itemsize > MAX_INPUT_BYTES:
            raise B2SError(
                f"input '{value.name}' of shape {shape} would need "
                f"{count * itemsize} bytes; refusing (give smaller --input-shapes)"
            )
        feeds[value.name] = random_array(
            rng, tensor.elem_type, shape, _range_for(value.name, ranges)
        )
    return feeds


def option_warnings(
    model: onnx.ModelProto,
    dim_sizes: Mapping[str, int] | None,
    compare: Mapping[str, str] | str | None = None,
) -> list[str]:
    """Options that name nothing in ``model`` and so do nothing: said, not refused."""
    params = {
        d.dim_param
        for v in graph_inputs(model)
        for d in v.type.tensor_type.shape.dim
        if d.dim_param
    }
    messages = [
        f"--dim {name} names no dimension of the model"
        + (f" (symbolic: {', '.join(sorted(params))})" if params else " (it has none)")
        for name in sorted(set(dim_sizes or {}) - params)
    ]
    outputs = {o.name for o in model.graph.output}
    if isinstance(compare, Mapping):
        messages += [
            f"--compare {name}: no output of that name ({', '.join(sorted(outputs))})"
            for name in sorted(set(compare) - outputs - {"*"})
        ]
    return messages
