"""``envlock diff OLD NEW``: the upgrade report between two locks named on the command line."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from envlock.commands.lockrefs import load_lock_ref, spec_at
from envlock.errors import EnvlockError
from envlock.model.spec import load_env_spec
from envlock.model.targets import reported_note
from envlock.resolution.drift import drift
from envlock.store.store import Store
from envlock.workspace import Workspace

if TYPE_CHECKING:
    from envlock.commands.upgradereport import ReportOptions, UpgradeReport


def diff_refs(ws: Workspace, old: str, new: str, options: ReportOptions | None = None, *,
              targets: tuple[str | None, str | None] = (None, None)) -> tuple[UpgradeReport, tuple[str, ...]]:
    """What changes from lock ``old`` to ``new`` (as ``load_lock_ref`` reads them): the upgrade
    report (``upgradereport.upgrade_report``: sources' commit ranges read from the store's git mirrors,
    fetched with ``options.fetch``), and notes.

    A note names an env given by name whose lock file the spec has moved past: its diff
    does not show the spec's change. A spec that does not read gives no note (the note is a
    courtesy; the diff stands). ``targets``: of locks of several targets, the target read of OLD and of
    NEW (None: this machine's); two targets of one file say what differs between them.
    """
    from envlock.commands.upgradereport import ReportOptions, upgrade_report

    # Not given a target, a machine of none of a lock's targets diffs too: its first target's, said in a note.
    before = load_lock_ref(ws, old, targets[0], whole=targets[0] is None)
    after = load_lock_ref(ws, new, targets[1], whole=targets[1] is None)
    notes = list(dict.fromkeys(note for r, asked in ((before, targets[0]), (after, targets[1])) if asked is None
                               and (note := reported_note(r.lock.target, r.lock.platform, "the diff")) is not None))
    for ref in sorted({r.env: r for r in (before, after) if r.env is not None}.values(), key=lambda r: str(r.env)):
        env = str(ref.env)
        if ref.path is None:  # never: an env name is read from its lock file
            continue
        try:
            spec = load_env_spec(ws, env)
            target = ref.lock.target
            spec = spec.for_target(target) if target is not None and target in spec.targets else spec
            stale = drift(ws, env, spec, ref.lock)  # the lock read once, above
        except EnvlockError:
            continue
        if not stale.current:
            notes.append(f"{ws.relative(ref.path)} is stale for envs/{env}.toml ({'; '.join(stale.reasons)}); "
                         f"run `envlock lock {env}` to diff what the spec asks for")
    # The specs the two locks were made from, where git has them, as `upgrade` has both: the same reasons.
    new_spec = spec_at(ws, after)
    options = replace(options or ReportOptions(), old_spec=spec_at(ws, before) or new_spec, new_spec=new_spec)
    store = Store.open(create=options.fetch)  # only a fetch writes (into the mirrors)
    report = upgrade_report(ws, before.lock, after.lock, old_label=before.label, new_label=after.label, store=store,
                            options=options)
    return report, (*notes, *report.notes)
