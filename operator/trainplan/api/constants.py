"""Constants of the trainplan API: group, version, kinds and label keys.

Pure: plain string constants, no I/O and nothing computed at import time.
"""

from typing import Final

GROUP: Final = "trainplan.dev"
VERSION: Final = "v1alpha1"
API_VERSION: Final = "trainplan.dev/v1alpha1"

TRAINING_PLAN_KIND: Final = "TrainingPlan"
TRAINING_PLAN_PLURAL: Final = "trainingplans"
TRAINING_PLAN_SHORT_NAMES: Final = ("tp",)

GPU_BUDGET_KIND: Final = "GPUBudget"
GPU_BUDGET_PLURAL: Final = "gpubudgets"

CLUSTER_CALIBRATION_KIND: Final = "ClusterCalibration"
CLUSTER_CALIBRATION_PLURAL: Final = "clustercalibrations"
CLUSTER_CALIBRATION_SHORT_NAMES: Final = ("ccal",)

PLAN_LABEL: Final = "trainplan.dev/plan"
"""Label on every object created for a TrainingPlan; its value is the plan's name."""

# Kubernetes recommended labels, see
# https://kubernetes.io/docs/concepts/overview/working-with-objects/common-labels/
APP_NAME_LABEL: Final = "app.kubernetes.io/name"
APP_INSTANCE_LABEL: Final = "app.kubernetes.io/instance"
APP_COMPONENT_LABEL: Final = "app.kubernetes.io/component"
APP_PART_OF_LABEL: Final = "app.kubernetes.io/part-of"
APP_MANAGED_BY_LABEL: Final = "app.kubernetes.io/managed-by"
