"""Both an editable install and a wheel install import every module and find the package data; the wheel, installed
in a fresh venv outside the checkout, runs the README's quick start and its Python example."""

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# where each importable folder of the checkout lives in an install (pyproject.toml's [tool.setuptools] package-dir)
LAYOUT = {"mk": "mk", "mk.signatures": "signatures", "mk.programs": "programs", "mk.retrievers": "retrievers", "mk.data": "data"}
_JUNK = ("__pycache__", ".pytest_cache", "*.pyc", "*.egg-info", "*.duckdb", "*.duckdb.wal")


def expected_packages(root: Path = ROOT) -> set[str]:
    """Every package of the source tree under its installed name: each folder with an ``__init__.py``."""
    names = set()
    for name, folder in LAYOUT.items():
        for init in (root / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(root / folder)
            if "__pycache__" not in rel.parts:
                names.add(".".join((name, *rel.parts)))
    return names


def expected_files(root: Path = ROOT) -> set[str]:
    """Every file of the source tree (code and data) at its path inside an install: ``data/x.json`` is ``mk/data/x.json``."""
    paths = set()
    for name, folder in LAYOUT.items():
        for path in (root / folder).rglob("*"):
            rel = path.relative_to(root / folder)
            if path.is_file() and "__pycache__" not in rel.parts and path.suffix != ".pyc":
                paths.add("/".join((*name.split("."), *rel.parts)))
    return paths


IMPORT_ALL = textwrap.dedent(
    """
    import importlib, pkgutil, sys, json
    import mk
    skip = {"mk.__main__"}  # running it would start the CLI
    bad = []
    names = set()
    packages = {"mk"}
    # the generic folders are walked from their own __path__ too: an editable install maps them from outside mk/
    for root in ("mk", "mk.signatures", "mk.programs", "mk.retrievers", "mk.data"):
        packages.add(root)
        for info in pkgutil.walk_packages(importlib.import_module(root).__path__, root + "."):
            if info.name in skip or info.name in names:
                continue
            names.add(info.name)
            if info.ispkg:
                packages.add(info.name)
            try:
                importlib.import_module(info.name)
            except Exception as exc:
                bad.append(f"{info.name}: {type(exc).__name__}: {exc}")
    from mk.suite import list_builtin
    from mk.hardware import load_specs
    from importlib.resources import files
    print(json.dumps({
        "file": mk.__file__,
        "bad": bad,
        "modules": len(names),
        "packages": sorted(packages),
        "module_files": {n: getattr(m, "__file__", None) for n, m in list(sys.modules.items()) if n == "mk" or n.startswith("mk.")},
        "editable_hooks": [repr(f) for f in sys.meta_path if "editable" in repr(f).lower()],
        "builtin": len(list_builtin()),
        "specs": len(load_specs()),
        "handbook": len([p for p in (files("mk.data") / "knowledge").iterdir() if p.name.endswith(".md")]),
        "toplevel_leak": [n for n in ("signatures", "programs", "retrievers") if n in sys.modules],
    }))
    """
)


def _check(env_extra: dict, cwd: Path, expect_under: Path, python: str | Path = sys.executable, source: Path = ROOT) -> dict:
    env = {**os.environ, **env_extra}
    out = subprocess.run([str(python), "-c", IMPORT_ALL], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    info = json.loads(out.stdout.strip().splitlines()[-1])
    assert Path(info["file"]).resolve().is_relative_to(expect_under.resolve()), info["file"]
    assert info["bad"] == []
    assert set(info["packages"]) == expected_packages(source)  # every subpackage of the source tree, nothing more
    assert info["modules"] > 40 and info["builtin"] == 50 and info["specs"] >= 8 and info["handbook"] >= 8
    assert info["toplevel_leak"] == []  # generic folders live only inside the mk namespace
    return info


@pytest.mark.slow
def test_editable_install_imports_everything(tmp_path):
    _check({}, tmp_path, ROOT)


def _build(tmp_path: Path) -> tuple[Path, Path]:
    """``python -m build`` on a copy of the checkout at ``tmp_path/src`` (so parallel tests never share its build/ and
    egg-info, nor see files other tests write): the sdist, then the wheel built from that sdist, as pip does for an
    sdist from an index; the wheel."""
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(".git", "build", "dist", "mk-out", "out", ".venv", *_JUNK))
    dist = tmp_path / "dist"
    proc = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), str(src)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    assert len(list(dist.glob("mk-*.tar.gz"))) == 1
    return next(dist.glob("mk-*.whl"))


