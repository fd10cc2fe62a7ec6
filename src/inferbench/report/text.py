"""Text from outside the package made literal in the Markdown report.

Study names, questions and descriptions come from the user's config; workload and engine variant names,
reasons and environment strings from the records. report.md is read raw, rendered by GitHub and turned
into HTML by converters, several of which pass raw HTML through: such text must show as typed, never
become HTML, a link, a code span or a heading, nor split a table's row. The package's own Markdown and
its numbers are never passed here, so they stay as they are.
"""

from __future__ import annotations

import re

#: escaped wherever they are, as character references: a renderer shows a reference as its character but
#: never reads it as Markdown structure (CommonMark's rule) or as a tag, so this holds in a table cell too
_INLINE = str.maketrans(
    {"&": "&amp;", "<": "&lt;", ">": "&gt;"}  # raw HTML, autolinks, entities; `>` also a block quote
    | {c: f"&#{ord(c)};" for c in "|`[]*\\"}  # cell separator, code span, link or image, emphasis, escapes
)
#: what opens a heading, a list or a fenced code block at the start of a line (the text of a paragraph,
#: e.g. a study's description); elsewhere these characters are plain, and a number such as -1.5 is kept
_BLOCK_MARKER = re.compile(r"^(?:#{1,6}(?=\s|$)|[-+](?=\s|$)|\d{1,9}[.)](?=\s|$)|~{3,})")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
#: characters that leave a code span's content less than literal for some reader (a backtick ends it, a
#: `|` splits a table's row even inside one, some converters and raw readers take `<...>` as HTML)
_NOT_FOR_CODE = re.compile(r"[`|<>&\\]")


def one_line(text: object) -> str:
    """``text`` on one line: line breaks (which would end a heading, a table row or a paragraph) and other
    control characters become single spaces."""
    return " ".join(_CONTROL.sub(" ", str(text)).split())


def escape_markdown(text: object) -> str:
    """``text`` as Markdown that reads back as itself, on one line, in running text or a table cell."""
    escaped = one_line(text).translate(_INLINE)
    # a marker's last character as a reference: `# x` -> `&#35; x`, `1. x` -> `1&#46; x`
    return _BLOCK_MARKER.sub(lambda m: m[0][:-1] + f"&#{ord(m[0][-1])};", escaped)


def inline_code(text: object) -> str:
    """``text`` as an inline code span (e.g. a study's name), or, where it holds a character a code span
    would not keep literal everywhere, as escaped plain text."""
    line = one_line(text)
    return escape_markdown(line) if not line or _NOT_FOR_CODE.search(line) else f"`{line}`"


def prose_with_code(text: object) -> str:
    """``text`` (a reason a record gives) escaped as ``escape_markdown`` does, but its backtick-quoted names
    as code spans (``inline_code``), so that "no `tensorrt` package" reads as written, not as ``&#96;``."""
    line = one_line(text)
    parts = line.split("`")
    if len(parts) % 2 == 0:  # an unpaired backtick: no span is meant
        return escape_markdown(line)
    spans = [inline_code(part) if i % 2 else part.translate(_INLINE) for i, part in enumerate(parts)]
    return _BLOCK_MARKER.sub(lambda m: m[0][:-1] + f"&#{ord(m[0][-1])};", "".join(spans))
