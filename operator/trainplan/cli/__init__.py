"""Command line: `trainplan plan` (and, as they land, render, run, operator, crds,
dashboard). Does I/O: reads files, prints to the terminal."""
