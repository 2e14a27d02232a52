"""Where a request's credentials come from besides its URL: the netrc file and the keyring.

``http`` asks here when neither the URL nor an index URL handed over (``http.credentials``)
carries a password. The netrc file is ``$NETRC`` or ``~/.netrc`` (as curl and uv read it);
one that other users can read is refused, with the ``chmod`` that fixes it, when it holds the
host asked for. The keyring is asked through the command uv runs (``keyring get SERVICE
USER``), only with ``--keyring-provider subprocess``: the keyring library is never imported.
"""

from __future__ import annotations

import os
import stat
import threading
from dataclasses import dataclass

from envlock import netenv

_lock = threading.Lock()
_netrcs: dict[tuple[str, int, int, int], _Netrc] = {}  # (path, mtime, ctime, size) -> the file as read
_keyring_answers: dict[tuple[str, str], str | None] = {}


@dataclass(frozen=True)
class _Netrc:
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
