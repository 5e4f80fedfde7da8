"""A reference interpreter of the loop IR: slow, simple, and independent of every target.

Used as a test oracle for lowering (does the loop nest compute the compute definition?)
and for debugging a schedule without compiling it. Loads and stores check bounds, so an
out-of-range access raises ``IndexError`` instead of reading garbage; vectorized, parallel
and unrolled loops run serially. GPU kernels run block by block, the threads of a block
interleaved at barriers, with ``shared`` buffers per block and ``local`` ones per thread; all
threads of a block must reach the same barrier (not one in code that only some threads run).
A kernel is checked for races as it runs (:class:`RaceError`): between two barriers, no
element of a buffer that is not ``local`` may be written by one thread and read or written
by another, and no block may touch an element another block writes.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from polytile.te import dtype as dt
from polytile.te.depth import deep
from polytile.te.expr import (And, Binary, Call, Cast, Cmp, Const, Expr, Not, Or, Select, Var)

from polytile.te.tensor_intrin import ASYNC_GROUP_CALLS

from .kinds import ASYNC_COPY
from .loop_ir import (Allocate, Assert, Buffer, Evaluate, ExternCall, For, IfThenElse,
                      KernelLaunch, LetStmt, Load, PrimFunc, Seq, Stmt, StmtFunctor, Store, Sync,
                      TensorCall, WarpShuffle, While)

_MATH = {
    "exp": np.exp, "exp2": np.exp2, "log": np.log, "log2": np.log2, "log10": np.log10,
    "sqrt": np.sqrt, "rsqrt": lambda x: 1 / np.sqrt(x), "tanh": np.tanh,
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)), "sin": np.sin, "cos": np.cos,
    "floor": np.floor, "ceil": np.ceil, "round": np.round, "trunc": np.trunc,
    "abs": np.abs, "isnan": np.isnan, "pow": np.power, "fmod": np.fmod,
    "tan": np.tan, "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan, "sinh": np.sinh,
    "cosh": np.cosh, "log1p": np.log1p, "expm1": np.expm1, "atan2": np.arctan2,
    "hypot": np.hypot, "copysign": np.copysign, "isinf": np.isinf, "isfinite": np.isfinite,
    "erf": math.erf, "fast_exp": np.exp, "fast_tanh": np.tanh, "fast_erf": math.erf,
}


def _bits(x, dtype: str) -> str:
    """The two's complement bits of integer ``x`` of ``dtype``, most significant first."""
    n = dt.bits(dtype)
    return format(int(x) & ((1 << n) - 1), f"0{n}b")


def _int_call(name: str, x, dtype: str) -> int:
    """``popcount`` / ``clz`` of integer ``x`` of ``dtype`` (``clz(0)`` is the width)."""
    s = _bits(x, dtype)
    return s.count("1") if name == "popcount" else len(s) - len(s.lstrip("0"))


def _np(dtype: str):
    """The numpy dtype holding values of ``dtype`` here: ``int8``/``uint8`` for
    ``int4``/``uint4`` (one value per element: unpacked)."""
    if dt.is_int4(dtype):
        return np.int8 if dtype == "int4" else np.uint8
    return dt.to_numpy(dtype)


def _cast(v, dtype: str):
    if dt.is_int4(dtype):
        with np.errstate(all="ignore"):
            x = float(v) if isinstance(v, (float, np.floating)) else int(v)
        return _np(dtype)(dt.wrap(math.trunc(x) if math.isfinite(x) else 0, dtype))
    if dtype == "bool":
        return np.bool_(bool(v))
    if dtype == "bfloat16":
        # a bfloat16 value is held as the float32 it is exactly; the rounding is here
        return np.float32(dt.round_float(v, dtype))
    with np.errstate(all="ignore"):
        if dt.is_int(dtype) and isinstance(v, (float, np.floating)):
            if not math.isfinite(float(v)):
                return np.array(v).astype(dtype)[()]  # unspecified: numpy's value
            # beyond the dtype's range the cast is unspecified (C's undefined behaviour):
            # wrapped, as numpy cannot hold the Python int (a float16 min_value through
            # round() to int8 crashed the race check: fuzz seed cuda 90130)
            return np.array(dt.wrap(math.trunc(float(v)), dtype)).astype(dtype)[()]
        return np.array(v).astype(dtype)[()]


