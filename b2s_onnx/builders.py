"""Small ONNX models carrying one custom data-movement node, for examples and tests.

The output's declared shape comes from the op's own shape rule, so a model built here is
exactly what an exporter that knows these ops would write.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from b2s_onnx.ops import OP_MODULES, IndexInput, NodeRef

DEFAULT_DOMAIN = "org.openvinotoolkit"
#: An index input given as this string becomes a graph input (a value known at run time).
RUNTIME = "runtime"


def output_shape(
    op_type: str,
    data_shape: Sequence[int | str | None],
    index: Mapping[str, Sequence[int] | np.ndarray | str] | None = None,
    attributes: Mapping[str, object] | None = None,
) -> list[int | None]:
    """The op's output shape for the given (possibly symbolic) input shape."""
    module = OP_MODULES[op_type]
    dims = [d if isinstance(d, int) else None for d in data_shape]
    ref = NodeRef(op_type, "builder")
    if hasattr(module, "INDEX_ROLES"):
        inputs = []
        for role in module.INDEX_ROLES:
            value = (index or {}).get(role)
            inputs.append(
                IndexInput(role)
                if isinstance(value, str) or value is None
                else IndexInput.constant(role, value)
            )
        return module.infer(ref, dims, *inputs)
    attrs = dict(attributes or {})
    return module.infer(ref, dims, int(attrs.get("block_size", 1)), str(attrs.get("mode")))


def single_op_model(
    op_type: str,
    data_shape: Sequence[int | str | None],
    elem_type: int = TensorProto.FLOAT,
    *,
    index: Mapping[str, Sequence[int] | np.ndarray | str] | None = None,
    index_type: int = TensorProto.INT64,
    attributes: Mapping[str, object] | None = None,
    domain: str = DEFAULT_DOMAIN,
    opset: int = 17,
    node_name: str | None = None,
) -> onnx.ModelProto:
    """A model ``data -> <op_type> -> output``; index inputs are initializers or inputs."""
    module = OP_MODULES[op_type]
    roles: tuple[str, ...] = getattr(module, "INDEX_ROLES", ())
    inputs = [helper.make_tensor_value_info("data", elem_type, list(data_shape))]
    initializers = []
    numpy_type = helper.tensor_dtype_to_np_dtype(index_type)
    for role in roles:
        value = (index or {})[role]
        if isinstance(value, str):
            inputs.append(helper.make_tensor_value_info(role, index_type, [len(data_shape)]))
        else:
            initializers.append(numpy_helper.from_array(np.asarray(value, numpy_type), role))
    out_shape = output_shape(op_type, data_shape, index, attributes)
    out_dims = [d if d is not None else f"out_{i}" for i, d in enumerate(out_shape)]
    node = helper.make_node(
        op_type,
        ["data", *roles],
        ["output"],
        name=node_name or op_type.lower(),
        domain=domain,
        **dict(attributes or {}),
    )
    graph = helper.make_graph(
        [node],
        f"{op_type.lower()}_example",
        inputs,
        [helper.make_tensor_value_info("output", elem_type, out_dims)],
        initializers,
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid(domain, 1)]
    )
    model.ir_version = 8
    return model
