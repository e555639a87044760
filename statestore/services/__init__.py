"""What runs on the engine: the committer, cleanup, upkeep, dead letters and the client facade."""
