"""A target registered beside the built-in ones (issue 26 item 3): one ``register_target`` call, and every part of mk
that reads target knowledge reads it from the target (kernel language, hardware spec), never from a table keyed by
the names ``tpu`` and ``gpu``.

The scratch targets are a second Triton target and a second Mosaic target with the built-in ones' compilers; the
offline author's every recogniser must propose for them what it proposes for the built-in target of the same
kernel language, the LM author's prompt must carry that language's rules, and retrieval must read that language's
passages. (Before: ``KeyError: 'gpu2'`` from 11 recognisers and 10 kernel families, and a prompt with no rules.)
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from mk import targets
from mk.author import OfflineAuthor
from mk.loaders import load_task
from mk.targets import Target, get_target, kernel_spec, register_target

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
#: built-in tasks whose ``ci`` proposals span the recognisers (rowwise, matmul, attention, conv, swiglu, gmm, paged,
#: retention, cross entropy, MoE)
TASKS = ["jaxbench:" + t for t in ("1p_Flash_Attention", "3p_MLA_Attention", "6p_Paged_Attention",
                                   "7p_Ragged_Paged_Attention", "8p_GEMM", "9p_SwiGLU_MLP", "10p_Sparse_MoE",
                                   "11p_Megablox_GMM", "13p_Cross_Entropy", "15p_RetNet_Retention",
                                   "17p_Triangle_Multiplication", "18k_Conv2D_ReLU_BiasAdd", "50k_Matmul_GELU_Softmax")]


@pytest.fixture
def scratch(monkeypatch):
    """``gpu2`` (Triton) and ``tpu2`` (Mosaic), registered the documented way, in a registry restored afterwards."""
    monkeypatch.setattr(targets, "_TARGETS", dict(targets._TARGETS))
    register_target(dataclasses.replace(get_target("gpu"), name="gpu2", device_platform="gpu2", device_nodes=""))
    register_target(dataclasses.replace(get_target("tpu"), name="tpu2", device_platform="tpu2", device_nodes=""))
    return {"gpu2": "gpu", "tpu2": "tpu"}


def _proposals(task, target, as_name=None):
    """The proposals' sources by template, the target's name where a written file says it read as ``as_name`` (the
    only difference allowed), and the declined templates."""
    authored = OfflineAuthor().propose(task, target)
    return {p.template: re.sub(rf"\b{target}\b", as_name or target, p.source) for p in authored.proposals}, \
        authored.declined


@pytest.mark.parametrize("name", ["rmsnorm", "softmax", "matmul_gelu", "attention"] + TASKS,
                         ids=lambda n: n.split(":")[-1].split("_")[0])
def test_every_recogniser_proposes_for_a_registered_target_what_it_does_for_its_language(scratch, name):
    task = load_task(EXAMPLES / f"{name}.py") if ":" not in name else load_task(name)
    task = task.with_scales({"ci": task.scale("ci")})
    for new, builtin in scratch.items():
        got, declined = _proposals(task, new, as_name=builtin)
        want, want_declined = _proposals(task, builtin)
        assert sorted(got) == sorted(want), (new, declined)
        assert got == want, new
        assert declined.keys() == want_declined.keys()


def test_the_target_carries_its_hardware_spec(scratch):
    assert kernel_spec("gpu2") == kernel_spec("gpu") == "h200" and kernel_spec("tpu2") == "v6e"
    from mk.errors import TargetError

    with pytest.raises(TargetError, match="no kernel language"):
        kernel_spec("cpu")
    register_target(Target("bare", platform="cuda", device_platform="bare", kernel_language="triton"))
    with pytest.raises(TargetError, match="register the target with both"):
        kernel_spec("bare")


def test_the_lm_prompt_carries_the_kernel_languages_rules(scratch):
    from mk.programs.lm_author import GPU_SKELETON, TPU_SKELETON, hardware_brief

    gpu2, tpu2 = hardware_brief("gpu2"), hardware_brief("tpu2")
    assert "Pallas Triton kernel" in gpu2 and GPU_SKELETON in gpu2
    assert "Pallas TPU kernel" in tpu2 and TPU_SKELETON in tpu2
    assert "pure-JAX rewrite" in hardware_brief("cpu")


def test_retrieval_reads_the_kernel_languages_passages(scratch):
    from mk.errors import KnowledgeError
    from mk.retrievers.targets import check_target

    assert check_target("gpu2") == "gpu" and check_target("tpu2") == "tpu" and check_target("gpu") == "gpu"
    with pytest.raises(KnowledgeError, match="unknown target"):
        check_target("nosuch")


def test_a_registered_targets_definition_travels_to_a_fresh_process(scratch, monkeypatch):
    from mk.targets import DEFINITION_ENV, child_env, from_definition

    assert child_env("gpu") == {"MK_TARGET": "gpu"}  # a built-in target: its name is enough
    env = child_env("gpu2")
    assert env["MK_TARGET"] == "gpu2" and from_definition(env[DEFINITION_ENV]) == get_target("gpu2")
    monkeypatch.setattr(targets, "_TARGETS", dict(targets._BUILTIN))  # as a judge's process starts
    monkeypatch.setenv(DEFINITION_ENV, env[DEFINITION_ENV])
    assert get_target("gpu2").kernel_language == "triton"
    from mk.errors import TargetError

    with pytest.raises(TargetError, match="unknown target"):
        get_target("tpu2")  # only the target it was told of


@pytest.mark.parametrize("new", ["gpu2", "tpu2"])
def test_the_judge_judges_a_registered_target_as_its_language(scratch, new):
    """The judge's processes (tracer, runner, the chip's compiler) know the target from their environment: the
    offline author's rmsnorm kernel is judged correct for it, compiled for its default chip."""
    from mk.harness import evaluate

    task = load_task(EXAMPLES / "rmsnorm.py")
    task = task.with_scales({"ci": task.scale("ci")})
    proposal = OfflineAuthor().propose(task, new).proposals[0]
    result = evaluate(task, proposal.source, target=new, measure=False)
    assert result.status == "correct", result.reason
    assert result.target == new
    assert get_target(new).default_chip in result.compile_check, result.compile_check


def test_a_built_in_target_is_not_redefined_and_a_bad_definition_is_typed(scratch, monkeypatch):
    from mk.errors import TargetError
    from mk.targets import DEFINITION_ENV

    with pytest.raises(TargetError, match="built in and cannot be redefined"):
        register_target(dataclasses.replace(get_target("tpu"), kernel_calls=frozenset({"other"})))
    register_target(get_target("tpu"))  # the same definition again is no redefinition
    monkeypatch.setenv(DEFINITION_ENV, "{not json")
    with pytest.raises(TargetError, match="does not define a target"):
        get_target("nosuch")
