"""Query expansion: a kernel author's plain words and a compiler's error text mapped to the docs' terms.

BM25 only matches words a passage shares with the query. A kernel author asks
"keep a running sum across grid steps" or "fast on-chip memory"; the Pallas docs
say *accumulation*, *initialize*, ``pl.when``, *VMEM*. A compiler says "takes 1
positional argument but 2 were given" from ``_convert_block_spec_to_block_mapping``;
the page that explains it talks about ``index_map`` arguments and scalar prefetch.

Each concept below pairs trigger phrases with the terms the docs themselves use
for it. The concepts and their terms were written by reading the docs (the page
each group comes from is named above it), one per thing a kernel author meets;
none is keyed to a particular query. A trigger phrase matches when all of its
words occur in the query in any order, compared after :func:`tokenize` (so
stemmed: "accumulating" meets "accumulate"); a phrase some of whose words are
stop words ("no kernel", "how big", "on-chip") must occur as written, and one
written ``~regex`` is a regular expression over the lower-cased query. The expansion is scored as a
separate, down-weighted query (``EXPAND_WEIGHT`` in :mod:`mk.retrievers.store`),
so it can bring a page that shares no word with the question into view but not
outweigh a page that matches the question's own words.
"""

from __future__ import annotations

import re
from functools import lru_cache

from mk.retrievers.tokenize import tokenize

