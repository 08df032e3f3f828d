"""How the CLI reports bad input: one line on stderr and exit status 2, never a traceback.

:class:`BadInput` is the ``click`` exception for a file, option or config that is not what it should be.
:func:`as_bad_input` turns the low-level errors that reading a damaged file raises (bad UTF-8, a corrupt
gzip/tar/zip stream, a number too large for a float, ...) into one; the ``fednsl`` group applies it to
every subcommand.
"""

from __future__ import annotations

import gzip
import json
import tarfile
import zipfile
import zlib

import click

# errors a damaged or foreign input file raises while being read
DATA_ERRORS: tuple[type[BaseException], ...] = (
    UnicodeDecodeError,
    json.JSONDecodeError,
    zlib.error,
    gzip.BadGzipFile,
    EOFError,
    tarfile.TarError,
    zipfile.BadZipFile,
    OverflowError,
    FileNotFoundError,
    IsADirectoryError,
    NotADirectoryError,
    PermissionError,
)


class BadInput(click.ClickException):
    """Bad input (file, option, config): printed as ``Error: <one line>``, exit status 2."""

    exit_code = 2


def one_line(exc: BaseException) -> str:
    """A single-line description of ``exc`` that keeps the file name when the exception carries one, and names it
    once (``[Errno 2] No such file or directory: 'x'`` reads ``x: no such file or folder``)."""
    if (
        isinstance(exc, OSError)
        and type(exc).__str__ is OSError.__str__
        and exc.filename
        and exc.strerror
        and not exc.filename2
    ):
        reason = exc.strerror[:1].lower() + exc.strerror[1:]
        return f"{exc.filename}: {'no such file or folder' if reason == 'no such file or directory' else reason}"
    text = " ".join(str(exc.args[0] if isinstance(exc, KeyError) and exc.args else exc).split())
    name = getattr(exc, "filename", None)
    if name and str(name) not in text:
        text = f"{name}: {text}"
    head, sep, rest = text.partition(": ")
    if sep and rest.startswith(f"{head}: "):  # a message that names its file, from an error that adds it again
        text = rest
    if isinstance(exc, UnicodeDecodeError):
        text = f"not UTF-8 text ({exc.reason} at byte {exc.start})"
    elif isinstance(exc, (zlib.error, gzip.BadGzipFile, EOFError)):
        text = f"corrupt or truncated compressed data ({text or type(exc).__name__})"
    return text or type(exc).__name__


def as_bad_input(exc: BaseException) -> BadInput:
    return BadInput(one_line(exc))


def path_problem(exc: click.BadParameter) -> BadInput | None:
    """A ``click.Path`` argument or option that names a missing (or unusable) path, as one line naming the path and
    the parameter, exit status 2, instead of click's usage block; None for any other bad parameter."""
    param = exc.param
    if param is None or not isinstance(param.type, click.Path):
        return None
    import ast
    import re

    text = " ".join(exc.message.split()).rstrip(".")
    missing = re.fullmatch(r"\w+ ('.*'|\".*\") does not exist", text)  # click: Path '/x' does not exist.
    if missing:
        text = f"{ast.literal_eval(missing.group(1))}: no such file or folder"
    hint = param.get_error_hint(exc.ctx) if exc.ctx is not None else param.human_readable_name
    return BadInput(f"{text} ({hint.replace(chr(39), '')})")
