"""errors: the one root, and the pieces every stage's messages share."""

from __future__ import annotations

import pytest

from envlock.errors import did_you_mean


@pytest.mark.parametrize("word, choices, before, after, hint", [
    ("exclud", ["exclude", "overrides"], " (", ")", " (did you mean 'exclude'?)"),
    ("demoo", ["demo", "other"], "; ", "", "; did you mean 'demo'?"),
    ("demoo", ["demo"], "", " ", "did you mean 'demo'? "),
    ("zzz", ["demo", "other"], " (", ")", ""),  # nothing close: no hint at all
    ("demo", [], "; ", "", ""),
])
def test_a_typo_is_named_with_its_likely_meaning(word: str, choices: list[str], before: str, after: str,
                                                 hint: str) -> None:
    assert did_you_mean(word, choices, before=before, after=after) == hint
