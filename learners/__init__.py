"""handrail.learners."""
