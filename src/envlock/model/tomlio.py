"""Reading TOML (env specs, locks, a project's pyproject.toml) into one error per stage."""

from __future__ import annotations

import tomllib
from typing import Any

from envlock.errors import EnvlockError


def load_toml(text: str, origin: object, error: type[EnvlockError]) -> dict[str, Any]:
    """The TOML document ``text``, read from ``origin``; ``error`` saying "``origin``: not valid TOML: ..."
    when it is not one."""
    try:
        return tomllib.loads(text)
    except RecursionError:  # arrays nested thousands deep: tomllib recurses per level
        raise error(f"{origin}: not valid TOML: nested too deeply") from None
    except tomllib.TOMLDecodeError as exc:
        raise error(f"{origin}: not valid TOML: {exc}") from None
