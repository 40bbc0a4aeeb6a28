"""The judge's compile stage: the chip's real compiler, run here without the chip (mk/harness/chipcheck.py).

Kernels that ``.lower()`` accepts and the compiler refuses: scoped VMEM over v5e's 16 MiB (fits v6e's 32 MiB),
shared memory over H100's 227 KiB per block. Without the compilers the verdict says what ran instead."""

from __future__ import annotations

import textwrap
from pathlib import Path

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
import pytest

from mk import chips
from mk.errors import TargetError
from mk.harness import chipcheck, evaluate
from mk.harness.compiler import gpu_kernels, tpu_kernels
from mk.harness.envelope import Envelope
from mk.harness.heldout import heldout_scales
from mk.task import ArgSpec, Scale, StaticArg, Task, Tolerance

needs_libtpu = pytest.mark.skipif(chips.compiler_missing("tpu") is not None, reason="libtpu is not installed")
needs_cuda = pytest.mark.skipif(chips.compiler_missing("gpu") is not None, reason="the CUDA compiler is not installed")


def ref_scale(x):
    return x * 2.0 + 1.0


# three scales: ci (judged), full (declared; under scale="ci" compiled only) and wide (one VMEM-hungry block)
SCALE_TASK = Task("chip_scale", ref_scale, (ArgSpec("x", ("rows", 1024), "float32"),),
                  {"ci": Scale("ci", {"rows": 64}), "full": Scale("full", {"rows": 8192})}, default_scale="ci",
                  tolerance=Tolerance(1e-6, 1e-6))

TPU_ELEMENTWISE = textwrap.dedent('''
    import jax
    from jax.experimental import pallas as pl

    def _body(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2.0 + 1.0

    def kernel(x, *, block_rows: int = 32):
        rows, d = x.shape
        br = min(block_rows, rows)
        return pl.pallas_call(_body, grid=(pl.cdiv(rows, br),), in_specs=[pl.BlockSpec((br, d), lambda i: (i, 0))],
                              out_specs=pl.BlockSpec((br, d), lambda i: (i, 0)),
                              out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)
''')


@needs_libtpu
def test_tpu_kernel_compiled_for_v6e_at_every_scale_with_its_vmem():
    r = evaluate(SCALE_TASK, TPU_ELEMENTWISE, target="tpu", scale="ci", measure=False)
    assert r.status == "correct", r.reason
    assert r.compile_check.startswith("compiled for v6e at ci"), r.compile_check
    by_scale = {c.scale: c for c in r.compiled}
    assert by_scale["full"].ok and not by_scale["full"].judged  # a declared scale the cases did not run
    assert by_scale["ci"].judged
    k = by_scale["full"].kernels[0]
    # 32 rows x 1024 f32 = 128 KiB a block; input and output, double-buffered: 512 KiB (the compiler's own count)
    assert k.scoped_vmem_bytes == 4 * 32 * 1024 * 4
    assert by_scale["full"].limits["scoped_vmem_bytes"] == 32 << 20
    assert "VMEM of 32.00 MiB" in by_scale["full"].summary()
    assert "compiled for v6e" in r.step("compile").detail


@needs_libtpu
def test_a_compiled_declared_size_running_the_judged_code_is_in_the_envelope():
    # full (8192 rows) is not run: it compiled for v6e, and its program runs the judged sizes' code (the same
    # operations; the grid loop repeated at ci too), so the envelope accepts exactly it, and says why
    from mk.harness.envelope import Envelope

    r = evaluate(SCALE_TASK, TPU_ELEMENTWISE, target="tpu", scale="ci", measure=False, also_chips=["v5e"], claim=True)
    assert r.status == "correct", r.reason
    assert list(r.covered) == ["full"] and r.covered["full"]["chips"] == ["v6e", "v5e"]
    env = Envelope.from_dict(r.envelope)
    assert env.check([(8192, 1024)]) is None
    assert env.check([(8192 + 64, 1024)]) is not None  # beyond the verified rule and not the compiled point
    assert any("also exactly at full" in line and "v6e, v5e" in line for line in env.lines())
    # the written guard and the judge's reading of the declaration agree
    from mk.harness.envelope import declared_outside, declared_rule

    rule = declared_rule("import jax\n" + env.guard_source())
    assert declared_outside(rule, [jax.ShapeDtypeStruct((8192, 1024), jnp.float32)], {}) is None
    assert "x[0] is 8256" in declared_outside(rule, [jax.ShapeDtypeStruct((8256, 1024), jnp.float32)], {})
    assert "float32" in declared_outside(rule, [jax.ShapeDtypeStruct((8192, 1024), jnp.bfloat16)], {})


