"""pytest at the repository root: ``--doctest-modules`` (pyproject) collects the doctests of ``probe/``.

A module that imports an optional extra at its top is left out when the extra is not installed, as the
tests of that extra skip themselves (``pytest.importorskip``).
"""

import importlib.util

collect_ignore = []
if importlib.util.find_spec("lm_eval") is None:  # probe[lm-eval]
    collect_ignore.append("probe/integrations/lm_eval.py")
