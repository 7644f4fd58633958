"""Planning: which sequences share a prefix, and which groups run together.

- Rows are unique token sequences: identical requests across a run are computed once.
- Requests with the same ``group`` key (and all options of one continuation
  request) form one group; its prefix is the longest common token prefix of
  its rows, capped so that every scored position stays in the suffix.
- Ungrouped single-sequence requests are clustered automatically: sorted by
  token ids, neighbours sharing at least ``min_shared`` tokens join one group
  (a shared system prompt or few-shot block is then computed once).
- Batches are filled with groups in a fixed, length-sorted order under a row
  count and a padded-token budget. The plan depends only on the set of
  requests, never on their order.
"""

from __future__ import annotations

from dataclasses import dataclass

from probe.scoring.engine import Group, Row, common_prefix_length

MIN_SHARED = 16  # below this many common tokens a prefix pass is not worth its overhead


@dataclass
class Batch:
    prefix_groups: list[Group]
    plain_rows: list[Row]

    @property
    def n_rows(self) -> int:
        return sum(len(g.rows) for g in self.prefix_groups) + len(self.plain_rows)


def make_group(rows: list[Row], min_shared: int = MIN_SHARED, nested: bool = True) -> Group:
    """A group whose prefix is the rows' common prefix, capped before the first scored position.

    With ``nested``, rows sharing at least ``min_shared`` more tokens beyond that
    prefix form subgroups (a two-level prefix tree): the group prefix runs once,
    each subgroup's extra segment once on top of it, then the rows.
    """
    cap = min(r.score_from - 1 for r in rows)
    n = min(common_prefix_length([r.ids for r in rows]), cap)
    if len(rows) < 2 or n < min_shared:
        return Group(prefix=(), rows=rows)
    if not nested:
        return Group(prefix=rows[0].ids[:n], rows=rows)
    subgroups, direct = [], []
    for cluster in _clusters(rows, n + min_shared, max_rows=10**9):
        k = min(common_prefix_length([r.ids for r in cluster]), min(r.score_from - 1 for r in cluster))
        if len(cluster) >= 2 and k >= n + min_shared:
            subgroups.append(Group(prefix=cluster[0].ids[:k], rows=cluster))
        else:
            direct.extend(cluster)
    return Group(prefix=rows[0].ids[:n], rows=rows, subgroups=subgroups, direct=direct)


def _clusters(rows: list[Row], min_shared: int, max_rows: int) -> list[list[Row]]:
    """Neighbours in token order sharing >= ``min_shared`` tokens (before any scored position)."""
    rows = sorted(rows, key=lambda r: (r.ids, r.score_from, r.label_ids))
    out: list[list[Row]] = []
    current: list[Row] = []
    for row in rows:
        if current:
            shared = common_prefix_length([current[0].ids, row.ids])
            cap = min(min(r.score_from for r in current), row.score_from) - 1
            if min(shared, cap) >= min_shared and len(current) < max_rows:
                current.append(row)
                continue
            out.append(current)
        current = [row]
    if current:
        out.append(current)
    return out


def cluster_ungrouped(rows: list[Row], min_shared: int = MIN_SHARED, max_rows: int = 64, nested: bool = True) -> list[Group]:
    """Cluster single rows by shared token prefixes (deterministic: sorted by ids)."""
    return [make_group(c, min_shared, nested) for c in _clusters(rows, min_shared, max_rows)]


def plan_batches(
    groups: list[Group],
    max_rows: int,
    token_budget: int,
    equal_prefix_lengths: bool = False,
) -> list[Batch]:
    """Pack groups into batches, longest first, within ``max_rows`` and ``token_budget`` padded tokens.

    A group with more rows than ``max_rows`` gets a batch of its own; the engine
    then runs its suffixes in chunks against one prefix cache.
    ``equal_prefix_lengths``: only batch prefixes of one length (sliding-window
    models, where left padding inside a long prompt would shift the window).
    """
    shared = sorted((g for g in groups if g.prefix), key=lambda g: (-len(g.prefix), -g.cost, g.prefix))
    plain = sorted((r for g in groups if not g.prefix for r in g.rows), key=lambda r: (-len(r.ids), r.ids, r.label_ids))
    batches: list[Batch] = []

    current: list[Group] = []
    for g in shared:
        if current:
            rows = sum(len(x.rows) for x in current) + len(g.rows)
            width_p = max(len(x.prefix) for x in current + [g])
            width_s = max(len(r.ids) - len(x.prefix) for x in current + [g] for r in x.rows)
            padded = width_p * (len(current) + 1) + width_s * rows
            same = not equal_prefix_lengths or len(g.prefix) == len(current[0].prefix)
            if rows <= max_rows and padded <= token_budget and same:
                current.append(g)
                continue
            batches.append(Batch(current, []))
        current = [g]
    if current:
        batches.append(Batch(current, []))

    chunk: list[Row] = []
    for r in plain:
        # rows are sorted longest first, so the first row sets the padded width
        if chunk and (len(chunk) + 1 > max_rows or len(chunk[0].ids) * (len(chunk) + 1) > token_budget):
            batches.append(Batch([], chunk))
            chunk = []
        chunk.append(r)
    if chunk:
        batches.append(Batch([], chunk))
    return batches
