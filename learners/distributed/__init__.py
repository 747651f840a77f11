"""Actors and one learner across processes and machines: the protocol (:mod:`.protocol`) and
Ray as its transport (:mod:`.ray_link`)."""