class RaceError(RuntimeError):
    """Two GPU threads access one element between two barriers, one of them writing (or
    two blocks of one kernel do): the result would depend on their timing."""


def _flat(buf, idx: tuple) -> int:
    """The flat element offset of ``idx`` (one index per dimension, or one flat offset)."""
    if len(idx) == 1:
        return idx[0]
    off = 0
    for i, n in zip(idx, buf.shape):
        off = off * int(n) + i
    return off


class _Races:
    """Accesses of one kernel launch to buffers that are not ``local``: element -> the
    last writer ``(block, thread, epoch)`` and the readers of the current epoch per block.
    An epoch is the code between two barriers of a block."""

    def __init__(self, name: str):
        self.name = name
        self.epoch = 0
        self.writes: dict = {}
        self.reads: dict = {}
        #: regions read by issued, unretired asynchronous calls (te.AsyncGroup): region
        #: -> [holders, (block, thread) of the last issuer, intrinsic name, element keys]
        #: (the threads of a warpgroup issue the same calls: one entry per region), and
        #: element key -> the regions holding it
        self.regions: dict = {}
        self.in_flight: dict = {}

    def check_in_flight(self, buf, idx, block, thread) -> None:
        """A write of an element that an asynchronous call still reads is a race."""
        key = self._key(buf, (_flat(buf, idx),), block)
        held = self.in_flight.get(key)
        if held:
            _, who, name, _ = self.regions[next(iter(held))]
            raise RaceError(f"kernel {self.name}: a write of {buf.name}{list(idx)} by thread "
                            f"{thread} of block {block} while the asynchronous "
                            f"{name} issued by thread {who[1]} still reads it (its "
                            "group is not retired: the wait count lets too many groups "
                            "stay in flight, or the slot is refilled too early)")

    def hold(self, region, keys, who, name: str) -> None:
        """One more issued call reads ``region`` (elements ``keys()``)."""
        r = self.regions.get(region)
        if r is None:
            r = self.regions[region] = [0, who, name, keys()]
            for key in r[3]:
                self.in_flight.setdefault(key, set()).add(region)
        r[0] += 1
        r[1], r[2] = who, name

    def release(self, region) -> None:
        """A wait retired one call that read ``region``."""
        r = self.regions[region]
        r[0] -= 1
        if r[0] == 0:
            del self.regions[region]
            for key in r[3]:
                held = self.in_flight[key]
                held.discard(region)
                if not held:
                    del self.in_flight[key]

    def _race(self, what: str, buf, idx, a, b):
        raise RaceError(f"kernel {self.name}: {what} of {buf.name}{list(idx)} by thread "
                        f"{a[1]} of block {a[0]} and by thread {b[1]} of block {b[0]} with "
                        "no barrier between them (a race)")

    def _conflict(self, w, block, thread) -> bool:
        return w[0] != block or (w[2] == self.epoch and w[1] != thread)

    @staticmethod
    def _key(buf, idx, block):
        # a shared buffer is one per block: blocks never meet there
        return (id(buf), block, idx) if buf.scope == "shared" else (id(buf), idx)

    def write(self, buf, idx, block, thread):
        if self.in_flight:
            self.check_in_flight(buf, idx, block, thread)
        key = self._key(buf, idx, block)
        w = self.writes.get(key)
        if w is not None and self._conflict(w, block, thread):
            self._race("writes", buf, idx, w, (block, thread))
        for b, (e, threads) in self.reads.get(key, {}).items():
            if b != block or (e == self.epoch and threads - {thread}):
                other = next(iter(threads - {thread})) if b == block else next(iter(threads))
                self._race("a read and a write", buf, idx, (b, other), (block, thread))
        self.writes[key] = (block, thread, self.epoch)

    def read(self, buf, idx, block, thread):
        key = self._key(buf, idx, block)
        w = self.writes.get(key)
        if w is not None and self._conflict(w, block, thread):
            self._race("a write and a read", buf, idx, w, (block, thread))
        per = self.reads.setdefault(key, {})
        e, threads = per.get(block, (None, None))
        if e != self.epoch:
            per[block] = (self.epoch, {thread})
        else:
            threads.add(thread)


