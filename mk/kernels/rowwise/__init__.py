"""Whole rows per block: a row-local body (norms, softmax, logsumexp, activations, long elementwise chains) run over
blocks of rows in one ``pallas_call``, parameters resident in every block.

``tpu.py`` (Mosaic) and ``gpu.py`` (Triton: trailing axes padded to powers of
two) hold the ``pallas_call`` skeleton that takes the body as a callable;
``reference.py`` runs the body on all rows at once; ``config.py`` the typed
row block, budgets and space. mk's offline author generates only the body
(the task's own computation, block-local) and copies the skeleton in.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from mk.kernels.rowwise.config import BUDGET, Config, Shapes, budget, default, space
from mk.kernels.rowwise.gpu import rowwise_gpu
from mk.kernels.rowwise.reference import rowwise as rowwise_reference
from mk.kernels.rowwise.tpu import rowwise_tpu
from mk.targets import kernel_language


def rowwise(body: Callable[..., tuple], inputs: Sequence[Any], *, row_inputs: Sequence[bool], lead: int, target: str,
            config: Config | None = None, sublanes: int = 8) -> list[Any]:
    """``body`` over blocks of whole rows on ``target`` (tpu or gpu)."""
    lang = kernel_language(target)
    if lang not in ("mosaic", "triton"):
        raise ValueError(f"target must be a TPU or GPU target, got {target!r}")
    config = config or Config()
    config.check(target)
    if lang == "mosaic":
        return rowwise_tpu(body, inputs, row_inputs=row_inputs, lead=lead, sublanes=sublanes, budget=BUDGET["mosaic"],
                           **config.kwargs(target))
    return rowwise_gpu(body, inputs, row_inputs=row_inputs, lead=lead, budget=BUDGET["triton"], **config.kwargs(target))


__all__ = ["BUDGET", "Config", "Shapes", "budget", "default", "rowwise", "rowwise_gpu", "rowwise_reference", "rowwise_tpu",
           "space"]
