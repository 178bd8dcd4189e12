"""A weight image whose addresses lie outside the compile's pools (an Intel HEX built for another flash
layout): the folder still imports, a note says where the image sits and where the pool is, and the functional
run refuses in one line. Built from st_ic_mnv1_nucleo's image re-based in a temporary copy."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from npusim.cli import main
from npusim.errors import StImportError
from npusim.importers.stedgeai import load
from npusim.importers.stedgeai.execute import run

ST = Path(__file__).resolve().parents[2] / "shared" / "stedgeai"
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


def test_a_misplaced_hex_beside_the_raw_image_still_refuses_the_run(tmp_path):
    """The raw image fits the pool, but the HEX says the board's flash holds it elsewhere."""
    d, _ = _rebased(tmp_path, -0x80000, keep_raw=True)
    out = load(d)
    assert "octoFlash" in out.weights and out.weight_notes
    with pytest.raises(StImportError, match="other bytes"):
        run(out, {b.name: np.zeros(1, np.uint8) for b in out.buffers if b.role == "input"})


def test_an_image_running_past_its_pool_is_a_note(tmp_path):
    pool = load(ST / NAME).pool_named("octoFlash")
    d, _ = _rebased(tmp_path, pool.size - 16)
    out = load(d)
    assert out.weights == {} and "past the end of pool octoFlash" in out.weight_notes[0]
