"""A table's state in memory: the files and partitions in columns, their mutation, undo and queries."""
