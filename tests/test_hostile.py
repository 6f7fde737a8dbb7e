"""Every crafted file of tests/hostile/ through the CLI: one clear line, exit 2, no
traceback, no output file, bounded memory and time."""

from __future__ import annotations

import json
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HOSTILE = Path(__file__).resolve().parent / "hostile"
CASES = json.loads((HOSTILE / "cases.json").read_text())
EXE = shutil.which("b2s-onnx") or str(Path(sys.executable).with_name("b2s-onnx"))
#: Address-space cap for the CLI under test: a tool that tries to allocate from absurd
#: dimensions dies with MemoryError (exit 3) instead of passing.
MEMORY_LIMIT = 3 * 2**30


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


@pytest.mark.parametrize("case", CASES, ids=[c["file"].split("/")[1] for c in CASES])
def test_hostile_input_is_refused_cleanly(case, tmp_path):
    source = HOSTILE / case["file"]
    folder = tmp_path / source.parent.name
    shutil.copytree(source.parent, folder)
    model = folder / source.name
    out = tmp_path / "out.onnx"
    args = [EXE, case["command"], str(model)]
    if case["command"] in ("lower", "convert"):
        args += ["-o", str(out)]
    result = subprocess.run(
        args, capture_output=True, text=True, timeout=60, preexec_fn=_limit_memory
    )
    assert result.returncode == case["exit"], result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert "Traceback" not in result.stderr
    if case["command"] != "check":
        assert len(lines) == 1, result.stderr
    assert case["message"] in result.stderr
    assert not out.exists()
    assert not list(tmp_path.glob(".out.onnx*"))


def test_corpus_covers_every_kind_the_issue_lists():
    names = {c["file"].split("/")[1] for c in CASES}
    for required in (
        "billion_laughs",
        "external_entity",
        "cycle",
        "duplicate_layer_id",
        "bin_missing",
        "bin_negative_offset",
        "not_protobuf",
        "truncated",
        "external_path_traversal",
        "block_product_overflow",
        "unknown_rank",
        "missing_initializer",
    ):
        assert required in names
