"""Self-pretraining: the encoder learns from unlabelled titles before a fold fine-tunes it.

corpus (klue_tc/data/corpus.py) -> a tokenizer fit on it -> steps of the objective (klue_tc/pretraining/objectives/:
masked LM, ELECTRA's replaced-token detection) -> the encoder's weights and the tokenizer in a store
beside the results store, keyed by everything that changes them, so every fold and configuration
that shares the key finds them, and a second job trains nothing. A plain loop rather than
Lightning: it resumes from the last saved step, not the last finished epoch.
"""

from __future__ import annotations

import collections
import hashlib
import io
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

from klue_tc.core import interrupts
from klue_tc.core.checksums import (
    checked_json,
    require_checksum,
    require_sidecar_checksum,
    sha256_of_bytes,
    sidecar,
    with_checksum,
    write_with_sidecar,
)
from klue_tc.core.config import RunConfig, keyed_settings
from klue_tc.core.errors import DamagedFileError
from klue_tc.core.files import atomic_write_bytes, atomic_write_json, exclusive_lock
from klue_tc.core.hardware import Device
from klue_tc.data.batches import BucketBatchSampler, PaddedBatches
from klue_tc.data.corpus import Corpus
from klue_tc.models.masked_lm import HEAD_ROW_BUCKET, round_up
from klue_tc.models.schedule import lr_lambda, warmup_steps
from klue_tc.pretraining.frequency_plateau import plateau_warning, token_entropy
from klue_tc.pretraining.masking import never_hidden
from klue_tc.pretraining.objectives import objective, pretraining_model
from klue_tc.pretraining.stall import StallWatch, with_restarts
from klue_tc.store.fingerprint import code_version
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
    loss_steps: int  # LOSS_WINDOW, or fewer where the pretraining ran fewer steps
    seconds: float  # of pretraining over every sitting, a resumed one's earlier sittings included
    stall: Optional[dict] = None  # the stall rule's checks (klue_tc/pretraining/stall.py); None: not masked LM


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


def store_for(run: RunConfig, results_root: Path, key: str) -> PretrainedStore:
    """The store that holds encoder `key`, or that will: pretrain.store_dir's, unless the encoder lies where
    the default store was before it moved inside the results store (beside it), which is read still
    rather than pretrained again."""
    store = PretrainedStore(run.pretrain.store_dir(results_root))
    if run.pretrain.dir or store.find(key) is not None:
        return store
    earlier = PretrainedStore(results_root.parent / "pretrained")
    return earlier if earlier.find(key) is not None else store


class PretrainedStore:
    """One folder per key: the encoder's weights, its tokenizer and what made them; while it
    trains, its resumable state."""

    def __init__(self, root: str | Path):
        self.root = Path(root)

    def folder(self, key: str) -> Path:
        return self.root / key

    def find(self, key: str) -> Optional[PretrainedEncoder]:
        """The stored encoder, or None where there is none or a damaged one (`load` says which)."""
        try:
            return self.load(key)
        except DamagedFileError:
            return None

    def load(self, key: str) -> Optional[PretrainedEncoder]:
        """The stored encoder, None where there is none; a DamagedFileError naming the file of it that is
        cut short or does not match the checksum its record keeps."""
        folder = self.folder(key)
        meta_path = folder / META_FILE
        if not meta_path.is_file():  # written last: its presence means all is there
            return None
        try:
            meta = checked_json(meta_path)
            require_checksum(folder / WEIGHTS_FILE, meta.get("weights_sha256"), META_FILE)
            tokenizer = load_tokenizer(folder / TOKENIZER_DIR)
            return PretrainedEncoder(key, folder, tokenizer, meta["tokenizer_key"], meta)
        except DamagedFileError:
            raise
        except (OSError, ValueError, KeyError) as err:  # a file cut short or gone
            raise DamagedFileError(f"{folder}: damaged ({type(err).__name__}: {err})") from None

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
            try:
                found = store.load(key)  # an identical job may have finished it meanwhile
            except DamagedFileError as err:  # written over, under the lock, by the training below
                log.warning("pretrained encoder %s: %s; pretraining it again", key, err)
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
    buffer = io.BytesIO()
    torch.save(outcome.weights, buffer)
    weights = buffer.getvalue()
    atomic_write_bytes(folder / WEIGHTS_FILE, weights)
    shutil.rmtree(folder / TOKENIZER_DIR, ignore_errors=True)
    tokenizer.save(folder / TOKENIZER_DIR)
    meta = {
        "objective": run.pretrain.objective,
        "seed": run.pretrain.seed_or(run.seed),  # a second pretraining of a configuration has its own
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
        **({"stall": outcome.stall} if outcome.stall is not None else {}),
        # what ran it, so the report times it on its own machine (the folds that reuse it may run elsewhere)
        "device": device.name,
        "threads": threads,
        "weights_sha256": sha256_of_bytes(weights),  # checked by every job that finds the encoder
    }
    atomic_write_json(folder / META_FILE, with_checksum(meta))
    (folder / STATE_FILE).unlink(missing_ok=True)
    sidecar(folder / STATE_FILE).unlink(missing_ok=True)
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
    """Steps of the objective (klue_tc/pretraining/objectives/) over `encoded`; the resumable state is written
    to `state_path` every `pretrain.save_every_steps` steps and at the step a stop signal comes
    (then JobInterrupted), and a run that finds one there goes on from it. A masked-LM pretraining
    is checked against its corpus's token-frequency plateau, and restarted at a lower rate where
    pretrain.stall says so (klue_tc/pretraining/stall.py)."""
    watched = objective(run.pretrain.objective).frequency_plateau  # a loss comparable to the entropy
    plateau = token_entropy(encoded.ids, never_hidden(tokenizer.specials)) if watched else None
    outcome, stall, restarted_seconds = with_restarts(
        run,
        plateau,
        total_steps(run, len(encoded))[1],
        state_path,
        on_step,
        lambda attempt, path, watch, hook: _pretrain_attempt(attempt, device, tokenizer, encoded, path, hook, watch),
    )
    return outcome._replace(stall=stall, seconds=outcome.seconds + restarted_seconds)


