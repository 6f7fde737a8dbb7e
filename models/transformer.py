"""A BERT-style encoder built with OpenVINO's opset API, in the form OpenVINO's converter
writes transformers: MatMul with transposed weights and a bias Add, LayerNorm as MVN ->
Multiply -> Add, scaled dot-product attention with Softmax over the last axis, erf Gelu.

Shared by ``benchmarks.models`` (the float pattern) and ``models/make_int8.py`` (its NNCF
INT8 version), so both measure the same network.
"""

from __future__ import annotations

import numpy as np


def encoder(ops, data, rng: np.random.Generator, layers: int = 2, heads: int = 4):
    """``layers`` post-norm encoder layers over ``data`` of shape [1, length, width]."""
    _, length, width = (d.get_length() for d in data.get_output_partial_shape(0))

    def constant(*shape):
        return ops.constant((rng.standard_normal(shape) * 0.05).astype(np.float32))

    def layer_norm(x):
        axis = ops.constant(np.asarray([-1], np.int64))
        normed = ops.mvn(x, axis, True, 1e-12, "inside_sqrt")
        return ops.add(ops.multiply(normed, constant(width)), constant(width))

    def linear(x, inputs, outputs):
        return ops.add(ops.matmul(x, constant(outputs, inputs), False, True), constant(outputs))

    def split_heads(x):
        shape = ops.constant(np.asarray([1, length, heads, width // heads], np.int64))
        return ops.transpose(ops.reshape(x, shape, False), ops.constant(np.asarray([0, 2, 1, 3])))

    hidden = layer_norm(data)
    for _ in range(layers):
        q, k, v = (split_heads(linear(hidden, width, width)) for _ in range(3))
        scale = ops.constant(np.float32(1 / np.sqrt(width // heads)))
        weights = ops.softmax(ops.multiply(ops.matmul(q, k, False, True), scale), -1)
        context = ops.transpose(ops.matmul(weights, v, False, False), [0, 2, 1, 3])
        context = ops.reshape(context, ops.constant(np.asarray([1, length, width])), False)
        hidden = layer_norm(ops.add(linear(context, width, width), hidden))
        inner = ops.gelu(linear(hidden, width, 4 * width), "erf")
        hidden = layer_norm(ops.add(linear(inner, 4 * width, width), hidden))
    return hidden
