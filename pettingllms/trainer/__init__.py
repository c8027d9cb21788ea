"""Trainer: the local loop (local.py), checkpoints, run outputs and evaluation."""
