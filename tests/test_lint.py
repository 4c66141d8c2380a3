"""The code stays ruff-clean and type-checks: part of the test command so CI enforces it."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("command", [["check", "."], ["format", "--check", "."]], ids=["lint", "format"])
def test_ruff(command):
    result = subprocess.run([sys.executable, "-m", "ruff", *command], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_finds_no_type_errors():
    """mypy over dcsim/, pages/ and app.py (its settings are in pyproject.toml), with no errors."""
    result = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_production_modules_hold_no_test_hooks():
    """Faults reach a checkpoint child from ``tests/faults.py``, through the worker's own stage
    events; nothing under dcsim/ exists only for tests."""
    hooked = [
        str(path.relative_to(ROOT))
        for path in sorted((ROOT / "dcsim").rglob("*.py"))
        if re.search(r"TEST_FAULT|[Tt]est-only|fault injected", path.read_text())
    ]
    assert hooked == []
