"""The data set StereoSet registers for ``probe data fetch`` (the public dev split; not shipped)."""

from __future__ import annotations

from probe.data.fetch import DataFile, DatasetSpec

#: what ``probe data fetch`` lists (:func:`probe.tasks.data_sets`)
DATASETS = (DatasetSpec(
    "stereoset", "StereoSet (Nadeem et al., 2021): the public dev split, intra- and intersentence",
    "https://raw.githubusercontent.com/moinnadeem/StereoSet/master/data/", "https://github.com/moinnadeem/StereoSet",
    "CC-BY-SA-4.0", (DataFile("dev.json", "dev.json", kind="json"),)),)
