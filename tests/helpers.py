"""Shared helpers of the te/schedule tests: running a schedule on a backend, random data,
poisoned outputs and per-dtype tolerances.

Backends
--------
``"interp"``
    The reference loop-IR interpreter (:mod:`polytile.schedule.interpreter`): bounds-checked
    loads and stores, NaN-poisoned intermediates. Slow: keep sizes tiny (<= 13x13x11).
``"llvm"``
    ``polytile.build(s, args, target="llvm")``. Enabled only when a trivial compute builds
    and runs correctly on this machine (:func:`llvm_status`); otherwise tests using it skip.

Tolerances (``check``), relative to the float64 numpy reference, for data in [-1, 1):

* float64: rtol 1e-10, atol 1e-10 * sqrt(reduction length)
* float32: rtol 2e-5,  atol 2e-5  * sqrt(reduction length)
* float16 (outputs): rtol 2e-3, atol 2e-3 * sqrt(reduction length) -- outputs are rounded
  to float16 (eps 9.8e-4) once, after a float32 accumulation
* bfloat16: rtol 1.6e-2 (two units in the last place of the 8-bit significand); arrays are
  ``ml_dtypes.bfloat16`` or ``uint16`` bit patterns (``polytile.te.dtype.bfloat16_array``)
* integers and bool: exact.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest

import polytile
from polytile import te
from polytile.schedule import interpreter
from polytile.te import dtype as dt
from polytile.te.tensor import PlaceholderOp, Tensor

BACKENDS = ("interp", "llvm")

RTOL = {"float16": 2e-3, "float32": 2e-5, "float64": 1e-10, "bfloat16": 1.6e-2}


def rng(seed: int = 0) -> np.random.Generator:
    """The seeded generator every test uses."""
    return np.random.default_rng(seed)


def rand(shape, dtype: str = "float32", seed: int = 0, gen: np.random.Generator | None = None,
         low: float = -1.0, high: float = 1.0) -> np.ndarray:
    """Random non-zero data of ``shape``: floats uniform in [low, high) with |x| >= 1e-3,
    integers uniform over a small symmetric range without 0 (unsigned: 1..high)."""
    g = gen if gen is not None else rng(seed)
    shape = tuple(shape)
    if dtype == "bfloat16":
        return dt.bfloat16_array(rand(shape, "float32", gen=g, low=low, high=high))
    if dtype.startswith("float"):
        x = g.uniform(low, high, size=shape)
        x = np.where(np.abs(x) < 1e-3, 0.5, x)
        return x.astype(dtype)
    if dtype == "bool":
        return g.integers(0, 2, size=shape).astype(bool)
    info = np.iinfo(dtype)
    hi = int(min(info.max, 100 if high == 1.0 else high))
    lo = 1 if info.min == 0 else -hi
    x = g.integers(lo, hi + 1, size=shape)
    x = np.where(x == 0, 1, x)
    return x.astype(dtype)


def poison(shape, dtype: str) -> np.ndarray:
    """An output array filled with a value no correct kernel produces for our data: NaN for
    floats, the dtype's maximum for integers."""
    if dtype == "bfloat16":
        return dt.bfloat16_array(np.full(shape, np.nan))
    if dtype.startswith("float"):
        return np.full(shape, np.nan, dtype=dtype)
    if dtype == "bool":
        return np.full(shape, True, dtype=bool)
    return np.full(shape, np.iinfo(dtype).max, dtype=dtype)


@functools.lru_cache(maxsize=None)
def llvm_status() -> tuple[bool, str]:
    """``(True, "")`` when ``polytile.build(..., target="llvm")`` works on a trivial compute,
    else ``(False, reason)``."""
    try:
        from polytile import targets  # noqa: F401

        build = getattr(polytile.targets, "build", None)
        if build is None:
            return False, "polytile.targets.build does not exist yet"
        A = te.placeholder((5,), name="A")
        B = te.compute((5,), lambda i: A[i] * 2.0 + 1.0, name="B")
        s = te.create_schedule(B.op)
        f = polytile.build(s, [A, B], target="llvm")
        a = np.arange(5, dtype="float32")
        b = poison((5,), "float32")
        f(a, b)
        if not np.array_equal(b, a * 2 + 1):
            return False, f"llvm backend computes a wrong trivial result: {b}"
    except Exception as ex:  # noqa: BLE001 - any failure means "not ready"
        return False, f"llvm backend not usable: {type(ex).__name__}: {ex}"
    return True, ""


def require_backend(backend: str) -> None:
    """Skip the calling test if ``backend`` cannot run here."""
    if backend == "llvm":
        ok, why = llvm_status()
        if not ok:
            pytest.skip(why)
    elif backend != "interp":
        raise ValueError(f"unknown backend {backend!r}")


