"""A faster ``__init__`` for the frozen, slotted dataclasses of the IR.

``@dataclass(frozen=True)`` generates an ``__init__`` that sets each field through
``object.__setattr__`` (a global lookup, an attribute lookup and a generic setattr per
field); the nodes of an unrolled GPU kernel are built tens of thousands of times per
lowering, and that ``__init__`` was a sixteenth of its time. :func:`fast_init` replaces it
with one that calls each slot's descriptor directly (about twice as fast), with the same
signature, defaults and ``__post_init__`` call; nothing else about the class changes (it
stays frozen: assignment still raises).
"""

from __future__ import annotations

import dataclasses


def fast_init(cls: type) -> type:
    """Give the frozen, slotted dataclass ``cls`` the faster ``__init__`` (see the module
    docstring) and return it; a class with a field outside the common case (no
    ``__init__`` parameter, a default factory, keyword-only) keeps its own.

    Raises
    ------
    TypeError
        When ``cls`` is not a slotted dataclass.
    """
    fs = dataclasses.fields(cls)
    if "__slots__" not in cls.__dict__:
        raise TypeError(f"fast_init: {cls.__name__} is not a slotted dataclass")
    if any(not f.init or f.kw_only or f.default_factory is not dataclasses.MISSING
           for f in fs):
        return cls
    ns: dict = {}
    params, body = [], []
    for k, f in enumerate(fs):
        ns[f"_s{k}"] = getattr(cls, f.name).__set__   # the slot's member descriptor
        if f.default is dataclasses.MISSING:
            params.append(f.name)
        else:
            ns[f"_d{k}"] = f.default
            params.append(f"{f.name}=_d{k}")
        body.append(f"    _s{k}(self, {f.name})")
    if hasattr(cls, "__post_init__"):
        body.append("    self.__post_init__()")
    src = f"def __init__(self, {', '.join(params)}):\n" + "\n".join(body or ["    pass"])
    exec(src, ns)   # noqa: S102 - source built above from the field names only
    init = ns["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__doc__ = cls.__init__.__doc__
    cls.__init__ = init
    return cls
