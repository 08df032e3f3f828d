"""Progress of long loops in the rule layer (generator training), silent unless an application installs bars.

The rule layer knows nothing of terminals or command-line flags: a loop asks :func:`bar` for a progress object
and reports to it; ``fednsl``'s pipeline installs its bar factory (:func:`set_bar_factory`) for the length of a
run, so that bars follow ``fednsl train -q`` and show on a terminal only. The factory is a context variable:
runs in concurrent threads each see their own, and one run ending cannot leave its factory to the next.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

# (total=, desc=, unit=) -> an object with update(n), set_postfix_str(s, refresh=False) (shown at the next update,
# so that a bar still appears only after its delay), close(); tqdm's bars are such objects
BarFactory = Callable[..., Any]

_FACTORY: ContextVar[BarFactory | None] = ContextVar("rules_progress_factory", default=None)


class SilentBar:
    """What :func:`bar` returns when no factory is installed: accepts every report and shows nothing."""

    disable = True

    def update(self, n: int = 1) -> None:
        pass

    def set_postfix_str(self, s: str = "", refresh: bool = True) -> None:
        pass

    def close(self) -> None:
        pass


@contextmanager
def installed(factory: BarFactory | None) -> Iterator[None]:
    """Use ``factory`` for the bars of the rule layer inside the block (None: silent); restores the previous one."""
    token = _FACTORY.set(factory)
    try:
        yield
    finally:
        _FACTORY.reset(token)


@contextmanager
def bar(total: int, desc: str, unit: str = "it") -> Iterator[Any]:
    """A progress object for a loop of ``total`` steps (closed on exit)."""
    factory = _FACTORY.get()
    pbar = SilentBar() if factory is None else factory(total=total, desc=desc, unit=unit)
    try:
        yield pbar
    finally:
        pbar.close()
