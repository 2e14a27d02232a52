"""The FetchContent inputs a CMake project declares, read from its files (not run).

``FetchContent_Declare(NAME GIT_REPOSITORY url GIT_TAG rev ...)`` or ``(NAME URL url URL_HASH
SHA256=hex ...)`` in a project's ``CMakeLists.txt`` and ``cmake/*.cmake``, with ``${VAR}`` replaced
where a ``set(VAR value)`` in those files gives it, a cache default too (``set(GITHUB_ARTIFACTORY
"github.com" CACHE STRING "...")``, as sgl-kernel sets its mirror's host). This is a reading, not
CMake: a declaration under an ``if()`` counts as declared, and a value built at configure time
stays ``${...}``. The lock's guards hold a build's ``fetchcontent`` inputs to it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

_DECLARE = re.compile(r"\bFetchContent_Declare\s*\(", re.IGNORECASE)
_SET = re.compile(r"\bset\s*\(", re.IGNORECASE)
_NAME = re.compile(r"[A-Za-z0-9_]+")
_TOKEN = re.compile(r'"((?:[^"\\]|\\.)*)"|([^\s"]+)')
_VAR = re.compile(r"\$\{([A-Za-z0-9_]+)\}")
#: FetchContent_Declare's keywords (of ExternalProject's) whose values are read here, and the
#: ones that end such a value.
_KEYWORDS = {"GIT_REPOSITORY", "GIT_TAG", "URL", "URL_HASH", "SOURCE_SUBDIR", "GIT_SHALLOW", "GIT_PROGRESS",
             "GIT_SUBMODULES", "URL_MD5", "DOWNLOAD_EXTRACT_TIMESTAMP", "PATCH_COMMAND", "UPDATE_COMMAND",
             "CONFIGURE_COMMAND", "BUILD_COMMAND", "INSTALL_COMMAND", "SOURCE_DIR", "BINARY_DIR",
             "OVERRIDE_FIND_PACKAGE", "FIND_PACKAGE_ARGS", "SYSTEM", "EXCLUDE_FROM_ALL", "GIT_REMOTE_NAME",
             "GIT_CONFIG", "TLS_VERIFY", "DOWNLOAD_NO_EXTRACT", "DOWNLOAD_NAME", "HTTP_HEADER"}


@dataclass(frozen=True)
class Declared:
    """One ``FetchContent_Declare``: its name and where it fetches from."""

    name: str
    file: str  # the file it is declared in, relative to the project folder
    git: str | None = None  # GIT_REPOSITORY
    tag: str | None = None  # GIT_TAG: a commit, a tag or a branch
    url: str | None = None  # URL (the first one)
    sha256: str | None = None  # URL_HASH SHA256=<hex>, lowercase

    def spec_form(self) -> str:
        """How the spec declares it (``{ url = ..., sha256 = ... }`` or ``{ git = ..., rev = ... }``), with what
        the CMake files give (``...`` where they give nothing usable)."""
        def known(value: str | None) -> str:
            return f'"{value}"' if value and "${" not in value else "..."

        if self.url is not None:
            return "{ url = " + known(self.url) + (f', sha256 = "{self.sha256}"' if self.sha256 else "") + " }"
        return "{ git = " + known(self.git) + ", rev = " + known(self.tag) + " }"

    def how(self) -> str:
        """Where it comes from, as the CMake file says it: ``GIT_REPOSITORY x, GIT_TAG y`` or ``URL z``."""
        parts = [f"GIT_REPOSITORY {self.git}" if self.git else "", f"GIT_TAG {self.tag}" if self.tag else "",
                 f"URL {self.url}" if self.url else ""]
        return ", ".join(p for p in parts if p) or "no GIT_REPOSITORY or URL"


def project_files(project: Path) -> list[Path]:
    """The CMake files of ``project`` read here: ``CMakeLists.txt`` and ``cmake/*.cmake``."""
    files = [project / "CMakeLists.txt"] if (project / "CMakeLists.txt").is_file() else []
    folder = project / "cmake"
    if folder.is_dir():
        files += sorted(p for p in folder.glob("*.cmake") if p.is_file())
    return files


def declared(project: Path) -> list[Declared]:
    """Every FetchContent input the CMake files of ``project`` declare, in file order."""
    return declared_in({p.relative_to(project).as_posix(): p.read_text(errors="replace")
                        for p in project_files(project)})


def is_project_file(rel: str) -> bool:
    """Whether ``rel`` (relative to a project folder) is one of the CMake files read here."""
    return rel == "CMakeLists.txt" or (rel.startswith("cmake/") and rel.count("/") == 1 and rel.endswith(".cmake"))


def declared_in(files: Mapping[str, str]) -> list[Declared]:
    """Every FetchContent input ``files`` (relative path -> text, as ``project_files`` lists them) declare."""
    texts = {rel: _without_comments(text) for rel, text in sorted(files.items(), key=lambda f: _order(f[0]))}
    variables: dict[str, str] = {}
    for text in texts.values():
        for args in _calls(text, _SET):
            tokens = _tokens(args)
            # set(VAR value), set(VAR value CACHE TYPE "doc" [FORCE]), set(VAR value PARENT_SCOPE): one value.
            if len(tokens) >= 2 and _NAME.fullmatch(tokens[0]) and (len(tokens) == 2 or tokens[2] in
                                                                     ("CACHE", "PARENT_SCOPE")):
                variables.setdefault(tokens[0], tokens[1])
    out = []
    for rel, text in texts.items():
        for args in _calls(text):
            if (found := _declaration(args, rel, variables)) is not None:
                out.append(found)
    return out


def _order(rel: str) -> tuple[int, str]:
    return (0 if rel == "CMakeLists.txt" else 1, rel)


def _without_comments(text: str) -> str:
    """``text`` without ``#`` line comments (not inside a quoted argument) or ``#[[ ]]`` blocks."""
    text = re.sub(r"#\[(=*)\[.*?\]\1\]", " ", text, flags=re.DOTALL)
    out = []
    for line in text.splitlines():
        quoted = False
        for i, ch in enumerate(line):
            if ch == '"' and (i == 0 or line[i - 1] != "\\"):
                quoted = not quoted
            elif ch == "#" and not quoted:
                line = line[:i]
                break
        out.append(line)
    return "\n".join(out)


def _calls(text: str, call: re.Pattern[str] = _DECLARE) -> list[str]:
    """The argument text of each ``FetchContent_Declare(...)`` call (or ``call``) in ``text``."""
    out = []
    for m in call.finditer(text):
        depth, i = 1, m.end()
        while i < len(text) and depth:
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
        out.append(text[m.end():i - 1])
    return out


def _tokens(args: str) -> list[str]:
    return [quoted if quoted is not None and plain == "" else plain for quoted, plain in
            ((m.group(1), m.group(2) or "") for m in _TOKEN.finditer(args))]


def _declaration(args: str, file: str, variables: dict[str, str]) -> Declared | None:
    tokens = _tokens(args)
    if not tokens:
        return None
    values: dict[str, list[str]] = {}
    key = ""
    for token in tokens[1:]:
        if token.upper() in _KEYWORDS and token.isupper():
            key = token
            values.setdefault(key, [])
        elif key:
            values[key].append(_VAR.sub(lambda v: variables.get(v.group(1), v.group(0)), token))

    def first(k: str) -> str | None:
        return values[k][0] if values.get(k) else None

    algorithm, _, digest = (first("URL_HASH") or "").partition("=")
    sha256 = digest.lower() if algorithm.upper() == "SHA256" and re.fullmatch(r"[0-9a-fA-F]{64}", digest) else None
    return Declared(name=tokens[0], file=file, git=first("GIT_REPOSITORY"), tag=first("GIT_TAG"), url=first("URL"),
                    sha256=sha256)