def _fresh_venv(where: Path, wheel: Path) -> Path:
    """A venv outside the checkout with only the wheel's mk in it; its dependencies come from the running interpreter's
    site-packages, listed in a plain .pth file. ``--system-site-packages`` would not do: the system site-packages also
    runs the editable install's .pth, whose import hook serves every ``mk.*`` module the wheel lacks from the checkout
    (that hid this bug). A directory listed in a .pth is put on sys.path without its own .pth files being run."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True, timeout=120)
    python = where / "bin" / "python"
    proc = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index", "-q", str(wheel)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    deps = [p for p in dict.fromkeys(sys.path) if p and Path(p).is_dir() and ("site-packages" in p or "dist-packages" in p)
            and Path(p).resolve() != ROOT]
    (Path(purelib) / "zz_mk_test_deps.pth").write_text("\n".join(deps) + "\n")
    return python


def _venv_env(home: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    return {**env, "PYTHONNOUSERSITE": "1", "JAX_PLATFORMS": "cpu", "MK_HOME": str(home), "MK_DB": str(home / "mk.duckdb"),
            "DSPY_CACHEDIR": str(home / "dspy-cache")}


@pytest.mark.slow
def test_wheel_install_imports_everything(tmp_path):
    wheel = _build(tmp_path)
    with zipfile.ZipFile(wheel) as zf:
        in_wheel = {n for n in zf.namelist() if not n.startswith("mk-")}
    missing = expected_files(tmp_path / "src") - in_wheel
    assert not missing, f"the wheel lacks {len(missing)} files of the source tree: {sorted(missing)[:20]}"
    venv = tmp_path / "venv"
    python = _fresh_venv(venv, wheel)
    work = tmp_path / "work"
    work.mkdir()
    info = _check(_venv_env(tmp_path / "home"), work, venv, python, source=tmp_path / "src")
    outside = {n: f for n, f in info["module_files"].items() if f and not Path(f).resolve().is_relative_to(venv.resolve())}
    assert outside == {} and info["editable_hooks"] == []  # nothing came from the checkout


@pytest.mark.slow
def test_wheel_in_a_fresh_venv_runs_the_quick_start_and_the_readme_example(tmp_path):
    """``pip install .`` (no -e) must give a working mk: the wheel, installed in a venv outside the checkout, runs the
    README's quick start (``mk optimize examples/rmsnorm.py ...``) and its Python example from a folder outside it."""
    wheel = _build(tmp_path)
    venv = tmp_path / "venv"
    python = _fresh_venv(venv, wheel)
    readme = (ROOT / "README.md").read_text()
    quick = re.search(r"^mk optimize examples/rmsnorm\.py (.*)$", readme, re.M)
    assert quick, "the README's quick start (mk optimize examples/rmsnorm.py ...) is missing"
    example = re.search(r"<!-- mk:python-api-example -->\n```python\n(.*?)```", readme, re.S)
    assert example, "the README's Python API example (marked <!-- mk:python-api-example -->) is missing"

    cli_dir, api_dir = tmp_path / "cli", tmp_path / "api"
    cli_dir.mkdir()
    api_dir.mkdir()
    shutil.copy(ROOT / "examples" / "rmsnorm.py", cli_dir / "rmsnorm.py")
    (api_dir / "readme_example.py").write_text(example.group(1))
    # the two run side by side; the quick start without autotuning and after its first correct kernel (minutes faster)
    cli = subprocess.Popen([str(venv / "bin" / "mk"), "optimize", "rmsnorm.py", *quick.group(1).split(), "--trials", "0", "--iterations", "1"],
                           cwd=cli_dir, env=_venv_env(cli_dir / "home"), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    api = subprocess.Popen([str(python), "readme_example.py"], cwd=api_dir, env=_venv_env(api_dir / "home"),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        cli_out, cli_err = cli.communicate(timeout=600)
        api_out, api_err = api.communicate(timeout=600)
    finally:
        for proc in (cli, api):
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert cli.returncode == 0, (cli_out + cli_err)[-3000:]
    report = cli_dir / "mk-out" / "rmsnorm_tpu.report.json"
    assert report.is_file() and (cli_dir / "mk-out" / "rmsnorm_tpu.py").is_file(), (cli_out + cli_err)[-3000:]
    assert json.loads(report.read_text())["status"] == "correct", (cli_out + cli_err)[-3000:]
    assert api.returncode == 0, (api_out + api_err)[-3000:]
    assert api_out.startswith("correct\n") and "static reduce: 'sum'" in api_out, (api_out + api_err)[-3000:]
