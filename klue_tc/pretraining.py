"""Self-pretraining: the encoder learns from unlabelled titles before a fold fine-tunes it.

corpus (klue_tc/corpus.py) -> a tokenizer fit on it -> steps of the objective (klue_tc/objectives/:
masked LM, ELECTRA's replaced-token detection) -> the encoder's weights and the tokenizer in a store
beside the results store, keyed by everything that changes them, so every fold and configuration
that shares the key finds them, and a second job trains nothing. A plain loop rather than
Lightning: it resumes from the last saved step, not the last finished epoch.
"""

from __future__ import annotations

import collections
import hashlib
import itertools
import json
import logging
import math
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, NamedTuple, Optional

import torch
from torch import nn

from klue_tc import interrupts
from klue_tc.config import RunConfig, keyed_settings
from klue_tc.corpus import Corpus
from klue_tc.datamodule import BucketBatchSampler, PaddedBatches
from klue_tc.files import atomic_write, atomic_write_json, exclusive_lock
from klue_tc.fingerprint import code_version
from klue_tc.frequency_plateau import plateau_warning, token_entropy
from klue_tc.hardware import Device
from klue_tc.masking import never_hidden
from klue_tc.models.masked_lm import HEAD_ROW_BUCKET, round_up
from klue_tc.module import lr_lambda, warmup_steps
from klue_tc.objectives import objective, pretraining_model
from klue_tc.tokenizers import EncodedTitles, Tokenizer, TokenizerCache, load_tokenizer
from klue_tc.tokenizers.cache import tokenizer_key

log = logging.getLogger(__name__)

WEIGHTS_FILE, STATE_FILE, META_FILE, TOKENIZER_DIR = "encoder.pt", "resume.pt", "pretrained.json", "tokenizer"
BETAS = (0.9, 0.98)  # RoBERTa's: steadier than BERT's 0.999 with large batches and short warm-ups
CLIP_NORM = 1.0
MIN_WARMUP_STEPS = 8
BUCKET_MULTIPLIER = 50
LOSS_WINDOW = 50  # steps: one batch's loss moves by tenths, their mean is what a table can compare


class PretrainingOutcome(NamedTuple):
    weights: dict  # the encoder's state dict, on the CPU
    steps: int
    loss: float  # the mean over the last loss_steps steps
    loss_steps: int  # LOSS_WINDOW, or fewer where the last sitting ran fewer steps
    seconds: float  # of pretraining over every sitting, a resumed one's earlier sittings included


class MaskedBatch(NamedTuple):
    """One step's titles (as padded ids) and which of their tokens are masked-LM targets."""

    original: torch.Tensor
    picked: torch.Tensor

    def head_rows(self) -> torch.Tensor:
        """The rows the masked-LM head scores (a tensor: reading it would wait for the device)."""
        return round_up(self.picked.sum(), HEAD_ROW_BUCKET)


StepHook = Callable[[int, int, torch.Tensor, MaskedBatch], None]  # (step done, total steps, loss, batch)


@dataclass(frozen=True)
class PretrainedEncoder:
    key: str
    path: Path  # the store's folder of this key
    tokenizer: Tokenizer
    tokenizer_key: str
    meta: dict

    @property
    def weights(self) -> Path:
        return self.path / WEIGHTS_FILE

    def record(self) -> dict:
        """What a fold record says about the encoder it started from."""
        return {"key": self.key, "path": str(self.path.resolve()), **self.meta}


def pretrained_key(run: RunConfig, device: Device, corpus: Corpus, tokenizer_identity: Optional[str]) -> str:
    """Everything that changes the pretrained weights; where the corpus came from is not in it."""
    settings = keyed_settings(run.pretrain)
    for how_the_corpus_was_chosen in ("same_corpus_every_fold", "include_scored_titles"):
        settings.pop(how_the_corpus_was_chosen)
    payload = {
        "pretrain": settings,
        "encoder": keyed_settings(run.encoder),
        "tokenizer": tokenizer_key(run.tokenizer, corpus.fingerprint),
        "tokenizer_model": tokenizer_identity,
        "corpus": corpus.fingerprint,
        "pad_multiple": run.data.pad_multiple,
        "seed": run.seed,
        "precision": device.precision,
        "code": asdict(code_version(run)),
    }
    return hashlib.sha1(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:12]


def store_root(run: RunConfig, results_root: Path) -> Path:
    """`pretrain.dir`, else `pretrained` beside the results store (so a sweep's jobs share it)."""
    return Path(run.pretrain.dir).expanduser() if run.pretrain.dir else results_root.parent / "pretrained"


