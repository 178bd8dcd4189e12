"""`npusim import ST_OUTPUT -o model.npu`: an ST Edge AI Core output as an npusim blob (format 2, section
STEDGEAI). On every shared compile the blob holds the records the folder gives, and run, check, inspect
and validate on the blob equal the folder's; the same folder gives the same bytes; a damaged blob is one
line and exit 65."""

from __future__ import annotations

import dataclasses
import json
import os
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import msgpack
import pytest

from npusim.cli import main
from npusim.errors import EXIT_INVALID_INPUT, EXIT_VALIDATION_FAILED, BlobError
from npusim.importers.stedgeai import import_blob, is_st_output, load, stblob
from npusim.importers.stedgeai.reader import read
from npusim.program.blob import load_blob, read_header
from npusim.program.container import S_CHECKSUM, S_STEDGEAI, _parse_table, encode_imported

ST = Path(__file__).resolve().parents[2] / "shared" / "stedgeai"
COMPILES = sorted(p.name for p in ST.iterdir() if p.is_dir() and not p.name.startswith("_")) if ST.is_dir() else []
FAST = ("st_audio_yamnet1024_v111", "st_ic_mnv1_nucleo")  # the rest are marked slow: larger programs
needs_shared = pytest.mark.skipif(len(COMPILES) != 7, reason=f"the seven shared compiles are not in {ST}")


def _each(names=COMPILES):
    return [pytest.param(n, marks=() if n in FAST else pytest.mark.slow) for n in names]


def _without_files(out):
    return dataclasses.replace(out, files={})


def _blob(tmp_path, name) -> Path:
    path = tmp_path / f"{name}.npu"
    assert main(["import", str(ST / name), "-o", str(path)]) == 0
    return path


def _cli(capsys, *argv) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main([str(a) for a in argv])
    got = capsys.readouterr()
    return code, got.out, got.err


def _reseal(data: bytearray) -> bytes:
    """The blob with its checksum recomputed (an edit that framing and checksum cannot catch)."""
    sec = _parse_table(bytes(data))[3]
    (crc,) = [s for s in sec if s.id == S_CHECKSUM]
    struct.pack_into("<I", data, crc.offset, 0)
    struct.pack_into("<I", data, crc.offset, zlib.crc32(bytes(data)))
    return bytes(data)


def _with_payload(blob: bytes, doc) -> bytes:
    """A blob whose STEDGEAI section holds `doc` (same header, checksum recomputed)."""
    return encode_imported(msgpack.packb(doc, use_bin_type=True), read_header(blob).to_header())


# ------------------------------------------------------------------------------ the records

@needs_shared
@pytest.mark.parametrize("name", _each())
def test_the_blob_holds_the_folders_records_and_the_same_folder_gives_the_same_bytes(name):
    folder = read(ST / name)  # a fresh parse, not the load cache
    data = stblob.encode(folder)
    assert stblob.encode(read(ST / name)) == data
    assert stblob.decode(import_blob(ST / name)[1]) == stblob.decode(data)  # the programs' words aside
    got = stblob.decode(data)
    assert _without_files(got) == _without_files(folder)
    assert got.weights.keys() == folder.weights.keys() and all(got.weights[k] == folder.weights[k] for k in got.weights)
    assert {k: Path(v).name for k, v in folder.files.items()} == got.files
    hdr = read_header(data)
    assert (hdr.format_version, hdr.source, hdr.compiler) == (2, "stedgeai", "stedgeai")
    assert hdr.compiler_version == folder.toolchain.get("atonn", "")


