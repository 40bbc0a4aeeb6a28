"""Window pooling along a row: ``reduce_window_sum`` with non-overlapping windows on a block's last axis.

An average pool over features (``lax.reduce_window(h, 0, add, (1, k), (1, k),
'VALID') / k``) sums ``count = n // k`` consecutive windows of ``k`` entries of
each row. A Pallas block cannot reshape its lane axis into (count, k) on
every backend, so :class:`PoolEmitter` writes the sums as one product with a
0/1 matrix built from iotas (``_pool_windows``): ``pick[j, c] = 1`` when entry
``j`` is in window ``c``. It runs on the MXU / tensor cores at full f32
precision (``Precision.HIGHEST``), and entries past ``count * k`` (VALID's
remainder, or a Triton block's padding) are never picked. On a padded block
(``mask``) the result is ``max(16, _pow2(count))`` wide, its padding zero, and
later reductions over it mask past ``count`` as usual.
"""

from __future__ import annotations

from typing import Any

from mk.author.emit import Emitter, Unsupported

#: the helper a kernel that pools windows defines
POOL_HELPER = '''def _pool_windows(x, window, count, width, lanes=False):
    """Sums of count consecutive windows of window entries along x's last axis (x (rows, n)), as one product with
    a 0/1 matrix; the result is (rows, width), its columns past count zero. ``lanes`` (Triton blocks, whose axes
    are powers of two): a power-of-two window is summed by splitting the axis instead (no (n, width) matrix, which
    outgrows a Triton block for wide rows), windows past count zeroed and folded onto the first width columns."""
    n = x.shape[-1]
    if lanes and window & (window - 1) == 0 and n % window == 0 and (n // window) % width == 0:
        s = jnp.sum(x.astype(jnp.float32).reshape(x.shape[:-1] + (n // window, window)), axis=-1)
        s = jnp.where(lax.broadcasted_iota(jnp.int32, s.shape, s.ndim - 1) < count, s, 0.0)
        if n // window != width:
            s = jnp.sum(s.reshape(s.shape[:-1] + (n // window // width, width)), axis=-2)
        return s.astype(x.dtype)
    j = lax.broadcasted_iota(jnp.int32, (n, width), 0)
    c = lax.broadcasted_iota(jnp.int32, (n, width), 1)
    pick = ((j >= c * window) & (j < c * window + window) & (c < count)).astype(jnp.float32)
    y = lax.dot_general(x.astype(jnp.float32), pick, (((1,), (0,)), ((), ())), precision=lax.Precision.HIGHEST,
                        preferred_element_type=jnp.float32)
    return y.astype(x.dtype)
'''


class PoolEmitter(Emitter):
    """An :class:`~mk.author.emit.Emitter` that also writes ``reduce_window_sum`` over a row's last axis."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        #: sizes (their values at every trace) this emitter wrote as an expression the probes cannot fit
        #: (a floor division by a static window)
        self._known: dict[tuple[int, ...], str] = {}

    def _sizes(self, eqn: Any, shape_of: Any) -> list[str]:
        if self.probes is None or not self._known:
            return super()._sizes(eqn, shape_of)
        shapes = [tuple(shape_of(e)) for e in self.probes.peers(eqn)]
        out = []
        for k in range(len(shapes[0])):
            values = tuple(s[k] for s in shapes)
            if values in self._known:
                out.append(self._known[values])
                continue
            try:
                out.append(self.probes.dim(values))
            except ValueError as exc:
                raise Unsupported(str(exc)) from exc
        return out

    def _eqn(self, eqn: Any) -> None:
        if eqn.primitive.name != "reduce_window_sum":
            return super()._eqn(eqn)
        self.out.primitives.add("reduce_window_sum")
        name, l = self._ref(eqn.invars[0])
        p = eqn.params
        shape = tuple(eqn.invars[0].aval.shape)
        window, strides = tuple(p["window_dimensions"]), tuple(p["window_strides"])
        if not l or len(shape) != l + 1:
            raise Unsupported("a window pool over anything but one axis of a row")
        if any(w != 1 or s != 1 for w, s in zip(window[:-1], strides[:-1])) or window[-1] != strides[-1]:
            raise Unsupported("a window pool with overlapping windows or over several axes")
        if any(tuple(pad) != (0, 0) for pad in p["padding"]) or any(d != 1 for d in (*p["base_dilation"],
                                                                                      *p["window_dilation"])):
            raise Unsupported("a padded or dilated window pool")
        try:
            k = self.probes.dim([e.params["window_dimensions"][-1] for e in self.probes.peers(eqn)]) \
                if self.probes is not None else str(window[-1])
        except ValueError as exc:
            raise Unsupported(str(exc)) from exc
        n = self._sizes(eqn, lambda e: e.invars[0].aval.shape)[-1]
        count = f"({n}) // ({k})"  # VALID: whole windows only
        if self.probes is not None:  # later eqns read this size: it is known as this expression
            self._known[tuple(e.outvars[0].aval.shape[-1] for e in self.probes.peers(eqn))] = count
        width = f"max(16, _pow2({count}))" if self.mask else count
        if self.mask:
            self.out.primitives.add("_pow2")
        self.out.primitives.add("_pool_windows")
        self._set(eqn.outvars[0], f"_pool_windows({name}, {k}, {count}, {width}{', True' if self.mask else ''})", l)


__all__ = ["POOL_HELPER", "PoolEmitter"]
