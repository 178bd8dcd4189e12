"""A weight image whose addresses lie outside the compile's pools (an Intel HEX built for another flash
layout): the folder still imports, a note says where the image sits and where the pool is; the functional
run refuses in one line when no other image fills that pool, and runs with the note when one does. Built from st_ic_mnv1_nucleo's image re-based in a temporary copy."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from npusim.cli import main
from npusim.errors import StImportError
from npusim.importers.stedgeai import load
from npusim.importers.stedgeai.execute import run

from test_stedgeai_ecblob import SHARED as ST, needs_shared  # noqa: E402

pytestmark = needs_shared
NAME = "st_ic_mnv1_nucleo"


def _rebased(tmp_path: Path, shift: int, keep_raw: bool = False) -> tuple[Path, int]:
    """A copy of the compile whose weights are an Intel HEX at the pool's address + `shift`."""
    from intelhex import IntelHex

    d = Path(shutil.copytree(ST / NAME, tmp_path / NAME, copy_function=shutil.copyfile))
    raw = (d / "network_data.xSPI2.bin").read_bytes()
    at = load(ST / NAME).pool_named("octoFlash").address + shift
    ih = IntelHex()
    ih.frombytes(raw, offset=at)
    ih.write_hex_file(str(d / "network_data.hex"))
    if not keep_raw:
        (d / "network_data.xSPI2.bin").unlink()
    return d, at


def test_an_image_outside_every_pool_is_a_note_and_the_run_refuses(tmp_path, capsys):
    d, at = _rebased(tmp_path, -0x80000)
    pool = load(ST / NAME).pool_named("octoFlash").address
    out = load(d)
    assert out.weights == {} and len(out.weight_notes) == 1
    note = out.weight_notes[0]
    assert f"{at:#x}" in note and "inside no pool" in note and f"octoFlash at {pool:#x}" in note
    assert main(["inspect", str(d)]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("weight images:"))
    assert "not attached: network_data.hex sits at" in line
    assert main(["check", str(d)]) == 0
    with pytest.raises(StImportError, match="flashed as is, the program would read other bytes"):
        run(out, {})
    assert main(["run", str(d), "--outputs", str(tmp_path / "o")]) == 65
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "other bytes" in err[0]


def test_a_misplaced_hex_beside_the_raw_image_runs_on_the_raw_image_with_the_note(tmp_path, capsys):
    """The raw image fits the pool: the run takes it (as without the HEX) and says the HEX would not."""
    d, at = _rebased(tmp_path, -0x80000, keep_raw=True)
    out = load(d)
    assert "octoFlash" in out.weights and out.weight_notes
    x = {b.name: np.zeros(b.size, np.uint8) for b in out.buffers if b.role == "input" and not b.is_param}
    want = run(load(ST / NAME), x).outputs
    got = run(out, x).outputs
    assert want.keys() == got.keys() and all(np.array_equal(want[k], got[k]) for k in want)
    assert main(["run", str(d), "--outputs", str(tmp_path / "o"), "--random-input"]) == 0
    err = capsys.readouterr().err
    assert f"note: not attached: network_data.hex sits at [{at:#x}" in err and "the board reads other bytes" in err


def test_an_image_running_past_its_pool_is_a_note(tmp_path):
    pool = load(ST / NAME).pool_named("octoFlash")
    d, _ = _rebased(tmp_path, pool.size - 16)
    out = load(d)
    assert out.weights == {} and "past the end of pool octoFlash" in out.weight_notes[0]
