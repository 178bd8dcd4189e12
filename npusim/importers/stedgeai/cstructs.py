"""The records of a generated C file (`network.c`, a blob trace file): pools, buffer tables, the
epoch-block table, and the explicit `LL_*_Init` structs of each hardware epoch, read by field name.

Toolchains name some fields differently across versions; `ALIASES` maps each spelling the corpus
shows to the name `model` uses. A struct field this module does not know is kept in `Streng.extra`
or `Unit.fields`, never dropped silently; a field whose value cannot be evaluated to a number where
one is needed is an `StImportError`.
"""

from __future__ import annotations

import re

from ...errors import StImportError
from . import csource
from .csource import Call, Ref, Sym
from .model import Buffer, EpochBlock, HwEpoch, Link, Pool, Streng, SwOperator, Unit
from .streng import hardware_limit

MAX_COUNT = 1 << 20  # bound on any count read from a file (epochs, rows, links)

# the struct type of each unit's init call, and the unit kind it configures
UNIT_INITS = {"LL_Convacc_Init": "CONVACC", "LL_Arithacc_Init": "ARITH", "LL_Poolacc_Init": "POOL",
              "LL_Activacc_Init": "ACTIV", "LL_Decun_Init": "DECUN", "LL_Recbuf_Init": "RECBUF"}
STRENG_INIT = "LL_Streng_TensorInit"

# field spellings of other toolchain versions -> the model's names
ALIASES = {"addr_start": "addr_base", "frame_loop_count": "frame_loop_cnt", "frame_total_count": "frame_tot_cnt"}
# the epoch-block table's struct type: its name up to ST Edge AI 3.0, and the runtime 1.1.3.262 one
EPOCH_BLOCK_TYPES = ("EpochBlock_ItemTypeDef", "LL_ATON_RT_EpochBlockItem_t")

_STRENG_INT_FIELDS = ("dir", "raw", "frame_count", "fwidth", "fheight", "batch_depth", "batch_offset",
                      "frame_offset", "line_offset", "loop_offset", "frame_loop_cnt", "frame_tot_cnt",
                      "nbits_in", "nbits_out")
_STRENG_FLAGS = ("continuous", "noinc", "noblk", "align_right", "nbits_unsigned", "cacheable", "cache_allocate")
_STRENG_ADDR = ("addr_base", "offset_start", "offset_end", "offset_limit")
# fields of the stream-engine struct read and kept (Streng.extra) but not modelled: bus attributes,
# synchronisation between engines, encryption, the forced raw output and the memory-LSB gap side
_STRENG_KEPT = ("raw_out", "mem_lsb", "sync_with_other", "sync_dma", "bus_cid", "bus_pfetch", "cache_linesize",
                "cipher_en", "key_sel")

_POOL_LINE = re.compile(r"index=(\d+)\s+file postfix=(\S+)\s+name=(\S+)\s+offset=(0x[0-9a-fA-F]+)\s+\S*\s*size=(\d+)(.*)")


def read_pools(comments) -> tuple[Pool, ...]:
    """The pools of the compile, from the pool comments (`index=.. name=.. offset=.. size=..`).
    A virtual pool (`vpool`) is an alias of physical ones and a pool of size 0 is unused: both are
    left out."""
    out, seen = [], set()
    for text, _line in comments:
        m = _POOL_LINE.search(text)
        if not m:
            continue
        index, postfix, name, offset, size, rest = m.groups()
        if " vpool " in f" {rest} " or int(size) == 0 or name in seen:
            continue
        seen.add(name)
        width = re.search(r"byte width=(\d+)", rest)
        ratio = re.search(r"freq ratio=([\d.]+)", rest)
        out.append(Pool(index=int(index), name=name, address=int(offset, 16), size=int(size),
                        byte_width=int(width.group(1)) if width else 8,
                        freq_ratio=float(ratio.group(1)) if ratio else 1.0,
                        read_only="READ_ONLY" in rest, file_postfix=postfix, cacheable="cacheable=ON" in rest))
    return tuple(out)


