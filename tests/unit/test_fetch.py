"""probe data fetch: registry, local path / file:// sources, verification, manifest, CLI."""

import json

import pytest

from probe.data.fetch import fetch, verify
from probe.errors import ProbeError
from probe.tasks import data_set, data_sets


def test_registry_has_public_urls():
    assert set(data_sets()) >= {"bbq", "bharatbbq", "hbb", "crows_pairs", "cmp_iso"}
    for spec in data_sets().values():
        assert spec.base_url.startswith("https://") and spec.files


@pytest.mark.parametrize("name", ["bbq", "bharatbbq", "crows_pairs", "hbb", "cmp_iso"])
def test_fetch_from_shared_parent_dir(shared_data, tmp_path, name):
    dest = fetch(data_set(name), source=str(shared_data), dest=tmp_path / name)
    manifest = json.loads((dest / "MANIFEST.json").read_text())
    required = [f.name for f in data_set(name).files if f.required]
    assert set(required) <= set(manifest["files"])
    assert all(len(h) == 64 for h in manifest["files"].values())
    assert verify(data_set(name), dest) == manifest["files"]


def test_fetch_file_url_and_upstream_layout(tmp_path):
    src = tmp_path / "up"
    (src / "Templates").mkdir(parents=True)
    (src / "Examples").mkdir()
    (src / "Templates" / "Caste.csv").write_text("a,b\n1,2\n")
    (src / "Examples" / "Caste_examples.csv").write_text("a,b\n1,2\n")
    dest = fetch(data_set("bharatbbq"), source=f"file://{src}", dest=tmp_path / "out")
    assert (dest / "Caste_templates.csv").read_text() == "a,b\n1,2\n"


def test_missing_required_file_and_bad_json(tmp_path):
    src = tmp_path / "hbb"
    src.mkdir()
    (src / "questions.csv").write_text("a,b\n1,2\n")
    with pytest.raises(ProbeError, match="required file concepts.csv missing"):
        fetch(data_set("hbb"), source=str(src), dest=tmp_path / "o1")
    (src / "concepts.csv").write_text("a,b\n1,2\n")
    (src / "descriptors.json").write_text("{not json")
    with pytest.raises(ProbeError, match="descriptors.json"):
        fetch(data_set("hbb"), source=str(src), dest=tmp_path / "o2")
    assert not (tmp_path / "o2").exists()  # nothing half-stored


def test_verify_detects_changed_file(shared_data, tmp_path):
    dest = fetch(data_set("crows_pairs"), source=str(shared_data), dest=tmp_path / "cp")
    with open(dest / "crows_pairs_anonymized.csv", "a") as f:
        f.write("x,y\n")
    with pytest.raises(ProbeError, match="changed since it was fetched"):
        verify(data_set("crows_pairs"), dest)


def test_unknown_name():
    with pytest.raises(ProbeError, match="unknown data set 'nope'"):
        data_set("nope")


def test_cli_fetch(shared_data, tmp_path, monkeypatch, capsys):
    from probe.cli import main

    monkeypatch.setenv("PROBE_CACHE", str(tmp_path / "cache"))
    assert main(["data", "fetch", "bharatbbq", "--from", str(shared_data / "bharatbbq")]) == 0
    assert (tmp_path / "cache" / "data" / "bharatbbq" / "MANIFEST.json").is_file()
    assert "verified" in capsys.readouterr().out


def _variations_csv(path, n_concepts=2, per=10):
    """A small file in the shape of the authors' all_data_more_contexts_questions.csv (id, s1, s2; 10 rows per id)."""
    rows = ["id,s1,s2"] + [f"{c},[[X]] s1 v{j}.,[[X]] s2 v{j}." for c in range(n_concepts) for j in range(per)]
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


