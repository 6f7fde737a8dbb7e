"""OpenVINO op types that no ONNX graph can compute, each with the reason.

Only what cannot be computed belongs here: state kept between inference calls, string
tensors, random streams. An attribute value ONNX lacks is not a reason (the converter
composes it from other ops). The generated list of supported ops shows these reasons, and a
test keeps this registry disjoint from the converter registry.
"""

from __future__ import annotations

_STATE = (
    "keeps a variable between inference calls; an ONNX graph is a pure function of its "
    "inputs, so the state has to live outside the model"
)
_STRINGS = (
    "converts between string tensors and their bytes (begins, ends, symbols); ONNX has "
    "string tensors but no operator that reads or writes their bytes"
)
_RANDOM = (
    "draws from OpenVINO's Philox random stream; ONNX's random operators draw from an "
    "implementation-defined stream, so no ONNX graph reproduces OpenVINO's numbers"
)

#: op type -> why no ONNX graph computes it
INEXPRESSIBLE: dict[str, str] = {
    "Assign": _STATE,
    "ReadValue": _STATE,
    "StringTensorPack": _STRINGS,
    "StringTensorUnpack": _STRINGS,
    "RandomUniform": _RANDOM,
    "Multinomial": _RANDOM,
}


#: op type -> why it has no converter yet, though ONNX could compute it (a known gap, not a
#: limit of ONNX; listed apart so the two are never confused).
NOT_YET: dict[str, str] = {}
