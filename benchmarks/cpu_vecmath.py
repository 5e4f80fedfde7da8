"""Benchmark: vectorized elementwise exp/log/tanh/sigmoid/erf on the CPU vs numpy.

For ``n = 2**22`` float32 elements (16 MiB in, 16 MiB out) prints, one line per figure, the
median time and the bandwidth (bytes read + written per second) of polytile's kernel
``C[i] = f(A[i])`` (the axis split by 64, the inner loop vectorized: four native vectors per
iteration, one thread), of numpy's ufunc on the same arrays (``np.exp(a, out=c)``; erf and
sigmoid have no numpy ufunc: ``scipy.special`` when installed, else skipped, and
``1/(1+exp(-a))`` in numpy for sigmoid), and of ``np.copyto`` as the memory-bound anchor, all
measured in the same run, with the ratios numpy/polytile and copy/polytile (1.0 would be
copy speed). Also the fast variants, a row softmax of 4096 x 4096 (four stages: the exp and
the division vectorized, the row max and sum plain serial reductions) and its exp stage
alone (an ``n = 2**24`` stream: compare with 4x the copy time). On a machine shared
with other jobs the figures are indicative only. Run: ``python benchmarks/cpu_vecmath.py``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import polytile
from polytile import te


def _median_time(fn, repeat: int = 9, min_s: float = 0.05) -> float:
    """Median seconds of ``fn()`` over ``repeat`` rounds of at least ``min_s`` each."""
    fn()
    times = []
    for _ in range(repeat):
        k, t0 = 0, time.perf_counter()
        while True:
            fn()
            k += 1
            dt = time.perf_counter() - t0
            if dt >= min_s:
                break
        times.append(dt / k)
    return float(np.median(times))


def elementwise(name: str, n: int):
    A = te.placeholder((n,), name="A")
    C = te.compute((n,), lambda i: getattr(te, name)(A[i]), name="C")
    s = te.create_schedule(C.op)
    s[C].vectorize(s[C].split(C.op.axis[0], factor=64)[1])
    return polytile.build(s, [A, C], target="llvm")


def softmax(m: int, n: int):
    A = te.placeholder((m, n), name="A")
    k = te.reduce_axis((0, n), name="k")
    mx = te.compute((m,), lambda i: te.max(A[i, k], axis=k), name="mx")
    E = te.compute((m, n), lambda i, j: te.exp(A[i, j] - mx[i]), name="E")
    k2 = te.reduce_axis((0, n), name="k2")
    S = te.compute((m,), lambda i: te.sum(E[i, k2], axis=k2), name="S")
    O = te.compute((m, n), lambda i, j: E[i, j] / S[i], name="O")
    s = te.create_schedule(O.op)
    for T in (E, O):
        s[T].vectorize(s[T].split(T.op.axis[1], factor=64)[1])
    return polytile.build(s, [A, O], target="llvm")


def softmax_exp_stage(m: int, n: int):
    """The exp stage of :func:`softmax` alone, ``E[i, j] = exp(A[i, j] - mx[i])``."""
    A = te.placeholder((m, n), name="A")
    mx = te.placeholder((m,), name="mx")
    E = te.compute((m, n), lambda i, j: te.exp(A[i, j] - mx[i]), name="E")
    s = te.create_schedule(E.op)
    s[E].vectorize(s[E].split(E.op.axis[1], factor=64)[1])
    return polytile.build(s, [A, mx, E], target="llvm")


def _numpy_fns():
    fns = {"exp": np.exp, "log": np.log, "tanh": np.tanh,
           "sigmoid": lambda a, out: np.divide(1.0, 1.0 + np.exp(-a), out=out)}
    try:
        from scipy import special

        fns["erf"] = special.erf
        fns["sigmoid"] = special.expit
    except ImportError:
        pass
    return fns


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--log2n", type=int, default=22)
    args = ap.parse_args()
    n = 2**args.log2n
    polytile.set_num_threads(1)
    rng = np.random.default_rng(0)
    a = rng.uniform(-4, 4, n).astype("float32")
    pos = rng.uniform(1e-3, 8, n).astype("float32")
    c = np.empty_like(a)
    nbytes = 2 * a.nbytes
    t_copy = _median_time(lambda: np.copyto(c, a))
    print(f"copy (np.copyto) n=2**{args.log2n} float32: {t_copy * 1e3:7.2f} ms "
          f"{nbytes / t_copy / 1e9:6.1f} GB/s")
    np_fns = _numpy_fns()
    for name in ("exp", "log", "tanh", "sigmoid", "erf", "fast_exp", "fast_tanh", "fast_erf"):
        x = pos if name == "log" else a
        f = elementwise(name, n)
        c[:] = np.nan
        f(x, c)
        assert np.isfinite(c).all(), name
        t_pt = _median_time(lambda: f(x, c))
        line = (f"{name:9s} polytile {t_pt * 1e3:7.2f} ms {nbytes / t_pt / 1e9:6.1f} GB/s "
                f"(copy/polytile {t_copy / t_pt:4.2f})")
        ref = np_fns.get(name)
        if ref is not None:
            t_np = _median_time(lambda: ref(x, out=c))
            line += (f" | numpy {t_np * 1e3:7.2f} ms {nbytes / t_np / 1e9:6.1f} GB/s, "
                     f"numpy/polytile {t_np / t_pt:5.2f}")
        print(line, flush=True)
    m = 4096
    b = rng.uniform(-4, 4, (m, m)).astype("float32")
    o = np.empty_like(b)
    f = softmax(m, m)
    f(b, o)
    ref = np.exp(b.astype("f8") - b.max(1, keepdims=True))
    ref /= ref.sum(1, keepdims=True)
    assert np.abs(o - ref).max() < 1e-6
    t_pt = _median_time(lambda: f(b, o), repeat=5)

    def np_softmax():
        e = np.exp(b - b.max(1, keepdims=True))
        np.divide(e, e.sum(1, keepdims=True), out=o)

    t_np = _median_time(np_softmax, repeat=5)
    print(f"softmax {m}x{m} float32: polytile {t_pt * 1e3:7.2f} ms | numpy {t_np * 1e3:7.2f} ms, "
          f"numpy/polytile {t_np / t_pt:5.2f} (row max and sum are scalar reductions here)")
    fe = softmax_exp_stage(m, m)
    bmax = b.max(1)
    t_e = _median_time(lambda: fe(b, bmax, o), repeat=5)
    print(f"softmax {m}x{m} exp stage alone: polytile {t_e * 1e3:7.2f} ms "
          f"{2 * b.nbytes / t_e / 1e9:6.1f} GB/s (copy/polytile {t_copy * 4 / t_e:4.2f})")


if __name__ == "__main__":
    main()
