"""What users touch: the command line (evo.surface.cli), live progress (progress), `evo status` (status),
`evo export` (export) and `evo report` (report, report_html). Each reads a run directory's store."""
