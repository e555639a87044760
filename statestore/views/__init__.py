"""Models derived from the state or the log, pure: the job history, reports, the row decisions of row
transactions."""
