"""In-place spec edits: one value changes, every other byte (comments, layout, quotes) stays."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from envlock.errors import SpecError
from envlock.model import specedit

SPEC = """\
# The flagship env: keep this header.
[env]
python = "3.12"          # interpreter
platform = "x86_64-manylinux_2_28"

[indexes.pypi]
url = "https://pypi.org/simple"
default = true

[packages]   # top-level requirements
flashinfer-python = "==0.6.5"   # same as cubin
Flashinfer_Cubin = '==0.6.5'
flashinfer-jit-cache = { version = "==0.6.5+cu130", index = "flashinfer" }
torch = { nightly = "2026-03-07", local = "cu130", index = "pytorch-nightly" }  # the nightly
torchvision = {nightly='2026-03-07',local="cu130",index="pytorch-nightly"}
torchaudio.nightly = "2026-03-07"   # a dotted key
torchaudio.index = "pytorch-nightly"

[packages.pytorch-triton]
index = "pytorch-nightly"

[packages.xgrammar]
version = ">=0.1"   # a sub-table

[sources.sglang]
git = "https://github.com/sgl-project/sglang"
rev = "f016738f4c21043d0d8e4e407cb10a45ea7116b9"   # the pin
patches = ["patches/sglang/0001-sm120.patch"]

[sources.kernel]
git = "https://example.org/kernel"
rev = "main"

