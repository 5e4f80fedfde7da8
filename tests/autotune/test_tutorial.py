"""Tutorial 03 runs as a script at a small size (it checks its own result)."""

from __future__ import annotations

import pathlib
import subprocess
import sys

TUTORIAL = pathlib.Path(__file__).resolve().parents[2] / "tutorials" / "03_autotune_matmul.py"


def test_03_autotune_matmul(tmp_path):
    log = tmp_path / "t.jsonl"
    proc = subprocess.run([sys.executable, str(TUTORIAL), "--n", "64", "--trials", "6",
                           "--log", str(log)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "ConfigSpace(" in out and "result matches numpy" in out
    assert out.count("  trial ") == 6
    assert "numpy:" in out and "tuned polytile:" in out
    assert len(log.read_text().splitlines()) == 6
