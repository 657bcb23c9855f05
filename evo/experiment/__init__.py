"""The experiment: YAML -> validated, frozen spec; run directories."""