def compile_schedule(s, args, backend: str):
    """A callable ``f(*arrays)`` running schedule ``s`` on ``backend``."""
    require_backend(backend)
    if backend == "interp":
        func = polytile.lower(s, args)
        return lambda *arrays: interpreter.run(func, *arrays)
    return polytile.build(s, args, target="llvm")


def _is_input(a) -> bool:
    return not isinstance(a, Tensor) or isinstance(a.op, PlaceholderOp)


def run_schedule(s, args, inputs, backend: str):
    """Run schedule ``s`` with parameters ``args`` on ``backend`` and return its outputs.

    Parameters
    ----------
    s : Schedule
    args : list of Tensor or te.var
        As for ``polytile.lower``.
    inputs : sequence
        One numpy array (or Python scalar for a ``te.var``) per *input* parameter
        (placeholders and scalar vars), in ``args`` order.
    backend : {"interp", "llvm"}

    Returns
    -------
    list of numpy.ndarray
        The output (compute) parameters in ``args`` order, allocated poisoned before the run.

    The inputs are checked to be unchanged by the run.
    """
    f = compile_schedule(s, args, backend)
    inputs = list(inputs)
    n_in = sum(_is_input(a) for a in args)
    if len(inputs) != n_in:
        raise TypeError(f"run_schedule: {n_in} inputs expected, got {len(inputs)}")
    saved = [np.copy(x) if isinstance(x, np.ndarray) else x for x in inputs]
    it = iter(inputs)
    call, outs = [], []
    for a in args:
        if _is_input(a):
            call.append(next(it))
        else:
            o = poison(a.shape, a.dtype)
            outs.append(o)
            call.append(o)
    f(*call)
    for x, y in zip(inputs, saved):
        if isinstance(x, np.ndarray):
            np.testing.assert_array_equal(x, y, err_msg="an input was modified by the run")
    return outs


def run1(s, args, inputs, backend: str) -> np.ndarray:
    """:func:`run_schedule` for a schedule with exactly one output."""
    outs = run_schedule(s, args, inputs, backend)
    assert len(outs) == 1, f"{len(outs)} outputs"
    return outs[0]


def normwise_bound(k: int, acc: str = "float32") -> float:
    """Bound on ``||out - ref|| / ||ref||`` (Frobenius) for a GEMM over a reduction of
    length ``k`` accumulated in ``acc`` (float32 or float64), inputs in [-1, 1) exactly
    representable: ``4 * sqrt(k) * eps(acc)``. Rounding errors of a k-term sum of
    random-signed terms grow like ``sqrt(k) * eps`` (Higham, "Accuracy and Stability of
    Numerical Algorithms", 2nd ed., sec. 4.2, probabilistic bound); measured float32 GEMMs
    at k = 4096 land near 0.15 * sqrt(k) * eps, a dropped k tile or a tf32 product lands
    above 1e-4."""
    return 4.0 * math.sqrt(max(k, 1)) * float(np.finfo(acc).eps)


def check(out: np.ndarray, ref: np.ndarray, dtype: str | None = None, k: int = 1) -> None:
    """Compare ``out`` with the float64 reference ``ref`` at the tolerance of ``dtype``
    (``out.dtype`` by default) for reductions of length ``k`` (see the module doc)."""
    dtype = dtype or out.dtype.name
    if dtype == "bfloat16":
        out = dt.bfloat16_values(out)
    assert out.shape == tuple(ref.shape), f"shape {out.shape} != {ref.shape}"
    if dtype in RTOL:
        assert not np.isnan(out).any() or np.isnan(ref).any(), "NaN (poison) left in output"
        tol = RTOL[dtype]
        np.testing.assert_allclose(out.astype("float64"), np.asarray(ref, dtype="float64"),
                                   rtol=tol, atol=tol * math.sqrt(max(k, 1)))
    else:
        np.testing.assert_array_equal(out, np.asarray(ref).astype(out.dtype))


def lowered(s, args) -> str:
    """The printed loop nest of ``s``."""
    return str(polytile.lower(s, args))


def loop_headers(s, args) -> list[str]:
    """The ``for`` lines of the lowered loop nest, stripped."""
    return [ln.strip() for ln in lowered(s, args).splitlines()
            if ln.strip().startswith("for ")]


def leaf_names(stage) -> list[str]:
    return [iv.name for iv in stage.leaf_iter_vars]


def leaf_extents(stage) -> list[int]:
    return [iv.dom.extent for iv in stage.leaf_iter_vars]


def sizes_for(backend: str, small, large):
    """``small`` for the interpreter, ``large`` for a compiled backend."""
    return small if backend == "interp" else large


