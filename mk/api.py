"""The Python API: ``mk.optimize(fn, shapes)`` and the callable it returns.

``optimize`` builds a task from a plain JAX function (:func:`mk.loaders.callable.callable_task`: pytree and
keyword inputs flattened into named leaves, statics declared by name), runs the main job
(:func:`mk.job.optimize_task`) and caches the result in the store under :func:`cache_key` (what the function
computes, not its source text). :class:`OptimizedFunction` runs the verified kernel only inside its verified
envelope (:class:`mk.harness.envelope.Envelope`) and where its target's device is present, and the reference
everywhere else, with one warning per distinct reason.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import hashlib
import json
import logging
import warnings
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from mk import __version__
from mk.errors import ArgumentError, ConfigError, EnvelopeError, FallbackWarning, MkError
from mk.harness.envelope import Envelope
from mk.job import OptimizeReport, optimize_task
from mk.loaders.callable import CallSpec, callable_task, computation_hash
from mk.task import Task

log = logging.getLogger(__name__)

__all__ = ["ArgumentError", "FallbackWarning", "OptimizedFunction", "cache_key", "optimize"]


class OptimizedFunction:
    """The callable :func:`optimize` returns: ``fn``'s signature, the verified kernel where that is safe.

    A call binds its arguments as ``fn`` would (keywords, defaults, pytrees), then runs the **kernel** only when

    * a verified kernel exists,
    * the array inputs have the structure they were optimised with (the same pytree, the same parameters),
    * every leaf's shape and dtype, and every static value, lie inside the verified envelope
      (``self.envelope``, e.g. "any multiple of 128 >= 512"; Python scalars count as 0-d arrays of the
      verified dtype), and
    * the target's device is here (``cpu`` kernels run anywhere);

    otherwise it runs the **reference** ``fn`` on the same arguments, with one :class:`FallbackWarning` per
    distinct reason (:meth:`reason` says it without calling). The decision uses shapes, dtypes and static
    values only, so under ``jax.jit`` it is taken once, at trace time.

    Static arguments given in the call are honoured: the kernel receives them when they are inside the
    envelope, the reference runs otherwise. One the call leaves out takes ``fn``'s default, or, where ``fn``
    has none, its value from the optimisation. Under ``jax.jit`` mark them static as usual:
    ``jax.jit(fast, static_argnames=("temperature",))``.

    Transformations: the kernel is wrapped in a ``jax.custom_vjp`` whose backward pass is the written file's
    judged backward kernel (``kernel_bwd``) when it has one, else the reference's VJP (``jax.vjp(fn)``); either
    way ``jax.grad`` / ``jax.vjp`` give the reference's gradients (within the judge's tolerance), forward-mode ``jax.jvp`` is refused by JAX (use ``self.reference``). Under
    ``jax.vmap`` the batched shapes were never verified, so the batched call runs the reference (decided
    when the batch is traced; counted in ``self.traces["batched"]``).

    ``self.calls`` counts calls made eagerly (concrete inputs, ``jax.grad`` included), each one run: ``kernel``
    (calls that ran the kernel), ``reference`` (fallbacks). ``self.traces`` counts the same choice taken while
    ``fn`` was being traced (``jax.jit``, ``jax.vmap``, ``jax.make_jaxpr``): the traced program then runs that
    choice on every call, which mk does not see (300 calls of one jitted function are one trace); ``batched``
    counts kernel calls that ``vmap`` turned into the reference. :meth:`run_kernel` runs the kernel here whatever the device
    (TPU/GPU kernels in Pallas interpret mode), and raises :class:`~mk.errors.EnvelopeError`
    outside the envelope.

    Like ``jax.jit``, it keeps the computation it was optimised for: a global or closed-over value of
    ``fn`` changed afterwards is not seen by the kernel (call :func:`optimize` again; its cache key notices).
    """

    def __init__(self, fn: Callable[..., Any], task: Task, report: OptimizeReport, source: str | None, *,
                 spec: CallSpec, cached: bool = False):
        from mk.targets import get_target

        functools.update_wrapper(self, fn, updated=())  # __name__, __doc__, and inspect.signature(self) is fn's
        self.reference = fn
        self.task = task
        self.spec = spec
        self.report = report
        self.source = source
        self.cached = cached
        self.envelope = Envelope.from_dict(report.envelope) if report.envelope else None
        self.calls = {"kernel": 0, "reference": 0}
        self.traces = {"kernel": 0, "reference": 0, "batched": 0}
        self._target = get_target(report.target)
        self._warned: set[str] = set()
        self._compiled: dict[str, Callable[..., Any]] = {}
        self._out_trees: dict[Any, Any] = {}
        self._kernel = None
        self._kernel_bwd = None  # the written file's judged backward (gradient.BACKWARD_ENTRY), when it defines one
        self._programs: dict[str, str | None] = {}
        self._verified_program: str | None = None
        if source:
            namespace: dict[str, Any] = {}
            exec(compile(source, report.kernel_path or f"<mk kernel {task.name}>", "exec"), namespace)  # noqa: S102 - judged
            self._kernel = namespace["kernel"]
            # deferred: the judge's gradient check pulls in the harness (pydantic, the suite); `import mk` stays light
            from mk.harness.gradient import BACKWARD_ENTRY, declares_backward

            # only a backward the judge saw declared (and so traced and checked against the reference's VJP)
            if declares_backward(source) and callable(namespace.get(BACKWARD_ENTRY)):
                self._kernel_bwd = namespace[BACKWARD_ENTRY]

    def __repr__(self) -> str:
        state = "kernel" if self._kernel is not None else "no kernel"
        return f"<mk.OptimizedFunction {self.task.name} ({state}, target {self._target.name}, {self.report.status})>"

    # --- calling ---------------------------------------------------------------------------------
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        bound = self._bind(args, kwargs)
        leaves, why = self._inside(bound)
        if why is None:
            why = self._absent()
        if why is not None:
            self._fallback(why, bound)
            return self.reference(*bound.ref_args, **bound.ref_kwargs)
        self._count("kernel", bound)
        with self._target.execution():
            return self._run(bound, leaves)

    def reason(self, *args: Any, **kwargs: Any) -> str | None:
        """Why a call with these arguments would run the reference; None when it would run the kernel."""
        return self._inside(self._bind(args, kwargs))[1] or self._absent()

    def run_kernel(self, *args: Any, **kwargs: Any) -> Any:
        """Run the kernel here whatever the device (TPU/GPU kernels in Pallas interpret mode on a CPU).

        Raises :class:`~mk.errors.EnvelopeError` (saying what was verified) when the inputs or
        statics are outside the verified envelope, ConfigError when there is no verified kernel."""
        if self._kernel is None:
            raise ConfigError("there is no verified kernel to run", hint=self.report.stop_reason)
        bound = self._bind(args, kwargs)
        leaves, why = self._inside(bound)
        if why is not None:
            verified = "; ".join(line.strip() for line in self.envelope.lines()) if self.envelope else "nothing recorded"
            raise EnvelopeError(f"{self.task.name}: {why}", hint=f"the kernel was verified on: {verified}",
                                envelope=self.envelope.to_dict() if self.envelope else None)
        self._count("kernel", bound)
        with self._target.execution():
            return self._run(bound, leaves)

    def save(self, path: str | Path) -> Path:
        if not self.source:
            raise ConfigError("there is no verified kernel to save", hint=self.report.stop_reason)
        p = Path(path)
        p.write_text(self.source)
        return p

    # --- inside ----------------------------------------------------------------------------------------
    def _absent(self) -> str | None:
        """Why the kernel cannot run on this machine (its target's device is missing); None for cpu kernels."""
        if self._target.host or self._target.device_present():
            return None
        return f"the kernel was verified for {self._target.name}, and this machine has no {self._target.name.upper()}"

    def _bind(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
        try:
            return self.spec.bind(args, kwargs)
        except TypeError as exc:
            params = ", ".join(self.spec.signature.parameters) if self.spec.signature is not None else "positional inputs"
            raise ArgumentError(f"{self.task.name}(): {exc}", hint=f"it takes what {self.task.name} takes: ({params})") from None

    def _inside(self, bound: Any) -> tuple[list[Any] | None, str | None]:
        """(the kernel's leaves, None) when the kernel may run on this call; (None, why not) otherwise."""
        import jax

        if self._kernel is None:
            return None, f"no verified kernel ({self.report.stop_reason})"
        if self.envelope is None:
            return None, "the kernel's verified envelope was not recorded"
        if bound.params != self.spec.params:
            return None, (f"the call gives array inputs for {', '.join(bound.params) or 'nothing'}; the kernel was "
                          f"verified with {', '.join(self.spec.params)}")
        leaves, tree = jax.tree_util.tree_flatten(bound.values)
        if tree != self.spec.in_tree:
            return None, f"the inputs' structure {tree} is not the verified {self.spec.in_tree}"
        leaves = [self._leaf(i, v) for i, v in enumerate(leaves)]
        shapes, dtypes = [], []
        for name, leaf in zip(self.spec.names, leaves):
            if not (hasattr(leaf, "shape") and hasattr(leaf, "dtype")):
                return None, f"input {name!r} is a {type(leaf).__name__}, not an array"
            shapes.append(tuple(leaf.shape))
            dtypes.append(jax.dtypes.canonicalize_dtype(leaf.dtype))
        for name, value in bound.static.items():
            if isinstance(value, jax.core.Tracer):
                return None, (f"static argument {name!r} is a traced value; under jax.jit mark it static "
                              f"(jax.jit(f, static_argnames=({name!r},)))")
        why = self.envelope.check(shapes, dtypes, bound.static)
        if why is not None:
            return None, f"outside the verified envelope: {why}"
        why = self._same_program(shapes, dtypes, bound.static)
        if why is not None:
            return None, why
        return leaves, None

    def _same_program(self, shapes: list[tuple[int, ...]], dtypes: list[Any], static: Mapping[str, Any]) -> str | None:
        """Why ``fn`` computes another program at these shapes than at the verified ones (a Python branch on a
        shape, say), else None. Compared as jaxprs with every number blanked out, so sizes and shape-derived
        constants may differ; decided once per signature."""
        import jax

        key = repr((shapes, [str(d) for d in dtypes], sorted((k, repr(v)) for k, v in static.items())))
        if key not in self._programs:
            if self._verified_program is None:
                self._verified_program = _program_form(self.task.reference, self.task.arg_structs(),
                                                       dict(zip((s.name for s in self.task.static), self.task.static_values())))
            here = _program_form(self.task.reference, [jax.ShapeDtypeStruct(sh, dt) for sh, dt in zip(shapes, dtypes)],
                                 dict(static))
            self._programs[key] = None if here is not None and here == self._verified_program else (
                "the function computes a different program at these shapes than at the verified ones "
                "(its jaxpr differs, e.g. a Python branch on a shape), so the kernel does not apply")
        return self._programs[key]

    def _leaf(self, i: int, v: Any) -> Any:
        """A Python scalar given where a 0-d array was verified becomes one, of the verified dtype."""
        import jax.numpy as jnp
        import numpy as np

        if self.spec.ranks[i] != 0 or type(v) not in (bool, int, float, complex):
            return v
        dtype = jnp.dtype(self.spec.dtypes[i])
        kind = "f" if jnp.issubdtype(dtype, jnp.floating) else np.dtype(dtype).kind  # bfloat16 and fp8 are floating
        if kind not in {bool: "b", int: "iufc", float: "fc", complex: "c"}[type(v)]:
            return v  # e.g. 0.5 for an int32 input: never truncated; the envelope check refuses it
        try:
            return jnp.asarray(v, dtype=self.spec.dtypes[i])
        except (OverflowError, TypeError, ValueError):
            return v

    # --- running -------------------------------------------------------------------------------------
    def _run(self, bound: Any, leaves: list[Any]) -> Any:
        import jax

        key = _static_key(bound.static)
        fn = self._compiled.get(key)
        if fn is None:
            fn = self._compiled[key] = self._build(dict(bound.static))
        flat = fn(*leaves)
        tree = self._out_tree(key, bound.static, leaves)
        if len(flat) != tree.num_leaves:
            raise MkError(f"{self.task.name}: the kernel returned {len(flat)} outputs, the reference {tree.num_leaves}",
                          hint="the judge checks the output structure; re-run mk.optimize with cache=False")
        return jax.tree_util.tree_unflatten(tree, list(flat))

    def _out_tree(self, key: str, static: Mapping[str, Any], leaves: Sequence[Any]) -> Any:
        """The reference's output tree at these shapes and statics (the kernel returns its leaves)."""
        import jax

        sig = (key, tuple((tuple(x.shape), str(x.dtype)) for x in leaves))
        if sig not in self._out_trees:
            structs = [jax.ShapeDtypeStruct(tuple(x.shape), x.dtype) for x in leaves]
            args_of = functools.partial(self.spec.user_arguments, static=static)

            def ref(*xs: Any) -> Any:
                a, kw = args_of(xs)
                return self.reference(*a, **kw)

            self._out_trees[sig] = jax.tree_util.tree_structure(jax.eval_shape(ref, *structs))
        return self._out_trees[sig]

    def _build(self, static: dict[str, Any]) -> Callable[..., Any]:
        """The jitted kernel for these statics: a custom_vjp around a custom_vmap (batched: the reference). Its
        backward is the written file's ``kernel_bwd`` (judged against the reference's VJP, see
        :func:`mk.harness.gradient`) when it defines one, else the reference's VJP."""
        import jax
        from jax import custom_batching

        spec, kernel, reference, kernel_bwd = self.spec, self._kernel, self.reference, self._kernel_bwd

        def kernel_flat(*leaves: Any) -> tuple[Any, ...]:
            return tuple(jax.tree_util.tree_leaves(spec.call(kernel, leaves, static)))

        def reference_flat(*leaves: Any) -> tuple[Any, ...]:
            a, kw = spec.user_arguments(leaves, static)
            return tuple(jax.tree_util.tree_leaves(reference(*a, **kw)))

        def unbatched_only(fn: Callable[..., Any], fallback: Callable[..., Any], why: str) -> Any:
            """``fn`` as judged (unbatched shapes); under jax.vmap, ``fallback`` (the reference's form) instead,
            with one FallbackWarning: a kernel's batched shapes were never judged."""
            wrapped = custom_batching.custom_vmap(fn)

            @wrapped.def_vmap
            def _batched(axis_size: int, in_batched: Sequence[bool], *args: Any) -> tuple[Any, Any]:
                self.traces["batched"] += 1
                self._fallback(f"{why} under jax.vmap (a batch of {axis_size}) was never verified")
                out = jax.vmap(fallback, in_axes=tuple(0 if b else None for b in in_batched))(*args)
                return out, tuple(True for _ in out)

            return wrapped

        primal = unbatched_only(kernel_flat, reference_flat, "the kernel")

        @jax.custom_vjp
        def run(*leaves: Any) -> tuple[Any, ...]:
            return primal(*leaves)

        def fwd(*leaves: Any) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
            return primal(*leaves), leaves

        def bwd(leaves: tuple[Any, ...], cotangents: tuple[Any, ...]) -> tuple[Any, ...]:
            if kernel_bwd is None:
                return jax.vjp(reference_flat, *leaves)[1](cotangents)
            n, want = len(leaves), [i for i, x in enumerate(leaves) if _differentiable(x)]

            def kernel_bwd_flat(*args: Any) -> tuple[Any, ...]:
                # the residuals are the inputs: the written backward recomputes what it needs (row statistics, lse)
                cts = args[n:]
                ct = cts[0] if len(cts) == 1 else tuple(cts)
                # traced when the caller's grad transposes, after run_kernel/__call__ left their execution
                # context: the backward's kernels run where the forward's did (interpreted without the device)
                with self._target.execution():
                    grads = tuple(spec.call(functools.partial(kernel_bwd, ct), args[:n], static))
                if len(grads) != n:
                    raise MkError(f"{self.task.name}: the kernel's backward returned {len(grads)} cotangents for "
                                  f"{n} inputs", hint="the judge checks this; re-run mk.optimize with cache=False")
                return tuple(grads[i] for i in want)

            def reference_bwd_flat(*args: Any) -> tuple[Any, ...]:
                grads = jax.vjp(reference_flat, *args[:n])[1](tuple(args[n:]))
                return tuple(grads[i] for i in want)

            backward = unbatched_only(kernel_bwd_flat, reference_bwd_flat, "the backward")
            got = dict(zip(want, backward(*leaves, *cotangents)))
            return tuple(got.get(i) for i in range(n))

        run.defvjp(fwd, bwd)
        return jax.jit(run)

    def _count(self, which: str, bound: Any) -> None:
        """One more call (concrete inputs: it runs now) or trace (a traced program will run it) choosing ``which``."""
        import jax

        traced = any(isinstance(x, jax.core.Tracer) and not jax.core.is_concrete(x)
                     for x in jax.tree_util.tree_leaves((bound.values, bound.static)))
        (self.traces if traced else self.calls)[which] += 1

    def _fallback(self, why: str, bound: Any = None) -> None:
        if bound is not None:
            self._count("reference", bound)
        if why in self._warned:
            return
        self._warned.add(why)
        log.info("mk: %s: %s; running the reference", self.task.name, why)
        warnings.warn(f"mk: {self.task.name}: {why}; running the reference", FallbackWarning, stacklevel=3)


def _differentiable(x: Any) -> bool:
    import jax.numpy as jnp

    return jnp.issubdtype(x.dtype, jnp.inexact)


def _static_key(static: Mapping[str, Any]) -> str:
    return repr(sorted((k, repr(v)) for k, v in static.items()))


# --- the cache -------------------------------------------------------------------------------------------
def cache_key(task: Task, target: str, spec: CallSpec) -> str | None:
    """The store key of an optimisation: a hash of what the function computes
    (:func:`mk.loaders.callable.computation_hash`: its jaxpr at every scale's shapes and statics, with its
    constants' bytes), the task's inputs, inits, scales, statics and tolerances, the input tree structure,
    the target, this machine's device kind and the mk version.

    Changed globals and closed-over values change the jaxpr (as literals or constants), so they never reuse
    a kernel; a renamed variable or a comment does not. None when the function cannot be traced abstractly
    (nothing is then cached)."""
    from mk.targets import get_target

    computation = computation_hash(spec, task.args, task.scales)
    if computation is None:
        log.info("mk.optimize: %s cannot be traced abstractly; its result is not cached", task.name)
        return None
    d = task.describe()
    blob = json.dumps({
        "computation": computation, "name": task.name, "inputs": [repr(a) for a in task.args], "scales": d["scales"],
        "static": {s: repr(task.static_values(s)) for s in task.scales}, "atol": d["atol"], "rtol": d["rtol"],
        "static_as_kwargs": task.static_as_kwargs, "heldout": repr((task.heldout, dict(task.dim_units), dict(task.vary_static))),
        "tree": str(spec.in_tree), "params": list(spec.params), "statics": list(spec.static_names), "flat": spec.flat,
        "target": target, "device": get_target(target).device_kind() or "none", "mk": __version__,
    }, sort_keys=True, default=repr)
    return hashlib.sha256(blob.encode()).hexdigest()


# --- optimize ----------------------------------------------------------------------------------------------
def optimize(
    fn: Callable[..., Any],
    shapes: Any = None,
    *,
    static: Mapping[str, Any] | Sequence[Any] | None = None,
    static_argnames: str | Sequence[str] | None = None,
    target: str = "tpu",
    lm: Any = None,
    mode: str = "auto",
    iterations: int = 4,
    max_trials: int = 6,
    tune: bool = True,
    budget: Any = None,
    search: dict[str, Any] | None = None,
    explore: bool = False,
    on_event: Callable[[str, dict[str, Any]], None] | None = None,
    db: str | Path | None = None,
    out: str | Path | None = None,
    cache: bool = True,
    atol: float | Sequence[float] | None = None,
    rtol: float | Sequence[float] | None = None,
    name: str | None = None,
    scales: Mapping[str, Any] | None = None,
    inits: Mapping[str, Any] | None = None,
    description: str = "",
    **unknown: Any,
) -> OptimizedFunction:
    """Optimise the JAX function ``fn`` for ``shapes``; return a callable that runs the best verified kernel
    inside its verified envelope and ``fn`` itself everywhere else.

    What to optimise:

    fn
        A JAX function of arrays (and pytrees of arrays) plus, optionally, static arguments.
    shapes
        The input shapes and dtypes to optimise for: a list with one item per array argument (in order,
        skipping static ones), a dict ``{parameter name: item}`` (keyword arguments), or one item for a
        one-input function. An item is a ``jax.ShapeDtypeStruct``, an array (only its shape and dtype are
        read), a ``(shape, dtype)`` pair such as ``((1024, 512), "float32")``, or a pytree (dict, list,
        tuple, nested) of those for a pytree argument; a 0-d input is ``((), "float32")``. Pytree leaves
        become the task's inputs, named by key path (``params.w``). The judge also runs a held-out larger
        scale the author never sees, so a kernel is verified for a shape rule ("any multiple of 128 >= 512"),
        not one size.
    static
        The values of static (non-array) arguments to optimise for: ``{"temperature": 1.0}``; a list gives
        values for the parameters after the inputs, in order. Its keys are static arguments even without
        ``static_argnames``.
    static_argnames
        The names of ``fn``'s static arguments, as in ``jax.jit``: ``static_argnames=("temperature",)``.
        Each takes its value from ``static`` or else ``fn``'s default. Calls may pass other values: the
        kernel receives them when the envelope allows them, the reference runs otherwise.
    scales
        Several named sizes instead of (or besides) ``shapes`` as ``"full"``: ``{"full": ..., "ci": ...}``;
        a value may be ``{"shapes": ..., "static": {...}}``. Every scale is part of the verification.
    inits
        How to draw an input, by leaf name: ``{"idx": {"kind": "randint", "low": 0, "high": 10}}``
        (default: N(0, 1) for floating inputs, small non-negative integers otherwise).
    atol, rtol
        Tolerances against the reference (one number, or one per output leaf); default by dtype.
    name, description
        The task's name (default ``fn.__name__``; it names the kernel file) and a one-line description.

    How to optimise (passed to :func:`mk.job.optimize_task`):

    target
        ``"tpu"`` (default), ``"gpu"`` or ``"cpu"``. Without that device here, correctness is checked in
        Pallas interpret mode and nothing is timed; the returned callable then runs the reference (``cpu``
        kernels run anywhere).
    lm
        The author: a model name, a DSPy LM, or ``"offline"`` for the rule-based author (the default when
        no model is configured).
    mode, search
        ``mode="auto"`` (one trajectory) or ``"search"`` (a tree of trajectories); ``search`` is a dict of
        SearchConfig fields for the latter: algorithm, width, depth, branches, workers ...
    iterations
        Plans to try (auto), or the search depth bound.
    max_trials, tune
        Autotuning trials per candidate, and whether to autotune at all.
    budget
        A :class:`mk.budget.Budget` (LM calls, cost, wall time) or BudgetMeter; the run stops with a clear
        reason when it is spent.
    explore
        With a model and no device of the target nothing can be timed, so the LM author stops after its first
        correct kernel (and says so before spending); ``explore=True`` keeps asking it.
    on_event
        ``on_event(kind, payload)`` progress callback.

    Where results go:

    db
        The DuckDB store (default ``$MK_DB``, else ``$MK_HOME/mk.duckdb``, else ``~/.mk/mk.duckdb``): runs,
        trials, and this cache.
    out
        The folder for the kernel file and its JSON report (default ``mk-out``).
    cache
        Return a stored result when :func:`cache_key` matches: the same computation (jaxpr and constants,
        so a changed global or closure re-optimises), input structure, shapes, statics, tolerances, target,
        device kind and mk version. A stored run that found no kernel is not reused. ``cache=False``
        recomputes (and stores the new result). The search settings are not part of the key.

    Returns an :class:`OptimizedFunction` with ``fn``'s signature (``.report``, ``.source``, ``.envelope``,
    ``.save(path)``, ``.run_kernel(...)``, ``.reason(...)``). It works under ``jax.jit``, ``jax.vmap``
    (batched calls run the reference) and ``jax.grad`` (the written file's judged backward kernel,
    ``kernel_bwd``, where it has one, else the reference's VJP).

    Raises :class:`ArgumentError` (a ConfigError and a TypeError) for an unknown keyword argument, even
    when the result is cached, and TaskError when ``fn`` does not trace at ``shapes``.
    """
    if unknown:
        accepted = [p for p in _OPTIONS if p not in ("fn", "shapes")]
        words = []
        for k in sorted(unknown):
            close = difflib.get_close_matches(k, accepted, n=1)
            words.append(f"{k!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
        raise ArgumentError(f"mk.optimize() got unknown keyword argument(s) {', '.join(words)}",
                            hint=f"it accepts: {', '.join(accepted)}; see help(mk.optimize)")
    from mk.store import Store

    task, spec = callable_task(fn, shapes, static=static, static_argnames=static_argnames, atol=atol, rtol=rtol, name=name,
                               scales=scales, inits=inits, description=description, computation_key=True)
    key = cache_key(task, target, spec)
    if cache and key is not None:
        with Store.open(db) as store:
            rows = store.query("select kernel_source, report from optimize_cache where key = ?", [key])
        if rows:
            stored = rows[0]["report"]
            stored = json.loads(stored) if isinstance(stored, str) else stored
            fields = {f.name for f in dataclasses.fields(OptimizeReport)}
            report = OptimizeReport(**{k: v for k, v in stored.items() if k in fields})
            if report.status == "correct" and rows[0]["kernel_source"]:
                log.info("mk.optimize: cached result of run %s", report.run_id)
                return OptimizedFunction(fn, task, report, rows[0]["kernel_source"], spec=spec, cached=True)
            log.info("mk.optimize: the stored run %s found no kernel; optimising again", report.run_id)
    try:
        report = optimize_task(task, target=target, lm=lm, mode=mode, iterations=iterations, db=db, out=out, tune=tune,
                               max_trials=max_trials, on_event=on_event, budget=budget, search=search, explore=explore)
    except KeyboardInterrupt:
        _INTERRUPTED[task.fingerprint()] = (fn, task, spec)  # what mk.resume(run_id) continues in this process
        raise
    return _finished(fn, task, spec, report, key, db)


def _finished(fn: Callable[..., Any], task: Task, spec: CallSpec, report: OptimizeReport, key: str | None,
              db: str | Path | None) -> OptimizedFunction:
    """The callable for a finished run, its result stored under the cache ``key``."""
    from datetime import datetime, timezone

    from mk.store import Store
    from mk.targets import get_target

    source = Path(report.kernel_path).read_text() if report.kernel_path else None
    if key is not None:
        device = get_target(report.target).device_kind() or "none"
        with Store.open(db) as store:
            store.execute("delete from optimize_cache where key = ?", [key])
            store.execute("insert into optimize_cache values (?, ?, ?, ?, ?, ?, ?, ?)",
                          [key, task.name, report.target, device, report.run_id, source,
                           json.dumps(report.to_dict(), default=str), datetime.now(timezone.utc).replace(tzinfo=None)])
    return OptimizedFunction(fn, task, report, source, spec=spec)


#: task fingerprint -> (fn, task, spec) of an mk.optimize interrupted in this process (mk.resume(run_id) finds it)
_INTERRUPTED: dict[str, tuple[Callable[..., Any], Task, CallSpec]] = {}
_TASK_OPTIONS = ("static", "static_argnames", "atol", "rtol", "name", "scales", "inits", "description")


def resume(run_id: str, fn: Callable[..., Any] | None = None, shapes: Any = None, *, lm: Any = None, budget: Any = None,
           on_event: Callable[[str, dict[str, Any]], None] | None = None, db: str | Path | None = None,
           out: str | Path | None = None, **task_options: Any) -> OptimizedFunction:
    """Continue a run of :func:`optimize` that was interrupted (Ctrl-C) or killed, and return its callable.

    ``mk resume RUN`` cannot load a Python function, so it is continued here. In the process where
    ``mk.optimize`` was interrupted, ``mk.resume(run_id)`` is enough; elsewhere pass the function, the shapes
    and the task arguments (``static``, ``static_argnames``, ``atol``, ``rtol``, ``name``, ``scales``,
    ``inits``, ``description``) given to ``mk.optimize``: the task they make must freeze the same suite, else
    TaskError. The run keeps its snapshots (or a search its nodes) and goes on with its own config (target,
    author, iterations); ``lm`` replaces its author, ``budget`` (a :class:`mk.budget.Budget`) gives a new one.
    The kernel and report go to the run's own ``out`` unless given."""
    from mk.programs.modes import resume as resume_run
    from mk.run.output import prepare_output_dir, write_outputs
    from mk.store import Store

    unknown = sorted(set(task_options) - set(_TASK_OPTIONS))
    if unknown:
        raise ArgumentError(f"mk.resume() got unknown keyword argument(s) {', '.join(map(repr, unknown))}",
                            hint=f"task arguments: {', '.join(_TASK_OPTIONS)}; see help(mk.resume)")
    with Store.open(db) as store:
        row = store.find_run(run_id)
        if fn is None:
            found = _INTERRUPTED.get(row.get("task_fingerprint") or "")
            if found is None:
                raise ConfigError(f"run {row['id']} was not started by an mk.optimize interrupted in this Python process",
                                  hint="pass the function, its shapes and the task arguments given to mk.optimize: "
                                       f"mk.resume({row['id'][:12]!r}, fn, shapes, ...)")
            fn, task, spec = found
        else:
            task, spec = callable_task(fn, shapes, computation_key=True, **task_options)
        out_dir = prepare_output_dir(out or (row.get("config") or {}).get("out"))
        run, outcome = resume_run(store, row["id"], lm=lm, budget=budget, on_event=on_event, task=task)
        report = write_outputs(run, outcome, out_dir)
    _INTERRUPTED.pop(task.fingerprint(), None)
    return _finished(fn, task, spec, report, cache_key(task, report.target, spec), db)


_OPTIONS = [p for p in optimize.__code__.co_varnames[:optimize.__code__.co_argcount + optimize.__code__.co_kwonlyargcount]]


def _program_form(reference: Callable[..., Any], structs: Sequence[Any], static: Mapping[str, Any]) -> str | None:
    """The reference's jaxpr at ``structs`` with every number blanked (None when it cannot be traced there)."""
    import re

    import jax

    try:
        closed = jax.make_jaxpr(lambda *leaves: reference(*leaves, **static))(*structs)
    except Exception:  # noqa: BLE001 - untraceable here: treated as a different program (the reference runs)
        return None
    return re.sub(r"\d+", "#", str(closed.jaxpr))
