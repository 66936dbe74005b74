"""provision: provision and tune GPU training clusters over SSH."""

__version__ = "0.1.0"
