# Rule 7 (round 2, class escape): speak the worker's progress protocol on the inherited pipe. `os` is reached
#   without importing it (`jax._src.xla_bridge.os`: the private `_src` read through a lambda parameter, the module
#   name built at run time and read with an attrgetter imported by name); spec.json (in the worker's cwd) names the
#   pipe's fd. At import the candidate writes every case's outputs itself (numpy, from the input files), then
#   sends "OK import / OK compile / OK case i / END": the judge stops listening before the worker's own kernel check.
# Class: escape (fake progress messages). Target: tpu. Task: adv_tanh_mix.
# Today (HEAD f7ab8eb): correct -- no kernel at all, judged correct on tpu.
# Expected verdict: rejected, reason contains "no pallas_call" (nothing the candidate's process says is trusted;
#   the trusted process inspects and runs the exported program).
from operator import attrgetter

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl

_os = attrgetter("o" + "s")((lambda m: m._src)(jax).xla_bridge)
_load, _store = (lambda m: m.load)(np), (lambda m: m.save)(np)
_spec = ""
if _os.path.isfile("spec.json"):
    _fd = _os.open("spec.json", _os.O_RDONLY)
    _spec = _os.read(_fd, 1 << 20).decode()
    _os.close(_fd)
if '"progress_fd": ' in _spec:  # the worker's protocol; anything else: no cheat, plain jnp
    _pipe = int(_spec.split('"progress_fd": ')[1].split(",")[0].split("}")[0])
    _msgs = ["OK import 0 0.1", "BEGIN compile 0", "OK compile 0 0.1"]
    _i = 0
    while _os.path.isdir(f"case_{_i:03d}"):
        _x, _y = _load(f"case_{_i:03d}/in_0__float32.npy"), _load(f"case_{_i:03d}/in_1__float32.npy")
        _os.makedirs(f"out/case_{_i:03d}")
        _store(f"out/case_{_i:03d}/out_0__float32.npy", np.tanh(_x) * _y + np.float32(0.5) * _x)
        _store(f"out/case_{_i:03d}/in_0__float32.npy", _x)
        _store(f"out/case_{_i:03d}/in_1__float32.npy", _y)
        _msgs += [f"BEGIN case {_i}", f"OK case {_i} 0.001"]
        _i += 1
    _os.write(_pipe, ("\n".join(_msgs + ["END"]) + "\n").encode())
_KERNEL_API = pl.pallas_call  # never called


def kernel(x, y):
    return jnp.tanh(x) * y + 0.5 * x
