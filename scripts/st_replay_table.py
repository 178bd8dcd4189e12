"""The README's table of ST Edge AI Core compiles replayed by npusim: for each output folder given (default:
../shared/stedgeai/*), its epoch blocks, hardware epochs, software blocks, buffers, faults, npusim's
timing-only milliseconds, the import + replay wall time, and the board figure where one is published.

    python scripts/st_replay_table.py [FOLDER ...]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

# published board latencies (ST model zoo READMEs, STM32N6570-DK) of these compiles' models
BOARD_MS = {"st_audio_yamnet1024_v111": 9.88, "st_od_yolox480_dk": 32.4}


def main(argv: list[str]) -> int:
    from npusim.tools.st_run import run_st

    root = Path(__file__).resolve().parents[2] / "shared" / "stedgeai"
    folders = [Path(a) for a in argv] or sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("_"))
    print("| compile | toolchain | epoch blocks | hw epochs | sw blocks | buffers | faults | npusim ms | board ms | import + replay s |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for f in folders:
        t = time.perf_counter()
        r = run_st(f)
        wall = time.perf_counter() - t
        hw = sum(1 for k in r.epoch_cycles if not k[2])
        sw = len(r.epoch_cycles) - hw
        board = BOARD_MS.get(f.name)
        print(f"| {f.name} | {r.out.toolchain.get('atonn', '?')} | {len(r.out.blocks)} | {hw} | {sw} | "
              f"{len(r.out.buffers)} | {len(r.faults)} | {r.ms:.2f} | {board if board else '-'} | {wall:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