def _int(v, what: str) -> int:
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    raise StImportError(f"{what}: expected a number, found {_show(v)}")


def _show(v) -> str:
    if isinstance(v, Sym):
        return v.name
    if isinstance(v, Call):
        return f"{v.name}(...)"
    return repr(v)


def _address(v, what: str) -> tuple[int, str]:
    """(address or offset, relocation symbol) of an `addr_base`-like value."""
    while isinstance(v, tuple) and len(v) == 1:
        v = v[0]
    if isinstance(v, Ref):
        return v.offset, v.name
    if isinstance(v, Sym):  # a pointer variable the application sets (user I/O)
        return 0, v.name
    if isinstance(v, Call) and v.name == "+" and isinstance(v.args[0], (Ref, Sym)):
        return _address(v.args[0], what)[0] + _int(v.args[1], what), v.args[0].name
    return _int(v, what), ""


def _fields(d: dict, what: str) -> dict:
    if not isinstance(d, dict):
        raise StImportError(f"{what}: not a designated initializer")
    return {ALIASES.get(k, k): v for k, v in d.items()}


def streng_from_struct(engine: int, d: dict, name: str) -> Streng:
    """A `Streng` from an `LL_Streng_TensorInitTypeDef` initializer (absolute addresses; a user-I/O
    address keeps its symbol in `base_symbol` and the offset from it in `addr`)."""
    what = f"stream engine {engine} '{name}'"
    f = _fields(d, what)
    base, sym = _address(f.get("addr_base", 0), f"{what}.addr_base")
    start = _int(f.get("offset_start", 0), f"{what}.offset_start")
    ints = {k: _int(f.get(k, 0), f"{what}.{k}") for k in _STRENG_INT_FIELDS}
    if "frame_tot_cnt" not in f:
        ints["frame_tot_cnt"] = 1
    ints["nbits_in"] = ints["nbits_in"] or 8
    ints["nbits_out"] = ints["nbits_out"] or 8
    flags = {k: bool(_int(f.get(k, 0), f"{what}.{k}")) for k in _STRENG_FLAGS}
    end = f.get("offset_end")
    offset_end = None if end is None else base + _int(end, f"{what}.offset_end")
    lim = _int(f.get("offset_limit", 0), f"{what}.offset_limit")
    if ints["raw"] and not ints["frame_count"]:  # the runtime's rule: elements in [start, end)
        if offset_end is None:
            raise StImportError(f"{what}: a raw stream needs frame_count or offset_end")
        bits = ints["nbits_out"] if ints["dir"] else ints["nbits_in"]
        ints["frame_count"] = (offset_end - base - start) * 8 // bits
    known = set(_STRENG_INT_FIELDS) | set(_STRENG_FLAGS) | set(_STRENG_ADDR)
    unknown = sorted(k for k in f if k not in known and k not in _STRENG_KEPT)
    if unknown:
        raise StImportError(f"{what}: unknown field(s) {', '.join(unknown)} (not a stream-engine field npusim knows)")
    extra = tuple(sorted((k, _int(v, f"{what}.{k}")) for k, v in f.items() if k in _STRENG_KEPT))
    ints["raw"] = bool(ints["raw"])
    return Streng(engine=engine, addr=base + start, limit=hardware_limit(base + lim - 1) if lim else None,
                  offset_end=offset_end, base_symbol=sym, name=name, extra=extra, **ints, **flags)


def _flatten(v) -> object:
    """Unit struct values as numbers or tuples of numbers (addresses absolute); enum names as str."""
    if isinstance(v, Sym):
        return v.name
    if isinstance(v, Ref):
        return v.name if not v.offset else f"{v.name}+{v.offset}"
    if isinstance(v, tuple):
        return tuple(_flatten(x) for x in v)
    if isinstance(v, dict):
        return tuple((k, _flatten(x)) for k, x in v.items())
    if isinstance(v, Call):
        return f"{v.name}(...)"
    return v


def unit_from_struct(kind: str, index: int, d: dict, name: str) -> Unit:
    f = _fields(d, f"{kind} {index} '{name}'")
    return Unit(kind=kind, index=index, fields=tuple((k, _flatten(v)) for k, v in f.items()), name=name)


