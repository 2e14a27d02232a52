"""The credentials a request carries: its URL's ``user:password``, else those of an index URL handed
over for its origin (``credentials``, a command's block), else the netrc file, else the keyring; and
which of them a redirect keeps (``hop_auth``: only to the origin they came with). ``net.http`` asks
here for every request (``request_auth``) and sends what is found.

The netrc file is ``$NETRC`` or ``~/.netrc`` (as curl and uv read it); one that other users can read
is refused, with the ``chmod`` that fixes it, when it holds the host asked for. The keyring is asked
through the command uv runs (``keyring get SERVICE USER``), only with ``--keyring-provider
subprocess``: the keyring library is never imported.
"""

from __future__ import annotations

import base64
import contextlib
import os
import stat
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import SplitResult, unquote, urlsplit

from envlock import netenv
from envlock.errors import redact

_lock = threading.Lock()
_netrcs: dict[tuple[str, int, int, int], _Netrc] = {}  # (path, mtime, ctime, size) -> the file as read
_keyring_answers: dict[tuple[str, str], str | None] = {}


@dataclass(frozen=True)
class _Netrc:
    """A netrc file as read: its entries by host, and why it is refused (other users can read it) or unreadable."""

    hosts: dict[str, tuple[str, str]]  # host -> (login, password); "" for the ``default`` entry
    unsafe: str | None  # why other users can read it (the mode), None when only its owner can
    problem: str | None  # why it could not be read, None when it was


def _load(path: str) -> _Netrc | None:
    """``path`` as read (cached while it is unchanged, its mode too); None when there is no such file."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    key = (path, st.st_mtime_ns, st.st_ctime_ns, st.st_size)  # a chmod changes the ctime
    with _lock:
        if key in _netrcs:
            return _netrcs[key]
    import netrc

    unsafe = None
    if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        unsafe = f"mode {stat.S_IMODE(st.st_mode):04o}"
    elif st.st_uid != os.getuid():
        unsafe = f"owned by uid {st.st_uid}, not by you"
    try:
        # Named explicitly, so Python's own check (which refused the file silently here) is skipped: ours says why.
        parsed = netrc.netrc(path)
        hosts = {h: (a[0] or "", a[2] or "") for h, a in parsed.hosts.items()}
        if "default" in parsed.hosts:
            hosts[""] = hosts.pop("default")
        found = _Netrc(hosts, unsafe, None)
    except (OSError, netrc.NetrcParseError) as exc:
        found = _Netrc({}, unsafe, str(exc))
    with _lock:
        _netrcs[key] = found
    return found


@dataclass(frozen=True)
class NetrcEntry:
    """The login and password a netrc file holds for a host."""

    login: str
    password: str


def netrc_entry(host: str | None, *, default: bool = True) -> tuple[NetrcEntry | None, str, str | None]:
    """The netrc file's entry for ``host`` (else its ``default`` entry, unless ``default`` is False),
    what was looked at (for a 401's message) and, for a file other users can read that holds one,
    why it is refused."""
    path = netenv.netrc_path()
    found = _load(path)
    if found is None:
        return None, f"{path} (no such file)", None
    if found.problem is not None:
        return None, f"{path} (unreadable: {found.problem})", None
    entry = found.hosts.get(host or "") if host else None
    if entry is None and default:
        entry = found.hosts.get("")
    if entry is None:
        return None, f"{path} (no entry for {host})", None
    if found.unsafe is not None:
        return None, f"{path} (refused: {found.unsafe})", (
            f"{path} holds credentials for {host} but other users can read it ({found.unsafe}); envlock does "
            f"not send them: run `chmod 600 {path}`")
    return NetrcEntry(*entry), f"{path} (an entry for {host})", None


def keyring_password(service: str, user: str) -> tuple[str | None, str]:
    """The keyring's password for ``user`` at ``service`` (an index URL, then its host, as uv
    asks), and what was looked at; (None, ...) when the provider is off or has none."""
    if netenv.keyring_provider() != "subprocess":
        return None, "the keyring (off)"
    from urllib.parse import urlsplit

    parts = urlsplit(service)
    for name in (service, parts.netloc.rpartition("@")[2]):
        with _lock:
            cached = (name, user) in _keyring_answers
            password = _keyring_answers.get((name, user))
        if not cached:
            password = _ask_keyring(name, user)
            with _lock:
                _keyring_answers[(name, user)] = password
        if password:
            return password, f"the keyring (`keyring get {name} {user}`)"
    return None, f"the keyring (`keyring get {service} {user}` found none)"


def _ask_keyring(service: str, user: str) -> str | None:
    from envlock.runner import run

    result = run(["keyring", "get", service, user])
    if not result.ok:
        return None
    password = result.stdout.rstrip("\r\n")
    return password or None


def how_to_give(host: str) -> str:
    """The three ways to give an index's credentials, for a 401/403."""
    return (f"give them one of three ways: in the index URL (https://USER:TOKEN@{host}/..., in the spec or "
            f"ENVLOCK_INDEX_<NAME>); in a netrc file (`machine {host} login USER password TOKEN` in ~/.netrc "
            "or $NETRC, mode 600); or from a keyring: USER@ in the index URL and --keyring-provider subprocess "
            "(ENVLOCK_KEYRING_PROVIDER=subprocess), which runs `keyring get URL USER`")


