"""Templates: schedule functions parameterised by a config, and their registry.

A template is a Python function ``(*workload_args, dtype=...) -> (schedule, args)`` that
reads its knobs from :func:`get_config`::

    @autotune.template("my_matmul", default_args=(512, 512, 512), flops=lambda M, N, K:
                       2 * M * N * K)
    def my_matmul(M, N, K, dtype="float32"):
        cfg = autotune.get_config()
        ...
        cfg.define_split("tile_i", C.op.axis[0], num_outputs=2, default=[-1, 8])
        io, ii = cfg["tile_i"].apply(s, C, C.op.axis[0])
        ...
        return s, [A, B, C]

What ``get_config()`` returns depends on who calls the template:

* the tuner *collecting* the space: a :class:`ConfigSpace` (``cfg[name]`` is the default);
* the tuner or a worker *instantiating* a config: that :class:`ConfigEntity`;
* a user calling the template (``my_matmul(512, 512, 512)``): the best config of the
  active dispatch context (:func:`polytile.autotune.apply_history_best`), or the default
  config with a :class:`FallbackWarning` that says how to tune it.

A workload is a template name, its arguments and a dtype; its JSON key is what records
store. Templates are addressed by registered name (``"matmul"``) or as
``"path/to/file.py:function"``.
"""

from __future__ import annotations

import importlib.util
import inspect
import os
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass

from polytile.errors import TuneError, format_error

from . import sizes
from .context import current_context, default_target
from .space import ConfigEntity, ConfigSpace

_REGISTRY: dict[str, Template] = {}
_local = threading.local()


class FallbackWarning(UserWarning):
    """A template was built with its default config for lack of a tuning record."""


def _stack() -> list:
    if not hasattr(_local, "stack"):
        _local.stack = []
    return _local.stack


def get_config():
    """The config of the template being run: a :class:`ConfigSpace` while its space is
    collected, a :class:`ConfigEntity` otherwise.

    Raises
    ------
    TuneError
        When called outside a template.
    """
    st = _stack()
    if not st:
        raise TuneError(format_error("get_config", "called outside a template",
                                     "call it inside a function decorated with "
                                     "@autotune.template, run through the tuner or called "
                                     "as a template"))
    return st[-1]


class _UseConfig:
    def __init__(self, cfg):
        self.cfg = cfg

    def __enter__(self):
        _stack().append(self.cfg)
        return self.cfg

    def __exit__(self, *exc):
        _stack().pop()


@dataclass(frozen=True)
class Workload:
    """A template applied to arguments: ``Workload("matmul", (1024, 1024, 1024),
    "float32")``. ``key()`` is its JSON form in records."""

    template: str
    args: tuple
    dtype: str = "float32"

    def key(self) -> dict:
        return {"template": self.template, "args": list(self.args), "dtype": self.dtype}

    @staticmethod
    def from_key(key: dict) -> Workload:
        return Workload(key["template"], tuple(key["args"]), key.get("dtype", "float32"))

    def __str__(self) -> str:
        return f"{self.template}({', '.join(map(str, self.args))}) {self.dtype}"

    def slug(self) -> str:
        """A file-name friendly form: ``matmul_1024x1024x1024_float32``."""
        base = os.path.splitext(os.path.basename(self.template.split(":")[0]))[0]
        if ":" in self.template:
            base += "-" + self.template.rsplit(":", 1)[1]
        args = "x".join(str(a) for a in self.args)
        return f"{base}_{args}_{self.dtype}" if args else f"{base}_{self.dtype}"