@needs_libtpu
def test_a_declared_size_running_other_code_is_compiled_but_not_claimed():
    # at 8192 rows the kernel takes another plan at trace time (a doubled body): compiled, but no case ran that code
    source = TPU_ELEMENTWISE.replace("    o_ref[...] = x_ref[...] * 2.0 + 1.0",
                                     "    o_ref[...] = x_ref[...] * 2.0 + 1.0\n"
                                     "    if x_ref.shape[0] > 64:\n"
                                     "        o_ref[...] = o_ref[...] + 0.0 * x_ref[...]")
    source = source.replace("br = min(block_rows, rows)", "br = min(block_rows if rows < 4096 else 128, rows)")
    assert source.count("128") == 1 and source.count("if x_ref") == 1
    r = evaluate(SCALE_TASK, source, target="tpu", scale="ci", measure=False, claim=True)
    assert r.status == "correct", r.reason
    assert r.covered == {} and next(c for c in r.compiled if c.scale == "full").ok
    assert any("scale full compiled for v6e but is not claimed: its program runs other operations" in f for f in r.flags), r.flags
    from mk.harness.envelope import Envelope

    assert Envelope.from_dict(r.envelope).check([(8192, 1024)]) is not None


@needs_libtpu
def test_scoped_vmem_over_v5e_limit_is_compile_error_on_v5e_only():
    # 1536 rows x 1024 f32 = 6 MiB a block, 24 MiB double-buffered in and out: over v5e's 16 MiB, under v6e's 32 MiB
    config = {"block_rows": 1536}
    task = SCALE_TASK.with_scales({"ci": Scale("ci", {"rows": 3072})})
    source = TPU_ELEMENTWISE.replace("def kernel", "CONFIG_SPACE = {'block_rows': [32, 1536]}\n\ndef kernel")
    v5e = evaluate(task, source, target="tpu", scale="ci", measure=False, config=config, chip="v5e")
    assert v5e.status == "compile_error", v5e.reason
    assert "v5e" in v5e.reason and "scale ci" in v5e.reason
    assert "RESOURCE_EXHAUSTED" in v5e.reason and ("scoped" in v5e.reason.lower() or "vmem" in v5e.reason.lower())
    assert "16.00M" in v5e.reason  # the limit, in the compiler's own words
    v6e = evaluate(task, source, target="tpu", scale="ci", measure=False, config=config, chip="v6e", also_chips=["v5e"])
    assert v6e.status == "correct", v6e.reason  # v5e compiled for information: its refusal is a flag, not the verdict
    assert v6e.compiled[0].kernels[0].scoped_vmem_bytes == 24 << 20
    on_v5e = [c for c in v6e.compiled if c.chip == "v5e"]
    assert on_v5e and not any(c.ok for c in on_v5e)
    assert any("does not compile for v5e at scale ci" in f for f in v6e.flags), v6e.flags
    assert "also for v5e at no scale" in v6e.compile_check
    assert "fresh size" in v6e.compile_check and "size-" not in v6e.compile_check


