"""Every integrity rule against the candidate that tries to break it (tests/adversarial/README.md).

Each fixture runs through the real judge, ``mk.harness.evaluate``, on a small
task: the static check first, then the sandboxed worker (its own process,
timeouts, memory limit, runtime policy), then the verdict computed here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mk.harness import build_suite, evaluate
from mk.harness.compare import check_inputs
from mk.loaders import load_task
from mk.task import ArgSpec, Init, Scale, StaticArg, Task, Tolerance

ADV = Path(__file__).parent / "adversarial"


def ref_tanh_mix(x, y):
    return jnp.tanh(x) * y + 0.5 * x


def ref_rmsnorm(x, w, eps):
    return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + eps) * w


def ref_small(x):
    return 0.05 * jnp.tanh(x)


def ref_rmsnorm16(x, w):
    xf = x.astype(jnp.float32)
    return (xf * jax.lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + 1e-5)).astype(jnp.float16) * w


def ref_matmul(x, y):
    return jnp.dot(x, y, precision=jax.lax.Precision.HIGHEST)


def _ci_only(task: Task) -> Task:
    return task.with_scales({"ci": task.scales["ci"]})


TASKS = {
    # two scales, so overfitting one shape shows (rule 10)
    "tanh": Task("adv_tanh_mix", ref_tanh_mix, (ArgSpec("x", ("rows", 128), "float32"), ArgSpec("y", ("rows", 128), "float32")),
                 {"ci": Scale("ci", {"rows": 16}), "wide": Scale("wide", {"rows": 24})}, default_scale="ci"),
    "rms": Task("adv_rmsnorm", ref_rmsnorm, (ArgSpec("x", ("rows", 128), "float32"), ArgSpec("w", (128,), "float32")),
                {"ci": Scale("ci", {"rows": 16})}, static=(StaticArg("eps", 1e-6),), tolerance=Tolerance(1e-5, 1e-5)),
    # a deliberately loose tolerance (outputs are at most 0.05, atol is 0.1): zeros and constants pass it (rule 4)
    "small": Task("adv_small", ref_small, (ArgSpec("x", (16, 128), "float32"),), {"ci": Scale("ci")}, tolerance=Tolerance(0.1, 0.0)),
    # float16 activations: the suite's large_magnitude case has outliers past sqrt(float16 max) (rule 20)
    "rms16": Task("adv_rmsnorm16", ref_rmsnorm16, (ArgSpec("x", (16, 128), "float16"), ArgSpec("w", (128,), "float16")),
                  {"ci": Scale("ci")}, tolerance=Tolerance(1e-2, 1e-2)),
    # round 3 tasks: an index-valued epilogue, a boolean output, a reference of erf only, a large loose-atol output
    "top1": Task("adv_top1", lambda x, w: jnp.argmax(jnp.dot(x, w, precision=jax.lax.Precision.HIGHEST), axis=-1),
                 (ArgSpec("x", (16, 256), "float32"), ArgSpec("w", (256, 128), "float32")), {"ci": Scale("ci")}),
    "mask": Task("adv_positive_mask", lambda x: x > 0.0, (ArgSpec("x", (16, 128), "float32"),), {"ci": Scale("ci")}),
    "erf": Task("adv_erf", lambda x: jax.lax.erf(x), (ArgSpec("x", (16, 128), "float32"),), {"ci": Scale("ci")}),
    "smallbig": Task("adv_small_big", lambda x: 0.05 * jnp.tanh(x), (ArgSpec("x", (1024, 2048), "float32"),),
                     {"ci": Scale("ci")}, tolerance=Tolerance(0.1, 0.0)),
    # fp32 HIGHEST reference with a tight tolerance (rule 11)
    # round 5: two dims the held-out scale moves by the same unit (so n = m + 32 at every judged size)
    "rowmean": Task("adv_rowmean", lambda x: jnp.mean(x, axis=-1, keepdims=True) * x, (ArgSpec("x", ("m", "n"), "float32"),),
                    {"ci": Scale("ci", {"m": 16, "n": 48})}),
    # round 6 (backward kernels): a gated sqrt whose reference gradient has NaNs (the example RMSNorm is grms_ci below)
    "gsqrt": Task("adv_gated_sqrt", lambda x, w: jnp.where(x > 0, jnp.sqrt(x), 0.0) * w,
                  (ArgSpec("x", ("rows", "hidden"), "float32"), ArgSpec("w", ("hidden",), "float32", Init("normal", mean=1.0, std=0.1))),
                  {"ci": Scale("ci", {"rows": 64, "hidden": 256})}),
    # rounds 6 to 9: the example RMSNorm (bfloat16) at ci only (its held-out and fresh sizes are derived from ci); with its
    # full scale (8x2048x4096) each backward fixture spent about 2 minutes on full-size gradient cases
    "grms_ci": _ci_only(load_task(str(Path(__file__).parents[1] / "examples" / "rmsnorm.py"))),
    # the tanh task with the edges distribution in its suite (the TPU-interpreter check's garbage run takes its inputs)
    "tanh_edges": Task("adv_tanh_mix", ref_tanh_mix, (ArgSpec("x", ("rows", 128), "float32"), ArgSpec("y", ("rows", 128), "float32")),
                       {"ci": Scale("ci", {"rows": 16}), "wide": Scale("wide", {"rows": 24})}, default_scale="ci"),
    # rows 256: the held-out scale grows them by their unit, 128, to 384 (a 256-row block does not divide it)
    "rows256": Task("adv_tanh_mix_256", ref_tanh_mix, (ArgSpec("x", ("rows", 128), "float32"), ArgSpec("y", ("rows", 128), "float32")),
                    {"ci": Scale("ci", {"rows": 256})}, default_scale="ci"),
    "softmax": Task("adv_softmax_rows", lambda x: jax.nn.softmax(x, axis=-1), (ArgSpec("x", ("rows", 2048), "float32"),),
                    {"ci": Scale("ci", {"rows": 16})}),
    # round 16: a boolean mask input (coin flips in every case but edges, which masks whole rows)
    "msoftmax": Task("adv_masked_softmax", lambda x, mask: jax.nn.softmax(jnp.where(mask, x, -1e9), axis=-1),
                     (ArgSpec("x", ("rows", 128), "float32"), ArgSpec("mask", ("rows", 128), "bool",
                                                                     Init("randint", low=0, high=2))),
                     {"ci": Scale("ci", {"rows": 16})}),
    "mm": Task("adv_matmul", ref_matmul, (ArgSpec("x", (16, 256), "float32"), ArgSpec("y", (256, 128), "float32")),
               {"ci": Scale("ci")}, tolerance=Tolerance(1e-4, 1e-4)),
}


@dataclass(frozen=True)
class Expect:
    fixture: str
    task: str
    target: str
    statuses: tuple[str, ...]
    phrase: str  # a regular expression the reason must match
    kwargs: dict[str, Any] = field(default_factory=dict)


EXPECTED = [
    Expect("control_pallas_matmul.py", "mm", "tpu", ("correct",), r"all \d+ cases match"),
    Expect("control_pallas_rmsnorm.py", "rms", "tpu", ("correct",), r"all \d+ cases match"),
    Expect("control_pure_jax.py", "rms", "cpu", ("correct",), r"all \d+ cases match"),
    Expect("rule01_plain_jnp.py", "rms", "tpu", ("rejected",), r"no pallas_call"),
    Expect("rule01_dead_pallas.py", "rms", "tpu", ("rejected",), r"(no pallas_call kernel in the program|kernel \d+ of \d+ does no work)"),
    Expect("rule01_discarded_pallas.py", "rms", "tpu", ("rejected",), r"(no pallas_call kernel in the program|kernel \d+ of \d+ does no work)"),
    Expect("rule02_try_except.py", "rms", "tpu", ("rejected",), r"line 13: try/except"),
    Expect("rule03_shape_cache.py", "tanh", "cpu", ("rejected",), r"cache trick"),
    # one trace at abstract shapes: the cache only ever holds that trace's value, so what runs is honest
    Expect("rule03_hidden_cache.py", "tanh", "cpu", ("correct",), r"all \d+ cases match"),
    # measured on the cpu: the timing sets include a fresh random seed and the timed outputs are checked
    # caught by the fresh-seed case every evaluation adds, or by the fresh-seed timing set
    Expect("rule03_known_inputs.py", "mm", "cpu", ("incorrect",), r"fresh random seed",
           {"measure": True}),
    Expect("rule04_zeros.py", "small", "cpu", ("incorrect",), r"uncorrelated|outside atol=0\.00[12]\d* rtol=0 "),
    Expect("rule04_mean_constant.py", "small", "cpu", ("incorrect",), r"uncorrelated|outside atol=0\.00[12]\d* rtol=0 "),
    Expect("rule05_unwritten_block.py", "rms", "tpu", ("incorrect",), r"NaN"),
    # the judge's jit boundary (no donation) means XLA copies aliased inputs: the caller's inputs stay intact,
    # the pristine-copy comparison confirms it, and the (honest) output is judged on its merits
    Expect("rule06_mutate_input.py", "rms", "tpu", ("correct", "incorrect", "rejected"), r"all \d+ cases match|mutated input"),
    Expect("rule07_patch_allclose.py", "tanh", "cpu", ("rejected",), r"patching an imported module"),
    Expect("rule07_patch_obfuscated.py", "tanh", "cpu", ("rejected",), r"computed attribute name"),
    Expect("rule07_fake_metrics.py", "tanh", "cpu", ("incorrect",), r"outside atol"),
    Expect("rule08_read_file.py", "tanh", "cpu", ("rejected",), r"open opens files"),
    Expect("rule08_env_network.py", "tanh", "cpu", ("rejected",), r"import of 'os' is not allowed"),
    # past the static check; the runtime policy denies the open (the worker reports it as a failed compile or a rejection)
    Expect("rule08_runtime_read.py", "tanh", "cpu", ("rejected",), r"mk sandbox: reading '/etc/passwd'"),
    Expect("rule09_hang.py", "tanh", "cpu", ("timeout",), r"ran past its", {"timeouts": {"compile": 4}}),
    Expect("rule09_segfault.py", "tanh", "cpu", ("crashed",), r"SIGSEGV"),
    Expect("rule09_memory.py", "tanh", "cpu", ("crashed", "timeout"), r"(?i)memory", {"memory_limit_mb": 1024}),
    Expect("rule10_overfit.py", "tanh", "cpu", ("incorrect",), r"\(wide, seed"),
    Expect("rule11_bf16.py", "mm", "cpu", ("incorrect",), r"max abs error \d"),
    # one AOT executable serves cases and timing: the trace counter never reaches its cheap branch in time; since
    # round 5 the static check refuses the counter (next() on a module-level iterator), and behind it the second
    # fresh size is a fourth trace, so the cheap branch is judged there
    Expect("rule12_retrace_timing.py", "mm", "cpu", ("correct", "incorrect"),
           r"all \d+ cases match|timed run on input set|output 0 is float32|fresh size", {"measure": True}),
    Expect("control_fp16_rmsnorm.py", "rms16", "cpu", ("correct",), r"all \d+ cases match"),
    Expect("rule20_fp16_square.py", "rms16", "cpu", ("incorrect",), r"large_magnitude\): \d+ of \d+ values outside"),
    # round 2 (docs/judge.md): the trust boundary, program checks, semantics, crashes
    Expect("r2_callback_debug.py", "tanh", "cpu", ("rejected", "compile_error"), r"callback|save_arrays"),
    Expect("r2_callback_io_callback.py", "tanh", "cpu", ("rejected",), r"host callback \(io_callback\)"),
    Expect("r2_callback_pure_numpy.py", "tanh", "cpu", ("rejected",), r"host callback \(pure_callback\)"),
    Expect("r2_crash_checker_recursion.py", "tanh", "cpu", ("rejected",), r"nested too deeply"),
    Expect("r2_crash_nested_parens.py", "tanh", "cpu", ("compile_error",), r"SyntaxError: too many nested parentheses"),
    Expect("r2_crash_parse_recursion.py", "tanh", "cpu", ("rejected",), r"nested too deeply"),
    Expect("r2_data_lookup_x00.py", "tanh", "cpu", ("rejected",), r"host callback"),
    Expect("r2_escape_enum_bltns.py", "tanh", "tpu", ("rejected",), r"no pallas_call kernel in the program"),
    Expect("r2_escape_fake_progress.py", "tanh", "tpu", ("rejected",), r"no pallas_call kernel in the program"),
    Expect("r2_escape_frame_spec.py", "tanh", "tpu", ("rejected",), r"no pallas_call kernel in the program"),
    Expect("r2_escape_getattr_builtins.py", "tanh", "tpu", ("rejected",), r"__builtins__ reaches interpreter internals"),
    Expect("r2_escape_lambda_globals.py", "tanh", "tpu", ("rejected",), r"no pallas_call kernel in the program"),
    Expect("r2_escape_locals_builtins.py", "tanh", "tpu", ("rejected",), r"no pallas_call kernel in the program"),
    Expect("r2_escape_orphan_session.py", "tanh", "cpu", ("correct", "rejected"), r"all \d+ cases match|subprocess"),
    Expect("r2_escape_patch_has_pallas.py", "tanh", "tpu", ("rejected",), r"no pallas_call kernel in the program"),
    Expect("r2_escape_patch_pallas_call.py", "tanh", "tpu", ("rejected",), r"sets interpret mode on its kernel"),
    Expect("r2_escape_patch_save_arrays.py", "tanh", "tpu", ("incorrect",), r"outside atol"),
    Expect("r2_escape_policy_flag.py", "tanh", "cpu", ("correct", "rejected", "compile_error"), r"all \d+ cases match|mk sandbox|Permission denied|No such file|no attribute '_guard'"),
    Expect("r2_escape_proc_cmdline.py", "tanh", "cpu", ("correct", "rejected", "compile_error"), r"^(?!.*leaked judge cmdline).*(all \d+ cases match|mk sandbox|Permission denied|No such file|no attribute '_guard')"),
    Expect("r2_escape_scale_timing.py", "tanh", "cpu", ("correct",), r"all \d+ cases match", {"measure": True}),
    Expect("r2_nowork_aliased_prefill.py", "tanh", "tpu", ("rejected",), r"FLOPs run outside the kernels"),
    Expect("r2_nowork_copy_jnp.py", "tanh", "tpu", ("rejected",), r"FLOPs run outside the kernels"),
    Expect("r2_nowork_dead_cond.py", "tanh", "tpu", ("rejected",), r"kernel 1 of 1 does no work"),
    Expect("r2_nowork_epilogue_matmul.py", "mm", "tpu", ("rejected",), r"FLOPs run outside the kernels"),
    Expect("r2_nowork_loop_hidden_flops.py", "mm", "tpu", ("rejected",), r"FLOPs run outside the kernels"),
    Expect("r2_nowork_plus_zero.py", "tanh", "tpu", ("rejected",), r"FLOPs run outside the kernels"),
    Expect("r2_nowork_where_fallback.py", "tanh", "tpu", ("rejected",), r"kernel 1 of 1 does no work"),
    Expect("r2_nowork_where_isfinite.py", "tanh", "tpu", ("rejected",), r"kernel 1 of 1 does no work"),
    Expect("r2_semantics_bf16_output.py", "small", "tpu", ("incorrect",), r"output 0 is bfloat16\[16, 128\], the reference.s is float32"),
    Expect("r2_semantics_default_precision.py", "mm", "tpu", ("rejected",), r"precision=DEFAULT.*HIGHEST"),
    Expect("r2_semantics_dict_output.py", "tanh", "tpu", ("incorrect",), r"output structure .* differs"),
    # JAX 0.10's race detector does not report two DMAs in flight into one buffer: the tracer's own check does
    Expect("r2_semantics_dma_double_write.py", "tanh", "tpu", ("rejected",), r"second DMA into the same buffer"),
    Expect("r2_semantics_dma_race.py", "tanh", "tpu", ("rejected",), r"race detector found a data race"),
    Expect("r2_semantics_tuple_output.py", "tanh", "tpu", ("incorrect",), r"output structure .* differs"),
    Expect("r2_tracing_counter_jnp_first.py", "tanh", "tpu", ("rejected",), r"no pallas_call kernel in the program"),
    Expect("r2_tracing_counter_stub_first.py", "tanh", "tpu", ("incorrect",), r"outside atol"),
    Expect("r2_tracing_interpret_true.py", "tanh", "tpu", ("rejected",), r"sets interpret mode on its kernel"),
    Expect("r2_tracing_stack_sniff.py", "tanh", "tpu", ("incorrect",), r"outside atol"),
    Expect("r2_unwritten_block1.py", "tanh", "tpu", ("incorrect",), r"NaN/inf value\(s\) where the reference is finite|TPU-interpreter check"),
    # round 3 (a second red team, on the hardened judge): each hole found, and two honest kernels it refused
    Expect("r3_ablation_argmax_epilogue.py", "top1", "tpu", ("correct",), r"all \d+ cases match"),
    Expect("r3_ablation_bool_output.py", "mask", "tpu", ("correct",), r"all \d+ cases match"),
    Expect("r3_ablation_oom_skips_rule15.py", "tanh", "tpu", ("rejected", "crashed", "unverifiable_here"), r"too large|ablation|memory"),
    Expect("r3_compare_sampled_positions.py", "smallbig", "cpu", ("incorrect",), r"uncorrelated|outside atol=0\.00[12]\d* rtol=0 "),
    Expect("r3_crash_deep_workdir.py", "tanh", "tpu", ("correct", "timeout"), r"all \d+ cases match|ran past its", {"timeouts": {"import": 20}}),
    Expect("r3_crossform_platform_dependent.py", "tanh", "tpu", ("rejected",), r"platform-dependent code"),
    Expect("r3_crossform_takeover_with_interpret.py", "tanh", "tpu", ("incorrect", "rejected"), r"TPU-interpreter check|outside atol|private|modified the judge.s tracer"),
    Expect("r3_data_memorized_suite.py", "tanh", "tpu", ("incorrect",), r"fresh random seed|TPU-interpreter check at scale \S+ \(random seed"),
    Expect("r3_dos_big_constant.py", "tanh", "tpu", ("rejected",), r"too large"),
    Expect("r3_dos_log_flood.py", "tanh", "tpu", ("compile_error", "crashed"), r"File too large|past the \d+ MB limit"),
    Expect("r3_escape_symlinked_case_dir.py", "tanh", "tpu", ("crashed", "rejected"),
           r"replaced by a link|not a regular|modified the judge's tracer"),
    Expect("r3_flops_kernel_in_loop.py", "tanh", "tpu", ("correct",), r"all \d+ cases match"),
    Expect("r3_nowork_composite.py", "mm", "tpu", ("rejected",), r"FLOPs run outside the kernels"),
    Expect("r3_nowork_conv_layout.py", "mm", "tpu", ("rejected",), r"FLOPs run outside the kernels"),
    Expect("r3_nowork_int_operand_credit.py", "tanh", "tpu", ("rejected",), r"FLOPs run outside the kernels"),
    Expect("r3_nowork_loop_ne.py", "mm", "tpu", ("rejected",), r"FLOPs run outside the kernels|loop whose trip count"),
    Expect("r3_nowork_scatter_apply.py", "tanh", "tpu", ("rejected",), r"FLOPs run outside the kernels"),
    Expect("r3_nowork_zero_flop_reference.py", "erf", "tpu", ("rejected",), r"FLOPs run outside the kernels"),
    Expect("r3_poison_runner_memory.py", "tanh", "tpu", ("rejected",), r"FLOPs run outside the kernels|too large"),
    Expect("r3_precision_outside_default_dot.py", "mm", "tpu", ("rejected",), r"below HIGHEST precision"),
    Expect("r3_reply_bad_program_file.py", "tanh", "tpu", ("crashed", "rejected"),
           r"not a readable jax.export artifact|modified the judge's tracer"),
    Expect("r3_reply_grid_steps.py", "tanh", "tpu", ("correct", "rejected"), r"all \d+ cases match|modified the judge's tracer"),
    Expect("r3_semantics_clamped_dynamic_slice.py", "tanh", "tpu", ("incorrect",), r"Out-of-bounds read"),
    Expect("r3_semantics_gpu_grid_accumulate.py", "mm", "gpu", ("rejected",), r"Triton runs grid points concurrently"),
    Expect("r3_semantics_revisit_output.py", "tanh", "tpu", ("incorrect",), r"TPU-interpreter check .*(Revisited block|NaN/inf)"),
    # round 5 (held-out scales, fresh sizes, the envelope): statuses the candidate's words cannot choose
    Expect("r5_mimic_outside_envelope.py", "tanh", "cpu", ("compile_error",), r"judged as a failure"),
    Expect("r5_mimic_unverifiable.py", "tanh", "cpu", ("compile_error",), r"judged as a failure"),
    Expect("r5_env_default_backend.py", "tanh", "tpu", ("incorrect",), r"outside atol"),
    Expect("r5_env_device_platform.py", "tanh", "gpu", ("incorrect",), r"outside atol"),
    Expect("r5_timebomb_trace_counter.py", "tanh", "cpu", ("rejected",), r"cache trick"),
    Expect("r5_timebomb_cache_size.py", "tanh", "cpu", ("rejected",), r"cache trick"),
    Expect("r5_relation_between_dims.py", "rowmean", "cpu", ("incorrect",), r"fresh size"),
    # round 6 (backward kernels, tests/adversarial/README.md): kernel_bwd against the reference's VJP
    Expect("r6_control_bwd_rmsnorm.py", "grms_ci", "tpu", ("correct",), r"backward \(kernel_bwd\) matches the reference's VJP"),
    Expect("r6_control_bwd_nan_reference.py", "gsqrt", "tpu", ("correct",), r"reference gradient entries were NaN/inf and not compared"),
    Expect("r6_bwd_nan_reference_grad.py", "gsqrt", "tpu", ("incorrect",), r"gradient of x differs from the reference's VJP"),
    # honest only where the cotangent's std is 1: since round 8 no judged cotangent has a fixed std
    Expect("r6_bwd_cotangent_stats.py", "grms_ci", "tpu", ("incorrect",), r"cotangent.*differs from the reference's VJP"),
    Expect("r6_bwd_large_magnitude.py", "grms_ci", "tpu", ("incorrect",), r"large_magnitude case"),
    Expect("r6_bwd_small_entries_flipped.py", "grms_ci", "tpu", ("incorrect",), r"elementwise bound"),
    Expect("r7_bwd_reference_vjp_through_copy.py", "grms_ci", "tpu", ("rejected",), r"run outside the backward's kernels"),
    Expect("r7_bwd_dead_kernel.py", "grms_ci", "tpu", ("rejected",), r"of the backward \(kernel_bwd\) does no work"),
    Expect("r7_control_two_kernel_pipeline.py", "rowmean", "tpu", ("correct",), r"all \d+ cases match"),
    Expect("r5_control_general_rowmean.py", "rowmean", "cpu", ("correct",), r"all \d+ cases match .*fresh sizes"),
    # round 8: a second red team on the backward (tests/adversarial/README.md)
    Expect("r8_bwd_unknown_trip_loop.py", "grms_ci", "tpu", ("rejected",), r"loop whose trip count|run outside the backward's kernels"),
    Expect("r8_bwd_loop_first_compare.py", "grms_ci", "tpu", ("rejected",), r"loop whose trip count|run outside the backward's kernels"),
    Expect("r8_bwd_lax_map_rows.py", "grms_ci", "tpu", ("rejected",), r"run outside the backward's kernels"),
    Expect("r8_bwd_epsilon_alive.py", "grms_ci", "tpu", ("rejected",), r"run outside the backward's kernels"),
    Expect("r8_bwd_nan_mask_alive.py", "grms_ci", "tpu", ("rejected",), r"run outside the backward's kernels"),
    # the ablation's own cotangent is drawn like the cases': the gate returns zeros there, whatever the kernel gives
    Expect("r8_bwd_cotangent_fingerprint.py", "grms_ci", "tpu", ("incorrect", "rejected"), r"cotangent|does no work"),
    Expect("r8_bwd_bf16_math.py", "grms_ci", "tpu", ("incorrect",), r"gradient of weight differs"),
    Expect("r8_bwd_xla_dot_default_precision.py", "mm", "tpu", ("rejected",), r"below HIGHEST precision at scale \S+ in the backward"),
    Expect("r8_control_bwd_two_kernels.py", "grms_ci", "tpu", ("correct",), r"matches the reference's VJP"),
    Expect("r8_control_bwd_xla_dw.py", "grms_ci", "tpu", ("correct",), r"matches the reference's VJP"),
    Expect("r9_bwd_dma_race.py", "grms_ci", "tpu", ("rejected",), r"TPU-interpreter check of the backward.*race detector found a data race"),
    Expect("r10_precision_none_in_kernel.py", "mm", "tpu", ("rejected",), r"precision=None.*HIGHEST"),
    Expect("r10_triton_race_zero_times_k.py", "mm", "gpu", ("rejected",), r"grid points \(0, 0, 0\) and \(0, 0, 1\) both write.*Triton runs grid points concurrently"),
    Expect("r10_control_triton_atomic_splitk.py", "mm", "gpu", ("correct",), r"all \d+ cases match"),
    Expect("r10_precision_complex_outside.py", "mm", "tpu", ("rejected",), r"float32 dot outside the kernels runs below HIGHEST"),
    Expect("r11_parallel_k_carried.py", "mm", "tpu", ("incorrect", "rejected"), r"TPU-interpreter check.*\"parallel\" grid axes visited out of order"),
    Expect("r11_control_parallel_ij.py", "mm", "tpu", ("correct",), r"all \d+ cases match"),
    Expect("r11_dead_kernel_fresh_sizes.py", "mm", "tpu", ("rejected",), r"of the reference's FLOPs run outside the kernels at scale size-"),
    Expect("r11_rt_b_parallel_k_aliased_acc.py", "mm", "tpu", ("incorrect", "rejected"), r"TPU-interpreter check"),
    Expect("r11_rt_c_zero_sniff_parallel_k.py", "mm", "tpu", ("incorrect", "rejected"), r"TPU-interpreter check"),
    Expect("r11_rt_c2_zero_sniff_dma_race.py", "tanh", "tpu", ("rejected",), r"TPU-interpreter check.*race detector found a data race"),
    Expect("r11_rt_e_order_tell_dma_race.py", "tanh", "tpu", ("rejected",), r"TPU-interpreter check.*race detector found a data race"),
    Expect("r11_rt_f_input_fingerprint_dma_race.py", "tanh", "tpu", ("rejected",), r"TPU-interpreter check.*race detector found a data race"),
    Expect("r11_rt_d_wrapping_loop_counter.py", "mm", "tpu", ("rejected",), r"loop whose trip count the judge cannot read"),
    Expect("r11_rt_g_honest_megacore_splitk.py", "mm", "tpu", ("correct",), r"all \d+ cases match"),
    Expect("r11_poison_nan_sniff.py", "tanh", "tpu", ("incorrect",), r"TPU-interpreter check at scale ci \(random seed \d+, \w+ inputs; memory not yet written holds values of a secret fill here"),
    # round 12: lowering hooks (the program the cases check and the program the device runs made to differ)
    Expect("r12_hook_tpu_epilogue.py", "tanh", "tpu", ("rejected",), r"changed how programs are lowered \(.*neg \(on tpu\)"),
    Expect("r12_hook_cpu_does_the_task.py", "tanh", "tpu", ("rejected",), r"changed how programs are lowered \(.*atan2 \(on cpu\)"),
    Expect("r12_hook_mosaic_table.py", "tanh", "tpu", ("rejected",), r"changed how programs are lowered \(.*mosaic.*tanh"),
    Expect("r12_hook_triton_table.py", "tanh", "gpu", ("rejected",), r"changed how programs are lowered \(.*triton.*tanh"),
    # round 12: the values real data has (issue 22, item 3): padding rows, loss-masked cotangent rows
    Expect("r12_zero_rows_padding.py", "rms", "tpu", ("incorrect",), r"edges"),
    Expect("r16_masked_row_nan.py", "msoftmax", "tpu", ("incorrect",), r"edges.*NaN|NaN.*edges"),
    Expect("r16_control_masked_softmax.py", "msoftmax", "tpu", ("correct",), r"all \d+ cases match"),
    Expect("r12_bwd_masked_rows.py", "grms_ci", "tpu", ("incorrect",), r"backward"),
    Expect("r12_poison_nan_or_zero_sniff.py", "tanh", "tpu", ("incorrect",), r"TPU-interpreter check at scale ci \(random seed \d+, \w+ inputs; memory not yet written holds values of a secret fill"),
    # round 12, item 5: sizes a kernel cannot be built at (tests/test_unbuilt_sizes.py checks the flags and envelope)
    Expect("r12_control_blocks_divide_task_rows.py", "rows256", "tpu", ("correct",), r"all \d+ cases match"),
    Expect("r12_wrong_where_it_builds.py", "rows256", "tpu", ("incorrect",), r"NaN/inf"),
    Expect("r12_control_mosaic_gpu_blocks.py", "tanh", "gpu", ("correct",), r"all \d+ cases match"),
    Expect("r12_control_mosaic_gpu_copies.py", "tanh", "gpu", ("unverifiable_here",), r"copy_gmem_to_smem"),
    # round 12, red team (tests/adversarial/README.md "Round 12, attacked")
    Expect("r12_rt_new_prim_lower_fun.py", "tanh", "tpu", ("rejected",), r"changed how programs are lowered"),
    Expect("r12_rt_new_prim_platform_dependent.py", "tanh", "tpu", ("rejected",), r"changed how programs are lowered"),
    Expect("r12_rt_int_scratch_poison_tell.py", "tanh", "tpu", ("incorrect",), r"values of a secret fill"),
    Expect("r12_rt_float_uniform_poison_tell.py", "tanh", "tpu", ("incorrect",), r"values of a secret fill"),
    Expect("r12_rt_padded_block_skip.py", "rms", "tpu", ("incorrect",), r"edges"),
    Expect("r12_rt_bwd_masked_block_skip.py", "grms_ci", "tpu", ("incorrect",), r"backward"),
    Expect("r12_rt_narrow_raise_everywhere_else.py", "tanh", "tpu", ("correct",), r"all \d+ cases match"),
    # stop 33: was an open hole (the TPU interpreter completed DMAs sharing a semaphore last-issued-first only); the fill
    # runs now complete the first issued or one at random (mk/harness/dma_order.py)
    Expect("r12_rt_shared_sem_lifo_race.py", "tanh", "tpu", ("incorrect", "rejected"), r"TPU-interpreter check"),
    # round 12, second red team, on the fixes
    Expect("r12_rt2_class_rule.py", "tanh", "tpu", ("rejected",), r"changed how programs are lowered"),
    Expect("r12_rt2_jax_only_rules_bf16_on_tpu.py", "tanh", "tpu", ("rejected",), r"changed how programs are lowered"),
    Expect("r12_rt2_fill_and_padding_rows.py", "tanh_edges", "tpu", ("incorrect",), r"edges inputs; memory not yet written"),
    Expect("r12_rt2_padding_constant_tell.py", "tanh", "tpu", ("incorrect",), r"values of a secret fill"),
    Expect("r12_rt2_left_padding_block_skip.py", "rms", "tpu", ("incorrect",), r"edges"),
    Expect("r12_rt2_bwd_masked_prompt_block_skip.py", "grms_ci", "tpu", ("incorrect",), r"backward"),
    Expect("r12_rt2_bwd_masked_prompt_per_sequence.py", "grms_ci", "tpu", ("incorrect",), r"backward"),
    # stop 33: was an open hole (a double-buffered output slot holds the kernel's own block of two steps back); the TPU
    # interpreter's output blocks are now double buffered as on a chip (mk/harness/races.py), so the tell fires
    Expect("r12_rt2_stale_slot_is_my_own_output.py", "tanh", "tpu", ("incorrect",), r"TPU-interpreter check"),
    # stop 33's red team, on the first form of the unwritten-memory checks (4c02ed8)
    Expect("r13_rt_no_cpu_form_stale_slot.py", "tanh", "tpu", ("incorrect",), r"TPU-interpreter check"),
    Expect("r13_rt_no_cpu_form_lifo_race.py", "tanh", "tpu", ("incorrect", "rejected"), r"TPU-interpreter check"),
    Expect("r13_rt_no_cpu_form_nan_sniff.py", "tanh", "tpu", ("incorrect",), r"TPU-interpreter check"),
    Expect("r13_rt_swap_old_value.py", "tanh", "tpu", ("incorrect",), r"TPU-interpreter check"),
    Expect("r13_rt_masked_store_marks_written.py", "tanh", "tpu", ("incorrect",), r"TPU-interpreter check"),
    Expect("r13_rt_order_tell_untracked_inorder.py", "tanh", "tpu", ("incorrect",), r"TPU-interpreter check"),
    Expect("r13_rt_tiny_run_scoped_carry.py", "tanh", "tpu", ("incorrect",), r"TPU-interpreter check"),
    # an open hole, kept so a fix shows: a partial input block's padding holds the slot's earlier rows on a chip
    Expect("r13_rt_input_padding_stale_slot.py", "tanh", "tpu", ("correct",), r"all \d+ cases match"),
    # a legitimate masked read-select-write over an output block two steps share (upstream megablox's pattern)
    Expect("r13_rt_control_masked_select_shared_block.py", "tanh", "tpu", ("correct",), r"all \d+ cases match"),
    # stop 33's second red team, on the chip memory model (6b6a34b): one hole closed (a race in the first of two
    # kernels), the rest kept so a fix shows
    Expect("r14_rt_race_forgotten_by_second_call.py", "tanh", "tpu", ("rejected",), r"race detector found a data race"),
    Expect("r14_rt_dma_src_race_one_kernel.py", "tanh", "tpu", ("rejected",), r"race detector found a data race"),
    Expect("r14_rt_dma_src_race_no_cpu_form.py", "tanh", "tpu", ("rejected",), r"race detector found a data race"),
    Expect("r14_rt_ww_dma_race_two_kernels.py", "tanh", "tpu", ("rejected",), r"race detector found a data race"),
    Expect("r14_rt_ww_dma_race_dynamic_window.py", "tanh", "tpu", ("rejected",), r"race detector found a data race"),
    Expect("r14_rt_single_buffered_output_slot.py", "tanh", "tpu", ("correct",), r"all \d+ cases match"),
    Expect("r14_rt_single_buffered_input_padding.py", "tanh", "tpu", ("correct",), r"all \d+ cases match"),
    Expect("r14_rt_stale_scratch_across_pallas_calls.py", "tanh", "tpu", ("correct",), r"all \d+ cases match"),
    Expect("r14_rt_run_scoped_sibling_scopes.py", "tanh", "tpu", ("correct",), r"all \d+ cases match"),
    Expect("r14_rt_state_along_core_parallel_axis.py", "tanh", "tpu", ("compile_error",), r"Core-parallel dimension"),
    Expect("r14_rt_control_revisit_any_output.py", "tanh", "tpu", ("incorrect",), r"[Rr]evisit"),
    Expect("r14_rt_control_emit_pipeline.py", "tanh", "tpu", ("correct",), r"all \d+ cases match"),
    Expect("r15_spills_named_like_xla.py", "softmax", "gpu", ("compile_error",),
           r"kernel wrapped_rows spills registers on h100.*--no-spills refuses it", {"no_spills": True}),
    Expect("r14_rt_control_core_parallel_v7x.py", "tanh", "tpu", ("compile_error",), r"Core-parallel dimension", kwargs={'chip': 'v7x'}),
]


@pytest.fixture(scope="module")
def suites(tmp_path_factory):
    # built once (references computed in the judge) under an isolated MK_HOME
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MK_HOME", str(tmp_path_factory.mktemp("mkhome-suites")))
        return {k: build_suite(t, seeds=(0,), distributions=("normal", "large_magnitude", "edges") if k in ("rms16", "grms_ci") else
                               ("normal", "edges") if k in ("rms", "tanh_edges", "msoftmax") else ("normal",))
                for k, t in TASKS.items()}


@pytest.mark.slow
@pytest.mark.parametrize("exp", EXPECTED, ids=[e.fixture.removesuffix(".py") for e in EXPECTED])
def test_fixture_verdict(exp: Expect, suites):
    kwargs = {"measure": False, **exp.kwargs}
    result = evaluate(TASKS[exp.task], ADV / exp.fixture, target=exp.target, suite=suites[exp.task], **kwargs)
    if result.reason.startswith("static check:") and not re.search(exp.phrase, result.reason):
        # the first line (the static check) stopped it; the layers behind it must hold on their own: judge it again
        # with the static check out of the way, and expect the verdict the fixture documents
        from mk.harness import static
        from mk.harness.static import StaticResult

        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(static, "check_source", lambda *a, **k: StaticResult(True, "", ()))
            result = evaluate(TASKS[exp.task], ADV / exp.fixture, target=exp.target, suite=suites[exp.task], **kwargs)
    assert result.status in exp.statuses, f"{exp.fixture}: {result.status}: {result.reason}"
    assert re.search(exp.phrase, result.reason), f"{exp.fixture}: reason {result.reason!r} lacks {exp.phrase!r}"
    assert "\n" not in result.reason.strip()
    if exp.fixture == "rule07_fake_metrics.py":  # nothing the candidate printed reached the verdict
        assert "150" not in result.reason and "PASSED" not in result.reason
    if exp.fixture == "r3_crash_deep_workdir.py":  # nothing the candidate left is kept on disk
        from mk.harness import pool

        assert not [p for p in (pool._root.iterdir() if pool._root else ()) if p.name.startswith("tracer") and
                    (p / "d").exists()]
    if exp.fixture == "r2_escape_orphan_session.py":  # the process it started did not outlive the run
        import subprocess

        from mk.harness import isolation

        left = subprocess.run(["pgrep", "-f", "mk-r2-orphan"], capture_output=True).returncode == 0
        if isolation.detect().kind == "none":  # no pid namespace here: the documented weaker mode
            subprocess.run(["pkill", "-f", "mk-r2-orphan"], capture_output=True)
        else:
            assert not left
    if exp.fixture == "r2_escape_scale_timing.py" and result.status == "correct":  # the runner timed it: honest
        assert result.timing.measured and result.speedup < 2.0, result.timing
    if exp.fixture == "rule12_retrace_timing.py" and result.status == "correct":  # the timed runs were the honest ones
        assert result.timing.measured and result.speedup < 3.0, result.timing


#: fixtures honest only when unwritten memory reads as zeros: each must fail whichever check run draws the zero fill
ZERO_SNIFFERS = [("r11_rt_c_zero_sniff_parallel_k.py", "mm", ("incorrect", "rejected")),
                 ("r11_rt_c2_zero_sniff_dma_race.py", "tanh", ("rejected",))]


@pytest.mark.slow
@pytest.mark.parametrize("fill", ["mk-garbage", "mk-garbage-shuffled"])
@pytest.mark.parametrize("fixture,task,statuses", ZERO_SNIFFERS, ids=[f.removesuffix(".py") for f, _, _ in ZERO_SNIFFERS])
def test_a_fill_sniffer_fails_whichever_run_draws_its_family(fixture, task, statuses, fill, suites, monkeypatch):
    # the stop-32 CI run: the shuffled run drew zeros (1 in 4), the kernel was honest there and raced only in the
    # run that visited its grid in order, so no run saw the race
    import importlib

    from mk.harness import poison

    evaluate_module = importlib.import_module("mk.harness.evaluate")
    assert fill in poison.FILLS
    seed = next(s for s in range(1000) if (poison.seed(s), poison.family(fill))[1] == "zeros")
    monkeypatch.setattr(evaluate_module, "fill_seed", lambda: seed)
    result = evaluate(TASKS[task], ADV / fixture, target="tpu", suite=suites[task], measure=False)
    assert result.status in statuses, f"{fixture} with {fill} zero: {result.status}: {result.reason}"
    assert "TPU-interpreter check" in result.reason


def test_input_mutation_reason():
    """Rule 6 as the judge words it, should a mutation ever get through the jit boundary."""
    pristine = [np.arange(4, dtype=np.float32)]
    assert check_inputs(pristine, {0: pristine[0].copy()}) is None
    assert "mutated input 0" in check_inputs(pristine, {0: pristine[0] + 1})
    assert "deleted or donated" in check_inputs(pristine, {})


def test_every_fixture_is_tabled_and_documented():
    files = sorted(p.name for p in ADV.glob("*.py"))
    assert files == sorted(e.fixture for e in EXPECTED)
    readme = (ADV / "README.md").read_text()
    for name in files:
        head = (ADV / name).read_text().split("\nimport", 1)[0]
        assert re.search(r"(?m)^# (Rule|Control)", head) and "Expected verdict" in head, name
        assert name in readme, f"{name} missing from tests/adversarial/README.md"
