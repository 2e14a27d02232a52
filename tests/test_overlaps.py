"""``[resolution] allow-overlap``: one exact path two named distributions may both install, with a reason.

Shaped like the flagship's case: ``flashinfer-python`` 0.6.5 and ``torch-c-dlpack-ext`` 0.1.5 (pulled
in by ``quack-kernels``) both install a top-level ``build_backend.py`` with different bytes. The
guard accepts that path for that pair only (never a prefix, a folder or a glob), the lock records
the allowance, the venv keeps the first named distribution's bytes, and an allowance that accepts
nothing any more is noted.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from envlock.model import overlaps
from envlock.model.lockfile import read_lock
from envlock.model.overlaps import AllowedOverlap
from kit.index import IndexServer
from kit.wheels import build_wheel
from kit.workspaces import Cli, ScratchWorkspace

FLASHINFER_BACKEND = "# flashinfer's in-tree PEP 517 backend\n"
DLPACK_BACKEND = "# torch-c-dlpack-ext's in-tree PEP 517 backend\n"
REASON = "both ship their in-tree PEP 517 backend; nothing imports it at run time"


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IndexServer]:
    root = tmp_path_factory.mktemp("overlaps")
    server = IndexServer(root / "served")
    wheels = root / "wheels"
    server.add("pypi", build_wheel(wheels, "flashinfer-python", "0.6.5", files={
        "flashinfer/__init__.py": "", "build_backend.py": FLASHINFER_BACKEND, "shared/util.py": "A = 1\n"}))
    server.add("pypi", build_wheel(wheels, "quack-kernels", "0.2.0", requires=["torch-c-dlpack-ext==0.1.5"]))
    server.add("pypi", build_wheel(wheels, "torch-c-dlpack-ext", "0.1.5", files={
        "torch_c_dlpack_ext/__init__.py": "", "build_backend.py": DLPACK_BACKEND}))
    # A later release that no longer ships it.
    server.add("pypi", build_wheel(wheels, "torch-c-dlpack-ext", "0.1.6", files={"torch_c_dlpack_ext/__init__.py": ""}))
    server.add("pypi", build_wheel(wheels, "other", "1.0", files={"other/__init__.py": "", "shared/util.py": "B\n"}))
    server.start()
    yield server
    server.stop()


def spec_text(index: IndexServer, allow: str = "", packages: str = "", extra: str = "") -> str:
    return f"""
