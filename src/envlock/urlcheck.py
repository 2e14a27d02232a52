"""What a URL from a spec, a lock, an option or the environment may be before uv, git or envlock reads it.

An index URL is handed to uv (its environment, its transient ``pyproject.toml``) and a git URL to git:
a newline or a space in one (``"http://x/simple --extra-index-url http://evil/simple"``) must never
become a second setting, and git must never be handed a transport that runs a command (``ext::CMD``),
waits on a file descriptor (``fd::3``) or starts a remote helper (``hg://``). These checks name the
problem for the spec's and the options' messages; ``runner`` enforces the same transports in git
itself (``protocol.allow``), whatever the URL came from.
"""

from __future__ import annotations

import re

from envlock.errors import redact, scrub

#: The transports git may use for envlock (``runner`` passes them as git's ``protocol.allow``):
#: anything else, ``ext::`` and ``fd::`` first, is refused by name before git runs.
GIT_TRANSPORTS = ("https", "http", "ssh", "git", "file")
_GIT_SCHEMES = frozenset({*GIT_TRANSPORTS, "git+ssh", "ssh+git"})  # git's own names for ssh
#: git's rule for a remote helper (transport.c): URL-scheme characters, then "::" (``fd::3``,
#: ``ext::sh -c CMD``), or a scheme git has no transport of its own for (``hg://``). Compiled at first
#: use (re's cache): a sync of a lock checks no git URL.
_HELPER = r"([A-Za-z][A-Za-z0-9+.-]*)::"
_SCHEME = r"([A-Za-z][A-Za-z0-9+.-]*)://"
GIT_EXPECTED = "expected an https://, http://, ssh://, git:// or file:// URL, a user@host:path or a local path"
_CHAR_NAMES = {" ": "a space", "\n": "a newline", "\r": "a carriage return", "\t": "a tab"}


def unsafe_char(text: str) -> str | None:
    """The first whitespace or control character of ``text`` and where it is (``a newline at
    character 16``, counted from 1), or None when it has none: such a URL is no single URL."""
    import unicodedata

    for i, ch in enumerate(text, 1):
        if ch.isspace() or unicodedata.category(ch) in ("Cc", "Cf"):  # Cf: U+202E and the like
            what = _CHAR_NAMES.get(ch) or f"{'whitespace' if ch.isspace() else 'control character'} U+{ord(ch):04X}"
            return f"{what} at character {i}"
    return None


def shown(url: str) -> str:
    """``url`` as a message shows it: without its password, every other character as written
    (``redact`` parses a URL, and Python's parser drops a newline or a tab)."""
    return scrub(url) if "://" in url else redact(url)


def _chars(url: str, expected: str) -> str | None:
    """The problem of a URL holding whitespace or a control character, as ``expected ..., found ...``."""
    if unsafe_char(url) is None:
        return None
    where = unsafe_char(shown(url)) or "one in its user:password"
    return f"{expected} with no whitespace or control character, found {shown(url)!r} ({where})"


def is_file_url(url: str) -> bool:
    """Whether ``url`` names a file on this machine: ``file:`` in any case (a scheme is case-blind, RFC 3986;
    the fetch reads ``FILE:///x`` as the local ``/x``)."""
    return url[:5].lower() == "file:"


def is_index_url(url: str) -> bool:
    """Whether ``url`` can be an index's (or its mirror's, or an archive's) URL: http(s):// with a
    host, or file://, that parses (a port past 65535 or an unclosed IPv6 bracket would fail only when
    fetched), with no whitespace or control character (Python's URL parser drops a newline silently)."""
    from urllib.parse import urlsplit

    if not url.startswith(("http://", "https://", "file://")) or unsafe_char(url) is not None:
        return False
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - parsed here, not at the first download
    except ValueError:
        return False
    return parts.scheme == "file" or bool(parts.hostname)


def index_url_problem(url: str, expected: str = "expected an http(s):// or file:// URL") -> str | None:
    """Why ``url`` is no index (or archive) URL, as ``expected ..., found ...`` (no password in it), or None."""
    if is_index_url(url):
        return None
    return _chars(url, expected) or f"{expected}, found {shown(url)!r}"


def git_url_problem(url: str) -> str | None:
    """Why git must not be handed ``url`` (a source's, a FetchContent input's, a mirror's), as
    ``expected ..., found ...``, or None: an option in disguise, a transport other than
    ``GIT_TRANSPORTS`` (a remote helper: ``X::`` or an unknown ``X://``), whitespace or a control character."""
    if url.startswith("-"):  # also passed after "--": this is for the message, not the defence
        return f"expected a repository URL or path, found {shown(url)!r} (git would read it as an option)"
    if not url.strip():
        return f"expected a repository URL or path, found {shown(url)!r}"
    helper = re.match(_HELPER, url)
    scheme = re.match(_SCHEME, url)
    if helper is not None or (scheme is not None and scheme[1].lower() not in _GIT_SCHEMES):
        transport = f"{helper[1]}::" if helper is not None else f"{scheme[1]}://" if scheme is not None else ""
        return (f"{GIT_EXPECTED}, found {shown(url)!r} (transport {transport}, a remote helper git would start; "
                "envlock lets git use none)")
    return _chars(url, GIT_EXPECTED)
