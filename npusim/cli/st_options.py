"""Options of the commands that take an ST Edge AI Core output (`inspect`, `check`, `run`)."""

from __future__ import annotations


def add_st_options(p) -> None:
    g = p.add_argument_group("ST Edge AI Core output (a folder, or its network.c)")
    g.add_argument("--user-io", metavar="POOL[=ADDRESS]", default=None,
                   help="where the application's input/output buffers are placed (default: the AXISRAM2 window, "
                        "after what the compile uses there)")
    g.add_argument("--reserve", metavar="NAME=START+SIZE", action="append", default=[],
                   help="memory the application keeps for itself (its linker sections): a pool overlapping it "
                        "is a fault (repeatable)")
    g.add_argument("--board-ram-off", action="store_true",
                   help="replay on a board whose application left the NPU RAMs (AXISRAM3-6) powered off")


def replay_options(args, keep_going: bool = True):
    from ..importers.stedgeai.board import ReplayOptions, parse_reserve, parse_user_io

    return ReplayOptions(user_io=parse_user_io(args.user_io) if args.user_io else None,
                         reserve=tuple(parse_reserve(r) for r in args.reserve),
                         npu_ram_off=args.board_ram_off, keep_going=keep_going)
