"""The offline author: deterministic, rule-based candidates with no model.

It reads the reference's jaxpr, recognises a pattern and fills a Pallas
template (or declines and says why). Its proposals go through exactly the same
judge as an LM's: compile check, frozen suite, autotuning, profiling.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from mk.author import attention, conv, cross_entropy, gmm, matmul, rewrites, rowwise, swiglu
from mk.author import flex, paged, ragged_paged
from mk.author import retention
from mk.author import triangle
from mk.author import moe
from mk.author import mla
from mk.author.emit import Unsupported
from mk.author.proposal import Proposal
from mk.author.trace import trace_scales
from mk.task import Task
from mk.targets import kernel_language

log = logging.getLogger(__name__)

#: (name, what it covers, module) in the order they are tried
TEMPLATES = (
    ("rewrite", "algebraic rewrites in pure JAX on every target (a sum moved before a matmul, dead code, constant "
     "folding, redundant casts/transposes/reshapes, scalar factors folded, inference-mode dropout removed)", rewrites),
    ("retention", "causal decayed retention with a row normaliser (RetNet, Mamba-2 SSD quadratic form); kernels from mk/kernels/retention", retention),
    ("paged", "paged decode attention over a page table (one query token per sequence, length-masked, GQA); "
     "kernels from mk/kernels/paged_attention", paged),
    ("ragged_paged", "ragged paged attention over combined K/V pages (a batch mixing decode tokens and prefill chunks "
     "through cu_q_lens and num_seqs, causal with each sequence's queries last, GQA); kernels from "
     "mk/kernels/ragged_paged_attention", ragged_paged),
    ("moe", "top-k mixture of gated-MLP experts written densely, computed sparsely: choices sorted by expert, the expert MLP fused in one grouped kernel from mk/kernels/gmm", moe),
    ("attention", "flash attention with online softmax over key blocks (causal or not, MHA and GQA; TPU, and GPU "
     "Triton with sizes no power of two zero-padded), with a backward kernel; kernels from mk/kernels/flash_attention",
     attention),
    ("flex_attention", "attention with an additive score bias from an input (FlexAttention score_mod), causal or not, "
     "the bias streamed block by block; kernels from mk/kernels/flash_attention", flex),
    ("mla", "attention on computed q/k/v (multi-head latent attention, fused QKV projections, RoPE, heads split from "
     "(B, S, D), a pre-scaled q) or with scores the reference modifies (boolean or additive masks, soft caps, sliding "
     "windows: its own ops applied to each score tile, mask inputs streamed block by block): the core as flash "
     "attention, every x @ w projection a Pallas matmul (mk/kernels/gmm, one group), the rest in plain JAX", mla),
    ("cross_entropy", "fused LM-head cross-entropy: the vocabulary matmul with an online log-sum-exp over vocabulary "
     "blocks and the label pick, logits never written to memory (TPU, and GPU Triton), with a backward kernel; kernels "
     "from mk/kernels/cross_entropy", cross_entropy),
    ("conv", "convolution (1-3 spatial axes, stride 1) as an implicit GEMM with the work after it fused per sample "
     "(bias, activations, instance/group/layer norms, pooling, channel reductions); kernels from mk/kernels/conv", conv),
    ("triangle", "a computation around one batched matmul (AlphaFold's triangle update): the products no other product feeds as Pallas matmuls from mk/kernels/gmm, the rest in plain JAX", triangle),
    ("gmm", "grouped matmul over contiguous row groups, megablox-style (a batched matmul, or a scan over groups of "
     "dynamic row slabs); kernels from mk/kernels/gmm", gmm),
    ("swiglu", "MLP with the up-projection(s), the activation and the down-projection fused: gated (SwiGLU, GeGLU), "
     "ungated (ReLU², GELU), a fused gate-up weight cut in halves, weights as (in, out) or (out, in); kernels from "
     "mk/kernels/swiglu", swiglu),
    ("matmul", "tiled matmul with the reference's epilogue fused (bias, scale, residual, clamp, activations, group norms, window pooling), or split-K with the epilogue after it in XLA", matmul),
    ("rowwise", "row-wise kernels with whole rows per block (RMSNorm, LayerNorm, softmax, logsumexp, long elementwise chains)", rowwise),
)

#: pure-JAX templates: the only ones offered for cpu; on tpu/gpu they are judged with require_pallas=False
#: (Auto does that for any proposal whose template is listed here).
PURE_JAX = ("rewrite",)

#: the one line a run prints when no model is configured (the families by name; ``covers()`` says what each does)
ANNOUNCEMENT = ("no model configured; using the built-in rule-based author (kernel families: "
                + ", ".join(name for name, _, _ in TEMPLATES) + "; `mk optimize -v` logs what each covers)")


def covers() -> str:
    """What each of the offline author's families covers, one line each, in the order they are tried."""
    return "\n".join(f"{name}: {desc}" for name, desc, _ in TEMPLATES)


@dataclass
class Authored:
    """The proposals for one task and target, and why each template declined."""

    proposals: list[Proposal] = field(default_factory=list)
    declined: dict[str, str] = field(default_factory=dict)

    def reason(self) -> str:
        if self.proposals:
            return ""
        from mk.contracts import declined_reason

        return declined_reason(self.declined)


class OfflineAuthor:
    """Proposes Pallas candidates for ``tpu``/``gpu`` and pure-JAX rewrites (cpu) from the reference's jaxpr."""

    name = "offline"

    def propose(self, task: Task, target: str) -> Authored:
        out = Authored()
        if not kernel_language(target):
            out.declined["pallas"] = "the cpu target has no Pallas templates (Pallas only interprets on a CPU)"
        try:
            traced = trace_scales(task)
        except Exception as exc:  # the reference itself failed to trace: report, do not crash
            out.declined["trace"] = f"the reference could not be traced ({type(exc).__name__}: {exc})"
            return out
        for name, _, module in TEMPLATES:
            if not kernel_language(target) and name not in PURE_JAX:
                continue
            try:
                made = module.propose(task, traced, target)
            except Unsupported as exc:
                out.declined[name] = str(exc)
                log.info("template %s declined %s: %s", name, task.name, exc)
                continue
            out.proposals.extend(_variants(name, made))
        return out


def _variants(template: str, made: Proposal | list[Proposal] | tuple[Proposal, ...]) -> list[Proposal]:
    """A template's proposals: one, or several variants (distinct strategies, each with its own name and plan text,
    the first the template's default). Names and plan texts must differ, so a search grows one node per strategy and
    a planner can ask for one by name."""
    props = [made] if isinstance(made, Proposal) else list(made)
    if not props:
        raise ValueError(f"template {template} returned no proposal (it must raise Unsupported to decline)")
    names = [p.name for p in props]
    rationales = [p.rationale.strip() for p in props]
    if len(set(names)) != len(names) or len(set(rationales)) != len(rationales):
        raise ValueError(f"template {template}'s variants need distinct names and plan texts, got {names}")
    return props


__all__ = ["ANNOUNCEMENT", "Authored", "OfflineAuthor", "Proposal", "TEMPLATES"]
