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

import textwrap
from typing import Any

from mk.author.emit import Emitted
from mk.author.probe import signature
from mk.task import Task
from mk.targets import kernel_language

_TPU_KERNEL = '''def _block(n, want, quantum):
    """The largest multiple of quantum that divides n and is at most want; n itself when there is none."""
    for b in range(min(want, n) // quantum * quantum, 0, -quantum):
        if n % b == 0:
            return b
    return n


def _divisor(n, want):
    """The largest divisor of n that is at most want (at least 1)."""
    return max(d for d in range(1, max(1, min(n, want)) + 1) if n % d == 0)


def _partial_kernel(x_ref, w_ref, o_ref, acc_ref, *, steps):
    @pl.when(pl.program_id(3) == 0)
    def _zero():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += lax.dot_general(x_ref[...]{lcast}, w_ref[...]{rcast}, {dims},
                                    precision={prec}, preferred_element_type=jnp.float32)

    @pl.when(pl.program_id(3) == steps - 1)
    def _store():
        o_ref[...] = acc_ref[...][None]


def _splitk_product(x, w, *, block_m, block_n, block_k, k_splits):
    """The (k_splits, M, N) f32 partial products of x (M, K) and w over k_splits slabs of K."""
    (M, K), N = x.shape, w.shape[{n_axis}]
    block_m = _block(M, block_m, SUBLANES)
    block_n = _block(N, block_n, 128)
    block_k = _block(K, block_k, 128)
    splits = _divisor(K // block_k, k_splits)
    steps = K // block_k // splits
    w_spec = {w_spec}
    return pl.pallas_call(
        functools.partial(_partial_kernel, steps=steps),
        grid=(splits, M // block_m, N // block_n, steps),
        in_specs=[pl.BlockSpec((block_m, block_k), lambda s, m, n, k: (m, s * steps + k)), w_spec],
        out_specs=pl.BlockSpec((1, block_m, block_n), lambda s, m, n, k: (s, m, n)),
        out_shape=jax.ShapeDtypeStruct((splits, M, N), jnp.float32),
        scratch_shapes=[pltpu.VMEM((block_m, block_n), jnp.float32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "parallel", "arbitrary")),
    )(x, w)
'''

_GPU_KERNEL = '''def _pow2(n):
    return 1 << max(0, (n - 1).bit_length())


def _fit(n, want):
    """(block, padded n): a power-of-two block >= 16 and at most want, n padded to a multiple of it."""
    b = max(16, min(_pow2(want), _pow2(n)))
    return b, -(-n // b) * b


def _pad_to(x, shape):
    widths = [(0, t - s) for s, t in zip(x.shape, shape)]
    return jnp.pad(x, widths) if any(w for _, w in widths) else x


def _partial_kernel(x_ref, w_ref, o_ref, *, steps, block_k, block_n):
    def step(k, acc):
        x = x_ref[:, pl.ds(k * block_k, block_k)]
        w = w_ref[{w_slice}]
        return acc + lax.dot_general(x{lcast}, w{rcast}, {dims},
                                     precision={prec}, preferred_element_type=jnp.float32)

    acc = lax.fori_loop(0, steps, step, jnp.zeros((x_ref.shape[0], block_n), jnp.float32))
    o_ref[...] = acc[None]


def _splitk_product(x, w, *, block_m, block_n, block_k, k_splits):
    """The (splits, M, N) f32 partial products of x (M, K) and w over slabs of K (sizes padded to powers of two)."""
    (M, K), N = x.shape, w.shape[{n_axis}]
    block_m, m_pad = _fit(M, block_m)
    block_n, n_pad = _fit(N, block_n)
    block_k = max(16, min(_pow2(block_k), _pow2(K)))
    splits = min(_pow2(k_splits), _pow2(-(-K // block_k)))  # at most one slab per K block
    steps = _pow2(-(-K // (block_k * splits)))  # power-of-two slabs: Triton blocks are powers of two
    chunk = steps * block_k
    x = _pad_to(x, (m_pad, chunk * splits))
    w = _pad_to(w, {w_pad})
    w_spec = {w_spec}
    return pl.pallas_call(
        functools.partial(_partial_kernel, steps=steps, block_k=block_k, block_n=block_n),
        grid=(m_pad // block_m, n_pad // block_n, splits),
        in_specs=[pl.BlockSpec((block_m, chunk), lambda m, n, s: (m, s)), w_spec],
        out_specs=pl.BlockSpec((1, block_m, block_n), lambda m, n, s: (s, m, n)),
        out_shape=jax.ShapeDtypeStruct((splits, m_pad, n_pad), jnp.float32),
        compiler_params=pltriton.CompilerParams(num_warps=4, num_stages=2),
    )(x, w)[:, :M, :N]
'''


