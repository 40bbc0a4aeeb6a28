"""Auto's phases with a scripted author: fix loop, short-circuit on failure, rollback to the best snapshot."""

from fakes import ScriptedAuthor, tanh2_task

from mk.programs.auto import PHASES, Auto
from mk.store import Store

BROKEN = "import jax.numpy as jnp\ndef kernel(x):\n    return jnp.tanh(x) @ jnp.ones((3, 5))\n"  # shape error at trace time
FIXED = "import jax.numpy as jnp\ndef kernel(x):\n    return jnp.tanh(x) * 2.0\n"
WRONG = "import jax.numpy as jnp\ndef kernel(x):\n    return jnp.tanh(x) * 2.0 + 0.5\n"
SLOW = (
    "import jax.numpy as jnp\nfrom jax import lax\n"
    "def kernel(x):\n"
    "    extra = lax.fori_loop(0, 400, lambda i, acc: acc + jnp.sin(acc + i) * 0.0, jnp.zeros_like(x))\n"
    "    return jnp.tanh(x) * 2.0 + extra\n"
)


def _author():
    return ScriptedAuthor([("broken-then-fixed", BROKEN), ("wrong", WRONG), ("slow", SLOW)],
                          rationale="try {name}; history: {feedback}", fixed=FIXED,
                          analysis=lambda report: "measured" if report.measured else "unmeasured")


def _task():
    return tanh2_task({"ci": (64, 128)})


def test_auto_phases_fix_shortcircuit_and_rollback(tmp_path):
    events = []
    author = _author()
    with Store.open(tmp_path / "db.duckdb") as store:
        auto = Auto(author, target="cpu", iterations=5, store=store, on_event=lambda k, d: events.append((k, d)))
        traj = auto.start(_task())
        phases = []
        while not traj.done:
            phases.append(auto.step(traj).phase)
        assert phases[:3] == ["plan", "implement", "validate"]
        assert set(phases) <= set(PHASES)
        statuses = [(s.proposal, s.status, s.failed_phase) for s in traj.snapshots]
        assert statuses[0][:2] == ("broken-then-fixed", "correct")
        assert statuses[1][1] == "incorrect" and statuses[1][2] in ("validate", "test")
        assert statuses[2][:2] == ("slow", "correct")
        assert len(author.fixes) == 1  # the compile error went to the fixer once
        assert "no further proposals" in traj.stop_reason
        best = traj.best
        assert best is not None and best.proposal == "broken-then-fixed", [s.speedup for s in traj.snapshots]
        assert best.speedup is not None and traj.snapshots[2].speedup < best.speedup  # rolled back, not the last
        # the failure's context reached the next plan
        assert "wrong" in traj.snapshots[2].rationale and "incorrect" in traj.snapshots[2].rationale
        rows = store.query("select count(*) as n from snapshots where run_id = ?", [traj.run_id])
        assert rows[0]["n"] == 3
        run = store.get_run(traj.run_id)
        assert run["status"] == "correct" and "best: broken-then-fixed" in run["reason"]


def test_auto_stops_at_iteration_limit():
    auto = Auto(_author(), target="cpu", iterations=1, tune=False)
    traj = auto.run(_task())
    assert len(traj.snapshots) == 1 and "maximum of 1 iterations" in traj.stop_reason


NO_ENTRY = "import jax.numpy as jnp\ndef kern(x):\n    return jnp.tanh(x) * 2.0\n"  # the entry point is misnamed
NO_PALLAS = "import jax.numpy as jnp\ndef kernel(x):\n    return jnp.tanh(x) * 2.0\n"  # tpu requires a pallas_call
PALLAS = '''
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def _body(x_ref, o_ref):
    o_ref[...] = jnp.tanh(x_ref[...]) * 2.0


def kernel(x):
    return pl.pallas_call(_body, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)
'''


def OneShotAuthor(code, fixed):
    """One plan; its fixer writes ``fixed``."""
    return ScriptedAuthor([("one", code)], fixed=fixed)


def test_a_candidate_without_its_entry_point_goes_to_the_fixer():
    author = OneShotAuthor(NO_ENTRY, FIXED)
    traj = Auto(author, target="cpu", iterations=1, tune=False).run(_task())
    assert [s.status for s in traj.snapshots] == ["correct"] and len(author.fixes) == 1
    assert "kernel" in author.fixes[0]


def test_a_judge_rejection_after_the_static_check_goes_to_the_fixer():
    """No pallas_call on tpu is rejected by the judge's program check, not the static check: the fixer is told."""
    author = OneShotAuthor(NO_PALLAS, PALLAS)
    traj = Auto(author, target="tpu", iterations=1, tune=False).run(_task())
    assert len(author.fixes) == 1 and "pallas" in author.fixes[0].lower()
    assert [s.status for s in traj.snapshots] == ["correct"], [s.summary() for s in traj.snapshots]
