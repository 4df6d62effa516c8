"""Engines map a function over rank partitions: ``LocalEngine`` (default) or ``DaskEngine``."""

from traceatlas.engine.base import Engine
from traceatlas.engine.local import LocalEngine
from traceatlas.engine.select import get_engine

__all__ = ["Engine", "LocalEngine", "get_engine"]