[resolution]
overrides = [
    "flashinfer-python==0.6.5",   # beat sglang's pin
    "other==1.0",
]
same-version = [["flashinfer-python", "flashinfer-cubin", "flashinfer-jit-cache"]]
"""
NEW = "eea7f8de41c574f757f48489b725604f7fad75ec"


def _changed(before: str, after: str) -> list[tuple[str, str]]:
    """(old line, new line) of each line that differs; the line count must not change."""
    a, b = before.splitlines(keepends=True), after.splitlines(keepends=True)
    assert len(a) == len(b)
    return [(x, y) for x, y in zip(a, b, strict=True) if x != y]


@pytest.mark.parametrize(("edit", "old", "new"), [
    (lambda t: specedit.set_nightly(t, "torch", "2026-03-10", origin="e.toml"),
     'torch = { nightly = "2026-03-07", local = "cu130", index = "pytorch-nightly" }  # the nightly\n',
     'torch = { nightly = "2026-03-10", local = "cu130", index = "pytorch-nightly" }  # the nightly\n'),
    (lambda t: specedit.set_nightly(t, "torchvision", "2026-03-10", origin="e.toml"),  # literal quotes kept
     "torchvision = {nightly='2026-03-07',local=\"cu130\",index=\"pytorch-nightly\"}\n",
     "torchvision = {nightly='2026-03-10',local=\"cu130\",index=\"pytorch-nightly\"}\n"),
    (lambda t: specedit.set_nightly(t, "torchaudio", "2026-03-10", origin="e.toml"),
     'torchaudio.nightly = "2026-03-07"   # a dotted key\n', 'torchaudio.nightly = "2026-03-10"   # a dotted key\n'),
    (lambda t: specedit.set_version(t, "flashinfer-python", "==0.6.6", origin="e.toml"),
     'flashinfer-python = "==0.6.5"   # same as cubin\n', 'flashinfer-python = "==0.6.6"   # same as cubin\n'),
    (lambda t: specedit.set_version(t, "flashinfer-cubin", "==0.6.6", origin="e.toml"),  # as the spec spells it
     "Flashinfer_Cubin = '==0.6.5'\n", "Flashinfer_Cubin = '==0.6.6'\n"),
    (lambda t: specedit.set_version(t, "flashinfer-jit-cache", "==0.6.6+cu130", origin="e.toml"),
     'flashinfer-jit-cache = { version = "==0.6.5+cu130", index = "flashinfer" }\n',
     'flashinfer-jit-cache = { version = "==0.6.6+cu130", index = "flashinfer" }\n'),
    (lambda t: specedit.set_version(t, "xgrammar", ">=0.2", origin="e.toml"),
     'version = ">=0.1"   # a sub-table\n', 'version = ">=0.2"   # a sub-table\n'),
    (lambda t: specedit.set_rev(t, "sglang", NEW, origin="e.toml", comment="main"),  # its comment's column kept
     'rev = "f016738f4c21043d0d8e4e407cb10a45ea7116b9"   # the pin\n', f'rev = "{NEW}"   # main\n'),
    (lambda t: specedit.set_rev(t, "kernel", NEW, origin="e.toml", comment="main"),
     'rev = "main"\n', f'rev = "{NEW}"  # main\n'),
    (lambda t: specedit.set_rev(t, "sglang", NEW, origin="e.toml", comment=""),
     'rev = "f016738f4c21043d0d8e4e407cb10a45ea7116b9"   # the pin\n', f'rev = "{NEW}"\n'),
    (lambda t: specedit.set_rev(t, "sglang", NEW, origin="e.toml", comment=specedit.KEEP),
     'rev = "f016738f4c21043d0d8e4e407cb10a45ea7116b9"   # the pin\n', f'rev = "{NEW}"   # the pin\n'),
    (lambda t: specedit.set_array_string(t, ("resolution", "overrides"), 0, "flashinfer-python==0.6.6",
                                         origin="e.toml"),
     '    "flashinfer-python==0.6.5",   # beat sglang\'s pin\n',
     '    "flashinfer-python==0.6.6",   # beat sglang\'s pin\n'),
], ids=["inline", "inline-literal", "dotted", "shorthand", "spelling", "inline-version", "sub-table", "rev-comment",
        "rev-new-comment", "rev-no-comment", "rev-keep-comment", "array-item"])
def test_an_edit_changes_its_one_line_and_nothing_else(edit: Callable[[str], str], old: str, new: str) -> None:
    assert _changed(SPEC, edit(SPEC)) == [(old, new)]


def test_edits_compose_and_every_comment_stays() -> None:
    text = SPEC
    for name in ("torch", "torchvision", "torchaudio"):
        text = specedit.set_nightly(text, name, "2026-03-10", origin="e.toml")
    text = specedit.set_rev(text, "kernel", NEW, origin="e.toml", comment="main")
    assert len(_changed(SPEC, text)) == 4
    comments = [line[line.index("#"):] for line in SPEC.splitlines() if "#" in line]
    assert comments == [line[line.index("#"):] for line in text.splitlines() if "#" in line and "# main" not in line]


@pytest.mark.parametrize(("edit", "message"), [
    (lambda t: specedit.set_nightly(t, "torhc", "2026-03-10", origin="e.toml"),
     "e.toml: packages.torhc: not declared; expected a package of [packages]"),
    (lambda t: specedit.set_nightly(t, "flashinfer-python", "2026-03-10", origin="e.toml"),
     "e.toml: packages.flashinfer-python: found '==0.6.5'; expected a table holding "
     "packages.flashinfer-python.nightly"),
    (lambda t: specedit.set_nightly(t, "pytorch-triton", "2026-03-10", origin="e.toml"),
     "e.toml: packages.pytorch-triton.nightly: missing; expected a string to replace"),
    (lambda t: specedit.set_version(t, "torch", "==2.0", origin="e.toml"),
     "e.toml: packages.torch.version: missing; expected a string to replace"),
    (lambda t: specedit.set_rev(t, "vllm", NEW, origin="e.toml", comment=""),
     "e.toml: sources.vllm: missing; expected a table holding sources.vllm.rev"),
    (lambda t: specedit.set_string(t, ("sources", "sglang", "patches"), "x", origin="e.toml"),
     "e.toml: sources.sglang.patches: found an array; expected a string to replace"),
    (lambda t: specedit.set_string(t, ("indexes", "pypi", "default"), "x", origin="e.toml"),
     "e.toml: indexes.pypi.default: found true; expected a string to replace"),
    (lambda t: specedit.set_array_string(t, ("resolution", "overrides"), 2, "x==1", origin="e.toml"),
     "e.toml: resolution.overrides[2]: missing (the array has 2 items); expected a string to replace"),
    (lambda t: specedit.set_array_string(t, ("resolution", "same-version"), 0, "x", origin="e.toml"),
     "e.toml: resolution.same-version[0]: found an array; expected a string to replace"),
    (lambda t: specedit.set_array_string(t, ("resolution", "exclude"), 0, "x", origin="e.toml"),
     "e.toml: resolution.exclude: missing; expected an array holding resolution.exclude[0]"),
    (lambda t: specedit.set_nightly(t + "[packages.torch]\n", "torch", "2026-03-10", origin="e.toml"),
     "e.toml: not valid TOML: Cannot declare ('packages', 'torch') twice (at line 40, column 16)"),
], ids=["unknown", "shorthand", "no-nightly", "nightly-no-version", "no-source", "array", "bool", "index", "nested",
        "no-array", "bad-toml"])
def test_an_edit_that_cannot_be_made_names_the_key(edit: Callable[[str], str], message: str) -> None:
    with pytest.raises(SpecError) as info:
        edit(SPEC)
    assert info.value.message == message


def test_a_spec_change_is_plain_data() -> None:
    change = specedit.SpecChange("sources.sglang.rev", "f016738f", NEW, "main")
    assert change.to_dict() == {"key": "sources.sglang.rev", "old": "f016738f", "new": NEW, "comment": "main"}


RENAMED = """\
[packages]
torch = "==2.9"
"sgl-kernel" = { build = 'sgl-kernel' }   # compiled here

