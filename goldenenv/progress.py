"""Progress of a long task made of steps, readable in every output mode.

A terminal shows the step now running (`show`, e.g. a rich status or progress bar); a pipe, a CI log or a file
gets plain lines (`log`): one per step when it ends, with its elapsed seconds, and a heartbeat naming the step and
its seconds so far whenever nothing was written for HEARTBEAT_S, so a silent pip install or layer commit never
reads as a hang. Blocking work (a Docker build stream, debootstrap, an import) is read or run in a thread while the
caller's thread keeps the heartbeat; the clock and the feed are injected, so tests need no sleeps.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any, Protocol, TypeVar

HEARTBEAT_S = 10.0
"""The longest a long step stays silent in a log."""

T = TypeVar("T")
END = object()
"""What a Feed returns after its last item."""


class Feed(Protocol):
    def get(self, timeout: float) -> Any:
        """The next item, or queue.Empty when none came within `timeout` seconds."""


class ThreadFeed:
    """Items of a blocking iterable, read in a thread (its exception is raised here, in the reader's place)."""

    def __init__(self, items: Iterable[Any]):
        self._queue: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, args=(items,), daemon=True).start()

    def _read(self, items: Iterable[Any]) -> None:
        try:
            for item in items:
                self._queue.put((item, None))
        except BaseException as e:  # noqa: BLE001 - handed to the reader, which raises it
            self._queue.put((END, e))
            return
        self._queue.put((END, None))

    def get(self, timeout: float) -> Any:
        item, error = self._queue.get(timeout=timeout)
        if error is not None:
            raise error
        return item


def _call(action: Callable[[], T]) -> Iterator[T]:
    yield action()


class Steps:
    """Reports the steps of a task: `begin` each, feed it output, `end` it; `follow` and `wait` keep the heartbeat
    while a blocking source or call runs."""

    def __init__(self, log: Callable[[str], None], show: Callable[[str], None] = lambda text: None,
                 clock: Callable[[], float] = time.monotonic, every_s: float = HEARTBEAT_S,
                 feed: Callable[[Iterable[Any]], Feed] = ThreadFeed):
        self.log, self.show, self.clock, self.every_s, self.feed = log, show, clock, every_s, feed
        self.current: str | None = None
        self.detail = ""
        self.started = self.last_output = self.last_line = clock()

    def note(self, text: str) -> None:
        """A line of its own (what is about to happen, a decision)."""
        self._line(text)
        self.show(text)

    def begin(self, name: str) -> None:
        """Ends the step running (its line), and starts `name`."""
        self.end()
        self.current, self.detail = name, ""
        self.started = self.last_output = self.clock()
        self.show(name)

    def output(self, text: str) -> None:
        """A line of the current step's own output: the heartbeat quotes the latest."""
        text = text.strip()
        if text:
            self.detail, self.last_output = text, self.clock()
        self.beat()

    def end(self, note: str = "") -> float:
        """Ends the current step with its line, `name: 12.3 s` (and the note); its seconds."""
        if self.current is None:
            return 0.0
        seconds = self.clock() - self.started
        self._line(f"{self.current}: {seconds:.1f} s" + (f" ({note})" if note else ""))
        self.current = None
        return seconds

    def close(self) -> None:
        """Stops reporting the current step without its line (the caller reports how it ended)."""
        self.current = None

    def quiet_s(self) -> float:
        """Seconds of the current step since its last line of output (a Docker step's commit comes after it)."""
        return self.clock() - self.last_output

    def beat(self) -> None:
        """A heartbeat line when nothing was written for every_s seconds and a step is running."""
        now = self.clock()
        if self.current is not None and now - self.last_line >= self.every_s:
            detail = f" · {self.detail[:80]}" if self.detail else ""
            self._line(f"{self.current}: {now - self.started:.0f} s so far{detail}")
            self.show(f"{self.current} · {now - self.started:.0f} s{detail}")

    def follow(self, items: Iterable[T]) -> Iterator[T]:
        """The items of a blocking iterable as they come, with a heartbeat while none does."""
        feed = self.feed(items)
        while True:
            try:
                item = feed.get(timeout=max(0.0, self.last_line + self.every_s - self.clock()))
            except queue.Empty:
                self.beat()
                continue
            if item is END:
                return
            self.beat()
            yield item

    def wait(self, action: Callable[[], T]) -> T:
        """The result of a blocking call, with a heartbeat while it runs."""
        results = list(self.follow(_call(action)))
        return results[0]

    def _line(self, text: str) -> None:
        self.last_line = self.clock()
        self.log(text)


@contextmanager
def heartbeat(steps: Steps) -> Iterator[Steps]:
    """Heartbeats from a thread while the caller's own thread does work that cannot be followed (a flow's phase)."""
    stop = threading.Event()

    def run() -> None:
        while not stop.wait(max(0.1, steps.last_line + steps.every_s - steps.clock())):
            steps.beat()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield steps
    finally:
        stop.set()
        thread.join()
