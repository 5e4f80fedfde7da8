"""What every runtime of a built function shares: argument checks and timing.

The CPU module (:mod:`.llvm.runtime`) and the GPU module (:mod:`.cuda.runtime`) validate
their arguments with the functions below, so a wrong dtype, shape, layout, overlap or scalar
is reported with the same message on every target, before any native code runs. How an
array is *recognised* (a numpy array on the CPU, a device array on the GPU) stays with each
runtime; what is checked about it lives here.

Timing: :func:`measure` implements TVM's ``time_evaluator`` loop (``number`` calls per
repeat, grown until a repeat lasts ``min_repeat_ms``) over any clock, and returns a
:class:`BenchmarkResult` in seconds.
"""

from __future__ import annotations

import ctypes
import math
import statistics
from dataclasses import dataclass
from collections.abc import Callable

import numpy as np

from polytile.errors import format_error
from polytile.schedule.loop_ir import Buffer
from polytile.schedule.sizes import AT_LEAST_1
from polytile.te import dtype as dt
from polytile.te.expr import Binary, Cast, Const, Var

#: ctypes type of a scalar parameter of each dtype (``bool`` is one byte; ``float16`` and
#: ``bfloat16`` travel as their 16-bit patterns: ctypes has neither).
SCALAR_CTYPES = {
    "bool": ctypes.c_uint8, "int8": ctypes.c_int8, "int16": ctypes.c_int16,
    "int32": ctypes.c_int32, "int64": ctypes.c_int64, "uint8": ctypes.c_uint8,
    "uint16": ctypes.c_uint16, "uint32": ctypes.c_uint32, "uint64": ctypes.c_uint64,
    "float16": ctypes.c_uint16, "float32": ctypes.c_float, "float64": ctypes.c_double,
    "bfloat16": ctypes.c_uint16}


# ---------------------------------------------------------------------------- arguments
def check_arg_count(fname: str, params: tuple, args: tuple) -> None:
    """Raise ``TypeError`` unless there is one argument per parameter."""
    if len(args) != len(params):
        names = ", ".join(p.name for p in params)
        raise TypeError(format_error(fname, f"takes {len(params)} arguments ({names}) but "
                                     f"{len(args)} were given",
                                     "expected one argument per parameter, in order"))


def scalar_arg(fname: str, p: Var, a) -> tuple:
    """Check scalar argument ``a`` for parameter ``p``.

    Returns
    -------
    (raw, value)
        ``raw`` fits ``SCALAR_CTYPES[p.dtype]`` (``float16`` and ``bfloat16`` as their bit
        patterns, ``bool`` as 0/1); ``value`` is the Python number the function sees.

    Raises
    ------
    TypeError
        A non-number, a float for an int parameter, a non-bool for a bool parameter.
    ValueError
        An int out of the dtype's range or a finite float that overflows it.
    """
    t = p.dtype
    ok_types = (bool, int, float, np.bool_, np.integer, np.floating)
    if not isinstance(a, ok_types):
        raise TypeError(format_error(fname, f"argument {p.name!r} is a {type(a).__name__}",
                                     f"expected a Python or numpy number for the {t} parameter"))
    if t == "bool":
        if isinstance(a, (float, np.floating)) or int(a) not in (0, 1):
            raise TypeError(format_error(fname, f"argument {p.name!r} is {a!r}",
                                         "expected a bool (True/False) for the bool parameter"))
        return int(bool(a)), bool(a)
    if dt.is_int(t):
        if isinstance(a, (float, np.floating)):
            raise TypeError(format_error(fname, f"argument {p.name!r} is the float {a!r}",
                                         f"expected an integer for the {t} parameter"))
        v = int(a)
        lo, hi = dt.min_value(t), dt.max_value(t)
        if not lo <= v <= hi:
            raise ValueError(format_error(fname, f"argument {p.name!r} = {v} does not fit in "
                                          f"{t}", f"expected a value in [{lo}, {hi}]"))
        return v, v
    v = float(a)
    if t == "bfloat16":
        bits = int(dt.bfloat16_bits(v))
        x = dt.bfloat16_to_float32(bits)
    else:
        with np.errstate(over="ignore"):
            x = np.array(v, dtype=t)
    if math.isfinite(v) and not np.isfinite(x):
        raise ValueError(format_error(fname, f"argument {p.name!r} = {v!r} overflows {t}",
                                      f"expected a value representable as {t}"))
    if t == "float16":
        return int(x.view(np.uint16)), float(x)
    if t == "bfloat16":
        return bits, float(x)
    return float(x), float(x)


def eval_size(e, scalars: dict) -> int | None:
    """The value of a symbolic size (an int, or an affine integer expression of scalar
    parameters) for the values in ``scalars``; ``None`` when one is unknown."""
    if isinstance(e, (int, np.integer)):
        return int(e)
    if isinstance(e, Const):
        return int(e.value)
    if isinstance(e, Var):
        return int(scalars[e]) if e in scalars else None
    if isinstance(e, Cast):
        return eval_size(e.value, scalars)
    if isinstance(e, Binary):
        a, b = eval_size(e.a, scalars), eval_size(e.b, scalars)
        if a is None or b is None:
            return None
        ops = {"add": lambda: a + b, "sub": lambda: a - b, "mul": lambda: a * b,
               "floordiv": lambda: a // b if b else None,
               "floormod": lambda: a % b if b else None,
               "min": lambda: min(a, b), "max": lambda: max(a, b)}
        f = ops.get(e.op)
        return f() if f is not None else None
    return None


