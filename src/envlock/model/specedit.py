"""Edits of a user's env spec in place: text in, text out, every comment and the layout kept.

``envlock upgrade`` moves a nightly date, a source's rev or a version in ``envs/ENV.toml``, a
file people write and comment by hand. tomlkit reads it into a document that writes back byte
for byte; an edit replaces one string value (keeping its quote style and the comment after it,
or setting that comment) and nothing else. Each edit is checked: the edited text must read as
the same TOML but for that one value, so a layout tomlkit would rewrite is an error naming the
key, never a silent change elsewhere. The functions are pure (no files): the recipe
(``commands.upgrade``) decides what to edit and writes the result.
"""

from __future__ import annotations

import re
from collections.abc import MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any

import tomlkit
from packaging.utils import canonicalize_name
from tomlkit.exceptions import TOMLKitError
from tomlkit.items import String, StringType

from envlock.errors import SpecError, found
from envlock.model.jsondoc import json_doc
from envlock.model.tomlio import load_toml, toml_key

#: ``comment=KEEP``: the value's own trailing comment stays as it is.
KEEP: str | None = None


@dataclass(frozen=True)
class SpecChange:
    """One value an upgrade changes in the spec: its key, what it was and what it becomes."""

    key: str  # "packages.torch.nightly", "sources.sglang.rev", "resolution.overrides[0]"
    old: str
    new: str
    comment: str | None = None  # the trailing comment written after the new value (None: kept)

    def to_dict(self) -> dict[str, Any]:
        return json_doc(self)


def package_key(text: str, name: str, *, origin: str) -> str:
    """The key under ``[packages]`` that declares ``name`` as the spec spells it (``Flashinfer_Python``
    for flashinfer-python); ``SpecError`` naming ``packages.NAME`` when none does."""
    doc = _parse(text, origin)
    table = doc.get("packages")
    wanted = canonicalize_name(name)
    if isinstance(table, MutableMapping):
        for key in table:
            if canonicalize_name(str(key)) == wanted:
                return str(key)
    raise SpecError(f"{origin}: {toml_key('packages', name)}: not declared; expected a package of [packages]")


def set_nightly(text: str, package: str, date: str, *, origin: str) -> str:
    """``packages.PACKAGE.nightly`` set to ``date`` (a table entry: ``{ nightly = ..., index = ... }``)."""
    return set_string(text, ("packages", package_key(text, package, origin=origin), "nightly"), date, origin=origin)


def set_version(text: str, package: str, specifier: str, *, origin: str) -> str:
    """``packages.PACKAGE`` (the ``"==1.0"`` shorthand) or ``packages.PACKAGE.version`` set to ``specifier``."""
    key = package_key(text, package, origin=origin)
    entry = _parse(text, origin)["packages"][key]
    path = ("packages", key) if isinstance(entry, str) else ("packages", key, "version")
    return set_string(text, path, specifier, origin=origin)


def set_rev(text: str, source: str, commit: str, *, origin: str, comment: str | None) -> str:
    """``sources.SOURCE.rev`` set to ``commit``, its trailing comment set to ``comment`` ("" drops it)."""
    return set_string(text, ("sources", source, "rev"), commit, origin=origin, comment=comment)


def comment_of(text: str, path: Sequence[str], *, origin: str) -> str:
    """The comment after the value at ``path`` (without ``#``; "" when none)."""
    value = _container(_parse(text, origin), path, origin).get(path[-1])
    trivia = getattr(value, "trivia", None)
    return (trivia.comment or "").lstrip("#").strip() if trivia is not None else ""


def set_string(text: str, path: Sequence[str], value: str, *, origin: str, comment: str | None = KEEP) -> str:
    """``text`` with the string at ``path`` (keys as the spec spells them) replaced by ``value``.

    ``comment``: the comment after the value (without ``#``; "" for none; ``KEEP`` keeps its own).
    ``SpecError`` naming the key when ``path`` names no string, or the edit would change more.
    """
    doc = _parse(text, origin)
    key = _key(path)
    container = _container(doc, path, origin)
    old = container.get(path[-1])
    if not isinstance(old, String):
        what = "missing" if old is None else f"found {found(old)}"
        raise SpecError(f"{origin}: {key}: {what}; expected a string to replace")
    _put(container, path[-1], old, value, comment)
    return _checked(text, tomlkit.dumps(doc), path, None, value, origin)


