# Rule 17 (round 2, class callback): `jax.debug.callback` returns nothing, yet it is a host channel: it runs Python
#   with the concrete inputs while the program runs. Here it computes the answer in numpy and hands it to every
#   loaded `save_arrays` (the worker's `__main__`, any `mk.*` module; reached via `collections._sys`), patched to
#   write it in place of the kernel's output -- the kernel only copies x. No files, no pipe, no import-time work
#   beyond the patch; the answer is made at run time.
# Class: callback (debug.callback). Target: cpu here (the rule is target-independent). Task: adv_tanh_mix.
#   On tpu/gpu it is the real cheat (the device does nothing), but a callback cannot be lowered for tpu on a
#   CPU-only host: today's verdict there is compile_error "the platform for the specified backend cpu is
#   different from the lowering platform tpu".
# Today (HEAD f7ab8eb): correct -- a kernel returning x is judged correct.
# Expected verdict: rejected, reason contains "callback".
import collections

import jax
import numpy as np
from jax.experimental import pallas as pl

_debug_callback = (lambda m: m.callback)(jax.debug)
_sys = (lambda m: m._sys)(collections)


def _host_side():
    answers = []

    def observe(x, y):  # on the host, with concrete values, during the run
        x, y = np.asarray(x), np.asarray(y)
        answers.append(np.tanh(x) * y + np.float32(0.5) * x)

    def patched(save):
        def write(folder, prefix, arrays, indices=None):
            if prefix == "out" and answers:
                arrays = [answers.pop()]
            return save(folder, prefix, arrays, indices)

        return write

    return observe, patched


_observe, _patched = _host_side()
for _name, _module in list(_sys.modules.items()):
    if (_name == "__main__" or _name.startswith("mk.")) and getattr(_module, "save_arrays", None) is not None:
        _module.save_arrays = _patched(_module.save_arrays)


def _copy(x_ref, o_ref):
    o_ref[...] = x_ref[...]


def kernel(x, y):
    _debug_callback(_observe, x, y)
    return pl.pallas_call(_copy, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)
