"""TOML in and out: reading (env specs, locks, a project's pyproject.toml) into one error per stage,
and the strings and keys envlock's own writers write (the lock's bytes are theirs alone)."""

from __future__ import annotations

import json
import re

from envlock.errors import EnvlockError

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    from typing import Any


def load_toml(text: str, origin: object, error: type[EnvlockError]) -> dict[str, Any]:
    """The TOML document ``text``, read from ``origin``; ``error`` saying "``origin``: not valid TOML: ..."
    when it is not one."""
    import tomllib  # ~5 ms (its regexes, datetime): not for a lock read from its kept document (``store.lockdocs``)

    try:
        return tomllib.loads(text)
    except RecursionError:  # arrays nested thousands deep: tomllib recurses per level
        raise error(f"{origin}: not valid TOML: nested too deeply") from None
    except tomllib.TOMLDecodeError as exc:
        raise error(f"{origin}: not valid TOML: {exc}") from None


def toml_string(value: str) -> str:
    """``value`` as a TOML basic string. JSON's escapes are a subset of TOML's, and JSON escapes
    every control character TOML requires escaped but DEL (U+007F, TOML 1.0 "Basic strings"),
    which a spec takes in a git URL: escaped here, or the lock would not read back."""
    return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")


def toml_value(value: object) -> str:
    """A boolean, an integer or (anything else, as text) a string, as TOML writes it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    return toml_string(str(value))


def toml_key(path: str, name: str) -> str:
    """``path.name``, the name quoted as TOML does when it is not a bare key (``spec-keys."packages.torch"``)."""
    bare = name if re.fullmatch(r"[A-Za-z0-9_-]+", name) else toml_string(name)
    return f"{path}.{bare}" if path else bare
