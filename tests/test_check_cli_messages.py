"""What users see when they make a mistake: one line, one prefix, the path once, exit 2,
before any work; and what a batch prints while it runs."""

from __future__ import annotations

import json
import os
import re
import shutil
import sys

import onnx
import onnxruntime
import pytest
from click.testing import CliRunner

from b2s_onnx.builders import single_op_model
from models.make_examples import dilated_block
from tests.hostile.make_corpus import WEIGHTS, tiny
from tests.test_cli import EXE, INDEX, run


@pytest.fixture
def onnx_file(tmp_path):
    path = tmp_path / "b2s.onnx"
    onnx.save(single_op_model("BatchToSpace", ["N", 3, 4, 2], index=INDEX, node_name="b2s"), path)
    return path


@pytest.fixture
def ir_folder(tmp_path):
    folder = tmp_path / "ir"
    folder.mkdir()
    (folder / "net.xml").write_text(tiny())
    (folder / "net.bin").write_bytes(WEIGHTS)
    return folder


def one_error_line(result, prefix: str = "error: ") -> str:
    """The whole of stderr: exactly one line with ``prefix``."""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(prefix), lines[0]
    return lines[0]


def test_o_existing_folder_writes_the_stem_inside_it(tmp_path, onnx_file, ir_folder):
    out = tmp_path / "out"
    out.mkdir()
    assert run("lower", onnx_file, "-o", out).returncode == 0
    onnxruntime.InferenceSession(str(out / "b2s.onnx"))
    result = run("convert", ir_folder / "net.xml", "-o", f"{out}/", "-q")
    assert result.returncode == 0, result.stderr
    onnxruntime.InferenceSession(str(out / "net.onnx"))


def test_o_missing_folder_fails_at_once(tmp_path, onnx_file):
    result = run("lower", onnx_file, "-o", f"{tmp_path}/nowhere/")
    line = one_error_line(result)
    assert result.returncode == 2
    assert "the folder" in line
    assert "does not exist" in line
    assert "mkdir -p" in line
    result = run("convert", tmp_path / "missing.xml", "-o", tmp_path / "no" / "x.onnx")
    assert result.returncode == 2  # the missing input is reported first, on one line too
    one_error_line(result)


def test_json_in_a_missing_folder_fails_before_any_check(tmp_path, onnx_file):
    result = run("check", onnx_file, "--json", tmp_path / "missing" / "r.json")
    assert result.returncode == 2
    assert result.stdout == ""  # nothing was checked
    assert "--json" in one_error_line(result)


@pytest.mark.parametrize("command", ["lower", "inspect"])
def test_a_folder_where_a_file_is_expected_says_so(tmp_path, command):
    args = ["-o", tmp_path / "o.onnx"] if command == "lower" else []
    result = run(command, tmp_path, *args)
    assert result.returncode == 2
    line = one_error_line(result)
    assert "is a folder" in line
    assert line.count(str(tmp_path)) == 1


def test_convert_of_a_folder_takes_its_single_xml(tmp_path, ir_folder):
    result = run("convert", ir_folder, "-q")
    assert result.returncode == 0, result.stderr
    onnxruntime.InferenceSession(str(ir_folder / "net.onnx"))
    (ir_folder / "other.xml").write_text(tiny())
    line = one_error_line(run("convert", ir_folder))
    assert "2 .xml files (net.xml, other.xml)" in line
    empty = tmp_path / "empty"
    empty.mkdir()
    assert "0 .xml files" in one_error_line(run("convert", empty))


def test_a_wrong_file_kind_names_the_right_command(tmp_path, onnx_file, ir_folder):
    line = one_error_line(run("convert", onnx_file))
    assert "is an ONNX model" in line
    assert "use b2s-onnx lower or b2s-onnx check" in line
    line = one_error_line(run("lower", ir_folder / "net.xml", "-o", tmp_path / "o.onnx"))
    assert "use b2s-onnx convert" in line


def test_opset_conversion_failure_names_the_op_and_the_opset(tmp_path):
    path = tmp_path / "dilated.onnx"
    onnx.save(dilated_block(), path)
    result = run("lower", path, "-o", tmp_path / "o.onnx", "--opset", "13")
    assert result.returncode == 2
    line = one_error_line(result)
    assert re.search(r"Relu \(opset 14\) has no conversion to an older version", line), line
    assert "Assertion" not in line
    assert ".h:" not in line


def test_errors_are_never_wrapped_and_name_the_path_once(tmp_path):
    deep = tmp_path / ("a-rather-long-folder-name-" * 4) / "missing-model-with-a-long-name.onnx"
    for args in (("check", deep), ("check", deep, deep.with_suffix(".xml"))):
        result = run(*args)
        assert result.returncode == 2
        lines = result.stderr.splitlines()
        assert len(lines) == len(args) - 1
        for line in lines:
            assert line.startswith("error: ")
            assert line.endswith(": no such file")
            assert line.count("missing-model-with-a-long-name") == 1


def test_usage_errors_are_one_line_too(onnx_file):
    for args in (("lower", onnx_file), ("check", onnx_file, "--val-range", "x:[2,1]")):
        result = run(*args)
        assert result.returncode == 2
        assert "--help" in one_error_line(result)


