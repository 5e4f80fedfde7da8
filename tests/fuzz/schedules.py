"""Seeded generators of schedules: 1-8 random primitives applied to a live schedule and
recorded as plain steps (see :mod:`.spec`).

Primitives: split (factor or nparts, divisible or not, larger than the extent), tile,
reorder, fuse, vectorize, unroll, parallel, compute_at (any loop of any consumer),
compute_inline, compute_root, cache_read (shared/local/global, any subset of readers),
cache_write, rfactor (any reduce loop, any ``factor_axis``); for extended seeds
(:data:`.cases.EXTENDED_FROM`) also storage_align, loop pragmas and double_buffer; for
``cuda`` a final pass
binding every root stage to ``blockIdx``/``threadIdx`` (sometimes with cooperative threads in
attached stages or a cross-thread reduction).

Seeds from :data:`.cases.EXTENDED2_FROM` on also draw ``create_group`` (then maybe a
compute_at of one member inside another, then the group's compute_at), follow an rfactor by
a compute_at of the partial stage at the reduction or a ``parallel`` loop, draw
``double_buffer`` more often (after attaches; on ``cuda`` after binding), and on ``cuda``
bind ``vthread`` loops (around or inside the thread loop, or a second spatial loop), attach
producers inside bound consumers before binding them, and bind the spatial loops of a
``te.scan`` (never its time loop).

``xreduce`` cases (even seeds from :data:`.cases.EXTENDED3_FROM`) schedule their reduction
``R`` as a cross-thread reduction on ``cuda`` (:meth:`SchedGen.xreduce`): its reduce axis
(or two fused) split and bound to ``threadIdx.x`` (whole warps 32/64/128 and 48, 96, 24...
threads), with or without ``rfactor`` (TVM's idiom: the rfactor'd axis bound, the partial
stage computed at it), its spatial loops bound to blocks, ``vthread`` (inside or around
the block loop, on a second spatial loop) and ``threadIdx.y`` (several rows per block);
then producers attached or cached inside it and the other stages bound. On ``llvm`` the
same reduction is rfactor'd, followed by a compute_at or ``parallel`` and a few random
steps.
"""

from __future__ import annotations

import numpy as np

from polytile import LoweringError, ScheduleError
from polytile.schedule.kinds import ThreadTag
from polytile.schedule.relations import Fuse

from .spec import AX_HELPER, ident, program_code, schedule_code, step_code

KEEP_ILLEGAL = 0.12
_PRIMS = ("split", "tile", "reorder", "fuse", "vectorize", "unroll", "parallel", "compute_at",
          "compute_inline", "compute_root", "cache_read", "cache_write", "rfactor")
_WEIGHTS = {"llvm": (3, 1, 2, 1, 1.5, 1, 1.5, 3, 1, 0.3, 1, 0.7, 1.5),
            "cuda": (3, 1, 2, 1, 0.5, 1, 0, 3, 1, 0.3, 1.2, 0.8, 1.5)}
#: primitives (and weights) that only extended seeds draw (:data:`.cases.EXTENDED_FROM`)
_EXTENDED = (("storage_align", 0.7), ("pragma", 0.8), ("double_buffer", 0.4))
#: primitives (and weights) that only seeds from :data:`.cases.EXTENDED2_FROM` draw
_EXTENDED2 = (("create_group", 0.8),)
#: loop pragmas extended seeds draw, with their values
_PRAGMAS = (("auto_unroll_max_step", 16), ("auto_unroll_max_step", 512), ("unroll", None),
            ("nontemporal", None), ("parallel_launch_point", None), ("vectorize", None))


def namespace(prog: dict, steps: list) -> dict:
    """Execute the program and the schedule steps; return the namespace (``s`` in it).

    Raises whatever the program or a step raises.
    """
    from polytile import te

    ns: dict = {"te": te}
    exec(program_code(prog), ns)  # noqa: S102 - our own generated source
    exec(schedule_code(prog, steps), ns)  # noqa: S102
    if not steps:
        exec(AX_HELPER, ns)  # noqa: S102
    return ns


