"""``envlock bisect``: a planted first-bad nightly date and a planted first-bad git revision of a lock are
named in at most ceil(log2 N) + 1 steps, and the env is put back on its generation."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from envlock.commands.bisect import BAD, GOOD, SKIP, _spec_at, search
from envlock.install import generations
from envlock.model.spec import load_spec
from envlock.store.store import Store
from kit.index import IndexServer
from kit.locks import lock_for
from kit.sglike import git
from kit.wheels import build_wheel
from kit.workspaces import Cli, ScratchWorkspace

TAG = "cp311-cp311-manylinux_2_28_x86_64"
DATES = ("20260301", "20260302", "20260303", "20260304", "20260305", "20260306", "20260307", "20260309")
FIRST_BAD = "20260305"
#: Good when torch (the nightly) or alpha (the git case) is not broken.
CHECK = "import sys, importlib; m = importlib.import_module(sys.argv[1]); sys.exit(3 if m.BROKEN else 0)"


@pytest.mark.parametrize(("count", "first_bad"), [(n, k) for n in (2, 3, 5, 8, 13) for k in range(1, n)])
def test_search_names_the_first_bad_within_ceil_log2(count: int, first_bad: int) -> None:
    tried: list[int] = []

    def test(i: int) -> str:
        tried.append(i)
        return BAD if i >= first_bad else GOOD

    assert search(count, test) == (first_bad - 1, first_bad, [])
    assert len(tried) <= math.ceil(math.log2(count - 1)) if count > 2 else tried == []


def test_search_steps_around_skipped_candidates() -> None:
    results = {1: GOOD, 2: SKIP, 3: SKIP, 4: BAD, 5: BAD}
    assert search(7, lambda i: results[i]) == (1, 4, [2, 3])  # 2 or 3 or 4: skipped ones cannot be told
    assert search(7, lambda i: {3: SKIP, 2: GOOD, 4: BAD, 1: GOOD, 5: BAD}[i]) == (2, 4, [3])


def test_the_spec_edit_moves_shared_dates_and_keeps_the_rest(tmp_path: Path) -> None:
    text = ('[env]\npython = "3.11"\n[indexes.pypi]\nurl = "https://pypi.org/simple"\ndefault = true\n'
            '[indexes.pt]\nurl = "https://pt.example/simple"\n[indexes.x]\nurl = "https://x.example/simple"\n'
            '[packages]\n# pinned for SM120\n'
            'torch = { nightly = "2026-03-01", local = "cu130", index = "pt" }  # keep\n'
            'vision = { nightly = "2026-03-01", index = "pt" }\nother = { nightly = "2026-02-01", index = "x", '
            'same-date = false }\n')
    path = tmp_path / "e.toml"
    path.write_text(text)
    spec = load_spec(path)
    assert _spec_at(text, spec, {"2026-03-01"}, "2026-03-05", origin=str(path)) == text.replace(
        "2026-03-01", "2026-03-05")


@pytest.fixture
def nightly_ws(server: IndexServer, ws: ScratchWorkspace, cli: Cli, tmp_path: Path) -> IndexServer:
    server.add_index("pt", hashes=False)
    for date in DATES:
        body = f"BROKEN = {date >= FIRST_BAD}\nDATE = {date!r}\n"
        server.add("pt", build_wheel(tmp_path / "wheels", "torch", f"2.12.0.dev{date}+cu130", tag=TAG,
                                     files={"torch/__init__.py": body}))
    server.add("pypi", build_wheel(tmp_path / "wheels", "tinydep", "1.0"))
    ws.write_spec("e", f'[env]\npython = "3.11"\nplatform = "x86_64-manylinux_2_28"\n'
                       f'[indexes.pypi]\nurl = "{server.url("pypi")}"\ndefault = true\n'
                       f'[indexes.pt]\nurl = "{server.url("pt")}"\n'
                       '[packages]\n# the known-good nightly\n'
                       'torch = { nightly = "2026-03-01", local = "cu130", index = "pt" }\ntinydep = "==1.0"\n')
    assert cli("sync", "e").code == 0
    return server


def test_bisect_over_nightly_dates_names_the_planted_first_bad_date(
        nightly_ws: IndexServer, ws: ScratchWorkspace, cli: Cli) -> None:
    spec, lock = (ws.root / "envs" / "e.toml").read_bytes(), (ws.root / "locks" / "pylock.e.toml").read_bytes()
    store = Store.open()
    before = generations.current_number(store, "e")
    r = cli("bisect", "e", "--nightly", "2026-03-01..2026-03-09", "--json", "--",
            "python", "-c", CHECK, "torch")
    assert r.code == 0, r.err
    report = json.loads(r.out)
    assert report["candidates"] == ["2026-03-01", "2026-03-02", "2026-03-03", "2026-03-04", "2026-03-05",
                                    "2026-03-06", "2026-03-07", "2026-03-09"]
    assert (report["last_good"], report["first_bad"]) == ("2026-03-04", "2026-03-05")
    assert 1 <= len(report["steps"]) <= math.ceil(math.log2(len(DATES))) + 1
    assert {s["result"] for s in report["steps"]} <= {"good", "bad"}
    assert all(s["exit_code"] == (3 if s["result"] == "bad" else 0) for s in report["steps"])
    changes = {(c["kind"], c["name"]): (c["old"], c["new"]) for c in report["diff"]["changes"]}
    assert changes[("nightly", "torch")] == ("2026-03-04", "2026-03-05")
    assert changes[("package", "torch")] == ("2.12.0.dev20260304+cu130", "2.12.0.dev20260305+cu130")
    assert report["restored"] == before == generations.current_number(store, "e")
    # The workspace's spec and lock were never written.
    assert (ws.root / "envs" / "e.toml").read_bytes() == spec
    assert (ws.root / "locks" / "pylock.e.toml").read_bytes() == lock
    # Text: one line per step, then the culprit and what it changed.
    again = cli("bisect", "e", "--nightly", "2026-03-01..2026-03-09", "--", "python", "-c", CHECK, "torch")
    assert again.code == 0, again.err
    assert "first bad: 2026-03-05 (last good: 2026-03-04)" in again.out.splitlines()
    assert f"env e is back on generation {before}" in again.out.splitlines()


@pytest.fixture
def git_ws(server: IndexServer, ws: ScratchWorkspace, cli: Cli, tmp_path: Path) -> list[str]:
    """Seven revisions of locks/pylock.demo.toml (alpha 1..7; 5 and later broken), with other commits between."""
    lock = ws.root / "locks" / "pylock.demo.toml"
    git(ws.root, "init", "-q")
    revs = []
    for n in range(1, 8):
        wheel = build_wheel(tmp_path / "wheels", "alpha", f"{n}.0",
                            files={"alpha/__init__.py": f"BROKEN = {n >= 5}\n"})
        server.add("pypi", wheel)
        lock.write_text(lock_for(server, "pypi", [wheel]).to_toml())
        git(ws.root, "add", "-A")
        git(ws.root, "commit", "-qm", f"alpha {n}")
        revs.append(git(ws.root, "rev-parse", "HEAD"))
        (ws.root / "README").write_text(f"unrelated {n}\n")
        git(ws.root, "add", "-A")
        git(ws.root, "commit", "-qm", f"docs {n}")
    assert cli("sync", "demo", "--lock", f"{lock}@{revs[0]}").code == 0
    return revs


def test_bisect_over_git_revisions_names_the_planted_culprit(git_ws: list[str], ws: ScratchWorkspace, cli: Cli) -> None:
    store = Store.open()
    before = generations.current_number(store, "demo")
    r = cli("bisect", "demo", "--good", git_ws[0], "--bad", "HEAD", "--json", "--", "python", "-c", CHECK,
            "alpha")
    assert r.code == 0, r.err
    report = json.loads(r.out)
    assert report["candidates"] == [rev[:12] for rev in git_ws]
    assert (report["last_good"], report["first_bad"]) == (git_ws[3][:12], git_ws[4][:12])
    assert len(report["steps"]) <= math.ceil(math.log2(len(git_ws))) + 1
    assert all(s["lock"] == f"locks/pylock.demo.toml@{s['candidate']}" for s in report["steps"])
    changes = {(c["kind"], c["name"]): (c["old"], c["new"]) for c in report["diff"]["changes"]}
    assert changes[("package", "alpha")][:2] == ("4.0", "5.0")
    assert report["restored"] == before == generations.current_number(store, "demo")


def test_a_command_that_cannot_run_stops_the_bisect_and_restores_the_env(
        git_ws: list[str], cli: Cli) -> None:
    store = Store.open()
    before = generations.current_number(store, "demo")
    r = cli("bisect", "demo", "--good", git_ws[0], "--bad", git_ws[-1], "--", "no-such-command-here")
    assert r.code == 127
    assert r.err.endswith("envlock: error: no-such-command-here: command not found (in the env or on PATH); "
                          "the bisect stopped\n")
    assert generations.current_number(store, "demo") == before


@pytest.mark.parametrize(("args", "message"), [
    (["--nightly", "2026-03-01..2026-03-09", "--good", "x", "--", "true"],
     "envlock bisect: give either --good REV --bad REV, or --nightly DATE..DATE"),
    (["--good", "x", "--"], "envlock bisect ENV ... -- CMD...: no command given after `--`"),
    (["--nightly", "2026-03-09..2026-03-01", "--", "true"],
     "--nightly 2026-03-09..2026-03-01: expected the good date before the bad one"),
    (["--every", "--", "true"], "envlock bisect e --every ...: not an option of bisect (--good REV --bad REV, "
                                "--nightly DATE..DATE, --index NAME=URL, --source NAME=URL, --target NAME, --json, "
                                "-q); the command goes after `--`"),
    (["--nightly", "2026-3-1..2026-03-09", "--", "true"],
     "--nightly 2026-3-1..2026-03-09: expected FROM..TO, two dates YYYY-MM-DD (good, then bad)"),
])
def test_bisect_usage_errors(ws: ScratchWorkspace, cli: Cli, args: list[str], message: str) -> None:
    r = cli("bisect", "e", *args)
    assert r.code == 2
    assert r.err == f"envlock: error: {message}\n"


def test_a_bisect_whose_every_step_was_skipped_exits_cannot_tell(git_ws: list[str], cli: Cli) -> None:
    """git bisect's "cannot tell": every candidate tried between the ends was skipped (CMD exits 125)."""
    r = cli("bisect", "demo", "--good", git_ws[0], "--bad", git_ws[-1], "--", "python", "-c", "raise SystemExit(125)")
    assert r.code == 125, r.err
    steps = [line for line in r.out.splitlines() if line.startswith("  ") and ": skip (exit 125)" in line]
    maybe = ", ".join(rev[:12] for rev in git_ws[1:])
    assert len(steps) == len(git_ws) - 2
    assert f"first bad is one of: {maybe} (every candidate tried was skipped; exit 125: cannot tell)" in r.out
    doc = json.loads(cli("bisect", "demo", "--good", git_ws[0], "--bad", git_ws[-1], "--json", "--", "python", "-c",
                         "raise SystemExit(125)").out)
    assert (doc["found"], doc["first_bad"], doc["maybe"]) == (False, git_ws[-1][:12], [r[:12] for r in git_ws[1:-1]])
