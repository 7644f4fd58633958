"""Parse enumeration: what a model's sampled-then-parsed answer is, computed exactly.

The top room of :mod:`probe.scoring`: it builds on the front (tokens, requests) and the engine's
incremental extension, and nothing in the engine or the front imports it.
:mod:`~probe.scoring.parse.schema` holds the request and result types (no torch),
:mod:`~probe.scoring.parse.exact` the enumeration of answers a bounded generation parses to,
:mod:`~probe.scoring.parse.hybrid` the sampled tail that answers the mass the enumeration leaves.
"""
