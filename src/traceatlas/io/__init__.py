"""Readers: one file per format, found through ``traceatlas.io.registry``."""
