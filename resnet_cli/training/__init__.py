"""Running one net: the trainer (it only trains), its callbacks, checkpoints, the run directory,
the learning-rate schedule, the runtime (device, precision), distributed training, signals and
the TensorBoard writer."""
