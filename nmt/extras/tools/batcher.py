"""Dynamic batching for ``nmt-serve``: one worker thread decodes the requests of many clients.

One worker thread (so the event loop never decodes) decodes batches of requests with the same search
settings, at most ``serve.max_batch_work`` of work each (a larger single request is one batch), with
one ``translate`` call, and hands each request its own results. A batch is led by the oldest waiting
request and takes the requests with its settings oldest first; but a short request, of at most a
quarter of the oldest one's work, leads the next batch unless a short one led the previous, least
work first; when more work waits with its settings than a batch holds, that batch takes only
requests of at most 4 times its work, and is decoded quickly. So a one-word request waits for the
batch in progress, not for the queue, and the oldest for at most one batch of short ones. The batch
is decoded when the requests it may take fill ``max_batch_work``, or when the window closes: it
opens at the oldest request's arrival or the end of the previous batch (the later) and stays open
while requests come less than ``serve.max_wait_ms`` apart, for at most the previous decode's
duration. An out-of-memory error (CUDA or CPU) fails that batch only (503); another error in a batch
of several requests decodes them one by one, so only the bad one fails.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field

import torch

from nmt.extras.tools.ctranslate2 import InputTooLong

log = logging.getLogger("nmt.serve")
Key = tuple  # (beam_size, n_best, length_penalty, alignment, tgt_lang): a batch shares it


def is_out_of_memory(err: BaseException) -> bool:
    """A CPU ``MemoryError``, torch's CUDA OOM, or an engine's "out of memory" RuntimeError."""
    return isinstance(err, MemoryError | torch.cuda.OutOfMemoryError) or (
        isinstance(err, RuntimeError) and "out of memory" in str(err).lower())


class Overloaded(Exception):
    """The queue has no room for a request, or the server is stopping: 503 with
    ``Retry-After: retry_after`` (whole seconds); nothing was queued."""

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after


@dataclass(eq=False)
class _Job:
    sentences: list[str]
    key: Key
    work: int
    arrived: float
    future: Future = field(default_factory=Future)


def _least_work(job: _Job) -> tuple[int, float]:
    return job.work, job.arrived


def window_end(opened: float, arrivals: Sequence[float], max_wait: float, longest: float) -> float:
    """When the batch window closes (seconds, the clock of ``opened``): it opens at ``opened``
    and stays open while requests arrive less than ``max_wait`` apart (``arrivals``, ascending;
    those before ``opened`` count as arriving then), at most until ``opened + longest``."""
    end, cap = opened + max_wait, opened + longest
    for arrived in arrivals:
        if arrived > min(end, cap):
            break
        end = max(end, arrived + max_wait)
    return min(end, cap)


SHORT = 4   # a request of at most 1/SHORT of the oldest one's work is short (pick_batch)


def pick_batch(waiting: Sequence[_Job], short_may_lead: bool, max_work: int
               ) -> tuple[list[_Job], bool]:
    """The next batch of ``waiting`` (arrival order), and whether it is full (the requests with
    its settings hold ``max_work`` or more). With ``short_may_lead``, a short request (the one
    of least work, the older of equals, if at most 1/``SHORT`` of the oldest one's work) leads,
    and the batch takes the requests with its settings least work first; if they are full,
    only those of at most ``SHORT`` x its work, so that it is decoded quickly. Otherwise the
    oldest leads and the batch takes the requests with its settings oldest first. Each while
    the batch's work stays <= ``max_work``."""
    oldest, least = waiting[0], min(waiting, key=_least_work)
    short = short_may_lead and least.work * SHORT <= oldest.work
    leader = least if short else oldest
    same = [j for j in waiting if j.key == leader.key]
    full = sum(j.work for j in same) >= max_work
    if short:
        same = sorted((j for j in same if not full or j.work <= SHORT * least.work),
                      key=_least_work)
    batch, work = [], 0
    for job in same:
        if not batch or work + job.work <= max_work:
            batch.append(job)
            work += job.work
    return batch, full


class Batcher:
    """Dynamic batching in one worker thread (module docstring). ``decode(sentences, key)``
    returns one result per sentence. ``submit`` may be called from any thread; ``stop`` turns
    new requests away and closes the window; ``close`` also waits until everything submitted
    is answered and the thread has ended. ``clock``: seconds (tests inject one)."""

    def __init__(self, decode: Callable[[list[str], Key], list], max_batch_work: int,
                 max_wait_ms: float, max_queue_sentences: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.decode, self.max_work, self.max_wait = decode, max_batch_work, max_wait_ms / 1000.0
        self.max_queue, self.clock = max_queue_sentences, clock
        self._cond = threading.Condition()
        self._waiting: list[_Job] = []      # submitted, not yet decoding, in arrival order
        self._stopping = False
        self.queued = self._queued_work = 0  # sentences (and their work) not yet answered
        self._rate = 0.0                     # work per second of the latest batch
        self._thread = threading.Thread(target=self._loop, name="nmt-serve-batcher", daemon=True)
        self._thread.start()

    def submit(self, sentences: Sequence[str], key: Key, work: int) -> Future:
        """Queue a request of ``work`` (:func:`~nmt.extras.tools.serve.request_work`).

        Its future gets the results.
        Overloaded, at once, when the batcher is stopping or the queue lacks room for the
        request's n sentences and n - 1 more: a larger request is refused earlier, so that a
        queue full of large requests still takes a short one."""
        with self._cond:
            if self._stopping:
                raise Overloaded("the server is shutting down.", 1)
            if self.queued + 2 * len(sentences) - 1 > self.max_queue:
                retry = min(60, max(1, math.ceil(self._queued_work / self._rate))) \
                    if self._rate else 1
                raise Overloaded(f"the server is busy: {self.queued} sentences are queued and it "
                                 f"queues at most {self.max_queue} (serve.max_queue_sentences); "
                                 f"retry after {retry} s.", retry)
            job = _Job(list(sentences), key, work, self.clock())
            self._waiting.append(job)
            self.queued += len(job.sentences)
            self._queued_work += work
            self._cond.notify()
        return job.future

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify()

    def close(self) -> None:
        self.stop()
        self._thread.join()

    def _next_batch(self, free_since: float, last_decode: float, short_may_lead: bool
                    ) -> tuple[list[_Job], bool] | None:
        """Wait for a batch to decode (:func:`pick_batch`), and whether a short request leads
        it (None: stopping, nothing left): at once when batching is off, when stopping or when
        the batch is full, else when the window (:func:`window_end`) closes."""
        with self._cond:
            while True:
                if not self._waiting:
                    if self._stopping:
                        return None
                    self._cond.wait()
                    continue
                batch, full = pick_batch(self._waiting, short_may_lead,
                                         self.max_work if self.max_wait > 0 else 0)
                if self.max_wait == 0 or self._stopping or full:
                    break
                # The window opens when the oldest request arrives or the worker becomes free
                # (the later) and stays open while requests keep coming less than max_wait
                # apart, for at most as long as the previous batch took to decode: concurrent
                # clients, answered together, come back over many milliseconds and share the
                # next batch instead of splitting into a small batch and a large one.
                end = window_end(max(self._waiting[0].arrived, free_since),
                                 [j.arrived for j in self._waiting], self.max_wait,
                                 max(self.max_wait, last_decode))
                if end <= self.clock():
                    break
                self._cond.wait(end - self.clock())
            short = batch[0] is not self._waiting[0]
            for job in batch:
                self._waiting.remove(job)
            return batch, short

    def _loop(self) -> None:
        free_since, last_decode, short = self.clock(), 0.0, False
        while (picked := self._next_batch(free_since, last_decode, not short)) is not None:
            batch, short = picked
            start = self.clock()
            for job in batch:
                if not job.future.set_running_or_notify_cancel():
                    self._answered(job)
            running = [j for j in batch if j.future.running()]
            self._run(running)
            free_since = self.clock()
            last_decode = free_since - start
            if running and last_decode > 0:   # the work decoded, not the cancelled requests'
                self._rate = sum(j.work for j in running) / last_decode

    def _answered(self, job: _Job) -> None:
        """Count ``job`` out of the queue: before its future is set, so that a client that
        sends its next request at once finds the room."""
        with self._cond:
            self.queued -= len(job.sentences)
            self._queued_work -= job.work

    def _run(self, batch: list[_Job]) -> None:
        if not batch:
            return
        start = self.clock()
        try:
            results = self.decode([s for j in batch for s in j.sentences], batch[0].key)
        except Exception as err:
            if len(batch) > 1 and not is_out_of_memory(err):
                log.warning("batch of %d requests failed (%s); decoding them one by one",
                            len(batch), type(err).__name__)
                for job in batch:
                    self._run([job])
                return
            oom = is_out_of_memory(err)
            if oom and torch.cuda.is_available():
                torch.cuda.empty_cache()
            if not isinstance(err, InputTooLong):   # a client's 413, logged by the endpoint
                log.log(logging.WARNING if oom else logging.ERROR, "batch failed: %s", err,
                        exc_info=not oom)
            for job in batch:
                self._answered(job)
                job.future.set_exception(err)
            return
        done, offset = self.clock(), 0
        for job in batch:
            self._answered(job)
            job.future.set_result(results[offset: offset + len(job.sentences)])
            offset += len(job.sentences)
        log.info("batch: %d requests, %d sentences, work %d, wait %.1f ms, decode %.1f ms",
                 len(batch), offset, sum(j.work for j in batch),
                 (start - min(j.arrived for j in batch)) * 1000, (done - start) * 1000)
