"""Self-pretraining: the encoder learns from unlabelled titles before a fold fine-tunes it.

corpus (klue_tc/data/corpus.py) -> a tokenizer fit on it -> steps of the objective (klue_tc/pretraining/objectives/:
masked LM, ELECTRA's replaced-token detection) -> the encoder's weights and the tokenizer in a store
beside the results store, keyed by everything that changes them, so every fold and configuration
that shares the key finds them, and a second job trains nothing. Trained by Lightning as fine-tuning
is, resumable from the last saved step.
"""

from __future__ import annotations

import collections
import io
import logging
import math
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, NamedTuple, Optional

import lightning as L
import torch
from torch import nn
from torch.utils.data import DataLoader

from klue_tc.core import interrupts
from klue_tc.core.checksums import (
    checked_json,
    require_checksum,
    require_sidecar_checksum,
    sha256_of_bytes,
    sidecar,
    with_checksum,
)
from klue_tc.core.config import RunConfig
from klue_tc.core.errors import DamagedFileError
from klue_tc.core.files import atomic_write_bytes, atomic_write_json, exclusive_lock
from klue_tc.core.hardware import Device
from klue_tc.data.batches import BucketBatchSampler, PaddedBatches
from klue_tc.data.corpus import Corpus
from klue_tc.engine.checkpoints import AtomicCheckpointIO
from klue_tc.engine.random_state import RandomState
from klue_tc.models.masked_lm import HEAD_ROW_BUCKET, round_up
from klue_tc.models.schedule import lr_lambda, warmup_steps
from klue_tc.pretraining.encoder_keys import pretrained_keys, stored_key
from klue_tc.pretraining.frequency_plateau import plateau_warning, token_entropy
from klue_tc.pretraining.masking import never_hidden
from klue_tc.pretraining.objectives import objective, pretraining_model
from klue_tc.pretraining.stall import StallWatch, with_restarts
from klue_tc.tokenizers import EncodedTitles, Tokenizer, TokenizerCache, load_tokenizer

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
    key = stored_key(store, pretrained_keys(run, device, corpus, tokenizer_identity))
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
        "include_held_out_titles": corpus.include_held_out_titles,
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


def pretraining_precision(device: Device) -> str:
    """Lightning's precision for pretraining: bf16 autocast wherever the job's resolved precision is
    a bf16 one, fp32 otherwise, as pretraining has always run (its weights stay fp32)."""
    return "bf16-mixed" if "bf16" in device.precision else "32-true"


def _pretrain_attempt(
    run: RunConfig,
    device: Device,
    tokenizer: Tokenizer,
    encoded: EncodedTitles,
    state_path: Path,
    on_step: Optional[StepHook],
    watch: Optional[StallWatch],
) -> PretrainingOutcome:
    module = PretrainingModule(run, device, tokenizer, encoded, watch, on_step)
    resume_from = _resume_point(state_path)
    trainer = L.Trainer(
        accelerator="gpu" if device.gpu else "cpu",
        devices=1,
        precision=pretraining_precision(device),
        max_steps=module.total,
        logger=False,
        callbacks=[RandomState(), PretrainingState(state_path, run.pretrain.save_every_steps, module.total)],
        enable_checkpointing=False,
        enable_progress_bar=False,  # its own line (klue_tc.jobs.progress.PretrainLine), through on_step
        enable_model_summary=False,
        num_sanity_val_steps=0,
        use_distributed_sampler=False,
        default_root_dir=str(state_path.parent),
        plugins=[AtomicCheckpointIO()],
    )
    with interrupts.at_step_boundaries():
        trainer.fit(module, ckpt_path=resume_from)
    weights = {name: tensor.detach().cpu() for name, tensor in module.model.encoder.state_dict().items()}
    recent = module.recent
    loss = float(torch.stack(list(recent)).float().mean()) if recent else math.nan
    return PretrainingOutcome(weights, trainer.global_step, loss, len(recent), module.seconds())


