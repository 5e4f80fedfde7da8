"""Which GPU a record was measured on, and whether it may be used on this one.

A GPU record carries ``device``: ``name``, ``arch``, ``compute_capability``, ``driver``
and ``cuda`` versions (:func:`.gpu_runner.device_info`, trimmed by :func:`record_fields`).
Its *device class* is the name and compute capability (``"NVIDIA H200 (sm_90)"``): a
config tuned on one class says little about another (an A100's best tiles are not an
H200's), while driver and CUDA versions are kept for the record but do not split classes.

Dispatch (:func:`polytile.autotune.apply_history_best`, ``polytile run``) selects records
of the current class: the GPU's own when one is present, else the class named by the
target's ``-arch`` (any device of that compute capability); records of other classes are
refused with :class:`~polytile.errors.TuneError` naming both.
"""

from __future__ import annotations

import functools

#: Device fields a record keeps.
FIELDS = ("name", "arch", "compute_capability", "driver", "cuda")


def record_fields(info: dict | None) -> dict | None:
    """The fields of a runner's device description that records keep."""
    if not info:
        return None
    return {k: str(info.get(k, "")) for k in FIELDS}


def device_class(dev: dict | None) -> str:
    """``"NVIDIA H200 (sm_90)"``; ``"any sm_90"`` for a class known by architecture only;
    ``""`` for no device (a CPU record)."""
    if not dev:
        return ""
    arch = dev.get("arch", "")
    if not dev.get("name"):
        return f"any {arch}" if arch else ""
    return f"{dev['name']} ({arch})" if arch else dev["name"]


def base_arch(arch: str) -> str:
    """``sm_90a`` -> ``sm_90``: the arch-specific (``a``) and family (``f``) feature sets
    of a target's ``-arch`` run on the same device class as the plain architecture."""
    return arch[:-1] if arch[-1:] in ("a", "f") and arch[:-1][-1:].isdigit() else arch


def same_class(rec_dev: dict | None, want: dict | None) -> bool:
    """Whether a record measured on ``rec_dev`` may be used on ``want`` (a device or an
    architecture-only class ``{"arch": ...}``). Records without a device (CPU records,
    older files) and an unknown ``want`` always match."""
    if not rec_dev or not want:
        return True
    if want.get("arch") and rec_dev.get("arch") and \
            base_arch(want["arch"]) != base_arch(rec_dev["arch"]):
        return False
    if want.get("name") and rec_dev.get("name") and want["name"] != rec_dev["name"]:
        return False
    return True


@functools.lru_cache(maxsize=None)
def _local_device() -> tuple:
    """This process's GPU as a sorted items tuple, or () without one (cached)."""
    try:
        from polytile.targets.cuda.driver import device_count

        if device_count() < 1:
            return ()
        from .gpu_runner import device_info

        return tuple(sorted(record_fields(device_info()).items()))
    except Exception:  # noqa: BLE001 - no cuda-python, no driver: no device
        return ()


def current_class(target: str) -> dict | None:
    """The device class records are selected by for ``target``: None for CPU targets;
    for GPU targets the GPU of this machine if any (the one of the target's ``-arch``,
    :func:`base_arch`: ``sm_90a`` targets an sm_90 GPU), else ``{"arch": -arch}``
    (``sm_90`` without an ``-arch``)."""
    from polytile.backend import Target

    t = Target.parse(target)
    if not t.backend.is_gpu:
        return None
    local = dict(_local_device())
    arch = getattr(t, "arch", "") or ""
    if local and (not arch or local.get("arch") == base_arch(arch)):
        return local   # sm_90a code runs on an sm_90 device: its class
    return {"arch": arch or "sm_90"}