def _port(v, what: str) -> tuple[str, int, int]:
    """(unit kind, index, port) of an ATONN_SRCPORT/ATONN_DSTPORT(switch, n, KIND, index, port)."""
    if not (isinstance(v, Call) and len(v.args) == 5 and isinstance(v.args[2], Sym)):
        raise StImportError(f"{what}: a switch port must be ATONN_*PORT(switch, n, unit, index, port)")
    return v.args[2].name, _int(v.args[3], what), _int(v.args[4], what)


def links_from_table(rows, what: str) -> tuple[Link, ...]:
    """`Link`s of an `LL_Switch_InitTypeDef` array: each row names a destination port and, per
    context, a source port (`LL_Switch_Init_Source(c) = ...`)."""
    out = []
    for row in rows if isinstance(rows, tuple) else ():
        items = row if isinstance(row, tuple) else (row,)
        dst, sources, frames, contexts = None, {}, {}, {}
        for it in items:
            if not (isinstance(it, Call) and it.name == "=" and isinstance(it.args[0], Call)):
                continue
            key, val = it.args
            ctx = _int(key.args[0], what) if key.args else 0
            if key.name.endswith("_Dest"):
                dst = _port(val, what)
            elif key.name.endswith("_Source"):
                sources[ctx] = _port(val, what)
            elif key.name.endswith("_Frames"):
                frames[ctx] = _int(val, what)
            elif key.name.endswith("_Context"):
                contexts[ctx] = _int(val, what)
        if dst is None:
            raise StImportError(f"{what}: a switch row without a destination")
        for ctx, src in sorted(sources.items()):
            out.append(Link(dst[0], dst[1], dst[2], src[0], src[1], src[2], contexts.get(ctx, 1), frames.get(ctx, 0),
                            slot=ctx))
    return tuple(out)


def enabled_from_table(rows, what: str) -> tuple[tuple[str, int], ...]:
    out = []
    for row in rows if isinstance(rows, tuple) else ():
        v = row
        while isinstance(v, tuple) and len(v) == 1 and isinstance(v[0], tuple):
            v = v[0]
        if not (isinstance(v, tuple) and len(v) == 2 and isinstance(v[0], Sym)):
            raise StImportError(f"{what}: an enable row must be {{UNIT, index}}")
        out.append((v[0].name, _int(v[1], what)))
    return tuple(out)


def _buffer(row: dict, role: str, where: str) -> Buffer | None:
    f = _fields(row, where)
    name = f.get("name")
    if not name or name == 0:
        return None  # the table's terminator
    what = f"{where}: buffer '{name}'"
    base, sym = _address(f.get("addr_base", 0), f"{what}.addr_base")
    shape = f.get("shape", ())
    mem_shape = f.get("mem_shape", ())
    scale, zp = f.get("scale", ()), f.get("offset", ())
    epoch = f.get("epoch")
    dtype = f.get("type")
    return Buffer(
        name=str(name), addr_base=base, base_symbol=sym, role=role,
        offset_start=_int(f.get("offset_start", 0), f"{what}.offset_start"),
        offset_end=_int(f.get("offset_end", 0), f"{what}.offset_end"),
        offset_limit=_int(f.get("offset_limit", f.get("offset_end", 0)), f"{what}.offset_limit"),
        is_param=bool(_int(f.get("is_param", 0), f"{what}.is_param")),
        is_user_allocated=bool(_int(f.get("is_user_allocated", 0), f"{what}.is_user_allocated")),
        epoch=None if epoch is None else _int(epoch, f"{what}.epoch"),
        nbits=_int(f.get("nbits", 8), f"{what}.nbits"),
        dtype=dtype.name.replace("DataType_", "") if isinstance(dtype, Sym) else "",
        shape=tuple(x for x in shape if isinstance(x, int)) if isinstance(shape, tuple) else (),
        mem_shape=tuple(x for x in mem_shape if isinstance(x, int)) if isinstance(mem_shape, tuple) else (),
        chpos=f["chpos"].name if isinstance(f.get("chpos"), Sym) else "",
        batch=f["batch"] if isinstance(f.get("batch"), int) else 0,
        scale=tuple(float(x) for x in scale if isinstance(x, (int, float))) if isinstance(scale, tuple) else (),
        zero_point=tuple(int(x) for x in zp if isinstance(x, int)) if isinstance(zp, tuple) else ())