def render(task: Task, names: list[str], target: str, lhs: Any, rhs: Any, w_t: bool, dot: Any, pnames: list[str],
           epilogue: Emitted, used: list, space: dict[str, list[int]], sublanes: int) -> str:
    """The written split-K kernel file: the partial-product kernel, the epilogue as whole-array code, ``kernel``."""
    gpu = kernel_language(target) == "triton"
    prec = dot.params.get("precision")
    first = prec[0] if isinstance(prec, tuple) else prec
    fill = {
        "lcast": "".join(f".astype(jnp.{c})" for c in lhs.casts),
        "rcast": "".join(f".astype(jnp.{c})" for c in rhs.casts),
        "dims": f"(((1,), ({1 if w_t else 0},)), ((), ()))",
        "prec": "None" if first is None else f"lax.Precision.{getattr(first, 'name', 'DEFAULT')}",
        "n_axis": "0" if w_t else "1",
    }
    if gpu:
        fill["w_slice"] = ":, pl.ds(k * block_k, block_k)" if w_t else "pl.ds(k * block_k, block_k), :"
        fill["w_pad"] = "(n_pad, chunk * splits)" if w_t else "(chunk * splits, n_pad)"
        fill["w_spec"] = ("pl.BlockSpec((block_n, chunk), lambda m, n, s: (n, s))" if w_t
                          else "pl.BlockSpec((chunk, block_n), lambda m, n, s: (s, n))")
        body = _GPU_KERNEL
    else:
        fill["w_spec"] = ("pl.BlockSpec((block_n, block_k), lambda s, m, n, k: (n, s * steps + k))" if w_t
                          else "pl.BlockSpec((block_k, block_n), lambda s, m, n, k: (s * steps + k, n))")
        body = _TPU_KERNEL
    for key, val in fill.items():
        body = body.replace("{" + key + "}", val)
    sp = {**space, "k_splits": [2, 4, 8]}
    config = ", ".join(f"{k}={v[-1] if k != 'k_splits' else 4!r}" for k, v in sp.items())
    cfg_call = ", ".join(f"{k}={k}" for k in sp)
    kw = ", ".join(v.name for v in used)
    bind = ", ".join(f"{v.name}={v.source}" for v in used)
    x_name, w_name = names[lhs.index], names[rhs.index]
    text = (f"out = epilogue(sum over K slabs of {x_name} @ {w_name}{'.T' if w_t else ''}"
            + "".join(f", {n}" for n in pnames) + "): split-K. K is cut into k_splits slabs, a parallel grid axis; "
            "each program accumulates its slab's f32 partial product of one output block, and XLA sums the slabs and "
            "runs the reference's epilogue on whole arrays after the kernel. Sizes and static values are read from "
            "the arguments at trace time; block sizes and k_splits are requests fitted to the sizes the kernel is "
            "called with" + (" (powers of two for Triton, sizes zero-padded)." if gpu else
                             " (multiples of the TPU tile, or the whole axis; k_splits a divisor of the K blocks)."))
    lines = [
        f'"""mk offline author: split-K matmul, epilogue after the kernel, for {task.name} (target {target}).', "",
        *textwrap.wrap(text, 110), '"""',
        "import functools", "", "import jax", "import jax.numpy as jnp", "from jax import lax",
        "from jax.experimental import pallas as pl",
        "from jax.experimental.pallas import triton as pltriton" if gpu else "from jax.experimental.pallas import tpu as pltpu",
        "", f"CONFIG_SPACE = {sp!r}",
        *([] if gpu else ["#: rows per sublane tile of the narrowest row dtype (8 for 32-bit, 16 for 16-bit)",
                          f"SUBLANES = {sublanes}"]),
        "", "", *body.strip("\n").splitlines(), "", "",
        f"def _epilogue(y{''.join(', ' + n for n in pnames)}{', *, ' + kw if kw else ''}):",
        '    """The reference after its matrix product, on whole arrays (XLA, after the kernel)."""',
        *[f"    {l}" for l in epilogue.lines],
        f"    return {epilogue.outputs[0]}",
        "", "",
        f"def kernel({signature(task, config)}):",
        *([f"    epilogue = functools.partial(_epilogue, {bind})"] if bind else ["    epilogue = _epilogue"]),
        f"    partial = _splitk_product({x_name}, {w_name}, {cfg_call})",
        f"    y = jnp.sum(partial, axis=0).astype(jnp.{_dtype(dot)})",
        f"    return epilogue(y{''.join(', ' + n for n in pnames)})",
        "",
    ]
    return "\n".join(lines)


def _dtype(dot: Any) -> str:
    import numpy as np

    return np.dtype(dot.outvars[0].aval.dtype).name