GPU_MATMUL = textwrap.dedent('''
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import triton as pltriton

    def _body(x_ref, y_ref, o_ref):
        o_ref[...] = jnp.dot(x_ref[...], y_ref[...], preferred_element_type=jnp.float32).astype(o_ref.dtype)

    def kernel(x, y, *, bm: int = 64, bn: int = 64):
        m, k = x.shape
        n = y.shape[1]
        return pl.pallas_call(_body, grid=(pl.cdiv(m, bm), pl.cdiv(n, bn)),
                              in_specs=[pl.BlockSpec((bm, k), lambda i, j: (i, 0)), pl.BlockSpec((k, bn), lambda i, j: (0, j))],
                              out_specs=pl.BlockSpec((bm, bn), lambda i, j: (i, j)),
                              out_shape=jax.ShapeDtypeStruct((m, n), x.dtype),
                              compiler_params=pltriton.CompilerParams(num_warps=4, num_stages=1))(x, y)
''')


def ref_mm(x, y):
    return jnp.dot(x, y, preferred_element_type=jnp.float32).astype(x.dtype)


# Triton blocks are powers of two: the held-out size doubles m and n, keeps k
MM_TASK = Task("chip_mm", ref_mm, (ArgSpec("x", ("m", "k"), "float16"), ArgSpec("y", ("k", "n"), "float16")),
               {"ci": Scale("ci", {"m": 128, "k": 1024, "n": 128})}, tolerance=Tolerance(2e-2, 2e-2),
               heldout=(Scale("heldout", {"m": 256, "k": 1024, "n": 256}),))


@needs_cuda
def test_gpu_shared_memory_over_h100_limit_is_compile_error():
    # a 128 x 1024 and a 1024 x 128 f16 block: 512 KiB of shared memory, where one H100 block may have 227 KiB
    source = GPU_MATMUL.replace("def kernel", "CONFIG_SPACE = {'bm': [64, 128], 'bn': [64, 128]}\n\ndef kernel")
    r = evaluate(MM_TASK, source, target="gpu", measure=False, config={"bm": 128, "bn": 128})
    assert r.status == "compile_error", r.reason
    assert "Shared memory size limit exceeded" in r.reason and "232448" in r.reason
    assert "h100" in r.reason.lower() and "scale ci" in r.reason


@needs_cuda
def test_default_gpu_pallas_call_lowers_to_mosaic_gpu_and_compiles():
    # without Triton compiler params JAX lowers a GPU pallas_call to Mosaic GPU (mosaic_gpu_v2); compiled in another
    # process than the one that exported it, the call is JIT-linked against Mosaic GPU's host runtime, which the
    # compile worker must have loaded (it once failed every such kernel: "Failed to lookup host symbol")
    from tests.kernels.chip_compile import compiled

    def kernel(x):
        return pl.pallas_call(lambda x_ref, o_ref: o_ref.__setitem__(..., jnp.tanh(x_ref[...])),
                              out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)

    result = compiled(kernel, jax.ShapeDtypeStruct((16, 128), jnp.float32))
    assert result.ok, result.error


@needs_cuda
def test_a_fresh_size_the_chip_refuses_narrows_the_verdict():
    # small blocks at the judged sizes (ci and the derived held-out scale, m and n untied), 128 x 128 blocks of the
    # whole K elsewhere: 512 KiB of shared memory at every size the judge draws, over H100's 227 KiB; the judged
    # scales compile, so the verdict stands, with a flag, for exactly the sizes judged (evaluate._narrow)
    source = GPU_MATMUL.replace("    n = y.shape[1]\n", "    n = y.shape[1]\n"
                                "    bm = bn = 16 if (m, n) in ((128, 128), (256, 384)) else 128\n")
    assert source != GPU_MATMUL
    task = Task("chip_mm_fresh", ref_mm, (ArgSpec("x", ("m", 1024), "float16"), ArgSpec("y", (1024, "n"), "float16")),
                {"ci": Scale("ci", {"m": 128, "n": 128})},
                tolerance=Tolerance(2e-2, 2e-2))  # no declared held-out size: the judge draws fresh ones
    assert [(s.dims["m"], s.dims["n"]) for s in heldout_scales(task)] == [(256, 384)]
    r = evaluate(task, source, target="gpu", measure=False)
    assert r.status == "correct", r.reason
    fresh = [c for c in r.compiled if c.scale.startswith("size-")]
    assert fresh and not any(c.ok for c in fresh) and all(c.ok for c in r.compiled if c not in fresh)
    assert any(f.startswith("cannot be built at the fresh size") and "Shared memory size limit exceeded" in f
               for f in r.flags), r.flags
    assert "fresh size" not in r.compile_check and "at ci" in r.compile_check
    assert not any(c.scale.startswith("size-") for c in r.cases)  # not judged there
    env = Envelope.from_dict(r.envelope)
    assert env.check([(128, 1024), (1024, 128)]) is None and env.check([(256, 1024), (1024, 384)]) is None
    assert env.check([(384, 1024), (1024, 128)]) is not None  # a size between them: never judged


