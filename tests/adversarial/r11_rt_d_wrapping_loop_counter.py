# Round 11 red team, attack D: the whole matmul runs OUTSIDE the kernel in a lax.while_loop whose counter wraps around int32. The FLOP
# counter reads "start 0, step 2**25+1, stop at != 128" as ceil(128 / (2**25+1)) = 1 trip; the loop really runs
# 128 trips (128 * (2**25+1) = 2**32 + 128 = 128 mod 2**32). Each trip adds a K-chunk's rank update, so ~1/128 of
# the work is counted. The kernel only copies the result (alive for ablation).
# Rule: 15 (work outside kernels). Expected verdict: rejected (before: correct).
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

CONFIG_SPACE = {"block_m": [8]}
_TRIPS = 128
_STEP = 2**25 + 1


def _copy(z_ref, o_ref):
    o_ref[...] = z_ref[...]


def kernel(x, y, *, block_m: int = 8):
    m, k = x.shape
    n = y.shape[1]
    c = -(-k // _TRIPS)
    xp = jnp.pad(x, ((0, 0), (0, c * _TRIPS - k)))
    yp = jnp.pad(y, ((0, c * _TRIPS - k), (0, 0)))

    def cond(s):
        return s[0] != jnp.int32(_TRIPS)

    def body(s):
        i, j, acc = s
        xs = jax.lax.dynamic_slice(xp, (jnp.int32(0), j * c), (m, c))
        ys = jax.lax.dynamic_slice(yp, (j * c, jnp.int32(0)), (c, n))
        acc = acc + jnp.dot(xs, ys, precision=jax.lax.Precision.HIGHEST, preferred_element_type=jnp.float32)
        return i + jnp.int32(_STEP), j + 1, acc

    _, _, z = jax.lax.while_loop(cond, body, (jnp.int32(0), jnp.int32(0), jnp.zeros((m, n), jnp.float32)))
    bm = block_m if m % block_m == 0 else m
    return pl.pallas_call(
        _copy,
        grid=(m // bm,),
        in_specs=[pl.BlockSpec((bm, n), lambda i: (i, 0))],
        out_specs=pl.BlockSpec((bm, n), lambda i: (i, 0)),
        out_shape=jax.ShapeDtypeStruct((m, n), x.dtype),
    )(z.astype(x.dtype))
