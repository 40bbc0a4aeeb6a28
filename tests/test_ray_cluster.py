"""`mk optimize --mode search --workers ray` against a real Ray cluster on loopback.

Each test starts a head and one worker node (`ray start --block`, each its own raylet, one CPU each, a private temp
dir, token authentication, no dashboard, no usage stats), runs the real CLI in a subprocess pointed at the cluster
by ``RAY_ADDRESS`` (the cluster itself knows nothing of mk's settings or the model's endpoint: the driver forwards
them), kills a worker mid-node, and checks the run still finishes with a correct kernel. Everything the cluster
started is killed at the end (found by a marker in its environment).

Ray does not keep a multi-node cluster on loopback: it replaces ``127.0.0.1`` by the machine's address and its
servers listen on every interface, so the cluster uses token authentication with a fresh random token.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

import search_support as sup
from fake_gemini import Agents, FakeGemini
from mk.store import Store

ray = pytest.importorskip("ray")

pytestmark = pytest.mark.timeout(420)

ROOT = Path(__file__).resolve().parents[1]
RAY = shutil.which("ray", path=str(Path(sys.executable).parent)) or shutil.which("ray")
STARTED = "Ray runtime started."


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _procs() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, command line) for every process we can read."""
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            stat = Path(f"/proc/{d}/stat").read_text()
            cmd = Path(f"/proc/{d}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        out[int(d)] = (int(stat.rsplit(")", 1)[1].split()[1]), cmd)
    return out


def _marked(marker: str) -> list[int]:
    found = []
    for pid in _procs():
        try:
            if marker.encode() in Path(f"/proc/{pid}/environ").read_bytes():
                found.append(pid)
        except OSError:
            pass
    return found


