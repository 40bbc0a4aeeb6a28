"""Split documentation files into sections: Markdown (incl. MyST/jupytext), reST, notebooks, Python.

A :class:`Section` is the text under one heading, with the chain of headings
above it and an anchor. Code blocks (fenced, indented, reST literal and
``code-block``) stay in the section's text whole, fenced, with their
indentation, beside the prose they illustrate; the store indexes prose and
code as separate fields (:func:`prose_and_code`). Long sections are cut at
paragraph boundaries, never inside a code block unless the block alone is too
long (then at line boundaries, each piece fenced again).
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

DOC_SUFFIXES = (".md", ".markdown", ".rst", ".ipynb", ".txt")
CODE_SUFFIXES = (".py",)
MAX_CHARS = 2000  # long sections are cut at paragraph boundaries near this size

_KERNEL_CODE = re.compile(
    r"def\s+\w*kernel\w*\s*\("
    r"|\bpallas_call\s*\("
    r"|@\s*(?:functools\.)?(?:partial\(\s*)?(?:pl|plgpu|pltpu|pallas)\.(?:kernel|core_map)\b"
    r"|\bpl\.kernel\s*\("
)


@dataclass
class Section:
    """The text under one heading of one document."""

    doc: str  # path relative to the ingested root (or a qualified name for docstrings)
    titles: list[str]  # heading chain, outermost first
    anchor: str
    text: str
    code_blocks_dropped: int = 0  # kept for callers of older versions; code blocks are no longer dropped

    @property
    def title(self) -> str:
        return " > ".join(t for t in self.titles if t)


@dataclass
class _Builder:
    doc: str
    include_code: bool
    sections: list[Section] = field(default_factory=list)
    titles: list[str] = field(default_factory=list)
    anchor: str = ""
    lines: list[str] = field(default_factory=list)

    def heading(self, level: int, text: str) -> None:
        self.flush()
        text = clean_inline(text)
        self.titles = self.titles[: max(level - 1, 0)] + [""] * max(level - 1 - len(self.titles), 0) + [text]
        self.anchor = slugify(text)

    def code(self, code: str, lang: str = "python") -> None:
        code = code.rstrip()
        if code.strip():
            self.lines += ["", f"```{lang}", code, "```", ""]

    def flush(self, final: bool = False) -> None:
        text = re.sub(r"\n{3,}", "\n\n", "\n".join(self.lines)).strip("\n")
        self.lines = []
        for chunk in split_long(text) if text.strip() else []:
            self.sections.append(Section(self.doc, list(self.titles), self.anchor, chunk))


def is_kernel_code(code: str) -> bool:
    """True when a code block defines or launches a hand-written Pallas kernel."""
    return bool(_KERNEL_CODE.search(code))


_FENCED = re.compile(r"^```[^\n]*\n(.*?)^```[ \t]*$", re.S | re.M)


def prose_and_code(text: str) -> tuple[str, str]:
    """A section's text split into its prose and the bodies of its fenced code blocks."""
    code = "\n\n".join(m.group(1) for m in _FENCED.finditer(text))
    return _FENCED.sub(" ", text), code


def _units(text: str) -> list[str]:
    """Paragraphs outside code fences, and each fenced block whole."""
    units, para, fence = [], [], False
    for line in text.split("\n"):
        if line.startswith("```"):
            if not fence and para:
                units.append("\n".join(para))
                para = []
            para.append(line)
            fence = not fence
            if not fence:
                units.append("\n".join(para))
                para = []
            continue
        if not fence and not line.strip():
            if para:
                units.append("\n".join(para))
            para = []
            continue
        para.append(line)
    if para:
        units.append("\n".join(para) + ("\n```" if fence else ""))
    return [u for u in units if u.strip()]


def _split_block(block: str, max_chars: int) -> list[str]:
    """A fenced block too long for one chunk, cut at line boundaries, each piece fenced again."""
    lines = block.split("\n")
    head, body = lines[0], lines[1:-1] if lines[-1].startswith("```") else lines[1:]
    pieces, cur = [], []
    for line in body:
        if cur and sum(len(x) + 1 for x in cur) + len(line) > max_chars:
            pieces.append(cur)
            cur = []
        cur.append(line)
    if cur:
        pieces.append(cur)
    return ["\n".join([head, *p, "```"]) for p in pieces]


def slugify(text: str) -> str:
    slug = re.sub(r"[^\w\s-]", "", text.lower()).strip()
    return re.sub(r"[\s]+", "-", slug)


