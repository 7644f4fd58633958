"""Which HBB test instances a run scores: a stratified sample of concept pairs, or a few instances per
category x descriptor type (the config's ``sample_concepts`` / ``per_cell``), kept per process."""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path

from probe.data.paths import dataset_dir
from probe.fs import file_stamp
from probe.tasks.hbb.data import HBBConcept, HBBInstance, build_instances, keep_recent, load_default

__all__ = ["sample_concepts", "sample_per_cell", "selected_instances"]


def selected_instances(data_dir: str | Path | None, sample_concepts_n: int | None, sample_seed: int, name_seed: int,
                       categories: Sequence[str], per_cell: int | None) -> list[HBBInstance]:
    """The test instances a run selects: ``sample_concepts_n`` concept pairs (None: all), every instance of
    ``categories``, then ``per_cell`` per category x descriptor type (None: all). Kept per process like
    :func:`~probe.tasks.hbb.data.load_default`'s reading (instances are immutable), so a second run of the same data builds nothing."""

    d = Path(data_dir) if data_dir else dataset_dir("hbb")
    key = (file_stamp(d / "questions.csv"), file_stamp(d / "descriptors.json"), sample_concepts_n, sample_seed, name_seed,
           tuple(categories), per_cell)
    hit = _BUILT.get(key)
    if hit is None:
        concepts, descriptors = load_default(d)
        if sample_concepts_n is not None:
            concepts = sample_concepts(concepts, sample_concepts_n, sample_seed)
        instances = list(build_instances(concepts, descriptors, name_seed, categories))
        if per_cell is not None:
            instances = sample_per_cell(instances, per_cell, sample_seed)
        hit = tuple(instances)
        keep_recent(_BUILT, key, hit)
    return list(hit)


#: kept builds (selected_instances), keyed by the files' stamps and the arguments
_BUILT: dict[tuple, tuple] = {}


def sample_concepts(concepts: Sequence[HBBConcept], n: int, seed: int = 0) -> list[HBBConcept]:
    """``n`` concept pairs stratified by their source ``bias_type`` (proportional, at least one
    per stratum while ``n`` allows), returned in data order. Building every instance of the
    sampled concepts keeps the full set's category x type proportions and lets each
    question be shared by all the identity pairs that contain it."""
    if n >= len(concepts):
        return list(concepts)
    strata: dict[str, list[HBBConcept]] = {}
    for c in concepts:
        strata.setdefault(c.source_bias_type, []).append(c)
    keys = sorted(strata, key=lambda k: (-len(strata[k]), k))
    quota = {k: 0 for k in keys}
    for k in keys[:n]:  # one each, largest strata first
        quota[k] = 1
    rest = n - sum(quota.values())
    if rest > 0:  # the rest by largest remainder of the proportional share
        share = {k: rest * len(strata[k]) / len(concepts) for k in keys}
        for k in keys:
            quota[k] += int(share[k])
        left = n - sum(quota.values())
        for k in sorted(keys, key=lambda k: (-(share[k] - int(share[k])), k))[:left]:
            quota[k] += 1
    rng = random.Random(seed)
    picked = [c for k in keys for c in rng.sample(strata[k], min(quota[k], len(strata[k])))]
    return sorted(picked, key=lambda c: c.concept_id)


def sample_per_cell(instances: Sequence[HBBInstance], per_cell: int, seed: int = 0) -> list[HBBInstance]:
    """Up to ``per_cell`` instances from every category x descriptor type (seeded), data order."""
    cells: dict[tuple[str, int], list[int]] = {}
    for i, inst in enumerate(instances):
        cells.setdefault((inst.category, inst.descriptor_type), []).append(i)
    rng = random.Random(seed)
    keep = sorted(i for key in sorted(cells) for i in rng.sample(cells[key], min(per_cell, len(cells[key]))))
    return [instances[i] for i in keep]
