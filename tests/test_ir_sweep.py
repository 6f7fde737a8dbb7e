"""A fixed, representative slice of the IR sweep (benchmarks/ir_sweep.py): ONNX node test
models from the onnx package, converted to IR by OpenVINO's own frontend, converted back by
us, and compared with OpenVINO's CPU plugin on the test cases' own inputs. The full sweep is
``python -m benchmarks.ir_sweep``; this subset keeps the commonest layers of real models."""

from __future__ import annotations

import pytest

pytest.importorskip("openvino")

from benchmarks import ir_sweep

pytestmark = pytest.mark.openvino

#: One or two node cases per layer type that real models use most, plus the forms the sweep
#: found broken before (AvgPool-16, Identity-16, NonZero-3, constant outputs).
CASES = (
    "test_conv_with_strides_padding",
    "test_conv_with_autopad_same",
    "test_convtranspose",
    "test_maxpool_2d_pads",
    "test_maxpool_2d_ceil",
    "test_averagepool_2d_pads",
    "test_averagepool_2d_ceil",
    "test_averagepool_2d_precomputed_same_upper",
    "test_globalaveragepool",
    "test_relu",
    "test_leakyrelu",
    "test_prelu_broadcast",
    "test_sigmoid",
    "test_tanh",
    "test_softmax_axis_1",
    "test_logsoftmax_axis_1",
    "test_gemm_default_matrix_bias",
    "test_matmul_3d",
    "test_add_bcast",
    "test_mul_bcast",
    "test_batchnorm_epsilon",
    "test_instancenorm_example",
    "test_layer_normalization_2d_axis1",
    "test_lrn",
    "test_concat_2d_axis_1",
    "test_reshape_reordered_all_dims",
    "test_transpose_all_permutations_2",
    "test_flatten_axis1",
    "test_squeeze",
    "test_slice",
    "test_gather_1",
    "test_split_equal_parts_2d",
    "test_constant_pad",
    "test_clip",
    "test_depthtospace_crd_mode_example",
    "test_spacetodepth",
    "test_resize_upsample_scales_nearest",
    "test_identity",
    "test_nonzero_example",
    "test_compress_0",
    "test_cumsum_2d_axis_1",
    "test_lstm_defaults",
    "test_gru_defaults",
)


@pytest.fixture(scope="module")
def cases():
    wanted = set(CASES)
    found = {case.name: case for case in ir_sweep.node_cases() if case.name in wanted}
    assert set(found) == wanted, f"missing node cases: {sorted(wanted - set(found))}"
    return found


@pytest.mark.parametrize("name", CASES)
def test_openvino_converted_node_model_matches(tmp_path, cases, name):
    outcome = ir_sweep.run_case(cases[name], tmp_path, compress=False)
    assert outcome is not None, "OpenVINO no longer converts this case"
    assert outcome.outcome == "matched", f"{outcome.outcome}: {outcome.detail}"
