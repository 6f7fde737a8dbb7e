"""Is a constant one value per channel of the NCHW tensor it is broadcast against?

Several rewrites fold such a constant (a bias Add, a scale Mul, a PReLU slope) into a
per-channel parameter. Under numpy broadcasting a constant varies along the channels only
when, left-padded to rank 4, its one non-unit axis is axis 1: ``[C, 1, 1]`` and
``[1, C, 1, 1]`` do, a ``[C]`` vector varies along the width instead.
"""

from __future__ import annotations

import numpy as np
import onnx

from b2s_onnx.rewrites._index import GraphIndex


def channel_vector(value: np.ndarray, channels: int | None = None) -> np.ndarray | None:
    """``value`` as a flat per-channel vector (broadcast to ``channels`` when given), or
    None when it is not per-channel for a rank-4 tensor."""
    if value.ndim > 4:
        return None
    padded = (1,) * (4 - value.ndim) + tuple(value.shape)
    if padded[0] != 1 or padded[2:] != (1, 1):
        return None
    if channels is None:
        return value.reshape(-1)
    if padded[1] not in (1, channels):
        return None
    return np.broadcast_to(value.reshape(-1), (channels,))


def data_and_constant(index: GraphIndex, node: onnx.NodeProto) -> tuple[str, np.ndarray] | None:
    """(the computed operand, the constant one) of a binary node, else None."""
    for data, other in (node.input, node.input[::-1]):
        value = index.constant(other)
        if value is not None and index.constant(data) is None:
            return data, value
    return None