class _Interp(StmtFunctor):
    def __init__(self):
        self.env: dict = {}
        self.mem: dict = {}
        self.block_mem: dict | None = None   # shared buffers of the current GPU block
        self.races: _Races | None = None     # inside a kernel
        self.who: tuple = ()                 # (block, thread) inside a kernel
        # cp.async: the copies of the open group, then the committed groups (oldest first);
        # each copy lands (is written) at the wait_group that retires its group
        self.async_open: list | None = None
        self.async_groups: list = []
        self.in_async = False
        # asynchronous intrinsic calls (te.AsyncGroup): the element keys read by the calls
        # of the open group, then the committed groups; ids of the outputs not retired
        self.mma_open: list = []
        self.mma_groups: list = []
        self.mma_outputs: dict = {}
        self.shuffle: tuple | None = None    # (array, index, value) at a warp shuffle

    def expr(self, e: Expr):
        t = type(e)
        if t is Const:
            return _cast(e.value, e.dtype)
        if t is Var:
            return self.env[e]
        if t is Load:
            arr = self.mem[id(e.buffer)]
            idx = tuple(int(self.expr(i)) for i in e.indices)
            if e.buffer.swizzle != "none":
                arr, idx = swizzled_place(e.buffer, arr, idx, "load")
            if len(idx) == 1 and arr.ndim != 1:
                arr = arr.reshape(-1)
            for k, (i, n) in enumerate(zip(idx, arr.shape)):
                if not 0 <= i < n:
                    raise IndexError(f"load {e.buffer.name}{list(idx)} out of bounds "
                                     f"{arr.shape}")
            if self.races is not None and e.buffer.scope != "local":
                self.races.read(e.buffer, idx, *self.who)
            if e.buffer.dtype == "bfloat16":
                return np.float32(dt.bfloat16_values(arr[idx]))
            return arr[idx]
        if t is Cast:
            return _cast(self.expr(e.value), e.dtype)
        if t is Binary:
            return self.binary(e)
        if t is Cmp:
            a, b = self.expr(e.a), self.expr(e.b)
            return np.bool_({"eq": a == b, "ne": a != b, "lt": a < b, "le": a <= b,
                             "gt": a > b, "ge": a >= b}[e.op])
        if t is And:
            return np.bool_(bool(self.expr(e.a)) and bool(self.expr(e.b)))
        if t is Or:
            return np.bool_(bool(self.expr(e.a)) or bool(self.expr(e.b)))
        if t is Not:
            return np.bool_(not bool(self.expr(e.a)))
        if t is Select:
            return self.expr(e.true_value) if bool(self.expr(e.cond)) else \
                self.expr(e.false_value)
        if t is Call:
            args = [self.expr(a) for a in e.args]
            if e.name == "erf":
                return _cast(math.erf(float(args[0])), e.dtype)
            if e.name in ("popcount", "clz"):
                return _cast(_int_call(e.name, args[0], e.args[0].dtype), e.dtype)
            with np.errstate(all="ignore"):
                return _cast(_MATH[e.name](*args), e.dtype)
        raise TypeError(f"interpreter: unsupported expression {type(e).__name__}")

    def binary(self, e: Binary):
        a, b = self.expr(e.a), self.expr(e.b)
        op = e.op
        if dt.is_int(e.dtype) or e.dtype == "bool":
            x, y = int(a), int(b)
            if op in ("floordiv", "floormod", "truncdiv", "truncmod") and y == 0:
                raise ZeroDivisionError("integer division by zero")
            r = {"add": lambda: x + y, "sub": lambda: x - y, "mul": lambda: x * y,
                 "floordiv": lambda: x // y, "floormod": lambda: x % y,
                 "truncdiv": lambda: abs(x) // abs(y) * (1 if (x >= 0) == (y >= 0) else -1),
                 "truncmod": lambda: abs(x) % abs(y) * (1 if x >= 0 else -1),
                 "min": lambda: min(x, y), "max": lambda: max(x, y),
                 "bitand": lambda: x & y, "bitor": lambda: x | y, "bitxor": lambda: x ^ y,
                 "shl": lambda: x << y, "shr": lambda: x >> y}[op]()
            if e.dtype == "bool":
                return np.bool_(r != 0)
            return np.array(dt.wrap(r, e.dtype), dtype=_np(e.dtype))[()]
        with np.errstate(all="ignore"):
            r = {"add": lambda: a + b, "sub": lambda: a - b, "mul": lambda: a * b,
                 "div": lambda: a / b, "floordiv": lambda: np.floor(a / b),
                 "floormod": lambda: a - np.floor(a / b) * b,
                 "min": lambda: np.minimum(a, b), "max": lambda: np.maximum(a, b)}[op]()
        return _cast(r, e.dtype)

    def stmt(self, s: Stmt):
        """Execute ``s``; a generator that yields at every ``Sync`` (GPU barrier)."""
        yield from self.visit(s)

    # Each visit_<Class> returns an iterable of the barriers it reaches: a generator for
    # statements with a body, an empty tuple for the others (executed at the call).
    def visit_Seq(self, s: Seq):
        for x in s.stmts:
            yield from self.visit(x)

    def visit_For(self, s: For):
        lo = int(self.expr(s.min))
        hi = lo + int(self.expr(s.extent))
        was = self.in_async
        self.in_async = was or ASYNC_COPY in s.pragmas
        for v in range(lo, hi, s.step):
            self.env[s.var] = np.int64(v)
            yield from self.visit(s.body)
        self.in_async = was

    def visit_Store(self, s: Store):
        arr = self.mem[id(s.buffer)]
        idx = tuple(int(self.expr(i)) for i in s.indices)
        if s.buffer.swizzle != "none":
            arr, idx = swizzled_place(s.buffer, arr, idx, "store")
        flat = arr.reshape(-1) if len(idx) == 1 and arr.ndim != 1 else arr
        for i, n in zip(idx, flat.shape):
            if not 0 <= i < n:
                raise IndexError(f"store {s.buffer.name}{list(idx)} out of bounds "
                                 f"{flat.shape}")
        v = self.expr(s.value)
        if self.races is not None and s.buffer.scope != "local":
            # (a cp.async is checked here too: it may land any time after its issue)
            self.races.write(s.buffer, idx, *self.who)
        if self.in_async:
            # cp.async: the source is read now, the destination written at the wait
            if self.async_open is None:
                self.async_open = []
            self.async_open.append((s.buffer, flat, idx, v))
            return ()
        self._write(s.buffer, flat, idx, v)
        return ()

    def _write(self, buffer, flat, idx, v) -> None:
        if buffer.dtype == "bfloat16":
            # host bfloat16 arrays: uint16 bit patterns or ml_dtypes.bfloat16
            flat.view(np.uint16)[idx] = dt.bfloat16_bits(v)
        else:
            flat[idx] = v

    def _async(self, call: ExternCall) -> None:
        if call.name == "cp.async.commit_group":
            self.async_groups.append(self.async_open or [])
            self.async_open = None
            return
        keep = int(self.expr(call.args[0]))
        land = self.async_groups[:max(len(self.async_groups) - keep, 0)]
        self.async_groups = self.async_groups[len(land):]
        for group in land:
            for buffer, flat, idx, v in group:
                if self.races is not None:
                    self.races.write(buffer, idx, *self.who)
                self._write(buffer, flat, idx, v)

    def visit_IfThenElse(self, s: IfThenElse):
        if bool(self.expr(s.cond)):
            yield from self.visit(s.then_case)
        elif s.else_case is not None:
            yield from self.visit(s.else_case)

    def visit_While(self, s: While):
        while bool(self.expr(s.cond)):
            yield from self.visit(s.body)

    def visit_LetStmt(self, s: LetStmt):
        self.env[s.var] = self.expr(s.value)
        yield from self.visit(s.body)

    def visit_Allocate(self, s: Allocate):
        b: Buffer = s.buffer
        # symbolic sizes (heap buffers of te.var shapes, dynamic shared memory): evaluated
        shape = tuple(d if isinstance(d, int) else int(self.expr(
            d if isinstance(d, Expr) else Const("int64", int(d)))) for d in b.shape)
        if b.scope == "shared" and self.block_mem is not None:
            if id(b) not in self.block_mem:
                self.block_mem[id(b)] = _fresh(b, shape)
            self.mem[id(b)] = self.block_mem[id(b)]
        else:
            self.mem[id(b)] = _fresh(b, shape)
        yield from self.visit(s.body)

    def visit_Evaluate(self, s: Evaluate):
        if isinstance(s.value, ExternCall) and s.value.name.startswith("cp.async."):
            self._async(s.value)
            return ()
        if isinstance(s.value, ExternCall) and s.value.name in ASYNC_GROUP_CALLS:
            self._mma_protocol(s.value)
            return ()
        if isinstance(s.value, ExternCall) and s.value.name.startswith("tma."):
            self._tma(s.value)
            return ()
        if isinstance(s.value, ExternCall) and s.value.kind == "atomic":
            self._nibble_store(s.value)
            return ()
        self.expr(s.value)
        return ()

    def _tma(self, call: ExternCall) -> None:
        """The TMA copies of :mod:`polytile.schedule.passes.tma_copy`: the block's first
        thread initialises the mbarriers and issues the copies (reading the source now,
        the race check seeing its writes now); a wait that finds the phase of its parity
        in progress lands that phase's copies (all its arrivals made, else the kernel
        would hang: RuntimeError)."""
        if self.block_mem is None:
            raise RuntimeError(f"interpreter: {call.name} outside a kernel")
        state = self.block_mem.setdefault("tma", {})
        leader = all(i == 0 for i in self.who[1])
        bar = call.args[0] if call.name != "tma.load_2d" else call.args[6]
        key = (id(bar.buffer), int(self.expr(bar.offset)))
        if call.name == "tma.init":
            if leader:
                n, count = (int(self.expr(a)) for a in call.args[1:])
                for i in range(n):
                    state[(key[0], key[1] + i)] = [0, 0, count, []]
            return
        st = state.get(key)
        if st is None:
            raise RuntimeError(f"interpreter: {call.name} on mbarrier {bar.buffer.name}"
                               f"[{key[1]}], which tma.init did not initialise")
        if call.name == "tma.wait":
            parity = int(self.expr(call.args[1]))
            if (st[0] & 1) != parity:
                return      # the phase of that parity has completed
            if st[1] < st[2]:
                raise RuntimeError(
                    f"interpreter: thread {self.who[1]} of block {self.who[0]} waits for "
                    f"phase {st[0]} of mbarrier {bar.buffer.name}[{key[1]}] with "
                    f"{st[1]} of its {st[2]} arrivals made (the kernel would hang)")
            for buffer, flat, idx, v in st[3]:
                self._write(buffer, flat, idx, v)
            st[0], st[1], st[3] = st[0] + 1, 0, []
            return
        if not leader:
            return
        dst, src, c1, c0, rows, cols, _, m, n = call.args
        c0, c1, rows, cols, m, n = (int(self.expr(a)) for a in (c0, c1, rows, cols, m, n))
        st[1] += 1
        if st[1] > st[2]:
            raise RuntimeError(f"interpreter: mbarrier {bar.buffer.name}[{key[1]}] gets "
                               f"{st[1]} arrivals in a phase of {st[2]}")
        sflat = self.mem[id(src.buffer)].reshape(-1)
        darr = self.mem[id(dst.buffer)]
        base = int(self.expr(dst.offset))
        for r in range(rows):
            for c in range(cols):
                i, j = c0 + r, c1 + c
                v = sflat[i * n + j] if 0 <= i < m and 0 <= j < n else sflat.dtype.type(0)
                off = base + r * cols + c
                if dst.buffer.swizzle != "none":
                    flat, idx = swizzled_place(dst.buffer, darr, (off,), "tma.load_2d")
                else:
                    flat, idx = darr.reshape(-1), (off,)
                    if not 0 <= off < flat.size:
                        raise IndexError(f"tma.load_2d {dst.buffer.name}[{off}] out of "
                                         f"bounds {flat.size}")
                if self.races is not None:
                    self.races.write(dst.buffer, idx, *self.who)
                st[3].append((dst.buffer, flat, idx, v))

    def _nibble_store(self, call: ExternCall) -> None:
        """The atomic int4 store of :mod:`polytile.schedule.passes.int4` (one thread runs
        at a time here, so a read-modify-write; exempt from the race check, which would
        see two threads write one byte)."""
        ptr, shift, v = call.args
        flat = self.mem[id(ptr.buffer)].reshape(-1)
        i, sh = int(self.expr(ptr.offset)), int(self.expr(shift))
        flat[i] = (int(flat[i]) & ~(15 << sh) & 255) | ((int(self.expr(v)) & 15) << sh)

    def visit_Assert(self, s: Assert):
        if not bool(self.expr(s.cond)):
            raise (ZeroDivisionError if s.error == "ZeroDivisionError" else IndexError)(
                s.message)
        return ()

    def visit_TensorCall(self, s: TensorCall):
        # the intrinsic's compute definition on the regions, never its code (extern C)
        from .tensor_call_eval import eval_tensor_call, region_offsets

        idx = [tuple(int(self.expr(i)) for i in ix) for ix in s.operand_indices()]
        pending = [b for b in s.buffers[:-1] if id(b) in self.mma_outputs]
        if pending and self.races is not None:
            raise RaceError(f"kernel {self.races.name}: thread {self.who[1]} of block "
                            f"{self.who[0]} reads {pending[0].name} (intrinsic "
                            f"{s.intrin.name!r}) while the asynchronous "
                            f"{self.mma_outputs[id(pending[0])]} writing it is not retired "
                            "(wait for every group first)")
        eval_tensor_call(s, [self.mem[id(b)] for b in s.buffers], idx)
        if s.part == "update" and getattr(s.intrin, "async_group", None) is not None \
                and self.races is not None:
            # the call reads its inputs until a wait retires its group: hold them
            for b, ix, shape, st in zip(s.buffers[:-1], idx, s.shapes, s.strides):
                if b.scope == "local":
                    continue
                block = self.who[0] if b.scope == "shared" else None
                region = (id(b), block, ix, shape, st)

                def keys(b=b, ix=ix, shape=shape, st=st):
                    return [self.races._key(b, (o,), self.who[0])
                            for o in region_offsets(b, ix, shape, st)]

                self.races.hold(region, keys, self.who, s.intrin.name)
                self.mma_open.append(region)
            self.mma_outputs[id(s.buffers[-1])] = s.intrin.name
        return ()

    def _mma_protocol(self, call: ExternCall) -> None:
        group, role = ASYNC_GROUP_CALLS[call.name]
        if role == "commit":
            self.mma_groups.append(self.mma_open)
            self.mma_open = []
        elif role == "wait":
            keep = int(self.expr(call.args[0]))
            retire = self.mma_groups[:max(len(self.mma_groups) - keep, 0)]
            self.mma_groups = self.mma_groups[len(retire):]
            for regions in retire:
                for region in regions:
                    if self.races is not None:
                        self.races.release(region)
            if not self.mma_groups and not self.mma_open:
                self.mma_outputs.clear()

    def visit_Sync(self, s: Sync):
        if self.block_mem is None:
            raise RuntimeError("interpreter: sync outside a kernel")
        return (s,)

    def visit_WarpShuffle(self, s: WarpShuffle):
        """Evaluate this thread's value and its destination, then wait (like at a barrier)
        for every thread of the block: :meth:`launch` exchanges the values."""
        if self.block_mem is None:
            raise RuntimeError("interpreter: warp shuffle outside a kernel")
        arr = self.mem[id(s.buffer)]
        idx = tuple(int(self.expr(i)) for i in s.indices)
        self.shuffle = (arr, idx, self.expr(s.value))
        return (s,)

    def visit_KernelLaunch(self, s: KernelLaunch):
        self.launch(s)
        return ()

    def generic_visit(self, s, *args):
        raise TypeError(f"interpreter: unsupported statement {type(s).__name__}")

    def launch(self, k: KernelLaunch) -> None:
        """Run every block; inside a block, all threads advance from barrier to barrier
        together, so shared-memory races are resolved as on the device (and a barrier
        that not all threads reach is reported)."""
        tags = {tag: v for v, tag in k.thread_vars}
        races = _Races(k.name)
        # symbolic launch extents (sizes, split factors) are evaluated for this call
        grid = [n if isinstance(n, int) else max(int(self.expr(n)), 0) for n in k.grid]
        dims = [n if isinstance(n, int) else max(int(self.expr(n)), 0) for n in k.block]
        for bz, by, bx in itertools.product(*(range(n) for n in reversed(grid))):
            block: dict = {}
            threads = []
            states = []
            for tz, ty, tx in itertools.product(*(range(n) for n in reversed(dims))):
                th = _Interp()
                th.mem = dict(self.mem)
                th.env = dict(self.env)
                th.block_mem = block
                th.races = races
                th.who = ((bx, by, bz), (tx, ty, tz))
                vals = {"blockIdx.x": bx, "blockIdx.y": by, "blockIdx.z": bz,
                        "threadIdx.x": tx, "threadIdx.y": ty, "threadIdx.z": tz}
                for tag, v in tags.items():
                    th.env[v] = np.int64(vals[tag])
                states.append(th)
                threads.append(th.stmt(k.body))
            while threads:
                races.epoch += 1
                alive, at = [], []
                for g in threads:
                    try:
                        at.append(next(g))
                        alive.append(g)
                    except StopIteration:
                        pass

                if alive and len(alive) != len(threads):
                    raise RuntimeError(f"kernel {k.name}: a barrier is not reached by every "
                                       f"thread of block ({bx}, {by}, {bz})")
                if any(b is not at[0] for b in at):
                    # CUDA: __syncthreads() in code some threads skip is undefined (a hang
                    # or a barrier that does not order anything)
                    raise RuntimeError(f"kernel {k.name}: the threads of block ({bx}, {by}, "
                                       f"{bz}) wait at different barriers (a barrier in "
                                       f"divergent code)")
                threads = alive
                if alive and isinstance(at[0], WarpShuffle):
                    _exchange(at[0], states, k.name)
            for th in states:
                if th.mma_groups or th.mma_open:
                    raise RaceError(f"kernel {k.name}: thread {th.who[1]} of block "
                                    f"{th.who[0]} ends with asynchronous calls never "
                                    "waited for")


