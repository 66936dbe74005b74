"""provision recover's parts: the ladder (which step a node's findings ask for), the GPU reset, the card to
replace; commands/recover.py runs them over the nodes."""
