"""Thin Lambda handlers: parse the event, call statestore, report what failed."""
