"""Property test: random schedules (seeded numpy RNG) of three small computations agree with
numpy; illegal draws raise ScheduleError and nothing else.

Each draw picks sizes, then applies random primitives: splits (factor or nparts, including
non-divisible and larger-than-extent factors), reorders, fuses of adjacent loops, vectorize
and unroll (of the innermost loop mostly), parallel, and for the producer stage
compute_inline / compute_at (a random loop of the consumer) / compute_root. About one step in
ten is deliberately illegal (an already split axis, non-adjacent fuse, vectorize of an outer
loop or of a reduction, parallel of a reduction, a foreign axis). Every draw is printed as a
reproducible script in failure messages.
"""

from __future__ import annotations

import collections
import time

import numpy as np
import pytest
from helpers import check, elementwise2d, llvm_status, lowered, matmul, run1, stencil1d

from polytile import ScheduleError

DRAWS = 150          # per workload
SEED = 20261130


class Draw:
    """A random schedule applied step by step, with a textual log."""

    def __init__(self, g: np.random.Generator, w, workload: str):
        self.g = g
        self.w = w
        self.log = [f"# workload {workload}"]
        self.s = w.schedule()

    def do(self, text: str, fn, *args, **kwargs):
        self.log.append(text)
        return fn(*args, **kwargs)

    def pick(self, seq):
        return seq[int(self.g.integers(len(seq)))]

    def stage_steps(self, st, n_steps: int):
        g = self.g
        for _ in range(n_steps):
            leaves = list(st.leaf_iter_vars)
            if not leaves:
                return
            kind = self.pick(["split", "split", "reorder", "fuse", "vectorize", "unroll",
                              "parallel", "illegal"])
            if kind == "split":
                iv = self.pick(leaves)
                if iv in st.annotations:  # split refuses annotated loops
                    continue
                f = int(g.integers(1, iv.dom.extent + 3))
                key = "nparts" if g.random() < 0.3 else "factor"
                self.do(f"s[{st.name}].split({iv.name}, {key}={f})", st.split, iv, **{key: f})
            elif kind == "reorder":
                order = [leaves[k] for k in g.permutation(len(leaves))]
                self.do(f"s[{st.name}].reorder({', '.join(v.name for v in order)})",
                        st.reorder, *order)
            elif kind == "fuse" and len(leaves) >= 2:
                k = int(g.integers(len(leaves) - 1))
                a, b = leaves[k], leaves[k + 1]
                if a.iter_type == b.iter_type and a not in st.annotations \
                        and b not in st.annotations:
                    self.do(f"s[{st.name}].fuse({a.name}, {b.name})", st.fuse, a, b)
            elif kind in ("vectorize", "unroll", "parallel"):
                iv = leaves[-1] if kind == "vectorize" or g.random() < 0.5 else self.pick(leaves)
                if iv in st.annotations or (kind == "vectorize" and iv.dom.extent > 64):
                    continue
                self.do(f"s[{st.name}].{kind}({iv.name})", getattr(st, kind), iv)
            elif kind == "illegal":
                self.illegal_step(st, leaves)

    def illegal_step(self, st, leaves):
        """A step that must raise ScheduleError (now, or at lower)."""
        g = self.g
        roots = list(st.op.axis) + list(st.op.reduce_axis)
        choice = int(g.integers(6))
        if choice == 0:
            split_roots = [iv for iv in roots if iv not in leaves]
            if split_roots:  # a root axis that is no longer a loop
                iv = self.pick(split_roots)
                self.do(f"s[{st.name}].split({iv.name}, factor=2)  # illegal", st.split, iv,
                        factor=2)
        elif choice == 1 and len(leaves) >= 3:
            self.do(f"s[{st.name}].fuse({leaves[0].name}, {leaves[2].name})  # illegal",
                    st.fuse, leaves[0], leaves[2])
        elif choice == 2 and len(leaves) >= 2 and leaves[0] not in st.annotations \
                and leaves[0].dom.extent <= 64:
            self.do(f"s[{st.name}].vectorize({leaves[0].name})  # illegal", st.vectorize,
                    leaves[0])
        elif choice == 3:
            red = [iv for iv in leaves if iv.iter_type == "reduce" and iv.dom.extent > 1
                   and iv not in st.annotations]
            if red:
                iv = self.pick(red)
                kind = self.pick(["parallel", "vectorize"])
                if kind == "vectorize" and (iv.dom.extent > 64 or iv is not leaves[-1]):
                    kind = "parallel"
                self.do(f"s[{st.name}].{kind}({iv.name})  # illegal", getattr(st, kind), iv)
        elif choice == 4:
            other = self.pick([x for x in self.s.stages if x is not st])
            foreign = self.pick(list(other.leaf_iter_vars) or [None])
            if foreign is not None:
                self.do(f"s[{st.name}].reorder({foreign.name})  # illegal, axis of "
                        f"{other.name}", st.reorder, foreign)
        elif choice == 5:
            self.do(f"s[{st.name}].pragma({leaves[-1].name}, 'nonsense')  # illegal",
                    st.pragma, leaves[-1], "nonsense")

    def producer_steps(self, prod, cons):
        g = self.g
        c = int(g.integers(4))
        if c == 0 and not prod.op.reduce_axis:
            self.do(f"s[{prod.name}].compute_inline()", prod.compute_inline)
        elif c in (1, 2):
            iv = self.pick(list(cons.leaf_iter_vars))
            self.do(f"s[{prod.name}].compute_at(s[{cons.name}], {iv.name})", prod.compute_at,
                    cons, iv)
            self.stage_steps(prod, int(g.integers(0, 3)))
        else:
            self.stage_steps(prod, int(g.integers(0, 4)))

    def script(self) -> str:
        return "\n".join(self.log)


