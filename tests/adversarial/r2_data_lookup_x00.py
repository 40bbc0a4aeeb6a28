# Rule 3 / 17 (round 2, class data): see the data and look it up. A host callback (`jax.pure_callback`, read
#   through a lambda parameter) gets the concrete inputs and keys a table on `x[0, 0]`: an input seen before is
#   answered from the table without computing (a rotating set of timing inputs is all table hits). The table lives
#   in a closure, so the static check's "module-level dict written from a function" rule never fires.
# Class: data (lookup keyed on input values). Target: cpu (with or without timing). Task: adv_tanh_mix.
# Today (HEAD f7ab8eb): correct (every answer is right: computed on first sight, replayed after).
# Expected verdict: rejected, reason contains "callback" (the program may not call back into Python).
import jax
import numpy as np

_pure_callback = (lambda m: m.pure_callback)(jax)


def _make_lookup():
    table = {}

    def lookup(x, y):
        key = (x.shape, float(x[0, 0]))  # x[0, 0] alone collides across scales: same seed, same first draw
        if key not in table:
            table[key] = np.tanh(x) * y + np.float32(0.5) * x
        return table[key]

    return lookup


_lookup = _make_lookup()


def kernel(x, y):
    return _pure_callback(_lookup, jax.ShapeDtypeStruct(x.shape, x.dtype), x, y)