def test_hbb_variation_set_from_a_local_file_and_file_url(tmp_path, monkeypatch):
    """`probe data fetch hbb` from one file: the authors' HBB-SG variation set, verified, cached as hbb_sg, and
    found by HBB-SG (no network: a file the test writes in the same shape)."""
    from probe.tasks.hbb.data import AUTHORS_VARIATIONS_REMOTE, authors_variations_path, load_authors_variations

    assert data_set("hbb_sg").files[0].remote == AUTHORS_VARIATIONS_REMOTE
    assert data_set("hbb_sg").base_url + AUTHORS_VARIATIONS_REMOTE == (
        "https://raw.githubusercontent.com/JP-25/Hidden-Bias-Benchmark/main/"
        "Questions/20241207-0945_all_data_more_contexts_questions.csv")
    # the full hbb data set lists it as optional (the benchmark runs without it)
    assert [f.required for f in data_set("hbb").files if f.remote == AUTHORS_VARIATIONS_REMOTE] == [False]
    monkeypatch.setenv("PROBE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PROBE_DATA", str(tmp_path / "nodata"))
    assert authors_variations_path() is None
    src = _variations_csv(tmp_path / "my_copy.csv")
    dest = fetch(data_set("hbb"), source=str(src))
    assert dest == tmp_path / "cache" / "data" / "hbb_sg"
    manifest = json.loads((dest / "MANIFEST.json").read_text())
    assert list(manifest["files"]) == ["sg_variations.csv"] and manifest["source"] == str(src)
    assert authors_variations_path() == dest / "sg_variations.csv"
    got = load_authors_variations(authors_variations_path())
    assert sorted(got) == [0, 1] and len(got[0][0]) == 10 and got[1][1][9] == "[[X]] s2 v9."
    # a file:// URL, into another destination
    d2 = fetch(data_set("hbb_sg"), source=f"file://{src}", dest=tmp_path / "o2")
    assert (d2 / "sg_variations.csv").read_bytes() == src.read_bytes()


def test_hbb_variation_set_is_checked(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("id,s1\n0,[[X]] a.\n")
    with pytest.raises(ProbeError, match="missing column"):
        fetch(data_set("hbb_sg"), source=str(bad), dest=tmp_path / "o")
    assert not (tmp_path / "o").exists()  # nothing half-stored
    with pytest.raises(ProbeError, match="files: --from must be a directory"):
        fetch(data_set("bbq"), source=str(bad), dest=tmp_path / "o3")


def test_full_hbb_fetch_takes_the_variation_set_in_the_upstream_layout(shared_data, tmp_path):
    src = tmp_path / "up"
    (src / "Questions").mkdir(parents=True)
    for name in ("questions.csv", "concepts.csv", "descriptors.json"):
        (src / name).write_bytes((shared_data / "hbb" / name).read_bytes())
    _variations_csv(src / "Questions" / "20241207-0945_all_data_more_contexts_questions.csv")
    dest = fetch(data_set("hbb"), source=str(src), dest=tmp_path / "hbb")
    assert "sg_variations.csv" in json.loads((dest / "MANIFEST.json").read_text())["files"]


def test_cli_fetch_hbb_variations(tmp_path, monkeypatch, capsys):
    from probe.cli import main

    monkeypatch.setenv("PROBE_CACHE", str(tmp_path / "cache"))
    src = _variations_csv(tmp_path / "v.csv")
    assert main(["data", "fetch", "hbb", "--from", f"file://{src}"]) == 0
    out = capsys.readouterr().out
    assert (tmp_path / "cache" / "data" / "hbb_sg" / "sg_variations.csv").is_file()
    assert "HBB-SG variations:" in out and "used by default" in out


def test_fetch_help_says_which_data_set_one_file_becomes(capsys):
    """``probe data fetch --help``: a data set fetched from one file is named by the command that takes it
    and the data set it becomes (it read "hbb from a single file: Hidden Bias Benchmark: ..., stored as hbb_sg")."""
    from probe.cli import main

    with pytest.raises(SystemExit):
        main(["data", "fetch", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "'hbb --from FILE' with one file stores it as the data set hbb_sg (" in text
    assert "from a single file:" not in text
