"""cluster-train's Python API (stub of branch api-run: the api-submit branch owns this file and its re-exports)."""
