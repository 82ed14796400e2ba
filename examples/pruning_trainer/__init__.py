"""A data-pruning trainer ("Deep Learning on a Data Diet", Paul, Ganguli, Dziugaite 2021).

Scores every training example by EL2N and GraNd early in training, averaged over several
initialisations, keeps the hardest, retrains and compares with random pruning and with
keeping the easiest.  It doubles as the realistic workload for oomwatch's memory scenarios
(per-example gradients, leaks, DataLoader shared memory, cached datasets) and carries the
oomwatch probe.  Run `python -m examples.pruning_trainer --help` from the repository root.
"""