def set_array_string(text: str, path: Sequence[str], index: int, value: str, *, origin: str) -> str:
    """``text`` with item ``index`` of the array of strings at ``path`` replaced by ``value``."""
    doc = _parse(text, origin)
    key = f"{_key(path)}[{index}]"
    array = _container(doc, path, origin).get(path[-1])
    if not isinstance(array, list):
        what = "missing" if array is None else f"found {found(array)}"
        raise SpecError(f"{origin}: {_key(path)}: {what}; expected an array holding {key}")
    item = array[index] if 0 <= index < len(array) else None
    if not isinstance(item, String):
        what = f"missing (the array has {len(array)} items)" if item is None else f"found {found(item)}"
        raise SpecError(f"{origin}: {key}: {what}; expected a string to replace")
    _put(array, index, item, value, KEEP)
    return _checked(text, tomlkit.dumps(doc), path, index, value, origin)


# -- the pieces ----------------------------------------------------------------


def _parse(text: str, origin: str) -> tomlkit.TOMLDocument:
    load_toml(text, origin, SpecError)  # the message the spec's readers give for TOML that does not read
    try:
        doc = tomlkit.parse(text)
    except TOMLKitError as exc:  # read by tomllib, refused by tomlkit: say which, not a traceback
        raise SpecError(f"{origin}: cannot be edited in place (tomlkit: {exc}); edit it by hand") from None
    if doc.as_string() != text:
        raise SpecError(f"{origin}: cannot be edited in place: tomlkit does not write it back byte for byte; "
                        "edit it by hand")
    return doc


def _key(path: Sequence[str]) -> str:
    out = ""
    for part in path:
        out = toml_key(out, part)
    return out


def _container(doc: tomlkit.TOMLDocument, path: Sequence[str], origin: str) -> MutableMapping[str, Any]:
    """The table holding ``path[-1]``; ``SpecError`` naming the first key on the way that is no table."""
    here: MutableMapping[str, Any] = doc
    for depth, part in enumerate(path[:-1], start=1):
        child = here.get(part)
        if not isinstance(child, MutableMapping):
            what = "missing" if child is None else f"found {found(child)}"
            raise SpecError(f"{origin}: {_key(path[:depth])}: {what}; expected a table holding {_key(path)}")
        here = child
    return here


def _put(container: MutableMapping[str, Any] | list[Any], key: Any, old: String, value: str,
         comment: str | None) -> None:
    """Put ``value`` at ``key`` quoted as ``old`` was, with its whitespace and comment (or ``comment``)."""
    kind = old.type if old.type in (StringType.SLB, StringType.SLL) and "'" not in value else StringType.SLB
    raw = String.from_raw(value, type_=kind)
    new = String(kind, value, raw.as_string()[1:-1], old.trivia.copy())
    container[key] = new
    # Set after the assignment: tomlkit carries the old comment over to a new value that has none.
    if comment is not None:
        spacing = old.trivia.comment_ws if old.trivia.comment else "  "
        new.trivia.comment_ws = spacing if comment else ""
        new.trivia.comment = f"# {comment}" if comment else ""


def _checked(before: str, after: str, path: Sequence[str], index: int | None, value: str, origin: str) -> str:
    """``after``, once it reads as ``before`` with only the value at ``path`` (item ``index``) changed."""
    expected = load_toml(before, origin, SpecError)
    here: Any = expected
    for part in path[:-1]:
        here = here[part]
    if index is None:
        here[path[-1]] = value
    else:
        here[path[-1]][index] = value
    if load_toml(after, origin, SpecError) != expected:
        where = _key(path) + ("" if index is None else f"[{index}]")
        raise SpecError(f"{origin}: {where}: editing it in place would change more than its value; edit it by hand")
    return after


