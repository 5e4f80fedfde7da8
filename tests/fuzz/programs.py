"""Seeded generators of tensor programs (as the plain data of :mod:`.spec`).

Kinds (``KINDS``): elementwise chains with broadcasting and casts; reductions over one or
two axes with offset ranges, ``where`` and ``init``; matmul and batch matmul (int8 -> int32,
float16 -> float32 accumulation, float32); stencils with ``if_then_else`` padding and
quasi-affine taps (``i // 2``, ``i % 3``, ``N - 1 - i``); transposes. Dtypes int8, int32,
float16, float32; extents 1..40, primes included.

Every expression is built with a bound on its magnitude so that float values stay far from
overflow and float-to-int casts only apply to exact values in range; the reference
(:mod:`.reference`) marks anything left uncertain.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from polytile.te import dtype as dt

KINDS = ("elementwise", "reduction", "matmul", "batch_matmul", "stencil", "transpose",
         "argreduce", "scan")
DTYPES = ("float32", "float16", "int32", "int8")
#: extents drawn for dims (1, small, primes, 32, 40)
EXTENTS = (1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 12, 13, 16, 17, 19, 23, 29, 31, 32, 37, 40)
_EXT_P = np.array([3, 4, 5, 5, 5, 3, 5, 4, 2, 4, 2, 4, 3, 3, 2, 2, 2, 2, 2, 2, 2], float)
#: largest magnitude generated values may reach, per dtype
LIMIT = {"float16": 512.0, "bfloat16": 1e4, "float32": 1e5, "int8": 1e9, "int32": 1e9,
         "int4": 1e9, "int16": 1e9, "uint8": 1e9}
#: the dtypes extended seeds draw from (:data:`.cases.EXTENDED_FROM`)
EXTENDED_DTYPES = DTYPES + ("bfloat16", "int4", "int16", "uint8")
#: largest number of grid points (spatial x reduce) of one stage
MAX_POINTS = 60_000


@dataclass
class X:
    """An expression tree with its dtype, a bound on ``|value|`` and whether its value is
    exact (no rounding happened: reads, constants, integer arithmetic)."""

    t: list
    dtype: str
    bound: float
    exact: bool = True


class Gen:
    """Random choices and the program under construction."""

    def __init__(self, rng: np.random.Generator, extended: bool = False):
        self.g = rng
        #: an extended seed (:data:`.cases.EXTENDED_FROM`): the new features may be drawn
        self.extended = extended
        self.dims: dict = {}
        self.tensors: list = []
        self.info: dict = {}       # name -> (shape values, dtype, bound, exact)

    # ----------------------------------------------------------------- random helpers
    def pick(self, seq, p=None):
        if p is not None:
            p = np.asarray(p, float)
            p = p / p.sum()
        return seq[int(self.g.choice(len(seq), p=p))]

    def chance(self, p: float) -> bool:
        return bool(self.g.random() < p)

    def extent(self, lo: int = 1) -> int:
        while True:
            e = int(self.g.choice(EXTENTS, p=_EXT_P / _EXT_P.sum()))
            if e >= lo:
                return e

    def dim(self, value: int | None = None, lo: int = 1) -> str:
        name = f"N{len(self.dims)}"
        self.dims[name] = value if value is not None else self.extent(lo)
        return name

    def val(self, expr: str) -> int:
        return int(eval(expr, {}, dict(self.dims)))  # noqa: S307 - our own dim arithmetic

    def dtype(self, choices=DTYPES) -> str:
        if self.extended and choices is DTYPES:
            choices = EXTENDED_DTYPES
        return self.pick(choices)

    # ----------------------------------------------------------------- tensors
    def placeholder(self, name: str, shape: list, dtype: str) -> str:
        self.tensors.append({"name": name, "shape": list(shape), "dtype": dtype})
        bound = 1.0 if dt.is_float(dtype) else float({"int8": 128, "int4": 8}.get(dtype, 1000))
        self.info[name] = ([self.val(s) for s in shape], dtype, bound, True)
        return name

    def compute(self, name: str, shape: list, axes: list, body: X, reduce=None,
                bound: float | None = None, exact: bool | None = None) -> str:
        t = {"name": name, "shape": list(shape), "axes": list(axes), "body": body.t}
        if reduce is not None:
            t["reduce"] = reduce
        self.tensors.append(t)
        self.info[name] = ([self.val(s) for s in shape], body.dtype,
                           body.bound if bound is None else bound,
                           body.exact if exact is None else exact)
        return name

    def binop_tensor(self, a: str, b: str, op: str) -> str:
        """Tensor-level broadcasting ``a <op> b`` (``te`` names it ``T_<op>_<a>_<b>``)."""
        sa, da, ba, ea = self.info[a]
        sb, db, bb, eb = self.info[b]
        n = max(len(sa), len(sb))
        pa, pb = [1] * (n - len(sa)) + sa, [1] * (n - len(sb)) + sb
        shape = [max(x, y) for x, y in zip(pa, pb)]
        word = {"+": "add", "-": "sub", "*": "mul"}[op]
        name = f"T_{word}_{a}_{b}"
        self.tensors.append({"name": name, "binop": op, "a": a, "b": b})
        t = dt.promote(da, db)
        bound = ba * bb if op == "*" else ba + bb
        self.info[name] = (shape, t, bound, ea and eb and not dt.is_float(t))
        return name

    def read(self, name: str, idx: list) -> X:
        shape, dtype, bound, exact = self.info[name]
        return X(["rd", name, idx], dtype, bound, exact)

    def program(self, outputs: list) -> dict:
        return {"dims": dict(self.dims), "tensors": self.tensors, "outputs": outputs}

    # ----------------------------------------------------------------- expressions
    def lit(self, x: X) -> X:
        if dt.is_float(x.dtype):
            v = float(self.pick([0.5, 2.0, -1.0, 0.25, 1.5, 3.0, -0.75]))
            return X(["lit", v], x.dtype, abs(v))
        v = int(self.pick([1, 2, 3, -1, 5, 7]))
        if dt.is_unsigned(x.dtype):
            v = abs(v)
        return X(["int", v], x.dtype, abs(v))

    def binop(self, a: X, b: X, op: str | None = None) -> X:
        """``a op b`` with a random arithmetic op that keeps magnitudes in range."""
        t = dt.promote(a.dtype, b.dtype)
        a, b = self.conv(a, t), self.conv(b, t)
        ops = ["+", "-", "*", "max", "min"]
        op = op or self.pick(ops, [3, 2, 3, 1, 1])
        if op == "*" and a.bound * b.bound > LIMIT[t]:
            op = "+"
        if op in ("+", "-"):
            bound, exact = a.bound + b.bound, a.exact and b.exact and not dt.is_float(t)
            node = ["op", op, a.t, b.t]
        elif op == "*":
            bound, exact = a.bound * b.bound, a.exact and b.exact and not dt.is_float(t)
            node = ["op", "*", a.t, b.t]
        elif a.t[0] == "ax" and b.t[0] == "ax":
            # te.max(i, j) would take the axis j as a reduction axis (TVM's meaning), and
            # swapping them does not help: use their sum instead
            bound, exact = a.bound + b.bound, a.exact and b.exact and not dt.is_float(t)
            node = ["op", "+", a.t, b.t]
        else:
            if b.t[0] == "ax":  # te.max(x, i) would take the axis i as a reduction axis
                a, b = b, a
            bound, exact = max(a.bound, b.bound), a.exact and b.exact
            node = ["fn", op, a.t, b.t]
        out = X(node, t, bound, exact)
        return self.tame(out)

    def tame(self, x: X) -> X:
        """Scale ``x`` down (by a power of two) when its bound exceeds the dtype's limit."""
        if dt.is_float(x.dtype) and x.bound > LIMIT[x.dtype]:
            k = 2.0 ** -int(np.ceil(np.log2(x.bound / LIMIT[x.dtype])))
            return X(["op", "*", x.t, ["lit", k]], x.dtype, x.bound * k, False)
        return x

    def conv(self, x: X, t: str) -> X:
        """``x`` cast to ``t`` (a no-op when it has that dtype)."""
        if x.dtype == t:
            return x
        if dt.is_float(t):
            if t == "float16" and x.bound > 60000:
                x = self.clip_int(x, 1000)
            return X(["cast", t, x.t], t, x.bound, x.exact and x.bound < 2048)
        if dt.is_float(x.dtype):
            # float -> int: only exact values in range (else undefined or unstable)
            if not x.exact:
                x = X(["fn", "round", x.t], x.dtype, x.bound + 1, False)
            return X(["cast", t, x.t], t, min(x.bound, LIMIT[t]), True)
        return X(["cast", t, x.t], t, min(x.bound, 2.0 ** (dt.bits(t) - 1)), True)

    def clip_int(self, x: X, lim: int) -> X:
        lim = min(lim, dt.max_value(x.dtype))
        node = ["fn", "max", ["fn", "min", x.t, ["int", lim]],
                ["int", 0 if dt.is_unsigned(x.dtype) else -lim]]
        return X(node, x.dtype, float(lim), True)

    def unary(self, x: X) -> X:
        """A random elementwise function of ``x``."""
        if dt.is_float(x.dtype):
            fns = ["tanh", "sigmoid", "abs", "neg", "exp", "sqrtabs", "cast16", "half"]
            f = self.pick(fns, [2, 1, 1, 2, 1, 1, 1, 1])
            if f == "exp" and x.bound > 4:
                f = "tanh"
            if f == "neg":
                return X(["neg", x.t], x.dtype, x.bound, x.exact)
            if f == "abs":
                return X(["fn", "abs", x.t], x.dtype, x.bound, x.exact)
            if f == "sqrtabs":
                return X(["fn", "sqrt", ["fn", "abs", x.t]], x.dtype, np.sqrt(x.bound) + 1,
                         False)
            if f == "exp":
                return X(["fn", "exp", x.t], x.dtype, float(np.exp(x.bound)), False)
            if f == "cast16":  # a round trip through the other float type
                other = "float16" if x.dtype == "float32" else "float32"
                if other == "float16" and x.bound > 1000:
                    return x
                return X(["cast", x.dtype, ["cast", other, x.t]], x.dtype, x.bound, False)
            if f == "half":
                return X(["op", "*", x.t, ["lit", 0.5]], x.dtype, x.bound / 2, x.exact)
            return X(["fn", f, x.t], x.dtype, 1.0, False)
        f = self.pick(["neg", "floordiv", "floormod", "abs", "lit"])
        if f == "neg":
            return X(["neg", x.t], x.dtype, x.bound + 1)
        if f in ("floordiv", "floormod"):
            c = int(self.pick([2, 3, 5, -3, 4]))
            if dt.is_unsigned(x.dtype):
                c = abs(c)
            sym = "//" if f == "floordiv" else "%"
            b = x.bound if f == "floordiv" else abs(c)
            return X(["op", sym, x.t, ["int", c]], x.dtype, b)
        if f == "abs":
            return X(["fn", "abs", x.t], x.dtype, x.bound + 1)
        return self.binop(x, self.lit(x))

    def combine(self, xs: list, out: str, nops: int | None = None) -> X:
        """A random expression using every operand in ``xs``, of dtype ``out``."""
        xs = list(xs)
        self.g.shuffle(xs)
        acc = xs[0]
        for y in xs[1:]:
            acc = self.binop(acc, y)
        for _ in range(nops if nops is not None else int(self.g.integers(0, 3))):
            r = self.g.random()
            if r < 0.4:
                acc = self.unary(acc)
            elif r < 0.7:
                acc = self.binop(acc, self.lit(acc))
            else:
                acc = self.binop(acc, self.pick(xs))
        if self.chance(0.25) and acc.dtype != out:
            # an intermediate dtype on the way
            mid = self.pick([d for d in DTYPES if d != acc.dtype])
            if not (dt.is_float(acc.dtype) and not dt.is_float(mid)):
                acc = self.conv(acc, mid)
        return self.conv(acc, out)

    def index_value(self, axis: str, ext: int, dtype: str) -> X:
        """The index ``axis`` used as a value (``i.astype(dtype)``)."""
        if dtype == "int32":  # axes are int32 already
            return X(["ax", axis], dtype, float(ext), True)
        return X(["cast", dtype, ["ax", axis]], dtype, float(ext), ext < 2048)

    def index_cond(self, axes: list, exts: list) -> list:
        """A random condition on spatial indices."""
        k = int(self.g.integers(len(axes)))
        a = ["ax", axes[k]]
        c = int(self.g.integers(1, max(2, exts[k])))
        choice = self.pick(["mod", "lt", "range", "sum"])
        if choice == "mod":
            return ["cmp", "==", ["op", "%", a, ["int", self.pick([2, 3])]], ["int", 0]]
        if choice == "lt":
            return ["cmp", "<", a, ["int", c]]
        if choice == "sum" and len(axes) > 1:
            return ["cmp", "<", ["op", "+", a, ["ax", axes[k - 1]]], ["int", c]]
        return ["all", [["cmp", ">=", a, ["int", 1]], ["cmp", "<", a, ["int", c]]]]