def _exchange(s: WarpShuffle, states: list, kernel: str) -> None:
    """Every thread of one block at warp shuffle ``s`` (threads in linear id order): each
    receives the value of its lane XOR ``s.lane_xor``, in the warp's 32 lanes. A partner
    lane outside ``s.mask`` or past the block's last thread is an error (CUDA: the value
    read is undefined)."""
    vals = [th.shuffle[2] for th in states]
    for lin, th in enumerate(states):
        lane = lin % 32
        other = lin ^ s.lane_xor
        if (s.lane_xor >= 32 or other >= len(states) or not (s.mask >> lane) & 1
                or not (s.mask >> (other % 32)) & 1):
            raise RuntimeError(f"kernel {kernel}: warp shuffle (xor {s.lane_xor}, mask "
                               f"{s.mask:#x}) of thread {lin} reads lane {other}, which "
                               f"does not take part (block of {len(states)} threads)")
        arr, idx, _ = th.shuffle
        flat = arr.reshape(-1) if len(idx) == 1 and arr.ndim != 1 else arr
        flat[idx] = _cast(vals[other], s.buffer.dtype)
        th.shuffle = None


def swizzled_place(buf: Buffer, arr: np.ndarray, idx: tuple, what: str) -> tuple:
    """``(flat array, (physical offset,))`` of logical index ``idx`` (one index per
    dimension, or one flat offset after storage flattening) of swizzled ``buf``: the
    element lives at :func:`~polytile.targets.cuda.wgmma.swizzle_elements` of its
    row-major offset (``Stage.swizzle``)."""
    from polytile.targets.cuda.wgmma import swizzle_elements

    if len(idx) == 1 and len(buf.shape) != 1:
        off = idx[0]
        if not 0 <= off < arr.size:
            raise IndexError(f"{what} {buf.name}{list(idx)} out of bounds {arr.size}")
    else:
        off = 0
        for i, n in zip(idx, buf.shape):
            if not 0 <= i < n:
                raise IndexError(f"{what} {buf.name}{list(idx)} out of bounds {buf.shape}")
            off = off * n + i
    return arr.reshape(-1), (swizzle_elements(off, buf.swizzle, dt.nbytes(buf.dtype)),)


