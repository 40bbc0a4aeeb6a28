# Rule 8 (round 2, class escape): switch the runtime sandbox policy off through its own module state. The audit hook
#   in mk.harness.policy returns early while `_guard.busy` is set (its re-entrancy guard, a threading.local), so
#   setting it in the candidate's thread disables every check. Then the candidate reads its parent's environment,
#   /proc/<ppid>/environ -- in HEAD's design the judge's, with the variables (API keys) the worker's scrubbed env
#   leaves out. Only variable *names* are compared with its own; if the parent has names the sandbox hides, it
#   raises with their count (no names, no values), so a leak shows in the verdict.
# Class: escape (audit hook switched off). Target: cpu. Task: adv_tanh_mix.
# Today (HEAD f7ab8eb): compile_error -- "judge environment leaked: N variable(s) the sandbox hides".
# Expected verdict: never "leaked": correct (the parent is the sandbox's own, e.g. bwrap's pid 1) or rejected /
#   compile_error with "mk sandbox: reading '/proc/" or an OS-level "Permission denied" / "No such file".
import collections

import jax.numpy as jnp

_sys = (lambda m: m._sys)(collections)
_policy = _sys.modules.get("mk.harness.policy")
if _policy is not None:
    _policy._guard.busy = True
_os = _sys.modules["os"]
_fd = _os.open(f"/proc/{_os.getppid()}/environ", _os.O_RDONLY)
_names = {kv.split(b"=", 1)[0] for kv in _os.read(_fd, 1 << 20).split(b"\0") if kv}
_os.close(_fd)
_hidden = _names - set(_os.environb)
if _hidden:
    raise RuntimeError(f"judge environment leaked: {len(_hidden)} variable(s) the sandbox hides")


def kernel(x, y):
    return jnp.tanh(x) * y + 0.5 * x