def test_a_failing_reference_is_bad_input_naming_it_in_batch_records_too(tmp_path):
    from tests.test_check_reference import _contrib_model

    paths = [tmp_path / "one.onnx", tmp_path / "two.onnx"]
    for path in paths:
        onnx.save(_contrib_model(), path)
    assert run("check", paths[0]).returncode == 0  # onnxruntime runs the contrib op
    result = run("check", *paths, "--reference", "onnx")
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert len(lines) == 2
    for path, line in zip(paths, lines, strict=True):
        assert line.startswith(f"error: {path}: reference onnx-reference failed (")
        assert "internal error" not in line


def test_options_that_do_nothing_are_warned_about(tmp_path, onnx_file):
    result = run("lower", onnx_file, "-o", tmp_path / "o.onnx", "--atol", "1e-3", "-q")
    assert result.returncode == 0
    assert one_error_line(result, "warning: ") == (
        "warning: --atol/--rtol do nothing without --check"
    )
    result = run("check", onnx_file, "--dim", "Q=3")
    assert result.returncode == 0
    assert "--dim Q names no dimension of the model (symbolic: N)" in one_error_line(
        result, "warning: "
    )
    result = run("check", onnx_file, "--bin", onnx_file, "--dim", "N=4")
    assert result.returncode == 0
    assert "--bin does nothing for ONNX models" in one_error_line(result, "warning: ")


def test_help_states_the_real_default_tolerances():
    text = " ".join(run("check", "--help").stdout.split())
    assert "Default: bit-exact for ONNX lowering checks; for IR (.xml) checks 1e-4" in text
    assert "atol + rtol * |expected|" in text


def test_batch_prints_each_model_as_soon_as_it_is_done(tmp_path, onnx_file, monkeypatch):
    from b2s_onnx.cli import check_cmd
    from b2s_onnx.cli.main import cli

    for name in ("a", "b", "c"):
        shutil.copy(onnx_file, tmp_path / f"{name}.onnx")
    seen_before: list[str] = []
    real = check_cmd.check_one

    def spy(path, options, progress=None):
        sys.stdout.flush()
        seen_before.append(sys.stdout.buffer.getvalue().decode())
        return real(path, options, progress)

    monkeypatch.setattr(check_cmd, "check_one", spy)
    paths = [str(tmp_path / f"{n}.onnx") for n in "abc"]
    result = CliRunner().invoke(cli, ["check", *paths, "--dim", "N=4"])
    assert result.exit_code == 0, result.output
    assert seen_before[0] == ""
    assert seen_before[1].startswith(f"PASS {paths[0]} ")
    assert seen_before[2].count("PASS") == 2


def test_batch_json_keeps_input_order_and_records_the_reference(tmp_path, onnx_file):
    folder = tmp_path / "many"
    folder.mkdir()
    for name in ("b", "a", "c"):
        shutil.copy(onnx_file, folder / f"{name}.onnx")
    (folder / "bad.onnx").write_bytes(b"nonsense")
    report = tmp_path / "r.json"
    result = run("check", folder, "--jobs", "2", "--json", report, "--dim", "N=4")
    assert result.returncode == 2
    streamed = {line.split()[1] for line in result.stdout.splitlines()[:3]}
    assert streamed == {str(folder / f"{n}.onnx") for n in "abc"}  # in order of completion
    assert one_error_line(result).startswith(f"error: {folder / 'bad.onnx'}: not a readable")
    body = json.loads(report.read_text())
    assert [m["model"] for m in body["models"]] == [
        str(folder / n) for n in ("a.onnx", "b.onnx", "bad.onnx", "c.onnx")
    ]
    record = body["models"][0]
    assert record["reference"] == "onnxruntime+numpy-ops"
    assert record["reference_detail"] == "0 onnxruntime stage(s), 1 custom node(s) in numpy"
    assert record["warnings"] == []
    assert record["outputs"][0]["comparison"] is None


def test_compare_reports_the_task_level_result_in_json(tmp_path):
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Softmax", ["x"], ["prob"], axis=1)],
        "classifier",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 10])],
        [helper.make_tensor_value_info("prob", TensorProto.FLOAT, [2, 10])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path / "cls.onnx"
    onnx.save(model, path)
    report = tmp_path / "r.json"
    result = run("check", path, "--compare", "prob:topk:3", "--json", report, "-v")
    assert result.returncode == 0, result.stderr
    assert "prob: top-3: 2/2 row(s) agree, top-1 2/2" in result.stdout
    (output,) = json.loads(report.read_text())["models"][0]["outputs"]
    assert output["comparison"] == {
        "mode": "topk",
        "passed": True,
        "k": 3,
        "rows": 2,
        "top1_agree": 2,
        "topk_agree": 2,
    }
    result = run("check", path, "--compare", "detections")
    assert result.returncode == 2
    assert "not one of detection rows" in one_error_line(result)


def _on_a_terminal(*args: str) -> str:
    """What a command writes to a (pseudo-)terminal, stdout and stderr together."""
    pty = pytest.importorskip("pty")

    pid, fd = pty.fork()
    if pid == 0:  # the child: replaced by the command
        os.execv(EXE, [EXE, *args])
    chunks = []
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # the terminal closes when the command exits
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.waitpid(pid, 0)
    return b"".join(chunks).decode(errors="replace")


def test_a_single_check_shows_its_stages_on_a_terminal_only(tmp_path):
    path = tmp_path / "dilated.onnx"
    onnx.save(dilated_block(), path)
    assert "running the lowered model" in _on_a_terminal("check", str(path))
    piped = run("check", path)
    assert piped.returncode == 0
    assert piped.stderr == ""
    assert "running" not in piped.stdout
