"""Read an ST Edge AI Core output folder (or its `network.c` with companions beside it) into an
`StOutput`. Files are recognised by their content, not their names:

- the network's C file: the one defining the epoch-block table (`cstructs.EPOCH_BLOCK_TYPES`);
- a blob trace file: C with `ec_trace_start_blob` calls (the explicit structs of each blob);
- the epoch-controller programs: a header with `_ec_blob_` uint64 arrays;
- weight images: binary files (or Intel HEX, or C files defining integer arrays) whose size fits a
  pool's parameter region;
- `c_info.json` / `.mpool`: JSON with ST's graph description / memory pools (read for versions).
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

from ...errors import StImportError
from . import cstructs, csource
from .model import StOutput
from .ec_lift import lift_epochs
from .ec_registers import rule_violations
from .ecblob import blob_key, read_ecblobs
from .weights import attach_weights

MAX_FILE_BYTES = 512 << 20
MAX_FILES = 2000
_TEXT_PROBE = 4096
# an integer array defined with an initializer (the C-array form of a weight image; read by `weights`)
_C_ARRAY = re.compile(r"\b(u?int(8|16|32|64)_t|unsigned\s+char|char)\s+\w+\s*\[[^\]]*\]\s*=\s*\{")


def _classify(path: Path) -> str | None:
    """The role of a file from its first bytes (and, for C, its definitions)."""
    try:
        with open(path, "rb") as f:
            head = f.read(_TEXT_PROBE)
    except OSError:
        return None
    if not head:
        return None
    if head.lstrip().startswith(b":") and re.fullmatch(rb"(:[0-9A-Fa-f]+\r?\n?)+", head.lstrip()[:256].rsplit(b"\n", 1)[0] + b"\n"):
        return "weights-hex"
    try:
        s = head.decode("utf-8")
        text_like = "\0" not in s
    except UnicodeDecodeError as e:
        s = head[:e.start].decode("utf-8")
        text_like = e.start >= len(head) - 3 and "\0" not in s  # a character cut by the probe
    if not text_like:
        return None if head[4:8] == b"TFL3" else "weights-raw"
    if s.lstrip().startswith("{"):
        if '"mempools"' in s or '"memory"' in s:
            return "mpool"
        if '"json_schema_version"' in s or '"environment"' in s:
            return "c_info"
        return None
    if path.stat().st_size > MAX_FILE_BYTES:
        return None
    body = path.read_text(errors="replace")
    if "LL_ATON_EpochBlockItems_" in body and any(t in body for t in cstructs.EPOCH_BLOCK_TYPES):
        return "network"
    if "ec_trace_start_blob" in body:
        return "trace"
    if re.search(r"uint64_t\s+_ec_blob_\w*\s*\[", body):
        return "ecblobs"
    if _C_ARRAY.search(body):
        return "weights-c"
    return None


def find_files(path: str | Path) -> dict[str, list[Path]]:
    """{role: [paths]} of an output folder, or of the folder around a given `network.c`."""
    p = Path(path)
    if not p.exists():
        raise StImportError(f"{p}: no such file or folder")
    folder = p if p.is_dir() else p.parent
    entries = sorted(q for q in folder.iterdir() if q.is_file())
    if len(entries) > MAX_FILES:
        raise StImportError(f"{folder}: {len(entries)} files, more than an ST output holds ({MAX_FILES})")
    roles: dict[str, list[Path]] = {}
    for q in entries:
        role = "network" if (p.is_file() and q == p) else _classify(q)
        if role == "network" and p.is_file() and q != p:
            continue  # the user named the network file: other networks of the folder are not it
        if role:
            roles.setdefault(role, []).append(q)
    if p.is_file() and "network" not in roles:
        roles["network"] = [p]
    nets = roles.get("network", [])
    if not nets:
        raise StImportError(f"{p}: no ST Edge AI network file (a C file with the epoch-block table) found")
    if len(nets) > 1:
        raise StImportError(f"{folder}: {len(nets)} network files ({', '.join(n.name for n in nets)}); "
                            f"name the one to import")
    return roles


def _toolchain(comments, text: str) -> dict:
    info = {}
    for c, _ in comments[:40]:
        m = re.search(r'GIT_DESCRIPTION\s+"([^"]+)"', c)
        if m:
            info["atonn"] = m.group(1)
        m = re.search(r'GIT_BRANCH\s+"([^"]+)"', c)
        if m:
            info["branch"] = m.group(1)
    # the runtime version the generated code was made for (its version-check directive)
    m = re.search(r"LL_ATON_VERSION_MAJOR != (\d+) \|\| LL_ATON_VERSION_MINOR != (\d+) \|\| "
                  r"LL_ATON_VERSION_MICRO != (\d+)(?: \|\| LL_ATON_VERSION_DEV != (\d+))?", text)
    if m:
        info["runtime"] = ".".join(g for g in m.groups() if g is not None)
    return info


def read(path: str | Path) -> StOutput:
    """The whole output: pools, buffers, epoch blocks with their hardware epochs (explicit structs in
    the network file, or a blob trace file) and software operators; weights are attached by
    `weights.attach`, epoch-controller programs decoded where that reader is available."""
    roles = find_files(path)
    net = roles["network"][0]
    text = net.read_text(errors="replace")
    tree = csource.parse(text, str(net))
    decls = csource.declarations(tree)
    comments = csource.comments(tree)
    pools = cstructs.read_pools(comments)
    if not pools:
        raise StImportError(f"{net}: no memory pool description (the pool comments are missing)")
    buffers = cstructs.read_buffers(decls)
    blocks = cstructs.read_epoch_blocks(decls)
    if not blocks:
        raise StImportError(f"{net}: the epoch-block table is empty")
    epochs = cstructs.read_hw_epochs(tree, decls)
    sw = cstructs.read_sw_operators(tree, decls)
    for role in ("ecblobs", "trace"):  # several networks in one folder: the network's own companion
        roles[role] = _own_first(roles.get(role, []), net, text)
    files = {"network": str(net)}
    for role in ("trace", "ecblobs", "c_info", "mpool"):
        if roles.get(role):
            files[role] = str(roles[role][0])
    if roles.get("ecblobs"):  # the programs the board runs: lifted from their register writes
        epochs.update(_lift_blobs(roles["ecblobs"][0]))
    elif roles.get("trace"):  # else the explicit structs ST traced for each blob
        tpath = roles["trace"][0]
        ttree = csource.parse(tpath.read_text(errors="replace"), str(tpath))
        epochs.update(cstructs.read_hw_epochs(ttree, csource.declarations(ttree)))
    blocks = _attach(blocks, epochs, sw)
    lacking = [b.blob for b in blocks if "blob" in b.flags and b.blob and not b.epochs]
    if lacking:
        where = "its *_ecblobs.h" if not roles.get("ecblobs") else str(roles["ecblobs"][0])
        raise StImportError(f"{net}: epoch blocks run epoch-controller programs ({', '.join(lacking[:3])}"
                            f"{', ...' if len(lacking) > 3 else ''}) that {where} does not hold"
                            f"{' (missing companion file)' if not roles.get('ecblobs') else ''}")
    instance = next((m.group(1) for d in decls for m in [re.fullmatch(r"LL_ATON_EpochBlockItems_(\w+)", d.function)]
                     if m), "")
    out = StOutput(name=net.stem, pools=pools, buffers=buffers, blocks=blocks,
                   toolchain={**_toolchain(comments, text), "instance": instance}, files=files,
                   all_buffers_info=any(b.role == "internal" for b in buffers))
    return attach_weights(out, roles.get("weights-raw", []) + roles.get("weights-hex", [])
                          + roles.get("weights-c", []))


def _own_first(paths: list[Path], net: Path, text: str) -> list[Path]:
    """Companion files with the network's own first: the one its text `#include`s, else the one named
    after it (`<network>_ecblobs.h` beside `<network>.c`)."""
    included = set(re.findall(r'#\s*include\s+"([^"]+)"', text))
    return sorted(paths, key=lambda q: (q.name not in included, not q.name.startswith(net.stem + "_")))


def _lift_blobs(path: Path) -> dict:
    """{blob name: [HwEpoch]} of every epoch-controller program of a `*_ecblobs.h`, each epoch with
    the count of instructions that program it (the epoch controller's own time)."""
    out = {}
    for name, program in read_ecblobs(path).items():
        counts = {e.number: program.epoch_instructions(e) for e in program.epochs}
        refused = rule_violations(program)
        out[name] = [replace(e, ec_instructions=len(counts[e.number]) if e.number in counts else None,
                             ec_words=sum(i.words for i in counts[e.number]) if e.number in counts else None,
                             ec_polls=sum(i.op == "poll" for i in counts.get(e.number, ())),
                             refused=tuple(refused.get(e.number, ())))
                     for e in lift_epochs(program)]
    return out


def _attach(blocks, epochs: dict, sw: dict):
    out = []
    for b in blocks:
        eps = epochs.get(b.start_function) or epochs.get(blob_key(b.blob)) or epochs.get(b.blob) or []
        ops = tuple(sw.get(b.start_function, [])) + tuple(sw.get(b.end_function, []))
        out.append(replace(b, epochs=tuple(eps), sw_ops=ops))
    return tuple(out)
