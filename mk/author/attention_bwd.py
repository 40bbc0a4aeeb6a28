"""The backward section of a written flash-attention kernel: ``kernel_bwd`` over mk/kernels/flash_attention's
backward kernels (``bwd_tpu.py`` / ``bwd_gpu.py``, FlashAttention-2's dq and dk/dv with the log-sum-exp recomputed).

:func:`with_backward` is the attention template's one hook (``mk/author/attention.py`` calls it on the source it
rendered): it copies the target's backward module in and appends ``kernel_bwd(cotangent, <the kernel's arguments>)``
(the contract in docs/components.md), which puts the inputs and the output cotangent in (batch, head, seq,
head_dim) exactly as ``kernel`` does, runs the backward kernels, and returns dq, dk, dv in the inputs' own layouts.
A scored bias (flex attention) gets no backward here (the reference's VJP is used).
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from mk.author.attention_layout import names_tuple, to_bhsd, var_lines
from mk.author.emit import family_section
from mk.author.probe import arg_names, signature
from mk.task import Task
from mk.targets import kernel_language

log = logging.getLogger(__name__)

#: names kernel_bwd defines or the backward modules hold: an input so named gets no backward
_TAKEN = {"cotangent", "do", "dq", "dk", "dv", "grads", "ins", "q", "k", "v", "scale", "flash_attention_bwd_tpu",
          "flash_attention_bwd_gpu"}


def with_backward(source: str, task: Task, pat: Any, probes: Any, target: str, *, causal: bool, scale_expr: str) -> str:
    """``source`` with the backward section appended (unchanged when an input name would clash)."""
    from mk.kernels.flash_attention import bwd_gpu, bwd_tpu

    names = arg_names(task)
    if set(names) & (_TAKEN - {"q", "k", "v"}) or "CAUSAL" not in source:
        log.info("attention: %s gets no backward kernel (an input name clashes)", task.name)
        return source
    gpu = kernel_language(target) == "triton"
    fn = "flash_attention_bwd_gpu" if gpu else "flash_attention_bwd_tpu"
    inv_in = tuple(int(i) for i in np.argsort(pat.layout))
    inv_out = tuple(int(i) for i in np.argsort(pat.out_layout))
    from_bhsd = (lambda e: e) if pat.layout == (0, 1, 2, 3) else (lambda e: f"jnp.transpose({e}, {inv_in!r})")
    do = "cotangent" if pat.out_layout == (0, 1, 2, 3) else f"jnp.transpose(cotangent, {inv_out!r})"
    grads = ["None"] * len(names)
    grads[pat.q], grads[pat.k], grads[pat.v] = from_bhsd("dq"), from_bhsd("dk"), from_bhsd("dv")
    lines = [
        "",
        "",
        *family_section(bwd_gpu if gpu else bwd_tpu),
        "",
        "",
        f"def kernel_bwd(cotangent, {signature(task, '')}):",
        '    """The backward of kernel: the inputs and the output cotangent in (batch, head, seq, head_dim) as kernel '
        'puts them,',
        '    then dq, dk, dv by the FlashAttention-2 backward (the lse recomputed), in the inputs\' own layouts."""',
        f"    ins = {names_tuple(names)}",
        *var_lines(probes.used(scale_expr)),
        f"    scale = {scale_expr}",
        f"    {to_bhsd(pat)}",
        f"    do = {do}",
        f"    dq, dk, dv = {fn}(q, k, v, do.astype(q.dtype), scale=scale, causal=CAUSAL)",
        f"    return ({', '.join(grads)},)",
        "",
    ]
    return source.rstrip("\n") + "\n" + "\n".join(lines)
