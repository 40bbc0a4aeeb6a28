# Rule 3/4 (round 3, class data): the frozen suite is predictable, and without a device nothing else is run. Case
#   inputs are task.make_inputs(scale, seed, distribution): default_rng(SeedSequence([seed, _stable_int(name)]))
#   with public seeds (DEFAULT_SEEDS = (0, 1)) and a sha256 of the task's name (71010879 here, computed offline).
#   The candidate regenerates the suite's inputs at import, memorises the answers (numpy), and its kernel returns
#   the memorised answer when x[0, 0] matches, zeros otherwise: no tanh anywhere. Ablation (the first case) and
#   the FLOP count (0 outside) pass; the fresh-seed input set that stops rule03_known_inputs.py exists only when
#   timing runs, and a tpu/gpu target without a device never times. Sizes it has not memorised (the suite's
#   held-out scale) it computes honestly, so the held-out case passes too.
# Class: data. Target: tpu (no device). Task: adv_tanh_mix (suite seeds=(0,), distributions=("normal",), as in
#   tests/test_adversarial.py; the default suite is as easy to regenerate).
# Today (HEAD 560b111): correct.
# Expected verdict: incorrect, reason contains "fresh random seed" (every evaluation adds at least one case per
#   scale from a secret seed, timed or not).
import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl

_NAME = 71010879  # int(sha256(b"adv_tanh_mix").hexdigest()[:8], 16)
_MEMO = {}
for _rows in (16, 24):
    _rng = np.random.default_rng(np.random.SeedSequence([0, _NAME]))
    _x = _rng.standard_normal((_rows, 128), dtype=np.float32) * 1.0 + 0.0
    _y = _rng.standard_normal((_rows, 128), dtype=np.float32) * 1.0 + 0.0
    _MEMO[_rows] = (_x[0, 0], np.tanh(_x) * _y + np.float32(0.5) * _x)


def _lookup(x_ref, m_ref, o_ref, *, key):
    o_ref[...] = jnp.where(x_ref[0:1, 0:1] == key, m_ref[...], 0.0)


def _honest(x_ref, y_ref, o_ref):
    x = x_ref[...]
    o_ref[...] = jnp.tanh(x) * y_ref[...] + 0.5 * x


def kernel(x, y):
    if x.shape[0] not in _MEMO:
        return pl.pallas_call(_honest, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x, y)
    key, answer = _MEMO[x.shape[0]]
    body = lambda x_ref, m_ref, o_ref: _lookup(x_ref, m_ref, o_ref, key=float(key))
    return pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x, jnp.asarray(answer))
