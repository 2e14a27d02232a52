"""The one error root and a subclass per stage.

The CLI maps every ``EnvlockError`` to a message on stderr and an exit code; the
core never prints and never exits. Messages name the file, the key or artifact,
what was found and what was expected.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    from typing import Self


def redact(url: str) -> str:
    """``url`` without ``user:password@``: for messages and for files that get committed.

    Also for what is no URL (a typo: ``http//user:token@host``, ``user:token@host/simple``,
    ``http://[::1/``): anything before an ``@`` that holds no ``/`` is cut as if a password. A
    well-formed URL without credentials is kept as it is (an ``@`` in its path is no password)."""
    from urllib.parse import urlsplit  # loaded with pathlib already

    try:
        parts = urlsplit(url)
    except ValueError:
        parts = None
    if parts is None or "://" not in url:
        if "@" not in url:
            return url
        import re

        return re.sub(r"[^\s/?#@]+@", "", url)
    if parts.username is None and parts.password is None:
        return url
    # The netloc after "@", as written: hostname would drop an IPv6 literal's brackets.
    return parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()


def scrub(text: str) -> str:
    """``text`` (a message, a log) with the ``user:password@`` of every ``scheme://`` URL in it cut:
    up to the last ``@`` before the host, as URL parsers read one (a password may hold ``@`` or ``'``)."""
    if "@" not in text:
        return text
    import re

    return re.sub(r"(?<=://)[^\s/?#]*@", "", text)


def found(value: object) -> str:
    """A TOML value as a message names what was found: ``'x'``, ``3``, ``true``, ``a table``, ``an array``,
    ``the unquoted date 2026-03-07``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "an array"
    if hasattr(value, "isoformat"):  # TOML dates and times arrive as datetime objects
        import datetime as dt

        kind = ("date-time" if isinstance(value, dt.datetime) else "date" if isinstance(value, dt.date)
                else "time")
        return f"the unquoted {kind} {value.isoformat()}"
    return repr(value)


def did_you_mean(word: str, choices: Iterable[str], *, before: str = "", after: str = "") -> str:
    """``before`` + "did you mean 'x'?" + ``after`` for the one of ``choices`` closest to ``word`` (a
    typo's likely meaning, by difflib's measure), else ""."""
    import difflib  # only for a message

    close = difflib.get_close_matches(word, list(choices), n=1)
    return f"{before}did you mean {close[0]!r}?{after}" if close else ""


class EnvlockError(Exception):
    """Root of every error envlock reports to a user."""

    #: 2 = usage or input error (bad spec, unknown env, missing lock), 1 = the work failed.
    exit_code = 1

    def __init__(self, message: str, *, details: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.message = message
        self.details = tuple(details)

    def with_details(self, *lines: str) -> Self:
        """The same error (class, message, exit code) with ``lines`` added to its details: a
        next step the caller knows and the raiser did not."""
        other = type(self).__new__(type(self))  # not __init__: subclasses take other arguments
        other.__dict__.update(self.__dict__)
        other.args = self.args
        other.details = (*self.details, *lines)
        return other

    def __str__(self) -> str:
        if not self.details:
            return self.message
        return self.message + "\n" + "\n".join(f"  {line}" for line in self.details)


class UsageError(EnvlockError):
    """Bad command-line input: unknown env, bad option value, a path that is not what the command reads
    (``envlock import`` of a file that is no bundle)."""

    exit_code = 2


class CommandError(UsageError):
    """``envlock run``'s command cannot be started; exit 127 (not found) or 126 (not executable), as a shell's."""

    def __init__(self, message: str, *, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class SpecError(EnvlockError):
    """An env spec (envs/NAME.toml) is invalid; ``details`` lists every problem."""

    exit_code = 2


class LockError(EnvlockError):
    """A lock file is missing, unreadable or not what the spec asks for."""

    exit_code = 2


class LockChangedError(LockError):
    """Another envlock wrote the lock file while this one worked from its earlier bytes: nothing
    was written, and running again works from the new ones (not bad input, so exit 1)."""

    exit_code = 1


class ResolveError(EnvlockError):
    """Resolution failed: a nightly date not listed, uv found no solution, a set is inconsistent."""


class OverlapError(ResolveError):
    """Two distributions of a resolution install one file with different bytes (PyPI's ``triton`` and
    the nightly's ``pytorch-triton``): nothing is locked."""


class MetadataError(ResolveError):
    """An index serves metadata for a wheel (PEP 658) that is not the wheel's own: uv resolved from
    it, so the resolution is not the one the wheels ask for; nothing is locked."""


class PackageIndexError(EnvlockError):
    """An index could not be read (HTTP error, malformed page)."""


class FetchError(EnvlockError):
    """A download failed or did not match its recorded hash."""


class StoreError(EnvlockError):
    """The store is unusable (layout version, permissions, a corrupt entry)."""


class SourceError(EnvlockError):
    """A pinned source could not be fetched or does not match its pin."""


class SourceTreeError(SourceError):
    """A source tree holds what its digest cannot pin (a symlink leading out of it): bad input, exit 2."""

    exit_code = 2


class PatchError(EnvlockError):
    """A patch does not apply, or tries to write outside its tree."""


class UpgradeError(EnvlockError):
    """An upgrade stopped on several problems it found (patches, renamed builds, a resolution), each
    named with its fix; nothing was written."""


class BuildError(EnvlockError):
    """A local build failed or is not reproducible (the message names the kept build log)."""


class BuildRequirementsError(BuildError):
    """A build's requirements could not be resolved (uv pip compile against the index failed)."""


class GpuError(EnvlockError):
    """A package has no kernel for a GPU the spec's ``[env] gpus`` names (lock, build): nothing is written."""


class InstallError(EnvlockError):
    """The venv could not be created from the store."""


class VerifyError(EnvlockError):
    """A venv does not match its recorded digest."""


def raise_all(error: type[EnvlockError], problems: Sequence[str | EnvlockError], summary: str, *,
              prefix: str = "") -> None:
    """Raise the one problem (an error as it is; a text as ``error``, after ``prefix``), or ``error``
    with ``summary`` and every problem as its details; return when there are none."""
    if len(problems) == 1:
        if isinstance(problems[0], EnvlockError):
            raise problems[0]
        raise error(prefix + problems[0])
    if problems:
        raise error(prefix + summary, details=[str(p) for p in problems])


class Terminated(KeyboardInterrupt):
    """SIGTERM (``kill``, ``timeout``, a supervisor stopping a unit), handled as Ctrl-C is: the
    running tool is asked to stop and clean up, nothing partial is kept; exit 143. Left to its
    default, SIGTERM ended envlock at once and a native build it ran went on for its hour."""


def interrupted(exc: KeyboardInterrupt) -> tuple[str, int]:
    """What an interrupt is said as, and its exit code: ``Terminated`` 143, Ctrl-C 130 (a shell's)."""
    return ("terminated", 143) if isinstance(exc, Terminated) else ("interrupted", 130)


def raise_terminated(signum: int, frame: object) -> None:
    """The SIGTERM handler ``cli.main`` installs."""
    raise Terminated


def asks_json(argv: Sequence[str]) -> bool:
    """Whether an envlock command line asks for ``--json`` (not counting what follows ``--`` or
    ``run``: the command ``run`` runs, whose options are its own)."""
    own = list(argv)
    for end in ("--", "run"):
        own = own[:own.index(end)] if end in own else own
    return "--json" in own


def json_error(message: str, details: Sequence[str], kind: str, code: int) -> str:
    """The ``{"error": ...}`` document a ``--json`` command prints on stdout when it fails."""
    import json  # not on the fast no-op path, which imports this module

    return json.dumps({"error": {"kind": kind, "message": message, "details": list(details), "exit_code": code}},
                      indent=2, sort_keys=True)


def folder_expected(exc: OSError) -> str:
    """What ``mkdir`` meant by "File exists" or "Not a directory" where a folder was to be made:
    a file stands where a folder is expected ("" for any other error)."""
    import errno

    if exc.errno == errno.EEXIST:
        return "a file is there, expected a folder"
    if exc.errno == errno.ENOTDIR:
        return "a part of this path is a file, expected folders"
    return ""
