"""LightningModule: loss, token-masking augmentation, torchmetrics F1/accuracy, AdamW + schedule."""

from __future__ import annotations

import logging
from dataclasses import asdict, fields
from typing import Any, Optional, Sequence

import lightning as L
import torch
from omegaconf import OmegaConf
from torch import nn
from torch.nn import functional as F
from torchmetrics import MetricCollection
from torchmetrics.classification import MulticlassAccuracy, MulticlassF1Score

from klue_tc.core.config import AugmentConfig, DistillConfig, EncoderConfig, HeadConfig, OptimConfig
from klue_tc.core.errors import ConfigError
from klue_tc.core.registry import ENCODERS, HEADS
from klue_tc.data.titles import LABEL_NAMES
from klue_tc.models import build_classifier
from klue_tc.models.masked_lm import MaskedLMHead
from klue_tc.models.schedule import lr_lambda, warmup_steps
from klue_tc.pretraining.masking import corrupt_picked, masking_probability, pick_tokens
from klue_tc.tokenizers import SpecialIds

# The auxiliary masked-LM loss of fine-tuning: its rows rounded up to a multiple of 256 (masked_rows).
MLM_ROW_BUCKET = 256

log = logging.getLogger(__name__)


class TrainingDiverged(Exception):
    """The loss stopped being finite (more often than optim.skip_nonfinite_steps allows)."""


def _metrics(prefix: str, num_classes: int) -> MetricCollection:
    return MetricCollection(
        {
            "f1": MulticlassF1Score(num_classes, average="macro"),
            "accuracy": MulticlassAccuracy(num_classes, average="micro"),
        },
        prefix=prefix,
    )


def symmetric_kl(logits_a: torch.Tensor, logits_b: torch.Tensor) -> torch.Tensor:
    """R-Drop's regulariser: (KL(a||b) + KL(b||a)) / 2, averaged over the batch."""
    log_a, log_b = F.log_softmax(logits_a.float(), -1), F.log_softmax(logits_b.float(), -1)
    return 0.5 * (
        F.kl_div(log_a, log_b, log_target=True, reduction="batchmean")
        + F.kl_div(log_b, log_a, log_target=True, reduction="batchmean")
    )


def distillation_loss(logits: torch.Tensor, teacher_probs: torch.Tensor, temperature: float) -> torch.Tensor:
    """Hinton et al. 2015's soft loss: KL(teacher || model) with both sides' logits divided by the
    temperature, times its square (so that the soft gradients keep their scale as it changes),
    averaged over the batch. The teacher's logits are its probabilities' logarithms."""
    log_model = F.log_softmax(logits.float() / temperature, -1)
    log_teacher = F.log_softmax(torch.log(teacher_probs.float().clamp_min(1e-12)) / temperature, -1)
    return temperature**2 * F.kl_div(log_model, log_teacher, log_target=True, reduction="batchmean")


