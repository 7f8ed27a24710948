"""The Python API (owner: api-submit; this branch holds a stub until the merge)."""
