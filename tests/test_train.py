"""The training run (appendix 95): a run with the linear schedule, checkpoints, exact resume, DDP, and the
run's own bad inputs. The loss, the schedule and the config have their own test modules.

The runs use `configs/tiny.toml` (a 1+1-layer model on 400 Multi30k pairs: seconds on a CPU), in
float32 on the CPU, so "the same" means bitwise the same unless a tolerance is stated.
"""

import copy
import dataclasses
import math
import os
import pickle
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from safetensors.torch import load_file

from helpers import one_layer_config

import transformer.engine.run_setup as run_setup
import transformer.engine.trainer as train_module
from transformer.engine.checkpoints import (
    checkpoint_problem,
    load_training_state,
    save_training_state,
)
from transformer.engine.loading import latest_checkpoint, load_checkpoint
from transformer.engine.config import TrainConfig
from transformer.errors import (
    CheckpointError,
    ConfigError,
    CorpusNotFoundError,
    NonFiniteLossError,
)
from transformer.data import collate
from transformer.engine.metrics import read_metrics
from transformer.model import Transformer
from transformer.schedule import (
    InverseSqrtSchedule,
)
from transformer.engine.trainer import (
    train,
    train_step,
    validation_metrics,
)

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "configs" / "tiny.toml"


def weights(run_dir: Path) -> dict[str, torch.Tensor]:
    return load_file(
        str(latest_checkpoint(Path(run_dir) / "checkpoints") / "model.safetensors")
    )


# ---------------------------------------------------------------- a run with the linear schedule


def test_a_linear_schedule_run_ends_near_zero_and_may_not_change_its_length_on_resume(
    tiny_train_config, tmp_path, course_data
):
    config = tiny_train_config(
        tmp_path, optim__schedule="linear", optim__warmup_steps=3, optim__epochs=2
    )
    result = train(config)
    lrs = [r["lr"] for r in read_metrics(config.out_dir) if r["kind"] == "step"]
    assert len(lrs) == result.step and lrs[-1] < lrs[2] / (result.step - 3) * 1.01
    longer = dataclasses.replace(
        config, optim=dataclasses.replace(config.optim, epochs=3)
    )
    with pytest.raises(
        ValueError, match=r"optim.epochs: checkpoint has 2, config has 3"
    ):
        train(longer, resume=True)
    with pytest.raises(ValueError, match="leaves nothing to decay"):
        train(
            tiny_train_config(
                tmp_path, "short", optim__schedule="linear", optim__warmup_steps=10_000
            )
        )
    with pytest.raises(
        ValueError,
        match=r"optim.schedule='cosine' must be one of \['inverse_sqrt', 'linear'\]",
    ):
        tiny_train_config(tmp_path, "other", optim__schedule="cosine")


# ---------------------------------------------------------------- training, checkpoints, resume


@pytest.fixture(scope="module")
def reference_run(tiny_train_config, tmp_path_factory, course_data):
    """configs/tiny.toml trained without interruption, with a checkpoint every 5 steps."""
    config = tiny_train_config(tmp_path_factory.mktemp("reference"), save_every=5)
    return config, train(config)


def test_tiny_trains_and_its_loss_falls(reference_run):
    config, result = reference_run
    steps = [r for r in read_metrics(config.out_dir) if r["kind"] == "step"]
    assert result.step == len(steps) > 10
    first, last = steps[0]["loss"], sum(r["loss"] for r in steps[-5:]) / 5
    assert last < first - 0.3, (first, last)
    assert result.history[-1]["valid_loss"] < result.history[0]["valid_loss"]
    assert [h["epoch"] for h in result.history] == [1, 2]


