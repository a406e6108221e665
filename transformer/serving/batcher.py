"""One thread that decodes the waiting requests, those that go together in one call.

Requests that arrive together (each within `max_wait` seconds of the one
before, for at most `GATHER_ROUNDS` x `max_wait` in all, up to `max_batch`
sentences and `max_work` work) are translated in one call of the engine, which is how a translator spends its time well. Only requests
with the same search (the strategy object's equality: beam, alpha and
n-best included) and the same output cap share a call, and a search whose
output depends on its batch (sampling: `Strategy.TWO_PASSES` false) is
decoded alone, so that a seed gives the same translation under load.

A job whose client has left or whose deadline has passed is cancelled
(`concurrent.futures.Future.cancel`) and dropped before it is decoded; a
call already running finishes (the engine cannot be interrupted), and it is
bounded by `max_work`.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import logging
import queue
import threading
import time
from collections.abc import Callable

logger = logging.getLogger(__name__)

__all__ = ["GATHER_ROUNDS", "Batcher", "Busy", "Job", "Stopping"]

# A call gathers requests while each arrives within `max_wait` of the one
# before (clients answered together come back one after the other, each
# behind the others' HTTP work), for at most this many `max_wait` in all.
GATHER_ROUNDS = 8


class Busy(Exception):
    """Too many requests wait for the decoder."""


class Stopping(Exception):
    """The server is stopping and takes no more requests."""


@dataclasses.dataclass
class Job:
    """One request's sentences for the decoder, and the future of their results."""

    sentences: list
    search: object
    max_length: int | None
    work: int = 0
    arrived: float = dataclasses.field(default_factory=time.monotonic)
    future: concurrent.futures.Future = dataclasses.field(
        default_factory=concurrent.futures.Future)

    def batches_with(self, other: Job) -> bool:
        """Whether both may be decoded in one call: the same search and output cap,
        and a search whose output does not depend on the batch."""
        return (self.search.TWO_PASSES and other.search.TWO_PASSES
                and self.search == other.search and self.max_length == other.max_length)


class Batcher:
    """The decoder thread and its queue.

    Args:
        engine: `engine(sentences, search, max_length)`, the results in order.
        max_batch: sentences gathered into one call (a request with more is
            decoded alone).
        max_wait: seconds a call waits for one more request, counted from the
            arrival of the latest (requests already waiting are not waited for,
            and after a call of one request only those already waiting join).
        max_waiting: requests that may wait; `submit` raises `Busy` beyond.
        max_work: the work (`Job.work`) gathered into one call at most.
        on_batch: called with `(sentences, seconds)` after each engine call.
    """

    def __init__(self, engine: Callable, max_batch: int = 32, max_wait: float = 0.005,
                 max_waiting: int = 256, max_work: float = float("inf"),
                 on_batch: Callable[[int, float], None] | None = None):
        self.engine = engine
        self.max_batch = max_batch
        self.max_wait = max_wait
        self.max_work = max_work
        self.on_batch = on_batch
        self._queue: queue.Queue = queue.Queue(maxsize=max_waiting)
        self._pending: list[Job] = []  # taken from the queue, not in this call
        self._waiting = 0  # jobs neither cancelled nor started
        self._last_jobs = 0  # jobs gathered into the last call
        self._lock = threading.Lock()
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name="decoder", daemon=True)
        self._thread.start()

    @property
    def waiting(self) -> int:
        """Requests waiting for the decoder (not those cancelled)."""
        return self._waiting

    def _count(self, change: int) -> None:
        with self._lock:
            self._waiting += change

    def _cancelled(self, future: concurrent.futures.Future) -> None:
        if future.cancelled():
            self._count(-1)

    def submit(self, sentences, search, max_length=None, work=0) -> concurrent.futures.Future:
        """Queues a request; its future gets the engine's results (or its exception).

        Cancel the future to drop the request before it is decoded.

        Raises:
            Busy: `max_waiting` requests wait already.
            Stopping: the batcher is closed.
        """
        if self._closed:
            raise Stopping("the server is stopping")
        job = Job(list(sentences), search, max_length, work)
        self._count(1)  # before the decoder may take it
        try:
            self._queue.put_nowait(job)
        except queue.Full:
            self._count(-1)
            raise Busy(f"{self._queue.maxsize} requests are waiting already") from None
        job.future.add_done_callback(self._cancelled)
        return job.future

    def close(self) -> None:
        """Decodes the requests already taken, then stops the thread."""
        self._closed = True
        self._queue.put(None)
        self._thread.join()

    def _next(self, timeout: float | None):
        """The next job (pending first), None to stop, or `queue.Empty` after `timeout`."""
        if self._pending:
            return self._pending.pop(0)
        return self._queue.get(timeout=timeout)

    def _loop(self) -> None:
        stopping = False
        while not stopping or self._pending:
            job = self._next(None)
            if job is None:
                stopping = True
                continue
            batch, stopping = self._gather(job, stopping)
            self._decode(batch)

    def _gather(self, first: Job, stopping: bool) -> tuple[list[Job], bool]:
        """`first` and the waiting jobs that go with it, within the call's bounds;
        the others stay pending, in order."""
        batch, count, work = [first], len(first.sentences), first.work
        if not first.search.TWO_PASSES:
            return batch, stopping  # decoded alone
        skipped = []
        # A lone client's request is not kept waiting for companions that never
        # come: after a call of one request, only those already queued join.
        wait = self.max_wait if self._last_jobs > 1 else 0.0
        latest, cap = first.arrived, first.arrived + GATHER_ROUNDS * wait
        while count < self.max_batch and not stopping:
            deadline = min(latest + wait, cap)
            try:
                job = self._next(max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            latest = max(latest, job.arrived)
            if job is None:
                stopping = True
                break
            if job.future.cancelled():
                continue
            if (first.batches_with(job) and count + len(job.sentences) <= self.max_batch
                    and work + job.work <= self.max_work):
                batch.append(job)
                count, work = count + len(job.sentences), work + job.work
            else:
                skipped.append(job)
                if len(skipped) >= self.max_batch:  # enough for the next calls
                    break
        self._pending[:0] = skipped
        return batch, stopping

    def _decode(self, batch: list[Job]) -> None:
        """Decodes the jobs not cancelled in one call; never raises."""
        jobs = [job for job in batch if job.future.set_running_or_notify_cancel()]
        self._count(-len(jobs))
        self._last_jobs = len(batch)
        if not jobs:
            return
        sentences = [s for job in jobs for s in job.sentences]
        started = time.perf_counter()
        try:
            results = list(self.engine(sentences, jobs[0].search, jobs[0].max_length))
        except Exception as err:  # noqa: BLE001 - the clients are told, the thread lives on
            logger.exception("Decoding %d sentences failed.", len(sentences))
            for job in jobs:
                job.future.set_exception(err)
            return
        if self.on_batch is not None:
            self.on_batch(len(sentences), time.perf_counter() - started)
        for job in jobs:
            job.future.set_result(results[:len(job.sentences)])
            results = results[len(job.sentences):]
