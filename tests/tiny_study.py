"""The smallest study a command test can run: one row of a 4-layer digits net on 128 images, one
epoch, one thread; `seeds` as the test needs them."""


def tiny_study(seeds: list[int]) -> str:
    return f"""
spec:
  model: {{family: digits, depth: 4, widths: [4]}}
  data: {{dataset: digits, train_subset: 128, test_subset: 60}}
  optim: {{epochs: 1, batch_size: 64, warmup_iters: 0, milestones: []}}
  train: {{checkpoint_every: 0}}
  run: {{threads: 1}}
seeds: {seeds}
rows: [{{label: a}}]
"""
