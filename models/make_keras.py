"""Regenerates the Keras recurrent IRs in ``models/keras/``: small Keras 3 models with
seeded random weights (biases too, so every gate's bias is exercised), converted by
OpenVINO's TensorFlow frontend, which writes each recurrent layer as a Loop-5 over time.

    pip install tensorflow-cpu && python -m models.make_keras           # every model
    pip install tensorflow-cpu && python -m models.make_keras gru       # only the named ones

Tests read the committed files; only regenerating needs TensorFlow.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

FOLDER = Path(__file__).resolve().parent / "keras"
STEPS, FEATURES = 12, 6


def _models(keras) -> dict[str, Callable]:
    layers = keras.layers

    def sequential(*stack):
        def build():
            data = x = keras.Input((STEPS, FEATURES))
            for layer in stack:
                x = layer(x)
            return keras.Model(data, x)

        return build

    def with_states():
        data = keras.Input((STEPS, FEATURES))
        sequence, h, c = layers.LSTM(7, return_sequences=True, return_state=True)(data)
        return keras.Model(data, [sequence, h, c])

    return {
        "lstm": sequential(layers.LSTM(10)),
        "lstm_states": with_states,
        "gru": sequential(layers.GRU(9, return_sequences=True)),
        "simple_rnn_relu": sequential(layers.SimpleRNN(8, activation="relu")),
        "bidirectional_lstm": sequential(layers.Bidirectional(layers.LSTM(5))),
        "gru_reset_before": sequential(layers.GRU(6, reset_after=False)),
    }


def main(names: list[str]) -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import keras
    import openvino as ov

    models = _models(keras)
    FOLDER.mkdir(exist_ok=True)
    for name in names or sorted(models):
        model = models[name]()
        rng = np.random.default_rng(sum(map(ord, name)))
        model.set_weights(
            [(rng.standard_normal(w.shape) * 0.4).astype(np.float32) for w in model.get_weights()]
        )
        converted = ov.convert_model(model, input=[1, STEPS, FEATURES])
        ov.save_model(converted, FOLDER / f"{name}.xml", compress_to_fp16=False)
        print(f"wrote {FOLDER / name}.xml")


if __name__ == "__main__":
    main(sys.argv[1:])
