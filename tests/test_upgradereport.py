"""The upgrade report (``reporting.upgrade_report``, ``envlock diff``): a nightly move, a source
moving three commits on a real git repository, a non-isolated build that rebuilds because torch
moved and an isolated one that does not, package changes with their reasons, sizes, and the three
formats."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from envlock.build import sources
from envlock.cli.upgradereport import render_markdown, render_text
from envlock.commands.upgradereport import ReportOptions, UpgradeReport, upgrade_report
from envlock.install.fetch import fetch
from envlock.model.lockfile import Artifact, Lock, LockedBuild, LockedPackage, LockedPatch, LockedSource, NightlyPin
from envlock.store.store import Store
from envlock.workspace import Workspace
from kit.index import IndexServer
from kit.locks import lock_for
from kit.sglike import commit_all, init_repo, write
from kit.wheels import build_wheel
from kit.workspaces import Cli, ScratchWorkspace

OLD, NEW = "20260307", "20260308"
CU = "+cu130"


@dataclass
class Kit:
    server: IndexServer
    wheels: dict[str, Path]  # "name==version" -> wheel

    def lock(self, index: str, *pins: str) -> Lock:
        return lock_for(self.server, index, [self.wheels[p] for p in pins], env="demo")


@pytest.fixture(scope="module")
def kit(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kit]:
    root = tmp_path_factory.mktemp("report-index")
    server = IndexServer(root / "served")
    w = root / "wheels"
    made: dict[str, Path] = {}

    def add(index: str, name: str, version: str, requires: tuple[str, ...] = ()) -> None:
        made[f"{name}=={version}"] = build_wheel(w, name, version, requires=requires)
        server.add(index, made[f"{name}=={version}"])

    add("pytorch", "pytorch-triton", "3.5.0")
    add("pytorch", "pytorch-triton", "3.6.0")
    add("pytorch", "torch", f"2.12.0.dev{OLD}{CU}", ("pytorch-triton==3.5.0",))
    add("pytorch", "torch", f"2.12.0.dev{NEW}{CU}", ("pytorch-triton==3.6.0", "tritondep"))
    for date in (OLD, NEW):
        add("pytorch", "torchvision", f"0.27.0.dev{date}{CU}", (f"torch==2.12.0.dev{date}{CU}",))
        add("pytorch", "torchaudio", f"2.11.0.dev{date}{CU}", (f"torch==2.12.0.dev{date}{CU}",))
    for name, version in (("tinydep", "1.0"), ("tritondep", "1.0"), ("newdep", "1.0"), ("sgl-fa4", "4.0.3"),
                          ("flashinfer-python", "0.6.4"), ("flashinfer-python", "0.6.5")):
        add("pypi", name, version)
    server.start()
    yield Kit(server, made)
    server.stop()


@dataclass
class Upstream:
    repo: Path
    pin: str
    table: str  # touches the patched file
    readme: str  # touches nothing the patches touch
    head: str  # adds a dependency to python/pyproject.toml


def make_upstream(root: Path) -> Upstream:
    repo = root / "upstream"
    init_repo(repo)
    write(repo, {"python/pyproject.toml": '[project]\nname = "pkg"\nversion = "1.0"\ndependencies = ["tinydep"]\n',
                 "python/pkg/table.py": "SIZES = {9: 1, 10: 2}\n", "kern/kern.c": "int k(void) { return 1; }\n",
                 # As sgl-kernel: torch is a build requirement of the project, not of the spec.
                 "kern/pyproject.toml": '[build-system]\nrequires = ["scikit-build-core>=0.10", "torch>=2.8"]\n',
                 "README.md": "upstream\n"})
    pin = commit_all(repo, "initial", date="2026-03-07T10:00:00+00:00")
    (repo / "python/pkg/table.py").write_text("SIZES = {9: 1, 10: 2, 11: 3}\n")
    table = commit_all(repo, "table: add 11", date="2026-03-08T10:00:00+00:00")
    (repo / "README.md").write_text("upstream, moved\n")
    readme = commit_all(repo, "docs: readme", date="2026-03-09T10:00:00+00:00")
    (repo / "python/pyproject.toml").write_text(
        '[project]\nname = "pkg"\nversion = "1.0"\ndependencies = ["tinydep", "newdep>=1.0"]\n')
    head = commit_all(repo, "deps: newdep", date="2026-03-10T10:00:00+00:00")
    return Upstream(repo, pin, table, readme, head)


PATCH = """\
diff --git a/python/pkg/table.py b/python/pkg/table.py
--- a/python/pkg/table.py
+++ b/python/pkg/table.py
@@ -1 +1 @@
-SIZES = {9: 1, 10: 2}
+SIZES = {9: 1, 10: 2, 12: 2}
"""


def spec(kit: Kit, up: Upstream) -> str:
    return f"""
