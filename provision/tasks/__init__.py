"""Tasks: each decides, from facts and settings alone, what must change (plan), then does only that."""
