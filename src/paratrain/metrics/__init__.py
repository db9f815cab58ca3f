"""Metrics: global-batch means for logging, and classification scores on gathered predictions."""

from paratrain.metrics.classification import ClassificationReport, ClassScores, accuracy, classification_report
from paratrain.metrics.reduce import RunningMean, global_mean

__all__ = ["global_mean", "RunningMean", "accuracy", "classification_report", "ClassificationReport", "ClassScores"]