_TABLE_ROLE = re.compile(r"LL_ATON_(Input|Output|Internal)_Buffers_Info_\w+")


def read_buffers(decls) -> tuple[Buffer, ...]:
    """The rows of the input, output and internal buffer tables (in that order, file order within)."""
    out, seen = [], set()
    for d in decls:
        m = _TABLE_ROLE.fullmatch(d.function)
        if d.type != "LL_Buffer_InfoTypeDef" or not m or not isinstance(d.value, tuple):
            continue
        if len(d.value) > MAX_COUNT:
            raise StImportError(f"{d.function}: {len(d.value)} rows, more than {MAX_COUNT}")
        role = m.group(1).lower()
        for row in d.value:
            b = _buffer(row, role, f"{d.function}")
            if b is not None and (b.name, role) not in seen:
                seen.add((b.name, role))
                out.append(b)
    return tuple(out)


def _flag_names(v) -> frozenset[str]:
    items = v if isinstance(v, frozenset) else frozenset([v])
    out = set()
    for it in items:
        if isinstance(it, Sym):
            out.add(it.name.replace("EpochBlock_Flags_", ""))
        elif isinstance(it, int) and it:
            out.add(f"bits_{it:#x}")
    return frozenset(out)


def _name_of(v) -> str:
    if isinstance(v, Sym):
        return v.name
    if isinstance(v, Ref):
        return v.name
    if isinstance(v, Call) and v.args:
        return _name_of(v.args[-1])
    return ""


def read_epoch_blocks(decls) -> tuple[EpochBlock, ...]:
    """The epoch-block table (an `EPOCH_BLOCK_TYPES` array), without its terminator (`last_eb`)."""
    tables = [d for d in decls if d.type in EPOCH_BLOCK_TYPES and isinstance(d.value, tuple)]
    if not tables:
        return ()
    rows = tables[0].value
    if len(rows) > MAX_COUNT:
        raise StImportError(f"epoch-block table: {len(rows)} rows, more than {MAX_COUNT}")
    out = []
    for i, row in enumerate(rows):
        f = _fields(row, f"epoch block {i}")
        flags = _flag_names(f.get("flags", 0))
        if "last_eb" in flags and "epoch_start" not in flags:
            break

        def num(key):
            v = f.get(key)
            return None if v is None else _int(v, f"epoch block {i}.{key}")

        est_npu, est_tot = num("estimated_npu_cycles"), num("estimated_tot_cycles")
        out.append(EpochBlock(
            index=i, flags=flags, epoch_num=num("epoch_num"), last_epoch_num=num("last_epoch_num"),
            in_streng_mask=num("in_streng_mask"), out_streng_mask=num("out_streng_mask"),
            wait_mask=num("wait_mask") or 0, estimated_npu_cycles=est_npu or None,
            estimated_tot_cycles=est_tot or None, start_function=_name_of(f.get("start_epoch_block")),
            end_function=_name_of(f.get("end_epoch_block")), blob=_name_of(f.get("blob_address"))))
    return tuple(out)


class _EpochBuilder:
    def __init__(self, number: int):
        self.number = number
        self.strengs: dict[int, Streng] = {}
        self.units: dict[tuple[str, int], Unit] = {}
        self.links: list[Link] = []
        self.enabled: list[tuple[str, int]] = []

    def build(self) -> HwEpoch:
        return HwEpoch(self.number, tuple(self.strengs[k] for k in sorted(self.strengs)),
                       tuple(self.units[k] for k in sorted(self.units)), tuple(self.links), tuple(self.enabled))


_BLOCK_FN = re.compile(r"LL_ATON_(Start|End)_EpochBlock_(\d+)")