def expected_shape(p: Buffer, scalars: dict) -> list:
    """The buffer's shape with scalar parameters substituted (None where unknown)."""
    return [eval_size(d, scalars) for d in p.shape]


def size_args(fname: str, func, args: tuple) -> tuple:
    """The arguments of a call with the values of the function's bound size parameters
    appended (``PrimFunc.attrs["size_params"]``, see :mod:`polytile.schedule.sizes`):
    each read off the shape of its array argument (any object with ``.shape``).

    Raises
    ------
    TypeError
        Wrong number of arguments.
    ValueError
        Two arrays that share a size parameter but disagree on its value (naming the
        parameter and both arrays), an array of the wrong rank, or sizes that make a
        dimension negative.
    """
    bound = func.attrs.get("size_params", ())
    checks = func.attrs.get("size_checks", ())
    if not bound and not checks:
        return args
    n_user = len(func.params) - len(bound)
    check_arg_count(fname, func.params[:n_user], args)
    values: dict = {}
    for k, p in enumerate(func.params[:n_user]):
        if isinstance(p, Var) and isinstance(args[k], (int, np.integer)):
            values[p] = int(args[k])
    seen: dict = {}
    for k, p in enumerate(func.params[:n_user]):
        if not isinstance(p, Buffer):
            continue
        shape = getattr(args[k], "shape", None)
        if shape is None or len(shape) != len(p.shape):
            continue   # check_array reports it, with the expected shape
        for q, d in enumerate(p.shape):
            if not isinstance(d, Var) or not any(d is v for v, _, _ in bound):
                continue
            got = int(shape[q])
            if d in seen and seen[d][0] != got:
                first, fq, fname0 = seen[d][0], seen[d][1], seen[d][2]
                raise ValueError(format_error(
                    fname, f"arguments {fname0!r} ({fname0}.shape[{fq}] = {first}) and "
                    f"{p.name!r} ({p.name}.shape[{q}] = {got}) disagree on the symbolic size "
                    f"{d.name!r}", f"the same value of {d.name!r} in every array that has it"))
            seen.setdefault(d, (got, q, p.name))
    out = list(args)
    for v, k, q in bound:
        if v not in seen:
            p = func.params[k]
            shape = getattr(args[k], "shape", None)
            raise ValueError(format_error(
                fname, f"argument {p.name!r} has shape "
                f"{tuple(shape) if shape is not None else None}", f"an array of shape "
                f"({', '.join(str(d) for d in p.shape)}) (it gives the symbolic size "
                f"{v.name!r})"))
        values[v] = seen[v][0]
        out.append(seen[v][0])
    for e, who in checks:
        val = eval_size(e, values)
        if val is not None and val < 0:
            shown = ", ".join(f"{v.name}={x}" for v, x in values.items())
            if who.endswith(AT_LEAST_1) and isinstance(e, Binary) and e.op == "sub":
                # say "the factor ... is N // 2 = 0", not "... minus 1 ... is -1"
                raise ValueError(format_error(
                    fname, f"{who[:-len(AT_LEAST_1)]} is {e.a} = {val + 1} for {shown}",
                    "expected at least 1"))
            raise ValueError(format_error(fname, f"{who} is {e} = {val} for {shown}",
                                          "sizes >= 0"))
    return tuple(out)


