"""envlock: Nix-style reproducible Python environments for bleeding-edge GPU stacks."""

from __future__ import annotations

__version__ = "0.1.0"
