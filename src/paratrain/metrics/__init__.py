"""Metrics: global-batch means for logging, and classification scores on gathered predictions."""

from paratrain.metrics.classification import (ClassificationReport, ClassScores, DeferredReport, accuracy,
                                              classification_report, macro_f1)
from paratrain.metrics.reduce import RunningMean, global_mean

__all__ = ["global_mean", "RunningMean", "accuracy", "classification_report", "ClassificationReport", "ClassScores",
           "DeferredReport", "macro_f1"]
