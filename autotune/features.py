"""Features of a lowered loop nest for the cost model: a fixed-length vector of floats.

The *main nest* is the group of stores sharing one stack of loop variables that executes the
most floating-point work (for a matmul: the update of ``C``; unrolled copies of a statement
belong to the same group). For each of its loop levels, innermost first (up to
:data:`LEVELS`), the vector holds:

* ``log2`` of the extent, the loop kind (serial, parallel, vectorized, unrolled; one-hot),
  ``log2`` of the iteration count outside and inside the level;
* for up to :data:`SLOTS` buffers (the stored one, then the loaded ones in order of first
  use): the smallest stride of its accesses along this loop (elements), the bytes and the
  64-byte cache lines it touches inside one iteration of the level, and its reuse
  (accesses per distinct element) there;
* the arithmetic intensity inside the level (flops per byte touched).

Global entries follow: total flops and iterations, statements in the innermost body,
number of loop nests, bytes of intermediate buffers, work outside the main nest, the
parallel loop's extent and load balance; for GPU functions, of the kernel holding the
main nest: threads per block, blocks, shared and local bytes, an occupancy estimate and
the coalescing of its stores to global memory along ``threadIdx.x``; then the bytes
requested from each memory level (global, shared, local: accesses times element size over
the whole grid), a shared-memory bank-conflict estimate (mean and worst) and the global
sectors per warp access (zeros on CPUs; :func:`_gpu_memory_features`). Everything is
``log2(1 + x)`` scaled but the occupancy (0..1) and the ratios (``log2`` of values >= 1).

Strides come from evaluating each flat index at the loop variable = 1 and = 0 (the others
0), so they are exact for affine indices and an approximation otherwise (``truncdiv``).
Feature extraction never fails on a well-formed function: unknown expressions count as
stride 1.
"""

from __future__ import annotations

import math

from polytile.schedule.kinds import LoopKind
from polytile.schedule.loop_ir import (Allocate, For, IfThenElse, KernelLaunch, LetStmt, Load,
                                       PrimFunc, Seq, Store, StmtMutator, TensorCall)
from polytile.te import dtype as dt
from polytile.te.depth import deep
from polytile.te.expr import (And, Binary, Call, Cast, Cmp, Const, Not, Or, Select, Var)
from polytile.te.visitor import collect, substitute

LEVELS = 8
SLOTS = 4
KINDS = tuple(k.value for k in LoopKind)
PER_BUFFER = 4
PER_LEVEL = 1 + len(KINDS) + 2 + SLOTS * PER_BUFFER + 1
N_GLOBAL = 24
#: Offset (from the start of the global entries) of the GPU kernel entries.
GPU_OFFSET = 12
#: Per-SM resources of the occupancy estimate (compute capability 8.x-9.x): threads,
#: shared memory (bytes), 32-bit registers, resident blocks.
SM_THREADS, SM_SHARED, SM_REGISTERS, SM_BLOCKS = 2048, 228 * 1024, 65536, 32
#: Length of every feature vector.
N_FEATURES = LEVELS * PER_LEVEL + N_GLOBAL
_LINE = 64


def _l2(x: float) -> float:
    return math.log2(1.0 + max(0.0, float(x)))


class _Unknown(Exception):
    pass


#: A let variable whose value is not computable (memoized so it is not tried again).
_UNKNOWN = object()