[env]
python = "3.12"
[indexes.pypi]
url = "{kit.server.url('pypi')}"
default = true
[indexes.pytorch-nightly]
url = "{kit.server.url('pytorch')}"
[packages]
torch = {{ nightly = "2026-03-08", local = "cu130", index = "pytorch-nightly" }}
torchvision = {{ nightly = "2026-03-08", local = "cu130", index = "pytorch-nightly" }}
torchaudio = {{ nightly = "2026-03-08", local = "cu130", index = "pytorch-nightly" }}
pytorch-triton = {{ index = "pytorch-nightly" }}
flashinfer-python = ">=0.6"
pkg = {{ build = "pkg" }}
kern = {{ build = "kern" }}
isokern = {{ build = "isokern" }}
[sources.src]
git = "{up.repo}"
rev = "{up.head}"
patches = ["patches/src/0001-table.patch"]
[sources.iso]
path = "iso"
[builds.pkg]
source = "src"
subdirectory = "python"
[builds.kern]
source = "src"
subdirectory = "kern"
isolation = false
requires = ["scikit-build-core>=0.10"]
[builds.isokern]
source = "iso"
[resolution]
overrides = ["flashinfer-python==0.6.5"]
exclude = ["sgl-fa4"]
"""


def _build(char: str) -> LockedBuild:
    return LockedBuild(f"sha256:{char * 64}", f"x-{char}.whl", char * 64)


def _local(name: str, char: str, size: int) -> LockedPackage:
    return LockedPackage(name, "1.0", (Artifact(char * 64, path=f"../wheelhouse/{name}-1.0-py3-none-any.whl",  # type: ignore[arg-type]
                                                size=size),))


def make_locks(kit: Kit, up: Upstream) -> tuple[Lock, Lock]:
    torch_old = kit.lock("pytorch", f"torch==2.12.0.dev{OLD}{CU}", f"torchvision==0.27.0.dev{OLD}{CU}",
                         f"torchaudio==2.11.0.dev{OLD}{CU}", "pytorch-triton==3.5.0")
    torch_new = kit.lock("pytorch", f"torch==2.12.0.dev{NEW}{CU}", f"torchvision==0.27.0.dev{NEW}{CU}",
                         f"torchaudio==2.11.0.dev{NEW}{CU}", "pytorch-triton==3.6.0")
    pypi_old = kit.lock("pypi", "tinydep==1.0", "sgl-fa4==4.0.3", "flashinfer-python==0.6.4")
    pypi_new = kit.lock("pypi", "tinydep==1.0", "tritondep==1.0", "newdep==1.0", "flashinfer-python==0.6.5")
    keys = {"builds.pkg": "1", "builds.kern": "2", "builds.isokern": "3", "env": "4"}
    iso = LockedSource("path", "iso", tree_digest="sha256:" + "5" * 64)

    def src(commit: str, patch: str) -> LockedSource:
        return LockedSource("git", str(up.repo), commit=commit, patches=(LockedPatch("patches/src/0001-table.patch",
                                                                                    patch * 64),))

    def nightlies(date: str) -> dict[str, NightlyPin]:
        return {"torch": NightlyPin(f"{date[:4]}-{date[4:6]}-{date[6:]}", f"2.12.0.dev{date}{CU}"),
                "torchvision": NightlyPin(f"{date[:4]}-{date[4:6]}-{date[6:]}", f"0.27.0.dev{date}{CU}"),
                "torchaudio": NightlyPin(f"{date[:4]}-{date[4:6]}-{date[6:]}", f"2.11.0.dev{date}{CU}")}

    old = replace(torch_old, packages=tuple(sorted(
        [*torch_old.packages, *pypi_old.packages, _local("pkg", "a", 1000), _local("kern", "b", 4000),
         _local("isokern", "c", 500)], key=lambda p: p.name)),
        spec_keys={**keys, "resolution": "6"}, nightlies=nightlies(OLD),
        sources={"src": src(up.pin, "7"), "iso": iso},
        builds={"pkg": _build("a"), "kern": _build("b"), "isokern": _build("c")})
    new = replace(torch_new, packages=tuple(sorted(
        [*torch_new.packages, *pypi_new.packages, _local("isokern", "c", 500)], key=lambda p: p.name)),
        spec_keys={**keys, "resolution": "8"}, nightlies=nightlies(NEW),
        sources={"src": src(up.head, "9"), "iso": iso}, builds={"isokern": _build("c")})
    return old, new


#: The workspace (envlock's view of it), its upstream repository, the old and new lock, the store after syncs of both.
Scene = tuple[Workspace, Upstream, Lock, Lock, Store]


@pytest.fixture
def scene(kit: Kit, ws: ScratchWorkspace, tmp_path: Path) -> Scene:
    up = make_upstream(tmp_path)
    ws.write_spec("demo", spec(kit, up))
    (ws.root / "patches" / "src").mkdir(parents=True)
    (ws.root / "patches" / "src" / "0001-table.patch").write_text(PATCH)
    old, new = make_locks(kit, up)
    store = Store.open()
    # What a sync of each lock leaves in the store: its wheels (the metadata says who requires whom)
    # and the pinned commits in the source's mirror (fetched alone: no history between them).
    for lock in (old, new):
        fetch([p.wheels[0] for p in lock.packages if p.wheels[0].url], store, base_dir=ws.root / "locks")
        assert lock.sources["src"].commit is not None
        sources.checkout(store, str(up.repo), lock.sources["src"].commit, fetch_from=f"file://{up.repo}")
    return Workspace(ws.root), up, old, new, store


def test_the_report_names_every_move_and_its_cause(scene: Scene) -> None:
    ws, up, old, new, store = scene
    report = upgrade_report(ws, old, new, old_label="old", new_label="new", store=store,
                            options=ReportOptions(fetch=True))
    assert report.notes == ()
    d = report.diff
    assert [n.line() for n in d.nightlies] == [
        "pytorch-nightly 2026-03-07 -> 2026-03-08: torch, torchvision, torchaudio, pytorch-triton 3.5.0 -> 3.6.0"]
    (move,) = [s for s in d.sources if s.name == "src"]
    h = move.history
    assert h is not None and h.first is not None and h.last is not None
    assert (h.direction, h.count, h.first, h.last) == ("forward", 3, replace(h.first, sha=up.table),
                                                      replace(h.last, sha=up.head))
    assert (h.first.date, h.last.date, h.paths) == ("2026-03-08", "2026-03-10", ("python/pkg/table.py",))
    # Only the commit touching the patched file: not the readme's, not the dependency's.
    assert [(c.sha, c.date, c.subject) for c in h.touching] == [(up.table, "2026-03-08", "table: add 11")]
    verdicts = {b.name: b.text() for b in d.builds}
    pin, head = up.pin[:12], up.head[:12]
    assert verdicts == {
        "isokern": "isokern: inputs unchanged",
        "kern": f"kern: source src {pin} -> {head} (kern/ unchanged; its commit time moved (SOURCE_DATE_EPOCH)); "
                "pytorch-triton 3.5.0 -> 3.6.0; torch 2.12.0.dev20260307+cu130 -> 2.12.0.dev20260308+cu130; "
                "tritondep 1.0 (added); pending: not built for this lock yet",
        "pkg": f"pkg: source src {pin} -> {head} (python/ changed); patch patches/src/0001-table.patch changed; "
               "pending: not built for this lock yet",
    }
    assert {b.name: (b.rebuild, b.pending) for b in d.builds} == {
        "isokern": (False, False), "kern": (True, True), "pkg": (True, True)}
    why = {p.name: (p.action, p.why) for p in d.packages}
    assert why == {
        "flashinfer-python": ("changed", ("resolution.overrides: flashinfer-python==0.6.5 (resolution edited)",)),
        "kern": ("pending", ("local build from source src; not built for this lock yet",)),
        "newdep": ("added", ("pkg's own requirements now name it: newdep>=1.0",)),
        "pkg": ("pending", ("local build from source src; not built for this lock yet",)),
        "pytorch-triton": ("changed", ("required by torch, which moved",)),
        "sgl-fa4": ("removed", ("resolution.exclude names it",)),
        "torch": ("changed", ("nightly 2026-03-07 -> 2026-03-08",)),
        "torchaudio": ("changed", ("nightly 2026-03-07 -> 2026-03-08",)),
        "torchvision": ("changed", ("nightly 2026-03-07 -> 2026-03-08",)),
        "tritondep": ("added", ("required by torch",)),
    }
    assert d.old_size.known == sum(pkg.wheels[0].size or 0 for pkg in old.packages)
    assert d.new_size.known == sum(pkg.wheels[0].size or 0 for pkg in new.packages)
    assert (d.old_size.unknown, d.new_size.unknown) == ((), ("kern", "pkg"))
    assert report.notes == ()


def test_a_mirror_without_the_history_is_said_with_how_to_fetch_it(scene: Scene, cli: Cli) -> None:
    ws, up, old, new, _ = scene
    (ws.root / "locks" / "old.toml").write_text(old.to_toml())
    (ws.root / "locks" / "new.toml").write_text(new.to_toml())
    r = cli("diff", "locks/old.toml", "locks/new.toml")
    assert r.code == 0, r.err
    lines = r.out.splitlines()
    i = lines.index("sources:")
    assert lines[i + 1:i + 3] == [
        f"  src {up.pin[:12]} -> {up.head[:12]}: history unknown: the store's mirror of {up.repo} holds the two "
        "commits but not the history between them (it fetches pinned commits only); `envlock diff OLD NEW "
        "--fetch` fetches it into the store",
        "    patch patches/src/0001-table.patch changed",
    ]
    # The build verdicts and the source's own requirements stand without the history: the mirror
    # holds both trees.
    assert f"  rebuild kern: source src {up.pin[:12]} -> {up.head[:12]} (kern/ unchanged; its commit time moved " \
           "(SOURCE_DATE_EPOCH)); pytorch-triton 3.5.0 -> 3.6.0; torch 2.12.0.dev20260307+cu130 -> " \
           "2.12.0.dev20260308+cu130; tritondep 1.0 (added); pending: not built for this lock yet" in lines
    assert "  no rebuild isokern: inputs unchanged" in lines
    assert "  + newdep 1.0 [886 B]  (pkg's own requirements now name it: newdep>=1.0)" in lines
    r = cli("diff", "locks/old.toml", "locks/new.toml", "--fetch")
    assert r.code == 0, r.err
    lines = r.out.splitlines()
    i = lines.index("sources:")
    assert lines[i + 1:i + 5] == [
        f"  src {up.pin[:12]} -> {up.head[:12]}: 3 commits, 2026-03-08 .. 2026-03-10",
        "    1 commit touching files the patches touch:",
        f"      {up.table[:12]} 2026-03-08 table: add 11",
        "    patch patches/src/0001-table.patch changed",
    ]
    doc = json.loads(cli("diff", "locks/old.toml", "locks/new.toml", "--format", "json").out)
    assert doc == json.loads(cli("diff", "locks/old.toml", "locks/new.toml", "--json").out)
    assert sorted(doc) == ["builds", "changes", "download", "format", "new", "nightlies", "notes", "old",
                           "packages", "sources", "unchanged_packages", "yanked"]
    assert doc["format"] == 1
    assert sorted(doc["nightlies"][0]) == ["index", "new_date", "old_date", "others", "pins"]
    assert sorted(doc["sources"][0]) == ["history", "name", "new", "old", "patches"]
    assert sorted(doc["sources"][0]["history"]) == ["count", "direction", "first", "last", "missing",
                                                    "patched_files", "touching_patched_files"]
    assert doc["sources"][0]["history"]["touching_patched_files"] == [
        {"sha": up.table, "date": "2026-03-08", "subject": "table: add 11"}]
    kern = next(b for b in doc["builds"] if b["name"] == "kern")
    assert sorted(kern) == ["action", "inputs", "name", "new_input_digest", "old_input_digest", "pending", "rebuild",
                            "renamed"]
    assert [(i["kind"], i["name"]) for i in kern["inputs"]] == [
        ("source", "src"), ("package", "pytorch-triton"), ("package", "torch"), ("package", "tritondep")]
    assert sorted(kern["inputs"][2]) == ["kind", "name", "new", "note", "old", "text"]
    assert sorted(doc["packages"][0]) == ["action", "name", "new", "new_size", "old", "old_size", "why"]
    assert sorted(doc["download"]["new"]) == ["bytes", "unknown"]
    assert doc["download"]["new"]["unknown"] == ["kern", "pkg"]


def _small(kit: Kit) -> tuple[Lock, Lock]:
    old = kit.lock("pytorch", f"torch==2.12.0.dev{OLD}{CU}", "pytorch-triton==3.5.0")
    new = kit.lock("pytorch", f"torch==2.12.0.dev{NEW}{CU}", "pytorch-triton==3.6.0")
    old = replace(old, nightlies={"torch": NightlyPin("2026-03-07", f"2.12.0.dev{OLD}{CU}")})
    new = replace(new, nightlies={"torch": NightlyPin("2026-03-08", f"2.12.0.dev{NEW}{CU}")})
    # Sizes fixed for the exact text (the wheels' own vary with zip compression).
    sized = [replace(lock, packages=tuple(replace(p, wheels=(replace(p.wheels[0], size=sizes[p.name]),))
                                          for p in lock.packages))
             for lock, sizes in ((old, {"torch": 1_500_000, "pytorch-triton": 800_000_000}),
                                 (new, {"torch": 1_600_000, "pytorch-triton": 812_000_000}))]
    return sized[0], sized[1]


def test_markdown_is_a_block_for_a_pull_request(kit: Kit, tmp_path: Path) -> None:
    old, new = _small(kit)
    report = upgrade_report(None, old, new, old_label="locks/pylock.demo.toml@HEAD", new_label="locks/pylock.demo.toml",
                            store=Store.open(tmp_path / "empty-home", create=False))
    url = kit.server.url("pytorch")
    assert render_markdown(report) == f"""\
