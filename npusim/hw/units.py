"""Parse unit strings ("448KiB", "1000MHz", "4KiB") -- the only place that does."""

import re

from ..errors import ProfileError

_SIZE = {"": 1, "B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "KB": 1000, "MB": 10**6, "GB": 10**9}
_FREQ = {"Hz": 1, "kHz": 10**3, "MHz": 10**6, "GHz": 10**9}
_NUM = re.compile(r"^\s*([0-9][0-9_]*(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*$")


def _split(key: str, value) -> tuple[float, str]:
    if isinstance(value, bool):
        raise ProfileError(f"{key}={value!r}: expected a number")
    if isinstance(value, (int, float)):
        return float(value), ""
    if isinstance(value, str):
        m = _NUM.match(value)
        if m:
            return float(m.group(1).replace("_", "")), m.group(2)
    raise ProfileError(f"{key}={value!r}: expected a number or a number with a unit")


def parse_size(key: str, value) -> int:
    """Bytes from an int or a string like "448KiB"."""
    num, unit = _split(key, value)
    if unit not in _SIZE:
        raise ProfileError(f"{key}={value!r}: unknown size unit {unit!r} (use B, KiB, MiB, GiB)")
    out = num * _SIZE[unit]
    if out != int(out):
        raise ProfileError(f"{key}={value!r}: not a whole number of bytes")
    return int(out)


def parse_freq_hz(key: str, value) -> int:
    """Hertz from a string like "1000MHz" (a bare number means MHz)."""
    num, unit = _split(key, value)
    if unit == "":
        unit = "MHz"
    if unit not in _FREQ:
        raise ProfileError(f"{key}={value!r}: unknown frequency unit {unit!r} (use Hz, kHz, MHz, GHz)")
    return int(num * _FREQ[unit])
