"""Workload data shared by the tuner, its worker processes and the command line: random
inputs and poisoned outputs for a function's parameters, the comparison of outputs, and the
timing of a template's numpy reference."""

from __future__ import annotations

import statistics
import time

import numpy as np

from polytile.te.tensor import PlaceholderOp

from . import sizes
from .template import Template, Workload, get_template


def resolve(template, args, dtype) -> tuple[Template, Workload]:
    """The template (a name, a path spec or a Template) and its workload at ``args``."""
    t = get_template(template) if not isinstance(template, Template) else template
    wl = t.workload(args, dtype)
    return t, wl


def make_inputs(tensors, seed: int = 0, args=()) -> list:
    """Arrays for a function's parameters: uniform random inputs in [-1, 1) (small
    integers for integer dtypes; bfloat16 rounded from float64, as
    :func:`polytile.te.dtype.bfloat16_array` holds them), NaN-filled (or zero) outputs. Symbolic dimensions take
    their values from the workload ``args`` (``"n=256"``, :mod:`.sizes`)."""
    rng = np.random.default_rng(seed)
    values = sizes.sizes_of(args)
    out = []
    for t in tensors:
        shape = sizes.concrete_shape(t.shape, values)
        if t.dtype == "bfloat16":   # host bfloat16 (ml_dtypes, else uint16 bit patterns)
            from polytile.te.dtype import bfloat16_array

            out.append(bfloat16_array(rng.uniform(-1, 1, shape) if isinstance(
                t.op, PlaceholderOp) else np.full(shape, np.nan)))
            continue
        dtype = np.dtype(t.dtype if t.dtype != "bool" else "bool")
        if isinstance(t.op, PlaceholderOp):
            if dtype.kind == "f":
                out.append(rng.uniform(-1, 1, shape).astype(dtype))
            elif dtype.kind in "iu":
                out.append(rng.integers(0, 8, shape).astype(dtype))
            else:
                out.append(rng.integers(0, 2, shape).astype(dtype))
        else:
            out.append(np.full(shape, np.nan if dtype.kind == "f" else 0, dtype=dtype))
    return out


def output_positions(tensors) -> list[int]:
    return [k for k, t in enumerate(tensors) if not isinstance(t.op, PlaceholderOp)]


def outputs_match(got, want, dtype) -> tuple[bool, str]:
    """Compare outputs with a tolerance suited to ``dtype`` (relative to the largest
    reference magnitude)."""
    if str(dtype) == "bfloat16":   # compared by value (8-bit significands: 1e-2)
        from polytile.te.dtype import bfloat16_values

        got = bfloat16_values(got) if got.dtype.kind != "f" else got
        want = bfloat16_values(want) if want.dtype.kind != "f" else want
        dtype = "bfloat16-values"
    elif np.dtype(dtype).kind not in "f":
        ok = np.array_equal(got, want)
        return ok, "" if ok else "integer outputs differ"
    g, w = got.astype("float64"), want.astype("float64")
    if not np.all(np.isfinite(g) == np.isfinite(w)):
        return False, "non-finite values (unwritten or NaN outputs) where the reference has none"
    fin = np.isfinite(w)
    scale = max(1.0, float(np.abs(w[fin]).max()) if fin.any() else 1.0)
    tol = {"float16": 2e-2, "bfloat16-values": 1e-2, "float32": 1e-4,
           "float64": 1e-10}.get(str(dtype), 1e-4)
    err = float(np.abs(g[fin] - w[fin]).max()) if fin.any() else 0.0
    ok = err <= tol * scale
    return ok, "" if ok else f"max abs error {err:.3g} > {tol * scale:.3g}"


def measure_numpy(template, args=None, dtype: str = "float32", min_time: float = 0.3,
                  seed: int = 0, threads: int | None = None,
                  times: list | None = None) -> float | None:
    """Median seconds of the template's numpy reference on the workload's inputs (None
    when the template has no reference). Runs at least 5 times and ``min_time`` seconds;
    with ``threads``, numpy's BLAS is limited to that many threads (needs threadpoolctl).
    ``times`` (a list) receives every run's seconds. See :func:`measure_numpy_isolated`
    to keep BLAS threads away from kernels timed in this process."""
    if threads:
        try:
            from threadpoolctl import threadpool_limits
        except ImportError:
            pass
        else:
            with threadpool_limits(limits=int(threads)):
                return measure_numpy(template, args, dtype, min_time, seed, None, times)
    t, wl = resolve(template, args, dtype)
    if t.reference is None:
        return None
    sp = t.space(wl.args, dtype)
    _, tensors = t.instantiate(sp.default(), wl.args, dtype)
    arrays = make_inputs(tensors, seed, wl.args)
    outs = set(output_positions(tensors))
    inputs = [a for k, a in enumerate(arrays) if k not in outs]
    t.reference(*inputs, args=wl.args)  # warm-up
    times = [] if times is None else times
    start = time.perf_counter()
    while len(times) < 5 or (time.perf_counter() - start < min_time and len(times) < 200):
        t0 = time.perf_counter()
        t.reference(*inputs, args=wl.args)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)