def forget() -> None:
    """Drop what was read and asked (tests; a long-lived process after a change)."""
    with _lock:
        _netrcs.clear()
        _keyring_answers.clear()


# -- what a request sends -----------------------------------------------------------


def with_credentials_of(url: str, index_url: str) -> str:
    """``url`` with ``index_url``'s ``user:password@`` when both are on one host (and ``url`` has none).

    Index pages list their files without credentials (and envlock redacts them from
    what it reads); a download from a mirror that needs them must send them again.
    """
    index = urlsplit(index_url)
    parts = urlsplit(url)
    if index.username is None or parts.username is not None or (parts.scheme, parts.netloc) != (
            index.scheme, index.netloc.rpartition("@")[2]):
        return url
    return parts._replace(netloc=index.netloc).geturl()


def basic(user: str, password: str) -> str:
    """The Basic header of a user and password as they are (a URL's decoded by the caller)."""
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


@dataclass(frozen=True)
class _Given:
    """Credentials handed over for an origin: a user, and a password unless the keyring has it."""

    user: str
    password: str | None
    index: str  # the index URL they came with, without them (the keyring's service name)


#: Credentials by origin (scheme, host, port), one mapping per ``credentials`` block under way,
#: the innermost last.
_scopes: list[dict[tuple[str, str | None, int | None], _Given]] = []


def _origin(parts: SplitResult) -> tuple[str, str | None, int | None]:
    try:
        port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    except ValueError:  # a port out of range: matches no origin
        port = -1
    return parts.scheme, parts.hostname, port


@contextlib.contextmanager
def credentials(*urls: str) -> Iterator[None]:
    """For the block, send the ``user:password@`` of these index URLs (a spec's private index, a
    mirror) with every request to their origin, from any thread: their pages list file URLs without
    them (and the lock keeps none), so the lock's hashing of a wheel and the sync's download would
    get a 401 without a netrc. A ``user@`` without a password asks the keyring (when enabled). A
    command's recipe hands them over; they end with it."""
    scope = {_origin(parts): _Given(unquote(parts.username), None if parts.password is None
                                    else unquote(parts.password), redact(url))
             for url, parts in ((u, urlsplit(u)) for u in urls) if parts.username is not None}
    with _lock:
        _scopes.append(scope)
    try:
        yield
    finally:
        with _lock:
            del _scopes[next(i for i in range(len(_scopes) - 1, -1, -1) if _scopes[i] is scope)]


