"""Rewrites of optimised LLVM IR around miscompilations of the LLVM that llvmlite ships.

``llvm.masked.store`` with a constant mask of one lane, of a vector truncated from a wider
one (``trunc <4 x i32> to <4 x i16>``), is compiled by LLVM 22's x86 back end into one
scalar store of the lane *before* the truncation: 4 bytes written for an ``i16`` lane,
8 for an ``i32`` one. The bytes past the lane overwrite the next elements, or memory past
the end of the buffer (the heap corrupted: ``free(): invalid pointer``). LLVM's vectorizers
emit such stores for the ragged tail of a loop whose values are computed wider than they
are stored (bfloat16 and float16 rounded in float32, int8 and int16 computed in int32);
fuzz seed llvm 60199 (a tiled ``te.scan`` of bfloat16) hit it.

:func:`scalarize_constant_masked_stores` replaces every masked store whose mask is a
constant by plain scalar stores of its enabled lanes (exactly what the store means), before
code generation; masked stores with a mask computed at run time are left alone.
"""

from __future__ import annotations

import re

#: ``[tail] call void @llvm.masked.store.<t>(<N x T> %v, ptr [attrs] align A %p,
#: <N x i1> <i1 true, i1 false, ...>)`` (the value and the pointer named, the mask constant;
#: the parameter attributes before ``align`` may take arguments: ``dereferenceable(8)``,
#: ``captures(none)``)
_MASKED_STORE = re.compile(
    r"^(?P<indent>\s*)(?:tail |notail |musttail )?call void @llvm\.masked\.store\.[\w.]+\("
    r"<(?P<n>\d+) x (?P<ty>[\w]+)> (?P<val>%[\w.\-]+|%\"[^\"]+\"), "
    r"ptr (?:[a-z_]+(?:\([\w, ]*\))? )*align (?P<align>\d+) (?P<ptr>%[\w.\-]+|%\"[^\"]+\"), "
    r"<\d+ x i1> (?P<mask><[^<>]*>|zeroinitializer|splat \(i1 (?:true|false)\))\)"
    r"(?P<rest>.*)$")

_BYTES = {"i8": 1, "i16": 2, "half": 2, "bfloat": 2, "i32": 4, "float": 4, "i64": 8,
          "double": 8}


def _lanes(mask: str, n: int) -> list[bool] | None:
    """The enabled lanes of a constant mask, or None for a mask we cannot read."""
    if mask == "zeroinitializer" or mask == "splat (i1 false)":
        return [False] * n
    if mask == "splat (i1 true)":
        return [True] * n
    parts = [p.strip() for p in mask[1:-1].split(",")]
    if len(parts) != n or any(p not in ("i1 true", "i1 false") for p in parts):
        return None
    return [p == "i1 true" for p in parts]


def scalarize_constant_masked_stores(text: str) -> str:
    """``text`` (a module's LLVM IR) with every ``llvm.masked.store`` of a constant mask
    replaced by scalar stores of its enabled lanes (see the module docstring); ``text``
    itself when it has none. Lanes keep the store's alignment where it divides their
    offset, else the element's natural alignment (at most the store's)."""
    if "llvm.masked.store" not in text:
        return text
    out = []
    count = 0
    for line in text.split("\n"):
        m = _MASKED_STORE.match(line) if "llvm.masked.store" in line else None
        lanes = _lanes(m["mask"], int(m["n"])) if m else None
        if m is None or lanes is None or m["ty"] not in _BYTES:
            out.append(line)
            continue
        count += 1
        ind, ty, n = m["indent"], m["ty"], int(m["n"])
        align, size = int(m["align"]), _BYTES[ty]
        for k, on in enumerate(lanes):
            if not on:
                continue
            name = f"%masked.store.{count}.{k}"
            a = align if (k * size) % align == 0 else min(align, size)
            out.append(f"{ind}{name}.v = extractelement <{n} x {ty}> {m['val']}, i64 {k}")
            out.append(f"{ind}{name}.p = getelementptr inbounds {ty}, ptr {m['ptr']}, i64 {k}")
            out.append(f"{ind}store {ty} {name}.v, ptr {name}.p, align {a}")
    return "\n".join(out)
