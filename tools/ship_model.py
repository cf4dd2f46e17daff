"""Choose, average and ship a trained model: the recipe's last steps, measured on the validation split.

    python tools/ship_model.py measure --run runs/multi30k-small [--last 8] [--limit 0]
    python tools/ship_model.py ship --run runs/multi30k-small --checkpoints step-A step-B ... --to models/multi30k-de-en \
        --beam 4 --alpha 1.0 [--replace [--keep experiments]]

`measure` scores, on the run's validation split and never on a test split: every kept checkpoint
alone (greedy, the quickest signal), the average of the last n checkpoints for n = 2, 4, 6, ...,
and, for the best of those, beam sizes and length penalties. It prints one table and writes it as
JSON to <run>/selection.json (a later `measure` reuses a row only for the same weights, beam, alpha and --limit).
`ship` averages the named checkpoints (one name: no averaging) and
writes a directory that `transformer.load_checkpoint` and `transformer translate --model` read:
weights as float16 safetensors (loaded back to float32), the model and training configs, the
tokenizer model(s), the run's metrics.csv and selection.json, and decoding.json (the beam size and
length penalty that `translate` uses by default). The model card (README.md) is written by hand from
the measured numbers.

`ship` refuses a `--to` folder that exists, unless `--replace` and it holds a model shipped before (weights, no
run's checkpoints/); never a file, the run it reads or a folder around it, or the current folder. With `--replace`
the new model is written into a fresh
folder beside it, loaded back from there, and only then swapped in for the old folder (`atomic_folder`), so no
file of the old model (a stale tokenizer, an old model card) survives and a failed ship changes nothing.
`--keep NAME ...` carries named files or folders of the old folder into the new one: the hand-written
records that do not describe the weights, such as `experiments` (the candidates tried and not shipped).
A name that `ship` writes itself (the weights, configs, tokenizers, selection) cannot be kept.
Bad input ends in one `error:` line and exit status 2.
"""

import argparse
import hashlib
import json
import math
import os
import re
import shutil
import sys
from pathlib import Path

import torch

from transformer.engine.command_input import at_least, run_tool
from transformer.errors import InputError, TransformerError
from transformer.averaging import average_weights
from transformer.engine.full_disk import full_disk_is_one_line
from transformer.files import atomic_folder, resolved
from transformer.engine.loading import Checkpoint, load_checkpoint
from transformer.engine.model_files import save_model_files
from transformer.engine.digests import write_digests
from transformer.engine.evaluate import evaluate_checkpoint


def run_folder(text: str) -> Path:
    """--run: a training run's out_dir (the folder holding checkpoints/)."""
    run = Path(text)
    if not (run / "checkpoints").is_dir():
        hint = (
            ": that is one of its checkpoints; give the run's folder, two levels up"
            if run.parent.name == "checkpoints"
            else ": give the out_dir of a training run"
        )
        raise InputError(
            f"--run {text} is not a run's folder (it holds no checkpoints/){hint}"
        )
    return run


def weights_id(paths: list[Path]) -> str:
    """What identifies the weights of `paths` (their SHA256SUMS, which name each file's digest): a
    measurement made on other weights (a step rewritten by a resumed run) is not reused."""
    digest = hashlib.sha256()
    for p in paths:
        sums = p / "SHA256SUMS"
        digest.update(
            sums.read_bytes()
            if sums.is_file()
            else (p / "model.safetensors").read_bytes()
        )
    return digest.hexdigest()[:16]


def checkpoints_of(run: Path) -> list[Path]:
    return sorted(
        p
        for p in (run / "checkpoints").glob("step-*")
        if (p / "model.safetensors").is_file()
    )


def averaged(paths: list[Path]) -> Checkpoint:
    """The checkpoint of paths[-1] with weights replaced by the mean of all paths' weights (`average_weights`)."""
    base = load_checkpoint(paths[-1])
    others = [load_checkpoint(p).model.state_dict() for p in paths[:-1]]
    base.model.load_state_dict(average_weights(others + [base.model.state_dict()]))
    return base


