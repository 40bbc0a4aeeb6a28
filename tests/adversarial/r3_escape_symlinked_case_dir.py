# Rule 6/8 (round 3, class escape): the judge reads a case's outputs from OUTSIDE the tracer's work dir. When the
#   tracer says the HLO interpreter cannot run its kernel (cpu_file None), cases run in the tracer: the judge
#   writes inputs into <tracer workdir>/case_NNN_<hex>, asks "run", then load_arrays(folder, "out"). It checks
#   that each FILE is not a link, but globs through the FOLDER, which the tracer replaced by a symlink to the
#   judge's reference cache ($MK_HOME/cache/reference/<task fingerprint>/<case key>: both predictable; MK_HOME
#   defaults to ~/.mk and the fingerprint hashes the task's public source). The judge compares the reference's
#   cached outputs with themselves. Steps: the audit hook disabled by replacing the module global it calls
#   (mk.harness.policy._judge), the tracer's _programs patched to drop the CPU form and register a fallback,
#   arrays.save_arrays patched to make the swap. The kernel is an identity copy.
# Class: escape (symlinked folder; reads outside the work dir). Target: tpu, MK_HOME=/tmp/mk-r3-home during
#   evaluate (edit CACHE for another home). Task: adv_tanh_mix.
# Today (HEAD 560b111): correct (verified_by "tracer interpreter").
# Expected verdict: crashed/rejected, reason contains "not a regular" or "link" (load_indexed and _write_inputs
#   open the folder with O_DIRECTORY|O_NOFOLLOW and every file relative to that dir fd, O_NOFOLLOW, fstat
#   regular; the judge compares the folder's inode with the one it created).
import collections

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

# The judge's reference cache: $MK_HOME/cache/reference/<task fingerprint>/<case key>/out_0__float32.npy
CACHE = "/tmp/mk-r3-home/cache/reference/4045eba151c70ec0"

_mods = (lambda m: m._sys)(collections).modules
_tracer, _os = _mods["__main__"], _mods["os"]
_mods["mk.harness.policy"]._judge = lambda *args: None  # the audit hook now allows everything
_honest = _tracer._programs


def _programs(workdir, scale, fn, structs, target):
    facts = _honest(workdir, scale, fn, structs, target)
    facts["cpu_file"] = None  # "the HLO interpreter cannot run this kernel": cases run here, in the tracer
    state = _tracer._state
    state.setdefault("fallback", {})[scale] = (lambda x, y: x, None)
    return facts


def _save_arrays(folder, prefix, arrays, indices=None):
    # instead of outputs, leave the case folder as a link to the reference's cached outputs for this case
    key = "ci-s0-normal" if arrays[0].shape[0] == 16 else "wide-s0-normal"
    _os.rename(folder, f"{folder}.moved")
    _os.symlink(f"{CACHE}/{key}", folder)


_tracer._programs = _programs
_mods["mk.harness.arrays"].save_arrays = _save_arrays


def _nothing(x_ref, y_ref, o_ref):
    o_ref[...] = x_ref[...]


def kernel(x, y):
    return pl.pallas_call(_nothing, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x, y)