@needs_cuda
@pytest.mark.parametrize("fixture, status", [("r12_control_mosaic_gpu_blocks.py", "correct"),
                                             ("r12_control_mosaic_gpu_copies.py", "unverifiable_here")])
def test_a_mosaic_gpu_kernel_is_compiled_for_the_chip_and_judged_or_unverifiable(fixture, status):
    # a Mosaic GPU kernel (no Triton compiler params): compiled for H100 by the compile stage either way; one the CPU
    # interpreters cannot run (copy_gmem_to_smem has no discharge rule) is unverifiable_here, naming what stopped it
    task = Task("chip_mgpu_tanh", lambda x, y: jnp.tanh(x) * y + 0.5 * x,
                (ArgSpec("x", ("rows", 128), "float32"), ArgSpec("y", ("rows", 128), "float32")),
                {"ci": Scale("ci", {"rows": 16})})
    r = evaluate(task, (Path(__file__).parent / "adversarial" / fixture).read_text(), target="gpu", measure=False)
    assert r.status == status, r.reason
    assert r.compile_check.startswith("compiled for h100 at ci"), r.compile_check
    if status == "unverifiable_here":
        assert "cannot execute this kernel" in r.reason and "copy_gmem_to_smem" in r.reason, r.reason


@needs_cuda
def test_gpu_kernel_figures_from_ptxas():
    r = evaluate(MM_TASK, GPU_MATMUL.replace("k = x.shape", "k = x.shape").replace("bm: int = 64", "bm: int = 16")
                 .replace("bn: int = 64", "bn: int = 16"), target="gpu", measure=False)
    assert r.status == "correct", r.reason
    k = next(k for k in r.compiled[0].kernels if k.kind == "pallas")
    assert k.shared_memory_bytes is not None and 0 < k.shared_memory_bytes <= 232448
    assert k.registers is not None and k.registers > 0
    assert k.spill_store_bytes == 0
    assert k.threads == [128, 1, 1] and k.grid[:2] == [8, 8]


def test_without_the_compiler_the_verdict_says_lowered_only(monkeypatch):
    monkeypatch.setattr(chipcheck, "compiler_missing", lambda kind: "libtpu is not installed")
    r = evaluate(SCALE_TASK, TPU_ELEMENTWISE, target="tpu", scale="ci", measure=False)
    assert r.status == "correct", r.reason
    assert r.compile_check.startswith("lowered only: libtpu is not installed")
    assert "mk[aot]" in r.compile_check
    assert r.compiled == []


@needs_libtpu
def test_a_compile_past_its_deadline_is_a_timeout_naming_the_phase():
    from jax import export

    exported = export.export(jax.jit(lambda x: jnp.sin(x) @ x.T), platforms=["tpu"])(jax.ShapeDtypeStruct((2048, 2048), jnp.float32))
    with pytest.raises(chipcheck.CompileRefused) as info:
        chipcheck.compile_scales(chips.get_chip("v5e"), {"ci": exported.serialize()}, {"ci"}, memory_mb=4096, deadline_s=0.05)
    assert info.value.status == "timeout" and "chip compile phase" in info.value.reason


