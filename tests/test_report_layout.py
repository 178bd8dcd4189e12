"""What the report pages and tables show on real models (issue 38 C): charts with their own SVG ids,
layer names whole, stall columns that say what they are, faulted sweep points marked."""

import re
from collections import Counter

import pytest

import npusim
from npusim import zoo
from npusim.compiler import CompileOptions
from npusim.tools.html_report import run_html


@pytest.fixture(scope="module")
def faulting():
    prog = npusim.compile(zoo.conv_model(16, 16, 52, 52, 3), CompileOptions(mem_align=16))
    return prog, npusim.run(prog, random_inputs=True, seed=0, options=npusim.RunOptions(trace=False))


def test_every_id_of_a_run_page_is_its_own(faulting):
    """Charts used to name their clip paths alike (`p0`): the page clipped every chart to the first one's axes."""
    html = run_html(faulting[1].report_json(), "ids")
    ids = Counter(re.findall(r'\bid="([^"]+)"', html))
    assert ids and [i for i, n in ids.items() if n > 1] == []
    clips = re.findall(r'clip-path="url\(#([^)]+)\)"', html)
    assert len(set(clips)) >= 2 and set(clips) <= set(ids)  # of each chart its own, defined in the page
