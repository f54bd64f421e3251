"""Rendering and comparing results: console tables, the window section, plots, compare.
Returns renderables and files; printing is the CLI's job."""
