"""How many cores this process may use (its CPU affinity, else the machine's count)."""

import os


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # not Linux
        return os.cpu_count() or 1
