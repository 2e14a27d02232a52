"""Standard-library modules that a command imports only through another module and seldom uses,
loaded on their first use instead: the console script defers them before its imports.

* ``inspect`` (with ``ast``, ``dis``, ``tokenize``: ~5 ms of every command's start-up), which
  ``dataclasses`` imports for one call: ``inspect.signature`` of a class without a docstring, to make
  it one. Every dataclass of envlock has its own docstring (tests/test_deferred.py), so it is never made.
* ``ipaddress`` (~1 ms), which ``urllib.parse`` imports (``pathlib`` imports that) to check a URL's
  ``[...]`` host.

A deferred module is a stand-in in ``sys.modules``: the first attribute read from it imports the
real module, which from then on is the one ``import`` gives; a module that bound the stand-in before
reads through it (``__getattr__``, PEP 562). (``importlib.util.LazyLoader`` cannot do this on Python
3.11: the next ``import`` of the module reads its ``__spec__``, which loads it.) Only modules that
import without fail are deferred, so no ``ImportError`` moves from the import to the first use.
"""

from __future__ import annotations

import sys
import types

#: importlib.machinery.ModuleSpec, as this module's own spec is one: importlib's import is spared (~0.5 ms).
_ModuleSpec = type(__spec__)

#: What the console script defers (``defer``).
MODULES = ("inspect", "ipaddress")


def defer(names: tuple[str, ...] = MODULES) -> None:
    """Put a stand-in for each of ``names`` not imported yet into ``sys.modules`` (see the module's docstring)."""
    for name in names:
        if name not in sys.modules:
            sys.modules[name] = _stand_in(name)


def _stand_in(name: str) -> types.ModuleType:
    stand_in = types.ModuleType(name)
    stand_in.__spec__ = _ModuleSpec(name, None)

    def __getattr__(attr: str) -> object:  # noqa: N807 (a module's __getattr__, PEP 562)
        if sys.modules.get(name) is stand_in:
            del sys.modules[name]  # so the import below loads the real module
        return getattr(__import__(name), attr)

    vars(stand_in)["__getattr__"] = __getattr__
    return stand_in
