"""Terminal output: aligned tables, check findings and a one-line progress display.

Plain text only (no colour libraries): the output is read in terminals, CI logs and bug reports
alike, and must stay greppable. The progress display rewrites one line on a terminal and falls
back to a line per change elsewhere, so a log of ``status --watch`` is short and still complete.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TextIO

OK, WARN, FAIL = "OK", "WARN", "FAIL"


@dataclass(frozen=True)
class Finding:
    """One check's result: its level, which check, and what was found or what to do."""

    level: str  # OK / WARN / FAIL
    check: str
    text: str

    def line(self) -> str:
        return f"  {self.level:<4}  {self.check:<12}  {self.text}"


def summary(findings: Sequence[Finding], passed: str, failed: str) -> str:
    fails = sum(f.level == FAIL for f in findings)
    warns = sum(f.level == WARN for f in findings)
    return f"{fails} FAIL, {warns} WARN: {failed if fails else passed}"


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], indent: str = "  ") -> list[str]:
    """Rows aligned under their headers; the last column is not padded (no trailing blanks)."""
    widths = [len(h) for h in headers]
    for row in rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))

    def line(cells: Sequence[str]) -> str:
        padded = [c.ljust(w) for c, w in zip(cells[:-1], widths[:-1], strict=True)]
        return (indent + "  ".join([*padded, cells[-1]])).rstrip()

    return [line(headers), *(line(r) for r in rows)]


def duration(seconds: float) -> str:
    """``75`` -> ``1m15s``: short enough for the progress line."""
    seconds = max(0, int(seconds))
    minutes, secs = divmod(seconds, 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


class Progress:
    """One status line that updates in place on a terminal.

    Off a terminal (CI, a pipe, tests) each *change* of the text becomes one line and repeats
    are dropped, so a long wait does not flood the log with identical lines.
    """

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._tty = bool(getattr(stream, "isatty", lambda: False)())
        self._last = ""
        self._open = False

    def update(self, elapsed_seconds: float, text: str) -> None:
        if self._tty:
            self._stream.write(f"\r\x1b[2K[{duration(elapsed_seconds):>6}] {text}")
            self._stream.flush()
            self._open = True
        elif text != self._last:
            self._stream.write(f"[{duration(elapsed_seconds):>6}] {text}\n")
        self._last = text

    def finish(self) -> None:
        """End the in-place line so that what follows starts on its own line."""
        if self._open:
            self._stream.write("\n")
            self._open = False
