"""The networks: embeddings, blocks, the encoder stack, the heads and the masked-LM head."""

from klue_tc.models.classifier import TopicClassifier, build_classifier

__all__ = ["TopicClassifier", "build_classifier"]
