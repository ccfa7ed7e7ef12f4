"""`resnet bench` on tiny nets: output schema, the data-only and memory modes, FLOP counting, and
the baseline's parameter count. Nothing here asserts a speed: CI machines differ and are shared."""

import json

import pytest
import torch
from torch import nn

from resnet_cli.bench import baseline as B
from resnet_cli import bench
from resnet_cli import spec as S
from resnet_cli.model import build_model, count_params

from invoking import invoke

TINY = ["--depth", "8", "--set", "model.widths=[4,4,8]", "--batch-size", "8", "--steps", "2", "--warmup", "1",
        "--rounds", "1"]


def json_lines(text):
    return [json.loads(ln) for ln in text.splitlines() if ln.strip()]  # every stdout line must parse


@pytest.mark.slow
def test_bench_json_schema_ours_against_baseline(in_tmp):
    r = invoke("bench", *TINY, "--vary", "train.channels_last=on,off", "--json")
    assert r.exit_code == 0, r.stderr
    rows = json_lines(r.stdout)
    assert [row["variant"] for row in rows] == [{"train.channels_last": "on"}, {"train.channels_last": "off"}]
    for row in rows:
        for key in ("images_per_s", "baseline_images_per_s", "ratio", "peak_memory_mb", "baseline_peak_memory_mb",
                    "step_time_s", "cpu_s_per_image", "flops_per_image", "achieved_gflop_s", "projected_schedule_h",
                    "per_round_ratio", "contention"):
            assert row[key] is not None, key
        assert row["mode"] == "train" and row["images_per_s"] > 0 and row["peak_memory_mb"] > 0
        # consistency of the report (ratio is this quotient by construction), not a measurement
        assert row["ratio"] == pytest.approx(row["images_per_s"] / row["baseline_images_per_s"])  # one round
        # Same architecture on both sides: the same convolutions, so the same FLOPs.
        assert row["flops_per_image"] == pytest.approx(row["baseline_flops_per_image"])
    assert rows[0]["runtime"]["channels_last"] is True and rows[1]["runtime"]["channels_last"] is False
    assert rows[0]["baseline_runtime"]["dataloader_workers"] == 2


@pytest.mark.slow
def test_data_only_mode_times_both_augmentation_paths(in_tmp):
    r = invoke("bench", *TINY, "--data-only", "--json")
    assert r.exit_code == 0, r.stderr
    (row,) = json_lines(r.stdout)
    assert row["mode"] == "data" and row["images_per_s"] > 0 and row["baseline_images_per_s"] > 0
    assert row["runtime"]["augment"] == "crop_flip"


@pytest.mark.slow
def test_memory_mode_compares_checkpointing_in_separate_processes(in_tmp):
    r = invoke("bench", "--depth", "20", "--preact", "--set", "model.widths=[4,4,8]", "--batch-size", "8",
               "--memory", "--segments", "3", "--json")
    assert r.exit_code == 0, r.stderr
    (row,) = json_lines(r.stdout)
    assert row["mode"] == "memory" and row["segments"] == 3 and row["units"] == 9
    assert row["peak_memory_mb"] > 0 and row["baseline_peak_memory_mb"] > 0
    assert row["memory_ratio"] == pytest.approx(row["peak_memory_mb"] / row["baseline_peak_memory_mb"])
    assert len(row["losses"]) == 2
    # Same init, same batches: checkpointing changes nothing but rounding, BN statistics included.
    assert row["first_step_loss_diff"] <= 1e-5 and row["max_loss_diff"] <= 1e-5
    assert row["param_max_diff"] <= 1e-5 and row["bn_stats_max_diff"] <= 1e-5
    # On the CPU the pair is measured again with freed blocks handed back to the OS.
    assert row["released_peak_memory_mb"] > 0 and row["released_memory_ratio"] > 0