[env]
python = "3.11"
platform = "x86_64-manylinux_2_28"
[indexes.pypi]
url = "{index.url('pypi')}"
default = true
[packages]
flashinfer-python = "==0.6.5"
quack-kernels = "==0.2.0"   # requires torch-c-dlpack-ext==0.1.5
{packages}
[resolution]
{extra}
allow-overlap = [{allow}]
"""


ALLOW = f'{{ path = "build_backend.py", packages = ["flashinfer-python", "torch-c-dlpack-ext"], reason = "{REASON}" }}'


def test_an_overlap_is_refused_with_the_allowance_that_would_accept_it_named(
        ws: ScratchWorkspace, cli: Cli, index: IndexServer) -> None:
    spec = ws.write_spec("e", spec_text(index))
    r = cli("lock", "e")
    assert r.code == 1
    assert r.err == (
        f"envlock: error: {spec}: flashinfer-python and torch-c-dlpack-ext install the same files with different "
        "bytes; the one installed last would overwrite the other's, so nothing is locked\n"
        "  flashinfer-python 0.6.5 and torch-c-dlpack-ext 0.1.5 both install build_backend.py (1 file, different "
        "bytes)\n"
        "    flashinfer-python 0.6.5: declared in [packages]\n"
        "    torch-c-dlpack-ext 0.1.5: pulled in by quack-kernels -> torch-c-dlpack-ext\n"
        '    fix: resolution.exclude = ["torch-c-dlpack-ext"] in e.toml, for the one the env does not need; or, if '
        'the shared file is harmless, resolution.allow-overlap = [{ path = "build_backend.py", packages = '
        '["flashinfer-python", "torch-c-dlpack-ext"], reason = "..." }]\n')


def test_the_allowance_accepts_that_path_for_that_pair_is_locked_and_the_venv_keeps_the_first(
        ws: ScratchWorkspace, cli: Cli, index: IndexServer) -> None:
    ws.write_spec("e", spec_text(index, ALLOW))
    r = cli("lock", "e")
    assert (r.code, "note:" in r.out) == (0, False), r.err
    lock = read_lock(ws.root / "locks" / "pylock.e.toml")
    assert lock.allowed_overlaps == (AllowedOverlap("build_backend.py", ("flashinfer-python", "torch-c-dlpack-ext"),
                                                    REASON),)
    text = ws.lock_text("e")
    assert ('allowed-overlaps = [\n    { path = "build_backend.py", packages = ["flashinfer-python", '
            f'"torch-c-dlpack-ext"], reason = "{REASON}" }},\n]\n') in text
    # A relock of the same wheels reads no file list (the guard's record) and gives the same bytes.
    assert cli("lock", "e").code == 0
    assert ws.lock_text("e") == text
    # The venv holds the first named distribution's bytes, whatever order uv wrote them in.
    r = cli("-q", "sync", "e")
    assert r.code == 0, r.err
    venv = Path(r.out.strip().splitlines()[-1])
    (site,) = venv.glob("lib/python*/site-packages")
    assert (site / "build_backend.py").read_text() == FLASHINFER_BACKEND
    assert cli("verify", "e").code == 0
    ws.write_spec("e", spec_text(index, ALLOW.replace('["flashinfer-python", "torch-c-dlpack-ext"]',
                                                      '["torch-c-dlpack-ext", "flashinfer-python"]')))
    r = cli("-q", "sync", "e")
    assert r.code == 0, r.err
    (site,) = Path(r.out.strip().splitlines()[-1]).glob("lib/python*/site-packages")
    assert (site / "build_backend.py").read_text() == DLPACK_BACKEND
    # Without the allowance, the record of the wheels checked before still knows the overlap: refused.
    ws.write_spec("e", spec_text(index))
    r = cli("lock", "e")
    assert r.code == 1 and "both install build_backend.py (1 file, different bytes)" in r.err


@pytest.mark.parametrize(("allow", "why"), [
    ('{ path = "build_backend.py", packages = ["flashinfer-python", "other"], reason = "r" }', "another pair"),
    ('{ path = "build", packages = ["flashinfer-python", "torch-c-dlpack-ext"], reason = "r" }', "a prefix"),
    ('{ path = "Build_Backend.py", packages = ["flashinfer-python", "torch-c-dlpack-ext"], reason = "r" }', "case"),
])
def test_an_allowance_for_another_path_or_pair_accepts_nothing(
        ws: ScratchWorkspace, cli: Cli, index: IndexServer, allow: str, why: str) -> None:
    ws.write_spec("e", spec_text(index, allow, packages='other = "==1.0"') if "other" in allow
                  else spec_text(index, allow))
    r = cli("lock", "e")
    assert r.code == 1, why
    assert "flashinfer-python 0.6.5 and torch-c-dlpack-ext 0.1.5 both install build_backend.py" in r.err


def test_an_allowance_that_accepts_nothing_any_more_is_noted(
        ws: ScratchWorkspace, cli: Cli, index: IndexServer) -> None:
    ws.write_spec("e", spec_text(index, ALLOW, packages='torch-c-dlpack-ext = "==0.1.6"',
                                 extra='overrides = ["torch-c-dlpack-ext==0.1.6"]'))
    r = cli("lock", "e")
    assert r.code == 0, r.err
    assert r.out.splitlines()[-1] == (
        f"  note: resolution.allow-overlap[0]: build_backend.py ({REASON}): flashinfer-python and torch-c-dlpack-ext "
        "do not both install build_backend.py with different bytes; the allowance is no longer needed: remove it")
    assert read_lock(ws.root / "locks" / "pylock.e.toml").allowed_overlaps == ()
    ws.write_spec("e", spec_text(index, ALLOW).replace(
        'quack-kernels = "==0.2.0"   # requires torch-c-dlpack-ext==0.1.5\n', ""))
    r = cli("lock", "e", "--json")
    assert r.code == 0, r.err
    assert json.loads(r.out)["notes"][-1:] == [
        f"resolution.allow-overlap[0]: build_backend.py ({REASON}): torch-c-dlpack-ext is not in the resolution; "
        "the allowance is no longer needed: remove it"]


BAD = [
    ('{ path = "triton/*", packages = ["a", "b"], reason = "r" }',
     "resolution.allow-overlap[0].path: expected one exact path, found 'triton/*' (no glob, no backslash: each "
     "shared file is named) (one exact file a wheel installs, relative to site-packages, as its RECORD names it)"),
    ('{ path = "triton/", packages = ["a", "b"], reason = "r" }',
     "resolution.allow-overlap[0].path: expected a relative file path with no empty, '.' or '..' part, found "
     "'triton/' (a folder or a prefix is not allowed: each shared file is named) (one exact file a wheel installs, "
     "relative to site-packages, as its RECORD names it)"),
    ('{ path = "../x.py", packages = ["a", "b"], reason = "r" }',
     "resolution.allow-overlap[0].path: expected a relative file path with no empty, '.' or '..' part, found "
     "'../x.py' (a folder or a prefix is not allowed: each shared file is named) (one exact file a wheel installs, "
     "relative to site-packages, as its RECORD names it)"),
    ('{ path = "x.py", packages = ["a"], reason = "r" }',
     "resolution.allow-overlap[0].packages: expected two package names, [\"first\", \"second\"] (the venv keeps the "
     "first one's bytes)"),
    ('{ path = "x.py", packages = ["A_b", "a-B"], reason = "r" }',
     "resolution.allow-overlap[0].packages: expected two different packages, found 'a-b' twice"),
    ('{ path = "x.py", packages = ["a", "b"], reason = " " }',
     "resolution.allow-overlap[0].reason: missing; expected why the shared file is harmless (a non-empty string)"),
    ('{ path = "x.py", packages = ["a", "b"], reason = "r", glob = true }',
     "resolution.allow-overlap[0].glob: unknown key; expected one of: path, packages, reason"),
    ('"x.py"', 'resolution.allow-overlap[0]: expected a table ' + overlaps.EXPECTED),
]


@pytest.mark.parametrize(("allow", "message"), BAD, ids=[m.split(": ")[0] + f"-{i}" for i, (_, m) in enumerate(BAD)])
def test_an_allowance_is_one_exact_path_two_packages_and_a_reason(
        ws: ScratchWorkspace, cli: Cli, index: IndexServer, allow: str, message: str) -> None:
    spec = ws.write_spec("e", spec_text(index, allow))
    r = cli("lock", "e")
    assert (r.code, r.err) == (2, f"envlock: error: {spec}: 1 problem in env spec 'e'\n  {message}\n")


def test_allow_reports_what_is_left_and_what_was_used() -> None:
    a = AllowedOverlap("x.py", ("p", "q"), "r")
    b = AllowedOverlap("y.py", ("q", "p"), "r")
    unused = AllowedOverlap("z.py", ("p", "q"), "r")
    kept, used = overlaps.allow([("p", "q", ("x.py", "y.py", "w.py")), ("p", "s", ("x.py",))], [a, b, unused])
    assert kept == [("p", "q", ("w.py",)), ("p", "s", ("x.py",))]
    assert used == [a, b]
