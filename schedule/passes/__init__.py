"""Loop-IR passes: pure functions from loop IR to loop IR (see ``lower.PASSES``)."""
