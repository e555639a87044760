"""The ports the engine needs from its backends, with their in-memory twins, and the table index's values."""
