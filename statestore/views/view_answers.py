"""The queryable view's four queries answered from a whole :class:`TableState`: the answers the view must
give (``statestore.engine.queryable_view``), in the same order, for a caller that asked for a full load
instead."""

from __future__ import annotations

from statestore.model.files import FileReference, TableFile
from statestore.model.partitions import Region
from statestore.state.table_state import TableState


def references_in_partition(state: TableState, partition_id: str) -> list[FileReference]:
    """The partition's references, ordered by filename (none for an unknown partition)."""
    return sorted(state.references_in_partition(partition_id))


def references_in_region(state: TableState, region: Region) -> dict[str, list[FileReference]]:
    """By partition id, the references of every partition overlapping ``region``: the leaves and the
    partitions above them."""
    if not state.partitions_by_id:
        return {}
    return {
        p.id: sorted(state.references_in_partition(p.id)) for p in state.partition_tree.overlapping(region)
    }


def claimed_references(state: TableState, job_id: str) -> list[FileReference]:
    """The references job ``job_id`` holds, ordered by filename and partition."""
    return sorted(state.claimed_references().get(job_id, []))


def file(state: TableState, filename: str) -> TableFile | None:
    """The file with its references and update time, or None."""
    return state.files_by_name.get(filename)
