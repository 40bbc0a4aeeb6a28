"""Variants a search can explore (issue 13): the offline author proposes more than one distinct strategy for every
example on tpu and gpu, each with its own name, plan text and code, so an offline search grows more than one node."""

from __future__ import annotations

from pathlib import Path

import pytest

from mk.author import OfflineAuthor
from mk.loaders import load_task

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _ci(path: Path):
    task = load_task(str(path))
    return task.with_scales({"ci": task.scale("ci")})


@pytest.mark.parametrize("target", ["tpu", "gpu"])
@pytest.mark.parametrize("example", ["attention.py", "matmul_gelu.py", "rmsnorm.py", "softmax.py"])  # the task modules
def test_every_example_has_several_distinct_strategies(example, target):
    props = OfflineAuthor().propose(_ci(EXAMPLES / example), target).proposals
    kernels = [p for p in props if p.template != "rewrite"]
    assert len(kernels) >= 2, [p.name for p in props]
    assert len({p.name for p in kernels}) == len(kernels)
    assert len({p.rationale for p in kernels}) == len(kernels)
    assert len({p.source for p in kernels}) == len(kernels)
