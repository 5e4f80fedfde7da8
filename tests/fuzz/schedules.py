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

A step the schedule refuses at once (``ScheduleError``) is dropped and the schedule rebuilt
without it, except with probability ``KEEP_ILLEGAL``, when it is kept as the last step (the
case then checks the refusal). Any other exception is kept and ends the schedule: it is a
crash to report.
"""

from __future__ import annotations

import numpy as np

from polytile import LoweringError, ScheduleError
from polytile.schedule.kinds import ThreadTag

from .spec import AX_HELPER, ident, program_code, schedule_code, step_code

KEEP_ILLEGAL = 0.12
_PRIMS = ("split", "tile", "reorder", "fuse", "vectorize", "unroll", "parallel", "compute_at",
          "compute_inline", "compute_root", "cache_read", "cache_write", "rfactor")
_WEIGHTS = {"llvm": (3, 1, 2, 1, 1.5, 1, 1.5, 3, 1, 0.3, 1, 0.7, 1.5),
            "cuda": (3, 1, 2, 1, 0.5, 1, 0, 3, 1, 0.3, 1.2, 0.8, 1.5)}
#: primitives (and weights) that only extended seeds draw (:data:`.cases.EXTENDED_FROM`)
_EXTENDED = (("storage_align", 0.7), ("pragma", 0.8), ("double_buffer", 0.4))
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
                 extended: bool = False):
        self.g = rng
        self.extended = extended
        self.prog = prog
        self.target = target
        self.steps: list = []
        self.stopped = False
        self.threads: dict = {}      # root stage name -> threadIdx.x extent
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
        try:
            exec(step_code(step), self.ns)  # noqa: S102
        except (ScheduleError, LoweringError):
            if keep:
                self.steps.append(step)
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

    def bind_all(self) -> None:
        """Bind every root stage to GPU indices (CUDA)."""
        for st in self.stages():
            if self.stopped:
                return
            if st.attach_type != "root" or any(isinstance(k, ThreadTag)
                                                for k in st.annotations.values()):
                continue
            self.bind_root(st)
        for st in self.stages():
            if st.attach_type == "scope" and self.chance(0.3):
                self.bind_attached(st)

    def bind_root(self, st) -> None:
        T = st.op.name
        leaves = list(st.leaf_iter_vars)
        red = [v for v in leaves if v.iter_type == "reduce" and v not in st.annotations]
        spatial = [v for v in leaves if v.iter_type == "data_par" and v not in st.annotations]
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
        if self.apply(["split", T, v.name, "factor", t]):
            self.apply(["bind", T, v.name + ".outer", "blockIdx.x"])
            self.apply(["bind", T, v.name + ".inner", "threadIdx.x"])
            self.threads[T] = t

    def bind_attached(self, st) -> None:
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
                   extended: bool = False) -> list:
    """A random schedule of ``prog`` for ``target`` (``llvm`` or ``cuda``) as steps
    (``extended``: with the primitives of extended seeds too)."""
    gen = SchedGen(rng, prog, target, extended)
    n = int(rng.choice(8, p=np.array([5, 6, 5, 4, 3, 2, 2, 1], float) / 28)) + 1
    gen.random_steps(n)
    if target == "cuda" and not gen.stopped:
        gen.bind_all()
    return gen.steps