def test_chips_are_data():
    assert set(chips.chip_names("tpu")) >= {"v5e", "v5p", "v6e", "v7x"}
    assert set(chips.chip_names("gpu")) >= {"h100", "h200"}
    assert chips.get_chip("tpu7x").name == "v7x"
    assert chips.chip_for("tpu").name == "v6e" and chips.chip_for("gpu").name == "h100"
    assert chips.chip_for("cpu") is None
    with pytest.raises(TargetError, match="not a chip for target"):
        chips.chip_for("tpu", "h100")
    with pytest.raises(TargetError, match="unknown chip"):
        chips.get_chip("v9z")
    proto = chips.gpu_target_config(chips.get_chip("h200"))
    assert 'device_description_str: "NVIDIA H200"' in proto and "shared_memory_per_block_optin: 232448" in proto


def test_compiler_messages_summarised_with_the_limit_and_the_buffer():
    text = ("RESOURCE_EXHAUSTED: XLA:TPU compile permanent error. Ran out of memory in memory space vmem. Used 161.83M of "
            "127.94M vmem. Exceeded vmem capacity by 33.89M.\n\nProgram vmem requirement 161.83M:\n    scoped          161.83M\n\n"
            "  Largest program allocations in vmem:\n\n  1. Size: 64.00M\n     Operator: op_name=\"jit(call)/pallas_call\"\n")
    line = chipcheck.summarize_error(text)
    assert "Used 161.83M of 127.94M vmem" in line and "largest buffer 64.00M" in line and "\n" not in line
    assert chipcheck.summarize_error("JaxRuntimeError: RESOURCE_EXHAUSTED: Shared memory size limit exceeded: requested "
                                     "1048576, available: 232448").startswith("RESOURCE_EXHAUSTED: Shared memory")


def test_figure_parsers(tmp_path):
    hlo = ('  %my_mm.1 = bf16[1024,1024]{1,0} custom-call(%a, %b), custom_call_target="tpu_custom_call", '
           'backend_config={"custom_call_config":{"used_scoped_memory_configs":[{"memory_space":"1","offset":"0","size":"1310720"}]}}')
    assert tpu_kernels(hlo) == [{"name": "my_mm", "instruction": "my_mm.1", "kind": "pallas", "scoped_vmem_bytes": 1310720}]
    from mk.harness.compiler import static_cycles

    (tmp_path / "llo").mkdir()
    (tmp_path / "llo" / "my_mm.1_static_llo_profile.textproto").write_text(
        'hlo_op_estimate {\n  hlo_op_name: "my_mm.1"\n  estimated_cycles: 40838\n  num_equivalent_hlos: 1\n}\n')
    assert static_cycles(tmp_path / "llo") == {"my_mm.1": 40838}
    (tmp_path / "m.thunk_sequence.txt").write_text(
        "001: kCustomKernel [source | sink] k grid: [16, 16, 1] threads: [128, 1, 1]  shared_memory: 16384 bytes\n"
        "002: kWhile        [prev=001 (1) | next=004 (1)]\n  body:\n"
        "    003: kCustomKernel [source | sink] wrapped_evil grid: [2, 1, 1] threads: [32, 1, 1]  shared_memory: 0 bytes\n"
        "004: kCustomKernel [prev=002 (1) | sink        ] loop_multiply_fusion grid: [2048, 1, 1] threads: [128, 1, 1]  shared_memory: 0 bytes\n"
        "005: kKernel loop_add_fusion grid: [4, 1, 1] threads: [256, 1, 1]  shared_memory: 0 bytes\n")
    (tmp_path / "m.thunk_metadata.txt").write_text("".join(
        f'thunk_metadata {{\n  thunk_info {{\n    profile_annotation: "{name}"\n    thunk_id: {i}\n  }}\n}}\n'
        for i, name in [(1, "pallas_call.0"), (3, "pallas_call.2"), (4, "loop_multiply_fusion"), (5, "loop_add_fusion")]))
    hlo = ('  %pallas_call.0 = f32[64,64]{1,0} custom-call(%a), custom_call_target="__gpu$xla.gpu.triton", backend_config={name = "k"}\n'
           '  %pallas_call.2 = f32[64,64]{1,0} custom-call(%c), custom_call_target="__gpu$xla.gpu.triton", backend_config={name = "wrapped_evil"}\n'
           '  %loop_multiply_fusion = f32[64,64]{1,0} fusion(%b), kind=kLoop, calls=%fused_multiply\n'
           '  ROOT %loop_add_fusion = f32[64,64]{1,0} fusion(%d), kind=kLoop, calls=%fused_add\n')
    found = gpu_kernels(tmp_path, "sm_90a", hlo)
    assert found[0] == {"name": "k", "kind": "pallas", "grid": [16, 16, 1], "threads": [128, 1, 1], "shared_memory_bytes": 16384}
    # by the instruction launched, never the name: a candidate's kernel named like XLA's is still a Pallas kernel
    assert [(k["name"], k["kind"]) for k in found[1:]] == [("wrapped_evil", "pallas"), ("loop_multiply_fusion", "xla"),
                                                         ("loop_add_fusion", "xla")]
    assert gpu_kernels(tmp_path, "sm_90a", "")[1]["kind"] == "xla"  # no kernel custom call in the program


