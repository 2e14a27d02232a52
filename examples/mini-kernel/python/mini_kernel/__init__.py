"""envlock's demo kernel: a C extension built from a local path source with a recorded patch."""

from mini_kernel._core import add

__all__ = ["add"]