def test_a_checkpoint_holds_weights_configs_tokenizer_and_state_and_loads_without_unpickling(
    reference_run, monkeypatch
):
    config, result = reference_run
    names = {p.name for p in result.checkpoint.iterdir()}
    assert names == {
        "model.safetensors",
        "model_config.json",
        "train_config.json",
        "tokenizer.model",
        "training_state.json",
        "training_state.safetensors",
        "SHA256SUMS",  # the digests of the weights and the tokenizer
    }

    def refuse(*args, **kwargs):
        raise AssertionError("a checkpoint must load without pickle")

    for module, name in ((pickle, "load"), (pickle, "loads"), (torch, "load")):
        monkeypatch.setattr(module, name, refuse)
    ckpt = load_checkpoint(config.out_dir)
    state = load_training_state(result.checkpoint)
    assert (
        ckpt.path == result.checkpoint
        and ckpt.train_config == config
        and not ckpt.model.training
    )
    assert state["step"] == result.step and state["epoch"] == 2 and state["batch"] == 0
    assert set(state["optimizer"]["state"]) == set(
        range(len(list(ckpt.model.parameters())))
    )
    src = torch.tensor([ckpt.src_tokenizer.encode("Ein Hund läuft.")])
    assert ckpt.model(src, torch.tensor([[2]])).shape == (
        1,
        1,
        ckpt.tgt_tokenizer.vocab_size,
    )


def test_training_state_round_trips_exactly_through_json_and_safetensors(tmp_path):
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, InverseSqrtSchedule(8, 4))
    model(torch.randn(5, 3)).sum().backward()
    opt.step(), sched.step()
    state = {
        "optimizer": opt.state_dict(),
        "scheduler": sched.state_dict(),
        "rng": [{"cpu": torch.get_rng_state()}],
        "best": math.inf,
        "pair": (1, "a"),
    }
    save_training_state(state, tmp_path)
    back = load_training_state(tmp_path)
    assert (
        back["optimizer"]["param_groups"] == state["optimizer"]["param_groups"]
    )  # betas stay a tuple
    for i, s in state["optimizer"]["state"].items():
        for k, v in s.items():
            assert torch.equal(back["optimizer"]["state"][i][k], v)
    assert (
        back["scheduler"] == state["scheduler"]
        and back["pair"] == (1, "a")
        and back["best"] == math.inf
    )
    assert torch.equal(back["rng"][0]["cpu"], state["rng"][0]["cpu"])


def _small_model():
    torch.manual_seed(0)
    return Transformer(one_layer_config(40))


def _loss(model):
    g = torch.Generator().manual_seed(1)
    src, tgt = (
        torch.randint(4, 40, (3, 7), generator=g),
        torch.randint(4, 40, (3, 6), generator=g),
    )
    return model(src, tgt).float().pow(2).mean()


def test_adamw_decays_the_matrices_only_and_without_decay_steps_as_adam():
    from transformer.engine.run_setup import parameter_groups

    model = _small_model()
    decay, rest = parameter_groups(model, 0.1)
    assert decay["weight_decay"] == 0.1 and rest["weight_decay"] == 0.0
    assert all(p.dim() >= 2 for p in decay["params"]) and rest["params"]
    assert all(p.dim() == 1 for p in rest["params"])  # biases and norm gains
    assert len(decay["params"]) + len(rest["params"]) == len(list(model.parameters()))
    twin = copy.deepcopy(model)
    adam = torch.optim.Adam(model.parameters(), lr=1e-2, betas=(0.9, 0.98))
    adamw = torch.optim.AdamW(parameter_groups(twin, 0.0), lr=1e-2, betas=(0.9, 0.98))
    for _ in range(3):
        for net, opt in ((model, adam), (twin, adamw)):
            opt.zero_grad()
            _loss(net).backward()
            opt.step()
    for a, b in zip(model.parameters(), twin.parameters()):
        assert torch.equal(a, b)
    # decoupled decay: a weight with a zero gradient still shrinks by lr * wd a step
    decayed = torch.nn.Parameter(torch.ones(2, 2))
    decayed.grad = torch.zeros(2, 2)
    torch.optim.AdamW([decayed], lr=0.1, weight_decay=0.5).step()
    assert torch.allclose(decayed, torch.full((2, 2), 0.95))


