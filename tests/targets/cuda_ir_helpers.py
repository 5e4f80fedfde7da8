"""Hand-written GPU loop IR shared by the CUDA codegen and runtime tests.

Each ``case_<name>()`` returns a :class:`Case`: a flattened :class:`PrimFunc` whose body is
``KernelLaunch`` statements, a function making its inputs (numpy), and a numpy reference
computing its outputs from them. The runtime tests run the function on the GPU and compare;
the codegen tests print and compile the same functions.
"""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Callable

import numpy as np

from polytile.schedule.loop_ir import (Allocate, Buffer, For, IfThenElse, KernelLaunch,
                                       LetStmt, Load, PrimFunc, Store, Sync, seq)
from polytile.te.expr import And, Binary, Call, Cast, Cmp, Const, Not, Select, Var

BX, BY = Var("int64", "blockIdx.x"), Var("int64", "blockIdx.y")
TX, TY = Var("int64", "threadIdx.x"), Var("int64", "threadIdx.y")
TAGS = {BX: "blockIdx.x", BY: "blockIdx.y", TX: "threadIdx.x", TY: "threadIdx.y"}

#: float intrinsics of the math case: (name, argument names) over inputs P (positive) and
#: S (signed, with ties at .5 and a NaN)
MATH = (("exp", "P"), ("exp2", "P"), ("log", "P"), ("log2", "P"), ("log10", "P"),
        ("sqrt", "P"), ("rsqrt", "P"), ("tanh", "S"), ("sigmoid", "S"), ("erf", "S"),
        ("sin", "S"), ("cos", "S"), ("floor", "S"), ("ceil", "S"), ("round", "S"),
        ("trunc", "S"), ("abs", "S"), ("pow", "PS"), ("fmod", "SP"), ("isnan", "S"))


def c64(v) -> Const:
    return Const("int64", int(v))


def const(dtype: str, v) -> Const:
    return Const(dtype, v)


def buf(name: str, shape, dtype: str = "float32", scope: str = "global") -> Buffer:
    return Buffer(name, tuple(shape) if isinstance(shape, (tuple, list)) else (shape,), dtype,
                  scope)


def ld(b: Buffer, idx) -> Load:
    return Load(b.dtype, b, (c64(idx) if isinstance(idx, int) else idx,))


def st(b: Buffer, idx, value) -> Store:
    return Store(b, (c64(idx) if isinstance(idx, int) else idx,), value)


def op(name: str, a, b):
    return Binary(a.dtype, name, a, b)


def add(a, b):
    return op("add", a, b)


def mul(a, b):
    return op("mul", a, b)


def lt(a, b):
    return Cmp("bool", "lt", a, b)


def launch(name: str, grid, block, body) -> KernelLaunch:
    used = [v for v in (BX, BY, TX, TY) if _uses(body, v)]
    return KernelLaunch(name, tuple(grid) + (1,) * (3 - len(grid)),
                        tuple(block) + (1,) * (3 - len(block)),
                        tuple((v, TAGS[v]) for v in used), body)


def _uses(s, v) -> bool:
    from polytile.schedule.loop_ir import stmt_exprs, walk_stmts
    from polytile.te.visitor import collect

    return any(v in collect(e, Var) for x in walk_stmts(s) for e in stmt_exprs(x))


def global_index(threads: int):
    """``blockIdx.x * threads + threadIdx.x``."""
    return add(mul(BX, c64(threads)), TX)


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass
class Case:
    func: PrimFunc
    inputs: Callable  # rng -> list of numpy arrays / scalars, one per input parameter
    reference: Callable  # *inputs -> list of numpy outputs, one per output parameter
    outputs: tuple  # names of the output parameters
    rtol: float = 1e-6


