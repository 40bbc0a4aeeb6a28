"""Which platform a passage is about, and which one a query asks about.

A passage is *specific* to a platform when its document says so by path
(``pallas/tpu/…``, ``jax.experimental.pallas.mosaic_gpu.…``, the handbook's
``tpu-*.md`` / ``gpu-*.md``) or, for a page about both, when its own words
name that platform's hardware and APIs at least twice and the other's never
(Triton, warps, wgmma … against VMEM, megacore, pltpu …). Everything else is
generic and serves every target.
"""

from __future__ import annotations

import re

from mk.errors import KnowledgeError, TargetError
from mk.retrievers.tokenize import tokenize
from mk.targets import get_target

TARGETS = ("tpu", "gpu", "cpu")
PLATFORMS = ("tpu", "gpu")  # the targets a passage can be specific to
#: the passages a registered target reads, by its kernel language (a Triton target reads the GPU's)
_LANGUAGE_PLATFORM = {"mosaic": "tpu", "triton": "gpu", "": "cpu"}

_PATH = {
    "tpu": re.compile(r"(?:^|[/._-])(?:tpu|tpu_sc|sparsecore)(?:[/._-]|$)", re.I),
    "gpu": re.compile(r"(?:^|[/._-])(?:gpu|mosaic_gpu|triton|cuda)(?:[/._-]|$)|^gpu_", re.I),
}
# stemmed index terms (see tokenize) that name one platform's hardware or API
_MARKERS = {
    "tpu": frozenset("tpu pltpu vmem megacore mxu sparsecore xlu tpu_sc plsc prefetchscalargridspec".split()),
    "gpu": frozenset(
        "gpu plgpu pltriton triton cuda warp warpgroup wgmma tcgen05 tma hopper blackwell nvidia ptx sass gmem tmem nccl "
        "a100 h100 b200 nvlink cta sm".split()
    ),
}


def check_target(target: str | None) -> str | None:
    """``target`` lower-cased, or a typed error naming the accepted values."""
    if target is None or target == "":
        return None
    t = str(target).lower()
    if t in TARGETS:
        return t
    try:  # a target registered beside the built-in ones reads its kernel language's passages
        language = get_target(t).kernel_language
    except TargetError:
        raise KnowledgeError(f"unknown target {target!r}", hint=f"use one of {', '.join(TARGETS)} (or none)") from None
    if language not in _LANGUAGE_PLATFORM:
        raise KnowledgeError(f"target {target!r} is in kernel language {language!r}, which no passage is about",
                             hint=f"use one of {', '.join(TARGETS)} (or none)")
    return _LANGUAGE_PLATFORM[language]


def _counts(tokens: list[str]) -> dict[str, int]:
    return {p: sum(t in _MARKERS[p] for t in tokens) for p in PLATFORMS}


def passage_targets(doc: str, title: str, text: str) -> list[str]:
    """The platforms a passage is specific to (at most one); ``[]`` for a generic passage."""
    by_path = [p for p in PLATFORMS if _PATH[p].search(doc)]
    if len(by_path) == 1:
        return by_path
    c = _counts(tokenize(f"{title}\n{text}"))
    for p, other in (("tpu", "gpu"), ("gpu", "tpu")):
        if c[p] >= 2 and c[other] == 0:
            return [p]
    return []


def query_platform(query: str) -> str | None:
    """The platform a query names on its own (only one of them), if any."""
    c = _counts(tokenize(query))
    if c["tpu"] and not c["gpu"]:
        return "tpu"
    if c["gpu"] and not c["tpu"]:
        return "gpu"
    return None