# (trigger phrases separated by "|", the docs' terms for the concept)
_CONCEPTS: tuple[tuple[str, str], ...] = (
    # --- memory spaces: tpu/details.rst "What is a TPU?", tpu/pipelining.md "TPU Memory Spaces", gpu/reference.md "Memory spaces"
    ("on-chip | on chip | fast memory | local memory | scratchpad | sram | vector memory",
     "VMEM SRAM memory space scratch on-chip"),
    ("off-chip | main memory | device memory | global memory | slow memory | high bandwidth memory | dram",
     "HBM GMEM memory space"),
    ("shared memory | scalar memory", "SMEM shared memory memory space"),
    ("register | vector register", "registers vregs layout"),
    ("which memory | memory space | where live | where stored | where placed", "memory_space VMEM SMEM HBM ANY BlockSpec"),
    ("scratch | temporary buffer | staging buffer | extra buffer", "scratch_shapes pltpu.VMEM scratch buffer"),
    # --- capacity and limits: tpu/hardware.ipynb, tpu/details.rst, tpu/pipelining.md
    ("how much memory | how big | how large | largest | capacity | each generation | chip generation | tpu version | each chip",
     "VMEM capacity TPU generation hardware get_tpu_info v5e v5p v6e"),
    ("out of memory | oom | too big | too large | exceed | memory limit | not fit | doesn't fit",
     "vmem_limit_bytes scoped VMEM limit CompilerParams RESOURCE_EXHAUSTED block size"),
    # --- compute units: tpu/details.rst "What is a TPU?", "Computation placement", tpu/hardware.ipynb
    ("matrix unit | matrix multiply unit | systolic | matmul unit | tensor core | tensorcore",
     "MXU matrix unit matmul TensorCore"),
    ("vector unit | vector core | vector processor | simd", "VPU vector core elementwise"),
    ("scalar unit | scalar core", "scalar core SMEM scalar"),
    ("cheap | expensive | costly | slow operation | slow op | fast operation", "cost cheap expensive elementwise operations"),
    ("elementwise | element-wise | per element | transcendental | math function", "elementwise operations supported cost"),
    # --- precision and data types: tpu/details.rst "Supported data types", "Precision control", tpu/matmul.md
    ("half precision | low precision | lower precision | bf16 | bfloat | fp16 | float16 | mixed precision",
     "bfloat16 float32 preferred_element_type precision accumulate MXU"),
    ("precision | accurate | accuracy | rounding", "precision lax.Precision preferred_element_type float32"),
    ("8-bit | int8 | fp8 | quantiz", "int8 fp8 matmul TPU generation"),
    ("integer | dtype | data type | boolean", "supported data types int32 float32 bfloat16"),
    # --- accumulation over a grid axis: pipelining.md "Reductions and accumulation", tpu/matmul.md, grid_blockspec.md
    ("accumulate | accumulator | running sum | running total | running max | partial sum | sum over steps | across steps | "
     "across iterations | reduction axis | reduction dimension | k axis | contraction dimension",
     "accumulation accumulator reduction initialize pl.when program_id consecutive iterations innermost grid dimension"),
    # --- parallelism on one chip: tpu/details.rst "Multicore TPU configurations", tpu/core_map.md, tpu/pipelining.md megacore
    ("both cores | two cores | multiple cores | all cores | several cores | each core | dual-core | megacore | per-core | "
     "cores chip | core chip | v4 | v5p",
     "megacore two cores chip dimension_semantics parallel core_map TensorCore"),
    ("in parallel | parallelize | parallelise | sequential | sequentially | concurrent | order of steps | iteration order",
     "dimension_semantics parallel arbitrary sequential grid iteration"),
    ("same output | same tile | same block | overwrite | race | clobber | written twice | write same",
     "same output block revisiting consecutive iterations accumulation arbitrary parallel"),
    # --- grid and blocks: grid_blockspec.md, quickstart.md, tpu/details.rst "BlockSpecs and grid iteration"
    ("tile | tiling | chunk | split input | split array", "BlockSpec block_shape index_map grid tile"),
    ("partial tile | partial block | last tile | last block | edge | ragged | remainder | not multiple | not divisible | "
     "divide evenly | uneven | padding | pad | out of bounds | garbage | nonsense | undefined values",
     "block shape not divide evenly out-of-bounds padded unspecified garbage discarded"),
    # (tpu/details.rst "Control flow": cond, fori_loop and for_loop inside a kernel)
    ("loop | for each block | for each tile | iterate | grid step", "grid program_id iteration loop control flow fori_loop"),
    ("which block | which tile | index map | index function | block index", "index_map BlockSpec block indices program_id"),
    # --- dynamic and sparse access: tpu/sparse.md, tpu/details.rst "Placing operands in SMEM"
    ("out of order | data-dependent | data dependent | dynamic index | dynamic slice | dynamic block | lookup | look up | gather | "
     "indirect | table of | skip empty | skip zero | sparse | known at runtime",
     "scalar prefetch PrefetchScalarGridSpec num_scalar_prefetch index_map SMEM data-dependent block-sparse"),
    ("before loop | before grid | before kernel | ahead of grid | prefetch scalar | prefetch indices",
     "scalar prefetch num_scalar_prefetch SMEM pipeline"),
    # --- pipelining and DMA: pipelining.md, tpu/pipelining.md, gpu/pipelining.md, design/async_note.md
    ("overlap | hide latency | latency | while computing | next tile | next block | prefetch next | memory bound | bandwidth bound",
     "pipelining double-buffered overlap asynchronous copy compute HBM VMEM"),
    ("double buffer | double buffering | multiple buffering | triple buffer | buffer count | stages", "double-buffered pipeline pl.Buffered buffer_count multiple buffering"),
    ("copy | transfer | move data | dma | by hand | manual", "async copy DMA make_async_copy semaphore wait start memory_space ANY"),
    ("semaphore | signal | synchronize | synchronise | barrier | hang | hangs | deadlock | never finishes",
     "semaphore wait signal DMA barrier"),
    # --- several chips: tpu/distributed.md, gpu/collective_matmul.md, design/async_note.md
    ("other chip | another chip | neighbouring chip | neighboring chip | neighbour | neighbor | remote | peer | ring | "
     "all-reduce | allreduce | all-gather | allgather | reduce-scatter | collective | shard | multi-chip | multi-device | "
     "multiple chips | multiple devices | across chips | across devices | other devices",
     "remote DMA make_async_remote_copy device_id ppermute collective shard_map distributed ring"),
    # --- random numbers: tpu/prng.rst, tpu/details.rst "Random Number Generation"
    ("random | dropout | noise | seed | stochastic | rng | prng", "pseudo-random number generation prng_seed prng_random_bits jax.random stateful"),
    # --- debugging without hardware: quickstart.md, design/design.md, tpu/details.rst, grid_blockspec.md
    ("~\\bno (?:accelerator|tpu|gpu|hardware)\\b|\\bwithout (?:an? )?(?:accelerator|tpu|gpu|hardware)\\b|\\bon (?:a |the )?cpu\\b|\\bcpu[- ]only\\b | "
     "laptop | debug | step through | print | emulate | simulate | check correctness",
     "interpret mode interpret=True debug CPU debug_print"),
    # --- timing and profiling: profiling.md, gpu_performance_tips.md
    ("time go | time goes | time spent | how long | timing | bottleneck | hotspot | hot spot | slow part | profile | profiler | "
     "trace program | measure time | measure where | too slow | performance counter",
     "profiling profiler trace Perfetto TensorBoard XProf"),
    ("benchmark | timings | too fast | async dispatch | asynchronous dispatch | wall clock", "block_until_ready timeit async dispatch profiling"),
    # --- tracing and compilation: jit-compilation.md, aot.md
    ("recompile | recompiles | recompilation | retrace | every call | each call | different size | different shape | compile cache | caching",
     "jit caching cached recompilation static_argnums tracing shapes"),
    ("first call | first run | first time | warm up | warmup | compile time | compilation time | slow start",
     "compilation overhead first call jit cached compile"),
    ("static | concrete | python int | python value | python control flow | depends on value | traced value | tracer",
     "static_argnums static_argnames tracing concrete abstract tracer"),
    ("ahead of time | ahead-of-time | aot | lower and compile | serialize | save compiled | reuse compiled | export",
     "ahead-of-time lowering compile aot compiled"),
    ("no kernel | pure jax | plain jax | let xla | xla fuse | xla fusion | operator fusion | without pallas",
     "jit XLA fusion compile jax.numpy"),
    # --- transformations of a kernel: quickstart.md (vmap), design/design.md "vmap-of-pallas_call", grad
    ("batch | batched | leading dimension | vmap", "vmap batched pallas_call transformations"),
    ("differentiate | gradient | grad | backward pass | autodiff | jvp | vjp", "grad jvp custom_vjp autodiff transformations"),
    ("in-place | in place | same buffer | reuse buffer | alias | donate", "input_output_aliases aliasing in-place buffer"),
    ("how expensive | cost model | cost estimate | flop count | schedule around", "CostEstimate cost_estimate flops bytes_accessed"),
    ("query chip | query device | query hardware | at runtime", "get_tpu_info TPU generation hardware VMEM capacity"),
    # --- GPU programming model: gpu/reference.md, gpu/pipelining.md, gpu/blackwell_matmul.md
    ("warpgroup | warp group | warp specialization | warp-specialized | producer | consumer | thread group",
     "warpgroup warp specialization num_threads thread_axis barrier plgpu.kernel"),
    ("thread block | cta | l2 | cache reuse | reuse data | swizzle | grouped order | tile order",
     "L2 cache grid swizzle CTA thread block order"),
    ("hopper | h100 | sm90", "Hopper wgmma TMA warpgroup"),
    ("blackwell | b200 | sm100", "Blackwell tcgen05 TMEM"),
    ("nvidia | cuda", "GPU Mosaic GPU Triton"),
    ("going away | deprecate | deprecated | removed | successor | migrate | what should write | what should use",
     "deprecated Mosaic GPU Triton CHANGELOG removed"),
    # --- layout and shape ops: tpu/details.rst "Array Layouts", "Transposition", "Reshapes"
    ("transpose | permute | swap axes", "transposition layout"),
    ("reshape | flatten | collapse dims", "reshapes layout tiling"),
    ("layout | alignment | aligned | ~multiple of \\d+|\\(8, ?128\\)", "array layouts tiling block shape divisible 8 128"),
    # --- one kernel for several platforms: design/design.md, quickstart.md
    ("both gpu tpu | portable | portability | every backend | several backends | all backends", "Pallas design backends Triton Mosaic portable"),
)

