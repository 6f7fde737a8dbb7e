"""b2s_onnx: lower OpenVINO's data-movement ops to standard ONNX, and prove the result.

The public API mirrors the ``b2s-onnx`` command line: :func:`lower` rewrites a model,
:func:`convert_ir` converts an OpenVINO IR, :func:`check` compares the original (reference
semantics) with the lowered model run by onnxruntime.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

import onnx

from b2s_onnx.errors import B2SError, OpValidationError
from b2s_onnx.lowering import DEFAULT_DOMAINS, LoweringOptions, lower_model

__version__ = "0.1.0"


def lower(
    model: onnx.ModelProto | str | os.PathLike,
    *,
    opset: int | None = None,
    domains: Iterable[str] = DEFAULT_DOMAINS,
    native_depth_to_space: bool | None = None,
    strategy: str = "auto",
    threads: int | None = None,
    fuse: bool = True,
) -> onnx.ModelProto:
    """Returns a copy of ``model`` with every BatchToSpace/SpaceToBatch/DepthToSpace/
    SpaceToDepth node of ``domains`` replaced by standard ONNX ops.

    ``opset`` (13..21) is the target default-domain opset; by default the model's own,
    raised to 13 if older. ``strategy`` ("auto", "direct", "staged") and
    ``native_depth_to_space`` (None: the planner decides) choose how permutations run, for
    sessions with ``threads`` intra-op threads (None: several); every choice computes the
    same bits. ``fuse=False`` turns off the rewrites around the lowering (atrous
    convolutions fused into one dilated Conv, Transpose pairs merged; see
    :mod:`b2s_onnx.rewrites`). ``model`` may be a path, as for :func:`check` and
    :func:`inspect`. Raises :class:`B2SError` for invalid input.
    """
    from b2s_onnx.parity.check import load_onnx

    model = load_onnx(model)
    options = LoweringOptions(
        native_depth_to_space=native_depth_to_space,
        strategy=strategy,
        threads=threads,
        fuse=fuse,
    )
    return lower_model(model, opset=opset, domains=domains, options=options).model


def convert_ir(
    xml_path: str | os.PathLike,
    bin_path: str | os.PathLike | None = None,
    *,
    opset: int = 18,
    keep_unsupported: bool = False,
    domains: Iterable[str] = (),
    fuse: bool = True,
    int8: str = "qdq",
) -> onnx.ModelProto:
    """Converts an OpenVINO IR (v10/v11) to ONNX, lowering the data-movement ops on the way.

    ``bin_path`` defaults to the ``.bin`` beside the ``.xml``. Unsupported layers are an
    error listing them all, unless ``keep_unsupported`` writes them as custom-domain nodes.
    ``fuse=False`` turns off the graph rewrites that choose onnxruntime's fastest forms
    (listed in :mod:`b2s_onnx.rewrites`) and converts a TensorIterator running one recurrent
    cell over time as a Loop instead of one LSTM/GRU/RNN. ``int8`` writes quantized layers
    (FakeQuantize, compressed integer weights) as QuantizeLinear/DequantizeLinear for
    onnxruntime's integer kernels ("qdq", where that is exact) or as float arithmetic
    ("float").
    """
    from b2s_onnx.ir.convert import convert_ir_model

    return convert_ir_model(
        xml_path,
        bin_path,
        opset=opset,
        keep_unsupported=keep_unsupported,
        domains=domains,
        fuse=fuse,
        int8=int8,
    ).model


def inspect(model, domains: Iterable[str] = DEFAULT_DOMAINS):
    """Summarises a model (ONNX ModelProto or path, or an IR .xml): opsets, op counts, I/O,
    and for each custom node whether it is static and what its lowering will be."""
    from b2s_onnx.inspection import inspect as _inspect

    return _inspect(model, tuple(domains))


def __getattr__(name: str):
    # The parity checker pulls in the reference evaluator; import it only when asked for.
    if name in ("check", "CheckResult"):
        from b2s_onnx import parity

        return getattr(parity, name)
    raise AttributeError(name)


__all__ = [
    "DEFAULT_DOMAINS",
    "B2SError",
    "CheckResult",
    "OpValidationError",
    "__version__",
    "check",
    "convert_ir",
    "inspect",
    "lower",
]
