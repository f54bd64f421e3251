"""The package version: one home, read by pyproject (hatch) and by every file we write."""

__version__ = "0.1.0"
