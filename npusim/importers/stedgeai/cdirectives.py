"""The conditional directives of a generated C file, resolved before it is parsed.

ST's generated files put `#if`/`#ifdef` *inside* initializer lists (the debug fields of the
epoch-block table, the buffer-table rows), which a one-pass parse cannot take. `preprocess` resolves
the conditional directives line by line with the debug information switched on
(`LL_ATON_EB_DBG_INFO` defined, `LL_ATON_DBG_BUFFER_INFO_EXCLUDED` = 0), blanks every directive line
(so line numbers stay those of the file) and follows no include. `csource.parse` parses the result.
"""

from __future__ import annotations

import re

from ...errors import StImportError

# what the replay assumes the application builds with: every debug table in, the N6 platform
DEFINES = {"LL_ATON_EB_DBG_INFO": 1, "LL_ATON_DBG_BUFFER_INFO_EXCLUDED": 0,
           "LL_ATON_PLATFORM": 1, "LL_ATON_PLAT_STM32N6": 1}
MAX_NESTING = 64

_TOKEN = re.compile(r"\s*(?:(defined)\b|([A-Za-z_]\w*)|(0[xX][0-9a-fA-F]+|\d+)[uUlL]*|(&&|\|\||==|!=|<=|>=|[()!<>+\-*]))")


class _CondExpr:
    """`#if` expressions: integers, defined(X), ! && || == != < > <= >= + - * and parentheses;
    an unknown identifier is 0, as the C preprocessor takes it."""

    def __init__(self, text: str, macros: dict, where: str):
        self.toks, pos = [], 0
        text = text.split("//")[0].split("/*")[0].strip()
        while pos < len(text):
            m = _TOKEN.match(text, pos)
            if not m or m.end() == pos:
                raise StImportError(f"{where}: cannot evaluate #if {text!r}")
            pos = m.end()
            d, ident, num, op = m.groups()
            self.toks.append(("defined", None) if d else ("id", ident) if ident else
                             ("num", int(num, 0)) if num else ("op", op))
        self.i, self.macros, self.where, self.text = 0, macros, where, text

    def _peek(self):
        return self.toks[self.i] if self.i < len(self.toks) else (None, None)

    def _take(self, op=None):
        tok = self._peek()
        if tok[0] is None or (op is not None and tok != ("op", op)):
            raise StImportError(f"{self.where}: cannot evaluate #if {self.text!r}")
        self.i += 1
        return tok

    def value(self) -> int:
        v = self._or()
        if self.i != len(self.toks):
            raise StImportError(f"{self.where}: cannot evaluate #if {self.text!r}")
        return v

    def _or(self):
        v = self._and()
        while self._peek() == ("op", "||"):
            self._take()
            v = int(bool(self._and()) or bool(v))
        return v

    def _and(self):
        v = self._cmp()
        while self._peek() == ("op", "&&"):
            self._take()
            v = int(bool(self._cmp()) and bool(v))
        return v

    def _cmp(self):
        v = self._sum()
        ops = {"==": lambda a, b: a == b, "!=": lambda a, b: a != b, "<": lambda a, b: a < b,
               ">": lambda a, b: a > b, "<=": lambda a, b: a <= b, ">=": lambda a, b: a >= b}
        while self._peek()[0] == "op" and self._peek()[1] in ops:
            op = self._take()[1]
            v = int(ops[op](v, self._sum()))
        return v

    def _sum(self):
        v = self._unary()
        while self._peek() in (("op", "+"), ("op", "-"), ("op", "*")):
            op = self._take()[1]
            w = self._unary()
            v = v + w if op == "+" else v - w if op == "-" else v * w
        return v

    def _unary(self):
        kind, val = self._peek()
        if (kind, val) == ("op", "!"):
            self._take()
            return int(not self._unary())
        if (kind, val) == ("op", "-"):
            self._take()
            return -self._unary()
        if (kind, val) == ("op", "("):
            self._take()
            v = self._or()
            self._take(")")
            return v
        if kind == "defined":
            self._take()
            paren = self._peek() == ("op", "(")
            if paren:
                self._take()
            name = self._take()
            if name[0] != "id":
                raise StImportError(f"{self.where}: cannot evaluate #if {self.text!r}")
            if paren:
                self._take(")")
            return int(name[1] in self.macros)
        if kind == "num":
            self._take()
            return val
        if kind == "id":
            self._take()
            v = self.macros.get(val, 0)
            return v if isinstance(v, int) else 0
        raise StImportError(f"{self.where}: cannot evaluate #if {self.text!r}")


def _macro_value(body: str):
    body = body.split("//")[0].split("/*")[0].strip()
    m = re.fullmatch(r"\(?\s*(0[xX][0-9a-fA-F]+|\d+)[uUlL]*\s*\)?", body)
    return int(m.group(1), 0) if m else body


def preprocess(text: str, where: str, defines: dict | None = None) -> str:
    """The file with its conditional directives resolved and every directive line blanked."""
    macros = dict(DEFINES if defines is None else defines)
    out, stack = [], []  # stack entries: [taking, any branch taken, parent taking]
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        stripped = line.lstrip()
        if not stripped.startswith("#"):
            out.append(line if all(s[0] for s in stack) else "")
            i += 1
            continue
        # a directive, with its continuation lines
        full, n = stripped, 1
        while full.endswith("\\") and i + n < len(lines):
            full = full[:-1] + " " + lines[i + n].strip()
            n += 1
        out.extend([""] * n)
        i += n
        m = re.match(r"#\s*(\w+)\s*(.*)", full)
        if not m:
            continue
        kw, rest = m.group(1), m.group(2)
        live = all(s[0] for s in stack)
        at = f"{where}:{i - n + 1}"
        if kw in ("if", "ifdef", "ifndef"):
            if len(stack) >= MAX_NESTING:
                raise StImportError(f"{at}: conditionals nested deeper than {MAX_NESTING}")
            if not live:
                stack.append([False, True, False])
                continue
            name = rest.split()[0] if rest.split() else ""
            take = (bool(_CondExpr(rest, macros, at).value()) if kw == "if" else
                    (name in macros) == (kw == "ifdef"))
            stack.append([take, take, True])
        elif kw == "elif":
            if not stack:
                raise StImportError(f"{at}: #elif without #if")
            top = stack[-1]
            take = top[2] and not top[1] and bool(_CondExpr(rest, macros, at).value())
            top[0], top[1] = take, top[1] or take
        elif kw == "else":
            if not stack:
                raise StImportError(f"{at}: #else without #if")
            top = stack[-1]
            top[0], top[1] = top[2] and not top[1], True
        elif kw == "endif":
            if not stack:
                raise StImportError(f"{at}: #endif without #if")
            stack.pop()
        elif kw == "define" and live:
            dm = re.match(r"([A-Za-z_]\w*)(\([^)]*\))?\s*(.*)", rest)
            if dm and not dm.group(2):
                macros[dm.group(1)] = _macro_value(dm.group(3))
        elif kw == "undef" and live:
            macros.pop(rest.split()[0] if rest.split() else "", None)
        # include, error, warning, pragma, line: nothing to do (includes are not followed; an
        # #error of a runtime-version mismatch concerns the board's build, not the replay)
    if stack:
        raise StImportError(f"{where}: #if without #endif (the file is truncated?)")
    return "\n".join(out)

