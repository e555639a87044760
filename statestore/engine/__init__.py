"""The one place that appends to a table's log and loads its state: commits, snapshots, requests, orphans."""
