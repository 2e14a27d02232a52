"""Spec validation: every problem reported at once, each naming file, key, found and expected."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name

from envlock import runner
from envlock.errors import SpecError
from envlock.model.spec import UV_PLATFORMS, load_spec

HEAD = """
[env]
python = "3.11"
[indexes.pypi]
url = "https://pypi.org/simple"
default = true
[indexes.nightly]
url = "https://download.pytorch.org/whl/nightly/cu130"
"""

FC = '[sources.s]\npath = "s"\n[builds.k]\nsource = "s"\n[builds.k.fetchcontent.'  # a build's FetchContent table

BAD_SPECS = [
    # (spec text after HEAD, exact problem lines)
    ('[packages]\ntorch = { nightly = "2026-3-7", index = "nightly" }',
     ["packages.torch.nightly: expected a date YYYY-MM-DD, found '2026-3-7'"]),
    ('[packages]\ntorch = { nightly = "2026-02-30", index = "nightly" }',
     ["packages.torch.nightly: expected a date YYYY-MM-DD, found '2026-02-30'"]),
    ('[packages]\ntorch = { nightly = "2026-03-07" }',
     ["packages.torch.index: missing; a nightly pin must name its index (nightlies are never taken "
      "from the default index by accident)"]),
    ('[packages]\ntorch = { nightly = "2026-03-07", index = "pytorch" }',
     ["packages.torch.index: names no [indexes.pytorch]; indexes: nightly, pypi"]),
    ('[packages]\nflashinfer-python = "0.6.5"',
     ["packages.flashinfer-python: expected a version specifier like \"==0.6.5\", found '0.6.5'"]),
    ('[packages]\ntorch = { nightly = "2026-03-07", index = "nightly", locl = "cu130" }',
     ["packages.torch.locl: unknown key (did you mean 'local'?); expected one of: build, index, local, "
      "nightly, same-date, version"]),
    ('[packages]\ntorch = { version = "==2.9.1", local = "cu130" }',
     ["packages.torch.local: only a nightly pin takes a local tag; write it in the version (\"==0.6.5+cu130\")"]),
    ('[packages]\ntorch = { version = "==2.9.1", nightly = "2026-03-07", index = "nightly" }',
     ["packages.torch: expected either version or nightly, not both"]),
    ('[packages]\nsgl-kernel = { build = "sgl-kernel" }',
     ["packages.sgl-kernel.build: names no [builds.sgl-kernel]; builds: none defined"]),
    ('[packages]\ntorch = 2',
     ["packages.torch: expected a version string or a table, found 2"]),
    ('[packages]\ntorch = { nightly = "2026-03-07", index = "nightly" }\n'
     'torchvision = { nightly = "2026-03-06", index = "nightly" }',
     ["indexes.nightly: nightlies from one index must share a date, found 2026-03-06: torchvision; "
      "2026-03-07: torch (set same-date = false on a package to opt out)"]),
    ('[sources.sglang]\ngit = "https://github.com/sgl-project/sglang"',
     ["sources.sglang.rev: missing; a git source needs rev = \"<commit, tag or branch>\""]),
    ('[sources.sglang]\ngit = "https://x/y"\npath = "y"\nrev = "main"',
     ["sources.sglang: expected exactly one of git = \"URL\" or path = \"DIR\"",
      "sources.sglang.rev: only git sources take a rev"]),
    ('[sources.sglang]\ngit = "--upload-pack=touch pwned; git-upload-pack"\nrev = "-q"',
     ["sources.sglang.git: expected a repository URL or path, found '--upload-pack=touch pwned; git-upload-pack' "
      "(git would read it as an option)", "sources.sglang.rev: expected a commit, tag or branch, found '-q'"]),
    ('[sources.s]\npath = "s"\n[builds.k]\nsource = "s"\n[builds.k.fetchcontent.cutlass]\n'
     'git = "--upload-pack=x"\nrev = "' + "a" * 40 + '"',
     ["builds.k.fetchcontent.cutlass.git: expected a repository URL or path, found '--upload-pack=x' "
      "(git would read it as an option)"]),
    ('[sources.sglang]\npath = "../outside"',
     ["sources.sglang.path: expected a relative path inside the workspace, found '../outside'"]),
    ('[sources.sglang]\ngit = "https://x/y"\nrev = "main"\npatches = ["/etc/passwd.patch"]',
     ["sources.sglang.patches[0]: expected a relative path inside the workspace, found '/etc/passwd.patch'"]),
    ('[sources.sglang]\ngit = "https://x/y"\nrev = "main"\npatches = ["patches/fix.diff"]',
     ["sources.sglang.patches[0]: expected a .patch file, found 'patches/fix.diff'"]),
    ('[builds.sgl-kernel]\nsource = "sglang"',
     ["builds.sgl-kernel.source: names no [sources.sglang]; sources: none defined"]),
    ('[sources.s]\npath = "s"\n[builds.k]\nsource = "s"\nisolation = "no"',
     ["builds.k.isolation: expected true or false, found 'no'"]),
    # FetchContent inputs: a git repository at a commit, tag or branch, or a tar archive by URL (and sha256).
    (FC + 'triton]\n'
     'git = "https://github.com/triton-lang/triton"\nrev = "-q"\nsha256 = "' + "a" * 64 + '"',
     ["builds.k.fetchcontent.triton.rev: expected a commit, tag or branch, found '-q'",
      "builds.k.fetchcontent.triton.sha256: only an archive (url) input takes a sha256; a git input is pinned by "
      "its commit"]),
    (FC + 'triton]\ngit = "https://github.com/triton-lang/triton"',
     ["builds.k.fetchcontent.triton.rev: missing; a git input needs rev = \"<commit, tag or branch>\" (the lock "
      "records its commit)"]),
    (FC + 'json]\ngit = "https://x/json"\nurl = "https://x/json.tar.xz"\nrev = "v3"',
     ["builds.k.fetchcontent.json: expected exactly one of git or url, found both"]),
    (FC + 'json]\nsha256 = "' + "a" * 64 + '"',
     ["builds.k.fetchcontent.json: expected exactly one of git or url, found neither: { git = \"URL\", rev = "
      "\"<commit, tag or branch>\" } or { url = \"<archive URL>\", sha256 = \"...\" }"]),
    (FC + 'json]\nurl = "https://x/json/archive/v3.11.3.tar.gz"\nrev = "v3"\nsha256 = "ABC"',
     ["builds.k.fetchcontent.json.rev: only a git input takes a rev; an archive (url) input is pinned by its sha256",
      "builds.k.fetchcontent.json.sha256: expected 64 lowercase hex digits, found 'ABC'"]),
    (FC + 'json]\nurl = "ftp://x/json.tar.gz"',
     ["builds.k.fetchcontent.json.url: expected an https://, http:// or file:// URL of an archive, found "
      "'ftp://x/json.tar.gz'"]),
    (FC + 'json]\nurl = "https://x/json.zip"',
     ["builds.k.fetchcontent.json.url: expected the URL of a tar archive (.tar.gz, .tgz, .tar.xz, .txz, .tar.bz2, "
      ".tbz2, .tar), found 'https://x/json.zip'"]),
    ('[sources.s]\npath = "s"\n[builds.k]\nsource = "s"\nenv = { TORCH_CUDA_ARCH_LIST = 12 }',
     ["builds.k.env.TORCH_CUDA_ARCH_LIST: expected a string, found 12"]),
    ('[resolution]\noverrides = ["flashinfer-python=0.6.5"]',
     ["resolution.overrides[0]: expected a requirement like \"flashinfer-python==0.6.5\", "
      "found 'flashinfer-python=0.6.5'"]),
    ('[packages]\ntorch = { nightly = 2026-03-07, local = "cu130", index = "nightly" }',
     ["packages.torch.nightly: expected a string, found the unquoted date 2026-03-07"]),
    ('[resolution]\nexclude = ["Nope!", "sgl-fa4", ""]',
     ["resolution.exclude[0]: expected a package name like \"sgl-fa4\", found 'Nope!'",
      "resolution.exclude[2]: expected a package name like \"sgl-fa4\", found ''"]),
    # Overrides beat upstream's pins, never the spec's own.
    ('[packages]\ntorch = { nightly = "2026-03-07", local = "cu130", index = "nightly" }\n'
     '[resolution]\noverrides = ["torch==2.12.0.dev20260310+cu130"]',
     ["resolution.overrides[0]: expected no override of torch: packages.torch is a nightly pin (2026-03-07), "
      "which already beats upstream's pins; found 'torch==2.12.0.dev20260310+cu130' (change the date there)"]),
    # A specifier that does not parse is reported once, at its key, also when an override names it.
    ('[packages]\nattrs = "=>25"\n[resolution]\noverrides = ["attrs==25.1.0"]',
     ["packages.attrs: expected a version specifier like \"==0.6.5\", found '=>25'"]),
    ('[packages]\nflashinfer-python = "==0.6.5"\n[resolution]\noverrides = ["flashinfer-python==0.6.4"]',
     ["resolution.overrides[0]: expected a version packages.flashinfer-python allows (==0.6.5), found "
      "'flashinfer-python==0.6.4' (an override may beat upstream's pins, not the spec's own)"]),
    ('[packages]\npytorch-triton = { index = "nightly" }\n[resolution]\noverrides = ["pytorch-triton>=3"]',
     ["resolution.overrides[0]: pytorch-triton is pinned to index 'nightly'; an override of it must be an "
      "exact ==VERSION, found 'pytorch-triton>=3'"]),
    ('[resolution]\nsame-version = ["flashinfer-python"]',
     ["resolution.same-version: expected an array of arrays of two or more package names"]),
    ('[packages]\nSGL_fa4 = "==1"\ntorch = "==2.9.1"\n[resolution]\nexclude = ["torch-x", "sgl-fa4"]',
     ["resolution.exclude[1]: expected a package the spec does not declare, found 'sgl-fa4', which "
      "packages.SGL_fa4 requires (keep one of the two)"]),
    ('[resolution]\nexclud = ["sgl-fa4"]',
     ["resolution.exclud: unknown key (did you mean 'exclude'?); expected one of: allow-no-kernels, allow-overlap, "
      "exclude, overrides, same-version"]),
    # A build makes the package of its own name (its wheel is checked to be that, after the build).
    ('[packages]\nmini = { build = "mk" }\n[sources.mini]\npath = "x"\n[builds.mk]\nsource = "mini"',
     ["packages.mini.build: expected 'mini': a build makes the package of its own name, so packages.mini comes "
      "from [builds.mini]; found 'mk' (rename [builds.mk])"]),
    ('[packages]\nmk = { build = "mk" }\n[sources.mini]\npath = "x"\n[builds.mk]\nsource = "mini"\n'
     'requires = ["scikit-build-core==1.1.2", 5]',
     ["builds.mk.requires[1]: expected a string (an array of strings), found 5"]),
    # A malformed date is reported once, not again as a second date of its index.
    ('[packages]\ntorch = { nightly = "2026-3-7", index = "nightly" }\n'
     'torchvision = { nightly = "2026-03-07", index = "nightly" }',
     ["packages.torch.nightly: expected a date YYYY-MM-DD, found '2026-3-7'"]),
    ('[packages]\ntorch = { version = "==2.9.1", same-date = false }',
     ["packages.torch.same-date: only a nightly pin takes same-date (it opts out of sharing its index's date)"]),
    ('[indexes.pytorch-nightly]\nurl = "https://x.example/simple"\n[indexes."pytorch.nightly"]\n'
     'url = "https://y.example/simple"',
     ["indexes.\"pytorch.nightly\": expected a name unlike 'pytorch-nightly' in more than case, '-', '_' and '.': "
      "both are "
      "ENVLOCK_INDEX_PYTORCH_NIGHTLY (a mirror's variable)"]),
    ('[packages]\nmk = { build = "mk" }\n[sources.mini]\npath = "x"\n[builds.mk]\nsource = "mini"\n'
     'requires = [1, "ok", 2]',
     ["builds.mk.requires[0]: expected a string (an array of strings), found 1",
      "builds.mk.requires[2]: expected a string (an array of strings), found 2"]),
    ('[packages]\nmk = { build = "mk" }\n[sources.mini]\npath = "x"\n[builds.mk]\nsource = "mini"\n'
     'toolchain = ["nvidia-cuda-nvcc==13.0.88", "cmake >= 3.26 !", 3]',
     ["builds.mk.toolchain[2]: expected a string (an array of strings), found 3"]),
    ('[packages]\nmk = { build = "mk" }\n[sources.mini]\npath = "x"\n[builds.mk]\nsource = "mini"\n'
     'toolchain = ["nvidia-cuda-nvcc==13.0.88", "cmake >= 3.26 !"]',
     ["builds.mk.toolchain[1]: expected a requirement like \"nvidia-cuda-nvcc==13.0.88\", found 'cmake >= 3.26 !'"]),
    ('[sources.mini]\npath = "x"\n[builds."../evil"]\nsource = "mini"',
     ["builds.\"../evil\": expected the name of the package the build makes (like \"sgl-kernel\"), found '../evil'"]),
    ('[indexes.m]\nurl = "http://127.0.0.1:99999/simple"\n[indexes.n]\nurl = "http://[::1/simple"',
     ["indexes.m.url: expected an http(s):// or file:// URL, found 'http://127.0.0.1:99999/simple'",
      "indexes.n.url: expected an http(s):// or file:// URL, found 'http://[::1/simple'"]),
    ('[indexes."Bad Name!"]\nurl = "https://x.example/simple"',
     ["indexes.\"Bad Name!\": expected an index name of letters, digits, '-', '_' or '.' (like \"pytorch-nightly\"), "
      "found 'Bad Name!'"]),
    ('[pakages]\ntorch = "==2.9.1"',
     ["pakages: unknown key (did you mean 'packages'?); expected one of: builds, env, indexes, packages, "
      "resolution, sources, targets"]),
]


@pytest.mark.parametrize(("body", "problems"), BAD_SPECS, ids=[p[0] for _, p in BAD_SPECS])
def test_bad_spec_messages(tmp_path: Path, body: str, problems: list[str]) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(HEAD + body + "\n")
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert list(info.value.details) == problems
    assert info.value.message.startswith(f"{path}: {len(problems)} problem")
    assert info.value.exit_code == 2


BAD_HEADS = [
    ('[env]\npython = "3.11"\n[indexes.a]\nurl = "https://a/simple"\n[indexes.b]\nurl = "https://b/simple"\n',
     ["indexes: expected exactly one index with default = true, found none"]),
    ('[env]\npython = ""\n[indexes.a]\nurl = "https://a/simple"\ndefault = true\n',
     ["env.python: expected a Python version like \"3.12\", found ''"]),
    ('[env]\npython = "311"\n[indexes.a]\nurl = "https://a/simple"\ndefault = true\n',
     ["env.python: expected a Python version like \"3.12\", found '311'"]),
    ('[env]\n[indexes.a]\nurl = "a.example/simple"\ndefault = true\n',
     ["env.python: missing; expected a string",
      "indexes.a.url: expected an http(s):// or file:// URL, found 'a.example/simple'"]),
    ('[env]\npython = "3.11"\nplatform = "linux x86"\n[indexes.a]\nurl = "https://a/simple"\ndefault = true\n',
     ["env.platform: expected a platform as uv spells it (e.g. \"x86_64-manylinux_2_28\"), found 'linux x86'"]),
]


@pytest.mark.parametrize(("text", "problems"), BAD_HEADS)
def test_bad_env_and_index_tables(tmp_path: Path, text: str, problems: list[str]) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert list(info.value.details) == problems


def test_all_problems_reported_at_once(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(HEAD + '[packages]\na = "1"\nb = { nightly = "x", index = "nightly" }\n[resolution]\nfoo = 1\n')
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert len(info.value.details) == 3
    assert str(info.value).startswith(f"{path}: 3 problems in env spec 'bad'\n  packages.a: expected")


def test_invalid_toml_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "broken.toml"
    path.write_text("[env\n")
    with pytest.raises(SpecError, match=r"broken.toml: not valid TOML"):
        load_spec(path)


def test_shipped_specs_are_valid() -> None:
    root = Path(__file__).resolve().parents[1]
    for path in sorted((root / "envs").glob("*.toml")):
        spec = load_spec(path, root=root)
        assert spec.default_index.name == "pypi"
    qwen = load_spec(root / "envs" / "qwen35-blackwell.toml")
    torch, jit_cache = (qwen.packages[canonicalize_name(name)] for name in ("torch", "flashinfer-jit-cache"))
    assert (torch.nightly, torch.local, jit_cache.index) == ("2026-03-07", "cu130", "flashinfer")
    assert qwen.sources["sglang"].rev == "f016738f4c21043d0d8e4e407cb10a45ea7116b9"
    assert qwen.resolution.exclude == ("sgl-fa4", "triton")
    # FetchContent inputs as upstream declares them: triton by its tag, mscclpp's json by an archive URL.
    inputs = {dep.name: dep for dep in qwen.builds["sgl-kernel"].fetchcontent}
    assert (inputs["repo-triton"].git, inputs["repo-triton"].rev) == ("https://github.com/triton-lang/triton", "v3.5.1")
    assert not inputs["repo-triton"].pinned_by_spec and inputs["repo-cutlass"].pinned_by_spec
    assert inputs["json"].url == "https://github.com/nlohmann/json/releases/download/v3.11.3/json.tar.xz"
    assert inputs["json"].sha256 == "d6c65aca6b1ed68e7a182f4757257b107ae403032760ed6ef121c9d55e81757d"
    # The one shared file of today's PyPI at the pin, accepted for that pair only.
    (allowed,) = qwen.resolution.allow_overlap
    assert (allowed.path, allowed.packages) == ("build_backend.py", ("flashinfer-python", "torch-c-dlpack-ext"))
    # sgl-kernel's compilers: CUDA 13.0 as wheels (each pinned), CMake >= 3.26 and ninja.
    assert qwen.builds["sgl-kernel"].toolchain == (
        "nvidia-cuda-nvcc==13.0.88", "nvidia-nvvm==13.0.88", "nvidia-cuda-crt==13.0.88",
        "nvidia-cuda-runtime==13.0.96", "nvidia-cuda-cccl==13.0.85", "cmake>=3.26", "ninja")


def test_key_digests_name_each_entry(tmp_path: Path) -> None:
    path = tmp_path / "e.toml"
    path.write_text(HEAD + '[packages]\na = "==1"\nb = "==2"\n')
    keys = load_spec(path).key_digests()
    assert sorted(keys) == ["env", "indexes.nightly", "indexes.pypi", "packages.a", "packages.b"]


# Mistakes that used to pass validation and fail a later stage (exit 1) without naming the key,
# checked against a workspace holding examples/tree and one patch.
WORKSPACE_SPECS = [
    ('[sources.x]\npath = "examples/tree"\npatches = ["patches/x/0001-ok.patch", "patches/x/0001-ok.patch"]',
     ["sources.x.patches[1]: found 'patches/x/0001-ok.patch' again (also patches[0]); expected each patch once"]),
    ('[sources.x]\npath = "examples/nope"',
     ["sources.x.path: expected a directory relative to the workspace root {root}, found 'examples/nope', "
      "which does not exist"]),
    ('[sources.x]\npath = "examples/tree/file.txt"',
     ["sources.x.path: expected a directory relative to the workspace root {root}, found "
      "'examples/tree/file.txt', which is not a directory"]),
    ('[sources.x]\npath = ""',
     ["sources.x.path: expected a relative path inside the workspace, found ''"]),
    ('[sources.x]\npath = "examples/tree"\npatches = ["patches/x/0001-ok.patch", "patches/x/9999-missing.patch"]',
     ["sources.x.patches[1]: expected a file relative to the workspace root {root}, found "
      "'patches/x/9999-missing.patch', which does not exist"]),
    ('[sources.x]\ngit = "https://x/y"\nrev = ""',
     ["sources.x.rev: expected a commit, tag or branch, found ''"]),
    ('[sources.x]\ngit = ""\nrev = "main"',
     ["sources.x.git: expected a repository URL or path, found ''"]),
]


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    (tmp_path / "envs").mkdir()
    (tmp_path / "examples" / "tree").mkdir(parents=True)
    (tmp_path / "examples" / "tree" / "file.txt").write_text("x\n")
    (tmp_path / "patches" / "x").mkdir(parents=True)
    (tmp_path / "patches" / "x" / "0001-ok.patch").write_text("")
    return tmp_path


@pytest.mark.parametrize(("body", "problems"), WORKSPACE_SPECS, ids=[p[0] for _, p in WORKSPACE_SPECS])
def test_spec_paths_must_exist_in_the_workspace(workspace: Path, body: str, problems: list[str]) -> None:
    path = workspace / "envs" / "e.toml"
    path.write_text(HEAD + body + "\n")
    with pytest.raises(SpecError) as info:
        load_spec(path, root=workspace)
    assert list(info.value.details) == [p.format(root=workspace) for p in problems]
    assert info.value.exit_code == 2


def test_path_mistakes_are_reported_with_every_other_problem(workspace: Path) -> None:
    text = (HEAD.replace('python = "3.11"', 'python = "3.11"\nplatform = "x86_64-manylinuxx"')
            + '[packages]\na = "1"\n[sources.x]\npath = "examples/nope"\npatches = ["patches/x/9999-missing.patch"]\n'
            + '[sources.y]\ngit = "https://x/y"\nrev = ""\n')
    spec_file = workspace / "envs" / "e.toml"
    spec_file.write_text(text)
    with pytest.raises(SpecError) as info:
        load_spec(spec_file, root=workspace)
    assert [d.split(":")[0] for d in info.value.details] == [
        "env.platform", "sources.x.path", "sources.x.patches[0]", "sources.y.rev", "packages.a"]
    assert info.value.message == f"{spec_file}: 5 problems in env spec 'e'"
    # Without a root, existence is left to the stages that read the files.
    with pytest.raises(SpecError) as info:
        load_spec(spec_file)
    assert [d.split(":")[0] for d in info.value.details] == ["env.platform", "sources.y.rev", "packages.a"]


def test_existing_paths_pass(workspace: Path) -> None:
    path = workspace / "envs" / "e.toml"
    path.write_text(HEAD + '[sources.x]\npath = "examples/tree"\npatches = ["patches/x/0001-ok.patch"]\n')
    assert load_spec(path, root=workspace).sources["x"].patches == ("patches/x/0001-ok.patch",)


def test_platform_unknown_to_uv_names_the_accepted_values(tmp_path: Path) -> None:
    path = tmp_path / "e.toml"
    path.write_text(HEAD.replace('python = "3.11"', 'python = "3.11"\nplatform = "x86_64-manylinuxx"'))
    with pytest.raises(SpecError) as info:
        load_spec(path)
    (problem,) = info.value.details
    assert problem.startswith(
        "env.platform: expected a platform the pinned uv accepts for --python-platform, found 'x86_64-manylinuxx' "
        "(did you mean 'x86_64-manylinux2014'?); accepted: aarch64-apple-darwin, aarch64-linux-android, ")
    assert problem.endswith(", x86_64-unknown-linux-gnu, x86_64-unknown-linux-musl")
    assert "x86_64-manylinux_2_28, " in problem


def test_platforms_are_those_the_pinned_uv_accepts() -> None:
    # A uv upgrade that adds or drops a --python-platform value must update UV_PLATFORMS.
    help_text = runner.uv(["pip", "compile", "--help"]).stdout
    listed = re.search(r"--python-platform <PYTHON_PLATFORM>.*?\[possible values: ([^\]]*)\]", help_text, re.S)
    assert listed is not None
    values = {v.strip() for v in listed.group(1).split(",")}
    assert values - {"linux", "macos", "windows"} == UV_PLATFORMS


def test_a_spec_nested_too_deeply_or_with_a_huge_python_is_named(tmp_path: Path) -> None:
    spec = tmp_path / "e.toml"
    spec.write_text("a = " + "[" * 5000 + "]" * 5000 + "\n")
    with pytest.raises(SpecError, match=r"^.*e\.toml: not valid TOML: nested too deeply$"):
        load_spec(spec)
    spec.write_text('[env]\npython = "3.' + "1" * 5000 + '"\n[indexes.pypi]\nurl = "https://pypi.org/simple"\n'
                    "default = true\n")
    with pytest.raises(SpecError, match=r"env.python: expected a Python version like \"3.12\""):
        load_spec(spec)


# URLs that reach uv's and git's configuration or command line: an index URL carrying a second option
# (`--extra-index-url` after a space or a newline), control characters, and git transports that run a
# command (ext::), wait on a file descriptor (fd::3) or start a remote helper (hg://).
_IDX = '[env]\npython = "3.11"\n[indexes.pypi]\nurl = {url}\ndefault = true\n'
_SRC = _IDX.format(url='"https://pypi.org/simple"') + '[sources.s]\ngit = {url}\nrev = "main"\n'
_URL_EXPECTED = "expected an http(s):// or file:// URL"
_GIT_EXPECTED = "expected an https://, http://, ssh://, git:// or file:// URL, a user@host:path or a local path"
UNSAFE_URLS = [
    (_IDX, '"http://x/simple --extra-index-url http://evil/simple"',
     f"indexes.pypi.url: {_URL_EXPECTED} with no whitespace or control character, found "
     "'http://x/simple --extra-index-url http://evil/simple' (a space at character 16)"),
    (_IDX, '"http://x/simple\\n--extra-index-url http://evil/simple"',
     f"indexes.pypi.url: {_URL_EXPECTED} with no whitespace or control character, found "
     "'http://x/simple\\n--extra-index-url http://evil/simple' (a newline at character 16)"),
    (_IDX, '"http://alice:pw@x/simple\\r"',
     f"indexes.pypi.url: {_URL_EXPECTED} with no whitespace or control character, found "
     "'http://x/simple\\r' (a carriage return at character 16)"),
    (_IDX, '"http://x/sim\\tple"',
     f"indexes.pypi.url: {_URL_EXPECTED} with no whitespace or control character, found "
     "'http://x/sim\\tple' (a tab at character 13)"),
    (_IDX, '"http://x/simple\\u0000"',
     f"indexes.pypi.url: {_URL_EXPECTED} with no whitespace or control character, found "
     "'http://x/simple\\x00' (control character U+0000 at character 16)"),
    (_IDX, '"http://x/\\u202esimple"',
     f"indexes.pypi.url: {_URL_EXPECTED} with no whitespace or control character, found "
     "'http://x/\\u202esimple' (control character U+202E at character 10)"),
    (_IDX, '" http://x/simple"',
     f"indexes.pypi.url: {_URL_EXPECTED} with no whitespace or control character, found ' http://x/simple' "
     "(a space at character 1)"),
    (_SRC, '"fd::3"',
     f"sources.s.git: {_GIT_EXPECTED}, found 'fd::3' (transport fd::, a remote helper git would start; "
     "envlock lets git use none)"),
    (_SRC, '"ext::sh -c touch% pwned"',
     f"sources.s.git: {_GIT_EXPECTED}, found 'ext::sh -c touch% pwned' (transport ext::, a remote helper git "
     "would start; envlock lets git use none)"),
    (_SRC, '"Hg::https://x/repo"',
     f"sources.s.git: {_GIT_EXPECTED}, found 'Hg::https://x/repo' (transport Hg::, a remote helper git would start; "
     "envlock lets git use none)"),
    (_SRC, '"hg://x/repo"',
     f"sources.s.git: {_GIT_EXPECTED}, found 'hg://x/repo' (transport hg://, a remote helper git would start; "
     "envlock lets git use none)"),
    (_SRC, '"ftp://x/repo.git"',
     f"sources.s.git: {_GIT_EXPECTED}, found 'ftp://x/repo.git' (transport ftp://, a remote helper git "
     "would start; envlock lets git use none)"),
    (_SRC, '"https://x/repo.git main"',
     f"sources.s.git: {_GIT_EXPECTED} with no whitespace or control character, found 'https://x/repo.git main' "
     "(a space at character 19)"),
    (_SRC, '"https://x/repo.git\\n"',
     f"sources.s.git: {_GIT_EXPECTED} with no whitespace or control character, found 'https://x/repo.git\\n' "
     "(a newline at character 19)"),
    (_IDX.format(url='"https://pypi.org/simple"') + FC + 'json]\nurl = "https://x/json.tar.gz\\n"',
     None, "builds.k.fetchcontent.json.url: expected an https://, http:// or file:// URL of an archive with no "
     "whitespace or control character, found 'https://x/json.tar.gz\\n' (a newline at character 22)"),
    (_IDX.format(url='"https://pypi.org/simple"') + FC + 'cutlass]\ngit = "fd::3"\nrev = "' + "a" * 40 + '"',
     None, f"builds.k.fetchcontent.cutlass.git: {_GIT_EXPECTED}, found 'fd::3' (transport fd::, a remote helper git "
     "would start; envlock lets git use none)"),
]


@pytest.mark.parametrize(("template", "url", "problem"), UNSAFE_URLS,
                         ids=[f"{i}-{(u or t)[-20:]}" for i, (t, u, _) in enumerate(UNSAFE_URLS)])
def test_an_url_that_is_no_single_safe_url_is_refused(tmp_path: Path, template: str, url: str | None,
                                                      problem: str) -> None:
    path = tmp_path / "e.toml"
    path.write_text(template.format(url=url) if url is not None else template)
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert (info.value.message, list(info.value.details), info.value.exit_code) == (
        f"{path}: 1 problem in env spec 'e'", [problem], 2)


@pytest.mark.parametrize("url", ["https://x/repo.git", "http://127.0.0.1:8080/r", "ssh://git@x/repo",
                                 "git+ssh://git@x/repo", "git://x/repo", "file:///srv/repo.git",
                                 "git@github.com:org/repo.git", "/srv/git/repo", "../clone", "C:/repo"])
def test_git_urls_envlock_lets_git_read(tmp_path: Path, url: str) -> None:
    path = tmp_path / "e.toml"
    path.write_text(_SRC.format(url=f'"{url}"'))
    assert load_spec(path).sources["s"].git == url


def test_a_source_path_or_patch_a_symbolic_link_takes_out_of_the_workspace_is_a_problem(workspace: Path) -> None:
    # As found: a pull request adds `examples/evil -> /elsewhere` and names it: the text is inside the workspace,
    # the folder is not, and what is there was copied into the store, built, and carried by a bundle.
    outside = workspace.parent / f"{workspace.name}-outside"
    (outside / "secret").mkdir(parents=True)
    (outside / "x.patch").write_text("")
    (workspace / "examples" / "evil").symlink_to(outside / "secret")
    (workspace / "examples" / "alias").symlink_to("tree")  # a link that stays inside: fine
    (workspace / "patches" / "x" / "0002-out.patch").symlink_to(outside / "x.patch")
    path = workspace / "envs" / "e.toml"
    path.write_text(HEAD + '[sources.x]\npath = "examples/evil"\n'
                           '[sources.y]\npath = "examples/alias"\npatches = ["patches/x/0002-out.patch"]\n')
    with pytest.raises(SpecError) as info:
        load_spec(path, root=workspace)
    assert list(info.value.details) == [
        f"sources.x.path: expected a directory inside the workspace root {workspace}, found 'examples/evil', which "
        f"a symbolic link takes out of it (to {outside / 'secret'})",
        f"sources.y.patches[0]: expected a file inside the workspace root {workspace}, found "
        f"'patches/x/0002-out.patch', which a symbolic link takes out of it (to {outside / 'x.patch'})"]
