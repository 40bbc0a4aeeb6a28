"""The matmul template's split-K variant: partial products over K slabs in parallel, the epilogue after, in XLA.

The fused variant (:mod:`mk.author.matmul`) runs one program per output block
and walks K inside it (the grid's last, sequential axis on TPU; a loop on GPU),
so a product with few output blocks and a long K keeps few cores busy. This
variant cuts K into ``k_splits`` slabs that are a parallel grid axis: each
program writes the f32 partial product of its slab, XLA sums the slabs and
applies the reference's epilogue on whole arrays (it fuses that sum and the
elementwise work into one pass over the (M, N) product). It trades one f32
(splits, M, N) round trip through HBM for parallelism along K.
"""

from __future__ import annotations

from typing import Any

from mk.author.emit import Emitted, family_section, file_head, language_stem
from mk.kernels.matmul import splitk_gpu, splitk_tpu
from mk.author.probe import signature
from mk.task import Task
from mk.targets import kernel_language

#: the slab counts tried (with the fused variant's blocks: config.space with splitk=True)
K_SPLITS = [2, 4, 8]


def render(task: Task, names: list[str], target: str, lhs: Any, rhs: Any, w_t: bool, pnames: list[str],
           epilogue: Emitted, used: list, sp: dict[str, list[int]], *, config: str, operands: str) -> str:
    """The written split-K kernel file: mk/kernels/matmul/splitk_{tpu,gpu}.py copied in, the epilogue as
    whole-array code, ``kernel``. ``sp``: the tuning space (the fused variant's blocks and ``k_splits``);
    ``config``: the keyword defaults of ``kernel``; ``operands``: the keyword arguments that describe the product
    (both written by :mod:`mk.author.matmul`, whose helpers make them for the fused variant too)."""
    gpu = kernel_language(target) == "triton"
    module = splitk_gpu if gpu else splitk_tpu
    fn = "matmul_splitk_gpu" if gpu else "matmul_splitk_tpu"
    cfg_call = ", ".join(f"{k}={k}" for k in ("block_m", "block_n", "block_k", "k_splits"))
    kw = ", ".join(v.name for v in used)
    bind = ", ".join(f"{v.name}={v.source}" for v in used)
    x_name, w_name = names[lhs.index], names[rhs.index]
    text = (f"out = epilogue(sum over K slabs of {x_name} @ {w_name}{'.T' if w_t else ''}"
            + "".join(f", {n}" for n in pnames) + "): split-K. K is cut into k_splits slabs, a parallel grid axis; "
            "each program accumulates its slab's f32 partial product of one output block, and XLA sums the slabs and "
            f"runs the reference's epilogue on whole arrays after the kernel. The kernel is "
            f"mk/kernels/matmul/splitk_{language_stem(target)}.py, copied below unchanged; only _epilogue is generated from the "
            "reference. Sizes and static values are read from "
            "the arguments at trace time; block sizes and k_splits are requests fitted to the sizes the kernel is "
            "called with" + (" (powers of two for Triton, sizes zero-padded)." if gpu else
                             " (multiples of the TPU tile, or the whole axis; k_splits a divisor of the K blocks)."))
    lines = [
        *file_head(f"mk offline author: split-K matmul, epilogue after the kernel, for {task.name} (target {target}).",
                   text, gpu=gpu, space=sp),
        "", *family_section(module), "", "",
        f"def _epilogue(y{''.join(', ' + n for n in pnames)}{', *, ' + kw if kw else ''}):",
        '    """The reference after its matrix product, on whole arrays (XLA, after the kernel)."""',
        *[f"    {l}" for l in epilogue.lines],
        f"    return {epilogue.outputs[0]}",
        "", "",
        f"def kernel({signature(task, config)}):",
        *([f"    epilogue = functools.partial(_epilogue, {bind})"] if bind else ["    epilogue = _epilogue"]),
        f"    return {fn}({', '.join([x_name, w_name, *pnames])}, epilogue=epilogue,",
        f"        {operands},",
        f"        {cfg_call})",
        "",
    ]
    return "\n".join(lines)

