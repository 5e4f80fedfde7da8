"""Built-in templates: the default config and sampled configs compute what numpy computes
(differential testing over the space, at small awkward sizes)."""

from __future__ import annotations

import random
import zlib

import numpy as np
import pytest

import polytile
from polytile.autotune import get_template, registered
from polytile.autotune.worker import make_inputs, output_positions, outputs_match

SMALL = {
    "matmul": (31, 48, 17),
    "batch_matmul": (2, 12, 32, 9),
    "conv2d_nchw": (1, 4, 9, 11, 6, 3, 3, 1, 1),
    "conv2d_nchwc": (1, 6, 9, 11, 10, 3, 3, 1, 1),
    "depthwise_conv2d_nchw": (1, 5, 13, 10, 3, 3, 2, 1),
    "depthwise_conv2d_nchwc": (1, 12, 13, 10, 3, 3, 2, 1),
    "softmax": (13, 40),
    "layernorm": (7, 24),
    "rmsnorm": (5, 37),
}


def test_all_builtins_are_registered():
    assert set(SMALL) <= set(registered())
    for name, t in registered().items():
        if name in SMALL:
            assert t.default_args and t.flops(t.default_args) > 0


@pytest.mark.parametrize("name", sorted(SMALL))
def test_sampled_configs_match_numpy(name):
    t = get_template(name)
    args = SMALL[name]
    sp = t.space(args)
    rng = random.Random(zlib.crc32(name.encode()))
    picks = [sp.default_index()] + [rng.randrange(len(sp)) for _ in range(3)]
    ref = default_out = None
    for idx in picks:
        s, tensors = t.instantiate(sp.get(idx), args)
        f = polytile.build(s, tensors)
        arrays = make_inputs(tensors, seed=1)
        outs = output_positions(tensors)
        f(*arrays)
        out = arrays[outs[0]]
        if ref is None:  # the first pick is the default config
            ins = [a.astype("float64") for k, a in enumerate(arrays) if k not in outs]
            ref = np.asarray(t.reference(*ins, args=args)).astype("float32")
            default_out = out.copy()
        ok, why = outputs_match(out, default_out, "float32")
        assert ok, f"{name} config {sp.get(idx)} differs from the default config: {why}"
        ok, why = outputs_match(out, ref, "float32")
        assert ok, f"{name} config {sp.get(idx)} differs from numpy: {why}"


def test_calling_a_template_without_records_warns_how_to_tune():
    from polytile.autotune import FallbackWarning
    from polytile.autotune.template import _warned

    _warned.clear()
    t = get_template("softmax")
    with pytest.warns(FallbackWarning, match=r"polytile tune softmax --args 8,16"):
        s, tensors = t(8, 16)
    assert len(tensors) == 2


def test_user_template_by_path(tmp_path):
    src = tmp_path / "mine.py"
    src.write_text(
        "from polytile import te\n"
        "from polytile.autotune import get_config\n"
        "def double(n, dtype='float32'):\n"
        "    cfg = get_config()\n"
        "    A = te.placeholder((n,), name='A', dtype=dtype)\n"
        "    C = te.compute((n,), lambda i: A[i] * 2.0, name='C')\n"
        "    s = te.create_schedule(C.op)\n"
        "    cfg.define_split('t', C.op.axis[0], num_outputs=2, policy='power2')\n"
        "    cfg['t'].apply(s, C, C.op.axis[0])\n"
        "    return s, [A, C]\n")
    t = get_template(f"{src}:double")
    assert t.name == f"{src}:double"
    assert len(t.space((16,))) == 5


@pytest.mark.parametrize("spec, match", [
    ("no_such_template", "unknown template 'no_such_template'"),
    ("/nonexistent/file.py:f", "not found"),
])
def test_template_lookup_errors(spec, match):
    from polytile.errors import TuneError

    with pytest.raises(TuneError, match=match):
        get_template(spec)