# ------------------------------------------------------------------------- workloads
class Workload:
    """A small computation with its arguments, random inputs and float64 reference.

    ``stages`` maps short names to tensors; ``k`` is the reduction length (for
    tolerances); ``args``/``inputs``/``ref`` as for :func:`run_schedule`/:func:`check`.
    """

    def __init__(self, output, args, inputs, ref, k=1, **stages):
        self.output = output
        self.args = args
        self.inputs = inputs
        self.ref = ref
        self.k = k
        self.stages = stages

    def __getattr__(self, name):
        try:
            return self.__dict__["stages"][name]
        except KeyError:
            raise AttributeError(name) from None

    def schedule(self):
        return te.create_schedule(self.output.op)

    def check(self, s, backend: str, dtype: str | None = None) -> None:
        out = run1(s, self.args, self.inputs, backend)
        check(out, self.ref, dtype, self.k)


def elementwise2d(m: int, n: int, seed: int = 0) -> Workload:
    """``B = A * 2 + 1``; ``C = B * B - B`` (a 2-stage chain; B is intermediate)."""
    A = te.placeholder((m, n), name="A")
    B = te.compute((m, n), lambda i, j: A[i, j] * 2.0 + 1.0, name="B")
    C = te.compute((m, n), lambda i, j: B[i, j] * B[i, j] - B[i, j], name="C")
    a = rand((m, n), seed=seed)
    b = a.astype("float64") * 2 + 1
    return Workload(C, [A, C], [a], b * b - b, A=A, B=B, C=C)


def matmul(m: int, n: int, k: int, seed: int = 0, dtype: str = "float32") -> Workload:
    """``C[i, j] = sum_k A[i, k] * B[k, j]``."""
    A = te.placeholder((m, k), dtype=dtype, name="A")
    B = te.placeholder((k, n), dtype=dtype, name="B")
    r = te.reduce_axis((0, k), name="k")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    g = rng(seed)
    a, b = rand((m, k), dtype, gen=g), rand((k, n), dtype, gen=g)
    return Workload(C, [A, B, C], [a, b], a.astype("float64") @ b.astype("float64"), k=k,
                    A=A, B=B, C=C, r=r)


def stencil1d(n: int, seed: int = 0) -> Workload:
    """``B = A * 2``; ``C[i] = B[i] + B[i+1] + B[i+2]`` (a 3-point stencil with a halo)."""
    A = te.placeholder((n + 2,), name="A")
    B = te.compute((n + 2,), lambda i: A[i] * 2.0, name="B")
    C = te.compute((n,), lambda i: B[i] + B[i + 1] + B[i + 2], name="C")
    a = rand((n + 2,), seed=seed)
    b = a.astype("float64") * 2
    return Workload(C, [A, C], [a], b[:-2] + b[1:-1] + b[2:], k=3, A=A, B=B, C=C)


def compile_with_nvcc(source: str, arch: str = "sm_90") -> None:
    """Compile CUDA C ``source`` with ``nvcc -arch=<arch> -cubin -Werror all-warnings``;
    skip the calling test without nvcc, fail it on any error or warning."""
    from polytile.errors import BuildError
    from polytile.targets.cuda import compile as cc

    if cc.nvcc_path() is None:
        pytest.skip("nvcc not found")
    try:
        cc.compile_nvcc(source, arch, ("-Werror", "all-warnings"))
    except BuildError as exc:
        pytest.fail(f"nvcc rejected the generated source:\n{exc}\n--- source ---\n{source}",
                    pytrace=False)


def nvcc_text(source: str, kind: str, arch: str = "sm_90") -> str | None:
    """What ``nvcc -arch=<arch> -std=c++17`` makes of CUDA C ``source``: the PTX text
    (``kind="ptx"``) or the SASS listing of the cubin by ``cuobjdump -sass``
    (``kind="sass"``); None where nvcc (or, for SASS, cuobjdump) is missing. Raises
    ``subprocess.CalledProcessError`` where a tool fails."""
    import os
    import shutil
    import subprocess
    import tempfile

    from polytile.targets.cuda import compile as cc

    tool = shutil.which("cuobjdump") if kind == "sass" else "nvcc"
    if cc.nvcc_path() is None or tool is None:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        path, out = os.path.join(tmp, "k.cu"), os.path.join(tmp, "k.out")
        with open(path, "w") as fh:
            fh.write(source)
        subprocess.run([cc.nvcc_path(), f"-arch={arch}", "-ptx" if kind == "ptx" else "-cubin",
                        "-std=c++17", "-o", out, path], check=True, capture_output=True)
        if kind == "ptx":
            with open(out) as fh:
                return fh.read()
        return subprocess.run([tool, "-sass", out], check=True, capture_output=True,
                              text=True).stdout


def cubin_sass(cubin: bytes) -> str | None:
    """The SASS listing of ``cubin`` by ``cuobjdump -sass`` (shipped with nvcc); None where
    cuobjdump is missing. Raises ``subprocess.CalledProcessError`` where it fails."""
    import os
    import shutil
    import subprocess
    import tempfile

    tool = shutil.which("cuobjdump")
    if tool is None:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "k.cubin")
        with open(path, "wb") as fh:
            fh.write(cubin)
        return subprocess.run([tool, "-sass", path], capture_output=True, text=True,
                              check=True).stdout
