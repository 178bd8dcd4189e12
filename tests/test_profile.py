"""Hardware profile loading, validation and overrides."""

from __future__ import annotations

import tomllib

import pytest

from npusim.errors import NpusimError, ProfileError
from npusim.hw import default_profile_path, load_profile, profile_from_dict


def raw():
    return tomllib.loads(default_profile_path().read_text())


def test_default_profile_facts(profile):
    assert profile.name == "n657"
    assert profile.clock == 1_000_000_000
    assert profile.units.stream_engines == 10 and profile.units.conv_accelerators == 4
    assert profile.bus.stream_engine_port == (0, 0, 0, 0, 0, 1, 1, 1, 1, 1)
    ram3 = profile.pool_named("npuRAM3")
    assert (ram3.base, ram3.size, ram3.width, ram3.bank_line) == (0x34200000, 448 * 1024, 8, 128)
    assert profile.pool_named("octoFlash").perms == "r"
    assert profile.pool_at(0x34270000).name == "npuRAM4"
    assert profile.pool_at(0x10) is None
    assert profile.alignment.granule == 128 and profile.stream_engine.limit_granule == 8


def test_load_by_name_and_by_path_agree():
    assert load_profile("n657") == load_profile(str(default_profile_path())) == load_profile()


def test_set_overrides():
    p = load_profile(overrides=["alignment.granule=64", "pool.npuRAM3.banks=4", "clock=\"800MHz\"",
                                "bus.stream_engine_port=[0,0,0,0,0,0,1,1,1,1]"])
    assert p.alignment.granule == 64
    assert p.pool_named("npuRAM3").banks == 4 and p.pool_named("npuRAM4").banks == 8
    assert p.clock == 800_000_000
    assert p.bus.stream_engine_port[5] == 0


@pytest.mark.parametrize("override, needle", [
    ("alignment.granule=96", "alignment.granule"),
    ("pool.npuRAM3.banks=0", "npuRAM3.banks"),
    ("pool.npuRAM4.base=0x34200000", "overlaps"),
    ("pool.npuRAM3.interleave=24", "interleave"),
    ("units.stream_engines=\"ten\"", "units.stream_engines"),
    ("bus.stream_engine_port=[0,1]", "stream_engine_port"),
    ("cache.size=\"3KiB\"", "cache"),
    ("clock=\"fast\"", "clock"),
    ("pool.npuRAM3.perms=\"x\"", "perms"),
    ("nosuch.key=1", "nosuch.key"),
    ("pool.nopool.banks=1", "unknown pool"),
    ("alignment.granule", "KEY=VALUE"),
])
def test_bad_overrides_name_the_key(override, needle):
    with pytest.raises(ProfileError) as e:
        load_profile(overrides=[override])
    assert needle in str(e.value)
    assert "\n" not in str(e.value)


def test_unknown_key_in_file_rejected():
    r = raw()
    r["bus"]["turbo"] = True
    with pytest.raises(ProfileError, match=r"bus\.turbo: unknown key"):
        profile_from_dict(r)
    r = raw()
    r["pool"][2]["colour"] = "red"
    with pytest.raises(ProfileError, match=rf"pool\.{r['pool'][2]['name']}\.colour: unknown key"):
        profile_from_dict(r)  # pools are named pool.NAME in every message


def test_missing_key_rejected():
    r = raw()
    del r["cache"]["ways"]
    with pytest.raises(ProfileError, match="cache.ways: missing"):
        profile_from_dict(r)


def test_overlapping_pools_in_file(tmp_path):
    text = default_profile_path().read_text().replace("base = 0x34270000", "base = 0x34260000")
    f = tmp_path / "bad.toml"
    f.write_text(text)
    with pytest.raises(ProfileError, match="overlaps") as e:
        load_profile(str(f))
    assert str(f) in str(e.value)


def test_bad_files(tmp_path):
    with pytest.raises(ProfileError, match="no such profile"):
        load_profile(str(tmp_path / "none.toml"))
    f = tmp_path / "broken.toml"
    f.write_text("name = [")
    with pytest.raises(ProfileError, match="not valid TOML"):
        load_profile(str(f))
    assert issubclass(ProfileError, NpusimError) and ProfileError.exit_code == 65


def test_profile_is_frozen(profile):
    import dataclasses

    with pytest.raises(dataclasses.FrozenInstanceError):
        profile.clock = 5  # type: ignore[misc]
    with pytest.raises(TypeError):  # cached and shared: the rate tables are read-only too
        profile.compute.mac_per_cycle["int8"] = 1
    assert load_profile().compute.mac_per_cycle["int8"] == 72


@pytest.mark.parametrize("key", ["epoch.setup_cycles", "timing.cross_bank_penalty_cycles",
                                 "bus.burst_overhead_cycles", "stream_engine.prefetch_window",
                                 "timing.bank_conflict_cycles"])
def test_negative_timing_values_are_refused(key):
    with pytest.raises(ProfileError, match=f"{key}=-5.*negative"):
        load_profile(overrides=[f"{key}=-5"])
