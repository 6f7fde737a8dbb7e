"""``check`` after a fusion that reassociates float sums: the outputs the fused Conv reaches
are compared within the documented tolerance, with the reason in the report; every other
output stays bit for bit; a tolerance the user gives wins."""

from __future__ import annotations

import json

import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper

import b2s_onnx
from b2s_onnx.cli.main import cli
from b2s_onnx.parity.rewrite_tolerance import REASSOCIATION_ATOL, REASSOCIATION_RTOL
from tests.test_atrous_fusion import atrous_model


def two_outputs() -> onnx.ModelProto:
    """The atrous pattern's output ``y``, and ``z`` computed from the input alone."""
    model = atrous_model()
    model.graph.node.append(helper.make_node("Relu", ["x"], ["z"], name="independent"))
    model.graph.output.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, [None] * 4))
    return model


def test_outputs_a_fused_conv_reaches_get_the_stated_tolerance_and_the_rest_stay_exact():
    result = b2s_onnx.check(two_outputs())
    assert result.passed
    outputs = {o.name: o for o in result.outputs}
    assert (outputs["y"].atol, outputs["y"].rtol) == (REASSOCIATION_ATOL, REASSOCIATION_RTOL)
    assert "atrous-convolution at 'b2s'" in outputs["y"].tolerance_reason
    assert (outputs["z"].atol, outputs["z"].rtol) == (0.0, 0.0)
    assert outputs["z"].tolerance_reason == ""


@pytest.mark.parametrize("atol", [1e-3, {"y": 1e-3}, {"*": 1e-3}])
def test_a_tolerance_the_user_gives_is_kept_without_a_reason(atol):
    result = b2s_onnx.check(two_outputs(), atol=atol)
    y = next(o for o in result.outputs if o.name == "y")
    assert (y.atol, y.rtol) == (1e-3, 0.0)
    assert y.tolerance_reason == ""


def test_a_lowering_given_to_check_without_its_rewrites_is_compared_as_the_user_says():
    model = two_outputs()
    lowered = b2s_onnx.lower(model)
    result = b2s_onnx.check(model, lowered=lowered, atol=1e-4, rtol=1e-4)
    assert all(o.tolerance_reason == "" for o in result.outputs)


def test_lower_check_and_check_json_state_the_tolerance_per_output(tmp_path):
    path = tmp_path / "atrous.onnx"
    onnx.save(two_outputs(), path)
    lowered = CliRunner().invoke(
        cli, ["lower", str(path), "-o", str(tmp_path / "out.onnx"), "--check"]
    )
    assert lowered.exit_code == 0, lowered.output
    assert "tolerance: float rounding: atrous-convolution" in lowered.output
    report = tmp_path / "report.json"
    checked = CliRunner().invoke(cli, ["check", str(path), "--json", str(report)])
    assert checked.exit_code == 0, checked.output
    (record,) = json.loads(report.read_text())["models"]
    reasons = {o["name"]: o["tolerance_reason"] for o in record["outputs"]}
    assert reasons["z"] == ""
    assert reasons["y"].startswith("float rounding")


def test_an_explicit_zero_tolerance_insists_on_bit_for_bit():
    result = b2s_onnx.check(two_outputs(), atol={"*": 0.0})
    y = next(o for o in result.outputs if o.name == "y")
    assert (y.atol, y.rtol, y.tolerance_reason) == (0.0, 0.0, "")
