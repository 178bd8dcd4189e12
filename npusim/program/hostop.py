"""Host operator records: what a HOST command (a software epoch) runs.

A record is a constant of the program, read by the host through the access checks:

    magic b"HOP1" | opset u16 | reason length u16 | node length u32 | implicit count u16 | 0 u16
    | reason (UTF-8) | implicit names (u16 length + UTF-8 each) | node

`node` is a serialized ONNX NodeProto of the default domain whose inputs are named "i0", "i1", ...
and outputs "o0", "o1", ... in operand order ("" for an absent optional operand); `opset` is the
default-domain opset the operator is defined by (its semantics change between opsets); `reason`
says why the compiler put it on the CPU (the mapping table's message), for `inspect` and reports.
`implicit` names the outer-scope tensors the node's subgraphs (If/Loop/Scan bodies) read: they are
the input operands after the node's own, in that order, under those names.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from ..errors import BlobError

MAGIC = b"HOP1"
_HEAD = struct.Struct("<4sHHIHH")
MAX_RECORD = 1 << 24  # the HOST node_bytes field holds 24 bits


@dataclass(frozen=True)
class HostRecord:
    op_type: str
    opset: int
    reason: str
    node: bytes  # serialized onnx.NodeProto (operands named i<k> / o<k>)
    implicit: tuple = ()  # outer-scope tensors its subgraphs read (input operands after the node's own)

    def node_proto(self):
        """The onnx.NodeProto (BlobError if the bytes are not one)."""
        import onnx
        from google.protobuf.message import DecodeError

        n = onnx.NodeProto()
        try:
            n.ParseFromString(self.node)
        except (DecodeError, ValueError) as e:
            raise BlobError(f"host operator record: node is not an ONNX NodeProto ({type(e).__name__})") from None
        return n


def operand_names(n_in_slots: list[bool], n_out_slots: list[bool]) -> tuple[list[str], list[str]]:
    """Placeholder operand names: i<k>/o<k> for a present operand (k counts present ones), "" for absent."""
    ins, outs, k = [], [], 0
    for present in n_in_slots:
        ins.append(f"i{k}" if present else "")
        k += present
    k = 0
    for present in n_out_slots:
        outs.append(f"o{k}" if present else "")
        k += present
    return ins, outs


def encode_record(node_proto, opset: int, reason: str, implicit=()) -> bytes:
    """Record bytes of an ONNX node (already renamed to operand placeholders)."""
    node = node_proto.SerializeToString()
    why = reason.encode("utf-8")[:0xFFFF]
    names = b"".join(struct.pack("<H", len(b)) + b for b in (n.encode("utf-8")[:0xFFFF] for n in implicit))
    data = _HEAD.pack(MAGIC, int(opset), len(why), len(node), len(implicit), 0) + why + names + node
    if len(data) > MAX_RECORD - 1:
        raise BlobError(f"host operator {node_proto.op_type}: record of {len(data)} B exceeds {MAX_RECORD - 1} B")
    return data


def decode_record(data: bytes) -> HostRecord:
    """HostRecord from record bytes; BlobError naming what is malformed."""
    data = bytes(data)
    if len(data) < _HEAD.size:
        raise BlobError(f"host operator record: {len(data)} B is shorter than its {_HEAD.size} B header")
    magic, opset, nwhy, nnode, nimp, _ = _HEAD.unpack_from(data)
    if magic != MAGIC:
        raise BlobError(f"host operator record: bad magic {magic!r} (expected {MAGIC!r})")
    at = _HEAD.size + nwhy
    try:
        reason = data[_HEAD.size:at].decode("utf-8")
        names = []
        for _ in range(nimp):
            if at + 2 > len(data):
                raise BlobError("host operator record: implicit names run past its end")
            (n,) = struct.unpack_from("<H", data, at)
            names.append(data[at + 2:at + 2 + n].decode("utf-8"))
            at += 2 + n
    except UnicodeDecodeError:
        raise BlobError("host operator record: a name or the reason is not UTF-8") from None
    if at + nnode != len(data):
        raise BlobError(f"host operator record: header says {at + nnode} B, the record has {len(data)} B")
    rec = HostRecord("", opset, reason, data[at:])
    proto = rec.node_proto()
    if proto.domain not in ("", "ai.onnx"):
        raise BlobError(f"host operator record: domain {proto.domain!r} is not the default ONNX domain")
    return HostRecord(proto.op_type, opset, reason, rec.node, tuple(names))


def host_records(program, profile) -> list[tuple[int, HostRecord | None]]:
    """(command index, record or None if unreadable) of every HOST command of `program`: the record
    is looked up in the program's constants by the command's `node` address."""
    spans = []
    for c in program.constants:
        try:
            base = profile.pool_named(c.pool).base + c.offset
        except Exception:  # a constant in a pool the profile lacks: validate_program reports it
            continue
        spans.append((base, c.data))
    out = []
    for i, cmd in enumerate(program.commands):
        if cmd.op != "HOST":
            continue
        at, n = int(cmd.args.get("node", 0)), int(cmd.args.get("node_bytes", 0))
        rec = None
        for base, data in spans:
            if base <= at and at + n <= base + len(data):
                try:
                    rec = decode_record(data[at - base:at - base + n])
                except BlobError:
                    rec = None
                break
        out.append((i, rec))
    return out
