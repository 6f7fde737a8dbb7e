"""Reading the README's shell sessions and running them as a user of a fresh clone would.

The README shows commands with their real output; these helpers find those blocks, run the
commands in a copy of the repository with the IR corpus beside it (``../shared/ir-corpus``,
as in a checkout next to the corpus), and compare what they print with what is shown,
timings aside. ``python -m tests.test_readme_tour`` rewrites the shown output from real runs.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
#: The corpus sits beside the repository: the tour's ``../shared/ir-corpus``.
SHARED = REPO.parent / "shared"
FENCE = re.compile(r"^```[a-z]*\n(.*?)^```\n", re.MULTILINE | re.DOTALL)


def block_after(text: str, marker: str) -> tuple[int, int]:
    """Start and end offsets of the body of the first fenced block after ``marker``."""
    found = FENCE.search(text, text.index(marker))
    assert found is not None, f"no fenced block after {marker!r}"
    return found.start(1), found.end(1)


def body_after(marker: str, text: str | None = None) -> str:
    text = README.read_text() if text is None else text
    start, end = block_after(text, marker)
    return text[start:end]


def session_commands(body: str) -> list[str]:
    """The ``$ command`` lines of a shown shell session."""
    return [line[2:] for line in body.splitlines() if line.startswith("$ ")]


def session_outputs(body: str) -> list[list[str]]:
    """The lines shown after each ``$ command``."""
    outputs: list[list[str]] = []
    for line in body.splitlines():
        if line.startswith("$ "):
            outputs.append([])
        elif outputs and line:
            outputs[-1].append(line)
    return outputs


def fresh_clone(root: Path) -> Path:
    """A copy of what a clone holds that the README's commands read, with the corpus
    linked beside it when this checkout has one."""
    clone = root / "repo"
    shutil.copytree(REPO / "models", clone / "models", ignore=shutil.ignore_patterns("__py*"))
    if SHARED.is_dir():
        (root / "shared").symlink_to(SHARED, target_is_directory=True)
    return clone


def run_shell(command: str, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["COLUMNS"] = "80"  # rich's width when piped, whatever the calling terminal
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", command],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def normalize(lines: list[str]) -> list[str]:
    """Drops what changes between runs: timings, and error magnitudes measured against
    OpenVINO (its kernels depend on the CPU); collapses table padding and rules."""
    against_openvino = any("openvino-cpu" in line for line in lines)
    result = []
    for line in lines:
        line = re.sub(r"\d+\.\d\d s\b", "T s", line)
        if against_openvino:
            line = re.sub(r"(max_abs|max_rel)=\S+", r"\1=E", line)
            line = re.sub(r"max abs error [^,]+", "max abs error E", line)
        result.append(re.sub(r"[ ━─]+", " ", line).strip())
    return result


def matches(shown: list[str], actual: list[str]) -> bool:
    """``actual`` is what ``shown`` shows; a ``...`` line stands for any lines."""
    pattern = "".join(
        r"(?:[^\n]*\n)*?" if line == "..." else re.escape(line) + r"\n" for line in normalize(shown)
    )
    return re.fullmatch(pattern, "".join(f"{line}\n" for line in normalize(actual))) is not None