def _eval(e, env: dict, lets: dict | None = None) -> int:
    """Integer value of an index expression with variables from ``env`` (others 0).

    With ``lets`` (``{Var: value}`` of the function's ``LetStmt`` s), a let variable
    missing from ``env`` is evaluated on first use and memoized in ``env``: one ``env``
    per valuation of the loop and thread variables serves every index evaluated at it
    (a GPU GEMM's unrolled body reads 1000+ distinct indices through the same chains of
    lets: evaluating every let again for each index took 18 s of a 20 s build)."""
    t = type(e)
    if t is Const:
        return int(e.value)
    if t is Var:
        v = env.get(e)
        if v is None:
            x = lets.get(e) if lets else None
            if x is None:
                return 0
            env[e] = _UNKNOWN   # stays so when its value is not computable
            v = env[e] = _eval(x, env, lets)
        if v is _UNKNOWN:
            raise _Unknown
        return v
    if t is Cast:
        return _eval(e.value, env, lets)
    if t is Binary:
        a, b = _eval(e.a, env, lets), _eval(e.b, env, lets)
        op = e.op
        if op == "add":
            return a + b
        if op == "sub":
            return a - b
        if op == "mul":
            return a * b
        if op in ("floordiv", "div", "truncdiv"):
            if b == 0:
                raise _Unknown
            return a // b if op != "truncdiv" or (a >= 0) == (b > 0) else -(abs(a) // abs(b))
        if op in ("floormod", "truncmod"):
            if b == 0:
                raise _Unknown
            return a % b if op == "floormod" or a >= 0 else -(abs(a) % abs(b))
        if op == "min":
            return min(a, b)
        if op == "max":
            return max(a, b)
        raise _Unknown
    if t is Select:
        return _eval(e.true_value if _eval(e.cond, env, lets) else e.false_value, env, lets)
    if t is Cmp:
        a, b = _eval(e.a, env, lets), _eval(e.b, env, lets)
        return int({"eq": a == b, "ne": a != b, "lt": a < b, "le": a <= b, "gt": a > b,
                    "ge": a >= b}[e.op])
    if t is And:
        return int(bool(_eval(e.a, env, lets)) and bool(_eval(e.b, env, lets)))
    if t is Or:
        return int(bool(_eval(e.a, env, lets)) or bool(_eval(e.b, env, lets)))
    if t is Not:
        return int(not _eval(e.a, env, lets))
    raise _Unknown


def _extent(f: For, env: dict) -> int:
    try:
        return max(1, _eval(f.extent, env))
    except _Unknown:
        return 1


def _with_lets(e, lets: dict | None) -> list:
    """``e`` and the values of the ``LetStmt`` variables it reads, transitively
    (``share_subexpressions`` moves shared parts of a stored value there)."""
    out, seen, todo = [], set(), [e]
    while todo:
        x = todo.pop()
        out.append(x)
        for v in collect(x, Var):
            if lets and v in lets and id(v) not in seen:
                seen.add(id(v))
                todo.append(lets[v])
    return out


def _flops(e, lets: dict | None = None) -> int:
    """Floating-point operations of one evaluation of ``e`` (and of the lets it reads)."""
    n = 0
    for r in _with_lets(e, lets):
        for x in collect(r, (Binary, Call)):
            if dt.is_float(x.dtype):
                n += 1
    return n


class _Walk:
    def __init__(self):
        self.stack: list = []
        self.lets: dict = {}
        self.stores: list = []   # (store, loop stack tuple)
        self.calls: list = []    # (TensorCall, loop stack tuple)
        self.allocs: list = []
        self.kernel = None       # the KernelLaunch being walked (GPU functions)
        self.kernel_of: dict = {}   # id(store) -> its KernelLaunch
        self.kernel_allocs: dict = {}   # id(KernelLaunch) -> [Buffer]
        self.memo: dict = {}     # let values for :func:`_stride`

    def visit(self, s) -> None:
        t = type(s)
        if t is KernelLaunch:
            outer, self.kernel = self.kernel, s
            self.kernel_allocs.setdefault(id(s), [])
            self.visit(s.body)
            self.kernel = outer
        elif t is Seq:
            for x in s.stmts:
                self.visit(x)
        elif t is For:
            self.stack.append(s)
            self.visit(s.body)
            self.stack.pop()
        elif t is Store:
            self.stores.append((s, tuple(self.stack)))
            if self.kernel is not None:
                self.kernel_of[id(s)] = self.kernel
        elif t is TensorCall:
            # a tensor intrinsic (mma.sync, wgmma, WMMA...): the compute of a tensorized
            # nest, which holds no Store of its own
            self.calls.append((s, tuple(self.stack)))
            if self.kernel is not None:
                self.kernel_of[id(s)] = self.kernel
            self.visit(s.body)
        elif t is IfThenElse:
            self.visit(s.then_case)
            if s.else_case is not None:
                self.visit(s.else_case)
        elif t is LetStmt:
            self.lets[s.var] = s.value
            self.visit(s.body)
        elif t is Allocate:
            self.allocs.append(s.buffer)
            if self.kernel is not None:
                self.kernel_allocs[id(self.kernel)].append(s.buffer)
            self.visit(s.body)
        else:
            body = getattr(s, "body", None)
            if body is not None:
                self.visit(body)