@pytest.mark.slow
def test_stack_mode_rows_per_stack_size_on_the_specs_own_data(in_tmp):
    r = invoke("bench", "digits/residual8", "--stack", "1,3", "--steps", "2", "--warmup", "1", "--rounds", "1",
               "--threads", "1", "--json")
    assert r.exit_code == 0, r.stderr
    rows = json_lines(r.stdout)
    assert [row["members"] for row in rows] == [1, 3] and {row["event"] for row in rows} == {"stack"}
    assert {row["dataset"] for row in rows} == {"digits"}  # a digits net, measured on digits
    one, three = rows
    # Per seed, k separate runs share the time one run takes: a third of the one-seed rate at k = 3.
    assert three["separate_images_per_s_per_seed"] == pytest.approx(one["separate_images_per_s_per_seed"] / 3)
    for row in rows:  # one round: the ratio is that round's, stacked per seed over separate per seed
        assert row["ratio"] == pytest.approx(row["stacked_images_per_s_per_seed"]
                                             / row["separate_images_per_s_per_seed"])


@pytest.mark.slow
def test_stack_mode_without_a_spec_runs_offline_on_synthetic_images(in_tmp, monkeypatch):
    """`resnet bench --stack` with no spec stopped on the default spec's CIFAR-10 download, where
    `resnet bench` runs offline on synthetic images: it measures the same way now."""
    monkeypatch.setenv("RESNET_DATA", str(in_tmp / "no-data-here"))
    r = invoke("bench", "--stack", "1,2", "--depth", "8", "--set", "model.widths=[4,4,8]", "--batch-size", "8",
               "--steps", "1", "--warmup", "1", "--rounds", "1", "--threads", "1", "--json")
    assert r.exit_code == 0, r.stderr
    assert {row["dataset"] for row in json_lines(r.stdout)} == {"synthetic"}


def test_stack_mode_on_missing_data_is_one_line_before_measuring(in_tmp):
    r = invoke("bench", "cifar/resnet20", "--stack", "1", "--set", f"data.dir={in_tmp / 'nowhere'}",
               "--set", "data.download=false")
    assert r.exit_code == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "CIFAR-10" in lines[0] and "measurement failed" not in lines[0], r.stderr
    assert "resnet_cli." not in r.stderr and "UserError" not in r.stderr


@pytest.mark.parametrize("args,needle", [
    (["--data-only", "--memory"], "one"),
    (["--stack", "4", "--memory"], "one"),
    (["--stack", "0,4"], "--stack"),
    (["--set", "model.family=imagenet", "--depth", "18"], "CIFAR"),
    (["--vary", "train.channels_last"], "--vary"),
])
def test_bad_input_is_one_line_and_exit_2(in_tmp, args, needle):
    r = invoke("bench", *args)
    assert r.exit_code == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("resnet: error:") and needle in lines[0], r.stderr


def test_flops_of_a_single_conv():
    conv = nn.Conv2d(3, 8, 3, padding=1, bias=False)
    forward = 2 * 8 * 3 * 9 * 32 * 32  # multiply-adds x 2 per output pixel
    # backward: the weight gradient costs as much as the forward; the input needs no gradient.
    assert bench.flops_per_image(conv, (3, 32, 32)) == 2 * forward
    x_grad = nn.Sequential(nn.Conv2d(3, 3, 1, bias=False), conv)  # now the conv's input needs a gradient
    assert bench.flops_per_image(x_grad, (3, 32, 32)) == 3 * forward + 2 * (2 * 3 * 3 * 32 * 32)


def test_flops_ignore_checkpointing_recomputation():
    sp = S.load(None, sets=["model.depth=20", "model.unit=full_preact", "model.widths=[4,4,8]"])
    model = build_model(sp.model, 3, 10)
    plain = bench.flops_per_image(model, (3, 32, 32))
    model.checkpoint_segments = 3
    assert bench.flops_per_image(model, (3, 32, 32)) == plain and model.checkpoint_segments == 3


@pytest.mark.parametrize("sets", [
    ["model.depth=20"], ["model.depth=56"], ["model.depth=8", "model.widths=[4,8,16]"],
    ["model.depth=164", "model.unit=full_preact", "model.downsample=B", "model.widths=[4,4,8]"],
])
def test_baseline_has_our_parameter_count(sets):
    sp = S.load(None, sets=sets)
    m = sp.model
    ours = count_params(build_model(m, 3, 10))
    assert count_params(B.resnet_cifar(m.depth, m.block, tuple(m.widths), 10)) == ours


def test_baseline_dataset_serves_pil_augmented_tensors():
    images, labels = B.cifar_like(6, 10, seed=1)
    assert images.shape == (6, 32, 32, 3) and images.dtype.name == "uint8"
    x, y = next(iter(B.loader(images, labels, batch_size=6, workers=0)))
    assert x.shape == (6, 3, 32, 32) and x.dtype == torch.float32 and y.shape == (6,)


