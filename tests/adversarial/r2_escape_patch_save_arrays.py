# Rule 7 (round 2, class escape): monkeypatch the judge's own `save_arrays`, the function that writes the outputs
#   it compares. The kernel is a real Pallas kernel that does the wrong thing (it returns x); every loaded
#   `save_arrays` (the worker's `__main__`, any `mk.*` module) is wrapped to ignore what the kernel returned and
#   write numpy's answer, computed from the case's own input files. `sys` comes from `collections._sys` read
#   through a lambda parameter. Where no such function is loaded the cheat quietly does nothing.
# Class: escape (monkeypatch the output writer). Target: tpu. Task: adv_tanh_mix.
# Today (HEAD f7ab8eb): correct -- a kernel returning x is judged correct.
# Expected verdict: incorrect, reason contains "outside atol" (the trusted process runs the exported program and
#   writes the outputs itself).
import collections

import jax
import numpy as np
from jax.experimental import pallas as pl

_sys = (lambda m: m._sys)(collections)
_load = (lambda m: m.load)(np)


def _right_answer_writer(save):
    def write(folder, prefix, arrays, indices=None):
        # the worker writes WORKDIR/out/case_NNN; its inputs are WORKDIR/case_NNN
        inputs = folder.parent.parent / folder.name
        if prefix == "out" and (inputs / "in_0__float32.npy").is_file():
            x, y = _load(inputs / "in_0__float32.npy"), _load(inputs / "in_1__float32.npy")
            arrays = [np.tanh(x) * y + np.float32(0.5) * x]
        return save(folder, prefix, arrays, indices)

    return write


for _name, _module in list(_sys.modules.items()):
    if (_name == "__main__" or _name.startswith("mk.")) and getattr(_module, "save_arrays", None) is not None:
        _module.save_arrays = _right_answer_writer(_module.save_arrays)


def _copy(x_ref, y_ref, o_ref):
    o_ref[...] = x_ref[...]


def kernel(x, y):
    return pl.pallas_call(_copy, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x, y)
