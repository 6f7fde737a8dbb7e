"""Graph rewrites that are not lowerings: forms of the same computation that onnxruntime
runs faster. One module per rewrite; each states what it matches, when it applies (a
decline carries the reason) and what it produces; one ordered list collects the defaults.

Every rewrite here keeps the outputs bit-exact or within float rounding of the original
(each module says which, and why). ``fuse=False`` (``--no-fuse``) turns them all off.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

import numpy as np
import onnx

from b2s_onnx.rewrites._index import GraphIndex
from b2s_onnx.rewrites._rule import Declined, Fired, Rewrite, RewriteReport
from b2s_onnx.rewrites.add_per_quantize import AddPerQuantize
from b2s_onnx.rewrites.atrous_convolution import AtrousConvolution
from b2s_onnx.rewrites.average_pool_in_float import AveragePoolInFloat
from b2s_onnx.rewrites.channel_gate_in_blocks import ChannelGateInBlocks
from b2s_onnx.rewrites.channel_padding_as_concat import ChannelPaddingAsConcat
from b2s_onnx.rewrites.channel_scale_as_depthwise_conv import ChannelScaleAsDepthwiseConv
from b2s_onnx.rewrites.clamp_before_quantize import ClampBeforeQuantize
from b2s_onnx.rewrites.concat_as_conv_sum import ConcatAsConvSum
from b2s_onnx.rewrites.concat_before_dequantize import ConcatBeforeDequantize
from b2s_onnx.rewrites.conv_after_upsampling import ConvAfterUpsampling
from b2s_onnx.rewrites.conv_bias import ConvBias
from b2s_onnx.rewrites.conv_integer import ConvIntegerUnquantizedOutput
from b2s_onnx.rewrites.conv_into_upsampling import ConvIntoUpsampling
from b2s_onnx.rewrites.conv_on_branches import ConvOnBranches
from b2s_onnx.rewrites.crelu_as_stacked_conv import CReluAsStackedConv
from b2s_onnx.rewrites.dequantize_after_movement import DequantizeAfterMovement
from b2s_onnx.rewrites.elementwise_in_chunks import ElementwiseInChunks
from b2s_onnx.rewrites.elu_as_exponential import EluAsExponential
from b2s_onnx.rewrites.few_channels_conv_integer import FewChannelsConvInteger
from b2s_onnx.rewrites.float_weights_for_float_layers import FloatWeightsForFloatLayers
from b2s_onnx.rewrites.fold_constants import FoldConstants
from b2s_onnx.rewrites.gelu_fusable_form import GeluFusableForm
from b2s_onnx.rewrites.grouped_conv_in_blocks import GroupedConvInBlocks
from b2s_onnx.rewrites.grouped_conv_integer import GroupedConvInteger
from b2s_onnx.rewrites.input_scale_into_conv import InputScaleIntoConv
from b2s_onnx.rewrites.layer_norm_spelled_out import LayerNormSpelledOut
from b2s_onnx.rewrites.lrn_as_conv import LrnAsConv
from b2s_onnx.rewrites.matmul_bias_as_sum import MatMulBiasAsSum
from b2s_onnx.rewrites.matmul_bias_vector import MatMulBiasVector
from b2s_onnx.rewrites.max_pool_in_float import MaxPoolInFloat
from b2s_onnx.rewrites.mish_as_exponentials import MishAsExponentials
from b2s_onnx.rewrites.mvn_as_normalization import MvnAsNormalization
from b2s_onnx.rewrites.pad_channels_to_block import PadChannelsToBlock
from b2s_onnx.rewrites.pad_into_convs import PadIntoConvs
from b2s_onnx.rewrites.per_axis_quantize_guard import PerAxisDequantizeGuard, PerAxisQuantizeGuard
from b2s_onnx.rewrites.per_channel_input_into_weights import PerChannelInputIntoWeights
from b2s_onnx.rewrites.per_channel_output_into_weights import PerChannelOutputIntoWeights
from b2s_onnx.rewrites.pointwise_conv_on_a_point import PointwiseConvOnAPoint
from b2s_onnx.rewrites.pool_floor_mode import PoolFloorMode
from b2s_onnx.rewrites.prelu_as_leaky_relu import PReluAsLeakyRelu
from b2s_onnx.rewrites.prelu_spelled_out import PReluSpelledOut
from b2s_onnx.rewrites.quantized_groups_in_blocks import QuantizedGroupsInBlocks
from b2s_onnx.rewrites.quantized_input_channels_to_four import QuantizedInputChannelsToFour
from b2s_onnx.rewrites.quantized_upsampling_as_depth_to_space import (
    QuantizedUpsamplingAsDepthToSpace,
)
from b2s_onnx.rewrites.reduce_of_stack import ReduceOfStack
from b2s_onnx.rewrites.residual_add_as_sum import ResidualAddAsSum
from b2s_onnx.rewrites.residual_scale import ResidualScale
from b2s_onnx.rewrites.resize_as_matmul import ResizeAsMatMul
from b2s_onnx.rewrites.resize_axes_in_full import ResizeAxesInFull
from b2s_onnx.rewrites.resize_sizes_as_scales import ResizeSizesAsScales
from b2s_onnx.rewrites.scale_shift_as_batchnorm import ScaleShiftAsBatchNorm
from b2s_onnx.rewrites.sibling_conv_integers import SiblingConvIntegers
from b2s_onnx.rewrites.sibling_convs import SiblingConvs
from b2s_onnx.rewrites.small_conv_as_3d import SmallConvAs3d
from b2s_onnx.rewrites.softmax_inner_axis import SoftmaxInnerAxis
from b2s_onnx.rewrites.softplus_as_exponential import SoftplusAsExponential
from b2s_onnx.rewrites.spatial_mean_as_pool import SpatialMeanAsPool
from b2s_onnx.rewrites.stride_one_conv_transpose import StrideOneConvTranspose
from b2s_onnx.rewrites.strided_conv_transpose_as_phases import StridedConvTransposeAsPhases
from b2s_onnx.rewrites.strided_input_conv_as_space_to_depth import (
    StridedInputConvAsSpaceToDepth,
)
from b2s_onnx.rewrites.transpose_cleanup import TransposeCleanup
from b2s_onnx.rewrites.transpose_in_stages import TransposeInStages
from b2s_onnx.rewrites.transpose_sinking import TransposeSinking
from b2s_onnx.rewrites.zero_filter_scale import ZeroFilterScale

#: Rewrites of a converted IR's standard ops, in order (a later one may build on an earlier).
CONVERTED_MODEL_REWRITES: tuple[Rewrite, ...] = (
    FoldConstants(),
    ReduceOfStack(),
    ChannelPaddingAsConcat(),
    PReluSpelledOut(),
    PReluAsLeakyRelu(),
    SoftmaxInnerAxis(),
    InputScaleIntoConv(),
    ConvBias(),
    ConvIntoUpsampling(),
    StrideOneConvTranspose(),
    StridedConvTransposeAsPhases(),
    ClampBeforeQuantize(),
    DequantizeAfterMovement(),
    ConcatBeforeDequantize(),
    # Again: a Concat of the integers now dequantized once may feed a MaxPool.
    DequantizeAfterMovement(),
    # After: the Concat of a quantized CReLU's two halves joins their bytes by then.
    CReluAsStackedConv(),
    MatMulBiasVector(),
    PerChannelOutputIntoWeights(),
    PointwiseConvOnAPoint(),
    QuantizedUpsamplingAsDepthToSpace(),
    MaxPoolInFloat(),
    ConvOnBranches(),
    ConvIntegerUnquantizedOutput(),
    FewChannelsConvInteger(),
    # Before: on small maps the merged QLinearConv beats the ConvInteger form.
    QuantizedGroupsInBlocks(),
    GroupedConvInteger(),
    SiblingConvIntegers(),
    MatMulBiasAsSum(),
    PerChannelInputIntoWeights(),
    StridedInputConvAsSpaceToDepth(),
    QuantizedInputChannelsToFour(),
    FloatWeightsForFloatLayers(),
    AddPerQuantize(),
    MishAsExponentials(),
    SoftplusAsExponential(),
    EluAsExponential(),
    LrnAsConv(),
    MvnAsNormalization(),
    LayerNormSpelledOut(),
    ResidualAddAsSum(),
    PoolFloorMode(),
    AveragePoolInFloat(),
    GeluFusableForm(),
    ResidualScale(),
    SmallConvAs3d(),
    PadIntoConvs(),
    SpatialMeanAsPool(),
    ChannelGateInBlocks(),
    ChannelScaleAsDepthwiseConv(),
    ScaleShiftAsBatchNorm(),
    PadChannelsToBlock(),
    # After: the groups of a region padded to whole blocks merge too.
    GroupedConvInBlocks(),
    ResizeAsMatMul(),
    ResizeSizesAsScales(),
    ConcatAsConvSum(),
    ConvAfterUpsampling(),
    SiblingConvs(),
    # After every rewrite that forms a QDQ Conv, before onnxruntime quantizes its bias.
    ZeroFilterScale(),
    PerAxisQuantizeGuard(),
    PerAxisDequantizeGuard(),
    TransposeInStages(),
    ElementwiseInChunks(),
)


def converted_model_rewrites(
    strategy: str = "auto", threads: int | None = None
) -> tuple[Rewrite, ...]:
    """The defaults, told how the model will run (the lowering options' strategy and
    intra-op threads): the permutation planner's stages and the element-wise chains'
    slices depend on both."""

    def told(rewrite: Rewrite) -> Rewrite:
        if isinstance(rewrite, TransposeInStages):
            return TransposeInStages(strategy, threads)
        if isinstance(rewrite, ElementwiseInChunks):
            return ElementwiseInChunks(threads)
        return rewrite

    return tuple(told(r) for r in CONVERTED_MODEL_REWRITES)


#: Rewrites every converted model gets, ``fuse`` or not: forms onnxruntime's default
#: session (``ORT_ENABLE_ALL``) would refuse to load.
LOADING_REWRITES: tuple[Rewrite, ...] = (ResizeAxesInFull(),)


def lowering_rewrites(domains: Sequence[str]) -> tuple[Rewrite, ...]:
    """Rewrites that run on a graph's custom-domain data-movement nodes before lowering."""
    return (AtrousConvolution(tuple(domains)),)


