"""The job control's learned profiles, kept in the node's store across restarts."""

from __future__ import annotations

import json
from collections.abc import Callable

from coda.policy.framework import LearnsProfiles
from coda.policy.learned_profiles import LearnedProfiles
from coda.runtime.store import Store

LEARNED_KEY = "learned_profiles"


class LearnedStore:
    """Loads the learner's profiles when the agent starts and saves them whenever its
    generation moved past the one last saved (and when the agent leaves). Without a
    learner (a policy whose job control learns nothing) it does nothing."""

    def __init__(
        self, store: Store, learner: LearnsProfiles | None, log: Callable[[str], None]
    ) -> None:
        self.store = store
        self.learner = learner
        self.log = log
        self.saved_generation = -1  # the learner's generation as last loaded or saved

    def load(self) -> None:
        learner = self.learner
        raw = self.store.meta(LEARNED_KEY)
        if learner is None or raw is None:
            return
        try:
            learner.learned = LearnedProfiles.from_dict(json.loads(raw))
        except ValueError as e:
            self.log(f"learned profiles ignored: {e}")
        self.saved_generation = learner.generation

    def save(self) -> None:
        learner = self.learner
        if learner is not None:
            self.store.set_meta(LEARNED_KEY, json.dumps(learner.learned.to_dict()))
            self.saved_generation = learner.generation

    def save_if_changed(self) -> None:
        learner = self.learner
        if learner is not None and learner.generation != self.saved_generation:
            self.save()
