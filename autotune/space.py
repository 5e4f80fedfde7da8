"""Configuration spaces: the knobs a template declares, indexed lazily.

A template declares knobs on the current config (AutoTVM's design, TVM OSDI 2018; Chen et
al., "Learning to Optimize Tensor Programs", NeurIPS 2018):

* ``cfg.define_split(name, axis, num_outputs=2..4, policy=...)``: how to split one loop
  into nested loops; an entity is a list of sizes ``[-1, f1, ..., fn]`` where ``-1`` marks
  the outermost part, whose extent is ``ceil(extent / (f1 * ... * fn))``.
* ``cfg.define_reorder(name, axes, policy=...)``: a permutation of loops.
* ``cfg.define_annotate(name, axes, policy=...)``: an annotation per loop (none, unroll,
  vectorize).
* ``cfg.define_knob(name, values)``: any other choice.

Each knob space holds a list of entities (or computes its entity of an index directly,
for permutations). The config space is the product of the knob spaces, indexed in mixed
radix (the last knob varies fastest) and never materialised: ``len(space)`` may exceed
10^9, ``space.get(i)`` costs one ``divmod`` per knob.

During *collection* (the template run on a :class:`ConfigSpace`) ``cfg[name]`` returns the
knob's default entity, so the template body runs to the end; during *application* (on a
:class:`ConfigEntity`) ``define_*`` calls are no-ops and ``cfg[name]`` returns the chosen
entity.
"""

from __future__ import annotations

import itertools
import json
import logging
import math
import random
from collections.abc import Callable, Sequence

from polytile.errors import TuneError, format_error

from . import sizes
from .entities import (ANNOTATIONS, AnnotateEntity, OtherOptionEntity, ReorderEntity,
                       SplitEntity)

_log = logging.getLogger("polytile.autotune")

__all__ = ["ANNOTATIONS", "AnnotateEntity", "AnnotateSpace", "ConfigEntity", "ConfigSpace",
           "KnobSpace", "OtherOptionEntity", "OtherSpace", "ReorderEntity", "ReorderSpace",
           "SplitEntity", "SplitSpace"]


def _axis_len(axis) -> int:
    """Extent of an axis given as an int or an IterVar of constant extent."""
    if isinstance(axis, bool):
        raise TuneError(format_error("define_split", f"axis {axis!r} is a bool",
                                     "expected an IterVar or an int extent"))
    if isinstance(axis, int):
        return axis
    dom = getattr(axis, "dom", None)
    if dom is not None:
        ext = dom.extent
        ext = getattr(ext, "value", ext)
        if isinstance(ext, int):
            return ext
        v = sizes.value_of(ext)   # a symbolic extent: its value for this workload
        if v is not None:
            return v
    elif not isinstance(axis, int) and sizes.value_of(axis) is not None:
        return sizes.value_of(axis)   # a te.size_var given as the extent
    raise TuneError(format_error("define_split", f"axis {axis!r} has no constant extent",
                                 "expected an IterVar of constant extent or an int"))


# --------------------------------------------------------------------------- knob spaces


class KnobSpace:
    """The choices of one knob: ``len(k)``, ``k.get(i)`` and ``k.index_of(entity)``."""

    kind = "knob"
    name: str
    default_index: int = 0
    #: index of the value a record written before the knob existed stands for (None: a
    #: record must name the knob)
    legacy_index: int | None = None

    def __len__(self) -> int:
        raise NotImplementedError

    def get(self, index: int):
        raise NotImplementedError

    def index_of(self, entity) -> int | None:
        """Index of ``entity`` (or of its JSON value), or None when not in the space."""
        raise NotImplementedError

    def from_json(self, value):
        raise NotImplementedError

    def describe(self) -> str:
        return f"{self.kind}, {len(self)} choices"


def _json_key(v) -> str:
    """Compare knob values as their JSON text (tuples equal lists, True differs from 1)."""
    return json.dumps(v, sort_keys=True)


