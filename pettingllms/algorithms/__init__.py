"""Pure functions over Samples and tensors: group keys, advantages, the policy loss.

`loss` imports torch; it is not imported here so the rollout stays torch-free.
"""
from pettingllms.algorithms.advantages import ESTIMATORS, compute_advantages
from pettingllms.algorithms.grouping import GROUP_FIELDS, group_key, group_samples, normalize_group_by

__all__ = ["ESTIMATORS", "GROUP_FIELDS", "compute_advantages", "group_key", "group_samples", "normalize_group_by"]
