"""Generated C read with tree-sitter's C grammar: the directives resolved first (`cdirectives.preprocess`),
then values of initializers evaluated from the syntax tree (never from the text).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from ...errors import StImportError
from .cdirectives import preprocess

MAX_SOURCE_BYTES = 256 << 20  # a generated file larger than this is refused before parsing


@dataclass(frozen=True)
class Sym:
    """An identifier the file does not define a value for (an enum constant, a function, a pool
    symbol); kept by name."""

    name: str


@dataclass(frozen=True)
class Call:
    """A call the evaluator does not fold (`LL_Switch_Init_Dest()`, `ATONN_DSTPORT(...)`)."""

    name: str
    args: tuple


@dataclass(frozen=True)
class Ref:
    """`&symbol` plus a byte offset: an address the linker places (user I/O buffers)."""

    name: str
    offset: int = 0


@functools.lru_cache(maxsize=1)
def _language():
    import tree_sitter_c
    from tree_sitter import Language
    return Language(tree_sitter_c.language())


@functools.lru_cache(maxsize=1)
def parser():
    """tree-sitter's C parser (one per process)."""
    from tree_sitter import Parser
    return Parser(_language())


_BLOCKS = ("compound_statement", "if_statement", "else_clause", "for_statement", "while_statement",
           "do_statement", "labeled_statement", "case_statement", "switch_statement")


def statements(tree):
    """(enclosing function, node) of every declaration and statement in file order: file-scope ones
    and those of function bodies and their blocks. Expressions are not entered (a walk over statements
    only: generated files hold millions of expression nodes)."""
    out = []
    stack = [(c, "") for c in reversed(tree.root_node.named_children)]
    while stack:
        node, fn = stack.pop()
        t = node.type
        if t == "function_definition":
            d = node.child_by_field_name("declarator")
            while d is not None and d.type != "identifier":
                d = d.child_by_field_name("declarator")
            name = text_of(d) if d is not None else ""
            body = node.child_by_field_name("body")
            if body is not None:
                stack.extend((c, name) for c in reversed(body.named_children))
        elif t in _BLOCKS:
            stack.extend((c, fn) for c in reversed(node.named_children))
        elif t in ("linkage_specification", "declaration_list"):
            stack.extend((c, fn) for c in reversed(node.named_children))
        else:
            out.append((fn, node))
    return out


def parse(text: str, where: str):
    """The tree-sitter tree of a generated C file (preprocessed). Refuses a file with syntax errors,
    naming the first one's line."""
    if len(text) > MAX_SOURCE_BYTES:
        raise StImportError(f"{where}: {len(text)} bytes, more than a generated file can be ({MAX_SOURCE_BYTES})")
    src = preprocess(text, where).encode()
    tree = parser().parse(src)
    if tree.root_node.has_error:
        bad = _first_error(tree.root_node)
        line = bad.start_point[0] + 1 if bad is not None else "?"
        raise StImportError(f"{where}:{line}: not valid C (a truncated or edited file?)")
    return tree


def _first_error(node):
    stack = [node]
    while stack:
        n = stack.pop()
        if n.is_error or n.is_missing:
            return n
        if n.has_error:
            stack.extend(reversed(n.children))
    return None


def text_of(node) -> str:
    return node.text.decode()


def _int_literal(s: str):
    """A C number literal's value; tree-sitter keeps a leading sign in the literal ("-2": an int)."""
    t = s.rstrip("uUlL")
    sign, body = (-1, t[1:]) if t[:1] == "-" else (1, t[1:] if t[:1] == "+" else t)
    try:
        if body[:2] in ("0x", "0X"):
            return sign * int(body, 16)
        if body.isdigit():
            return sign * (int(body, 8) if len(body) > 1 and body[0] == "0" else int(body))
        return float(t.rstrip("fF"))
    except ValueError:
        raise StImportError(f"not a C number: {s!r}") from None


def _binop(op: str, a, b):
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        if op == "/" and isinstance(a, int) and isinstance(b, int):
            return a // b if b else 0
        return {"+": lambda: a + b, "-": lambda: a - b, "*": lambda: a * b, "/": lambda: a / b if b else 0,
                "|": lambda: a | b, "&": lambda: a & b, "<<": lambda: a << b, ">>": lambda: a >> b,
                "%": lambda: a % b if b else 0}[op]()
    if op == "|":  # flag sets: A | B | C
        sa = a if isinstance(a, frozenset) else frozenset([a])
        sb = b if isinstance(b, frozenset) else frozenset([b])
        return sa | sb
    if op in ("+", "-") and isinstance(a, Ref) and isinstance(b, int):
        return Ref(a.name, a.offset + (b if op == "+" else -b))
    return Call(op, (a, b))


