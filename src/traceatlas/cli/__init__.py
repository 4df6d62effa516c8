"""The ``traceatlas`` command line."""
