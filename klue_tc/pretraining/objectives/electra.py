"""ELECTRA's replaced-token detection (Clark et al. 2020): a small masked-LM generator fills the
picked positions by sampling, and the encoder learns to tell, at every token, whether it was
replaced (the model: klue_tc/pretraining/replaced_token_detection.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

from klue_tc.core.config import Check, PretrainConfig, RunConfig, at_least
from klue_tc.core.registry import OBJECTIVES
from klue_tc.pretraining.objectives import Objective, classifier_encoder
from klue_tc.pretraining.replaced_token_detection import ReplacedTokenDetection
from klue_tc.tokenizers import Tokenizer


@dataclass
class ElectraConfig:
    """The generator is a Transformer sharing the encoder's token embeddings; only the encoder is kept."""

    generator_layers: int = 1
    # The generator's width as a share of encoder.d_model (ELECTRA: 1/4 to 1/2 works best; a
    # generator as strong as the discriminator leaves it too hard a task).
    generator_size: float = 0.25
    discriminator_weight: float = 50.0  # lambda: generator MLM loss + lambda x replaced-token BCE

    def checks(self) -> list[Check]:
        return [
            at_least("pretrain.electra.generator_layers", self.generator_layers, 1),
            (
                0.0 < self.generator_size <= 1.0,
                f"pretrain.electra.generator_size must be in (0, 1], got {self.generator_size}",
            ),
            (
                self.discriminator_weight > 0,
                f"pretrain.electra.discriminator_weight must be > 0, got {self.discriminator_weight}",
            ),
        ]


@dataclass
class ElectraPretrainConfig(PretrainConfig):
    electra: ElectraConfig = field(default_factory=ElectraConfig)

    def checks(self) -> list[Check]:
        stall = (
            not self.stall.on,
            "pretrain.stall watches the masked-LM loss against the token-frequency entropy: it needs "
            "pretrain=mlm (ELECTRA's loss adds the detection loss)",
        )
        return [*super().checks(), *self.electra.checks(), stall]


@OBJECTIVES.register("electra", ElectraPretrainConfig)
class Electra(Objective):
    loss_name = "ELECTRA loss"  # generator MLM + lambda x detection BCE

    @classmethod
    def model(cls, run: RunConfig, tokenizer: Tokenizer) -> ReplacedTokenDetection:
        """The encoder initialised exactly as a from-scratch classifier's, then ELECTRA's generator."""
        encoder = classifier_encoder(run, tokenizer)
        return ReplacedTokenDetection(
            encoder, run.encoder, run.pretrain.electra, tokenizer.vocab_size, tokenizer.specials
        )