def _split_sizes(policy: str, length: int, limit: int, num_outputs: int) -> list:
    """The ``[-1, f1, ...]`` splits of an axis of ``length`` whose inner factors are at
    most ``limit``: divisors whose product divides ``length`` (``"factors"``), or powers of
    two whose product is at most ``length`` (``"power2"``), or both (``"verbose"``)."""
    if policy == "verbose":     # AutoTVM's: the factors and the powers of two
        both = _split_sizes("factors", length, limit, num_outputs) + _split_sizes(
            "power2", length, limit, num_outputs)
        return [list(t) for t in sorted({tuple(x) for x in both})]
    if policy == "factors":
        base = [d for d in _divisors(length) if d <= limit]
    else:
        base = [1 << k for k in range(0, max(1, limit).bit_length()) if 1 << k <= limit]
    sizes = []
    for inner in itertools.product(base, repeat=num_outputs - 1):
        p = math.prod(inner)
        if p > length or (policy == "factors" and length % p):
            continue
        sizes.append([-1] + list(inner))
    return sizes


def _divisors(n: int) -> list[int]:
    small = [d for d in range(1, int(math.isqrt(n)) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


class SplitSpace(KnobSpace):
    """Splits of an axis of extent ``length`` into ``num_outputs`` loops.

    Policies (the inner sizes ``f1..fn``, ``n = num_outputs - 1``):

    * ``"factors"``: each ``fi`` divides ``length`` and so does their product (no tails);
    * ``"power2"``: each ``fi`` a power of two with product at most ``length`` (tails
      allowed);
    * ``"verbose"``: both of the above (AutoTVM's);
    * ``"candidate"``: exactly the size lists in ``candidate``.

    ``max_factor`` bounds each inner size; ``filter(entity) -> bool`` drops entities.
    """

    kind = "split"

    def __init__(self, name: str, length: int, num_outputs: int, policy: str = "factors",
                 max_factor: int | None = None, filter: Callable | None = None,
                 candidate: Sequence | None = None, default=None):
        if not 2 <= num_outputs <= 4:
            raise TuneError(format_error("define_split", f"num_outputs={num_outputs} for "
                                         f"knob {name!r}", "expected 2, 3 or 4"))
        if policy not in ("factors", "power2", "verbose", "candidate"):
            raise TuneError(format_error("define_split", f"unknown policy {policy!r} for "
                                         f"knob {name!r}", "expected 'factors', 'power2', "
                                         "'verbose' or 'candidate'"))
        if length < 1:
            # a zero-size workload (``--args 0,4,4``) reaches here first; say so rather
            # than complain about the policy's empty choices
            raise TuneError(format_error(
                "define_split", f"knob {name!r} splits an axis of extent {length}",
                "expected an extent >= 1: the workload arguments must be positive for the "
                "axes this template tiles"))
        self.name, self.length, self.num_outputs, self.policy = name, length, num_outputs, policy
        limit = length if max_factor is None else min(max_factor, length)
        if policy == "candidate":
            if not candidate:
                raise TuneError(format_error("define_split", f"policy 'candidate' for knob "
                                             f"{name!r} without candidates",
                                             "pass candidate=[[-1, f1, ...], ...]"))
            sizes = []
            for c in candidate:
                c = list(c)
                if len(c) != num_outputs:
                    raise TuneError(format_error(
                        "define_split", f"candidate {c} of knob {name!r} has {len(c)} sizes",
                        f"expected num_outputs={num_outputs}"))
                sizes.append([-1] + [int(x) for x in c[1:]])
        else:
            sizes = _split_sizes(policy, length, limit, num_outputs)
        ents = [SplitEntity(s) for s in sizes]
        if filter is not None:
            ents = [e for e in ents if filter(e)]
        if not ents and policy == "factors":
            # an odd or prime extent whose divisors the filter all refuses (a vector width
            # of 8, 16 or 32 over 65 columns): non-divisible splits are exact here (partial
            # tiles), so the power-of-two sizes are legal choices of the same knob
            ents = [SplitEntity(s) for s in _split_sizes("power2", length, limit,
                                                         num_outputs)]
            ents = [e for e in ents if filter is None or filter(e)]
            if ents:
                policy = self.policy = "power2"
                _log.info("define_split: knob %r: no factor of extent %d passes the filter; "
                          "using power-of-two sizes (non-divisible splits)", name, length)
        if not ents:
            raise TuneError(format_error(
                "define_split", f"knob {name!r} has no choices: no split of its axis of "
                f"extent {length} into {num_outputs} loops (policy {policy!r}, max_factor "
                f"{max_factor}) passes the filter",
                "loosen max_factor or the filter, or pass policy='candidate' with "
                "candidate=[[-1, f1, ...], ...]"))
        self.entities = ents
        self._index = {tuple(e.size): k for k, e in enumerate(ents)}
        if default is not None:
            self.default_index = self.nearest(default)

    def __len__(self) -> int:
        return len(self.entities)

    def get(self, index: int) -> SplitEntity:
        return self.entities[index]

    def index_of(self, entity) -> int | None:
        size = entity.size if isinstance(entity, SplitEntity) else list(entity)
        return self._index.get(tuple([-1] + [int(x) for x in size[1:]]))

    def from_json(self, value) -> SplitEntity:
        return SplitEntity([-1] + [int(x) for x in value[1:]])

    def nearest(self, size) -> int:
        """Index of ``size`` (``[-1, f1, ...]``) or of the entity closest to it in log2
        distance (used for hand-written defaults at sizes where they do not fit)."""
        size = list(size)
        exact = self.index_of(size)
        if exact is not None:
            return exact

        def dist(e):
            return sum(abs(math.log2(a) - math.log2(max(1, b)))
                       for a, b in zip(e.size[1:], size[1:]))
        return min(range(len(self.entities)), key=lambda k: dist(self.entities[k]))

    def describe(self) -> str:
        return (f"split of length {self.length} into {self.num_outputs} ({self.policy}), "
                f"{len(self)} choices")


def _perm_of_index(index: int, n: int) -> list[int]:
    """The ``index``-th permutation of ``range(n)`` in lexicographic order (Lehmer code)."""
    items = list(range(n))
    out = []
    for k in range(n, 0, -1):
        q, index = divmod(index, math.factorial(k - 1))
        out.append(items.pop(q))
    return out


def _index_of_perm(perm: Sequence[int]) -> int:
    items = sorted(perm)
    index = 0
    for k, p in enumerate(perm):
        q = items.index(p)
        index += q * math.factorial(len(perm) - k - 1)
        items.pop(q)
    return index


class ReorderSpace(KnobSpace):
    """Permutations of ``n`` axes.

    Policies: ``"all"`` (all ``n!``, computed from the index, never listed); ``"interval"``
    (only the axes in ``interval=(lo, hi)`` move, the others keep their place);
    ``"candidate"`` (the permutations in ``candidate``).
    """

    kind = "reorder"

    def __init__(self, name: str, n: int, policy: str = "all", interval=None,
                 candidate=None, default=None):
        if policy not in ("all", "interval", "candidate"):
            raise TuneError(format_error("define_reorder", f"unknown policy {policy!r} for "
                                         f"knob {name!r}",
                                         "expected 'all', 'interval' or 'candidate'"))
        self.name, self.n, self.policy = name, n, policy
        self.lo, self.hi = 0, n
        self.candidate = None
        if policy == "interval":
            if interval is None:
                raise TuneError(format_error("define_reorder", f"policy 'interval' for knob "
                                             f"{name!r} without interval=(lo, hi)",
                                             "pass the half-open range of axes to permute"))
            self.lo, self.hi = int(interval[0]), int(interval[1])
            if not 0 <= self.lo < self.hi <= n:
                raise TuneError(format_error("define_reorder", f"interval {interval} for "
                                             f"{n} axes", "expected 0 <= lo < hi <= n"))
        elif policy == "candidate":
            if not candidate:
                raise TuneError(format_error("define_reorder", f"policy 'candidate' for knob "
                                             f"{name!r} without candidates",
                                             "pass candidate=[[2, 0, 1], ...]"))
            self.candidate = [list(c) for c in candidate]
            for c in self.candidate:
                if sorted(c) != list(range(n)):
                    raise TuneError(format_error("define_reorder", f"candidate {c} is not a "
                                                 f"permutation of range({n})",
                                                 "list each axis position once"))
        if default is not None:
            k = self.index_of(default)
            if k is None:
                raise TuneError(format_error("define_reorder", f"default {default} of knob "
                                             f"{name!r} is not in its space",
                                             "give one of the allowed permutations"))
            self.default_index = k

    def __len__(self) -> int:
        if self.candidate is not None:
            return len(self.candidate)
        return math.factorial(self.hi - self.lo)

    def get(self, index: int) -> ReorderEntity:
        if self.candidate is not None:
            return ReorderEntity(self.candidate[index])
        mid = [self.lo + p for p in _perm_of_index(index, self.hi - self.lo)]
        return ReorderEntity(list(range(self.lo)) + mid + list(range(self.hi, self.n)))

    def index_of(self, entity) -> int | None:
        perm = entity.perm if isinstance(entity, ReorderEntity) else [int(x) for x in entity]
        if self.candidate is not None:
            return self.candidate.index(perm) if perm in self.candidate else None
        if sorted(perm) != list(range(self.n)):
            return None
        if perm[:self.lo] != list(range(self.lo)) or perm[self.hi:] != list(range(self.hi,
                                                                                   self.n)):
            return None
        return _index_of_perm([p - self.lo for p in perm[self.lo:self.hi]])

    def from_json(self, value) -> ReorderEntity:
        return ReorderEntity([int(x) for x in value])

    def describe(self) -> str:
        return f"reorder of {self.n} axes ({self.policy}), {len(self)} choices"


class AnnotateSpace(KnobSpace):
    """Annotations of ``n`` axes.

    Policies: ``"try_unroll"`` (each axis none or unroll), ``"try_vec"`` (the innermost,
    last, axis none or vec; the others none), ``"try_unroll_vec"`` (each axis none or
    unroll; the last also vec).
    """

    kind = "annotate"

    def __init__(self, name: str, n: int, policy: str, default=None):
        choices = {"try_unroll": [("none", "unroll")] * n,
                   "try_vec": [("none",)] * (n - 1) + [("none", "vec")],
                   "try_unroll_vec": [("none", "unroll")] * (n - 1) + [("none", "unroll",
                                                                        "vec")]}
        if policy not in choices:
            raise TuneError(format_error("define_annotate", f"unknown policy {policy!r} for "
                                         f"knob {name!r}", "expected 'try_unroll', 'try_vec' "
                                         "or 'try_unroll_vec'"))
        self.name, self.n, self.policy = name, n, policy
        self.choices = choices[policy]
        if default is not None:
            k = self.index_of(default)
            if k is None:
                raise TuneError(format_error("define_annotate", f"default {default} of knob "
                                             f"{name!r} is not in its space",
                                             f"allowed per axis: {self.choices}"))
            self.default_index = k

    def __len__(self) -> int:
        return math.prod(len(c) for c in self.choices)

    def get(self, index: int) -> AnnotateEntity:
        anns = []
        for c in reversed(self.choices):
            index, r = divmod(index, len(c))
            anns.append(c[r])
        return AnnotateEntity(anns[::-1])

    def index_of(self, entity) -> int | None:
        anns = entity.anns if isinstance(entity, AnnotateEntity) else list(entity)
        if len(anns) != self.n:
            return None
        index = 0
        for a, c in zip(anns, self.choices):
            if a not in c:
                return None
            index = index * len(c) + c.index(a)
        return index

    def from_json(self, value) -> AnnotateEntity:
        return AnnotateEntity(list(value))

    def describe(self) -> str:
        return f"annotate {self.n} axes ({self.policy}), {len(self)} choices"


#: ``define_knob(legacy=...)`` not given (None is a value a knob may take)
_NO_LEGACY = object()


class OtherSpace(KnobSpace):
    """A plain list of values (``define_knob``)."""

    kind = "knob"

    def __init__(self, name: str, values: Sequence, default=None, legacy=_NO_LEGACY):
        values = list(values)
        if not values:
            raise TuneError(format_error("define_knob", f"knob {name!r} has no values",
                                         "pass a non-empty list"))
        self.name, self.values = name, values
        if default is not None:
            if default not in values:
                raise TuneError(format_error("define_knob", f"default {default!r} of knob "
                                             f"{name!r} is not one of its values {values}"))
            self.default_index = values.index(default)
        if legacy is not _NO_LEGACY:
            r = self.index_of(legacy)
            if r is None:
                raise TuneError(format_error("define_knob", f"legacy value {legacy!r} of knob "
                                             f"{name!r} is not one of its values {values}"))
            self.legacy_index = r

    def __len__(self) -> int:
        return len(self.values)

    def get(self, index: int) -> OtherOptionEntity:
        return OtherOptionEntity(self.values[index])

    def index_of(self, entity) -> int | None:
        val = entity.val if isinstance(entity, OtherOptionEntity) else entity
        key = _json_key(val)
        for k, v in enumerate(self.values):
            if _json_key(v) == key:
                return k
        return None

    def from_json(self, value) -> OtherOptionEntity:
        return OtherOptionEntity(value)

    def describe(self) -> str:
        shown = ", ".join(repr(v) for v in self.values[:8])
        more = ", ..." if len(self.values) > 8 else ""
        return f"knob [{shown}{more}], {len(self)} choices"


# --------------------------------------------------------------------------- configs


class _Definer:
    """The ``define_*`` methods shared by a space (which records) and a config (no-ops)."""

    #: floating-point operations of one run, as the template declared them with
    #: :meth:`add_flop` (AutoTVM's ``cfg.flop``); 0 when it did not
    flop = 0.0

    def _add(self, knob: KnobSpace) -> None:
        raise NotImplementedError

    def add_flop(self, flop) -> None:
        """Count ``flop`` floating-point operations of one run (AutoTVM's
        ``cfg.add_flop``): the tuner reports GFLOP/s from them where the template was
        registered without ``flops=``."""
        self.flop = self.flop + float(flop)

    @staticmethod
    def axis(var):
        """AutoTVM's ``cfg.axis(var)``: the axis itself (an IterVar or an int extent),
        which the ``define_*`` methods take as they are."""
        return var

    reduce_axis = axis

    def define_split(self, name: str, axis, policy: str = "factors", num_outputs: int = 2,
                     max_factor: int | None = None, filter: Callable | None = None,
                     candidate=None, default=None) -> None:
        """Declare a split knob of ``axis`` (an IterVar or an int extent); see
        :class:`SplitSpace`. Arguments in AutoTVM's order (``policy`` third).
        ``default`` is the hand-written choice ``[-1, f1, ...]`` (the nearest entity is
        taken where it does not fit)."""
        if self._defined(name):
            return
        self._add(SplitSpace(name, _axis_len(axis), num_outputs, policy, max_factor, filter,
                             candidate, default))

    def define_reorder(self, name: str, axes, policy: str = "all", interval=None,
                       candidate=None, default=None) -> None:
        """Declare a reorder knob of ``axes``; see :class:`ReorderSpace`."""
        if self._defined(name):
            return
        self._add(ReorderSpace(name, len(axes), policy, interval, candidate, default))

    def define_annotate(self, name: str, axes, policy: str, default=None) -> None:
        """Declare an annotation knob of ``axes``; see :class:`AnnotateSpace`."""
        if self._defined(name):
            return
        self._add(AnnotateSpace(name, len(axes), policy, default))

    def define_knob(self, name: str, values, default=None, legacy=_NO_LEGACY) -> None:
        """Declare a knob choosing one of ``values`` (JSON-serialisable). ``legacy``: the
        value that reproduces the template's schedule from before the knob was added;
        records that lack the knob load with it (:meth:`ConfigSpace.from_json`), so a
        template gaining a knob keeps every record already written. Without it a record
        must name the knob.

        Raises
        ------
        TuneError
            If ``values`` is empty or ``default`` / ``legacy`` is not one of them.
        """
        if self._defined(name):
            return
        self._add(OtherSpace(name, values, default, legacy))

    def prefer(self, keep: Callable[[dict], bool]) -> None:
        """Restrict the *search* (not the space) to the configs whose knob values
        ``keep(values)`` accepts (``values``: knob name -> value, as
        :meth:`ConfigEntity.knob_values`): the tuners then propose only those
        (:meth:`ConfigSpace.preferred`), while records of any config of the space still
        load. For duplicates (knob values a schedule maps to the same kernel) and regions
        known to be slow. A no-op on a config."""

    def multi_filter(self, filter: Callable) -> None:
        """AutoTVM's ``cfg.multi_filter(filter=...)``: like :meth:`prefer`, with
        ``filter(config)`` given a :class:`ConfigEntity` (``config["tile_x"].size``, as
        in the template). A no-op on a config."""

    def _defined(self, name: str) -> bool:
        raise NotImplementedError


class ConfigSpace(_Definer):
    """The product of the knob spaces declared by a template, indexed lazily.

    ``len(space)`` is the product of the knob sizes; ``space.get(i)`` decodes ``i`` in
    mixed radix (last knob fastest) into a :class:`ConfigEntity`. While a template is
    collected, ``space[name]`` gives the knob's default entity.
    """

    def __init__(self):
        self.knobs: dict[str, KnobSpace] = {}
        self.template_name = ""
        self.workload = None
        self._keep: Callable[[dict], bool] | None = None
        self._keep_config: Callable | None = None
        self._preferred: list[int] | None = None

    def prefer(self, keep: Callable[[dict], bool]) -> None:
        self._keep = keep
        self._preferred = None

    def multi_filter(self, filter: Callable) -> None:
        self._keep_config = filter
        self._preferred = None

    def preferred(self) -> list[int] | None:
        """Indices of the configs :meth:`prefer` and :meth:`multi_filter` keep, the
        default config always among them (ascending), or None when the template set no
        preference (search all)."""
        if self._keep is None and self._keep_config is None:
            return None
        if self._preferred is None:
            names = list(self.knobs)
            lists = [[k.get(r) for r in range(len(k))] for k in self.knobs.values()]
            out = []
            for index, ents in enumerate(itertools.product(*lists)):
                named = dict(zip(names, ents))
                if self._keep is not None and not self._keep(
                        {n: e.to_json() for n, e in named.items()}):
                    continue
                if self._keep_config is not None and not self._keep_config(
                        ConfigEntity(self, index, named)):
                    continue
                out.append(index)
            d = self.default_index()
            self._preferred = sorted(set(out) | {d})
        return self._preferred

    # collection ------------------------------------------------------------------------
    def _defined(self, name: str) -> bool:
        return name in self.knobs

    def _add(self, knob: KnobSpace) -> None:
        self.knobs[knob.name] = knob

    def __getitem__(self, name: str):
        if name not in self.knobs:
            raise TuneError(format_error("config", f"knob {name!r} is used before it is "
                                         "defined", "call cfg.define_...(name, ...) first"))
        k = self.knobs[name]
        return k.get(k.default_index)

    @property
    def is_fallback(self) -> bool:
        return False

    # indexing --------------------------------------------------------------------------
    def __len__(self) -> int:
        return math.prod(len(k) for k in self.knobs.values())

    @property
    def size(self) -> int:
        """Number of configs (a Python int; may exceed 2**63)."""
        return len(self)

    def dims(self) -> list[int]:
        """Number of choices of each knob, in declaration order."""
        return [len(k) for k in self.knobs.values()]

    def knob_indices(self, index: int) -> list[int]:
        """Per-knob indices of config ``index``."""
        if not 0 <= index < len(self):
            raise TuneError(format_error("space", f"index {index} out of range",
                                         f"expected 0 <= index < {len(self)}"))
        out = []
        for k in reversed(list(self.knobs.values())):
            index, r = divmod(index, len(k))
            out.append(r)
        return out[::-1]

    def index_from_knobs(self, knob_indices: Sequence[int]) -> int:
        index = 0
        for k, r in zip(self.knobs.values(), knob_indices):
            index = index * len(k) + r
        return index

    def get(self, index: int) -> ConfigEntity:
        """The config of number ``index`` (``0 <= index < len(self)``)."""
        ki = self.knob_indices(index)
        ents = {name: k.get(r) for (name, k), r in zip(self.knobs.items(), ki)}
        return ConfigEntity(self, index, ents)

    def default_index(self) -> int:
        """Index of the template's hand-written default config."""
        return self.index_from_knobs([k.default_index for k in self.knobs.values()])

    def default(self) -> ConfigEntity:
        return self.get(self.default_index())

    def sample(self, rng: random.Random) -> int:
        """A uniformly random config index."""
        return rng.randrange(len(self))

    def from_json(self, knobs: dict) -> ConfigEntity:
        """The config of the knob values ``knobs`` (as in a record).

        A knob missing from ``knobs`` that has a legacy value (``define_knob(legacy=...)``,
        a knob added after the record was written) takes that value.

        Raises
        ------
        TuneError
            If a knob without a legacy value is missing, a knob is unknown, or a value is
            not in this space.
        """
        if not isinstance(knobs, dict):
            raise TuneError(format_error("config", f"knob values {knobs!r}",
                                         "expected an object of knob name -> value"))
        knobs = dict(knobs)
        for n, k in self.knobs.items():
            if n not in knobs and k.legacy_index is not None:
                knobs[n] = k.get(k.legacy_index).to_json()
        missing = [n for n in self.knobs if n not in knobs]
        extra = [n for n in knobs if n not in self.knobs]
        if missing or extra:
            raise TuneError(format_error("config", f"knobs {sorted(knobs)} do not match the "
                                         f"space's {list(self.knobs)}",
                                         "a record of the same template version"))
        ki = []
        for name, k in self.knobs.items():
            r = k.index_of(k.from_json(knobs[name]))
            if r is None:
                raise TuneError(format_error("config", f"value {knobs[name]!r} of knob "
                                             f"{name!r} is not in the space",
                                             k.describe()))
            ki.append(r)
        return self.get(self.index_from_knobs(ki))

    def __str__(self) -> str:
        lines = [f"ConfigSpace({self.template_name or 'template'}, {len(self):,} configs)"]
        for k in self.knobs.values():
            d = k.get(k.default_index).to_json()
            lines.append(f"  {k.name:<16} {k.describe()}; default {d}")
        return "\n".join(lines)

    __repr__ = __str__


class ConfigEntity(_Definer):
    """One point of a :class:`ConfigSpace`: ``cfg[name]`` is the chosen entity."""

    def __init__(self, space: ConfigSpace, index: int, entities: dict, fallback: bool = False):
        self.space = space
        self.index = index
        self._entities = entities
        self._fallback = fallback

    @property
    def is_fallback(self) -> bool:
        """True when the config is the default chosen for lack of a tuning record."""
        return self._fallback

    def _defined(self, name: str) -> bool:
        return True  # define_* on a config is a no-op

    def _fallback_only(self, what: str, name: str) -> None:
        if not self._fallback:
            raise TuneError(format_error(
                what, f"knob {name!r} of a config chosen by the tuner or a record",
                "expected a fallback config (the default used without a record)",
                hint="call it under `if cfg.is_fallback:`, as in AutoTVM"))
        if name not in self._entities:
            raise TuneError(format_error(what, f"no knob named {name!r}",
                                         f"expected one of {list(self._entities)}"))
        self._entities = dict(self._entities)   # (shared with the space's default)

    def fallback_split(self, name: str, constraints) -> None:
        """Choose the sizes of split knob ``name`` of a fallback config from the largest
        tile allowed per loop (AutoTVM's ``FallbackConfigEntity.fallback_split``):
        ``constraints`` has one maximum per output loop, -1 for none; from the innermost
        loop out, each gets the largest divisor of what is left of the axis that fits its
        maximum (the outermost takes the rest).

        Raises
        ------
        TuneError
            On a config that is not a fallback, for a knob that is not a split, or a
            number of constraints other than its outputs, or a maximum below 1.
        """
        self._fallback_only("fallback_split", name)
        knob = self.space.knobs[name]
        cons = list(constraints)
        if not isinstance(knob, SplitSpace) or len(cons) != knob.num_outputs or any(
                not isinstance(c, int) or (c < 1 and c != -1) for c in cons):
            raise TuneError(format_error(
                "fallback_split", f"knob {name!r} ({type(knob).__name__}) with constraints "
                f"{cons}", "expected a split knob and one maximum tile size (an int >= 1, "
                "or -1 for none) per output loop"))
        left, sizes = knob.length, [0] * knob.num_outputs
        for i in reversed(range(1, knob.num_outputs)):
            limit = cons[i] if cons[i] != -1 else left
            sizes[i] = max(d for d in _divisors(left) if d <= limit)
            left //= sizes[i]
        self._entities[name] = SplitEntity([-1] + sizes[1:])

    def __setitem__(self, name: str, entity) -> None:
        """Set knob ``name`` of a fallback config (AutoTVM's ``cfg["tile"] =
        SplitEntity([-1, 8])``).

        Raises
        ------
        TuneError
            On a config that is not a fallback, or for an entity of another kind.
        """
        self._fallback_only("config", name)
        old = self._entities[name]
        if type(entity) is not type(old):
            raise TuneError(format_error(
                "config", f"knob {name!r} is set to a {type(entity).__name__}",
                f"expected a {type(old).__name__}"))
        self._entities[name] = entity

    def _add(self, knob) -> None:  # pragma: no cover - unreachable
        pass

    def __getitem__(self, name: str):
        try:
            return self._entities[name]
        except KeyError:
            raise TuneError(format_error("config", f"no knob named {name!r}",
                                         f"one of {list(self._entities)}")) from None

    def knob_values(self) -> dict:
        """JSON-serialisable knob values (what records store)."""
        return {n: e.to_json() for n, e in self._entities.items()}

    def __str__(self) -> str:
        return " ".join(f"{n}={e.to_json()}" for n, e in self._entities.items())

    def __repr__(self) -> str:
        return f"ConfigEntity({self.index}: {self})"