def _arg_value(node, by_name: dict):
    v = csource.evaluate(node, {})
    if isinstance(v, Ref):
        return by_name.get(v.name)
    if isinstance(v, Sym):
        return by_name.get(v.name)
    return v


def read_hw_epochs(tree, decls) -> dict[object, list[HwEpoch]]:
    """Hardware epochs from explicit init calls, keyed by where they belong: an epoch-block start
    function's name (`network.c` without the epoch controller) or a blob's name (a trace file's
    `ec_trace_start_blob("...")`). Epoch numbers: a trace's `ec_trace_start_epoch(n)`, else the
    block function's number."""
    by_fn: dict[str, dict] = {}
    for d in decls:
        by_fn.setdefault(d.function, {})[d.name] = d.value
    out: dict[object, list[HwEpoch]] = {}
    current: _EpochBuilder | None = None
    key = None
    count = 0

    def close():
        nonlocal current
        if current is not None and key is not None:
            out.setdefault(key, []).append(current.build())
        current = None

    last_fn = None
    for fn, callee, args, line in csource.calls(tree):
        if fn != last_fn:
            close()
            last_fn = fn
            m = _BLOCK_FN.fullmatch(fn)
            key = fn if m and m.group(1) == "Start" else None
            if key is not None:
                current = _EpochBuilder(int(m.group(2)))
        names = by_fn.get(fn, {})
        where = f"{fn}:{line}"
        if callee == "ec_trace_start_blob":
            close()
            key = csource.evaluate(args[0]) if args else ""
        elif callee == "ec_trace_start_epoch":
            close()
            current = _EpochBuilder(_int(csource.evaluate(args[0]), where))
            count += 1
            if count > MAX_COUNT:
                raise StImportError(f"{where}: more than {MAX_COUNT} epochs")
        elif callee == "ec_trace_end_epoch":
            close()
        elif current is None:
            continue
        elif callee == STRENG_INIT or callee in UNIT_INITS:
            if len(args) < 2:
                raise StImportError(f"{where}: {callee} needs (id, &config)")
            idx = _int(csource.evaluate(args[0]), f"{where}: {callee} id")
            value = _arg_value(args[1], names)
            name = _name_of(csource.evaluate(args[1]))
            if not isinstance(value, dict):
                raise StImportError(f"{where}: {callee}'s configuration '{name}' is not declared before it")
            if callee == STRENG_INIT:
                current.strengs[idx] = streng_from_struct(idx, value, name)
            else:
                current.units[(UNIT_INITS[callee], idx)] = unit_from_struct(UNIT_INITS[callee], idx, value, name)
        elif callee == "LL_Switch_Init":
            current.links.extend(links_from_table(_arg_value(args[0], names), where))
        elif callee == "LL_ATON_EnableUnits_Init":
            current.enabled.extend(enabled_from_table(_arg_value(args[0], names), where))
        elif re.fullmatch(r"LL_\w+_Init", callee) and callee not in ("LL_ATON_DisableUnits_Init",):
            raise StImportError(f"{where}: {callee} configures a unit npusim does not model")
    close()
    return out


def _array_name(node) -> str:
    """The array an argument names: `x`, `&x[0]`, `x[0]`, `(T *)x`."""
    while node is not None and node.type in ("pointer_expression", "subscript_expression", "cast_expression",
                                             "parenthesized_expression"):
        node = (node.child_by_field_name("argument") if node.type in ("pointer_expression", "subscript_expression")
                else node.child_by_field_name("value") if node.type == "cast_expression"
                else next((c for c in node.named_children if c.type != "comment"), None))
    return csource.text_of(node) if node is not None and node.type == "identifier" else ""


def _sw_tensor_bytes(info: dict, tensor: str) -> int:
    """Bytes a `*_sw_info` tensor spans (`<tensor>.stride.b` x `.dim.tensor_b`); 0 when not given."""
    stride, batch = info.get(f"{tensor}.stride.b"), info.get(f"{tensor}.dim.tensor_b")
    if isinstance(stride, int) and isinstance(batch, int) and stride > 0 and batch > 0:
        return stride * batch
    return 0


