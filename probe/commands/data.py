"""``probe data fetch NAME [--from URL_OR_PATH]``: download (or copy) a benchmark data set, verify, cache.

The data sets are those the registered tasks declare (:func:`probe.tasks.data_sets`).
"""

from __future__ import annotations

import argparse
import json

from probe.data.fetch import fetch
from probe.tasks import data_set, data_sets


def register(groups: dict[str, argparse._SubParsersAction]) -> None:
    sets = data_sets()
    single = "; ".join(f"'{name} --from FILE' with one file stores it as the data set {spec.single_file.name} "
                       f"({spec.single_file.description})"
                       for name, spec in sorted(sets.items()) if spec.single_file is not None)
    p = groups["data"].add_parser(
        "fetch", help="download a benchmark data set (or copy a local one), verify it and store it in the cache",
        description="Fetch a data set from its public source (default) or from a local directory / file:// URL / "
                    "other base URL, check that its required files are present and parse, record their sha256 in "
                    "MANIFEST.json, and store it under the probe cache (PROBE_CACHE, default ~/.cache/probe).")
    p.add_argument("name", choices=sorted(sets), help="data set")
    p.add_argument("--from", dest="source", default=None,
                   help="local directory, file:// URL or base URL to take the files from (default: public source); "
                        "for a one-file data set also that file (path, file:// or full URL)"
                        + (f". {single}" if single else ""))
    p.add_argument("--dest", default=None, help="target directory (default: <cache>/data/NAME)")
    p.add_argument("--force", action="store_true", help="fetch again even if already present")
    p.set_defaults(func=run_fetch)


def run_fetch(args: argparse.Namespace) -> int:
    spec = data_set(args.name)
    print(f"fetching {args.name} from {args.source or spec.base_url} ({spec.license}; {spec.homepage})")
    path = fetch(spec, source=args.source, dest=args.dest, force=args.force)
    manifest = json.loads((path / "MANIFEST.json").read_text())
    print(f"stored {len(manifest['files'])} verified files in {path}")
    if spec.note is not None:
        print(spec.note(path))
    return 0
