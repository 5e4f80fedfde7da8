"""Property test: random schedules of computations over symbolic sizes, each built once and
run at several sizes (0, 1, primes, multiples of the factors) against numpy. A draw may be
refused (ScheduleError: nparts/fuse over a symbolic extent, illegal orders) and nothing
else; every draw prints as a reproducible log in failure messages."""

from __future__ import annotations

import numpy as np
import pytest

import polytile
from polytile import te
from polytile.errors import ScheduleError

DRAWS = 30
SEED = 20261201
SIZES = (0, 1, 5, 8, 13)


def _elementwise():
    n, m = te.var("n"), te.var("m")
    A = te.placeholder((n, m), name="A")
    B = te.compute((n, m), lambda i, j: A[i, j] * 2.0 + 1.0, name="B")
    C = te.compute((n, m), lambda i, j: B[i, j] * B[i, j], name="C")

    def make(v):
        a = np.random.default_rng(v).uniform(-1, 1, (v, v + 2)).astype("float32")
        return [a], np.full((v, v + 2), np.nan, "float32"), (2.0 * a.astype("f8") + 1) ** 2

    return B, C, [A, C], make


def _matmul():
    n = te.var("n")
    A = te.placeholder((n, 12), name="A")
    Bm = te.placeholder((12, n), name="Bm")
    P = te.compute((n, 12), lambda i, k: A[i, k] + 0.5, name="P")
    r = te.reduce_axis((0, 12), "r")
    C = te.compute((n, n), lambda i, j: te.sum(P[i, r] * Bm[r, j], axis=r), name="C")

    def make(v):
        g = np.random.default_rng(v)
        a = g.uniform(-1, 1, (v, 12)).astype("float32")
        b = g.uniform(-1, 1, (12, v)).astype("float32")
        return [a, b], np.full((v, v), np.nan, "float32"), (a.astype("f8") + 0.5) @ b

    return P, C, [A, Bm, C], make


def _stencil():
    n = te.var("n")
    A = te.placeholder((n + 2,), name="A")
    B = te.compute((n + 2,), lambda i: A[i] * 3.0, name="B")
    C = te.compute((n,), lambda i: B[i] + B[i + 1] * B[i + 2], name="C")

    def make(v):
        a = np.random.default_rng(v).uniform(-1, 1, v + 2).astype("float32")
        b = 3.0 * a.astype("f8")
        return [a], np.full(v, np.nan, "float32"), b[:-2] + b[1:-1] * b[2:]

    return B, C, [A, C, n], make


WORKLOADS = {"elementwise": _elementwise, "matmul": _matmul, "stencil": _stencil}


def _draw(g, name):
    prod, cons, args, make = WORKLOADS[name]()
    s = te.create_schedule(cons.op)
    log = [f"# {name}"]

    def pick(seq):
        return seq[int(g.integers(len(seq)))]

    def steps(st, n):
        for _ in range(n):
            leaves = list(st.leaf_iter_vars)
            kind = pick(["split", "split", "reorder", "fuse", "vectorize", "unroll",
                         "parallel"])
            if kind == "split":
                iv = pick(leaves)
                if iv in st.annotations:
                    continue
                f = int(g.integers(1, 10))
                log.append(f"s[{st.name}].split({iv.name}, factor={f})")
                st.split(iv, factor=f)
            elif kind == "reorder":
                order = [leaves[k] for k in g.permutation(len(leaves))]
                log.append(f"s[{st.name}].reorder({', '.join(v.name for v in order)})")
                st.reorder(*order)
            elif kind == "fuse" and len(leaves) >= 2:
                k = int(g.integers(len(leaves) - 1))
                a, b = leaves[k], leaves[k + 1]
                if a.iter_type == b.iter_type and a not in st.annotations \
                        and b not in st.annotations:
                    log.append(f"s[{st.name}].fuse({a.name}, {b.name})")
                    st.fuse(a, b)
            elif kind in ("vectorize", "unroll", "parallel"):
                iv = leaves[-1] if kind == "vectorize" or g.random() < 0.5 else pick(leaves)
                if iv in st.annotations:
                    continue
                log.append(f"s[{st.name}].{kind}({iv.name})")
                getattr(st, kind)(iv)

    try:
        steps(s[cons], int(g.integers(1, 5)))
        where = g.random()
        if where < 0.3:
            log.append(f"s[{prod.name}].compute_inline()")
            s[prod].compute_inline()
        elif where < 0.7:
            iv = pick(list(s[cons].leaf_iter_vars))
            log.append(f"s[{prod.name}].compute_at(s[{cons.name}], {iv.name})")
            s[prod].compute_at(s[cons], iv)
            steps(s[prod], int(g.integers(0, 3)))
        else:
            steps(s[prod], int(g.integers(0, 3)))
        f = polytile.build(s, args)
    except ScheduleError as exc:
        return "refused", log, str(exc)
    return (f, make, name), log, ""


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_random_symbolic_schedules(name):
    g = np.random.default_rng(SEED + len(name))
    built = refused = 0
    for d in range(DRAWS):
        out, log, why = _draw(g, name)
        if out == "refused":
            refused += 1
            continue
        f, make, _ = out
        built += 1
        for v in SIZES:
            ins, out_arr, want = make(v)
            call = ins + [out_arr] + ([v] if name == "stencil" else [])
            try:
                f(*call)
            except Exception as exc:   # noqa: BLE001 - reported with the draw
                raise AssertionError(f"draw {d} at n={v} raised {exc!r}\n" + "\n".join(log))
            np.testing.assert_allclose(out_arr, want, rtol=2e-5, atol=2e-5,
                                       err_msg=f"draw {d} at n={v}\n" + "\n".join(log))
    assert built >= DRAWS // 3, (built, refused)   # refusals: reductions, fuse of n