def read_sw_operators(tree, decls) -> dict[str, list[SwOperator]]:
    """Software operators per epoch-block function: the runtime-library calls (`LL_ATON_LIB_*`,
    `ll_sw_forward_*`) with their tensors. A tensor argument is an `LL_Buffer_InfoTypeDef` array (rows
    named as in the buffer tables), an `LL_LIB_TensorShape_TypeDef` array (addresses) or a `*_sw_info`
    struct (`<tensor>.mem.start_offset` fields; `general.output*` tensors are outputs)."""
    by_fn: dict[str, dict] = {}
    types: dict[tuple[str, str], str] = {}
    for d in decls:
        by_fn.setdefault(d.function, {})[d.name] = d.value
        types[(d.function, d.name)] = d.type
    out: dict[str, list[SwOperator]] = {}
    for fn, callee, args, line in csource.calls(tree):
        if not (callee.startswith("LL_ATON_LIB_") or callee.startswith("ll_sw_forward_")) or callee == "LL_ATON_LIB_UNUSED":
            continue
        where = f"{fn}:{line}"
        ins, outs, unsure, params, numbers, tensors, arrays = [], [], [], [], [], [], []
        for a in args:
            nm = _array_name(a)
            val, t = by_fn.get(fn, {}).get(nm), types.get((fn, nm), "")
            if isinstance(val, tuple) and len(val) == 1 and isinstance(val[0], tuple):
                val = val[0]  # `table[0]` of a table of arrays
            if isinstance(val, tuple) and val and all(isinstance(x, int) for x in val):
                arrays.append(val)  # an integer array argument (axes offsets, permutations, ...)
            if not nm:
                try:
                    v = csource.evaluate(a)
                except StImportError:
                    v = None
                numbers.append(v if isinstance(v, int) else None)
            if t in ("LL_Buffer_InfoTypeDef", "LL_LIB_TensorShape_TypeDef") and isinstance(val, tuple):
                for row in val:
                    if not isinstance(row, dict) or "addr_base" not in row:
                        continue
                    base, _ = _address(row["addr_base"], f"{where}: {nm}.addr_base")
                    start = base + _int(row.get("offset_start", 0), f"{where}: {nm}.offset_start")
                    end = base + _int(row.get("offset_end", 0), f"{where}: {nm}.offset_end")
                    name = row.get("name")
                    unsure.append(str(name) if isinstance(name, str) and name else
                                  f"@{start:#x}+{max(end - start, 0)}")
                    tensors.append(_buffer(row if row.get("name") else dict(row, name=f"@{start:#x}"), "internal",
                                           f"{where}: {nm}"))
            elif t.endswith("_sw_info") and isinstance(val, dict):
                params += [(k, v.name if isinstance(v, Sym) else v) for k, v in val.items()
                           if (isinstance(v, (int, float, str, Sym)) or isinstance(v, tuple)
                               and all(isinstance(x, (int, float)) for x in v))
                           and not k.endswith("mem.start_offset")]
                for k, addr in val.items():
                    if not k.endswith("mem.start_offset"):
                        continue
                    a0, _ = _address(addr, f"{where}: {k}")
                    params.append((k, a0))
                    size = _sw_tensor_bytes(val, k[: -len(".mem.start_offset")])
                    (outs if "output" in k.split(".mem")[0] else ins).append(f"@{a0:#x}" + (f"+{size}" if size else ""))
        if tensors:  # the LL_Buffer_InfoTypeDef / LL_LIB_TensorShape_TypeDef rows, in argument order
            params.append(("tensors", tuple(tensors)))
        if arrays:
            params.append(("arrays", tuple(arrays)))  # the integer array arguments, in order
        if any(n is not None for n in numbers):
            params.append(("args", tuple(numbers)))  # the call's plain-number arguments, in order
        kind = callee.replace("LL_ATON_LIB_", "").replace("ll_sw_forward_", "")
        out.setdefault(fn, []).append(SwOperator(kind=kind, inputs=tuple(ins), outputs=tuple(outs), name=callee,
                                                 operands=tuple(unsure), params=tuple(params)))
    return out
