"""Code-aware tokenizer with a light English stemmer for the knowledge store.

Documentation about kernels mixes prose with identifiers: ``pltpu.VMEM``,
``pallas_call``, ``BlockSpec``, ``(8, 128)``. A query may name an identifier
whole (``pallas_call``) or by its parts ("pallas call"), so each identifier
yields the whole (lower-cased) token *and* its parts: snake_case and
camelCase pieces, and the components of dotted names.

Words are reduced by a small suffix stemmer (plural, -ing, -ed, -ly,
-ation ...). It is deliberately conservative: bm25s 0.3 ships no stemmer of its
own (it calls out to PyStemmer, which is not a dependency), and the same
function runs on documents and queries, so consistency matters more than
linguistic accuracy.
"""

from __future__ import annotations

import re
from functools import lru_cache

from bm25s.stopwords import STOPWORDS_EN

TOKENIZER_VERSION = "2"

_STOP = frozenset(STOPWORDS_EN) | frozenset(
    "how what which why where when do does did i me my we our you your can could should would "
    "its from has have had been being so than too very just also any all about".split()
)

# An identifier-ish run: letters/digits/underscores, optionally joined by dots.
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*|\d+")
_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")

# (suffix, replacement, minimum stem length left after removal)
_SUFFIXES: tuple[tuple[str, str, int], ...] = (
    ("izations", "ize", 3),
    ("ization", "ize", 3),
    ("ational", "ate", 3),
    ("ations", "ate", 3),
    ("ation", "ate", 3),
    ("itions", "", 5),  # transposition -> transpos (as transpose), definition -> defin
    ("ition", "", 5),
    ("nesses", "", 3),
    ("ness", "", 3),
    ("ments", "", 4),
    ("ment", "", 4),
    ("ingly", "", 3),
    ("edly", "", 3),
    ("ities", "", 3),
    ("ity", "", 3),
    ("ings", "", 3),
    ("ing", "", 3),
    ("ies", "y", 2),
    ("ied", "y", 2),
    ("ed", "", 3),
    ("ly", "", 3),
    ("es", "", 3),
    ("s", "", 3),
)
_KEEP = frozenset({"vmem", "smem", "hbm", "gmem", "tmem", "dma", "mxu", "vpu", "xla", "jax", "tpu", "gpu", "pallas", "bias", "axis", "alias", "class", "pass", "process", "access", "less", "loss", "was", "has", "its", "this", "us", "as", "is"})


@lru_cache(maxsize=65536)
def stem(word: str) -> str:
    """Strip one common English suffix from a lower-case word."""
    if len(word) <= 3 or word in _KEEP or not word.isalpha():
        return word
    if word.endswith("ss"):
        return word
    for suffix, repl, min_stem in _SUFFIXES:
        if word.endswith(suffix):
            base = word[: -len(suffix)]
            if len(base) >= min_stem and any(c in "aeiouy" for c in base):
                # "running" -> "runn" -> "run"; "stored" -> "stor" stays.
                if suffix in ("ing", "ings", "ed") and len(base) > 3 and base[-1] == base[-2] and base[-1] not in "lsz":
                    base = base[:-1]
                return _drop_e(base + repl)
            return _drop_e(word)
    return _drop_e(word)


def _drop_e(word: str) -> str:
    # "pipeline"/"pipelined", "allocate"/"allocated", "tile"/"tiles" meet here.
    return word[:-1] if len(word) >= 4 and word.endswith("e") and not word.endswith("ee") else word


def _parts(ident: str) -> list[str]:
    out: list[str] = []
    for piece in re.split(r"[._]+", ident):
        if re.fullmatch(r"[A-Z]{2,}s", piece):  # "MXUs", "DMAs"
            piece = piece[:-1]
        if piece:
            out.extend(m.group(0) for m in _CAMEL.finditer(piece))
    return out


def tokenize(text: str) -> list[str]:
    """Turn text into index terms: stemmed words plus whole identifiers."""
    tokens: list[str] = []
    for m in _WORD.finditer(text):
        raw = m.group(0)
        parts = _parts(raw)
        compound = len(parts) > 1 or "_" in raw or "." in raw
        if compound:
            whole = raw.lower().strip("._")
            if whole:
                tokens.append(whole)
            if "." in raw:  # pltpu.VMEM -> also "VMEM"; jax.lax.dot_general -> "dot_general"
                tail = raw.rsplit(".", 1)[1].lower()
                if tail != whole and ("_" in tail or len(_parts(tail)) > 1):
                    tokens.append(tail)
        for p in parts:
            low = p.lower()
            if low in _STOP or (len(low) == 1 and not low.isdigit()):
                continue
            tokens.append(stem(low))
    return tokens


_PLAIN = re.compile(r"(?u)\b\w\w+\b")
_PLAIN_STOP = frozenset(STOPWORDS_EN)


def plain_tokens(text: str) -> list[str]:
    """bm25s' own default tokenization (lower-cased words of 2+ characters, English stop words out):
    the second, unstemmed view of a passage that search fuses with :func:`tokenize`'s."""
    return [t for t in _PLAIN.findall(text.lower()) if t not in _PLAIN_STOP]
