"""Package discovery for mk's layout; everything else about the build is in pyproject.toml.

signatures/, programs/, retrievers/ and data/ sit beside mk/ in the checkout and install as mk.signatures, mk.programs,
mk.retrievers and mk.data ([tool.setuptools] package-dir). pyproject.toml's own discovery cannot rename a folder, so
the packages are found here: every folder with an ``__init__.py`` under each folder of package-dir, nested ones included.
"""

import tomllib
from pathlib import Path

from setuptools import find_packages, setup

HERE = Path(__file__).resolve().parent
LAYOUT = tomllib.loads((HERE / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]

setup(packages=[name + (f".{sub}" if sub else "") for name, folder in LAYOUT.items() for sub in ("", *find_packages(HERE / folder))])
