"""Lineage rows appended on a background thread, so the search loop never waits on Parquet
encoding or fsync (a batch commit fsyncs a file and its directory: milliseconds on an idle disk,
far more on a busy one, which would otherwise stall every GPU's next submission).

Rows keep their order (one thread, one FIFO). A row still queued when the process is killed is
lost, like a row still buffered in the writer: resume re-proposes such candidates, and none is
in the lineage twice. A writer error is raised in the loop at the next append or flush.
"""

from __future__ import annotations

import queue
import threading
from typing import Any, Protocol

from fsr.types import Candidate, Evaluation


class LineageSink(Protocol):
    """Where results go (fsr.lineage.LineageWriter)."""

    def append(self, candidate: Candidate, evaluation: Evaluation, **extra: Any) -> None: ...

    def flush(self) -> None: ...


class BackgroundSink:
    """Wraps a LineageSink: `append` queues, a worker thread appends; `close` drains and stops
    (it flushes the wrapped sink but does not close it: its owner does)."""

    def __init__(self, sink: LineageSink, max_queued: int = 4096) -> None:
        self.sink = sink
        self._queue: queue.Queue[tuple[Candidate, Evaluation, dict[str, Any]] | None] = queue.Queue(max_queued)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="fsr-lineage", daemon=True)
        self._thread.start()

    def append(self, candidate: Candidate, evaluation: Evaluation, **extra: Any) -> None:
        self._raise()
        self._queue.put((candidate, evaluation, extra))  # blocks only if the disk falls far behind

    def flush(self) -> None:
        """Wait until every queued row reached the wrapped sink, then flush it."""
        self._queue.join()
        self._raise()
        self.sink.flush()

    def close(self) -> None:
        """Drain, flush and stop the thread. Idempotent."""
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()
        self._raise()
        self.sink.flush()

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is None:
                    return
                if self._error is None:
                    self.sink.append(item[0], item[1], **item[2])
            except BaseException as e:  # kept for the loop's thread, which raises it
                self._error = e
            finally:
                self._queue.task_done()

    def _raise(self) -> None:
        if self._error is not None:
            raise RuntimeError(f"lineage writer failed: {self._error}") from self._error