def _pretrain_attempt(
    run: RunConfig,
    device: Device,
    tokenizer: Tokenizer,
    encoded: EncodedTitles,
    state_path: Path,
    on_step: Optional[StepHook],
    watch: Optional[StallWatch],
) -> PretrainingOutcome:
    cfg = run.pretrain
    bf16 = "bf16" in device.precision
    on = device.torch_device
    seed = cfg.seed_or(run.seed)
    torch.manual_seed(seed)
    model = pretraining_model(run, tokenizer).to(on)
    optimizer = _optimizer(model, run)
    per_epoch, total = total_steps(run, len(encoded))
    warmup = warmup_steps(cfg.warmup_ratio, MIN_WARMUP_STEPS, total)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(cfg.schedule, warmup, total))
    generator = torch.Generator(on).manual_seed(seed)
    corrupt = objective(cfg.objective).corruption(cfg, tokenizer, on)
    step, seconds_before, losses = _resume(state_path, model, optimizer, scheduler, generator)
    started = time.perf_counter()

    def seconds() -> float:
        return seconds_before + time.perf_counter() - started

    batches = PaddedBatches(encoded, None, tokenizer.specials.pad, pad_multiple=run.data.pad_multiple)
    sampler = BucketBatchSampler(encoded.lengths, cfg.batch_size, shuffle=True, seed=seed, multiplier=BUCKET_MULTIPLIER)
    model.train()
    # Detached: no sync per step. Resumed with the saved losses, so a window means the same after a kill.
    recent: collections.deque = collections.deque([torch.tensor(x, device=on) for x in losses], maxlen=LOSS_WINDOW)
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
                if watch is not None:
                    watch(step, recent, seconds)  # raises Stalled where the rule restarts
                if on_step is not None:
                    on_step(step, total, loss.detach(), MaskedBatch(original, picked))
                if step == total:
                    break
                stop = interrupts.requested()  # a scheduler's SIGTERM: saved at this step, not the last save
                if step % cfg.save_every_steps == 0 or stop is not None:
                    _save_state(state_path, step, seconds(), model, optimizer, scheduler, generator, recent)
                if stop is not None:
                    raise interrupts.JobInterrupted(
                        stop, f"in pretraining, at step {step} of {total}: its state is saved in {state_path}"
                    )
    weights = {name: tensor.detach().cpu() for name, tensor in model.encoder.state_dict().items()}
    loss = float(torch.stack(list(recent)).float().mean()) if recent else math.nan
    return PretrainingOutcome(weights, step, loss, len(recent), seconds())


def _save_state(
    path: Path, step: int, seconds: float, model, optimizer, scheduler, generator: torch.Generator, recent
) -> None:
    state = {
        "step": step,
        "seconds": seconds,
        "recent_losses": [float(loss) for loss in recent],
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
        "generator": generator.get_state(),
        "torch_rng": torch.get_rng_state(),
        "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }
    buffer = io.BytesIO()
    torch.save(state, buffer)
    write_with_sidecar(path, buffer.getvalue())


def _resume(path: Path, model, optimizer, scheduler, generator: torch.Generator) -> tuple[int, float, list]:
    """The step a saved state ends at, the seconds spent reaching it and its last steps' losses
    ((0, 0, []) with none, or with one a kill left unreadable)."""
    if not path.is_file():
        return 0, 0.0, []
    try:
        require_sidecar_checksum(path)
        state = torch.load(path, map_location="cpu", weights_only=False)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        generator.set_state(state["generator"])
        torch.set_rng_state(state["torch_rng"])
        if state["cuda_rng"] and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["cuda_rng"])
    except Exception as err:  # cut short by a kill, or not matching its checksum: start again
        why = str(err) if isinstance(err, DamagedFileError) else f"{path} is unreadable ({type(err).__name__})"
        log.warning("pretraining state: %s; pretraining from the start", why)
        return 0, 0.0, []
    log.info("pretraining resumes after step %d, from %s", state["step"], path)
    return state["step"], state.get("seconds", 0.0), state.get("recent_losses", [])


def load_pretrained_encoder(model: nn.Module, pretrained: PretrainedEncoder) -> None:
    """The classifier's embeddings and encoder blocks from the stored weights (the head stays new)."""
    model.encoder.load_state_dict(torch.load(pretrained.weights, map_location="cpu", weights_only=True))
