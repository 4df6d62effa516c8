"""``traceatlas record``: run a program under the PyTorch profiler (or Nsight Systems)
with no change to its code, one trace per rank into a directory.

- ``hook``: the start-up hook (``sitecustomize.py``) loaded by every Python process of the
  program; standalone, standard library and torch only.
- ``options``: what the user asked for, and the environment that carries it to the hook.
- ``outdir``: the output directory (what record may replace, its marker file).
- ``launch``: start the program, forward signals, wait; the ``nsys`` command line.
"""
