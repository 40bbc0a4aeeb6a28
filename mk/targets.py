"""Targets: ``tpu``, ``gpu`` and ``cpu``, in one registry.

A target knows how to *compile-check* a function on any machine (lower it for
the target's platform), how to *run* it for correctness (on the device, or in
Pallas interpret mode where the device is absent) and whether it can be *timed*
here (only on a real device of that kind; on the CPU for ``cpu``). Its fields
answer what the rest of mk asks of a target (does a candidate need a kernel,
which kernel language, which interpreter) so no code compares target names.

Adding a target: one :class:`Target` passed to :func:`register_target` (the
CLI's ``--target`` choices and :func:`get_target` read the registry).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import logging
import os
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from mk.errors import TargetError

log = logging.getLogger(__name__)

@dataclass(frozen=True)
class Target:
    name: str
    #: the platform name ``lower(lowering_platforms=...)`` expects
    platform: str
    #: the ``jax.devices()`` platform that means "the device is here"
    device_platform: str
    #: the Pallas kernel language candidates are written in (``mosaic`` for TPU, ``triton`` for GPU); "" for a
    #: target judged as plain JAX, where a candidate needs no kernel
    kernel_language: str = ""
    #: the interpreter a kernel runs in without the device: ``tpu`` (Pallas's TPU interpreter: NaN-filled
    #: uninitialised memory, race detection, a TPU generation assumed) or ``hlo`` (``interpret=True``)
    interpreter: str = "hlo"
    #: the machine mk runs on itself (always present; JAX is pinned to it in the judge's processes)
    host: bool = False
    #: the custom calls in a lowered program that are this target's kernels (every other one is foreign code)
    kernel_calls: frozenset[str] = frozenset()
    #: the kind of chip (``data/hardware.json``'s ``kind``) this target's programs are compiled for without the
    #: device, and the one compiled for unless a chip is named (``mk.chips``); "" for a target that compiles for none
    chip_kind: str = ""
    default_chip: str = ""
    #: the hardware spec (``data/hardware.json``) whose facts a kernel family's default config reads when no chip
    #: is named: budgets and tile sizes (``mk.hardware.default_spec``); "" for a target with none
    spec: str = ""
    #: a glob of the device files present on a machine with this target's device (checked without importing JAX)
    device_nodes: str = ""

    def device_nodes_present(self) -> bool:
        """Whether this machine shows the target's device files (a guess made without importing JAX)."""
        import glob

        return bool(self.device_nodes) and bool(glob.glob(self.device_nodes))

    @property
    def needs_kernel(self) -> bool:
        """Whether a candidate must contain a Pallas kernel (else it is judged as a pure-JAX rewrite)."""
        return bool(self.kernel_language)

    @property
    def assumes_chip(self) -> bool:
        """Whether tracing and lowering without the device assume a chip generation (TPU's Mosaic asks)."""
        return self.interpreter == "tpu"

    # --- where are we ------------------------------------------------------
    def device_present(self) -> bool:
        import jax

        try:
            return any(_real(d).platform == self.device_platform for d in jax.devices())  # not an assumed chip
        except RuntimeError:
            return False

    def device_kind(self) -> str | None:
        """e.g. ``"TPU v6 lite"`` or ``"NVIDIA H200"``; None when absent."""
        import jax

        if not self.device_present():
            return None
        return str(next(d.device_kind for d in jax.devices() if d.platform == self.device_platform))

    def can_time(self) -> bool:
        """Timing only on a real device of this kind (the CPU for ``cpu``)."""
        return self.device_present()

    def mode(self) -> str:
        """``device`` when the kernels run on the real device, else ``interpret``."""
        return "device" if self.device_present() else "interpret"

    # --- compile check ------------------------------------------------------
    def lower(self, fn: Callable[..., Any], *arg_structs: Any, chip: str = "v6e") -> Any:
        """Lower ``fn`` for this target's platform; raises what the compiler raises.

        ``chip`` (tpu only, without a TPU here): the TPU generation the Mosaic
        lowering assumes for generation-dependent choices (v4, v5e, v5p, v6e, 7x)."""
        import jax

        ctx = _assume_tpu_chip(chip) if self.assumes_chip and not self.device_present() else contextlib.nullcontext()
        with ctx:
            return jax.jit(lambda *a: fn(*a)).trace(*arg_structs).lower(lowering_platforms=(self.platform,))

    def lowering_context(self, chip: str = "v6e") -> Any:
        """Context for tracing and lowering here: without a TPU, Mosaic (and library code that asks for TPU
        info while tracing) sees the chosen TPU generation."""
        if self.assumes_chip and not self.device_present():
            return _assume_tpu_chip(chip)
        return contextlib.nullcontext()

    def interpret_params(self, seed: int | None = None, poison: str = "nan") -> Any:
        """The interpreter a kernel falls back to when Pallas's HLO interpreter cannot run it: the TPU
        interpreter (uninitialised memory filled with ``poison``, ``"nan"``, ``"zero"`` or one of mk's fills,
        :data:`mk.harness.poison.FILLS`; race detection;
        ``seed`` shuffles the order in which it visits "parallel" grid axes) for tpu, the HLO interpreter
        otherwise."""
        if self.interpreter == "tpu":
            from jax.experimental.pallas import tpu as pltpu

            from mk.harness import races

            races.install()  # the same findings as upstream's detector, far faster (mk/harness/races.py)
            from mk.harness import poison as fills

            if poison in fills.FILLS:
                from mk.harness import dma_order

                fills.install()  # mk's fills of unwritten memory (mk/harness/poison.py)
                dma_order.install()  # the DMA a wait completes, varied with the fill (mk/harness/dma_order.py)
            return pltpu.InterpretParams(uninitialized_memory=poison, detect_races=True, random_seed=seed)
        return True

    def races_found(self) -> bool:
        """Whether the TPU interpreter's race detector saw a race in any kernel of the run begun last
        (:func:`mk.harness.races.start`)."""
        if self.interpreter != "tpu":
            return False
        from jax._src.pallas.mosaic.interpret import interpret_pallas_call as tpu_interpret

        from mk.harness import races

        last = getattr(tpu_interpret, "races", None)  # upstream's detector, where mk's is not installed
        return races.findings().races or bool(getattr(last, "races_found", False))

    def unwritten_read(self) -> str | None:
        """The first read of memory never written in any kernel of the run begun last (mk.harness.races)."""
        if self.interpreter != "tpu":
            return None
        from mk.harness import races

        found: str | None = races.findings().unwritten
        return found

    # --- correctness runs ------------------------------------------------------
    @contextlib.contextmanager
    def execution(self, chip: str = "v6e") -> Iterator[None]:
        """Context in which kernels for this target run here.

        On the device: nothing to do. Without it: TPU kernels run in the TPU
        interpreter with NaN-filled uninitialised memory and race detection,
        seeing ``chip`` as the TPU generation (as :meth:`lowering_context` does);
        GPU kernels run with ``interpret=True`` forced on every ``pallas_call``
        (JAX has no global switch for them). On ``cpu`` Pallas only runs
        interpreted, so ``pallas_call`` is always forced to interpret."""
        if not self.host and self.device_present():
            yield
            return
        if self.interpreter == "tpu":
            from jax.experimental.pallas import tpu as pltpu

            params = pltpu.InterpretParams(uninitialized_memory="nan", detect_races=True)
            # kernels are traced (and library code asks which chip it runs on) inside this block too:
            # emit_pipeline's tiling, tuned block sizes, ...
            with _assume_tpu_chip(chip), pltpu.force_tpu_interpret_mode(params):
                yield
        else:
            with _force_pallas_interpret():
                yield


