"""Writers from a store to other tools' formats (Chrome/Perfetto JSON, Paraver)."""