def clean_inline(text: str) -> str:
    """Drop markup that carries no words: roles, link targets, HTML, emphasis marks."""
    text = re.sub(r"<!--.*?-->", " ", text, flags=re.S)
    text = re.sub(r"\{[\w:.-]+\}`([^`<]*?)\s*(?:<[^>`]*>)?`", r"\1", text)  # MyST {py:func}`x <y>`
    text = re.sub(r":[\w:.-]+:`~?([^`<]*?)\s*(?:<[^>`]*>)?`", r"\1", text)  # reST :func:`x <y>`
    text = re.sub(r"`([^`<]+?)\s*<[^>`]+>`_{1,2}", r"\1", text)  # reST `text <url>`_
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # Markdown [text](url)
    text = re.sub(r"</?[A-Za-z][^>]*>", " ", text)  # HTML tags
    text = text.replace("``", "`").replace("\\", "")
    return re.sub(r"[ \t]+", " ", text).strip()


def split_long(text: str, max_chars: int | None = None) -> list[str]:
    """Chunks of about ``max_chars`` (default ``MAX_CHARS``), cut between paragraphs and code blocks, never inside a block that fits."""
    max_chars = max_chars or MAX_CHARS
    if len(text) <= max_chars:
        return [text]
    chunks, cur = [], ""
    for unit in _units(text):
        parts = _split_block(unit, max_chars) if unit.startswith("```") and len(unit) > max_chars else [unit]
        for para in parts:
            if cur and len(cur) + len(para) > max_chars:
                chunks.append(cur)
                cur = ""
            cur = f"{cur}\n\n{para}" if cur else para
    if cur:
        chunks.append(cur)
    return chunks


# --------------------------------------------------------------------- Markdown
_FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*(.*)$")
_MD_HEAD = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_CODE_INFO = re.compile(r"^(?:\{(?:code-cell|code-block|code|testcode)\}\s*)?([\w+-]*)")


_INDENTED = re.compile(r"^(?: {4}|\t)\s*\S")
_LIST_ITEM = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+\S")


def _may_open_indented(prev: str) -> bool:
    """An indented block after ``prev`` is code, not the continuation of a list item."""
    return not prev or not (_LIST_ITEM.match(prev) or prev[:1].isspace())


def parse_markdown(text: str, doc: str, include_code: bool = False) -> list[Section]:
    text = re.sub(r"\A\s*---\n.*?\n---\s*\n", "", text, flags=re.S)  # front matter
    text = re.sub(r"<!--.*?-->", "", text, flags=re.S)
    b = _Builder(doc, include_code)
    lines = text.splitlines()
    i = 0
    prev = ""  # the last non-blank line seen outside code
    while i < len(lines):
        line = lines[i]
        if _INDENTED.match(line) and (i == 0 or not lines[i - 1].strip()) and _may_open_indented(prev):
            # an indented code block (CommonMark): after a blank line, not inside a list item
            body = []
            while i < len(lines) and (_INDENTED.match(lines[i]) or not lines[i].strip()):
                body.append(lines[i][4:] if lines[i].startswith("    ") else lines[i].lstrip("\t"))
                i += 1
            b.code("\n".join(body).strip("\n"), "python")
            continue
        if line.strip():
            prev = line
        fence = _FENCE.match(line)
        if fence:
            mark, info = fence.group(2), fence.group(3).strip()
            body: list[str] = []
            i += 1
            while i < len(lines) and not re.match(rf"^\s*{re.escape(mark[0])}{{{len(mark)},}}\s*$", lines[i]):
                body.append(lines[i])
                i += 1
            i += 1
            if info.startswith("{") and not re.match(r"\{(code-cell|code-block|code|testcode)\}", info):
                b.lines.extend(clean_inline(x) for x in body if not x.startswith(":"))  # admonitions: prose
            else:
                code = "\n".join(x for x in body if not re.match(r"^:\w[\w-]*:", x))
                lang = _CODE_INFO.match(info).group(1) or "python" if info else ""
                b.code(code.strip("\n"), lang)
            continue
        head = _MD_HEAD.match(line)
        if head:
            b.heading(len(head.group(1)), head.group(2))
        elif line.startswith("+++") or re.match(r"^\(\S+\)=\s*$", line) or re.match(r"^:{3,}", line):
            pass  # jupytext cell markers, MyST targets, colon-fence markers
        else:
            b.lines.append(clean_inline(line) if line.strip() else "")
        i += 1
    b.flush(final=True)
    return b.sections


