"""Values and rules: schemas and keys, file references, partitions, names, object layout, the clock. No state,
no I/O."""
