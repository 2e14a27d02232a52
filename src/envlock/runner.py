"""The one place envlock starts subprocesses (uv, git, build backends).

Tests run these for real against local fixtures; failures become the caller's
stage error with the command and the tail of its output.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from envlock import netenv
from envlock.errors import EnvlockError


@dataclass(frozen=True)
class Result:
    """A finished command: what ran, its exit status and its output."""

    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def tail(self, lines: int = 25) -> str:
        text = (self.stdout + ("\n" if self.stdout and self.stderr else "") + self.stderr).rstrip()
        return "\n".join(text.splitlines()[-lines:])


def uv_bin() -> str:
    """The pinned uv's binary (from the ``uv`` package), never one found on PATH.

    In a venv (envlock's own, as installed) the package's first choice is the venv's ``bin/uv``
    (sysconfig's ``venv`` scheme: ``{prefix}/bin``), taken here without importing the package and
    sysconfig's data (~4 ms of every command that runs uv); elsewhere the package decides."""
    if sys.prefix != sys.base_prefix and os.name == "posix":
        here = os.path.join(sys.prefix, "bin", "uv")
        if os.path.isfile(here):
            return here
    from uv import find_uv_bin

    return str(find_uv_bin())


def uv_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment for uv: no managed-Python downloads, no user or project config leaking in; the
    network settings envlock reads itself (proxies, trust store, netrc, keyring provider), spelled
    as uv reads them (``netenv.uv_settings``), so both reach an index the same way."""
    network = netenv.uv_settings(os.environ)
    env = dict(os.environ)
    for var in [v for v in env if v.startswith("UV_") and v != "UV_CACHE_DIR"]:
        del env[var]
    env.update(network)
    env.update(
        {
            "UV_PYTHON_DOWNLOADS": "never",
            "UV_NO_CONFIG": "1",
            "UV_NO_PROGRESS": "1",
        }
    )
    if extra:
        env.update(extra)
    return env


def run(
    argv: Sequence[str | os.PathLike[str]],
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    log: Path | None = None,
    deadline: tuple[float, str] | None = None,
    group: Path | None = None,
    meanwhile: Callable[[], object] | None = None,
) -> Result:
    """Run a command to completion and capture its output (also into ``log``, if given).
    ``deadline``: (seconds, why): past them it is killed, with all it started, and its stderr ends
    with why (a network transfer's total deadline).

    ``group``: the command runs in a process group of its own, named in the file ``group``
    (``GROUP_SUFFIX``) for as long as it runs, so that if envlock is killed meanwhile, whoever finds
    the file (the next envlock to open the store) can end what it left running (``end_group``).

    ``meanwhile``: work for this thread once the command has started, before waiting for it (what
    comes after the command needs, done while it runs; an interrupt in it ends the command as one
    in the wait does). Not on a thread of its own: a second thread holding the interpreter in one
    long call (``marshal.loads``) held up this one before the command started (~8 ms)."""
    args = tuple(str(a) for a in argv)
    try:
        with subprocess.Popen(args, cwd=cwd, env=dict(env) if env is not None else None, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, errors="replace",
                              process_group=0 if group is not None else None) as proc:
            try:
                if group is not None:
                    _record_group(group, proc.pid)
                if meanwhile is not None:
                    meanwhile()
                out, err = proc.communicate(timeout=deadline[0] if deadline else None)
            except KeyboardInterrupt:
                _interrupt(proc)
                raise
            except subprocess.TimeoutExpired:
                assert deadline is not None
                for pid in [proc.pid, *_descendants(proc.pid)]:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(pid, signal.SIGKILL)
                out, err = proc.communicate()
                err += f"\nenvlock: ended after {deadline[0]:g} s: {deadline[1]}\n"
            finally:
                if group is not None:
                    group.unlink(missing_ok=True)
        result = Result(args, proc.returncode, out, err)
    except FileNotFoundError:
        result = Result(args, 127, "", f"{args[0]}: command not found")
    if log is not None:
        try:
            log.parent.mkdir(parents=True, exist_ok=True)
            from envlock.errors import scrub  # a build log stays in the store: no index's password in it

            with log.open("a", encoding="utf-8") as fh:
                fh.write(scrub(f"$ {' '.join(args)}\n{result.stdout}{result.stderr}\n[exit {result.returncode}]\n"))
        except OSError as exc:  # a full disk's write names no file: name the log
            raise OSError(exc.errno, exc.strerror, exc.filename or str(log)) from None
    return result


def _interrupt(proc: subprocess.Popen[str]) -> None:
    """Pass an interrupt on and let the child clean up (uv removes its temp folders in its
    cache), then kill it. A terminal's Ctrl-C reaches it anyway; `kill -INT` or a supervisor's
    SIGTERM on envlock alone does not, and killing it outright would leave its litter.

    Also to what runs under it (a build's backend, cmake, compilers): uv did not always stop
    them, and once uv was gone they built on, orphaned, for their hour. They stay in envlock's
    process group (a closed terminal, a group kill and Ctrl-Z reach them as they reach envlock);
    they are found in /proc, where there is one, before anything is signalled. A terminal's
    Ctrl-C can end uv before this runs: what it left is envlock's now (``_adopt_orphans``)."""
    def send(pid: int, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):  # all gone already
            os.kill(pid, sig)

    tree: dict[int, str] = {}
    if proc.poll() is None:  # never a reaped child's pid: it may be another process's by now
        tree = _descendants(proc.pid)
        for pid in [proc.pid, *tree]:
            send(pid, signal.SIGINT)
        try:
            proc.communicate(timeout=10)  # read on: a child writing as it cleans up must not block
        except (subprocess.TimeoutExpired, KeyboardInterrupt):  # too slow, or a second Ctrl-C
            proc.kill()
            proc.communicate()
    if _adopting:  # uv's orphans were re-parented to envlock, not to init: this run's leftovers
        tree.update(_descendants(os.getpid()))
    for pid, started in tree.items():  # what outlived uv, unless its pid is another process's now
        if _started(pid) == started:
            send(pid, signal.SIGKILL)


def kill_descendants() -> None:
    """SIGKILL every process envlock started that still runs, theirs too (an interrupt's last resort)."""
    for pid in _descendants(os.getpid()):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


_adopting = False  # whether this process is its descendants' subreaper (``_adopt_orphans``)


def _adopt_orphans() -> None:
    """Make envlock the subreaper of what its children start (Linux ``PR_SET_CHILD_SUBREAPER``):
    a build backend whose uv died of a terminal's Ctrl-C is then envlock's child, which an
    interrupt can still find and stop, not init's. Once per process; elsewhere a no-op."""
    global _adopting
    if _adopting or not sys.platform.startswith("linux"):
        return
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        _adopting = libc.prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        pass


def _descendants(pid: int) -> dict[int, str]:
    """The processes under ``pid`` (children, theirs, ...) -> their start time; {} without /proc."""
    children: dict[int, list[tuple[int, str]]] = {}  # parent -> (child, its start time)
    try:
        names = os.listdir("/proc")
    except OSError:
        return {}
    for name in names:
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as fh:
                    fields = fh.read().rsplit(b")", 1)[1].split()
            except OSError:  # gone meanwhile
                continue
            children.setdefault(int(fields[1]), []).append((int(name), fields[19].decode()))
    out: dict[int, str] = {}
    todo = list(children.get(pid, ()))
    while todo:
        child, started = todo.pop()
        out[child] = started
        todo += children.get(child, ())
    return out


def _started(pid: int) -> str | None:
    """When process ``pid`` started (field 22 of /proc/PID/stat, in clock ticks since boot), or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[19].decode()
    except (OSError, IndexError):
        return None


def uv(args: Sequence[str | os.PathLike[str]], *, cwd: Path | None = None,
       env: Mapping[str, str] | None = None, log: Path | None = None, wrap: Sequence[str] = (),
       group: Path | None = None, meanwhile: Callable[[], object] | None = None, builds: bool = True) -> Result:
    """Run the pinned uv with ``args`` (under ``wrap``, a command that runs its arguments: a build's
    private mount namespace; ``group``: in a process group of its own, see ``run``). An index URL
    never stays in its command line, which any user of the machine reads in ``/proc/PID/cmdline``:
    ``--default-index URL`` (its password) reaches uv as ``UV_DEFAULT_INDEX``, which only its own
    user reads (``/proc/PID/environ``). ``meanwhile``: as ``run``'s. ``builds=False``: this run starts
    no build backend (``--no-build``, ``uv venv``), so envlock need not adopt uv's orphans for it
    (``_adopt_orphans``, whose ``ctypes`` import a warm sync then makes while uv runs)."""
    if builds:
        _adopt_orphans()  # a build's backend must stay within reach of an interrupt
    argv, moved = _uv_argv(args)
    return run([*wrap, uv_bin(), *argv], cwd=cwd, env=uv_env({**moved, **(env or {})}), log=log, group=group,
               meanwhile=meanwhile)


def _uv_argv(args: Sequence[str | os.PathLike[str]]) -> tuple[list[str], dict[str, str]]:
    """uv's arguments with ``--default-index URL`` taken out, and the environment that says it instead."""
    argv: list[str] = []
    moved: dict[str, str] = {}
    given = [str(a) for a in args]
    for i, arg in enumerate(given):
        if i and given[i - 1] == "--default-index":
            moved["UV_DEFAULT_INDEX"] = arg
        elif arg.startswith("--default-index="):
            moved["UV_DEFAULT_INDEX"] = arg.partition("=")[2]
        elif arg != "--default-index":
            argv.append(arg)
    return argv, moved


class Started:
    """The pinned uv started and not waited for (``start_uv``): ``result`` waits for it and answers
    as ``uv`` does; ``kill`` ends it (a run whose answer is not wanted)."""

    def __init__(self, args: Sequence[str | os.PathLike[str]], cwd: Path) -> None:
        _adopt_orphans()
        argv, moved = _uv_argv(args)
        self.argv = (uv_bin(), *argv)
        self._proc = subprocess.Popen(self.argv, cwd=cwd, env=uv_env(moved), stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True, errors="replace")

    def result(self) -> Result:
        """uv's exit status and output, once it ends (an interrupt meanwhile is passed on, as ``run`` does)."""
        try:
            out, err = self._proc.communicate()
        except KeyboardInterrupt:
            _interrupt(self._proc)
            raise
        return Result(self.argv, self._proc.returncode, out, err)

    def end(self) -> None:
        """End it, as an interrupt ends ``run``'s (uv cleans up its cache's temp folders first), and reap it."""
        if self._proc.poll() is None:
            _interrupt(self._proc)  # which reads its output to the end
        else:
            self._proc.communicate()


def start_uv(args: Sequence[str | os.PathLike[str]], *, cwd: Path) -> Started:
    """The pinned uv started with ``args`` in ``cwd`` (its environment as ``uv`` gives it, nothing added),
    not waited for."""
    return Started(args, cwd)


def without_password(url: str) -> str:
    """``url`` without its ``user:password@`` when it has a password (a ``user@`` alone, which
    asks the keyring, is no secret and stays)."""
    from envlock.errors import redact

    try:
        return redact(url) if urlsplit(url).password is not None else url
    except ValueError:
        return redact(url)


def uv_index_credentials(urls: Mapping[str, str]) -> dict[str, str]:
    """The environment that gives uv the password of each named index (``[[tool.uv.index]]``) whose
    URL holds one: ``UV_INDEX_<NAME>_USERNAME``/``_PASSWORD`` (NAME upper-cased, every other
    character than A-Z and 0-9 as ``_``, as uv reads them), so the URL uv reads has none."""
    import re
    from urllib.parse import unquote

    out: dict[str, str] = {}
    for name, url in urls.items():
        try:
            parts = urlsplit(url)
            password = parts.password
        except ValueError:
            continue
        if password is not None:
            var = "UV_INDEX_" + re.sub(r"[^A-Z0-9]", "_", name.upper())
            out[f"{var}_USERNAME"], out[f"{var}_PASSWORD"] = unquote(parts.username or ""), unquote(password)
    return out


#: How a file that names a running process group ends (``run``'s ``group``).
GROUP_SUFFIX = ".pgroup"


def _record_group(record: Path, pgid: int) -> None:
    """Write ``record``: the group ``pgid`` (its leader's pid) and when that leader started."""
    temp = record.with_name(f".{record.name}.{os.getpid()}")
    temp.write_text(f"{pgid} {_started(pgid)}\n")
    os.replace(temp, record)  # never half a record: a killed envlock's is read by the next


def end_group(record: Path, *, timeout: float = 10.0) -> bool:
    """End the process group ``record`` names (a killed envlock's uv, and what that uv started):
    SIGKILL to the group, then wait until no process of it is left (a zombie counts as gone);
    remove ``record``. False when some of it is still there after ``timeout`` seconds (or cannot be
    signalled); True when it is gone, or the record names nothing that runs (its leader's pid is
    another process's now, or the record does not read)."""
    import signal
    import time

    try:
        pgid_text, started = record.read_text().split()
        pgid = int(pgid_text)
    except (OSError, ValueError):
        record.unlink(missing_ok=True)
        return True
    leader = _started(pgid)
    if pgid <= 1 or (leader is not None and leader != started):  # that pid is another process's now
        record.unlink(missing_ok=True)
        return True
    deadline = time.monotonic() + timeout
    while _group_members(pgid):
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            break
        except PermissionError:
            return False
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    record.unlink(missing_ok=True)
    return True


def _group_members(pgid: int) -> list[int]:
    """The processes of group ``pgid`` that still run (zombies left out: they hold nothing but
    their pid until their parent reaps them); without /proc, [pgid] while the group exists."""
    try:
        names = os.listdir("/proc")
    except OSError:
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return []
        return [pgid]
    members = []
    for name in names:
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as fh:
                    fields = fh.read().rsplit(b")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != b"Z":
                members.append(int(name))
    return members


@dataclass(frozen=True)
class CompileOptions:
    """How ``uv pip compile`` resolves (``compile_args``): for which interpreter and platform, from
    which index, held to which files, written how."""

    python: str  # the Python version resolved for (``--python-version``)
    platform: str | None = None  # uv's ``--python-platform``
    output_format: str | None = None  # uv's ``--format`` (``pylock.toml``); None: from the output's name
    default_index: str | None = None  # None: uv's default
    overrides: str | os.PathLike[str] | None = None  # a file of overrides (``--override``)
    constraints: str | os.PathLike[str] | None = None  # a file of constraints (``--constraint``)
    hashes: bool = False  # ``--generate-hashes``
    annotate: bool = True  # False: ``--no-annotate``
    # No source distribution is built for its metadata but those of the packages named (local
    # builds): an index's sdist would run the index's code (``--only-binary :all:``). None: any may be.
    wheels_only: Sequence[str] | None = None


def compile_args(requirements: str | os.PathLike[str], output: str | os.PathLike[str],
                 options: CompileOptions) -> list[str]:
    """The arguments of ``uv pip compile`` (for ``uv``) resolving ``requirements`` (a requirements.in or
    a pyproject.toml) as ``options`` say into ``output``.

    The one place envlock spells a resolution for uv: the lock's (resolve) and a build's
    requirements (build). Under ``UV_NO_CONFIG`` (``uv_env``) nothing else reaches uv.
    """
    args = ["pip", "compile", os.fspath(requirements)]
    if options.output_format:
        args += ["--format", options.output_format]
    args += ["-o", os.fspath(output), "--python-version", options.python]
    if options.platform:
        args += ["--python-platform", options.platform]
    if options.hashes:
        args.append("--generate-hashes")
    args.append("--no-header")
    if not options.annotate:
        args.append("--no-annotate")
    args.append("--quiet")
    if options.default_index:
        args += ["--default-index", options.default_index]
    # A package comes from the first index that lists it (uv's default, said outright: the
    # index pins that guard against the torchtriton attack rely on it).
    args += ["--index-strategy", "first-index"]
    if options.overrides is not None:
        args += ["--override", os.fspath(options.overrides)]
    if options.constraints is not None:
        args += ["--constraint", os.fspath(options.constraints)]
    if options.wheels_only is not None:
        args += ["--only-binary", ":all:", *(arg for name in options.wheels_only for arg in ("--no-binary", name))]
    return args


def keep_log(log: Path, kept: Path) -> Path:
    """Move a failed run's ``log`` out of its scratch folder to ``kept`` (the store's ``logs/``, which
    outlives it) and return ``kept``; a run that wrote no log leaves "(no output)" there."""
    kept.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.replace(log, kept)  # scratch folders and logs/ are in one store: a rename
    except FileNotFoundError:
        kept.write_text("(no output)\n")
    return kept


def git_checked(
    args: Sequence[str | os.PathLike[str]], *, what: str, error: type[EnvlockError], cwd: Path | None = None,
    network: bool = False,
) -> Result:
    """``git(args)``, raising ``error`` (naming ``what``, the command and its output) when it fails."""
    result = git(args, cwd=cwd, network=network)
    if not result.ok:
        raise error(
            f"{what}: `{' '.join(result.argv)}` failed (exit {result.returncode})",  # as run: no password
            details=result.tail(15).splitlines(),
        )
    return result


def git_bytes(
    args: Sequence[str | os.PathLike[str]], *, what: str, error: type[EnvlockError], cwd: Path | None = None
) -> bytes:
    """git's standard output as bytes, raising like ``git_checked``.

    For output that carries file contents (a diff): a file that is not UTF-8 (a Latin-1
    comment, a data table) must keep its bytes, which ``run``'s text decoding would replace.
    """
    given, env = _git_call(args)
    argv = ["git", *given]
    try:
        proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True)
    except FileNotFoundError:
        raise error(f"{what}: git: command not found") from None
    if proc.returncode != 0:
        stderr = proc.stderr.decode("utf-8", "replace").rstrip()
        raise error(f"{what}: `{' '.join(argv)}` failed (exit {proc.returncode})",
                    details=stderr.splitlines()[-15:])
    return proc.stdout


def git(args: Sequence[str | os.PathLike[str]], *, cwd: Path | None = None, network: bool = False) -> Result:
    """Run git with a fixed identity and no user config, so results do not depend on the machine;
    only the transports of ``urlcheck.GIT_TRANSPORTS``, and no password in its command line.
    ``network``: a fetch or ``ls-remote``, held to a transfer's total deadline (``transfers``); its
    minimum rate is every git's ``http.lowSpeedLimit``/``lowSpeedTime``."""
    from envlock import transfers

    given, env = _git_call(args)
    limit = transfers.Limits.configured().total if network else None
    return run(["git", *given], cwd=cwd, env=env, deadline=None if limit is None else (
        limit, f"the most one transfer may take ({transfers.TIMEOUT_VAR}={limit:g})"))


def _git_call(args: Sequence[str | os.PathLike[str]]) -> tuple[list[str], dict[str, str]]:
    """git's arguments and environment: a URL's ``user:password@`` is cut from the arguments (any
    user reads ``/proc/PID/cmdline``) and reaches git as an ``Authorization`` header for that URL's
    origin alone, in git's environment (``GIT_CONFIG_KEY_n``: ``http.<origin>/.extraHeader``)."""
    from urllib.parse import unquote

    from envlock.errors import redact

    argv: list[str] = []
    config: dict[str, str] = {}
    for arg in (str(a) for a in args):
        try:
            parts = urlsplit(arg) if "://" in arg else None
            password = parts.password if parts is not None else None
        except ValueError:
            parts, password = None, None
        if parts is None or password is None:
            argv.append(arg)
            continue
        argv.append(redact(arg))
        if parts.scheme in ("http", "https"):
            import base64

            login = base64.b64encode(f"{unquote(parts.username or '')}:{unquote(password)}".encode()).decode()
            origin = f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}/"
            config[f"http.{origin}.extraHeader"] = f"Authorization: Basic {login}"
    return argv, _git_environ(config)


def _git_environ(extra_config: Mapping[str, str] | None = None) -> dict[str, str]:
    """git's environment: the network's settings, a fixed identity, no user or system config, and
    its configuration in ``GIT_CONFIG_COUNT``/``KEY_n``/``VALUE_n`` after the environment's own (never
    ``-c``, which is argv): the transports git may use (``protocol.allow``, and ``GIT_ALLOW_PROTOCOL``
    over any config; ``fd::``, ``ext::`` and remote helpers refused) and ``extra_config``."""
    from envlock.transfers import Limits
    from envlock.urlcheck import GIT_TRANSPORTS

    env = dict(os.environ)
    env.update(netenv.git_settings(env))  # proxies and CA bundle as git's libcurl reads them
    config = {"protocol.allow": "never", **{f"protocol.{t}.allow": "always" for t in GIT_TRANSPORTS},
              **(extra_config or {})}
    if (limits := Limits.configured()).min_rate:  # a trickle over http(s) ends as envlock's own do
        config.update({"http.lowSpeedLimit": str(limits.min_rate), "http.lowSpeedTime": f"{limits.window:.0f}"})
    given = env.get("GIT_CONFIG_COUNT", "")
    first = int(given) if given.isdigit() else 0  # the environment's own entries stay; the last value wins
    for i, (key, value) in enumerate(config.items(), first):
        env[f"GIT_CONFIG_KEY_{i}"], env[f"GIT_CONFIG_VALUE_{i}"] = key, value
    env["GIT_CONFIG_COUNT"] = str(first + len(config))
    env["GIT_ALLOW_PROTOCOL"] = ":".join(GIT_TRANSPORTS)  # over any config: git's own override
    env.update(
        {
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_AUTHOR_NAME": "envlock",
            "GIT_AUTHOR_EMAIL": "envlock@localhost",
            "GIT_COMMITTER_NAME": "envlock",
            "GIT_COMMITTER_EMAIL": "envlock@localhost",
            "LC_ALL": "C",
        }
    )
    return env