def test_an_optimiser_state_saved_in_one_group_is_refused_with_one_line(tmp_path):
    """A checkpoint's optimiser state in another layout than the run's (here one group,
    as runs before the parameter groups saved it) is not migrated: it is refused, naming
    the file and what to do."""
    from transformer.engine.distributed import DistInfo
    from transformer.engine.run_setup import _restore_training_state, parameter_groups

    model = _small_model()
    one = torch.optim.Adam(model.parameters(), lr=1.0)
    one.zero_grad()
    _loss(model).backward()
    one.step()
    save_training_state({"optimizer": one.state_dict()}, tmp_path)
    saved = load_training_state(tmp_path)
    two = torch.optim.AdamW(parameter_groups(model, 0.0), lr=1.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(two, InverseSqrtSchedule(16, 4))
    with pytest.raises(CheckpointError, match="does not fit this model's optimiser"):
        _restore_training_state(
            two, schedule, saved, tmp_path, DistInfo.from_env(), torch.device("cpu")
        )


class Killed(Exception):
    """Stands for the process being killed in the middle of a step."""


def test_a_run_killed_mid_epoch_and_resumed_ends_with_exactly_the_weights_of_an_uninterrupted_run(
    reference_run, tmp_path, monkeypatch
):
    config, result = reference_run
    total = result.step
    kill_at = (
        total * 3 // 4 + 1
    )  # in the second epoch, between two checkpoints (every 5 steps)
    kill_at += kill_at % 5 == 0
    interrupted = dataclasses.replace(config, out_dir=str(tmp_path / "interrupted"))
    real_step, calls = train_module.train_step, []

    def dying_step(*args, **kwargs):
        calls.append(1)
        if len(calls) == kill_at:
            raise Killed
        return real_step(*args, **kwargs)

    monkeypatch.setattr(train_module, "train_step", dying_step)
    with pytest.raises(Killed):
        train(interrupted)
    monkeypatch.setattr(train_module, "train_step", real_step)
    resumed_from = latest_checkpoint(tmp_path / "interrupted" / "checkpoints")
    state = load_training_state(resumed_from)
    assert (
        state["step"] < kill_at and state["epoch"] == 1 and state["batch"] > 0
    )  # resumes in the middle of epoch 2

    end = train(interrupted, resume=True)
    assert end.step == total
    a, b = weights(config.out_dir), weights(interrupted.out_dir)
    assert a.keys() == b.keys()
    for name in a:  # tolerance: none. CPU float32 with the same RNG, data order and optimiser state is bitwise equal
        assert torch.equal(a[name], b[name]), name
    assert metrics_without_timings(interrupted.out_dir) == metrics_without_timings(
        config.out_dir
    )  # one run


TIMINGS = (
    "tokens_per_s",
    "elapsed_s",
)  # the only columns of metrics.csv that a second run may change


def metrics_without_timings(run: str | Path) -> list[dict]:
    """Every row of a run's metrics.csv (step and epoch rows, losses, validation), timings left out."""
    return [{k: v for k, v in r.items() if k not in TIMINGS} for r in read_metrics(run)]


def test_a_run_stopped_by_max_steps_and_resumed_over_several_prunings_equals_an_uninterrupted_run(
    tiny_train_config, tmp_path, course_data
):
    """The resumed run writes a checkpoint every epoch and keeps two, so the checkpoint it resumed from is pruned
    two epochs later; every later checkpoint copies the tokenizer from the run's own tokenizer/ folder."""
    straight = train(tiny_train_config(tmp_path, "straight", optim__epochs=6))
    steps_per_epoch = straight.step // 6
    stopped = tiny_train_config(
        tmp_path, "stopped", optim__epochs=6, optim__max_steps=2 * steps_per_epoch + 3
    )  # mid-epoch 3
    first = train(stopped)
    assert first.step == 2 * steps_per_epoch + 3
    resumed = train(
        dataclasses.replace(
            stopped, optim=dataclasses.replace(stopped.optim, max_steps=0)
        ),
        resume=True,
    )
    assert resumed.step == straight.step and resumed.epoch == 6
    kept = sorted(p.name for p in (tmp_path / "stopped" / "checkpoints").glob("step-*"))
    assert (
        f"step-{first.step:08d}" not in kept and len(kept) <= 3
    )  # pruned three epochs ago (best may stay)
    a, b = weights(straight.out_dir), weights(stopped.out_dir)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert metrics_without_timings(stopped.out_dir) == metrics_without_timings(
        straight.out_dir
    )
    six = lambda history: [
        float(f"{h['loss']:.6g}") for h in history
    ]  # earlier epochs come from metrics.csv
    assert six(resumed.history) == six(straight.history)


def test_resume_rejects_a_config_that_contradicts_the_checkpoint_but_accepts_a_longer_run(
    reference_run,
):
    config, result = reference_run
    changed = dataclasses.replace(
        config, model=dataclasses.replace(config.model, d_model=64), seed=1
    )
    with pytest.raises(
        ValueError,
        match=r"model.d_model: checkpoint has 32, config has 64\n  seed: checkpoint has 0",
    ):
        train(changed, resume=True)
    longer = dataclasses.replace(
        config, optim=dataclasses.replace(config.optim, max_steps=result.step)
    )
    assert (
        train(longer, resume=True).step == result.step
    )  # nothing left to do, nothing overwritten


def test_a_new_run_refuses_an_out_dir_that_holds_a_run_and_resume_needs_one(
    tiny_train_config, reference_run, tmp_path
):
    config, _ = reference_run
    with pytest.raises(FileExistsError, match="pass --resume"):
        train(config)
    with pytest.raises(FileNotFoundError, match="nothing to resume"):
        train(tiny_train_config(tmp_path), resume=True)


def test_a_missing_corpus_stops_with_the_folders_searched(tiny_train_config, tmp_path):
    config = tiny_train_config(
        tmp_path, data__data_dir=str(tmp_path / "empty"), data__download=False
    )
    with pytest.raises(
        CorpusNotFoundError, match=r"multi30k/train\.de\.gz is not in .*empty"
    ):
        train(config)


def test_nan_loss_stops_training_and_leaves_the_last_good_checkpoint_untouched(
    tiny_train_config, course_data, tmp_path, monkeypatch
):
    config = tiny_train_config(tmp_path, save_every=2, optim__max_steps=6)
    real_loss, calls = train_module.label_smoothed_loss, []

    def poisoned(logits, *args, **kwargs):
        calls.append(1)
        if len(calls) == 5:  # the fifth training step
            logits = logits * float("nan")
        return real_loss(logits, *args, **kwargs)

    monkeypatch.setattr(train_module, "label_smoothed_loss", poisoned)
    with pytest.raises(
        NonFiniteLossError,
        match=r"stopped at step 5 .*the last good one is .*step-00000004",
    ):
        train(config)
    good = latest_checkpoint(Path(config.out_dir) / "checkpoints")
    assert good.name == "step-00000004" and load_training_state(good)["step"] == 4
    assert all(torch.isfinite(t).all() for t in weights(config.out_dir).values())


def test_the_command_line_trains_and_reports_bad_input_without_a_traceback(
    course_data, tmp_path
):
    def cli(*args):
        return subprocess.run(
            [sys.executable, "-m", "transformer", "train", *args],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            timeout=300,
        )

    ok = cli(
        "--config",
        str(TINY),
        "--out-dir",
        str(tmp_path / "cli"),
        "--device",
        "cpu",
        "--max-steps",
        "2",
        "--no-progress",
    )
    assert ok.returncode == 0, ok.stderr
    assert "done: step 2" in ok.stdout and (tmp_path / "cli" / "metrics.csv").is_file()
    bad = tmp_path / "bad.toml"
    bad.write_text("[optim]\nlr = 0.1\n")
    failed = cli("--config", str(bad))
    assert (
        failed.returncode == 2
        and failed.stderr.startswith("error: ")
        and "Traceback" not in failed.stderr
    )
    assert "unknown setting(s) ['lr'] in [optim]" in failed.stderr


# ---------------------------------------------------------------- data parallel


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _model_and_batches():
    torch.manual_seed(0)
    config = one_layer_config(50, max_len=32)
    g = torch.Generator().manual_seed(1)
    pairs = [
        (
            torch.randint(4, 50, (int(n),), generator=g).tolist(),
            torch.randint(4, 50, (int(m),), generator=g).tolist(),
        )
        for n, m in zip(
            torch.randint(2, 9, (8,), generator=g),
            torch.randint(2, 9, (8,), generator=g),
        )
    ]
    return Transformer(config), [
        pairs[:3],
        pairs[3:],
    ]  # two shards of unequal size and token count


def _sgd(model):
    opt = torch.optim.SGD(
        model.parameters(), lr=0.5
    )  # the update is -0.5 * gradient: it shows the gradient itself
    return opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda _: 1.0)