def test_variants_are_the_product_of_the_axes():
    v = bench.variants_from(["train.channels_last=on,off", "run.threads=1,2"])
    assert v == [{"train.channels_last": "on", "run.threads": 1}, {"train.channels_last": "on", "run.threads": 2},
                 {"train.channels_last": "off", "run.threads": 1}, {"train.channels_last": "off", "run.threads": 2}]
    assert bench.variants_from([]) == [{}]


def test_default_segments_are_about_sqrt_units():
    assert bench.default_segments(S.load("preact/resnet1001-cifar10")) == 18  # 333 units


@pytest.mark.slow
def test_a_busy_machine_gets_a_warning_and_the_json_records_it(in_tmp, monkeypatch):
    """With more threads than the cores left free, rates understate the machine (two threads on two
    busy cores measured slower than one, docs/bench.md): bench says so on stderr and in the JSON."""
    from resnet_cli.bench import contention
    from resnet_cli.training import cpu_threads

    monkeypatch.setattr(cpu_threads, "load_1min", lambda: 6.0)  # a faked busy machine
    monkeypatch.setattr(contention, "cores", lambda: 4)
    r = invoke("bench", *TINY, "--data-only", "--threads", 2, "--json")
    assert r.exit_code == 0, r.stderr
    (row,) = json_lines(r.stdout)
    assert row["load_1min"] == 6.0
    (warning,) = row["warnings"]
    assert "1-minute load 6.00 on 4 cores" in warning and "--threads 1" in warning
    assert "warning" in r.stderr and "--threads 1" in r.stderr


@pytest.mark.parametrize("threads,load,other,warns", [
    (2, 6.0, None, True), (0, 1.0, None, True), (1, 9.0, 3.0, False), (2, 0.3, None, False),
    (2, 1.5, None, False),  # 1.5 + 2 threads on 4 cores: room left
    (2, 0.0, 2.5, True),  # measured: other processes took 2.5 of the 4 cores
])
def test_competition_is_judged_against_the_free_cores(monkeypatch, threads, load, other, warns):
    from resnet_cli.bench import contention

    monkeypatch.setattr(contention, "cores", lambda: 4 if threads else 2)
    got = contention.competes(threads, load_1min=load, contention={"other_cores": other} if other else None)
    assert (got is not None) == warns, got


def test_others_use_is_our_cores_busy_time_less_our_own_over_the_wall_time(monkeypatch):
    """Hand count: our cores were busy 30 s (1,000 -> 1,030) in 10 s of wall time, 5 of them ours
    (our process and the measurement child it waited for): others used 2.5 cores. The cores and the
    busy time are read as `run.threads: auto` reads them, on the CPUs of our affinity mask."""
    from resnet_cli.bench import contention

    from types import SimpleNamespace

    clock, busy, own, asked = iter([100.0, 110.0, 200.0, 201.0]), iter([1000.0, 1030.0]), iter([7.0, 12.0, 0, 0]), []
    monkeypatch.setattr(contention, "time", SimpleNamespace(time=lambda: next(clock)))  # this module's clock only
    monkeypatch.setattr(contention, "busy_seconds", lambda cpus: asked.append(cpus) or next(busy))
    monkeypatch.setattr(contention, "_own_seconds", lambda: next(own))
    monkeypatch.setattr(contention, "our_cpus", lambda: {0, 1, 2})
    monkeypatch.setattr(contention, "usable_cores", lambda: 3)
    got = contention.Contention().stop()
    assert (got["wall_s"], got["cores"], got["own_cores"], got["other_cores"]) == (10.0, 3, 0.5, 2.5)
    assert asked == [{0, 1, 2}, {0, 1, 2}]
    monkeypatch.setattr(contention, "busy_seconds", lambda cpus: None)  # no /proc/stat: no figure
    assert "other_cores" not in contention.Contention().stop()


