"""Memory system of the NPU model: address map, banks + access cost, NPU cache, allocator and
contexts, region table (shadow state), access checks, gather/scatter.

Module map: addrmap (pools, Memory), pattern (AccessPattern, runs), banks, cost, cache,
regions (RegionTable), allocator (Allocator, Context, Monitor), checker (Checker and fault
constructors), access (gather, scatter); _kernels holds the Numba loops.
"""

from .access import Split, Window, gather, scatter, stream_bytes, window
from .addrmap import AddressError, AddressMap, Memory
from .allocator import Allocator, Context, Monitor, OutOfMemoryError
from .banks import bank_of, banks_of
from .cache import CacheResult, NpuCache
from .checker import (Checker, bad_descriptor, check_alignment, nearest_region, region_overlaps,
                      relation, write_write_races)
from .cost import ConflictCost, PatternCost, conflict_cycles, passes_conflicts, pattern_cost, unmapped_cost
from .pattern import AccessPattern, byte_addresses, covered_intervals, runs
from .regions import REGION_KINDS, Region, RegionTable

__all__ = [
    "AccessPattern", "AddressError", "AddressMap", "Allocator", "CacheResult", "Checker",
    "ConflictCost", "Context", "Memory", "Monitor", "NpuCache", "OutOfMemoryError", "PatternCost",
    "REGION_KINDS", "Region", "RegionTable", "bad_descriptor", "bank_of", "banks_of", "byte_addresses",
    "check_alignment", "conflict_cycles", "covered_intervals", "gather", "nearest_region",
    "passes_conflicts", "pattern_cost", "region_overlaps", "relation", "runs", "scatter", "Split", "stream_bytes", "unmapped_cost", "Window", "window", "write_write_races",
]
