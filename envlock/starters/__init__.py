"""Starter profiles (`init`): the template for each target type, and a survey of an existing
environment made into one (from_survey)."""