class PretrainedStore:
    """One folder per key: the encoder's weights, its tokenizer and what made them; while it
    trains, its resumable state."""

    def __init__(self, root: str | Path):
        self.root = Path(root)

    def folder(self, key: str) -> Path:
        return self.root / key

    def find(self, key: str) -> Optional[PretrainedEncoder]:
        folder = self.folder(key)
        if not (folder / META_FILE).is_file():  # written last: its presence means all is there
            return None
        meta = json.loads((folder / META_FILE).read_text(encoding="utf-8"))
        tokenizer = load_tokenizer(folder / TOKENIZER_DIR)
        return PretrainedEncoder(key, folder, tokenizer, meta["tokenizer_key"], meta)

    def claim(self, key: str):
        return exclusive_lock(
            self.folder(key) / "train.lock", f"pretrained encoder {key} is being trained by another job: waiting for it"
        )


def ensure_pretrained(
    run: RunConfig,
    device: Device,
    corpus: Corpus,
    store: PretrainedStore,
    cache: TokenizerCache,
    tokenizer_identity: Optional[str],
    on_step: Optional[StepHook] = None,
) -> PretrainedEncoder:
    """The stored encoder for this corpus and config: found, or trained (resumed) and stored now."""
    key = pretrained_key(run, device, corpus, tokenizer_identity)
    found = store.find(key)
    if found is None:
        with store.claim(key):
            found = store.find(key)  # an identical job may have finished it meanwhile
            if found is None:
                found = _train_and_store(run, device, corpus, key, store, cache, on_step)
    else:
        log.info("pretrained encoder %s found in %s: not trained again", key, store.root)
    return found


def _train_and_store(
    run: RunConfig, device: Device, corpus: Corpus, key: str, store: PretrainedStore, cache: TokenizerCache, on_step
) -> PretrainedEncoder:
    folder = store.folder(key)
    tokenizer, tok_key = cache.tokenizer(run.tokenizer, corpus.texts, corpus.fingerprint)
    encoded = cache.encoded(tokenizer, tok_key, corpus.texts, corpus.fingerprint)
    outcome = pretrain_encoder(run, device, tokenizer, encoded, folder / STATE_FILE, on_step)
    threads = torch.get_num_threads()
    atomic_write(folder / WEIGHTS_FILE, lambda tmp: torch.save(outcome.weights, tmp))
    shutil.rmtree(folder / TOKENIZER_DIR, ignore_errors=True)
    tokenizer.save(folder / TOKENIZER_DIR)
    meta = {
        "objective": run.pretrain.objective,
        "steps": outcome.steps,
        "final_loss": outcome.loss,
        "final_loss_steps": outcome.loss_steps,  # records of older code: the last step's loss alone
        "corpus_titles": len(corpus.texts),
        "corpus_fingerprint": corpus.fingerprint,
        "left_out_scored_titles": corpus.left_out,
        "include_scored_titles": corpus.include_scored_titles,
        "tokenizer_key": tok_key,
        "token_entropy": round(token_entropy(encoded.ids, never_hidden(tokenizer.specials)), 4),
        "seconds": round(outcome.seconds, 1),
        # what ran it, so the report times it on its own machine (the folds that reuse it may run elsewhere)
        "device": device.name,
        "threads": threads,
    }
    atomic_write_json(folder / META_FILE, meta)
    (folder / STATE_FILE).unlink(missing_ok=True)
    log.info(
        "pretrained encoder %s: %d %s steps, loss %.3f over the last %d, stored in %s",
        key,
        outcome.steps,
        run.pretrain.objective,
        outcome.loss,
        outcome.loss_steps,
        folder,
    )
    plateau = plateau_warning(meta)
    if plateau:
        log.warning("pretrained encoder %s: %s", key, plateau)
    return PretrainedEncoder(key, folder, tokenizer, tok_key, meta)


def _optimizer(model: nn.Module, run: RunConfig) -> torch.optim.Optimizer:
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        # As in fine-tuning: norms, biases and embeddings are not decayed.
        (no_decay if param.dim() < 2 or "embeddings" in name else decay).append(param)
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": run.pretrain.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=run.pretrain.lr,
        betas=BETAS,
        foreach=True,
    )


def total_steps(run: RunConfig, titles: int) -> tuple[int, int]:
    """(steps per epoch, steps in all)."""
    per_epoch = math.ceil(titles / run.pretrain.batch_size)
    return per_epoch, run.pretrain.max_steps or run.pretrain.epochs * per_epoch


