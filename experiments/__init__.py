"""npukit.experiments: one-command reproductions of the papers' headline claims."""
