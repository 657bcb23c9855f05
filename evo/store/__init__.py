"""The store: the SQLite evaluation store and the evaluation record."""
