"""Canary rollout of a model version that passed the gate: traffic steps, KPI analysis, promote or roll back."""