# (regex over an error message, the docs' terms for the fault): messages as JAX and Mosaic print them.
_ERRORS: tuple[tuple[str, str], ...] = (
    # tpu/details.rst "Supported operations": what lowers and what does not
    (r"unimplemented primitive|not implemented|notimplementederror|unsupported (?:op|operation|primitive)|failed to legalize|lowering rule",
     "supported operations not supported"),
    # the kernel is called with one ref per input, output and scratch buffer (and the scalar prefetch refs first)
    (r"takes \d+ positional arguments? but \d+ (?:was|were) given", "kernel refs arguments inputs outputs scratch_shapes num_scalar_prefetch"),
    # grid_blockspec.md, tpu/sparse.md: index_map gets the grid indices, then the scalar prefetch refs
    (r"(?:block_?spec|block_mapping|index_map|<lambda>).*positional|positional.*(?:block_?spec|block_mapping|index_map)",
     "index_map grid indices scalar prefetch PrefetchScalarGridSpec num_scalar_prefetch"),
    # tpu/pipelining.md "TPU Memory Spaces", tpu/quickstart.md: memory_space=ANY stays in HBM, copy it by DMA
    (r"memory space any|memoryspace\.any|only allowed on vmem|loads? (?:are|is) only allowed",
     "memory_space pl.ANY HBM make_async_copy DMA VMEM"),
    # jit-compilation.md, thinking_in_jax.md
    (r"concretizationtypeerror|tracerboolconversionerror|tracerintegerconversionerror|abstract tracer|concrete value|nonconcrete",
     "static_argnums static_argnames tracing concrete value jit"),
    (r"tracerarrayconversionerror|numpy array.*tracer", "tracing jax.numpy numpy tracer jit"),
    # aot.md "AOT-compiled functions cannot be transformed"
    (r"lowered and compiled|compiled for a particular signature", "ahead-of-time compiled cannot be transformed aot"),
    # tpu/distributed.md, design/async_note.md: DMA semaphores must be waited
    (r"semaphore|never waited|dma (?:started|in flight)", "semaphore wait DMA async copy start"),
    # tpu/details.rst, tpu/pipelining.md, pipelining.md: VMEM budget
    (r"resource_exhausted|scoped (?:vmem|allocation)|vmem limit|out of (?:vmem|memory)|exceeded",
     "vmem_limit_bytes scoped VMEM limit CompilerParams block size"),
    # grid_blockspec.md, tpu/details.rst "BlockSpecs and grid iteration", gpu/reference.md
    (r"block shape|last (?:two )?dimensions?|divisible by|multiple of \d+", "block shape divisible last two dimensions BlockSpec"),
    (r"reductions? over|reduce_\w+", "reductions supported"),
    (r"layout|relayout|shape_cast|vector\.\w+|transpose", "array layouts reshapes transposition"),
    (r"dimension_semantics|megacore|core_parallel", "dimension_semantics parallel megacore"),
)