def _ddp_worker(rank: int, world: int, port: int, out: str, tiny_dir: str) -> None:
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        WORLD_SIZE=str(world),
        LOCAL_RANK=str(rank),
    )
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    try:
        model, shards = _model_and_batches()
        ddp = torch.nn.parallel.DistributedDataParallel(model)
        opt, sched = _sgd(ddp)
        batch = collate(shards[rank])
        stats = train_step(
            ddp,
            batch,
            opt,
            sched,
            num_tokens=batch.num_tgt_tokens,
            label_smoothing=0.1,
            pad_id=0,
            clip_grad_norm=0.0,
        )
        if rank == 0:
            torch.save(
                {
                    "params": {k: v.clone() for k, v in model.state_dict().items()},
                    "stats": dataclasses.asdict(stats),
                },
                Path(out) / "ddp.pt",
            )
        # and the whole loop: two processes train tiny for a few steps and end with the same weights
        config = TrainConfig.from_json(Path(tiny_dir, "config.json").read_text())
        result = train(config)
        flat = torch.cat(
            [
                p.detach().reshape(-1)
                for p in load_checkpoint(result.checkpoint).model.parameters()
            ]
        )
        torch.save(flat, Path(out) / f"tiny-rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def resume_tiny_run(run: Path) -> subprocess.CompletedProcess:
    """`transformer train --resume` of the tiny config in the folder `run`, as a user
    types it: a process of its own, its output captured."""
    return subprocess.run(
        [sys.executable, "-m", "transformer", "train", "--config", str(TINY)]
        + ["--resume", "--out-dir", str(run), "--device", "cpu", "--no-progress"],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_two_gloo_processes_make_the_same_update_as_one_process_on_the_global_batch(
    tiny_train_config, course_data, tmp_path
):
    config = tiny_train_config(tmp_path, optim__max_steps=3, optim__epochs=1)
    Path(tmp_path / "config.json").write_text(config.to_json())
    mp.spawn(
        _ddp_worker,
        args=(2, _free_port(), str(tmp_path), str(tmp_path)),
        nprocs=2,
        join=True,
    )

    model, shards = _model_and_batches()
    opt, sched = _sgd(model)
    batch = collate(shards[0] + shards[1])  # the global batch in one process
    stats = train_step(
        model,
        batch,
        opt,
        sched,
        num_tokens=batch.num_tgt_tokens,
        label_smoothing=0.1,
        pad_id=0,
        clip_grad_norm=0.0,
    )
    ddp = torch.load(
        tmp_path / "ddp.pt", weights_only=True
    )  # our own file, written just above
    for (
        name,
        value,
    ) in (
        model.state_dict().items()
    ):  # tolerance: float32 sums taken in a different order
        torch.testing.assert_close(
            ddp["params"][name], value, rtol=1e-5, atol=1e-6, msg=name
        )
    assert ddp["stats"]["tokens"] == stats.tokens
    assert ddp["stats"]["loss"] == pytest.approx(stats.loss, rel=1e-5)
    assert ddp["stats"]["grad_norm"] == pytest.approx(stats.grad_norm, rel=1e-5)

    rank0, rank1 = (
        torch.load(tmp_path / f"tiny-rank{r}.pt", weights_only=True) for r in (0, 1)
    )
    assert torch.equal(rank0, rank1)
    state = load_training_state(latest_checkpoint(Path(config.out_dir) / "checkpoints"))
    assert state["world_size"] == 2 and state["step"] == 3 and len(state["rng"]) == 2
    assert not torch.equal(
        state["rng"][0]["cpu"], state["rng"][1]["cpu"]
    )  # each process its own dropout


def test_resume_over_a_truncated_latest_checkpoint_names_it_and_continues_from_the_newest_intact_one(
    reference_run, tmp_path
):
    import shutil

    config, result = reference_run
    run = tmp_path / "damaged"
    shutil.copytree(config.out_dir, run)
    checkpoints = run / "checkpoints"
    latest = latest_checkpoint(checkpoints)
    older = sorted(p for p in checkpoints.glob("step-*") if p != latest)[-1]
    weights = latest / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])  # cut short, as by a full disk
    resumed = resume_tiny_run(run)
    assert resumed.returncode == 0, resumed.stderr
    assert (
        f"checkpoint {weights} is damaged" in resumed.stderr
        and "Traceback" not in resumed.stderr
    )
    assert f"resuming from {older.name}, the newest intact checkpoint" in resumed.stderr
    assert f"done: step {result.step}" in resumed.stdout
    for f in older.parent.glob(
        "step-*"
    ):  # every remaining checkpoint but the broken one is intact
        assert f == latest or checkpoint_problem(f) is None


