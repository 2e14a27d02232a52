"""What the environment says about the network, read one way for envlock and for the uv and git it runs.

Proxies (``HTTP(S)_PROXY``, ``ALL_PROXY``, ``NO_PROXY``), the trust store (``SSL_CERT_FILE``,
``SSL_CERT_DIR``, ``REQUESTS_CA_BUNDLE``, ``--native-tls``), the netrc file (``$NETRC``) and the
keyring provider. ``http`` reads them for envlock's own requests; ``runner`` hands the same
settings to uv and git, mapping what they do not read themselves (docs/security.md, "Networks").
None of them is an input to a resolution or to any digest: they say how to reach bytes, not which.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    import ssl

#: Set by ``--native-tls``; UV_NATIVE_TLS and UV_SYSTEM_CERTS (uv's names) mean the same.
NATIVE_TLS_VARS = ("ENVLOCK_NATIVE_TLS", "UV_SYSTEM_CERTS", "UV_NATIVE_TLS")
#: Set by ``--keyring-provider``; UV_KEYRING_PROVIDER (uv's name) means the same.
KEYRING_VARS = ("ENVLOCK_KEYRING_PROVIDER", "UV_KEYRING_PROVIDER")
KEYRING_PROVIDERS = ("disabled", "subprocess")
#: CA bundles as pip/requests and curl users name them; uv reads only SSL_CERT_FILE.
_BUNDLE_VARS = ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE")


def _env(environ: Mapping[str, str] | None) -> Mapping[str, str]:
    return os.environ if environ is None else environ


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


# -- proxies --------------------------------------------------------------------


def _var(environ: Mapping[str, str], name: str) -> str:
    """``name`` in lower case first (curl's rule), then in upper case."""
    return (environ.get(name.lower()) or environ.get(name.upper()) or "").strip()


def proxy_for(url: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The proxy URL a request for ``url`` goes through (None: direct), as curl, pip and uv choose:
    ``<scheme>_proxy``, else ``all_proxy``, unless ``no_proxy`` names the host."""
    env = _env(environ)
    parts = urlsplit(url)
    host = parts.hostname or ""
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return None
    proxy = _var(env, f"{parts.scheme}_proxy") or _var(env, "all_proxy")
    if not proxy or bypass(host, port, _var(env, "no_proxy")):
        return None
    return proxy if "://" in proxy else f"http://{proxy}"  # "proxy:3128" is an http proxy, as curl reads it


def bypass(host: str, port: int, no_proxy: str) -> bool:
    """Whether ``no_proxy`` (comma- or space-separated) names ``host``: ``*`` names every host; a
    domain names itself and its subdomains, a leading dot too; an IP address or CIDR block names
    the addresses in it; ``entry:port`` only that port; ``[v6]`` or ``v6/len`` an IPv6 host."""
    import ipaddress

    host = host.strip("[]").lower().rstrip(".")
    try:
        address: object = ipaddress.ip_address(host)
    except ValueError:
        address = None
    for raw in no_proxy.replace(" ", ",").split(","):
        entry = raw.strip().lower()
        if not entry:
            continue
        if entry == "*":
            return True
        name, entry_port = _split_port(entry)
        if entry_port is not None and entry_port != port:
            continue
        if address is not None:
            try:
                if address in ipaddress.ip_network(name, strict=False):
                    return True
            except ValueError:
                pass
            continue
        name = name.lstrip("*").lstrip(".").rstrip(".")
        if name and (host == name or host.endswith("." + name)):
            return True
    return False


def _split_port(entry: str) -> tuple[str, int | None]:
    """``host:port``, ``[v6]:port``, ``[v6]``, a bare IPv6 address (its colons are no port) or CIDR."""
    if entry.startswith("["):
        name, _, rest = entry[1:].partition("]")
        return name, int(rest[1:]) if rest.startswith(":") and rest[1:].isdigit() else None
    if entry.count(":") == 1:
        name, _, port = entry.partition(":")
        if port.isdigit():
            return name, int(port)
    return entry, None


def proxy_credentials(proxy: str) -> tuple[str, str] | None:
    """The ``user:password@`` of a proxy URL (percent-decoded), if it has one."""
    from urllib.parse import unquote

    parts = urlsplit(proxy)
    if parts.username is None:
        return None
    return unquote(parts.username), unquote(parts.password or "")


# -- trust store --------------------------------------------------------------------


@dataclass(frozen=True)
class Trust:
    """The roots TLS is checked against: a CA bundle and/or a folder of hashed certificates (None:
    the default store), or the operating system's store (``native``)."""

    cafile: str | None = None
    capath: str | None = None
    native: bool = False
    cafile_var: str | None = None  # which variable named the bundle, for messages


def trust(environ: Mapping[str, str] | None = None) -> Trust:
    """The trust store the environment names: ``SSL_CERT_FILE`` over ``REQUESTS_CA_BUNDLE`` over
    ``CURL_CA_BUNDLE``; ``SSL_CERT_DIR``; ``--native-tls``/``UV_NATIVE_TLS``/``UV_SYSTEM_CERTS``."""
    env = _env(environ)
    var = next((v for v in _BUNDLE_VARS if env.get(v)), None)
    return Trust(cafile=env[var] if var else None, capath=env.get("SSL_CERT_DIR") or None,
                 native=any(_truthy(env.get(v)) for v in NATIVE_TLS_VARS), cafile_var=var)


# -- credentials ------------------------------------------------------------------


def netrc_path(environ: Mapping[str, str] | None = None) -> str:
    """The netrc file credentials are read from: ``$NETRC``, else ``~/.netrc`` (as curl and uv)."""
    return _env(environ).get("NETRC") or os.path.join(os.path.expanduser("~"), ".netrc")


def keyring_provider(environ: Mapping[str, str] | None = None) -> str:
    """``subprocess`` (ask the ``keyring`` command, as uv does) or ``disabled`` (the default)."""
    env = _env(environ)
    var = next((v for v in KEYRING_VARS if env.get(v)), None)
    value = env[var].strip().lower() if var else "disabled"
    if value not in KEYRING_PROVIDERS:
        from envlock.errors import UsageError

        raise UsageError(f"{var}={env[var or '']!r}: expected {' or '.join(KEYRING_PROVIDERS)}")
    return value


# -- what uv and git get ------------------------------------------------------------


def uv_settings(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The network settings uv gets, in uv's own names: proxies and ``NETRC`` go through as they
    are (uv reads them); the trust store and the keyring provider are spelled as uv reads them."""
    env = _env(environ)
    t = trust(env)
    out: dict[str, str] = {}
    if t.cafile:
        out["SSL_CERT_FILE"] = t.cafile  # REQUESTS_CA_BUNDLE: uv reads SSL_CERT_FILE only
    if t.capath:
        out["SSL_CERT_DIR"] = t.capath
    if t.native:
        out["UV_SYSTEM_CERTS"] = "1"
    if keyring_provider(env) == "subprocess":
        out["UV_KEYRING_PROVIDER"] = "subprocess"
    return out


def git_settings(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The settings git (libcurl) gets: curl reads ``http_proxy`` only in lower case and no
    ``SSL_CERT_FILE``, so those are spelled as it reads them. A proxy set in lower case stays;
    the CA bundle and folder envlock trusts replace git's own (``GIT_SSL_CAINFO``/``CAPATH``):
    one trust store."""
    env = _env(environ)
    out: dict[str, str] = {}
    for name in ("http_proxy", "https_proxy", "all_proxy", "no_proxy"):
        if not env.get(name) and (value := env.get(name.upper())):
            out[name] = value
    t = trust(env)
    if t.cafile:
        out["GIT_SSL_CAINFO"] = t.cafile
    if t.capath:
        out["GIT_SSL_CAPATH"] = t.capath
    return out


def ssl_context(trust: Trust) -> ssl.SSLContext:
    """A TLS client context of ``trust`` (``--native-tls``: the operating system's store through
    ``truststore`` where installed, else OpenSSL's default paths); raises ``OSError`` or
    ``ssl.SSLError`` when the named CA files cannot be loaded."""
    import ssl

    if not trust.native:
        return ssl.create_default_context(cafile=trust.cafile, capath=trust.capath)
    try:
        import truststore

        ctx: ssl.SSLContext = truststore.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    except ImportError:
        ctx = ssl.create_default_context()
    if trust.cafile or trust.capath:
        ctx.load_verify_locations(cafile=trust.cafile, capath=trust.capath)
    return ctx
