"""The cleanup policy: how long each kind of object is kept before cleanup may delete it, and the checks
that keep those delays safe.

The garbage collection delay and the claim expiry are per instance (``gc_delay_minutes`` and
``claim_expiry_minutes`` in the CDK config, which reach the cleanup Lambda as :data:`GC_DELAY_ENV` and
:data:`CLAIM_EXPIRY_ENV`), and a table may override the delay (:data:`GC_DELAY_PROPERTY`). What cleanup
does with them is :mod:`statestore.services.cleanup`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass

from statestore import instance
from statestore.errors import (
    StateStoreError,
)
from statestore.store.tables import TableInfo

GC_DELAY_PROPERTY = "gc_delay_minutes"  # a table's own delay, overriding the instance's
GC_DELAY_ENV = "STATESTORE_GC_DELAY_MINUTES"
CLAIM_EXPIRY_ENV = "STATESTORE_CLAIM_EXPIRY_MINUTES"
_MINUTE_MS = 60_000
_HOUR_MS = 60 * _MINUTE_MS
_DAY_MS = 24 * _HOUR_MS

# EMR Serverless cancels a job run after 12 hours unless told otherwise (``executionTimeoutMinutes``). A query
# plans its file list inside its job, so a file that left the state is not needed for longer than that.
DEFAULT_GC_DELAY_MS = 12 * _HOUR_MS
# No compaction job runs longer than that either; the hour more lets a commit request it sent at the very
# end be applied from the queue before its claims are swept.
DEFAULT_CLAIM_EXPIRY_MS = 13 * _HOUR_MS
# How long after a writer makes a new data file's key (with the hour in it: layout.new_data_key) its object
# may still be written: a Spark job runs at most 12 hours (as above), and the bucket aborts a
# multipart upload left incomplete for a day. The orphan sweep's windows overlap by this and the clock skew.
DEFAULT_MAX_UPLOAD_MS = DEFAULT_GC_DELAY_MS + _DAY_MS
# How often the orphan sweep begins a full pass over a table's whole data prefix (a slice per period): for
# keys outside the data layout (older ones, names a writer chose itself), and any writer that broke the
# bounds above.
DEFAULT_FULL_SWEEP_INTERVAL_MS = 7 * _DAY_MS
# The longest delay or expiry accepted: beyond it a value is more likely a unit mistake (milliseconds given
# as minutes) than a wish.
MAX_DELAY_MS = 30 * _DAY_MS


@dataclass(frozen=True)
class CleanupPolicy:
    """What cleanup keeps, and for how long (all ages in milliseconds).

    ``gc_delay_ms``: how long a data file with no references stays before it is deleted. ``claim_expiry_ms``:
    how old a claim must be before it is released. Both at least ``max_clock_skew_ms`` (the skew assumed
    between any two clocks: a clock that far ahead sees a file or claim made now as that old already), and
    at most :data:`MAX_DELAY_MS`; see the module docstring for their defaults. ``max_clock_skew_ms=0`` says
    every clock is the same one (a test, a manual clean-up on one machine), and allows delays down to 0.

    ``max_request_age_ms``: how long after a job writes a data file its commit request may still reach the
    log (a queue, its dead-letter queue and a redrive can hold it that long). An object nothing names is an
    orphan only once older than that and the skew (:meth:`orphan_delay_ms`): before, a request still in
    flight may be about to name it.

    ``max_upload_ms``: how long after making a new data file's key a writer may still write its object; the
    orphan sweep's windows overlap by it and the skew. ``full_sweep_interval_ms``: how often the sweep
    begins a full pass over a table's data prefix (see :mod:`statestore.engine.orphan_sweep`).
    """

    log_min_snapshot_age_ms: int = _DAY_MS
    snapshot_retention_ms: int = 2 * _DAY_MS
    delete_files_batch_size: int = 1000
    # As long as the bucket's own expiry of request bodies: longer than a dead-letter queue keeps a request.
    request_body_max_age_ms: int = instance.REQUEST_BODY_EXPIRY_DAYS * _DAY_MS
    gc_delay_ms: int = DEFAULT_GC_DELAY_MS
    claim_expiry_ms: int = DEFAULT_CLAIM_EXPIRY_MS
    # A commit holds an uploaded body or a request body's copy for seconds before its entry is put; a day is
    # far beyond the longest commit (a Lambda runs 15 minutes at most).
    orphan_log_body_age_ms: int = _DAY_MS
    max_clock_skew_ms: int = instance.MAX_CLOCK_SKEW_SECONDS * 1000
    max_request_age_ms: int = instance.REQUEST_MAX_LIFETIME_SECONDS * 1000
    max_upload_ms: int = DEFAULT_MAX_UPLOAD_MS
    full_sweep_interval_ms: int = DEFAULT_FULL_SWEEP_INTERVAL_MS

    def __post_init__(self) -> None:
        ages = (
            self.log_min_snapshot_age_ms,
            self.snapshot_retention_ms,
            self.request_body_max_age_ms,
            self.orphan_log_body_age_ms,
            self.max_clock_skew_ms,
            self.max_request_age_ms,
            self.max_upload_ms,
            self.full_sweep_interval_ms,
        )
        if min(ages) < 0:
            raise ValueError(f"cleanup ages must not be negative: {self}")
        if self.delete_files_batch_size < 1:
            raise ValueError(f"delete_files_batch_size must be at least 1: {self}")
        for name in ("gc_delay_ms", "claim_expiry_ms"):
            value = getattr(self, name)
            if not 0 <= value <= MAX_DELAY_MS:
                raise ValueError(
                    f"{name} must be from 0 to {MAX_DELAY_MS} ({MAX_DELAY_MS // _DAY_MS} days), got {value}"
                )
            check_against_skew(name, value, self.max_clock_skew_ms)

    def orphan_delay_ms(self, gc_delay_ms: int) -> int:
        """How old an object nothing names must be to be deleted as an orphan: older than the table's GC
        delay ``gc_delay_ms``, and than any commit request naming it could still be in flight, give or take
        the clock skew."""
        return max(gc_delay_ms, self.max_request_age_ms + self.max_clock_skew_ms)


def check_against_skew(name: str, value_ms: int, max_clock_skew_ms: int) -> None:
    """Refuse a delay or expiry ``name`` shorter than the clock skew assumed (ValueError, saying why)."""
    if value_ms < max_clock_skew_ms:
        raise ValueError(
            f"{name} ({value_ms:,} ms) is shorter than the clock skew cleanup assumes ({max_clock_skew_ms:,} "
            "ms): a clock that far ahead would see a file or claim made now as that old already. Use a "
            "longer one, or a max_clock_skew of 0 where every clock is the same one"
        )


# Each setting of the policy that an environment variable (in minutes) may set: the cleanup Lambda's, where
# the stack sets the last two from the instance's config, and the CLI's and the local runtime's defaults.
POLICY_ENVIRONMENT = {
    "log_min_snapshot_age_ms": "STATESTORE_LOG_MIN_SNAPSHOT_AGE_MINUTES",
    "snapshot_retention_ms": "STATESTORE_SNAPSHOT_RETENTION_MINUTES",
    "gc_delay_ms": GC_DELAY_ENV,
    "claim_expiry_ms": CLAIM_EXPIRY_ENV,
    "max_clock_skew_ms": "STATESTORE_MAX_CLOCK_SKEW_MINUTES",
    # Only for queues that keep messages for less than the stack's (instance.REQUEST_MAX_LIFETIME_SECONDS).
    "max_request_age_ms": "STATESTORE_MAX_REQUEST_AGE_MINUTES",
    "max_upload_ms": "STATESTORE_MAX_UPLOAD_MINUTES",
    "full_sweep_interval_ms": "STATESTORE_FULL_SWEEP_INTERVAL_MINUTES",
}


def policy_from_environment(
    environ: Mapping[str, str] | None = None, overrides: Mapping[str, int] | None = None
) -> CleanupPolicy:
    """The policy with each setting of :data:`POLICY_ENVIRONMENT` whose variable is set (in minutes) taken
    from it, then ``overrides`` (settings in ms). Raises ValueError naming a variable that is not a number of
    minutes, or a value the policy refuses."""
    env = os.environ if environ is None else environ
    values: dict[str, int] = {}
    for setting, variable in POLICY_ENVIRONMENT.items():
        raw = env.get(variable)
        if not raw:
            continue
        try:
            minutes = float(raw)
        except ValueError:
            minutes = math.nan
        if not math.isfinite(minutes):
            raise ValueError(f"{variable}={raw!r} is not a number of minutes")
        values[setting] = int(minutes * _MINUTE_MS)
    try:
        return CleanupPolicy(**{**values, **(overrides or {})})
    except ValueError as e:
        given = ", ".join(f"{POLICY_ENVIRONMENT[s]}={env[POLICY_ENVIRONMENT[s]]!r}" for s in values)
        raise ValueError(f"cleanup settings refused ({given or 'none from the environment'}): {e}") from None


def gc_delay_ms(table: TableInfo, default_ms: int = DEFAULT_GC_DELAY_MS) -> int:
    """The table's garbage collection delay: its property ``gc_delay_minutes`` if set, else ``default_ms``
    (the instance's, :attr:`CleanupPolicy.gc_delay_ms`)."""
    raw = table.properties.get(GC_DELAY_PROPERTY)
    if raw is None:
        return default_ms
    try:
        minutes = float(raw)
    except ValueError:
        raise StateStoreError(
            f"table {table.table_name!r}: property {GC_DELAY_PROPERTY}={raw!r} is not a number of minutes"
        ) from None
    if minutes < 0:
        raise StateStoreError(
            f"table {table.table_name!r}: property {GC_DELAY_PROPERTY} must not be negative"
        )
    return int(minutes * _MINUTE_MS)
