"""The machine-local fleet secret in the shared temp directory: another user who makes a file of its name first
(or a link to a file they can read) must not choose the secret every service signs owners and admin tokens with."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from toolkit.wire import local_secret


def test_a_new_secret_is_made_once_for_this_user_alone(tmp_path: Path) -> None:
    path = tmp_path / "secret"
    made = local_secret(path)
    assert len(made) == 64 and local_secret(path) == made
    assert path.stat().st_mode & 0o777 == 0o600 and path.stat().st_uid == os.getuid()
    assert [p.name for p in tmp_path.iterdir()] == ["secret"]  # the temporary it was written under is gone


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o622])
def test_a_file_others_may_read_or_write_is_refused(tmp_path: Path, mode: int) -> None:
    path = tmp_path / "secret"
    path.write_bytes(b"known to someone else")
    path.chmod(mode)
    with pytest.raises(RuntimeError, match="only its owner may read"):
        local_secret(path)


def test_a_link_to_a_file_anyone_can_read_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "public"
    target.write_bytes(b"readable by all")
    target.chmod(0o600)  # even one of this user's own: the name must be the file itself
    (tmp_path / "secret").symlink_to(target)
    with pytest.raises(OSError):
        local_secret(tmp_path / "secret")


def test_an_empty_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "secret"
    path.touch(mode=0o600)
    with pytest.raises(RuntimeError, match="empty"):
        local_secret(path)


def _read_into(path: Path, seen: list[bytes]) -> None:
    seen.append(local_secret(path))


def test_services_starting_together_all_read_the_one_secret_whole(tmp_path: Path) -> None:
    """The file used to be created, then written: one started in between read it empty (another secret)."""
    for round_ in range(20):
        path, seen = tmp_path / f"secret-{round_}", []
        threads = [threading.Thread(target=_read_into, args=(path, seen)) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(seen) == 8 and len(set(seen)) == 1 and len(seen[0]) == 64
