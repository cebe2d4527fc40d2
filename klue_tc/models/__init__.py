from klue_tc.models.classifier import TopicClassifier, build_classifier

__all__ = ["TopicClassifier", "build_classifier"]
