"""Worked examples (docs/examples/): a benchmark added without touching probe's own code."""
