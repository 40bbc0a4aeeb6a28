"""Turn what a caller has (a question, a planner's strategy, a whole compiler error) into search text.

An error as the fixer receives it is mostly noise for BM25: traceback frames
(file paths, line numbers), array shapes and sizes, addresses, URLs, "please
file an issue". Those are removed; identifiers, the error class, the message's
words and the offending source lines stay. A plain question passes unchanged
but for shapes and sizes.
"""

from __future__ import annotations

import re

_FRAME = re.compile(r'^\s*File "([^"]*)", line \d+(?:, in (\S+))?\s*$')
# a frame inside JAX (or another installed library): its function names the stage that failed
# (_convert_block_spec_to_block_mapping, _load_lowering_rule), unlike the candidate's own function names
_LIBRARY_FILE = re.compile(r"(?:site|dist)-packages/|/jax/_src/|/jaxlib/")
_NOISE_LINES = re.compile(r"^\s*(?:Traceback \(most recent call last\):|The above exception was the direct cause.*|During handling of the above exception.*|-{5,}|\^+|\.\.\.)\s*$")
_SUBS = [
    (re.compile(r"https?://\S+"), " "),  # URLs
    (re.compile(r"(?:/[\w.@+-]+)+/?(?::\d+)?"), " "),  # file paths (and path:line)
    (re.compile(r"\b0x[0-9a-fA-F]+\b"), " "),  # addresses
    (re.compile(r"<(\d+(?:x\d+)*)x(\w+)>"), r" \2 "),  # vector<8x256xf32> -> f32
    (re.compile(r"\b\d+(?:x\d+)+\b"), " "),  # 8x128 dims
    (re.compile(r"\(\s*-?\d+\s*(?:,\s*-?\d+\s*)*,?\s*\)"), " "),  # shape tuples (16, 100)
    (re.compile(r"\[\s*\d+\s*(?:,\s*\d+\s*)+\]"), " "),  # [16, 100]
    (re.compile(r"\b\d+(?:\.\d+)?\s*(?:[KMGT]i?B?|bytes?|ms|us|s)\b"), " "),  # sizes and times: 48.00M, 64 KiB
    (re.compile(r"\b\d+\.\d+\b"), " "),  # other decimals
    (re.compile(r"\bplease file (?:an issue|a bug)[^.\n]*\.?", re.I), " "),
]


def looks_like_error(text: str) -> bool:
    return bool(re.search(r"Traceback \(most recent call last\)|\b\w*(?:Error|Exception)\b:|MosaicError|INTERNAL:|RESOURCE_EXHAUSTED", text))


def _clean(text: str) -> str:
    for pat, repl in _SUBS:
        text = pat.sub(repl, text)
    return re.sub(r"[ \t]+", " ", text).strip()


def split_query(query: str) -> tuple[str, str]:
    """(message, context): the words of ``query`` worth matching, with the source lines that a
    traceback quotes under its frames set apart as context (they name the candidate's code, not the fault),
    and the names of the library functions in its frames (the stage that failed) added to the context."""
    main, context, stages = [], [], []
    after_frame = False
    for line in query.splitlines():
        frame = _FRAME.match(line)
        if frame:
            after_frame = True  # the frame's file and line: no signal; a library function's name: the failing stage
            if frame.group(2) and _LIBRARY_FILE.search(frame.group(1)) and not frame.group(2).startswith("<"):
                stages.append(frame.group(2).strip("_"))
            continue
        if after_frame and line.startswith("    "):
            context.append(line)
            continue
        after_frame = False
        if not _NOISE_LINES.match(line):
            main.append(line)
    return _clean("\n".join(main)), _clean("\n".join(context + stages))


def search_text(query: str) -> str:
    """The words of ``query`` worth matching, message and context together (see the module docstring)."""
    return " ".join(t for t in split_query(query) if t)