[builds."sgl-kernel"]   # the kernel
source = "sglang"
env = { TORCH_CUDA_ARCH_LIST = "12.0a" }

# upstream's FetchContent inputs
[builds.sgl-kernel.fetchcontent]
repo-cutlass = { git = "https://github.com/NVIDIA/cutlass", rev = "57e3cfb47a2d9e0d46eb6335c3dc411498efa198" }

[builds.other]
source = "sglang"
"""


def test_a_renamed_build_moves_its_tables_and_package_entry_in_place() -> None:
    assert specedit.build_tables(RENAMED, "sgl-kernel") == ["builds.sgl-kernel", "builds.sgl-kernel.fetchcontent"]
    after = specedit.rename_build(RENAMED, "sgl-kernel", "sglang-kernel", origin="e.toml")
    assert after == (RENAMED.replace('"sgl-kernel" = { build = \'sgl-kernel\' }', "sglang-kernel = { build = "
                                     "'sglang-kernel' }")
                     .replace('[builds."sgl-kernel"]', "[builds.sglang-kernel]")
                     .replace("[builds.sgl-kernel.fetchcontent]", "[builds.sglang-kernel.fetchcontent]"))
    # A package declared as a table of its own moves too.
    table = RENAMED.replace('"sgl-kernel" = { build = \'sgl-kernel\' }   # compiled here\n', "").replace(
        "[builds.\"sgl-kernel\"]", '[packages.sgl-kernel]\nbuild = "sgl-kernel"\n\n[builds."sgl-kernel"]')
    moved = specedit.rename_build(table, "sgl-kernel", "sglang-kernel", origin="e.toml")
    assert '[packages.sglang-kernel]\nbuild = "sglang-kernel"\n' in moved and "sgl-kernel" not in moved


@pytest.mark.parametrize(("old", "new", "message"), [
    ("nope", "x", "e.toml: builds.nope: missing; expected the build to rename"),
    ("sgl-kernel", "other", "e.toml: builds.other: exists already; cannot rename builds.sgl-kernel to it"),
])
def test_a_rename_that_cannot_be_made_is_named(old: str, new: str, message: str) -> None:
    with pytest.raises(SpecError) as info:
        specedit.rename_build(RENAMED, old, new, origin="e.toml")
    assert info.value.message == message


def test_a_rename_that_would_change_more_is_refused() -> None:
    # A dotted key under [builds] names the build where no header does: this edit does not know that layout.
    dotted = '[packages]\nk = { build = "k" }\n[builds]\nk.source = "s"\n'
    with pytest.raises(SpecError) as info:
        specedit.rename_build(dotted, "k", "k2", origin="e.toml")
    assert "renaming it to k2 in place would change more than its tables and its package entry; edit it by hand" \
        in info.value.message
