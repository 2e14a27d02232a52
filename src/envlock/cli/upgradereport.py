"""The upgrade report rendered: lines for a terminal (``render_text``) or a block for a pull request
description (``render_markdown``), for ``envlock diff``, ``envlock upgrade`` and ``envlock bisect``
(``ledger``). The report itself is ``commands.upgradereport``'s; its ``to_dict`` is the ``--json``
document (docs/diff.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from envlock.cli.render import count
from envlock.model.spec import COMMIT_ID
from envlock.ui import size

if TYPE_CHECKING:
    from envlock.commands.upgradereport import UpgradeReport
    from envlock.model.lockdiff import LockDiff, PackageChange, SourceHistory, SourceMove


def _size_line(diff: LockDiff) -> str:
    """``1.2 MB -> 1.3 MB (+100.0 kB)``, and the packages whose size is not known."""
    a, b = diff.old_size, diff.new_size
    delta = b.known - a.known
    line = f"{size(a.known)} -> {size(b.known)} ({'+' if delta >= 0 else '-'}{size(abs(delta))})"
    unknown = [f"{', '.join(s.unknown)} ({side})" for s, side in ((a, "before"), (b, "after")) if s.unknown]
    return line + (f"; size unknown: {'; '.join(unknown)}" if unknown else "")


def _source_head(move: SourceMove) -> str:
    head = f"{move.name} {_pin(move.old)} -> {_pin(move.new)}"
    h = move.history
    if h is None:
        return head
    if h.direction == "unknown":
        return f"{head}: history unknown: {h.missing}"
    span = f", {h.first.date} .. {h.last.date}" if h.first and h.last else ""
    what = {"forward": f"{count(h.count, 'commit')}{span}",
            "backward": f"back {count(h.count, 'commit')} (the new commit is older){span}",
            "diverged": f"diverged: {count(h.count, 'commit')} not in the old commit's history{span}"}[h.direction]
    return f"{head}: {what}"


def _pin(value: str | None) -> str:
    """A commit or a tree digest as people read it (its first 12 hex digits)."""
    if value is None:
        return "(none)"
    if value.startswith("sha256:"):
        return value[:19]
    return value[:12] if COMMIT_ID.fullmatch(value) else value


def _touching_line(h: SourceHistory) -> str:
    if not h.paths:
        return "no patch: no file to watch"
    if not h.touching:
        return f"none of them touches the {count(len(h.paths), 'file')} the patches touch"
    return f"{count(len(h.touching), 'commit')} touching files the patches touch:"


def _package_line(p: PackageChange) -> str:
    sign = {"added": "+", "removed": "-", "changed": "~", "pending": "~"}[p.action]
    value = p.new if p.old is None else p.old if p.new is None else f"{p.old} -> {p.new}"
    if p.action == "pending":
        value, sizes = f"{p.old or '(new)'} -> pending", f" [{_opt_size(p.old_size)} -> size unknown]"
    elif p.action == "changed":
        sizes = f" [{_opt_size(p.old_size)} -> {_opt_size(p.new_size)}]"
    else:
        sizes = f" [{_opt_size(p.new_size if p.action == 'added' else p.old_size)}]"
    return f"{sign} {p.name} {value}{sizes}" + (f"  ({'; '.join(p.why)})" if p.why else "")


def _opt_size(n: int | None) -> str:
    return "size unknown" if n is None else size(n)


def render_text(report: UpgradeReport) -> str:
    """The report for a terminal: sections (nightlies, sources, builds, packages, download size),
    then every change, one a line."""
    d = report.diff
    yanked = ["yanked:", *(f"  ! {y.line()}" for y in report.yanked)] if report.yanked else []
    if not d.changes:
        return "\n".join([f"no differences ({count(d.unchanged, 'package')} identical)", *yanked])
    lines = [f"--- {d.old}", f"+++ {d.new}"]
    if d.nightlies:
        lines += ["nightlies:"] + [f"  {n.line()}" for n in d.nightlies]
    if d.sources:
        lines.append("sources:")
        for s in d.sources:
            lines.append(f"  {_source_head(s)}")
            if s.history is not None and s.history.direction != "unknown":
                lines.append(f"    {_touching_line(s.history)}")
                lines += [f"      {c.sha[:12]} {c.date} {c.subject}" for c in s.history.touching]
            lines += [f"    patch {p.name} {'added' if p.old is None else 'removed' if p.new is None else 'changed'}"
                      for p in s.patches]
    if d.builds:
        lines.append("builds:")
        lines += [f"  {'rebuild' if b.rebuild else 'no rebuild'} {b.text()}" for b in d.builds]
    if d.packages:
        lines += ["packages:"] + [f"  {_package_line(p)}" for p in d.packages]
    if kernels := [c for c in d.changes if c.kind == "kernels"]:
        lines += ["kernels:"] + [f"  {c.name}: {c.note}" for c in kernels]
    lines += yanked
    lines.append(f"download: {_size_line(d)}")
    lines += ["changes:", *ledger(d)]
    lines.append(f"{count(len(d.changes), 'change')}, {count(d.unchanged, 'package')} identical")
    return "\n".join(lines)


def ledger(d: LockDiff) -> list[str]:
    """Every change, one a line: ``~ package  torch: OLD -> NEW  (note)``."""
    lines = []
    for c in d.changes:
        sign = {"added": "+", "removed": "-", "changed": "~", "pending": "~"}[c.action]
        value = c.new if c.old is None else c.old if c.new is None else f"{c.old} -> {c.new}"
        note = f"  ({c.note})" if c.note else ""
        lines.append(f"{sign} {c.kind:8} {c.name}: {value}{note}")
    return lines


def _md(text: str) -> str:
    """Text safe in a Markdown table cell or list item: no HTML tag opens, no column breaks (a lone
    ``>`` mid-line is text, so ``->`` stays as written)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace("|", "\\|")


