"""Programs and schedules as plain data, and their Python source.

A *case* is a JSON-able dict that a worker process can rebuild exactly::

    {"seed": 17, "kind": "matmul", "target": "llvm",
     "program": {"dims": {"N0": 7, ...}, "tensors": [...], "outputs": ["C"]},
     "steps": [["split", "C", "i", "factor", 4], ...],
     "data": {"mode": "uniform", "seed": 17}}

The program and the schedule are *executed as the Python source printed here* (the same text
appears in every reproducer), so what a reproducer says is what ran.

Program tensors (``program["tensors"]``, in definition order):

* ``{"name", "shape", "dtype"}``: a placeholder; ``shape`` entries are Python expressions
  over the dims (``"N0 + 2"``);
* ``{"name", "shape", "axes", "body", "more"?, "outputs"?}``: a compute with one output
  per body (``"more"``: the bodies after the first; ``"outputs"``: their count), its outputs
  named ``name``, ``name.v1``, ... (:func:`tensor_names`); an ``argmax``/``argmin`` reduce
  (:data:`COMBINERS`) has ``"index"`` and two outputs; a tuple reduce
  (``"op": "tup_..."``, :func:`combiner_code`) has ``"tuple"``, the sources of its elements
  after the first (``"index"`` first where it has one), and one output per element;
* ``{"name", "shape", "axes", "body", "reduce"?}``: ``te.compute(shape, lambda <axes>:
  <body>)``; with ``"reduce": {"op", "axes": [[name, lo, hi]], "where", "init"}`` the body
  is ``te.<op>(<body>, axis=[...], where=..., init=...)``;
* ``{"name", "binop", "a", "b"}``: tensor-level broadcasting arithmetic ``a <op> b``;
* ``{"name", "scan": [init, update, state]}``: ``te.scan(init, update, state)``, whose
  state is a placeholder marked ``"state": True`` (not an argument).

Expressions are nested lists: ``["ax", "i"]``, ``["dim", "N0"]``, ``["int", 3]``,
``["lit", 0.5]`` (a weakly typed Python literal), ``["c", 0.5, "float16"]``
(``te.const``), ``["rd", "A", [index, ...]]``, ``["op", "+", a, b]`` (``+ - * / // %``),
``["fn", name, a, ...]`` (``te.<name>(...)``, e.g. ``max``, ``exp``), ``["cast", dtype, a]``,
``["sel", cond, a, b]``, ``["cmp", "<", a, b]``, ``["all", [c, ...]]``, ``["neg", a]``.

Schedule steps name stages by tensor name and loops by name (``"i.outer"``); see
:func:`step_code`.
"""

from __future__ import annotations

import copy
import json


def ident(name: str) -> str:
    """Python identifier of a tensor or stage name (``A.shared`` -> ``A_shared``)."""
    return name.replace(".", "_")


# ---------------------------------------------------------------------------- expressions
def expr_code(e, top: bool = True) -> str:
    """Python source of expression tree ``e``."""
    tag = e[0]
    if tag in ("ax", "dim"):
        return e[1]
    if tag == "int":
        return str(int(e[1]))
    if tag == "lit":
        return repr(float(e[1]))
    if tag == "c":
        v = int(e[1]) if not e[2].startswith("float") else float(e[1])
        return f"te.const({v!r}, {e[2]!r})"
    if tag == "rd":
        return f"{ident(e[1])}[{', '.join(expr_code(i) for i in e[2])}]" if e[2] else \
            f"{ident(e[1])}[()]"
    if tag == "op":
        s = f"{expr_code(e[2], False)} {e[1]} {expr_code(e[3], False)}"
        return s if top else f"({s})"
    if tag == "cmp":
        s = f"{expr_code(e[2], False)} {e[1]} {expr_code(e[3], False)}"
        return f"({s})"
    if tag == "fn":
        return f"te.{e[1]}({', '.join(expr_code(a) for a in e[2:])})"
    if tag == "cast":
        return f"{expr_code(e[2], False)}.astype({e[1]!r})"
    if tag == "sel":
        return f"te.if_then_else({expr_code(e[1])}, {expr_code(e[2])}, {expr_code(e[3])})"
    if tag == "all":
        return f"te.all({', '.join(expr_code(c) for c in e[1])})"
    if tag == "neg":
        return f"-{expr_code(e[1], False)}"
    raise ValueError(f"unknown expression node {e!r}")


