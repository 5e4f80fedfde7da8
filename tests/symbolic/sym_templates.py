"""A template over a symbolic size for the tuner tests: C[n, N] = A[n, K] @ B[K, N] where
``n`` is a ``te.size_var`` (workload argument ``"n=<value>"``)."""

from __future__ import annotations

from polytile import autotune, te


def _reference(a, b, *, args=()):
    return a @ b


@autotune.template("sym_matmul_test", default_args=("n=24", 16, 8),
                   flops=lambda n, N, K: 2.0 * n * N * K, reference=_reference)
def sym_matmul(n, N, K, dtype="float32"):
    """C[n, N] = A[n, K] @ B[K, N] for every n: tiled, vectorized, parallel."""
    cfg = autotune.get_config()
    A = te.placeholder((n, K), name="A", dtype=dtype)
    B = te.placeholder((K, N), name="B", dtype=dtype)
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((n, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    i, j = C.op.axis
    cfg.define_split("tile_i", i, num_outputs=2, max_factor=16)
    cfg.define_split("tile_j", j, num_outputs=2, max_factor=16)
    io, ii = cfg["tile_i"].apply(s, C, i)
    jo, ji = cfg["tile_j"].apply(s, C, j)
    s[C].reorder(io, jo, k, ii, ji)
    s[C].vectorize(ji)
    s[C].parallel(io)
    return s, [A, B, C]
