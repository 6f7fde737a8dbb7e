"""Element-wise layers on every element type, against OpenVINO.

onnxruntime's CPU provider lacks kernels for many (op, integer type) pairs; the converters
widen to a type it has and narrow back (``b2s_onnx.ir.converters.kernel_types``). The
kernel table itself is pinned here by building one node per (op, type, opset) and creating
a session. Results are compared with OpenVINO's CPU plugin on values it computes exactly,
and with OpenVINO's core reference (``Node.evaluate``) where the plugin departs from it:
the plugin saturates i8/u8 arithmetic, computes u32/i64/u64 in i32, divides and raises to
powers in f32 and truncates where Divide asks for floor division (each pinned below).
"""

from __future__ import annotations

import math

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import b2s_onnx
from b2s_onnx.graph.versions import required_ir_version
from b2s_onnx.ir.converters.elementwise import ZERO_DIVISOR
from b2s_onnx.ir.converters.kernel_types import (
    KERNELS,
    NAME_OF_TYPE,
    TYPE_NAMES,
    WRONG,
    kernel_types,
)
from b2s_onnx.parity.runtime import run_onnxruntime

ov = pytest.importorskip("openvino")
import openvino.opset1 as o1  # noqa: E402

from tests.openvino_ref import _tensor  # noqa: E402

pytestmark = pytest.mark.openvino

INTEGER_DTYPES = [
    np.int8,
    np.int16,
    np.int32,
    np.int64,
    np.uint8,
    np.uint16,
    np.uint32,
    np.uint64,
]
ONNX_OF = {
    np.dtype(d): TYPE_NAMES[k]
    for k, d in zip(
        ("i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64"), INTEGER_DTYPES, strict=True
    )
}
CONFIG = {"INFERENCE_PRECISION_HINT": "f32"}


def _bounds(dtype) -> tuple[int, int]:
    info = np.iinfo(dtype)
    return int(info.min), int(info.max)


def _wrap(value: int, dtype) -> int:
    low, high = _bounds(dtype)
    return (value - low) % (high - low + 1) + low


def _cvtt(value: float, bits: int) -> int:
    """x86-64's truncating double -> int conversion: out of range or NaN gives the lowest
    value."""
    if np.isnan(value) or not -(2.0 ** (bits - 1)) <= np.trunc(value) < 2.0 ** (bits - 1):
        return -(2 ** (bits - 1))
    return int(np.trunc(value))


def _power(a: int, b: int, dtype) -> int:
    """``static_cast<T>(std::pow(double, double))`` as x86-64 C++ computes it (OpenVINO's
    reference Power, and onnxruntime's int32/int64 Pow; libm's pow is correctly rounded,
    numpy's is not)."""
    try:
        value = math.pow(a, b)
    except OverflowError:
        value = -math.inf if a < 0 and b % 2 else math.inf
    except ValueError:  # 0 ** -k
        value = math.inf
    if dtype == np.uint64:  # values from 2**63 on convert after subtracting 2**63
        if value >= 2.0**63:
            return (_cvtt(value - 2.0**63, 64) % 2**64) ^ 2**63
        return _cvtt(value, 64) % 2**64
    # int64 and uint32 convert through int64, the narrower types through int32.
    through = 64 if dtype in (np.int64, np.uint32) else 32
    return _wrap(_cvtt(value, through), dtype)


def _trunc_div(a: int, b: int) -> int:
    quotient = abs(a) // abs(b)
    return quotient if (a < 0) == (b < 0) else -quotient


# -- the kernel table --------------------------------------------------------------------


#: Inputs of each op in the one-node models (default 2); Where's condition is boolean.
_ARITY = {
    **dict.fromkeys(
        (
            "Abs",
            "Neg",
            "Sign",
            "Not",
            "Relu",
            "Floor",
            "Ceil",
            "Sigmoid",
            "Tanh",
            "Exp",
            "Log",
            "Sqrt",
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
            "Softplus",
            "Softsign",
            "Unique",
            "ReduceSum",
            "ReduceMean",
            "ReduceProd",
            "ReduceL1",
            "ReduceL2",
            "ReduceMax",
            "ReduceMin",
        ),
        1,
    ),
    "Clip": 3,
    "Where": 3,
}
OPSETS = range(13, 22)


