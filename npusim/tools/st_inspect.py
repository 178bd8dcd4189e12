"""`npusim inspect` of an ST Edge AI Core output: the table an engineer debugging a board hang needs.

One row per epoch (and per software block): the epoch block's index (the runtime's array index, which
a board callback counts), `epoch_num`, hardware / software / hybrid, the units used and how many
CONVACCs one convolution is split over, the stream-engine masks in the runtime's debug form (from the
file, or derived from the enabled engines where the file carries none), the concurrent output streams
per RAM, the bytes per pool, ST's estimate and npusim's cycles.
"""

from __future__ import annotations

import json
from collections import Counter

from ..errors import UsageError
from ..importers.stedgeai.model import StOutput
from ..importers.stedgeai.replay import Replay


def rows(out: StOutput, rep: Replay, cycles: dict | None = None) -> list[dict]:
    """One dict per epoch (software blocks: one per block), in program order."""
    traffic = {(t.block, t.epoch, t.sw): t for t in rep.epochs}
    cycles = cycles or {}
    out_rows = []
    for blk in out.blocks:
        entries = [(ep, False) for ep in blk.epochs]
        if blk.sw_ops:
            entries.append((None, True))
        if not entries:  # a hardware block whose program is not decoded
            entries.append((None, False))
        for n_entry, (ep, sw) in enumerate(entries):
            num = ep.number if ep is not None else (blk.epoch_num if blk.epoch_num is not None else blk.index)
            t = traffic.get((blk.index, num, sw))
            units = Counter(k for k, _ in ep.enabled if k != "STRENG") if ep is not None else Counter()
            if ep is not None and not ep.enabled:
                units = Counter(u.kind for u in ep.units)
            derived_in = t.in_mask if t else 0
            derived_out = t.out_mask if t else 0
            one_epoch = blk.epoch_num == blk.last_epoch_num or blk.last_epoch_num is None
            file_in = blk.in_streng_mask if one_epoch else None
            file_out = blk.out_streng_mask if one_epoch else None
            out_rows.append({
                "block": blk.index, "epoch": num, "kind": "sw" if sw else blk.kind, "blob": blk.blob,
                "units": dict(sorted(units.items())), "ca_split": units.get("CONVACC", 0),
                "in_mask": file_in if file_in else derived_in, "out_mask": file_out if file_out else derived_out,
                "mask_source": "file" if (file_in or file_out) else "derived",
                "sw_ops": [op.kind for op in blk.sw_ops] if sw else [],
                "outputs_per_ram": dict(t.outputs_per_pool) if t else {},
                "bytes": {p: t.read_bytes.get(p, 0) + t.write_bytes.get(p, 0)
                          for p in sorted(set(t.read_bytes) | set(t.write_bytes))} if t else {},
                # ST estimates a whole block: shown on its first row (`st_block`: for several epochs)
                "st_npu_cycles": blk.estimated_npu_cycles if n_entry == 0 else None,
                "st_total_cycles": blk.estimated_tot_cycles if n_entry == 0 else None,
                "st_block": n_entry == 0 and len(entries) > 1 and blk.estimated_npu_cycles is not None,
                "cycles": cycles.get((blk.index, num, sw)),
                "decoded": ep is not None or sw,
            })
    return out_rows


def info(out: StOutput, rep: Replay, cycles: dict | None = None) -> dict:
    """Everything `inspect` shows, as plain data (`--json`)."""
    return {
        "name": out.name, "toolchain": out.toolchain, "files": out.files,
        "pools": [{"name": p.name, "address": p.address, "size": p.size, "byte_width": p.byte_width,
                   "freq_ratio": p.freq_ratio, "read_only": p.read_only} for p in out.pools],
        "buffers": len(out.buffers), "all_buffers_info": out.all_buffers_info,
        "blocks": len(out.blocks), "hw_epochs": sum(len(b.epochs) for b in out.blocks),
        "user_io": {k: {"address": a, "size": n, "where": w} for k, (a, n, w) in rep.placements.items()},
        "undecided": rep.undecided, "io": io_buffers(out), "weight_images": sorted(out.weights),
        "weight_notes": list(out.weight_notes),
        "epochs": rows(out, rep, cycles),
    }


def io_buffers(out: StOutput) -> list[dict]:
    """The buffers the application fills and reads (`run --input NAME=...` names them), in table order."""
    return [{"name": b.name, "role": b.role, "type": b.numpy_type, "mem_shape": list(b.mem_shape or b.shape),
             "scale": b.scale[0] if len(b.scale) == 1 else None,
             "zero_point": b.zero_point[0] if len(b.zero_point) == 1 else None}
            for b in out.buffers if b.role in ("input", "output") and not b.is_param]