class TopicClassifierModule(L.LightningModule):
    def __init__(
        self,
        vocab_size: int,
        specials: dict,
        encoder: dict,
        head: dict,
        optim: dict,
        augment: dict,
        label_names: Optional[list[str]] = None,
    ):
        super().__init__()
        # Plain dicts in hparams keep checkpoints loadable without this package's dataclasses.
        self.save_hyperparameters()
        # Checkpoints from before label sets were saved are YNAT's.
        self.label_names = list(label_names or LABEL_NAMES)
        self.specials = SpecialIds(**specials)
        self.optim_cfg, self.augment_cfg = OptimConfig(**optim), AugmentConfig(**augment)
        self.model = build_classifier(
            vocab_size, self.specials.pad, _encoder_cfg(encoder), _head_cfg(head), len(self.label_names)
        )
        self.loss = nn.CrossEntropyLoss(label_smoothing=self.optim_cfg.label_smoothing)
        # Only built when used, so checkpoints without it keep loading.
        self.mlm_head = (
            MaskedLMHead(self.model.encoder.embeddings.tokens.embedding_dim, vocab_size)
            if self.augment_cfg.mlm_weight > 0
            else None
        )
        self.train_metrics = _metrics("train/", len(self.label_names))
        self.val_metrics = _metrics("val/", len(self.label_names))
        self.inner_metrics = _metrics("inner/", len(self.label_names))
        # The run's optimiser steps (for the masking decay), set in configure_optimizers: Lightning
        # knows them only once it has the data, and the property recounts them on every call.
        self.total_steps = 1
        self.nonfinite_steps = 0
        # Set by the fold that distils (klue_tc/training/fold.py), never saved in the checkpoint: it
        # changes only how the model is trained, not the model served.
        self.distill_cfg: Optional[DistillConfig] = None

    @classmethod
    def from_configs(
        cls,
        vocab_size: int,
        specials: SpecialIds,
        encoder: EncoderConfig,
        head: HeadConfig,
        optim: OptimConfig,
        augment: AugmentConfig,
        label_names: Sequence[str] = LABEL_NAMES,
    ) -> TopicClassifierModule:
        return cls(
            vocab_size,
            asdict(specials),
            _plain(encoder),
            _plain(head),
            _plain(optim),
            _plain(augment),
            list(label_names),
        )

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids)

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        original = batch["input_ids"]
        regularize = self.current_epoch >= self.optim_cfg.regularize_from_epoch
        masking = regularize and self.augment_cfg.p > 0
        input_ids, picked = self.augment(original) if masking else (original, None)
        # Through forward (not encode + head) so that a torch.compile'd model is the one trained.
        logits, states = self.model(input_ids, return_states=True)
        loss = self.classification_loss(logits, batch)
        if regularize and self.optim_cfg.rdrop_alpha > 0:
            # A second pass draws other dropout masks over the same (masked) titles.
            logits_2 = self(input_ids)
            loss = (loss + self.classification_loss(logits_2, batch)) / 2 + self.optim_cfg.rdrop_alpha * symmetric_kl(
                logits, logits_2
            )
        if self.mlm_head is not None:
            # Before masking starts the head gets a zero loss: every parameter still takes part in
            # the graph, as DistributedDataParallel expects.
            mlm_loss = self.masked_lm_loss(states, original, picked) if masking else self._unused_head_loss()
            self.log("train/mlm_loss", mlm_loss, batch_size=len(input_ids))
            loss = loss + self.augment_cfg.mlm_weight * mlm_loss
        if not torch.isfinite(loss):
            return self.skip_nonfinite(loss)
        self.train_metrics.update(logits.detach(), batch["labels"])
        self.log("train/loss", loss, prog_bar=True, batch_size=len(input_ids))
        return loss

    def classification_loss(self, logits: torch.Tensor, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Cross-entropy on the titles' classes; when distilling, mixed with the soft loss on the
        teacher's probabilities by distill.alpha (at 0, the cross-entropy alone, as without a teacher)."""
        hard = self.loss(logits, batch["labels"])
        cfg = self.distill_cfg
        if cfg is None or cfg.alpha == 0:
            return hard
        soft = distillation_loss(logits, batch["soft_targets"], cfg.temperature)
        return (1 - cfg.alpha) * hard + cfg.alpha * soft

    def skip_nonfinite(self, loss: torch.Tensor) -> None:
        """No update from a step whose loss is NaN or infinite (Lightning skips the step when
        training_step returns None); past optim.skip_nonfinite_steps of them, the fold stops."""
        self.nonfinite_steps += 1
        lr = self.trainer.optimizers[0].param_groups[0]["lr"]
        step, epoch = self.global_step + 1, self.current_epoch + 1
        where = f"loss {loss.item()} at step {step} (epoch {epoch}), learning rate {lr:.3g}"
        if self.nonfinite_steps > self.optim_cfg.skip_nonfinite_steps:
            raise TrainingDiverged(f"{where}, after {self.nonfinite_steps - 1} skipped non-finite step(s)")
        log.warning(
            "%s: step skipped (%d of optim.skip_nonfinite_steps=%d)",
            where,
            self.nonfinite_steps,
            self.optim_cfg.skip_nonfinite_steps,
        )
        return None

    def augment(self, input_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The titles as training sees them, and which tokens were picked (the masked-LM targets)."""
        cfg = self.augment_cfg
        p = masking_probability(cfg.p, cfg.p_end, self.global_step / self.total_steps)
        if self._trainer is not None:  # tests call augment on a bare module
            # Logged so that a decaying rate can be read beside the loss curves.
            self.log("train/mask_p", p, batch_size=len(input_ids))
        picked = pick_tokens(input_ids, self.specials, p, cfg.min_len)
        vocab_size = self.model.encoder.embeddings.tokens.num_embeddings
        return corrupt_picked(input_ids, picked, self.specials, vocab_size, cfg.random_share, cfg.keep_share), picked

    def _unused_head_loss(self) -> torch.Tensor:
        return sum(param.sum() for param in self.mlm_head.parameters()) * 0.0

    def masked_lm_loss(
        self, states: torch.Tensor, original_ids: torch.Tensor, picked: torch.Tensor, gather: Optional[bool] = None
    ) -> torch.Tensor:
        """Cross-entropy of the original tokens at the picked positions (under [MASK], a random
        piece or themselves). `gather` (default: on a CPU) runs the head on those rows only."""
        if gather is None:
            gather = states.is_cpu
        token_embedding = self.model.encoder.embeddings.tokens.weight
        loss, _ = self.mlm_head.loss(states, token_embedding, original_ids, picked, MLM_ROW_BUCKET if gather else None)
        return loss

    def on_train_epoch_end(self) -> None:
        self.log_dict(self.train_metrics.compute())
        self.train_metrics.reset()

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int, dataloader_idx: int = 0) -> None:
        # Loader 0 (FoldDataModule) is the inner split, which chooses the epoch; loader 1 the
        # held-out fold, logged as val/ for the learning curve only.
        prefix, metrics = ("inner", self.inner_metrics) if dataloader_idx == 0 else ("val", self.val_metrics)
        logits = self(batch["input_ids"])
        loss = self.loss(logits, batch["labels"])
        self.log(f"{prefix}/loss", loss, batch_size=len(logits), add_dataloader_idx=False)
        metrics.update(logits, batch["labels"])

    def on_validation_epoch_end(self) -> None:
        for metrics in (self.inner_metrics, self.val_metrics):
            self.log_dict(metrics.compute(), prog_bar=True)
            metrics.reset()

    def predict_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> dict[str, torch.Tensor]:
        return {"index": batch["index"], "probs": torch.softmax(self(batch["input_ids"]).float(), dim=-1)}

    def configure_optimizers(self) -> dict[str, Any]:
        cfg = self.optim_cfg
        decay, no_decay = [], []
        for name, param in self.named_parameters():
            # Norms, biases and embeddings are not decayed, as usual for Transformers.
            (no_decay if param.dim() < 2 or "embeddings" in name else decay).append(param)
        optimizer = torch.optim.AdamW(
            [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
            lr=cfg.lr,
            betas=tuple(cfg.betas),
            # Multi-tensor ops instead of a dozen small ops per tensor (6% of an fp32 CPU step). Not
            # `fused`: Lightning refuses gradient clipping with fused optimizers under mixed precision.
            foreach=True,
        )
        self.total_steps = max(1, int(self.trainer.estimated_stepping_batches))
        warmup = warmup_steps(cfg.warmup_ratio, cfg.min_warmup_steps, self.total_steps)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(cfg.schedule, warmup, self.total_steps))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


def _plain(cfg) -> dict:
    """Dataclass to a dict of plain values (enums by value) for hparams."""
    return {
        k: (v.value if hasattr(v, "value") else list(v) if isinstance(v, tuple) else v) for k, v in asdict(cfg).items()
    }


def _typed(cls, values: dict, group: str):
    """A config dataclass from its hparams dict, typed by OmegaConf as the run's config is (enums
    from their values); a key missing from an older checkpoint takes the dataclass default (what
    that version did)."""
    unknown = sorted(set(values) - {f.name for f in fields(cls)})
    if unknown:  # a checkpoint from a version with an option this one does not have
        raise ConfigError(
            f"the checkpoint's {group} settings have keys this version of klue_tc does not know: "
            f"{', '.join(unknown)}; load it with the version that trained it"
        )
    return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(cls), values))


def _encoder_cfg(values: dict) -> EncoderConfig:
    return _typed(ENCODERS[values["name"]].config, values, "encoder")


def _head_cfg(values: dict) -> HeadConfig:
    return _typed(HEADS[values["name"]].config, values, "head")