def bleu(
    ckpt: Checkpoint, split: str, beam: int, alpha: float, limit: int
) -> tuple[float, float]:
    report = evaluate_checkpoint(ckpt, split, beam_size=beam, alpha=alpha, limit=limit)
    scores = {s["metric"]: s["score"] for s in report["scores"]}
    return scores["BLEU"], report["seconds"]


def key(row: dict) -> tuple:
    """A measurement's identity: what was scored (and on which weights), how, on how many sentences."""
    return (row["what"], row["weights"], row["beam"], row["alpha"], row["limit"])


def measured_before(saved: Path) -> dict:
    """The rows of an earlier `measure` (selection.json), by `key`; a file that cannot be read as one,
    or rows of an older layout, are measured again."""
    if not saved.is_file():
        return {}
    try:
        rows = json.loads(saved.read_text(encoding="utf-8"))["rows"]
        return {key(r): r for r in rows}
    except (ValueError, TypeError, KeyError, AttributeError) as e:
        print(
            f"warning: {saved} is not an earlier measurement ({e!r:.60}): measuring again",
            file=sys.stderr,
        )
        return {}


def measure(args) -> None:
    run = run_folder(args.run)
    split = load_checkpoint(run).train_config.data.valid_split
    ckpts = checkpoints_of(run)[-args.last :]
    rows = []
    saved = run / "selection.json"  # measured earlier: a row is measured once
    before = measured_before(saved)

    def record(what: str, paths: list[Path], ckpt, beam: int, alpha: float) -> float:
        row = {"what": what, "weights": weights_id(paths), "beam": beam, "alpha": alpha}
        row["limit"] = args.limit
        if key(row) in before:
            rows.append(before[key(row)])
            print(
                f"{what:<44} beam {beam} alpha {alpha:<4} {split} BLEU {rows[-1]['bleu']:6.2f}  (measured before)"
            )
            return rows[-1]["bleu"]
        ckpt = ckpt()
        score, seconds = bleu(ckpt, split, beam, alpha, args.limit)
        rows.append(row | {"bleu": round(score, 2), "seconds": seconds})
        before[key(row)] = rows[-1]
        saved.write_text(
            json.dumps({"split": split, "rows": list(before.values())}, indent=1) + "\n"
        )
        print(
            f"{what:<44} beam {beam} alpha {alpha:<4} {split} BLEU {score:6.2f}  ({seconds:.0f} s)",
            flush=True,
        )
        return score

    for p in ckpts:
        record(f"single {p.name}", [p], lambda: load_checkpoint(p), 1, 0.0)
    best_n, best = 1, rows[-1]["bleu"]  # the newest checkpoint alone
    for n in range(2, len(ckpts) + 1, 2):
        score = record(
            f"average of last {n} ({ckpts[-n].name}..{ckpts[-1].name})",
            ckpts[-n:],
            lambda: averaged(ckpts[-n:]),
            1,
            0.0,
        )
        if score > best:
            best_n, best = n, score
    chosen = averaged(ckpts[-best_n:]) if best_n > 1 else load_checkpoint(ckpts[-1])
    for beam, alpha in [
        (4, 0.0),
        (4, 0.6),
        (4, 1.0),
        (4, 1.4),
        (4, 2.0),
        (6, 0.6),
        (6, 1.0),
        (8, 0.6),
        (8, 1.0),
    ]:
        record(
            f"average of last {best_n} ({ckpts[-best_n].name}..{ckpts[-1].name})",
            ckpts[-best_n:],
            lambda: chosen,
            beam,
            alpha,
        )
    (run / "selection.json").write_text(
        json.dumps({"split": split, "rows": rows}, indent=1) + "\n"
    )
    print(f"wrote {run / 'selection.json'}")


def ship(args) -> None:
    run, out = run_folder(args.run), Path(args.to)
    _check_target(out, run, args.replace)
    keep = _kept(out, args.keep or [], args.replace)
    paths = [_checkpoint(run, name) for name in args.checkpoints]
    if len(set(paths)) < len(paths):  # an average would weigh it twice
        raise InputError("--checkpoints names a checkpoint twice: name each once")
    if not (run / "metrics.csv").is_file():  # copied beside the weights: found first
        raise InputError(f"{run} holds no metrics.csv: give a training run's out_dir")
    ckpt = averaged(paths) if len(paths) > 1 else load_checkpoint(paths[0])
    try:  # `out` is the old folder or the whole new one, never half
        with full_disk_is_one_line(out, _after_a_full_disk):
            _write_whole(out, ckpt, run, paths, args, keep)
    except FileExistsError:  # made while this model was written: another ship into it
        raise InputError(
            f"{out} appeared while this model was written (another command shipped into "
            "it?), and is left as it is: ship into a new folder, or pass --replace"
        ) from None
    size = sum(f.stat().st_size for f in out.iterdir())
    print(
        f"shipped {out}: {size / 1e6:.1f} MB, weights averaged over {len(paths)} checkpoint(s)"
    )


