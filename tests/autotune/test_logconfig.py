"""POLYTILE_LOG in library use and on the command line (a fresh interpreter per case, since
the variable is read when polytile is imported)."""

import os
import subprocess
import sys

import pytest

PROGRAM = """
import polytile
from polytile import te
A = te.placeholder((5,), name="A")
B = te.compute((5,), lambda i: A[i] + 1, name="B")
polytile.lower(te.create_schedule(B.op), [A, B])
"""


def _run(value, code=PROGRAM, args=None):
    env = dict(os.environ, POLYTILE_LOG=value)
    return subprocess.run(args or [sys.executable, "-c", code], capture_output=True,
                          text=True, env=env, timeout=120)


def test_debug_logs_every_phase_with_its_time():
    r = _run("debug")
    assert r.returncode == 0, r.stderr
    for phase in ("model", "legality", "ast", "loop_passes", "allocation"):   # lower() stops there
        assert f"polytile.lower: main: {phase} " in r.stderr
    assert "for i in range(0, 5)" not in r.stderr      # phase outputs only at trace


def test_trace_logs_each_phase_output():
    r = _run("TRACE")
    assert r.returncode == 0, r.stderr
    assert "for i in range(0, 5)" in r.stderr


@pytest.mark.parametrize("value", ["", "warning"])
def test_quiet_levels_log_nothing(value):
    r = _run(value)
    assert r.returncode == 0 and r.stderr == "", r.stderr


def test_a_bad_value_warns_at_import_and_is_a_usage_error_on_the_command_line():
    r = _run("loud")
    assert r.returncode == 0
    assert "POLYTILE_LOG='loud': expected trace, debug, info, warning or error" in r.stderr
    r = _run("loud", args=[sys.executable, "-m", "polytile.cli", "templates"])
    assert r.returncode != 0
    assert "polytile: error: POLYTILE_LOG='loud'" in r.stderr