# ------------------------------------------------------------------------- reST
_ADORN = re.compile(r"^([=\-~^\"'`#*+:.<>_])\1+\s*$")
_DIRECTIVE = re.compile(r"^(\s*)\.\.\s+([\w:-]+)::\s*(.*)$")
_CODE_DIRECTIVES = {"code-block", "code", "sourcecode", "testcode", "doctest", "ipython", "jupyter-execute"}
_DROP_DIRECTIVES = {"image", "figure", "raw", "include", "toctree", "only", "meta"}


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def parse_rst(text: str, doc: str, include_code: bool = False) -> list[Section]:
    b = _Builder(doc, include_code)
    styles: list[tuple[str, bool]] = []
    lines = text.splitlines()
    i = 0

    def block_after(start: int, base: int) -> tuple[list[str], int]:
        body, j = [], start
        while j < len(lines) and (not lines[j].strip() or _indent(lines[j]) > base):
            body.append(lines[j])
            j += 1
        while body and not body[-1].strip():
            body.pop()
        pad = min((_indent(x) for x in body if x.strip()), default=0)
        return [x[pad:] for x in body], j

    while i < len(lines):
        line = lines[i]
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        over = _ADORN.match(line)
        # Over-and-underlined title: ====\nTitle\n====
        if over and i + 2 < len(lines) and lines[i + 1].strip() and _ADORN.match(lines[i + 2]) and lines[i + 2][0] == line[0]:
            style = (line[0], True)
            styles += [style] if style not in styles else []
            b.heading(styles.index(style) + 1, lines[i + 1].strip())
            i += 3
            continue
        if line.strip() and not line[0].isspace() and _ADORN.match(nxt) and len(nxt.rstrip()) >= len(line.rstrip()) - 1 and not over:
            style = (nxt[0], False)
            styles += [style] if style not in styles else []
            b.heading(styles.index(style) + 1, line.strip())
            i += 2
            continue
        d = _DIRECTIVE.match(line)
        if d:
            name, arg = d.group(2).lower(), d.group(3)
            body, i = block_after(i + 1, _indent(line))
            content = [x for x in body if not re.match(r"^:[\w-]+:", x)]
            if name in _CODE_DIRECTIVES:
                b.code("\n".join(content).strip("\n"), arg.strip() or "python")
            elif name not in _DROP_DIRECTIVES:
                b.lines.extend([clean_inline(arg)] + [clean_inline(x) for x in content])
            continue
        if line.rstrip().endswith("::") and not line.strip().startswith(".."):
            prose = line.rstrip()[:-1] if not line.strip() == "::" else ""
            b.lines.append(clean_inline(prose))
            body, j = block_after(i + 1, _indent(line))
            if any(x.strip() for x in body):
                b.code("\n".join(body).strip("\n"))
            i = j
            continue
        if re.match(r"^\s*\.\.\s", line):  # comments, link targets
            _, i = block_after(i + 1, _indent(line))
            continue
        b.lines.append(clean_inline(line) if line.strip() else "")
        i += 1
    b.flush(final=True)
    return b.sections


# --------------------------------------------------------------- notebooks, .py
def parse_notebook(text: str, doc: str, include_code: bool = False) -> list[Section]:
    try:
        nb = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"not a JSON notebook: {err}") from err
    parts = []
    for cell in nb.get("cells", []):
        src = cell.get("source", "")
        src = "".join(src) if isinstance(src, list) else str(src)
        if cell.get("cell_type") == "markdown":
            parts.append(src)
        elif cell.get("cell_type") == "code" and src.strip():
            parts.append(f"```python\n{src}\n```")
    return parse_markdown("\n\n".join(parts), doc, include_code)


def parse_python(text: str, doc: str) -> list[Section]:
    """One section per top-level function/class (only ingested with include_code)."""
    try:
        tree = ast.parse(text)
    except SyntaxError as err:
        raise ValueError(f"Python file does not parse: {err}") from err
    sections = []
    mod_doc = ast.get_docstring(tree)
    if mod_doc:
        sections.append(Section(doc, [doc], "", mod_doc))
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            src = ast.get_source_segment(text, node) or ""
            for chunk in split_long(f"```python\n{src}\n```", 4 * MAX_CHARS):
                sections.append(Section(doc, [doc, node.name], slugify(node.name), chunk))
    return sections


def parse_file(path: Path, doc: str, include_code: bool = False) -> list[Section]:
    """Sections of one file, chosen by suffix. Raises ValueError for unreadable content."""
    text = path.read_text(encoding="utf-8", errors="replace")
    suffix = path.suffix.lower()
    if suffix == ".rst":
        return parse_rst(text, doc, include_code)
    if suffix == ".ipynb":
        return parse_notebook(text, doc, include_code)
    if suffix == ".py":
        return parse_python(text, doc)
    return parse_markdown(text, doc, include_code)
