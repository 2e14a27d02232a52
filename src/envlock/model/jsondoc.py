"""The JSON document of a result value (what ``--json`` prints), from its dataclass fields.

A result's ``to_dict`` is ``json_doc(self)`` with what differs from its fields said there: a key
spelt otherwise (``keys``), a field left out (``omit``), a computed key (``extra``). Tuples become
lists, paths strings; a nested value with a ``to_dict`` gives its own document.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import fields, is_dataclass
from pathlib import PurePath

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    from typing import Any

    from _typeshed import DataclassInstance


def json_doc(value: DataclassInstance, *, keys: Mapping[str, str] | None = None, omit: Collection[str] = (),
             extra: Mapping[str, object] | None = None) -> dict[str, Any]:
    """``value``'s fields in their order, each under its name (or ``keys[name]``) but those of ``omit``,
    then ``extra``: a key of it named as a field replaces that field's value in its place."""
    keys = keys or {}
    doc = {keys.get(f.name, f.name): _plain(getattr(value, f.name)) for f in fields(value) if f.name not in omit}
    doc.update((key, _plain(item)) for key, item in (extra or {}).items())
    return doc


def _plain(value: object) -> Any:
    """``value`` as JSON holds it: a dataclass by its ``to_dict`` (else ``json_doc``), a tuple as a list."""
    if value is None or isinstance(value, str | int | float):
        return value
    if isinstance(value, PurePath):
        return str(value)
    if isinstance(value, tuple | list):
        return [_plain(item) for item in value]
    if isinstance(value, Mapping):
        return {str(key): _plain(item) for key, item in value.items()}
    to_dict = getattr(value, "to_dict", None)
    if callable(to_dict):
        return to_dict()
    if is_dataclass(value) and not isinstance(value, type):
        return json_doc(value)
    raise TypeError(f"{type(value).__name__}: no JSON form; expected a dataclass, str, int, float, tuple or mapping")
