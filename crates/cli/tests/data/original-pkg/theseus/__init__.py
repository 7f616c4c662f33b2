"""A stand-in for the original theseus package (see ../README.md)."""
