"""Chrome / Perfetto trace-event JSON of a run: one track (tid) per unit and stream engine.

Complete events ("ph": "X") per epoch stage, instant epoch markers ("ph": "i") on the EC
track, one instant event per fault on the faulting unit's track (class, address, unit, epoch,
command, layer in its args), thread-name metadata per track. Times are microseconds at the profile clock.
Open the JSON in https://ui.perfetto.dev or chrome://tracing.
"""

from __future__ import annotations

import json


def track_names(profile) -> list[str]:
    u = profile.units
    names = ["EC", "HOST"]
    names += [f"SE{i}" for i in range(u.stream_engines)]
    names += [f"CA{i}" for i in range(u.conv_accelerators)]
    names += [f"POOL{i}" for i in range(u.pool_units)]
    names += [f"ARITH{i}" for i in range(u.arith_units)]
    names += [f"ACT{i}" for i in range(u.activation_units)]
    return names


class Trace:
    """Collects trace events; cheap when disabled."""

    def __init__(self, profile, enabled: bool = True):
        self.enabled = enabled
        self.us_per_cycle = 1e6 / profile.clock
        self.tids = {n: i + 1 for i, n in enumerate(track_names(profile))}
        self.events: list = []  # event dicts, and (templates, time) of `place` until `to_dict`

    def _tid(self, track: str) -> int:
        if track not in self.tids:
            self.tids[track] = len(self.tids) + 1
        return self.tids[track]

    def complete(self, track: str, name: str, start_cycle: float, cycles: float, args: dict | None = None) -> None:
        if not self.enabled:
            return
        ev = {"name": name, "cat": track.rstrip("0123456789").lower() or "unit", "ph": "X", "pid": 1,
              "tid": self._tid(track), "ts": round(start_cycle * self.us_per_cycle, 6),
              "dur": round(max(cycles, 0.0) * self.us_per_cycle, 6)}
        if args:
            ev["args"] = args
        self.events.append(ev)

    def templates(self, items) -> list | None:
        """Complete events to be placed by `place`: `items` = [(track, name, offset, cycles, args)],
        an event starting `offset` cycles after the time `place` is given (None: at that time). None
        when a track is not one of the profile's (its id would depend on the order tracks appear)."""
        out = []
        for track, name, offset, cycles, args in items:
            if track not in self.tids:
                return None
            ev = {"name": name, "cat": track.rstrip("0123456789").lower() or "unit", "ph": "X", "pid": 1,
                  "tid": self.tids[track], "ts": None, "dur": round(max(cycles, 0.0) * self.us_per_cycle, 6)}
            if args:
                ev["args"] = args
            out.append((ev, offset))
        return out

    def place(self, templates: list, at: float) -> None:
        """The events of `templates` (`templates`) for the time `at`, as `complete` would append
        them: noted, made by `to_dict`."""
        self.events.append((templates, at))

    def _placed(self, templates: list, at: float) -> list[dict]:
        us = self.us_per_cycle
        out = []
        for tpl, offset in templates:
            ev = tpl.copy()
            ev["ts"] = round((at if offset is None else at + offset) * us, 6)
            if "args" in ev:
                ev["args"] = ev["args"].copy()
            out.append(ev)
        return out

    def marker_template(self, name: str, args: dict | None = None) -> list:
        """`templates` of a `marker` (to be placed at its time)."""
        ev = {"name": name, "cat": "epoch", "ph": "i", "s": "g", "pid": 1, "tid": self._tid("EC"), "ts": None}
        if args:
            ev["args"] = args
        return [(ev, None)]

    def marker(self, name: str, cycle: float, args: dict | None = None) -> None:
        if not self.enabled:
            return
        ev = {"name": name, "cat": "epoch", "ph": "i", "s": "g", "pid": 1, "tid": self._tid("EC"),
              "ts": round(cycle * self.us_per_cycle, 6)}
        if args:
            ev["args"] = args
        self.events.append(ev)

    def fault(self, f, cycle: float) -> None:
        """An instant event for a Fault at `cycle`, on the track of the unit that faulted."""
        if not self.enabled:
            return
        unit = (f.unit or "EC").split(",")[0]
        track = unit if unit in self.tids else "EC"
        args = {"class": f.cls, "unit": f.unit or "", "access": f.access or "",
                "address": f"{f.address:#x}" if isinstance(f.address, int) and f.address >= 0 else "",
                "epoch": f.epoch, "command": f.command, "layer": f.layer or ""}
        self.events.append({"name": f"fault: {f.cls}" + (f" ({f.layer})" if f.layer else ""), "cat": "fault",
                            "ph": "i", "s": "t", "pid": 1, "tid": self._tid(track),
                            "ts": round(cycle * self.us_per_cycle, 6), "args": args})

    def to_dict(self) -> dict:
        events = []
        for e in self.events:
            if type(e) is tuple:
                events += self._placed(*e)
            else:
                events.append(e)
        self.events = events
        meta = [{"name": "process_name", "ph": "M", "pid": 1, "tid": 0, "args": {"name": "npusim NPU"}}]
        used = {e["tid"] for e in self.events}
        for name, tid in self.tids.items():
            if tid in used:
                meta.append({"name": "thread_name", "ph": "M", "pid": 1, "tid": tid, "args": {"name": name}})
                meta.append({"name": "thread_sort_index", "ph": "M", "pid": 1, "tid": tid, "args": {"sort_index": tid}})
        return {"traceEvents": meta + self.events, "displayTimeUnit": "ns"}

    def to_json(self) -> str:
        return json.dumps(self.to_dict())