# calls that only convert an address between the CPU's and the NPU's view (identity on the N6)
ADDRESS_CASTS = frozenset({"ATON_LIB_PHYSICAL_TO_VIRTUAL_ADDR", "__LL_ATON_LIB_PHYSICAL_TO_VIRTUAL_ADDR",
                           "ATON_LIB_VIRTUAL_TO_PHYSICAL_ADDR", "__LL_ATON_LIB_VIRTUAL_TO_PHYSICAL_ADDR"})


def evaluate(node, arrays: dict | None = None):
    """The value of an initializer expression: int/float/str, a tuple (array initializer), a dict
    (designated initializers, nested `.a.b = v` keys joined with dots), `Sym`, `Ref`, `Call`, or a
    frozenset of flags (`A | B`). `arrays` maps identifiers to values already read (the static
    arrays a table points to)."""
    arrays = arrays or {}
    t = node.type
    if t == "number_literal":
        return _int_literal(text_of(node))
    if t == "string_literal":
        return "".join(text_of(c) for c in node.named_children if c.type in ("string_content", "escape_sequence"))
    if t == "concatenated_string":
        return "".join(evaluate(c) for c in node.named_children)
    if t in ("true", "false"):
        return int(t == "true")
    if t == "null":
        return 0
    if t == "identifier":
        name = text_of(node)
        return arrays[name] if name in arrays else (0 if name == "NULL" else Sym(name))
    if t in ("parenthesized_expression",):
        inner = [c for c in node.named_children if c.type != "comment"]
        return evaluate(inner[0], arrays) if inner else None
    if t == "cast_expression":
        return evaluate(node.child_by_field_name("value"), arrays)
    if t == "unary_expression":
        v = evaluate(node.child_by_field_name("argument"), arrays)
        op = text_of(node.child_by_field_name("operator"))
        if isinstance(v, (int, float)):
            return {"-": -v, "+": v, "~": ~int(v), "!": int(not v)}[op]
        return Call(op, (v,))
    if t == "pointer_expression":
        arg = node.child_by_field_name("argument")
        v = evaluate(arg, arrays)
        if text_of(node.child_by_field_name("operator")) == "&" and isinstance(v, Sym):
            return Ref(v.name)
        return v
    if t == "binary_expression":
        return _binop(text_of(node.child_by_field_name("operator")),
                      evaluate(node.child_by_field_name("left"), arrays),
                      evaluate(node.child_by_field_name("right"), arrays))
    if t == "call_expression":
        name = text_of(node.child_by_field_name("function"))
        args = tuple(evaluate(a, arrays) for a in node.child_by_field_name("arguments").named_children
                     if a.type != "comment")
        if name in ADDRESS_CASTS and len(args) == 1:
            return args[0]
        return Call(name, args)
    if t == "initializer_list":
        items = [c for c in node.named_children if c.type != "comment"]
        if items and all(c.type == "initializer_pair" for c in items):
            out = {}
            for pair in items:
                key = ".".join(text_of(d).lstrip(".") for d in pair.children_by_field_name("designator"))
                out[key] = evaluate(pair.child_by_field_name("value"), arrays)
            return out
        return tuple(evaluate(c, arrays) for c in items)
    if t == "assignment_expression":  # the switch tables' `Macro() = value` pairs
        return Call("=", (evaluate(node.child_by_field_name("left"), arrays),
                          evaluate(node.child_by_field_name("right"), arrays)))
    if t == "field_expression":
        return Sym(text_of(node))
    if t == "sizeof_expression":
        return Sym(text_of(node))
    if t == "conditional_expression":
        c = evaluate(node.child_by_field_name("condition"), arrays)
        if isinstance(c, (int, float)):
            return evaluate(node.child_by_field_name("consequence" if c else "alternative"), arrays)
        return Sym(text_of(node))
    return Sym(text_of(node))


@dataclass(frozen=True)
class Declaration:
    """A declaration with an initializer: `type name[] = value;` in the function `function` (""
    at file scope), in file order."""

    type: str
    name: str
    value: object
    function: str
    line: int
    is_array: bool


def declarations(tree, arrays: dict | None = None) -> list[Declaration]:
    """Every initialized declaration of the file in order, its value evaluated. Arrays declared
    earlier (same function or file scope) resolve where later initializers name them."""
    out: list[Declaration] = []
    scope_arrays = dict(arrays or {})
    for fn, node in statements(tree):
        if node.type != "declaration":
            continue
        type_node = node.child_by_field_name("type")
        tname = text_of(type_node) if type_node is not None else ""
        for decl in node.children_by_field_name("declarator"):
            if decl.type != "init_declarator":
                continue
            target = decl.child_by_field_name("declarator")
            is_array = False
            while target is not None and target.type != "identifier":
                is_array = is_array or target.type == "array_declarator"
                target = target.child_by_field_name("declarator")
            if target is None:
                continue
            name = text_of(target)
            value = evaluate(decl.child_by_field_name("value"), scope_arrays)
            if is_array:
                scope_arrays[name] = value
            out.append(Declaration(tname, name, value, fn, node.start_point[0] + 1, is_array))
    return out


