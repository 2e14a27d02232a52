"""One lock file for every target of a spec (``[targets.NAME]``): PEP 751's ``environments`` and
package ``marker``s, and each target's ``[tool.envlock]`` under ``[tool.envlock.targets.NAME]``.

Each target is locked on its own into a one-target lock (its own nightly wheel and hash, its own
local tags); ``merge`` writes them as one file: a package entry every target locks alike (same
version, same wheels) once, with no marker; one that differs, or that some targets lack, once per
variant with the marker of the targets that hold it (PEP 751: "packages with the same name ... must
have markers that do not overlap"). ``split`` reads one target's lock back out, as the one-target
lock its text was written from, so every command works on a target as on a one-target env; the
writer is deterministic, so ``merge`` of the split locks gives the file's bytes again.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from envlock.model.tomlio import toml_string

_TOOL = "[tool.envlock"


@dataclass(frozen=True)
class TargetText:
    """A target's one-target lock, as its text, and where its machines are (for its marker)."""

    platform: str
    python: str
    text: str

    @property
    def marker(self) -> str:
        from envlock.model.targets import target_marker  # packaging's parsers: only to write a lock of targets

        return target_marker(self.platform, self.python)


@dataclass(frozen=True)
class Multi:
    """What a target's lock read out of a multi-target file (``split``) needs to write that file again:
    its name, and the other targets' locks as text."""

    name: str
    env: str
    others: Mapping[str, TargetText]

    def render(self, platform: str, python: str, text: str) -> str:
        """The whole file, with this target's one-target lock ``text`` (of ``platform`` and ``python``)."""
        return merge(self.env, {**self.others, self.name: TargetText(platform, python, text)})


def merge(env: str, targets: Mapping[str, TargetText]) -> str:
    """The one file holding every target's lock (name -> its one-target text)."""
    order = sorted(targets)
    tools: dict[str, str] = {}
    entries: dict[tuple[str, str], list[str]] = {}
    for name in order:
        _, blocks, tools[name] = _parts(targets[name].text)
        for block in blocks:
            entries.setdefault((_name_of(block), block), []).append(name)
    pythons = {targets[name].python for name in order}
    out = ['lock-version = "1.0"', "environments = ["]
    out += [f"    {toml_string(targets[name].marker)}," for name in order] + ["]"]
    if len(pythons) == 1:
        out.append(f"requires-python = {toml_string(f'=={pythons.pop()}.*')}")
    out.append(f"created-by = {toml_string('envlock')}")
    if not entries:
        out.append("packages = []")  # PEP 751: the key is required even when empty
    for (_, block), holders in sorted(entries.items()):
        lines = block.split("\n")
        if len(holders) < len(order):
            markers = [targets[name].marker for name in holders]
            marker = markers[0] if len(markers) == 1 else " or ".join(f"({m})" for m in markers)
            at = next(i for i, line in enumerate(lines) if line.startswith("version = ")) + 1
            lines.insert(at, f"marker = {toml_string(marker)}")
        out += ["", *lines]
    out += ["", "[tool.envlock]", "format = 1", f"env = {toml_string(env)}"]
    for name in order:
        out += ["", *(_TOOL + f".targets.{name}" + line[len(_TOOL):] if line.startswith(_TOOL) else line
                      for line in tools[name].split("\n"))]
    return "\n".join(out).rstrip("\n") + "\n"


def _parts(text: str) -> tuple[str, list[str], str]:
    """A one-target lock's text: its head, each ``[[packages]]`` entry (with its sub-tables), its tool part."""
    tool_at = text.index("\n[tool.envlock]\n") + 1
    body, tool = text[:tool_at], text[tool_at:].rstrip("\n")
    chunks = body.split("\n[[packages]]\n")
    blocks = ["[[packages]]\n" + chunk.strip("\n") for chunk in chunks[1:]]
    return chunks[0], blocks, tool


def _name_of(block: str) -> str:
    return block.split("\n", 2)[1]  # name = "..." (the writer's first key)


def platforms(doc: Mapping[str, Any]) -> dict[str, str]:
    """Each target of a multi-target ``doc`` -> its platform ("" where it records none)."""
    out = {}
    for name, table in doc["tool"]["envlock"]["targets"].items():
        plat = table.get("platform") if isinstance(table, dict) else None
        out[str(name)] = plat if isinstance(plat, str) else ""
    return out


def split(doc: Mapping[str, Any], name: str) -> dict[str, Any]:
    """Target ``name``'s one-target lock document out of a multi-target ``doc``: the packages whose marker
    holds on its machines (the marker dropped), and its ``[tool.envlock]``."""
    # packaging's markers (~30 ms of imports): only to read a lock of several targets, never a one-target one
    from packaging.markers import Marker

    from envlock.model.target import target_environment

    tool = doc["tool"]["envlock"]["targets"][name]
    python, plat = tool.get("python"), tool.get("platform")
    env = target_environment(str(python), str(plat)) if isinstance(python, str) and isinstance(plat, str) else {}
    packages = []
    for entry in doc.get("packages", []):
        if isinstance(entry, dict) and isinstance(entry.get("marker"), str):
            if not Marker(entry["marker"]).evaluate(env):
                continue
            entry = {k: v for k, v in entry.items() if k != "marker"}
        packages.append(entry)
    out: dict[str, Any] = {"lock-version": doc.get("lock-version"), "created-by": doc.get("created-by"),
                           "packages": packages, "tool": {"envlock": tool}}
    out["requires-python"] = doc.get("requires-python") or (f"=={python}.*" if isinstance(python, str) else None)
    return out


def parse(text: str) -> dict[str, Any]:
    """``text`` as TOML (a lock envlock wrote: valid)."""
    return tomllib.loads(text)
