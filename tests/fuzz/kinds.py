"""One generator per kind of program (see :data:`.programs.KINDS`); each takes a
:class:`~.programs.Gen` and returns a program dict (see :mod:`.spec`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from polytile.te import dtype as dt

from . import spec
from .programs import DTYPES, MAX_POINTS, Gen, X


def _fit(g: Gen, dims: list, limit: int = MAX_POINTS) -> None:
    """Shrink the largest of ``dims`` until their product is at most ``limit``."""
    while int(np.prod([g.dims[d] for d in dims])) > limit:
        d = max(dims, key=lambda n: g.dims[n])
        g.dims[d] = max(1, g.dims[d] // 2)


def _bcast_read(g: Gen, name: str, axes: list) -> X:
    """Read ``name`` inside a compute over ``axes`` with numpy broadcasting (trailing
    alignment; size-1 dims read at 0)."""
    shape = g.info[name][0]
    off = len(axes) - len(shape)
    idx = []
    for k, n in enumerate(shape):
        idx.append(["int", 0] if n == 1 else ["ax", axes[off + k]])
    return g.read(name, idx)


def _bcast_shape(g: Gen, dims: list) -> list:
    """A shape that broadcasts to ``dims``: leading dims dropped, some set to 1."""
    r = int(g.g.integers(1, len(dims) + 1)) if g.chance(0.5) else len(dims)
    out = []
    for d in dims[len(dims) - r:]:
        out.append("1" if g.chance(0.25) else d)
    return out


def elementwise(g: Gen) -> dict:
    nd = g.pick([1, 2, 2, 3])
    dims = [g.dim() for _ in range(nd)]
    _fit(g, dims, 20_000)
    axes = ["i", "j", "l"][:nd]
    exts = [g.dims[d] for d in dims]
    avail = []
    for k in range(g.pick([1, 2, 2, 3])):
        shape = dims if k == 0 else _bcast_shape(g, dims)
        avail.append(g.placeholder("ABD"[k], shape, g.dtype()))
    last = None
    n = g.pick([1, 2, 2, 3, 4])
    for s in range(n):
        name = "C" if s == n - 1 else "PQRS"[s]
        if len(avail) >= 2 and g.chance(0.15):
            a, b = avail[-1], g.pick(avail[:-1])
            op = "+" if g.info[a][2] * g.info[b][2] > 100 else g.pick(["+", "-", "*"])
            avail.append(g.binop_tensor(a, b, op))
        k = int(g.g.integers(1, min(3, len(avail)) + 1))
        ops = list(dict.fromkeys([avail[-1], *[g.pick(avail) for _ in range(k - 1)]]))
        xs = [_bcast_read(g, t, axes) for t in ops]
        if g.chance(0.3):
            j = int(g.g.integers(nd))
            xs.append(g.index_value(axes[j], exts[j], g.pick(["float32", "float16", "int32"])))
        dtype = g.dtype()
        body = g.combine(xs, dtype)
        if g.chance(0.3):
            other = g.combine([g.pick(xs)], dtype, 1)
            body = X(["sel", g.index_cond(axes, exts), body.t, other.t], dtype,
                     max(body.bound, other.bound), body.exact and other.exact)
        last = g.compute(name, dims, axes, body)
        avail.append(last)
        if g.extended and g.chance(0.2):  # a second output of the same stage
            more = g.combine([g.pick(xs)], g.dtype(), 1)
            g.tensors[-1].update({"more": [more.t], "outputs": 2})
            g.info[f"{name}.v1"] = (g.info[name][0], more.dtype, more.bound, more.exact)
            avail.append(f"{name}.v1")
    outs = [last]
    if g.extended and f"{last}.v1" in g.info and g.chance(0.7):
        outs = g.pick([[last, f"{last}.v1"], [f"{last}.v1"]])
    return g.program(outs)


def _where(g: Gen, raxes: list, rexts: list, axes: list, exts: list):
    k = int(g.g.integers(len(raxes)))
    r = ["ax", raxes[k]]
    choice = g.pick(["mod", "lt_spatial", "ne", "sum", "ge"])
    if choice == "mod":
        return ["cmp", "==", ["op", "%", r, ["int", g.pick([2, 3])]], ["int", 0]]
    if choice == "lt_spatial" and axes:
        j = int(g.g.integers(len(axes)))
        return ["cmp", "<", r, ["op", "+", ["ax", axes[j]], ["int", g.pick([0, 1, 3])]]]
    if choice == "ne" and axes:
        return ["cmp", "!=", r, ["ax", g.pick(axes)]]
    if choice == "sum" and len(raxes) > 1:
        return ["cmp", "<", ["op", "+", r, ["ax", raxes[k - 1]]],
                ["int", int(g.g.integers(1, rexts[k] + rexts[k - 1] + 1))]]
    return ["cmp", ">=", r, ["int", int(g.g.integers(0, rexts[k] + 1))]]


@dataclass
class _Frame:
    """The loops of a reduction: ``sdims``/``rdims`` (dim names of the spatial and reduce
    extents), ``axes`` (spatial axis names, ``["z"]`` with none), ``shape`` (the output
    shape, ``["1"]`` with none), ``exts`` (spatial extents), ``raxes`` (reduce axis names),
    ``rng`` (the reduce axes as ``[name, lo, hi]``), ``all_axes``/``all_dims`` (the axes
    indexing the input, spatial then reduce, and their extents, offsets included)."""

    sdims: list
    rdims: list
    axes: list
    shape: list
    exts: list
    raxes: list
    rng: list
    all_axes: list
    all_dims: list

    @property
    def spatial(self) -> list:
        """The spatial axes (``[]`` for a reduction to a scalar)."""
        return self.axes if self.sdims else []

    def rexts(self, g: Gen) -> list:
        return [g.dims[d] for d in self.rdims]


#: extents of the first reduce axis of ``xreduce`` programs: around the thread counts a
#: cross-thread reduction binds (whole warps 32/64/128 and 48), below, at and above them
XR_EXTENTS = (1, 7, 31, 32, 33, 47, 48, 64, 65, 96, 100, 127, 128, 129, 200, 256, 300)


def _frame(g: Gen, los_from: list, wide: bool = False) -> _Frame:
    """Draw the loops of a reduction (0-2 spatial, 1-2 reduce axes, each reduce axis from an
    offset picked in ``los_from``); reduction and argreduce draw them alike. ``wide``
    (``xreduce`` programs): the first reduce extent from :data:`XR_EXTENTS`."""
    ns = g.pick([0, 1, 1, 2])
    nr = g.pick([1, 1, 2])
    sdims = [g.dim() for _ in range(ns)]
    rdims = [g.dim(int(g.pick(XR_EXTENTS)) if wide and not k else None) for k in range(nr)]
    _fit(g, sdims + rdims)
    axes = ["i", "j"][:ns] or ["z"]
    raxes = ["k", "q"][:nr]
    los = [g.pick(los_from) for _ in range(nr)]
    rdim_exprs = [f"{lo} + {d}" if lo else d for lo, d in zip(los, rdims)]
    return _Frame(sdims, rdims, axes, sdims or ["1"], [g.dims[d] for d in sdims] or [1],
                  raxes, [[r, str(lo), e] for r, lo, e in zip(raxes, los, rdim_exprs)],
                  (axes if ns else []) + raxes, sdims + rdim_exprs)


def _maybe_where(g: Gen, f: _Frame, red: dict) -> None:
    """Sometimes (35 %) a ``where`` condition on the reduce axes of ``red``."""
    if g.chance(0.35):
        red["where"] = _where(g, f.raxes, f.rexts(g), f.spatial, f.exts)


def _per_term(g: Gen, x: X, n: int) -> X:
    """``x`` scaled so that a sum of ``n`` such terms stays in range; its bound per term."""
    x = g.tame(X(x.t, x.dtype, x.bound * n, x.exact))
    return X(x.t, x.dtype, x.bound / n if x.bound * n > 0 else 0, x.exact)


def reduction(g: Gen, wide: bool = False) -> dict:
    f = _frame(g, [0, 0, 0, 1, 2, 3], wide)
    sdims, rdims, axes, shape, raxes = f.sdims, f.rdims, f.axes, f.shape, f.raxes
    ns, nr = len(sdims), len(rdims)
    # X is indexed by the spatial and reduce axes in a random order
    order = list(range(ns + nr))
    g.g.shuffle(order)
    all_axes, all_dims = f.all_axes, f.all_dims
    dtype_in = g.dtype()
    X0 = g.placeholder("A", [all_dims[k] for k in order], dtype_in)
    src_name = X0
    if g.chance(0.3):  # a producer stage, for compute_at / inline
        rd = g.read(X0, [["ax", f"p{k}"] for k in range(len(order))])
        body = g.combine([rd], g.dtype(), 1)
        src_name = g.compute("P", [all_dims[k] for k in order], [f"p{k}" for k in
                                                               range(len(order))], body)
    xs = [g.read(src_name, [["ax", all_axes[k]] for k in order])]
    if g.chance(0.4):  # a second operand indexed by the reduce axes only
        Y = g.placeholder("B", all_dims[ns:], g.dtype())
        xs.append(g.read(Y, [["ax", r] for r in raxes]))
    op = g.pick(["sum", "sum", "sum", "max", "min"])
    out = g.dtype()
    src = g.combine(xs, out)
    n = int(np.prod(f.rexts(g)))
    if op == "sum":
        src = _per_term(g, src, n)
    red = {"op": op, "axes": f.rng, "where": None, "init": None}
    _maybe_where(g, f, red)
    if g.chance(0.1):
        red["init"] = g.lit(X([], out, 1.0)).t
    bound = src.bound * (n if op == "sum" else 1) + 8
    exact = src.exact and (op != "sum" or not dt.is_float(out))
    R = g.compute("R", shape, axes, src, red, bound, exact)
    last = R
    if g.chance(0.4):  # an epilogue
        body = g.combine([g.read(R, [["ax", a] for a in axes])], g.dtype(), 1)
        last = g.compute("E", shape, axes, body)
    return g.program([last])


def matmul(g: Gen, batch: bool = False) -> dict:
    M, N, K = g.dim(), g.dim(), g.dim()
    Bt = g.dim(g.pick([1, 2, 3, 4, 5, 7])) if batch else None
    _fit(g, [d for d in (Bt, M, N, K) if d])
    lo = g.pick([0, 0, 0, 1, 2])
    kd = f"{lo} + {K}" if lo else K
    variant = g.pick(["f32", "f16acc", "i8", "f16", "i32"] + (["bf16acc", "bf16", "i4"] if
                                                               g.extended else []))
    din = {"f32": "float32", "f16acc": "float16", "i8": "int8", "f16": "float16",
           "i32": "int32", "bf16acc": "bfloat16", "bf16": "bfloat16", "i4": "int4"}[variant]
    trans = g.chance(0.3)
    bshared = batch and g.chance(0.3)
    b = [Bt] if batch else []
    bi = [["ax", "b"]] if batch else []
    A = g.placeholder("A", b + [M, kd], din)
    B = g.placeholder("B", ([] if bshared else b) + ([N, kd] if trans else [kd, N]), din)
    a_src = A
    if g.chance(0.2):
        rd = g.read(A, [["ax", x] for x in ["b", "i", "k"][0 if batch else 1:]])
        a_src = g.compute("P", b + [M, kd], ["b", "i", "k"][0 if batch else 1:],
                          g.combine([rd], din, 1))
    ra = g.read(a_src, bi + [["ax", "i"], ["ax", "k"]])
    rb = g.read(B, ([] if bshared else bi) + ([["ax", "j"], ["ax", "k"]] if trans
                                              else [["ax", "k"], ["ax", "j"]]))
    acc = {"f16acc": "float32", "i8": "int32", "bf16acc": "float32", "i4": "int32"}.get(
        variant, din)
    src = g.binop(g.conv(ra, acc), g.conv(rb, acc), "*")
    red = {"op": "sum", "axes": [["k", str(lo), kd]], "where": None, "init": None}
    axes = (["b"] if batch else []) + ["i", "j"]
    shape = b + [M, N]
    C = g.compute("C", shape, axes, src, red, src.bound * g.dims[K],
                  not dt.is_float(acc))
    last = C
    if g.chance(0.5):
        rd = g.read(C, [["ax", a] for a in axes])
        choice = g.pick(["relu", "cast", "bias"])
        if choice == "relu":
            body = X(["fn", "max", rd.t, ["int", 0] if not dt.is_float(acc) else ["lit", 0.0]],
                     acc, rd.bound, rd.exact)
        elif choice == "cast":
            body = g.conv(g.tame(rd), g.pick(DTYPES))
        else:
            bias = g.placeholder("D", [N], acc)
            body = g.binop(rd, g.read(bias, [["ax", "j"]]), "+")
        last = g.compute("E", shape, axes, body)
    return g.program([last])


def stencil(g: Gen) -> dict:
    r = g.g.random()
    if r < 0.3:
        return _stencil2d(g)
    if r < 0.55:
        return _quasi2d(g)
    N = g.dim(lo=2)
    p = g.pick([0, 1, 1, 2])
    dtype = g.dtype()
    A = g.placeholder("A", [N], dtype)
    zero = ["lit", 0.0] if dt.is_float(dtype) else ["int", 0]
    variant = g.pick(["padstage", "inline", "quasi", "taps"])
    if variant in ("padstage", "taps") or p == 0:
        full = f"{N} + {2 * p}" if p else N
        inside = ["all", [["cmp", ">=", ["ax", "i"], ["int", p]],
                          ["cmp", "<", ["ax", "i"], ["op", "+", ["dim", N], ["int", p]]]]]
        rd = g.read(A, [["op", "-", ["ax", "i"], ["int", p]] if p else ["ax", "i"]])
        val = g.combine([rd], dtype, g.pick([0, 1]))
        body = X(["sel", inside, val.t, zero], dtype, val.bound, val.exact) if p else val
        P = g.compute("P", [full], ["i"], body)
        if variant == "taps":
            taps = [g.read(P, [["op", "+", ["ax", "i"], ["int", w]]]) for w in range(2 * p + 1)]
            body = g.combine(taps, g.dtype(), 0)
            C = g.compute("C", [N], ["i"], body)
        else:
            w = g.read(P, [["op", "+", ["ax", "i"], ["ax", "w"]]])
            red = {"op": g.pick(["sum", "sum", "max"]), "axes": [["w", "0", str(2 * p + 1)]],
                   "where": None, "init": None}
            src = g.combine([w], g.dtype(), 0)
            C = g.compute("C", [N], ["i"], src, red, src.bound * (2 * p + 1) + 1,
                          not dt.is_float(src.dtype))
    elif variant == "inline":
        pos = ["op", "-", ["op", "+", ["ax", "i"], ["ax", "w"]], ["int", p]]
        inside = ["all", [["cmp", ">=", pos, ["int", 0]], ["cmp", "<", pos, ["dim", N]]]]
        rd = g.read(A, [pos])
        src = X(["sel", inside, rd.t, zero], dtype, rd.bound, True)
        red = {"op": "sum", "axes": [["w", "0", str(2 * p + 1)]], "where": None, "init": None}
        C = g.compute("C", [N], ["i"], src, red, src.bound * (2 * p + 1) + 1,
                      not dt.is_float(dtype))
    else:  # quasi-affine taps of a producer
        P = g.compute("P", [N], ["i"], g.combine([g.read(A, [["ax", "i"]])], dtype, 1))
        idx = [["op", "//", ["ax", "i"], ["int", 2]], ["op", "%", ["ax", "i"], ["int", 3]],
               ["op", "-", ["op", "-", ["dim", N], ["int", 1]], ["ax", "i"]], ["ax", "i"]]
        k = int(g.g.integers(2, 5))
        taps = [g.read(P, [idx[t]]) for t in g.g.permutation(4)[:k]]
        C = g.compute("C", [N], ["i"], g.combine(taps, g.dtype(), 0))
    last = C
    if g.chance(0.35):  # a consumer of a consumer, with quasi-affine indices
        if g.chance(0.5):
            D = g.compute("D", [f"2 * {N}"], ["i"], g.combine(
                [g.read(C, [["op", "//", ["ax", "i"], ["int", 2]]])], g.dtype(), 1))
        else:
            D = g.compute("D", [N], ["i"], g.combine(
                [g.read(C, [["op", "-", ["op", "-", ["dim", N], ["int", 1]], ["ax", "i"]]])],
                g.dtype(), 1))
        last = D
    return g.program([last])


def _stencil2d(g: Gen) -> dict:
    H, W = g.dim(lo=2), g.dim(lo=2)
    _fit(g, [H, W], 2000)
    dtype = g.dtype()
    A = g.placeholder("A", [H, W], dtype)
    zero = ["lit", 0.0] if dt.is_float(dtype) else ["int", 0]
    R = g.pick([2, 3])
    pad = R // 2
    y = ["op", "-", ["op", "+", ["ax", "y"], ["ax", "ry"]], ["int", pad]]
    x = ["op", "-", ["op", "+", ["ax", "x"], ["ax", "rx"]], ["int", pad]]
    if g.chance(0.5):
        inside = ["all", [["cmp", ">=", y, ["int", 0]], ["cmp", "<", y, ["dim", H]],
                          ["cmp", ">=", x, ["int", 0]], ["cmp", "<", x, ["dim", W]]]]
        rd = g.read(A, [y, x])
        src = X(["sel", inside, rd.t, zero], dtype, rd.bound, True)
    else:
        py = ["op", "-", ["ax", "a"], ["int", pad]]
        px = ["op", "-", ["ax", "c"], ["int", pad]]
        inside = ["all", [["cmp", ">=", py, ["int", 0]], ["cmp", "<", py, ["dim", H]],
                          ["cmp", ">=", px, ["int", 0]], ["cmp", "<", px, ["dim", W]]]]
        rd = g.read(A, [py, px])
        val = X(["sel", inside, rd.t, zero], dtype, rd.bound, True)
        P = g.compute("P", [f"{H} + {2 * pad}", f"{W} + {2 * pad}"], ["a", "c"], val)
        src = g.read(P, [["op", "+", ["ax", "y"], ["ax", "ry"]],
                         ["op", "+", ["ax", "x"], ["ax", "rx"]]])
    if g.chance(0.5):
        Kw = g.placeholder("K", [str(R), str(R)], dtype)
        src = g.binop(src, g.read(Kw, [["ax", "ry"], ["ax", "rx"]]), "*")
    red = {"op": g.pick(["sum", "sum", "max", "min"]), "axes": [["ry", "0", str(R)],
                                                               ["rx", "0", str(R)]],
           "where": None, "init": None}
    C = g.compute("C", [H, W], ["y", "x"], src, red, src.bound * R * R + 1,
                  not dt.is_float(src.dtype))
    return g.program([C])


_ROWS = (["op", "%", ["ax", "i"], ["int", 2]], ["op", "//", ["ax", "i"], ["int", 2]],
         ["op", "-", ["op", "-", ["dim", "N0"], ["int", 1]], ["ax", "i"]], ["ax", "i"])
_COLS = (["op", "+", ["ax", "i"], ["ax", "w"]],
         ["op", "+", ["op", "+", ["op", "*", ["ax", "j"], ["int", 3]], ["int", 1]], ["ax", "w"]],
         ["op", "+", ["op", "//", ["ax", "j"], ["int", 3]], ["ax", "w"]],
         ["op", "+", ["ax", "j"], ["ax", "w"]])


def _quasi2d(g: Gen) -> dict:
    """A producer read at several quasi-affine taps inside a reduction, then maybe a
    consumer of that (nested attaches with ``i % 2``, ``j // 3``, ``N - 1 - i``)."""
    N0, N1 = g.dim(lo=2), g.dim()
    _fit(g, [N0, N1], 1500)
    W = g.pick([1, 2, 3])
    dtype = g.dtype()
    cols = f"{N0} + 3 * {N1} + {W}"
    A = g.placeholder("A", [N0, cols], dtype)
    rd = g.read(A, [["ax", "a"], ["ax", "c"]])
    body = g.combine([rd, g.index_value("a", g.dims[N0], dtype if dt.is_float(dtype)
                                        else "int32")], dtype, 0)
    P = g.compute("P", [N0, cols], ["a", "c"], body)
    taps = []
    for _ in range(g.pick([1, 2, 3])):
        taps.append(g.read(P, [g.pick(_ROWS), g.pick(_COLS)]))
    src = g.combine(taps, g.dtype(), 0)
    red = {"op": g.pick(["sum", "sum", "max"]), "axes": [["w", "0", str(W)]], "where": None,
           "init": None}
    C = g.compute("C", [N0, N1], ["i", "j"], src, red, src.bound * W + 1,
                  not dt.is_float(src.dtype))
    last = C
    if g.chance(0.6):
        last = g.compute("D", [f"2 * {N0}", N1], ["i", "j"], g.combine(
            [g.read(C, [["op", "//", ["ax", "i"], ["int", 2]], ["ax", "j"]])], g.dtype(), 1))
    return g.program([last])


def transpose(g: Gen) -> dict:
    nd = g.pick([2, 2, 3])
    dims = [g.dim() for _ in range(nd)]
    _fit(g, dims, 20_000)
    names = ["i", "j", "l"][:nd]
    perm = list(g.g.permutation(nd))
    if perm == sorted(perm):
        perm = perm[1:] + perm[:1]
    dtype = g.dtype()
    A = g.placeholder("A", dims, dtype)
    src = A
    if g.chance(0.3):
        src = g.compute("P", dims, names, g.combine([g.read(A, [["ax", a] for a in names])],
                                                   g.dtype(), 1))
    # T[out axes] = src[in order]: out axis k iterates input dim perm[k]
    out_dims = [dims[k] for k in perm]
    out_axes = [f"t{k}" for k in range(nd)]
    idx = [None] * nd
    for k, d in enumerate(perm):
        idx[d] = ["ax", out_axes[k]]
    T = g.compute("T", out_dims, out_axes, g.combine([g.read(src, idx)], g.dtype(),
                                                     g.pick([0, 0, 1])))
    last = T
    if g.chance(0.3):
        Bq = g.placeholder("B", out_dims, g.dtype())
        last = g.compute("C", out_dims, out_axes, g.combine(
            [g.read(T, [["ax", a] for a in out_axes]), g.read(Bq, [["ax", a] for a in out_axes])],
            g.dtype(), 0))
    return g.program([last])


GENERATORS = {"elementwise": elementwise, "reduction": reduction, "matmul": matmul,
              "batch_matmul": lambda g: matmul(g, batch=True), "stencil": stencil,
              "transpose": transpose}


def argreduce(g: Gen, wide: bool = False) -> dict:
    """Reductions written with ``te.comm_reducer`` (:data:`.spec.COMBINERS`): argmax/argmin
    over ``(index, value)`` pairs (a compute with two outputs), an integer product, and
    ``+``/``max`` as user combiners; over one or two reduce axes with offsets and ``where``,
    maybe a producer before and an epilogue after (reading either output)."""
    f = _frame(g, [0, 0, 1, 2], wide)
    rdims, axes, shape = f.rdims, f.axes, f.shape
    nr = len(rdims)
    n = int(np.prod(f.rexts(g)))
    all_dims, all_axes = f.all_dims, f.all_axes
    op = g.pick(["argmax", "argmax", "argmin", "prod", "csum", "cmax"])
    dtype = g.dtype(("int32", "int8") if op == "prod" else DTYPES)
    A = g.placeholder("A", all_dims, dtype)
    src = A
    if g.chance(0.3):  # a producer stage, for compute_at / inline
        p_axes = [f"p{k}" for k in range(len(all_dims))]
        rd = g.read(A, [["ax", a] for a in p_axes])
        src = g.compute("P", all_dims, p_axes, g.combine([rd], dtype, 1))
    x = g.read(src, [["ax", a] for a in all_axes])
    if op == "prod":  # small factors, so that products wrap without reaching 0 at once
        x = X(["op", "+", ["op", "%", x.t, ["int", g.pick([3, 5, 7])]], ["int", 1]], dtype,
              8.0)
    elif op == "csum":
        x = _per_term(g, x, n)
    red = {"op": op, "axes": f.rng, "where": None, "init": None}
    _maybe_where(g, f, red)
    tensor = {"name": "R", "shape": list(shape), "axes": list(axes), "body": x.t,
              "reduce": red}
    g.tensors.append(tensor)
    if op in ("argmax", "argmin"):
        # the index: the reduce axis, or both reduce axes linearised
        idx = ["ax", "k"] if nr == 1 or g.chance(0.3) else [
            "op", "+", ["op", "*", ["ax", "k"], ["int", g.dims[rdims[1]]]], ["ax", "q"]]
        red["index"] = idx
        tensor["outputs"] = 2
        g.info["R"] = ([g.val(s) for s in shape], "int32", 2.0 ** 31, True)
        g.info["R.v1"] = ([g.val(s) for s in shape], x.dtype, x.bound + 1, x.exact)
        outs = g.pick([["R", "R.v1"], ["R"], ["R.v1"], ["R.v1", "R"]])
    else:
        bound = x.bound * n + 8 if op == "csum" else (2.0 ** 31 if op == "prod" else x.bound)
        exact = op != "csum" or not dt.is_float(dtype)
        g.info["R"] = ([g.val(s) for s in shape], x.dtype, bound, exact and x.exact)
        outs = ["R"]
    if g.chance(0.4):  # an epilogue reading each output
        rds = [g.read(o, [["ax", a] for a in axes]) for o in outs]
        if op in ("argmax", "argmin") and "R" in outs:  # the index as a value
            k = outs.index("R")
            rds[k] = g.conv(X(["fn", "min", rds[k].t, ["int", 1 << 20]], "int32", 1 << 20),
                            g.pick(["int32", "float32"]))
        outs = [g.compute("E", shape, axes, g.combine(rds, g.dtype(), 1))]
    return g.program(outs)


def scan(g: Gen) -> dict:
    """A ``te.scan`` recurrence over the rows of ``A``: ``L`` initial rows from a compute,
    each later row from the previous one (maybe reversed, ``N - 1 - i``, or the row before
    it) combined with ``A[t, i]``; maybe an epilogue."""
    T, N = g.dim(lo=2), g.dim()
    _fit(g, [T, N], 4000)
    L = 1 if g.dims[T] < 3 or g.chance(0.7) else 2
    dtype = g.dtype()
    A = g.placeholder("A", [T, N], dtype)
    init = g.compute("S_init", [str(L), N], ["t", "i"], g.combine(
        [g.read(A, [["ax", "t"], ["ax", "i"]])], dtype, g.pick([0, 1])))
    g.tensors.append({"name": "S_state", "shape": [T, N], "dtype": dtype, "state": True})
    g.info["S_state"] = ([g.dims[T], g.dims[N]], dtype, g.info[init][2], True)
    prev = ["op", "-", ["ax", "t"], ["int", g.pick([1, 1, L])]]
    col = g.pick([["ax", "i"], ["ax", "i"], ["op", "-", ["op", "-", ["dim", N], ["int", 1]],
                                                       ["ax", "i"]]])
    st = g.read("S_state", [prev, col])
    a = g.combine([g.read(A, [["ax", "t"], ["ax", "i"]])], dtype, g.pick([0, 1]))
    # + - max min keep the bound linear in the number of rows (no products of states)
    body = g.binop(st, a, g.pick(["+", "-", "max", "min"]))
    if dt.is_float(dtype) and g.chance(0.3):
        body = X(["op", "*", body.t, ["lit", 0.5]], dtype, body.bound, False)
    body = g.conv(body, dtype)
    body = X(body.t, dtype, body.bound * g.dims[T], body.exact)
    g.compute("S_update", [T, N], ["t", "i"], body)
    g.tensors.append({"name": "S", "scan": ["S_init", "S_update", "S_state"]})
    g.info["S"] = ([g.dims[T], g.dims[N]], dtype, body.bound, body.exact)
    last = "S"
    if g.chance(0.4):
        last = g.compute("E", [T, N], ["t", "i"], g.combine(
            [g.read("S", [["ax", "t"], ["ax", "i"]])], g.dtype(), 1))
    return g.program([last])


def extend(g: Gen, prog: dict) -> dict:
    """The features of extended seeds on any program: sometimes a second output (an
    intermediate tensor also returned, read by later stages), sometimes symbolic sizes
    (``te.size_var`` dims bound when the function is called)."""
    outs = prog["outputs"]
    computed = [n for t in prog["tensors"] if ("body" in t or "binop" in t) and not any(
        x.get("state") for x in prog["tensors"] if x["name"] in spec.tensor_reads(t))
        for n in spec.tensor_names(t) if n not in outs]
    if computed and g.chance(0.25):
        extra = g.pick(computed)
        k = int(g.g.integers(len(outs) + 1))
        prog["outputs"] = outs[:k] + [extra] + outs[k:]
    # (tensor-level broadcasting needs static sizes: it tests which dims are 1)
    if prog["dims"] and g.chance(0.35) and not any("binop" in t for t in prog["tensors"]):
        # a call reads a size off an argument's dimension equal to it
        args = set(spec.args_of(prog))
        words = {x for t in prog["tensors"] if t["name"] in args for x in t.get("shape", [])}
        used = [d for d in prog["dims"] if d in words]
        sym = [d for d in used if g.chance(0.6)] or used[:1]
        if sym:
            prog["symbolic"] = sym
    return prog


def xreduce(g: Gen) -> dict:
    """A reduction for a cross-thread schedule (:meth:`.schedules.SchedGen.xreduce`): the
    programs of :func:`reduction` (and a quarter of the time :func:`argreduce`) whose first
    reduce axis has an extent of :data:`XR_EXTENTS`."""
    return argreduce(g, wide=True) if g.chance(0.25) else reduction(g, wide=True)


GENERATORS["argreduce"] = argreduce
GENERATORS["scan"] = scan
GENERATORS["xreduce"] = xreduce


#: the elements a ``tuplered`` reduction draws (each its own combiner and dtype):
#: ``sumsq`` is a sum of ``x * x``, ``count`` a sum of ``1`` (int32)
TUPLE_PARTS = ("sum", "sumsq", "max", "min", "count")
#: dtypes of the elements of a ``tuplered`` reduction (each accumulates in its own dtype:
#: a bfloat16 or int8 sum too), mostly float32/float16/int32
TUPLE_DTYPES = ("float32", "float32", "float32", "float16", "float16", "int32", "int32",
                "bfloat16", "int8", "int16")


def _tuple_producer(g: Gen, dims: list, dtype: str) -> list:
    """A multi-output producer ``P, P.v1 = te.compute(dims, lambda ...: (f(A), h(A)))``
    of placeholder ``A`` (already defined over ``dims``); the names of its outputs."""
    axes = [f"p{k}" for k in range(len(dims))]
    rd = g.read("A", [["ax", a] for a in axes])
    first = g.combine([rd], g.dtype(TUPLE_DTYPES), 1)
    second = g.combine([rd], g.dtype(TUPLE_DTYPES), g.pick([0, 1]))
    g.compute("P", dims, axes, first)
    g.tensors[-1].update({"more": [second.t], "outputs": 2})
    g.info["P.v1"] = (g.info["P"][0], second.dtype, second.bound, second.exact)
    return ["P", "P.v1"]


def tuplered(g: Gen) -> dict:
    """Tuple reductions with independent combiners (seeds from
    :data:`.cases.EXTENDED4_FROM`): ``te.comm_reducer`` over 2-3 elements, each its own
    combiner and dtype (sum and sum of squares, min and max, sum and max, argmax/argmin
    with a count or a sum, :func:`.spec.combiner_code`), over one or two reduce axes with
    offsets and ``where``; the source maybe a multi-output producer (``P, P.v1``); maybe a
    multi-output epilogue reading the outputs."""
    f = _frame(g, [0, 0, 0, 1, 2], wide=g.chance(0.5))
    rdims, axes, shape = f.rdims, f.axes, f.shape
    n = int(np.prod(f.rexts(g)))
    A = g.placeholder("A", f.all_dims, g.dtype(TUPLE_DTYPES if g.chance(0.7) else DTYPES))
    srcs = [A]
    if g.chance(0.45):
        srcs = _tuple_producer(g, f.all_dims, g.info[A][1])
    if g.chance(0.25):
        srcs.append(g.placeholder("B", f.all_dims[len(f.spatial):], g.dtype(TUPLE_DTYPES)))

    def operand():
        s = g.pick(srcs)
        idx = f.all_axes if s != "B" else f.raxes
        return g.read(s, [["ax", a] for a in idx])

    parts = []
    # (rarely: chosen when polytile proved no argmax combiner and refused most schedules
    # drawn for them; it proves this lexicographic form now, te/algebra.py)
    if g.chance(0.12):
        parts.append(g.pick(["argmax", "argmin"]))
    while len(parts) < 2 or (len(parts) < 3 and g.chance(0.3)):
        parts.append(g.pick(TUPLE_PARTS))
    op = "tup_" + "_".join({"sumsq": "sum", "count": "sum"}.get(p, p) for p in parts)
    elems, index = [], None   # (X, output bound, exact) per element
    for p in parts:
        if p == "count":
            elems.append((X(["c", 1, "int32"], "int32", 1.0), float(n) + 1, True))
            continue
        d = g.dtype(TUPLE_DTYPES)
        x = g.combine([operand()], d, g.pick([0, 0, 1]))
        if p in ("argmax", "argmin"):
            index = ["ax", "k"] if len(rdims) == 1 or g.chance(0.3) else [
                "op", "+", ["op", "*", ["ax", "k"], ["int", g.dims[rdims[1]]]], ["ax", "q"]]
            elems.append((X(index, "int32", 2.0 ** 31), 2.0 ** 31, True))
            elems.append((x, x.bound + 1, x.exact))
            continue
        if p == "sumsq":
            x = g.binop(x, x, "*")
        if p in ("sum", "sumsq"):
            x = _per_term(g, x, n)
            elems.append((x, x.bound * n + 8, x.exact and not dt.is_float(x.dtype)))
        else:
            elems.append((x, x.bound, x.exact))
    red = {"op": op, "axes": f.rng, "where": None, "init": None}
    _maybe_where(g, f, red)
    if index is None and g.chance(0.15):  # an initial value per element
        red["init"] = [g.lit(x).t for x, _, _ in elems]
        elems = [(x, b + 8, e and not dt.is_float(x.dtype)) for x, b, e in elems]
    body = elems[1 if index is not None else 0][0]
    if index is not None:
        red["index"] = index
    red["tuple"] = [x.t for x, _, _ in elems[2 if index is not None else 1:]]
    g.tensors.append({"name": "R", "shape": list(shape), "axes": list(axes), "body": body.t,
                      "reduce": red, "outputs": len(elems)})
    names = spec.tensor_names(g.tensors[-1])
    for name, (x, bound, exact) in zip(names, elems):
        g.info[name] = ([g.val(s) for s in shape], x.dtype, bound, exact)
    outs = [nm for nm in names if g.chance(0.6)] or [g.pick(names)]
    if g.chance(0.2):
        outs = outs[::-1]
    if g.chance(0.45):  # an epilogue reading some outputs: maybe two outputs itself
        rds = []
        for o in dict.fromkeys(outs + [g.pick(names)]):
            rd = g.read(o, [["ax", a] for a in axes])
            if index is not None and o == "R":  # the index as a value
                rd = g.conv(X(["fn", "min", rd.t, ["int", 1 << 20]], "int32", 1 << 20),
                            g.pick(["int32", "float32"]))
            elif not dt.is_float(rd.dtype) and rd.bound > 1 << 20:  # a count, a wrapped sum
                rd = g.clip_int(rd, 1 << 20)
            rds.append(rd)
        g.compute("E", shape, axes, g.combine(rds, g.dtype(TUPLE_DTYPES), 1))
        outs = ["E"]
        if g.chance(0.5):
            more = g.combine([g.pick(rds)], g.dtype(TUPLE_DTYPES), 1)
            g.tensors[-1].update({"more": [more.t], "outputs": 2})
            g.info["E.v1"] = (g.info["E"][0], more.dtype, more.bound, more.exact)
            outs = g.pick([["E", "E.v1"], ["E.v1"], ["E.v1", "E"]])
    return g.program(outs)


GENERATORS["tuplered"] = tuplered


def norm(g: Gen) -> dict:
    """Two reductions in a chain over the same rows, as softmax and layer norm are
    written (seeds from :data:`.cases.EXTENDED5_FROM`): ``M[rows] = max|min|sum over the
    reduce axes of f(A[rows, red])``; ``E[rows, cols] = h(A[rows, cols], M[rows])``
    (``exp(A - M)`` for a float max); ``S[rows] = sum of E[rows, red]`` (maybe with
    ``where``); ``O[rows, cols] = u(E[rows, cols], S[rows])``; the output ``O``, maybe
    with ``S`` or ``M`` too. One or two row axes, one or two reduce axes (which the
    elementwise stages index as data axes ``c``, ``d``); any dtype."""
    ns = g.pick([1, 1, 2])
    nr = g.pick([1, 1, 1, 2])
    sdims = [g.dim() for _ in range(ns)]
    rdims = [g.dim(int(g.pick(XR_EXTENTS)) if g.chance(0.4) else None) for _ in range(nr)]
    _fit(g, sdims + rdims, 20_000)
    axes, raxes, caxes = ["i", "j"][:ns], ["k", "q"][:nr], ["c", "d"][:nr]
    rexts = [g.dims[d] for d in rdims]
    n = int(np.prod(rexts))
    dtype = g.dtype()
    A = g.placeholder("A", sdims + rdims, dtype)

    def rows():
        return [["ax", a] for a in axes]

    op1 = g.pick(["max", "max", "sum", "min"])
    x = g.combine([g.read(A, rows() + [["ax", r] for r in raxes])], dtype, g.pick([0, 0, 1]))
    if op1 == "sum":
        x = _per_term(g, x, n)
    bound = x.bound * (n if op1 == "sum" else 1) + 8
    exact = x.exact and (op1 != "sum" or not dt.is_float(x.dtype))
    rng = [[r, "0", d] for r, d in zip(raxes, rdims)]
    M = g.compute("M", list(sdims), axes, x, {"op": op1, "axes": rng, "where": None,
                                                "init": None}, bound, exact)
    a = g.read(A, rows() + [["ax", c] for c in caxes])
    m = g.read(M, rows())
    plain = x.t == g.read(A, rows() + [["ax", r] for r in raxes]).t
    if op1 == "max" and plain and dt.is_float(dtype) and g.chance(0.7):
        # softmax: A - M <= 0 (M is the max of A itself), so exp(A - M) is in (0, 1]
        diff = g.binop(a, m, "-")
        e = X(["fn", "exp", diff.t], diff.dtype, 1.0, False)
    else:
        e = g.combine([a, m], g.dtype(), g.pick([0, 1]))
    E = g.compute("E", list(sdims) + list(rdims), axes + caxes, e)
    s = _per_term(g, g.read(E, rows() + [["ax", r] for r in raxes]), n)
    red = {"op": "sum", "axes": [[r, "0", d] for r, d in zip(raxes, rdims)], "where": None,
           "init": None}
    if g.chance(0.25):
        red["where"] = _where(g, raxes, rexts, axes, [g.dims[d] for d in sdims])
    S = g.compute("S", list(sdims), axes, s, red, s.bound * n + 8,
                  s.exact and not dt.is_float(s.dtype))
    o = g.combine([g.read(E, rows() + [["ax", c] for c in caxes]), g.read(S, rows())],
                  g.dtype(), g.pick([0, 1]))
    O = g.compute("O", list(sdims) + list(rdims), axes + caxes, o)
    outs = g.pick([[O], [O], [O], [O, S], [S, O], [O, M]])
    return g.program(outs)


GENERATORS["norm"] = norm
