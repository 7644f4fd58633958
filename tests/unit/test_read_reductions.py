"""The read's per-row reductions (probe.scoring.engine.finite_and_logsumexp): the same bits as
``torch.isfinite(x).all(-1)`` and ``torch.logsumexp(x, -1)``, NaN and infinities included."""

from __future__ import annotations

import math

import pytest
import torch

from probe.scoring.engine import finite_and_logsumexp

NAN, INF = float("nan"), float("inf")


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit-equal, NaN where the other has NaN."""
    return torch.equal(a.isnan(), b.isnan()) and torch.equal(torch.nan_to_num(a, nan=0.0), torch.nan_to_num(b, nan=0.0))


@pytest.mark.parametrize("rows,vocab", [(1, 1), (3, 7), (17, 1000), (64, 49152)])
@pytest.mark.parametrize("scale", [1.0, 30.0, 1e4])
def test_the_same_bits_as_torchs_own(rows, vocab, scale):
    g = torch.Generator().manual_seed(rows * vocab)
    x = torch.randn(rows, vocab, generator=g) * scale
    finite, lse = finite_and_logsumexp(x)
    assert torch.equal(finite, torch.isfinite(x).all(dim=-1))
    assert _same(lse, torch.logsumexp(x, dim=-1))


def test_rows_with_nan_and_infinities():
    x = torch.tensor([[0.0, 1.0, 2.0],
                      [0.0, NAN, 2.0],     # NaN anywhere: not finite, logsumexp NaN
                      [0.0, INF, 2.0],     # +inf: not finite, logsumexp +inf
                      [0.0, -INF, 2.0],    # -inf: not finite, logsumexp of the rest
                      [-INF, -INF, -INF],  # nothing finite: logsumexp -inf
                      [NAN, -INF, INF]])
    finite, lse = finite_and_logsumexp(x)
    assert finite.tolist() == [True, False, False, False, False, False]
    assert _same(lse, torch.logsumexp(x, dim=-1))
    assert math.isnan(lse[1]) and lse[2] == INF and lse[4] == -INF
    assert lse[3] == pytest.approx(math.log(1 + math.exp(2.0)))


def test_a_row_of_one_logit():
    finite, lse = finite_and_logsumexp(torch.tensor([[3.5], [-INF]]))
    assert finite.tolist() == [True, False] and lse.tolist() == [3.5, -INF]
