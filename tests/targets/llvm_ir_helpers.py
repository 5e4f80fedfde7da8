"""Helpers to write loop IR by hand in the LLVM backend tests."""

from __future__ import annotations

import numpy as np

from polytile.schedule.loop_ir import (Allocate, Buffer, For, IfThenElse, LetStmt, Load,
                                       PrimFunc, Store, seq)
from polytile.targets.llvm.runtime import LLVMModule
from polytile.targets import Target
from polytile.te.expr import Binary, Call, Cast, Cmp, Const, Select, Var

SIZES = (1, 7, 17, 31, 130, 257)


def c64(v) -> Const:
    return Const("int64", int(v))


def var(name: str, dtype: str = "int64") -> Var:
    return Var(dtype, name)


def buf(name: str, shape, dtype: str = "float32", scope: str = "global") -> Buffer:
    return Buffer(name, tuple(shape) if isinstance(shape, (tuple, list)) else (shape,), dtype,
                  scope)


def ld(b: Buffer, idx) -> Load:
    return Load(b.dtype, b, (idx if not isinstance(idx, int) else c64(idx),))


def st(b: Buffer, idx, value) -> Store:
    return Store(b, (idx if not isinstance(idx, int) else c64(idx),), value)


def loop(v: Var, extent, body, kind: str = "serial", lo=0, step: int = 1) -> For:
    ext = c64(extent) if isinstance(extent, int) else extent
    mn = c64(lo) if isinstance(lo, int) else lo
    return For(v, mn, ext, kind, body, step)


def binop(op: str, a, b):
    return Binary(a.dtype, op, a, b)


def build(params, body, name: str = "f", target: str = "llvm") -> LLVMModule:
    return LLVMModule(PrimFunc(name, tuple(params), body), Target.parse(target))


def rand(shape, dtype, lo=-10, hi=10, nonzero: bool = True, rng=None):
    """Random data of ``dtype`` in [lo, hi), avoiding zero when ``nonzero``."""
    rng = rng or np.random.default_rng(0)
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if np.dtype(dtype).kind == "f":
        x = rng.uniform(lo, hi, shape).astype(dtype)
        if nonzero:
            x[x == 0] = 1
        return x
    info = np.iinfo(dtype)
    x = rng.integers(max(lo, info.min), min(hi, info.max) + 1, shape, dtype=np.int64)
    if nonzero:
        x[x == 0] = 1
    return x.astype(dtype)


def poison(shape, dtype):
    """An output array filled with NaN (floats) or a sentinel (ints, bool)."""
    if np.dtype(dtype).kind == "f":
        return np.full(shape, np.nan, dtype)
    if dtype == "bool":
        return np.ones(shape, bool)  # tests with bool outputs compare against mixed values
    return np.full(shape, 123, dtype)


__all__ = ["Allocate", "Buffer", "Call", "Cast", "Cmp", "Const", "For", "IfThenElse",
           "LetStmt", "Load", "PrimFunc", "SIZES", "Select", "Store", "binop", "buf",
           "build", "c64", "ld", "loop", "poison", "rand", "seq", "st", "var"]