class Template:
    """A registered template; see the module docstring.

    Attributes
    ----------
    name : str
    func : callable
        ``func(*args, dtype=...) -> (schedule, tensors)``.
    default_args : tuple
        The workload used when none is given (``polytile tune matmul``).
    flops : callable or None
        ``flops(*args) -> int`` floating-point operations of one run (for GFLOP/s).
    reference : callable or None
        ``reference(*inputs, args=workload_args) -> output or tuple of outputs``: a numpy
        implementation (for ``polytile run`` and the numpy comparison). One that also
        takes ``out=`` (an array of the one output's shape and dtype, written in place and
        returned, as ``np.matmul``'s) is timed that way by the numpy anchor, as the
        kernels are: into a preallocated output; one with an attribute ``numpy_call`` (a
        numpy function taking the inputs and ``out=``) by calling that function directly,
        as a user would (:func:`.data.reference_call`).
    description : str
    targets : tuple of str or None
        Target kinds ``func`` is written for (``("llvm",)``); None: any (user templates).
    variants : dict
        Target kind -> function of the same workload for that kind (a ``cuda`` schedule
        beside the CPU one), registered with ``@template(name, target="cuda")``.
    """

    def __init__(self, name: str, func: Callable, default_args: tuple = (),
                 flops: Callable | None = None, reference: Callable | None = None,
                 description: str = "", targets: tuple | None = None):
        self.name = name
        self.func = func
        self.targets = tuple(targets) if targets else None
        self.variants: dict = {}
        self.default_args = tuple(default_args)
        self.flops_fn = flops
        self.reference = _with_values(reference) if reference is not None else None
        self._reference = reference
        para = (func.__doc__ or "").strip().split("\n\n")[0]
        self.description = description or " ".join(para.split())
        try:
            self._takes_dtype = "dtype" in inspect.signature(func).parameters
        except (TypeError, ValueError):
            self._takes_dtype = False

    def target_kinds(self) -> list | None:
        """Target kinds this template has a schedule for (None: any)."""
        if self.targets is None:
            return None
        return list(self.targets) + [k for k in self.variants if k not in self.targets]

    def func_for(self, target=None) -> Callable:
        """The template function for ``target`` (a target string or kind; None: the
        ``llvm`` one, else the first registered).

        Raises
        ------
        TuneError
            When the template has no schedule for that target kind.
        """
        kind = str(target).split()[0] if target else None
        if kind is None and "llvm" in self.variants:
            kind = "llvm"  # no target: the host CPU's, whichever was registered first
        if kind is None or self.targets is None or kind in self.targets:
            return self.func
        if kind in self.variants:
            return self.variants[kind]
        have = [n for n, t in registered().items()
                if t.target_kinds() is None or kind in t.target_kinds()]
        raise TuneError(format_error(
            f"template {self.name!r}", f"has no schedule for target kind {kind!r} (it has "
            f"{', '.join(self.target_kinds())})",
            f"expected one of its targets; templates for {kind!r}: "
            f"{', '.join(sorted(have)) or 'none'}", hint="`polytile templates` lists them"))

    def _run(self, cfg, args: tuple, dtype: str, target=None):
        func = self.func_for(target)
        # symbolic sizes ("n=256"): the function gets te.size_var("n"), the space the value
        args, values = sizes.symbolic_args(args)
        from . import gpu_limits

        with _UseConfig(cfg), sizes.binding(values), _target_binding(target), \
                gpu_limits.target_binding(target):
            try:
                takes_dtype = "dtype" in inspect.signature(func).parameters
            except (TypeError, ValueError):
                takes_dtype = False
            if takes_dtype:
                out = func(*args, dtype=dtype)
            else:
                out = func(*args)
        if not (isinstance(out, tuple) and len(out) == 2):
            raise TuneError(format_error(self.name, f"template returned {type(out).__name__}",
                                         "expected a (schedule, list of tensors) pair"))
        return out

    def workload(self, args=None, dtype: str = "float32") -> Workload:
        """The workload of this template at ``args`` (default: ``default_args``).

        Raises
        ------
        TuneError
            If the template function does not take that many arguments.
        """
        args = self.default_args if args is None else tuple(args)
        self._check_arity(args)
        return Workload(self.name, tuple(args), dtype)

    def _check_arity(self, args: tuple) -> None:
        try:
            params = list(inspect.signature(self.func).parameters.values())
        except (TypeError, ValueError):
            return
        pos = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
               and p.name != "dtype"]
        varargs = any(p.kind == p.VAR_POSITIONAL for p in params)
        need = sum(p.default is inspect.Parameter.empty for p in pos)
        if need <= len(args) and (varargs or len(args) <= len(pos)):
            return
        names = ", ".join(p.name for p in pos)
        takes = str(len(pos)) if need == len(pos) else f"{need} to {len(pos)}"
        example = ",".join(map(str, self.default_args)) or "..."
        hint = f"--args {example}"
        if len(args) == len(pos) + 1 and isinstance(args[-1], str):
            # AutoTVM's task.create(name, args=(N, L, M, "float32")) passes it last
            hint = (f"give the dtype apart: dtype={args[-1]!r} (tune(template, args, "
                    "dtype=...), --dtype on the command line); the template receives it as "
                    "its 'dtype' parameter")
        raise TuneError(format_error(
            f"template {self.name!r}", f"takes {takes} arguments ({names}) but {len(args)} "
            f"were given: {list(args)}", "expected one value per argument, in order",
            hint=hint))

    def space(self, args=None, dtype: str = "float32", target=None) -> ConfigSpace:
        """Collect the config space of this template at ``args`` for ``target`` (its kind
        picks the variant, see :meth:`func_for`; GPU variants prune with
        :func:`.gpu_limits.current`).

        Raises
        ------
        TuneError
            If the template defines no knobs or fails while collecting.
        """
        wl = self.workload(args, dtype)
        sp = ConfigSpace()
        sp.template_name, sp.workload = self.name, wl
        self._run(sp, wl.args, dtype, target)
        if not sp.knobs:
            raise TuneError(format_error(self.name, "the template defines no knobs",
                                         "call cfg.define_split/define_knob/... in it"))
        return sp

    def instantiate(self, config: ConfigEntity, args=None, dtype: str = "float32",
                    target=None):
        """The ``(schedule, tensors)`` of ``config`` at ``args`` for ``target``."""
        wl = self.workload(args, dtype)
        return self._run(config, wl.args, dtype, target)

    def flops(self, args=None) -> float | None:
        args = self.default_args if args is None else tuple(args)
        return float(self.flops_fn(*sizes.concrete_args(args))) if self.flops_fn else None

    def __call__(self, *args, dtype: str = "float32"):
        """Instantiate with the config chosen by the dispatch context (see the module
        docstring); returns ``(schedule, tensors)``."""
        args, dtype = self._dtype_apart(args, dtype)
        ctx = current_context()
        target = ctx.target if ctx is not None else default_target()
        sp = self.space(args or None, dtype, target)
        wl = sp.workload
        cfg = ctx.query(wl, target, sp) if ctx is not None else None
        if cfg is None:
            _warn_fallback(wl, target, ctx)
            d = sp.default()
            cfg = ConfigEntity(sp, d.index, d._entities, fallback=True)
        return self._run(cfg, wl.args, dtype, target)

    def _dtype_apart(self, args: tuple, dtype: str) -> tuple:
        """``args`` without a dtype given positionally where the function declares its
        ``dtype`` parameter (AutoTVM's ``matmul(N, L, M, "float32")``), and the dtype."""
        try:
            params = list(inspect.signature(self.func).parameters)
        except (TypeError, ValueError):
            return args, dtype
        k = params.index("dtype") if "dtype" in params else -1
        if 0 <= k < len(args) and isinstance(args[k], str):
            return args[:k] + args[k + 1:], args[k]
        return args, dtype

    def __repr__(self) -> str:
        return f"Template({self.name!r}, default_args={self.default_args})"