def test_header_lines_one_per_chip():
    from mk.harness.results import CompileResult, KernelFigures, compile_lines

    lim = {"scoped_vmem_bytes": 16 << 20}
    rows = [CompileResult(chip="v5e", scale="ci", ok=True, limits=lim, kernels=[KernelFigures(name="k", scoped_vmem_bytes=1 << 20)]),
            CompileResult(chip="v5e", scale="size-8x128", ok=True, limits=lim, kernels=[KernelFigures(name="k", scoped_vmem_bytes=2 << 20)]),
            CompileResult(chip="v5e", scale="full", ok=False, judged=False, limits=lim, error="RESOURCE_EXHAUSTED: scoped 28.00M"),
            CompileResult(chip="h100", scale="ci", ok=True, limits={"shared_memory_per_block_bytes": 232448},
                          kernels=[KernelFigures(name="t", shared_memory_bytes=16384, registers=96, spill_store_bytes=8)])]
    lines = compile_lines(rows)
    assert lines[0] == ("v5e (scoped VMEM limit 16.00 MiB): ci 1.00 MiB; full does not compile (RESOURCE_EXHAUSTED: scoped "
                        "28.00M); 1 fresh sizes: 2.00 MiB")
    assert lines[1] == "h100 (shared memory limit 227.0 KiB a block): ci 16.0 KiB, 96 registers, 8 B spilled"


def test_code_paths_cover_a_size_only_when_its_loops_repeated_in_a_judged_size():
    from mk.harness.program import CodePaths, paths_covered

    at = CodePaths("a", (256, 1))
    assert paths_covered(at, [CodePaths("a", (2, 1))]) is None
    assert "loop 1 runs 256 times there and once" in paths_covered(at, [CodePaths("a", (1, 1))])
    assert paths_covered(at, [CodePaths("a", (1, 1)), CodePaths("a", (3, 1))]) is None
    assert "other operations" in paths_covered(at, [CodePaths("b", (2, 1))])
    unknown = CodePaths("a", (None, 1))
    assert "unknown number" in paths_covered(unknown, [CodePaths("a", (1, 1))])
    assert paths_covered(unknown, [CodePaths("a", (4, 1))]) is None
    assert paths_covered(unknown, [CodePaths("a", (None, 1))]) is None


@needs_libtpu
def test_a_scale_too_big_for_this_cpu_is_compiled_for_the_chip_only():
    # 2M x 1024 f32 in and out: 16 GiB for the reference alone (XLA's memory analysis), three times that for the
    # cases, over the judge's limit: the judge runs ci, compiles huge for v6e, and says why (it was an OOM kill)
    task = SCALE_TASK.with_scales({"ci": Scale("ci", {"rows": 64}), "huge": Scale("huge", {"rows": 2 << 20})})
    r = evaluate(task, TPU_ELEMENTWISE, target="tpu", measure=False)
    assert r.status == "correct", r.reason
    assert "huge" not in r.scales and "ci" in r.scales
    assert any(f.startswith("scale huge not run on this CPU: its cases need about") and "memory analysis" in f for f in r.flags), r.flags
    huge = next(c for c in r.compiled if c.scale == "huge")
    assert huge.ok and not huge.judged
    # asked for (no --scale), the size is part of the verdict: a chip that refuses it is a compile_error
    source = TPU_ELEMENTWISE.replace("def kernel", "CONFIG_SPACE = {'block_rows': [32, 1536]}\n\ndef kernel")
    v5e = evaluate(task, source, target="tpu", measure=False, config={"block_rows": 1536}, chip="v5e")
    assert v5e.status == "compile_error" and "scale huge" in v5e.reason and "too big to run on this CPU" in v5e.reason, v5e.reason


