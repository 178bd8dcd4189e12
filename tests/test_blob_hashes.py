"""Blobs are byte-identical to the recorded ones (tests/data/blob_hashes.json, `scripts/blob_hashes.py --write`).

Every zoo model (some at several options) and every single-operator model of `zoo.OPS` and
`zoo.tflite.TFLITE_OPS` is recompiled and its blob's SHA-256 compared: a reorganisation of the
compiler must not change a byte. Cases that took over 0.3 s when recorded run in the slow set.
A deliberate change of the compiler's output re-records the file in the same commit.
"""

import importlib.util
import json
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("blob_hashes", ROOT / "scripts" / "blob_hashes.py")
blob_hashes = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(blob_hashes)

RECORDED = json.loads(blob_hashes.DATA.read_text())
CASES = blob_hashes.cases()
SLOW_AFTER_S = 0.3


def test_every_case_is_recorded():
    assert sorted(CASES) == sorted(RECORDED), "cases changed: run python scripts/blob_hashes.py --write"


@pytest.mark.parametrize("name", [
    pytest.param(n, marks=[pytest.mark.slow(cpu_s=RECORDED[n]["seconds"])]
                 if RECORDED.get(n, {}).get("seconds", 0) > SLOW_AFTER_S else [])
    for n in CASES])
def test_blob_is_byte_identical(name, zoo_file):
    builder, opts = CASES[name]
    if name.startswith("zoo:"):  # the zoo model's file, built once per run for its variants and other tests
        builder = zoo_file(name.split(":")[1]).read_bytes
    assert blob_hashes.blob_hash(builder, opts) == RECORDED[name]["sha256"], name
