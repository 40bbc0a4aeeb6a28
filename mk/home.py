"""Where mk keeps its state (the store, the compile cache, DSPy's response cache): one decision.

Standard library only: ``mk/__init__.py`` reads it before anything else is imported.
"""

from __future__ import annotations

import os
from pathlib import Path


def home() -> Path:
    """``$MK_HOME``, else ``~/.mk``."""
    return Path(os.environ.get("MK_HOME") or os.path.join(os.path.expanduser("~"), ".mk")).expanduser()