class SchedGen:
    """Random steps on a live schedule of program ``prog``."""

    def __init__(self, rng: np.random.Generator, prog: dict, target: str,
                 extended: bool = False, extended2: bool = False):
        self.g = rng
        self.extended = extended
        #: a seed from :data:`.cases.EXTENDED2_FROM`: the draws of the module docstring's
        #: last paragraph; every draw they add is behind this flag
        self.extended2 = extended2
        self.prog = prog
        self.target = target
        self.steps: list = []
        self.stopped = False
        self.threads: dict = {}      # root stage name -> threadIdx.x extent
        self.xthreads = 0            # the threads of an xreduce case's reduction
        #: name each partial of a tuple rfactor (a ``tuplered`` case; older seeds kept
        #: the list in one name, and the steps that followed it failed to draw)
        self.tuple_rf = False
        self.ns = namespace(prog, [])

    # ------------------------------------------------------------------ helpers
    def pick(self, seq):
        return seq[int(self.g.integers(len(seq)))]

    def chance(self, p: float) -> bool:
        return bool(self.g.random() < p)

    @property
    def s(self):
        return self.ns["s"]

    def stages(self, inline: bool = False) -> list:
        out = []
        for st in self.s.stages:
            if not st.op.input_tensors or st.attach_type == "inline" and not inline:
                continue
            if ident(st.op.name) not in self.ns:
                continue
            out.append(st)
        return out

    def apply(self, step: list) -> bool:
        """Apply ``step``; True when it was kept."""
        if self.stopped:
            return False
        keep = self.chance(KEEP_ILLEGAL)  # drawn always: the stream does not depend on it
        plain = step
        step = self.named(step)
        try:
            if step is not plain and step[0] == "rfactor" and not self.tuple_rf:
                # seeds before EXTENDED4_FROM draw as when polytile refused every rfactor
                # of a tuple (their only ones are argmax), so that their cases stay
                raise ScheduleError("rfactor of a tuple reduction (not drawn by older seeds)")
            exec(step_code(step), self.ns)  # noqa: S102
        except (ScheduleError, LoweringError):
            if keep:
                self.steps.append(plain if step[0] == "rfactor" and not self.tuple_rf
                                  else step)
                self.stopped = True
                return True
            self.ns = namespace(self.prog, self.steps)  # the step may have half-applied
            return False
        except Exception:  # noqa: BLE001 - a crash: keep it, it is a finding
            self.steps.append(step)
            self.stopped = True
            return True
        self.steps.append(step)
        return True

    def named(self, step: list) -> list:
        """``step`` with the number of outputs of its multi-output stage appended, so that
        each output gets a name (:func:`.spec.step_code`), in ``tuplered`` cases: for the
        partials of an ``rfactor`` of a tuple reduction and for a ``cache_write`` of every
        output. (Older seeds kept rfactor's list in one name, and the steps that followed
        it failed to draw; :meth:`apply` refuses them such an rfactor, as polytile did
        until argmax combiners were proven, so that their cases stay as they were.)"""
        if step[0] == "rfactor" and len(step) == 4 or (
                self.tuple_rf and step[0] == "cache_write" and len(step) == 3):
            n = self.ns[ident(step[1])].op.num_outputs
            if n > 1:
                return step + [n]
        return step

    # ------------------------------------------------------------------ primitives
    @staticmethod
    def extent(v) -> int:
        """The extent of loop ``v``; 16 for a symbolic one (a size bound at call time)."""
        e = v.dom.extent
        return e if isinstance(e, int) else 16

    def factor(self, ext) -> int:
        ext = ext if isinstance(ext, int) else 16
        r = self.g.random()
        if r < 0.5:
            return int(self.pick([2, 3, 4, 8, 16, 5, 7]))
        if r < 0.8:
            return int(self.g.integers(1, ext + 3))
        return int(self.pick([ext, max(1, ext - 1), ext + 1, 1]))

    def step(self, prim: str):
        stages = self.stages()
        if not stages:
            return None
        st = self.pick(stages)
        T = st.op.name
        leaves = list(st.leaf_iter_vars)
        free = [v for v in leaves if v not in st.annotations]
        if prim == "split" and free:
            v = self.pick(free)
            key = "nparts" if self.chance(0.3) else "factor"
            return ["split", T, v.name, key, self.factor(v.dom.extent)]
        if prim == "tile" and len(free) >= 2:
            k = int(self.g.integers(len(leaves) - 1))
            a, b = leaves[k], leaves[k + 1]
            if a in free and b in free:
                return ["tile", T, a.name, b.name, self.factor(a.dom.extent),
                        self.factor(b.dom.extent)]
        if prim == "reorder" and len(leaves) >= 2:
            perm = [leaves[k].name for k in self.g.permutation(len(leaves))]
            if self.chance(0.5):  # a subset
                perm = perm[:int(self.g.integers(2, len(perm) + 1))]
            return ["reorder", T, perm]
        if prim == "fuse" and len(leaves) >= 2:
            k = int(self.g.integers(len(leaves) - 1))
            n = 3 if k + 2 < len(leaves) and self.chance(0.2) else 2
            return ["fuse", T, [v.name for v in leaves[k:k + n]]]
        if prim in ("vectorize", "unroll", "parallel") and free:
            v = free[-1] if prim == "vectorize" and self.chance(0.8) else self.pick(free)
            if prim == "vectorize" and self.extent(v) > 64:
                return None
            return [prim, T, v.name]
        if prim == "compute_at":
            return self.compute_at()
        if prim in ("compute_inline", "compute_root"):
            cands = [x for x in self.stages() if x.op not in self.s.outputs]
            return [prim, self.pick(cands).op.name] if cands else None
        if prim == "cache_read":
            return self.cache_read()
        if prim == "cache_write":
            if st.relations or st.annotations or st.attach_type != "root":
                return None
            if ident(T + ".local") in self.ns:
                return None
            return ["cache_write", T, "local"]
        if prim == "rfactor":
            red = [v for v in leaves if v.iter_type == "reduce"]
            if not red or ident(T + ".rf") in self.ns:
                return None
            nd = len(st.op.axis)
            fa = int(self.g.integers(0, nd + 1)) if self.chance(0.85) else -1
            return ["rfactor", T, self.pick(red).name, fa]
        if prim == "pragma" and free:
            kind, value = self.pick(_PRAGMAS)
            return ["pragma", T, self.pick(free).name, kind, value]
        if prim == "double_buffer":
            att = [x for x in self.stages() if x.attach_type == "scope"]
            return ["double_buffer", self.pick(att).op.name] if att else None
        if prim == "create_group":
            return self.create_group()
        if prim == "storage_align" and st.op.axis:
            f = int(self.pick([2, 4, 8, 16, 32, 3]))
            return ["storage_align", T, self.pick(list(st.op.axis)).name, f,
                    int(self.pick([0, 1, f - 1]))]
        return None

    def readers(self, st) -> list:
        return [c for c in self.stages(inline=True)
                if any(t.op is st.op for t in c.op.input_tensors)]

    def compute_at(self):
        prods = [st for st in self.stages() if st.op not in self.s.outputs]
        if not prods:
            return None
        p = self.pick(prods)
        cons = [c for c in self.stages() if c is not p and self.s._reads_transitively(
            c.op, p.op)]
        if not cons:
            return None
        c = self.pick(cons)
        if not c.leaf_iter_vars:
            return None
        return ["compute_at", p.op.name, c.op.name, self.pick(list(c.leaf_iter_vars)).name]

    def create_group(self):
        """A ``create_group`` step: the stages between a non-output stage and either the
        placeholders or one of its producers (maybe included)."""
        cands = [st for st in self.stages() if st.op not in self.s.outputs
                 and st.group is None]
        if not cands:
            return None
        o = self.pick(cands)
        prods = [p for p in self.stages() if p is not o and self.s._reads_transitively(
            o.op, p.op)]
        inputs, include = [], False
        if prods and self.chance(0.5):
            inputs = [self.pick(prods).op.name]
            include = self.chance(0.3)
        return ["create_group", o.op.name, inputs, include]

    def group_follow(self, step: list) -> None:
        """After ``create_group``: maybe attach a member inside another member, then maybe
        attach the group inside a stage outside it that reads its output."""
        grp = self.ns["G_" + ident(step[1])]
        members = [m for m in grp.members if ident(m.op.name) in self.ns]
        inside = {id(m) for m in grp.members}
        if self.chance(0.6):
            pairs = [(p, c) for p in members for c in members if c is not p
                     and any(t.op is p.op for t in c.op.input_tensors) and c.leaf_iter_vars]
            if pairs:
                p, c = self.pick(pairs)
                self.apply(["compute_at", p.op.name, c.op.name,
                            self.pick(list(c.leaf_iter_vars)).name])
        if self.chance(0.8):
            out = self.s[self.ns[ident(step[1])]]
            cons = [c for c in self.stages() if id(c) not in inside
                    and self.s._reads_transitively(c.op, out.op) and c.leaf_iter_vars]
            if cons:
                c = self.pick(cons)
                self.apply(["group_compute_at", step[1], c.op.name,
                            self.pick(list(c.leaf_iter_vars)).name])

    def rfactor_follow(self, step: list) -> None:
        """After ``rfactor``: compute the partial stage at a loop of the reduction (and maybe
        parallelize the reduction's outer loop, llvm), or parallelize a loop of either."""
        T = step[1]
        rf = self.s[self.ns[ident(T + ".rf")]]
        main = self.s[self.ns[ident(T)]]
        r = self.g.random()
        if r < 0.45 or self.target == "cuda":
            if main.leaf_iter_vars:
                self.apply(["compute_at", T + ".rf", T,
                            self.pick(list(main.leaf_iter_vars)).name])
            if self.target == "llvm" and self.chance(0.5):
                main = self.s[self.ns[ident(T)]]
                free = [v for v in main.leaf_iter_vars if v not in main.annotations
                        and (v.iter_type == "data_par" or not self.tuple_rf)]
                if free:
                    self.apply(["parallel", T, free[0].name])
            return
        st, name = (rf, T + ".rf") if r < 0.8 else (main, T)
        free = [v for v in st.leaf_iter_vars if v not in st.annotations
                and (v.iter_type == "data_par" or not self.tuple_rf)]  # (tuplered: legal)
        if free:
            v = free[0] if self.chance(0.5) else self.pick(free)
            self.apply(["parallel", name, v.name])

    def cache_read(self):
        srcs = [st for st in self.s.stages if ident(st.op.name) in self.ns]
        self.g.shuffle(srcs)
        for src in srcs:
            rs = [r for r in self.readers(src) if r.attach_type != "inline"]
            scope = self.pick(["shared", "local", "global"])
            if not rs or ident(f"{src.op.name}.{scope}") in self.ns:
                continue
            k = int(self.g.integers(1, len(rs) + 1))
            chosen = [rs[i].op.name for i in sorted(self.g.permutation(len(rs))[:k])]
            return ["cache_read", src.op.name, scope, chosen]
        return None

    # ------------------------------------------------------------------ driver
    def random_steps(self, n: int) -> None:
        prims, w = _PRIMS, list(_WEIGHTS[self.target])
        if self.extended:
            prims += tuple(p for p, _ in _EXTENDED)
            w += [x for _, x in _EXTENDED]
        if self.extended2:
            prims += tuple(p for p, _ in _EXTENDED2)
            w += [x for _, x in _EXTENDED2]
            w[prims.index("rfactor")] *= 2  # (then compute_at or parallel, rfactor_follow)
        w = np.array(w, float)
        tries = 0
        while len(self.steps) < n and not self.stopped and tries < 6 * n:
            tries += 1
            prim = prims[int(self.g.choice(len(prims), p=w / w.sum()))]
            step = self.step(prim)
            if step is None or not self.apply(step):
                continue
            if step[0] in ("cache_read", "cache_write") and self.chance(0.7):
                self.attach_cache(step)
            if step[0] == "compute_at" and self.chance(0.5):
                self.attach_chain(step[1])
            if not self.extended2 or self.stopped:
                continue
            if step[0] == "create_group":
                self.group_follow(step)
            elif step[0] == "rfactor" and self.chance(0.6):
                self.rfactor_follow(step)
            # (llvm refuses most: its pipelines want GPU shared copies and a barrier; cuda
            # double-buffers after binding, which splits loops a pipeline must keep)
            last = self.steps[-1]
            if self.target == "llvm" and last[0] == "compute_at" and self.chance(0.2):
                self.apply(["double_buffer", last[1]])

    def attach_cache(self, step: list) -> None:
        name = f"{step[1]}.{step[2]}"
        st = self.s[self.ns[ident(name)]]
        cons = [c for c in self.stages() if c is not st and self.s._reads_transitively(
            c.op, st.op)]
        if step[0] == "cache_write":
            cons = [self.s[self.ns[ident(step[1])]]]
        if cons:
            c = self.pick(cons)
            if c.leaf_iter_vars:
                self.apply(["compute_at", name, c.op.name,
                            self.pick(list(c.leaf_iter_vars)).name])

    def attach_chain(self, name: str) -> None:
        """Attach a producer of the just attached stage ``name`` inside it (nested attaches:
        a cache inside a producer inside a consumer)."""
        st = self.s[self.ns[ident(name)]]
        prods = [p for p in self.stages() if p.op is not st.op and p.op not in self.s.outputs
                 and any(t.op is p.op for t in st.op.input_tensors)]
        if prods and st.leaf_iter_vars:
            p = self.pick(prods)
            self.apply(["compute_at", p.op.name, name, self.pick(list(st.leaf_iter_vars)).name])

    def bind_all(self, attached: bool = True) -> None:
        """Bind every root stage to GPU indices (CUDA). Extended2 seeds go consumers first
        and sometimes attach a producer inside an already bound consumer instead.
        ``attached``: then maybe bind loops of attached stages to threads and
        double-buffer them (``norm`` cases place and bind their attached stages
        themselves)."""
        order = self.stages()
        if self.extended2:
            order = order[::-1]
        for st in order:
            if self.stopped:
                return
            if self.extended2:  # the stage as it is now (a refused step rebuilds them)
                st = self.s[self.ns[ident(st.op.name)]]
            if st.attach_type != "root" or any(isinstance(k, ThreadTag)
                                                for k in st.annotations.values()):
                continue
            if self.extended2 and st.op not in self.s.outputs and self.chance(0.3):
                if self.attach_in_bound(st):
                    continue
            self.bind_root(st)
        if not attached:
            return
        for st in self.stages():
            if st.attach_type == "scope" and self.chance(0.3):
                self.bind_attached(st)
        if self.extended2:
            for st in self.stages():
                if st.attach_type == "scope" and self.chance(0.35):
                    self.apply(["double_buffer", st.op.name])

    def attach_in_bound(self, st) -> bool:
        """Compute root stage ``st`` at a loop (bound or not) of a consumer bound to GPU
        indices; True when done."""
        cons = [c for c in self.stages() if c is not st and c.attach_type == "root"
                and any(isinstance(k, ThreadTag) for k in c.annotations.values())
                and any(t.op is st.op for t in c.op.input_tensors)]
        if not cons:
            return False
        c = self.pick(cons)
        return self.apply(["compute_at", st.op.name, c.op.name,
                           self.pick(list(c.leaf_iter_vars)).name])

    @staticmethod
    def _scan_loops(st) -> set:
        """The loops of a ``te.scan`` stage ``st`` derived from its time axis (empty for
        other stages): they must stay serial."""
        from polytile.te.scan import ScanOp

        if not isinstance(st.op, ScanOp):
            return set()
        out = {id(st.op.scan_axis)}
        for rel in st.relations:  # (in the order they were made)
            if isinstance(rel, Fuse):
                srcs, kids = [rel.outer, rel.inner], [rel.fused]
            elif hasattr(rel, "parent"):  # a split
                srcs, kids = [rel.parent], [rel.outer, rel.inner]
            else:
                continue
            if any(id(x) in out for x in srcs):
                out |= {id(k) for k in kids}
        return out

    def bind_root(self, st) -> None:
        T = st.op.name
        leaves = list(st.leaf_iter_vars)
        red = [v for v in leaves if v.iter_type == "reduce" and v not in st.annotations]
        spatial = [v for v in leaves if v.iter_type == "data_par" and v not in st.annotations]
        if self.extended2:  # a scan's time loops stay serial
            serial = self._scan_loops(st)
            spatial = [v for v in spatial if id(v) not in serial]
        if red and self.chance(0.15):  # a cross-thread reduction
            r = self.pick(red)
            t = int(self.pick([2, 4, 8, 16, 32, 64]))
            if self.apply(["split", T, r.name, "factor", t]):
                self.apply(["bind", T, r.name + ".inner", "threadIdx.x"])
                self.threads[T] = t
            if spatial:
                self.apply(["bind", T, spatial[0].name, "blockIdx.x"])
            return
        if not spatial:
            return
        v = spatial[0]
        if v is not leaves[0]:
            self.apply(["reorder", T, [v.name, leaves[0].name]])
        if len(spatial) >= 2 and self.chance(0.3):
            w = spatial[1]
            if self.s[self.ns[ident(T)]].leaf_iter_vars.index(w) == 1:
                self.apply(["fuse", T, [v.name, w.name]])
                v = self.s[self.ns[ident(T)]].leaf_iter_vars[0]
        t = int(self.pick([1, 2, 4, 8, 16, 32, 64, 128, 256, 7, 13]))
        if self.extended2 and self.chance(0.4):
            self.bind_vthread(T, v, t)
            return
        if self.apply(["split", T, v.name, "factor", t]):
            self.apply(["bind", T, v.name + ".outer", "blockIdx.x"])
            self.apply(["bind", T, v.name + ".inner", "threadIdx.x"])
            self.threads[T] = t

    def bind_vthread(self, T: str, v, t: int) -> None:
        """Bind loop ``v`` of root stage ``T`` to blocks and ``t`` threads with virtual
        threads: ``vt`` vthreads around the thread loop, inside the block's loop split into
        vthreads and threads, or (one spatial loop left) on another spatial loop."""
        vt = int(self.pick([2, 3, 4]))
        mode = self.pick(["around", "inside", "other"])
        n = v.name
        if mode == "around":
            if self.apply(["split", T, n, "factor", t]):
                self.apply(["bind", T, n + ".inner", "threadIdx.x"])
                self.threads[T] = t
                if self.apply(["split", T, n + ".outer", "factor", vt]):
                    self.apply(["bind", T, n + ".outer.outer", "blockIdx.x"])
                    self.apply(["bind", T, n + ".outer.inner", "vthread"])
            return
        if mode == "inside":
            if self.apply(["split", T, n, "factor", t * vt]):
                self.apply(["bind", T, n + ".outer", "blockIdx.x"])
                if self.apply(["split", T, n + ".inner", "nparts", vt]):
                    self.apply(["bind", T, n + ".inner.outer", "vthread"])
                    self.apply(["bind", T, n + ".inner.inner", "threadIdx.x"])
                    self.threads[T] = t
            return
        if self.apply(["split", T, n, "factor", t]):
            self.apply(["bind", T, n + ".outer", "blockIdx.x"])
            self.apply(["bind", T, n + ".inner", "threadIdx.x"])
            self.threads[T] = t
        st = self.s[self.ns[ident(T)]]
        serial = self._scan_loops(st)
        rest = [w for w in st.leaf_iter_vars if w.iter_type == "data_par"
                and w not in st.annotations and id(w) not in serial]
        if rest:
            w = self.pick(rest)
            if self.apply(["split", T, w.name, "nparts", vt]):
                self.apply(["bind", T, w.name + ".outer", "vthread"])

    # ------------------------------------------------------------------ xreduce
    #: threads of a cross-thread reduction (whole warps, and sizes that are not: 48, 24, 96)
    XR_THREADS = (32, 32, 64, 64, 128, 48, 48, 96, 16, 24, 8, 256)

    def leaves(self, T: str, kind: str) -> list:
        """The unannotated leaf loops of stage ``T`` of iter type ``kind``."""
        st = self.s[self.ns[ident(T)]]
        return [v for v in st.leaf_iter_vars if v.iter_type == kind
                and v not in st.annotations]

    def xreduce(self) -> None:
        """The schedule of an ``xreduce`` case (see the module docstring): the reduction
        ``R`` bound as a cross-thread reduction (``cuda``) or rfactor'd (``llvm``); the
        other stages (and ``R``, where a step was refused) then bound as usual."""
        T = "R"
        if self.xreduce_bind(T):
            self.threads[T] = self.xthreads
            self.xreduce_rows(T)
            for _ in range(int(self.pick([0, 0, 1, 2]))):  # producers and caches inside R
                step = self.step(self.pick(["compute_at", "compute_inline", "cache_read"]))
                if step is None or step[1] == T + ".rf":   # (TVM's idiom keeps it there)
                    continue
                if self.apply(step) and step[0] == "cache_read" and self.chance(0.7):
                    self.attach_cache(step)
        if self.target == "cuda" and not self.stopped:
            self.bind_all()

    def xreduce_bind(self, T: str) -> bool:
        """Split a reduce axis of ``T`` (or two fused) by (or into) ``self.xthreads``
        threads and bind it to ``threadIdx.x``, maybe after ``rfactor`` (TVM's idiom: the
        rfactor'd axis bound, the partial stage computed at it); on ``llvm`` rfactor it
        and follow with a compute_at or ``parallel`` and a few random steps. True when
        the reduction is bound (``cuda``)."""
        red = self.leaves(T, "reduce")
        self.xthreads = t = int(self.pick(self.XR_THREADS))
        if not red:
            return False
        r = red[0].name
        if len(red) == 2 and self.chance(0.3) and self.apply(["fuse", T, [r, red[1].name]]):
            r = f"{r}.{red[1].name}.fused"
        modes = ["plain", "nparts", "rfactor", "rfactor", "rfactor_outer"]
        mode = self.pick(modes if self.target == "cuda" else modes[2:])
        outer = mode in ("nparts", "rfactor_outer")
        if not self.apply(["split", T, r, "nparts" if outer else "factor", t]):
            return False
        tx = r + (".outer" if outer else ".inner")
        if mode.startswith("rfactor"):
            nd = len(self.s[self.ns[T]].op.axis)
            fa = 0 if self.chance(0.6) else int(self.g.integers(0, nd + 1))
            step = ["rfactor", T, tx, fa]
            if not self.apply(step):
                return False
            tx = tx + ".v"
            if self.target == "llvm":
                self.rfactor_follow(step)
                self.random_steps(int(self.pick([0, 1, 2, 3])))
                return False
            if not self.apply(["bind", T, tx, "threadIdx.x"]):
                return False
            if self.chance(0.85):
                self.apply(["compute_at", T + ".rf", T, tx])
            return True
        return self.apply(["bind", T, tx, "threadIdx.x"])

    def xreduce_rows(self, T: str) -> None:
        """Bind the spatial loops of the cross-thread reduction ``T``: one row per block,
        rows split into blocks and ``vthread`` (either order), rows on ``threadIdx.y``
        (maybe with ``vthread``), or a second spatial loop on ``vthread``; or none."""
        spatial = self.leaves(T, "data_par")
        if not spatial:
            return
        n = spatial[0].name
        vt = int(self.pick([2, 3, 4]))
        ty = int(self.pick([2, 3, 4, 8]))
        mode = self.pick(["block", "vt_in", "vt_in", "vt_out", "ty", "ty", "ty_vt",
                          "vt_other", "vt_other", "none"])
        if mode == "block" or mode == "vt_other":
            self.apply(["bind", T, n, "blockIdx.x"])
            rest = self.leaves(T, "data_par")
            if mode == "vt_other" and rest and self.apply(["split", T, rest[0].name,
                                                            "nparts", vt]):
                self.apply(["bind", T, rest[0].name + ".outer", "vthread"])
        elif mode in ("vt_in", "vt_out"):
            inner = mode == "vt_in"
            if self.apply(["split", T, n, "factor" if inner else "nparts", vt]):
                self.apply(["bind", T, n + ".outer", "blockIdx.x" if inner else "vthread"])
                self.apply(["bind", T, n + ".inner", "vthread" if inner else "blockIdx.x"])
        elif mode in ("ty", "ty_vt"):   # (rows of the innermost spatial loop)
            n = spatial[-1].name
            if len(spatial) > 1:
                self.apply(["bind", T, spatial[0].name, "blockIdx.y"])
            if self.apply(["split", T, n, "factor", ty]):
                self.apply(["bind", T, n + ".inner", "threadIdx.y"])
                if mode == "ty":
                    self.apply(["bind", T, n + ".outer", "blockIdx.x"])
                elif self.apply(["split", T, n + ".outer", "factor", vt]):
                    self.apply(["bind", T, n + ".outer.outer", "blockIdx.x"])
                    self.apply(["bind", T, n + ".outer.inner", "vthread"])

    # ------------------------------------------------------------------ tuplered
    def tuplered(self) -> None:
        """The schedule of a ``tuplered`` case (a tuple reduction ``R``, maybe reading a
        multi-output producer ``P``): half the time (``cuda``: 65 %) an ``xreduce`` schedule
        (cross-thread on ``cuda``, rfactor'd on ``llvm``, tuple rfactor included); else its reduce loops
        split and reordered (:meth:`reduce_loops`; of a ``cache_write`` of all its
        outputs, maybe computed at ``R``), maybe rfactor'd, a few random steps,
        ``P`` computed at a loop of ``R`` or inlined, then (``cuda``) every stage bound."""
        self.tuple_rf = True
        if self.chance(0.5 if self.target == "llvm" else 0.65):
            self.xreduce()
            return
        T = "R"
        if self.chance(0.25) and self.apply(["cache_write", "R", "local"]):
            T = "R.local"   # (the reduction; R copies its outputs, maybe around it)
            out = self.s[self.ns["R"]]
            if self.chance(0.6) and out.leaf_iter_vars:
                self.apply(["compute_at", T, "R", self.pick(list(out.leaf_iter_vars)).name])
        self.reduce_loops(T)
        self.random_steps(len(self.steps) + int(self.pick([0, 1, 2, 3])))
        if "P" in self.ns and any(st.op is self.ns["P"].op for st in self.s.stages) \
                and self.chance(0.6) and not self.stopped:
            st = self.s[self.ns["P"]]
            main = self.s[self.ns["R"]]
            if st.attach_type == "root" and self.chance(0.85) and main.leaf_iter_vars:
                self.apply(["compute_at", "P", "R", self.pick(list(main.leaf_iter_vars)).name])
            elif st.attach_type == "root":
                self.apply(["compute_inline", "P"])
        if self.target == "cuda" and not self.stopped:
            self.bind_all()

    def reduce_loops(self, T: str) -> None:
        """Split a reduce loop of ``T``, maybe reorder the reduce loops outside the spatial
        ones, maybe rfactor the inner or outer part (then :meth:`rfactor_follow`); on
        ``llvm`` maybe parallelize the outer spatial loop, vectorize the innermost spatial
        loop (after moving it in) and unroll the inner reduce loop."""
        red = self.leaves(T, "reduce")
        if red and self.chance(0.8):
            r = self.pick(red).name
            f = int(self.pick([2, 3, 4, 5, 7, 8, 16]))
            if self.apply(["split", T, r, self.pick(["factor", "factor", "nparts"]), f]):
                red = self.leaves(T, "reduce")
        spatial = self.leaves(T, "data_par")
        if red and self.chance(0.6):
            order = [v.name for v in red]
            self.g.shuffle(order)
            k = int(self.g.integers(0, len(spatial) + 1))
            sp = [v.name for v in spatial]
            perm = sp[:k] + order[:1] + sp[k:] + order[1:]
            if len(perm) >= 2:
                self.apply(["reorder", T, perm])
        if red and self.chance(0.35):
            red = self.leaves(T, "reduce")
            if red:
                nd = len(self.s[self.ns[ident(T)]].op.axis)
                step = ["rfactor", T, self.pick(red).name, int(self.g.integers(0, nd + 1))]
                if self.apply(step):
                    self.rfactor_follow(step)
        if self.target != "llvm":
            return
        spatial = self.leaves(T, "data_par")
        if spatial and self.chance(0.5):
            self.apply(["parallel", T, spatial[0].name])
        st = self.s[self.ns[ident(T)]]
        spatial = self.leaves(T, "data_par")
        if spatial and self.chance(0.4):
            v = spatial[-1]
            if st.leaf_iter_vars[-1] is not v:
                self.apply(["reorder", T, [w.name for w in st.leaf_iter_vars if w is not v]
                            + [v.name]])
            if self.extent(v) <= 64:
                self.apply(["vectorize", T, v.name])
        red = self.leaves(T, "reduce")
        if red and self.chance(0.25) and self.extent(red[-1]) <= 16:
            self.apply(["unroll", T, red[-1].name])

    # ------------------------------------------------------------------ norm
    #: threads per row of a ``norm`` case on ``cuda`` (whole warps and not)
    NORM_THREADS = (32, 32, 64, 128, 48, 16, 7, 256)

    def norm(self) -> None:
        """The schedule of a ``norm`` case (``M``, ``E``, ``S``, ``O``; :func:`.kinds.norm`),
        after TVM's softmax schedules: the rows of ``O`` (fused when two) on ``blockIdx.x``
        and its columns split over ``threadIdx.x`` (``cuda``), or parallel rows and a
        vectorized column tile (``llvm``); each reduction computed at the row loop of ``O``
        (its reduce loop then maybe bound to the same threads, a cross-thread reduction in
        an attached stage, or rfactor'd) or left at the root (bound as a cross-thread
        reduction of its own, or rfactor'd and parallel); ``E`` inlined, computed at the row
        loop (its columns on the threads) or left at the root; then a few random steps and
        (``cuda``) every stage left bound. A fifth of the cases draw random steps only."""
        cuda = self.target == "cuda"
        if self.chance(0.2):
            self.random_steps(int(self.pick([1, 2, 3, 4])))
            if cuda and not self.stopped:
                self.bind_all()
            return
        nrow = len(self.ns["M"].op.axis)
        t = int(self.pick(self.NORM_THREADS)) if cuda else int(self.pick([4, 8, 16, 3]))
        o = self.s[self.ns["O"]]
        row = o.leaf_iter_vars[0].name
        if nrow == 2 and self.chance(0.6) and self.apply(["fuse", "O", ["i", "j"]]):
            row = "i.j.fused"
        cols = self.leaves("O", "data_par")[-1].name
        if nrow + 2 == len(self.ns["O"].op.axis) and self.chance(0.4) and self.apply(
                ["fuse", "O", ["c", "d"]]):
            cols = "c.d.fused"
        key = "nparts" if cuda and self.chance(0.4) else "factor"
        #: how O's columns were split (a reduction bound to the same threads inside its
        #: rows splits its reduce loops alike, so that the thread extents agree)
        self.norm_split = (key, cols.endswith(".fused"))
        if self.apply(["split", "O", cols, key, t]):
            inner = cols + (".outer" if key == "nparts" else ".inner")
            if cuda:
                if self.apply(["bind", "O", row, "blockIdx.x"]) and self.apply(
                        ["bind", "O", inner, "threadIdx.x"]):
                    self.threads["O"] = t
            else:
                if self.chance(0.5):
                    self.apply(["vectorize", "O", cols + ".inner"])
                if self.chance(0.5):
                    self.apply(["parallel", "O", row])
        # where each stage goes (consumers first, so that every reader of an attached stage
        # runs inside the row loop too; a fifth of the time any place, often refused)
        outs = {o.name for o in self.s.outputs}
        place = {"E": self.pick(["inline", "inline", "row", "root"]),
                 "S": self.pick(["row", "row", "root"]), "M": self.pick(["row", "row", "root"])}
        if self.chance(0.8):
            for T in ("M", "S"):
                if T in outs:   # (an output stays at the root)
                    place[T] = "root"
            if place["E"] == "row":   # (S reads E)
                place["E"] = "row" if place["S"] == "row" else "root"
            if place["E"] == "root" or place["S"] == "root" and place["E"] == "inline":
                place["M"] = "root"   # (E, or S through the inlined E, reads M)
        for T in ("S", "E", "M"):
            if self.stopped:
                return
            self.norm_stage(T, row, t, place[T])
        self.random_steps(len(self.steps) + int(self.pick([0, 0, 1, 2])))
        if cuda and not self.stopped:
            self.bind_all(attached=False)

    def norm_stage(self, T: str, row: str, t: int, place: str) -> None:
        """Place stage ``T`` of a ``norm`` case (see :meth:`norm`) at ``place``
        (``inline``, ``row`` or ``root``): ``row`` is the row loop of ``O``, ``t`` its
        threads (``cuda``) or a tile (``llvm``)."""
        cuda = self.target == "cuda"
        if T == "E":
            if place == "inline":
                self.apply(["compute_inline", "E"])
            elif place == "row" and self.apply(["compute_at", "E", "O", row]):
                key, fused = self.norm_split
                cols = self.leaves("E", "data_par")[-1].name
                if fused and self.apply(["fuse", "E", ["c", "d"]]):
                    cols = "c.d.fused"
                if cuda and "O" in self.threads and self.apply(["split", "E", cols, key, t]):
                    self.apply(["bind", "E", cols + (".outer" if key == "nparts" else
                                                     ".inner"), "threadIdx.x"])
                elif not cuda and self.chance(0.4):
                    self.apply(["vectorize", "E", cols])
            return
        if place == "row":
            if not self.apply(["compute_at", T, "O", row]):
                return
            red = self.leaves(T, "reduce")
            if not red:
                return
            key, fused = self.norm_split
            # (the reduce loop of O's bound column: the last, or both fused as O's are)
            k = red[-1].name
            if len(red) == 2 and (fused if cuda else self.chance(0.4)) and self.apply(
                    ["fuse", T, [red[0].name, k]]):
                k = f"{red[0].name}.{k}.fused"
            if cuda and "O" in self.threads and self.chance(0.8):
                if not self.apply(["split", T, k, key, t]):
                    return
                tx = k + (".outer" if key == "nparts" else ".inner")
                if self.chance(0.4):   # TVM's idiom: the partial at the bound axis
                    if self.apply(["rfactor", T, tx, 0]):
                        if self.apply(["bind", T, tx + ".v", "threadIdx.x"]):
                            self.apply(["compute_at", T + ".rf", T, tx + ".v"])
                    return
                self.apply(["bind", T, tx, "threadIdx.x"])
            elif not cuda and self.chance(0.5):
                if self.apply(["split", T, k, "factor", t]) and self.chance(0.5):
                    self.apply(["unroll", T, k + ".inner"])
            return
        # at the root
        red = self.leaves(T, "reduce")
        spatial = self.leaves(T, "data_par")
        if not red:
            return
        k = red[0].name
        if cuda:
            if self.apply(["split", T, k, "factor", t]):
                inner = k + ".inner"
                if self.chance(0.5) and self.apply(["rfactor", T, inner, 0]):
                    inner += ".v"
                    if self.apply(["bind", T, inner, "threadIdx.x"]):
                        self.apply(["compute_at", T + ".rf", T, inner])
                else:
                    self.apply(["bind", T, inner, "threadIdx.x"])
                self.threads[T] = t
            if spatial:
                n = spatial[0].name
                if len(spatial) == 2 and self.apply(["fuse", T, [n, spatial[1].name]]):
                    n = f"{n}.{spatial[1].name}.fused"
                self.apply(["bind", T, n, "blockIdx.x"])
            return
        if self.chance(0.5):
            step = ["rfactor", T, k, 0]
            if self.apply(["split", T, k, "factor", t]):
                step = ["rfactor", T, k + self.pick([".inner", ".outer"]), 0]
            if self.apply(step):
                self.rfactor_follow(step)
        elif spatial and self.chance(0.6):
            self.apply(["parallel", T, spatial[0].name])

    def bind_attached(self, st) -> None:
        if self.xthreads and st.op.name == "R.rf":   # (one thread's partial: its loops stay)
            return
        root = st
        while root.attach_stage is not None:
            root = root.attach_stage
        t = self.threads.get(root.op.name)
        spatial = [v for v in st.leaf_iter_vars if v.iter_type == "data_par"
                   and v not in st.annotations]
        if not t or not spatial:
            return
        T = st.op.name
        v = spatial[-1]
        if self.apply(["split", T, v.name, "factor", t]):
            self.apply(["bind", T, v.name + ".inner", "threadIdx.x"])


def generate_steps(rng: np.random.Generator, prog: dict, target: str,
                   extended: bool = False, extended2: bool = False,
                   xreduce: bool = False, tuplered: bool = False, norm: bool = False) -> list:
    """A random schedule of ``prog`` for ``target`` (``llvm`` or ``cuda``) as steps
    (``extended``, ``extended2``: with the draws of extended seeds, of
    :data:`.cases.EXTENDED2_FROM` seeds too; ``xreduce``: an ``xreduce`` case,
    :meth:`SchedGen.xreduce`; ``tuplered``: a ``tuplered`` case, :meth:`SchedGen.tuplered`;
    ``norm``: a ``norm`` case, :meth:`SchedGen.norm`)."""
    gen = SchedGen(rng, prog, target, extended, extended2)
    if xreduce:
        gen.xreduce()
        return gen.steps
    if tuplered:
        gen.tuplered()
        return gen.steps
    if norm:
        gen.norm()
        return gen.steps
    n = int(rng.choice(8, p=np.array([5, 6, 5, 4, 3, 2, 2, 1], float) / 28)) + 1
    gen.random_steps(n)
    if target == "cuda" and not gen.stopped:
        gen.bind_all()
    return gen.steps
