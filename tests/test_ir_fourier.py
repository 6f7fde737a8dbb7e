"""DFT, IDFT, RDFT and IRDFT against OpenVINO's CPU plugin."""

from __future__ import annotations

import numpy as np
import pytest

import b2s_onnx
from b2s_onnx.parity.runtime import run_onnxruntime
from tests.test_ir_ops import assert_close, run_both

ov = pytest.importorskip("openvino")
import openvino.opset1 as o1  # noqa: E402
import openvino.opset7 as o7  # noqa: E402
import openvino.opset9 as o9  # noqa: E402
import openvino.opset15 as o15  # noqa: E402
import openvino.opset16 as o16  # noqa: E402

pytestmark = pytest.mark.openvino

F32, I64 = np.float32, np.int64

COVERED_LAYERS = {
    ("DFT", "opset7"),
    ("STFT", "opset15"),
    ("ISTFT", "opset16"),
    ("IDFT", "opset7"),
    ("RDFT", "opset9"),
    ("IRDFT", "opset9"),
}


def c(values, dtype=I64):
    return o1.constant(np.asarray(values, dtype))


COMPLEX_CASES = [
    # (shape with the trailing 2, axes, signal sizes)
    ([2, 8, 2], [1], None),
    ([3, 4, 5, 2], [0, 2], None),
    ([2, 6, 2], [-1], [4]),
    ([2, 5, 2], [1], [9]),
    ([4, 3, 2], [1, 0], [-1, 6]),
]


@pytest.mark.parametrize(("shape", "axes", "sizes"), COMPLEX_CASES)
@pytest.mark.parametrize("make", [o7.dft, o7.idft], ids=["DFT", "IDFT"])
def test_complex_transforms_match_openvino(tmp_path, shape, axes, sizes, make):
    pairs, _ = run_both(
        tmp_path,
        lambda a: make(a, c(axes), None if sizes is None else c(sizes)),
        [shape],
    )
    assert_close(pairs, atol=2e-5, rtol=1e-4)


REAL_CASES = [
    ([2, 8], [1], None),
    ([3, 4, 5], [0, 2], None),
    ([2, 9], [-1], [6]),
    ([2, 6, 3], [2, 1], [2, 4]),
]


@pytest.mark.parametrize(("shape", "axes", "sizes"), REAL_CASES)
def test_rdft_matches_openvino(tmp_path, shape, axes, sizes):
    pairs, _ = run_both(
        tmp_path, lambda a: o9.rdft(a, c(axes), None if sizes is None else c(sizes)), [shape]
    )
    assert_close(pairs, atol=2e-5, rtol=1e-4)


HALF_CASES = [
    ([2, 5, 2], [1], None),
    ([3, 4, 3, 2], [0, 2], None),
    ([2, 5, 2], [1], [7]),
    ([2, 5, 2], [1], [4]),
    ([2, 6, 2], [-1], [5]),
]


@pytest.mark.parametrize(("shape", "axes", "sizes"), HALF_CASES)
def test_irdft_matches_openvino(tmp_path, shape, axes, sizes):
    pairs, _ = run_both(
        tmp_path, lambda a: o9.irdft(a, c(axes), None if sizes is None else c(sizes)), [shape]
    )
    assert_close(pairs, atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize(
    ("make", "reference", "shape", "size"),
    [
        (o9.rdft, lambda x, n: np.fft.rfft(x, n=n, axis=-1), [2, 5], 9),
        (
            o9.irdft,
            lambda x, n: np.fft.irfft(x[..., 0] + 1j * x[..., 1], n=n, axis=-1),
            [2, 4, 2],
            12,
        ),
    ],
    ids=["RDFT", "IRDFT"],
)
def test_zero_padded_real_transforms_match_numpy(tmp_path, make, reference, shape, size):
    """Signal sizes beyond the input: the CPU plugin refuses RDFT's and gets IRDFT's first
    row wrong (plugin defects); numpy's transforms are the reference."""
    data = np.random.default_rng(4).standard_normal(shape).astype(F32)
    param = o1.parameter(shape, F32, name="x")
    xml = tmp_path / "m.xml"
    ov.save_model(ov.Model([make(param, c([-1]), c([size]))], [param]), xml)
    (ours,) = run_onnxruntime(b2s_onnx.convert_ir(xml), {"x": data}).values()
    expected = reference(data.astype(np.float64), size)
    if np.iscomplexobj(expected):
        expected = np.stack([expected.real, expected.imag], axis=-1)
    np.testing.assert_allclose(ours, expected, atol=2e-5)


def test_dft_of_a_repeated_axis_is_refused(tmp_path):
    param = o1.parameter([4, 4, 2], F32, name="x")
    xml = tmp_path / "m.xml"
    ov.save_model(ov.Model([o7.dft(param, c([0, 1]))], [param]), xml)
    weights = xml.with_suffix(".bin")
    one = np.asarray([0, 1], I64).tobytes()
    assert weights.read_bytes().count(one) == 1
    weights.write_bytes(weights.read_bytes().replace(one, np.asarray([1, -1], I64).tobytes()))
    with pytest.raises(b2s_onnx.B2SError, match="repeats an axis"):
        b2s_onnx.convert_ir(xml)


@pytest.mark.parametrize("transpose", [False, True])
@pytest.mark.parametrize(
    ("shape", "window", "size", "step"),
    [([16], 8, 8, 4), ([2, 20], 5, 8, 3), ([1, 12], 6, 6, 6)],
)
def test_stft_matches_openvino(tmp_path, transpose, shape, window, size, step):
    hann = np.hanning(window).astype(F32)
    pairs, _ = run_both(
        tmp_path,
        lambda a: o15.stft(a, o1.constant(hann), c(size), c(step), transpose),
        [shape],
    )
    assert_close(pairs, atol=2e-5, rtol=1e-4)


ISTFT_CASES = [
    # (signal shape, window length, frame size, step, signal_length)
    ([20], 8, 8, 3, None),
    ([2, 21], 6, 8, 2, None),
    ([1, 16], 8, 8, 4, 13),
    ([1, 16], 8, 8, 4, 30),
]


@pytest.mark.parametrize("center", [False, True])
@pytest.mark.parametrize("normalized", [False, True])
@pytest.mark.parametrize(("shape", "window", "size", "step", "length"), ISTFT_CASES)
def test_istft_matches_openvino(tmp_path, center, normalized, shape, window, size, step, length):
    """The spectrum comes from STFT of the input, as ISTFT is used in practice."""
    hann = (np.hanning(window) + 0.1).astype(F32)

    def build(a):
        spectrum = o15.stft(a, o1.constant(hann), c(size), c(step), True)
        extra = None if length is None else c(length)
        return o16.istft(spectrum, o1.constant(hann), c(size), c(step), center, normalized, extra)

    pairs, _ = run_both(tmp_path, build, [shape])
    assert_close(pairs, atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("center", [False, True])
def test_istft_of_any_spectrum_with_a_zero_ended_window(tmp_path, center):
    """Where the overlapped squared window is zero (the ends of a Hann window) the sum is
    left undivided, as OpenVINO does."""
    hann = np.hanning(8).astype(F32)
    pairs, _ = run_both(
        tmp_path,
        lambda s: o16.istft(s, o1.constant(hann), c(8), c(3), center, False),
        [[5, 7, 2]],
    )
    assert_close(pairs, atol=2e-5, rtol=1e-4)