def subtrees(e, path=()):
    """Every (path, node) of expression ``e``, parents first."""
    yield path, e
    tag = e[0]
    kids = []
    if tag in ("op", "cmp"):
        kids = [(2, e[2]), (3, e[3])]
    elif tag == "fn":
        kids = [(k, e[k]) for k in range(2, len(e))]
    elif tag in ("cast",):
        kids = [(2, e[2])]
    elif tag == "sel":
        kids = [(1, e[1]), (2, e[2]), (3, e[3])]
    elif tag == "neg":
        kids = [(1, e[1])]
    for k, child in kids:
        yield from subtrees(child, path + (k,))


def replace_at(e, path, new):
    """A copy of ``e`` with the node at ``path`` replaced by ``new``."""
    if not path:
        return copy.deepcopy(new)
    out = list(e)
    out[path[0]] = replace_at(e[path[0]], path[1:], new)
    return out


def reads(e) -> set:
    """Names of the tensors read by expression ``e`` (indices included)."""
    out = set()

    def walk(x):
        if not isinstance(x, list) or not x:
            return
        if x[0] == "rd":
            out.add(x[1])
            for i in x[2]:
                walk(i)
            return
        for y in x[1:]:
            if isinstance(y, list):
                if y and isinstance(y[0], str):
                    walk(y)
                else:
                    for z in y:
                        walk(z)

    walk(e)
    return out


def tensor_reads(t: dict) -> set:
    """Names of the tensors a program tensor reads."""
    if "binop" in t:
        return {t["a"], t["b"]}
    if "scan" in t:
        return set(t["scan"][:2])
    if "body" not in t:
        return set()
    out = reads(t["body"])
    for b in t.get("more", []):
        out |= reads(b)
    red = t.get("reduce")
    if red:
        for part in ("where", "init", "index"):
            if red.get(part) is not None:
                out |= reads(red[part])
        for x in red.get("tuple", []):
            out |= reads(x)
    return out


# ---------------------------------------------------------------------------- programs
#: reducers written with ``te.comm_reducer`` (``"op"`` of a reduce): their Python source.
#: ``argmax``/``argmin`` reduce ``(index, value)`` pairs into two outputs (the index of the
#: largest value, the smallest index among equal values; an empty reduction gives
#: ``(int32 max, the identity value)``), ``prod`` multiplies, ``csum``/``cmax`` are ``+`` and
#: ``max`` spelled as a comm_reducer.
_BETTER = {"argmax": ">", "argmin": "<"}
COMBINERS = {
    **{op: (f"_{op}_first = lambda x, y: te.any(x[1] {c} y[1], te.all(x[1] == y[1], "
            f"x[0] < y[0]))\n"
            f"{op} = te.comm_reducer(lambda x, y: (te.if_then_else(_{op}_first(x, y), x[0], "
            f"y[0]), te.if_then_else(_{op}_first(x, y), x[1], y[1])), lambda t0, t1: "
            f"(te.const(2147483647, t0), te.{'min' if c == '>' else 'max'}_value(t1)), "
            f"name={op!r})") for op, c in _BETTER.items()},
    "prod": "prod = te.comm_reducer(lambda x, y: x * y, lambda t: te.const(1, t), "
            "name='prod')",
    "csum": "csum = te.comm_reducer(lambda x, y: x + y, lambda t: te.const(0, t), "
            "name='csum')",
    "cmax": "cmax = te.comm_reducer(lambda x, y: te.max(x, y), lambda t: te.min_value(t), "
            "name='cmax')",
}


#: the identity of each independent element of a tuple combiner (:func:`combiner_code`)
_IDENTITY = {"sum": "te.const(0, {t})", "prod": "te.const(1, {t})",
             "max": "te.min_value({t})", "min": "te.max_value({t})"}


