"""Name -> constructor registries (models, data sets, strategies), in the way timm registers models."""
import difflib
from typing import Callable, Dict, List, Optional

from train.errors import UserError


class Registry:
    def __init__(self, kind: str):
        self.kind = kind
        self._entries: Dict[str, Callable] = {}

    def register(self, name: Optional[str] = None) -> Callable:
        def add(fn: Callable) -> Callable:
            key = name or fn.__name__
            if key in self._entries:
                raise ValueError(f"{self.kind} {key!r} is registered twice")
            self._entries[key] = fn
            return fn

        return add

    def get(self, name: str) -> Callable:
        if name not in self._entries:
            raise UserError(unknown_name(self.kind, name, self.names()))
        return self._entries[name]

    def build(self, name: str, **kwargs):
        return self.get(name)(**kwargs)

    def names(self) -> List[str]:
        return sorted(self._entries)

    def __contains__(self, name: str) -> bool:
        return name in self._entries


def unknown_name(kind: str, name: str, known: List[str]) -> str:
    close = difflib.get_close_matches(str(name), known, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"unknown {kind} {name!r}{hint}; choose one of: {', '.join(known)}"
