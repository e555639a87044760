"""Progress of long work — ingest, compaction, splitting — as lines of files, rows and seconds.

The lines go to the logger ``spark_client.progress`` at INFO. A library stays quiet: with no handler
configured Python prints only warnings and worse. :func:`show_progress` prints them (the jobs' command line
calls it unless ``--quiet``; any program, the demo included, can)::

    12:00:01 ingest into 'events': writing files from 4 input partitions
    12:00:11 ingest into 'events': 7/16 tasks done (10 s)
    12:00:17 ingest into 'events': wrote 16 files, 1,000,000 rows in 15.8 s; committing
    12:00:18 ingest into 'events': committed at transaction 5 in 0.4 s

While a phase runs Spark tasks, a line every ``interval`` seconds says how many of its tasks are done
(from Spark's status tracker, on the driver): nothing is asked of the tasks themselves.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO

from pyspark import SparkContext
from pyspark.sql import SparkSession

LOGGER = logging.getLogger("spark_client.progress")
DEFAULT_INTERVAL_SECONDS = 10.0
_HANDLER_NAME = "spark_client.progress"


def show_progress(stream: TextIO | None = None, interval: float = DEFAULT_INTERVAL_SECONDS) -> None:
    """Print progress lines to ``stream`` (stderr), with a tasks-done line every ``interval`` seconds while
    Spark works. Calling it again replaces the earlier stream and interval."""
    global _interval
    _interval = interval
    hide_progress()
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.set_name(_HANDLER_NAME)
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s", "%H:%M:%S"))
    LOGGER.addHandler(handler)
    LOGGER.setLevel(logging.INFO)


_interval = DEFAULT_INTERVAL_SECONDS


def hide_progress() -> None:
    """Undo :func:`show_progress`: quiet again."""
    for handler in list(LOGGER.handlers):
        if handler.get_name() == _HANDLER_NAME:
            LOGGER.removeHandler(handler)
    LOGGER.setLevel(logging.NOTSET)


def report(what: str, message: str, *args: Any) -> None:
    """One progress line: ``what`` (e.g. ``ingest into 'events'``), then ``message % args``."""
    if LOGGER.isEnabledFor(logging.INFO):
        LOGGER.info(f"{what}: {message}", *args)


def context_of(spark: SparkSession) -> SparkContext | None:
    """The session's SparkContext, None where there is none to ask (Spark Connect)."""
    try:
        return spark.sparkContext
    except Exception:
        return None


@contextmanager
def spark_stage(what: str, spark_context: SparkContext | None) -> Iterator[None]:
    """While the block runs Spark jobs, report every ``interval`` seconds how many of their tasks are done
    (nothing when no one shows progress)."""
    if spark_context is None or not LOGGER.isEnabledFor(logging.INFO):
        yield
        return
    stop = threading.Event()
    started = time.monotonic()
    tracker = spark_context.statusTracker()

    def tick() -> None:
        while not stop.wait(_interval):
            done = total = 0
            for stage_id in tracker.getActiveStageIds():
                info = tracker.getStageInfo(stage_id)
                if info is not None:
                    done += info.numCompletedTasks
                    total += info.numTasks
            if total:
                report(what, "%d/%d tasks done (%.0f s)", done, total, time.monotonic() - started)

    ticker = threading.Thread(target=tick, name="spark-client-progress", daemon=True)
    ticker.start()
    try:
        yield
    finally:
        stop.set()
        ticker.join()