def combiner_code(op: str) -> str:
    """Python source defining the reducer ``op`` of a reduce: one of :data:`COMBINERS`, or
    a tuple combiner ``tup_<part>_<part>...`` (seeds from :data:`.cases.EXTENDED4_FROM`)
    whose parts are ``sum``/``prod``/``max``/``min`` (one element each, combined on its
    own: ``x[k] + y[k]``, ``te.max(x[k], y[k])``...) or ``argmax``/``argmin`` (two elements,
    ``(index, value)``, as in :data:`COMBINERS`); e.g. ``tup_sum_sum`` reduces ``(x,
    x * x)`` to a sum and a sum of squares, ``tup_argmax_sum`` ``(k, x, 1)`` to the argmax
    and a count."""
    if op in COMBINERS:
        return COMBINERS[op]
    if not op.startswith("tup_"):
        raise ValueError(f"unknown reducer {op!r}")
    elems, ids, pre, k = [], [], [], 0
    for part in op[4:].split("_"):
        a, b = f"x[{k}]", f"y[{k}]"
        if part in _BETTER:
            v, w = f"x[{k + 1}]", f"y[{k + 1}]"
            pre.append(f"_{op}_{k} = lambda x, y: te.any({v} {_BETTER[part]} {w}, "
                       f"te.all({v} == {w}, {a} < {b}))")
            elems += [f"te.if_then_else(_{op}_{k}(x, y), {a}, {b})",
                      f"te.if_then_else(_{op}_{k}(x, y), {v}, {w})"]
            ids += [f"te.const(2147483647, t{k})",
                    f"te.{'min' if part == 'argmax' else 'max'}_value(t{k + 1})"]
            k += 2
            continue
        elems.append(f"{a} + {b}" if part == "sum" else f"{a} * {b}" if part == "prod"
                     else f"te.{part}({a}, {b})")
        ids.append(_IDENTITY[part].format(t=f"t{k}"))
        k += 1
    ts = ", ".join(f"t{j}" for j in range(k))
    return "\n".join(pre + [f"{op} = te.comm_reducer(lambda x, y: ({', '.join(elems)}), "
                            f"lambda {ts}: ({', '.join(ids)}), name={op!r})"])


def tensor_names(t: dict) -> list:
    """The names of a program tensor's outputs: ``[name]``, or for a compute with several
    outputs (a tuple reduction) ``[name, name.v1, ...]`` (TVM's buffer names)."""
    return [t["name"]] + [f"{t['name']}.v{k}" for k in range(1, t.get("outputs", 1))]


def tensor_code(t: dict) -> str:
    name = ", ".join(ident(n) for n in tensor_names(t))
    if "binop" in t:
        return f"{name} = {ident(t['a'])} {t['binop']} {ident(t['b'])}"
    if "scan" in t:
        return f"{name} = te.scan({', '.join(ident(x) for x in t['scan'])}, name={t['name']!r})"
    shape = ", ".join(t["shape"]) + ("," if len(t["shape"]) == 1 else "")
    if "body" not in t:
        return f"{name} = te.placeholder(({shape}), {t['dtype']!r}, name={t['name']!r})"
    lines = []
    body = expr_code(t["body"])
    if t.get("more"):  # a compute with several outputs
        body = f"({', '.join([body] + [expr_code(b) for b in t['more']])})"
    red = t.get("reduce")
    if red:
        for ax, lo, hi in red["axes"]:
            lines.append(f"{ax} = te.reduce_axis(({lo}, {hi}), name={ax!r})")
        axes = [a[0] for a in red["axes"]]
        extra = ""
        if red.get("where") is not None:
            extra += f", where={expr_code(red['where'])}"
        if red.get("init") is not None:
            ini = red["init"]
            if isinstance(ini[0], list):  # one initial value per element of a tuple
                extra += f", init=({', '.join(expr_code(x) for x in ini)},)"
            else:
                extra += f", init={expr_code(ini)}"
        axis = axes[0] if len(axes) == 1 else f"[{', '.join(axes)}]"
        fn = f"te.{red['op']}"
        if red["op"] in COMBINERS or red["op"].startswith("tup_"):
            lines.insert(0, combiner_code(red["op"]))
            fn = red["op"]
        if red.get("index") is not None or red.get("tuple"):
            parts = [expr_code(red["index"])] if red.get("index") is not None else []
            parts += [body] + [expr_code(x) for x in red.get("tuple", [])]
            body = f"({', '.join(parts)})"
        body = f"{fn}({body}, axis={axis}{extra})"
    lines.append(f"{name} = te.compute(({shape}), lambda {', '.join(t['axes'])}: {body}, "
                 f"name={t['name']!r})")
    return "\n".join(lines)


def program_code(prog: dict, static: bool = False) -> str:
    """Python source defining the program's dims and tensors (``te`` imported).

    The dims named in ``prog["symbolic"]`` are ``te.size_var`` sizes (bound at call time
    by the arrays' shapes), unless ``static``: then every dim is its int value (the
    program the reference evaluates)."""
    dims = prog["dims"]
    sym = [] if static else prog.get("symbolic", [])
    lines = []
    if dims:
        lines.append(f"{', '.join(dims)} = {', '.join(str(v) for v in dims.values())}")
    for d in sym:
        lines.append(f"{d} = te.size_var({d!r})")
    lines += [tensor_code(t) for t in prog["tensors"]]
    return "\n".join(lines)


def inputs_of(prog: dict) -> list[str]:
    """Names of the placeholders, in definition order (a scan's state is none)."""
    return [t["name"] for t in prog["tensors"] if "body" not in t and "binop" not in t
            and "scan" not in t and not t.get("state")]


