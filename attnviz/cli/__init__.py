"""The ``attnviz`` command: subcommands (commands), `align`/`faithfulness`/`bench` (analysis)
and `beam`/`compare`/`export-hf` (debug), thin over the library.

May import anything but bench at module level (bench is imported when asked for).
"""

from .commands import main

__all__ = ["main"]
