"""Faults found by the fuzzer, each shrunk to a minimal program with its right value.

Tests of faults not fixed yet are ``xfail(strict=True)`` naming the fault (and the case file
in ``/work/shared/cases`` where there is one): a fix makes them XPASS, and the mark must go.
Programs that could kill or hang the test process run in a subprocess with a timeout.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import polytile
from polytile import te


def _in_subprocess(code: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=timeout)


# --------------------------------------------------------------------------- INT_MIN / -1
def test_int_min_divided_by_minus_one_never_kills_the_process():
    """numpy: ``int8(-128) // -1 == -128`` and ``% -1 == 0`` (wrapping, with a warning).
    polytile: a constant divisor -1 wraps the same way; a divisor from data is checked at
    run time and raises ZeroDivisionError (x86's idiv would trap and kill the process)."""
    res = _in_subprocess("""
        import numpy as np, polytile
        from polytile import te
        ops = {"floordiv": lambda a, b: a // b, "floormod": lambda a, b: a % b,
               "truncdiv": te.truncdiv, "truncmod": te.truncmod}
        for dtype in ("int8", "int16", "int32", "int64"):
            lo = np.iinfo(dtype).min
            for name, f in ops.items():
                for vec in (False, True):
                    A = te.placeholder((8,), dtype, name="A")
                    B = te.placeholder((8,), dtype, name="B")
                    C = te.compute((8,), lambda i: f(A[i], B[i]), name="C")
                    K = te.compute((8,), lambda i: f(A[i], -1), name="K")
                    for out, args in ((C, [A, B, C]), (K, [A, K])):
                        s = te.create_schedule(out.op)
                        if vec:
                            s[out].vectorize(out.op.axis[0])
                        m = polytile.build(s, args)
                        a = np.full(8, lo, dtype)
                        b = np.full(8, -1, dtype)
                        o = np.zeros(8, dtype)
                        try:
                            m(*([a, b, o] if out is C else [a, o]))
                        except ZeroDivisionError:
                            assert out is C, (dtype, name)
                            continue
                        assert out is K, (dtype, name, "no check")
                        want = lo if name.endswith("div") else 0
                        assert (o == want).all(), (dtype, name, o)
        print("done")
    """)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.strip() == "done"
