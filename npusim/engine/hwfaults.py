"""Hardware-refused configurations and controller faults, as Fault records (data, never raised).

The epoch controller refuses a configuration the hardware cannot run:
  bad-descriptor     SE port not the wired one, engine/unit/endpoint index out of range, zero
                     counts, a unit layout that breaks `required_layout`, bad groups, a link to an
                     endpoint the epoch does not configure, two sources on one port
  misaligned-access  a field the ISA marks `strict = <unit>` (qparams, params, lut) whose value is
                     not a multiple of that unit (isa.unit_bytes)
  unknown-opcode     a command word whose opcode the ISA does not define
  hang               units waiting for a stream that never comes (raised by the machine)
"""

from __future__ import annotations

from ..faults import Fault
from ..program import legality as L
from ..program.layouts import required_layout
from .config import EpochConfig, UnitConfig


def strict_problems(op: str, args: dict, isa, profile) -> list[tuple[str, int, str, int]]:
    """(field, value, unit name, unit bytes) of every strict field of `op` that is misaligned."""
    out = []
    for f in isa.command(op).fields:
        if f.strict is not None:
            step = isa.unit_bytes(f.strict, profile)
            v = int(args.get(f.name, 0))
            if step > 1 and v % step:
                out.append((f.name, v, f.strict, step))
    return out


def make_fault(cls: str, message: str, *, unit: str = "EC", epoch=None, command=None, layer: str = "",
               access: str | None = None, address=None, size: int = 0, rule: str = "", **extra) -> Fault:
    return Fault(cls=cls, access=access, address=address, size=size, unit=unit, epoch=epoch,
                 command=command, layer=layer, rule=rule, message=message, count=1, **extra)


def _count(profile, kind: str) -> int:
    return L.endpoint_count(kind, profile)


def _check_unit(u: UnitConfig, profile, isa) -> list[tuple]:
    """(class, message, rule, address) problems of one unit configuration."""
    return [p if len(p) == 4 else (*p, None) for p in _unit_problems(u, profile, isa)]


def _unit_problems(u: UnitConfig, profile, isa) -> list[tuple]:
    out = []
    a = u.args
    pr = L.endpoint_exists(u.kind, u.index, profile)
    if pr:
        out.append(("bad-descriptor", f"{u.op} unit={u.index}: {pr.message}", pr.rule))
        return out
    zero = [k for k in ("in_h", "in_w", "in_c", "out_c", "kh", "kw", "sh", "sw", "dh", "dw", "groups",
                        "c", "h", "w", "out_h", "out_w", "n") if k in a and a[k] == 0]
    if zero:
        out.append(("bad-descriptor", f"{u.name}: zero count in {', '.join(zero)}", "counts >= 1"))
        return out
    if u.op == "CONV":
        g = a["groups"]
        if a["in_c"] % g or a["out_c"] % g:
            out.append(("bad-descriptor", f"{u.name}: in_c={a['in_c']} and out_c={a['out_c']} must be multiples of groups={g}",
                        "groups divides in_c and out_c"))
    oh, ow, oc, olay = u.out_shape()
    if oh < 1 or ow < 1:
        out.append(("bad-descriptor", f"{u.name}: output size {oh}x{ow} is empty", "output >= 1x1"))
        return out
    in_h, in_w, in_c, in_lay = u.in_shapes()[0]
    need = required_layout(in_h, in_w, in_c, isa)
    key = "in_layout" if u.op == "CONV" else "layout"
    if in_lay != need:
        out.append(("bad-descriptor", f"{u.name}: {key}={in_lay} but a {in_h}x{in_w}x{in_c} tensor must be {need}",
                    f"layout rule: {need}"))
    if u.op == "CONV":
        need_o = required_layout(oh, ow, oc, isa)
        if olay != need_o:
            out.append(("bad-descriptor", f"{u.name}: out_layout={olay} but a {oh}x{ow}x{oc} tensor must be {need_o}",
                        f"layout rule: {need_o}"))
    if u.op == "ARITH" and a["op"] == "concat" and a["c2"] < 1:
        out.append(("bad-descriptor", f"{u.name}: concat needs c2 >= 1", "c2 >= 1"))
    for fld, v, unit, step in strict_problems(u.op, a, isa, profile):
        out.append(("misaligned-access", f"{u.name}: {u.op}.{fld}={v:#x} is not a multiple of the {step} B {unit}",
                    f"required alignment {step}, actual residue {v % step}", v))
    return out


def check_epoch(cfg: EpochConfig, profile, isa, layer_of) -> list[Fault]:
    """Every reason the hardware would refuse this epoch (empty list: it may run)."""
    faults = []

    def add(cls, msg, unit, command, rule="", address=None):
        faults.append(make_fault(cls, msg, unit=unit, epoch=cfg.id, command=command, layer=layer_of(command),
                                 rule=rule, address=address))

    for cmd, pr in cfg.extra:
        add("bad-descriptor", pr.message, "EC", cmd, pr.rule)
    for se in cfg.ses.values():
        a = se.args
        pr = L.endpoint_exists("SE", se.index, profile)
        if pr:
            add("bad-descriptor", f"SE engine={se.index}: {pr.message}", "EC", se.command, pr.rule)
            continue
        pr = L.se_port_wired(se.index, a["port"], profile)
        if pr:
            add("bad-descriptor", f"SE{se.index}: {pr.message}", se.name, se.command, pr.rule)
        zero = [k for k in ("run", "n1", "n2", "n3") if a[k] == 0]
        if zero:
            add("bad-descriptor", f"SE{se.index}: zero count in {', '.join(zero)}", se.name, se.command, "counts >= 1")
    for u in cfg.units.values():
        for cls, msg, rule, addr in _check_unit(u, profile, isa):
            add(cls, msg, u.name if u.index < _count(profile, u.kind) else "EC", u.command, rule, addr)
    seen_ports = set()
    for ln in cfg.links:
        for end, role in ((ln.src, "source"), (ln.dst, "sink")):
            kind = end.rstrip("0123456789")
            idx = int(end[len(kind):])
            node = cfg.node(end)
            pr = L.endpoint_exists(kind, idx, profile, role) or L.configured(role, kind, idx, node)
            if pr is None and kind == "SE":
                pr = L.link_direction(role, idx, node.args["dir"])
            if pr:
                add("bad-descriptor", f"LINK {pr.message}", "EC", ln.command, pr.rule)
                break
        else:
            kind = ln.dst.rstrip("0123456789")
            pr = L.sink_port_exists(kind, ln.port)
            if pr:
                add("bad-descriptor", f"LINK {ln.src}->{ln.dst}: {pr.message}", "EC", ln.command, pr.rule)
            elif (ln.dst, ln.port) in seen_ports:
                add("bad-descriptor", f"LINK {ln.src}->{ln.dst}: port {ln.port} already has a source", "EC", ln.command,
                    "one source per input port")
            seen_ports.add((ln.dst, ln.port))
    return faults