@contextlib.contextmanager
def _force_pallas_interpret() -> Iterator[None]:
    """Make every ``pl.pallas_call`` made inside the block run interpreted.

    Candidates call ``pl.pallas_call`` through ``jax.experimental.pallas``;
    we swap that attribute (and the private module's) for a wrapper that sets
    ``interpret=True`` and restore it afterwards."""
    import jax.experimental.pallas as pl
    from jax._src.pallas import pallas_call as impl

    original = impl.pallas_call

    @functools.wraps(original)
    def interpreted(*args: Any, **kwargs: Any) -> Any:
        kwargs["interpret"] = kwargs.get("interpret") or True
        return original(*args, **kwargs)

    pl.pallas_call, impl.pallas_call = interpreted, interpreted
    try:
        yield
    finally:
        pl.pallas_call, impl.pallas_call = original, original


_CHIPS = {"v4": "TPU_V4", "v5e": "TPU_V5E", "v5p": "TPU_V5P", "v6e": "TPU_V6E", "7x": "TPU_7X", "v7x": "TPU_7X"}
#: what ``jax.devices()[0].device_kind`` says on each generation
_DEVICE_KINDS = {"v4": "TPU v4", "v5e": "TPU v5 lite", "v5p": "TPU v5", "v6e": "TPU v6 lite", "7x": "TPU7x", "v7x": "TPU7x"}


