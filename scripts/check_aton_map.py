#!/usr/bin/env python3
"""Check npusim's ATON register map (isa/aton/*.toml) against a local copy of ST's ATON.h.

    python scripts/check_aton_map.py PATH/TO/ATON.h [--map DIR]

ATON.h is ST's public header of the STM32N6 NPU (ST's STM32N6 runtime,
Middlewares/AI_Runtime/Npu/Devices/STM32N6XX/ATON.h). npusim never ships or needs it;
this script only reads it to compare numbers: unit bases and instance counts, register
offsets, field positions, widths, reset values and access, clock-gate bits, interrupt
lines and value codes. Prints each difference; exit 0 if there is none, 1 otherwise.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

_UNIT = re.compile(r"^/\*\s+([A-Z_]+) Units\s+\*/$")
_REG = re.compile(r"^/\* \*+ ([A-Za-z0-9_]+) register of one of the ([A-Z_]+) Units \*+ \*/$")
_FIELD = re.compile(r"^/\* -+ ([A-Za-z0-9_]+) field of the ([A-Za-z0-9_]+) register -+ \*/$")
_SET = re.compile(r"^/\*\s+([A-Z_0-9]+) set of enumerated values\s+\*/$")
_DEFINE = re.compile(r"^#define (ATON_[A-Z0-9_]+(?:\([A-Z_, ]+\))?)\s*(.*)$")
_ACCESS = {"RW": "rw", "R": "ro", "W": "wo"}


def _int(text: str) -> int:
    return int(text.strip().strip("()").rstrip("UL"), 0)


def read_header(path: Path) -> dict:
    """The numbers of ATON.h: {"size", "kinds": {kind: {...}}, "values": {set: {name: code}}, clocks, irqs}."""
    text = path.read_text(encoding="utf-8", errors="replace")
    lines = text.split("\n")
    kinds: dict[str, dict] = {}
    values: dict[str, dict[str, int]] = {}
    kind = reg = fld = vset = None
    for i, ln in enumerate(lines):
        if m := _SET.match(ln):
            vset = m.group(1)
            values[vset] = {}
            continue
        if m := _UNIT.match(ln):
            kind, reg, fld, vset = m.group(1), None, None, None
            kinds[kind] = {"registers": {}}
            continue
        if m := _REG.match(ln):
            reg, fld = {"fields": {}}, None
            kinds[kind]["registers"][m.group(1)] = reg
            reg["name"] = m.group(1)
            continue
        if m := _FIELD.match(ln):
            fld = {}
            reg["fields"][m.group(1)] = fld
            fld["name"] = m.group(1)
            continue
        m = _DEFINE.match(ln)
        if not m:
            continue
        name, val = m.group(1), m.group(2).strip()
        if kind is None:
            if vset and name.startswith(f"ATON_{vset}_") and re.fullmatch(r"\(0x[0-9a-fA-F]+UL\)", val):
                values[vset][name[len(f"ATON_{vset}_"):]] = _int(val)
            continue
        u, pre = kinds[kind], f"ATON_{kind}_"
        if name == pre + "NUM":
            u["num"] = int(val)
        elif name == pre + "VERSION":
            u["version"] = val.strip('"')
        elif name == pre + "SIZE":
            u["size"] = _int(val)
        elif fld is not None and name.startswith(f"{pre}{reg['name']}_{fld['name']}_"):
            suf = name[len(f"{pre}{reg['name']}_{fld['name']}_"):]
            if suf == "LSB":
                fld["lsb"] = _int(val)
            elif suf == "LSB(IDX)":
                fld["lsb"] = int(re.match(r"\((\d+)UL", val).group(1))
            elif suf == "DISPL":
                fld["displ"] = int(val)
            elif suf == "W":
                fld["width"] = _int(val)
            elif suf == "DT":
                fld["reset"] = _int(val)
            elif suf == "DT(UNIT)":
                body = " ".join(lines[i + 1:i + 1 + u["num"]])
                fld["reset_by_instance"] = [int(x, 0) for x in re.findall(r"\? (0x[0-9a-fA-F]+)", body)]
                fld["reset"] = fld["reset_by_instance"][0]
            elif suf == "AC":
                fld["access"] = _ACCESS[val.strip('"')]
        elif reg is not None and fld is None and name == f"{pre}{reg['name']}_OFFSET":
            reg["offset"] = _int(val)
        elif reg is not None and name == f"{pre}{reg['name']}_DT(UNIT)":
            body = ""
            j = i + 1
            while lines[j].strip():
                body += lines[j]
                j += 1
            reg["repeat"] = len(re.findall(r"_LSB\((\d+)\)", body.split(":")[0]))
    for k, u in kinds.items():
        m = re.search(rf"#define ATON_{k}_BASE\(UNIT\) \\\n\s*\(ATON_BASE \+ (0x[0-9a-fA-F]+)UL"
                      r" \+ \(\(UNIT\) \* (0x[0-9a-fA-F]+)UL\)\)", text)
        u["base"], u["stride"] = int(m.group(1), 16), int(m.group(2), 16)
        m = re.search(rf"#define ATON_{k}_NAME\(UNIT\) \\\n((?:.*\n)+?)\n", text)
        u["names"] = re.findall(r'"([A-Z_0-9]+)"', m.group(1))
        for r in u["registers"].values():  # a field repeated per index (FIELDN) becomes FIELD0, FIELD1, ...
            for fname, f in list(r["fields"].items()):
                if "displ" in f:
                    del r["fields"][fname]
                    for n in range(r["repeat"]):
                        g = dict(f, name=fname[:-1] + str(n), lsb=f["lsb"] + n * f["displ"])
                        r["fields"][g["name"]] = g
    clocks = {m.group(1): (m.group(2), int(m.group(3)))
              for m in re.finditer(r"^#define ATON_([A-Z_]+?\d?)_CLK_CLK([AB])\s+(\d+)\s*$", text, re.M)}
    irqs: dict[str, dict[str, int]] = {}
    for m in re.finditer(r"^#define ATON_([A-Z_]+?\d?)(_ERR|_NOACK)?_INT\s+(\d+)\s*$", text, re.M):
        irqs.setdefault(m.group(1), {})[{None: "main", "_ERR": "err", "_NOACK": "noack"}[m.group(2)]] = int(m.group(3))
    size = re.search(r"^#define ATON_SIZE\s+(0x[0-9a-fA-F]+)UL", text, re.M)
    return {"size": int(size.group(1), 16) if size else None, "kinds": kinds, "values": values,
            "clocks": clocks, "irqs": irqs}


def compare(h: dict, amap) -> list[str]:
    """Every difference between the header's numbers and the map (empty: they agree)."""
    d: list[str] = []

    def ne(what, theirs, ours):
        if theirs != ours:
            d.append(f"{what}: ATON.h {theirs!r}, map {ours!r}")

    ne("NPU register space size", h["size"], amap.size)
    ne("unit kinds", sorted(h["kinds"]), sorted(amap.kinds))
    for kind in sorted(set(h["kinds"]) & set(amap.kinds)):
        hu, mu = h["kinds"][kind], amap.kinds[kind]
        ne(f"{kind} instances", hu["names"], [i.name for i in mu.instances])
        ne(f"{kind} unit numbers", [(hu["base"] + n * hu["stride"]) // amap.unit_size for n in range(hu["num"])],
           [i.unit for i in mu.instances])
        ne(f"{kind} version", hu["version"], mu.version)
        ne(f"{kind} unit size", hu["size"], mu.size)
        for inst in mu.instances:
            clk = h["clocks"].get(inst.name)
            ne(f"{inst.name} clock gate bit", clk[1] if clk else None, inst.clock_bit)
            if clk:
                ne(f"{inst.name} clock gate register", "AGATES0" if clk[0] == "A" else "BGATES",
                   (inst.clock_gate or ".").split(".")[0])
            ne(f"{inst.name} interrupt lines", h["irqs"].get(inst.name, {}), dict(inst.irq))
        ne(f"{kind} registers", sorted(hu["registers"]), sorted(mu.by_name))
        for rname in sorted(set(hu["registers"]) & set(mu.by_name)):
            hr, mr = hu["registers"][rname], mu.by_name[rname]
            ne(f"{kind}.{rname} offset", hex(hr.get("offset", -1)), hex(mr.offset))
            mf = {f.name: f for f in mr.fields}
            ne(f"{kind}.{rname} fields", sorted(hr["fields"]), sorted(mf))
            for fname in sorted(set(hr["fields"]) & set(mf)):
                hf, f = hr["fields"][fname], mf[fname]
                for key in ("lsb", "width", "reset", "access"):
                    ne(f"{kind}.{rname}.{fname} {key}", hf.get(key), getattr(f, key))
                rbi = hf.get("reset_by_instance")
                if rbi and len(set(rbi)) > 1:
                    ne(f"{kind}.{rname}.{fname} reset by instance", rbi, list(f.reset_by_instance or ()))
    for vname, vals in sorted(amap.values.items()):
        theirs = h["values"].get(vname)
        if theirs is None:
            d.append(f"value set {vname}: not in ATON.h")
            continue
        for name in sorted(set(theirs) | set(vals)):
            ne(f"value {vname}.{name}", theirs.get(name), vals.get(name))
    return d


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("header", type=Path, help="a local copy of ST's ATON.h")
    ap.add_argument("--map", help="folder of the map (default: the installed isa/aton)")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from npusim.program.aton import load_aton_map

    try:
        h = read_header(args.header)
    except OSError as e:
        print(f"cannot read {args.header}: {e}", file=sys.stderr)
        return 1
    amap = load_aton_map(args.map)
    diffs = compare(h, amap)
    for line in diffs:
        print(line)
    nreg = sum(len(k.registers) for k in amap.kinds.values())
    nfld = sum(len(r.fields) for k in amap.kinds.values() for r in k.registers)
    if diffs:
        print(f"{len(diffs)} difference(s) between {amap.source} and {args.header}", file=sys.stderr)
        return 1
    print(f"ATON map agrees with {args.header}: {len(amap.kinds)} unit kinds, "
          f"{sum(len(k.instances) for k in amap.kinds.values())} units, {nreg} registers, {nfld} fields, "
          f"{len(amap.values)} value sets")
    return 0


if __name__ == "__main__":
    sys.exit(main())
