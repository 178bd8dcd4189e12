"""RAM banks: address -> (bank, bank line), with interleave and optional XOR hashing.

Bank line = banks x interleave bytes. Without hashing, bank = (offset // interleave) % banks.
With `pool.xor_hash`, the bank index is XOR-folded with the bank-line index (addition mod
banks when banks is not a power of two), so same-bank strides spread over banks.
"""

from __future__ import annotations

import numpy as np

from ..hw.profile import Pool


def bank_of(pool: Pool, addr: int) -> tuple[int, int]:
    off = addr - pool.base
    line = off // pool.bank_line
    bank = (off // pool.interleave) % pool.banks
    if pool.xor_hash:
        if pool.banks & (pool.banks - 1) == 0:
            bank ^= line % pool.banks
        else:
            bank = (bank + line) % pool.banks
    return int(bank), int(line)


def banks_of(pool: Pool, addrs) -> tuple[np.ndarray, np.ndarray]:
    """Vectorised `bank_of` over an int64 array of addresses."""
    off = np.asarray(addrs, dtype=np.int64) - pool.base
    line = off // pool.bank_line
    bank = (off // pool.interleave) % pool.banks
    if pool.xor_hash:
        if pool.banks & (pool.banks - 1) == 0:
            bank = bank ^ (line % pool.banks)
        else:
            bank = (bank + line) % pool.banks
    return bank, line