@needs_shared
def test_import_twice_in_fresh_processes_gives_byte_identical_blobs(tmp_path):
    """Determinism across processes and hash seeds (the epoch-block flags are a set)."""
    name = "st_ic_mnv1_nucleo"
    out = []
    for seed in ("1", "2"):
        path = tmp_path / f"{seed}.npu"
        r = subprocess.run([sys.executable, "-m", "npusim", "import", str(ST / name), "-o", str(path)],
                           capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONHASHSEED": seed})
        assert r.returncode == 0, r.stderr
        assert "3 epoch blocks" in r.stderr and "octoFlash 287,297 B" in r.stderr
        out.append(path.read_bytes())
    assert out[0] == out[1]
    assert main(["import", str(tmp_path / "1.npu"), "-o", str(tmp_path / "again.npu")]) == 0  # a blob re-imported
    assert (tmp_path / "again.npu").read_bytes() == out[0]


# ------------------------------------------------------------------------------ the tools on the blob

@needs_shared
@pytest.mark.parametrize("name", _each())
def test_run_check_inspect_on_the_blob_equal_the_folders(name, tmp_path, capsys):
    blob = _blob(tmp_path, name)
    assert is_st_output(blob)
    ran = {}
    for argv in (["run"], ["run", "--stalls"], ["check"], ["inspect"]):
        a, b = _cli(capsys, *argv, ST / name), _cli(capsys, *argv, blob)
        assert a == b, argv
        ran[" ".join(argv)] = a
    code, out, _ = ran["run"]  # the folder's run above (a run is deterministic: no second run to compare)
    assert code == 0 and " ok, " in out and "cycles" in out  # the compiles ran on boards: no fault
    for argv in (["run", "--json", tmp_path / "{}.json"], ["check", "--json", tmp_path / "{}.json"]):
        docs = []
        for src, tag in ((ST / name, "folder"), (blob, "blob")):
            path = str(argv[-1]).format(tag)
            assert _cli(capsys, *argv[:-1], path, src)[0] == 0
            docs.append(json.loads(Path(path).read_text()))
        assert docs[0] == docs[1], argv[0]
    docs = [json.loads(_cli(capsys, "inspect", "--json", src)[1]) for src in (ST / name, blob)]
    files = [d.pop("files") for d in docs]
    assert docs[0] == docs[1]
    assert files[1]["blob"] == str(blob) and files[1]["network"] == Path(files[0]["network"]).name


@needs_shared
@pytest.mark.parametrize("name", _each([n for n in COMPILES if any((ST / n).glob("*ecblobs.h"))]))
def test_disasm_of_the_blob_equals_the_folders(name, tmp_path, capsys):
    """The blob carries the epoch-controller programs' words: the same listing as ST's header gives."""
    blob = _blob(tmp_path, name)
    a, b = _cli(capsys, "disasm", ST / name, "--names"), _cli(capsys, "disasm", blob, "--names")
    assert a == b and a[0] == 0 and a[1].count("\n") > 100


@needs_shared
def test_disasm_of_an_explicit_struct_blob_says_there_is_no_program(tmp_path, capsys):
    code, _, err = _cli(capsys, "disasm", _blob(tmp_path, "st_audio_yamnet1024_v111"))
    assert code == 2 and "explicit structs" in err and err.count("\n") == 1


@needs_shared
def test_stress_and_doctor_take_the_blob(tmp_path, capsys):
    name = "st_audio_yamnet1024_v111"
    blob = _blob(tmp_path, name)
    a = _cli(capsys, "stress", "--runs", "2", ST / name)
    b = _cli(capsys, "stress", "--runs", "2", blob)
    assert a[0] == b[0] == 0 and a[1].replace(name, "X") == b[1].replace(blob.stem, "X")
    assert _cli(capsys, "doctor", ST / name) == _cli(capsys, "doctor", blob)


@needs_shared
def test_the_pytest_plugin_and_grid_take_the_blob(tmp_path, capsys):
    from npusim.testing.assertions import assert_check_clean, assert_st_clean

    name = "st_ic_mnv1_nucleo"
    blob = _blob(tmp_path, name)
    assert assert_st_clean(blob, max_ms=100).cycles == assert_st_clean(ST / name).cycles
    assert_check_clean(blob)
    a, b = (_cli(capsys, "grid", src, "--csv", tmp_path / f"{tag}.csv") for src, tag in ((ST / name, "f"), (blob, "b")))
    assert a[0] == b[0] == 0
    rows = [(tmp_path / f"{tag}.csv").read_text().splitlines() for tag in "fb"]
    assert [r.split(",")[1:] for r in rows[0]] == [r.split(",")[1:] for r in rows[1]]  # the model column aside


def _validate_equal(name, tmp_path, capsys):
    (model,) = (ST / name).glob("*.tflite")
    blob = _blob(tmp_path, name)
    a = _cli(capsys, "validate", ST / name, "--reference", model)
    b = _cli(capsys, "validate", blob, "--reference", model)
    assert a == b and "cosine" in a[1]  # the same verdict, whatever it is (exit 0 or 3)
    return a


@needs_shared
def test_validate_on_the_blob_equals_the_folders(tmp_path, capsys):
    """Values of ST's program from the weights the blob carries."""
    code, out, _ = _validate_equal("st_ic_mnv1_nucleo", tmp_path, capsys)
    assert code == 0 and "PASS" in out


@needs_shared
@pytest.mark.slow
@pytest.mark.parametrize("name", ["st_od_yolox480_dk", "st_pose_movenet192_dk", "st_reid_osnet_dk_v113",
                                  "fallguard_pe_yolov8n_pose256"])
def test_validate_on_the_blob_equals_the_folders_on_the_other_compiles_with_weights(name, tmp_path, capsys):
    """`validate` on the blob alone, its records and weights equal to the folder's (asserted here too): the
    validation is a function of those, so the folder's run would repeat the same heavy functional run and
    reference (4-8 CPU s each here); the CLI's folder-vs-blob equality, file-derived lines included, is
    `test_validate_on_the_blob_equals_the_folders` (mnv1)."""
    (model,) = (ST / name).glob("*.tflite")
    blob = _blob(tmp_path, name)
    folder, imported = load(ST / name), load(blob)
    assert _without_files(imported) == _without_files(folder)
    assert imported.weights.keys() == folder.weights.keys()
    assert all(imported.weights[k] == folder.weights[k] for k in folder.weights)
    code, out, err = _cli(capsys, "validate", blob, "--reference", model)
    # each compile's verdict on seeded noise (docs/stedgeai.md "Values"): MoveNet's sigmoid heatmaps are
    # ill-conditioned there (TFLite's own kernel sets part as far), the others pass at cosine >= 0.99
    if name == "st_pose_movenet192_dk":
        assert code == EXIT_VALIDATION_FAILED and "kernel sets part as much" in out, out
    else:
        assert code == 0 and "validate: PASS" in out, out


# ------------------------------------------------------------------------------ damage

@pytest.fixture(scope="module")
def small_blob(tmp_path_factory) -> bytes:
    if not COMPILES:
        pytest.skip("no shared compiles")
    return stblob.encode(load(ST / "st_audio_yamnet1024_v111"))


def _refused(capsys, tmp_path, data: bytes, needle: str):
    path = tmp_path / "bad.npu"
    path.write_bytes(data)
    code, out, err = _cli(capsys, "run", path)
    assert code == EXIT_INVALID_INPUT, err
    assert err.count("\n") == 1 and err.startswith("npusim: error: ") and "Traceback" not in err, err
    assert needle in err, err
    return err


@needs_shared
def test_a_truncated_or_edited_blob_is_one_line_and_exit_65(small_blob, tmp_path, capsys):
    _refused(capsys, tmp_path, small_blob[: len(small_blob) // 2], "truncated")
    edited = bytearray(small_blob)
    edited[len(edited) // 2] ^= 0x40
    _refused(capsys, tmp_path, bytes(edited), "checksum mismatch")
    _refused(capsys, tmp_path, small_blob[:16], "truncated or padded")


@needs_shared
def test_an_edited_and_resealed_blob_is_refused_by_its_records_types(small_blob, tmp_path, capsys):
    sec = read_header(small_blob).section(S_STEDGEAI)
    doc = msgpack.unpackb(small_blob[sec.offset:sec.end], raw=False)
    out = doc["output"]

    def edited(**changes):
        return _with_payload(small_blob, {"version": doc["version"], "output": {**out, **changes}})

    first = out["buffers"][0]
    _refused(capsys, tmp_path, edited(buffers=[{**first, "offset_end": "x"}] + out["buffers"][1:]),
             f"Buffer '{first['name']}'.offset_end: str 'x' where the record holds int")
    _refused(capsys, tmp_path, edited(buffers=[{**first, "colour": 1}] + out["buffers"][1:]), "unknown Buffer field")
    pool = dict(out["pools"][0])
    del pool["address"]
    _refused(capsys, tmp_path, edited(pools=[pool] + out["pools"][1:]), "field 'address' is missing")
    _refused(capsys, tmp_path, edited(blocks=[]), "no epoch block")
    _refused(capsys, tmp_path, edited(weights={"nowhere": b"\0"}), "not a pool of the program")
    _refused(capsys, tmp_path, _with_payload(small_blob, {"version": 99, "output": out}),
             "stedgeai section version 99, this npusim reads 1")
    _refused(capsys, tmp_path, _with_payload(small_blob, [1, 2]), "no version and program")
    _refused(capsys, tmp_path, _with_payload(small_blob, {**doc, "extra": 1}), "unknown entry 'extra'")
    # a length field that promises more bytes than the section holds: refused, nothing allocated for it
    data = bytearray(small_blob)
    data[sec.offset:sec.offset + 5] = b"\xdb\xff\xff\xff\xf0"  # str32 of ~4 GiB
    _refused(capsys, tmp_path, _reseal(data), "stedgeai section is not readable")


@needs_shared
def test_commands_for_npusims_own_programs_refuse_the_imported_blob(small_blob):
    with pytest.raises(BlobError, match="imported from ST Edge AI Core"):
        load_blob(small_blob)


def test_import_refuses_what_is_not_an_st_output(tmp_path, capsys):
    model = tmp_path / "m.onnx"
    model.write_bytes(b"not a model")
    code, _, err = _cli(capsys, "import", model, "-o", tmp_path / "m.npu")
    assert code == EXIT_INVALID_INPUT and err.count("\n") == 1 and "not an ST Edge AI Core output" in err
    code, _, err = _cli(capsys, "import", tmp_path, "-o", tmp_path / "m.npu")
    assert code == EXIT_INVALID_INPUT and err.count("\n") == 1 and "no ST Edge AI network file" in err
    assert not (tmp_path / "m.npu").exists()


@needs_shared
def test_damaged_epoch_controller_programs_are_one_line_and_exit_65(tmp_path, capsys):
    out, data = import_blob(ST / "st_ic_mnv1_nucleo")
    sec = read_header(data).section(S_STEDGEAI)
    doc = msgpack.unpackb(data[sec.offset:sec.end], raw=False)
    name, prog = next(iter(doc["ec_programs"].items()))
    cases = [({name: {**prog, "words": prog["words"][:3]}}, "runs past"),  # the count promises more words
             ({name: {**prog, "words": ["x"]}}, "not names, words and symbols"),
             ({name: {**prog, "words": [0] * 4}}, name)]  # no program magic
    for programs, needle in cases:
        path = tmp_path / "bad.npu"
        path.write_bytes(_with_payload(data, {**doc, "ec_programs": programs}))
        code, _, err = _cli(capsys, "disasm", path)
        assert code == EXIT_INVALID_INPUT and err.count("\n") == 1 and needle in err, err


@needs_shared
def test_a_repeat_load_of_a_blob_reuses_it_while_other_files_come_and_go(tmp_path):
    """A blob's parse (and what runs memoise on it) survives outputs written beside it; a rewrite of the
    blob itself is read again."""
    blob = _blob(tmp_path, "st_ic_mnv1_nucleo")
    first = load(blob)
    (tmp_path / "run.json").write_text("{}")  # what `run --json` leaves beside the blob
    assert load(blob) is first
    data = blob.read_bytes()
    blob.unlink()
    blob.write_bytes(data)
    os.utime(blob, ns=(1, 1))  # another time stamp: a changed file, whatever the clock's resolution
    assert load(blob) is not first and load(blob) == first
