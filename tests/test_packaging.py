"""Both an editable install and a wheel install import every module and find the package data."""

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

IMPORT_ALL = textwrap.dedent(
    """
    import importlib, pkgutil, sys, json
    import mk
    skip = {"mk.__main__"}  # running it would start the CLI
    bad = []
    names = []
    for info in pkgutil.walk_packages(mk.__path__, "mk."):
        if info.name in skip:
            continue
        names.append(info.name)
        try:
            importlib.import_module(info.name)
        except Exception as exc:
            bad.append(f"{info.name}: {type(exc).__name__}: {exc}")
    import mk.signatures, mk.programs, mk.retrievers
    from mk.suite import list_builtin
    from mk.hardware import load_specs
    from importlib.resources import files
    print(json.dumps({
        "file": mk.__file__,
        "bad": bad,
        "modules": len(names),
        "builtin": len(list_builtin()),
        "specs": len(load_specs()),
        "handbook": len([p for p in (files("mk.data") / "knowledge").iterdir() if p.name.endswith(".md")]),
        "toplevel_leak": [n for n in ("signatures", "programs", "retrievers") if n in sys.modules],
    }))
    """
)


def _check(env_extra: dict, cwd: Path, expect_under: Path) -> dict:
    import json
    import os

    env = {**os.environ, **env_extra}
    out = subprocess.run([sys.executable, "-c", IMPORT_ALL], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    info = json.loads(out.stdout.strip().splitlines()[-1])
    assert Path(info["file"]).resolve().is_relative_to(expect_under.resolve()), info["file"]
    assert info["bad"] == []
    assert info["modules"] > 40 and info["builtin"] == 50 and info["specs"] >= 8 and info["handbook"] >= 8
    assert info["toplevel_leak"] == []  # generic folders live only inside the mk namespace
    return info


@pytest.mark.slow
def test_editable_install_imports_everything(tmp_path):
    _check({}, tmp_path, ROOT)


@pytest.mark.slow
def test_wheel_install_imports_everything(tmp_path):
    wheels = tmp_path / "wheels"
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "--no-build-isolation", "-w", str(wheels), "-q"],
                           capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stderr[-2000:]
    wheel = next(wheels.glob("mk-*.whl"))
    site = tmp_path / "site"
    inst = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--target", str(site), str(wheel), "-q"],
                          capture_output=True, text=True, timeout=600)
    assert inst.returncode == 0, inst.stderr[-2000:]
    _check({"PYTHONPATH": str(site)}, tmp_path, site)
