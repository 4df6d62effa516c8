"""What ``traceatlas record`` was asked for, and the environment that carries it to the
start-up hook of every process of the program (``hook.ENV``, ``PYTHONPATH``)."""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from traceatlas.record import hook

HOOK_NAME = "sitecustomize.py"
MAX_RANK = 1 << 20
"""Largest rank accepted in ``--ranks`` (a range is expanded into a list)."""


@dataclass(frozen=True)
class RecordOptions:
    """The profiler schedule and what the profiler records (see ``docs/record.md``)."""

    steps: int = 3
    wait: int = 1
    warmup: int = 1
    ranks: tuple[int, ...] | None = None  # None: every rank
    with_stack: bool = False
    shapes: bool = False
    memory: bool = False
    fallback_s: float = 10.0

    def hook_config(self, out: Path) -> str:
        """The JSON the hook reads from ``TRACEATLAS_RECORD``."""
        return json.dumps({
            "dir": os.path.abspath(out),
            "steps": self.steps,
            "wait": self.wait,
            "warmup": self.warmup,
            "ranks": None if self.ranks is None else list(self.ranks),
            "with_stack": self.with_stack,
            "shapes": self.shapes,
            "memory": self.memory,
            "fallback_s": self.fallback_s,
        })


def parse_ranks(text: str) -> tuple[int, ...] | None:
    """``all`` -> None; ``0,3`` or ``0-3,8`` -> sorted ranks. ValueError on anything else."""
    text = text.strip()
    if text == "all":
        return None
    ranks: set[int] = set()
    for part in text.split(","):
        match = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", part)
        if match is None:
            raise ValueError(f"{part.strip()!r} is not a rank or a range a-b "
                             "(expected 'all' or e.g. '0,3' or '0-3')")
        lo = int(match.group(1))
        hi = int(match.group(2)) if match.group(2) is not None else lo
        if hi < lo or hi > MAX_RANK:
            raise ValueError(f"{part.strip()!r}: ranks go from 0 to {MAX_RANK}, low to high")
        ranks.update(range(lo, hi + 1))
    return tuple(sorted(ranks))


def write_hook(directory: Path) -> Path:
    """Copy the hook's source into ``directory`` as ``sitecustomize.py``."""
    target = directory / HOOK_NAME
    shutil.copyfile(hook.__file__, target)
    return target


def hook_environment(base: dict[str, str], hook_dir: Path, out: Path,
                     options: RecordOptions) -> dict[str, str]:
    """``base`` with ``hook_dir`` first on ``PYTHONPATH`` and the hook's configuration."""
    env = dict(base)
    previous = env.get("PYTHONPATH", "")
    env["PYTHONPATH"] = os.pathsep.join([str(hook_dir), previous]) if previous else str(hook_dir)
    env[hook.ENV] = options.hook_config(out)
    return env