def _with_values(reference: Callable) -> Callable:
    """``reference`` called with the values of symbolic sizes in ``args``."""
    def ref(*inputs, args=(), **kw):
        return reference(*inputs, args=sizes.concrete_args(args), **kw)

    ref.__wrapped__ = reference
    return ref


_warned: set = set()


def _warn_fallback(wl: Workload, target: str, ctx) -> None:
    key = (str(wl), target)
    if key in _warned:
        return
    _warned.add(key)
    where = "the active records" if ctx is not None else "no records are active"
    if ctx is not None:  # records of other sizes or targets: the likely mix-up
        near = []
        for r in getattr(ctx, "records", ()):
            item = f"{r.workload_str()} on '{r.target}'"
            if r.workload.get("template") == wl.template and item not in near and not (
                    r.workload_str() == str(wl) and r.target == target):
                near.append(item)
        if near:
            more = f" and {len(near) - 3} more" if len(near) > 3 else ""
            where = f"the active records hold only {'; '.join(near[:3])}{more}"
    args = ",".join(map(str, wl.args))
    how = f"`polytile tune {wl.template} --args {args} --dtype {wl.dtype} --log FILE`"
    if template_source(wl.template) is not None:
        # registered by the user's script: the command line would not find it by name
        how = (f"`polytile.autotune.tune({wl.template!r}, {tuple(wl.args)!r}, "
               f"dtype={wl.dtype!r}, log_file=FILE)` in the file that registers it")
    warnings.warn(
        f"autotune: no tuning record for {wl} on target '{target}' ({where}); using the "
        f"template's default config. To tune it: {how}, then build inside `with polytile."
        f"autotune.apply_history_best(FILE):`", FallbackWarning, stacklevel=3)


def _target_binding(target):
    """GPU targets: the limits GPU templates prune with (:mod:`.gpu_limits`), from the
    target's ``-arch`` unless the tuner bound the device's."""
    from . import gpu_limits

    if target and str(target).split()[0] == "cuda" and not getattr(
            gpu_limits._local, "stack", None):
        return gpu_limits.use(gpu_limits.current(target))
    return gpu_limits.use(None)


def template(name: str, default_args: tuple = (), flops: Callable | None = None,
             reference: Callable | None = None, description: str = "",
             target: str | None = None):
    """Decorator registering a template function under ``name``; returns the
    :class:`Template` (callable like the function).

    ``target`` (a kind: ``"llvm"``, ``"cuda"``) says which targets the function schedules
    for; None means any. A second registration of the same name for another kind becomes
    a *variant* of the first (:meth:`Template.func_for`): one workload name, one records
    key, a schedule per target; its ``default_args``, ``flops`` and ``reference`` are the
    first registration's where not given."""
    def deco(func):
        old = _REGISTRY.get(name)
        if target is not None and old is not None and old.targets is not None \
                and target not in old.targets:
            old.variants[target] = func
            return old
        t = Template(name, func, default_args, flops, reference, description,
                     targets=(target,) if target else None)
        _REGISTRY[name] = t
        return t
    return deco


