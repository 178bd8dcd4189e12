"""The README's table of ST's own programs against the board ("How close is it to the board?"): for each ST
Edge AI Core output, its model, toolchain, the published board milliseconds, ST's own estimate (the sum of the
epoch blocks' `estimated_tot_cycles` at the profile's clock, where the compile carries them) and npusim's
timing-only milliseconds on ST's epochs.

    python scripts/st_board_table.py                 # the shared compiles (../shared/stedgeai/*)
    python scripts/st_board_table.py DIR=MS [...]    # other ST outputs, with their board figures
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from calibrate import ST_CASES, ST_ROOT  # noqa: E402  (the board figures live with the calibration cases)

# what each shared compile is (its folder's README row in ../shared/stedgeai)
MODELS = {"ei_person_logo_od_nonec": "Edge Impulse person/logo detector 224", "fallguard_pe_yolov8n_pose256":
          "YOLOv8n pose 256", "st_audio_yamnet1024_v111": "YAMNet 1024", "st_ic_mnv1_nucleo":
          "MobileNet v1 0.25 96 (NUCLEO)", "st_od_yolox480_dk": "ST YOLOX nano 480",
          "st_pose_movenet192_dk": "MoveNet lightning heatmaps 192", "st_reid_osnet_dk_v113": "OSNet 0.25 256x128"}


def rows(items: list[tuple[Path, float | None]]) -> list[dict]:
    from npusim.tools.st_run import run_st

    out = []
    for folder, board in items:
        r = run_st(folder)
        est = sum(b.estimated_tot_cycles or 0 for b in r.out.blocks)
        out.append({"model": MODELS.get(folder.name, folder.name), "toolchain": r.out.toolchain.get("atonn", "?"),
                    "board_ms": board, "st_estimate_ms": est * 1e3 / r.profile.clock if est else None,
                    "npusim_ms": r.ms})
    return out


def markdown(table: list[dict]) -> str:
    def ms(v):
        return "-" if v is None else f"{v:.2f}"

    lines = ["| model | toolchain | board ms | ST's estimate ms | npusim ms | npusim / board |", "|---|---|---|---|---|---|"]
    lines += [f"| {t['model']} | {t['toolchain']} | {ms(t['board_ms'])} | {ms(t['st_estimate_ms'])} | "
              f"{ms(t['npusim_ms'])} | {'-' if not t['board_ms'] else format(t['npusim_ms'] / t['board_ms'], '.2f')} |"
              for t in table]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    board = {name: ms for name, ms, _ in ST_CASES}
    if argv:
        items = []
        for a in argv:
            path, _, ms = a.rpartition("=")
            if not path or not Path(path).is_dir():
                print(f"st_board_table: {a!r}: expected an ST output folder=board ms", file=sys.stderr)
                return 2
            items.append((Path(path), float(ms)))
    else:
        items = [(p, board.get(p.name)) for p in sorted(ST_ROOT.iterdir()) if p.is_dir() and not p.name.startswith("_")]
    print(markdown(rows(items)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
