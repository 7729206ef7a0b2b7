"""The two-phase compaction job, by step: ``job`` (``TwoPhaseCompactor``) runs the plan (``start``, ``plan``),
phase 1 (``phase1``), phase 2 (``phase2``) and the publish (``publish``), once each, in that order."""