class PretrainingModule(L.LightningModule):
    """The objective's model, stepped by hand as the pretraining always stepped it: the batch
    corrupted with the objective's own random stream, the loss, the clipped gradient, AdamW and
    the schedule. Its checkpoint also holds the step, the seconds spent, the last steps' losses and
    the masking stream, so a resumed pretraining draws what an uninterrupted one would."""

    def __init__(
        self,
        run: RunConfig,
        device: Device,
        tokenizer: Tokenizer,
        encoded: EncodedTitles,
        watch: Optional[StallWatch],
        on_step: Optional[StepHook],
    ):
        super().__init__()
        self.automatic_optimization = False
        cfg = run.pretrain
        self.run_cfg, self.pretrain_seed, self.on = run, cfg.seed_or(run.seed), device.torch_device
        torch.manual_seed(self.pretrain_seed)  # the model's initial weights, then dropout's draws
        self.model = pretraining_model(run, tokenizer)
        self.generator = torch.Generator(self.on).manual_seed(self.pretrain_seed)
        self.corrupt = objective(cfg.objective).corruption(cfg, tokenizer, self.on)
        self.per_epoch, self.total = total_steps(run, len(encoded))
        self.batches = PaddedBatches(encoded, None, tokenizer.specials.pad, pad_multiple=run.data.pad_multiple)
        self.lengths, self.watch, self.on_step = encoded.lengths, watch, on_step
        # Detached: no sync per step. Resumed with the saved losses, so a window means the same after a kill.
        self.recent: collections.deque = collections.deque(maxlen=LOSS_WINDOW)
        self.resumed_step, self.seconds_before, self.started = 0, 0.0, time.perf_counter()

    def seconds(self) -> float:
        """Of pretraining, over every sitting."""
        return self.seconds_before + time.perf_counter() - self.started

    def configure_optimizers(self):
        cfg = self.run_cfg.pretrain
        optimizer = _optimizer(self.model, self.run_cfg)
        warmup = warmup_steps(cfg.warmup_ratio, MIN_WARMUP_STEPS, self.total)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(cfg.schedule, warmup, self.total))
        return [optimizer], [{"scheduler": scheduler, "interval": "step"}]

    def train_dataloader(self) -> DataLoader:
        sampler = BucketBatchSampler(
            self.lengths,
            self.run_cfg.pretrain.batch_size,
            shuffle=True,
            seed=self.pretrain_seed,
            multiplier=BUCKET_MULTIPLIER,
        )
        if self.resumed_step:  # Lightning sets the epoch; the sampler leaves out the batches done in it
            sampler.resume_epoch, sampler.resume_after = divmod(self.resumed_step, self.per_epoch)
        # Its own generator for the loader's seed: the global one draws dropout and nothing else.
        return DataLoader(self.batches, sampler=sampler, batch_size=None, generator=torch.Generator())

    def on_train_start(self) -> None:
        self.started = time.perf_counter()

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        original = batch["input_ids"]
        shown, picked = self.corrupt(original, self.generator)
        loss = self.model(shown, original, picked, self.generator)
        optimizer, scheduler = self.optimizers(), self.lr_schedulers()
        # Lightning's bf16 autocast covers the whole training step; the update runs in fp32, as
        # pretraining's always did (under autocast its gradients differ in the last bits).
        with torch.autocast(self.on.type, enabled=False):
            optimizer.zero_grad(set_to_none=True)
            self.manual_backward(loss)
            nn.utils.clip_grad_norm_(self.model.parameters(), CLIP_NORM, foreach=True)
            optimizer.step()
            scheduler.step()
        step = self.trainer.global_step
        self.recent.append(loss.detach())
        if self.watch is not None:
            self.watch(step, self.recent, self.seconds)  # raises Stalled where the rule restarts
        if self.on_step is not None:
            self.on_step(step, self.total, loss.detach(), MaskedBatch(original, picked))

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint.update(
            step=self.trainer.global_step,
            seconds=self.seconds(),
            recent_losses=[float(loss) for loss in self.recent],
            generator=self.generator.get_state(),
        )

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        self.resumed_step, self.seconds_before = checkpoint["step"], checkpoint["seconds"]
        self.recent.extend(torch.tensor(x, device=self.on) for x in checkpoint["recent_losses"])
        self.generator.set_state(checkpoint["generator"])


class PretrainingState(L.Callback):
    """The resumable state, written every `every` steps and at the step a stop signal comes
    (klue_tc/core/interrupts.py), which then ends the pretraining with JobInterrupted; never at the last."""

    def __init__(self, path: Path, every: int, total: int):
        self.path, self.every, self.total = path, every, total

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        interrupts.install()  # Lightning's fit puts its own SIGTERM handler first

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *args) -> None:
        step = trainer.global_step
        if step >= self.total:
            return
        stop = interrupts.requested()  # a scheduler's SIGTERM: saved at this step, not the last save
        if step % self.every == 0 or stop is not None:
            trainer.save_checkpoint(self.path)  # atomic, with its checksum (AtomicCheckpointIO)
        if stop is not None:
            raise interrupts.JobInterrupted(
                stop, f"in pretraining, at step {step} of {self.total}: its state is saved in {self.path}"
            )


def _resume_point(path: Path) -> Optional[Path]:
    """The saved state to go on from; None without one, or with one a kill left unreadable."""
    if not path.is_file():
        return None
    try:
        require_sidecar_checksum(path)
        saved = torch.load(path, map_location="cpu", weights_only=False, mmap=True)
    except Exception as err:  # cut short by a kill, or not matching its checksum: start again
        why = str(err) if isinstance(err, DamagedFileError) else f"{path} is unreadable ({type(err).__name__})"
        log.warning("pretraining state: %s; pretraining from the start", why)
        return None
    if "loops" not in saved:  # the hand-written loop's state, before pretraining ran in Lightning
        log.warning("pretraining state: %s was written by older code; pretraining from the start", path)
        return None
    step = saved["step"]
    log.info("pretraining resumes after step %d, from %s", step, path)
    return path


def load_pretrained_encoder(model: nn.Module, pretrained: PretrainedEncoder) -> None:
    """The classifier's embeddings and encoder blocks from the stored weights (the head stays new)."""
    model.encoder.load_state_dict(torch.load(pretrained.weights, map_location="cpu", weights_only=True))
