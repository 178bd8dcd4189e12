"""The notebooks run top to bottom against the installed package (so they cannot rot)."""

from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("*.ipynb"))


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(path, tmp_path):
    nb = nbformat.read(path, as_version=4)
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}}).execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if o.get("output_type") == "error"]
    assert not errors


def test_notebooks_are_current():
    """notebooks/ is what scripts/make_notebooks.py writes (edit the script, not the .ipynb)."""
    import runpy

    mod = runpy.run_path(str(NOTEBOOKS[0].parent.parent / "scripts" / "make_notebooks.py"), run_name="npusim_nb")
    for name, cells in mod["NOTEBOOK_CELLS"].items():
        nb = nbformat.read(NOTEBOOKS[0].parent / name, as_version=4)
        assert [c.source for c in nb.cells] == [c.source for c in cells], name
