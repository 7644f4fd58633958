"""Installs that keep working (#22): the lock shipped with the package, provenance, ``probe --version``,
and the transformers cache-argument rename followed by name (probe.hf_compat)."""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path

import pytest

from probe import hf_compat, versions

REPO = Path(__file__).resolve().parents[2]


def test_shipped_pins_are_the_lock_files():
    lock = REPO / "requirements" / "cpu.lock"
    if not lock.is_file():
        pytest.skip("not a source checkout: requirements/cpu.lock is not here")
    pins = dict(re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)", lock.read_text(), re.M))
    shipped = versions.locked_versions()
    assert set(shipped) == set(versions.TRACKED)
    assert shipped == {n: pins[n] for n in versions.TRACKED}, "run bash tools/lock.sh: the shipped pins are stale"


@pytest.mark.parametrize("installed, expected", [
    ({"torch": "2.13.0+cpu", "transformers": "5.23.0", "accelerate": "1.15.0", "transformer-lens": "4.3.0",
      "numpy": "2.4.6"}, {}),
    # a CUDA build of the same release is the same release
    ({"torch": "2.13.0+cu128", "transformers": "5.23.0", "accelerate": "1.15.0", "transformer-lens": None,
      "numpy": "2.4.6"}, {}),
    ({"torch": "2.13.0", "transformers": "5.24.0", "accelerate": "1.15.0", "transformer-lens": "4.3.0",
      "numpy": "2.4.6"}, {"transformers": {"installed": "5.24.0", "locked": "5.23.0"}}),
    # a missing required package is a difference; a missing optional one (transformer-lens) is not
    ({"torch": None, "transformers": "5.23.0", "accelerate": "1.15.0", "numpy": "2.4.6"},
     {"torch": {"installed": None, "locked": "2.13.0+cpu"}}),
])
def test_lock_differences(installed, expected):
    locked = {"torch": "2.13.0+cpu", "transformers": "5.23.0", "accelerate": "1.15.0", "transformer-lens": "4.3.0",
              "numpy": "2.4.6"}
    assert versions.lock_differences(installed, locked) == expected


def test_no_lock_means_no_difference():
    assert versions.lock_differences({"torch": "1.0"}, {}) == {}


def test_warns_once_per_process(monkeypatch):
    monkeypatch.setattr(versions, "_warned", False)
    monkeypatch.setattr(versions, "lock_differences",
                        lambda *a: {"transformers": {"installed": "9.0", "locked": "5.23.0"}})
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert versions.warn_if_not_locked()
        assert versions.warn_if_not_locked()
    drift = [w for w in seen if issubclass(w.category, versions.VersionDriftWarning)]
    assert len(drift) == 1
    assert "transformers 9.0 (lock: 5.23.0)" in str(drift[0].message)


def test_version_command_lists_the_tracked_packages(capsys):
    from probe.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("probe ")
    for name in versions.TRACKED:
        assert re.search(rf"^\s+{re.escape(name)}\s+\S", out, re.M), out


def test_provenance_records_the_versions_and_the_lock(monkeypatch):
    from probe.runs.provenance import provenance

    monkeypatch.setattr(versions, "_warned", True)  # this test reads the record, not the warning
    info = json.loads(json.dumps(provenance()))
    for name in ("probe", "torch", "transformers", "accelerate", "transformer-lens", "numpy"):
        assert name in info["versions"]
    assert info["versions"]["torch"]
    assert info["lock"]["versions"] == versions.locked_versions()
    assert isinstance(info["lock"]["differs"], dict)


# -- the transformers cache argument, by the name each forward takes ------------------------------------

class _New:
    def forward(self, input_ids=None, cache=None, use_cache=None, **kwargs):  # transformers >= 5.24
        return None


class _Old:
    def forward(self, input_ids=None, past_key_values=None, use_cache=None, **kwargs):  # up to 5.23
        return None


class _Opaque:
    forward = print  # no inspectable signature


def test_cache_kwarg_follows_the_signature():
    assert hf_compat.cache_kwargs(_New(), "C") == {"cache": "C"}
    assert hf_compat.cache_kwargs(_Old(), "C") == {"past_key_values": "C"}
    assert hf_compat.cache_kwarg(_Opaque()) == "past_key_values"


def test_output_cache_reads_either_field():
    class NewOut:
        cache = "new"

    class OldOut:
        past_key_values = "old"

    class BothOut:  # the current field wins
        cache = "new"
        past_key_values = "old"

    assert hf_compat.output_cache(NewOut()) == "new"
    assert hf_compat.output_cache(OldOut()) == "old"
    assert hf_compat.output_cache(BothOut()) == "new"
    assert hf_compat.output_cache(object()) is None


def test_the_installed_models_take_the_name_probe_passes():
    transformers = pytest.importorskip("transformers")
    from transformers.models.llama.modeling_llama import LlamaModel

    name = hf_compat._kwarg_of(LlamaModel.forward)
    major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
    assert name == ("cache" if (major, minor) >= (5, 24) else "past_key_values")
