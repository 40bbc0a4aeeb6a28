"""examples/hitl_session.ipynb runs top to bottom (scripted author, no LM) and ends with a correct kernel."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

NOTEBOOK = Path(__file__).resolve().parents[1] / "examples" / "hitl_session.ipynb"


def _kernel_available(name: str) -> bool:
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    try:
        KernelSpecManager().get_kernel_spec(name)
        return True
    except NoSuchKernel:
        return False


@pytest.fixture
def python3_kernel(tmp_path, monkeypatch):
    """The python3 kernelspec; installed into a temporary prefix when this environment has none."""
    if not _kernel_available("python3"):
        prefix = tmp_path / "jupyter"
        subprocess.run([sys.executable, "-m", "ipykernel", "install", "--prefix", str(prefix), "--name", "python3"],
                       check=True, capture_output=True)
        monkeypatch.setenv("JUPYTER_PATH", str(prefix / "share" / "jupyter") + os.pathsep + os.environ.get("JUPYTER_PATH", ""))
    return "python3"


def _text(output) -> str:
    if output.get("output_type") == "stream":
        return output.get("text", "")
    return output.get("data", {}).get("text/plain", "")


def test_hitl_notebook_executes(python3_kernel, tmp_path):
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(nb, kernel_name=python3_kernel, timeout=120,
                                     resources={"metadata": {"path": str(NOTEBOOK.parent)}})
    client.execute()  # raises CellExecutionError on the first failing cell
    code = [c for c in nb.cells if c.cell_type == "code"]
    errors = [o for c in code for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors, errors
    # the phases rendered as rich panels (text and HTML)
    rendered = "\n".join(_text(o) for c in code for o in c.get("outputs", []))
    for phase in ("plan: ok", "implement: ok", "edit: ok", "validate: ok", "test: ok", "profile", "snapshot: ok"):
        assert phase in rendered, phase
    assert any("text/html" in o.get("data", {}) for c in code for o in c.get("outputs", [])), "no HTML rendering in the notebook"
    assert "float32" in rendered and "* weight" in rendered  # the edited plan and the hand fix reached the code
    final = "".join(_text(o) for o in code[-1].get("outputs", []))
    assert "is correct on the frozen suite" in final, final