# ------------------------------------------------------------------------------ cases
def case_vadd(n: int = 1000, threads: int = 256) -> Case:
    """``C = A + B`` over a 1-D grid with a bounds guard on the last block."""
    A, B, C = buf("A", n), buf("B", n), buf("C", n)
    i = Var("int64", "i")
    body = LetStmt(i, global_index(threads),
                   IfThenElse(lt(i, c64(n)), st(C, i, add(ld(A, i), ld(B, i)))))
    f = PrimFunc("vadd", (A, B, C), launch("vadd_kernel0", (cdiv(n, threads),), (threads,),
                                           body))
    return Case(f, lambda g: [g.standard_normal(n, "float32"), g.standard_normal(n, "float32")],
                lambda a, b: [a + b], ("C",))


def case_axpy(cap: int = 1024, threads: int = 128) -> Case:
    """``Z = alpha * X + Y`` with a symbolic length ``n <= cap`` and scalar parameters."""
    n, alpha = Var("int64", "n"), Var("float32", "alpha")
    X, Y, Z = buf("X", (n,)), buf("Y", (n,)), buf("Z", (n,))
    i = global_index(threads)
    body = IfThenElse(lt(i, n), st(Z, i, add(mul(alpha, ld(X, i)), ld(Y, i))))
    f = PrimFunc("axpy", (X, Y, Z, alpha, n),
                 launch("axpy_kernel0", (cdiv(cap, threads),), (threads,), body))
    m = 517

    def inputs(g):
        return [g.standard_normal(m, "float32"), g.standard_normal(m, "float32"), 1.5, m]

    return Case(f, inputs, lambda x, y, a, _n: [np.float32(a) * x + y], ("Z",))


def case_transpose(m: int = 50, n: int = 37, t: int = 16) -> Case:
    """``B = A.T`` through a shared ``t x (t+1)`` tile, with ``Sync`` between the phases."""
    A, B = buf("A", (m, n)), buf("B", (n, m))
    tile = buf("tile", (t * (t + 1),), scope="shared")
    x, y = Var("int64", "x"), Var("int64", "y")
    load = LetStmt(x, add(mul(BX, c64(t)), TX), LetStmt(y, add(mul(BY, c64(t)), TY), IfThenElse(
        And("bool", lt(y, c64(m)), lt(x, c64(n))),
        st(tile, add(mul(TY, c64(t + 1)), TX), ld(A, add(mul(y, c64(n)), x))))))
    x2, y2 = Var("int64", "x"), Var("int64", "y")  # same names: printed x_1, y_1
    store = LetStmt(x2, add(mul(BY, c64(t)), TX), LetStmt(y2, add(mul(BX, c64(t)), TY),
                    IfThenElse(And("bool", lt(y2, c64(n)), lt(x2, c64(m))),
                               st(B, add(mul(y2, c64(m)), x2),
                                  ld(tile, add(mul(TX, c64(t + 1)), TY))))))
    body = Allocate(tile, seq(load, Sync(), store))
    f = PrimFunc("transpose", (A, B),
                 launch("transpose_kernel0", (cdiv(n, t), cdiv(m, t)), (t, t), body))
    return Case(f, lambda g: [g.standard_normal((m, n), "float32")],
                lambda a: [np.ascontiguousarray(a.T)], ("B",))