### envlock: `locks/pylock.demo.toml@HEAD` -> `locks/pylock.demo.toml`

#### Nightlies

- {url} 2026-03-07 -> 2026-03-08: torch, pytorch-triton 3.5.0 -> 3.6.0

#### Packages (2 changed; 0 identical)

| package | before | after | size before | size after | why |
|---|---|---|---|---|---|
| pytorch-triton | 3.5.0 | 3.6.0 | 800.0 MB | 812.0 MB |  |
| torch | 2.12.0.dev20260307+cu130 | 2.12.0.dev20260308+cu130 | 1.5 MB | 1.6 MB | nightly 2026-03-07 -> 2026-03-08 |

**Download size:** 801.5 MB -> 813.6 MB (+12.1 MB)

<details>
<summary>Every change (3)</summary>

```text
~ package  pytorch-triton: 3.5.0 -> 3.6.0
~ package  torch: 2.12.0.dev20260307+cu130 -> 2.12.0.dev20260308+cu130
~ nightly  torch: 2026-03-07 -> 2026-03-08  (2.12.0.dev20260307+cu130 -> 2.12.0.dev20260308+cu130)
```

</details>"""
    assert render_text(report).splitlines()[:8] == [
        "--- locks/pylock.demo.toml@HEAD",
        "+++ locks/pylock.demo.toml",
        "nightlies:",
        f"  {url} 2026-03-07 -> 2026-03-08: torch, pytorch-triton 3.5.0 -> 3.6.0",
        "packages:",
        "  ~ pytorch-triton 3.5.0 -> 3.6.0 [800.0 MB -> 812.0 MB]",
        "  ~ torch 2.12.0.dev20260307+cu130 -> 2.12.0.dev20260308+cu130 [1.5 MB -> 1.6 MB]  (nightly 2026-03-07 -> "
        "2026-03-08)",
        "download: 801.5 MB -> 813.6 MB (+12.1 MB)",
    ]


def test_markdown_puts_commit_subjects_in_details_and_escapes_them() -> None:
    from envlock.model.lockdiff import Commit, LockDiff, SourceHistory, SourceMove

    history = SourceHistory("forward", 2, Commit("a" * 40, "2026-03-08", "one"), Commit("b" * 40, "2026-03-09", "x"),
                            (Commit("b" * 40, "2026-03-09", "fix <T> | pipes"),), ("python/t.py",))
    diff = LockDiff("a", "b", (), 0, sources=(SourceMove("src", "1" * 40, "2" * 40, (), history),))
    # A ledger with no change renders "no differences"; give it one so the sections show.
    from envlock.model.lockchanges import Change

    diff = replace(diff, changes=(Change("source", "src", "1" * 40, "2" * 40),))
    text = render_markdown(UpgradeReport(diff))
    assert text.split("#### Sources\n\n")[1].split("\n\n**Download")[0] == (
        "- src 111111111111 -> 222222222222: 2 commits, 2026-03-08 .. 2026-03-09\n"
        "  <details>\n"
        "  <summary>1 commit touching files the patches touch</summary>\n"
        "\n"
        "  - `bbbbbbbbbbbb` 2026-03-09 fix &lt;T> \\| pipes\n"
        "\n"
        "  </details>"
    )


def test_a_commit_that_is_no_commit_is_never_handed_to_git(scene: Scene, tmp_path: Path) -> None:
    ws, _, old, new, store = scene
    written = tmp_path / "pwned"
    hostile = replace(new, sources={**new.sources, "src": replace(new.sources["src"], commit=f"--output={written}")})
    report = upgrade_report(ws, old, hostile, old_label="old", new_label="new", store=store,
                            options=ReportOptions(fetch=True))
    (move,) = [s for s in report.diff.sources if s.name == "src"]
    assert move.history is not None
    assert (move.history.direction, move.history.missing) == (
        "unknown", f"'--output={written}' is not a full 40-hex commit; the history is not read")
    assert not written.exists()


def test_format_json_errors_are_a_document(ws: ScratchWorkspace, cli: Cli) -> None:
    r = cli("diff", "locks/nope.toml", "locks/nope.toml", "--format", "json")
    assert r.code == 2
    assert json.loads(r.out) == {"error": {"kind": "LockError", "message": f"locks/nope.toml: no such lock file "
                                           f"({ws.root / 'locks' / 'nope.toml'})", "details": [], "exit_code": 2}}


def test_a_store_without_the_mirror_says_so_and_the_diff_stands(scene: Scene, tmp_path: Path) -> None:
    ws, up, old, new, _ = scene
    report = upgrade_report(ws, old, new, old_label="old", new_label="new",
                            store=Store.open(tmp_path / "other-home", create=False))
    (move,) = [s for s in report.diff.sources if s.name == "src"]
    assert move.history is not None
    assert (move.history.direction, move.history.missing) == (
        "unknown", f"the store has no git mirror of {up.repo}, so no history; `envlock diff OLD NEW --fetch` "
                   "fetches it into the store")
    assert not (tmp_path / "other-home").exists()  # a report reads; it made no store
    # Nor the project's [build-system] (torch) nor wheel metadata: no package named, the rebuild still said.
    kern = next(b for b in report.diff.builds if b.name == "kern")
    assert (kern.rebuild, [(i.kind, i.name) for i in kern.inputs]) == (True, [("source", "src")])
    # The old build's recipe, kept in the store with its wheel, names what its build venv held.
    other = Store.open(tmp_path / "other-home")
    with other.new_entry("builds", old.builds["kern"].input_digest.removeprefix("sha256:")) as work:
        (work / "recipe.json").write_text(json.dumps({"build-env": {
            "env-packages": [f"torch==2.12.0.dev{OLD}{CU} sha256:{'0' * 64}"], "requirements": []}}))
    report = upgrade_report(ws, old, new, old_label="old", new_label="new", store=other)
    kern = next(b for b in report.diff.builds if b.name == "kern")
    assert [(i.kind, i.name) for i in kern.inputs] == [("source", "src"), ("package", "torch")]
