"""Stages attached at several levels: a cache stage inside a producer that is itself
computed inside a consumer, with quasi-affine reads (``i % 2``, ``j // 3``, ``39 - i``).

The footprint of each level is the image of its consumers' accesses under the reversed
prefix map, relative to the origin of the level above (``attach.py``); those footprints
are exact. Faults of this kind (cases F4, F5) came from isl's AST generator, which on such
domains (existentially quantified dimensions) skipped statement instances or failed: the
generated AST is now checked against the domains (``ast_check.py``) and regenerated with
atomic loops, then over simple hulls with guards, where it is wrong (``astgen.py``).
The random tests draw nested attach chains (cache_read in a producer in a consumer, one or
two producers, different attach loops, splits, reorders, unrolls, reads with
mod/div/reversal), on the CPU and in a kernel, and compare the loop IR, run by the
reference interpreter, with numpy; every draw prints as a reproducible script in a failure.
"""

from __future__ import annotations

import time

import islpy as isl
import numpy as np
import pytest
from helpers import check, llvm_status, poison

import polytile
from polytile import ScheduleError, te
from polytile.schedule import interpreter
from polytile.schedule import isl_util as iu

# ---------------------------------------------------------------------- named regressions


def _f4_program(dtype: str = "float16"):
    A = te.placeholder((40, 42), dtype, name="A")
    P = te.compute((40, 42), lambda i, j: A[i, j] + i.astype(dtype), name="P")
    w = te.reduce_axis((0, 3), name="w")
    C = te.compute((40, 5), lambda i, j: te.sum(
        P[i % 2, i + w] + P[i % 2, j * 3 + 1 + w] + P[39 - i, j // 3 + w], axis=w), name="C")
    D = te.compute((80, 5), lambda i, j: C[i // 2, j] * 2.0, name="D")
    return A, P, C, D


def _f4_reference(a: np.ndarray) -> np.ndarray:
    p = a.astype("float64") + np.arange(40)[:, None]
    c = np.zeros((40, 5))
    for i in range(40):
        for j in range(5):
            for w in range(3):
                c[i, j] += p[i % 2, i + w] + p[i % 2, j * 3 + 1 + w] + p[39 - i, j // 3 + w]
    return np.repeat(c, 2, axis=0) * 2.0


def _f4_schedule(A, P, C, D):
    s = te.create_schedule(D.op)
    AS = s.cache_read(A, "shared", [P])
    s[AS].compute_at(s[P], P.op.axis[0])
    s[C].compute_at(s[D], D.op.axis[1])
    s[C].unroll(C.op.reduce_axis[0])
    s[C].unroll(C.op.axis[0])
    jo, ji = s[C].split(C.op.axis[1], factor=13)
    s[C].reorder(jo, C.op.axis[0], C.op.reduce_axis[0], ji)
    s[P].compute_at(s[C], ji)
    s[P].split(P.op.axis[1], factor=8)
    s[AS].split(AS.op.axis[1], factor=7)
    return s


@pytest.mark.skipif(not llvm_status()[0], reason="llvm backend not usable")
def test_f4_cache_in_producer_in_consumer_matches_unscheduled_build():
    """F4: 150 of 400 outputs differed from the unscheduled build (5 left NaN)."""
    A, P, C, D = _f4_program()
    f = polytile.build(_f4_schedule(A, P, C, D), [A, D])
    A0, _, _, D0 = _f4_program()
    f0 = polytile.build(te.create_schedule(D0.op), [A0, D0])
    a = (np.random.default_rng(4).random((40, 42)) * 2).astype("float16")
    d, d0 = poison((80, 5), "float16"), poison((80, 5), "float16")
    f(a, d)
    f0(a, d0)
    np.testing.assert_array_equal(d, d0)
    check(d, _f4_reference(a), "float16", k=9 * 80)


def test_f4_copies_every_needed_element_once_per_producer_row():
    """The cache stage of F4 (attached in P, itself in C, itself in D) writes exactly the
    elements P reads: counted on the isl domain of its statement, against brute force."""
    from polytile.schedule.model import build_model

    A, P, C, D = _f4_program("float32")
    m = build_model(_f4_schedule(A, P, C, D), [A, D])
    cache = next(p for p in m.plans if p.name == "A.shared")
    # per instance of D (i, j) and w: P reads rows {i2 % 2, 39 - i2} (i2 = i // 2) at
    # columns {i2 + w, 3j + 1 + w} and {j // 3 + w}; the cache copies one row of A per row
    # of P, the columns that row of P needs
    expected = 0
    for i in range(80):
        for j in range(5):
            for w in range(3):
                i2 = i // 2
                rows: dict = {}
                rows.setdefault(i2 % 2, set()).update({i2 + w, 3 * j + 1 + w})
                rows.setdefault(39 - i2, set()).add(j // 3 + w)
                expected += sum(len(c) for c in rows.values())
    assert cache.main_stmt().exact.count_val().to_python() == expected


def _f5_schedule():
    A = te.placeholder((12, 14), name="A")
    P = te.compute((12, 14), lambda i, j: A[i, j], name="P")
    w = te.reduce_axis((0, 2), name="w")
    C = te.compute((12, 2), lambda i, j: te.sum(
        P[i % 2, i + w] + P[i % 2, j * 3 + 1 + w] + P[11 - i, w], axis=w), name="C")
    D = te.compute((24, 2), lambda i, j: C[i // 2, j], name="D")
    s = te.create_schedule(D.op)
    AS = s.cache_read(A, "shared", [P])
    s[AS].compute_at(s[P], P.op.axis[0])
    s[AS].split(AS.op.axis[1], factor=5)
    s[C].compute_at(s[D], D.op.axis[0])
    s[C].reorder(C.op.axis[0], w, C.op.axis[1])
    s[P].compute_at(s[C], C.op.axis[1])
    return s, [A, D]


def test_f5_lowers_and_computes_the_definition():
    """F5: isl AST generation failed (InternalError)."""
    s, args = _f5_schedule()
    f = polytile.lower(s, args)
    a = np.random.default_rng(6).uniform(-1, 1, (12, 14)).astype("float32")
    d = poison((24, 2), "float32")
    interpreter.run(f, a, d)
    c = np.zeros((12, 2))
    for i in range(12):
        for j in range(2):
            for w in range(2):
                c[i, j] += a[i % 2, i + w] + a[i % 2, j * 3 + 1 + w] + a[11 - i, w]
    check(d, np.repeat(c, 2, axis=0), "float32", k=6)


def _f4_like(n: int = 14, m: int = 3, cache_factor: int = 5):
    """F4's shape at a smaller size, where isl's default loop generation also fails."""
    A = te.placeholder((n, n + 2), name="A")
    P = te.compute((n, n + 2), lambda i, j: A[i, j] + i.astype("float32"), name="P")
    w = te.reduce_axis((0, 3), name="w")
    C = te.compute((n, m), lambda i, j: te.sum(
        P[i % 2, i + w] + P[i % 2, j * 3 + 1 + w] + P[n - 1 - i, j // 3 + w], axis=w),
        name="C")
    D = te.compute((2 * n, m), lambda i, j: C[i // 2, j] * 2.0, name="D")
    s = te.create_schedule(D.op)
    AS = s.cache_read(A, "shared", [P])
    s[AS].compute_at(s[P], P.op.axis[0])
    s[C].compute_at(s[D], D.op.axis[1])
    jo, ji = s[C].split(C.op.axis[1], factor=1)
    s[C].reorder(jo, C.op.axis[0], C.op.reduce_axis[0], ji)
    s[P].compute_at(s[C], ji)
    s[AS].split(AS.op.axis[1], factor=cache_factor)
    return s, [A, D]


def test_wrong_isl_loop_nest_is_caught_and_replaced():
    """isl's default loop generation skips copies of the cache stage here (the fault
    behind F4); the check catches it and lowering falls back to atomic loops."""
    from polytile.schedule.astgen import AstMismatch, generate_ast
    from polytile.schedule.model import build_model
    from polytile.schedule.tree import build_schedule

    s, args = _f4_like()
    model = build_model(s, args)
    with pytest.raises(AstMismatch, match="S0 misses"):
        generate_ast(model, build_schedule(model))
    generate_ast(model, build_schedule(model, atomic=True))   # passes the check
    a = np.random.default_rng(7).uniform(-1, 1, (14, 16)).astype("float32")
    d = poison((28, 3), "float32")
    interpreter.run(polytile.lower(s, args), a, d)
    p = a.astype("float64") + np.arange(14)[:, None]
    c = np.zeros((14, 3))
    for i in range(14):
        for j in range(3):
            for w in range(3):
                c[i, j] += p[i % 2, i + w] + p[i % 2, j * 3 + 1 + w] + p[13 - i, j // 3 + w]
    check(d, np.repeat(c, 2, axis=0) * 2, "float32", k=9)


def test_when_atomic_loops_are_wrong_too_hulls_and_guards_are_used():
    """Here isl computes a wrong upper bound for the rows of P whatever the loop type;
    lowering iterates over the simple hull of P's domain and guards the exact one."""
    from polytile.schedule.astgen import AstMismatch, generate_ast
    from polytile.schedule.model import build_model
    from polytile.schedule.tree import build_schedule

    A = te.placeholder((4, 10), name="A")
    P = te.compute((4, 10), lambda i, j: A[i, j] + i.astype("float32"), name="P")
    w = te.reduce_axis((0, 3), name="w")
    C = te.compute((2, 5), lambda i, j: te.sum(
        P[(i + j) % 3, j % 2 * 3 + w] + P[i % 2, j // 3 + w] + P[i, j // 3 + w], axis=w),
        name="C")
    D = te.compute((2, 5), lambda i, j: C[i, j] + 1.0, name="D")
    s = te.create_schedule(D.op)
    AS = s.cache_read(A, "shared", [P])
    s[C].reorder(C.op.axis[0], w, C.op.axis[1])
    io, ii = s[C].split(C.op.axis[0], factor=2)
    po, pi = s[P].split(P.op.axis[0], factor=3)
    s[P].reorder(P.op.axis[1], pi, po)
    s[AS].unroll(AS.op.axis[0])
    s[P].compute_at(s[C], ii)
    s[AS].compute_at(s[P], P.op.axis[1])
    model = build_model(s, [A, D])
    for atomic in (False, True):
        with pytest.raises(AstMismatch, match="S1 misses"):
            generate_ast(model, build_schedule(model, atomic=atomic))
    a = np.random.default_rng(10).uniform(-1, 1, (4, 10)).astype("float32")
    d = poison((2, 5), "float32")
    interpreter.run(polytile.lower(s, [A, D]), a, d)
    p = a.astype("float64") + np.arange(4)[:, None]
    c = np.zeros((2, 5))
    for i in range(2):
        for j in range(5):
            for w_ in range(3):
                c[i, j] += (p[(i + j) % 3, j % 2 * 3 + w_] + p[i % 2, j // 3 + w_]
                            + p[i, j // 3 + w_])
    check(d, c + 1, "float32", k=9)


# ------------------------------------------------------------------ random nested chains

#: row / column index forms over (i, j, w); a form is kept for a draw when it stays in
#: bounds on the whole domain. ``R - i`` and ``C - j`` are reversals of the draw's extents.
ROWS = ["i", "i % 2", "i // 2", "i // 3", "R - i", "i + w", "(i + j) % 3", "2 * i % 5"]
COLS = ["j", "j + w", "j * 3 + 1 + w", "j // 3 + w", "C - j + w", "i + w", "(j + i) % 4 + w",
        "2 * w + j // 2", "j % 2 * 3 + w"]


class Program:
    """``P = A + i`` (and ``Q = 2 A - j``), a reduction ``C`` over ``w`` of 1-3 reads of them
    at quasi-affine indices, and an elementwise ``D`` of ``C`` (``C[i // 2, j]``,
    ``C[Hc - 1 - i, j]`` or ``C[i, j]``)."""

    def __init__(self, g: np.random.Generator, small: bool):
        hi = (7, 9, 5, 4, 3) if small else (9, 11, 7, 6, 4)
        self.H, self.W = int(g.integers(3, hi[0])), int(g.integers(4, hi[1]))
        self.Hc, self.Wc = int(g.integers(2, hi[2])), int(g.integers(2, hi[3]))
        self.R = int(g.integers(1, hi[4]))
        ii, jj, ww = np.meshgrid(np.arange(self.Hc), np.arange(self.Wc), np.arange(self.R),
                                 indexing="ij")
        rows = [r for r in map(self._fill, ROWS) if self._inside(r, ii, jj, ww, self.H)]
        cols = [c for c in map(self._fill, COLS) if self._inside(c, ii, jj, ww, self.W)]
        n = int(g.integers(1, 3 if small else 4))
        self.two = n > 1 and g.random() < 0.4
        self.reads = [("Q" if self.two and k == n - 1 else "P",
                       rows[int(g.integers(len(rows)))], cols[int(g.integers(len(cols)))])
                      for k in range(n)]
        self.dmode = int(g.integers(3))

    def _fill(self, form: str) -> str:
        return form.replace("R - i", f"{self.Hc - 1} - i").replace("C - j", f"{self.Wc - 1} - j")

    @staticmethod
    def _inside(form, ii, jj, ww, n) -> bool:
        v = eval(form, {"i": ii, "j": jj, "w": ww})  # noqa: S307 - our own index forms
        return bool(v.min() >= 0 and v.max() < n)

    def tensors(self):
        A = te.placeholder((self.H, self.W), name="A")
        P = te.compute((self.H, self.W), lambda i, j: A[i, j] + i.astype("float32"), name="P")
        Q = (te.compute((self.H, self.W), lambda i, j: A[i, j] * 2.0 - j.astype("float32"),
                        name="Q") if self.two else None)
        w = te.reduce_axis((0, self.R), name="w")
        src = {"P": P, "Q": Q}

        def body(i, j):
            env = {"i": i, "j": j, "w": w}
            terms = [src[t][eval(r, env), eval(c, env)]  # noqa: S307
                     for t, r, c in self.reads]
            total = terms[0]
            for x in terms[1:]:
                total = total + x
            return te.sum(total, axis=w)

        C = te.compute((self.Hc, self.Wc), body, name="C")
        if self.dmode == 0:
            D = te.compute((2 * self.Hc, self.Wc), lambda i, j: C[i // 2, j] * 2.0, name="D")
        elif self.dmode == 1:
            D = te.compute((self.Hc, self.Wc), lambda i, j: C[self.Hc - 1 - i, j] * 2.0,
                           name="D")
        else:
            D = te.compute((self.Hc, self.Wc), lambda i, j: C[i, j] + 1.0, name="D")
        return A, P, Q, C, D

    def reference(self, a: np.ndarray) -> np.ndarray:
        a = a.astype("float64")
        src = {"P": a + np.arange(self.H)[:, None], "Q": a * 2 - np.arange(self.W)[None, :]}
        c = np.zeros((self.Hc, self.Wc))
        for i in range(self.Hc):
            for j in range(self.Wc):
                for w in range(self.R):
                    env = {"i": i, "j": j, "w": w}
                    for t, r, col in self.reads:
                        c[i, j] += src[t][eval(r, env), eval(col, env)]  # noqa: S307
        if self.dmode == 0:
            return np.repeat(c, 2, axis=0) * 2
        return c[::-1] * 2 if self.dmode == 1 else c + 1

    def describe(self) -> str:
        reads = " + ".join(f"{t}[{r}, {c}]" for t, r, c in self.reads)
        return (f"# A: ({self.H}, {self.W}); C: ({self.Hc}, {self.Wc}) = sum over w < {self.R} "
                f"of {reads}; D mode {self.dmode}")


class Draw:
    """A random nested schedule of a :class:`Program`, with its script."""

    def __init__(self, g: np.random.Generator, prog: Program, gpu: bool = False):
        self.g, self.prog, self.log = g, prog, [prog.describe()]
        A, P, Q, C, D = self.tensors = prog.tensors()
        s = self.s = te.create_schedule(D.op)
        AS = None
        if g.random() < 0.85:
            # in a kernel the copy runs per thread: a shared one would need a barrier
            # inside thread-dependent control flow
            scope = "local" if gpu else ["shared", "local", "global"][int(g.integers(3))]
            AS = self.do(f"AS = s.cache_read(A, {scope!r}, [P])", s.cache_read, A, scope, [P])
        if gpu:
            # one thread per row of D; C must then be computed inside D
            o, t = self.do("o, t = s[D].split(D.op.axis[0], factor=2)", s[D].split,
                           D.op.axis[0], factor=2)
            self.do("s[D].bind(o, te.thread_axis('blockIdx.x'))", s[D].bind, o,
                    te.thread_axis("blockIdx.x"))
            self.do("s[D].bind(t, te.thread_axis('threadIdx.x'))", s[D].bind, t,
                    te.thread_axis("threadIdx.x"))
        self.steps("C", s[C], int(g.integers(0, 4)))
        self.steps("P", s[P], int(g.integers(0, 3)))
        if Q is not None:
            self.steps("Q", s[Q], int(g.integers(0, 2)))
        if AS is not None:
            self.steps("AS", s[AS], int(g.integers(0, 3)))
        self.attach("C", s[C], "D", s[D], 0.0 if gpu else 0.2, skip=1 if gpu else 0)
        self.attach("P", s[P], "C", s[C], 0.0 if gpu else 0.1)
        if Q is not None:
            if g.random() < 0.2:
                self.do("s[Q].compute_inline()", s[Q].compute_inline)
            else:
                self.attach("Q", s[Q], "C", s[C], 0.0 if gpu else 0.2)
        if AS is not None:
            self.attach("AS", s[AS], "P", s[P], 0.0 if gpu else 0.1)

    def do(self, text, fn, *args, **kwargs):
        self.log.append(text)
        return fn(*args, **kwargs)

    def steps(self, name: str, st, n: int) -> None:
        g = self.g
        for _ in range(n):
            leaves = list(st.leaf_iter_vars)
            iv = leaves[int(g.integers(len(leaves)))]
            k = g.random()
            if iv in st.annotations:
                continue
            if k < 0.5:
                f = int(g.integers(1, iv.dom.extent + 2))
                self.do(f"s[{name}].split({iv.name}, factor={f})", st.split, iv, factor=f)
            elif k < 0.75:
                order = [leaves[int(x)] for x in g.permutation(len(leaves))]
                self.do(f"s[{name}].reorder({', '.join(v.name for v in order)})", st.reorder,
                        *order)
            else:
                self.do(f"s[{name}].unroll({iv.name})", st.unroll, iv)

    def attach(self, name, st, tname, target, p_root: float, skip: int = 0) -> None:
        if self.g.random() < p_root:
            return
        leaves = list(target.leaf_iter_vars)[skip:]
        iv = leaves[int(self.g.integers(len(leaves)))]
        self.do(f"s[{name}].compute_at(s[{tname}], {iv.name})", st.compute_at, target, iv)

    def script(self) -> str:
        return "\n".join(self.log)

    def run(self) -> tuple[np.ndarray, np.ndarray]:
        A, D = self.tensors[0], self.tensors[-1]
        a = self.g.uniform(-1, 1, (self.prog.H, self.prog.W)).astype("float32")
        out = poison(D.shape, "float32")
        interpreter.run(polytile.lower(self.s, [A, D]), a, out)
        return out, self.prog.reference(a)


def _run_draws(seeds, small: bool, gpu: bool = False) -> tuple[int, list]:
    problems, legal = [], 0
    for seed in seeds:
        g = np.random.default_rng([20261201, seed, int(gpu)])
        d = None
        try:
            d = Draw(g, Program(g, small), gpu)
            out, ref = d.run()
        except ScheduleError:
            continue  # refused with a message: allowed (none is expected here)
        except Exception as ex:  # noqa: BLE001 - anything else is a bug
            script = d.script() if d else ""
            problems.append(f"draw {seed} raised {type(ex).__name__}: {ex}\n{script}")
            continue
        legal += 1
        try:
            check(out, ref, "float32", k=3 * 3)
        except AssertionError as ex:
            problems.append(f"draw {seed}: wrong result\n{d.script()}\n{ex}")
    return legal, problems


def test_random_nested_attach_chains():
    t0 = time.perf_counter()
    legal, problems = _run_draws(range(200), small=True)
    print(f"\n{legal} of 200 draws lowered and checked in {time.perf_counter() - t0:.1f} s")
    assert not problems, "\n\n".join(problems[:5])
    assert legal >= 190


def test_random_nested_attach_chains_on_gpu():
    """The same chains inside a kernel: statements iterate over padded thread boxes and
    footprints are clipped to the producers' domains (F6's kind)."""
    legal, problems = _run_draws(range(40), small=True, gpu=True)
    assert not problems, "\n\n".join(problems[:5])
    assert legal >= 35


@pytest.mark.slow
def test_random_nested_attach_chains_larger():
    """Larger draws (up to three reads, extents up to 10): among these, draw 1057 needs the
    last fallback of lowering (simple hulls and guards)."""
    legal, problems = _run_draws(range(1040, 1080), small=False)
    assert not problems, "\n\n".join(problems[:5])
    assert legal >= 36


def test_random_draws_can_fail():
    """The oracle sees a wrong loop nest: drop one statement of a draw's lowered code."""
    from polytile.schedule.loop_ir import StmtMutator

    class _DropFirstCopy(StmtMutator):
        done = False

        def visit_Store(self, s):
            if not self.done and s.buffer.name == "P":
                self.done = True
                return None
            return s

    g = np.random.default_rng(3)
    prog = Program(g, small=True)
    A, P, Q, C, D = prog.tensors()
    s = te.create_schedule(D.op)
    s[C].compute_at(s[D], D.op.axis[0])
    s[P].compute_at(s[C], C.op.axis[0])
    f = polytile.lower(s, [A, D])
    f = type(f)(f.name, f.params, _DropFirstCopy().visit(f.body))
    a = g.uniform(-1, 1, (prog.H, prog.W)).astype("float32")
    out = poison(D.shape, "float32")
    with pytest.raises((AssertionError, IndexError)):
        interpreter.run(f, a, out)
        check(out, prog.reference(a), "float32", k=9)


# -------------------------------------------------------------- isl robustness fallbacks


def test_coalesce_failure_inside_isl_is_skipped():
    """isl's coalescing failed internally ("original tableau does not correspond to
    original basic map") on this footprint; lowering skips it and stays exact."""
    A = te.placeholder((7, 9), name="A")
    P = te.compute((7, 9), lambda i, j: A[i, j] + i.astype("float32"), name="P")
    w = te.reduce_axis((0, 2), name="w")
    C = te.compute((5, 4), lambda i, j: te.sum(
        P[2 * i % 5, j % 2 * 3 + w] + P[i, j] + P[i, j // 3 + w], axis=w), name="C")
    D = te.compute((10, 4), lambda i, j: C[i // 2, j] * 2.0, name="D")
    s = te.create_schedule(D.op)
    AS = s.cache_read(A, "local", [P])
    s[C].reorder(w, C.op.axis[0], C.op.axis[1])
    jo, ji = s[C].split(C.op.axis[1], factor=1)
    s[C].unroll(jo)
    ao, ai = s[AS].split(AS.op.axis[1], factor=2)
    s[AS].unroll(ao)
    s[C].compute_at(s[D], D.op.axis[0])
    s[P].compute_at(s[C], ji)
    s[AS].compute_at(s[P], P.op.axis[1])
    a = np.random.default_rng(8).uniform(-1, 1, (7, 9)).astype("float32")
    d = poison((10, 4), "float32")
    interpreter.run(polytile.lower(s, [A, D]), a, d)
    p = a.astype("float64") + np.arange(7)[:, None]
    c = np.zeros((5, 4))
    for i in range(5):
        for j in range(4):
            for w_ in range(2):
                c[i, j] += p[2 * i % 5, j % 2 * 3 + w_] + p[i, j] + p[i, j // 3 + w_]
    check(d, np.repeat(c, 2, axis=0) * 2, "float32", k=6)


def test_operation_limit_stops_a_long_isl_computation():
    s = isl.Set("{ [i, j] : 0 <= i < 100 and 0 <= j < 100 and (i + j) mod 7 = 3 }")
    with pytest.raises(iu.OperationLimit):
        with iu.operation_limit(20_000):
            for _ in range(50):
                s = s.subtract(isl.Set("{ [i, j] : (i - 2j) mod 5 = 1 }")).coalesce()
    # the limit is gone afterwards
    assert not isl.Set("{ [i] : 0 <= i < 3 }").coalesce().is_empty()


def test_unroll_in_a_sparse_footprint_lowers_quickly():
    """Finding where full tiles start (for an unrolled loop of P) took 190 s of isl set
    arithmetic on this footprint; it is now bounded and the loop stays a loop there."""
    A = te.placeholder((5, 7), name="A")
    P = te.compute((5, 7), lambda i, j: A[i, j] + i.astype("float32"), name="P")
    w = te.reduce_axis((0, 1), name="w")
    C = te.compute((4, 5), lambda i, j: te.sum(
        P[2 * i % 5, j % 2 * 3 + w] + P[i + w, (j + i) % 4 + w] + P[i % 2, j + w], axis=w),
        name="C")
    D = te.compute((4, 5), lambda i, j: C[3 - i, j] * 2.0, name="D")
    s = te.create_schedule(D.op)
    AS = s.cache_read(A, "local", [P])
    io, ii = s[C].split(C.op.axis[0], factor=1)
    s[P].unroll(P.op.axis[1])
    a0, a1 = s[AS].split(AS.op.axis[0], factor=4)
    s[AS].reorder(a0, a1, AS.op.axis[1])
    s[C].compute_at(s[D], D.op.axis[1])
    s[P].compute_at(s[C], io)
    s[AS].compute_at(s[P], P.op.axis[1])
    t0 = time.perf_counter()
    f = polytile.lower(s, [A, D])
    assert time.perf_counter() - t0 < 60
    a = np.random.default_rng(9).uniform(-1, 1, (5, 7)).astype("float32")
    d = poison((4, 5), "float32")
    interpreter.run(f, a, d)
    p = a.astype("float64") + np.arange(5)[:, None]
    c = np.zeros((4, 5))
    for i in range(4):
        for j in range(5):
            c[i, j] = p[2 * i % 5, j % 2 * 3] + p[i, (j + i) % 4] + p[i % 2, j]
    check(d, c[::-1] * 2, "float32")


def test_ast_check_reports_missing_extra_and_repeated_instances():
    from types import SimpleNamespace

    from polytile.schedule.ast_check import _twice, mismatches

    sched = isl.Schedule.from_domain(isl.UnionSet("{ S[i] : 0 <= i < 10 }"))
    sched = sched.insert_partial_schedule(isl.MultiUnionPwAff("[{ S[i] -> [(i)] }]"))
    ast = isl.AstBuild.from_context(isl.Set("{ : }")).node_from_schedule(sched)

    def against(domain: str) -> list:
        stmts = {"S": SimpleNamespace(exact=isl.Set(domain))}
        return mismatches(ast, stmts, isl.Set("{ : }"), lambda node: None)

    assert against("{ S[i] : 0 <= i < 10 }") == []
    assert against("{ S[i] : 0 <= i < 11 }") == ["S misses { S[10] }"]
    assert "outside its domain" in against("{ S[i] : 0 <= i < 9 }")[0]
    # a kernel's small domain, checked point by point: one instance per thread tx
    kern = isl.Schedule.from_domain(isl.UnionSet("[tx] -> { S[i] : 0 <= i < 10 and i = tx }"))
    kern_ast = isl.AstBuild.from_context(isl.Set("[tx] -> { : }")).node_from_schedule(kern)
    for want, bad in [("{ S[i] : 0 <= i < 10 }", []),
                      ("{ S[i] : 0 <= i < 11 }", ["S misses { S[10] }"])]:
        assert mismatches(kern_ast, {"S": SimpleNamespace(exact=isl.Set(want))},
                          isl.Set("[tx] -> { : }"), lambda node: None) == bad
    assert "outside its domain" in mismatches(
        kern_ast, {"S": SimpleNamespace(exact=isl.Set("{ S[i] : 0 <= i < 9 }"))},
        isl.Set("[tx] -> { : }"), lambda node: None)[0]
    # a domain too big to check point by point: the symbolic projection and subtraction
    big = isl.Schedule.from_domain(isl.UnionSet("{ S[i] : 0 <= i < 5000 }"))
    big = big.insert_partial_schedule(isl.MultiUnionPwAff("[{ S[i] -> [(i)] }]"))
    big_ast = isl.AstBuild.from_context(isl.Set("{ : }")).node_from_schedule(big)
    assert mismatches(big_ast, {"S": SimpleNamespace(exact=isl.Set(
        "{ S[i] : 0 <= i <= 5000 }"))}, isl.Set("{ : }"), lambda node: None) == [
        "S misses { S[5000] }"]
    assert mismatches(big_ast, {"S": SimpleNamespace(exact=isl.Set(
        "{ S[i] : 0 <= i < 5000 }"))}, isl.Set("{ : }"), lambda node: None) == []
    # an AST guard (of a padded statement) is part of what runs
    guards = []

    def hook(node, build):
        it = isl.PwMultiAff.from_map(isl.Map.from_union_map(build.get_schedule()).reverse())
        guards.append(build.expr_from_set(
            isl.Set("{ S[i] : i mod 2 = 1 }").preimage_pw_multi_aff(it)))
        return node

    build, _keep = isl.AstBuild.from_context(isl.Set("{ : }")).set_at_each_domain(hook)
    guarded = build.node_from_schedule(sched)
    stmts = {"S": SimpleNamespace(exact=isl.Set("{ S[i] : 0 <= i < 10 }"))}
    assert mismatches(guarded, stmts, isl.Set("{ : }"), lambda node: guards[0]) == [
        "S misses { S[0] }"]
    # two iterations running one instance, in one call or in two
    assert _twice([isl.Map("{ [c0] -> S[floor(c0 / 2)] : 0 <= c0 < 4 }")]) is not None
    assert _twice([isl.Map("{ [c0] -> S[c0] : 0 <= c0 < 4 }"),
                   isl.Map("{ [c0] -> S[c0 + 3] : 0 <= c0 < 4 }")]) is not None
    assert _twice([isl.Map("{ [c0] -> S[c0] : 0 <= c0 < 4 }")]) is None
