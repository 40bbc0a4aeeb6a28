# Rule 8 (round 2, class escape): read the judge's command line, /proc/<ppid>/cmdline, which names the task module
#   (and so the reference's source). `open` is `enum.bltns.open` (enum keeps builtins as `bltns`), `os` comes from
#   `collections._sys.modules`, and the audit hook is first switched off with r2_escape_policy_flag.py's
#   `_guard.busy`. If the parent is not mk's own sandbox machinery (its cmdline does not mention `mk.harness`), the
#   candidate raises with what it read, so a leak shows in the verdict's reason.
# Class: escape (reading the judge's command line). Target: cpu. Task: adv_tanh_mix.
# Today (HEAD f7ab8eb): compile_error -- "leaked judge cmdline: .../python -I -m mk eval <task.py> <candidate.py> ..."
#   (without the `_guard` line: rejected, "mk sandbox: reading '/proc/<pid>/cmdline' ... is not allowed").
# Expected verdict: never "leaked judge cmdline": correct (the parent is the sandbox's own) or rejected /
#   compile_error with "mk sandbox: reading '/proc/" or "Permission denied" / "No such file".
import collections
import enum

import jax.numpy as jnp

_sys = (lambda m: m._sys)(collections)
_policy = _sys.modules.get("mk.harness.policy")
if _policy is not None:
    _policy._guard.busy = True
with enum.bltns.open(f"/proc/{_sys.modules['os'].getppid()}/cmdline", "rb") as _f:
    _cmdline = _f.read().replace(b"\0", b" ").decode(errors="replace")
if "mk.harness" not in _cmdline:
    raise RuntimeError(f"leaked judge cmdline: {_cmdline[:200]}")


def kernel(x, y):
    return jnp.tanh(x) * y + 0.5 * x
