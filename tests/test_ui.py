"""Progress rendering: sizes for people, and downloads summed into a spinner's text."""

from __future__ import annotations

import pytest

from envlock import ui


@pytest.mark.parametrize(("n", "text"), [(999, "999 B"), (743_400, "743.4 kB"), (9_400_000, "9.4 MB"),
                                         (1_135_000_000, "1.1 GB"), (999_999, "1.0 MB"), (999_960_000, "1.0 GB")])
def test_size_reads_as_people_write_it(n: int, text: str) -> None:
    assert ui.size(n) == text


def test_status_progress_sums_downloads_into_the_status_text() -> None:
    shown: list[str] = []
    progress = ui.StatusProgress(shown.append, "locking envs/e.toml")
    progress.begin("torch-2.whl", 2_000_000_000)
    assert shown[-1] == "locking envs/e.toml: downloading 1 wheel to hash it, 0 B of 2.0 GB"
    progress.begin("torchvision-0.whl", 8_000_000)
    progress.advance("torch-2.whl", 1_500_000_000)
    progress.advance("torchvision-0.whl", 8_000_000)
    progress.end("torchvision-0.whl")  # always shown, however soon after the last update
    assert shown[-1] == "locking envs/e.toml: downloading 2 wheels to hash them, 1.5 GB of 2.0 GB"
    progress.begin("no-length.whl", None)  # a server that sends no Content-Length: no total
    assert shown[-1] == "locking envs/e.toml: downloading 3 wheels to hash them, 1.5 GB"
    progress.end("no-length.whl")
    progress.end("torch-2.whl")  # all done: the status says what the work is again (uv resolving)
    assert shown[-1] == "locking envs/e.toml"
