"""The text of a PTX program as ptxas reads it: comments removed, string literals kept whole, so
a rule that searches the result sees every instruction that is assembled.

Generated code writes PTX of its own through inline asm, and PTX has string literals (in
`.pragma`, `.file`, `.section` and `# line` directives), so comment markers can sit inside a
string and quotes inside a comment. A pattern that strips comments without knowing strings is
fooled: `.pragma "/*";` before an instruction and `.pragma "*/";` after it hide it. This lexer
reads them as ptxas does (probed with NVRTC's ptxas: tests/unit/evaluate/test_ptx_text.py):

- a string literal runs from `"` to the next `"`, across newlines, with no escapes (a backslash
  is a plain character, so `\\"` ends the string);
- `//` starts a comment that ends at the next newline (a carriage return, form feed or vertical
  tab does not end it);
- `/*` starts a comment that ends at the first `*/` (comments do not nest);
- comment markers inside a string, and quotes inside a comment, are plain characters.

Strings are kept in the text the rules read: they do not run, but a rule that also searches
them can only refuse more. A string or block comment that is never closed is not read at all:
`code` raises Unreadable, and the guards refuse the program (a rule that cannot run never
passes it).
"""

from __future__ import annotations

import re

# At each position, in order: a whole string, a line comment, a whole block comment; the last two
# alternatives match only where the first three failed: a string or a block comment never closed.
LEXEME_RE = re.compile(r'"[^"]*"|//[^\n]*|/\*.*?\*/|"|/\*', re.S)


class Unreadable(ValueError):
    """The PTX has a string literal or a block comment that is never closed."""


def code(ptx: str) -> str:
    """`ptx` with every comment replaced by one space (ptxas reads a comment as a separator),
    string literals kept as written; raises Unreadable."""
    out: list[str] = []
    last = 0
    for m in LEXEME_RE.finditer(ptx):
        lexeme = m.group(0)
        if lexeme in ('"', "/*"):
            line = ptx.count("\n", 0, m.start()) + 1
            what = "string literal" if lexeme == '"' else "block comment"
            raise Unreadable(f"a {what} opened on line {line} is never closed")
        out.append(ptx[last:m.start()])
        out.append(" " if lexeme[0] == "/" else lexeme)
        last = m.end()
    out.append(ptx[last:])
    return "".join(out)