def pretrain_encoder(
    run: RunConfig,
    device: Device,
    tokenizer: Tokenizer,
    encoded: EncodedTitles,
    state_path: Path,
    on_step: Optional[StepHook] = None,
) -> PretrainingOutcome:
    """Steps of the objective (klue_tc/objectives/) over `encoded`; the resumable state is written
    to `state_path` every `pretrain.save_every_steps` steps and at the step a stop signal comes
    (then JobInterrupted), and a run that finds one there goes on from it."""
    cfg = run.pretrain
    bf16 = "bf16" in device.precision
    on = device.torch_device
    torch.manual_seed(run.seed)
    model = pretraining_model(run, tokenizer).to(on)
    optimizer = _optimizer(model, run)
    per_epoch, total = total_steps(run, len(encoded))
    warmup = warmup_steps(cfg.warmup_ratio, MIN_WARMUP_STEPS, total)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(cfg.schedule, warmup, total))
    generator = torch.Generator(on).manual_seed(run.seed)
    corrupt = objective(cfg.objective).corruption(cfg, tokenizer, on)
    step, seconds_before = _resume(state_path, model, optimizer, scheduler, generator)
    started = time.perf_counter()

    def seconds() -> float:
        return seconds_before + time.perf_counter() - started

    batches = PaddedBatches(encoded, None, tokenizer.specials.pad, pad_multiple=run.data.pad_multiple)
    sampler = BucketBatchSampler(
        encoded.lengths, cfg.batch_size, shuffle=True, seed=run.seed, multiplier=BUCKET_MULTIPLIER
    )
    model.train()
    recent: collections.deque = collections.deque(maxlen=LOSS_WINDOW)  # detached: no sync per step
    with interrupts.at_step_boundaries():
        while step < total:
            epoch, done_in_epoch = divmod(step, per_epoch)
            sampler.set_epoch(epoch)
            for indices in itertools.islice(iter(sampler), done_in_epoch, None):
                original = batches[indices]["input_ids"].to(on, non_blocking=True)
                shown, picked = corrupt(original, generator)
                with torch.autocast(on.type, dtype=torch.bfloat16, enabled=bf16):
                    loss = model(shown, original, picked, generator)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                nn.utils.clip_grad_norm_(model.parameters(), CLIP_NORM, foreach=True)
                optimizer.step()
                scheduler.step()
                step += 1
                recent.append(loss.detach())
                if on_step is not None:
                    on_step(step, total, loss.detach(), MaskedBatch(original, picked))
                if step == total:
                    break
                stop = interrupts.requested()  # a scheduler's SIGTERM: saved at this step, not the last save
                if step % cfg.save_every_steps == 0 or stop is not None:
                    _save_state(state_path, step, seconds(), model, optimizer, scheduler, generator)
                if stop is not None:
                    raise interrupts.JobInterrupted(
                        stop, f"in pretraining, at step {step} of {total}: its state is saved in {state_path}"
                    )
    weights = {name: tensor.detach().cpu() for name, tensor in model.encoder.state_dict().items()}
    loss = float(torch.stack(list(recent)).float().mean()) if recent else math.nan
    return PretrainingOutcome(weights, step, loss, len(recent), seconds())


def _save_state(path: Path, step: int, seconds: float, model, optimizer, scheduler, generator: torch.Generator) -> None:
    state = {
        "step": step,
        "seconds": seconds,
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
        "generator": generator.get_state(),
        "torch_rng": torch.get_rng_state(),
        "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }
    atomic_write(path, lambda tmp: torch.save(state, tmp))


def _resume(path: Path, model, optimizer, scheduler, generator: torch.Generator) -> tuple[int, float]:
    """The step a saved state ends at and the seconds spent reaching it ((0, 0) with none, or with
    one a kill left unreadable)."""
    if not path.is_file():
        return 0, 0.0
    try:
        state = torch.load(path, map_location="cpu", weights_only=False)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        generator.set_state(state["generator"])
        torch.set_rng_state(state["torch_rng"])
        if state["cuda_rng"] and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["cuda_rng"])
    except Exception as err:  # cut short by a kill: start again
        log.warning("pretraining state %s is unreadable (%s); pretraining from the start", path, type(err).__name__)
        return 0, 0.0
    log.info("pretraining resumes after step %d, from %s", state["step"], path)
    return state["step"], state.get("seconds", 0.0)


def load_pretrained_encoder(model: nn.Module, pretrained: PretrainedEncoder) -> None:
    """The classifier's embeddings and encoder blocks from the stored weights (the head stays new)."""
    model.encoder.load_state_dict(torch.load(pretrained.weights, map_location="cpu", weights_only=True))