#: Rewrites of the lowered graph's standard ops: pairs cancel, Transposes move past
#: element-wise ops (towards the next layer's), and the pairs that then meet cancel.
AFTER_LOWERING_REWRITES: tuple[Rewrite, ...] = (
    TransposeCleanup(),
    TransposeSinking(),
    TransposeCleanup(),
)


def apply_rewrites(
    model: onnx.ModelProto,
    rewrites: Sequence[Rewrite] = CONVERTED_MODEL_REWRITES,
    late: Mapping[str, np.ndarray] | None = None,
) -> RewriteReport:
    """Applies ``rewrites`` to ``model``'s top-level graph in place, in order, one pass each
    (again while it fires, for a rewrite marked ``until_settled``);
    returns what fired, what declined and why, and which tensors were absorbed. ``late``
    holds the values of initializers left as stubs (large weights attached at save), so
    rewrites that compose weights can read them."""
    report = RewriteReport()
    index = GraphIndex(model, late)
    for rewrite in rewrites:
        passes = MAX_PASSES if getattr(rewrite, "until_settled", False) else 1
        for _ in range(passes):
            if not _one_pass(index, rewrite, report):
                break
    return report


#: The most passes of a rewrite that repeats until nothing more fires (``until_settled``:
#: each pass moves a node past one op, and chains are short).
MAX_PASSES = 8


def _one_pass(index: GraphIndex, rewrite: Rewrite, report: RewriteReport) -> bool:
    """One pass of ``rewrite`` over the graph, committed; whether it fired. A decline
    already reported by an earlier pass is not repeated."""
    anchor_domains = getattr(rewrite, "domains", ("", "ai.onnx"))
    fired = False
    for node in list(index.graph.node):
        if node.op_type not in rewrite.anchors or node.domain not in anchor_domains:
            continue
        outcome = rewrite.attempt(index, node, report)
        if isinstance(outcome, Fired):
            if outcome.exact is None:
                outcome = replace(outcome, exact=getattr(rewrite, "exact", True))
            report.fired.append(outcome)
            fired = True
        elif isinstance(outcome, Declined) and outcome not in report.declined:
            report.declined.append(outcome)
    index.commit()
    return fired


__all__ = [
    "AFTER_LOWERING_REWRITES",
    "CONVERTED_MODEL_REWRITES",
    "LOADING_REWRITES",
    "Declined",
    "Fired",
    "Rewrite",
    "RewriteReport",
    "apply_rewrites",
    "converted_model_rewrites",
    "lowering_rewrites",
]
