"""How many inputs each supported layer type takes (from OpenVINO's op specs).

Checked before a converter runs, so a layer with too few or too many inputs is one clear
error naming the layer, never an index error inside a converter.
"""

from __future__ import annotations

from b2s_onnx.errors import B2SError
from b2s_onnx.ir.reader import Layer

_UNARY = (
    "ReLU",
    "Sigmoid",
    "Tanh",
    "Exp",
    "Log",
    "Sqrt",
    "Abs",
    "Negative",
    "Floor",
    "Ceiling",
    "Sin",
    "Cos",
    "Tan",
    "Asin",
    "Acos",
    "Atan",
    "Sinh",
    "Cosh",
    "Asinh",
    "Acosh",
    "Atanh",
    "Erf",
    "Sign",
    "SoftPlus",
    "LogicalNot",
    "SoftSign",
    "Clamp",
    "Elu",
    "HSigmoid",
    "HSwish",
    "Mish",
    "Gelu",
    "Round",
    "Convert",
    "SoftMax",
    "LogSoftmax",
    "ShapeOf",
    "DepthToSpace",
    "SpaceToDepth",
    "MVN-v0",
    "MaxPool",
    "AvgPool",
)
_BINARY = (
    "Add",
    "Subtract",
    "Multiply",
    "Maximum",
    "Minimum",
    "Power",
    "Equal",
    "Less",
    "Greater",
    "LessEqual",
    "GreaterEqual",
    "LogicalAnd",
    "LogicalOr",
    "LogicalXor",
    "NotEqual",
    "SquaredDifference",
    "Divide",
    "Mod",
    "FloorMod",
    "PReLU",
    "ConvertLike",
    "Convolution",
    "GroupConvolution",
    "MatMul",
    "Reshape",
    "Transpose",
    "Unsqueeze",
    "ReduceMax",
    "ReduceMin",
    "ReduceMean",
    "ReduceSum",
    "ReduceProd",
    "ReduceL1",
    "ReduceL2",
    "ReduceLogicalAnd",
    "ReduceLogicalOr",
    "MVN",
    "NormalizeL2",
    "TopK",
    "Tile",
    "PriorBox",
    "PriorBoxClustered",
    "Split",
)

#: (fewest, most) inputs per layer type.
ARITY: dict[str, tuple[int, int]] = {
    **dict.fromkeys(_UNARY, (1, 1)),
    **dict.fromkeys(_BINARY, (2, 2)),
    "Swish": (1, 2),
    "Squeeze": (1, 2),
    "Selu": (3, 3),
    "Select": (3, 3),
    "Gather": (3, 3),
    "VariadicSplit": (3, 3),
    "Broadcast": (2, 3),
    "Range": (3, 3),
    "Pad": (3, 4),
    "StridedSlice": (3, 4),
    "FakeQuantize": (5, 5),
    "Interpolate": (2, 4),
    "ConvolutionBackpropData": (2, 3),
    "GroupConvolutionBackpropData": (2, 3),
    "DetectionOutput": (3, 5),
    "BatchToSpace": (4, 4),
    "SpaceToBatch": (4, 4),
    "Result": (1, 1),
    "Const": (0, 0),
    "Parameter": (0, 0),
}


def check_arity(layer: Layer) -> None:
    key = "MVN-v0" if layer.type == "MVN" and layer.version == "opset2" else layer.type
    bounds = ARITY.get(key)
    if bounds is None:
        return
    count = len(layer.inputs)
    low, high = bounds
    if not low <= count <= high:
        wanted = str(low) if low == high else f"{low} to {high}"
        raise B2SError(f"{layer.where()}: takes {wanted} input(s), got {count}")
    outputs = len(layer.outputs)
    if layer.type not in ("Result",) and outputs == 0:
        raise B2SError(f"{layer.where()}: has no output port")