def _compile(triggers: str) -> tuple[tuple[frozenset[str], ...], tuple[re.Pattern, ...]]:
    phrases, regexes = [], []
    for t in (x.strip() for x in triggers.split(" | ")):
        if t.startswith("~"):
            regexes.append(re.compile(t[1:]))
        elif t:
            words = re.findall(r"[\w']+", t.lower())
            toks = frozenset(tokenize(t))
            if len(words) > 1 and len(toks) < len(words):
                # a stop word carries the meaning ("no kernel", "how big", "on-chip"): match the phrase as written
                regexes.append(re.compile(r"\b" + r"[\s-]+".join(map(re.escape, words)) + r"\w*"))
            elif toks:
                phrases.append(toks)
    return tuple(phrases), tuple(regexes)


@lru_cache(maxsize=1)
def _compiled() -> tuple:
    return tuple((*_compile(trig), terms) for trig, terms in _CONCEPTS)


_COMPILED_ERR = tuple((re.compile(p), t) for p, t in _ERRORS)


def expansion(query: str, is_error: bool = False) -> str:
    """The docs' terms for the concepts ``query`` names in other words ("" if none), each concept once.

    With ``is_error`` the error-message map is consulted too."""
    low = " ".join(query.lower().split())
    words = set(tokenize(query))
    groups = [terms for phrases, regexes, terms in _compiled() if any(p <= words for p in phrases) or any(r.search(low) for r in regexes)]
    if is_error:
        groups += [terms for pat, terms in _COMPILED_ERR if pat.search(low)]
    return " ".join(dict.fromkeys(groups))
