"""One-line error messages (fednsl/cli/errors.py)."""

from __future__ import annotations

import errno
import os

from fednsl.cli.errors import one_line
from fednsl.federation.tracking import RunWriteError


def test_an_os_error_names_its_file_once() -> None:
    missing = FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), "/data/x")
    assert one_line(missing) == "/data/x: no such file or folder"
    folder = IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), "/data")
    assert one_line(folder) == "/data: is a directory"
    # an error with its own message keeps it (the file is named once by it)
    write = RunWriteError("/runs/a/metrics.jsonl", OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))
    assert one_line(write) == f"could not write /runs/a/metrics.jsonl ({os.strerror(errno.ENOSPC)})"
    assert one_line(FileNotFoundError("config 'x' not found")) == "config 'x' not found"


def test_a_message_that_names_its_file_is_not_prefixed_again() -> None:
    from kg.triples import TriplesError

    exc = TriplesError("/kg: no train file", file="/kg")
    assert str(exc) == "/kg: /kg: no train file" and one_line(exc) == "/kg: no train file"