def check_array(fname: str, p: Buffer, *, dtype, shape: tuple, contiguous: bool,
                writeable: bool, written: bool, scalars: dict, contiguous_hint: str) -> None:
    """Check the properties of an array argument for buffer parameter ``p``.

    Parameters
    ----------
    dtype : numpy.dtype
        The array's element type.
    shape : tuple of int
    contiguous : bool
        Whether the array is C-contiguous (row-major, dense).
    writeable : bool
        Whether the array may be written.
    written : bool
        Whether the function stores to ``p``.
    scalars : dict
        Scalar parameters (``Var``) already checked, with their values (symbolic shapes).
    contiguous_hint : str
        The ``hint:`` for a non-contiguous array (how to make a contiguous copy).

    Raises
    ------
    TypeError
        Wrong dtype.
    ValueError
        Wrong shape, non-contiguous, or read-only while written.
    """
    if p.dtype == "bfloat16":
        if not dt.is_bfloat16_array_dtype(dtype):
            raise TypeError(format_error(
                fname, f"argument {p.name!r} has dtype {dtype}", "expected a bfloat16 array: "
                "ml_dtypes.bfloat16, or uint16 holding the bit patterns",
                hint=f"convert with polytile.te.dtype.bfloat16_array({p.name})"))
    elif p.packs and dtype != np.uint8:
        raise TypeError(format_error(
            fname, f"argument {p.name!r} has dtype {dtype}", f"the packed form of a {p.packs} "
            "tensor: a uint8 array, two elements per byte along the last axis",
            hint=f"pack it with polytile.nd.pack_int4({p.name}, {p.packs!r})"))
    elif dtype != (want := np.dtype(p.dtype)):
        raise TypeError(format_error(fname, f"argument {p.name!r} has dtype {dtype}",
                                     f"expected dtype {want}",
                                     hint=f"convert with {p.name}.astype('{want}')"))
    exp = expected_shape(p, scalars)
    if len(shape) != len(exp) or any(s is not None and s != n for s, n in zip(exp, shape)):
        shown = tuple("?" if s is None else s for s in exp)
        packed = (f" (the packed form of a {p.packs} tensor: ceil(n / 2) bytes along the "
                  "last axis, see polytile.nd.pack_int4)") if p.packs else ""
        raise ValueError(format_error(fname, f"argument {p.name!r} has shape {tuple(shape)}",
                                      f"expected shape {shown}{packed}"))
    if not contiguous:
        raise ValueError(format_error(fname, f"argument {p.name!r} is not C-contiguous",
                                      "expected a C-contiguous array", hint=contiguous_hint))
    if written and not writeable:
        raise ValueError(format_error(fname, f"argument {p.name!r} is read-only but the "
                                      "function writes it", "expected a writeable array"))


def check_overlap(fname: str, spans: list, stored: set) -> None:
    """Refuse two arguments whose byte ranges overlap when the function writes one of them.

    ``spans`` holds ``(start, end, buffer)`` (addresses, end exclusive) of the non-empty
    array arguments; ``stored`` the buffers the function writes.

    Raises
    ------
    ValueError
        For the first overlapping pair found.
    """
    for i in range(len(spans)):
        for j in range(i + 1, len(spans)):
            (s0, e0, p0), (s1, e1, p1) = spans[i], spans[j]
            if s0 < e1 and s1 < e0 and (p0 in stored or p1 in stored):
                raise ValueError(format_error(
                    fname, f"arguments {p0.name!r} and {p1.name!r} overlap in memory and "
                    "the function writes one of them", "expected distinct arrays",
                    hint="pass a copy (parameters are noalias: overlapping arrays would "
                    "give wrong results)"))


# ---------------------------------------------------------------------------- timing
@dataclass(frozen=True, slots=True)
class BenchmarkResult:
    """Timings of a module's ``time_evaluator``: ``results`` holds one mean time per
    repeat, in seconds."""

    results: tuple

    @property
    def mean(self) -> float:
        """Mean over repeats (seconds)."""
        return statistics.fmean(self.results)

    @property
    def median(self) -> float:
        """Median over repeats (seconds)."""
        return statistics.median(self.results)

    @property
    def min(self) -> float:
        """Fastest repeat (seconds)."""
        return min(self.results)

    @property
    def max(self) -> float:
        """Slowest repeat (seconds)."""
        return max(self.results)

    @property
    def std(self) -> float:
        """Population standard deviation over repeats (seconds), as ``numpy.std``."""
        return statistics.pstdev(self.results)

    def __str__(self) -> str:
        return (f"BenchmarkResult(mean={self.mean * 1e3:.4f} ms, median="
                f"{self.median * 1e3:.4f} ms, std={self.std * 1e3:.4f} ms, "
                f"repeats={len(self.results)})")


def check_timing_args(number: int, repeat: int, min_repeat_ms: float) -> None:
    """Raise ``ValueError`` unless ``number >= 1``, ``repeat >= 1``, ``min_repeat_ms >= 0``."""
    if number < 1 or repeat < 1 or min_repeat_ms < 0:
        raise ValueError(format_error(
            "time_evaluator", f"number={number}, repeat={repeat}, min_repeat_ms="
            f"{min_repeat_ms}", "expected number >= 1, repeat >= 1 and min_repeat_ms >= 0"))


def measure(run: Callable[[int], float], number: int, repeat: int,
            min_repeat_ms: float) -> BenchmarkResult:
    """Time ``run`` as TVM's ``time_evaluator`` does (the caller does the warm-up).

    ``run(n)`` performs ``n`` consecutive calls and returns their total duration in
    seconds. Each of the ``repeat`` repeats records the mean of one ``run(n)``; with
    ``min_repeat_ms > 0``, ``n`` grows (by at least the golden ratio, or to the count the
    last measurement predicts) until a repeat lasts ``min_repeat_ms`` milliseconds, and the
    grown ``n`` carries over to later repeats.
    """
    n, results = int(number), []
    for _ in range(repeat):
        elapsed_ms = None
        while True:
            if elapsed_ms is not None:  # too short: grow n (doubling when below the clock)
                n = int(max(min_repeat_ms / (elapsed_ms / n) + 1, n * 1.618)) \
                    if elapsed_ms > 0 else 2 * n
            seconds = run(n)
            elapsed_ms = seconds * 1e3
            if elapsed_ms >= min_repeat_ms:
                break
        results.append(seconds / n)
    return BenchmarkResult(tuple(results))
