"""Analyses of trained runs and of nets at initialisation: trained (a run directory back as a net and
its data), evaluate, export, lesion, paths, landscape, gradnorm/. Each reads run directories and
computes its own measurement; none trains a study."""
