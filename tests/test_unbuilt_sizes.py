"""A kernel that cannot be built at a held-out scale or a fresh size (issue 22, item 5): judged at the sizes it can
be built at, with a flag per size it cannot and an envelope of exactly those sizes; wrong numbers at a size it
accepts stay ``incorrect``; a scale the task declares stays a ``compile_error``."""

from __future__ import annotations

from pathlib import Path

import pytest
from fakes import tanh_mix_task

from mk.harness import build_suite, evaluate
from mk.harness.envelope import Envelope
from mk.task import Scale

ADV = Path(__file__).parent / "adversarial"


#: rows 256 at the task's one scale: the held-out scale grows it by its unit, 128, to 384
TASK = tanh_mix_task({"ci": 256}, name="unbuilt_tanh_mix")


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MK_HOME", str(tmp_path_factory.mktemp("mkhome-unbuilt")))
        return build_suite(TASK, seeds=(0,), distributions=("normal",))


@pytest.mark.slow
def test_a_kernel_whose_blocks_do_not_divide_the_heldout_rows_is_correct_where_it_builds(suite):
    assert suite.heldout_names, "the suite has a held-out scale"
    held = suite.heldout_names[0]
    assert TASK.with_scales({**TASK.scales, **{s.name: s for s in suite.heldout}}).shapes(held)[0] == (384, 128)
    res = evaluate(TASK, ADV / "r12_control_blocks_divide_task_rows.py", target="tpu", suite=suite, measure=False)
    assert res.status == "correct", res.reason
    assert any(f.startswith(f"cannot be built at the held-out scale {held}: it does not trace: ValueError: rows (384)")
               for f in res.flags), res.flags
    assert res.scales == ["ci"]
    env = Envelope.from_dict(res.envelope)
    assert env.suite_hash == res.suite_hash == suite.hash and env.cases == len(suite.for_scale("ci"))
    assert env.check([(256, 128), (256, 128)]) is None
    for rows in (384, 512, 128):  # held-out, a multiple that would build, a smaller one: none was judged
        assert env.check([(rows, 128), (rows, 128)]) is not None, rows


@pytest.mark.slow
def test_wrong_numbers_at_a_size_it_accepts_stay_incorrect(suite):
    res = evaluate(TASK, ADV / "r12_wrong_where_it_builds.py", target="tpu", suite=suite, measure=False)
    assert res.status == "incorrect", res.reason
    assert not any(f.startswith("cannot be built") for f in res.flags)


@pytest.mark.slow
def test_a_scale_the_task_declares_must_build(suite, tmp_path):
    task = TASK.with_scales({"ci": Scale("ci", {"rows": 256}), "wide": Scale("wide", {"rows": 384})})
    res = evaluate(task, ADV / "r12_control_blocks_divide_task_rows.py", target="tpu", measure=False)
    assert res.status == "compile_error", res.reason
    assert "rows (384)" in res.reason
