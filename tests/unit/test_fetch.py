"""probe data fetch: registry, local path / file:// sources, verification, manifest, CLI."""

import json

import pytest

from probe.data.fetch import REGISTRY, fetch, verify
from probe.errors import ProbeError


def test_registry_has_public_urls():
    assert set(REGISTRY) >= {"bbq", "bharatbbq", "hbb", "crows_pairs", "cmp_iso"}
    for spec in REGISTRY.values():
        assert spec.base_url.startswith("https://") and spec.files


@pytest.mark.parametrize("name", ["bbq", "bharatbbq", "crows_pairs", "hbb", "cmp_iso"])
def test_fetch_from_shared_parent_dir(shared_data, tmp_path, name):
    dest = fetch(name, source=str(shared_data), dest=tmp_path / name)
    manifest = json.loads((dest / "MANIFEST.json").read_text())
    required = [f.name for f in REGISTRY[name].files if f.required]
    assert set(required) <= set(manifest["files"])
    assert all(len(h) == 64 for h in manifest["files"].values())
    assert verify(name, dest) == manifest["files"]


def test_fetch_file_url_and_upstream_layout(tmp_path):
    src = tmp_path / "up"
    (src / "Templates").mkdir(parents=True)
    (src / "Examples").mkdir()
    (src / "Templates" / "Caste.csv").write_text("a,b\n1,2\n")
    (src / "Examples" / "Caste_examples.csv").write_text("a,b\n1,2\n")
    dest = fetch("bharatbbq", source=f"file://{src}", dest=tmp_path / "out")
    assert (dest / "Caste_templates.csv").read_text() == "a,b\n1,2\n"


def test_missing_required_file_and_bad_json(tmp_path):
    src = tmp_path / "hbb"
    src.mkdir()
    (src / "questions.csv").write_text("a,b\n1,2\n")
    with pytest.raises(ProbeError, match="required file concepts.csv missing"):
        fetch("hbb", source=str(src), dest=tmp_path / "o1")
    (src / "concepts.csv").write_text("a,b\n1,2\n")
    (src / "descriptors.json").write_text("{not json")
    with pytest.raises(ProbeError, match="descriptors.json"):
        fetch("hbb", source=str(src), dest=tmp_path / "o2")
    assert not (tmp_path / "o2").exists()  # nothing half-stored


def test_verify_detects_changed_file(shared_data, tmp_path):
    dest = fetch("crows_pairs", source=str(shared_data), dest=tmp_path / "cp")
    with open(dest / "crows_pairs_anonymized.csv", "a") as f:
        f.write("x,y\n")
    with pytest.raises(ProbeError, match="changed since it was fetched"):
        verify("crows_pairs", dest)


def test_unknown_name():
    with pytest.raises(ProbeError, match="unknown data set"):
        fetch("nope", source="/tmp")


def test_cli_fetch(shared_data, tmp_path, monkeypatch, capsys):
    from probe.cli import main

    monkeypatch.setenv("PROBE_CACHE", str(tmp_path / "cache"))
    assert main(["data", "fetch", "bharatbbq", "--from", str(shared_data / "bharatbbq")]) == 0
    assert (tmp_path / "cache" / "data" / "bharatbbq" / "MANIFEST.json").is_file()
    assert "verified" in capsys.readouterr().out
