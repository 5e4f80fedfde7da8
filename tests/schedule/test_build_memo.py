"""What lowering keeps from one build to the next (the isl texts parsed,
``isl_util._PARSED``) never changes what a later build computes: a schedule changed between
two builds gets the numbers and the code of a first build (issue 11, fast builds)."""

from __future__ import annotations

import numpy as np
import pytest

import polytile
import polytile.errors
from polytile import te
from polytile.schedule import isl_util as iu
from tests.targets.test_codegen_golden import generated


def _matmul(m: int, n: int, k: int, split: int, transposed: bool = False):
    A = te.placeholder((k, m) if transposed else (m, k), name="A", dtype="float32")
    B = te.placeholder((k, n), name="B", dtype="float32")
    r = te.reduce_axis((0, k), name="k")
    C = te.compute((m, n), lambda i, j: te.sum(
        (A[r, i] if transposed else A[i, r]) * B[r, j], axis=r), name="C")
    s = te.create_schedule(C.op)
    i, j = C.op.axis
    jo, ji = s[C].split(j, factor=split)
    ko, ki = s[C].split(r, factor=3)
    s[C].reorder(i, jo, ko, ki, ji)
    return s, [A, B, C]


def _check(s, args, m: int, n: int, k: int, transposed: bool = False) -> None:
    rng = np.random.default_rng(m * n * k)
    a = rng.uniform(0.5, 1.5, (k, m) if transposed else (m, k)).astype("float32")
    b = rng.uniform(-1.5, -0.5, (k, n)).astype("float32")
    c = np.full((m, n), np.nan, dtype="float32")    # poisoned
    polytile.build(s, args, target="llvm")(a, b, c)
    ref = (a.astype("float64").T if transposed else a.astype("float64")) @ b.astype("float64")
    np.testing.assert_allclose(c, ref, rtol=1e-5)


def test_schedule_changed_between_builds():
    iu.forget()
    # the same compute, the same sizes: domains, tensor boxes and accesses are the same
    # texts in both builds, the loop maps differ
    _check(*_matmul(17, 31, 13, 8), 17, 31, 13)
    assert iu._PARSED, "the first build leaves its parsed texts for the next"
    _check(*_matmul(17, 31, 13, 5), 17, 31, 13)
    # other sizes and another access of A (texts near those of the first builds)
    _check(*_matmul(17, 29, 13, 5, transposed=True), 17, 29, 13, transposed=True)
    _check(*_matmul(1, 7, 2, 5), 1, 7, 2)


@pytest.mark.parametrize("target", ["llvm", "cuda"])
def test_code_as_built_first(target):
    """The code of a schedule built after others is the code of that schedule built
    first."""
    import sys
    import pathlib

    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "benchmarks"))
    import build_time

    kernels = {k: v for k, v in build_time.schedules(131, 131).items()
               if v[0] == target and k != "llvm-best"}
    def code(tgt, make) -> str:   # or the refusal (the pipelined SGEMMs at 131)
        try:
            return generated(tgt, make)
        except polytile.errors.PolytileError as exc:
            return f"{type(exc).__name__}: {exc}"

    later = {name: code(tgt, make) for name, (tgt, _, make) in kernels.items()}
    assert any("=====" in c for c in later.values())
    for name, (tgt, _, make) in kernels.items():
        iu.forget()
        assert code(tgt, make) == later[name], name


def test_memo_bounded(monkeypatch):
    monkeypatch.setattr(iu, "PARSED_LIMIT", 3)
    iu.forget()
    for n in range(10):
        iu.Set(f"{{ [d0] : 0 <= d0 < {n + 1} }}")
        assert len(iu._PARSED) <= 3
    assert iu.Set("{ [d0] : 0 <= d0 < 4 }").count_val().to_python() == 4
