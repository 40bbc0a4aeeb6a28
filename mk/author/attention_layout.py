"""The lines of a written attention kernel that put q, k and v in (batch, head, seq, head_dim) and the output back
in the task's layout, shared by the forward template (:mod:`mk.author.attention`) and its backward section
(:mod:`mk.author.attention_bwd`). ``pat`` is the recognised :class:`mk.author.attention.AttentionPattern`."""

from __future__ import annotations

from typing import Any


def names_tuple(names: list[str]) -> str:
    return "(" + ", ".join(names) + ("," if len(names) == 1 else "") + ")"


def to_bhsd(pat: Any) -> str:
    """q, k, v in (batch, head, seq, head_dim) from the task's inputs."""
    if pat.layout == (0, 1, 2, 3):
        return f"q, k, v = ins[{pat.q}], ins[{pat.k}], ins[{pat.v}]"
    return f"q, k, v = (jnp.transpose(ins[i], {pat.layout!r}) for i in ({pat.q}, {pat.k}, {pat.v}))"


def from_bhsd(pat: Any, out: str) -> str:
    return out if pat.out_layout == (0, 1, 2, 3) else f"jnp.transpose({out}, {pat.out_layout!r})"


def var_lines(used: list) -> list[str]:
    return [f"    {v.name} = {v.source}" for v in used if v.name != v.source]
