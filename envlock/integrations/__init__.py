"""Trainers and trackers: envlock beside the tools people train and track with."""
