"""Staged compile (prepare/finish) and the compile cache shared by the plugin, sweep and bisect."""

import subprocess
import sys
import textwrap

import pytest

from npusim import zoo
from npusim.compiler import CompileCache, CompileOptions, compile, finish, prepare
from npusim.compiler.cache import model_bytes
from npusim.errors import UsageError
from npusim.hw import load_profile
from npusim.program.blob import encode_blob


@pytest.fixture(scope="module")
def model():
    return zoo.yolo_style(size=64)  # BN, concat, resize, leaky relu: every pass has work


def test_finish_matches_compile_at_every_point(model):
    prof = load_profile()
    prep = prepare(model, CompileOptions(), prof)
    points = [CompileOptions(mem_align=16), CompileOptions(fuse="none"), CompileOptions(),
              CompileOptions(mem_plan="per-layer", io_pad=64), CompileOptions(mem_align=16),
              CompileOptions(weights_pool="hyperRAM", conv_units=1, guard=128)]
    for opts in points:  # repeated points reuse the memoized passes: nothing may leak between points
        staged = encode_blob(finish(prep, opts, prof), prof)
        assert staged == encode_blob(compile(model, opts, prof), prof), opts


def test_finish_refuses_other_front_end_options():
    prep = prepare(zoo.conv_model(16, 16, 8, 8), CompileOptions())
    with pytest.raises(UsageError, match="calibration_samples"):
        finish(prep, CompileOptions(calibration_samples=2))
    with pytest.raises(UsageError, match="quantization"):
        finish(prep, CompileOptions(quantization="fp16"))


def test_cache_hits_memory_and_disk(tmp_path):
    m = zoo.conv_model(16, 16, 8, 8)
    prof = load_profile()
    c = CompileCache(tmp_path)
    a = c.compile(m, CompileOptions(mem_align=16), prof)
    assert (c.hits, c.misses) == (0, 1)
    assert c.compile(m, CompileOptions(mem_align=16), prof) is a and c.hits == 1
    c.compile(m, CompileOptions(mem_align=32), prof)  # another point: a miss, the front end is reused
    assert c.misses == 2 and len(c._prepared) == 1
    fresh = CompileCache(tmp_path)  # a later process: from the blob file
    b = fresh.compile(m, CompileOptions(mem_align=16), prof)
    assert (fresh.hits, fresh.misses) == (1, 0)
    assert encode_blob(b, prof) == encode_blob(a, prof)


def test_a_broken_blob_file_is_a_miss(tmp_path):
    m = zoo.conv_model(16, 16, 8, 8)
    prof = load_profile()
    key = CompileCache(None).key(model_bytes(m), CompileOptions(), prof)
    (tmp_path / f"{key}.npu").write_bytes(b"not a blob")
    c = CompileCache(tmp_path)
    c.compile(m, CompileOptions(), prof)
    assert c.misses == 1
    assert CompileCache(tmp_path).get(key, prof) is not None  # rewritten


def test_concurrent_processes_compile_a_key_once(tmp_path):
    path = tmp_path / "m.onnx"
    path.write_bytes(model_bytes(zoo.conv_model(16, 32, 16, 16)))
    code = textwrap.dedent(f"""
        from npusim.compiler import CompileCache, CompileOptions
        c = CompileCache({str(tmp_path / 'cache')!r})
        c.compile({str(path)!r}, CompileOptions(mem_align=64))
        print(c.misses)
    """)
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True) for _ in range(3)]
    misses = [int(p.communicate(timeout=120)[0].strip()) for p in procs]
    assert sorted(misses) == [0, 0, 1]
    assert len(list((tmp_path / "cache").glob("*.npu"))) == 1
    assert not list((tmp_path / "cache").glob("*.tmp"))
