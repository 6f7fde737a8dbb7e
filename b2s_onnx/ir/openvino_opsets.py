"""The op types of OpenVINO's opsets 1-17, as the IR names them (``type`` and ``version``).

An IR layer says ``type="Gather" version="opset8"``: the version is the opset that
introduced that definition of the op, not the opset the model was built from, so one
opset holds ops of many versions (opset16 still holds ``Abs`` of opset1). This table lists,
per opset, the (type, version) pairs it holds; op-coverage accounting and the generated
list of supported ops are measured against it. It was taken from OpenVINO's opset tables
(2026.4), and a test checks it against the installed ``openvino`` package.

``Constant`` (``Const`` in the IR), ``Parameter`` and ``Result`` are structural: every opset
has them and the converter handles them itself.
"""

from __future__ import annotations

from functools import cache

LATEST = 17
STRUCTURAL = frozenset({"Parameter", "Result", "Const", "Constant"})

_OPSET1 = (
    "Abs-1",
    "Acos-1",
    "Add-1",
    "Asin-1",
    "Atan-1",
    "AvgPool-1",
    "BatchNormInference-1",
    "BinaryConvolution-1",
    "Broadcast-1",
    "CTCGreedyDecoder-1",
    "Ceiling-1",
    "Clamp-1",
    "Concat-1",
    "Convert-1",
    "ConvertLike-1",
    "Convolution-1",
    "ConvolutionBackpropData-1",
    "Cos-1",
    "Cosh-1",
    "DeformableConvolution-1",
    "DeformablePSROIPooling-1",
    "DepthToSpace-1",
    "DetectionOutput-1",
    "Divide-1",
    "Elu-1",
    "Equal-1",
    "Erf-1",
    "Exp-1",
    "FakeQuantize-1",
    "Floor-1",
    "FloorMod-1",
    "GRN-1",
    "Gather-1",
    "GatherTree-1",
    "Greater-1",
    "GreaterEqual-1",
    "GroupConvolution-1",
    "GroupConvolutionBackpropData-1",
    "HardSigmoid-1",
    "Interpolate-1",
    "LRN-1",
    "LSTMCell-1",
    "Less-1",
    "LessEqual-1",
    "Log-1",
    "LogicalAnd-1",
    "LogicalNot-1",
    "LogicalOr-1",
    "LogicalXor-2",
    "MatMul-1",
    "MaxPool-1",
    "Maximum-1",
    "Minimum-1",
    "Mod-1",
    "Multiply-1",
    "Negative-1",
    "NonMaxSuppression-1",
    "NormalizeL2-1",
    "NotEqual-1",
    "OneHot-1",
    "PRelu-1",
    "PSROIPooling-1",
    "Pad-1",
    "Parameter-1",
    "Power-1",
    "PriorBox-1",
    "PriorBoxClustered-1",
    "Proposal-1",
    "RNNCell-1",
    "Range-1",
    "ReduceLogicalAnd-1",
    "ReduceLogicalOr-1",
    "ReduceMax-1",
    "ReduceMean-1",
    "ReduceMin-1",
    "ReduceProd-1",
    "ReduceSum-1",
    "RegionYolo-1",
    "Relu-1",
    "Reshape-1",
    "Result-1",
    "Reverse-1",
    "ReverseSequence-1",
    "Select-1",
    "Selu-1",
    "ShapeOf-1",
    "ShuffleChannels-1",
    "Sigmoid-1",
    "Sign-1",
    "Sin-1",
    "Sinh-1",
    "Softmax-1",
    "SpaceToDepth-1",
    "Split-1",
    "Sqrt-1",
    "SquaredDifference-1",
    "Squeeze-1",
    "StridedSlice-1",
    "Subtract-1",
    "Tan-1",
    "Tanh-1",
    "TensorIterator-1",
    "Tile-1",
    "TopK-1",
    "Transpose-1",
    "Unsqueeze-1",
    "VariadicSplit-1",
    "Xor-1",
)

