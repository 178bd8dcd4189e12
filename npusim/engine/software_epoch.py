"""Software epochs on the machine: a HOST command runs its operator record on its HTENSOR operands.

`SoftwareEpochs` is the part of `Machine` (engine/machine.py) that runs a software epoch: every operand
byte checked like an NPU access, the operator computed by `cpu.run_operator`, timed by [host] of the
profile (`_host`), and its values-only form for `Machine.replay` (`_replay_host`). It uses the machine's
state (`memory`, `stats`, `trace`, `opt`, `_fault`, `_check`, `_knows`, `_written`, `_wait`, `_layer`).
"""

from __future__ import annotations

import numpy as np

from ..errors import NpusimError
from ..memory import AccessPattern
from .epoch_values import ReplayRefused
from .hwfaults import make_fault
from .static import Undecided
from .stats import EpochStats
from .streams import read_stream, write_stream


class SoftwareEpochs:
    """`Machine`'s software epochs (HOST and its HTENSOR operands)."""

    def _host(self, d, operands: list):
        """A software epoch: the host runs the operator record of `d` on its HTENSOR operands
        (engine/host.py), every operand byte checked like an NPU access, timed by [host]."""
        from ..cpu import HostOpError, host_cycles, run_operator
        from ..program.hostop import decode_record
        from .host import Operand, from_operator, operand_problem, to_operator

        a, idx = d.args, d.index
        if self.opt.replay:
            self._replay_host(d, operands)
            return
        layer = self._layer(idx)
        es = EpochStats(id=-1, command=idx, layer=layer, start=self.env.now, kind="host")
        es.mac_rate = self._mac_rate("int8")
        self.stats.epochs.append(es)
        block = int(self.isa.layouts["blocked16"]["block"])

        def refuse(msg: str, rule: str):
            es.status = "fault"
            self._fault(make_fault("bad-descriptor", f"HOST: {msg}", unit="HOST", command=idx, layer=layer, rule=rule))

        rec_p = AccessPattern(a["node"], a["node_bytes"])
        self._check(rec_p, "read", "HOST", None, idx, layer)
        rec = None
        if not self.opt.static or self._knows(rec_p, idx, "HOST", "the host operator record is an input or was "
                                              "written by the program before this software epoch: its "
                                              "contents (operator, watchdog) are known only when running"):
            try:
                raw = read_stream(self.memory, rec_p).tobytes()
                self.host_records[idx] = raw
                rec = decode_record(raw)
            except NpusimError as e:
                refuse(str(e), "the HOST node address holds a host operator record")
                return
        ops = [Operand.from_args(o.args, o.index) for o in operands]
        op_type = rec.op_type if rec is not None else "HOST"
        ins = sorted((o for o in ops if o.is_input), key=lambda o: o.slot)
        outs = sorted((o for o in ops if not o.is_input), key=lambda o: o.slot)
        if [o.slot for o in ins] != list(range(a["n_in"])) or [o.slot for o in outs] != list(range(a["n_out"])):
            refuse(f"{op_type} takes n_in={a['n_in']}, n_out={a['n_out']}: HTENSOR slots are inputs "
                   f"{[o.slot for o in ins]}, outputs {[o.slot for o in outs]}", "one HTENSOR per operand slot")
            return
        bad = next((p for p in (operand_problem(o, block) for o in ops) if p), None)
        if bad:
            refuse(f"{op_type} {bad}", "HTENSOR operands describe a tensor the host can address")
            return
        if rec is not None:
            es.cycles = host_cycles(rec.op_type, [o.shape for o in ins], [o.shape for o in outs], self.profile,
                                    _attrs(rec))
        limit = float(self.profile.epoch.timeout_cycles)
        if es.cycles > limit:
            es.status = "hang"
            es.cycles = limit
            self.trace.complete("HOST", f"{rec.op_type} (hang)", self.env.now, limit)
            yield from self._wait(limit)
            self._fault(make_fault("hang", f"software epoch {rec.op_type} needs more than the watchdog's "
                                   f"{int(limit)} cycles", unit="HOST", command=idx, layer=layer,
                                   rule=f"epoch.timeout_cycles={int(limit)}"))
            return
        pats = {id(o): o.pattern(block) for o in ops}
        for o in ins:
            self._check(pats[id(o)], "read", "HOST", None, o.command, layer)
        for o in outs:
            self._check(pats[id(o)], "write", "HOST", None, o.command, layer)
        if self.opt.static:
            self.undecided.append(Undecided(idx, layer, "HOST", f"software epoch {op_type}: whether the host "
                                            "operator runs on its operand values (if it fails, its outputs "
                                            "stay unwritten) is known only when running"))
        elif not self.opt.timing_only:
            try:
                vals = [to_operator(o, read_stream(self.memory, pats[id(o)]), block) for o in ins]
                ys = run_operator(rec, vals, [_np_type(o.elem) for o in outs])
                for k, (o, y) in enumerate(zip(outs, ys)):
                    got = tuple(np.shape(y))
                    if got != tuple(o.shape) and [d for d in got if d != 1] == [d for d in o.shape if d != 1]:
                        ys[k] = np.reshape(y, o.shape)  # the same elements, size-1 dims aside (one layout)
                    elif got != tuple(o.shape):
                        raise HostOpError(f"{rec.op_type}: output {o.slot} has shape {list(got)}, "
                                          f"its HTENSOR says {list(o.shape)}")
            except HostOpError as e:
                refuse(str(e), "HOST operands legal for the operator")
                return
            for o, y in zip(outs, ys):
                write_stream(self.memory, pats[id(o)], from_operator(o, y, block))
        for o in outs:
            self._written(pats[id(o)])
        es.bytes_read = sum(pats[id(o)].nbytes for o in ins) + rec_p.nbytes
        es.bytes_written = sum(pats[id(o)].nbytes for o in outs)
        es.stall_cycles["host"] = es.cycles
        es.stages["HOST"] = es.cycles
        es.critical = "HOST"
        self.trace.complete("HOST", f"{op_type} ({layer})" if layer else op_type, self.env.now, es.cycles,
                            {"cycles": round(float(es.cycles), 1), "cpu": True})
        yield from self._wait(es.cycles)

    def _replay_host(self, d, operands: list) -> None:
        """`replay`: a software epoch's values, when its operator record is the memoised run's."""
        from ..cpu import HostOpError, run_operator
        from ..program.hostop import decode_record
        from .host import Operand, from_operator, to_operator

        a = d.args
        raw = read_stream(self.memory, AccessPattern(a["node"], a["node_bytes"])).tobytes()
        if self._replay_records.get(d.index) != raw:
            raise ReplayRefused("host record")
        block = int(self.isa.layouts["blocked16"]["block"])
        ops = [Operand.from_args(o.args, o.index) for o in operands]
        ins = sorted((o for o in ops if o.is_input), key=lambda o: o.slot)
        outs = sorted((o for o in ops if not o.is_input), key=lambda o: o.slot)
        pats = {id(o): o.pattern(block) for o in ops}
        try:
            vals = [to_operator(o, read_stream(self.memory, pats[id(o)]), block) for o in ins]
            ys = run_operator(decode_record(raw), vals, [_np_type(o.elem) for o in outs])
        except (HostOpError, NpusimError):
            raise ReplayRefused("host operator") from None
        for o, y in zip(outs, ys):
            got = tuple(np.shape(y))
            if got != tuple(o.shape):
                if [v for v in got if v != 1] != [v for v in o.shape if v != 1]:
                    raise ReplayRefused("host output shape")  # the full run refuses it (`_host`)
                y = np.reshape(y, o.shape)
            write_stream(self.memory, pats[id(o)], from_operator(o, y, block))


def _attrs(rec) -> dict:
    """Integer attributes of a host record's node that its cost needs (kernel_shape, transA)."""
    from onnx import helper

    out = {}
    for at in rec.node_proto().attribute:
        if at.name in ("kernel_shape", "transA"):
            out[at.name] = helper.get_attribute_value(at)
    return out


def _np_type(elem: str):
    from ..kernels.quant import np_dtype

    return np_dtype(elem)
