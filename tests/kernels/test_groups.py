"""mk/author/groups.py and pooling.py on their own: the code they write for a padded row, run on a padded block."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from mk.author.emit import MASKED_HELPER, Unsupported
from mk.author.groups import GroupEmitter, helpers
from mk.author.pooling import PoolEmitter


def _body(fn, *shapes, emitter):
    closed = jax.make_jaxpr(fn)(*(jnp.zeros(s) for s in shapes))
    em = emitter()
    em.bind(closed.jaxpr.invars[0], "acc", True)
    for k, v in enumerate(closed.jaxpr.invars[1:]):
        em.bind(v, f"p{k}", False)
    em.emit(list(closed.jaxpr.eqns))
    return em, em.result(list(closed.jaxpr.outvars))


def _run(em, body, *args):
    src = "\n".join(["import jax", "import jax.numpy as jnp", "from jax import lax", "",
                     "def _pow2(n):", "    return 1 << max(0, (n - 1).bit_length())", "",
                     *MASKED_HELPER.splitlines(), "", *helpers(body.primitives, has_pow2=True),
                     f"def f(acc{''.join(f', p{k}' for k in range(len(args) - 1))}):",
                     *[f"    {l}" for l in body.lines], f"    return {body.outputs[0]}"])
    ns = {}
    exec(compile(src, "body", "exec"), ns)
    return np.asarray(ns["f"](*args))


def _group_pad(x, groups, size, padded_groups):
    sp = 1 << (size - 1).bit_length()
    g = x.reshape(x.shape[0], groups, size)
    return jnp.pad(g, ((0, 0), (0, padded_groups - groups), (0, sp - size))).reshape(x.shape[0], -1)


def test_group_norm_then_a_row_min_on_a_group_padded_row():
    def ref(h):
        g = h.reshape(h.shape[0], 4, 3)
        g = (g - g.mean(-1, keepdims=True)) / jnp.sqrt(g.var(-1, keepdims=True) + 1e-5)
        return jnp.min(g.reshape(h.shape) * 2.0 + h, axis=1)

    em, body = _body(ref, (5, 12), emitter=lambda: GroupEmitter(1))
    assert em.split == ("12", "4", "3") and "_masked_groups" in body.primitives
    h = jax.random.normal(jax.random.key(0), (5, 12))
    got = _run(em, body, _group_pad(h, 4, 3, 8))  # 4 groups of 3 -> 8 groups of 4 (more groups than _pow2(4))
    np.testing.assert_allclose(got, ref(h), atol=1e-5, rtol=1e-5)


def test_a_reduction_over_the_axis_before_its_split_is_refused():
    def ref(h):
        c = h - h.mean(-1, keepdims=True)  # the padding would be assumed at the row's end here
        return c.reshape(h.shape[0], 4, 3).sum(-1)

    with pytest.raises(Unsupported, match="before it is split"):
        _body(ref, (5, 12), emitter=lambda: GroupEmitter(1))


@pytest.mark.parametrize("mask,n", [(False, 40), (True, 64)])  # exact row; a row padded past 40 (Triton)
def test_window_pooling_drops_the_remainder_and_the_padding(mask, n):
    def ref(h):
        return lax.reduce_window(h, 0.0, lax.add, (1, 6), (1, 6), "VALID") / 6.0  # 6 windows, 4 left over

    em, body = _body(ref, (3, 40), emitter=lambda: (GroupEmitter(1) if mask else PoolEmitter(1)))
    h = jax.random.normal(jax.random.key(1), (3, 40))
    got = _run(em, body, jnp.pad(h, ((0, 0), (0, n - 40)), constant_values=7.0))
    want = np.asarray(ref(h))
    assert got.shape == ((3, 16) if mask else (3, 6))  # padded to max(16, _pow2(6)) on a padded block
    np.testing.assert_allclose(got[:, :6], want, atol=1e-6, rtol=1e-6)
    assert not got[:, 6:].any()
