"""An LSTM layer in the form OpenVINO's Keras/TensorFlow frontends write it: a
TensorIterator slicing ``[N, T, I]`` step by step into an LSTMCell, the states on back
edges, the new hidden state stacked back along time.

Shared by ``benchmarks.models`` (the keras-lstm pattern) and the mutation fuzz's recurrent
seed, so both exercise the same body.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


def lstm_over_time(ops, data, hidden: int, weights: Callable[..., object]) -> list:
    """[the hidden states of every step, the last hidden state, the last cell state] of
    an LSTM over ``data`` (static ``[N, T, I]``) from zero states; ``weights(*shape)``
    makes each constant."""
    import openvino as ov

    batch, _, features = data.get_output_partial_shape(0).to_shape()
    x_t = ops.parameter([batch, 1, features], np.float32, name="x_t")
    states = [ops.parameter([batch, hidden], np.float32, name=n) for n in ("h", "c")]
    step = ops.squeeze(x_t, ops.constant(np.asarray([1], np.int64)))
    cell = ops.lstm_cell(
        step,
        *states,
        weights(4 * hidden, features),
        weights(4 * hidden, hidden),
        weights(4 * hidden),
        hidden,
    )
    stacked = ops.unsqueeze(cell.output(0), ops.constant(np.asarray([1], np.int64)))
    body = ov.Model([cell.output(0), cell.output(1), stacked.output(0)], [x_t, *states])
    loop = ops.tensor_iterator()
    loop.set_body(body)
    loop.set_sliced_input(x_t, data.output(0), 0, 1, 1, -1, 1)
    zeros = ops.constant(np.zeros([batch, hidden], np.float32))
    for state, result in zip(states, body.outputs, strict=False):
        loop.set_merged_input(state, zeros.output(0), result)
    return [
        loop.get_concatenated_slices(body.outputs[2], 0, 1, 1, -1, 1),
        loop.get_iter_value(body.outputs[0], -1),
        loop.get_iter_value(body.outputs[1], -1),
    ]