def test_resume_with_no_intact_checkpoint_is_one_clear_error(reference_run, tmp_path):
    import shutil

    config, _ = reference_run
    run = tmp_path / "ruined"
    shutil.copytree(config.out_dir, run)
    for ckpt in (run / "checkpoints").glob("step-*"):
        (ckpt / "training_state.json").write_text("{")
    failed = resume_tiny_run(run)
    assert failed.returncode == 2 and "Traceback" not in failed.stderr
    last = failed.stderr.strip().splitlines()[-1]
    assert (
        last.startswith("error: no intact checkpoint under")
        and "training_state.json" in last
    )


FAULTS_OF_A_REPEATED_BLOCK = """
import resource, sys, torch
import transformer.engine.trainer  # what a training process has loaded (and allocated) by then
if sys.argv[1] == "keep":
    from transformer.engine.machine import keep_freed_memory
    assert keep_freed_memory()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(10):
    torch.empty(16 * 2**20).fill_(1.0)  # as a training step allocates its logits and frees them again
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


@pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="glibc's allocator only"
)
def test_keep_freed_memory_stops_a_block_used_every_step_from_being_faulted_in_again():
    """By default glibc unmaps a freed 64 MB block and the next allocation faults every page in again
    (16,384 pages of 4 KiB, ten times over); after keep_freed_memory the heap grows for the first few (two or
    three blocks' worth of faults, and a few pages of the interpreter's own) and later ones reuse it without
    a fault. Measured in a process that has imported what a training run imports: in a bare one (torch
    alone) the heap's layout left 49,000-131,000 faults from run to run, 32,784 with the trainer loaded. A
    kernel that reclaims idle pages on its own (DAMON's kdamond runs on this machine) could still take the
    kept heap back between two allocations, so the kept run is tried up to three times and its fewest
    faults count."""

    def faults(how: str) -> int:
        return int(
            subprocess.run(
                [sys.executable, "-c", FAULTS_OF_A_REPEATED_BLOCK, how],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
        )

    default = faults("default")
    assert default > 9 * 16_384, default
    kept = []
    while len(kept) < 3 and (not kept or min(kept) >= 4 * 16_384):
        kept.append(faults("keep"))
    assert min(kept) < 4 * 16_384, (default, kept)


def test_bf16_on_a_cpu_without_bf16_instructions_is_refused_before_anything_is_written(
    tiny_train_config, tmp_path, monkeypatch
):
    monkeypatch.setattr(run_setup, "cpu_has_bf16_matmul", lambda: False)
    with pytest.raises(ConfigError, match='set precision = "fp32"'):
        train(tiny_train_config(tmp_path, precision="bf16"))
    assert not (tmp_path / "run").exists()
    # cannot tell: the run starts
    monkeypatch.setattr(run_setup, "cpu_has_bf16_matmul", lambda: None)
    train(tiny_train_config(tmp_path, precision="bf16", optim__max_steps=2))
    assert latest_checkpoint(tmp_path / "run" / "checkpoints") is not None


def _wait_for(path: Path, process: subprocess.Popen, seconds: float = 120) -> None:
    import time

    end = time.monotonic() + seconds
    while not path.exists():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < end, f"{path} did not appear within {seconds} s"
        time.sleep(0.05)


def test_a_second_run_into_a_folder_in_use_is_refused_naming_the_process_and_a_killed_run_leaves_no_lock(
    tmp_path, course_data
):
    """Two real processes: the first holds the run folder's lock, the second stops with one line naming the folder
    and the first's process id. The first is then killed (SIGKILL: no clean-up of its own), and a `--resume`
    continues at once: the lock went with the process."""
    import signal

    text = (
        TINY.read_text()
        .replace('out_dir = "runs/tiny"', f'out_dir = "{tmp_path / "run"}"')
        .replace("epochs = 2", "epochs = 200")
    )
    config = tmp_path / "long.toml"
    config.write_text(text)
    command = [
        sys.executable,
        "-m",
        "transformer",
        "train",
        "--config",
        str(config),
        "--no-progress",
        "--device",
        "cpu",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    first = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    try:
        _wait_for(tmp_path / "run" / "checkpoints" / "latest", first)
        second = subprocess.run(
            command, capture_output=True, text=True, env=env, timeout=120
        )
        assert second.returncode == 2 and second.stdout == "", second
        assert second.stderr.count("\n") == 1 and "Traceback" not in second.stderr, (
            second.stderr
        )
        assert (
            f"out_dir={tmp_path / 'run'} is in use by another training run (process {first.pid}"
            in second.stderr
        )
        assert first.poll() is None  # the first run goes on
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    step = load_training_state(latest_checkpoint(tmp_path / "run" / "checkpoints"))[
        "step"
    ]
    resumed = subprocess.run(
        command + ["--resume", "--max-steps", str(step + 1)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert resumed.returncode == 0, resumed.stderr
    assert f"done: step {step + 1}" in resumed.stdout


def test_validation_is_measured_without_dropout_and_leaves_training_mode_on():
    torch.manual_seed(0)
    model = Transformer(one_layer_config(12, dropout=0.5)).train()
    batches = [collate([([4, 5, 6], [7, 8]), ([9, 10], [11, 4, 5])])]
    measure = lambda: validation_metrics(model, batches, label_smoothing=0.1, pad_id=0)
    first, second = measure(), measure()
    assert first == second  # with dropout on, two passes would differ
    assert all(m.training for m in model.modules())


def test_a_run_refused_at_the_lock_leaves_the_other_runs_files(tmp_path, monkeypatch):
    """Two runs started into one folder at once: the one refused at the lock removes
    nothing, although the other run made its tokenizer and metrics after the refused
    one looked (before, the refused run's clean-up deleted them and the first run died
    at its first save)."""
    import fcntl

    from transformer.engine import run_folder as rf
    from transformer.engine.distributed import DistInfo

    out = tmp_path / "run"
    out.mkdir()
    holder = os.open(out, os.O_RDONLY)
    fcntl.flock(holder, fcntl.LOCK_EX | fcntl.LOCK_NB)  # the first run holds it
    lock = rf._lock

    def meanwhile(folder):  # the first run writes while the second starts
        (folder / "tokenizer").mkdir()
        (folder / "metrics.csv").write_text("step\n")
        return lock(folder)

    monkeypatch.setattr(rf, "_lock", meanwhile)
    try:
        with pytest.raises(ConfigError, match="in use by another training run"):
            with rf.run_folder(out, DistInfo()):
                pass
    finally:
        os.close(holder)
    assert (out / "tokenizer").is_dir() and (out / "metrics.csv").exists()