def _after_a_full_disk(out: Path) -> str:
    """What ship says when the disk fills up as it writes (DiskFullError)."""
    return (
        f"{out} is as it was (the model is written beside it, then renamed); free "
        "some space, then ship again"
    )


def _write_whole(out: Path, ckpt, run: Path, paths: list[Path], args, keep) -> None:
    """The new model's folder written beside `out`, then renamed onto it."""
    with atomic_folder(out, replace=args.replace) as tmp:
        _write_model(ckpt, run, paths, args, tmp)
        for name in keep:  # hand-written records that outlive the weights
            if (out / name).is_symlink():  # a link stays a link
                (tmp / name).symlink_to(os.readlink(out / name))
            elif (out / name).is_dir():
                shutil.copytree(out / name, tmp / name, symlinks=True)
            else:
                shutil.copy2(out / name, tmp / name)
        back = load_checkpoint(
            tmp
        )  # the new folder loads on its own before it replaces anything
        assert next(back.model.parameters()).dtype == torch.float32


# the files `ship` writes: a --keep of one of them would put the old model's file beside the new weights
COPIED = (
    "train_config.json",
    "tokenizer.model",
    "src_tokenizer.model",
    "tgt_tokenizer.model",
)
WRITTEN = (
    "model.safetensors",
    "model_config.json",
    *COPIED,
    "metrics.csv",
    "selection.json",
    "averaged_checkpoints.json",
    "decoding.json",
    "SHA256SUMS",
)


def _check_target(out: Path, run: Path, replace: bool) -> None:
    """--to: a new folder, or with --replace a model shipped before; never a file, the run it reads
    or a folder around it, or the current folder (each was replaced without a word)."""
    target, source = resolved(out, "--to"), run.resolve()
    if not str(out).strip() or target in (
        Path.cwd().resolve(),
        *Path.cwd().resolve().parents,
    ):
        raise InputError(
            f"--to {str(out)!r} is the current folder or holds it: ship into a folder of its own"
        )
    if target == source or source in target.parents or target in source.parents:
        raise InputError(
            f"--to {out} is the run it reads ({run}), lies in it or holds it: ship into a folder of its own"
        )
    if target.parent.name == "checkpoints":  # a run's, which it saves and prunes
        raise InputError(
            f"--to {out} lies in a checkpoints/ folder, which a training run writes "
            "and prunes: ship into a folder of its own"
        )
    if not (out.exists() or out.is_symlink()):
        return
    if (
        out.is_symlink()
    ):  # --replace would replace the link, and leave its folder as it was
        raise InputError(
            f"--to {out} is a link: give the folder it points to ({out.resolve()})"
        )
    if not out.is_dir():
        raise InputError(f"--to {out} is a file, not a folder: ship into a folder")
    if not replace:
        raise InputError(
            f"{out} exists: ship into a new folder, or pass --replace to replace it whole (no file "
            "of it is kept unless --keep names it, its model card README.md included)"
        )
    # what ship writes and nothing else does (a run's step folder, a model downloaded
    # from elsewhere hold weights too, and were replaced)
    shipped = all(
        (out / n).is_file() for n in ("model.safetensors", "averaged_checkpoints.json")
    )
    trained = (out / "checkpoints").exists() or any(out.glob("training_state.*"))
    if not shipped or trained:
        raise InputError(
            f"--replace replaces a model shipped before, and {out} holds none (no "
            "model.safetensors with averaged_checkpoints.json, or a run's checkpoints or "
            "training state): ship into a new folder"
        )


