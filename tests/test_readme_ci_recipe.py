"""The README's CI recipe works verbatim: its ``run:`` commands are read from the README's
YAML block and run on a copy of the repository, as a fresh runner would run them."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.readme_session import REPO, body_after, fresh_clone, run_shell

CI_RECIPE = "## CI recipe"
INSTALL = 'pip install ".[openvino]"'


def run_steps(yaml: str) -> list[str]:
    """The shell of each ``run:`` step: one line, or the indented block after ``run: |``."""
    steps: list[str] = []
    lines = yaml.splitlines()
    for index, line in enumerate(lines):
        found = re.match(r"^(\s*)(?:- )?run: (.*)$", line)
        if found is None:
            continue
        if found.group(2).strip() != "|":
            steps.append(found.group(2).strip())
            continue
        indent = len(found.group(1)) + 2
        block = []
        for follow in lines[index + 1 :]:
            if follow.strip() and len(follow) - len(follow.lstrip()) <= indent - 2:
                break
            block.append(follow[indent:])
        steps.append("\n".join(block).strip())
    return steps


def test_the_recipe_installs_from_the_repository_with_the_openvino_extra():
    steps = run_steps(body_after(CI_RECIPE))
    assert steps[0] == INSTALL
    pyproject = (REPO / "pyproject.toml").read_text()
    assert re.search(r"^openvino = \[", pyproject, re.MULTILINE), "no openvino extra"
    assert not any("pip install" in step for step in steps[1:])


def test_the_recipe_runs_verbatim_on_a_fresh_copy(tmp_path):
    clone = fresh_clone(tmp_path)
    steps = run_steps(body_after(CI_RECIPE))
    for step in steps[1:]:  # the install: this environment has the package already
        for folder in re.findall(r"\b(models/\S*?)(?:\*|\s|$)", step):
            assert (clone / folder.rstrip("/")).exists(), f"the recipe reads a missing {folder}"
        result = run_shell(step, clone)
        assert result.returncode == 0, f"{step}\n{result.stdout}{result.stderr}"
    report = json.loads((clone / "build" / "report.json").read_text())
    assert report["passed"] is True
    checked = {Path(m["model"]).as_posix() for m in report["models"]}
    assert "models/ir/dilated_block.xml" in checked
    assert "models/dilated_block.onnx" in checked
    assert sorted(p.name for p in (clone / "build" / "lowered").iterdir()) == [
        "batch_to_space.onnx",
        "depth_to_space_5d.onnx",
        "dilated_block.onnx",
    ]
    assert (clone / "build" / "converted" / "dilated_block.onnx").is_file()