# -- a renamed build -------------------------------------------------------------


def _key_forms(name: str) -> str:
    """A regex of how a TOML key ``name`` may be written: bare, "quoted" or 'quoted'."""
    quoted = f"\"{re.escape(name)}\"|'{re.escape(name)}'"
    return f"(?:{re.escape(name)}|{quoted})" if re.fullmatch(r"[A-Za-z0-9_-]+", name) else f"(?:{quoted})"


def _headers(table: str, name: str) -> re.Pattern[str]:
    """Table headers ``[TABLE.NAME]`` and ``[TABLE.NAME.SUB...]`` (group 1: up to NAME, 2: NAME, 3: the rest)."""
    return re.compile(rf"^(\s*\[\s*{table}\s*\.\s*)({_key_forms(name)})(\s*(?:\.[^\]]*)?\]\s*(?:#.*)?)$", re.MULTILINE)


def build_tables(text: str, name: str) -> list[str]:
    """The table headers of build ``name`` as the spec writes them, ``builds.NAME`` first
    (``["builds.sgl-kernel", "builds.sgl-kernel.fetchcontent"]``)."""
    found = _headers("builds", name).finditer(text)
    return [f"builds.{name}" + "".join(m.group(3).split("]")[0].split()) for m in found]


def rename_build(text: str, old: str, new: str, *, origin: str) -> str:
    """``text`` with build ``old`` renamed ``new``: every ``[builds.OLD...]`` table and the package
    entry that names it (``old = { build = "old" }``), each in place, every comment kept. ``SpecError``
    when the edit would change more than that (a layout this edit does not know: edit it by hand)."""
    doc = load_toml(text, origin, SpecError)
    builds, packages = doc.get("builds", {}), doc.get("packages", {})
    if old not in builds:
        raise SpecError(f"{origin}: builds.{old}: missing; expected the build to rename")
    if new in builds:
        raise SpecError(f"{origin}: builds.{new}: exists already; cannot rename builds.{old} to it")
    after = _headers("builds", old).sub(lambda m: m.group(1) + toml_key("", new) + m.group(3), text)
    key = next((k for k, v in packages.items() if isinstance(v, dict) and v.get("build") == old), None)
    if key is not None:
        after = _rename_package(after, key, old, new)
    expected = dict(doc)
    expected["builds"] = {(new if k == old else k): v for k, v in builds.items()}
    if key is not None:
        expected["packages"] = {(new if k == key else k): ({**v, "build": new} if k == key else v)
                                for k, v in packages.items()}
    if load_toml(after, origin, SpecError) != expected:
        raise SpecError(f"{origin}: builds.{old}: renaming it to {new} in place would change more than its tables "
                        f"and its package entry; edit it by hand (move [builds.{old}...] to [builds.{new}...] and "
                        f"packages.{key or old} to packages.{new} = {{ build = \"{new}\" }})")
    return after


def _rename_package(text: str, key: str, old: str, new: str) -> str:
    """The ``[packages]`` entry ``key`` (an inline table, or a ``[packages.KEY]`` table) renamed ``new``, its
    ``build = "old"`` set to ``new``."""
    build = re.compile(rf"(\bbuild\s*=\s*)([\"']){re.escape(old)}\2")
    lines = text.splitlines(keepends=True)
    table = ""
    for i, line in enumerate(lines):
        if header := re.match(r"\s*\[([^\]]*)\]", line):
            table = "".join(header.group(1).split())
            if (m := _headers("packages", key).match(line)) is not None:
                lines[i] = m.group(1) + toml_key("", new) + m.group(3) + line[m.end():]
                table = f"packages.{new}"
        elif table == "packages" and (m := re.match(rf"(\s*){_key_forms(key)}(\s*=)", line)):
            lines[i] = m.group(1) + toml_key("", new) + m.group(2) + build.sub(rf"\g<1>\g<2>{new}\g<2>", line[m.end():])
        elif table == f"packages.{new}":
            lines[i] = build.sub(rf"\g<1>\g<2>{new}\g<2>", line)
    return "".join(lines)