@needs_cuda
@pytest.mark.slow
def test_the_moe_kernel_written_before_its_fit_is_refused_for_h100_at_full():
    # judged at every scale as `mk eval jaxbench:10p_Sparse_MoE <kernel> --target gpu` does: full is too big to run
    # on this CPU (about 45 GiB), so it is compiled only, and H100's refusal there is the verdict
    from pathlib import Path

    from mk.suite import load_builtin

    kernel = Path(__file__).parent / "kernels" / "before" / "moe_gpu_10p.py"
    r = evaluate(load_builtin("jaxbench:10p_Sparse_MoE"), kernel, target="gpu", measure=False)
    assert r.status == "compile_error", r.reason
    assert "scale full" in r.reason and "Shared memory size limit exceeded" in r.reason and "232448" in r.reason


def test_a_declared_size_extends_the_envelope_only_along_axes_the_judged_sizes_varied():
    from mk.harness import build_suite
    from mk.harness.envelope import Envelope

    def ref(x, k):
        return x * k

    task = Task("ext", ref, (ArgSpec("x", ("rows", 1024), "float32"),), {"ci": Scale("ci", {"rows": 64})},
                static=(StaticArg("k", 2),))
    suite = build_suite(task, seeds=(0,), distributions=("normal",))
    env = Envelope.of(task, suite)
    assert env.extends_to([(8192, 1024)], {"k": 2}) is None  # rows were varied: past the judged range, same code
    assert "x[1] is 2048 and no judged size varied it" in env.extends_to([(8192, 2048)], {"k": 2})
    assert "static k=3" in env.extends_to([(8192, 1024)], {"k": 3})  # a baked 2 would be wrong there


@needs_libtpu
@pytest.mark.slow
@pytest.mark.parametrize("fixture", ["program_id.py", "baked_constant.py"])
def test_a_kernel_wrong_only_at_a_claimed_size_is_incorrect_there(fixture):
    # a red team's kernels (tests/fixtures/claimed_size/): the same operations at full as at the judged sizes, wrong
    # at full only; before one case ran at a size the envelope claims, full was claimed for both
    from pathlib import Path

    source = (Path(__file__).parent / "fixtures" / "claimed_size" / fixture).read_text()
    r = evaluate(SCALE_TASK, source, target="tpu", scale="ci", measure=False, claim=True)
    assert r.status == "incorrect" and "declared scale full" in r.reason, r.reason
    assert r.covered == {}


