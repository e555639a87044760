"""The one backoff rule every retry loop of the library uses: full jitter over a capped exponential.

Pure (no AWS import): the engine's loop for lost races, the adapters' loops over unprocessed items and the
adapter's retry of conflicting DynamoDB transactions all draw their sleeps here. botocore's own transport
retries (``standard`` mode, :mod:`statestore.adapters.aws.clients`) use botocore's equivalent formula.
"""

from __future__ import annotations

import random


def full_jitter_delay(attempt: int, base_delay: float, max_delay: float, rng: random.Random) -> float:
    """Seconds to sleep before retry ``attempt + 1`` (``attempt`` counts from 0): drawn uniformly from
    ``[0, min(max_delay, base_delay * 2**attempt)]`` ("full jitter", so competing writers spread out)."""
    return rng.uniform(0.0, min(max_delay, base_delay * 2**attempt))
