"""Engine-agnostic primitives over columns (numpy / polars), shared by readers and analyses."""
