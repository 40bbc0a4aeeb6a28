"""Group statistics on padded blocks: an emitter that splits one axis of a padded row into groups.

Triton blocks are powers of two, so a kernel pads the last axes of its tile
with zeros. A GroupNorm reshapes the channel axis C into (G, C/G), takes
statistics per group and merges the axis back. On a tile padded at its end
that reshape would mix real and padded channels. The kernels instead pad the
axis *group by group*: each group to ``_pow2(C/G)``, then the number of groups
to ``_pow2(G)``, so the padded axis splits exactly into
(``_pow2(G)`` or more, ``_pow2(C/G)``). :class:`GroupEmitter` writes code for
that layout:

- a reshape that splits one axis of a row value into two (other axes, padded
  or not, unchanged) becomes a reshape into (-1, ``_pow2(C/G)``) (a kernel may pad
  more groups than ``_pow2(G)``), and
  the merge back a product of the two padded sizes;
- a reduction over the group-size axis masks past ``C/G`` (the usual
  ``_masked``), one over the merged axis masks the padding inside and after
  the groups (``_masked_groups``), one over the groups axis masks past ``G``.

A reduction over the whole axis *before* the split is refused: when it was
written the padding was still assumed to sit at the axis's end.
``split`` records (C, G, C/G) as source, for the kernel's padding.
"""

from __future__ import annotations

from typing import Any

from mk.author.emit import _FILL, _REDUCE, Unsupported
from mk.author.pooling import POOL_HELPER, PoolEmitter

#: the helper a kernel with group-padded blocks defines besides ``_masked`` and ``_pow2``
GROUPS_HELPER = '''def _masked_groups(x, axis, groups, size, fill):
    """x with the padding of an axis laid out group by group (groups of size, each padded to a power of two,
    then the groups) set to fill, so a reduction over the whole axis ignores it."""
    sp = _pow2(size)
    if x.shape[axis] == groups * size:
        return x
    if fill in ("low", "high"):
        if jnp.issubdtype(x.dtype, jnp.floating):
            fill = -jnp.inf if fill == "low" else jnp.inf
        else:
            fill = jnp.iinfo(x.dtype).min if fill == "low" else jnp.iinfo(x.dtype).max
    j = lax.broadcasted_iota(jnp.int32, x.shape, axis % x.ndim)
    keep = (j % sp < size) & (j // sp < groups)
    return jnp.where(keep, x, jnp.asarray(fill, x.dtype))
'''

#: ``_pow2`` for a written file whose kernel module does not define it
POW2_HELPER = '''def _pow2(n):
    return 1 << max(0, (n - 1).bit_length())
'''


