"""uv started ahead: a relock starts the pinned uv on what it handed uv the last time it locked that
file, before it reads the spec, the old lock and the index pages; the resolution takes that run's
answer only if what it hands uv now is the same, byte for byte (the arguments, ``pyproject.toml``,
``overrides.txt``, the environment), else ends it and runs uv as it always does.

uv's resolution is most of a lock (1.7 of 2.0 s, docs/performance.md); what envlock reads before it
(the spec, the old lock, the nightly pages, the pinned wheels' probes: ~0.15 s) then runs beside it.
A run is recorded (``uvruns/<sha256 of the lock's path>.json``, with the sha256 of the spec's bytes it
was made for) only for a resolution that builds nothing (``--only-binary :all:``, no local build's
source tree, no build environment) from index URLs without credentials, so the record holds no secret
and the run started from it builds nothing, whatever the record says: its arguments are made here
(``runner.compile_args``), the record gives only the interpreter, the platform, the default index and
the two files' text. A failed run started ahead is not taken: uv runs again, as it would have.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from envlock import runner, timings
from envlock.model.mirrors import index_vars_set
from envlock.store.home import LAYOUT_DIR, default_home, file_sha256

#: The store's folder of recorded runs.
RECORDS = "uvruns"
_OUTPUT = "pylock.toml"


@dataclass(frozen=True)
class UvCall:
    """One ``uv pip compile`` of a transient project into a pylock: all that reaches uv (``args``),
    with the environment ``runner.uv_env`` gives every uv run."""

    python: str
    platform: str | None
    default_index: str
    pyproject: str
    overrides: str

    def args(self) -> list[str]:
        """uv's arguments for this call (as ``resolution.uvproject.compile_args`` spells a lock's)."""
        return runner.compile_args("pyproject.toml", _OUTPUT, runner.CompileOptions(
            output_format=_OUTPUT, python=self.python, platform=self.platform, default_index=self.default_index,
            overrides="overrides.txt", wheels_only=[]))

    @classmethod
    def recordable(cls, args: list[str], pyproject: str, overrides: str, env: dict[str, str],
                   python: str, platform: str | None, default_index: str, urls: list[str]) -> UvCall | None:
        """The call of a lock's uv run (``args`` in a folder holding the two texts, ``env`` added), if
        it may be recorded: its arguments are those ``args()`` makes (a pylock, no local build), nothing
        added to uv's environment, no index URL with credentials; else None."""
        call = cls(python, platform, default_index, pyproject, overrides)
        if env or call.args() != args or any(_has_userinfo(url) for url in urls):
            return None
        return call

    def write(self, folder: Path) -> None:
        """The call's two files, in ``folder``."""
        (folder / "pyproject.toml").write_text(self.pyproject)
        (folder / "overrides.txt").write_text(self.overrides)


def _has_userinfo(url: str) -> bool:
    try:
        return "@" in urlsplit(url).netloc
    except ValueError:
        return True


class Ahead:
    """The run started ahead for one lock (if any was), and where this lock's run is recorded."""

    def __init__(self, record: Path | None, spec_sha256: str, call: UvCall | None) -> None:
        """``record``: where this lock's run is recorded (None: nowhere); ``call``: the run to start (None: none)."""
        self._record, self._spec, self._call = record, spec_sha256, call
        self._work: Path | None = None
        self._started: runner.Started | None = None
        if call is not None:
            self._work = Path(tempfile.mkdtemp(prefix="envlock-resolve-"))
            try:
                call.write(self._work)
                self._started = runner.start_uv(call.args(), cwd=self._work)
                timings.mark("lock: uv started ahead (the run recorded for this lock)")
            except OSError:  # not started: the resolution runs uv as always
                self.close()
            except BaseException:  # an interrupt meanwhile: nothing left behind
                self.close()
                raise

    @property
    def started(self) -> bool:
        """Whether a run was started ahead and not taken yet."""
        return self._started is not None

    def take(self, call: UvCall | None) -> str | None:
        """The pylock uv wrote for ``call`` if the run started ahead was that very call and succeeded;
        else None (the run ended, if it was another). Once: a second take answers None."""
        started, work, self._started, self._work = self._started, self._work, None, None
        if work is not None and started is None:
            shutil.rmtree(work, ignore_errors=True)
        if started is None or work is None:
            return None
        try:
            if call != self._call:
                started.end()
                timings.mark("lock: uv's run started ahead ended (handed otherwise now)")
                return None
            result = started.result()
            timings.mark(f"lock: uv's run started ahead {'taken' if result.ok else 'failed: run again'}")
            return (work / _OUTPUT).read_text() if result.ok else None
        finally:
            shutil.rmtree(work, ignore_errors=True)

    def remember(self, call: UvCall) -> None:
        """Record ``call`` as this lock's run (unless it is the one recorded for these spec bytes)."""
        if call == self._call or self._record is None:
            return
        doc = {"spec_sha256": self._spec, "python": call.python, "platform": call.platform,
               "default_index": call.default_index, "pyproject": call.pyproject, "overrides": call.overrides}
        from envlock.store.store import write_atomic  # loaded by then: the lock opened the store

        with contextlib.suppress(OSError):  # a record is a guess for the next lock: never a reason for this one to fail
            write_atomic(self._record, json.dumps(doc, sort_keys=True).encode())

    def close(self) -> None:
        """End a run no resolution took (a lock that failed before uv, or of several targets)."""
        self.take(None)


def ahead_of_lock(spec_path: Path, lock_path: Path, asked: Mapping[str, str]) -> Ahead:
    """``start`` in the store of ``$ENVLOCK_HOME`` for ``envlock lock``; with mirrors named (``asked``: the
    command line's, or ``ENVLOCK_INDEX_*`` variables) nothing is started nor recorded: their URLs
    may hold passwords."""
    if asked or index_vars_set():
        return Ahead(None, "", None)
    # The store's folder, without ``store.store``'s imports (~10 ms before uv starts): the lock opens it.
    return start(Path(default_home()).absolute() / LAYOUT_DIR / RECORDS, spec_path, lock_path)


def start(records: Path, spec_path: Path, lock_path: Path) -> Ahead:
    """uv started on the run recorded in ``records`` (the store's ``uvruns/``) for ``lock_path``, if one
    was recorded for the very bytes of ``spec_path``; else nothing started (the ``Ahead`` records
    this lock's run there)."""
    record = records / (hashlib.sha256(str(lock_path.absolute()).encode()).hexdigest() + ".json")
    spec = file_sha256(str(spec_path))
    if spec is None:  # the spec's reader says what is wrong with it
        return Ahead(record, "", None)
    return Ahead(record, spec, _recorded(record, spec))


def _recorded(record: Path, spec_sha256: str) -> UvCall | None:
    """The call recorded in ``record`` for a spec of ``spec_sha256`` (None: none, another, or unreadable)."""
    try:
        doc = json.loads(record.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or doc.get("spec_sha256") != spec_sha256:
        return None
    fields = [doc.get(k) for k in ("python", "default_index", "pyproject", "overrides")]
    platform = doc.get("platform")
    if not all(isinstance(f, str) for f in fields) or not isinstance(platform, str | None):
        return None
    python, default_index, pyproject, overrides = (str(f) for f in fields)
    return UvCall(python, platform, default_index, pyproject, overrides)
