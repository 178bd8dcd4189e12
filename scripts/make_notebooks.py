"""Regenerate the notebooks in notebooks/ from the cell sources below (outputs stripped).

Run: python scripts/make_notebooks.py. The test suite executes the notebooks (tests/test_notebooks.py).
"""

from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = Path(__file__).resolve().parent.parent / "notebooks"

REPLAY = [
    new_markdown_cell("# Replay a crashing model\n\n"
                      "A detector compiled with a *compatible* 16 B alignment crashes on the board. "
                      "We replay it off-hardware, read the sanitizer report, bisect it down to one operator and fix it."),
    new_code_cell("import tempfile, pathlib\n"
                  "import npusim\n"
                  "from npusim.compiler import CompileOptions, compile as compile_model\n"
                  "from npusim.runtime import run, RunOptions\n"
                  "from npusim.zoo import yolo_style\n"
                  "work = pathlib.Path(tempfile.mkdtemp(prefix='npusim-nb-'))\n"
                  "model = yolo_style(size=224)\n"
                  "print(len(model.graph.node), 'nodes')"),
    new_markdown_cell("## 1. Compile with `--mem-align 16` and run"),
    new_code_cell("prog16 = compile_model(model, CompileOptions(mem_align=16))\n"
                  "res = run(prog16, random_inputs=True, seed=0)\n"
                  "print(res.status)\n"
                  "print(res.report_text())"),
    new_markdown_cell("The same data as JSON, for scripts:"),
    new_code_cell("f = res.report_json()['faults'][0]\n"
                  "{k: f[k] for k in ('class', 'access', 'address', 'unit', 'epoch', 'layer', 'region', 'relation', 'rule')}"),
    new_markdown_cell("## 2. Bisect: which operator, which shapes"),
    new_code_cell("from npusim.tools.bisect import bisect\n"
                  "rep = bisect(model, CompileOptions(mem_align=16), out_dir=work / 'repro')\n"
                  "print(rep.table())"),
    new_markdown_cell("## 3. Fix: align to the hardware's 128 B granule, run clean, validate against ONNX Runtime"),
    new_code_cell("from npusim.reference import validate\n"
                  "from npusim.runtime import seeded_inputs\n"
                  "prog128 = compile_model(model, CompileOptions(mem_align=128))\n"
                  "val = validate(prog128, model, seeded_inputs(prog128, seed=0))\n"
                  "print(val.run_result.summary())\n"
                  "print(val.text())\n"
                  "assert val.run_result.status == 'ok' and val.passed"),
]

SWEEP = [
    new_markdown_cell("# Bank-conflict cost vs alignment\n\n"
                      "Misaligned bursts straddle bank lines (8 banks x 16 B = 128 B per line in the default profile) "
                      "and cost cycles. We sweep `--mem-align` and look at where the cycles go."),
    new_code_cell("import tempfile, pathlib\n"
                  "from npusim.tools.sweep import sweep, format_table, write_csv\n"
                  "from npusim.tools.plots import plot_sweep\n"
                  "from npusim.zoo import yolo_style\n"
                  "work = pathlib.Path(tempfile.mkdtemp(prefix='npusim-nb-'))\n"
                  "model = yolo_style(size=256)  # every feature-map width is a multiple of 8: all alignments run"),
    new_code_cell("r = sweep(model, 'mem_align', [16, 32, 64, 128, 256], progress=False)\n"
                  "print(format_table(r))"),
    new_code_cell("png = plot_sweep(r, work / 'cost.png')\n"
                  "write_csv(r, work / 'cost.csv')\n"
                  "from IPython.display import Image\n"
                  "Image(filename=str(png))"),
    new_markdown_cell("## Per layer: where do the cycles go?"),
    new_code_cell("pts = {p.value: p for p in r.points}\n"
                  "rows = sorted(pts[16].layers, key=lambda n: pts[16].layers[n] - pts[128].layers.get(n, 0), reverse=True)\n"
                  "for name in rows[:8]:\n"
                  "    print(f'{name:24s} a16={pts[16].layers[name]:>9,}  a128={pts[128].layers.get(name, 0):>9,}')"),
    new_markdown_cell("## The same sweep with another bank geometry (a profile key)"),
    new_code_cell("r2 = sweep(model, 'set:pool.npuRAM3.interleave', [8, 16, 32], progress=False)\n"
                  "print(format_table(r2))"),
]


NOTEBOOK_CELLS = {"replay_crashing_model.ipynb": REPLAY, "bank_conflicts_vs_alignment.ipynb": SWEEP}


def main():
    HERE.mkdir(exist_ok=True)
    for name, cells in NOTEBOOK_CELLS.items():
        nb = new_notebook(cells=cells, metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                                "language": "python"}})
        nbformat.write(nb, HERE / name)
        print("wrote", HERE / name)


if __name__ == "__main__":
    main()
