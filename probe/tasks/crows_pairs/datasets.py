"""The data set CrowS-Pairs registers for ``probe data fetch``."""

from __future__ import annotations

from probe.data.fetch import DataFile, DatasetSpec

#: what ``probe data fetch`` lists (:func:`probe.tasks.data_sets`)
DATASETS = (DatasetSpec(
    "crows_pairs", "CrowS-Pairs (Nangia et al., 2020)",
    "https://raw.githubusercontent.com/nyu-mll/crows-pairs/master/data/", "https://github.com/nyu-mll/crows-pairs",
    "CC-BY-SA-4.0", (DataFile("crows_pairs_anonymized.csv", "crows_pairs_anonymized.csv"),)),)