class GroupEmitter(PoolEmitter):
    """A masking :class:`~mk.author.pooling.PoolEmitter` whose rows may split one axis into groups (see the module)."""

    def __init__(self, lead: int, probes: Any = None, taken: Any = ()):
        super().__init__(lead, probes, mask=True, taken=taken, may_split=True)
        self._early: list[str] = []  # sizes of axes reduced before any split

    def _reshape(self, eqn: Any, arg: tuple[str, int]) -> None:
        name, l = arg
        src = tuple(eqn.invars[0].aval.shape)
        dst = tuple(eqn.outvars[0].aval.shape)
        if not l or src[:l] != dst[:l]:
            return super()._reshape(eqn, arg)
        a_src = self._sizes(eqn, lambda e: e.invars[0].aval.shape)[l:]
        a_dst = self._sizes(eqn, lambda e: e.outvars[0].aval.shape)[l:]
        if [d for d in a_src if d != "1"] == [d for d in a_dst if d != "1"]:
            return super()._reshape(eqn, arg)
        shape = f"{name}.shape"
        parts: list[str] | None = None
        if len(a_dst) == len(a_src) + 1:  # one axis k splits into two
            k = next((i for i in range(len(a_src)) if a_src[i] != a_dst[i]), len(a_src) - 1)
            if a_src[:k] == a_dst[:k] and a_src[k + 1:] == a_dst[k + 2:] \
                    and self.split in (None, (a_src[k], a_dst[k], a_dst[k + 1])):
                if a_src[k] in self._early:
                    raise Unsupported("a reduction over an axis before it is split into groups (its padding is laid "
                                      "out group by group)")
                self.split = (a_src[k], a_dst[k], a_dst[k + 1])
                parts = ([f"{shape}[{1 + i}]" for i in range(k)] + ["-1", f"_pow2({a_dst[k + 1]})"]
                         + [f"{shape}[{1 + i}]" for i in range(k + 1, len(a_src))])
        elif len(a_dst) + 1 == len(a_src) and self.split is not None:  # the two group axes merge back
            k = next((i for i in range(len(a_dst)) if a_src[i] != a_dst[i]), len(a_dst) - 1)
            if a_src[:k] == a_dst[:k] and tuple(a_src[k:k + 2]) == self.split[1:] and a_dst[k] == self.split[0] \
                    and a_src[k + 2:] == a_dst[k + 1:]:
                parts = ([f"{shape}[{1 + i}]" for i in range(k)] + [f"{shape}[{1 + k}] * {shape}[{2 + k}]"]
                         + [f"{shape}[{1 + i}]" for i in range(k + 2, len(a_src))])
        if parts is None:
            raise Unsupported("a reshape moves data between axes of a block that may be padded (Triton needs "
                              "power-of-two blocks), other than splitting one axis into groups and back")
        self.out.primitives.add("_pow2")
        self._set(eqn.outvars[0], f"{name}.reshape({name}.shape[:1] + ({', '.join(parts)},))", l)

    def _reduce(self, eqn: Any, prim: str, arg: tuple[str, int]) -> None:
        name, l = arg
        rank = len(eqn.invars[0].aval.shape)
        axes = tuple(eqn.params["axes"]) if "axes" in eqn.params else (eqn.params["axis"],)
        if any(a < l for a in axes):
            raise Unsupported("a reduction runs across rows (over the axes a kernel would tile)")
        sizes = self._sizes(eqn, lambda e: e.invars[0].aval.shape)
        for a in axes:
            n = a - rank
            if self.split is None:
                self._early.append(sizes[a])
                name = f"_masked({name}, {n}, {sizes[a]}, {_FILL[prim]})"
            elif sizes[a] == self.split[0]:
                name = f"_masked_groups({name}, {n}, {self.split[1]}, {self.split[2]}, {_FILL[prim]})"
                self.out.primitives.add("_masked_groups")
            else:
                name = f"_masked({name}, {n}, {sizes[a]}, {_FILL[prim]})"
        self.out.primitives.add("_masked")
        neg = tuple(a - rank for a in axes)
        fn = _REDUCE[prim]
        if prim in ("argmax", "argmin"):
            from mk.author.emit import dtype_expr

            expr = f"{fn}({name}, axis={neg[0]}).astype({dtype_expr(eqn.params['index_dtype'])})"
        else:
            expr = f"{fn}({name}, axis={neg!r})"
        self._set(eqn.outvars[0], expr, l)

    def result(self, outvars: list[Any]) -> Any:
        if self.split is not None and self.split[0] in self._early:
            raise Unsupported("a reduction over an axis before it is split into groups (its padding is laid out "
                              "group by group)")
        self.out.outputs = [self._ref(v)[0] for v in outvars]
        return self.out


def helpers(primitives: set[str], has_pow2: bool) -> list[str]:
    """The helper source lines a body with these primitives needs (``has_pow2``: the file already defines it)."""
    out: list[str] = []
    if "_pow2" in primitives and not has_pow2:
        out += [*POW2_HELPER.splitlines(), "", ""]
    if "_masked_groups" in primitives:
        out += [*GROUPS_HELPER.splitlines(), "", ""]
    if "_pool_windows" in primitives:
        out += [*POOL_HELPER.splitlines(), "", ""]
    return out


__all__ = ["GROUPS_HELPER", "GroupEmitter", "helpers"]
