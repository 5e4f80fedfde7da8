"""Built-in templates: dense linear algebra (``matmul``, ``batch_matmul``); the neural-network
ones live in :mod:`.templates_nn`. Each has default sizes, a numpy reference and a
hand-written default config (the ``default=`` of its knobs).

The CPU matmul schedule space follows the register-blocking recipe: the output is tiled
``i = i0 * I1 * I2 + i1 * I2 + i2``, ``j = j0 * J1 * J2 + j1 * J2 + j2``, ``k = k0 * K1 + k1``;
the innermost ``I2 x J2`` block of accumulators stays in vector registers (``j2``
vectorized, ``i2`` unrolled) while ``k1`` runs; ``k0, i1, j1`` order the cache blocks; B is
optionally packed into ``[N / (J1 J2), K, J1 J2]`` panels; the outer loops run in parallel.
"""

from __future__ import annotations

import numpy as np

from polytile import te

from .template import get_config, template

#: Vector widths (lanes) the inner j loop may take.
LANES = (8, 16, 32, 64)


def _lane_filter(n: int):
    """Inner split sizes allowed for a vectorized axis of extent ``n``: widths from
    :data:`LANES` dividing ``n``, or any divisor up to 64 when none does."""
    ok = [w for w in LANES if n % w == 0]
    if ok:
        return lambda e: e.size[-1] in ok
    return lambda e: e.size[-1] <= 64


def _mm_reference(a, b, *, args=()):
    return a @ b


@template("matmul", default_args=(1024, 1024, 1024),
          flops=lambda M, N, K: 2.0 * M * N * K, reference=_mm_reference, target="llvm")
def matmul(M: int, N: int, K: int, dtype: str = "float32"):
    """C[M, N] = A[M, K] @ B[K, N]: tiled, register-blocked, vectorized, optionally packed."""
    cfg = get_config()
    cfg.define_split("tile_i", M, num_outputs=3, max_factor=64,
                     filter=lambda e: e.size[2] <= 32, default=[-1, 8, 8])
    cfg.define_split("tile_j", N, num_outputs=3, max_factor=64, filter=_lane_filter(N),
                     default=[-1, 4, 32])
    cfg.define_split("tile_k", K, num_outputs=2, max_factor=512, default=[-1, 64])
    cfg.define_knob("pack_b", [False, True], default=False)
    bn = cfg["tile_j"].size[1] * cfg["tile_j"].size[2]

    A = te.placeholder((M, K), name="A", dtype=dtype)
    B = te.placeholder((K, N), name="B", dtype=dtype)
    k = te.reduce_axis((0, K), name="k")
    if cfg["pack_b"].val:
        PB = te.compute((N // bn, K, bn), lambda x, y, z: B[y, x * bn + z], name="packedB")
        C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * PB[j // bn, k, j % bn], axis=k),
                       name="C")
    else:
        C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    i, j = C.op.axis
    i0, i1, i2 = cfg["tile_i"].apply(s, C, i)
    j0, j1, j2 = cfg["tile_j"].apply(s, C, j)
    k0, k1 = cfg["tile_k"].apply(s, C, C.op.reduce_axis[0])
    # middle loops (cache blocks): any order of k0, i1, j1; k1, i2, j2 innermost
    cfg.define_reorder("reorder", [k0, i1, j1], policy="all", default=[0, 1, 2])
    mid = cfg["reorder"].apply(s, C, [k0, i1, j1])
    s[C].reorder(i0, j0, *mid, k1, i2, j2)
    cfg.define_annotate("unroll", [k1, i2], policy="try_unroll", default=["none", "unroll"])
    cfg["unroll"].apply(s, C, [k1, i2], axis_lens=[cfg["tile_k"].size[1],
                                                   cfg["tile_i"].size[2]], max_unroll=16)
    s[C].vectorize(j2)
    cfg.define_knob("parallel", ["i0", "i0.j0"], default="i0.j0")
    if cfg["parallel"].val == "i0.j0":
        s[C].parallel(s[C].fuse(i0, j0))
    else:
        s[C].parallel(i0)
    if cfg["pack_b"].val:
        x, y, z = PB.op.axis
        s[PB].parallel(x)
        if bn > 64:
            z, zi = s[PB].split(z, factor=64 if bn % 64 == 0 else bn)
            z = zi
        s[PB].vectorize(z)
    return s, [A, B, C]


def _bmm_reference(a, b, *, args=()):
    return np.matmul(a, b)


@template("batch_matmul", default_args=(8, 256, 256, 256),
          flops=lambda Bt, M, N, K: 2.0 * Bt * M * N * K, reference=_bmm_reference, target="llvm")
def batch_matmul(Bt: int, M: int, N: int, K: int, dtype: str = "float32"):
    """C[b, M, N] = A[b, M, K] @ B[b, K, N]: register-blocked per batch, batch x rows in
    parallel."""
    cfg = get_config()
    A = te.placeholder((Bt, M, K), name="A", dtype=dtype)
    B = te.placeholder((Bt, K, N), name="B", dtype=dtype)
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((Bt, M, N), lambda b, i, j: te.sum(A[b, i, k] * B[b, k, j], axis=k),
                   name="C")
    s = te.create_schedule(C.op)
    b, i, j = C.op.axis
    cfg.define_split("tile_i", i, num_outputs=3, max_factor=64,
                     filter=lambda e: e.size[2] <= 32, default=[-1, 8, 8])
    cfg.define_split("tile_j", j, num_outputs=3, max_factor=64, filter=_lane_filter(N),
                     default=[-1, 4, 32])
    cfg.define_split("tile_k", k, num_outputs=2, max_factor=512, default=[-1, 64])
    i0, i1, i2 = cfg["tile_i"].apply(s, C, i)
    j0, j1, j2 = cfg["tile_j"].apply(s, C, j)
    k0, k1 = cfg["tile_k"].apply(s, C, k)
    cfg.define_reorder("reorder", [k0, i1, j1], policy="all", default=[0, 1, 2])
    mid = cfg["reorder"].apply(s, C, [k0, i1, j1])
    s[C].reorder(b, i0, j0, *mid, k1, i2, j2)
    cfg.define_annotate("unroll", [k1, i2], policy="try_unroll", default=["none", "unroll"])
    cfg["unroll"].apply(s, C, [k1, i2], axis_lens=[cfg["tile_k"].size[1],
                                                   cfg["tile_i"].size[2]], max_unroll=16)
    s[C].vectorize(j2)
    cfg.define_knob("parallel", ["b", "b.i0", "b.i0.j0"], default="b.i0")
    par = cfg["parallel"].val
    if par == "b":
        s[C].parallel(b)
    elif par == "b.i0":
        s[C].parallel(s[C].fuse(b, i0))
    else:
        s[C].parallel(s[C].fuse(b, i0, j0))
    return s, [A, B, C]


from . import templates_nn  # noqa: E402,F401  (registers the neural-network templates)
from . import templates_gpu  # noqa: E402,F401  (registers the GPU variants)