def calls(tree) -> list[tuple[str, str, tuple, int]]:
    """Every call statement of the file in order: (function it is in, callee, argument nodes, line)."""
    out = []
    for fn, st in statements(tree):
        node = st.named_children[0] if st.type == "expression_statement" and st.named_children else None
        if node is None or node.type != "call_expression":
            continue
        callee = text_of(node.child_by_field_name("function"))
        args = tuple(a for a in node.child_by_field_name("arguments").named_children if a.type != "comment")
        out.append((fn, callee, args, node.start_point[0] + 1))
    return out


def comments(tree) -> list[tuple[str, int]]:
    """The file-scope comments in order, with their line (the pool map lives in comments)."""
    return [(text_of(n), n.start_point[0] + 1) for n in tree.root_node.children if n.type == "comment"]


# ------------------------------------------------------------------ integer arrays (blobs, weights)
_TYPE_NODES = frozenset({"primitive_type", "type_identifier", "identifier", "sized_type_specifier"})
_ARRAY_CONTAINERS = frozenset({"translation_unit", "linkage_specification", "declaration_list", "preproc_if",
                               "preproc_ifdef", "preproc_else", "preproc_elif", "ERROR"})


def _declared_type(decl, types) -> str:
    """The one of `types` the declaration's type names ("" if none), also when a section macro
    before it left the type in an error node (`SECTION static const uint64_t x[]`)."""
    for c in decl.children:
        if c.type in _TYPE_NODES and c.text.decode(errors="replace") in types:
            return c.text.decode()
        if c.type == "ERROR":
            for g in c.children:
                if g.type in _TYPE_NODES and g.text.decode(errors="replace") in types:
                    return g.text.decode()
    return ""


def _file_scope(node):
    """The declarations and `#define`s at file scope, also inside `extern "C" {}` and
    preprocessor conditionals."""
    stack = [node]
    while stack:
        n = stack.pop()
        for c in n.children:
            if c.type in ("declaration", "preproc_def"):
                yield c
            elif c.type in _ARRAY_CONTAINERS:
                stack.append(c)


def _literal_numbers(where: str, name: str, values) -> list[int]:
    """The integer literals of an initializer list. Its text is split at the commas tree-sitter
    parsed; anything that is not a plain literal (a comment, an expression) takes the node-by-node
    path, which names the offending element."""
    text = values.text
    if values.named_child_count and text[:1] == b"{" and text[-1:] == b"}":
        parts = text[1:-1].split(b",")
        if parts and not parts[-1].strip():
            parts.pop()
        if len(parts) == values.named_child_count:
            try:
                return [int(t.strip().rstrip(b"uUlL"), 0) for t in parts]
            except ValueError:
                pass
    out = []
    for node in values.named_children:
        if node.type == "comment":
            continue
        if node.type != "number_literal":
            row = node.start_point[0] + 1
            raise StImportError(f"{where}:{row}: {name}: element is a {node.type}, not a number")
        try:
            out.append(int(node.text.rstrip(b"uUlL"), 0))
        except ValueError:
            raise StImportError(f"{where}:{node.start_point[0] + 1}: {name}: not an integer: "
                                f"{node.text.decode(errors='replace')!r}") from None
    return out


def integer_arrays(src: bytes, where: str, types) -> tuple[dict[str, tuple[str, list[int]]], dict[str, str]]:
    """{name: (element type, values)} of the file-scope arrays whose type is one of `types` and whose
    initializer is a list of integer literals, and the object-like macros' bodies by name (raw text)."""
    if len(src) > MAX_SOURCE_BYTES:
        raise StImportError(f"{where}: {len(src)} bytes, more than a generated file can be ({MAX_SOURCE_BYTES})")
    tree = parser().parse(src)
    arrays: dict[str, tuple[str, list[int]]] = {}
    macros: dict[str, str] = {}
    for decl in _file_scope(tree.root_node):
        if decl.type == "preproc_def":
            name, body = decl.child_by_field_name("name"), decl.child_by_field_name("value")
            if name is not None and body is not None:
                macros[name.text.decode(errors="replace")] = body.text.decode(errors="replace").strip()
            continue
        tname = _declared_type(decl, types)
        if not tname:
            continue
        for d in decl.children_by_field_name("declarator"):
            values = d.child_by_field_name("value") if d.type == "init_declarator" else None
            target = d.child_by_field_name("declarator") if values is not None else None
            if target is None or target.type != "array_declarator" or values.type != "initializer_list":
                continue
            ident = target.child_by_field_name("declarator")
            if ident is None or ident.type != "identifier":
                continue
            name = ident.text.decode()
            arrays[name] = (tname, _literal_numbers(where, name, values))
    return arrays, macros
