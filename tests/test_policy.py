"""The runtime sandbox policy, exercised in a fresh subprocess (audit hooks cannot be removed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

PROBE = textwrap.dedent(r'''
    import json, os, socket, subprocess, sys, tempfile
    import jax, jax.numpy as jnp
    import numpy as np
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu
    from mk.harness.policy import denied_events, install_sandbox_policy, sandbox_installed

    work, outside, victim = sys.argv[1], sys.argv[2], sys.argv[3]
    install_sandbox_policy([work])
    install_sandbox_policy([outside])  # a second install must not widen the policy
    res = {"installed": sandbox_installed()}

    # what JAX needs after the policy is in place: a fresh jit, a Pallas interpret-mode kernel, lazy imports
    x = np.arange(8 * 128, dtype=np.float32).reshape(8, 128)
    res["jit"] = float(jax.jit(lambda a: jnp.sin(a) @ a.T)(x).sum())
    def body(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2.0
    with pltpu.force_tpu_interpret_mode(pltpu.InterpretParams(uninitialized_memory="nan", detect_races=True)):
        y = pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)
    res["pallas"] = bool(np.array_equal(np.asarray(y), x * 2))
    import numpy.testing, unittest  # noqa: F401  (modules first imported after install)
    res["lazy_import"] = True

    def attempt(name, fn):
        try:
            fn()
            res[name] = "allowed"
        except PermissionError as e:
            res[name] = "denied: " + str(e)
        except Exception as e:
            res[name] = "error: %s: %s" % (type(e).__name__, e)

    def write_work():
        with open(os.path.join(work, "ok.txt"), "w") as f:
            f.write("hi")
        with open(os.path.join(work, "ok.txt")) as f:
            assert f.read() == "hi"
    attempt("write_work", write_work)
    attempt("rename_work", lambda: os.rename(os.path.join(work, "ok.txt"), os.path.join(work, "ok2.txt")))
    attempt("remove_work", lambda: os.remove(os.path.join(work, "ok2.txt")))
    attempt("tempfile", lambda: tempfile.NamedTemporaryFile().close())
    attempt("read_stdlib", lambda: open(os.__file__).read(10))
    attempt("read_outside", lambda: open(victim).read())
    attempt("read_etc", lambda: open("/etc/hostname" if os.path.exists("/etc/hostname") else "/etc/passwd").read())
    attempt("write_outside", lambda: open(os.path.join(outside, "x.txt"), "w"))
    attempt("os_open_write", lambda: os.open(os.path.join(outside, "y.txt"), os.O_WRONLY | os.O_CREAT))
    attempt("symlink_escape", lambda: open(os.path.join(work, "link")).read())
    attempt("remove_outside", lambda: os.remove(victim))
    attempt("rename_outside", lambda: os.rename(victim, os.path.join(work, "stolen")))
    attempt("listdir_outside", lambda: os.listdir(outside))
    attempt("socket", lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM))
    attempt("getaddrinfo", lambda: socket.getaddrinfo("localhost", 80))
    attempt("subprocess", lambda: subprocess.run(["true"]))
    attempt("os_system", lambda: os.system("true"))
    attempt("execv", lambda: os.execv(sys.executable, [sys.executable, "-c", "pass"]))
    attempt("fork", lambda: os.fork())
    attempt("kill_parent", lambda: os.kill(os.getppid(), 0))
    def dlopen():
        import ctypes
        ctypes.CDLL("libc.so.6")
    attempt("ctypes", dlopen)
    def setrlimit():
        import resource
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        resource.setrlimit(resource.RLIMIT_AS, (hard, hard))
    attempt("setrlimit", setrlimit)
    attempt("new_audit_hook", lambda: sys.addaudithook(lambda e, a: None))
    res["still_works"] = float(jax.jit(lambda a: a + 1)(x).sum())  # after a new hook, the policy and JAX still work
    attempt("read_after_new_hook", lambda: open(victim).read())
    res["denied_count"] = len(denied_events())
    print(json.dumps(res))
''')


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    work = tmp_path_factory.mktemp("work")
    outside = tmp_path_factory.mktemp("outside")
    victim = outside / "secret.txt"
    victim.write_text("secret")
    os.symlink(victim, work / "link")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["JAX_PLATFORMS"] = "cpu"
    proc = subprocess.run([sys.executable, "-c", PROBE, str(work), str(outside), str(victim)], cwd=str(outside),
                          capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    res["_victim_exists"] = victim.exists()
    res["_outside_files"] = sorted(p.name for p in outside.iterdir())
    return res


def test_jax_still_runs_under_the_policy(probe):
    assert probe["installed"] is True
    assert probe["jit"] != 0.0
    assert probe["pallas"] is True
    assert probe["lazy_import"] is True
    assert probe["still_works"] > 0


@pytest.mark.parametrize("name", ["write_work", "rename_work", "remove_work", "tempfile", "read_stdlib", "new_audit_hook"])
def test_allowed(probe, name):
    assert probe[name] == "allowed", probe[name]


@pytest.mark.parametrize("name,phrase", [
    ("read_outside", "reading"), ("read_etc", "reading"), ("write_outside", "writing"), ("os_open_write", "writing"),
    ("symlink_escape", "reading"), ("remove_outside", "os.remove"), ("rename_outside", "os.rename"),
    ("listdir_outside", "listing"), ("socket", "socket"), ("getaddrinfo", "socket"), ("subprocess", "subprocess"),
    ("os_system", "os.system"), ("execv", "os.exec"), ("fork", "os.fork"), ("kill_parent", "os.kill"),
    ("ctypes", "ctypes"), ("setrlimit", "resource limits"), ("read_after_new_hook", "reading"),
])
def test_denied(probe, name, phrase):
    assert probe[name].startswith("denied: mk sandbox: "), probe[name]
    assert probe[name].endswith("is not allowed")
    assert phrase in probe[name]


def test_nothing_escaped_and_denials_recorded(probe):
    assert probe["_victim_exists"]
    assert probe["_outside_files"] == ["secret.txt"]
    assert probe["denied_count"] >= 17