class _AssumedTpuDevice:
    """A device as code that asks "which chip am I on" sees it while a TPU generation is assumed: the real
    (CPU) device in every respect but ``device_kind`` (the chip's, e.g. ``"TPU v6 lite"``) and ``num_cores``
    (1, as the Mosaic info registered for the chip)."""

    __slots__ = ("_device", "device_kind")
    num_cores = 1

    def __init__(self, device: Any, kind: str) -> None:
        self._device, self.device_kind = device, kind

    def __getattr__(self, name: str) -> Any:
        return getattr(self._device, name)

    def __eq__(self, other: object) -> bool:
        return bool(self._device == (other._device if isinstance(other, _AssumedTpuDevice) else other))

    def __hash__(self) -> int:
        return hash(self._device)

    def __repr__(self) -> str:
        return f"{self._device!r} (seen as {self.device_kind})"


@contextlib.contextmanager
def _assume_tpu_chip(chip: str) -> Iterator[None]:
    """Let TPU kernels be traced and lowered on a machine whose default device is a CPU, as if it were the
    chosen TPU generation:

    - Mosaic's own queries (``tpu_info.get_tpu_info``: the lowering, ``emit_pipeline``'s tiling) get the
      chip's info, registered under the CPU's device kind;
    - library code that asks ``jax.devices()[0].device_kind`` / ``jax.local_devices()`` (ragged paged
      attention's tuned block sizes, megablox's generation checks) sees the chip's device kind. Only the
      default-backend queries answer so: ``jax.devices("cpu")`` still returns the real devices, for code that
      places arrays.

    Everything is restored on exit (the cached Mosaic info is cleared both ways, so another generation can
    be assumed later in the same process)."""
    import jax
    from jax._src.pallas.mosaic import tpu_info

    if chip not in _CHIPS:
        raise TargetError(f"unknown TPU generation {chip!r}", hint=f"use one of: {', '.join(_CHIPS)}")
    version = getattr(tpu_info.ChipVersion, _CHIPS[chip])
    kind = _real(jax.devices()[0]).device_kind  # the CPU's kind, also when nested in another assumption
    previous = tpu_info.registry.get(kind)
    tpu_info.registry[kind] = lambda: tpu_info.get_tpu_info_for_chip(version, 1)
    real_devices, real_local = jax.devices, jax.local_devices
    seen_as = _DEVICE_KINDS[chip]

    def wrap(query: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(query)
        def devices(*args: Any, **kwargs: Any) -> Any:
            found = query(*args, **kwargs)
            if args or kwargs or not all(getattr(d, "platform", None) == "cpu" for d in found):
                return found  # an explicit backend (code that places arrays) or a real accelerator: as is
            return [_AssumedTpuDevice(_real(d), seen_as) for d in found]

        return devices

    _clear_tpu_info_cache(tpu_info)
    jax.devices, jax.local_devices = wrap(real_devices), wrap(real_local)
    try:
        yield
    finally:
        jax.devices, jax.local_devices = real_devices, real_local
        _clear_tpu_info_cache(tpu_info)
        if previous is None:
            tpu_info.registry.pop(kind, None)
        else:
            tpu_info.registry[kind] = previous


def _real(device: Any) -> Any:
    return device._device if isinstance(device, _AssumedTpuDevice) else device


def _clear_tpu_info_cache(tpu_info: Any) -> None:
    clear = getattr(tpu_info.get_tpu_info, "cache_clear", None)
    if clear is not None:
        clear()


_TARGETS: dict[str, Target] = {}


def register_target(target: Target) -> Target:
    """Add ``target`` to the registry (by its name; registering a name again replaces it, except a built-in one: the
    judge's processes know those by name, so another definition under that name would not reach them)."""
    builtin = globals().get("_BUILTIN", {}).get(target.name)
    if builtin is not None and builtin != target:
        raise TargetError(f"target {target.name!r} is built in and cannot be redefined",
                          hint="register the new definition under another name")
    _TARGETS[target.name] = target
    return target


register_target(Target("tpu", platform="tpu", device_platform="tpu", kernel_language="mosaic", interpreter="tpu",
                       kernel_calls=frozenset({"tpu_custom_call"}), chip_kind="tpu", default_chip="v6e",
                       spec="v6e", device_nodes="/dev/accel[0-9]*"))
register_target(Target("gpu", platform="cuda", device_platform="gpu", kernel_language="triton",
                       kernel_calls=frozenset({"__gpu$xla.gpu.triton", "triton_kernel_call", "mosaic_gpu", "mosaic_gpu_v2"}),
                       chip_kind="gpu", default_chip="h100", spec="h200", device_nodes="/dev/nvidia[0-9]*"))
register_target(Target("cpu", platform="cpu", device_platform="cpu", host=True, spec="cpu"))
#: the targets every process knows without being told (a registered one travels to the judge's processes in the
#: environment, :func:`child_env`)
_BUILTIN = dict(_TARGETS)
#: the environment variable that carries a registered target's definition to a child process
DEFINITION_ENV = "MK_TARGET_DEFINITION"


def definition(target: Any) -> str:
    """``target``'s fields as JSON (every field is plain data), for :func:`from_definition` in another process."""
    fields = dataclasses.asdict(get_target(target))
    fields["kernel_calls"] = sorted(fields["kernel_calls"])
    return json.dumps(fields, sort_keys=True)


def from_definition(text: str) -> Target:
    """The :class:`Target` :func:`definition` wrote; a :class:`TargetError` for anything else."""
    try:
        fields = json.loads(text)
        fields["kernel_calls"] = frozenset(fields.get("kernel_calls", ()))
        return Target(**fields)
    except (ValueError, TypeError, AttributeError) as exc:
        raise TargetError(f"{DEFINITION_ENV} does not define a target ({exc})") from None


def child_env(target: Any) -> dict[str, str]:
    """The environment a judge's process needs to know ``target``: its name, and its definition when it is not a
    built-in target (a fresh process knows only those)."""
    found = get_target(target)
    env = {"MK_TARGET": found.name}
    if _BUILTIN.get(found.name) != found:
        env[DEFINITION_ENV] = definition(found)
    return env


def pin_jax_to_cpu_without_devices() -> bool:
    """Pin JAX to the CPU (``JAX_PLATFORMS=cpu``, unless set) when no registered target's device files exist here.
    mk's command line calls it before JAX is imported: with the compilers installed (libtpu, the CUDA plugin), JAX
    would otherwise try each plugin and print its failure. Returns whether it pinned."""
    import os

    if "JAX_PLATFORMS" in os.environ or any(t.device_nodes_present() for t in _TARGETS.values()):
        return False
    os.environ["JAX_PLATFORMS"] = "cpu"
    return True


def target_names() -> tuple[str, ...]:
    """The registered targets' names (the CLI's ``--target`` choices)."""
    return tuple(_TARGETS)


def kernel_language(target: Any) -> str:
    """The kernel language of ``target`` (a name or a Target): ``mosaic``, ``triton`` or "" (plain JAX)."""
    return get_target(target).kernel_language


#: the built-in targets' names (see :func:`target_names` for every registered one)
TARGET_NAMES = target_names()


def kernel_spec(target: Any) -> str:
    """The hardware spec a kernel family's default config reads for ``target`` when no chip is named (the
    target's ``spec``); a :class:`TargetError` for a target that has no kernel language or no spec."""
    found = get_target(target)
    if not found.kernel_language or not found.spec:
        kernels = [t.name for t in _TARGETS.values() if t.kernel_language and t.spec]
        raise TargetError(f"target {found.name!r} has no kernel language and hardware spec for a kernel's default "
                          "config", hint=f"use one of: {', '.join(kernels)}, or register the target with both")
    return found.spec


def get_target(name: Any) -> Target:
    """The target named ``name`` (a Target is returned as it is)."""
    if isinstance(name, Target):
        return name
    try:
        return _TARGETS[name]
    except (KeyError, TypeError):
        told = os.environ.get(DEFINITION_ENV)
        if told and isinstance(name, str):  # a judge's process, told of a registered target by its parent
            found = from_definition(told)
            if found.name == name:
                return register_target(found)
        raise TargetError(f"unknown target {name!r}", hint=f"use one of: {', '.join(_TARGETS)}") from None
