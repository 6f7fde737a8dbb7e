"""End-to-end: the installed ``b2s-onnx`` console script, run as users and CI run it."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest

import b2s_onnx
from b2s_onnx.builders import RUNTIME, single_op_model

INDEX = {"block_shape": [1, 2, 2, 1], "crops_begin": [0, 1, 0, 0], "crops_end": [0, 0, 1, 0]}
EXE = shutil.which("b2s-onnx") or str(Path(sys.executable).with_name("b2s-onnx"))


def run(*args: str | Path) -> subprocess.CompletedProcess:
    return subprocess.run([EXE, *map(str, args)], capture_output=True, text=True, timeout=120)


@pytest.fixture
def model_file(tmp_path) -> Path:
    path = tmp_path / "b2s.onnx"
    onnx.save(single_op_model("BatchToSpace", ["N", 3, 4, 2], index=INDEX, node_name="b2s"), path)
    return path


def test_lower_writes_a_model_onnxruntime_runs(model_file, tmp_path):
    out = tmp_path / "out.onnx"
    result = run("lower", model_file, "-o", out, "-v")
    assert result.returncode == 0, result.stderr
    assert "BatchToSpace 'b2s'" in result.stdout
    assert "org.openvinotoolkit::BatchToSpace" in result.stdout  # the before/after table
    session = onnxruntime.InferenceSession(str(out))
    (y,) = session.run(None, {"data": np.zeros((8, 3, 4, 2), np.float32)})
    assert y.shape == (2, 5, 7, 2)


def test_lower_with_check_passes_and_exits_0(model_file, tmp_path):
    result = run("lower", model_file, "-o", tmp_path / "out.onnx", "--check")
    assert result.returncode == 0, result.stderr
    assert "parity PASS" in result.stdout


def test_check_writes_a_json_report(model_file, tmp_path):
    report = tmp_path / "report.json"
    result = run("check", model_file, "--json", report, "--seed", "3", "--dim", "N=12")
    assert result.returncode == 0, result.stderr
    body = json.loads(report.read_text())
    assert body["passed"] is True
    assert body["exit_code"] == 0
    assert body["version"] == b2s_onnx.__version__
    (record,) = body["models"]
    assert record["status"] == "pass"
    assert record["sha256"] == hashlib.sha256(model_file.read_bytes()).hexdigest()
    assert record["seed"] == 3
    assert record["input_shapes"] == {"data": [12, 3, 4, 2]}
    assert record["outputs"][0]["max_abs_error"] == 0
    assert record["outputs"][0]["atol"] == 0
    assert record["lowered_nodes"][0]["op_type"] == "BatchToSpace"
    assert set(record["timings"]) >= {"lower_s", "reference_s", "onnxruntime_s"}


def test_a_tampered_lowered_model_is_a_mismatch_exit_1(model_file, tmp_path):
    lowered = tmp_path / "lowered.onnx"
    assert run("lower", model_file, "-o", lowered).returncode == 0
    model = onnx.load(lowered)
    transpose = next(n for n in model.graph.node if n.op_type == "Transpose")
    perm = next(a for a in transpose.attribute if a.name == "perm")
    perm.ints[-1], perm.ints[-2] = perm.ints[-2], perm.ints[-1]
    onnx.save(model, lowered)
    report = tmp_path / "report.json"
    result = run("check", model_file, "--lowered", lowered, "--json", report)
    assert result.returncode == 1
    assert "MISMATCH" in result.stdout
    body = json.loads(report.read_text())
    assert body["passed"] is False
    assert body["exit_code"] == 1
    (record,) = body["models"]
    assert record["outputs"][0]["mismatches"] > 0
    assert record["outputs"][0]["name"] == "output"
    assert record["lowered_sha256"] == hashlib.sha256(lowered.read_bytes()).hexdigest()


def test_missing_file_is_exit_2_without_traceback(tmp_path):
    out = tmp_path / "out.onnx"
    result = run("lower", tmp_path / "missing.onnx", "-o", out)
    assert result.returncode == 2
    assert "no such file" in result.stderr
    assert "Traceback" not in result.stderr
    assert not out.exists()


def test_corrupted_model_is_exit_2_and_writes_nothing(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\x07garbage that is not a protobuf \xff\xff")
    out = tmp_path / "out.onnx"
    result = run("lower", bad, "-o", out)
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1
    assert not out.exists()
    assert not list(tmp_path.glob(".out.onnx*"))


def test_invalid_node_is_exit_2_naming_node_and_rule(tmp_path):
    path = tmp_path / "invalid.onnx"
    model = single_op_model(
        "BatchToSpace",
        [4, 2],
        index={"block_shape": [1, 2], "crops_begin": [0, 1], "crops_end": [0, 0]},
        node_name="b2s_3",
    )
    model.graph.initializer[1].int64_data[:] = []
    model.graph.initializer[1].raw_data = np.array([0, 5], np.int64).tobytes()
    onnx.save(model, path)
    result = run("lower", path, "-o", tmp_path / "out.onnx")
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "error: BatchToSpace 'b2s_3': crops_begin[1] + crops_end[1] = 5 exceeds "
        "block_shape[1] * data.shape[1] = 4"
    )


def test_debug_shows_the_traceback(tmp_path):
    result = run("lower", tmp_path / "missing.onnx", "-o", tmp_path / "o.onnx", "--debug")
    assert result.returncode == 2
    assert "Traceback" in result.stderr


def test_refuses_to_overwrite_its_input_unless_inplace(model_file):
    before = model_file.read_bytes()
    result = run("lower", model_file, "-o", model_file)
    assert result.returncode == 2
    assert "--inplace" in result.stderr
    assert model_file.read_bytes() == before
    assert run("lower", model_file, "-o", model_file, "--inplace").returncode == 0
    assert "BatchToSpace" not in {n.op_type for n in onnx.load(model_file).graph.node}


def test_usage_error_is_exit_2(model_file):
    assert run("lower", model_file).returncode == 2
    assert run("check", model_file, "--atol", "not-a-number").returncode == 2
    assert run("frobnicate").returncode == 2


def test_runtime_index_inputs_need_given_values(tmp_path):
    path = tmp_path / "runtime.onnx"
    onnx.save(
        single_op_model("BatchToSpace", [8, 3, 4, 2], index=dict.fromkeys(INDEX, RUNTIME)), path
    )
    result = run("check", path)
    assert result.returncode == 2
    assert "give its value" in result.stderr
    inputs = tmp_path / "inputs.npz"
    np.savez(inputs, **{k: np.array(v, np.int64) for k, v in INDEX.items()})
    result = run("check", path, "--inputs", inputs)
    assert result.returncode == 0, result.stderr


def test_float_model_is_bit_exact_by_default_and_needs_tolerances_under_onnx_reference(tmp_path):
    """The default reference runs the Conv in onnxruntime too: only the lowering is judged."""
    from models.make_examples import dilated_block

    path = tmp_path / "dilated.onnx"
    onnx.save(dilated_block(), path)
    assert run("check", path).returncode == 0
    bit_exact = ("--atol", "0", "--rtol", "0")
    assert run("check", path, "--reference", "onnx", *bit_exact).returncode == 1
    tolerant = ("--atol", "1e-4", "--rtol", "output:1e-4")
    assert run("check", path, "--reference", "onnx", *tolerant).returncode == 0


@pytest.mark.parametrize("command", ["lower", "check", "convert", "inspect"])
def test_help_shows_an_example(command):
    result = run(command, "--help")
    assert result.returncode == 0
    assert "Example:" in result.stdout


def test_version():
    result = run("--version")
    assert result.returncode == 0
    assert "b2s-onnx" in result.stdout


CORPUS = Path(__file__).resolve().parents[2] / "shared" / "ir-corpus"


@pytest.mark.skipif(not (CORPUS / "squeezenet1.1").is_dir(), reason="shared/ir-corpus absent")
def test_convert_and_check_an_ir(tmp_path):
    out = tmp_path / "squeezenet.onnx"
    result = run("convert", CORPUS / "squeezenet1.1" / "model.xml", "-o", out, "--check")
    assert result.returncode == 0, result.stderr
    assert "parity PASS against openvino-cpu" in result.stdout
    onnxruntime.InferenceSession(str(out))
    report = tmp_path / "r.json"
    result = run(
        "check", CORPUS / "squeezenet1.1" / "model.xml", "--reference", "onnx", "--json", report
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(report.read_text())["models"][0]["reference"] == "onnx-reference"


def test_convert_of_a_broken_ir_is_exit_2_and_writes_nothing(tmp_path):
    xml = tmp_path / "bad.xml"
    xml.write_text("<net version='11'><layers>")
    result = run("convert", xml, "-o", tmp_path / "bad.onnx")
    assert result.returncode == 2
    assert "not well-formed XML" in result.stderr
    assert not (tmp_path / "bad.onnx").exists()


def test_inspect_reports_custom_nodes_and_their_lowering(model_file):
    result = run("inspect", model_file, "--json")
    assert result.returncode == 0, result.stderr
    body = json.loads(result.stdout)
    assert body["op_counts"] == {"org.openvinotoolkit::BatchToSpace": 1}
    (node,) = body["custom_nodes"]
    assert node["name"] == "b2s"
    assert node["static"] is False  # the batch is symbolic
    assert node["lowering"][-1] == "Slice"
    human = run("inspect", model_file)
    assert human.returncode == 0
    assert "custom nodes" in human.stdout


def test_inspect_names_an_invalid_node_instead_of_failing(tmp_path):
    path = tmp_path / "bad.onnx"
    model = single_op_model(
        "BatchToSpace",
        [4, 2],
        index={"block_shape": [1, 2], "crops_begin": [0, 0], "crops_end": [0, 0]},
        node_name="b",
    )
    model.graph.initializer[0].raw_data = np.array([1, 3], np.int64).tobytes()
    onnx.save(model, path)
    body = json.loads(run("inspect", path, "--json").stdout)
    assert "not divisible" in body["custom_nodes"][0]["error"]


def test_batch_check_of_a_folder_with_jobs_reports_every_model(tmp_path, model_file):
    folder = tmp_path / "many"
    folder.mkdir()
    for i in range(3):
        shutil.copy(model_file, folder / f"m{i}.onnx")
    (folder / "broken.onnx").write_bytes(b"nonsense")
    report = tmp_path / "r.json"
    result = run("check", folder, "--jobs", "2", "--json", report, "--dim", "N=4")
    assert result.returncode == 2, result.stdout + result.stderr
    body = json.loads(report.read_text())
    assert body["summary"] == {
        "models": 4,
        "pass": 3,
        "mismatch": 0,
        "bad-input": 1,
        "internal-error": 0,
    }
    assert [m["status"] for m in body["models"]] == ["bad-input", "pass", "pass", "pass"]
    assert "not a readable ONNX model" in body["models"][0]["error"]
    assert "summary" in result.stdout


def test_batch_exit_code_is_the_most_severe(tmp_path, model_file):
    from models.make_examples import dilated_block

    mismatch = tmp_path / "dilated.onnx"
    onnx.save(dilated_block(), mismatch)
    onnx_ref = ("--reference", "onnx", "--atol", "0")
    assert run("check", model_file, mismatch, *onnx_ref).returncode == 1
    assert run("check", model_file, tmp_path / "missing.onnx", mismatch, *onnx_ref).returncode == 2


def test_external_data_round_trip(tmp_path):
    big = single_op_model(
        "SpaceToBatch",
        [2, 4, 6, 3],
        index={"block_shape": [1, 2, 3, 1], "pads_begin": [0, 0, 0, 0], "pads_end": [0, 0, 0, 0]},
    )
    weights = np.random.default_rng(0).standard_normal((2, 4, 6, 3)).astype(np.float32)
    big.graph.initializer.append(onnx.numpy_helper.from_array(weights, "bias"))
    node = onnx.helper.make_node("Add", ["data_in", "bias"], ["data"], name="add")
    big.graph.node.insert(0, node)
    big.graph.input[0].name = "data_in"
    inline = tmp_path / "inline.onnx"
    onnx.save(big, inline)  # before the external save below, which rewrites ``big``
    source = tmp_path / "src" / "model.onnx"
    source.parent.mkdir()
    onnx.save(
        big,
        source,
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location="model.onnx.data",
        size_threshold=64,
    )
    out = tmp_path / "out" / "lowered.onnx"
    out.parent.mkdir()
    result = run("lower", source, "-o", out, "--check", "--external-data-threshold", "64")
    assert result.returncode == 0, result.stderr
    assert (out.parent / "lowered.onnx.data").is_file()  # input used external data: so does output
    assert weights.tobytes() not in out.read_bytes()
    assert weights.tobytes() in (out.parent / "lowered.onnx.data").read_bytes()
    data = np.ones((2, 4, 6, 3), np.float32)
    (y,) = onnxruntime.InferenceSession(str(out)).run(None, {"data_in": data})
    assert y.shape == (12, 2, 2, 3)
    lowered = onnx.load(str(out), load_external_data=False)
    external = {
        t.name for t in lowered.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL
    }
    assert external == {"bias"}  # shape tensors stay inline: onnxruntime reads them at load

    forced = tmp_path / "out" / "forced.onnx"
    assert (
        run(
            "lower", inline, "-o", forced, "--save-external-data", "--external-data-threshold", "0"
        ).returncode
        == 0
    )
    assert (forced.parent / "forced.onnx.data").is_file()
    onnxruntime.InferenceSession(str(forced)).run(None, {"data_in": data})


def test_external_data_outside_the_model_folder_is_refused(tmp_path):
    model = single_op_model("BatchToSpace", [4, 3, 4, 2], index=INDEX)
    tensor = model.graph.initializer[0]
    tensor.ClearField("raw_data")
    tensor.ClearField("int64_data")
    tensor.data_location = onnx.TensorProto.EXTERNAL
    for key, value in (("location", "../../etc/passwd"), ("offset", "0"), ("length", "32")):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value
    path = tmp_path / "evil.onnx"
    path.write_bytes(model.SerializeToString())
    out = tmp_path / "out.onnx"
    result = run("lower", path, "-o", out)
    assert result.returncode == 2
    assert "path traversal refused" in result.stderr
    assert not out.exists()


def test_an_internal_error_is_exit_3_with_one_line_and_no_output(tmp_path, model_file, monkeypatch):
    """A bug of ours (here: simulated in the lowering) must not look like bad input."""
    from click.testing import CliRunner

    from b2s_onnx.cli import lower_cmd
    from b2s_onnx.cli.main import cli

    def broken(*args, **kwargs):
        raise RuntimeError("simulated bug")

    monkeypatch.setattr(lower_cmd, "lower_model", broken)
    out = tmp_path / "out.onnx"
    result = CliRunner().invoke(cli, ["lower", str(model_file), "-o", str(out)])
    assert result.exit_code == 3
    assert "internal error: RuntimeError: simulated bug" in result.output
    assert "Traceback" not in result.output
    assert not out.exists()
    debug = CliRunner().invoke(cli, ["lower", str(model_file), "-o", str(out), "--debug"])
    assert debug.exit_code == 3
    assert "Traceback" in debug.output


def test_convert_writes_the_same_bytes_whatever_pythons_hash_seed(tmp_path):
    """Reproducible output: converting the same IR twice gives the same file (the large
    weights were once listed in the order of a set of names, which Python's string hashing
    reorders from one process to the next)."""
    import os

    ov = pytest.importorskip("openvino")
    import openvino.opset13 as ops

    rng = np.random.default_rng(0)
    data = ops.parameter([1, 64, 8, 8], np.float32, name="x")
    x = data
    for _ in range(12):  # 147 KB of weights each: all written after the graph is built
        weights = rng.standard_normal([64, 64, 3, 3]).astype(np.float32)
        x = ops.relu(ops.convolution(x, ops.constant(weights), [1, 1], [1, 1], [1, 1], [1, 1]))
    xml = tmp_path / "stack.xml"
    ov.save_model(ov.Model([x], [data]), xml, compress_to_fp16=False)
    written = []
    for seed in ("1", "2", "3"):
        out = tmp_path / f"{seed}.onnx"
        result = subprocess.run(
            [EXE, "convert", str(xml), "-o", str(out)],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "PYTHONHASHSEED": seed},
        )
        assert result.returncode == 0, result.stderr
        written.append(out.read_bytes())
    assert written[0] == written[1] == written[2]