def registered() -> dict[str, Template]:
    """Built-in and user-registered templates by name."""
    # templates.py registers the built-ins with this module's decorator, so it imports
    # this module: it is reached here, on first use, like a plugin
    from . import templates  # noqa: F401

    return dict(_REGISTRY)


def get_template(spec: str, source: str | None = None) -> Template:
    """A template by registered name or ``"path/to/file.py:function"``.

    ``source``: the file that registers template ``spec`` with ``@template`` (see
    :func:`template_source`), imported first when the name is not registered in this
    process (a worker process tuning a template of the user's script).

    Raises
    ------
    TuneError
        For an unknown name, a missing file or function, or a function that is not a
        template.
    """
    if isinstance(spec, Template):
        return spec
    reg = registered()
    if spec not in reg and source and ":" not in spec:
        _import_file(source)
        reg = registered()
    if spec in reg:
        return reg[spec]
    if ":" not in spec:
        raise TuneError(format_error("template", f"unknown template {spec!r}",
                                     f"expected one of {sorted(reg)} or path/to/file.py:"
                                     "function"))
    path, fname = spec.rsplit(":", 1)
    if not os.path.isfile(path):
        raise TuneError(format_error("template", f"file {path!r} of {spec!r} not found",
                                     "expected path/to/file.py:function"))
    module = _import_file(path)
    fn = getattr(module, fname, None)
    if fn is None:
        raise TuneError(format_error("template", f"{path!r} has no function {fname!r}",
                                     "expected path/to/file.py:function"))
    if isinstance(fn, Template):
        # addressed by path: keep the path as its name so worker processes can load it
        t = Template(spec, fn.func, fn.default_args, fn.flops_fn, fn._reference,
                     fn.description, fn.targets)
        t.variants = dict(fn.variants)
        return t
    if not callable(fn):
        raise TuneError(format_error("template", f"{spec!r} is not a function"))
    return Template(spec, fn)


#: files being imported for their templates (a script that tunes at import time, without
#: ``if __name__ == "__main__":``, would start the tuning again in every worker)
_IMPORTING: list = []


def importing_template_file() -> str | None:
    """The file whose import for its templates is running now, else None."""
    return _IMPORTING[-1] if _IMPORTING else None


def _import_file(path: str):
    """Import the Python file ``path`` as a module of its own (its ``@template``
    decorators register in this process)."""
    mod_name = "polytile_user_template_" + str(abs(hash(os.path.abspath(path))))
    loader_spec = importlib.util.spec_from_file_location(mod_name, path)
    if loader_spec is None or loader_spec.loader is None:
        raise TuneError(format_error("template", f"cannot import {path!r}",
                                     "expected a Python source file"))
    module = importlib.util.module_from_spec(loader_spec)
    _IMPORTING.append(path)
    try:
        loader_spec.loader.exec_module(module)
    except TuneError:
        raise
    except Exception as exc:
        raise TuneError(format_error("template", f"importing {path!r} failed: "
                                     f"{type(exc).__name__}: {exc}")) from exc
    finally:
        _IMPORTING.pop()
    return module


def require_importable(name: str) -> None:
    """Refuse to tune template ``name`` when worker processes could not find it: it was
    registered in this process by code that has no source file (a script piped to
    ``python -``, ``python -c``, a notebook cell), so there is no file to import.

    Raises
    ------
    TuneError
        Naming the template and what to do instead.
    """
    t = _REGISTRY.get(name)
    if t is None or ":" in name or t.func.__module__.startswith("polytile."):
        return
    if template_source(name) is None:
        raise TuneError(format_error(
            "tune", f"template {name!r} was registered by code without a source file "
            f"(module {t.func.__module__!r}: a script read from stdin, python -c, or a "
            "notebook cell), which the worker processes that build candidates cannot import",
            "expected a template defined in a .py file",
            hint="move the template into a file (tuning under `if __name__ == "
            "\"__main__\":`), or tune it as 'path/to/file.py:function'"))


def template_source(name: str) -> str | None:
    """The file a worker process imports to find template ``name``: the source file of
    a template registered with ``@template`` by the user's own code (a script run as
    ``__main__`` included); None for polytile's built-ins and ``path:function`` specs,
    which a worker finds by themselves."""
    t = _REGISTRY.get(name)
    if t is None or ":" in name or t.func.__module__.startswith("polytile."):
        return None
    try:
        path = inspect.getsourcefile(t.func)
    except TypeError:
        return None
    return os.path.abspath(path) if path and os.path.isfile(path) else None
