"""``envlock kernels`` and ``envlock doctor``: parse, call the recipe, render (docs/gpus.md)."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from envlock.cli.render import count, json_option, mirror_flags, mirror_options, out
from envlock.workspace import Workspace


def cmd_kernels(args: argparse.Namespace, ws: Workspace) -> int:
    from envlock import ui
    from envlock.commands import kernels

    with ui.progress(quiet=args.quiet or args.json) as bar:
        report = kernels.kernels_env(ws, args.target, offline=args.offline, progress=bar, asked=mirror_options(args),
                                     env_target=args.env_target)

    def text() -> str:
        from envlock.gpu.drivers import needs  # ELF and fatbin readers: not for building the parser

        lines = []
        for p in report.packages:
            shown = [f for f in p.files if f.kernels or needs(f)]
            if p.unread:
                lines.append(f"{p.name} {p.version}: not read ({p.unread})")
            if not shown:
                continue
            bearing = len(p.kernel_files)
            lines.append(f"{p.name} {p.version}".rstrip() + f": {count(bearing, 'file')} with kernels"
                         + (f" ({p.wheel})" if p.wheel != p.name else ""))
            lines += [f"  {kernels.describe(f)}" for f in shown]
        if not any(p.kernel_files for p in report.packages):
            lines.append("no GPU kernels in any binary")
        for gpu in report.gpus:
            failing = [v for v in report.verdicts if v.gpu == gpu and not v.runs]
            partial = [n for v in report.verdicts if v.gpu == gpu for n in v.notes()]
            lines.append(f"{gpu.label}: " + ("runs every kernel-bearing package" if not failing else "does NOT run"))
            lines += [f"  {v.problem()}" for v in failing] + [f"  note: {n}" for n in partial]
        lines.append(kernels.driver_line(report))
        if report.fetched:
            lines.append(f"({count(report.fetched, 'wheel')} fetched into the store to be read)")
        return "\n".join(lines)

    out(args, report.to_dict(), text)
    return 0 if report.runs else 1


def cmd_doctor(args: argparse.Namespace, ws: Workspace) -> int:
    from envlock.commands.doctor import doctor

    report = doctor(ws, args.env)

    def text() -> str:
        host = report.host
        if host.problem and not host.driver:
            lines = [f"machine: {host.problem}"]
        else:
            lines = [f"machine: NVIDIA driver {host.driver} (runs CUDA up to {host.cuda}), "
                     f"{count(len(host.devices), 'GPU')}"]
            lines += [f"  GPU {d.index}: {d.name} (compute capability {d.gpu.capability})" for d in host.devices]
        if report.env is not None:
            bearing = sorted(p.name for p in report.packages if p.kernel_files)
            lines.append(f"env {report.env}: " + (f"kernels in {', '.join(bearing)}" if bearing
                                                  else "no GPU kernels in its binaries")
                         + (f"; needs driver >= {report.min_driver}" if report.min_driver else ""))
            for name, tools in report.toolchains:
                said = ", ".join(f"{k} {v}" for k, v in sorted(tools.items())) or "not in the store"
                lines.append(f"  build {name}: toolchain {said}")
        lines += [f"note: {n}" for n in report.notes]
        if report.problems:
            lines.append(f"{count(len(report.problems), 'problem')}:")
            lines += [f"  {p.text()}" for p in report.problems]
        elif report.env is not None:
            lines.append(f"env {report.env} runs here")
        return "\n".join(lines)

    out(args, report.to_dict(), text)
    return 0 if report.ok else 1


def add_commands(add: Callable[..., argparse.ArgumentParser]) -> None:
    """``kernels`` and ``doctor`` on ``cli.main``'s parser (``add`` makes a command)."""
    p = add("kernels", cmd_kernels, "what the env's binaries carry for GPUs, and which GPUs run them",
            "Read every ELF of the env's locked wheels (from the store; those it lacks are fetched first,\n"
            "unless --offline) or of a .whl file or a folder (a venv): per package, the SASS and PTX arches of\n"
            "its .nv_fatbin sections (with the a/f variant and compression) and the CUDA libraries it needs;\n"
            "per GPU of the spec's [env] gpus, whether each package has a kernel for it, and which files do\n"
            "not; the oldest driver the binaries run on. Headers only: no GPU, no CUDA tools.\n"
            "Exit: 0, 1 a GPU of [env] gpus has a package with no kernel for it, 2 bad input.")
    p.add_argument("target", metavar="ENV|WHEEL|FOLDER", help="env name (locks/pylock.ENV.toml), a .whl or a folder")
    p.add_argument("--offline", action="store_true", help="read only the wheels the store already holds")
    p.add_argument("--target", dest="env_target", metavar="NAME",
                   help="of an env with [targets.NAME]: the target whose wheels are read, against its own gpus "
                   "(default: the one whose platform this machine runs)")
    mirror_flags(p)
    p.set_defaults(needs_workspace=False)  # a wheel or a folder needs none; an env name is looked up in it
    json_option(p)
    p = add("doctor", cmd_doctor, "this machine's driver and GPUs against the env (NVML)",
            "Ask this machine's NVIDIA driver (NVML: libnvidia-ml.so.1, or ENVLOCK_NVML_LIBRARY) for its\n"
            "version, the CUDA version it runs and each GPU's name and compute capability; with ENV, hold\n"
            "them to the env's binaries (the locked wheels the store holds): the driver its CUDA runtime\n"
            "needs, a kernel for each GPU. Each problem names the package, the file, what it needs, what the\n"
            "machine has and the fix. Also the toolchain each local build was made with.\n"
            "Exit: 0 the env runs here, 1 a problem (no driver or GPU included), 2 bad input.")
    p.add_argument("env", metavar="ENV", nargs="?", help="env name (default: the machine alone)")
    p.set_defaults(needs_workspace=False)  # the machine alone needs none
    json_option(p)
