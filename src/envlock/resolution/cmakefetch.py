"""The FetchContent inputs a CMake project declares, read from its files (not run).

``FetchContent_Declare(NAME GIT_REPOSITORY url GIT_TAG rev ...)`` or ``(NAME URL url ...)`` in a
project's ``CMakeLists.txt`` and ``cmake/*.cmake``, with ``${VAR}`` replaced where a plain
``set(VAR value)`` in those files gives it. This is a reading, not CMake: a declaration under an
``if()`` counts as declared, and a value built at configure time stays ``${...}``. The lock's
guards hold a build's ``fetchcontent`` inputs to it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

_DECLARE = re.compile(r"\bFetchContent_Declare\s*\(", re.IGNORECASE)
_SET = re.compile(r"\bset\s*\(\s*([A-Za-z0-9_]+)\s+(\"[^\"]*\"|[^\s()\"]+)\s*\)", re.IGNORECASE)
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
    texts = {p.relative_to(project).as_posix(): _without_comments(p.read_text(errors="replace"))
             for p in project_files(project)}
    variables: dict[str, str] = {}
    for text in texts.values():
        for m in _SET.finditer(text):
            variables.setdefault(m.group(1), m.group(2).strip('"'))
    out = []
    for rel, text in texts.items():
        for args in _calls(text):
            if (found := _declaration(args, rel, variables)) is not None:
                out.append(found)
    return out


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


def _calls(text: str) -> list[str]:
    """The argument text of each ``FetchContent_Declare(...)`` call in ``text``."""
    out = []
    for m in _DECLARE.finditer(text):
        depth, i = 1, m.end()
        while i < len(text) and depth:
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
        out.append(text[m.end():i - 1])
    return out


def _declaration(args: str, file: str, variables: dict[str, str]) -> Declared | None:
    tokens = [quoted if quoted is not None and plain == "" else plain for quoted, plain in
              ((m.group(1), m.group(2) or "") for m in _TOKEN.finditer(args))]
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

    return Declared(name=tokens[0], file=file, git=first("GIT_REPOSITORY"), tag=first("GIT_TAG"), url=first("URL"))
