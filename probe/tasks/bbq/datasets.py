"""The data sets BBQ registers for ``probe data fetch``: BBQ itself and BharatBBQ (the caste dimension,
in BBQ's template format)."""

from __future__ import annotations

from probe.data.fetch import DataFile, DatasetSpec


def _bbq_files() -> tuple[DataFile, ...]:
    cats = ("Age", "Disability_status", "Gender_identity", "Nationality", "Physical_appearance",
            "Race_ethnicity", "Race_x_SES", "Race_x_gender", "Religion", "SES", "Sexual_orientation")
    needed = {"Age", "Gender_identity", "Nationality", "Religion", "SES", "Race_ethnicity"}
    files = [DataFile(f"templates/{c}.csv", f"templates/new_templates - {c}.csv", c in needed) for c in cats]
    files += [DataFile("templates/vocabulary.csv", "templates/vocabulary.csv"),
              DataFile("templates/vocabulary_proper_names.csv", "templates/vocabulary_proper_names.csv"),
              DataFile("templates/Filler_items.csv", "templates/new_templates - Filler_items.csv", False)]
    # Only Age, Nationality and Religion are needed by the tests; the rest are optional.
    files += [DataFile(f"data/{c}.jsonl", f"data/{c}.jsonl", c in ("Age", "Nationality", "Religion"), "jsonl")
              for c in cats]
    files.append(DataFile("LICENSE", "LICENSE", False, "text"))
    return tuple(files)


BBQ = DatasetSpec(
    "bbq", "BBQ (Parrish et al., 2022): templates, vocabulary and generated instances",
    "https://raw.githubusercontent.com/nyu-mll/BBQ/main/", "https://github.com/nyu-mll/BBQ", "CC-BY-4.0",
    _bbq_files())
BHARATBBQ = DatasetSpec(
    "bharatbbq", "BharatBBQ (Tomar et al., 2025): caste templates and instances",
    "https://raw.githubusercontent.com/sahoonihar/BharatBBQ/main/BharatBBQ_Dataset/",
    "https://github.com/sahoonihar/BharatBBQ", "see the repository",
    (DataFile("Caste_templates.csv", "Templates/Caste.csv"),
     DataFile("Caste_examples.csv", "Examples/Caste_examples.csv")))


#: what ``probe data fetch`` lists (:func:`probe.tasks.data_sets`)
DATASETS = (BBQ, BHARATBBQ)
