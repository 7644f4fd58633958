"""The data set iso/cmp registers for ``probe data fetch``: the authors' released prompt files (gender,
8 benchmarks)."""

from __future__ import annotations

from probe.data.fetch import DataFile, DatasetSpec

_CMP_ISO = ("bbq_gender", "crows_pairs_gender", "discrim_eval_gen_gender", "dt_toxic_gender", "mmlu",
            "reddit_bias_gender", "stereo_set_gender", "wino_bias_gender")

#: what ``probe data fetch`` lists (:func:`probe.tasks.data_sets`)
DATASETS = (DatasetSpec(
    "cmp_iso", "To Compare, or Not to Compare: iso/cmp prompts (gender, 8 benchmarks)",
    "https://raw.githubusercontent.com/insait-institute/to_cmp_or_not_to_cmp/main/benchmark_exps/",
    "https://github.com/insait-institute/to_cmp_or_not_to_cmp", "Apache-2.0",
    tuple(DataFile(f"{b}_cot_gen.csv" if b != "mmlu" else "mmlu_cot_gen.csv",
                   f"{b}_cot_gen.csv" if b != "mmlu" else "mmlu_cot_gen.csv") for b in _CMP_ISO)
    + (DataFile("LICENSE", "../LICENSE", False, "text"),)),)