class LoopbackCluster:
    """A head and one worker node, each a `ray start --block` process (its own GCS/raylet children)."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="mkray-"))  # short: Ray's socket paths live under it
        self.marker = f"MK_TEST_RAY_CLUSTER={secrets.token_hex(8)}"
        self.token = secrets.token_hex(32)
        self.port = _free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.procs: list[subprocess.Popen] = []
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("RAY_", "MK_", "GEMINI_", "GOOGLE_"))}  # the cluster knows nothing of mk's settings
        env.update({
            "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": self.token,
            # a lost node is noticed in about two seconds, not the default fifteen
            "RAY_health_check_period_ms": "500", "RAY_health_check_timeout_ms": "500",
            "RAY_health_check_failure_threshold": "3", "RAY_health_check_initial_delay_ms": "0",
            self.marker.split("=")[0]: self.marker.split("=")[1],
        })
        self.env = env

    def _start(self, name: str, args: list[str]) -> subprocess.Popen:
        log = self.root / f"{name}.log"
        proc = subprocess.Popen([RAY, "start", "--block", "--node-ip-address=127.0.0.1", "--num-cpus=1",
                                 "--disable-usage-stats", *args], env=self.env, cwd=self.root, stdin=subprocess.DEVNULL,
                                stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)
        self.procs.append(proc)
        deadline = time.time() + 120
        while STARTED not in log.read_text():
            if proc.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"ray {name} did not start:\n{log.read_text()[-3000:]}")
            time.sleep(0.3)
        return proc

    def start(self) -> "LoopbackCluster":
        self._start("head", ["--head", f"--port={self.port}", "--include-dashboard=false", f"--temp-dir={self.root / 't'}"])
        self.worker = self._start("worker", [f"--address={self.address}"])
        return self

    def raylets(self, *, head: bool = True) -> set[int]:
        """The raylet processes of the worker node (and the head's)."""
        parents = {p.pid for p in self.procs} if head else {self.worker.pid}
        return {p for p, (ppid, cmd) in _procs().items() if ppid in parents and "/raylet/raylet " in cmd}

    @staticmethod
    def running_node(raylets: set[int]) -> tuple[int, int] | None:
        """(raylet, pid) of a Ray worker process under one of ``raylets`` that is running a search node and judging
        its candidate (it has a harness child), or None."""
        procs = _procs()
        for pid, (ppid, cmd) in procs.items():
            if ppid in raylets and cmd.startswith("ray::run_node") and any(pp == pid for pp, _ in procs.values()):
                return ppid, pid
        return None

    def stop(self) -> None:
        for proc in self.procs:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.time() + 5  # a graceful stop drains for up to 30 s: nothing here needs draining
        for proc in self.procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        for pid in _marked(self.marker):  # anything the cluster started that outlived it (workers, agents)
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture(scope="module")
def cluster():  # one cluster for the module (starting one takes a while); the test that kills the worker node is last
    if RAY is None:
        pytest.skip("the ray command is not on PATH")
    c = LoopbackCluster()
    try:
        yield c.start()
    finally:
        c.stop()


def _optimize(cluster: LoopbackCluster, args: list[str], tmp_path: Path, env: dict[str, str], kill, *,
              head: bool) -> tuple[dict, int]:
    """Run `mk optimize ... --workers ray --json` on the cluster; ``kill(raylet, pid)`` is called once a search node
    is being judged on the worker node (or, with ``head``, on either node) and returns the pid it killed.
    Returns (the JSON summary, the killed pid)."""
    env = {**os.environ, **env, "RAY_ADDRESS": cluster.address, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": cluster.token,
           "MK_HOME": str(tmp_path / "home"), cluster.marker.split("=")[0]: cluster.marker.split("=")[1]}
    env.pop("MK_DB", None)
    err = tmp_path / "mk.err"
    proc = subprocess.Popen([sys.executable, "-m", "mk", *args, "--mode", "search", "--workers", "ray", "--db",
                             str(tmp_path / "db.duckdb"), "--out", str(tmp_path / "out"), "--json"], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=err.open("w"), text=True)
    killed = None
    try:
        raylets = cluster.raylets(head=head)
        deadline = time.time() + 240
        while killed is None and proc.poll() is None and time.time() < deadline:
            found = cluster.running_node(raylets)
            if found is not None:
                killed = kill(*found)
            time.sleep(0.1)
        out, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert killed is not None, f"no search node ran on the worker node:\n{err.read_text()[-3000:]}"
    assert proc.returncode == 0, f"rc {proc.returncode}\n{out}\n{err.read_text()[-4000:]}"
    return json.loads(out.strip().splitlines()[-1]), killed


def _kill_worker_process(raylet, pid):
    os.kill(pid, signal.SIGKILL)
    return pid


def _kill_worker_node(raylet, pid):
    os.kill(raylet, signal.SIGKILL)
    return raylet


def _nodes(db: Path, run_id: str) -> tuple[dict, list[dict], list[dict]]:
    with Store.open(db) as store:
        return store.get_run(run_id), store.nodes(run_id), store.query("SELECT run_id, node_id, agent FROM lm_calls")


def test_the_cluster_is_named_by_ray_address_and_gets_mks_settings(monkeypatch):
    from mk.programs.search_workers import forwarded_env, ray_address

    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")
    assert ray_address() == "10.0.0.1:6379" and ray_address("127.0.0.1:1234") == "127.0.0.1:1234"
    monkeypatch.delenv("RAY_ADDRESS")
    assert ray_address() is None  # a private local instance, never a cluster found in /tmp/ray
    env = forwarded_env({"GEMINI_API_KEY": "k", "MK_GEMINI_BASE_URL": "http://h/", "MK_HOME": "/h", "MK_DB": "/d.duckdb",
                         "MK_REQUEST_FD": "3", "HOME": "/root", "PATH": "/bin"})
    assert env == {"GEMINI_API_KEY": "k", "MK_GEMINI_BASE_URL": "http://h/", "MK_HOME": "/h"}


@pytest.mark.slow
def test_offline_search_on_a_ray_cluster_survives_a_killed_worker_process(cluster, tmp_path):
    summary, killed = _optimize(cluster, ["optimize", str(ROOT / "tests" / "fixtures" / "small" / "softmax.py"), "--lm", "offline", "--target",
                                          "tpu", "--scale", "ci", "--depth", "1", "--branches", "2", "--iterations", "1",
                                          "--trials", "0"], tmp_path, {}, _kill_worker_process, head=True)
    assert summary["status"] == "correct", summary
    run, nodes, _ = _nodes(tmp_path / "db.duckdb", summary["run_id"])
    assert run["status"] == "correct" and "beam search finished" in run["reason"], run["reason"]
    assert nodes and not any("ray task failed" in str(n) for n in nodes), nodes  # the lost node ran again
    kernel = Path(summary["kernel_path"]).read_text()
    assert "frozen suite" in kernel and "def kernel" in kernel


PLANS = [{"plan": {"approach": "jax", "strategy": f"strategy number {i}: rewrite the scale as step {i}", "tiling": {},
                   "memory_placement": "", "pipelining": "", "expected_speedup": 1.0 + i, "risks": []}} for i in range(8)]
CODES = [{"code": sup.MID, "config_space": {}}, {"code": sup.FAST, "config_space": {}}, {"code": sup.SLOW, "config_space": {}}]
CASES = [{"test_cases": [{"name": "ragged", "shapes": [[5, 128]], "dtypes": ["float32"], "rationale": "rows not a multiple of 8"}]}]


@pytest.mark.slow
def test_lm_search_on_a_ray_cluster_survives_a_lost_worker_node(cluster, tmp_path):
    task = sup.write_task(tmp_path)
    with FakeGemini() as fake:
        fake.route(Agents(plan=PLANS, code=CODES * 4, test_cases=CASES, analysis=[{"analysis": {
            "bottleneck": "memory", "evidence": "one pass", "next_step": "", "decision": "stop", "expected_gain": 1.0}}]))
        summary, killed = _optimize(cluster, ["optimize", str(task), "--lm", "gemini/gemini-2.5-flash", "--target", "cpu",
                                              "--depth", "1", "--branches", "2", "--iterations", "1", "--trials", "0"],
                                    tmp_path, {"GEMINI_API_KEY": "test-key", "MK_GEMINI_BASE_URL": fake.base_url},
                                    _kill_worker_node, head=False)
    assert summary["status"] == "correct", summary
    run, nodes, calls = _nodes(tmp_path / "db.duckdb", summary["run_id"])
    assert run["status"] == "correct" and "beam search finished: 2 nodes" in run["reason"], run["reason"]
    assert len(nodes) == 2 and not any("ray task failed" in str(n) for n in nodes), nodes
    node_ids = {n["id"] for n in nodes}
    assert calls and all(c["run_id"] == summary["run_id"] for c in calls), calls
    by_node = [c for c in calls if c["agent"] != "test_synthesizer"]  # the suite's cases belong to the run, not a node
    assert {c["agent"] for c in by_node} >= {"planner", "implementer"}, calls
    assert all(c["node_id"] in node_ids for c in by_node), calls
    assert {c["node_id"] for c in by_node if c["agent"] == "implementer"} == node_ids  # each worker's calls came back
    kernel = Path(summary["kernel_path"]).read_text()
    assert any(src.splitlines()[-1] in kernel for src in (sup.MID, sup.FAST, sup.SLOW)), kernel  # a correct candidate
