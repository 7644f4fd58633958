"""Paper-equivalent tables beside the exact ones: :func:`insert_beside` places each table a task's layout
hands over (``paper_tables``) right after the exact table it mirrors."""

from __future__ import annotations

from typing import Any, Sequence

__all__ = ["insert_beside"]


def insert_beside(items: list[Any], extra: Sequence[tuple[str, Any]]) -> list[Any]:
    """``items`` with each extra item right after the item named by its anchor (at the end when none is).

    >>> from types import SimpleNamespace as N
    >>> [x.name for x in insert_beside([N(name="a"), N(name="b")], [("a", N(name="a_paper")), ("z", N(name="z2"))])]
    ['a', 'a_paper', 'b', 'z2']
    """
    out = list(items)
    for anchor, item in extra:
        at = next((i for i, x in enumerate(out) if getattr(x, "name", None) == anchor), None)
        if at is None:
            out.append(item)
        else:
            out.insert(at + 1, item)
    return out