@pytest.mark.slow
@pytest.mark.xdist_group("spinners")  # the two tests that count the spinning processes: one worker
def test_busy_mode_measures_each_setting_quiet_then_with_every_core_spinning(in_tmp, monkeypatch):
    """`--busy`: the same variants twice; in the busy half one spinning process per usable core is
    there while they train (others' use near the core count, so auto picks one thread), and gone after."""
    from pathlib import Path

    from resnet_cli.bench import busy
    from resnet_cli.training import cpu_threads

    monkeypatch.delenv("OMP_NUM_THREADS")  # the suite's pin: auto would obey it and measure nothing
    r = invoke("bench", *TINY, "--set", "data.dataset=digits", "--vary", "run.threads=auto,1", "--busy", "--json")
    assert r.exit_code == 0, r.stderr
    rows = json_lines(r.stdout)
    assert [(x["load"], x["variant"]["run.threads"]) for x in rows] == [
        ("quiet", "auto"), ("quiet", 1), ("busy", "auto"), ("busy", 1)]
    cores = cpu_threads.usable_cores()
    busy_auto = rows[2]["runtime"]["threads_auto"]
    # The spinners were seen (as others' use: at least their cores' worth, whatever else runs).
    assert busy_auto["busy"] >= cores - 0.5 and rows[2]["runtime"]["threads"] == 1
    assert rows[2]["contention"]["other_cores"] >= min(cores, 2) * 0.5
    assert busy.ratios(rows)[1].startswith("busy: auto at 1 thread ran ")
    left = [p for p in Path("/proc").glob("[0-9]*/cmdline") if busy.SPIN.encode() in _read(p)]
    assert not left  # every spinner ended with the measurement


def _spinners():
    from pathlib import Path

    from resnet_cli.bench import busy

    return [p.parent for p in Path("/proc").glob("[0-9]*/cmdline") if busy.SPIN.encode() in _read(p)]


@pytest.mark.skipif(not __import__("os").path.exists("/proc"), reason="counts processes in /proc")
@pytest.mark.xdist_group("spinners")
def test_the_busy_half_runs_one_spinning_process_per_core_and_ends_them():
    import time

    from resnet_cli.bench import busy

    assert _spinners() == []
    with busy.cores_kept_busy(2):
        deadline = time.monotonic() + 10
        while len(procs := _spinners()) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)  # a child shows its own command line only once it has exec'd
        assert len(procs) == 2
        time.sleep(0.5)
        # Each spins: user CPU time (stat field 14, in clock ticks) is growing, not asleep.
        assert all(int(_read(p / "stat").decode().rsplit(")", 1)[1].split()[11]) > 0 for p in procs)
    assert _spinners() == []


def _read(path):
    try:
        return path.read_bytes()
    except OSError:  # the process ended while we looked
        return b""


def test_stack_mode_with_compile_times_the_compiled_stack_against_the_eager_one(monkeypatch):
    """train.compile: each round also times the stacked net compiled; the row's compiled x eager is
    the median of the rounds' own ratios (hand: 300/200, 330/220, 260/260 -> 1.5, 1.5, 1.0 -> 1.5),
    the separate and eager sides are built without compile, and the first step's time is the median."""
    from resnet_cli.bench import stack as stack_mod

    rates = iter([100.0, 200.0, 300.0, 100.0, 220.0, 330.0, 100.0, 260.0, 260.0])
    firsts = iter([70.0, 90.0, 80.0])
    seen = []

    def fake(job):
        seen.append((job["side"], job.get("compile", False), job["spec"]["train"]["compile"]))
        out = {"images_per_s": next(rates)}
        if job.get("compile"):
            out["first_step_s"] = next(firsts)
        return out

    monkeypatch.setattr(stack_mod, "run_job", fake)
    spec = S.load("cifar/resnet20", sets=["data.dataset=digits", "train.compile=true"])
    (row,) = stack_mod.bench_stack(spec, [4], steps=2, warmup=1, rounds=3)
    assert row["compiled_over_eager"] == 1.5 and row["compiled_first_step_s"] == 80.0
    assert row["ratio"] == pytest.approx(2.2)  # eager stacked over separate: 2.0, 2.2, 2.6
    assert seen[:3] == [("ours", False, False), ("stacked", False, False), ("stacked", True, False)]
    eager = S.load("cifar/resnet20", sets=["data.dataset=digits"])
    rates = iter([100.0, 200.0])
    (plain,) = stack_mod.bench_stack(eager, [4], steps=2, warmup=1, rounds=1)
    assert "compiled_over_eager" not in plain  # without train.compile: no compiled side