#: opset N = opset N-1, minus the versions it drops, plus the versions it adds.
_CHANGES: dict[int, tuple[tuple[str, ...], tuple[str, ...]]] = {
    2: (
        (
            "BatchToSpace-2",
            "Gelu-2",
            "MVN-2",
            "ROIPooling-2",
            "ReorgYolo-2",
            "SpaceToBatch-2",
        ),
        (
            "RNNCell-1",
            "Reverse-1",
            "ShuffleChannels-1",
            "Xor-1",
        ),
    ),
    3: (
        (
            "Assign-3",
            "Broadcast-3",
            "Bucketize-3",
            "CumSum-3",
            "EmbeddingBagOffsetsSum-3",
            "EmbeddingBagPackedSum-3",
            "EmbeddingSegmentsSum-3",
            "ExtractImagePatches-3",
            "GRUCell-3",
            "NonMaxSuppression-3",
            "NonZero-3",
            "RNNCell-1",
            "ROIAlign-3",
            "ReadValue-3",
            "ScatterElementsUpdate-3",
            "ScatterUpdate-3",
            "ShapeOf-3",
            "ShuffleChannels-1",
            "TopK-3",
        ),
        (
            "Broadcast-1",
            "NonMaxSuppression-1",
            "ShapeOf-1",
            "TopK-1",
        ),
    ),
    4: (
        (
            "Acosh-4",
            "Asinh-4",
            "Atanh-4",
            "CTCLoss-4",
            "HSwish-4",
            "Interpolate-4",
            "LSTMCell-4",
            "Mish-4",
            "NonMaxSuppression-4",
            "Proposal-4",
            "Range-4",
            "ReduceL1-4",
            "ReduceL2-4",
            "ScatterNDUpdate-4",
            "SoftPlus-4",
            "Swish-4",
        ),
        (
            "Interpolate-1",
            "LSTMCell-1",
            "NonMaxSuppression-3",
            "Proposal-1",
            "Range-1",
        ),
    ),
    5: (
        (
            "BatchNormInference-5",
            "GRUSequence-5",
            "GatherND-5",
            "HSigmoid-5",
            "LSTMSequence-5",
            "LogSoftmax-5",
            "Loop-5",
            "NonMaxSuppression-5",
            "RNNSequence-5",
            "Round-5",
        ),
        (
            "BatchNormInference-1",
            "NonMaxSuppression-4",
        ),
    ),
    6: (
        (
            "Assign-6",
            "CTCGreedyDecoderSeqLen-6",
            "ExperimentalDetectronDetectionOutput-6",
            "ExperimentalDetectronGenerateProposalsSingleImage-6",
            "ExperimentalDetectronPriorGridGenerator-6",
            "ExperimentalDetectronROIFeatureExtractor-6",
            "ExperimentalDetectronTopKROIs-6",
            "GatherElements-6",
            "MVN-6",
            "ReadValue-6",
        ),
        (
            "Assign-3",
            "MVN-2",
            "ReadValue-3",
        ),
    ),
    7: (
        (
            "DFT-7",
            "Einsum-7",
            "Gather-7",
            "Gelu-7",
            "IDFT-7",
            "Roll-7",
        ),
        (
            "Gather-1",
            "Gelu-2",
        ),
    ),
    8: (
        (
            "AdaptiveAvgPool-8",
            "AdaptiveMaxPool-8",
            "DeformableConvolution-8",
            "DetectionOutput-8",
            "Gather-8",
            "GatherND-8",
            "I420toBGR-8",
            "I420toRGB-8",
            "If-8",
            "MatrixNms-8",
            "MaxPool-8",
            "MulticlassNms-8",
            "NV12toBGR-8",
            "NV12toRGB-8",
            "PriorBox-8",
            "RandomUniform-8",
            "Slice-8",
            "Softmax-8",
        ),
        (
            "DeformableConvolution-1",
            "DetectionOutput-1",
            "Gather-7",
            "GatherND-5",
            "MaxPool-1",
            "PriorBox-1",
            "Softmax-1",
        ),
    ),
    9: (
        (
            "Eye-9",
            "GenerateProposals-9",
            "GridSample-9",
            "IRDFT-9",
            "MulticlassNms-9",
            "NonMaxSuppression-9",
            "RDFT-9",
            "ROIAlign-9",
            "SoftSign-9",
        ),
        (
            "MulticlassNms-8",
            "NonMaxSuppression-5",
            "ROIAlign-3",
        ),
    ),
    10: (
        (
            "IsFinite-10",
            "IsInf-10",
            "IsNaN-10",
            "Unique-10",
        ),
        (),
    ),
    11: (
        (
            "Interpolate-11",
            "TopK-11",
        ),
        (
            "Interpolate-4",
            "TopK-3",
        ),
    ),
    12: (
        (
            "GroupNormalization-12",
            "Pad-12",
            "ScatterElementsUpdate-12",
        ),
        (
            "Pad-1",
            "ScatterElementsUpdate-3",
        ),
    ),
    13: (
        (
            "BitwiseAnd-13",
            "BitwiseNot-13",
            "BitwiseOr-13",
            "BitwiseXor-13",
            "FakeConvert-13",
            "Multinomial-13",
            "NMSRotated-13",
            "ScaledDotProductAttention-13",
        ),
        (),
    ),
    14: (
        (
            "AvgPool-14",
            "ConvertPromoteTypes-14",
            "Inverse-14",
            "MaxPool-14",
        ),
        (
            "AvgPool-1",
            "MaxPool-8",
        ),
    ),
    15: (
        (
            "BitwiseLeftShift-15",
            "BitwiseRightShift-15",
            "Col2Im-15",
            "EmbeddingBagOffsets-15",
            "EmbeddingBagPacked-15",
            "ROIAlignRotated-15",
            "STFT-15",
            "ScatterNDUpdate-15",
            "SearchSorted-15",
            "SliceScatter-15",
            "Squeeze-15",
            "StringTensorPack-15",
            "StringTensorUnpack-15",
        ),
        (
            "ScatterNDUpdate-4",
            "Squeeze-1",
        ),
    ),
    16: (
        (
            "AvgPool-16",
            "ISTFT-16",
            "Identity-16",
            "OneHot-16",
            "SegmentMax-16",
            "SparseFillEmptyRows-16",
        ),
        (
            "AvgPool-14",
            "OneHot-1",
        ),
    ),
    17: (("ErfInv-17", "GroupedMatMul-17"), ()),
}


def _pair(item: str) -> tuple[str, str]:
    name, version = item.rsplit("-", 1)
    return name, f"opset{version}"


@cache
def opset(number: int) -> frozenset[tuple[str, str]]:
    """The (type, version) pairs opset ``number`` (1..17) holds, e.g. ("Gather", "opset8")."""
    if not 1 <= number <= LATEST:
        raise ValueError(f"OpenVINO opset {number} is not tabulated (1..{LATEST})")
    if number == 1:
        return frozenset(map(_pair, _OPSET1))
    added, removed = _CHANGES[number]
    return (opset(number - 1) - set(map(_pair, removed))) | set(map(_pair, added))


@cache
def all_versions(last: int = LATEST) -> dict[str, tuple[str, ...]]:
    """Every op type of opsets 1..``last`` (structural ones excluded) with the versions the
    IR format uses for it, oldest first."""
    versions: dict[str, set[str]] = {}
    for number in range(1, last + 1):
        for name, version in opset(number):
            if name not in STRUCTURAL:
                versions.setdefault(name, set()).add(version)
    return {
        name: tuple(sorted(found, key=lambda v: int(v.removeprefix("opset"))))
        for name, found in sorted(versions.items())
    }
