"""The search: asynchronous steady-state MAP-Elites, selection, variation, events."""
