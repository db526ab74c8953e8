class DataError(ValueError):
    """The data cannot serve what the flags ask for (the entry scripts print it as one line)."""
