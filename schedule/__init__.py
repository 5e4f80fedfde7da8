"""Schedules: *how* to compute. Populated as the schedule modules land."""
