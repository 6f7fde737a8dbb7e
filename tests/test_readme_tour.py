"""The README's quick start and tour run as written from a fresh clone and print what the
README shows. Run ``python -m tests.test_readme_tour`` to rewrite the shown output."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from tests.readme_session import (
    README,
    SHARED,
    block_after,
    body_after,
    fresh_clone,
    matches,
    run_shell,
    session_commands,
    session_outputs,
)

QUICK_START = "## Quick start"
QUICK_START_OUTPUT = "Output of the second command:"
TOUR = "### A tour (real output)"


def quick_start_command() -> str:
    commands = body_after(QUICK_START).strip().splitlines()
    assert len(commands) == 2, "the quick start is two commands: set up, then run"
    assert commands[0].startswith("python3 -m venv .venv")
    return commands[1]


def test_quick_start_is_two_commands_and_tests_are_one():
    text = README.read_text()
    assert quick_start_command().startswith("b2s-onnx lower models/")
    tests_block = body_after("Run the tests", text).strip()
    assert tests_block == "python -m pytest -q"
    ci = (Path(__file__).resolve().parents[1] / ".ci" / "run").read_text()
    assert "\npython -m pytest -q\n" in ci


def test_quick_start_prints_what_the_readme_shows(tmp_path):
    clone = fresh_clone(tmp_path)
    result = run_shell(quick_start_command(), clone)
    assert result.returncode == 0, result.stderr
    shown = body_after(QUICK_START_OUTPUT).splitlines()
    assert matches(shown, result.stdout.splitlines()), result.stdout


def _tour() -> list:
    body = body_after(TOUR)
    return [
        pytest.param(command, shown, id=" ".join(command.split()[1:3]))
        for command, shown in zip(session_commands(body), session_outputs(body), strict=True)
    ]


@pytest.mark.parametrize(("command", "shown"), _tour())
def test_tour_commands_run_from_a_fresh_clone_as_shown(tmp_path, command, shown):
    if "../shared/" in command and not SHARED.is_dir():
        pytest.skip("the IR corpus is not beside this checkout")
    clone = fresh_clone(tmp_path)
    result = run_shell(command, clone)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert matches(shown, result.stdout.splitlines()), result.stdout


def _rewrite() -> None:
    """Runs the quick start and the tour and writes their real output into the README."""
    text = README.read_text()
    with tempfile.TemporaryDirectory() as root:
        clone = fresh_clone(Path(root))
        quick = run_shell(quick_start_command(), clone).stdout
        start, end = block_after(text, QUICK_START_OUTPUT)
        text = text[:start] + quick + text[end:]
        session = []
        for command in session_commands(body_after(TOUR, text)):
            session.append(f"$ {command}\n" + run_shell(command, clone).stdout)
        start, end = block_after(text, TOUR)
        text = text[:start] + "\n".join(session) + text[end:]
    README.write_text(text)


if __name__ == "__main__":
    _rewrite()