def _checkpoint(run: Path, name: str) -> Path:
    """One of --checkpoints: a step-* folder of the run's checkpoints/ that holds weights."""
    path = run / "checkpoints" / name
    if (
        not re.fullmatch(r"step-\d+", name)
        or not (path / "model.safetensors").is_file()
    ):
        have = ", ".join(p.name for p in checkpoints_of(run)[-4:]) or "none"
        raise InputError(
            f"--checkpoints {name!r} is no checkpoint of {run} (the newest: {have})"
        )
    return path


def _kept(out: Path, names: list[str], replace: bool) -> list[str]:
    """The --keep names, checked before anything is written."""
    if names and not replace:
        raise InputError(
            "--keep carries files of the folder that --replace replaces: pass --replace too"
        )
    for name in names:
        if name in ("", ".", "..") or Path(name).name != name:
            raise InputError(
                f"--keep {name!r}: give the name of a file or folder directly inside {out}"
            )
        if name in WRITTEN:
            raise InputError(
                f"--keep {name}: ship writes {name} for the new model; keep only hand-written files "
                "such as experiments"
            )
        if not (out / name).exists():
            raise InputError(
                f"--keep {name}: {out / name} does not exist (nothing to keep)"
            )
    return names


def _write_model(
    ckpt: Checkpoint, run: Path, paths: list[Path], args, tmp: Path
) -> None:
    """Write the shipped model's files into the fresh folder `tmp`."""
    data = ckpt.train_config.data
    # float16: half the size; load_checkpoint reads it as float32
    save_model_files(ckpt.model.half(), tmp, (data.src_lang, data.tgt_lang))
    for name in COPIED:
        if (ckpt.path / name).is_file():
            shutil.copyfile(ckpt.path / name, tmp / name)
    write_digests(tmp)  # the weights and the tokenizer(s) copied in beside them
    shutil.copyfile(run / "metrics.csv", tmp / "metrics.csv")
    if (
        run / "selection.json"
    ).is_file():  # the validation measurements behind this choice
        shutil.copyfile(run / "selection.json", tmp / "selection.json")
    (tmp / "averaged_checkpoints.json").write_text(
        json.dumps([p.name for p in paths], indent=1) + "\n"
    )
    (tmp / "decoding.json").write_text(
        json.dumps({"beam_size": args.beam, "alpha": args.alpha}) + "\n"
    )


def length_penalty(text: str) -> float:
    """--alpha: a finite length penalty from 0 to 10, as `transformer translate --alpha` takes."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and 0 <= value <= 10):
        raise argparse.ArgumentTypeError(
            f"{text!r}: give a length penalty from 0 to 10"
        )
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    m = commands.add_parser("measure")
    m.add_argument("--run", required=True)
    m.add_argument(
        "--last",
        type=at_least(1),
        default=8,
        help="how many of the newest checkpoints to consider",
    )
    m.add_argument(
        "--limit",
        type=at_least(0),
        default=0,
        help="score only the first N validation sentences",
    )
    m.set_defaults(fn=measure)
    s = commands.add_parser("ship")
    s.add_argument("--run", required=True)
    s.add_argument(
        "--checkpoints",
        nargs="+",
        required=True,
        help="checkpoint names under <run>/checkpoints",
    )
    s.add_argument("--to", required=True)
    s.add_argument(
        "--beam",
        type=at_least(1),
        default=4,
        help="the recommended beam size (written to decoding.json)",
    )
    s.add_argument(
        "--alpha",
        type=length_penalty,
        default=0.6,
        help="the recommended length penalty (decoding.json)",
    )
    s.add_argument(
        "--replace",
        action="store_true",
        help="replace the model shipped before in --to (all of it but --keep)",
    )
    s.add_argument(
        "--keep",
        nargs="+",
        metavar="NAME",
        help="with --replace: files or folders of the old folder "
        "to carry into the new one (hand-written records, e.g. experiments)",
    )
    s.set_defaults(fn=ship)
    args = parser.parse_args(argv)
    try:
        with (
            torch.no_grad()
        ):  # scoped: main() also runs inside other processes (the tests)
            args.fn(args)
    except TransformerError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except (
        OSError
    ) as e:  # a read-only folder, a name too long: the paths are the user's
        print(f"error: {e.filename}: {e.strerror or e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    run_tool(main)