def _fresh(b: Buffer, shape: tuple | None = None) -> np.ndarray:
    return np.full(b.shape if shape is None else shape, _poison(b.dtype), dtype=_np(b.dtype))


def _poison(dtype: str):
    if dtype == "bfloat16":
        return np.nan if dt.to_numpy(dtype) != np.uint16 else 0x7FC0   # a NaN either way
    if dt.is_float(dtype):
        return np.nan
    if dtype == "bool":
        return True
    if dt.is_int4(dtype):
        return dt.max_value(dtype)
    return np.iinfo(dtype).max


@deep("run")
def run(func: PrimFunc, *args) -> None:
    """Execute ``func`` on numpy arrays (buffers, modified in place) and scalars.

    Intermediate buffers start filled with NaN (or the largest integer), so a read of a
    value never written shows up in the result.
    """
    it = _Interp()
    bound = func.attrs.get("size_params", ())
    if bound and len(args) == len(func.params) - len(bound):
        # symbolic sizes read off the arrays, as the compiled runtimes do
        args = tuple(args) + tuple(int(args[k].shape[q]) for _, k, q in bound)
    if len(args) != len(func.params):
        raise TypeError(f"{func.name}: expected {len(func.params)} arguments, got {len(args)}")
    packed = []   # int4 parameters: the packed arrays, unpacked here and packed back
    for p, a in zip(func.params, args):
        if isinstance(p, Buffer) and dt.is_int4(p.dtype):
            n = int(p.shape[-1]) if p.shape else None
            it.mem[id(p)] = dt.unpack_int4(a, n, p.dtype)
            packed.append((p, a))
        elif isinstance(p, Buffer):
            it.mem[id(p)] = a
        else:
            it.env[p] = _cast(a, p.dtype)
    for _ in it.stmt(func.body):
        raise RuntimeError("interpreter: sync outside a kernel")
    for p, a in packed:
        new = dt.pack_int4(it.mem[id(p)], p.dtype)
        if p.shape and int(p.shape[-1]) % 2:   # the unused high nibble keeps its bits
            new[..., -1] |= a[..., -1] & 0xF0
        a[...] = new