@dataclass(frozen=True)
class Auth:
    """The credentials a request sends (or none), and where envlock looked for them."""

    header: str | None  # the Authorization header sent, None: none
    looked: tuple[str, ...]  # where envlock looked, for a 401/403's message
    user_only: str | None = None  # the user sent without a password (none was found)
    # Why the netrc's entry for the host is not sent (other users can read the file): ``net.http``
    # fails the request with it rather than send none.
    netrc_refused: str | None = None

    def refused(self) -> str:
        """What a 401/403 answered, in words."""
        if self.header is None:
            return "asks for credentials"
        if self.user_only is not None:
            return f"refused user {self.user_only} without a password"
        return "refused the credentials sent"


def request_auth(url: str, *, own_only: bool = False) -> Auth:
    """The Authorization header for ``url``: from its ``user:password``, else from an index URL of its
    origin (``credentials``), else from the netrc file (``$NETRC`` or ~/.netrc, as pip and uv do),
    else from the keyring for the user an index URL names (``--keyring-provider subprocess``).
    ``own_only``: the netrc's entry for the URL's host only (a redirect's target)."""
    parts = urlsplit(url)
    given: _Given | None = None
    if own_only:
        pass
    elif parts.username is not None:
        given = _Given(unquote(parts.username), None if parts.password is None else unquote(parts.password),
                       redact(url))
    else:
        origin = _origin(parts)
        with _lock:
            given = next((s[origin] for s in reversed(_scopes) if origin in s), None)
    if given is not None and given.password is not None:
        return Auth(basic(given.user, given.password), ("the index URL (user:password)",))
    looked = ["the index URL (no user:password)" if given is None else "the index URL (a user, no password)"]
    # A redirect's target gets its host's own entry, never the netrc's catch-all ``default``:
    # whoever answered chose that host.
    entry, said, refused = netrc_entry(parts.hostname, default=not own_only)
    if refused is not None:
        return Auth(None, tuple(looked), netrc_refused=refused)
    looked.append(said)
    if entry is not None and (given is None or entry.login in (given.user, "")):
        return Auth(basic(entry.login or (given.user if given else ""), entry.password), tuple(looked))
    if given is not None:
        password, said = keyring_password(given.index, given.user)
        looked.append(said)
        return Auth(basic(given.user, password or ""), tuple(looked), None if password else given.user)
    on = netenv.keyring_provider() == "subprocess"
    looked.append("the keyring (no USER@ in the index URL to ask for)" if on else "the keyring (off)")
    return Auth(None, tuple(looked))


def hop_auth(url: str, first: str, hop: int, kept: Auth | None) -> tuple[Auth, Auth | None]:
    """The credentials of a redirect chain's hop ``hop`` to ``url``, and those kept for the next.

    Credentials go along only to the origin they came with: a netrc names a host, not a port or a
    scheme, so a redirect to another port of that host (whoever listens there) or down to plain
    http (readable on the way) must not get them again. Once dropped they stay dropped: the rest
    of the chain was chosen by whoever answered there. Another host gets its own netrc entry,
    unless the chain went down from https to plain http to reach it.
    """
    if hop == 0:
        found = request_auth(url)
        return found, found
    if kept is not None and (same_origin(url, first) or _upgrade(url, first)):
        return kept, kept
    a, b = urlsplit(first), urlsplit(url)
    if b.hostname != a.hostname and not (a.scheme == "https" and b.scheme == "http"):
        return request_auth(url, own_only=True), None
    return Auth(None, ("nothing: a redirect from another origin (credentials stay with theirs)",)), None


def same_origin(url: str, other: str) -> bool:
    """Whether ``url`` and ``other`` have one scheme, host and port (RFC 6454): the only URLs a
    request's credentials are sent to again after a redirect."""
    a, b = _origin(urlsplit(url)), _origin(urlsplit(other))
    return a == b and a[2] != -1  # a port out of range is no origin at all


def _upgrade(url: str, first: str) -> bool:
    """Whether ``url`` is ``first``'s host over https, both on their default ports: an index
    moved to https. Credentials the first request sent in the clear lose nothing going on (as
    pip's requests keep them)."""
    a, b = urlsplit(first), urlsplit(url)
    try:
        return (a.scheme, b.scheme) == ("http", "https") and a.hostname == b.hostname and (
            a.port in (None, 80) and b.port in (None, 443))
    except ValueError:
        return False
