"""The standard fixture universe: a loopback server with three indexes shaped like the real ones.

- ``pypi`` (the default; publishes hashes): plain packages, flashinfer-python and
  flashinfer-cubin, the build backends from ``tests/.wheels``, and a HOSTILE
  same-name ``torch``/``pytorch-triton``/``torchvision`` 99.0 that must never win.
- ``pytorch`` (no ``#sha256=`` fragments, like download.pytorch.org): torch,
  torchvision and torchaudio nightlies for several dates with ``+cu130`` and
  ``+cpu`` tags, and pytorch-triton.
- ``flashinfer``: flashinfer-jit-cache ``+cu130`` builds.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from kit.index import IndexServer
from kit.wheels import build_wheel

NIGHTLY_DATES = ("20260301", "20260302", "20260305", "20260306", "20260307", "20260310")
PYTHONS = ("cp311", "cp312")
BACKENDS = Path(__file__).resolve().parent.parent / ".wheels"


@dataclass
class Universe:
    server: IndexServer

    @property
    def pypi(self) -> str:
        return self.server.url("pypi")

    @property
    def pytorch(self) -> str:
        return self.server.url("pytorch")

    @property
    def flashinfer(self) -> str:
        return self.server.url("flashinfer")


def _linux(py: str) -> str:
    return f"{py}-{py}-manylinux_2_28_x86_64"


#: A nightly's files, by (package, version); None: the default module naming its version.
TorchFiles = Callable[[str, str], Mapping[str, str] | None]


def build_universe(root: Path) -> Universe:
    server = populate(IndexServer(root / "served"), root / "wheels")
    server.start()
    return Universe(server)


def populate(server: IndexServer, wheels: Path, *, torch_files: TorchFiles | None = None,
             dates: tuple[str, ...] = NIGHTLY_DATES, backends: bool = True) -> IndexServer:
    """Publish the universe's three indexes on ``server`` (wheels written under ``wheels``);
    ``torch_files`` gives a nightly other files than its default module (the example world's);
    ``backends``: also the build backends of ``tests/.wheels`` on ``pypi``, when that folder exists."""
    server.add_index("pypi", hashes=True)
    server.add_index("pytorch", hashes=False)
    server.add_index("flashinfer", hashes=True)

    def pypi(name: str, version: str, **kw: object) -> None:
        server.add("pypi", build_wheel(wheels, name, version, **kw))  # type: ignore[arg-type]

    for version in ("1.0", "1.1"):
        pypi("tinydep", version)
    pypi("otherdep", "2.0", requires=["tinydep>=1.0"])
    pypi("filelock-lite", "3.0")
    for v in ("0.6.4", "0.6.5"):
        pypi("flashinfer-cubin", v)
        pypi("flashinfer-python", v, requires=[f"flashinfer-cubin=={v}", "tinydep", "sgl-fa4==4.0.3"])
    pypi("sgl-fa4", "4.0.3")
    # Hostile same-name packages with higher versions on the default index.
    for name in ("torch", "pytorch-triton", "torchvision", "torchaudio"):
        pypi(name, "99.0", files={f"{name.replace('-', '_')}/__init__.py": "raise ImportError('hostile')\n"})

    def files(name: str, version: str) -> Mapping[str, str] | None:
        return torch_files(name, version) if torch_files is not None else None

    for date in dates:
        for local in ("cu130", "cpu"):
            for py in PYTHONS:
                tag = _linux(py)
                version = f"2.12.0.dev{date}+{local}"
                server.add("pytorch", build_wheel(
                    wheels, "torch", version, tag=tag, files=files("torch", version),
                    requires=["pytorch-triton==3.6.0+git5e7b3f4e", "tinydep>=1.0"]))
                server.add("pytorch", build_wheel(
                    wheels, "torchvision", f"0.27.0.dev{date}+{local}", tag=tag,
                    requires=[f"torch==2.12.0.dev{date}+{local}"]))
                server.add("pytorch", build_wheel(
                    wheels, "torchaudio", f"2.11.0.dev{date}+{local}", tag=tag,
                    requires=[f"torch==2.12.0.dev{date}+{local}"]))
    for py in PYTHONS:
        server.add("pytorch", build_wheel(wheels, "pytorch-triton", "3.6.0+git5e7b3f4e", tag=_linux(py)))

    for v in ("0.6.4", "0.6.5"):
        server.add("flashinfer", build_wheel(
            wheels, "flashinfer-jit-cache", f"{v}+cu130", tag="cp39-abi3-manylinux_2_28_x86_64"))

    if backends and BACKENDS.is_dir():
        server.add_dir("pypi", BACKENDS)
    return server


def spec_text(u: Universe, packages: str, extra: str = "", python: str = "3.11") -> str:
    """An env spec over the universe's three indexes, with ``packages`` (lines of ``[packages]``) and ``extra``."""
    return f"""
[env]
python = "{python}"
platform = "x86_64-manylinux_2_28"
[indexes.pypi]
url = "{u.pypi}"
default = true
[indexes.pytorch]
url = "{u.pytorch}"
[indexes.flashinfer]
url = "{u.flashinfer}"
[packages]
{packages}
{extra}
"""


#: ``[packages]`` lines: the 03-07 cu130 torch nightly, and pytorch-triton, from the pytorch index.
TORCH = 'torch = { nightly = "2026-03-07", local = "cu130", index = "pytorch" }\n'
TRITON = 'pytorch-triton = { index = "pytorch" }\n'


def backend_wheels() -> Path:
    """tests/.wheels, holding the build backends, or a clear failure naming the set-up step."""
    # pytest imported here, not at the top: examples/world/serve.py imports this module (through
    # kit.world) in a venv with envlock's own dependencies only, and never calls this.
    import pytest

    wanted = ("scikit_build_core-", "setuptools-")
    found = [p.name for p in BACKENDS.glob("*.whl")] if BACKENDS.is_dir() else []
    missing = [w for w in wanted if not any(n.startswith(w) for n in found)]
    if missing:
        pytest.fail(
            f"{BACKENDS} lacks the build backends ({', '.join(m.rstrip('-') for m in missing)}): "
            "run the test set-up step `python tests/kit/backends.py` once (it downloads them from PyPI)",
            pytrace=False,
        )
    return BACKENDS
