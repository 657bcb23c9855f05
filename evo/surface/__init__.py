"""The user surface: cli, progress, status, export, report."""
