"""The built-in corpus: the installed JAX's Pallas/lax docstrings and mk's handbook.

One section per public function or class of each module in
:data:`DOCSTRING_MODULES` (title = qualified name plus the usual import alias,
text = signature + docstring), and the Markdown pages in ``mk/data/knowledge``.
"""

from __future__ import annotations

import enum
import hashlib
import importlib
import importlib.metadata
import importlib.resources
import inspect
import logging
import re
from pathlib import Path

from mk.retrievers.parse import Section, parse_markdown, split_long

log = logging.getLogger(__name__)

# module -> the alias kernel code usually imports it as
DOCSTRING_MODULES: dict[str, str] = {
    "jax.experimental.pallas": "pl",
    "jax.experimental.pallas.tpu": "pltpu",
    "jax.experimental.pallas.triton": "pltriton",
    "jax.experimental.pallas.mosaic_gpu": "plgpu",
    "jax.lax": "lax",
}
DOCSTRING_SOURCE = "jax-docstrings"
HANDBOOK_SOURCE = "handbook"


def handbook_dir() -> Path:
    """Folder of the team's handbook pages (package data ``mk.data/knowledge``)."""
    return Path(str(importlib.resources.files("mk.data"))) / "knowledge"


def handbook_files() -> list[Path]:
    root = handbook_dir()
    return sorted(root.glob("*.md")) if root.is_dir() else []


def builtin_key() -> str:
    """Changes whenever the built-in corpus would change: JAX version or handbook content."""
    try:
        jax_version = importlib.metadata.version("jax")
    except importlib.metadata.PackageNotFoundError:
        jax_version = "none"
    h = hashlib.sha256(jax_version.encode())
    for f in handbook_files():
        h.update(f.name.encode() + b"\0" + f.read_bytes())
    return f"jax-{jax_version}-{h.hexdigest()[:16]}"


def _own_doc(obj: object) -> str:
    """The object's own docstring, not one inherited from Enum/object/Exception."""
    if inspect.isclass(obj):
        doc = obj.__dict__.get("__doc__")
    elif isinstance(obj, enum.Enum):
        doc = None
    else:
        doc = getattr(obj, "__doc__", None)
        if doc and doc == getattr(type(obj), "__doc__", None) and not inspect.isroutine(obj):
            doc = None
    return inspect.cleandoc(doc) if isinstance(doc, str) else ""


def _describe(mod_name: str, alias: str, name: str, obj: object) -> str | None:
    doc = _own_doc(obj)
    head = f"{alias}.{name}"
    if isinstance(obj, enum.Enum):
        cls = type(obj)
        members = ", ".join(m.name for m in cls)
        return f"{head}: member {obj.name} of the enum {cls.__name__} (members: {members}).\n\n{_own_doc(cls)}".strip()
    if inspect.isclass(obj) and issubclass(obj, enum.Enum):
        members = ", ".join(f"{alias}.{name}.{m.name}" for m in obj)
        return f"{head}: enum with members {members}.\n\n{doc}".strip()
    sig = ""
    if callable(obj):
        try:
            sig = re.sub(r"<([\w.]+) object at 0x[0-9a-f]+>", r"\1", str(inspect.signature(obj)))
        except (TypeError, ValueError):
            sig = ""
    if not doc and not sig:
        return None
    kind = "class" if inspect.isclass(obj) else "function" if callable(obj) else type(obj).__name__
    return f"{head}{sig}  ({kind} in {mod_name})\n\n{doc}".strip()


def docstring_sections() -> list[Section]:
    """Sections for every public name of the Pallas and lax modules that import here."""
    out: list[Section] = []
    for mod_name, alias in DOCSTRING_MODULES.items():
        try:
            mod = importlib.import_module(mod_name)
        except Exception as err:  # an optional backend may not import (e.g. Mosaic GPU needs absl)
            log.info("knowledge store: skipping docstrings of %s (%s: %s)", mod_name, type(err).__name__, err)
            continue
        names = getattr(mod, "__all__", None) or [n for n in dir(mod) if not n.startswith("_")]
        for name in sorted(names):
            obj = getattr(mod, name, None)
            if obj is None or inspect.ismodule(obj):
                continue
            text = _describe(mod_name, alias, name, obj)
            if not text:
                continue
            qual = f"{mod_name}.{name}"
            for chunk in split_long(text):
                out.append(Section(doc=qual, titles=[qual, f"{alias}.{name}"], anchor=name, text=chunk))
    return out


def handbook_sections() -> list[Section]:
    out: list[Section] = []
    for f in handbook_files():
        sections = parse_markdown(f.read_text(encoding="utf-8"), f"knowledge/{f.name}", include_code=True)
        # "Sources" lists stay in the pages for readers; as passages they only echo titles.
        out.extend(s for s in sections if not (s.titles and s.titles[-1].lower() == "sources"))
    return out