def case_row_sum(rows: int = 7, cols: int = 1000, threads: int = 128) -> Case:
    """``out[r] = sum(A[r, :])``: one block per row, a strided per-thread partial sum in a
    ``local`` accumulator, then a tree reduction in ``shared`` memory."""
    A, out = buf("A", (rows, cols)), buf("out", rows)
    acc = buf("acc", (1,), scope="local")
    red = buf("red", (threads,), scope="shared")
    j, k, s = Var("int64", "j"), Var("int64", "k"), Var("int64", "s")
    partial = seq(
        st(acc, 0, const("float32", 0.0)),
        For(j, TX, op("sub", c64(cols), TX), "serial",
            st(acc, 0, add(ld(acc, 0), ld(A, add(mul(BX, c64(cols)), j)))), threads),
        st(red, TX, ld(acc, 0)), Sync())
    levels = threads.bit_length() - 1
    tree = For(k, c64(0), c64(levels), "unrolled", LetStmt(
        s, op("shr", c64(threads // 2), k),
        seq(IfThenElse(lt(TX, s), st(red, TX, add(ld(red, TX), ld(red, add(TX, s))))),
            Sync())))
    body = Allocate(red, Allocate(acc, seq(partial, tree, IfThenElse(
        Cmp("bool", "eq", TX, c64(0)), st(out, BX, ld(red, 0))))))
    f = PrimFunc("row_sum", (A, out), launch("row_sum_kernel0", (rows,), (threads,), body))
    return Case(f, lambda g: [g.uniform(-1, 1, (rows, cols)).astype("float32")],
                lambda a: [a.astype("float64").sum(1).astype("float32")], ("out",), 1e-4)


def case_half(n: int = 300, threads: int = 128) -> Case:
    """float16 input: ``H = A * A + A * 1.5`` in half arithmetic, ``F = float(A) * 2``."""
    A, H, F = buf("A", n, "float16"), buf("H", n, "float16"), buf("F", n, "float32")
    i = Var("int64", "i")
    a = ld(A, i)
    body = LetStmt(i, global_index(threads), IfThenElse(lt(i, c64(n)), seq(
        st(H, i, add(mul(a, a), mul(a, const("float16", 1.5)))),
        st(F, i, mul(Cast("float32", a), const("float32", 2.0))))))
    f = PrimFunc("half_ops", (A, H, F), launch("half_kernel0", (cdiv(n, threads),),
                                                (threads,), body))

    def ref(a):
        return [a * a + a * np.float16(1.5), a.astype("float32") * 2]

    return Case(f, lambda g: [g.uniform(-4, 4, n).astype("float16")], ref, ("H", "F"), 4e-3)


def case_intdiv(n: int = 203, dtype: str = "int32", threads: int = 64) -> Case:
    """Floor division and modulo on negative operands: ``out[0..3] = A // B, A % B,
    A // 4, A % -3`` (``out`` is ``(4, n)``), and float ``A % Bf`` in ``fm``."""
    A, B = buf("A", n, dtype), buf("B", n, dtype)
    out = buf("out", (4, n), dtype)
    Af, Bf, fm = buf("Af", n), buf("Bf", n), buf("fm", n)
    i = Var("int64", "i")
    a, b = ld(A, i), ld(B, i)
    vals = (op("floordiv", a, b), op("floormod", a, b), op("floordiv", a, const(dtype, 4)),
            op("floormod", a, const(dtype, -3)))
    stores = [st(out, add(c64(k * n), i), v) for k, v in enumerate(vals)]
    stores.append(st(fm, i, op("floormod", ld(Af, i), ld(Bf, i))))
    body = LetStmt(i, global_index(threads), IfThenElse(lt(i, c64(n)), seq(*stores)))
    f = PrimFunc(f"intdiv_{dtype}", (A, B, Af, Bf, out, fm),
                 launch("intdiv_kernel0", (cdiv(n, threads),), (threads,), body))

    def inputs(g):
        a = g.integers(-50, 51, n).astype(dtype)
        b = g.integers(1, 8, n).astype(dtype) * g.choice([-1, 1], n).astype(dtype)
        af = g.uniform(-10, 10, n).astype("float32")
        bf = (g.uniform(0.5, 3, n) * g.choice([-1, 1], n)).astype("float32")
        return [a, b, af, bf]

    def ref(a, b, af, bf):
        return [np.stack([a // b, a % b, a // 4, a % -3]).astype(dtype),
                np.mod(af.astype("float64"), bf.astype("float64")).astype("float32")]

    return Case(f, inputs, ref, ("out", "fm"), 1e-5)


def case_math(n: int = 97, dtype: str = "float32", threads: int = 128) -> Case:
    """Every float intrinsic of :data:`MATH`: ``out[k, i] = f_k(P[i] or S[i])``."""
    P, S = buf("P", n, dtype), buf("S", n, dtype)
    out = buf("out", (len(MATH), n), dtype)
    i = Var("int64", "i")
    src = {"P": ld(P, i), "S": ld(S, i)}
    stores = []
    for k, (name, args) in enumerate(MATH):
        rtype = "bool" if name == "isnan" else dtype
        v = Call(rtype, name, tuple(src[a] for a in args))
        if rtype != dtype:
            v = Cast(dtype, v)
        stores.append(st(out, add(c64(k * n), i), v))
    body = LetStmt(i, global_index(threads), IfThenElse(lt(i, c64(n)), seq(*stores)))
    f = PrimFunc(f"math_{dtype}", (P, S, out),
                 launch("math_kernel0", (cdiv(n, threads),), (threads,), body))

    def inputs(g):
        p = g.uniform(0.25, 3, n)
        s = g.uniform(-3, 3, n)
        s[:6] = [np.nan, 0.5, -0.5, 1.5, -2.5, 2.5]  # NaN and ties of round()
        return [p.astype(dtype), s.astype(dtype)]

    def ref(p, s):
        from math import erf

        p64, s64 = p.astype("float64"), s.astype("float64")
        fns = {"exp": np.exp, "exp2": np.exp2, "log": np.log, "log2": np.log2,
               "log10": np.log10, "sqrt": np.sqrt, "rsqrt": lambda x: 1 / np.sqrt(x),
               "tanh": np.tanh, "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
               "erf": np.vectorize(erf, otypes=["float64"]), "sin": np.sin, "cos": np.cos,
               "floor": np.floor, "ceil": np.ceil, "round": np.round, "trunc": np.trunc,
               "abs": np.abs, "pow": np.power, "fmod": np.fmod, "isnan": np.isnan}
        src64 = {"P": p64, "S": s64}
        rows = [fns[name](*(src64[a] for a in args)) for name, args in MATH]
        return [np.stack(rows).astype(dtype)]

    return Case(f, inputs, ref, ("out",), {"float16": 4e-3, "float32": 1e-5,
                                           "float64": 1e-12}[dtype])


def case_ops(n: int = 77, threads: int = 64) -> Case:
    """Integer wrap-around of narrow types, min/max/abs through helpers, a lazy select
    guarding an out-of-bounds load, bool loads and stores, casts and shifts."""
    X8, Y8 = buf("X8", n, "int8"), buf("Y8", n, "int8")
    U16, I32, F = buf("U16", n, "uint16"), buf("I32", n, "int32"), buf("F", n)
    Bo = buf("Bo", n, "bool")
    W8, M16 = buf("W8", n, "int8"), buf("M16", n, "uint16")
    O32 = buf("O32", (5, n), "int32")
    SEL, BOUT, H = buf("SEL", n), buf("BOUT", n, "bool"), buf("H", n, "float16")
    i = Var("int64", "i")
    x8, y8, u, a, fl = ld(X8, i), ld(Y8, i), ld(U16, i), ld(I32, i), ld(F, i)
    nxt = add(i, c64(1))
    o32 = (op("min", a, const("int32", 7)), op("max", a, const("int32", -7)),
           Call("int32", "abs", (a,)), op("shr", a, const("int32", 3)),
           Cast("int32", mul(fl, const("float32", 3.0))))
    stores = [st(W8, i, add(x8, y8)), st(M16, i, mul(u, u))]
    stores += [st(O32, add(c64(k * n), i), v) for k, v in enumerate(o32)]
    stores += [
        st(SEL, i, Select("float32", lt(nxt, c64(n)), ld(F, nxt), const("float32", -1.0))),
        st(BOUT, i, And("bool", Cmp("bool", "gt", fl, const("float32", 0.0)),
                        Not("bool", ld(Bo, i)))),
        st(H, i, Cast("float16", a)),
    ]
    body = LetStmt(i, global_index(threads), IfThenElse(lt(i, c64(n)), seq(*stores)))
    params = (X8, Y8, U16, I32, F, Bo, W8, M16, O32, SEL, BOUT, H)
    f = PrimFunc("ops", params, launch("ops_kernel0", (cdiv(n, threads),), (threads,), body))

    def inputs(g):
        i32 = g.integers(-3000, 3000, n).astype("int32")
        i32[0] = np.iinfo("int32").min
        return [g.integers(-128, 128, n).astype("int8"), g.integers(-128, 128, n).astype("int8"),
                g.integers(0, 65536, n).astype("uint16"), i32,
                g.uniform(-3, 3, n).astype("float32"), g.integers(0, 2, n).astype(bool)]

    def ref(x8, y8, u16, i32, f, bo):
        with np.errstate(over="ignore"):
            o32 = np.stack([np.minimum(i32, 7), np.maximum(i32, -7), np.abs(i32), i32 >> 3,
                            np.trunc(f * np.float32(3)).astype("int32")]).astype("int32")
            sel = np.append(f[1:], np.float32(-1)).astype("float32")
            return [x8 + y8, u16 * u16, o32, sel, (f > 0) & ~bo, i32.astype("float16")]

    return Case(f, inputs, ref, ("W8", "M16", "O32", "SEL", "BOUT", "H"))


def case_two_kernels(n: int = 300, threads: int = 128) -> Case:
    """Two kernels in order through a device workspace: ``T = A * 2`` (``T`` allocated
    with scope ``global`` outside the kernels), then ``B = T + 1``."""
    A, B, T = buf("A", n), buf("B", n), buf("T", n, scope="global")
    i = global_index(threads)
    grid = (cdiv(n, threads),)
    k0 = launch("scale_kernel0", grid, (threads,),
                IfThenElse(lt(i, c64(n)), st(T, i, mul(ld(A, i), const("float32", 2.0)))))
    k1 = launch("shift_kernel1", grid, (threads,),
                IfThenElse(lt(i, c64(n)), st(B, i, add(ld(T, i), const("float32", 1.0)))))
    f = PrimFunc("two_kernels", (A, B), Allocate(T, seq(k0, k1)))
    return Case(f, lambda g: [g.standard_normal(n, "float32")], lambda a: [a * 2 + 1], ("B",))


def case_big_shared(n: int = 20000, threads: int = 256) -> Case:
    """A shared buffer of ``n`` floats (> 48 KiB: dynamic shared memory): one block copies
    ``A`` into it, synchronises, and writes it back reversed into ``B``."""
    A, B = buf("A", n), buf("B", n)
    sh = buf("stage", (n,), scope="shared")
    j = Var("int64", "j")
    body = Allocate(sh, seq(
        For(j, TX, op("sub", c64(n), TX), "serial", st(sh, j, ld(A, j)), threads),
        Sync(),
        For(j, TX, op("sub", c64(n), TX), "serial",
            st(B, j, ld(sh, op("sub", c64(n - 1), j))), threads)))
    f = PrimFunc("reverse", (A, B), launch("reverse_kernel0", (1,), (threads,), body))
    return Case(f, lambda g: [g.standard_normal(n, "float32")], lambda a: [a[::-1].copy()],
                ("B",))


def all_cases() -> dict:
    """Every case by name (math and intdiv in each dtype)."""
    out = {"vadd": case_vadd(), "axpy": case_axpy(), "transpose": case_transpose(),
           "row_sum": case_row_sum(), "half": case_half(), "ops": case_ops(),
           "two_kernels": case_two_kernels(), "big_shared": case_big_shared()}
    for t in ("int32", "int64"):
        out[f"intdiv_{t}"] = case_intdiv(dtype=t)
    for t in ("float32", "float64", "float16"):
        out[f"math_{t}"] = case_math(dtype=t)
    return out
