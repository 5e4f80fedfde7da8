"""polytile's own differential fuzzer: random programs and schedules against numpy.

Run ``python -m tests.fuzz --seeds 0:1000 [--target llvm|cuda] [--shrink]`` from the
repository root; ``pytest tests/fuzz`` runs the fixed CI seed ranges (``-m slow``: thousands).

Pieces, one job each:

* :mod:`.programs`, :mod:`.kinds`: seeded generators of programs (elementwise chains with
  broadcasting and casts, reductions over 1-2 axes with offset ranges, ``where`` and
  ``init``, matmul and batch matmul, stencils with ``if_then_else`` padding and quasi-affine
  taps, transposes; int8/int32/float16/float32; extents 1-40 including primes);
* extended seeds (``>= cases.EXTENDED_FROM``, 60000) add: kinds ``argreduce``
  (argmax/argmin tuple reductions and ``te.comm_reducer`` product, ``+`` and ``max``) and
  ``scan`` (``te.scan`` recurrences); dtypes bfloat16, int4, int16, uint8; symbolic sizes
  (``te.size_var`` dims, the reference evaluating the same program with static sizes);
  extra outputs (an intermediate also returned, two outputs of one stage); schedule
  primitives storage_align, loop pragmas and double_buffer. Seeds below keep their
  original cases;
* seeds ``>= cases.EXTENDED2_FROM`` (70000) add schedules: ``vthread`` bindings on cuda
  (around or inside the thread loop, or on a second spatial loop), producers attached
  inside already bound consumers, ``create_group`` (a member attached inside another,
  the group's compute_at), rfactor followed by compute_at of the partial stage or
  ``parallel``, double_buffer after attaches; on cuda ``te.scan`` programs twice as often,
  their spatial loops bound (never the time loop);
* seeds ``>= cases.EXTENDED3_FROM`` (80000): the even ones are ``xreduce`` cases, a
  reduction over a wide reduce axis (extents around 32/48/64/128) scheduled on cuda as a
  cross-thread reduction (the reduce axis split and bound to threadIdx.x, 32/64/128, 48,
  96, 24... threads, with or without rfactor in TVM's idiom) with its rows bound to blocks,
  ``vthread`` (inside or around the block loop, on a second spatial loop) and threadIdx.y,
  then producers attached inside it; on llvm rfactor'd then computed at or parallel; the
  odd seeds draw as ``EXTENDED2_FROM`` seeds do;
* seeds ``>= cases.EXTENDED4_FROM`` (90000): the even ones are ``tuplered`` cases, tuple
  reductions whose ``te.comm_reducer`` combines each element on its own (sum and sum of
  squares, min and max, sum and max, argmax with a count...) in its own dtype
  (fp32/fp16/int32, rarely bfloat16/int8/int16; each accumulates in its own dtype),
  with ``where`` and a tuple ``init``, maybe reading a multi-output producer ``P, P.v1``
  and read by a multi-output epilogue; scheduled as ``xreduce`` cases are (cross-thread
  on cuda, rfactor'd on llvm: tuple rfactor) or with the reduce loops split, reordered,
  rfactor'd, the spatial loops parallel/vectorized (llvm), a ``cache_write`` of all the
  outputs, the producer computed at the reduction; of the odd ones, half are ``xreduce``
  cases, the others draw a kind as ``EXTENDED2_FROM`` seeds do;
* :mod:`.schedules`: 1-8 random primitives on a live schedule (split, tile, reorder, fuse,
  vectorize, unroll, parallel, compute_at/inline/root, cache_read/write, rfactor; ``bind``
  for CUDA), recorded as plain steps;
* :mod:`.spec`: programs and schedules as plain data and the Python source they run as;
* :mod:`.reference`: a numpy evaluator of the TE definition, independent of lowering, with
  per-element error bounds;
* :mod:`.runner`: build, run (two poisons) and classify a case: ok / refused / vague /
  wrong / crash / hang / invalid;
* :mod:`.worker`: long-lived worker subprocesses with timeouts, restarted after a crash;
* :mod:`.shrink`: greedy shrinking of a failure to a minimal case;
* :mod:`.script`: reproducer scripts; :mod:`.triage`: known-fault tags for reports.

Tolerances (what ``wrong`` means), per output dtype:

* integers and bool: exact (integers wrap around in their dtype, as the IR says; int4
  modulo 16, packed two per byte on the host);
* float16/bfloat16/float32/float64: ``|out - ref| <= err + ulp(ref)``, where ``err`` is the rigorous
  per-element bound the reference carries: zero for exactly representable computations,
  else the rounding a correct compiler may change (reduction order ``u (n-1) sum|x|``,
  fused multiply-add of ``a*b + c``, 2 ulps per math-library call), propagated through the
  expression, one ulp more per rounding of an inexact value. float16 sums accumulate in
  float32 (the project's rule). On ``cuda`` float16 also gets ``8 u`` times the magnitude of
  the computation (the host emulation keeps float16 intermediates in float32);
* NaN matches NaN; elements whose value a correct compiler may choose (undefined
  behaviour, an unstable comparison or float-to-int cast) are not compared.
"""