def _stride(index, var, lets: dict, memo: dict | None = None) -> int | None:
    """Change of ``index`` when loop variable ``var`` goes from 0 to 1 (every other
    variable 0), or None when it is not computable (it reads memory). ``memo`` (``{var or
    None: env}``, one per function) keeps the values of the lets across calls."""
    memo = {} if memo is None else memo
    env0 = memo.setdefault(None, {})
    env1 = memo.get(var)
    if env1 is None:
        env1 = memo[var] = {var: 1}
    try:
        return _eval(index, env1, lets) - _eval(index, env0, lets)
    except _Unknown:
        return None


def _itemsize(dtype: str) -> int:
    try:
        return max(1, dt.bits(dtype) // 8)
    except Exception:
        return 4


@deep("extract_features")
def extract_features(func: PrimFunc, sizes: dict | None = None) -> list[float]:
    """The feature vector (length :data:`N_FEATURES`) of a lowered function; flat (after
    ``finalize``) or multi-dimensional indices are both accepted (the last index is used
    with the buffer's row-major strides). ``sizes`` (``{name: value}``) gives the values
    of symbolic sizes the loop extents depend on (the workload being tuned)."""
    bound = func.attrs.get("size_params", ())
    if sizes and bound:
        consts = {v: Const(v.dtype, int(sizes[v.name])) for v, _, _ in bound
                  if v.name in sizes}
        func = PrimFunc(func.name, func.params, _Specialize(consts).visit(func.body),
                        func.attrs)
    w = _Walk()
    w.visit(func.body)
    feats = [0.0] * N_FEATURES
    if not w.stores and not w.calls:
        return feats
    groups: dict = {}
    for st, stack in w.stores + w.calls:
        key = tuple(id(f.var) for f in stack)  # unrolled copies share their loop vars
        groups.setdefault(key, (stack, []))[1].append(st)

    def iters(stack):
        return math.prod(_extent(f, {}) for f in stack)

    def flops(st) -> int:
        if type(st) is TensorCall:
            return _intrin_flops(st)
        return _flops(st.value, w.lets)

    def work(g):
        stack, sts = g
        return iters(stack) * sum(max(1, flops(s)) for s in sts)

    main_key = max(groups, key=lambda k: work(groups[k]))
    stack, stores = groups[main_key]
    exts = [_extent(f, {}) for f in stack]

    # accesses: (buffer, flat index); slot order: stored buffer, then loads by first use
    accesses = []
    order: list = []
    for s in stores:
        if type(s) is TensorCall:   # its operands at their start indices: outputs first
            outs = {id(b) for b in s.output_buffers()}
            ops = sorted(zip(s.buffers, s.operand_indices()), key=lambda o: id(o[0]) not in outs)
            for b, idx in ops:
                if b.name not in order:
                    order.append(b.name)
                accesses.append((b, _flat(b, idx), id(b) in outs))
            continue
        if s.buffer.name not in order:
            order.append(s.buffer.name)
        accesses.append((s.buffer, _flat(s.buffer, s.indices), True))
        for ld in [x for r in _with_lets(s.value, w.lets) for x in collect(r, Load)]:
            if ld.buffer.name not in order:
                order.append(ld.buffer.name)
            accesses.append((ld.buffer, _flat(ld.buffer, ld.indices), False))
    slot_of = {name: k for k, name in enumerate(order[:SLOTS])}
    flops_body = sum(flops(s) for s in stores)
    # distinct accesses per buffer (by printed index)
    distinct: dict = {}
    counts: dict = {}
    for buf, idx, _ in accesses:
        counts[buf.name] = counts.get(buf.name, 0) + 1
        distinct.setdefault(buf.name, {}).setdefault(str(idx), (buf, idx))
    strides = {}
    for name, accs in distinct.items():
        for key, (buf, idx) in accs.items():
            strides[(name, key)] = [_stride(idx, f.var, w.lets, w.memo) for f in stack]

    depth = len(stack)
    for lvl in range(min(LEVELS, depth)):
        pos = depth - 1 - lvl  # lvl 0 = innermost loop
        f = stack[pos]
        base = lvl * PER_LEVEL
        inner = math.prod(exts[pos:])
        feats[base] = _l2(exts[pos])
        if f.kind in KINDS:
            feats[base + 1 + KINDS.index(f.kind)] = 1.0
        feats[base + 5] = _l2(math.prod(exts[:pos + 1]))
        feats[base + 6] = _l2(inner)
        total_bytes = 0.0
        for name, accs in distinct.items():
            buf = next(iter(accs.values()))[0]
            isz = _itemsize(buf.dtype)
            elems = lines = 0.0
            min_stride = None
            for key in accs:
                st = strides[(name, key)]
                dep = [(abs(st[m]) if st[m] is not None else 1, exts[m])
                       for m in range(pos, depth) if st[m] is None or st[m] != 0]
                e_cnt = math.prod(e for _, e in dep) if dep else 1
                elems += e_cnt
                if dep:
                    s_min, e_min = min(dep)
                    rest = e_cnt // max(1, e_min)
                    seg = e_min * s_min * isz
                    lines += rest * (math.ceil(seg / _LINE) if s_min * isz < _LINE else e_min)
                else:
                    lines += 1
                s_here = st[pos]
                s_here = 1 if s_here is None else abs(s_here)
                min_stride = s_here if min_stride is None else min(min_stride, s_here)
            size = _buf_elems(buf)
            if size:
                elems = min(elems, size)
                lines = min(lines, math.ceil(size * isz / _LINE))
            nbytes = elems * isz
            total_bytes += nbytes
            slot = slot_of.get(name)
            if slot is None:
                continue
            b = base + 7 + slot * PER_BUFFER
            feats[b] = _l2(min_stride or 0)
            feats[b + 1] = _l2(nbytes)
            feats[b + 2] = _l2(lines)
            feats[b + 3] = _l2(counts[name] * inner / max(1.0, elems))
        feats[base + PER_LEVEL - 1] = _l2(flops_body * inner / max(1.0, total_bytes))

    g = LEVELS * PER_LEVEL
    total_iters = sum(iters(st_) * len(sts) for st_, sts in groups.values())
    main_iters = iters(stack) * len(stores)
    par = [(_extent(f_, {})) for f_ in stack if f_.kind == LoopKind.PARALLEL]
    other_par = any(f_.kind == LoopKind.PARALLEL for k, (st_, _) in groups.items() if k != main_key
                    for f_ in st_)
    other_vec = any(f_.kind == LoopKind.VECTORIZED for k, (st_, _) in groups.items()
                    if k != main_key for f_ in st_)
    alloc_bytes = sum(_buf_elems(b) * _itemsize(b.dtype) for b in w.allocs)
    feats[g + 0] = _l2(work(groups[main_key]))
    feats[g + 1] = _l2(total_iters)
    feats[g + 2] = _l2(len(stores))
    feats[g + 3] = float(len(groups))
    feats[g + 4] = _l2(alloc_bytes)
    feats[g + 5] = float(len(w.allocs))
    feats[g + 6] = _l2(total_iters - main_iters)
    feats[g + 7] = float(other_par) + 2.0 * float(other_vec)
    feats[g + 8] = _l2(par[0]) if par else 0.0
    if par:
        threads = 2.0
        e = par[0]
        feats[g + 9] = math.ceil(e / threads) / (e / threads)
    feats[g + 10] = float(depth)
    feats[g + 11] = _l2(exts[-1]) if stack and stack[-1].kind == LoopKind.VECTORIZED else 0.0
    kernel = w.kernel_of.get(id(stores[0]))
    if kernel is not None:
        out = [st for st, _ in w.stores if w.kernel_of.get(id(st)) is kernel
               and st.buffer.scope not in ("shared", "local")] or [
                   st for st in stores if type(st) is Store] or [
                   st for st, _ in w.stores if w.kernel_of.get(id(st)) is kernel]
        feats[g + 12:g + 18] = _gpu_features(kernel, w.kernel_allocs.get(id(kernel), ()),
                                             out, w.lets, w.memo)
        feats[g + 18:g + 24] = _gpu_memory_features(kernel, w)
    return feats


def _intrin_flops(tc) -> int:
    """Floating-point operations of one call of a tensor intrinsic: its compute
    definition's points (spatial times reduction axes) times the float operations of its
    body per point (2 for a multiply-add: an mma.sync m16n8k16 does 4096); 0 for a copy
    (its body has no arithmetic), 1 when the definition's extents are not constant."""
    op = tc.intrin.op
    try:
        pts = math.prod(int(getattr(iv.dom.extent, "value", iv.dom.extent))
                        for iv in tuple(op.axis) + tuple(op.reduce_axis))
    except (TypeError, ValueError, AttributeError):
        return 1
    per = sum(1 for b in op.body for x in collect(b, (Binary, Call)) if dt.is_float(x.dtype))
    if op.reduce_axis:
        per += len(op.body)   # the reduction's add (a Reduce node, not a Binary)
    return pts * per          # 0 for a copy (ldmatrix, a fragment store)


#: Shared memory banks (4-byte words) and bytes per global memory sector.
_BANKS, _SECTOR = 32, 32


def _lane_envs(k) -> list:
    """Variable values of the 32 lanes of a block's first warp (``threadIdx.x`` fastest)."""
    tv = {tag: v for v, tag in k.thread_vars}
    bx, by = int(k.block[0]), int(k.block[1])
    n = min(32, math.prod(int(x) for x in k.block))
    out = []
    for lane in range(n):
        env = {}
        if "threadIdx.x" in tv:
            env[tv["threadIdx.x"]] = lane % bx
        if "threadIdx.y" in tv:
            env[tv["threadIdx.y"]] = (lane // bx) % by
        if "threadIdx.z" in tv:
            env[tv["threadIdx.z"]] = lane // (bx * by)
        out.append(env)
    return out


def _lane_addresses(index, envs: list, lets: dict) -> list | None:
    """Element offsets of ``index`` for each lane (other loop variables 0), or None when
    the index is not computable (it reads memory). The lane ``envs`` memoize the lets'
    values (:func:`_eval`): pass the same ones for every index of a kernel."""
    try:
        return [_eval(index, env, lets) for env in envs]
    except _Unknown:
        return None


def _gpu_memory_features(k, w) -> list:
    """Of kernel ``k``: log2 of the bytes requested from global, shared and local memory
    (every store and load of the kernel: its executions per thread times threads, blocks
    and element size), then ``log2`` of three ratios to the ideal, access-weighted:

    * shared-memory bank conflicts: for the first warp's 32 lanes (``threadIdx.x``
      fastest, then ``y``), the wavefronts a shared access needs (the most distinct 4-byte
      words any of the 32 banks holds) over the fewest possible (distinct words / 32);
      mean and worst over the kernel's shared accesses;
    * global coalescing: distinct 32-byte sectors a warp access touches over the fewest
      possible (mean).

    A vectorized innermost loop makes each lane access its extent of consecutive elements.
    The model follows the CUDA C Programming Guide's description of shared memory banks
    and global memory transactions (compute capability 5.x and later)."""
    threads = math.prod(int(x) for x in k.block)
    blocks = math.prod(int(x) for x in k.grid)
    envs = _lane_envs(k)
    level_bytes = {"global": 0.0, "shared": 0.0, "local": 0.0}
    bank_sum = bank_w = sect_sum = sect_w = 0.0
    bank_max = 1.0
    cache: dict = {}
    for st, stack in w.stores:
        if w.kernel_of.get(id(st)) is not k:
            continue
        n_iter = math.prod(_extent(f, {}) for f in stack)
        vec = _extent(stack[-1], {}) if stack and stack[-1].kind == LoopKind.VECTORIZED else 1
        vvar = stack[-1].var if vec > 1 else None
        accs = [(st.buffer, st.indices)] + [
            (ld.buffer, ld.indices) for r in _with_lets(st.value, w.lets)
            for ld in collect(r, Load)]
        for buf, indices in accs:
            scope = buf.scope if buf.scope in ("shared", "local") else "global"
            isz = _itemsize(buf.dtype)
            level_bytes[scope] += n_iter * isz * threads * blocks
            if scope == "local" or not envs:
                continue
            idx = _flat(buf, indices)
            key = (buf.name, str(idx))
            if key not in cache:
                addrs = _lane_addresses(idx, envs, w.lets)
                width = vec if vvar is not None and _stride(idx, vvar, w.lets,
                                                             w.memo) == 1 else 1
                cache[key] = None if addrs is None else _warp_cost(addrs, isz, width, scope)
            ratio = cache[key]
            if ratio is None:
                continue
            if scope == "shared":
                bank_sum += ratio * n_iter
                bank_w += n_iter
                bank_max = max(bank_max, ratio)
            else:
                sect_sum += ratio * n_iter
                sect_w += n_iter
    return [_l2(level_bytes["global"]), _l2(level_bytes["shared"]), _l2(level_bytes["local"]),
            math.log2(bank_sum / bank_w) if bank_w else 0.0, math.log2(bank_max),
            math.log2(sect_sum / sect_w) if sect_w else 0.0]


def _warp_cost(addrs: list, isz: int, width: int, scope: str) -> float:
    """Wavefronts (shared) or sectors (global) of one warp access over the fewest
    possible; lanes access ``width`` consecutive elements of ``isz`` bytes from ``addrs``."""
    spans = [(a * isz, a * isz + width * isz) for a in addrs]
    if scope == "shared":
        words = {b // 4 for lo, hi in spans for b in range(lo - lo % 4, hi, 4)}
        per_bank: dict = {}
        for wd in words:
            per_bank[wd % _BANKS] = per_bank.get(wd % _BANKS, 0) + 1
        ideal = max(1, math.ceil(len(words) / _BANKS))
        return max(per_bank.values()) / ideal if per_bank else 1.0
    sectors = {b // _SECTOR for lo, hi in spans for b in range(lo - lo % _SECTOR, hi, _SECTOR)}
    total = sum(hi - lo for lo, hi in set(spans))  # lanes reading one address share it
    ideal = max(1, math.ceil(total / _SECTOR))
    return max(1.0, len(sectors) / ideal)


def _gpu_features(k, allocs, stores, lets, memo=None) -> list:
    """Of the kernel holding the main nest: log2 threads per block and blocks, log2 shared
    and per-thread local bytes, an occupancy estimate (resident warps over the SM's, from
    threads, shared memory and registers: local elements + 24 per thread) and the
    coalescing of the main store (its stride along ``threadIdx.x``: 1 is best)."""
    threads = math.prod(int(x) for x in k.block)
    blocks = math.prod(int(x) for x in k.grid)
    shared = sum(_buf_elems(b) * _itemsize(b.dtype) for b in allocs if b.scope == "shared")
    local = sum(_buf_elems(b) * _itemsize(b.dtype) for b in allocs if b.scope == "local")
    regs = local // 4 + 24
    per_sm = min(SM_BLOCKS, SM_THREADS // max(1, threads),
                 SM_SHARED // shared if shared else SM_BLOCKS,
                 SM_REGISTERS // max(1, regs * threads))
    occupancy = per_sm * threads / SM_THREADS
    tx = next((v for v, tag in k.thread_vars if tag == "threadIdx.x"), None)
    stride = 0.0
    if tx is not None:
        st = _stride(_flat(stores[0].buffer, stores[0].indices), tx, lets, memo)
        stride = _l2(abs(st)) if st is not None else 1.0
    return [_l2(threads), _l2(blocks), _l2(shared), _l2(local), min(1.0, occupancy), stride]


class _Specialize(StmtMutator):
    """Symbolic sizes replaced by their values (for the extents the features read)."""

    def __init__(self, consts: dict):
        self.consts = consts

    def visit_expr(self, e):
        return substitute(e, self.consts)


def _buf_elems(buf) -> int:
    try:
        return math.prod(int(getattr(d, "value", d)) for d in buf.shape)
    except (TypeError, ValueError):
        return 0


def _flat(buf, indices):
    """One flat index expression (row-major) for multi-dimensional ``indices``."""
    if len(indices) == 1:
        return indices[0]
    try:
        shape = [int(getattr(d, "value", d)) for d in buf.shape]
    except (TypeError, ValueError):
        return indices[-1]
    out = indices[0]
    for idx, n in zip(indices[1:], shape[1:]):
        out = Binary(out.dtype, "add", Binary(out.dtype, "mul", out, Const(out.dtype, n)), idx)
    return out
