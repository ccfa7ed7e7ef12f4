"""The run directory: its file names (files.py), its one writer (writer.py) and its one reader (reader.py)."""