def _io_line(b: dict) -> str:
    q = f", scale {b['scale']:.6g} zero point {b['zero_point']}" if b["scale"] is not None else ""
    return f"{b['role']} {b['name']}: {b['type']} {b['mem_shape']}{q}"


def _mask(m: int | None) -> str:
    return "-" if m is None else f"0x{m:08x}"


def _units(u: dict) -> str:
    return " ".join(f"{k}x{n}" if n > 1 else k for k, n in u.items()) or "-"


def _bytes(b: dict) -> str:
    return " ".join(f"{p}:{n:,}" for p, n in b.items()) or "-"


def render_text(doc: dict, epoch: int | None = None, find_mask: str | None = None) -> str:
    rs = doc["epochs"]
    if find_mask is not None:
        want = parse_mask(find_mask)
        rs = [r for r in rs if (r["in_mask"], r["out_mask"]) == want]
        if not rs:
            return f"no epoch of {doc['name']} has stream-engine masks in={want[0]:#x} out={want[1]:#x}\n"
    if epoch is not None:
        rs = [r for r in rs if r["epoch"] == epoch]
        if not rs:
            raise UsageError(f"--epoch {epoch}: {doc['name']} has no such epoch")
    lines = []
    if epoch is None and find_mask is None:
        tc = doc["toolchain"]
        lines.append(f"ST Edge AI output '{doc['name']}': {doc['blocks']} epoch blocks, {doc['hw_epochs']} hardware "
                     f"epochs decoded, {doc['buffers']} buffers ({'all' if doc['all_buffers_info'] else 'I/O only'}); "
                     f"generated by {tc.get('atonn', '?')} for runtime {tc.get('runtime', '?')}")
        lines.append("pools: " + ", ".join(f"{p['name']} {p['address']:#x}+{p['size']:,}"
                                           f"{' ro' if p['read_only'] else ''}" for p in doc["pools"]))
        for k, v in doc["user_io"].items():
            lines.append(f"user I/O {k}: {v['size']:,} B placed at {v['address']:#x} in {v['where']} "
                         f"(--user-io POOL[=ADDRESS] to move it)")
        for u in doc["undecided"]:
            lines.append(f"not decoded: {u}")
        lines += [_io_line(b) for b in doc["io"]]
        lines.append("weight images: " + (", ".join(doc["weight_images"]) or
                                          "none (values need them: validate, run --outputs)")
                     + "".join(f"; not attached: {n}" for n in doc["weight_notes"]))
        lines.append("")
    head = f"{'block':>5} {'epoch':>5} {'kind':<6} {'in mask':>10} {'out mask':>10} {'CAs':>3} {'ST cycles':>10} " \
           f"{'npusim':>10}  units / operators; outputs per RAM; bytes per pool"
    lines.append(head)
    for r in rs:
        st = r["st_npu_cycles"]
        ours = r["cycles"]
        what = _units(r["units"]) if r["kind"] != "sw" or not r["sw_ops"] else "CPU " + ", ".join(r["sw_ops"])
        if not r["decoded"]:
            what = "(program not decoded)"
        outs = " ".join(f"{p}:{n}" for p, n in r["outputs_per_ram"].items()) or "-"
        mark = "" if r["mask_source"] == "file" else "*"
        st_text = (f"{st}+" if r.get("st_block") else str(st)) if st else "-"
        lines.append(f"{r['block']:>5} {r['epoch']:>5} {r['kind']:<6} {_mask(r['in_mask']) + mark:>10} "
                     f"{_mask(r['out_mask']) + mark:>10} {r['ca_split']:>3} {st_text:>10} "
                     f"{round(ours) if ours is not None else '-':>10}  {what}; {outs}; {_bytes(r['bytes'])}")
    if epoch is None and find_mask is None:
        lines.append("* masks derived from the enabled stream engines (the file carries none for this epoch)")
        if any(r.get("st_block") for r in rs):
            lines.append("+ ST's estimate of the whole epoch block, shown on its first epoch")
    return "\n".join(lines) + "\n"


def parse_mask(text: str) -> tuple[int, int]:
    """`IN/OUT` masks as a board trace prints them (hex or decimal)."""
    try:
        a, b = text.split("/", 1)
        return int(a, 0), int(b, 0)
    except ValueError:
        raise UsageError(f"--find-mask {text!r}: expected IN/OUT, e.g. 0x00000108/0x00000040") from None


def render_json(doc: dict) -> str:
    return json.dumps(doc, indent=2) + "\n"
