"""The harness contract, stated once for the instructions of the sub-agents that write code.

Every rule here is one the judge enforces (``mk/harness/static.py``, ``mk/harness/evaluate.py``); a candidate
that breaks one is rejected before it runs or fails on a suite shape, so the model should know them before it
writes a line. The import allow-list is the static check's own (:data:`mk.harness.static.ALLOWED_IMPORT_ROOTS`).
"""

from __future__ import annotations

from mk.harness.static import ALLOWED_IMPORT_ROOTS

#: the allow-list in the order a person reads it (the static check's set, nothing added)
ALLOWED_IMPORTS = tuple(sorted(ALLOWED_IMPORT_ROOTS, key=lambda m: (m not in ("jax", "numpy"), m == "__future__", m)))

CONTRACT = f"""
The judge's rules (a candidate that breaks one is rejected; nothing else about the harness is negotiable):
1. No try/except, no try/finally that returns, no context-manager classes: no fallback path. Let errors surface.
2. Import only these modules (and their submodules): {", ".join(ALLOWED_IMPORTS)}.
   Not allowed even inside them: jax._src, jax.extend, jax.ffi, jax.lib, jax.config, jax.profiler, host callbacks
   (jax.pure_callback, io_callback, jax.debug.callback), numpy.testing. No open/eval/exec/compile/__import__/
   globals/vars, no dunder attributes, getattr only with a literal name.
3. No module-level state: no `global`/`nonlocal`, no writes into module-level containers or attributes from a
   function, no mutable default arguments, no caches. Module level holds only imports, functions, constants, CONFIG_SPACE.
4. On tpu and gpu the outputs must be produced by a pallas_call doing the real work (the judge replaces each
   kernel's outputs by NaN and expects the result to change); never set interpret=True yourself.
5. Every point of CONFIG_SPACE runs on every suite shape, including sizes you are not shown: derive block sizes
   from the shapes (a divisor of the dimension, or pl.cdiv grids with masked edges), never assume one shape.
6. Read shapes, dtypes and statics from the arguments at trace time (x.shape, x.dtype, the static arguments),
   never from constants copied from the task description.
7. No I/O, no timing, no prints, no randomness of your own.
""".strip()