@needs_libtpu
def test_tpu_compiles_record_libtpus_static_schedule_as_an_estimate():
    """Issue 23's signal without the device: each Pallas kernel's cycles from libtpu's static schedule (an estimate,
    labelled so), XLA's own fusions apart, and the bytes the program moves. Per-step overhead shows: 8-row blocks of
    an 8192 x 1024 f32 elementwise kernel (1024 steps) are estimated at 391,940 cycles, 512-row blocks at 40,838."""
    from mk.harness.chipcheck import compile_function

    def compiled(fn, *structs, chip):  # an estimate worker: libtpu's static schedule on (never the verdict's worker)
        return compile_function(fn, *structs, chip=chip, estimate=True)

    def blocked(rows):
        def body(x_ref, o_ref):
            o_ref[...] = x_ref[...] * 2.0 + 1.0
        return lambda x: pl.pallas_call(body, grid=(x.shape[0] // rows,), in_specs=[pl.BlockSpec((rows, 1024), lambda i: (i, 0))],
                                        out_specs=pl.BlockSpec((rows, 1024), lambda i: (i, 0)),
                                        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)

    x = jax.ShapeDtypeStruct((8192, 1024), jnp.float32)
    small, large = (compiled(blocked(rows), x, chip="v6e") for rows in (8, 512))
    (ks,), (kl,) = small.kernels, large.kernels
    assert ks.estimated_cycles > 4 * kl.estimated_cycles > 0
    assert "cycles estimated by libtpu's static schedule" in large.summary()
    assert large.io_bytes == 2 * 8192 * 1024 * 4 and large.xla_estimated_cycles is None
    # each block read once (mk/harness/mosaic_traffic.py): the kernel moves its input and output once
    assert small.kernel_bytes == large.kernel_bytes == 2 * 8192 * 1024 * 4 and not large.traffic_unknown
    xla = compiled(lambda x: x * 2.0 + 1.0, x, chip="v6e")
    assert not xla.kernels and xla.xla_estimated_cycles > 0 and xla.bytes_accessed == xla.io_bytes

    def rereads(x):  # block index i % 2: 16 fetches of 2 distinct 512 x 1024 f32 blocks
        return pl.pallas_call(lambda x_ref, o_ref: o_ref.__setitem__(..., x_ref[...] + 1.0), grid=(16,),
                              in_specs=[pl.BlockSpec((512, 1024), lambda i: (i % 2, 0))],
                              out_specs=pl.BlockSpec((512, 1024), lambda i: (i, 0)),
                              out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)

    from mk.harness.estimate import program_seconds
    from mk.hardware import get_spec

    again, spec = compiled(rereads, x, chip="v6e"), get_spec("v6e")
    assert again.kernel_bytes == (16 + 16) * 512 * 1024 * 4  # 16 input fetches (2 distinct blocks) and 16 writes
    assert program_seconds(again, spec)[0] >= again.kernel_bytes / spec.hbm_bandwidth
    # a kernel called in an XLA loop: the schedule gives the body once, so the program has no estimate
    from mk.harness.estimate import NoEstimate

    # (2048 rows: libtpu's schedule of this loop over an 8192-row buffer takes 25 s, over 2048 rows 0.6 s)
    looped = compiled(lambda x: jax.lax.fori_loop(0, 10, lambda i, y: blocked(512)(y), x),
                      jax.ShapeDtypeStruct((2048, 1024), jnp.float32), chip="v6e")
    assert looped.ok and looped.loops == 1 and large.loops == 0
    with pytest.raises(NoEstimate, match="XLA loop"):
        program_seconds(looped, spec)


@needs_libtpu
def test_without_the_device_a_tpu_verdict_carries_the_compilers_estimate_labelled_so():
    """Timing asked for and no TPU here: the verdict's speedup stays unmeasured and an estimate beside it says what
    it is (libtpu's static schedule against the bytes over HBM bandwidth, the reference compiled the same way), at
    the largest size the verdict compiled (full: claimed when the verdict claims it, compiled only and labelled
    "not judged there" when not: the size the user runs, where tuning ranks configs)."""
    r = evaluate(SCALE_TASK, TPU_ELEMENTWISE, target="tpu", scale="ci", claim=True)
    assert r.status == "correct", r.reason
    assert r.speedup is None and r.estimate is not None, r.flags
    e = r.estimate
    assert e.chip == "v6e" and e.scale == "full" and e.estimated_speedup > 0 and e.kernel_bound in ("compute", "memory")
    assert "an estimate, not a measurement" in e.label() and "static schedule" in e.label()
    assert e.judged and "not judged there" not in e.label()
    unclaimed = evaluate(SCALE_TASK, TPU_ELEMENTWISE, target="tpu", scale="ci")
    u = unclaimed.estimate
    assert u is not None and u.scale == "full" and "full" not in unclaimed.scales and not u.judged
    assert "at full (compiled there, not judged there)" in u.label() and u.kernel_s == pytest.approx(e.kernel_s)
    assert evaluate(SCALE_TASK, TPU_ELEMENTWISE, target="tpu", scale="ci", measure=False).estimate is None