def _mm_relu(g):
    from polytile import te
    m, n, k = (int(x) for x in g.integers(1, 8, 3))
    w = matmul(m, n, k, seed=int(g.integers(1 << 30)))
    D = te.compute((m, n), lambda i, j: te.max(w.C[i, j], 0.0), name="D")
    w.output = D
    w.args = [w.A, w.B, D]
    w.ref = np.maximum(w.ref, 0)
    return w


def _workload(name: str, g: np.random.Generator):
    if name == "matmul":
        return matmul(*(int(x) for x in g.integers(1, 9, 3)), seed=int(g.integers(1 << 30)))
    if name == "matmul_relu":
        return _mm_relu(g)
    if name == "matmul16":  # a float32 accumulator in a region that follows the schedule
        return matmul(*(int(x) for x in g.integers(1, 9, 3)), seed=int(g.integers(1 << 30)),
                      dtype="float16")
    if name == "elementwise":
        return elementwise2d(*(int(x) for x in g.integers(1, 10, 2)),
                             seed=int(g.integers(1 << 30)))
    return stencil1d(int(g.integers(1, 20)), seed=int(g.integers(1 << 30)))


def _draw(name: str, index: int):
    g = np.random.default_rng([SEED, index, sum(map(ord, name))])
    w = _workload(name, g)
    d = Draw(g, w, name)
    stages = [st for st in d.s.stages if st.op.input_tensors]  # compute stages, in order
    out = d.s[w.output]
    d.stage_steps(out, int(g.integers(0, 6)))
    for prod in reversed(stages[:-1]):
        d.producer_steps(prod, d.s[stages[stages.index(prod) + 1]])
    return w, d


def _backends():
    return ["interp", "llvm"] if llvm_status()[0] else ["interp"]


@pytest.mark.parametrize("name", ["matmul", "matmul16", "matmul_relu", "elementwise",
                                  "stencil"])
def test_random_schedules(name, record_property):
    counts: collections.Counter = collections.Counter()
    problems = []
    t0 = time.perf_counter()
    for index in range(DRAWS):
        try:
            w, d = _draw(name, index)
            outs = {b: run1(d.s, w.args, w.inputs, b) for b in _backends()}
        except ScheduleError as ex:
            counts["illegal"] += 1
            counts["illegal: " + str(ex).split(":")[0]] += 1
            continue
        except Exception as ex:  # noqa: BLE001 - anything but ScheduleError is a bug
            problems.append(f"draw {index} raised {type(ex).__name__}: {ex}\n{d.script()}")
            continue
        counts["legal"] += 1
        for b, out in outs.items():
            try:
                check(out, w.ref, out.dtype.name, w.k)
            except AssertionError as ex:
                problems.append(f"draw {index} on {b}: wrong result\n{d.script()}\n{ex}")
    record_property("counts", dict(counts))
    print(f"\n{name}: {dict(counts)} in {time.perf_counter() - t0:.1f} s")
    assert not problems, "\n\n".join(problems[:5])
    # the generator must keep producing mostly legal schedules, and some illegal ones
    assert counts["legal"] >= DRAWS // 2, dict(counts)
    assert counts["illegal"] >= 3, dict(counts)


@pytest.mark.parametrize("name", ["matmul_relu", "elementwise", "stencil"])
def test_random_schedules_copy_lowers_identically(name):
    bad = []
    for index in range(DRAWS // 2):
        try:
            w, d = _draw(name, index)
            text = lowered(d.s, w.args)
        except ScheduleError:
            continue
        try:
            same = lowered(d.s.copy(), w.args) == text
        except ScheduleError as ex:
            same = False
            text = str(ex)
        if not same:
            bad.append(d.script())
    assert not bad, f"{len(bad)} copies differ; first:\n{bad[0]}"
