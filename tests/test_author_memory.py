"""The offline author never runs a reference at full scale on the CPU: it proposes for every built-in task at the
task's default scale (what `mk optimize jaxbench:<id>` does, `full` for most) within a bounded memory.

Before, 15p was killed at 23.9 GB, 6p past 15 GB, and 10p and 12p spent minutes and gigabytes probing the reference
at full size; recognisers now run the reference at the smallest traced size (mk.author.trace.smallest_scale)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

#: the whole propose pass, every task, in one process: its peak resident memory (about 0.6 GB measured)
LIMIT_MB = 3000

SCRIPT = textwrap.dedent('''
    import json, re, sys, time
    from mk.author import OfflineAuthor
    from mk.suite import list_builtin, load_builtin

    def peak_mb():  # this image's own high-water mark: ru_maxrss keeps the forking parent's (a big xdist worker)
        with open("/proc/self/status") as f:
            return int(re.search(r"VmHWM:\s*(\d+) kB", f.read()).group(1)) // 1024

    rows = []
    for tid in list_builtin():
        t0 = time.perf_counter()
        authored = OfflineAuthor().propose(load_builtin(tid), "tpu")
        rows.append([tid, len(authored.proposals), round(time.perf_counter() - t0, 1), peak_mb()])
    print("ROWS " + json.dumps(rows))
''')


@pytest.mark.slow
def test_the_author_proposes_for_every_builtin_task_at_its_default_scale_in_bounded_memory():
    import resource

    def limit():  # a regression is a MemoryError in the child, not the machine's OOM killer
        resource.setrlimit(resource.RLIMIT_DATA, (8 << 30, 8 << 30))

    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=1500,
                          preexec_fn=limit, env={**__import__("os").environ, "JAX_PLATFORMS": "cpu"})
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads(next(ln for ln in done.stdout.splitlines() if ln.startswith("ROWS "))[5:])
    assert len(rows) == 50
    peak = max(r[3] for r in rows)
    first_over = next((r for r in rows if r[3] > LIMIT_MB), None)
    assert first_over is None, f"{first_over[0]} took the author past {LIMIT_MB} MB ({first_over[3]} MB)"
    assert peak <= LIMIT_MB
    assert sum(r[1] > 0 for r in rows) >= 45  # the author still writes for (almost) every task
