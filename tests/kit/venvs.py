"""A venv-like tree for the walk's tests: links to an interpreter, a script naming the venv, a __pycache__."""

from __future__ import annotations

import os
from pathlib import Path


def fake_venv(root: Path, home: str = "/opt/python/3.11/bin") -> Path:
    """A small venv tree at ``root`` made with the interpreter in ``home``."""
    (root / "bin").mkdir(parents=True)
    (root / "lib" / "site-packages" / "pkg" / "__pycache__").mkdir(parents=True)
    (root / "pyvenv.cfg").write_text(f"home = {home}\nversion_info = 3.11.7\n")
    os.symlink(f"{home}/python3.11", root / "bin" / "python")
    os.symlink("python", root / "bin" / "python3")
    tool = root / "bin" / "tool"
    tool.write_text(f"#!{root}/bin/python\nprint('hi')\n")
    tool.chmod(0o755)
    (root / "lib" / "site-packages" / "pkg" / "__init__.py").write_text("X = 1\n")
    (root / "lib" / "site-packages" / "pkg" / "__pycache__" / "__init__.cpython-311.pyc").write_bytes(b"x")
    (root / "lib" / "empty").mkdir()
    return root