def render_markdown(report: UpgradeReport) -> str:
    """The report as a block for a pull request description: headings, a table of package changes,
    the commits touching patched files in collapsible details."""
    d = report.diff
    lines = [f"### envlock: `{d.old}` -> `{d.new}`", ""]
    yanked = ["#### Yanked (PEP 592)", "", *(f"- {_md(y.line())}" for y in report.yanked), ""] if report.yanked else []
    if not d.changes:
        return "\n".join([*lines, f"No differences ({count(d.unchanged, 'package')} identical).",
                          *(["", *yanked[:-1]] if yanked else [])])
    if d.nightlies:
        lines += ["#### Nightlies", ""] + [f"- {_md(n.line())}" for n in d.nightlies] + [""]
    if d.sources:
        lines += ["#### Sources", ""]
        for s in d.sources:
            lines.append(f"- {_md(_source_head(s))}")
            h = s.history
            if h is not None and h.direction != "unknown" and h.paths:
                if h.touching:
                    lines += ["  <details>", f"  <summary>{_md(_touching_line(h).rstrip(':'))}</summary>", ""]
                    lines += [f"  - `{c.sha[:12]}` {c.date} {_md(c.subject)}" for c in h.touching]
                    lines += ["", "  </details>"]
                else:
                    lines.append(f"  - {_md(_touching_line(h))}")
            lines += [f"  - patch `{p.name}` {'added' if p.old is None else 'removed' if p.new is None else 'changed'}"
                      for p in s.patches]
        lines.append("")
    if d.builds:
        lines += ["#### Local builds", "", "| build | rebuilds | why |", "|---|---|---|"]
        for b in d.builds:
            rebuilds = ("yes, pending" if b.pending else "yes") if b.rebuild else "no"
            lines.append(f"| {b.name} | {rebuilds} | {_md(b.text().partition(': ')[2])} |")
        lines.append("")
    if d.packages:
        counts = {a: sum(1 for p in d.packages if p.action == a) for a in ("added", "removed", "changed", "pending")}
        said = ", ".join(f"{n} {a}" for a, n in counts.items() if n)
        lines += [f"#### Packages ({said}; {d.unchanged} identical)", "",
                  "| package | before | after | size before | size after | why |", "|---|---|---|---|---|---|"]
        for p in d.packages:
            after = "pending" if p.action == "pending" else p.new or "-"
            lines.append(f"| {p.name} | {_md(p.old or '-')} | {_md(after)} | "
                         f"{'-' if p.old is None else _opt_size(p.old_size)} | "
                         f"{'pending' if p.action == 'pending' else '-' if p.new is None else _opt_size(p.new_size)} | "
                         f"{_md('; '.join(p.why))} |")
        lines.append("")
    lines += yanked
    lines.append(f"**Download size:** {_md(_size_line(d))}")
    # The ledger in a fenced block, where nothing needs escaping but a fence.
    lines += ["", "<details>", f"<summary>Every change ({len(d.changes)})</summary>", "", "```text",
              *(line.replace("```", "` ` `") for line in ledger(d)), "```", "", "</details>"]
    if report.notes:
        lines += [""] + [f"> note: {_md(n)}" for n in report.notes]
    return "\n".join(lines)