def args_of(prog: dict) -> list[str]:
    """The built function's parameters: inputs read (transitively) by the outputs, then
    the outputs."""
    needed = set()
    todo = list(prog["outputs"])
    by = {n: t for t in prog["tensors"] for n in tensor_names(t)}
    while todo:
        n = todo.pop()
        if n in needed:
            continue
        needed.add(n)
        todo.extend(tensor_reads(by[n]))
    return [n for n in inputs_of(prog) if n in needed] + list(prog["outputs"])


# ---------------------------------------------------------------------------- schedules
AX_HELPER = '''def ax(t, name):
    """The loop (or axis) named `name` of stage s[t]."""
    st = s[t]
    for v in list(st.leaf_iter_vars) + list(st.all_iter_vars):
        if v.name == name:
            return v
    raise LookupError(f"stage {st.name!r} has no loop named {name!r}")'''


def step_code(step: list) -> str:
    """Python source of one schedule step."""
    p, st = step[0], step[1]
    T = ident(st)

    def a(name):
        return f"ax({T}, {name!r})"

    if p == "split":
        return f"s[{T}].split({a(step[2])}, {step[3]}={step[4]})"
    if p == "tile":
        return f"s[{T}].tile({a(step[2])}, {a(step[3])}, {step[4]}, {step[5]})"
    if p in ("fuse", "reorder"):
        return f"s[{T}].{p}({', '.join(a(n) for n in step[2])})"
    if p in ("vectorize", "unroll", "parallel"):
        return f"s[{T}].{p}({a(step[2])})"
    if p == "bind":
        return f"s[{T}].bind({a(step[2])}, te.thread_axis({step[3]!r}))"
    if p == "compute_at":
        P = ident(step[2])
        return f"s[{T}].compute_at(s[{P}], ax({P}, {step[3]!r}))"
    if p in ("compute_inline", "compute_root"):
        return f"s[{T}].{p}()"
    if p == "cache_read":
        return (f"{ident(st + '.' + step[2])} = s.cache_read({T}, {step[2]!r}, "
                f"[{', '.join(ident(r) for r in step[3])}])")
    if p == "cache_write":  # (a 4th element: every output of a multi-output stage)
        n = step[3] if len(step) > 3 else 1
        if n == 1:
            return f"{ident(st + '.' + step[2])} = s.cache_write({T}, {step[2]!r})"
        c = ident(st + "." + step[2])
        outs = ", ".join([T] + [f"{T}_v{k}" for k in range(1, n)])
        return f"{c}, {', '.join(f'{c}_v{k}' for k in range(1, n))} = s.cache_write([{outs}], " \
               f"{step[2]!r})"
    if p == "rfactor":  # (a 5th element: the partials of a tuple reduction, named each)
        n = step[4] if len(step) > 4 else 1
        names = ", ".join([ident(st + ".rf")] + [ident(f"{st}.rf.v{k}") for k in range(1, n)])
        return f"{names} = s.rfactor({T}, {a(step[2])}, factor_axis={step[3]})"
    if p == "storage_align":
        return f"s[{T}].storage_align({a(step[2])}, {step[3]}, {step[4]})"
    if p == "pragma":
        value = "" if step[4] is None else f", {step[4]!r}"
        return f"s[{T}].pragma({a(step[2])}, {step[3]!r}{value})"
    if p == "double_buffer":
        return f"s[{T}].double_buffer()"
    if p == "create_group":  # a group named after its (first) output: G_<output>
        ins = ", ".join(ident(n) for n in step[2])
        return f"G_{T} = s.create_group({T}, [{ins}], include_inputs={step[3]!r})"
    if p == "group_compute_at":
        P = ident(step[2])
        return f"G_{T}.compute_at(s[{P}], ax({P}, {step[3]!r}))"
    raise ValueError(f"unknown step {step!r}")


def schedule_code(prog: dict, steps: list) -> str:
    """Python source creating ``s`` and applying ``steps``."""
    outs = [ident(o) for o in prog["outputs"]]
    head = f"s = te.create_schedule({outs[0]}.op)" if len(outs) == 1 else \
        f"s = te.create_schedule([{', '.join(o + '.op' for o in outs)}])"
    lines = [head]
    if steps:
        lines.append(AX_HELPER)
    lines += [step_code(st) for st in steps]
    return "\n".join(lines)


def dumps(case: dict) -> str:
    """One-line JSON of a case."""
    return json.dumps(case, separators=(",", ":"))
