"""Analyses over a store: one module each, registered in ``registry.ANALYSES``.

>>> import traceatlas
>>> from traceatlas import analysis
>>> result = analysis.run("breakdown", traceatlas.open("run.tastore"))  # doctest: +SKIP
>>> result.table                                                       # doctest: +SKIP
"""

from traceatlas.analysis.base import Analysis, Param, Result
from traceatlas.analysis.registry import ANALYSES, get_analysis, run

__all__ = ["ANALYSES", "Analysis", "Param", "Result", "get_analysis", "run"]