def _session_accepts(op: str, elem: int, opset: int) -> bool:
    count = _ARITY.get(op, 2)
    inputs = [helper.make_tensor_value_info(f"x{i}", elem, None) for i in range(count)]
    if op == "Where":
        inputs[0] = helper.make_tensor_value_info("x0", TensorProto.BOOL, None)
    if op == "Pad":  # the pads
        inputs[1] = helper.make_tensor_value_info("x1", TensorProto.INT64, None)
    attrs = {"fmod": int(elem in (TensorProto.FLOAT, TensorProto.DOUBLE))} if op == "Mod" else {}
    node = helper.make_node(op, [i.name for i in inputs], ["y"], **attrs)
    graph = helper.make_graph([node], "g", inputs, [helper.make_empty_tensor_value_info("y")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = required_ir_version(opset)  # as the converter declares it
    options = ort.SessionOptions()
    options.log_severity_level = 4
    try:
        ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    except Exception:
        return False
    return True


@pytest.mark.parametrize("op", sorted(KERNELS))
def test_kernel_table_matches_onnxruntime(op):
    """Every entry of the table, for every type and target opset, is what a session on a
    one-node model accepts: a new onnxruntime that adds or drops a kernel fails here."""
    wrong = []
    for opset in OPSETS:
        table = kernel_types(op, opset)
        for name, elem in TYPE_NAMES.items():
            if _session_accepts(op, elem, opset) != (elem in table):
                wrong.append(f"opset {opset} {name}: table says {elem in table}")
    assert not wrong, wrong


def _run_node(op: str, arrays: list[np.ndarray], elem: int, **attrs) -> np.ndarray:
    """One node at opset 18, run in onnxruntime (Where's first input is boolean)."""
    names = [f"x{i}" for i in range(len(arrays))]
    inputs = [
        helper.make_tensor_value_info(n, TensorProto.BOOL if a.dtype == bool else elem, None)
        for n, a in zip(names, arrays, strict=True)
    ]
    node = helper.make_node(op, names, ["y"], **attrs)
    graph = helper.make_graph([node], "g", inputs, [helper.make_empty_tensor_value_info("y")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = required_ir_version(18)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, dict(zip(names, arrays, strict=True)))[0]


def _bit_edges(dtype) -> list[int]:
    """Every power of two of the type, its neighbours and negations, and the extremes."""
    info = np.iinfo(dtype)
    values = {0, int(info.min), int(info.max)}
    for k in range(info.bits):
        values |= {1 << k, (1 << k) - 1, (1 << k) + 1, -(1 << k), -(1 << k) + 1}
    return sorted(v for v in values if info.min <= v <= info.max)


def _divides(a: int, b: int, dtype) -> bool:
    """Division is defined (no zero divisor, no lowest / -1, which traps)."""
    return b != 0 and (a, b) != (_bounds(dtype)[0], -1)


#: What each kernel should compute on a pair (a, b) of the type; None: not defined there.
_KERNEL_MEANING = {
    "Add": lambda a, b, d: _wrap(a + b, d),
    "Sub": lambda a, b, d: _wrap(a - b, d),
    "Mul": lambda a, b, d: _wrap(a * b, d),
    "Div": lambda a, b, d: _wrap(_trunc_div(a, b), d) if _divides(a, b, d) else None,
    "Mod": lambda a, b, d: a % b if _divides(a, b, d) else None,
    "Pow": lambda a, b, d: _power(a, b, d),
    "Max": lambda a, b, d: max(a, b),
    "Min": lambda a, b, d: min(a, b),
    "Equal": lambda a, b, d: a == b,
    "Less": lambda a, b, d: a < b,
    "Greater": lambda a, b, d: a > b,
    "LessOrEqual": lambda a, b, d: a <= b,
    "GreaterOrEqual": lambda a, b, d: a >= b,
    "Where": lambda a, b, d: a if (a ^ b) & 1 else b,
}
_UNARY_MEANING = {
    "Abs": lambda a, d: _wrap(abs(a), d),
    "Neg": lambda a, d: _wrap(-a, d),
    "Sign": lambda a, d: (a > 0) - (a < 0),
    "Relu": lambda a, d: max(a, 0),
}


def _kernel_is_exact(op: str, elem: int) -> bool:
    dtype = next(d for d, e in ONNX_OF.items() if e == elem)
    values = _bit_edges(dtype)
    if op in _UNARY_MEANING:
        got = _run_node(op, [np.array(values, dtype)], elem)
        return got.tolist() == [_UNARY_MEANING[op](x, dtype) for x in values]
    if op == "Clip":
        low, high = _bounds(dtype)
        for bounds in [(0, high), (low, 0), (1, min(2**31, high))]:
            args = [np.array(values, dtype), *(np.array(v, dtype) for v in bounds)]
            want = [min(max(x, bounds[0]), bounds[1]) for x in values]
            if _run_node(op, args, elem).tolist() != want:
                return False
        return True
    meaning = _KERNEL_MEANING[op]
    pairs = [(x, y % 70 - 5 if op == "Pow" else y) for x in values for y in values]
    pairs = [(x, y) for x, y in pairs if meaning(x, y, dtype) is not None]
    left = np.array([x for x, _ in pairs], dtype)
    right = np.array([y for _, y in pairs], dtype)
    args = [(left ^ right) & 1 == 1, left, right] if op == "Where" else [left, right]
    got = _run_node(op, args, elem, **({"fmod": 0} if op == "Mod" else {}))
    return got.tolist() == [meaning(x, y, dtype) for x, y in pairs]


@pytest.mark.parametrize("op", sorted([*_KERNEL_MEANING, *_UNARY_MEANING, "Clip"]))
def test_integer_kernels_compute_exactly_except_the_wrong_ones(op):
    """Each integer kernel in the table, on every power of two and its neighbours: exact,
    except the ``WRONG`` ones (int64 Max/Min/Clip/Sign/Relu compare 32 bits only). Pow's
    exponents stay small (larger ones only overflow)."""
    for elem in sorted(kernel_types(op, 18) & set(ONNX_OF.values())):
        assert _kernel_is_exact(op, elem) != ((op, elem) in WRONG), (op, NAME_OF_TYPE[elem])


def test_integer_mod_with_fmod_goes_through_double():
    """onnxruntime's Mod(fmod=1) on int64 is inexact beyond 2**53: remainders avoid it."""
    dividend = np.array([2**53 + 1], np.int64)
    got = _run_node("Mod", [dividend, np.array([2], np.int64)], TensorProto.INT64, fmod=1)
    assert got.tolist() == [0]  # the remainder is 1


# -- layers against OpenVINO -------------------------------------------------------------


def _divide(python: bool):
    def build(a, b):
        node = o1.divide(a, b)
        node.set_attribute("m_pythondiv", python)
        return node

    return build


BINARY = {
    "Add": o1.add,
    "Subtract": o1.subtract,
    "Multiply": o1.multiply,
    "Maximum": o1.maximum,
    "Minimum": o1.minimum,
    "SquaredDifference": o1.squared_difference,
    "Power": o1.power,
    "Divide-floor": _divide(True),
    "Divide-trunc": _divide(False),
    "Mod": o1.mod,
    "FloorMod": o1.floor_mod,
    "Equal": o1.equal,
    "NotEqual": o1.not_equal,
    "Less": o1.less,
    "Greater": o1.greater,
    "LessEqual": o1.less_equal,
    "GreaterEqual": o1.greater_equal,
}
UNARY = {
    "Abs": o1.abs,
    "Negative": o1.negative,
    "Sign": o1.sign,
    "ReLU": o1.relu,
    "Floor": o1.floor,
    "Ceiling": o1.ceiling,
    "Clamp": lambda a: o1.clamp(a, -3.5, 100.2),
}
COVERED_LAYERS = {
    *(
        (name.split("-")[0], "opset1")
        for name in [*BINARY, *UNARY, "Select", "PReLU", "Convolution"]
    ),
}
DIVISIONS = ("Divide-floor", "Divide-trunc", "Mod", "FloorMod")


def expected(op: str, a: int, b: int, dtype):
    """OpenVINO's semantics for one pair of values (Python integers, no overflow)."""
    zero = ZERO_DIVISOR[ONNX_OF[np.dtype(dtype)]]
    if op in DIVISIONS and b == 0:
        return zero
    table = {
        "Add": lambda: _wrap(a + b, dtype),
        "Subtract": lambda: _wrap(a - b, dtype),
        "Multiply": lambda: _wrap(a * b, dtype),
        "Maximum": lambda: max(a, b),
        "Minimum": lambda: min(a, b),
        "SquaredDifference": lambda: _wrap((a - b) ** 2, dtype),
        "Power": lambda: _power(a, b, dtype),
        "Divide-floor": lambda: _wrap(a // b, dtype),
        "Divide-trunc": lambda: _wrap(_trunc_div(a, b), dtype),
        "Mod": lambda: a - b * _trunc_div(a, b),
        "FloorMod": lambda: a % b,
        "Equal": lambda: a == b,
        "NotEqual": lambda: a != b,
        "Less": lambda: a < b,
        "Greater": lambda: a > b,
        "LessEqual": lambda: a <= b,
        "GreaterEqual": lambda: a >= b,
    }
    return table[op]()


def _edges(dtype) -> list[int]:
    low, high = _bounds(dtype)
    values = {low, low + 1, -100, -9, -7, -3, -2, -1, 0, 1, 2, 3, 5, 7, 8, 31, 32, 100}
    # 2**31 and 2**32 - 2 catch a 32-bit comparison, 2**53 + 1 a trip through double.
    values |= {1 << 20, 1 << 31, (1 << 32) - 2, -(1 << 31) - 1, (1 << 53) + 1, high - 1, high}
    return sorted(v for v in values if low <= v <= high)


def _pairs(values: list[int]) -> tuple[list[int], list[int]]:
    return [a for a in values for _ in values], [b for _ in values for b in values]


def _convert(tmp_path, build, dtypes, size: int = -1, opset: int = 18):
    """Saves ``build`` on 1-D parameters of ``size`` elements (-1: dynamic) and converts
    it. Use static sizes to compare with the plugin: with dynamic ones its i8 Divide
    rounds to nearest instead of truncating."""
    params = [o1.parameter([size], d, name=f"in{i}") for i, d in enumerate(dtypes)]
    model = ov.Model([build(*params).output(0)], params)
    xml = tmp_path / f"model{size}.xml"
    ov.save_model(model, xml, compress_to_fp16=False)
    converted = b2s_onnx.convert_ir(xml, opset=opset)
    return xml, converted


def _ours(converted, arrays) -> np.ndarray:
    (result,) = run_onnxruntime(converted, {f"in{i}": a for i, a in enumerate(arrays)}).values()
    return result


def _plugin(xml, arrays) -> np.ndarray:
    compiled = ov.Core().compile_model(ov.Core().read_model(xml), "CPU", CONFIG)
    return np.asarray(compiled({f"in{i}": a for i, a in enumerate(arrays)})[0])


def _reference(build, arrays) -> np.ndarray | None:
    """OpenVINO's core reference (``Node.evaluate``); None where it has none for the type."""
    node = build(*(o1.parameter([a.size], a.dtype) for a in arrays))
    out = ov.Tensor(node.get_output_element_type(0), [arrays[0].size])
    if not node.evaluate([out], [_tensor(a) for a in arrays]):
        return None
    return np.array(out.data)


def _small(dtype) -> list[int]:
    low, high = _bounds(dtype)
    return [v for v in range(-12, 25) if low <= v <= high]


def _plugin_keeps(op: str, a: int, b: int, dtype) -> bool:
    """Pairs OpenVINO's CPU plugin computes exactly: small operands whose exact result (and
    its intermediate negation, for Subtract) fits the type and f32's integers; the plugin
    truncates where Divide floors, gives 0 ** -k an INT32_MIN it then saturates, and its
    i8/u8 SquaredDifference is wrong (zeros, or other values from run to run)."""
    low, high = _bounds(dtype)
    low, high = max(low, -(2**24)), min(high, 2**24)
    if op in DIVISIONS and b == 0:
        return False
    if op == "SquaredDifference" and dtype in (np.int8, np.uint8):
        return False
    if op == "Divide-floor" and a % b != 0 and (a < 0) != (b < 0):
        return False
    if op == "Power" and ((b < 0 and a == 0) or b > 24):
        return False
    if op == "Subtract" and not low <= -b <= high:
        return False
    result = expected(op, a, b, dtype)
    exact = {"Add": a + b, "Subtract": a - b, "Multiply": a * b, "SquaredDifference": (a - b) ** 2}
    if op == "Power" and b >= 0:
        exact["Power"] = a**b
    return low <= exact.get(op, int(result)) <= high


@pytest.mark.parametrize("dtype", INTEGER_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("op", sorted(BINARY))
def test_binary_layer_matches_openvino(tmp_path, op, dtype):
    """Small values against the CPU plugin; every edge value (extremes, overflow, zero
    divisors) against OpenVINO's semantics and, where it has one, its core reference."""
    build = BINARY[op]
    a, b = _pairs(_small(dtype))
    kept = [(x, y) for x, y in zip(a, b, strict=True) if _plugin_keeps(op, x, y, dtype)]
    small = [np.array(column, dtype) for column in zip(*kept, strict=True)]
    if kept:
        xml, converted = _convert(tmp_path, build, [dtype, dtype], len(kept))
        assert _ours(converted, small).tolist() == _plugin(xml, small).tolist()

    a, b = _pairs(_edges(dtype))
    edges = [np.array(a, dtype), np.array(b, dtype)]
    ours = _ours(_convert(tmp_path, build, [dtype, dtype])[1], edges)
    want = [expected(op, x, y, dtype) for x, y in zip(a, b, strict=True)]
    assert ours.tolist() == want
    if op in DIVISIONS:  # the reference throws on these, or traps (lowest / -1)
        low = _bounds(dtype)[0]
        keep = [y != 0 and not (x == low and y == -1) for x, y in zip(a, b, strict=True)]
        if op == "FloorMod":  # its reference computes in double: exact below 2**53 only
            small = [abs(x) < 2**53 and abs(y) < 2**53 for x, y in zip(a, b, strict=True)]
            keep = [k and s for k, s in zip(keep, small, strict=True)]
        edges, ours = [e[keep] for e in edges], ours[keep]
    reference = _reference(build, edges)
    if reference is not None:
        assert ours.tolist() == reference.tolist()


@pytest.mark.parametrize("dtype", INTEGER_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("op", DIVISIONS)
def test_integer_division_by_zero_outputs_what_the_cpu_plugin_does(tmp_path, op, dtype):
    """OpenVINO's reference throws on an integer division by zero and onnxruntime fails
    (or traps); the converted model outputs the plugin's value and runs on."""
    values = _edges(dtype)
    xml, converted = _convert(tmp_path, BINARY[op], [dtype, dtype], len(values))
    feeds = [np.array(values, dtype), np.zeros(len(values), dtype)]
    plugin = _plugin(xml, feeds)
    assert _ours(converted, feeds).tolist() == plugin.tolist()
    assert set(plugin.tolist()) == {ZERO_DIVISOR[ONNX_OF[np.dtype(dtype)]]}


@pytest.mark.parametrize("dtype", [np.int32, np.int64], ids=["int32", "int64"])
def test_lowest_value_divided_by_minus_one_wraps(tmp_path, dtype):
    """onnxruntime's int32/int64 Div and Mod trap on MIN / -1 (its reference too); the
    quotient wraps to MIN and both remainders are 0. The plugin agrees for int32."""
    low = _bounds(dtype)[0]
    feeds = [np.array([low, low, 7], dtype), np.array([-1, -1, -1], dtype)]
    for op, want in [("Divide-floor", low), ("Divide-trunc", low), ("Mod", 0), ("FloorMod", 0)]:
        xml, converted = _convert(tmp_path, BINARY[op], [dtype, dtype], 3)
        ours = _ours(converted, feeds)
        assert ours.tolist() == [want, want, -7 if want else 0]
        if dtype == np.int32:
            assert ours.tolist() == _plugin(xml, feeds).tolist()


def test_plugin_departures_from_the_reference_are_pinned(tmp_path):
    """Where the CPU plugin computes integers in f32 or i32 it departs from OpenVINO's
    reference, which the converter follows: it saturates i8/u8 arithmetic (the reference
    wraps), compares u32 as i32, divides i32 in f32, and truncates a floor Divide."""
    cases = [
        ("Add", np.uint8, [200], [100], [44], [255]),
        ("Add", np.int8, [100], [100], [-56], [127]),
        ("Multiply", np.uint8, [16], [17], [16], [255]),
        ("Power", np.uint8, [2], [8], [0], [255]),
        ("Maximum", np.uint32, [0], [2**32 - 2], [2**32 - 2], [0]),
        ("Divide-trunc", np.int32, [-(2**31)], [-7], [306783378], [306783392]),
        ("Divide-floor", np.int32, [-7], [2], [-4], [-3]),
    ]
    for op, dtype, a, b, ours_want, plugin_want in cases:
        xml, converted = _convert(tmp_path, BINARY[op], [dtype, dtype], len(a))
        feeds = [np.array(a, dtype), np.array(b, dtype)]
        assert _ours(converted, feeds).tolist() == ours_want, op
        assert _plugin(xml, feeds).tolist() == plugin_want, op
        reference = _reference(BINARY[op], feeds)
        assert reference is None or reference.tolist() == ours_want, op
    # With a dynamic shape, the plugin's i8 Divide rounds to nearest (12 / 7 = 2).
    xml, converted = _convert(tmp_path, BINARY["Divide-trunc"], [np.int8, np.int8])
    feeds = [np.array([12, 7], np.int8), np.array([7, 2], np.int8)]
    assert _ours(converted, feeds).tolist() == [1, 3]
    assert _plugin(xml, feeds).tolist() == [2, 4]


def _unary_expected(op: str, x: int, dtype):
    low = _bounds(dtype)[0]
    return {
        "Abs": lambda: _wrap(abs(x), dtype),
        "Negative": lambda: _wrap(-x, dtype),
        "Sign": lambda: (x > 0) - (x < 0),
        "ReLU": lambda: max(x, 0),
        "Floor": lambda: x,
        "Ceiling": lambda: x,
        "Clamp": lambda: min(max(x, max(-3, low)), 100),
    }[op]()


@pytest.mark.parametrize("dtype", INTEGER_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("op", sorted(UNARY))
def test_unary_layer_matches_openvino(tmp_path, op, dtype):
    """Small values against the CPU plugin (which refuses Negative on unsigned types: that
    wraps, as the reference's ``-x`` does), edge values against the reference semantics."""
    small = [np.array(_small(dtype), dtype)]
    xml, converted = _convert(tmp_path, UNARY[op], [dtype], small[0].size)
    if not (op == "Negative" and dtype in (np.uint8, np.uint16, np.uint32, np.uint64)):
        assert _ours(converted, small).tolist() == _plugin(xml, small).tolist()
    values = _edges(dtype)
    ours = _ours(_convert(tmp_path, UNARY[op], [dtype])[1], [np.array(values, dtype)])
    assert ours.tolist() == [_unary_expected(op, x, dtype) for x in values]
    reference = _reference(UNARY[op], [np.array(values, dtype)])
    if reference is not None:
        assert ours.tolist() == reference.tolist()


@pytest.mark.parametrize("dtype", [*INTEGER_DTYPES, np.bool_], ids=lambda d: np.dtype(d).name)
def test_select_moves_every_value(tmp_path, dtype):
    """Where has no int16/uint16/uint64/bool kernel: it selects in a type as wide. (The
    plugin keeps the low 32 bits of 64-bit values only: compared where it keeps them.)"""
    values = [True, False, True] if dtype == np.bool_ else [_bounds(dtype)[1], 0, 1]
    others = [False, True, False] if dtype == np.bool_ else [_bounds(dtype)[0], 5, 2]
    if dtype in (np.int64, np.uint64):
        values[0], others[0] = _bounds(np.int32)[1], max(_bounds(np.int32)[0], _bounds(dtype)[0])
    params = [
        o1.parameter([3], np.bool_, name="in0"),
        o1.parameter([3], dtype, name="in1"),
        o1.parameter([3], dtype, name="in2"),
    ]
    model = ov.Model([o1.select(*params).output(0)], params)
    xml = tmp_path / "model.xml"
    ov.save_model(model, xml, compress_to_fp16=False)
    converted = b2s_onnx.convert_ir(xml)
    feeds = [np.array([True, False, False]), np.array(values, dtype), np.array(others, dtype)]
    ours = _ours(converted, feeds)
    assert ours.tolist() == [values[0], others[1], others[2]]
    assert ours.tolist() == _plugin(xml, feeds).tolist()


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.int64], ids=str)
def test_integer_prelu_matches_openvino(tmp_path, dtype):
    xml, converted = _convert(tmp_path, lambda a, s: o1.prelu(a, s), [dtype, dtype], 5)
    feeds = [np.array([-5, -1, 0, 3, 7], dtype), np.array([2, 3, 4, 5, 6], dtype)]
    ours = _ours(converted, feeds)
    assert ours.tolist() == [-10, -3, 0, 3, 7]
    assert ours.tolist() == _plugin(xml, feeds).tolist()


@pytest.mark.parametrize("op", ["Add", "Subtract", "Multiply", "Divide-floor", "Maximum"])
def test_int8_arithmetic_at_opset_13_widens(tmp_path, op):
    """onnxruntime has int8 Add/Sub/Mul/Div kernels from opset 14 on only."""
    dtype = np.int8
    _, converted = _convert(tmp_path, BINARY[op], [dtype, dtype], opset=13)
    assert converted.opset_import[0].version == 13
    a, b = _pairs(_edges(dtype))
    ours = _ours(converted, [np.array(a, dtype), np.array(b, dtype)])
    assert ours.tolist() == [expected(op, x, y, dtype) for x, y in zip(a, b, strict=True)]


def test_float_only_layers_refuse_integers(tmp_path):
    """Exp on integers has no onnxruntime kernel, and OpenVINO's plugin and reference round
    the result differently (exp(1) is 3 in one, 2 in the other): refused, naming the layer."""
    with pytest.raises(b2s_onnx.B2SError, match=r"Exp.*element type i32 is not supported"):
        _convert(tmp_path, o1.exp, [np.int32])


def test_clamp_bounds_beyond_the_type_clamp_nothing(tmp_path):
    xml, converted = _convert(tmp_path, lambda a: o1.clamp(a, -300.0, 1e10), [np.uint8], 4)
    feeds = [np.array([0, 1, 200, 255], np.uint8)]
    ours = _ours(converted, feeds)
    assert ours.tolist() == [0, 1, 200, 255] == _plugin(xml, feeds).tolist()


# -- integer Convolution ----------------------------------------------------------------

#: (data shape, weights shape, strides, pads_begin, pads_end, dilations, auto_pad)
CONVOLUTIONS = {
    "2d-padded": ([1, 2, 5, 5], [3, 2, 3, 3], [1, 1], [1, 1], [1, 1], [1, 1], "explicit"),
    "2d-strided-dilated": ([2, 2, 7, 6], [2, 2, 2, 3], [2, 1], [0, 2], [1, 0], [2, 2], "explicit"),
    "2d-same-upper": ([1, 1, 5, 4], [2, 1, 2, 3], [2, 2], [0, 0], [0, 0], [1, 1], "same_upper"),
    "2d-same-lower": ([1, 1, 5, 4], [2, 1, 2, 3], [1, 2], [0, 0], [0, 0], [2, 1], "same_lower"),
    "2d-valid": ([1, 3, 4, 4], [1, 3, 2, 2], [1, 1], [3, 3], [3, 3], [1, 1], "valid"),
    "1d": ([1, 2, 9], [2, 2, 3], [2], [1], [2], [1], "explicit"),
    "3d": (
        [1, 1, 3, 4, 3],
        [2, 1, 2, 2, 2],
        [1, 1, 1],
        [0, 1, 0],
        [1, 0, 0],
        [1, 1, 1],
        "explicit",
    ),
}


def _conv_reference(data, weights, strides, dilations, begins, ends) -> np.ndarray:
    """Exact integer sums of products (Python integers), by direct loops."""
    spatial = data.ndim - 2
    pad = [(0, 0), (0, 0), *zip(begins, ends, strict=True)]
    padded = np.pad(data.astype(object), pad)
    kernel = weights.shape[2:]
    sizes = [
        (padded.shape[2 + i] - (kernel[i] - 1) * dilations[i] - 1) // strides[i] + 1
        for i in range(spatial)
    ]
    out = np.zeros([data.shape[0], weights.shape[0], *sizes], object)
    for n, co, *position in np.ndindex(*out.shape):
        total = 0
        for c, *tap in np.ndindex(*weights.shape[1:]):
            where = [
                p * s + t * d for p, s, t, d in zip(position, strides, tap, dilations, strict=True)
            ]
            total += int(padded[(n, c, *where)]) * int(weights[(co, c, *tap)])
        out[(n, co, *position)] = total
    return out


def _same_pads(sizes, kernel, strides, dilations, upper: bool):
    begins, ends = [], []
    for size, k, s, d in zip(sizes, kernel, strides, dilations, strict=True):
        total = max(0, (-(-size // s) - 1) * s + (k - 1) * d + 1 - size)
        begins.append(total // 2 if upper else total - total // 2)
        ends.append(total - begins[-1])
    return begins, ends


def _convolution_case(name: str):
    data_shape, weights_shape, strides, begins, ends, dilations, auto_pad = CONVOLUTIONS[name]
    if auto_pad == "valid":
        begins, ends = [0] * len(strides), [0] * len(strides)
    elif auto_pad.startswith("same"):
        begins, ends = _same_pads(
            data_shape[2:], weights_shape[2:], strides, dilations, auto_pad == "same_upper"
        )
    return data_shape, weights_shape, strides, begins, ends, dilations, auto_pad


def _build_convolution(tmp_path, name, dtype, weights=None):
    """The convolution on a data parameter and constant ``weights`` (or a weights
    parameter when None)."""
    data_shape, weights_shape, strides, _, _, dilations, auto_pad = CONVOLUTIONS[name]
    params = [o1.parameter(data_shape, dtype, name="in0")]
    if weights is None:
        params.append(o1.parameter(weights_shape, dtype, name="in1"))
        filters = params[1]
    else:
        filters = o1.constant(weights)
    pads = [CONVOLUTIONS[name][3], CONVOLUTIONS[name][4]]
    node = o1.convolution(params[0], filters, strides, *pads, dilations, auto_pad)
    xml = tmp_path / f"conv{weights is None}.xml"
    ov.save_model(ov.Model([node.output(0)], params), xml, compress_to_fp16=False)
    return xml, b2s_onnx.convert_ir(xml)


def _conv_values(shape, dtype, rng, signed_low: int, high: int) -> np.ndarray:
    low = signed_low if np.issubdtype(dtype, np.signedinteger) else 0
    return rng.integers(low, high + 1, shape).astype(dtype)


@pytest.mark.parametrize("dtype", INTEGER_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("name", sorted(CONVOLUTIONS))
def test_integer_convolution_matches_openvino(tmp_path, name, dtype):
    """ONNX's Conv is float only: integers convolve as im2col and an integer MatMul, exact.
    Against the plugin on values whose sums fit the type (and f32), with constant and
    run-time weights."""
    data_shape, weights_shape, strides, begins, ends, dilations, _ = _convolution_case(name)
    rng = np.random.default_rng(3)
    data = _conv_values(data_shape, dtype, rng, -1, 1)
    weights = _conv_values(weights_shape, dtype, rng, -1, 2)
    want = _conv_reference(data, weights, strides, dilations, begins, ends)
    for constant in (True, False):
        xml, converted = _build_convolution(tmp_path, name, dtype, weights if constant else None)
        feeds = [data] if constant else [data, weights]
        ours = run_onnxruntime(converted, {f"in{i}": f for i, f in enumerate(feeds)})
        (ours,) = ours.values()
        assert ours.dtype == dtype
        assert ours.tolist() == want.tolist()
        assert ours.tolist() == _plugin(xml, feeds).tolist()


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint32, np.int8], ids=str)
def test_integer_convolution_is_exact_beyond_f32(tmp_path, dtype):
    """Large values: the sums wrap modulo 2**bits as integer arithmetic does (the CPU
    plugin computes in f32 and rounds, pinned for int32)."""
    name = "2d-strided-dilated"
    data_shape, weights_shape, strides, begins, ends, dilations, _ = _convolution_case(name)
    rng = np.random.default_rng(5)
    low, high = _bounds(dtype)
    data = rng.integers(low, high, data_shape, dtype=dtype, endpoint=True)
    weights = rng.integers(low, high, weights_shape, dtype=dtype, endpoint=True)
    _, converted = _build_convolution(tmp_path, name, dtype, weights)
    (ours,) = run_onnxruntime(converted, {"in0": data}).values()
    exact = _conv_reference(data, weights, strides, dilations, begins, ends)
    wrapped = np.frompyfunc(lambda v: _wrap(v, dtype), 1, 1)(exact)
    assert ours.tolist() == wrapped.tolist()
    if dtype == np.int32:  # sums above 2**24 (within int32): the plugin rounds them
        data, weights = data % 4096, weights % 4096
        xml, converted = _build_convolution(tmp_path, name, dtype, weights)
        (ours,) = run_onnxruntime(converted, {"in0": data}).values()
        exact = _conv_reference(data, weights, strides, dilations, begins, ends)
        assert ours.tolist() == exact.tolist()
        plugin = _plugin(xml, [data])
        assert ours.tolist() != plugin.tolist()
        assert np.abs(ours.astype(np.int64) - plugin).max() <= 2**8


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64, np.uint8], ids=str)
@pytest.mark.parametrize("divisor", [[3], [-3], [7, -2, 0, -1]], ids=str)
@pytest.mark.parametrize("op", DIVISIONS)
def test_constant_divisors(tmp_path, op, divisor, dtype):
    """A constant divisor skips the guards it does not need (a positive or negative one
    fixes floor division by the remainder's sign alone); results as with run-time ones."""
    low, high = _bounds(dtype)
    divisor = [d for d in divisor if low <= d <= high] or [5]
    values = _edges(dtype)
    constant = o1.constant(np.array(divisor * len(values), dtype))
    _, converted = _convert(
        tmp_path, lambda a: BINARY[op](a, constant), [dtype], len(values) * len(divisor)
    )
    data = np.repeat(np.array(values, dtype), len(divisor))
    ours = _ours(converted, [data])
    pairs = zip(data.tolist(), divisor * len(values), strict=True)
    assert ours.tolist() == [expected(op, a, b, dtype) for a, b in pairs]
    guards = {n.op_type for n in converted.graph.node} & {"Where", "Xor"}
    assert bool(guards) == (0 in divisor or (-1 in divisor and dtype in (np.int32, np.int64)))
